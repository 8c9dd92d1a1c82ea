//! Test support for ShopEasy (a dev-dependency only).
//!
//! - [`postgres`]: a fresh Postgres database per test, dropped afterwards.
//! - [`sqlite`]: a SQLite file in a temporary folder.
//! - [`redis_url`] and [`key_prefix`]: the shared Redis, isolated by prefix;
//!   [`PrivateRedis`]: a `redis-server` of the test's own that it may stop,
//!   freeze (SIGSTOP) and restart.
//! - [`wait`]: [`eventually`] and [`assert_eventually`], the one bounded
//!   poll every crate's tests wait with.
//! - [`http`]: [`get_json`], a GET whose JSON answer a test asserts on.
//! - [`find_program`]: a tool a test drives (a browser, a fuzzer), found
//!   by its variable or on `PATH`.
//! - [`Metrics`]: a `/metrics` page parsed, looked up by name and labels:
//!   the console's reader (`shopeasy_console::prom`), so tests read the
//!   page exactly as the console and the overload sweep do.
//! - [`quantile`]: the nearest-rank rule of every latency figure
//!   ShopEasy prints (the console's, re-exported), so that a test's p99
//!   and the load generator's mean the same.
//!
//! Tests that need a server read `SHOPEASY_TEST_POSTGRES` (a URL to a
//! database the test user may create databases from) and
//! `SHOPEASY_TEST_REDIS`. When a variable is unset the helper prints one line
//! saying the test was skipped and why, and returns `None` — unless
//! `SHOPEASY_REQUIRE_SERVICES=1`, when it panics, so CI cannot skip silently.

use std::{
    net::{SocketAddr, TcpListener},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use sqlx::{Connection, Executor, PgConnection};

pub mod http;
pub mod wait;

pub use http::get_json;
pub use shopeasy_console::load::quantile;
/// A parsed `/metrics` page under the name tests read it by.
pub use shopeasy_console::prom::Page as Metrics;
pub use shopeasy_console::prom::{Sample, metric_sum};
pub use wait::{assert_eventually, eventually};

/// Variable naming the Postgres server for tests.
pub const POSTGRES_VAR: &str = "SHOPEASY_TEST_POSTGRES";
/// Variable naming the Redis server for tests.
pub const REDIS_VAR: &str = "SHOPEASY_TEST_REDIS";
/// Variable that turns a skip into a failure.
pub const REQUIRE_VAR: &str = "SHOPEASY_REQUIRE_SERVICES";

fn required() -> bool {
    std::env::var(REQUIRE_VAR).is_ok_and(|v| v == "1")
}

/// Announces a skipped test, or fails it when services are required.
///
/// # Panics
/// When `SHOPEASY_REQUIRE_SERVICES=1`.
pub fn skip(what: &str, reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_owned();
    assert!(
        !required(),
        "{test}: {what} is required ({REQUIRE_VAR}=1) but {reason}"
    );
    // Written to the stderr handle, not with eprintln!, which the test
    // harness captures: a skip must be seen even when the test passes.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: needs {what}; {reason}");
}

/// A tool a test drives (a browser, a fuzzer): the program `var` names,
/// or else the first of `names` found on `PATH`; `None` when neither is
/// there, for the caller to [`skip`].
pub fn find_program(names: &[&str], var: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(var).map(PathBuf::from) {
        return path.is_file().then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// A database of the test's own. Postgres databases are dropped when this
/// value is dropped; SQLite files go with their temporary folder.
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    admin_url: Option<String>,
    name: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDatabase {
    /// The URL to give the service (`DATABASE_URL`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name (Postgres) or file (SQLite).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True for a Postgres database.
    pub fn is_postgres(&self) -> bool {
        self.admin_url.is_some()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let Some(admin) = self.admin_url.clone() else {
            return;
        };
        let name = self.name.clone();
        // Drop may run inside a runtime; use a thread with its own.
        let dropped = on_own_thread(move || async move {
            let mut conn = PgConnection::connect(&admin).await.ok()?;
            let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
            conn.execute(sqlx::AssertSqlSafe(sql)).await.ok()
        });
        if !matches!(dropped, Ok(Some(_))) {
            eprintln!("warning: could not drop test database {}", self.name);
        }
    }
}

/// Runs the future `work` makes to completion on a new thread with a
/// current-thread runtime of its own, and returns its output: for what must
/// not depend on the caller's runtime (inside `Drop`, or while a test holds
/// that runtime blocked on purpose).
///
/// # Errors
/// The panic of `work` (or of building the runtime), as `join` gives it.
pub fn on_own_thread<T, F>(work: impl FnOnce() -> F + Send + 'static) -> std::thread::Result<T>
where
    F: Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
            .block_on(work())
    })
    .join()
}

/// A fresh, empty Postgres database, or `None` (announced) when
/// `SHOPEASY_TEST_POSTGRES` is unset.
///
/// # Panics
/// When the server cannot be reached or the database cannot be created, or
/// when the variable is unset and services are required.
pub async fn postgres() -> Option<TestDatabase> {
    let Ok(admin) = std::env::var(POSTGRES_VAR) else {
        skip("Postgres", &format!("{POSTGRES_VAR} is not set"));
        return None;
    };
    let name = format!("shopeasy_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("{POSTGRES_VAR}={admin}: cannot connect: {e}"));
    conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .await
        .unwrap_or_else(|e| panic!("cannot create database {name}: {e}"));
    let mut url = url::Url::parse(&admin).expect("SHOPEASY_TEST_POSTGRES is a URL");
    url.set_path(&name);
    Some(TestDatabase {
        url: url.to_string(),
        admin_url: Some(admin),
        name,
        _dir: None,
    })
}

/// A SQLite database in a fresh temporary folder.
///
/// # Panics
/// When no temporary folder can be made.
pub fn sqlite() -> TestDatabase {
    let dir = tempfile::tempdir().expect("temporary folder");
    let file: PathBuf = dir.path().join("test.db");
    TestDatabase {
        url: format!("sqlite:{}", file.display()),
        admin_url: None,
        name: file.display().to_string(),
        _dir: Some(dir),
    }
}

/// Every backend available: SQLite always, Postgres when configured. Store
/// contract tests loop over this.
pub async fn all_backends() -> Vec<TestDatabase> {
    let mut out = vec![sqlite()];
    out.extend(postgres().await);
    out
}

/// The shared Redis URL, or `None` (announced) when `SHOPEASY_TEST_REDIS` is
/// unset. Isolate keys with [`key_prefix`].
pub fn redis_url() -> Option<String> {
    let url = std::env::var(REDIS_VAR).ok();
    if url.is_none() {
        skip("Redis", &format!("{REDIS_VAR} is not set"));
    }
    url
}

/// A key prefix no other test uses.
pub fn key_prefix() -> String {
    format!("test:{}:", uuid::Uuid::new_v4().simple())
}

/// A port that was free a moment ago (for servers that cannot bind port 0
/// and report it, such as `redis-server`).
///
/// The port is chosen below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`), at random: a port from port 0 lies in
/// that range, and between this call and the server's own bind the kernel may
/// hand it out as the source port of any of the many connections tests open
/// meanwhile, so the server cannot bind it (seen as a process that never
/// became ready, or a gateway's connection refused).
///
/// A port is never handed out twice in one test process: a port chosen
/// for one server is still free until that server binds it, so without
/// this two servers of one test could be given the same port (seen: an
/// admin listener and a service's listener, one of them failing with
/// `Address already in use`).
///
/// # Panics
/// When no port can be bound.
pub fn free_port() -> u16 {
    use std::{
        collections::HashSet,
        sync::{LazyLock, Mutex, PoisonError},
    };
    const FLOOR: u16 = 10_000;
    static GIVEN: LazyLock<Mutex<HashSet<u16>>> = LazyLock::new(Mutex::default);
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if low > FLOOR + 1_000 {
        for _ in 0..256 {
            let port = rand::random_range(FLOOR..low);
            if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return port;
            }
        }
    }
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if given.insert(port) {
            return port;
        }
    }
}

