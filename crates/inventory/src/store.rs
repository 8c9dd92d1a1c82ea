//! Stock and reservations in the service's own database (Postgres or
//! SQLite, one portable SQL dialect through [`Database`]).
//!
//! **Never oversell.** Stock is taken by one conditional update per line,
//! `UPDATE stock SET available = available - q WHERE product_id = p AND
//! available >= q`, inside the reservation's transaction: the database
//! decides atomically, there is no read-then-write window. Lines are taken
//! in product-id order so two reservations never lock rows in opposite
//! orders (no deadlocks); any short line rolls the whole transaction back.
//! On Postgres a one-line reservation (the usual kind) is one prepared
//! statement sent with its timeout in one round trip (see
//! `reserve_one_line`); anything unusual takes the steps one by one.
//!
//! **Idempotent.** The reservation row is inserted first with `ON CONFLICT
//! (reservation_id) DO NOTHING`. A concurrent repeat of the same id waits on
//! the primary key (Postgres) or on the write lock (SQLite, `BEGIN
//! IMMEDIATE`) and then finds the row: it answers from the stored lines and
//! reserves nothing. A release marks the row `released` once; releasing an
//! unknown id leaves a tombstone so that a reservation arriving after its
//! own cancellation is refused instead of leaking stock.
//!
//! **Deadlines reach the database.** Every operation takes an absolute
//! deadline. On Postgres each transaction starts with `SET LOCAL
//! statement_timeout` = the time left, so the server cancels a query that
//! outlives the caller (SQLSTATE 57014 → [`Error::DeadlineExceeded`]); a
//! timer slightly later is the backstop should the server not answer at all.
//! SQLite has no server to cancel: the work is abandoned at the deadline and
//! its transaction rolled back.

use std::{future::Future, time::Duration};

use shopeasy_runtime::db::{Backend, Database};
use sqlx::{Any, AssertSqlSafe, Row, Transaction};
use tokio::time::Instant;

use crate::{
    Error,
    domain::{Line, ProductId, Reservation, ReservationId, Reserved, Shortage},
};

/// How long after the deadline the client-side backstop fires on Postgres,
/// giving the server's own `statement_timeout` cancel time to answer first.
const SERVER_CANCEL_GRACE: Duration = Duration::from_millis(100);

/// The Inventory store. Cheap to clone (a pool handle).
#[derive(Debug, Clone)]
pub struct Store {
    db: Database,
}

impl Store {
    /// A store over `db` (migrated with [`crate::migrator`]).
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Units of `product` available to reserve.
    ///
    /// # Errors
    /// [`Error::UnknownProduct`] without a stock record; deadline and
    /// database errors as described in the module docs.
    pub async fn get_stock(&self, product: &ProductId, deadline: Instant) -> Result<i64, Error> {
        self.bounded(deadline, async {
            let mut tx = self.begin(false, deadline).await?;
            let available = available(&mut tx, product).await?;
            commit(tx, deadline).await?;
            available.ok_or_else(|| Error::UnknownProduct(product.clone()))
        })
        .await
    }

    /// Sets the units of `product` available to reserve, creating its
    /// record. Units already reserved stay reserved.
    ///
    /// # Errors
    /// Deadline and database errors.
    pub async fn set_stock(
        &self,
        product: &ProductId,
        available: i64,
        deadline: Instant,
    ) -> Result<i64, Error> {
        self.bounded(deadline, async {
            let mut tx = self.begin(true, deadline).await?;
            sqlx::query(
                "INSERT INTO stock (product_id, available, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (product_id) DO UPDATE \
                 SET available = excluded.available, updated_at = excluded.updated_at",
            )
            .bind(product.as_str())
            .bind(available)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
            commit(tx, deadline).await?;
            Ok(available)
        })
        .await
    }

