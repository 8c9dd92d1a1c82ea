//! Admission control for an inbound listener: admit what the service can
//! serve, refuse the rest at once, before any work is done for it.
//!
//! Three parts, in the order a request meets them:
//!
//! 1. an **adaptive concurrency limit** ([`GradientLimit`], a gradient
//!    controller after Envoy's adaptive concurrency filter): the number of
//!    requests in flight is capped at a limit found by comparing the service
//!    time of admitted requests with a periodically re-measured minimum RTT,
//!    so the service stays near its capacity instead of queueing work
//!    internally (pools, locks, the runtime) until every request is slow;
//! 2. a **short, deadline-aware queue**: a request that finds the limit
//!    full waits at most `queue_timeout` for a slot — and not at all when
//!    its deadline (the caller's remaining time from `shopeasy-deadline-ms`
//!    or `grpc-timeout`, capped by the service's own `default_deadline`)
//!    leaves less than the current expected service time: such a request
//!    would be served late, which is work for nobody;
//! 3. a **fast refusal** ([`Refusal`]) that the listener writes in its own
//!    protocol ([`RefusalResponse`]): 503 `overloaded` + `Retry-After` over
//!    HTTP, `RESOURCE_EXHAUSTED` + `grpc-retry-pushback-ms` over gRPC
//!    (`GrpcRefusal`, with the `grpc` feature).
//!
//! **Queue order: LIFO.** A freed slot goes to the *newest* waiter. Under a
//! burst that drains within `queue_timeout` the order hardly matters; under
//! lasting overload FIFO would serve the request that has waited longest —
//! the one nearest its deadline, whose client is likeliest to have given up
//! — while LIFO serves the one with the most time left, and the oldest
//! waiters leave at their queue timeout (Facebook's "adaptive LIFO").
//!
//! **Queue wait: adaptive, CoDel-style** (Facebook's "Fail at Scale": "if
//! the queue has not been empty for the last N ms, the time spent in the
//! queue is limited to M ms"). A queue that empties now and then is a
//! *good* queue: it absorbs a burst, so a waiter may wait `queue_timeout`
//! (N). A queue that has not been empty for a whole `queue_timeout` is a
//! *standing* queue: the service is overloaded, waiting only adds latency
//! to what will be served and to what will be refused, so every wait —
//! including those of the waiters already queued — is cut to
//! `standing_queue_timeout` (M, half a millisecond by default), and the
//! queue holds only as many waiters as slots are expected to free within M
//! (limit × M ÷ service time): one more would only be refused at M, so it
//! is refused on arrival. Admitted requests then wait at most M, most
//! refusals cost no wait at all, and a queue that has stayed
//! empty for M and for a service time is a good queue again (one emptied
//! for a moment, by slots freed all at once — the limit raised after a
//! measurement of the minimum RTT — and refilled at once, was not drained
//! by spare capacity: it is still standing).
//!
//! **Why written here.** `tower-acc` and `tower-resilience-adaptive` have the
//! limit algorithms, but both wait for a permit in `poll_ready` without a
//! bound or a deadline (a full service parks the connection instead of
//! refusing), neither refuses a queued request whose deadline cannot be met,
//! and `tower-acc` reads `std::time::Instant` (tokio's paused clock cannot
//! drive it; this workspace bans that type). What is needed is the gate and
//! the queue around the limit, so the limit is a small pure module
//! ([`limit`]) and the rest is this file.
//!
//! # Metrics
//!
//! Labels are bounded: `listener` is the service's name, `outcome` one of
//! [`Outcome`]'s four values.
//!
//! - `shopeasy_admission_limit{listener}` (gauge): the limit now;
//! - `shopeasy_admission_min_rtt_seconds{listener}` (gauge): the last
//!   measured minimum RTT (absent until measured);
//! - `shopeasy_admission_in_flight{listener}` (gauge);
//! - `shopeasy_admission_queued{listener}` (gauge): requests waiting;
//! - `shopeasy_admission_requests_total{listener,outcome}` (counter),
//!   `outcome` = `admitted` (at once), `queued` (admitted after waiting),
//!   `refused_full` (limit and queue full, or the queue wait ran out),
//!   `refused_deadline` (its deadline could not be met);
//! - `shopeasy_admission_refusal_seconds{listener}` (histogram): how long a
//!   refused request was held before its refusal.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use shopeasy_resilience::admission::{Admission, AdmissionConfig, LimitConfig};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let admission = Admission::new("product", AdmissionConfig {
//!     limit: LimitConfig { initial: 1, min: 1, max: 1, ..LimitConfig::default() },
//!     queue_size: 0,
//!     ..AdmissionConfig::default()
//! });
//! let first = admission.acquire(None).await.expect("a free slot");
//! let refused = admission.acquire(None).await.expect_err("the limit is full");
//! assert_eq!(refused.reason.as_str(), "refused_full");
//! first.complete();
//! assert!(admission.acquire(None).await.is_ok());
//! # }
//! ```

