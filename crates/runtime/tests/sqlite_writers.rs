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
