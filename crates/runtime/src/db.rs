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

use std::{borrow::Cow, path::Path, time::Duration};

use sqlx::{
    AnyPool, Executor,
    any::{AnyConnectOptions, AnyPoolOptions},
    migrate::{Migration, MigrationType, Migrator},
};

use crate::settings::common::PoolSettings;

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
        let pool_of = |max_connections: u32| {
            AnyPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(settings.acquire_timeout_seconds.get())
                // A SQLite file cannot drop a connection: the check would be
                // one more hop to its worker thread per acquire, for nothing.
                .test_before_acquire(backend == Backend::Postgres)
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
                            }
                        }
                        Ok(())
                    })
                })
                .connect_lazy_with(options.clone())
        };
        let (pool, writer) = match backend {
            Backend::Postgres => {
                let pool = pool_of(settings.max_connections);
                (pool.clone(), pool)
            }
            // A few readers alongside the one writer (WAL).
            Backend::Sqlite => (pool_of(settings.max_connections.min(4)), pool_of(1)),
        };
        Ok(Self {
            pool,
            writer,
            backend,
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
    fn other_schemes_are_refused() {
        let err = Database::connect_lazy("mysql://x", &PoolSettings::default()).unwrap_err();
        assert!(matches!(err, DbError::UnsupportedUrl));
    }
}