mod layer;
pub mod limit;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::time::Instant;

#[cfg(feature = "grpc")]
pub use layer::GrpcRefusal;
pub use layer::{AdmissionLayer, AdmissionService, RefusalResponse};
pub use limit::{GradientLimit, LimitConfig, Phase, Ticket};

use crate::clock;
use crate::deadline::Deadline;

/// The parameters of one listener's admission control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// The adaptive limit's start and bounds.
    pub limit: LimitConfig,
    /// How many requests may wait for a slot at once (0: none wait).
    pub queue_size: usize,
    /// The longest a request waits for a slot while the queue is good
    /// (it has been empty within the last `queue_timeout`).
    pub queue_timeout: Duration,
    /// The longest a request waits for a slot while the queue is standing
    /// (not empty for a whole `queue_timeout`): CoDel's target.
    pub standing_queue_timeout: Duration,
    /// The service's own deadline for a request whose caller sent none
    /// (and the cap on one that did).
    pub default_deadline: Duration,
    /// What a refusal tells the caller to wait before trying again.
    pub retry_after: Duration,
}

impl Default for AdmissionConfig {
    /// The defaults the runtime's `admission.*` settings repeat.
    fn default() -> Self {
        Self {
            limit: LimitConfig::default(),
            queue_size: 64,
            queue_timeout: Duration::from_secs(1),
            standing_queue_timeout: Duration::from_micros(500),
            default_deadline: Duration::from_secs(10),
            retry_after: Duration::from_secs(1),
        }
    }
}

/// What became of a request at the gate: the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Admitted at once.
    Admitted,
    /// Admitted after waiting in the queue.
    Queued,
    /// Refused: the limit and the queue were full, or the wait ran out.
    RefusedFull,
    /// Refused at once: its deadline could not be met.
    RefusedDeadline,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 4] = [
        Outcome::Admitted,
        Outcome::Queued,
        Outcome::RefusedFull,
        Outcome::RefusedDeadline,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::Queued => "queued",
            Outcome::RefusedFull => "refused_full",
            Outcome::RefusedDeadline => "refused_deadline",
        }
    }
}

/// Why a request was refused, with what the caller is told: the input of a
/// [`RefusalResponse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.detail())]
pub struct Refusal {
    /// [`Outcome::RefusedFull`] or [`Outcome::RefusedDeadline`].
    pub reason: Outcome,
    /// How long the caller should wait before trying again.
    pub retry_after: Duration,
    /// The limit when it was refused.
    pub limit: usize,
    /// The caller's time left when it was refused.
    pub remaining: Duration,
    /// The service time expected for it.
    pub expected: Duration,
}

impl Refusal {
    /// A sentence for the caller (no internal details beyond the limit).
    pub fn detail(&self) -> String {
        match self.reason {
            Outcome::RefusedDeadline => format!(
                "the service is at its concurrency limit ({}) and the request's deadline \
                 ({} ms left) cannot be met (requests take about {} ms now)",
                self.limit,
                self.remaining.as_millis(),
                self.expected.as_millis().max(1)
            ),
            _ => format!(
                "the service is at its concurrency limit ({}) and its queue is full",
                self.limit
            ),
        }
    }

