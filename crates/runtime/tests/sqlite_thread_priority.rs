//! SQLite's threads run ahead of the async workers on the CPU: each new
//! connection raises every SQLite thread of the process (sqlx's, and the
//! group-commit combiner's, which raises itself) to
//! `thread_priority::RAISE` nice steps above the process's main thread —
//! where the process may (`CAP_SYS_NICE`: root, as CI runs); elsewhere
//! nothing changes and the raise says why. Its own test binary, so no other
//! test's threads are counted.

#![cfg(target_os = "linux")]

use rustix::process::{getpid, getpriority_process, setpriority_process};
use shopeasy_runtime::{
    db::{
        Database,
        thread_priority::{RAISE, raise_current_thread, raise_sqlite_threads, sqlite_threads},
    },
    settings::common::PoolSettings,
};
use sqlx::AnyConnection;

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
async fn every_sqlite_thread_runs_raise_steps_above_the_process_whoever_connected_it() {
    let file = shopeasy_testkit::sqlite();
    let db = Database::connect_lazy(file.url(), &PoolSettings::default()).unwrap();
    assert!(sqlite_threads().unwrap().is_empty(), "lazy: none yet");
    // The writer's connection, a reader's, and the combiner of a grouped write.
    sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        .execute(db.writer())
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0);
    db.write(|conn: &mut AnyConnection| {
        Box::pin(async move {
            sqlx::query("INSERT INTO t (id) VALUES (1)")
                .execute(&mut *conn)
                .await
                .map(|_| ())
        })
    })
    .await
    .unwrap();

    let process = getpriority_process(Some(getpid())).unwrap();
    let threads = sqlite_threads().unwrap();
    assert!(
        threads.len() >= 3,
        "the writer's, a reader's and the combiner's: {threads:?}"
    );
    if may_raise() {
        for (tid, nice) in &threads {
            assert_eq!(*nice, process - RAISE, "thread {tid} raised");
        }
        assert_eq!(raise_sqlite_threads().unwrap(), 0, "nothing left to raise");
        // A connection made from a raised thread (the combiner reconnecting
        // the writer, say) inherits the raise; its scan must not raise
        // every SQLite thread again from there.
        let url = file.url().to_owned();
        shopeasy_testkit::on_own_thread(move || async move {
            raise_current_thread().unwrap();
            let other = Database::connect_lazy(&url, &PoolSettings::default()).unwrap();
            let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
                .fetch_one(other.pool())
                .await
                .unwrap();
            assert_eq!(rows, 1);
        })
        .unwrap();
        let threads = sqlite_threads().unwrap();
        for (tid, nice) in &threads {
            assert_eq!(
                *nice,
                process - RAISE,
                "thread {tid} raised once: {threads:?}"
            );
        }
    } else {
        println!("this process may not raise a thread's priority: checking nothing changed");
        for (tid, nice) in &threads {
            assert_eq!(*nice, process, "thread {tid} as it was");
        }
        for denied in [
            raise_sqlite_threads().unwrap_err(),
            raise_current_thread().unwrap_err(),
        ] {
            assert_eq!(
                denied.kind(),
                std::io::ErrorKind::PermissionDenied,
                "{denied}"
            );
        }
    }
}