    /// Reserves every line of `reservation` or none (see the module docs).
    ///
    /// # Errors
    /// [`Error::UnknownProduct`] when a product has no stock record;
    /// [`Error::InsufficientStock`] naming every short line;
    /// [`Error::ReservationConflict`] when the id was used with other lines;
    /// [`Error::ReservationReleased`] when it was released; deadline and
    /// database errors.
    pub async fn reserve(
        &self,
        reservation: &Reservation,
        deadline: Instant,
    ) -> Result<Reserved, Error> {
        self.bounded(deadline, async {
            let id = reservation.id();
            let now = now_ms();
            if self.db.backend() == Backend::Postgres
                && let [line] = reservation.lines()
            {
                let ms = statement_timeout_ms(deadline)?;
                if reserve_one_line(&self.db, id, line, now, ms).await? {
                    return Ok(Reserved {
                        lines: vec![line.clone()],
                        replayed: false,
                    });
                }
                // A repeat, a released id, or short: the steps below say
                // which (the statement changed nothing).
            }
            let mut tx = self.begin(true, deadline).await?;
            let created = sqlx::query(
                "INSERT INTO reservations (reservation_id, state, created_at, updated_at) \
                 VALUES ($1, 'reserved', $2, $2) ON CONFLICT (reservation_id) DO NOTHING",
            )
            .bind(id.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if created == 0 {
                let (state, lines) = stored(&mut tx, id).await?;
                tx.rollback().await?;
                return if state == "released" {
                    Err(Error::ReservationReleased(id.clone()))
                } else if reservation.same_lines(&lines) {
                    Ok(Reserved {
                        lines,
                        replayed: true,
                    })
                } else {
                    Err(Error::ReservationConflict(id.clone()))
                };
            }

            let lines = reservation.lines();
            let mut by_product: Vec<usize> = (0..lines.len()).collect();
            by_product.sort_by(|&a, &b| lines[a].product_id.cmp(&lines[b].product_id));
            let mut failed = false;
            let mut short: Vec<(usize, Shortage)> = Vec::new();
            for i in by_product {
                let line = &lines[i];
                if !failed && take(&mut tx, line, now).await? {
                    continue;
                }
                let Some(a) = available(&mut tx, &line.product_id).await? else {
                    tx.rollback().await?;
                    return Err(Error::UnknownProduct(line.product_id.clone()));
                };
                if a >= line.quantity {
                    // Enough after all: either the reservation fails anyway
                    // (nothing to report for this line), or stock came back
                    // between the update and this read, so try once more.
                    if failed || take(&mut tx, line, now).await? {
                        continue;
                    }
                }
                failed = true;
                short.push((
                    i,
                    Shortage {
                        product_id: line.product_id.clone(),
                        requested: line.quantity,
                        available: a,
                    },
                ));
            }
            if failed {
                tx.rollback().await?;
                short.sort_by_key(|(i, _)| *i);
                return Err(Error::InsufficientStock(
                    short.into_iter().map(|(_, s)| s).collect(),
                ));
            }

            let mut sql = String::from(
                "INSERT INTO reservation_lines (reservation_id, line_no, product_id, quantity) VALUES ",
            );
            for i in 0..lines.len() {
                let p = i * 4;
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("(${}, ${}, ${}, ${})", p + 1, p + 2, p + 3, p + 4));
            }
            // Only placeholders are spliced in; every value is bound.
            let mut insert = sqlx::query(AssertSqlSafe(sql));
            for (no, line) in (0_i64..).zip(lines) {
                insert = insert
                    .bind(id.as_str())
                    .bind(no)
                    .bind(line.product_id.as_str())
                    .bind(line.quantity);
            }
            insert.execute(&mut *tx).await?;
            commit(tx, deadline).await?;
            Ok(Reserved {
                lines: lines.to_vec(),
                replayed: false,
            })
        })
        .await
    }