    /// `retry_after` in whole seconds, at least 1 (`Retry-After`).
    pub fn retry_after_seconds(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// The live state of one listener's admission, for `/admin/resilience`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdmissionSnapshot {
    /// The listener (service) name.
    pub listener: String,
    /// The limit now (`min_limit` while the minimum RTT is measured).
    pub limit: usize,
    /// Its floor.
    pub min_limit: usize,
    /// Its ceiling.
    pub max_limit: usize,
    /// Requests in flight.
    pub in_flight: usize,
    /// Requests waiting for a slot.
    pub queued: usize,
    /// The most that may wait.
    pub queue_size: usize,
    /// The longest wait while the queue is good, in milliseconds.
    pub queue_timeout_ms: u64,
    /// The longest wait while it is standing, in milliseconds (a
    /// fraction: the default is 0.5).
    pub standing_queue_timeout_ms: f64,
    /// Whether the queue is standing now (not empty for a whole
    /// `queue_timeout`): waits are cut to `standing_queue_timeout`.
    pub standing: bool,
    /// The recent service time, in milliseconds.
    pub expected_ms: f64,
    /// What the limit is doing: `tracking` (following the gradient) or
    /// `measuring` (held at `min_limit` to measure the minimum RTT).
    pub phase: Phase,
    /// The unqueued service time (p90 with at most `min_limit` in flight),
    /// in milliseconds; `null` until first measured.
    pub min_rtt_ms: Option<f64>,
    /// The last window's service time (p90), in milliseconds.
    pub sample_rtt_ms: Option<f64>,
    /// The last gradient, `min_rtt × (1 + buffer) / sample_rtt` within [0.5, 2]:
    /// below 1 the limit shrinks.
    pub gradient: Option<f64>,
    /// When the minimum RTT is next measured, in milliseconds from now
    /// (`null` before the first measurement and during one).
    pub next_min_rtt_measurement_ms: Option<u64>,
    /// Requests per outcome since start.
    pub requests: OutcomeCounts,
}

/// Requests per [`Outcome`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OutcomeCounts {
    /// Admitted at once.
    pub admitted: u64,
    /// Admitted after waiting.
    pub queued: u64,
    /// Refused, full.
    pub refused_full: u64,
    /// Refused, deadline.
    pub refused_deadline: u64,
}

impl OutcomeCounts {
    fn bump(&mut self, outcome: Outcome) {
        let n = match outcome {
            Outcome::Admitted => &mut self.admitted,
            Outcome::Queued => &mut self.queued,
            Outcome::RefusedFull => &mut self.refused_full,
            Outcome::RefusedDeadline => &mut self.refused_deadline,
        };
        *n += 1;
    }
}

