//! Group commit on SQLite (`Database::write`): writes queued while the one
//! writer is busy share its next transaction, a savepoint each; every
//! answer waits for the one `COMMIT`, a failing write leaves the others
//! whole, a failing `COMMIT` stores nothing, and a caller that left before
//! its write began leaves nothing behind.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};
use std::time::Duration;

use shopeasy_runtime::{
    db::{Database, group_commit::GROUP_SIZE},
    settings::common::PoolSettings,
};
use sqlx::AnyConnection;

/// A database in a file named `stem` (the label of its metrics), with a
/// `marks` table and a `children` table whose parent is checked only at
/// `COMMIT` (a deferred foreign key).
async fn database(dir: &tempfile::TempDir, stem: &str) -> Database {
    // The recorder first: a histogram made before it would record nowhere.
    shopeasy_runtime::telemetry::prometheus();
    let url = format!("sqlite:{}/{stem}.db", dir.path().display());
    let db = Database::connect_lazy(&url, &PoolSettings::default()).expect("a SQLite URL");
    sqlx::raw_sql(
        "CREATE TABLE marks (id INTEGER PRIMARY KEY); \
         CREATE TABLE parents (id INTEGER PRIMARY KEY); \
         CREATE TABLE children (id INTEGER PRIMARY KEY, \
           parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)",
    )
    .execute(db.writer())
    .await
    .expect("the tables");
    db
}

/// Inserts mark `id`; fails afterwards (its insert must not stay) when
/// `fail` is set.
async fn mark(db: &Database, id: i64, fail: bool) -> Result<i64, sqlx::Error> {
    db.write(move |conn: &mut AnyConnection| {
        Box::pin(async move {
            sqlx::query("INSERT INTO marks (id) VALUES ($1)")
                .bind(id)
                .execute(&mut *conn)
                .await?;
            if fail {
                return Err(sqlx::Error::RowNotFound);
            }
            Ok(id)
        })
    })
    .await
}

async fn marks(db: &Database) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM marks ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("the marks")
}

/// A write as a test queues it.
type Queued = futures::future::BoxFuture<'static, Result<i64, sqlx::Error>>;

