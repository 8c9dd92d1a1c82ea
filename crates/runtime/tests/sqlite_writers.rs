//! SQLite's writers queue in the process: each is handed the write lock the
//! moment the one before it commits, instead of sleeping in SQLite's busy
//! handler (1, 2, 5, 10 … 100 ms steps) while the lock sits free.

use std::time::Duration;

use shopeasy_runtime::{db::Database, settings::common::PoolSettings};
use tokio::time::Instant;

const WRITERS: usize = 16;
const ROUNDS: usize = 3;
/// How long each writer holds the lock (a slow commit, as under load).
const HOLD: Duration = Duration::from_millis(10);

#[tokio::test]
async fn sqlite_writers_take_the_lock_one_after_another_without_idle_gaps() {
    let file = shopeasy_testkit::sqlite();
    let db = Database::connect_lazy(file.url(), &PoolSettings::default()).unwrap();
    sqlx::query("CREATE TABLE marks (id INTEGER PRIMARY KEY)")
        .execute(db.writer())
        .await
        .unwrap();

    // Three rounds of every writer at once: the lock's idle time between
    // one writer's commit and the next writer's start, summed. A hand-over
    // in the process takes well under a millisecond; a writer asleep in the
    // busy handler leaves the lock free for up to its next step (25, 50,
    // 100 ms once it has waited a while).
    let mut idle = Duration::ZERO;
    for round in 0..ROUNDS {
        let mut spans = futures::future::join_all((0..WRITERS).map(|i| {
            let db = db.clone();
            async move {
                let mut tx = db.begin_write().await.unwrap();
                let took = Instant::now();
                sqlx::query("INSERT INTO marks (id) VALUES ($1)")
                    .bind(i64::try_from(round * WRITERS + i).unwrap())
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tokio::time::sleep(HOLD).await;
                tx.commit().await.unwrap();
                (took, Instant::now())
            }
        }))
        .await;
        spans.sort_by_key(|(took, _)| *took);
        idle += spans
            .windows(2)
            .map(|w| w[1].0.saturating_duration_since(w[0].1))
            .sum::<Duration>();
    }

    let written: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM marks")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(written, i64::try_from(ROUNDS * WRITERS).unwrap());
    assert!(
        idle < Duration::from_millis(90),
        "the write lock sat free for {idle:?} in all between {ROUNDS} rounds of {WRITERS} queued writers"
    );
}

/// The `_sum` and `_count` of the writer-hold histogram of `database`, as
/// `/metrics` renders them.
fn writer_hold(text: &str, database: &str) -> (f64, u64) {
    let value = |suffix: &str| {
        let series = format!(
            "{}_{suffix}{{database=\"{database}\"}} ",
            shopeasy_runtime::db::WRITER_HOLD
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
            .trim()
            .to_owned()
    };
    (
        value("sum").parse().expect("a number"),
        value("count").parse().expect("a count"),
    )
}

#[tokio::test]
async fn the_writers_hold_is_timed_per_checkout_and_reads_are_not() {
    let metrics = shopeasy_runtime::telemetry::prometheus();
    // A file name of its own: the series is labelled by the file's stem,
    // and other tests of this process write files of their own.
    let dir = tempfile::tempdir().unwrap();
    let stem = "writer-hold-test";
    let url = format!("sqlite:{}/{stem}.db", dir.path().display());
    let db = Database::connect_lazy(&url, &PoolSettings::default()).unwrap();
    // The first checkout opens the connection: no hold to time yet.
    sqlx::query("CREATE TABLE marks (id INTEGER PRIMARY KEY)")
        .execute(db.writer())
        .await
        .unwrap();
    // sqlx hands a connection back to its pool in a task of its own: wait
    // (bounded) until the count shows `n`.
    let settled = async |n: u64| {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let now = writer_hold(&metrics.render(), stem);
                if now.1 >= n {
                    return now;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the writer's hold count never reached {n}"))
    };
    let (sum_before, count_before) = writer_hold(&metrics.render(), stem);

    let mut tx = db.begin_write().await.unwrap();
    sqlx::query("INSERT INTO marks (id) VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    // A slow commit: the connection is held across this wait.
    tokio::time::sleep(HOLD * 5).await;
    tx.commit().await.unwrap();
    let (sum, count) = settled(count_before + 1).await;
    assert_eq!(count, count_before + 1, "one checkout, one hold");
    assert!(
        sum - sum_before >= (HOLD * 5).as_secs_f64(),
        "a 50 ms transaction timed as {} s",
        sum - sum_before
    );

    // Reads go through the other pool: not the writer's hold.
    for _ in 0..3 {
        let _: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM marks")
            .fetch_one(db.pool())
            .await
            .unwrap();
    }
    sqlx::query("INSERT INTO marks (id) VALUES (2)")
        .execute(db.writer())
        .await
        .unwrap();
    let (_, after) = settled(count + 1).await;
    assert_eq!(after, count + 1, "three reads and one write: one more hold");
}
