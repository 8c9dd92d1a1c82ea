//! Orders and their lines: creation (with the first outbox row and the
//! idempotency key, in one transaction), reads, the reservation's answer
//! (with the key's response, in one transaction) and cancellation. On
//! Postgres the usual creation and final record are each one statement
//! (one round trip); anything unusual takes the transaction. On SQLite
//! both are group commits (`Database::write`): the writes queued while the
//! one writer was busy share its next transaction, a savepoint each.

use shopeasy_runtime::db::{Backend, Database};
use sqlx::{AnyConnection, AssertSqlSafe, Row, any::AnyRow};
use uuid::Uuid;

use super::keys::{self, Found, KeyHold, NewKey, OwnedKey, StoredResponse};
use super::outbox::{enqueue, first_lease};
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
    /// The customer already has `max_open` pending orders: nothing was
    /// created (an existing key was not looked at).
    AtOpenLimit,
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
    /// When the key exists, it decides and nothing is created. The
    /// customer's open-order limit is checked in the same commit: with
    /// `max_open` pending orders already (counted, not locked: concurrent
    /// first placements may overshoot it by a few), nothing is created.
    ///
    /// # Errors
    /// When the database fails.
    pub async fn create_order(
        &self,
        order: &Order,
        key: Option<&NewKey<'_>>,
        first: FirstTry,
        known: Option<&StoredResponse>,
        max_open: u32,
    ) -> Result<Created, StoreError> {
        if self.db.backend() == Backend::Postgres {
            // The usual case on Postgres: one statement, one round trip.
            match create_in_one_statement(&self.db, order, key, first, known, max_open).await? {
                OneStatement::Created(task) => return Ok(Created::Order(task)),
                OneStatement::AtOpenLimit => return Ok(Created::AtOpenLimit),
                // The key exists: the transaction below finds and decides it.
                OneStatement::KeyExists => {}
            }
        }
        // One commit; on SQLite shared with the writes queued meanwhile
        // (group commit, `Database::write`), so the work owns its data.
        let db = self.db.clone();
        let order = order.clone();
        let key = key.map(OwnedKey::from);
        let known = known.cloned();
        self.db
            .write(move |conn| {
                Box::pin(async move {
                    let key = key.as_ref().map(OwnedKey::as_new);
                    create(
                        conn,
                        &db,
                        &order,
                        key.as_ref(),
                        first,
                        known.as_ref(),
                        max_open,
                    )
                    .await
                })
            })
            .await
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
    /// or `rejected` (`shortages` given). An order no longer `pending` whose
    /// stock was just reserved anyway — cancelled meanwhile, or rejected by
    /// an overlapping attempt of the same reservation that Inventory
    /// refused — gets a `release` row, so nothing stays held.
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
        if self.db.backend() == Backend::Postgres {
            // The usual case on Postgres: one statement, one round trip.
            if let Some(recorded) =
                finish_in_one_statement(&self.db, id, rejected, now, key).await?
            {
                return Ok(recorded);
            }
            // Nothing changed (not pending, or the key's lock is lost): the
            // transaction below finds out which and answers for it.
        }
        // One commit; on SQLite shared with the writes queued meanwhile.
        let rejected = rejected.map(<[Shortage]>::to_vec);
        let key = key.map(|(hold, response)| (hold.clone(), response.clone()));
        self.db
            .write(move |conn| {
                Box::pin(async move {
                    let key = key.as_ref().map(|(hold, response)| (hold, response));
                    finish(conn, id, rejected.as_deref(), now, key).await
                })
            })
            .await
    }

    /// Cancels an order: `pending` or `confirmed` becomes `cancelled`, its
    /// `reserve` row is dropped and a `release` row (leased to the caller
    /// until `lease_until`) is written, in one transaction. Cancelling a
    /// cancelled order changes nothing. The order's row is locked from the
    /// first read, so a reservation's answer committed meanwhile is never
    /// overwritten: a rejection that wins is answered as if read first.
    /// Returns the `release` task to run now, if one was written.
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
        // The status is read with the row locked (Postgres; SQLite's
        // `BEGIN IMMEDIATE` already excludes every other writer), so the
        // update below writes over the status it read: a rejection or
        // confirmation committing meanwhile is waited for and read, never
        // overwritten (under read committed a plain read would not stop it).
        let status = read_status(
            &mut tx,
            id,
            self.db.pick(
                "SELECT status FROM orders WHERE id = $1 FOR UPDATE",
                "SELECT status FROM orders WHERE id = $1",
            ),
        )
        .await?
        .ok_or(StoreError::NotFound)?;
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