/// One listener's admission control. Cloning shares it; every service made
/// from it (every connection) shares one limit and one queue.
#[derive(Clone)]
pub struct Admission {
    shared: Arc<Shared>,
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("listener", &self.shared.listener)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

struct Shared {
    listener: String,
    config: AdmissionConfig,
    state: Mutex<State>,
    metrics: Metrics,
}

struct State {
    limit: GradientLimit,
    in_flight: usize,
    /// Waiters, oldest first: a freed slot (with the limit's ticket) goes
    /// to the last (LIFO).
    waiters: Vec<Waiter>,
    /// Since when the queue has been busy (`None`: it is not); see
    /// [`State::busy_since`].
    busy_since: Option<Instant>,
    /// Since when the queue has been empty (`None`: it has waiters).
    empty_since: Option<Instant>,
    next_id: u64,
    counts: OutcomeCounts,
}

struct Waiter {
    id: u64,
    /// When it joined the queue.
    since: Instant,
    slot: oneshot::Sender<Ticket>,
}

struct Metrics {
    limit: Gauge,
    min_rtt: Gauge,
    in_flight: Gauge,
    queued: Gauge,
    outcomes: [Counter; 4],
    refusal: Histogram,
}

impl Metrics {
    fn new(listener: &str) -> Self {
        let l = listener.to_owned();
        Self {
            limit: metrics::gauge!("shopeasy_admission_limit", "listener" => l.clone()),
            min_rtt: metrics::gauge!("shopeasy_admission_min_rtt_seconds", "listener" => l.clone()),
            in_flight: metrics::gauge!("shopeasy_admission_in_flight", "listener" => l.clone()),
            queued: metrics::gauge!("shopeasy_admission_queued", "listener" => l.clone()),
            outcomes: Outcome::ALL.map(|o| {
                metrics::counter!(
                    "shopeasy_admission_requests_total",
                    "listener" => l.clone(),
                    "outcome" => o.as_str()
                )
            }),
            refusal: metrics::histogram!("shopeasy_admission_refusal_seconds", "listener" => l),
        }
    }
}

impl Admission {
    /// Admission control for `listener` (its `listener` label).
    pub fn new(listener: impl Into<String>, config: AdmissionConfig) -> Self {
        let listener = listener.into();
        let metrics = Metrics::new(&listener);
        let limit = GradientLimit::new(config.limit);
        metrics.limit.set(limit.limit() as f64);
        metrics.in_flight.set(0.0);
        metrics.queued.set(0.0);
        Self {
            shared: Arc::new(Shared {
                listener,
                config,
                state: Mutex::new(State {
                    limit,
                    in_flight: 0,
                    waiters: Vec::new(),
                    busy_since: None,
                    empty_since: None,
                    next_id: 0,
                    counts: OutcomeCounts::default(),
                }),
                metrics,
            }),
        }
    }

    /// The parameters.
    pub fn config(&self) -> &AdmissionConfig {
        &self.shared.config
    }

    /// The listener's name.
    pub fn listener(&self) -> &str {
        &self.shared.listener
    }

    /// Admits a request whose caller's deadline is `deadline` (`None`: the
    /// caller sent none; the service's `default_deadline` applies, and caps
    /// the caller's): a [`Permit`] to hold while it is served, or the
    /// [`Refusal`] to answer with.
    ///
    /// Returns at once when a slot is free, when the queue is full, or when
    /// the deadline leaves less time than the expected service time;
    /// otherwise waits for a slot at most `queue_timeout` (and no longer
    /// than the deadline leaves after the expected service time).
    ///
    /// # Errors
    /// The [`Refusal`] when the request is not admitted.
    pub async fn acquire(&self, deadline: Option<Deadline>) -> Result<Permit, Refusal> {
        let arrived = clock::now();
        let cfg = self.shared.config;
        let own = Deadline::after_from(arrived, cfg.default_deadline);
        let deadline = deadline.map_or(own, |d| d.earliest(own));
        let remaining = deadline.remaining_from(arrived);

        let (rx, id, wait, longest) = {
            let mut st = self.shared.lock();
            let limit = st.limit.limit();
            if st.in_flight < limit {
                st.in_flight += 1;
                self.shared.admitted(&mut st, Outcome::Admitted);
                let ticket = st.limit.ticket();
                return Ok(self.permit(arrived, ticket));
            }
            let expected = st.limit.expected();
            let refusal = |reason| Refusal {
                reason,
                retry_after: cfg.retry_after,
                limit,
                remaining,
                expected,
            };
            if remaining <= expected {
                return Err(self.shared.refused(
                    &mut st,
                    refusal(Outcome::RefusedDeadline),
                    arrived,
                ));
            }
            let standing = st.cut_standing_queue(&cfg, arrived);
            let longest = if standing {
                cfg.standing_queue_timeout.min(cfg.queue_timeout)
            } else {
                cfg.queue_timeout
            };
            let wait = longest.min(remaining - expected);
            let room = if standing {
                st.drainable(&cfg)
            } else {
                cfg.queue_size
            };
            if st.waiters.len() >= room || wait.is_zero() {
                return Err(self
                    .shared
                    .refused(&mut st, refusal(Outcome::RefusedFull), arrived));
            }
            let (tx, rx) = oneshot::channel();
            let id = st.next_id;
            st.next_id += 1;
            st.waiters.push(Waiter {
                id,
                since: arrived,
                slot: tx,
            });
            st.join(&cfg, arrived);
            self.shared.metrics.queued.set(st.waiters.len() as f64);
            (rx, id, wait, longest)
        };

        let mut waiting = Waiting {
            shared: &self.shared,
            id,
            rx: Some(rx),
        };
        let handed = match waiting.rx.as_mut() {
            Some(rx) => tokio::time::timeout_at(arrived + wait, rx)
                .await
                .ok()
                .and_then(Result::ok),
            None => None,
        };
        let mut st = self.shared.lock();
        // Handed a slot, or handed one just as the wait ran out (the hand-over
        // happens under the lock, so after taking it the answer is final).
        let got = handed.or_else(|| {
            if st.remove_waiter(id) {
                None
            } else {
                waiting.try_take()
            }
        });
        waiting.rx = None;
        st.note_if_empty(clock::now());
        self.shared.metrics.queued.set(st.waiters.len() as f64);
        if let Some(ticket) = got {
            self.shared.admitted(&mut st, Outcome::Queued);
            drop(st);
            return Ok(self.permit(clock::now(), ticket));
        }
        let reason = if wait < longest {
            Outcome::RefusedDeadline
        } else {
            Outcome::RefusedFull
        };
        let refusal = Refusal {
            reason,
            retry_after: cfg.retry_after,
            limit: st.limit.limit(),
            remaining: deadline.remaining_from(clock::now()),
            expected: st.limit.expected(),
        };
        Err(self.shared.refused(&mut st, refusal, arrived))
    }

