//! The circuit breaker: stop calling a dependency that keeps failing, and
//! find out it has recovered with exactly one honest trial call.
//!
//! Two parts, as in linkerd2-proxy:
//!
//! - [`CircuitBreaker`] is the pure state machine. It owns no clock, no
//!   atomics and no I/O: every method takes `now` and the current counts, so
//!   it is unit-tested directly.
//! - [`BreakerHandle`] is the shared, lock-light state on the data path
//!   (successes and failures in a sliding window of `sampling_duration`, the
//!   state mirrored in an atomic), and [`Breaker`] / [`BreakerLayer`] the tower
//!   middleware that asks it for a [`Permit`] before each call and reports
//!   the call's [`Outcome`], decided by a [`Classify`] policy.
//!
//! Rules (SPEC §5): the breaker opens when, within `sampling_duration`, at
//! least `minimum_throughput` calls were made and the failure ratio reached
//! `failure_ratio`; it stays open for `break_duration`; then exactly **one**
//! trial call is let through while every concurrent caller fails fast with
//! [`CircuitOpen`]; the trial's outcome closes the breaker (counts reset) or
//! re-opens it. The trial permit is a lease: dropping it (the caller
//! cancelled) hands the trial to the next caller, and a trial that hangs is
//! failed after `trial_timeout`. Timeouts count as failures; a call the
//! caller cancelled (its future dropped) counts as nothing.
//!
//! **A call never sent is ignored.** A layer below the breaker may refuse a
//! call without sending it: the bulkhead sheds it
//! ([`Overloaded`](crate::error::Overloaded)), the attempt timeout finds no
//! time left to send it ([`DeadlineExceeded`]), an inner breaker is open
//! ([`CircuitOpen`]) — see [`never_sent`]. Such a refusal says nothing
//! about the dependency, so the breaker counts it as [`Outcome::Ignore`]
//! before any [`Classify`] is asked: otherwise a burst above the bulkhead's
//! limit against a healthy dependency would open the breaker. (A call that
//! was sent and ran out of time is [`AttemptTimedOut`]: a failure.) A trial
//! refused that way hands the trial to the next caller, as a cancelled one
//! does.
//!
//! Metrics: `shopeasy_downstream_circuit_transitions_total{target,state}` and
//! `shopeasy_downstream_circuit_state{target}` (0 closed, 1 open, 2
//! half-open).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_utils::CachePadded;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use serde::Serialize;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use crate::error::{AttemptTimedOut, BoxError, CircuitOpen, DeadlineExceeded};
use crate::window::{SHARDS, SlidingWindow};

/// Slots in the sampling window (a power of two).
const SLOTS: u32 = 16;

/// The transitions counter, `{target,state}`: one series per state from
/// the breaker's creation on.
pub const TRANSITIONS_TOTAL: &str = "shopeasy_downstream_circuit_transitions_total";

/// A circuit breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BreakerConfig {
    /// Failure ratio (0..=1) at which the breaker opens.
    pub failure_ratio: f64,
    /// Calls needed in the window before the ratio is trusted.
    pub minimum_throughput: u32,
    /// Length of the sliding sampling window.
    pub sampling_duration: Duration,
    /// How long the breaker stays open before a trial.
    pub break_duration: Duration,
    /// A trial call still running after this is failed (and the breaker
    /// re-opened), so a hung trial cannot hold the breaker half-open.
    pub trial_timeout: Duration,
}

impl Default for BreakerConfig {
    /// 0.5 / 5 calls / 30 s / 15 s (SPEC §5), trial timeout 10 s.
    fn default() -> Self {
        Self {
            failure_ratio: 0.5,
            minimum_throughput: 5,
            sampling_duration: Duration::from_secs(30),
            break_duration: Duration::from_secs(15),
            trial_timeout: Duration::from_secs(10),
        }
    }
}

/// A breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum State {
    /// Calls flow; outcomes are counted.
    Closed = 0,
    /// Calls fail fast until the break ends.
    Open = 1,
    /// One trial call is allowed; everyone else fails fast.
    HalfOpen = 2,
}

