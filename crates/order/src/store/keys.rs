//! Idempotency keys (Stripe's atomic phases), scoped to the customer and
//! fenced by the holder's lock token.
//!
//! A key is written in the transaction that creates its order
//! ([`Store::create_order`]), never alone: a concurrent request with the
//! same (customer, key) waits on the primary key until that commit, then
//! finds the key held (409) or finished (replay). Every later write — the
//! final response, an unlock — names the holder's token, so a request that
//! stalled past its lock and was taken over changes nothing.

use serde::{Deserialize, Serialize};
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::{Store, StoreError};

/// What an existing key says to a request that brings it.
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

/// One request's hold on a key: the key is the customer's (keys of two
/// customers never meet), and `token` is this request's alone, so the
/// database can tell the current holder from one that was taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHold {
    /// Whose key it is.
    pub customer: String,
    /// The `Idempotency-Key`.
    pub key: String,
    /// This request's lock token (fresh per request).
    pub token: String,
}

impl KeyHold {
    /// A hold on `key` of `customer` with a fresh token.
    pub fn new(customer: &str, key: &str) -> Self {
        Self {
            customer: customer.to_owned(),
            key: key.to_owned(),
            token: Uuid::new_v4().to_string(),
        }
    }
}

/// A key as a request brings it: who holds it, the request's fingerprint,
/// and the lock it asks for.
#[derive(Debug, Clone, Copy)]
pub struct NewKey<'a> {
    /// The holder.
    pub hold: &'a KeyHold,
    /// The fingerprint of the canonical request.
    pub fingerprint: &'a str,
    /// Now (milliseconds).
    pub now: i64,
    /// Until when the holder's lock lasts (milliseconds).
    pub lock_until: i64,
}

/// A [`NewKey`] that owns its parts, for work that outlives the request's
/// borrow (a commit queued for the writer's next group).
#[derive(Debug, Clone)]
pub(super) struct OwnedKey {
    hold: KeyHold,
    fingerprint: String,
    now: i64,
    lock_until: i64,
}

impl From<&NewKey<'_>> for OwnedKey {
    fn from(key: &NewKey<'_>) -> Self {
        Self {
            hold: key.hold.clone(),
            fingerprint: key.fingerprint.to_owned(),
            now: key.now,
            lock_until: key.lock_until,
        }
    }
}

impl OwnedKey {
    /// The key as the store's functions take it.
    pub(super) fn as_new(&self) -> NewKey<'_> {
        NewKey {
            hold: &self.hold,
            fingerprint: &self.fingerprint,
            now: self.now,
            lock_until: self.lock_until,
        }
    }
}

/// What [`decide`] found for an existing key.
pub(super) enum Found {
    /// No usable row: insert one.
    Absent,
    /// The row decided.
    Claim(Claim),
}

