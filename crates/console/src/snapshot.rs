//! The typed model of one look at the whole system: what the page draws and
//! what every server-sent event carries.
//!
//! A [`Snapshot`] is built by [`crate::observe`] from one round of reads;
//! rates come from the difference between two rounds, histories (the
//! breaker's state steps) from a bounded ring kept across rounds. Parts a
//! service does not report (admission on a build without it, the outbox on
//! a service that has none) are simply absent, so the page shows an empty
//! place rather than a wrong zero.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::{load::LoadStatus, traces::PathPanel};

/// One look at the system.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Snapshot {
    /// Counts up by one per snapshot.
    pub seq: u64,
    /// When the reads of this snapshot finished (Unix ms): a page shows how
    /// old its view is, a test checks the stream keeps up.
    pub at_unix_ms: u64,
    /// The time between this snapshot's reads and the previous one's (ms).
    pub interval_ms: u64,
    /// Every service read, in the order configured.
    pub services: Vec<ServiceView>,
    /// Every service-to-service edge (each a fault proxy).
    pub edges: Vec<EdgeView>,
    /// Every circuit breaker, named `service/target`.
    pub breakers: Vec<BreakerView>,
    /// Every retry budget.
    pub budgets: Vec<BudgetView>,
    /// Every stale-while-revalidate cache (Order's stock cache, …).
    pub caches: Vec<CacheView>,
    /// Order's outbox, when read.
    pub outbox: Option<OutboxView>,
    /// Each service's inbound admission control, as it reports it.
    pub admission: Vec<Reported>,
    /// Client-side throttles and rate limits, as the services report them.
    pub limits: Vec<Reported>,
    /// The built-in load generator, when the console has one.
    pub load: Option<LoadStatus>,
    /// Orders placed from the page, newest first, with their status.
    pub orders: Vec<OrderView>,
    /// The most recent order's path (its spans, hop by hop), or why none.
    pub order_path: Option<PathPanel>,
    /// The Scenarios panel's current (or last) run, when the console runs scenes.
    pub scene: Option<crate::scenes::SceneStatus>,
    /// Presentation mode: running, the current fault, the next change.
    pub presentation: Option<crate::presentation::PresentationStatus>,
    /// Each service's Postgres and Redis and whether they answer, in full
    /// mode only (empty unless [`crate::ConsoleSettings::show_stores`]).
    pub stores: Vec<crate::stores::StoreView>,
    /// What could not be read this round (a service down, say).
    pub errors: Vec<String>,
}

/// One service's admin listener.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceView {
    /// Its name.
    pub name: String,
    /// Its admin listener answered this round.
    pub up: bool,
}

/// One edge of the topology: a fault proxy and what its caller saw of it.
#[derive(Debug, Clone, Serialize)]
pub struct EdgeView {
    /// The proxy's name (`order-inventory`).
    pub name: String,
    /// The caller.
    pub from: String,
    /// The callee.
    pub to: String,
    /// The proxy passes traffic (`false`: disabled, connections refused).
    pub enabled: bool,
    /// Its toxics, as the fault API shows them (Toxiproxy's JSON).
    pub toxics: Vec<Value>,
    /// Attempts per second the caller made on this edge since the last
    /// snapshot.
    pub request_rate: f64,
    /// The share of those attempts that got an answer (`None`: no attempt
    /// since the last snapshot).
    pub success_rate: Option<f64>,
    /// The caller's breaker on this edge, when it has one.
    pub breaker: Option<String>,
}

/// A breaker's state at a moment.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatePoint {
    /// When the console saw it (Unix ms).
    pub at_unix_ms: u64,
    /// `closed`, `open` or `half_open`.
    pub state: String,
}

/// A half-open trial's outcome.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Trial {
    /// When the console saw it end (Unix ms).
    pub at_unix_ms: u64,
    /// It succeeded (the breaker closed) or failed (it opened again).
    pub ok: bool,
}

