//! Idempotency keys for `POST /api/orders` (draft-ietf-httpapi-idempotency-
//! key-header, and Stripe's "atomic phases").
//!
//! 1. **Claim**: the key row is inserted, locked by this request and
//!    carrying the request's fingerprint — or the existing row decides: a
//!    different fingerprint → 422 `idempotency-key-reused`; a finished
//!    request → its response replayed byte for byte; a live lock → 409
//!    `request-in-progress` + `Retry-After`; a lock that ran out (the
//!    holder crashed) → taken over, resuming from its recovery point.
//! 2. **Order created**: the order, its outbox row and the recovery point
//!    `order_created` commit together (see [`crate::saga`]).
//! 3. **Finished**: the response is stored and the key unlocked.
//!
//! A failure before the order exists forgets the key (a retry starts
//! afresh); a failure after it unlocks the key (a retry resumes). Keys are
//! kept for `idempotency.retention_seconds` (≥ 24 h) and then deleted by
//! [`cleanup`].

use std::time::Duration;

use shopeasy_resilience::deadline::Deadline;
use tokio_util::sync::CancellationToken;

use crate::{
    domain::{NewOrder, now_ms},
    error::Error,
    saga::{Orders, Placed},
    store::{Claim, Resume, StoredResponse},
};

/// Longest accepted key.
pub const MAX_KEY_LEN: usize = 255;

/// Checks a key: 1..=255 visible ASCII characters.
pub fn valid_key(key: &str) -> bool {
    (1..=MAX_KEY_LEN).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// What to send for a `POST /api/orders`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The response (fresh, or the stored one).
    pub response: StoredResponse,
    /// True when it is a replay of an earlier request's response.
    pub replayed: bool,
}

/// Places `request` at most once per `key`, storing the response `render`
/// makes of the outcome so that a repeat gets the same bytes.
///
/// # Errors
/// [`Error::KeyReused`], [`Error::InProgress`], database failures while
/// claiming the key, or a failpoint.
pub async fn place_once(
    orders: &Orders,
    key: Option<&str>,
    request: &NewOrder,
    deadline: Option<Deadline>,
    lock: Duration,
    render: fn(&Result<Placed, Error>) -> StoredResponse,
) -> Result<Reply, Error> {
    let Some(key) = key else {
        let outcome = orders.place(request, None, Resume::Start, deadline).await;
        return Ok(Reply {
            response: render(&outcome),
            replayed: false,
        });
    };
    let now = now_ms();
    let lock_ms = i64::try_from(lock.as_millis()).unwrap_or(i64::MAX);
    let resume = match orders
        .store()
        .claim_key(
            key,
            &request.fingerprint(),
            now,
            now.saturating_add(lock_ms),
        )
        .await?
    {
        Claim::Mismatch => return Err(Error::KeyReused),
        Claim::InProgress { remaining_ms } => {
            let secs = u64::try_from((remaining_ms + 999) / 1000).unwrap_or(1);
            return Err(Error::InProgress {
                retry_after: secs.clamp(1, 60),
            });
        }
        Claim::Replay(response) => {
            metrics::counter!("shopeasy_idempotency_replays_total").increment(1);
            return Ok(Reply {
                response,
                replayed: true,
            });
        }
        Claim::Acquired(resume) => resume,
    };
    let outcome = orders.place(request, Some(key), resume, deadline).await;
    let definite = matches!(
        &outcome,
        Ok(_) | Err(Error::OutOfStock { order: Some(_), .. })
    );
    if let Err(Error::Failpoint(point)) = &outcome {
        // A simulated crash: leave the key exactly as a crash would.
        return Err(Error::Failpoint(*point));
    }
    let response = render(&outcome);
    if definite {
        orders.store().finish_key(key, &response).await?;
    } else {
        // Nothing definite happened: let a retry start afresh (no order
        // yet) or resume (order created). Both are conditional in SQL.
        let store = orders.store();
        if let Err(e) = store.forget_key(key).await {
            tracing::warn!(error = %e, "could not forget idempotency key");
        }
        if let Err(e) = store.unlock_key(key).await {
            tracing::warn!(error = %e, "could not unlock idempotency key");
        }
    }
    Ok(Reply {
        response,
        replayed: false,
    })
}

/// Deletes keys older than `retention` every `interval` until `shutdown`.
pub async fn cleanup(
    orders: Orders,
    retention: Duration,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = now_ms();
        match orders
            .store()
            .delete_keys_before(now.saturating_sub(retention_ms), now)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "expired idempotency keys deleted"),
            Err(e) => tracing::warn!(error = %e, "idempotency key cleanup failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_up_to_255() {
        assert!(valid_key("a"));
        assert!(valid_key(&"k".repeat(255)));
        assert!(!valid_key(""));
        assert!(!valid_key(&"k".repeat(256)));
        assert!(!valid_key("has space"));
        assert!(!valid_key("tab\t"));
        assert!(!valid_key("ünïcode"));
    }
}
