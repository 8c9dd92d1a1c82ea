//! One database per service, Postgres or SQLite, chosen by URL.
//!
//! **How the two backends are served.** Every service writes one portable SQL
//! dialect and runs it through sqlx's `Any` driver: `$1` placeholders (SQLite
//! accepts them), `TEXT` ids (UUIDs in text form), `BIGINT` counts and
//! Unix-millisecond timestamps, `INSERT … ON CONFLICT`, `UPDATE … RETURNING`.
//! Where Postgres has something SQLite lacks and correctness or deadlines need
//! it (`SET LOCAL statement_timeout`, `FOR UPDATE SKIP LOCKED`), the store
//! asks [`Database::backend`] and adds it. One dialect keeps one set of
//! migrations per service (`migrations/<service>/`) and one store
//! implementation, tested against both backends.
//!
//! SQLite runs in WAL mode with one writer: every write goes through
//! [`Database::writer`], a pool of **one** connection, and write
//! transactions begin with `BEGIN IMMEDIATE` ([`Database::begin_write`]).
//! Writers therefore queue in the process, first come first served, and each
//! is woken the moment the one before it commits. Left to SQLite, a writer
//! that finds the lock taken sleeps in its busy handler in steps of 1, 2, 5,
//! 10 … 100 ms whatever the holder's commit takes (under a few hundred
//! orders a second, measured: p99 110–280 ms for commits of about a
//! millisecond, and the admission limit learning that as the service time).
//! The busy timeout stays as the backstop against another process.

use std::{
    borrow::Cow,
    path::Path,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use sqlx::{
    AnyConnection, AnyPool, Connection, Executor,
    any::{AnyConnectOptions, AnyPoolOptions},
    migrate::{Migration, MigrationType, Migrator},
};

use crate::settings::common::PoolSettings;

pub mod group_commit;
pub mod thread_priority;
pub use group_commit::BoxFuture;

/// A pooled Postgres connection that answered within this long is handed
/// to [`Database::one_round_trip`] without a ping first (HikariCP's
/// `aliveBypassWindowMs`, same value); everywhere else, and after a longer
/// idle, sqlx's checkout ping stays.
///
/// **Why.** A keyed order is three one-statement commits (order's two,
/// Inventory's one), and each took three round trips: a ping when the
/// connection is checked out, the statement, and the ping sqlx sends when
/// it goes back (off the request's path, not configurable). Skipping the
/// checkout ping of a connection that just answered takes a third of them
/// (`crates/order/README.md`).
///
/// **What keeps it safe.** The ping is what bounded a write on a hung
/// database: it runs inside the acquire timeout, so a server that stopped
/// answering is a pool timeout (503), not a request that waits until its
/// caller gives up. Without it, the statement's own answer is the check,
/// and [`Database::one_round_trip`] bounds it by the same acquire timeout.
/// What the window still costs: a connection whose server process died
/// within it fails its next statement (the caller's 503 or retry) instead
/// of being replaced unseen. One such failure turns the bypass off for the
/// next window, so after a restart or a reset the pool's other
/// connections are pinged and replaced as before, and one statement pays,
/// not one per pooled connection (`tests/one_round_trip.rs`).
pub const ALIVE_BYPASS: Duration = Duration::from_millis(500);

/// Whether [`Database::one_round_trip`] may skip the ping now: not for
/// [`ALIVE_BYPASS`] after a statement lost its connection. Shared by the
/// pool's hook and the database handle; one atomic, read per checkout.
#[derive(Debug)]
struct Bypass {
    /// The clock's origin for `off_until_ms`.
    origin: tokio::time::Instant,
    /// Milliseconds since `origin` until which every checkout is pinged.
    off_until_ms: AtomicU64,
}

impl Bypass {
    fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
            off_until_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn allowed(&self) -> bool {
        self.now_ms() >= self.off_until_ms.load(Ordering::Relaxed)
    }

    /// A statement lost its connection: others of the same pool may be as
    /// dead, so ping every checkout for the next window.
    fn suspend(&self) {
        let window = u64::try_from(ALIVE_BYPASS.as_millis()).unwrap_or(u64::MAX);
        self.off_until_ms
            .store(self.now_ms().saturating_add(window), Ordering::Relaxed);
    }
}

/// The histogram of how long SQLite's one writer connection is held per
/// checkout (a write transaction, or a statement of
/// [`Database::one_round_trip`]), labelled `database` with the file's stem.
///
/// **Why.** On SQLite every write of a service queues for that one
/// connection, so the sum of these holds per second is the writer's
/// utilisation (`rate(…_sum[1m])`; 1 is saturated), and an embedded
/// system's capacity is the busiest writer's. The hold is a commit's whole
/// span on the connection: each statement's hand-off to SQLite's worker
/// thread and back, the waits of the task in between, the WAL writes and a
/// checkpoint when one falls due.
pub const WRITER_HOLD: &str = "shopeasy_db_writer_hold_duration_seconds";

/// When the writer connection was checked out (`None`: not held, or
/// handed out fresh, before the hook saw it), for [`WRITER_HOLD`].
#[derive(Debug)]
struct WriterHold {
    since: std::sync::Mutex<Option<tokio::time::Instant>>,
    held: metrics::Histogram,
}

impl WriterHold {
    fn new(database: String) -> Self {
        Self {
            since: std::sync::Mutex::new(None),
            held: metrics::histogram!(WRITER_HOLD, "database" => database),
        }
    }

    fn since(&self) -> std::sync::MutexGuard<'_, Option<tokio::time::Instant>> {
        self.since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn acquired(&self) {
        *self.since() = Some(tokio::time::Instant::now());
    }

    fn released(&self) {
        if let Some(since) = self.since().take() {
            self.held.record(since.elapsed().as_secs_f64());
        }
    }
}

tokio::task_local! {
    /// Set while [`Database::one_round_trip`] checks a connection out: the
    /// pool's `before_acquire` hook skips the ping for it (within
    /// [`ALIVE_BYPASS`]) and for no one else.
    static ANSWER_IS_THE_CHECK: ();
}

/// Which database server a [`Database`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL (`postgres://`).
    Postgres,
    /// SQLite (`sqlite:`), embedded.
    Sqlite,
}

