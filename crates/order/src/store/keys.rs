//! Idempotency keys (Stripe's atomic phases): claim, forget, unlock,
//! finish, and the cleanup of old keys.

use serde::{Deserialize, Serialize};
use sqlx::Row;
use uuid::Uuid;

use super::{Store, StoreError};

/// What `claim_key` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The caller now holds the key and resumes from this point.
    Acquired(Resume),
    /// The first request finished: send its response again.
    Replay(StoredResponse),
    /// Another request holds the key for this many more milliseconds.
    InProgress {
        /// Milliseconds until the holder's lock runs out.
        remaining_ms: i64,
    },
    /// The key was used with a different request.
    Mismatch,
}

/// Where a request holding a key starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// From the beginning: no order was created under this key.
    Start,
    /// The order was created (and committed) by an earlier attempt.
    OrderCreated(Uuid),
}

/// A response kept for replay, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// The headers that belong to the response (content type, location).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Store {
    /// Phase 1 of an idempotent request: inserts the key locked by the
    /// caller, or finds what an earlier request with it left.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn claim_key(
        &self,
        key: &str,
        fingerprint: &str,
        now: i64,
        lock_until: i64,
    ) -> Result<Claim, StoreError> {
        let mut tx = self.db.begin_write().await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys \
             (idempotency_key, fingerprint, recovery_point, locked_until, created_at) \
             VALUES ($1, $2, 'started', $3, $4) ON CONFLICT (idempotency_key) DO NOTHING",
        )
        .bind(key)
        .bind(fingerprint)
        .bind(lock_until)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 1 {
            tx.commit().await?;
            return Ok(Claim::Acquired(Resume::Start));
        }
        let row = sqlx::query(self.db.pick(
            "SELECT fingerprint, recovery_point, locked_until, order_id, response_status, \
             response_headers, response_body FROM idempotency_keys \
             WHERE idempotency_key = $1 FOR UPDATE",
            "SELECT fingerprint, recovery_point, locked_until, order_id, response_status, \
             response_headers, response_body FROM idempotency_keys \
             WHERE idempotency_key = $1",
        ))
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
        let stored_fingerprint: String = row.try_get(0)?;
        let point: String = row.try_get(1)?;
        let locked: i64 = row.try_get(2)?;
        let order_id: Option<String> = row.try_get(3)?;
        let claim = if stored_fingerprint != fingerprint {
            Claim::Mismatch
        } else if point == "finished" {
            let status: Option<i64> = row.try_get(4)?;
            let headers: Option<String> = row.try_get(5)?;
            let body: Option<String> = row.try_get(6)?;
            Claim::Replay(StoredResponse {
                status: u16::try_from(status.unwrap_or(500)).unwrap_or(500),
                headers: serde_json::from_str(headers.as_deref().unwrap_or("[]"))
                    .map_err(StoreError::corrupt)?,
                body: body.unwrap_or_default(),
            })
        } else if locked > now {
            Claim::InProgress {
                remaining_ms: locked - now,
            }
        } else {
            // The holder crashed (its lock ran out): take over where it got to.
            sqlx::query("UPDATE idempotency_keys SET locked_until = $2 WHERE idempotency_key = $1")
                .bind(key)
                .bind(lock_until)
                .execute(&mut *tx)
                .await?;
            match order_id.as_deref().map(Uuid::try_parse) {
                Some(Ok(id)) => Claim::Acquired(Resume::OrderCreated(id)),
                _ => Claim::Acquired(Resume::Start),
            }
        };
        tx.commit().await?;
        Ok(claim)
    }

    /// Forgets a key whose request created nothing (it failed before the
    /// order was written), so a retry starts afresh.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn forget_key(&self, key: &str) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE idempotency_key = $1 \
             AND recovery_point = 'started'",
        )
        .bind(key)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Unlocks a key whose request stopped after creating its order, so a
    /// retry resumes at once.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn unlock_key(&self, key: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE idempotency_keys SET locked_until = 0 WHERE idempotency_key = $1 \
             AND recovery_point <> 'finished'",
        )
        .bind(key)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Final phase: stores the response for replay and unlocks the key.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn finish_key(&self, key: &str, response: &StoredResponse) -> Result<(), StoreError> {
        let headers = serde_json::to_string(&response.headers).map_err(StoreError::corrupt)?;
        sqlx::query(
            "UPDATE idempotency_keys SET recovery_point = 'finished', locked_until = 0, \
             response_status = $2, response_headers = $3, response_body = $4 \
             WHERE idempotency_key = $1",
        )
        .bind(key)
        .bind(i64::from(response.status))
        .bind(headers)
        .bind(response.body.as_str())
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Deletes keys created before `before` whose requests are not running.
    /// Returns how many were deleted.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn delete_keys_before(&self, before: i64, now: i64) -> Result<u64, StoreError> {
        let done =
            sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1 AND locked_until < $2")
                .bind(before)
                .bind(now)
                .execute(self.db.pool())
                .await?;
        Ok(done.rows_affected())
    }
}
