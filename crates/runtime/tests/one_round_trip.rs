//! [`Database::one_round_trip`]: a connection that answered within
//! [`ALIVE_BYPASS`] is handed to it without sqlx's checkout ping, and its
//! statement's answer is bounded by the acquire timeout instead (`db.rs`
//! says why).
//!
//! The ping's absence is shown with a connection whose server process was
//! terminated while it sat in the pool: handed to `one_round_trip` at once,
//! it is not checked and the statement fails (the cost the window accepts);
//! handed to anyone else, or after the window, the ping finds it dead and
//! the pool opens another. The bound is shown with a server process that
//! stops answering (`SIGSTOP`, a real hang of the backend behind the
//! connection): a connection error within the acquire timeout, and the
//! connection closed rather than pooled.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use shopeasy_runtime::{
    db::{ALIVE_BYPASS, Database, is_connection_error, is_transient},
    settings::{Seconds, common::PoolSettings},
};
use shopeasy_testkit::TestDatabase;
use sqlx::{AnyConnection, Connection, PgConnection};
use tokio::time::Instant;

/// The acquire timeout of these pools: the bound under test.
const ACQUIRE: Duration = Duration::from_millis(300);

/// A scratch database, a pool of `connections` on it (one: every checkout
/// is the same connection), and a connection of its own to terminate
/// backends from; `None` when no test Postgres is configured.
async fn setup(connections: u32) -> Option<(TestDatabase, Database, PgConnection)> {
    let test_db = shopeasy_testkit::postgres().await?;
    let settings = PoolSettings {
        max_connections: connections,
        acquire_timeout_seconds: Seconds::new(ACQUIRE.as_secs_f64()),
        ..PoolSettings::default()
    };
    let db = Database::connect_lazy(test_db.url(), &settings).unwrap();
    let admin = PgConnection::connect(test_db.url()).await.unwrap();
    Some((test_db, db, admin))
}

/// `SELECT pg_backend_pid()` through `one_round_trip`.
async fn pid_in_one_round_trip(db: &Database) -> Result<i32, sqlx::Error> {
    db.one_round_trip(async |conn: &mut AnyConnection| {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(conn)
            .await
    })
    .await
}

/// The backends of `n` of the pool's connections, checked out at once, and
/// when they were all back in the pool (sqlx returns a connection from a
/// task of its own, after a check).
async fn backends(db: &Database, n: usize) -> (Vec<i32>, Instant) {
    let held = futures::future::try_join_all((0..n).map(|_| db.pool().acquire()))
        .await
        .unwrap();
    let mut pids = Vec::new();
    for mut conn in held {
        pids.push(
            sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut *conn)
                .await
                .unwrap(),
        );
    }
    idle_again(db, n).await;
    (pids, Instant::now())
}

/// Waits until `n` of the pool's connections are idle again.
async fn idle_again(db: &Database, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while db.pool().num_idle() < n {
        assert!(Instant::now() < deadline, "the connections never came back");
        tokio::task::yield_now().await;
    }
}

/// Terminates `pid` and waits until Postgres no longer lists it.
async fn terminate(admin: &mut PgConnection, pid: i32) {
    let done: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut *admin)
        .await
        .unwrap();
    assert!(done, "backend {pid} terminated");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_one(&mut *admin)
            .await
            .unwrap();
        if left == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "backend {pid} still listed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs `checkout` once the backends of `n` pooled connections were
/// terminated just after they went back to the pool, within half the window
/// (retried on a machine too busy for that). Returns the terminated pids and
/// what `checkout` got.
async fn checkout_of_fresh_corpses<T>(
    db: &Database,
    admin: &mut PgConnection,
    n: usize,
    checkout: impl AsyncFn(&Database) -> T,
) -> (Vec<i32>, T) {
    for _ in 0..5 {
        let (pids, released) = backends(db, n).await;
        for &pid in &pids {
            terminate(admin, pid).await;
        }
        if released.elapsed() < ALIVE_BYPASS / 2 {
            return (pids, checkout(db).await);
        }
        // Let the next round start from live connections.
        let _ = sqlx::query("SELECT 1").execute(db.pool()).await;
    }
    panic!("the machine never terminated {n} backends within half the window");
}