/// Why the database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL's scheme is neither `postgres` nor `sqlite`.
    #[error("unsupported database URL scheme (use postgres:// or sqlite:)")]
    UnsupportedUrl,
    /// The SQLite file's folder could not be created.
    #[error("cannot create the folder of the SQLite file: {0}")]
    Folder(#[source] std::io::Error),
    /// The database did not answer, or answered with an error.
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    /// Migrations failed.
    #[error("migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// A pool to the service's own database.
#[derive(Debug, Clone)]
pub struct Database {
    pool: AnyPool,
    /// The pool writes go through: `pool` itself on Postgres, one
    /// connection of its own on SQLite (see the module's docs).
    writer: AnyPool,
    backend: Backend,
    /// Whether the checkout ping may be skipped now.
    bypass: Arc<Bypass>,
    /// SQLite: the queue of [`Database::write`]'s group commits, started
    /// by the first write (inside the runtime), shared by every clone.
    group: Arc<OnceLock<group_commit::Queue>>,
    /// SQLite: the file's stem, the `database` label of its metrics.
    label: Arc<str>,
}

impl Database {
    /// Creates the pool without connecting yet (the first query connects), so
    /// a service can start — live but not ready — while its database is down.
    ///
    /// # Errors
    /// When the URL is not a Postgres or SQLite URL, or a SQLite file's folder
    /// cannot be created.
    pub fn connect_lazy(url: &str, settings: &PoolSettings) -> Result<Self, DbError> {
        sqlx::any::install_default_drivers();
        let (backend, url) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, Cow::Borrowed(url))
        } else if let Some(rest) = url.strip_prefix("sqlite:") {
            (Backend::Sqlite, Cow::Owned(sqlite_url(rest)?))
        } else {
            return Err(DbError::UnsupportedUrl);
        };
        let options: AnyConnectOptions = url.parse()?;
        let statement_timeout = settings.statement_timeout_seconds.get();
        let bypass = Arc::new(Bypass::new());
        // Only SQLite's one writer is a queue worth timing.
        let label = database_label(&url);
        let writer_hold =
            (backend == Backend::Sqlite).then(|| Arc::new(WriterHold::new(label.clone())));
        let pool_of = |max_connections: u32, hold: Option<Arc<WriterHold>>| {
            // The release hook only where a hold is timed: none on other pools.
            let timed = |options: AnyPoolOptions| match hold.clone() {
                Some(released) => options.after_release(move |_conn, _meta| {
                    released.released();
                    Box::pin(async { Ok(true) })
                }),
                None => options,
            };
            timed(AnyPoolOptions::new())
                .max_connections(max_connections)
                .acquire_timeout(settings.acquire_timeout_seconds.get())
                // A SQLite file cannot drop a connection: the check would be
                // one more hop to its worker thread per acquire, for nothing.
                // Postgres: a ping per checkout, except for a connection
                // that answered within `ALIVE_BYPASS` and goes to
                // `one_round_trip`, whose answer is bounded instead.
                .test_before_acquire(false)
                .before_acquire({
                    let bypass = bypass.clone();
                    move |conn, meta| {
                        if let Some(hold) = &hold {
                            hold.acquired();
                        }
                        let answer_checks = meta.idle_for < ALIVE_BYPASS
                            && ANSWER_IS_THE_CHECK.try_with(|()| ()).is_ok()
                            && bypass.allowed();
                        Box::pin(async move {
                            if backend == Backend::Postgres && !answer_checks {
                                conn.ping().await?;
                            }
                            Ok(true)
                        })
                    }
                })
                .after_connect(move |conn, _meta| {
                    Box::pin(async move {
                        match backend {
                            Backend::Postgres => {
                                let ms = statement_timeout.as_millis();
                                conn.execute(sqlx::AssertSqlSafe(format!(
                                    "SET statement_timeout = {ms}; SET lock_timeout = {ms}"
                                )))
                                .await?;
                            }
                            Backend::Sqlite => {
                                conn.execute(
                                    "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; \
                                     PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON",
                                )
                                .await?;
                                // The writer's thread is the embedded
                                // system's bottleneck: first on the CPU.
                                thread_priority::raise();
                            }
                        }
                        Ok(())
                    })
                })
                .connect_lazy_with(options.clone())
        };
        let (pool, writer) = match backend {
            Backend::Postgres => {
                let pool = pool_of(settings.max_connections, None);
                (pool.clone(), pool)
            }
            // A few readers alongside the one writer (WAL).
            Backend::Sqlite => (
                pool_of(settings.max_connections.min(4), None),
                pool_of(1, writer_hold),
            ),
        };
        Ok(Self {
            pool,
            writer,
            backend,
            bypass,
            group: Arc::new(OnceLock::new()),
            label: label.into(),
        })
    }

    /// Creates the pool and runs `migrator`, retrying while the database does
    /// not answer, for at most `settings.startup_timeout_seconds`.
    ///
    /// Safe with several replicas: on Postgres, sqlx takes an advisory lock
    /// around the migrations.
    ///
    /// # Errors
    /// The last error when the database never answered in time, or at once
    /// when a migration itself fails.
    pub async fn connect_and_migrate(
        url: &str,
        settings: &PoolSettings,
        migrator: &Migrator,
    ) -> Result<Self, DbError> {
        let db = Self::connect_lazy(url, settings)?;
        // sqlx locks migrations on Postgres only (an advisory lock); SQLite is
        // one process's file, so one lock per process makes it just as safe.
        static SQLITE_MIGRATIONS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _guard = match db.backend {
            Backend::Sqlite => Some(SQLITE_MIGRATIONS.lock().await),
            Backend::Postgres => None,
        };
        let deadline = tokio::time::Instant::now() + settings.startup_timeout_seconds.get();
        let mut delay = Duration::from_millis(100);
        loop {
            match migrator.run(&db.pool).await {
                Ok(()) => return Ok(db),
                Err(sqlx::migrate::MigrateError::Execute(e)) if is_connection_error(&e) => {
                    if tokio::time::Instant::now() + delay > deadline {
                        return Err(DbError::Sqlx(e));
                    }
                    tracing::warn!(error = %e, "database not answering yet; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The pool, for reads (and, on Postgres, everything).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The pool for a statement that writes outside a transaction of
    /// [`Database::begin_write`]: on SQLite its one connection, so writers
    /// queue here instead of in SQLite's busy handler; on Postgres the pool
    /// itself.
    pub fn writer(&self) -> &AnyPool {
        &self.writer
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// `postgres` on Postgres, `sqlite` on SQLite: the one place a store
    /// chooses between the two (a query using `FOR UPDATE`, a timer's grace
    /// period), so no store matches on [`Backend`] itself.
    pub fn pick<T>(&self, postgres: T, sqlite: T) -> T {
        match self.backend {
            Backend::Postgres => postgres,
            Backend::Sqlite => sqlite,
        }
    }

    /// Begins a transaction that will write: `BEGIN IMMEDIATE` on the
    /// writer's connection on SQLite (so the write lock is taken up front,
    /// and the next writer waits for this one in the process), a plain
    /// `BEGIN` on Postgres.
    ///
    /// # Errors
    /// When no connection can be had or the database refuses.
    pub async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.backend {
            Backend::Sqlite => self.writer.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.writer.begin().await,
        }
    }

    /// Runs `work` — the statements of one commit — in a write transaction
    /// and commits it; `Ok` only once it is committed. `work` returning an
    /// error stores none of it.
    ///
    /// On Postgres this is [`Database::begin_write`], `work`, `COMMIT`. On
    /// SQLite the write joins a group commit ([`group_commit`]): writes
    /// queued while the one writer was busy share its next transaction, a
    /// savepoint each, so they share the WAL pages a commit appends — the
    /// writer's main cost. Waiting to queue and for the answer are each
    /// bounded by the pool's acquire timeout (then `PoolTimedOut`, as when
    /// the writer could not be had); a caller that stops waiting before its
    /// write began leaves nothing behind.
    ///
    /// # Errors
    /// `work`'s error; a connection error when the transaction could not
    /// begin or commit (on SQLite: the group's), in which case nothing of
    /// this write is stored.
    pub async fn write<T, E, F>(&self, work: F) -> Result<T, E>
    where
        F: for<'c> FnOnce(&'c mut AnyConnection) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
    {
        match self.backend {
            Backend::Postgres => {
                let mut tx = self.begin_write().await?;
                let out = work(&mut tx).await?;
                tx.commit().await?;
                Ok(out)
            }
            Backend::Sqlite => {
                let queue = self
                    .group
                    .get_or_init(|| group_commit::Queue::start(self.writer.clone(), &self.label));
                let wait = self.writer.options().get_acquire_timeout();
                queue.write(work, wait).await
            }
        }
    }

    /// Runs `statement` — **one** round trip, a write in its own implicit
    /// transaction — on a connection of [`Database::writer`].
    ///
    /// On Postgres the connection comes without the checkout ping when it
    /// answered within [`ALIVE_BYPASS`], and the statement's answer is the
    /// check instead: bounded by the acquire timeout, like the ping it
    /// replaces. No answer in time → the connection, in an unknown state, is
    /// closed rather than pooled, and the caller gets a connection error
    /// ([`is_connection_error`]: 503), as when a ping times out. Whether the
    /// statement landed is then unknown, as with any lost answer: callers
    /// use it only for writes their recovery already covers (a retry with
    /// the same idempotency key or reservation id, the outbox).
    ///
    /// On SQLite it simply runs on the writer (no network to hang).
    ///
    /// # Errors
    /// When no connection can be had, the statement fails, or no answer
    /// came within the acquire timeout.
    pub async fn one_round_trip<T>(
        &self,
        statement: impl AsyncFnOnce(&mut AnyConnection) -> Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        if self.backend == Backend::Sqlite {
            let mut conn = self.writer.acquire().await?;
            return statement(&mut conn).await;
        }
        let mut conn = ANSWER_IS_THE_CHECK.scope((), self.writer.acquire()).await?;
        // The bound of the ping this statement replaces: the acquire timeout.
        let answer_within = self.writer.options().get_acquire_timeout();
        let answer = match tokio::time::timeout(answer_within, statement(&mut conn)).await {
            Ok(answer) => answer,
            Err(_) => {
                // Not back to the pool: closed here, its slot freed at once.
                drop(conn.detach());
                Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the database did not answer within the acquire timeout",
                )))
            }
        };
        if answer.as_ref().is_err_and(connection_lost) {
            self.bypass.suspend();
        }
        answer
    }

    /// `SELECT 1`, for readiness.
    ///
    /// # Errors
    /// When the database does not answer.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        self.pool.execute("SELECT 1").await.map(|_| ())
    }
}