impl State {
    /// The metric label (`closed`, `open`, `half_open`).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
        }
    }

    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Open,
            2 => State::HalfOpen,
            _ => State::Closed,
        }
    }
}

/// How one call counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The dependency did its job (including a well-formed "no").
    Success,
    /// The dependency failed or did not answer in time.
    Failure,
    /// Says nothing about the dependency (for example the caller's own
    /// cancellation, or a call a layer below refused without sending it):
    /// not counted.
    Ignore,
}

/// What the state machine allows a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// A normal call (closed).
    Call,
    /// The one trial call (half-open).
    Trial,
    /// Fail fast.
    Reject,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Machine {
    Closed,
    Open { until: Instant },
    HalfOpen { trial_out: bool },
}

/// The pure circuit-breaker state machine: no clock, no I/O, no atomics.
///
/// Methods that can change the state return the new state when it changed.
#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    machine: Machine,
}

impl CircuitBreaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            machine: Machine::Closed,
        }
    }

    /// The settings.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The current state.
    pub fn state(&self) -> State {
        match self.machine {
            Machine::Closed => State::Closed,
            Machine::Open { .. } => State::Open,
            Machine::HalfOpen { .. } => State::HalfOpen,
        }
    }

    /// When an open breaker will allow its trial.
    pub fn open_until(&self) -> Option<Instant> {
        match self.machine {
            Machine::Open { until } => Some(until),
            _ => None,
        }
    }

    /// Whether a caller may call at `now` (an open breaker whose break has
    /// ended moves to half-open and hands out its trial).
    pub fn admit(&mut self, now: Instant) -> (Admission, Option<State>) {
        match self.machine {
            Machine::Closed => (Admission::Call, None),
            Machine::Open { until } if now < until => (Admission::Reject, None),
            Machine::Open { .. } => {
                self.machine = Machine::HalfOpen { trial_out: true };
                (Admission::Trial, Some(State::HalfOpen))
            }
            Machine::HalfOpen { trial_out: true } => (Admission::Reject, None),
            Machine::HalfOpen { trial_out: false } => {
                self.machine = Machine::HalfOpen { trial_out: true };
                (Admission::Trial, None)
            }
        }
    }

    /// A normal call failed; `failures` of `total` calls failed in the
    /// sampling window (this one included). Opens the breaker when the
    /// thresholds are met.
    pub fn on_failure(&mut self, now: Instant, failures: u64, total: u64) -> Option<State> {
        if self.machine != Machine::Closed || total < u64::from(self.config.minimum_throughput) {
            return None;
        }
        let ratio = failures as f64 / total.max(1) as f64;
        if ratio + 1e-12 >= self.config.failure_ratio {
            self.machine = Machine::Open {
                until: now + self.config.break_duration,
            };
            return Some(State::Open);
        }
        None
    }

    /// The trial call ended with `outcome`: success closes, failure
    /// re-opens, [`Outcome::Ignore`] (cancelled) returns the trial permit.
    pub fn on_trial(&mut self, now: Instant, outcome: Outcome) -> Option<State> {
        if !matches!(self.machine, Machine::HalfOpen { trial_out: true }) {
            return None;
        }
        match outcome {
            Outcome::Success => {
                self.machine = Machine::Closed;
                Some(State::Closed)
            }
            Outcome::Failure => {
                self.machine = Machine::Open {
                    until: now + self.config.break_duration,
                };
                Some(State::Open)
            }
            Outcome::Ignore => {
                self.machine = Machine::HalfOpen { trial_out: false };
                None
            }
        }
    }
}

/// The shared state of one breaker (one per downstream target). Cloning
/// shares it.
#[derive(Debug, Clone)]
pub struct BreakerHandle {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    target: &'static str,
    origin: Instant,
    machine: Mutex<CircuitBreaker>,
    /// Mirror of the machine's state, read without the lock.
    state: AtomicU8,
    /// While open: the end of the break, in nanoseconds after `origin`.
    open_until: AtomicU64,
    successes: SlidingWindow,
    failures: SlidingWindow,
    transitions: [AtomicU64; 3],
}

