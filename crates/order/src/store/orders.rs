//! Orders and their lines: creation (with the first outbox row and the
//! idempotency key, in one transaction), reads, the reservation's answer
//! (with the key's response, in one transaction) and cancellation.

use sqlx::{Any, AssertSqlSafe, Row, any::AnyRow};
use uuid::Uuid;

use super::keys::{self, Found, KeyHold, NewKey, StoredResponse};
use super::outbox::enqueue;
use super::{Action, Claim, FirstTry, Store, StoreError, Task, parse_id};
use crate::domain::{Order, OrderLine, OrderStatus, Shortage};

/// What [`Store::create_order`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// The order, its `reserve` outbox row and the key (if any) are
    /// committed: the `reserve` task.
    Order(Task),
    /// The key already existed and decided (replay, in progress,
    /// mismatch, or taken over to resume its order): nothing was created.
    Existing(Claim),
}

/// What [`Store::finish_reservation`] recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The order's status afterwards.
    pub status: OrderStatus,
    /// Whether the key's response was stored too (only when this request
    /// changed the order: otherwise the caller answers what is stored).
    pub key_finished: bool,
}

/// Where a page of a customer's orders continues: the last order listed
/// (newest first, so the next page holds older ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    /// The last listed order's creation time (milliseconds).
    pub created_at: i64,
    /// The last listed order's id (orders created in the same millisecond
    /// are ordered by id).
    pub id: Uuid,
}

impl PageCursor {
    /// The cursor as sent to clients (`<created_at>.<id>`; opaque to them).
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_at, self.id)
    }

    /// Parses what [`Self::encode`] wrote; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let (at, id) = s.split_once('.')?;
        Some(Self {
            created_at: at.parse().ok()?,
            id: Uuid::try_parse(id).ok()?,
        })
    }
}

/// One page of a customer's orders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The orders, newest first, with their lines.
    pub orders: Vec<Order>,
    /// Where the next page starts, when there is one.
    pub next: Option<PageCursor>,
}