/// True for errors that mean "the database could not be reached" (as opposed
/// to a query the database rejected): callers map these to 503 / UNAVAILABLE.
pub fn is_connection_error(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed
    )
}

/// True when the statement's connection is gone: it could not be used
/// ([`is_connection_error`]) or the server closed it — class `57P`,
/// operator intervention (`pg_terminate_backend`, a shutdown, a restart).
fn connection_lost(e: &sqlx::Error) -> bool {
    is_connection_error(e)
        || e.as_database_error()
            .and_then(|d| d.code())
            .is_some_and(|c| c.starts_with("57P"))
}

/// True when Postgres cancelled the statement (`57014` query_canceled):
/// our `statement_timeout` fired.
pub fn is_statement_timeout(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "57014")
}

/// True for errors worth trying again later, which callers map to 503 /
/// UNAVAILABLE: the database could not be reached
/// ([`is_connection_error`]) or answered "not now" — Postgres
/// `53300` too many connections, `57P03` cannot connect now, `57P01`
/// shutting down, `40001` serialization failure, `40P01` deadlock,
/// `55P03` lock not available; SQLite busy / locked (`5`, `6`, `517`).
pub fn is_transient(e: &sqlx::Error) -> bool {
    if is_connection_error(e) {
        return true;
    }
    let code = e.as_database_error().and_then(|d| d.code());
    matches!(
        code.as_deref(),
        Some("53300" | "57P03" | "57P01" | "40001" | "40P01" | "55P03" | "5" | "6" | "517")
    )
}