impl Store {
    /// What the key says to a request that could not even create its order
    /// (Product or the stock check failed): a finished key replays, a held
    /// one is in progress, another request's is a mismatch, and a key whose
    /// holder's lock ran out is taken over (the order exists: resume it,
    /// no pricing needed). `None` when the key is unknown. Only failing
    /// requests call this, so the happy path pays no read for it.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn claim_existing(&self, key: &NewKey<'_>) -> Result<Option<Claim>, StoreError> {
        let mut tx = self.db.begin_write().await?;
        let found = decide(&self.db, &mut tx, key).await?;
        tx.commit().await?;
        Ok(match found {
            Found::Absent => None,
            Found::Claim(c) => Some(c),
        })
    }

    /// What the key says now, without taking it over (for a holder that
    /// lost it: the winner's response, or in progress).
    ///
    /// # Errors
    /// When the database fails.
    pub async fn key_state(&self, hold: &KeyHold, now: i64) -> Result<Claim, StoreError> {
        let row = sqlx::query(
            "SELECT recovery_point, locked_until, response_status, response_headers, \
             response_body FROM idempotency_keys WHERE customer_id = $1 AND idempotency_key = $2",
        )
        .bind(hold.customer.as_str())
        .bind(hold.key.as_str())
        .fetch_optional(self.db.pool())
        .await?;
        let Some(row) = row else {
            return Ok(Claim::InProgress { remaining_ms: 0 });
        };
        let point: String = row.try_get(0)?;
        let locked: i64 = row.try_get(1)?;
        if point == "finished" {
            return Ok(Claim::Replay(stored(&row, 2)?));
        }
        Ok(Claim::InProgress {
            remaining_ms: (locked - now).max(0),
        })
    }

    /// Unlocks the key, if this request still holds it, so a retry resumes
    /// at once (the request stopped after creating its order).
    ///
    /// # Errors
    /// When the database fails.
    pub async fn unlock_key(&self, hold: &KeyHold) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE idempotency_keys SET locked_until = 0 \
             WHERE customer_id = $1 AND idempotency_key = $2 AND lock_token = $3 \
             AND recovery_point <> 'finished'",
        )
        .bind(hold.customer.as_str())
        .bind(hold.key.as_str())
        .bind(hold.token.as_str())
        .execute(self.db.writer())
        .await?;
        Ok(())
    }

    /// Stores the response for replay and unlocks the key, in a
    /// transaction of its own (the final transaction does it for the usual
    /// outcomes; see [`Store::finish_reservation`]).
    ///
    /// # Errors
    /// [`StoreError::LockLost`] when another request took the key over;
    /// database failures.
    pub async fn finish_key(
        &self,
        hold: &KeyHold,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        let mut tx = self.db.begin_write().await?;
        finish(&mut tx, hold, response).await?;
        tx.commit().await?;
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
                .execute(self.db.writer())
                .await?;
        Ok(done.rows_affected())
    }
}

/// A new key row's recovery point, lock and stored headers: `finished`,
/// unlocked, with `response`'s headers when the outcome is already known;
/// else `order_created`, locked until `key.lock_until`.
pub(super) fn insert_values(
    key: &NewKey<'_>,
    response: Option<&StoredResponse>,
) -> Result<(&'static str, i64, Option<String>), StoreError> {
    let headers = response
        .map(|r| serde_json::to_string(&r.headers))
        .transpose()
        .map_err(StoreError::corrupt)?;
    Ok(match response {
        Some(_) => ("finished", 0, headers),
        None => ("order_created", key.lock_until, headers),
    })
}

