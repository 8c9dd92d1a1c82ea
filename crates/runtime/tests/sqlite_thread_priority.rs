//! SQLite's threads run ahead of the async workers on the CPU: each new
//! connection raises every SQLite thread of the process
//! `thread_priority::RAISE` nice steps above the thread that connects —
//! where the process may (`CAP_SYS_NICE`: root, as CI runs); elsewhere
//! nothing changes and the raise says why. Its own test binary, so no other
//! test's threads are counted.

#![cfg(target_os = "linux")]

use rustix::process::{getpriority_process, setpriority_process};
use shopeasy_runtime::{
    db::{
        Database,
        thread_priority::{RAISE, raise_sqlite_threads, sqlite_threads},
    },
    settings::common::PoolSettings,
};

/// Whether this process may raise a thread's priority: a thread of its own
/// tries it on itself.
fn may_raise() -> bool {
    std::thread::spawn(|| {
        getpriority_process(None).is_ok_and(|nice| setpriority_process(None, nice - 1).is_ok())
    })
    .join()
    .is_ok_and(|may| may)
}

#[tokio::test]
async fn every_sqlite_connections_thread_runs_above_the_thread_that_connected_it() {
    let file = shopeasy_testkit::sqlite();
    let db = Database::connect_lazy(file.url(), &PoolSettings::default()).unwrap();
    assert!(sqlite_threads().unwrap().is_empty(), "lazy: none yet");
    // The writer's connection, then a reader's.
    sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        .execute(db.writer())
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0);

    let mine = getpriority_process(None).unwrap();
    let threads = sqlite_threads().unwrap();
    assert!(
        threads.len() >= 2,
        "the writer's and a reader's: {threads:?}"
    );
    if may_raise() {
        for (tid, nice) in &threads {
            assert_eq!(*nice, mine - RAISE, "thread {tid} raised");
        }
        assert_eq!(raise_sqlite_threads().unwrap(), 0, "nothing left to raise");
    } else {
        println!("this process may not raise a thread's priority: checking nothing changed");
        for (tid, nice) in &threads {
            assert_eq!(*nice, mine, "thread {tid} as it was");
        }
        let denied = raise_sqlite_threads().unwrap_err();
        assert_eq!(
            denied.kind(),
            std::io::ErrorKind::PermissionDenied,
            "{denied}"
        );
    }
}