/// The `database` label of a SQLite URL: its file's stem (`order` for
/// `sqlite:///data/order.db?mode=rwc`), so the label set is the services'
/// files, never a path.
fn database_label(url: &str) -> String {
    let path = url.strip_prefix("sqlite:").unwrap_or(url);
    let file = path.split_once('?').map_or(path, |(file, _)| file);
    Path::new(file)
        .file_stem()
        .and_then(|s| s.to_str())
        .map_or_else(
            || "sqlite".to_owned(),
            |s| s.trim_start_matches(':').trim_end_matches(':').to_owned(),
        )
}

/// Builds a SQLite URL that creates the file (and its folder) when missing.
fn sqlite_url(rest: &str) -> Result<String, DbError> {
    let path = rest.trim_start_matches("//");
    let (file, query) = path.split_once('?').unwrap_or((path, ""));
    if file != ":memory:"
        && let Some(dir) = Path::new(file)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).map_err(DbError::Folder)?;
    }
    let query = if query.contains("mode=") {
        query.to_owned()
    } else if query.is_empty() {
        "mode=rwc".to_owned()
    } else {
        format!("{query}&mode=rwc")
    };
    Ok(format!("sqlite://{file}?{query}"))
}

/// Builds a migrator from migrations embedded in the binary, so a deployed
/// service needs no migration files on disk.
///
/// Each entry is `(version, description, sql)`; use `include_str!` on the
/// files of `migrations/<service>/`, named `<version>_<description>.sql`.
pub fn migrator(migrations: &[(i64, &'static str, &'static str)]) -> Migrator {
    Migrator::with_migrations(
        migrations
            .iter()
            .map(|&(version, description, sql)| {
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    sqlx::SqlSafeStr::into_sql_str(sql),
                    false,
                )
            })
            .collect(),
    )
}