/// Commit (c) as statements of one transaction (the caller's): on SQLite
/// always, on Postgres when the one statement changed nothing. See
/// [`Store::finish_reservation`].
async fn finish(
    tx: &mut AnyConnection,
    id: Uuid,
    rejected: Option<&[Shortage]>,
    now: i64,
    key: Option<(&KeyHold, &StoredResponse)>,
) -> Result<Recorded, StoreError> {
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
        status_of(tx, id).await?.ok_or(StoreError::NotFound)?
    };
    // Stock was just reserved for an order that is no longer waiting for
    // it: cancelled meanwhile, or rejected by another attempt of the same
    // reservation (Inventory keeps no record of a refused one, so a
    // request's attempt and the worker's, overlapping once the key's lock
    // and the row's lease ran out, can be refused and then succeed). Either
    // way nothing else will release it: a `release` row does.
    if !changed
        && rejected.is_none()
        && matches!(status, OrderStatus::Cancelled | OrderStatus::Rejected)
    {
        enqueue(tx, id, Action::Release, now, FirstTry::Worker { at: now }).await?;
    }
    let key_finished = match key {
        Some((hold, response)) if changed => {
            keys::finish(tx, hold, response).await?;
            true
        }
        _ => false,
    };
    Ok(Recorded {
        status,
        key_finished,
    })
}