    /// The live state.
    pub fn snapshot(&self) -> AdmissionSnapshot {
        let st = self.shared.lock();
        let cfg = st.limit.config();
        let now = clock::now();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        AdmissionSnapshot {
            listener: self.shared.listener.clone(),
            limit: st.limit.limit(),
            min_limit: cfg.min,
            max_limit: cfg.max,
            in_flight: st.in_flight,
            queued: st.waiters.len(),
            queue_size: self.shared.config.queue_size,
            queue_timeout_ms: millis(self.shared.config.queue_timeout),
            standing_queue_timeout_ms: ms(self.shared.config.standing_queue_timeout),
            standing: st.is_standing(&self.shared.config, now),
            expected_ms: ms(st.limit.expected()),
            phase: st.limit.phase(),
            min_rtt_ms: st.limit.min_rtt().map(ms),
            sample_rtt_ms: st.limit.sample_rtt().map(ms),
            gradient: st.limit.gradient(),
            next_min_rtt_measurement_ms: st
                .limit
                .next_measurement()
                .map(|at| millis(at.saturating_duration_since(now))),
            requests: st.counts,
        }
    }

    fn permit(&self, start: Instant, ticket: Ticket) -> Permit {
        Permit {
            shared: Some(self.shared.clone()),
            start,
            ticket,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A queued request's place; leaving (dropped while waiting: the caller
/// went away) gives back a slot handed to it meanwhile.
struct Waiting<'a> {
    shared: &'a Shared,
    id: u64,
    rx: Option<oneshot::Receiver<Ticket>>,
}

impl Waiting<'_> {
    fn try_take(&mut self) -> Option<Ticket> {
        self.rx.as_mut().and_then(|rx| rx.try_recv().ok())
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.rx.is_none() {
            return;
        }
        let mut st = self.shared.lock();
        if !st.remove_waiter(self.id) && self.try_take().is_some() {
            self.shared.release(&mut st, None);
        }
        st.note_if_empty(clock::now());
        self.shared.metrics.queued.set(st.waiters.len() as f64);
    }
}

impl State {
    /// Since when the queue has been busy at `now`: since a waiter joined
    /// it after it had stayed empty for `standing_queue_timeout` and for the
    /// expected service time (one round of the requests in flight). A queue
    /// emptied for a moment and refilled within that time was emptied by
    /// slots freed all at once (a limit raised after a measurement of the
    /// minimum RTT), not drained by spare capacity: its busy spell goes on.
    fn busy_since(&self, cfg: &AdmissionConfig, now: Instant) -> Option<Instant> {
        let settle = cfg.standing_queue_timeout.max(self.limit.expected());
        match self.empty_since {
            Some(e) if now.saturating_duration_since(e) >= settle => None,
            _ => self.busy_since,
        }
    }

