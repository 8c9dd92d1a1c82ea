//! A transaction whose `BEGIN` is cancelled in flight must not leave its
//! pooled connection inside that transaction.
//!
//! Every store here cancels work at a deadline (`tokio::time::timeout`, a
//! caller gone), and the order service's commits (a) and (c) are single
//! statements in autocommit. sqlx 0.9.0 raised its transaction depth only
//! after `BEGIN`'s round trip, so a `begin()` cancelled during it queued no
//! `ROLLBACK` and the pool handed the connection on *inside* the open
//! transaction: the next borrower's autocommit writes were answered as done
//! and then rolled back when the connection closed (seen in the chaos run
//! at 2× capacity: orders answered 202 that were never stored). sqlx 0.9.1
//! raises the depth first, so the drop guard rolls back (sqlx issue 4393).
//! This test fails on 0.9.0.

use std::time::Duration;

use sqlx::{Connection, Executor, postgres::PgPoolOptions};

#[tokio::test]
async fn a_write_after_a_cancelled_begin_is_durable() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    // One connection, so the next borrower gets the cancelled one.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(db.url())
        .await
        .unwrap();
    pool.execute("CREATE TABLE writes (n int PRIMARY KEY)")
        .await
        .unwrap();

    // `BEGIN` whose round trip takes 300 ms, cancelled after 50 ms.
    let begun = tokio::time::timeout(
        Duration::from_millis(50),
        pool.begin_with("BEGIN; SELECT pg_sleep(0.3)"),
    )
    .await;
    assert!(begun.is_err(), "the begin was cancelled in flight");

    // The next borrower writes in autocommit, as commit (a) does.
    pool.execute("INSERT INTO writes VALUES (1)").await.unwrap();
    // Closing the connection rolls back whatever transaction it is in.
    pool.close().await;

    let mut fresh = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM writes")
        .fetch_one(&mut fresh)
        .await
        .unwrap();
    fresh.close().await.unwrap();
    assert_eq!(
        stored, 1,
        "the connection was handed on inside the cancelled transaction, \
         and the autocommit write was rolled back with it"
    );
}