/// Commit (a) as statements of one transaction (the caller's): on SQLite
/// always, on Postgres when the key exists. See [`Store::create_order`].
async fn create(
    tx: &mut AnyConnection,
    db: &Database,
    order: &Order,
    key: Option<&NewKey<'_>>,
    first: FirstTry,
    known: Option<&StoredResponse>,
    max_open: u32,
) -> Result<Created, StoreError> {
    if open_orders(tx, &order.customer_id, max_open).await? >= max_open {
        return Ok(Created::AtOpenLimit);
    }
    if let Some(key) = key {
        let mut inserted = keys::insert(tx, key, order.id, known).await?;
        if !inserted {
            match keys::decide(db, tx, key).await? {
                Found::Claim(claim) => return Ok(Created::Existing(claim)),
                // A row without an order, deleted: insert ours.
                Found::Absent => inserted = keys::insert(tx, key, order.id, known).await?,
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
    let task = enqueue(tx, order.id, Action::Reserve, order.created_at, first).await?;
    Ok(Created::Order(task))
}

/// How many `pending` orders `customer_id` has, counting at most `cap`
/// (all the open-order limit needs to know): one read of the partial index
/// `orders_pending_by_customer`, bounded whatever the backlog.
async fn open_orders(
    conn: &mut AnyConnection,
    customer_id: &str,
    cap: u32,
) -> Result<u32, StoreError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT 1 FROM orders \
         WHERE customer_id = $1 AND status = 'pending' LIMIT $2) AS open_orders",
    )
    .bind(customer_id)
    .bind(i64::from(cap))
    .fetch_one(conn)
    .await?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// What [`create_in_one_statement`] did.
enum OneStatement {
    /// Created: the `reserve` task.
    Created(Task),
    /// The customer is at the open-order limit: nothing written.
    AtOpenLimit,
    /// The key exists: nothing written.
    KeyExists,
}

/// Commit (a) on Postgres as one statement (data-modifying CTEs): the
/// open-order count, the key (if any), the order, its lines and its
/// `reserve` outbox row, each written only if what it depends on was (a
/// statement's sub-statements all see one snapshot, so the count is the
/// same read the transaction would make), in the statement's own implicit
/// transaction. Five round trips (BEGIN, four INSERTs, COMMIT) become one,
/// the placement path's largest share of round trips (issue 19,
/// `crates/order/README.md`). The order and everything after it are
/// inserted only when the key was (`WHERE EXISTS (SELECT 1 FROM k)`), so a
/// key that already exists leaves nothing behind, and the caller decides
/// the key in a transaction as before. A concurrent request with the same
/// key waits on the key's unique index until this commits, as in the
/// transaction.
///
/// SQLite has no data-modifying CTEs: there commit (a) is [`create`] in a
/// group commit (`Database::write`), whose shared pages are what the one
/// writer lacked. The same statements as one script (one hand-off to
/// SQLite's thread instead of five) were measured twice and changed
/// nothing alone (the crate README, "SQLite, one script per commit").
async fn create_in_one_statement(
    db: &Database,
    order: &Order,
    key: Option<&NewKey<'_>>,
    first: FirstTry,
    known: Option<&StoredResponse>,
    max_open: u32,
) -> Result<OneStatement, StoreError> {
    let mut n = 0usize;
    let mut next = || {
        n += 1;
        format!("${n}")
    };
    let (customer, cap) = (next(), next());
    let mut sql = format!(
        "WITH room AS (SELECT count(*) < {cap}::bigint AS ok FROM (SELECT 1 FROM orders \
         WHERE customer_id = {customer}::text AND status = 'pending' LIMIT {cap}::bigint) AS open), "
    );
    if key.is_some() {
        let p: Vec<String> = (0..11).map(|_| next()).collect();
        sql.push_str(&format!(
            "k AS (INSERT INTO idempotency_keys \
             (customer_id, idempotency_key, fingerprint, recovery_point, locked_until, \
              lock_token, order_id, response_status, response_headers, response_body, \
              created_at) SELECT {} WHERE (SELECT ok FROM room) \
             ON CONFLICT (customer_id, idempotency_key) DO NOTHING RETURNING 1), ",
            p.join(", ")
        ));
    }
    let p: Vec<String> = (0..6).map(|_| next()).collect();
    sql.push_str(&format!(
        "o AS (INSERT INTO orders (id, customer_id, status, total_cents, created_at, updated_at) \
         SELECT {}::text, {}::text, {}::text, {}::bigint, {}::bigint, {}::bigint WHERE {} \
         RETURNING id), ",
        p[0],
        p[1],
        p[2],
        p[3],
        p[4],
        p[5],
        if key.is_some() {
            "EXISTS (SELECT 1 FROM k)"
        } else {
            "(SELECT ok FROM room)"
        }
    ));
    if !order.items.is_empty() {
        let rows: Vec<String> = order
            .items
            .iter()
            .map(|_| {
                format!(
                    "({}::bigint, {}::text, {}::bigint, {}::bigint)",
                    next(),
                    next(),
                    next(),
                    next()
                )
            })
            .collect();
        sql.push_str(&format!(
            "l AS (INSERT INTO order_lines \
             (order_id, line_no, product_id, quantity, unit_price_cents) \
             SELECT o.id, v.line_no, v.product_id, v.quantity, v.unit_price_cents \
             FROM o CROSS JOIN (VALUES {}) AS v (line_no, product_id, quantity, unit_price_cents)), ",
            rows.join(", ")
        ));
    }
    let p: Vec<String> = (0..5).map(|_| next()).collect();
    sql.push_str(&format!(
        "b AS (INSERT INTO outbox \
         (order_id, kind, token, attempts, next_attempt_at, locked_until, created_at) \
         SELECT o.id, {}::text, {}::text, 0, {}::bigint, {}::bigint, {}::bigint FROM o) \
         SELECT (SELECT count(*) FROM o), (SELECT ok FROM room)",
        p[0], p[1], p[2], p[3], p[4]
    ));
    // Only numbered placeholders are formatted in: no value reaches the SQL.
    let mut query = sqlx::query_as::<_, (i64, bool)>(AssertSqlSafe(sql))
        .bind(order.customer_id.as_str().to_owned())
        .bind(i64::from(max_open));
    if let Some(key) = key {
        let (point, lock_until, headers) = keys::insert_values(key, known)?;
        query = query
            .bind(key.hold.customer.as_str().to_owned())
            .bind(key.hold.key.as_str().to_owned())
            .bind(key.fingerprint.to_owned())
            .bind(point)
            .bind(lock_until)
            .bind(key.hold.token.as_str().to_owned())
            .bind(order.id.to_string())
            .bind(known.map(|r| i64::from(r.status)))
            .bind(headers)
            .bind(known.map(|r| r.body.clone()))
            .bind(key.now);
    }
    query = query
        .bind(order.id.to_string())
        .bind(order.customer_id.as_str().to_owned())
        .bind(order.status.as_str())
        .bind(order.total_cents)
        .bind(order.created_at)
        .bind(order.updated_at);
    for (i, line) in order.items.iter().enumerate() {
        query = query
            .bind(i64::try_from(i).unwrap_or(i64::MAX))
            .bind(line.product_id.to_string())
            .bind(line.quantity)
            .bind(line.unit_price_cents);
    }
    let (next_attempt_at, locked_until) = first_lease(first, order.created_at);
    let token = Uuid::new_v4().to_string();
    query = query
        .bind(Action::Reserve.as_str())
        .bind(token.clone())
        .bind(next_attempt_at)
        .bind(locked_until)
        .bind(order.created_at);
    let (created, room) = db
        .one_round_trip(async |conn| query.fetch_one(conn).await)
        .await?;
    Ok(match (created, room) {
        (1, _) => OneStatement::Created(Task {
            order_id: order.id,
            action: Action::Reserve,
            token,
            attempts: 0,
        }),
        (_, false) => OneStatement::AtOpenLimit,
        _ => OneStatement::KeyExists,
    })
}

/// Commit (c) on Postgres as one statement, for the usual case: the order
/// is `pending` and, when `key` is given, its holder still holds the key.
/// Then the order is confirmed or rejected, its `reserve` outbox row
/// deleted and the response stored under the key, in the statement's own
/// implicit transaction: one round trip instead of five (BEGIN, three
/// writes, COMMIT). The fence is the same as the transaction's: `f` locks
/// the key row only while `lock_token` is still the holder's (a takeover
/// committed meanwhile is seen once the lock is granted, as Postgres
/// re-checks a locked row), and nothing is written unless it did. When
/// nothing changed, `None`: the caller's transaction changes no status
/// either and says why (another status — with a `release` row when stock
/// was reserved for an order cancelled or rejected meanwhile — or
/// [`StoreError::LockLost`]).
async fn finish_in_one_statement(
    db: &Database,
    id: Uuid,
    rejected: Option<&[Shortage]>,
    now: i64,
    key: Option<(&KeyHold, &StoredResponse)>,
) -> Result<Option<Recorded>, StoreError> {
    let (status, reason) = match rejected {
        None => (OrderStatus::Confirmed, None),
        Some(shortages) => (
            OrderStatus::Rejected,
            Some(serde_json::to_string(shortages).map_err(StoreError::corrupt)?),
        ),
    };
    let (fence, finish) = if key.is_some() {
        (
            "f AS (SELECT 1 FROM idempotency_keys WHERE customer_id = $5::text \
             AND idempotency_key = $6::text AND lock_token = $7::text \
             AND recovery_point <> 'finished' FOR UPDATE), ",
            ", k AS (UPDATE idempotency_keys SET recovery_point = 'finished', locked_until = 0, \
             response_status = $8::bigint, response_headers = $9::text, \
             response_body = $10::text WHERE customer_id = $5::text \
             AND idempotency_key = $6::text AND lock_token = $7::text \
             AND EXISTS (SELECT 1 FROM o) RETURNING 1) \
             SELECT (SELECT count(*) FROM o), (SELECT count(*) FROM k)",
        )
    } else {
        ("", " SELECT (SELECT count(*) FROM o), 0::bigint")
    };
    let sql = format!(
        "WITH {fence}o AS (UPDATE orders SET status = $2::text, reject_reason = $3::text, \
         updated_at = $4::bigint WHERE id = $1::text AND status = 'pending'{} RETURNING id), \
         d AS (DELETE FROM outbox WHERE order_id IN (SELECT id FROM o) AND kind = 'reserve'){finish}",
        if key.is_some() {
            " AND EXISTS (SELECT 1 FROM f)"
        } else {
            ""
        }
    );
    // Only fixed text is formatted in: no value reaches the SQL.
    let mut query = sqlx::query_as::<_, (i64, i64)>(AssertSqlSafe(sql))
        .bind(id.to_string())
        .bind(status.as_str())
        .bind(reason)
        .bind(now);
    if let Some((hold, response)) = key {
        let headers = serde_json::to_string(&response.headers).map_err(StoreError::corrupt)?;
        query = query
            .bind(hold.customer.as_str().to_owned())
            .bind(hold.key.as_str().to_owned())
            .bind(hold.token.as_str().to_owned())
            .bind(i64::from(response.status))
            .bind(headers)
            .bind(response.body.clone());
    }
    let (changed, finished) = db
        .one_round_trip(async |conn| query.fetch_one(conn).await)
        .await?;
    match (changed, finished, key.is_some()) {
        (0, _, _) => Ok(None),
        (1, 1, true) | (1, 0, false) => Ok(Some(Recorded {
            status,
            key_finished: key.is_some(),
        })),
        // The key row was locked by `f` for this statement: `k` cannot
        // miss it. Should it ever, the order is recorded and the key stays
        // `order_created`: a retry after its lock resumes the order.
        _ => Err(StoreError::corrupt(anyhow::anyhow!(
            "the final write changed order {id} but not its key"
        ))),
    }
}

/// The order's status (read without a lock).
pub(super) async fn status_of(
    tx: &mut AnyConnection,
    id: Uuid,
) -> Result<Option<OrderStatus>, StoreError> {
    read_status(tx, id, "SELECT status FROM orders WHERE id = $1").await
}

/// The order's status as `sql` reads it: one `status` column of the order
/// whose id is `$1` (with or without a row lock).
async fn read_status(
    tx: &mut AnyConnection,
    id: Uuid,
    sql: &'static str,
) -> Result<Option<OrderStatus>, StoreError> {
    let status: Option<String> = sqlx::query(sql)
        .bind(id.to_string())
        .fetch_optional(&mut *tx)
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