impl BreakerHandle {
    /// A closed breaker for `target` (the metrics label). Its state gauge
    /// is set to closed and its transition counters are registered at 0 for
    /// every state, so a dashboard shows "0 transitions" for a healthy
    /// target rather than no data until its first trouble.
    pub fn new(target: &'static str, config: BreakerConfig) -> Self {
        metrics::gauge!("shopeasy_downstream_circuit_state", "target" => target).set(0.0);
        for state in [State::Closed, State::Open, State::HalfOpen] {
            // Adding 0 registers the series without counting anything: a
            // second breaker of the same target keeps the counts.
            metrics::counter!(
                TRANSITIONS_TOTAL,
                "target" => target,
                "state" => state.as_str()
            )
            .increment(0);
        }
        Self {
            shared: Arc::new(Shared {
                target,
                origin: Instant::now(),
                machine: Mutex::new(CircuitBreaker::new(config)),
                state: AtomicU8::new(State::Closed as u8),
                open_until: AtomicU64::new(0),
                successes: SlidingWindow::new(config.sampling_duration, SLOTS, SHARDS),
                failures: SlidingWindow::new(config.sampling_duration, SLOTS, SHARDS),
                transitions: Default::default(),
            }),
        }
    }

    /// The target this breaker protects.
    pub fn target(&self) -> &'static str {
        self.shared.target
    }

    /// The current state.
    pub fn state(&self) -> State {
        State::from_u8(self.shared.state.load(Ordering::Acquire))
    }

    /// Whether a call made now would be refused without reaching the
    /// service: open, with the break not over. A caller with somewhere
    /// else to put the work (an outbox) can skip a call that cannot
    /// succeed. Half-open is not reported: a call may be the trial.
    pub fn is_refusing(&self) -> bool {
        let s = &self.shared;
        State::from_u8(s.state.load(Ordering::Acquire)) == State::Open
            && s.nanos(Instant::now()) < s.open_until.load(Ordering::Acquire)
    }

    /// Asks to make a call: a [`Permit`] to report the outcome on, or
    /// [`CircuitOpen`].
    ///
    /// # Errors
    /// [`CircuitOpen`] while open, or half-open with the trial taken.
    pub fn try_acquire(&self) -> Result<Permit, CircuitOpen> {
        let trial = self.admit()?;
        Ok(Permit {
            shared: Some(self.shared.clone()),
            trial,
        })
    }

    /// Admits a call: `Ok(true)` for the trial, `Ok(false)` for a normal
    /// call. Lock-free while closed, and while open until the break ends.
    fn admit(&self) -> Result<bool, CircuitOpen> {
        let s = &self.shared;
        match State::from_u8(s.state.load(Ordering::Acquire)) {
            State::Closed => return Ok(false),
            State::Open => {
                let now = crate::clock::now();
                let until = s.open_until.load(Ordering::Acquire);
                if s.nanos(now) < until {
                    return Err(CircuitOpen::new(s.target));
                }
            }
            State::HalfOpen => {}
        }
        let now = Instant::now();
        let mut m = s.lock();
        let (admission, transition) = m.admit(now);
        s.apply(&m, transition);
        drop(m);
        match admission {
            Admission::Call => Ok(false),
            Admission::Trial => Ok(true),
            Admission::Reject => Err(CircuitOpen::new(s.target)),
        }
    }

    /// Live state for `/admin/resilience`.
    ///
    /// The state and the transition counts are read under the machine's
    /// lock, which every transition holds while it moves both: a reader
    /// (the console counts trials from them) never sees a state that its
    /// counts do not lead to. Read after the lock, a transition between
    /// the two reads made them disagree by one.
    pub fn snapshot(&self) -> serde_json::Value {
        let s = &self.shared;
        let now = Instant::now();
        let m = s.lock();
        let config = *m.config();
        let open_for = m.open_until().map(|u| u.saturating_duration_since(now));
        let state = m.state();
        let [closed, open, half_open] = s
            .transitions
            .each_ref()
            .map(|count| count.load(Ordering::Relaxed));
        drop(m);
        serde_json::json!({
            "state": state.as_str(),
            "failures_in_window": s.failures.sum(now),
            "successes_in_window": s.successes.sum(now),
            "open_remaining_seconds": open_for.map(|d| d.as_secs_f64()),
            "transitions": {
                "closed": closed,
                "open": open,
                "half_open": half_open,
            },
            "config": {
                "failure_ratio": config.failure_ratio,
                "minimum_throughput": config.minimum_throughput,
                "sampling_duration_seconds": config.sampling_duration.as_secs_f64(),
                "break_duration_seconds": config.break_duration.as_secs_f64(),
                "trial_timeout_seconds": config.trial_timeout.as_secs_f64(),
            },
        })
    }

    fn trial_timeout(&self) -> Duration {
        self.shared.lock().config().trial_timeout
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, CircuitBreaker> {
        // The machine is always left consistent: a poisoned lock is usable.
        self.machine.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Mirrors the machine after a possible transition (called under the
    /// lock) and reports it.
    fn apply(&self, m: &CircuitBreaker, transition: Option<State>) {
        let Some(state) = transition else { return };
        if let Some(until) = m.open_until() {
            self.open_until.store(self.nanos(until), Ordering::Release);
        }
        if state == State::Closed {
            self.successes.reset();
            self.failures.reset();
        }
        self.state.store(state as u8, Ordering::Release);
        self.transitions[state as usize].fetch_add(1, Ordering::Relaxed);
        metrics::counter!(
            TRANSITIONS_TOTAL,
            "target" => self.target,
            "state" => state.as_str()
        )
        .increment(1);
        metrics::gauge!("shopeasy_downstream_circuit_state", "target" => self.target)
            .set(f64::from(state as u8));
        tracing::info!(target: "shopeasy_resilience::breaker", downstream = self.target, state = state.as_str(), "circuit breaker transition");
    }

    fn record(&self, trial: bool, outcome: Outcome) {
        let now = Instant::now();
        if trial {
            let mut m = self.lock();
            let t = m.on_trial(now, outcome);
            self.apply(&m, t);
            return;
        }
        match outcome {
            Outcome::Ignore => {}
            Outcome::Success => self.successes.add(now),
            Outcome::Failure => {
                self.failures.add(now);
                let failures = self.failures.sum(now);
                let total = failures + self.successes.sum(now);
                let mut m = self.lock();
                let t = m.on_failure(now, failures, total);
                self.apply(&m, t);
            }
        }
    }
}

/// Permission to make one call; report how it went with
/// [`Permit::record`]. A trial permit dropped without a record (the caller
/// cancelled) hands the trial to the next caller.
#[derive(Debug)]
pub struct Permit {
    shared: Option<Arc<Shared>>,
    trial: bool,
}

impl Permit {
    /// Whether this is the half-open trial.
    pub fn is_trial(&self) -> bool {
        self.trial
    }

    /// Reports the call's outcome.
    pub fn record(mut self, outcome: Outcome) {
        if let Some(shared) = self.shared.take() {
            shared.record(self.trial, outcome);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take()
            && self.trial
        {
            shared.record(true, Outcome::Ignore);
        }
    }
}

/// The data path's permit: like [`Permit`], but holding its [`Breaker`]
/// instance's own `Arc`, so concurrent calls on different threads do not
/// contend on one reference count.
#[derive(Debug)]
struct Lease {
    owner: Option<Arc<CachePadded<BreakerHandle>>>,
    trial: bool,
}

impl Lease {
    fn record(mut self, outcome: Outcome) {
        if let Some(owner) = self.owner.take() {
            owner.shared.record(self.trial, outcome);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take()
            && self.trial
        {
            owner.shared.record(true, Outcome::Ignore);
        }
    }
}

/// Decides how a call's result counts for the breaker.
///
/// [`Breaker`] asks only about calls that were sent: an error saying a
/// layer below refused the call without sending it ([`never_sent`]) is
/// [`Outcome::Ignore`] whatever the classifier would say (a call never
/// sent is ignored; see the module docs).
pub trait Classify<Res, E> {
    /// The outcome of `result`.
    fn classify(&self, result: &Result<Res, E>) -> Outcome;
}

/// Whether `err` says a layer below the breaker refused the call without
/// sending it: the bulkhead shed it
/// ([`Overloaded`](crate::error::Overloaded)), the attempt timeout had no
/// time left to send it ([`DeadlineExceeded`]), or an inner breaker is open
/// ([`CircuitOpen`]). The dependency was not asked, so such a call
/// tells nothing about its health. A sent call that ran out of time is
/// [`AttemptTimedOut`], not one of these.
pub fn never_sent(err: &(dyn std::error::Error + 'static)) -> bool {
    crate::error::is_rejected(err) || crate::error::find::<DeadlineExceeded>(err).is_some()
}

/// How `result` counts: [`Outcome::Ignore`] for a call never sent
/// ([`never_sent`]), else what `classifier` says.
fn outcome_of<C, T>(classifier: &C, result: &Result<T, BoxError>) -> Outcome
where
    C: Classify<T, BoxError>,
{
    match result {
        Err(e) if never_sent(e.as_ref()) => Outcome::Ignore,
        _ => classifier.classify(result),
    }
}

/// Every error is a failure, every response a success.
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorsAreFailures;

impl<Res, E> Classify<Res, E> for ErrorsAreFailures {
    fn classify(&self, result: &Result<Res, E>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Failure,
        }
    }
}

/// HTTP: errors and 5xx / 429 responses are failures; any other response
/// (including 4xx: the dependency answered) is a success.
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpClassifier;

impl<B, E> Classify<http::Response<B>, E> for HttpClassifier {
    fn classify(&self, result: &Result<http::Response<B>, E>) -> Outcome {
        match result {
            Ok(r) if r.status().is_server_error() => Outcome::Failure,
            Ok(r) if r.status() == http::StatusCode::TOO_MANY_REQUESTS => Outcome::Failure,
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Failure,
        }
    }
}

/// gRPC: `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`,
/// `INTERNAL`, `UNKNOWN`, `DATA_LOSS`, our timeouts and transport errors are
/// failures; `CANCELLED` is a failure when it is a client-side timeout
/// (tonic reports one as `Cancelled: Timeout expired`) and ignored otherwise;
/// every other status is an answer (success).
#[cfg(feature = "grpc")]
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcClassifier;

#[cfg(feature = "grpc")]
impl GrpcClassifier {
    /// The outcome of an error.
    pub fn classify_error(err: &(dyn std::error::Error + 'static)) -> Outcome {
        use tonic::Code;
        if crate::error::is_timeout(err) {
            return Outcome::Failure;
        }
        let Some(status) = crate::error::find::<tonic::Status>(err) else {
            return Outcome::Failure;
        };
        match status.code() {
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Internal
            | Code::Unknown
            | Code::DataLoss => Outcome::Failure,
            Code::Cancelled if crate::error::is_grpc_timeout(status) => Outcome::Failure,
            Code::Cancelled => Outcome::Ignore,
            _ => Outcome::Success,
        }
    }
}

#[cfg(feature = "grpc")]
impl<Res> Classify<Res, BoxError> for GrpcClassifier {
    fn classify(&self, result: &Result<Res, BoxError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(e) => Self::classify_error(e.as_ref()),
        }
    }
}

#[cfg(feature = "grpc")]
impl<Res> Classify<Res, tonic::Status> for GrpcClassifier {
    fn classify(&self, result: &Result<Res, tonic::Status>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(e) => Self::classify_error(e),
        }
    }
}

/// Puts a [`Breaker`] in front of a service (see the module docs).
#[derive(Debug, Clone)]
pub struct BreakerLayer<C = ErrorsAreFailures> {
    handle: BreakerHandle,
    classifier: C,
}

impl<C> BreakerLayer<C> {
    /// A layer sharing `handle`'s state, classifying with `classifier`.
    pub fn new(handle: BreakerHandle, classifier: C) -> Self {
        Self { handle, classifier }
    }
}

impl<S, C: Clone> Layer<S> for BreakerLayer<C> {
    type Service = Breaker<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Breaker::new(inner, self.handle.clone(), self.classifier.clone())
    }
}

/// The circuit breaker on the data path: fails fast with [`CircuitOpen`]
/// when the breaker refuses, else calls the inner service and reports the
/// classified outcome. Backpressure: `poll_ready` is the inner service's; an
/// open breaker answers at once.
///
/// Each instance (each clone) holds its own `Arc` of the shared handle for
/// its calls' leases: a clone per thread or per connection never contends
/// with the others on a reference count. The `Arc` is cache-line padded:
/// clones made one after another on one thread would otherwise get
/// neighbouring small allocations, and the counts of two threads' clones
/// would share a cache line (measured: two threads at 1.3× one thread's
/// throughput instead of 2×).
#[derive(Debug)]
pub struct Breaker<S, C = ErrorsAreFailures> {
    inner: S,
    local: Arc<CachePadded<BreakerHandle>>,
    classifier: C,
}

impl<S: Clone, C: Clone> Clone for Breaker<S, C> {
    fn clone(&self) -> Self {
        Self::new(
            self.inner.clone(),
            BreakerHandle::clone(&self.local),
            self.classifier.clone(),
        )
    }
}

impl<S, C> Breaker<S, C> {
    /// Wraps `inner`.
    pub fn new(inner: S, handle: BreakerHandle, classifier: C) -> Self {
        Self {
            inner,
            local: Arc::new(CachePadded::new(handle)),
            classifier,
        }
    }

    /// The shared breaker state.
    pub fn handle(&self) -> &BreakerHandle {
        &self.local
    }
}

impl<S, C, Req> Service<Req> for Breaker<S, C>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: Classify<S::Response, BoxError> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        match self.local.admit() {
            Ok(trial) => {
                let trial_timeout = trial.then(|| self.local.trial_timeout());
                ResponseFuture {
                    inner: Some(self.inner.call(req)),
                    sleep: None,
                    trial_timeout,
                    permit: Some(Lease {
                        owner: Some(self.local.clone()),
                        trial,
                    }),
                    classifier: self.classifier.clone(),
                    rejected: None,
                }
            }
            Err(open) => ResponseFuture {
                inner: None,
                sleep: None,
                trial_timeout: None,
                permit: None,
                classifier: self.classifier.clone(),
                rejected: Some(open),
            },
        }
    }
}

