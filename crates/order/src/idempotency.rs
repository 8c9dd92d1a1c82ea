//! Idempotency keys for `POST /api/orders` (draft-ietf-httpapi-idempotency-
//! key-header, and Stripe's "atomic phases"), scoped to the customer: the
//! same key from two customers is two keys.
//!
//! 1. **Order created**: the key (locked by this request's lock token and
//!    carrying the request's fingerprint), the order and its outbox row
//!    commit together (see [`crate::saga`]). When the key exists, the row
//!    decides instead: a different fingerprint → 422
//!    `idempotency-key-reused`; a finished request → its response replayed
//!    byte for byte; a live lock → 409 `request-in-progress` +
//!    `Retry-After`; a lock that ran out (the holder crashed or stalled) →
//!    taken over with a new token, resuming its order.
//! 2. **Finished**: the response is stored and the key unlocked in the
//!    transaction that records Inventory's answer — only if the request's
//!    token still holds the key, so a holder that was taken over writes
//!    nothing and answers what the key says.
//!
//! A failure before the order exists leaves no key (a retry starts
//! afresh); a failure after it unlocks the key (a retry resumes). Keys are
//! kept for `idempotency.retention_seconds` (≥ 24 h) and then deleted by
//! [`cleanup`].

use std::time::Duration;

use shopeasy_resilience::deadline::Deadline;
use tokio_util::sync::CancellationToken;

use crate::{
    domain::{NewOrder, now_ms},
    error::Error,
    saga::{Attempt, Keyed, Orders, Placed},
    store::{Claim, KeyHold, StoredResponse},
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

/// Places `request` for `customer` at most once per (`customer`, `key`),
/// storing the response `render` makes of the outcome so that a repeat
/// gets the same bytes.
///
/// # Errors
/// [`Error::KeyReused`], [`Error::InProgress`], or a failpoint; every other
/// outcome is a rendered response.
pub async fn place_once(
    orders: &Orders,
    customer: &str,
    key: Option<&str>,
    request: &NewOrder,
    deadline: Option<Deadline>,
    lock: Duration,
    render: fn(&Result<Placed, Error>) -> StoredResponse,
) -> Result<Reply, Error> {
    let hold = key.map(|k| KeyHold::new(customer, k));
    let fingerprint = if key.is_some() {
        request.fingerprint()
    } else {
        String::new()
    };
    let keyed = hold.as_ref().map(|hold| Keyed {
        hold,
        fingerprint: &fingerprint,
        lock,
        render,
    });
    match orders.place(request, keyed, deadline).await {
        Attempt::Key(Claim::Mismatch) => Err(Error::KeyReused),
        Attempt::Key(Claim::InProgress { remaining_ms }) => {
            let secs = u64::try_from((remaining_ms + 999) / 1000).unwrap_or(1);
            Err(Error::InProgress {
                retry_after: secs.clamp(1, 60),
            })
        }
        Attempt::Key(Claim::Replay(response)) => {
            metrics::counter!("shopeasy_idempotency_replays_total").increment(1);
            Ok(Reply {
                response,
                replayed: true,
            })
        }
        Attempt::Key(Claim::Acquired(_)) => Err(Error::Internal(anyhow::anyhow!(
            "an acquired key was not resumed"
        ))),
        // A simulated crash: the key is left exactly as a crash would.
        Attempt::Ran(Err(Error::Failpoint(point))) => Err(Error::Failpoint(point)),
        Attempt::Ran(outcome) => Ok(Reply {
            response: render(&outcome),
            replayed: false,
        }),
    }
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