/// Inserts the key held by `key.hold` for `order_id`: `finished` with
/// `response` when the outcome is already known, else `order_created`.
/// Returns false when the key exists (the caller then asks [`decide`]).
pub(super) async fn insert(
    tx: &mut AnyConnection,
    key: &NewKey<'_>,
    order_id: Uuid,
    response: Option<&StoredResponse>,
) -> Result<bool, StoreError> {
    let (point, lock_until, headers) = insert_values(key, response)?;
    let inserted = sqlx::query(
        "INSERT INTO idempotency_keys \
         (customer_id, idempotency_key, fingerprint, recovery_point, locked_until, lock_token, \
          order_id, response_status, response_headers, response_body, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
         ON CONFLICT (customer_id, idempotency_key) DO NOTHING",
    )
    .bind(key.hold.customer.as_str())
    .bind(key.hold.key.as_str())
    .bind(key.fingerprint)
    .bind(point)
    .bind(lock_until)
    .bind(key.hold.token.as_str())
    .bind(order_id.to_string())
    .bind(response.map(|r| i64::from(r.status)))
    .bind(headers)
    .bind(response.map(|r| r.body.as_str()))
    .bind(key.now)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// The existing row decides (locked, so two takers cannot both win): a
/// different fingerprint → mismatch; finished → replay; a live lock → in
/// progress; a lock that ran out → taken over with this request's token,
/// resuming its order. A row without an order (left by an older version
/// that claimed keys alone) is deleted: nothing was done under it.
pub(super) async fn decide(
    db: &shopeasy_runtime::db::Database,
    tx: &mut AnyConnection,
    key: &NewKey<'_>,
) -> Result<Found, StoreError> {
    let row = sqlx::query(db.pick(
        "SELECT fingerprint, recovery_point, locked_until, order_id, response_status, \
         response_headers, response_body FROM idempotency_keys \
         WHERE customer_id = $1 AND idempotency_key = $2 FOR UPDATE",
        "SELECT fingerprint, recovery_point, locked_until, order_id, response_status, \
         response_headers, response_body FROM idempotency_keys \
         WHERE customer_id = $1 AND idempotency_key = $2",
    ))
    .bind(key.hold.customer.as_str())
    .bind(key.hold.key.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(Found::Absent);
    };
    let fingerprint: String = row.try_get(0)?;
    let point: String = row.try_get(1)?;
    let locked: i64 = row.try_get(2)?;
    let order_id: Option<String> = row.try_get(3)?;
    if fingerprint != key.fingerprint {
        return Ok(Found::Claim(Claim::Mismatch));
    }
    if point == "finished" {
        return Ok(Found::Claim(Claim::Replay(stored(&row, 4)?)));
    }
    if locked > key.now {
        return Ok(Found::Claim(Claim::InProgress {
            remaining_ms: locked - key.now,
        }));
    }
    let Some(Ok(id)) = order_id.as_deref().map(Uuid::try_parse) else {
        sqlx::query("DELETE FROM idempotency_keys WHERE customer_id = $1 AND idempotency_key = $2")
            .bind(key.hold.customer.as_str())
            .bind(key.hold.key.as_str())
            .execute(&mut *tx)
            .await?;
        return Ok(Found::Absent);
    };
    // The holder stalled or crashed (its lock ran out): take over where it
    // got to. Its token no longer matches, so it can write nothing more.
    sqlx::query(
        "UPDATE idempotency_keys SET locked_until = $3, lock_token = $4 \
         WHERE customer_id = $1 AND idempotency_key = $2",
    )
    .bind(key.hold.customer.as_str())
    .bind(key.hold.key.as_str())
    .bind(key.lock_until)
    .bind(key.hold.token.as_str())
    .execute(&mut *tx)
    .await?;
    Ok(Found::Claim(Claim::Acquired(Resume::OrderCreated(id))))
}

/// The fenced final write: stores `response` and unlocks the key, only if
/// `hold` still holds it.
pub(super) async fn finish(
    tx: &mut AnyConnection,
    hold: &KeyHold,
    response: &StoredResponse,
) -> Result<(), StoreError> {
    let headers = serde_json::to_string(&response.headers).map_err(StoreError::corrupt)?;
    let changed = sqlx::query(
        "UPDATE idempotency_keys SET recovery_point = 'finished', locked_until = 0, \
         response_status = $4, response_headers = $5, response_body = $6 \
         WHERE customer_id = $1 AND idempotency_key = $2 AND lock_token = $3 \
         AND recovery_point <> 'finished'",
    )
    .bind(hold.customer.as_str())
    .bind(hold.key.as_str())
    .bind(hold.token.as_str())
    .bind(i64::from(response.status))
    .bind(headers)
    .bind(response.body.as_str())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::LockLost)
    }
}

/// The stored response in columns `from..from + 3` of `row`.
fn stored(row: &sqlx::any::AnyRow, from: usize) -> Result<StoredResponse, StoreError> {
    let status: Option<i64> = row.try_get(from)?;
    let headers: Option<String> = row.try_get(from + 1)?;
    let body: Option<String> = row.try_get(from + 2)?;
    Ok(StoredResponse {
        status: u16::try_from(status.unwrap_or(500)).unwrap_or(500),
        headers: serde_json::from_str(headers.as_deref().unwrap_or("[]"))
            .map_err(StoreError::corrupt)?,
        body: body.unwrap_or_default(),
    })
}
