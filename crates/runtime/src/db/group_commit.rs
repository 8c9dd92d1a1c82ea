//! Group commit for SQLite's one writer ([`Database::write`](super::Database::write)).
//!
//! Every SQLite commit appends each page it dirtied to the WAL, whole: an
//! order's first commit touches twelve B-trees, so it writes about twenty
//! 4 KiB pages while it holds the one writer, and in overload that writer
//! is what bounds the embedded system (`bench/sqlite-pages.py`, the order
//! crate's README). Writes that share a transaction share those pages
//! (rightmost leaves, index pages): ten orders per commit write 5.4 pages
//! each instead of 20.
//!
//! So on SQLite a write does not take the writer itself: it queues, and one
//! task (the combiner) takes the writer for whatever queued while the last
//! group ran and while it waited for the writer — no timer, so a lone write
//! goes at once and a group forms only when writes already wait. The group is one `BEGIN IMMEDIATE`; each
//! write runs in a savepoint of its own, released when it succeeds and
//! rolled back when it fails, so a failing write leaves the others whole.
//! Every write's answer is sent only after the one `COMMIT`: nobody hears
//! "stored" before it is. If the group cannot begin or commit, nothing of
//! it is stored and every write in it gets an error.
//!
//! **The combiner has a thread of its own** ([`COMBINER_THREAD`], a
//! current-thread runtime, raised like SQLite's threads by
//! [`thread_priority`](super::thread_priority)). Each statement of a group
//! is a round trip to sqlx's SQLite thread, and each answer wakes the
//! combiner from outside the async runtime. On the service's workers that
//! wake-up queues behind whatever they are doing — in overload, admitting,
//! refusing and proxying thousands of requests — so the one writer sat
//! idle between its statements, holding its lock. On its own thread the
//! combiner runs as soon as SQLite answers (measured in overload on two
//! vCPUs: 0.26–0.43 → 0.18–0.22 ms of writer per write, the writer busy
//! 84–90 % → 54–63 % of the time, goodput at five times the capacity up by
//! a fifth; `docs/overload.md`).
//!
//! Why not a crate: sqlx has no group commit, and a batching crate would
//! not hold a transaction open across its batch with a savepoint per item.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use futures::FutureExt;
use sqlx::{AnyConnection, AnyPool, Connection};
use tokio::sync::{mpsc, oneshot};

/// A boxed, sendable future borrowing for `'a`: what a write returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Most writes one group takes. A group holds the writer for all of them,
/// so this bounds how long a write queued behind it waits (64 orders take
/// a few milliseconds), while groups of ten already take most of the gain.
pub const MAX_GROUP: usize = 64;

/// Writes that may wait for the combiner. Callers are bounded by admission
/// control before they get here; beyond this a write waits to queue.
const QUEUE: usize = 1024;

/// A queued write with its result type erased, so one queue takes them all.
trait Write: Send {
    /// The caller stopped waiting (it timed out or was cancelled): the write
    /// is skipped if it has not begun.
    fn caller_gone(&self) -> bool;

    /// Runs the write on `conn` (inside its savepoint).
    fn run<'c>(self: Box<Self>, conn: &'c mut AnyConnection) -> BoxFuture<'c, Box<dyn Answer>>;
}

/// A write's result, held until the group's `COMMIT` says whether it stands.
trait Answer: Send {
    /// Whether the write succeeded (its savepoint is released) or failed
    /// (rolled back).
    fn succeeded(&self) -> bool;

    /// Sends the result: the write's own when the group committed; an
    /// error when it did not (`commit_error` says why).
    fn send(self: Box<Self>, commit_error: Option<&sqlx::Error>);
}

struct Job<F, T, E> {
    work: F,
    answer: oneshot::Sender<Result<T, E>>,
}

impl<F, T, E> Write for Job<F, T, E>
where
    F: for<'c> FnOnce(&'c mut AnyConnection) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: From<sqlx::Error> + Send + 'static,
{
    fn caller_gone(&self) -> bool {
        self.answer.is_closed()
    }

    fn run<'c>(self: Box<Self>, conn: &'c mut AnyConnection) -> BoxFuture<'c, Box<dyn Answer>> {
        let Job { work, answer } = *self;
        Box::pin(async move {
            let result = work(conn).await;
            Box::new(Done { result, answer }) as Box<dyn Answer>
        })
    }
}

struct Done<T, E> {
    result: Result<T, E>,
    answer: oneshot::Sender<Result<T, E>>,
}

impl<T: Send, E: From<sqlx::Error> + Send> Answer for Done<T, E> {
    fn succeeded(&self) -> bool {
        self.result.is_ok()
    }

    fn send(self: Box<Self>, commit_error: Option<&sqlx::Error>) {
        let result = match (commit_error, self.result) {
            (Some(e), Ok(_)) => Err(E::from(not_stored(&format!(
                "the group's transaction failed: {e}"
            )))),
            (_, result) => result,
        };
        // The caller may have stopped waiting: then nobody hears it.
        let _ = self.answer.send(result);
    }
}

