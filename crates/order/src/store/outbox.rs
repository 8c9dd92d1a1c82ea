//! The transactional outbox: rows written with their order, claimed by
//! workers under a lease, given back for later, and removed when done.

use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::keys::{self, KeyHold, StoredResponse};
use super::{Store, StoreError, parse_id};

/// Who makes the first try of a newly enqueued outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstTry {
    /// The request that wrote the row tries now and holds the row until
    /// `lease_until` (milliseconds); then the worker may take it.
    Caller {
        /// End of the caller's lease, in milliseconds since the epoch.
        lease_until: i64,
    },
    /// Nobody holds the row: the worker tries at `at` (milliseconds).
    Worker {
        /// When the row is due, in milliseconds since the epoch.
        at: i64,
    },
}

/// Which Inventory action an outbox row stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `ReserveStock(order id, lines)`.
    Reserve,
    /// `ReleaseStock(order id)`.
    Release,
}

impl Action {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Reserve => "reserve",
            Self::Release => "release",
        }
    }
}

/// A claimed outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The order.
    pub order_id: Uuid,
    /// What to do at Inventory.
    pub action: Action,
    /// Which enqueueing of the row this is.
    pub token: String,
    /// Tries so far, this one included.
    pub attempts: i64,
}

impl Store {
    /// Claims up to `limit` due outbox rows whose lease ran out, leasing
    /// them until `lease_until`. On Postgres, `FOR UPDATE SKIP LOCKED` lets
    /// several replicas claim side by side without waiting on each other;
    /// SQLite has one writer, so its claims are serial anyway.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn claim_tasks(
        &self,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<Vec<Task>, StoreError> {
        let mut tx = self.db.begin_write().await?;
        let rows = sqlx::query(self.db.pick(
            "UPDATE outbox SET locked_until = $2, attempts = attempts + 1 \
             WHERE (order_id, kind) IN (SELECT order_id, kind FROM outbox \
               WHERE next_attempt_at <= $1 AND locked_until <= $1 \
               ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
             RETURNING order_id, kind, token, attempts",
            "UPDATE outbox SET locked_until = $2, attempts = attempts + 1 \
             WHERE (order_id, kind) IN (SELECT order_id, kind FROM outbox \
               WHERE next_attempt_at <= $1 AND locked_until <= $1 \
               ORDER BY next_attempt_at LIMIT $3) \
             RETURNING order_id, kind, token, attempts",
        ))
        .bind(now)
        .bind(lease_until)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter()
            .map(|row| {
                let order_id: String = row.try_get(0)?;
                let kind: String = row.try_get(1)?;
                Ok(Task {
                    order_id: parse_id(&order_id)?,
                    action: if kind == "release" {
                        Action::Release
                    } else {
                        Action::Reserve
                    },
                    token: row.try_get(2)?,
                    attempts: row.try_get(3)?,
                })
            })
            .collect()
    }

    /// Gives a task back to be tried again at `next_attempt_at` (by any
    /// worker).
    ///
    /// # Errors
    /// When the database fails.
    pub async fn retry_later(&self, task: &Task, next_attempt_at: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE outbox SET next_attempt_at = $4, locked_until = 0 \
             WHERE order_id = $1 AND kind = $2 AND token = $3",
        )
        .bind(task.order_id.to_string())
        .bind(task.action.as_str())
        .bind(task.token.as_str())
        .bind(next_attempt_at)
        .execute(self.db.writer())
        .await?;
        Ok(())
    }

    /// A request's last commit when Inventory did not answer: gives its
    /// `reserve` row to the worker (due at `next_attempt_at`) and, with a
    /// key, stores the `pending` response under it (fenced by the holder's
    /// token), in one transaction.
    ///
    /// # Errors
    /// [`StoreError::LockLost`]; database failures.
    pub async fn hand_over(
        &self,
        task: &Task,
        next_attempt_at: i64,
        key: Option<(&KeyHold, &StoredResponse)>,
    ) -> Result<(), StoreError> {
        let mut tx = self.db.begin_write().await?;
        sqlx::query(
            "UPDATE outbox SET next_attempt_at = $4, locked_until = 0 \
             WHERE order_id = $1 AND kind = $2 AND token = $3",
        )
        .bind(task.order_id.to_string())
        .bind(task.action.as_str())
        .bind(task.token.as_str())
        .bind(next_attempt_at)
        .execute(&mut *tx)
        .await?;
        if let Some((hold, response)) = key {
            keys::finish(&mut tx, hold, response).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Removes a finished task (unless it was enqueued again meanwhile).
    ///
    /// # Errors
    /// When the database fails.
    pub async fn finish_task(&self, task: &Task) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM outbox WHERE order_id = $1 AND kind = $2 AND token = $3")
            .bind(task.order_id.to_string())
            .bind(task.action.as_str())
            .bind(task.token.as_str())
            .execute(self.db.writer())
            .await?;
        Ok(())
    }

    /// The order's `reserve` task, if it has one (for a request that just
    /// created the order and holds its lease).
    ///
    /// # Errors
    /// When the database fails.
    pub async fn task(&self, id: Uuid, action: Action) -> Result<Option<Task>, StoreError> {
        let row = sqlx::query(
            "SELECT order_id, kind, token, attempts FROM outbox \
             WHERE order_id = $1 AND kind = $2",
        )
        .bind(id.to_string())
        .bind(action.as_str())
        .fetch_optional(self.db.pool())
        .await?;
        row.map(|row| {
            Ok(Task {
                order_id: id,
                action,
                token: row.try_get(2)?,
                attempts: row.try_get(3)?,
            })
        })
        .transpose()
    }

    /// Rows waiting in the outbox.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn backlog(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query("SELECT COUNT(*) FROM outbox")
            .fetch_one(self.db.pool())
            .await?
            .try_get(0)?)
    }

    /// When the oldest row still in the outbox was written (ms since the
    /// epoch; `None` when the outbox is empty): how long the longest-waiting
    /// order has waited, which a count alone does not say.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn oldest_pending_at(&self) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query("SELECT MIN(created_at) FROM outbox")
            .fetch_one(self.db.pool())
            .await?
            .try_get(0)?)
    }
}

/// Writes (or renews) an outbox row with a fresh token.
/// A new row's `(next_attempt_at, locked_until)`: leased to the caller from
/// `now`, or due for the worker at its time.
pub(super) fn first_lease(first: FirstTry, now: i64) -> (i64, i64) {
    match first {
        FirstTry::Caller { lease_until } => (now, lease_until),
        FirstTry::Worker { at } => (at, 0),
    }
}

pub(super) async fn enqueue(
    tx: &mut AnyConnection,
    id: Uuid,
    action: Action,
    now: i64,
    first: FirstTry,
) -> Result<Task, StoreError> {
    let (next_attempt_at, locked_until) = first_lease(first, now);
    let token = Uuid::new_v4().to_string();
    sqlx::query(
        "INSERT INTO outbox (order_id, kind, token, attempts, next_attempt_at, locked_until, \
         created_at) VALUES ($1, $2, $3, 0, $4, $5, $6) \
         ON CONFLICT (order_id, kind) DO UPDATE SET token = excluded.token, \
         attempts = 0, next_attempt_at = excluded.next_attempt_at, \
         locked_until = excluded.locked_until",
    )
    .bind(id.to_string())
    .bind(action.as_str())
    .bind(token.as_str())
    .bind(next_attempt_at)
    .bind(locked_until)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(Task {
        order_id: id,
        action,
        token,
        attempts: 0,
    })
}