    /// Returns the units of reservation `id` to stock, once. Returns the
    /// lines released: the reserved lines the first time, nothing on a
    /// repeat or for an unknown id (which is remembered as released).
    ///
    /// # Errors
    /// Deadline and database errors.
    pub async fn release(&self, id: &ReservationId, deadline: Instant) -> Result<Vec<Line>, Error> {
        self.bounded(deadline, async {
            let mut tx = self.begin(true, deadline).await?;
            let now = now_ms();
            let tombstone = sqlx::query(
                "INSERT INTO reservations (reservation_id, state, created_at, updated_at) \
                 VALUES ($1, 'released', $2, $2) ON CONFLICT (reservation_id) DO NOTHING",
            )
            .bind(id.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if tombstone == 1 {
                commit(tx, deadline).await?;
                return Ok(Vec::new());
            }
            let released = sqlx::query(
                "UPDATE reservations SET state = 'released', updated_at = $2 \
                 WHERE reservation_id = $1 AND state = 'reserved'",
            )
            .bind(id.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if released == 0 {
                tx.rollback().await?;
                return Ok(Vec::new());
            }
            let (_, lines) = stored(&mut tx, id).await?;
            let mut by_product: Vec<&Line> = lines.iter().collect();
            by_product.sort_by(|a, b| a.product_id.cmp(&b.product_id));
            for line in by_product {
                sqlx::query(
                    "UPDATE stock SET available = available + $1, updated_at = $3 \
                     WHERE product_id = $2",
                )
                .bind(line.quantity)
                .bind(line.product_id.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            commit(tx, deadline).await?;
            Ok(lines)
        })
        .await
    }

    /// Units of `product` held by reservations not yet released, so that
    /// `initial = available + reserved` can be checked.
    ///
    /// # Errors
    /// Deadline and database errors.
    pub async fn reserved(&self, product: &ProductId, deadline: Instant) -> Result<i64, Error> {
        self.bounded(deadline, async {
            let mut tx = self.begin(false, deadline).await?;
            let units: i64 = sqlx::query_scalar(
                "SELECT CAST(COALESCE(SUM(l.quantity), 0) AS BIGINT) FROM reservation_lines l \
                 JOIN reservations r ON r.reservation_id = l.reservation_id \
                 WHERE r.state = 'reserved' AND l.product_id = $1",
            )
            .bind(product.as_str())
            .fetch_one(&mut *tx)
            .await?;
            commit(tx, deadline).await?;
            Ok(units)
        })
        .await
    }

    /// Runs `work` until `deadline` (plus [`SERVER_CANCEL_GRACE`] on
    /// Postgres, whose own statement timeout should answer first).
    async fn bounded<T>(
        &self,
        deadline: Instant,
        work: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        if Instant::now() >= deadline {
            return Err(Error::DeadlineExceeded);
        }
        let backstop = self.db.pick(deadline + SERVER_CANCEL_GRACE, deadline);
        tokio::time::timeout_at(backstop, work)
            .await
            .unwrap_or(Err(Error::DeadlineExceeded))
    }

    /// Begins a transaction whose statements the database cancels at
    /// `deadline` (Postgres).
    async fn begin(
        &self,
        write: bool,
        deadline: Instant,
    ) -> Result<Transaction<'static, Any>, Error> {
        if self.db.backend() == Backend::Postgres {
            let ms = statement_timeout_ms(deadline)?;
            // One round trip: the simple-query protocol takes both
            // statements at once. Only a number is formatted in.
            return Ok(self
                .db
                .pool()
                .begin_with(AssertSqlSafe(format!(
                    "BEGIN; SET LOCAL statement_timeout = {ms}"
                )))
                .await?);
        }
        Ok(if write {
            self.db.begin_write().await?
        } else {
            self.db.pool().begin().await?
        })
    }
}

/// Commits unless `deadline` has passed: a caller that was told
/// DEADLINE_EXCEEDED must be able to assume nothing was done (only a commit
/// that straddles the deadline itself can still land).
async fn commit(tx: Transaction<'static, Any>, deadline: Instant) -> Result<(), Error> {
    if Instant::now() >= deadline {
        tx.rollback().await?;
        return Err(Error::DeadlineExceeded);
    }
    Ok(tx.commit().await?)
}

/// The time left until `deadline` as a `statement_timeout`: whole
/// milliseconds, rounded up (0 would mean "no timeout").
fn statement_timeout_ms(deadline: Instant) -> Result<u128, Error> {
    let left = deadline.saturating_duration_since(Instant::now());
    match left.as_micros().div_ceil(1000) {
        0 => Err(Error::DeadlineExceeded),
        ms => Ok(ms),
    }
}

/// The name of [`RESERVE_ONE_LINE`] as each connection prepares it.
const RESERVE_ONE_LINE_NAME: &str = "shopeasy_reserve_one_line";

/// The usual reservation — one line, a new id, enough stock — as one
/// statement: the reservation row, the conditional take and the line, each
/// only if the one before it happened. It answers how many lines it took
/// (1, or 0 when the id exists); when the row was inserted but the stock is
/// short it fails on purpose (a division by zero, [`PARTIAL_WRITE`]): a
/// statement cannot roll back its own sub-statements, and there is no
/// transaction of ours around it to roll back, so the error undoes it. The
/// divisor is the (empty) take's count, not a literal 0: the planner folds
/// constant expressions, and `1 / 0` would fail every execution at plan
/// time.
const RESERVE_ONE_LINE: &str = "PREPARE shopeasy_reserve_one_line (text, text, bigint, bigint) AS \
     WITH r AS (INSERT INTO reservations (reservation_id, state, created_at, updated_at) \
       VALUES ($1, 'reserved', $4, $4) ON CONFLICT (reservation_id) DO NOTHING \
       RETURNING reservation_id), \
     s AS (UPDATE stock SET available = available - $3, updated_at = $4 \
       WHERE product_id = $2 AND available >= $3 AND EXISTS (SELECT 1 FROM r) \
       RETURNING product_id), \
     l AS (INSERT INTO reservation_lines (reservation_id, line_no, product_id, quantity) \
       SELECT r.reservation_id, 0, s.product_id, $3 FROM r CROSS JOIN s) \
     SELECT CASE WHEN (SELECT count(*) FROM r) = (SELECT count(*) FROM s) \
                 THEN (SELECT count(*) FROM s) ELSE (SELECT 1 / count(*) FROM s) END";

/// The SQLSTATE [`RESERVE_ONE_LINE`] raises to undo a reservation row
/// whose stock was short (`division_by_zero`).
const PARTIAL_WRITE: &str = "22012";

/// The SQLSTATE of an `EXECUTE` on a connection that has not prepared the
/// statement yet (`invalid_sql_statement_name`).
const NOT_PREPARED: &str = "26000";

/// [`RESERVE_ONE_LINE`] on Postgres in **one round trip**: `SET LOCAL
/// statement_timeout` and the `EXECUTE` sent as one simple query, which
/// Postgres runs as one implicit transaction (the `SET LOCAL` holds for it)
/// and commits at its end — no `BEGIN` and no `COMMIT` round trip (the
/// three were three of an order's five statements). The statement is prepared
/// once per connection (SQL `PREPARE`, on first use: parsed and planned
/// once, as the driver's own prepared statements are). True when reserved;
/// false when nothing was written (the id exists, or the stock is short),
/// and the caller takes the step-by-step path that tells which.
///
/// The simple-query protocol has no parameters, so the values are written
/// into the text: two ids that [`ProductId::parse`] and
/// [`ReservationId::parse`] made canonical UUIDs (checked again here: hex
/// digits and hyphens only, or nothing is sent) and three integers. As with
/// the `COMMIT` this replaces, a statement that straddles the deadline can
/// still land; a retry with the same id then answers `replayed`.
async fn reserve_one_line(
    db: &Database,
    id: &ReservationId,
    line: &Line,
    now: i64,
    timeout_ms: u128,
) -> Result<bool, Error> {
    let uuid_text =
        |s: &str| s.len() == 36 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    let (id, product) = (id.as_str(), line.product_id.as_str());
    if !uuid_text(id) || !uuid_text(product) {
        return Ok(false);
    }
    let q = line.quantity;
    let sql = format!(
        "SET LOCAL statement_timeout = {timeout_ms}; \
         EXECUTE {RESERVE_ONE_LINE_NAME} ('{id}', '{product}', {q}, {now})"
    );
    // The answer is the connection's check (`Database::one_round_trip`);
    // a connection's first use adds the `PREPARE` and a second try.
    let rows = db
        .one_round_trip(async |conn| {
            let mut prepared = false;
            loop {
                match sqlx::raw_sql(AssertSqlSafe(sql.clone()))
                    .fetch_all(&mut *conn)
                    .await
                {
                    Ok(rows) => return Ok(Some(rows)),
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(PARTIAL_WRITE) => {
                        return Ok(None);
                    }
                    Err(sqlx::Error::Database(e))
                        if !prepared && e.code().as_deref() == Some(NOT_PREPARED) =>
                    {
                        sqlx::raw_sql(RESERVE_ONE_LINE).execute(&mut *conn).await?;
                        prepared = true;
                    }
                    Err(e) => return Err(e),
                }
            }
        })
        .await?;
    let Some(rows) = rows else {
        return Ok(false);
    };
    let reserved: i64 = match rows.last() {
        Some(row) => row.try_get(0)?,
        None => 0,
    };
    Ok(reserved == 1)
}

/// Takes `line.quantity` units if that many are available. True when taken.
async fn take(tx: &mut Transaction<'static, Any>, line: &Line, now: i64) -> Result<bool, Error> {
    let taken = sqlx::query(
        "UPDATE stock SET available = available - $1, updated_at = $3 \
         WHERE product_id = $2 AND available >= $1",
    )
    .bind(line.quantity)
    .bind(line.product_id.as_str())
    .bind(now)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(taken == 1)
}

/// The available units of `product`, `None` without a stock record.
async fn available(
    tx: &mut Transaction<'static, Any>,
    product: &ProductId,
) -> Result<Option<i64>, Error> {
    Ok(
        sqlx::query_scalar("SELECT available FROM stock WHERE product_id = $1")
            .bind(product.as_str())
            .fetch_optional(&mut **tx)
            .await?,
    )
}

/// A stored reservation's state and lines (in the order first asked).
async fn stored(
    tx: &mut Transaction<'static, Any>,
    id: &ReservationId,
) -> Result<(String, Vec<Line>), Error> {
    let state: String =
        sqlx::query_scalar("SELECT state FROM reservations WHERE reservation_id = $1")
            .bind(id.as_str())
            .fetch_one(&mut **tx)
            .await?;
    let rows = sqlx::query(
        "SELECT product_id, quantity FROM reservation_lines \
         WHERE reservation_id = $1 ORDER BY line_no",
    )
    .bind(id.as_str())
    .fetch_all(&mut **tx)
    .await?;
    let lines = rows
        .iter()
        .map(|row| {
            Ok(Line {
                product_id: ProductId::from_stored(row.try_get("product_id")?),
                quantity: row.try_get("quantity")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    Ok((state, lines))
}

/// Now, in Unix milliseconds (the stored time format).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
