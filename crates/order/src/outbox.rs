//! The outbox relay: a background worker that does the Inventory work the
//! order requests could not finish (FAULTS.md, "Outbox and saga").
//!
//! Every `poll_interval` it claims due rows whose lease ran out (several
//! replicas may run it: Postgres hands each row to one claimer with `FOR
//! UPDATE SKIP LOCKED`), runs them concurrently through
//! [`Orders::run_task`] — `ReserveStock` for `pending` orders, `ReleaseStock`
//! for cancelled ones, both keyed by the order id so a repeat is harmless —
//! and publishes the backlog as `shopeasy_outbox_backlog` and the oldest
//! row's age as [`OLDEST_PENDING_AGE`]. Inventory calls go
//! through the same client as requests, so the breaker and retry budget
//! apply; failed rows come back after a jittered exponential backoff.

use std::time::Duration;

use futures::future::join_all;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{domain::now_ms, saga::Orders};

/// How the worker polls.
#[derive(Debug, Clone, Copy)]
pub struct WorkerConfig {
    /// Pause between two polls.
    pub poll_interval: Duration,
    /// Most rows claimed per poll.
    pub batch_size: u32,
    /// How long a claimed row is this worker's.
    pub lease: Duration,
}

/// The `outcome` values of `shopeasy_outbox_processed_total` (what
/// [`Orders::run_task`] counts for a reservation it ran).
pub(crate) const PROCESSED_OUTCOMES: [&str; 3] = ["confirmed", "rejected", "deferred"];

/// The age of the oldest row in the outbox, in seconds (0 when empty), as of
/// the worker's last poll: "the oldest pending order has waited this long".
pub const OLDEST_PENDING_AGE: &str = "shopeasy_outbox_oldest_pending_age_seconds";

/// [`OLDEST_PENDING_AGE`]'s value for a row written at `oldest` (ms) seen
/// at `now` (ms); 0 for an empty outbox (or a clock that went back).
#[allow(clippy::cast_precision_loss)]
pub fn oldest_age_seconds(oldest: Option<i64>, now: i64) -> f64 {
    oldest.map_or(0.0, |at| now.saturating_sub(at).max(0) as f64 / 1000.0)
}

/// Registers the outbox's counters at 0 (every processed outcome, panics),
/// so a healthy order service shows "0 processed", not no data, before its
/// first deferred order. The backlog gauge is not set here: it gets its
/// first real count on the worker's first poll, at once.
pub(crate) fn register_metrics() {
    for outcome in PROCESSED_OUTCOMES {
        metrics::counter!("shopeasy_outbox_processed_total", "outcome" => outcome).increment(0);
    }
    metrics::counter!("shopeasy_outbox_panics_total").increment(0);
}

/// Runs the worker until `shutdown`, after registering its counters at 0
/// (so they exist from start-up on).
pub async fn run(orders: Orders, config: WorkerConfig, shutdown: CancellationToken) {
    register_metrics();
    let mut tick = tokio::time::interval(config.poll_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        // A full batch means more rows may be due: claim the next at once,
        // so a backlog (after an Inventory outage) drains as fast as
        // Inventory answers, not one batch per poll interval. Rows that
        // fail again are due only after their backoff, so this ends.
        let full = usize::try_from(config.batch_size).unwrap_or(usize::MAX);
        while poll_guarded(&orders, config).await >= full && !shutdown.is_cancelled() {}
    }
}

/// [`poll_once`] as its own task, so that a panic in one (a bug, or a
/// dependency panicking on a malformed answer) costs that batch only: its
/// rows are claimed again when their lease runs out, and the worker goes
/// on. Returns how many rows it ran (0 after a panic).
async fn poll_guarded(orders: &Orders, config: WorkerConfig) -> usize {
    let orders = orders.clone();
    match tokio::spawn(async move { poll_once(&orders, config).await }).await {
        Ok(ran) => ran,
        Err(e) => {
            if e.is_panic() {
                metrics::counter!("shopeasy_outbox_panics_total").increment(1);
                tracing::error!(
                    "an outbox poll panicked; its rows are retried when their lease runs out"
                );
            }
            0
        }
    }
}

/// Claims and runs one batch; returns how many rows it ran.
pub async fn poll_once(orders: &Orders, config: WorkerConfig) -> usize {
    let store = orders.store();
    let now = now_ms();
    let lease = i64::try_from(config.lease.as_millis()).unwrap_or(i64::MAX);
    let ran = match store
        .claim_tasks(now, now.saturating_add(lease), i64::from(config.batch_size))
        .await
    {
        Ok(tasks) => {
            // Each task is a trace of its own: its Inventory attempts (a
            // retry with the attempt it repeats) share a trace id.
            let results = join_all(tasks.iter().map(|task| {
                let span = tracing::info_span!(
                    "outbox.task",
                    order = %task.order_id,
                    action = ?task.action
                );
                orders.run_task(task).instrument(span)
            }))
            .await;
            for (task, result) in tasks.iter().zip(&results) {
                if let Err(e) = result {
                    tracing::warn!(order = %task.order_id, action = ?task.action, error = %e,
                        "outbox task failed; it is retried when its lease runs out");
                }
            }
            tasks.len()
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot claim outbox rows");
            0
        }
    };
    match store.backlog().await {
        #[allow(clippy::cast_precision_loss)]
        Ok(n) => metrics::gauge!("shopeasy_outbox_backlog").set(n as f64),
        Err(e) => tracing::debug!(error = %e, "cannot count the outbox"),
    }
    match store.oldest_pending_at().await {
        Ok(oldest) => metrics::gauge!(OLDEST_PENDING_AGE).set(oldest_age_seconds(oldest, now_ms())),
        Err(e) => tracing::debug!(error = %e, "cannot read the outbox's oldest row"),
    }
    ran
}
