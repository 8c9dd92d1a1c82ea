//! The order database: orders and their lines, idempotency keys, and the
//! transactional outbox — one portable SQL dialect on Postgres and SQLite
//! (see `shopeasy_runtime::db`).
//!
//! Every method is one short transaction. Nothing here holds a transaction
//! open across a call to another service: work on a claimed outbox row is
//! protected by a lease (`locked_until`) instead, so a crashed worker's rows
//! are taken over when the lease runs out.

use serde::{Deserialize, Serialize};
use shopeasy_runtime::db::{Backend, Database};
use sqlx::{Any, Row, any::AnyRow};
use uuid::Uuid;

use crate::domain::{Order, OrderLine, OrderStatus, Shortage};
use crate::error::Error;

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
    fn as_str(self) -> &'static str {
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

/// The order service's storage.
#[derive(Debug, Clone)]
pub struct Store {
    db: Database,
}

impl Store {
    /// A store on `db` (migrated).
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.db
    }

    fn pick(&self, postgres: &'static str, sqlite: &'static str) -> &'static str {
        match self.db.backend() {
            Backend::Postgres => postgres,
            Backend::Sqlite => sqlite,
        }
    }

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
    ) -> Result<Claim, Error> {
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
        let row = sqlx::query(self.pick(
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
                    .map_err(anyhow::Error::from)?,
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
    pub async fn forget_key(&self, key: &str) -> Result<(), Error> {
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
    pub async fn unlock_key(&self, key: &str) -> Result<(), Error> {
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
    pub async fn finish_key(&self, key: &str, response: &StoredResponse) -> Result<(), Error> {
        let headers = serde_json::to_string(&response.headers).map_err(anyhow::Error::from)?;
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
    pub async fn delete_keys_before(&self, before: i64, now: i64) -> Result<u64, Error> {
        let done =
            sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1 AND locked_until < $2")
                .bind(before)
                .bind(now)
                .execute(self.db.pool())
                .await?;
        Ok(done.rows_affected())
    }

    /// In one transaction: the order (`pending`) with its lines, its
    /// `reserve` outbox row (leased to the caller, or due for the worker,
    /// as `first` says), and the key's recovery point. Returns the
    /// `reserve` task.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn create_order(
        &self,
        order: &Order,
        key: Option<&str>,
        first: FirstTry,
    ) -> Result<Task, Error> {
        let mut tx = self.db.begin_write().await?;
        sqlx::query(
            "INSERT INTO orders (id, customer_id, status, total_cents, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(order.id.to_string())
        .bind(order.customer_id.as_str())
        .bind(order.status.as_str())
        .bind(order.total_cents)
        .bind(order.created_at)
        .bind(order.updated_at)
        .execute(&mut *tx)
        .await?;
        for (i, line) in order.items.iter().enumerate() {
            sqlx::query(
                "INSERT INTO order_lines \
                 (order_id, line_no, product_id, quantity, unit_price_cents) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(order.id.to_string())
            .bind(i64::try_from(i).unwrap_or(i64::MAX))
            .bind(line.product_id.to_string())
            .bind(line.quantity)
            .bind(line.unit_price_cents)
            .execute(&mut *tx)
            .await?;
        }
        let task = enqueue(&mut tx, order.id, Action::Reserve, order.created_at, first).await?;
        if let Some(key) = key {
            sqlx::query(
                "UPDATE idempotency_keys SET recovery_point = 'order_created', order_id = $2 \
                 WHERE idempotency_key = $1",
            )
            .bind(key)
            .bind(order.id.to_string())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(task)
    }

    /// One order.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn order(&self, id: Uuid) -> Result<Option<Order>, Error> {
        let Some(row) = sqlx::query(
            "SELECT id, customer_id, status, total_cents, created_at, updated_at \
             FROM orders WHERE id = $1",
        )
        .bind(id.to_string())
        .fetch_optional(self.db.pool())
        .await?
        else {
            return Ok(None);
        };
        let mut order = order_from(&row)?;
        let lines = sqlx::query(
            "SELECT order_id, product_id, quantity, unit_price_cents FROM order_lines \
             WHERE order_id = $1 ORDER BY line_no",
        )
        .bind(id.to_string())
        .fetch_all(self.db.pool())
        .await?;
        for line in &lines {
            order.items.push(line_from(line)?.1);
        }
        Ok(Some(order))
    }

    /// The customer's latest orders (at most `limit`), newest first.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn orders_of(&self, customer_id: &str, limit: i64) -> Result<Vec<Order>, Error> {
        let rows = sqlx::query(
            "SELECT id, customer_id, status, total_cents, created_at, updated_at \
             FROM orders WHERE customer_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2",
        )
        .bind(customer_id)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        let mut orders = rows.iter().map(order_from).collect::<Result<Vec<_>, _>>()?;
        let lines = sqlx::query(
            "SELECT l.order_id, l.product_id, l.quantity, l.unit_price_cents \
             FROM order_lines l JOIN orders o ON o.id = l.order_id \
             WHERE o.customer_id = $1 ORDER BY l.order_id, l.line_no",
        )
        .bind(customer_id)
        .fetch_all(self.db.pool())
        .await?;
        for row in &lines {
            let (order_id, line) = line_from(row)?;
            if let Some(order) = orders.iter_mut().find(|o| o.id == order_id) {
                order.items.push(line);
            }
        }
        Ok(orders)
    }

    /// Why a rejected order was rejected.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn shortages(&self, id: Uuid) -> Result<Vec<Shortage>, Error> {
        let reason: Option<Option<String>> =
            sqlx::query("SELECT reject_reason FROM orders WHERE id = $1")
                .bind(id.to_string())
                .fetch_optional(self.db.pool())
                .await?
                .map(|row| row.try_get(0))
                .transpose()?;
        Ok(reason
            .flatten()
            .and_then(|r| serde_json::from_str(&r).ok())
            .unwrap_or_default())
    }

    /// Records Inventory's answer to the order's reservation, and removes
    /// its `reserve` row: a `pending` order becomes `confirmed` (reserved)
    /// or `rejected` (`shortages` given). An order cancelled meanwhile whose
    /// stock was just reserved gets a `release` row, so nothing stays held.
    /// Returns the order's status afterwards.
    ///
    /// # Errors
    /// When the database fails or the order does not exist.
    pub async fn record_reservation(
        &self,
        id: Uuid,
        rejected: Option<&[Shortage]>,
        now: i64,
    ) -> Result<OrderStatus, Error> {
        let mut tx = self.db.begin_write().await?;
        let changed = match rejected {
            None => sqlx::query(
                "UPDATE orders SET status = 'confirmed', updated_at = $2 \
                 WHERE id = $1 AND status = 'pending'",
            )
            .bind(id.to_string())
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
            Some(shortages) => sqlx::query(
                "UPDATE orders SET status = 'rejected', reject_reason = $3, updated_at = $2 \
                 WHERE id = $1 AND status = 'pending'",
            )
            .bind(id.to_string())
            .bind(now)
            .bind(serde_json::to_string(shortages).map_err(anyhow::Error::from)?)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
        };
        sqlx::query("DELETE FROM outbox WHERE order_id = $1 AND kind = 'reserve'")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        let status = status_of(&mut tx, id).await?.ok_or(Error::NotFound)?;
        if changed == 0 && rejected.is_none() && status == OrderStatus::Cancelled {
            enqueue(
                &mut tx,
                id,
                Action::Release,
                now,
                FirstTry::Worker { at: now },
            )
            .await?;
        }
        tx.commit().await?;
        Ok(status)
    }

    /// Cancels an order: `pending` or `confirmed` becomes `cancelled`, its
    /// `reserve` row is dropped and a `release` row (leased to the caller
    /// until `lease_until`) is written, in one transaction. Cancelling a
    /// cancelled order changes nothing. Returns the `release` task to run
    /// now, if one was written.
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::NotCancellable`] for a rejected order;
    /// database failures.
    pub async fn cancel(
        &self,
        id: Uuid,
        now: i64,
        lease_until: i64,
    ) -> Result<Option<Task>, Error> {
        let mut tx = self.db.begin_write().await?;
        let status = status_of(&mut tx, id).await?.ok_or(Error::NotFound)?;
        let task = match status {
            OrderStatus::Rejected => return Err(Error::NotCancellable),
            OrderStatus::Cancelled => None,
            OrderStatus::Pending | OrderStatus::Confirmed => {
                sqlx::query(
                    "UPDATE orders SET status = 'cancelled', updated_at = $2 WHERE id = $1",
                )
                .bind(id.to_string())
                .bind(now)
                .execute(&mut *tx)
                .await?;
                sqlx::query("DELETE FROM outbox WHERE order_id = $1 AND kind = 'reserve'")
                    .bind(id.to_string())
                    .execute(&mut *tx)
                    .await?;
                Some(
                    enqueue(
                        &mut tx,
                        id,
                        Action::Release,
                        now,
                        FirstTry::Caller { lease_until },
                    )
                    .await?,
                )
            }
        };
        tx.commit().await?;
        Ok(task)
    }

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
    ) -> Result<Vec<Task>, Error> {
        let mut tx = self.db.begin_write().await?;
        let rows = sqlx::query(self.pick(
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
    pub async fn retry_later(&self, task: &Task, next_attempt_at: i64) -> Result<(), Error> {
        sqlx::query(
            "UPDATE outbox SET next_attempt_at = $4, locked_until = 0 \
             WHERE order_id = $1 AND kind = $2 AND token = $3",
        )
        .bind(task.order_id.to_string())
        .bind(task.action.as_str())
        .bind(task.token.as_str())
        .bind(next_attempt_at)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Removes a finished task (unless it was enqueued again meanwhile).
    ///
    /// # Errors
    /// When the database fails.
    pub async fn finish_task(&self, task: &Task) -> Result<(), Error> {
        sqlx::query("DELETE FROM outbox WHERE order_id = $1 AND kind = $2 AND token = $3")
            .bind(task.order_id.to_string())
            .bind(task.action.as_str())
            .bind(task.token.as_str())
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// The order's `reserve` task, if it has one (for a request that just
    /// created the order and holds its lease).
    ///
    /// # Errors
    /// When the database fails.
    pub async fn task(&self, id: Uuid, action: Action) -> Result<Option<Task>, Error> {
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
    pub async fn backlog(&self) -> Result<i64, Error> {
        Ok(sqlx::query("SELECT COUNT(*) FROM outbox")
            .fetch_one(self.db.pool())
            .await?
            .try_get(0)?)
    }
}

/// Writes (or renews) an outbox row with a fresh token.
async fn enqueue(
    tx: &mut sqlx::Transaction<'static, Any>,
    id: Uuid,
    action: Action,
    now: i64,
    first: FirstTry,
) -> Result<Task, Error> {
    let (next_attempt_at, locked_until) = match first {
        FirstTry::Caller { lease_until } => (now, lease_until),
        FirstTry::Worker { at } => (at, 0),
    };
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
    .execute(&mut **tx)
    .await?;
    Ok(Task {
        order_id: id,
        action,
        token,
        attempts: 0,
    })
}

async fn status_of(
    tx: &mut sqlx::Transaction<'static, Any>,
    id: Uuid,
) -> Result<Option<OrderStatus>, Error> {
    let status: Option<String> = sqlx::query("SELECT status FROM orders WHERE id = $1")
        .bind(id.to_string())
        .fetch_optional(&mut **tx)
        .await?
        .map(|row| row.try_get(0))
        .transpose()?;
    status
        .map(|s| {
            OrderStatus::parse(&s).ok_or_else(|| anyhow::anyhow!("unknown order status {s:?}"))
        })
        .transpose()
        .map_err(Error::from)
}

fn parse_id(s: &str) -> Result<Uuid, Error> {
    Uuid::try_parse(s).map_err(|e| Error::Internal(anyhow::anyhow!("stored id {s:?}: {e}")))
}

fn order_from(row: &AnyRow) -> Result<Order, Error> {
    let id: String = row.try_get(0)?;
    let status: String = row.try_get(2)?;
    Ok(Order {
        id: parse_id(&id)?,
        customer_id: row.try_get(1)?,
        status: OrderStatus::parse(&status)
            .ok_or_else(|| anyhow::anyhow!("unknown order status {status:?}"))?,
        items: Vec::new(),
        total_cents: row.try_get(3)?,
        created_at: row.try_get(4)?,
        updated_at: row.try_get(5)?,
    })
}

fn line_from(row: &AnyRow) -> Result<(Uuid, OrderLine), Error> {
    let order_id: String = row.try_get(0)?;
    let product_id: String = row.try_get(1)?;
    Ok((
        parse_id(&order_id)?,
        OrderLine {
            product_id: parse_id(&product_id)?,
            quantity: row.try_get(2)?,
            unit_price_cents: row.try_get(3)?,
        },
    ))
}