#[tokio::test]
async fn within_the_window_one_round_trip_skips_the_ping() {
    let Some((_test_db, db, mut admin)) = setup(1).await else {
        return;
    };
    let (pids, first) = checkout_of_fresh_corpses(&db, &mut admin, 1, pid_in_one_round_trip).await;
    let error = first.expect_err("the dead connection was pinged and replaced");
    // Postgres says goodbye (57P01) before it closes: worth a retry (503).
    assert!(is_transient(&error), "{error}");
    // The failed connection is dropped on its way back: the next checkout
    // opens a new one.
    let again = pid_in_one_round_trip(&db).await.unwrap();
    assert_ne!(again, pids[0]);
}

#[tokio::test]
async fn within_the_window_every_other_checkout_is_still_pinged() {
    let Some((_test_db, db, mut admin)) = setup(1).await else {
        return;
    };
    let (pids, replaced) = checkout_of_fresh_corpses(&db, &mut admin, 1, async |db: &Database| {
        sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()")
            .fetch_one(db.pool())
            .await
    })
    .await;
    assert_ne!(
        replaced.unwrap(),
        pids[0],
        "a plain checkout ran on a new connection, the dead one found by the ping"
    );
}

#[tokio::test]
async fn past_the_window_one_round_trip_is_pinged_too() {
    let Some((_test_db, db, mut admin)) = setup(1).await else {
        return;
    };
    let (pids, released) = backends(&db, 1).await;
    terminate(&mut admin, pids[0]).await;
    tokio::time::sleep_until(released + ALIVE_BYPASS + Duration::from_millis(50)).await;
    let replaced = pid_in_one_round_trip(&db).await.unwrap();
    assert_ne!(
        replaced, pids[0],
        "the statement ran on a new connection, the dead one found by the ping"
    );
}

#[tokio::test]
async fn one_lost_connection_turns_the_bypass_off_for_the_others() {
    let Some((_test_db, db, mut admin)) = setup(3).await else {
        return;
    };
    let (pids, (first, second)) =
        checkout_of_fresh_corpses(&db, &mut admin, 3, async |db: &Database| {
            (
                pid_in_one_round_trip(db).await,
                pid_in_one_round_trip(db).await,
            )
        })
        .await;
    // The first pays for the restart...
    assert!(first.is_err(), "a dead connection answered");
    // ...and the next one, still within the window, is pinged: the pool
    // finds its other dead connections and opens a new one.
    assert!(
        !pids.contains(&second.unwrap()),
        "ran on a terminated backend"
    );
}

/// Sends `signal` to a local Postgres backend (the tests run where the
/// server runs, as root or as its user).
fn signal(pid: i32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Lets a stopped backend run again, even when the test fails first.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

#[tokio::test]
async fn a_hung_server_is_a_connection_error_within_the_acquire_timeout() {
    let Some((_test_db, db, _admin)) = setup(1).await else {
        return;
    };
    let pid = pid_in_one_round_trip(&db).await.unwrap();
    idle_again(&db, 1).await;
    signal(pid, "STOP");
    let resume = Resume(pid);

    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(5), pid_in_one_round_trip(&db))
        .await
        .expect("a hung server's statement was not bounded");
    let took = started.elapsed();
    let error = answer.expect_err("a stopped backend answered");
    assert!(is_connection_error(&error), "{error}");
    // At the acquire timeout (the ping would have been skipped: the
    // connection had just answered), not much later.
    assert!(
        took >= ACQUIRE && took < ACQUIRE + Duration::from_millis(700),
        "answered after {took:?}"
    );

    // The hung connection was closed, not pooled: with one slot, the next
    // statement gets a new connection at once, while the old backend is
    // still stopped.
    let next = pid_in_one_round_trip(&db).await.unwrap();
    assert_ne!(next, pid);
    drop(resume);
}