    /// Whether the queue has been busy for a whole `queue_timeout`.
    fn is_standing(&self, cfg: &AdmissionConfig, now: Instant) -> bool {
        self.busy_since(cfg, now)
            .is_some_and(|t| now.saturating_duration_since(t) >= cfg.queue_timeout)
    }

    /// How many waiters a standing queue holds: as many as the slots
    /// expected to free within `standing_queue_timeout` (limit × target ÷
    /// service time, at least one, at most `queue_size`). A waiter beyond
    /// them would only leave at the target, refused late: it is refused on
    /// arrival instead, so refusals under lasting overload cost no wait.
    fn drainable(&self, cfg: &AdmissionConfig) -> usize {
        let expected = self.limit.expected().as_secs_f64();
        if expected <= 0.0 {
            return cfg.queue_size;
        }
        let slots = self.limit.limit() as f64 * cfg.standing_queue_timeout.as_secs_f64() / expected;
        // Saturating: a huge ratio is just "the whole queue".
        (slots.ceil() as usize).clamp(1, cfg.queue_size.max(1))
    }

    /// A waiter joins the queue at `now`.
    fn join(&mut self, cfg: &AdmissionConfig, now: Instant) {
        self.busy_since = Some(self.busy_since(cfg, now).unwrap_or(now));
        self.empty_since = None;
    }

    /// When the queue is standing, refuses every waiter that has waited
    /// `standing_queue_timeout` or longer (dropping its sender wakes it with
    /// a refusal), so waits already granted under a good queue are cut too.
    /// Returns whether the queue is standing.
    fn cut_standing_queue(&mut self, cfg: &AdmissionConfig, now: Instant) -> bool {
        if !self.is_standing(cfg, now) {
            return false;
        }
        // Oldest first: the waiters to cut are a prefix.
        let old = self
            .waiters
            .iter()
            .take_while(|w| now.saturating_duration_since(w.since) >= cfg.standing_queue_timeout)
            .count();
        self.waiters.drain(..old);
        self.note_if_empty(now);
        true
    }

    /// Notes when the queue became empty: once it has stayed so for
    /// `standing_queue_timeout` and a service time, it is a good queue
    /// again.
    fn note_if_empty(&mut self, now: Instant) {
        if self.waiters.is_empty() && self.empty_since.is_none() {
            self.empty_since = Some(now);
        }
    }