/// The migration files in `dir` as `(version, description)`, sorted: lets a
/// service test that its embedded list matches the folder.
///
/// # Errors
/// When the folder cannot be read.
pub fn migration_files(dir: &Path) -> std::io::Result<Vec<(i64, String)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".sql") else {
            continue;
        };
        if let Some((v, d)) = stem.split_once('_')
            && let Ok(v) = v.parse()
        {
            out.push((v, d.to_owned()));
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_create_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a/b/x.db");
        let url = sqlite_url(file.to_str().unwrap()).unwrap();
        assert!(url.ends_with("x.db?mode=rwc"), "{url}");
        assert!(dir.path().join("a/b").is_dir());
        assert_eq!(
            sqlite_url(":memory:").unwrap(),
            "sqlite://:memory:?mode=rwc"
        );
    }

    #[test]
    fn a_writers_label_is_its_files_stem() {
        assert_eq!(
            database_label("sqlite:///srv/data/order.db?mode=rwc"),
            "order"
        );
        assert_eq!(database_label("sqlite:/tmp/x/inventory.db"), "inventory");
        assert_eq!(database_label("sqlite://:memory:?mode=rwc"), "memory");
    }

    #[test]
    fn other_schemes_are_refused() {
        let err = Database::connect_lazy("mysql://x", &PoolSettings::default()).unwrap_err();
        assert!(matches!(err, DbError::UnsupportedUrl));
    }
}