impl Store {
    /// The first of an order's (at most) three commits, in one
    /// transaction: the idempotency key (when `key` is given; held by the
    /// caller, or `finished` with `known` when the outcome is already
    /// known), the order (`pending`) with its lines, and its `reserve`
    /// outbox row (leased to the caller, or due for the worker, as `first`
    /// says). The key goes first: a concurrent request with the same key
    /// waits on its primary key until this commits, then finds it held.
    /// When the key exists, it decides and nothing is created.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn create_order(
        &self,
        order: &Order,
        key: Option<&NewKey<'_>>,
        first: FirstTry,
        known: Option<&StoredResponse>,
    ) -> Result<Created, StoreError> {
        let mut tx = self.db.begin_write().await?;
        if let Some(key) = key {
            let mut inserted = keys::insert(&mut tx, key, order.id, known).await?;
            if !inserted {
                match keys::decide(&self.db, &mut tx, key).await? {
                    Found::Claim(claim) => {
                        tx.commit().await?;
                        return Ok(Created::Existing(claim));
                    }
                    // A row without an order, deleted: insert ours.
                    Found::Absent => inserted = keys::insert(&mut tx, key, order.id, known).await?,
                }
            }
            if !inserted {
                return Err(StoreError::corrupt(anyhow::anyhow!(
                    "idempotency key neither inserted nor found"
                )));
            }
        }
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
        // Every line in one statement: one round trip whatever the order's size.
        let placeholders = (0..order.items.len())
            .map(|i| {
                let b = i * 5;
                format!(
                    "(${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        if !order.items.is_empty() {
            let sql = format!(
                "INSERT INTO order_lines \
                 (order_id, line_no, product_id, quantity, unit_price_cents) VALUES {placeholders}"
            );
            // Only placeholders are formatted in: no value reaches the SQL text.
            let mut insert = sqlx::query(AssertSqlSafe(sql));
            for (i, line) in order.items.iter().enumerate() {
                insert = insert
                    .bind(order.id.to_string())
                    .bind(i64::try_from(i).unwrap_or(i64::MAX))
                    .bind(line.product_id.to_string())
                    .bind(line.quantity)
                    .bind(line.unit_price_cents);
            }
            insert.execute(&mut *tx).await?;
        }
        let task = enqueue(&mut tx, order.id, Action::Reserve, order.created_at, first).await?;
        tx.commit().await?;
        Ok(Created::Order(task))
    }

    /// One order.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn order(&self, id: Uuid) -> Result<Option<Order>, StoreError> {
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

    /// One page of the customer's orders, newest first: at most `limit`
    /// orders older than `after` (from the newest when `None`), and the
    /// lines of those orders only — the read is bounded by the page, not by
    /// how many orders the customer has.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn orders_of(
        &self,
        customer_id: &str,
        limit: i64,
        after: Option<&PageCursor>,
    ) -> Result<Page, StoreError> {
        let columns = "SELECT id, customer_id, status, total_cents, created_at, updated_at \
                       FROM orders WHERE customer_id = $1";
        // One more than asked: whether a next page exists, without a count.
        let rows = match after {
            None => {
                sqlx::query(AssertSqlSafe(format!(
                    "{columns} ORDER BY created_at DESC, id DESC LIMIT $2"
                )))
                .bind(customer_id)
                .bind(limit + 1)
                .fetch_all(self.db.pool())
                .await?
            }
            Some(c) => {
                sqlx::query(AssertSqlSafe(format!(
                    "{columns} AND (created_at < $2 OR (created_at = $2 AND id < $3)) \
                     ORDER BY created_at DESC, id DESC LIMIT $4"
                )))
                .bind(customer_id)
                .bind(c.created_at)
                .bind(c.id.to_string())
                .bind(limit + 1)
                .fetch_all(self.db.pool())
                .await?
            }
        };
        let mut orders = rows.iter().map(order_from).collect::<Result<Vec<_>, _>>()?;
        let next = if orders.len() > usize::try_from(limit).unwrap_or(usize::MAX) {
            orders.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            orders.last().map(|o| PageCursor {
                created_at: o.created_at,
                id: o.id,
            })
        } else {
            None
        };
        if orders.is_empty() {
            return Ok(Page { orders, next });
        }
        let placeholders = (1..=orders.len())
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT order_id, product_id, quantity, unit_price_cents FROM order_lines \
             WHERE order_id IN ({placeholders}) ORDER BY order_id, line_no"
        );
        // Only placeholders are formatted in: no value reaches the SQL text.
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for order in &orders {
            query = query.bind(order.id.to_string());
        }
        let lines = query.fetch_all(self.db.pool()).await?;
        for row in &lines {
            let (order_id, line) = line_from(row)?;
            if let Some(order) = orders.iter_mut().find(|o| o.id == order_id) {
                order.items.push(line);
            }
        }
        Ok(Page { orders, next })
    }

    /// How many `pending` orders `customer_id` has, counting at most `cap`
    /// (all the open-order limit needs to know): one read of the partial
    /// index `orders_pending_by_customer`, bounded whatever the backlog.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn open_orders(&self, customer_id: &str, cap: u32) -> Result<u32, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT 1 FROM orders \
             WHERE customer_id = $1 AND status = 'pending' LIMIT $2) AS open_orders",
        )
        .bind(customer_id)
        .bind(i64::from(cap))
        .fetch_one(self.db.pool())
        .await?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// Why a rejected order was rejected.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn shortages(&self, id: Uuid) -> Result<Vec<Shortage>, StoreError> {
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
    /// Returns the order's status afterwards. (The outbox worker's record;
    /// a request records with [`Store::finish_reservation`].)
    ///
    /// # Errors
    /// When the database fails; [`StoreError::NotFound`] when the order
    /// does not exist.
    pub async fn record_reservation(
        &self,
        id: Uuid,
        rejected: Option<&[Shortage]>,
        now: i64,
    ) -> Result<OrderStatus, StoreError> {
        Ok(self
            .finish_reservation(id, rejected, now, None)
            .await?
            .status)
    }

    /// The last of a request's three commits, in one transaction: records
    /// Inventory's answer as [`Store::record_reservation`] does and, when
    /// this request changed the order and holds a key, stores the response
    /// (`key`) under it — fenced by the holder's token: a request whose key
    /// was taken over gets [`StoreError::LockLost`] and writes nothing.
    ///
    /// # Errors
    /// [`StoreError::LockLost`]; [`StoreError::NotFound`]; database failures.
    pub async fn finish_reservation(
        &self,
        id: Uuid,
        rejected: Option<&[Shortage]>,
        now: i64,
        key: Option<(&KeyHold, &StoredResponse)>,
    ) -> Result<Recorded, StoreError> {
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
            .bind(serde_json::to_string(shortages).map_err(StoreError::corrupt)?)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
        } == 1;
        sqlx::query("DELETE FROM outbox WHERE order_id = $1 AND kind = 'reserve'")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        let status = if changed {
            if rejected.is_some() {
                OrderStatus::Rejected
            } else {
                OrderStatus::Confirmed
            }
        } else {
            status_of(&mut tx, id).await?.ok_or(StoreError::NotFound)?
        };
        if !changed && rejected.is_none() && status == OrderStatus::Cancelled {
            enqueue(
                &mut tx,
                id,
                Action::Release,
                now,
                FirstTry::Worker { at: now },
            )
            .await?;
        }
        let key_finished = match key {
            Some((hold, response)) if changed => {
                keys::finish(&mut tx, hold, response).await?;
                true
            }
            _ => false,
        };
        tx.commit().await?;
        Ok(Recorded {
            status,
            key_finished,
        })
    }

    /// Cancels an order: `pending` or `confirmed` becomes `cancelled`, its
    /// `reserve` row is dropped and a `release` row (leased to the caller
    /// until `lease_until`) is written, in one transaction. Cancelling a
    /// cancelled order changes nothing. Returns the `release` task to run
    /// now, if one was written.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::Conflict`] for a rejected
    /// order; database failures.
    pub async fn cancel(
        &self,
        id: Uuid,
        now: i64,
        lease_until: i64,
    ) -> Result<Option<Task>, StoreError> {
        let mut tx = self.db.begin_write().await?;
        let status = status_of(&mut tx, id).await?.ok_or(StoreError::NotFound)?;
        let task = match status {
            OrderStatus::Rejected => return Err(StoreError::Conflict),
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
}

pub(super) async fn status_of(
    tx: &mut sqlx::Transaction<'static, Any>,
    id: Uuid,
) -> Result<Option<OrderStatus>, StoreError> {
    let status: Option<String> = sqlx::query("SELECT status FROM orders WHERE id = $1")
        .bind(id.to_string())
        .fetch_optional(&mut **tx)
        .await?
        .map(|row| row.try_get(0))
        .transpose()?;
    status
        .map(|s| {
            OrderStatus::parse(&s)
                .ok_or_else(|| StoreError::corrupt(anyhow::anyhow!("unknown order status {s:?}")))
        })
        .transpose()
}

fn order_from(row: &AnyRow) -> Result<Order, StoreError> {
    let id: String = row.try_get(0)?;
    let status: String = row.try_get(2)?;
    Ok(Order {
        id: parse_id(&id)?,
        customer_id: row.try_get(1)?,
        status: OrderStatus::parse(&status).ok_or_else(|| {
            StoreError::corrupt(anyhow::anyhow!("unknown order status {status:?}"))
        })?,
        items: Vec::new(),
        total_cents: row.try_get(3)?,
        created_at: row.try_get(4)?,
        updated_at: row.try_get(5)?,
    })
}

fn line_from(row: &AnyRow) -> Result<(Uuid, OrderLine), StoreError> {
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