/// One circuit breaker.
#[derive(Debug, Clone, Serialize)]
pub struct BreakerView {
    /// `service/target` (`order/inventory`).
    pub name: String,
    /// The service that holds it.
    pub service: String,
    /// What it guards.
    pub target: String,
    /// Its state now.
    pub state: String,
    /// Failures in its sampling window.
    pub failures: f64,
    /// Successes in its sampling window.
    pub successes: f64,
    /// failures / (failures + successes), `None` with no call in the window.
    pub failure_ratio: Option<f64>,
    /// The ratio at which it opens.
    pub threshold: Option<f64>,
    /// Calls in the window it needs before it may open.
    pub minimum_throughput: Option<f64>,
    /// Seconds until the next trial, while open.
    pub next_trial_seconds: Option<f64>,
    /// How long it stays open.
    pub break_duration_seconds: Option<f64>,
    /// Calls it refused without trying, since the service started (from
    /// `/metrics`, when the service counts them).
    pub refused_fast: Option<f64>,
    /// Its recent states, oldest first (a bounded ring).
    pub history: Vec<StatePoint>,
    /// Its recent trials, oldest first (a bounded ring).
    pub trials: Vec<Trial>,
    /// Everything the service reported, as it reported it.
    pub raw: Value,
}

/// One retry budget.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetView {
    /// `service/target`.
    pub name: String,
    /// Retries it can still pay for.
    pub balance: Option<f64>,
    /// Retries made since the service started (`None`: the service does
    /// not count them per target, as the gateway).
    pub retried: Option<f64>,
    /// Retries it refused since the service started.
    pub denied: Option<f64>,
    /// Attempts per call since the last snapshot (1.0: no retry;
    /// `None`: no call).
    pub attempts_per_call: Option<f64>,
    /// Everything the service reported.
    pub raw: Value,
}

/// One cache.
#[derive(Debug, Clone, Serialize)]
pub struct CacheView {
    /// `service/cache`.
    pub name: String,
    /// Entries held.
    pub entries: Option<f64>,
    /// Answers per result since start (`hit`, `stale`, `coalesced`, `miss`,
    /// `rejected`).
    pub counts: BTreeMap<String, f64>,
    /// The same per second since the last snapshot.
    pub rates: BTreeMap<String, f64>,
    /// How old an entry may be served (the oldest a stale answer can be).
    pub max_staleness_seconds: Option<f64>,
    /// The oldest a stale answer really was, since the service started
    /// (`None`: no stale answer yet, or not reported).
    pub oldest_stale_served_seconds: Option<f64>,
    /// How old the latest stale answer was.
    pub last_stale_served_seconds: Option<f64>,
    /// Everything the service reported.
    pub raw: Value,
}

/// Order's outbox.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OutboxView {
    /// Orders waiting for the worker (`shopeasy_outbox_backlog`).
    pub pending: f64,
    /// Since when the backlog has not been empty, as the console saw it
    /// (Unix ms; `None` when empty): the age of the oldest wait, at least.
    pub pending_since_unix_ms: Option<u64>,
    /// How long the oldest waiting order has waited, as Order measured it
    /// at its worker's last poll (`shopeasy_outbox_oldest_pending_age_seconds`;
    /// `None` when empty or not reported).
    pub oldest_pending_age_seconds: Option<f64>,
}

/// A part a service reports whose shape the console shows as is.
#[derive(Debug, Clone, Serialize)]
pub struct Reported {
    /// `service` or `service/name`.
    pub name: String,
    /// What it reported.
    pub value: Value,
}

/// An order placed from the page's "buy one" button.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OrderView {
    /// Its id.
    pub id: String,
    /// `pending`, `confirmed`, `rejected`, …
    pub status: String,
    /// The HTTP status of the purchase (201 confirmed, 202 pending).
    pub http_status: u16,
    /// When it was placed (Unix ms).
    pub placed_unix_ms: u64,
    /// When its status last changed (Unix ms).
    pub changed_unix_ms: u64,
}