/// The error a write gets when its group did not commit: a connection
/// error ([`super::is_connection_error`]), so callers answer 503 and a
/// retry (with the same idempotency key) finds nothing stored.
fn not_stored(why: &str) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::other(why.to_owned()))
}

/// The name of each combiner's thread (as `/proc` and `top -H` show it;
/// at most 15 bytes).
pub const COMBINER_THREAD: &str = "sqlite-writer";

/// The queue of a database's grouped writes; the combiner (and its thread)
/// ends when the last handle (every clone of the `Database`) is dropped.
#[derive(Debug)]
pub(super) struct Queue(mpsc::Sender<Box<dyn Write>>);

impl Queue {
    /// Starts the combiner on `writer` (the one-connection pool) of the
    /// database labelled `database` in metrics, on a thread of its own (see
    /// the module). If that thread cannot be had, the queue is closed and
    /// every write answers "the database's writer has stopped" (503).
    pub(super) fn start(writer: AnyPool, database: &str) -> Self {
        let (send, receive) = mpsc::channel(QUEUE);
        let sizes = metrics::histogram!(GROUP_SIZE, "database" => database.to_owned());
        let combiner = combine(writer, receive, sizes);
        let label = database.to_owned();
        let started = std::thread::Builder::new()
            .name(COMBINER_THREAD.to_owned())
            .spawn(move || {
                super::thread_priority::raise_this_thread();
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(combiner),
                    Err(e) => tracing::error!(database = label, error = %e, "the writer's runtime did not start; writes fail"),
                }
            });
        if let Err(e) = started {
            tracing::error!(database, error = %e, "the writer's thread did not start; writes fail");
        }
        Self(send)
    }

    /// Queues `work` and waits for its result, at most `wait` for its
    /// group to begin and end.
    ///
    /// A caller that stops waiting before its write began leaves nothing
    /// behind (the write is skipped); one whose write already ran does not
    /// hear whether it was stored — as with any lost answer, the write's
    /// own recovery covers it (the same idempotency key, the outbox).
    pub(super) async fn write<T, E, F>(&self, work: F, wait: std::time::Duration) -> Result<T, E>
    where
        F: for<'c> FnOnce(&'c mut AnyConnection) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let queued = tokio::time::timeout(wait, self.0.send(Box::new(Job { work, answer })));
        match queued.await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(not_stored("the database's writer has stopped").into()),
            Err(_) => return Err(sqlx::Error::PoolTimedOut.into()),
        }
        match tokio::time::timeout(wait, answered).await {
            Ok(Ok(result)) => result,
            // The group failed before this write ran (its transaction could
            // not begin, or a write before it panicked): nothing stored.
            Ok(Err(_)) => Err(not_stored("the write's group failed before it ran").into()),
            Err(_) => Err(sqlx::Error::PoolTimedOut.into()),
        }
    }
}

/// The combiner: one group at a time, of what queued meanwhile.
async fn combine(
    writer: AnyPool,
    mut queue: mpsc::Receiver<Box<dyn Write>>,
    sizes: metrics::Histogram,
) {
    while let Some(first) = queue.recv().await {
        // The writer first, the group after: writes that queue while the
        // transaction waits for the writer (another connection's write,
        // a checkpoint) join this group instead of waiting for the next.
        let tx = writer.begin_with("BEGIN IMMEDIATE").await;
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(write) => group.push(write),
                Err(_) => break,
            }
        }
        group.retain(|w| !w.caller_gone());
        if group.is_empty() {
            continue; // The transaction, unused, rolls back as it drops.
        }
        sizes.record(group.len() as f64);
        run_group(tx, group).await;
    }
}

/// Writes per group, by `database` (the SQLite file's stem): a mean above
/// 1 means writes queued and shared commits.
pub const GROUP_SIZE: &str = "shopeasy_db_group_commit_writes";

/// Runs `group` in `tx` (its `BEGIN IMMEDIATE`, or why it failed), a
/// savepoint each, then commits; every answer is sent after the commit.
async fn run_group(
    tx: Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error>,
    group: Vec<Box<dyn Write>>,
) {
    let mut answers: Vec<Box<dyn Answer>> = Vec::with_capacity(group.len());
    let committed: Result<(), sqlx::Error> = async {
        let mut tx = tx?;
        for write in group {
            // Its caller may have left while the writer was busy.
            if write.caller_gone() {
                continue;
            }
            let mut savepoint = tx.begin().await?;
            // A write that panics is a bug; the group is rolled back whole
            // (its connection may be mid-statement) and the combiner goes on.
            let answer = AssertUnwindSafe(write.run(&mut savepoint))
                .catch_unwind()
                .await
                .map_err(|_| not_stored("a write of the group panicked"))?;
            if answer.succeeded() {
                savepoint.commit().await?;
            } else {
                savepoint.rollback().await?;
            }
            answers.push(answer);
        }
        tx.commit().await
    }
    .await;
    if let Err(e) = &committed {
        tracing::warn!(error = %e, writes = answers.len(), "a group commit failed; nothing of it is stored");
    }
    for answer in answers {
        answer.send(committed.as_ref().err());
    }
}