    fn remove_waiter(&mut self, id: u64) -> bool {
        match self.waiters.iter().position(|w| w.id == id) {
            Some(i) => {
                self.waiters.remove(i);
                true
            }
            None => false,
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn admitted(&self, st: &mut State, outcome: Outcome) {
        st.counts.bump(outcome);
        self.count(outcome);
        self.metrics.in_flight.set(st.in_flight as f64);
    }

    fn refused(&self, st: &mut State, refusal: Refusal, arrived: Instant) -> Refusal {
        st.counts.bump(refusal.reason);
        self.count(refusal.reason);
        self.metrics.refusal.record(
            clock::now()
                .saturating_duration_since(arrived)
                .as_secs_f64(),
        );
        refusal
    }

    fn count(&self, outcome: Outcome) {
        let i = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.metrics.outcomes[i].increment(1);
    }

    /// Frees a slot (`served`: the finished request's sample, `None` when
    /// it was abandoned) and hands free slots to the newest waiters.
    fn release(&self, st: &mut State, served: Option<Served>) {
        if let Some(s) = served {
            let in_flight = st.in_flight;
            st.limit.on_sample(s.rtt, in_flight, s.ticket, s.at);
            self.metrics.limit.set(st.limit.limit() as f64);
            if let Some(min_rtt) = st.limit.min_rtt() {
                self.metrics.min_rtt.set(min_rtt.as_secs_f64());
            }
        }
        st.in_flight = st.in_flight.saturating_sub(1);
        while st.in_flight < st.limit.limit() {
            let Some(w) = st.waiters.pop() else { break };
            if w.slot.send(st.limit.ticket()).is_ok() {
                st.in_flight += 1;
            }
        }
        st.note_if_empty(served.as_ref().map_or_else(clock::now, |s| s.at));
        self.metrics.in_flight.set(st.in_flight as f64);
        self.metrics.queued.set(st.waiters.len() as f64);
    }
}

/// A served request, as the limit learns from it.
#[derive(Clone, Copy)]
struct Served {
    rtt: Duration,
    ticket: Ticket,
    at: Instant,
}

/// An admitted request's slot. [`Permit::complete`] when it has been
/// served (its service time teaches the limit); dropping it without
/// completing (the request was cancelled) frees the slot and teaches
/// nothing.
#[must_use = "the slot is freed when the permit is dropped"]
pub struct Permit {
    shared: Option<Arc<Shared>>,
    start: Instant,
    ticket: Ticket,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

impl Permit {
    /// The request was answered with `status`: a service time
    /// ([`Permit::complete`]) unless the answer is a refusal — 429, or 503
    /// from here or from a service further on (its admission control, a
    /// dependency it could not reach). A refusal is quick because nothing
    /// was done: counted as a service time, a stream of them would read as
    /// a fast service and raise the limit, letting in more of what is
    /// being refused. It frees the slot and teaches nothing, as an
    /// abandoned request does.
    ///
    /// The status alone cannot tell a gRPC refusal (HTTP 200 with a
    /// `grpc-status` header): a listener that may carry gRPC calls uses
    /// [`Permit::answered_head`].
    pub fn answered(self, status: http::StatusCode) {
        if status == http::StatusCode::SERVICE_UNAVAILABLE
            || status == http::StatusCode::TOO_MANY_REQUESTS
        {
            drop(self);
        } else {
            self.complete();
        }
    }

    /// The request was answered with this head: as [`Permit::answered`],
    /// and a gRPC refusal is one too. tonic returns a handler's error as a
    /// trailers-only response — HTTP 200, the code in the `grpc-status`
    /// header — so a fast `RESOURCE_EXHAUSTED` (8) or `UNAVAILABLE` (14),
    /// gRPC's 429 and 503, would otherwise be learnt as a fast service
    /// time and raise the limit.
    pub fn answered_head(self, status: http::StatusCode, headers: &http::HeaderMap) {
        if grpc_refusal_in(headers) {
            drop(self);
        } else {
            self.answered(status);
        }
    }

    /// The request has been served: frees the slot and records its service
    /// time (from admission, queue wait excluded).
    pub fn complete(mut self) {
        if let Some(shared) = self.shared.take() {
            let at = clock::now();
            let served = Served {
                rtt: at.saturating_duration_since(self.start),
                ticket: self.ticket,
                at,
            };
            shared.release(&mut shared.lock(), Some(served));
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.release(&mut shared.lock(), None);
        }
    }
}

/// Whether a response head carries a gRPC refusal: `grpc-status` 8
/// (`RESOURCE_EXHAUSTED`) or 14 (`UNAVAILABLE`). Read from the headers, so
/// only a trailers-only answer (how a unary error comes back) is seen; a
/// status in the trailers comes after the service time was measured.
fn grpc_refusal_in(headers: &http::HeaderMap) -> bool {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|code| code == 8 || code == 14)
}