pin_project! {
    /// [`Breaker`]'s future.
    #[derive(Debug)]
    pub struct ResponseFuture<F, C> {
        #[pin]
        inner: Option<F>,
        sleep: Option<Pin<Box<Sleep>>>,
        trial_timeout: Option<Duration>,
        permit: Option<Lease>,
        classifier: C,
        rejected: Option<CircuitOpen>,
    }
}

impl<F, C, T, E> Future for ResponseFuture<F, C>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    C: Classify<T, BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            let open = this.rejected.take().unwrap_or(CircuitOpen::new("unknown"));
            return Poll::Ready(Err(open.into()));
        };
        if let Poll::Ready(result) = inner.poll(cx) {
            // Boxed first, so a refusal from a layer below (a call never
            // sent) can be told from the dependency's own errors.
            let result: Result<T, BoxError> = result.map_err(Into::into);
            if let Some(permit) = this.permit.take() {
                permit.record(outcome_of(&*this.classifier, &result));
            }
            return Poll::Ready(result);
        }
        if let Some(timeout) = *this.trial_timeout {
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
            ready!(sleep.as_mut().poll(cx));
            if let Some(permit) = this.permit.take() {
                permit.record(Outcome::Failure);
            }
            return Poll::Ready(Err(AttemptTimedOut(timeout).into()));
        }
        Poll::Pending
    }
}