/// Spawns one task per write, each counting itself on `queued` as it
/// queues, and returns once all have queued (a current-thread runtime: a
/// task that counted has queued in the same poll).
async fn spawn_queued<T: Send + 'static>(
    writes: Vec<futures::future::BoxFuture<'static, T>>,
) -> Vec<tokio::task::JoinHandle<T>> {
    let queued = Arc::new(AtomicUsize::new(0));
    let n = writes.len();
    let handles = writes
        .into_iter()
        .map(|write| {
            let queued = queued.clone();
            tokio::spawn(async move {
                queued.fetch_add(1, Ordering::SeqCst);
                write.await
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(5), async {
        while queued.load(Ordering::SeqCst) < n {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("every write queued");
    handles
}

/// `(_sum, _count)` of the group-size histogram of `database`.
fn groups(database: &str) -> (f64, u64) {
    let text = shopeasy_runtime::telemetry::prometheus().render();
    let value = |suffix: &str| {
        let series = format!("{GROUP_SIZE}_{suffix}{{database=\"{database}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0.0, |v| v.trim().parse().expect("a number"))
    };
    (value("sum"), value("count") as u64)
}

#[tokio::test]
async fn writes_queued_behind_a_busy_writer_share_one_commit_and_each_gets_its_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let stem = "group-shared";
    let db = database(&dir, stem).await;
    let before = groups(stem);
    // The writer is busy: the twenty writes queue for it.
    let busy = db.begin_write().await.unwrap();
    let writes = (0..20)
        .map(|id| {
            let db = db.clone();
            Box::pin(async move { mark(&db, id, id == 7).await }) as Queued
        })
        .collect();
    let handles = spawn_queued(writes).await;
    busy.commit().await.unwrap();

    let mut answers = Vec::new();
    for handle in handles {
        answers.push(handle.await.unwrap());
    }
    for (id, answer) in (0..20).zip(&answers) {
        if id == 7 {
            assert!(answer.is_err(), "write 7 failed: {answer:?}");
        } else {
            assert_eq!(answer.as_ref().ok(), Some(&id), "write {id}: {answer:?}");
        }
    }
    let stored = marks(&db).await;
    assert_eq!(
        stored,
        (0..20).filter(|&id| id != 7).collect::<Vec<_>>(),
        "every write but the failed one, whose insert was rolled back with its savepoint"
    );
    let (sum, count) = groups(stem);
    assert_eq!(sum - before.0, 20.0, "twenty writes ran in groups");
    assert!(
        count - before.1 <= 2,
        "twenty queued writes took {} commits",
        count - before.1
    );
}

#[tokio::test]
async fn a_group_whose_commit_fails_stores_nothing_and_answers_every_write_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let stem = "group-failed";
    let db = database(&dir, stem).await;
    let busy = db.begin_write().await.unwrap();
    let mut writes: Vec<Queued> = (0..5)
        .map(|id| {
            let db = db.clone();
            Box::pin(async move { mark(&db, id, false).await }) as Queued
        })
        .collect();
    // A child without its parent: each statement succeeds, the `COMMIT`
    // does not (the foreign key is checked there).
    let orphan = db.clone();
    writes.push(Box::pin(async move {
        orphan
            .write(|conn: &mut AnyConnection| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO children (id, parent) VALUES (1, 99)")
                        .execute(&mut *conn)
                        .await?;
                    Ok(-1)
                })
            })
            .await
    }));
    let handles = spawn_queued(writes).await;
    busy.commit().await.unwrap();
    let mut answers = Vec::new();
    for handle in handles {
        answers.push(handle.await.unwrap());
    }
    // All six shared the one commit, which failed: each is told so, and
    // none is stored (the five marks were fine on their own).
    assert_eq!(groups(stem), (6.0, 1), "one group of six");
    for answer in &answers {
        let e = answer
            .as_ref()
            .expect_err("no write of the failed group succeeds");
        assert!(
            shopeasy_runtime::db::is_connection_error(e),
            "a failed group is a connection error (503, retry): {e}"
        );
    }
    assert_eq!(
        marks(&db).await,
        Vec::<i64>::new(),
        "nothing of the failed group is stored"
    );
    // The combiner goes on.
    assert_eq!(mark(&db, 42, false).await.unwrap(), 42);
    assert_eq!(marks(&db).await, vec![42]);
}

#[tokio::test]
async fn a_caller_that_left_before_its_write_began_leaves_nothing_and_a_panic_spares_the_combiner()
{
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir, "group-left").await;
    let busy = db.begin_write().await.unwrap();
    let writes = (1..=3)
        .map(|id| {
            let db = db.clone();
            Box::pin(async move { mark(&db, id, false).await }) as Queued
        })
        .collect();
    let handles = spawn_queued(writes).await;
    // The caller of write 2 gives up (a request cancelled) while the writer
    // is still busy.
    handles[1].abort();
    busy.commit().await.unwrap();
    let mut answers = Vec::new();
    for handle in handles {
        answers.push(handle.await);
    }
    assert!(
        answers[1]
            .as_ref()
            .is_err_and(tokio::task::JoinError::is_cancelled)
    );
    assert_eq!(answers[0].as_ref().unwrap().as_ref().ok(), Some(&1));
    assert_eq!(answers[2].as_ref().unwrap().as_ref().ok(), Some(&3));
    assert_eq!(
        marks(&db).await,
        vec![1, 3],
        "write 2's caller left: not written"
    );

    // A write that panics is answered with an error; the next one runs.
    let panicked = db
        .write(|_conn: &mut AnyConnection| -> shopeasy_runtime::db::BoxFuture<'_, Result<(), sqlx::Error>> {
            Box::pin(async { panic!("a bug in a write") })
        })
        .await;
    assert!(panicked.is_err(), "{panicked:?}");
    assert_eq!(mark(&db, 4, false).await.unwrap(), 4);
    assert_eq!(marks(&db).await, vec![1, 3, 4]);
}

/// The combiner runs on a thread of its own: a group commits while its
/// callers' runtime cannot run anything (here a current-thread runtime's
/// one thread, blocked). That is what keeps SQLite's one writer working
/// when the async workers are saturated: on them, it would wait its turn
/// between every two statements.
#[tokio::test]
async fn a_group_commits_while_its_callers_runtime_is_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let stem = "group-own-thread";
    let db = database(&dir, stem).await;
    // sqlx hands a connection back to its pool from a task on the runtime
    // that used it, after a ping: the connection that made the tables must
    // be back before this runtime blocks, or the combiner waits for it as
    // long as the block lasts (a busy machine lost that race often).
    let writer = db.writer().clone();
    shopeasy_testkit::assert_eventually(
        Duration::from_secs(5),
        "the writer's connection is back in its pool",
        async || writer.num_idle() == 1,
    )
    .await;
    let write = {
        let db = db.clone();
        Box::pin(async move { mark(&db, 42, false).await }) as Queued
    };
    let handles = spawn_queued(vec![write]).await;

    // Blocks this runtime's thread until a reader on a thread and runtime
    // of its own finds the write committed (or gives up).
    let url = format!("sqlite:{}/{stem}.db", dir.path().display());
    shopeasy_testkit::on_own_thread(move || async move {
        let reader = Database::connect_lazy(&url, &PoolSettings::default()).unwrap();
        shopeasy_testkit::assert_eventually(
            Duration::from_secs(10),
            "the write committed while its caller's runtime was blocked",
            async || {
                sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM marks WHERE id = 42")
                    .fetch_one(reader.pool())
                    .await
                    .is_ok_and(|n| n == 1)
            },
        )
        .await
    })
    .expect("the reader saw the commit");

    for handle in handles {
        assert_eq!(
            handle.await.unwrap().unwrap(),
            42,
            "and its caller hears it"
        );
    }
}