/// A `redis-server` of the test's own on an ephemeral port, killed on drop.
#[derive(Debug)]
pub struct PrivateRedis {
    child: Option<Child>,
    port: u16,
}

impl PrivateRedis {
    /// Starts one and waits until it answers, or returns `None` (announced)
    /// when `redis-server` is not installed.
    ///
    /// # Panics
    /// When it starts but does not answer within 5 s.
    pub async fn start() -> Option<Self> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            skip("redis-server", "it is not installed");
            return None;
        }
        let mut redis = Self {
            child: None,
            port: free_port(),
        };
        redis.spawn().await;
        Some(redis)
    }

    async fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let what = format!("private redis-server on port {} answers", self.port);
        assert_eventually(Duration::from_secs(5), what, async || self.ping().await).await;
    }

    async fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(Ok(mut conn)) = tokio::time::timeout(
            Duration::from_millis(200),
            client.get_multiplexed_async_connection(),
        )
        .await
        else {
            return false;
        };
        let pong: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
        pong.is_ok()
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            let ok = Command::new("kill")
                .args([sig, &child.id().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill {sig} redis-server");
        }
    }

    /// Freezes it (SIGSTOP): connections stay open, nothing answers.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Thaws it (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Kills it (SIGKILL); [`PrivateRedis::restart`] brings it back on the
    /// same port.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (empty).
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.thaw();
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    /// Far more ports than one test asks for, from a range of about 22,000:
    /// chosen at random alone, some would repeat (about 90 pairs expected).
    #[test]
    fn a_port_is_never_handed_out_twice() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2_000 {
            let port = super::free_port();
            assert!(seen.insert(port), "port {port} handed out twice");
        }
    }
}
