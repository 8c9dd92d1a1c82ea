//! Orders and their lines: creation (with the first outbox row and the
//! key's recovery point, in one transaction), reads, the reservation's
//! answer and cancellation.

use sqlx::{Any, Row, any::AnyRow};
use uuid::Uuid;

use super::outbox::enqueue;
use super::{Action, FirstTry, Store, StoreError, Task, parse_id};
use crate::domain::{Order, OrderLine, OrderStatus, Shortage};

impl Store {
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
    ) -> Result<Task, StoreError> {
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

    /// The customer's latest orders (at most `limit`), newest first.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn orders_of(&self, customer_id: &str, limit: i64) -> Result<Vec<Order>, StoreError> {
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
    /// Returns the order's status afterwards.
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
        };
        sqlx::query("DELETE FROM outbox WHERE order_id = $1 AND kind = 'reserve'")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        let status = status_of(&mut tx, id).await?.ok_or(StoreError::NotFound)?;
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
