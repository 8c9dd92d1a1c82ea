//! A pooled Postgres connection is pinged before it is handed out only when
//! it has been idle for [`ALIVE_BYPASS`] or longer (`db.rs` says why).
//!
//! Both sides of the rule are shown with a connection whose server process
//! was terminated while it sat in the pool: handed out again at once, it is
//! not checked, so the first statement on it fails (the cost the window
//! accepts); handed out after the window, the ping finds it dead, the pool
//! opens another and the statement succeeds.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use shopeasy_runtime::{
    db::{ALIVE_BYPASS, Database},
    settings::common::PoolSettings,
};
use shopeasy_testkit::TestDatabase;
use sqlx::{Connection, PgConnection};
use tokio::time::Instant;

/// A scratch database, a pool of one connection on it (so every checkout is
/// the same one), and a connection of its own to terminate backends from;
/// `None` when no test Postgres is configured.
async fn setup() -> Option<(TestDatabase, Database, PgConnection)> {
    let test_db = shopeasy_testkit::postgres().await?;
    let settings = PoolSettings {
        max_connections: 1,
        ..PoolSettings::default()
    };
    let db = Database::connect_lazy(test_db.url(), &settings).unwrap();
    let admin = PgConnection::connect(test_db.url()).await.unwrap();
    Some((test_db, db, admin))
}

/// The backend of the pool's connection, and when it was back in the pool
/// (sqlx returns a connection from a task of its own, after a check).
async fn backend(db: &Database) -> (i32, Instant) {
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(db.pool())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while db.pool().num_idle() < 1 {
        assert!(Instant::now() < deadline, "the connection never came back");
        tokio::task::yield_now().await;
    }
    (pid, Instant::now())
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

#[tokio::test]
async fn a_connection_back_within_the_window_is_not_pinged() {
    let Some((_test_db, db, mut admin)) = setup().await else {
        return;
    };
    // Terminating and confirming takes a few milliseconds; on a machine so
    // busy that it took half the window, try again rather than judge a
    // checkout that may fall outside it.
    for _ in 0..5 {
        let (pid, released) = backend(&db).await;
        terminate(&mut admin, pid).await;
        if released.elapsed() >= ALIVE_BYPASS / 2 {
            // Let the next round start from a live connection.
            let _ = sqlx::query("SELECT 1").execute(db.pool()).await;
            continue;
        }
        let first = sqlx::query("SELECT 1").execute(db.pool()).await;
        assert!(
            first.is_err(),
            "handed out {:?} after use, the dead connection was pinged and replaced",
            released.elapsed()
        );
        // The failed connection is dropped on its way back: the next
        // checkout opens a new one.
        let (again, _) = backend(&db).await;
        assert_ne!(again, pid);
        return;
    }
    panic!("the machine never terminated a backend within half the window");
}

#[tokio::test]
async fn a_connection_idle_past_the_window_is_pinged_and_replaced_when_dead() {
    let Some((_test_db, db, mut admin)) = setup().await else {
        return;
    };
    let (pid, released) = backend(&db).await;
    terminate(&mut admin, pid).await;
    // The rule is about idle time itself: let the window pass.
    tokio::time::sleep_until(released + ALIVE_BYPASS + Duration::from_millis(50)).await;
    let (replaced, _) = backend(&db).await;
    assert_ne!(
        replaced, pid,
        "the statement ran on a new connection, the dead one found by the ping"
    );
}
