//! Client-side adaptive throttling: a callee that refuses most calls for
//! overload is not also asked for them.
//!
//! The Google SRE book, chapter 21 ("Handling Overload", *Client-side
//! throttling*): each client keeps, per target, over a sliding window
//! (the book prefers two minutes),
//!
//! - **requests** — the requests attempted by the application layer, at the
//!   client, on top of the throttle: the ones it refused locally count too;
//! - **accepts** — the requests the callee accepted,
//!
//! and refuses a new request locally with probability
//! `max(0, (requests − K·accepts) / (requests + 1))`. While the callee
//! accepts everything the two are equal and nothing is refused; once it
//! refuses enough that requests exceed `K` × accepts, the client refuses the
//! excess itself, without sending it. Locally refused requests keep raising
//! `requests` without raising `accepts`: the book calls this
//! counter-intuitive but preferred, because it makes the refusal
//! probability grow with the load the callee is refusing. `K = 2` (the
//! default) lets the callee see about twice what it accepts, so it notices
//! recovery quickly; a smaller `K` protects it harder.
//!
//! # Our reading, exactly
//!
//! - A request is counted when its attempt ends: one the throttle refused
//!   counts in `requests` only; one it sent counts in `requests`, and in
//!   `accepts` unless the callee refused it for overload. Counting at the
//!   end (not at the start) means a call the layers below refused without
//!   sending it (open breaker, full bulkhead, no time left to send it: see
//!   [`Verdict::NotSent`] and [`never_sent`])
//!   counts as nothing: it never reached the callee and says nothing about
//!   it; and a cancelled call counts as nothing either.
//! - **Not accepted** means the callee's own overload refusal only (the
//!   book's "rejected due to overload"): HTTP 503 and 429; gRPC
//!   `RESOURCE_EXHAUSTED`, and `UNAVAILABLE` carrying
//!   `grpc-retry-pushback-ms` (the server telling the client to back off).
//!   Every other end — an answer, an error status, a timeout, a refused
//!   connection — counts as accepted: a slow or down callee is the circuit
//!   breaker's business, the throttle reacts only to a callee that says it
//!   is overloaded. ([`Verdict`] and [`Judge`] hold this rule, one per
//!   protocol.)
//! - The throttle sits under the retry layer (each attempt is one request,
//!   so a retry meets it afresh and a throttled retry is not sent) and above
//!   the breaker (a throttled call is not a breaker failure). A throttled
//!   attempt fails with [`Throttled`], which no retry policy retries.
//!
//! Why our own and not a crate: tower's `load_shed` and `limit` shed on a
//! local concurrency or rate limit, not on the callee's refusals, and the
//! adaptive crates (`tower-acc`, `tower-resilience-adaptive`) adapt a
//! concurrency limit to latency; none counts requests against accepts.
//!
//! ```
//! use shopeasy_resilience::throttle::refusal_probability;
//!
//! assert_eq!(refusal_probability(100, 100, 2.0), 0.0); // all accepted
//! assert_eq!(refusal_probability(100, 50, 2.0), 0.0); // K = 2: still sent
//! let p = refusal_probability(100, 10, 2.0); // 90 % refused for overload
//! assert!((p - 80.0 / 101.0).abs() < 1e-12);
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::{Layer, Service};

use crate::breaker::{ErrorsAreFailures, HttpClassifier, never_sent};
use crate::error::BoxError;
use crate::window::SlidingWindow;

/// The counter of calls refused locally, by target.
pub const THROTTLED_TOTAL: &str = "shopeasy_downstream_throttled_total";

/// Slots of each window: the window slides in steps of a sixteenth.
const SLOTS: u32 = 16;

/// How a throttle is configured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleConfig {
    /// The multiplier `K`: the callee sees about `K` × what it accepts.
    /// At least 1 (`K = 1` refuses as soon as anything is refused);
    /// `f64::INFINITY` never refuses.
    pub k: f64,
    /// How far back requests and accepts are counted.
    pub window: Duration,
    /// Below this many requests in the window nothing is refused: a few
    /// refusals from a quiet callee are not evidence of overload (with
    /// none accepted, one refusal alone would give `p = ½`). Not in the
    /// book; the SRE-breaker ports (Kratos, go-zero) have the same floor.
    pub min_requests: u64,
}

impl Default for ThrottleConfig {
    /// `K = 2` as in the book, over ten seconds rather than the book's two
    /// minutes, nothing refused below 20 requests. Why the shorter window:
    /// recovery. Once the callee accepts everything again, each window's
    /// `p` is about `2p − 1` of the last one's (locally refused requests
    /// still count, sent ones are all accepted), so from `p = 0.99` it
    /// takes some seven windows to reach zero — over a minute at ten
    /// seconds, a quarter of an hour at two minutes. ShopEasy's callees
    /// shed in milliseconds and recover in seconds; the retry budget uses
    /// the same ten seconds.
    fn default() -> Self {
        Self {
            k: 2.0,
            window: Duration::from_secs(10),
            min_requests: 20,
        }
    }
}

/// The book's client request rejection probability:
/// `max(0, (requests − k·accepts) / (requests + 1))`, in `[0, 1)`.
pub fn refusal_probability(requests: u64, accepts: u64, k: f64) -> f64 {
    #[allow(clippy::cast_precision_loss)] // counts of a window, far below 2^52
    let (requests, accepts) = (requests as f64, accepts as f64);
    ((requests - k * accepts) / (requests + 1.0)).max(0.0)
}

/// A call the throttle refused locally: it was not sent.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "throttled locally: {target} refused most recent calls (refusal probability {probability:.2})"
)]
pub struct Throttled {
    /// The target not asked.
    pub target: &'static str,
    /// The refusal probability the call met.
    pub probability: f64,
}

/// How one attempt's end counts (see the module docs, "Our reading").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The callee took the request (answered, failed otherwise, or timed
    /// out): a request and an accept.
    Accepted,
    /// The callee refused it for overload: a request, not an accept.
    Rejected,
    /// A layer below refused it without sending it: nothing.
    NotSent,
}

/// Tells an overload refusal from everything else, per protocol.
pub trait Judge<Res> {
    /// How `result` counts.
    fn verdict(&self, result: &Result<Res, BoxError>) -> Verdict;
}

/// Errors only: a local refusal below is [`Verdict::NotSent`], anything
/// else accepted (for transports with no overload signal).
impl<Res> Judge<Res> for ErrorsAreFailures {
    fn verdict(&self, result: &Result<Res, BoxError>) -> Verdict {
        match result {
            Err(e) if never_sent(e.as_ref()) => Verdict::NotSent,
            _ => Verdict::Accepted,
        }
    }
}

/// HTTP: 503 and 429 are overload refusals.
impl<B> Judge<http::Response<B>> for HttpClassifier {
    fn verdict(&self, result: &Result<http::Response<B>, BoxError>) -> Verdict {
        match result {
            Ok(r) if is_http_refusal(r.status()) => Verdict::Rejected,
            Ok(_) => Verdict::Accepted,
            Err(e) if never_sent(e.as_ref()) => Verdict::NotSent,
            Err(_) => Verdict::Accepted,
        }
    }
}

/// gRPC: `RESOURCE_EXHAUSTED`, and `UNAVAILABLE` with
/// `grpc-retry-pushback-ms`, are overload refusals.
#[cfg(feature = "grpc")]
impl<Res> Judge<Res> for crate::breaker::GrpcClassifier {
    fn verdict(&self, result: &Result<Res, BoxError>) -> Verdict {
        match result {
            Ok(_) => Verdict::Accepted,
            Err(e) if never_sent(e.as_ref()) => Verdict::NotSent,
            Err(e) => match crate::error::find::<tonic::Status>(e.as_ref()) {
                Some(s) if is_grpc_refusal(s) => Verdict::Rejected,
                _ => Verdict::Accepted,
            },
        }
    }
}

/// Whether an HTTP status is an overload refusal (503, 429).
pub fn is_http_refusal(status: http::StatusCode) -> bool {
    status == http::StatusCode::SERVICE_UNAVAILABLE || status == http::StatusCode::TOO_MANY_REQUESTS
}

/// Whether a gRPC status is an overload refusal: `RESOURCE_EXHAUSTED`, or
/// `UNAVAILABLE` with server pushback.
#[cfg(feature = "grpc")]
pub fn is_grpc_refusal(status: &tonic::Status) -> bool {
    match status.code() {
        tonic::Code::ResourceExhausted => true,
        tonic::Code::Unavailable => status
            .metadata()
            .get(crate::retry::GRPC_PUSHBACK_HEADER)
            .is_some(),
        _ => false,
    }
}

#[derive(Debug)]
struct State {
    target: &'static str,
    config: ThrottleConfig,
    requests: SlidingWindow,
    accepts: SlidingWindow,
    throttled: AtomicU64,
}

/// One target's throttle: its counts, shared by every clone (and by the
/// [`ThrottleLayer`] built from it).
#[derive(Debug, Clone)]
pub struct ThrottleHandle {
    state: Arc<State>,
}

impl ThrottleHandle {
    /// A throttle for `target` (its metric label and report name); its
    /// [`THROTTLED_TOTAL`] series is registered at 0.
    pub fn new(target: &'static str, config: ThrottleConfig) -> Self {
        metrics::counter!(THROTTLED_TOTAL, "target" => target).increment(0);
        Self {
            state: Arc::new(State {
                target,
                config,
                // Unstriped: every call reads both sums, and a sum walks
                // every cell.
                requests: SlidingWindow::new(config.window, SLOTS, 1),
                accepts: SlidingWindow::new(config.window, SLOTS, 1),
                throttled: AtomicU64::new(0),
            }),
        }
    }

    /// The target.
    pub fn target(&self) -> &'static str {
        self.state.target
    }

    /// Requests and accepts in the window now.
    pub fn counts(&self) -> (u64, u64) {
        let now = Instant::now();
        (self.state.requests.sum(now), self.state.accepts.sum(now))
    }

    /// The probability the next call is refused locally.
    pub fn probability(&self) -> f64 {
        let (requests, accepts) = self.counts();
        self.probability_of(requests, accepts)
    }

    fn probability_of(&self, requests: u64, accepts: u64) -> f64 {
        let c = &self.state.config;
        if requests < c.min_requests {
            0.0
        } else {
            refusal_probability(requests, accepts, c.k)
        }
    }

    /// Calls refused locally since start.
    pub fn throttled_total(&self) -> u64 {
        self.state.throttled.load(Ordering::Relaxed)
    }

    /// Decides one call with `draw` (uniform in `[0, 1)`): `Err` when it is
    /// refused (then counted as a request), `Ok` when it may be sent (and
    /// is counted when it ends, [`ThrottleHandle::record`]).
    ///
    /// # Errors
    /// [`Throttled`] when the call is refused.
    pub fn admit(&self, draw: f64) -> Result<(), Throttled> {
        let probability = self.probability();
        if draw < probability {
            self.state.requests.add(Instant::now());
            self.state.throttled.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(THROTTLED_TOTAL, "target" => self.state.target).increment(1);
            Err(Throttled {
                target: self.state.target,
                probability,
            })
        } else {
            Ok(())
        }
    }

    /// Counts an admitted call's end.
    pub fn record(&self, verdict: Verdict) {
        let now = Instant::now();
        match verdict {
            Verdict::Accepted => {
                self.state.requests.add(now);
                self.state.accepts.add(now);
            }
            Verdict::Rejected => self.state.requests.add(now),
            Verdict::NotSent => {}
        }
    }

    /// The live state for `/admin/resilience`.
    pub fn snapshot(&self) -> Value {
        let (requests, accepts) = self.counts();
        let c = self.state.config;
        json!({
            "requests": requests,
            "accepts": accepts,
            "refusal_probability": self.probability_of(requests, accepts),
            "throttled_total": self.throttled_total(),
            "k": if c.k.is_finite() { json!(c.k) } else { json!("infinity") },
            "window_seconds": c.window.as_secs_f64(),
            "min_requests": c.min_requests,
        })
    }
}

/// Puts a [`Throttle`] in front of a service.
#[derive(Debug, Clone)]
pub struct ThrottleLayer<J> {
    handle: ThrottleHandle,
    judge: J,
}

impl<J> ThrottleLayer<J> {
    /// Throttles by `handle`'s counts, `judge` telling refusals.
    pub fn new(handle: ThrottleHandle, judge: J) -> Self {
        Self { handle, judge }
    }
}

impl<S, J: Clone> Layer<S> for ThrottleLayer<J> {
    type Service = Throttle<S, J>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle {
            inner,
            handle: self.handle.clone(),
            judge: self.judge.clone(),
        }
    }
}

/// Refuses calls locally with the adaptive-throttling probability (see the
/// module docs).
#[derive(Debug, Clone)]
pub struct Throttle<S, J> {
    inner: S,
    handle: ThrottleHandle,
    judge: J,
}

impl<S, J, Req> Service<Req> for Throttle<S, J>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    J: Judge<S::Response> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, J>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        match self.handle.admit(rand::random::<f64>()) {
            Err(refused) => ResponseFuture {
                inner: None,
                refused: Some(refused),
                handle: self.handle.clone(),
                judge: self.judge.clone(),
            },
            Ok(()) => ResponseFuture {
                inner: Some(self.inner.call(req)),
                refused: None,
                handle: self.handle.clone(),
                judge: self.judge.clone(),
            },
        }
    }
}

pin_project! {
    /// [`Throttle`]'s future: counts the call's end.
    #[derive(Debug)]
    pub struct ResponseFuture<F, J> {
        #[pin]
        inner: Option<F>,
        refused: Option<Throttled>,
        handle: ThrottleHandle,
        judge: J,
    }
}

impl<F, T, E, J> Future for ResponseFuture<F, J>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    J: Judge<T>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            let refused = this.refused.take().map_or_else(
                || BoxError::from("throttled locally"),
                |r| Box::new(r) as BoxError,
            );
            return Poll::Ready(Err(refused));
        };
        let result = std::task::ready!(inner.poll(cx)).map_err(Into::into);
        this.handle.record(this.judge.verdict(&result));
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(k: f64) -> ThrottleConfig {
        ThrottleConfig {
            k,
            window: Duration::from_secs(10),
            min_requests: 0,
        }
    }

    #[test]
    fn the_formula_is_the_books() {
        assert_eq!(refusal_probability(0, 0, 2.0), 0.0);
        assert_eq!(refusal_probability(10, 10, 2.0), 0.0);
        assert_eq!(refusal_probability(10, 5, 2.0), 0.0, "K·accepts = requests");
        assert!((refusal_probability(10, 4, 2.0) - 2.0 / 11.0).abs() < 1e-12);
        assert!((refusal_probability(100, 0, 2.0) - 100.0 / 101.0).abs() < 1e-12);
        assert!((refusal_probability(10, 5, 1.0) - 5.0 / 11.0).abs() < 1e-12);
        assert_eq!(refusal_probability(1000, 0, f64::INFINITY), 0.0);
        assert!(refusal_probability(u64::MAX, 0, 2.0) < 1.0 + 1e-9);
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_raise_the_probability_and_it_slides_back_to_zero() {
        let t = ThrottleHandle::new("t", config(2.0));
        for _ in 0..10 {
            t.record(Verdict::Accepted);
        }
        for _ in 0..30 {
            t.record(Verdict::Rejected);
        }
        assert_eq!(t.counts(), (40, 10));
        let p = t.probability();
        assert!((p - 20.0 / 41.0).abs() < 1e-12, "{p}");
        // A draw above p is sent, below it refused, and the refusal counts
        // as a request (not an accept), raising p further.
        assert!(t.admit(0.99).is_ok());
        let refused = t.admit(0.0).unwrap_err();
        assert_eq!(refused.target, "t");
        assert_eq!(t.counts(), (41, 10));
        assert!(t.probability() > p);
        assert_eq!(t.throttled_total(), 1);
        // Calls a lower layer refused count as nothing.
        t.record(Verdict::NotSent);
        assert_eq!(t.counts(), (41, 10));
        // The window slides: after it, nothing is refused.
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(t.counts(), (0, 0));
        assert_eq!(t.probability(), 0.0);
        assert!(t.admit(0.0).is_ok(), "p = 0 refuses not even a draw of 0");
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_refused_below_the_floor() {
        let t = ThrottleHandle::new(
            "t",
            ThrottleConfig {
                min_requests: 20,
                ..config(2.0)
            },
        );
        for _ in 0..19 {
            t.record(Verdict::Rejected);
        }
        assert_eq!(t.probability(), 0.0);
        assert!(t.admit(0.0).is_ok());
        t.record(Verdict::Rejected);
        assert!((t.probability() - 20.0 / 21.0).abs() < 1e-12);
        assert_eq!(t.snapshot()["refusal_probability"], t.probability());
    }

    #[tokio::test(start_paused = true)]
    async fn accepts_bring_it_down_fast() {
        let t = ThrottleHandle::new("t", config(2.0));
        for _ in 0..100 {
            t.record(Verdict::Rejected);
        }
        assert!(t.probability() > 0.95);
        // Each accept lowers requests − K·accepts by K − 1 = 1: 100
        // accepts (half the window's requests) bring it to zero.
        for _ in 0..99 {
            t.record(Verdict::Accepted);
        }
        assert!(t.probability() > 0.0);
        t.record(Verdict::Accepted);
        assert_eq!(t.probability(), 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_counts_what_it_sends_and_refuses_what_it_must() {
        use tower::ServiceExt;
        let handle = ThrottleHandle::new("svc", config(2.0));
        let svc = tower::service_fn(|status: u16| async move {
            let mut r = http::Response::new(());
            *r.status_mut() = http::StatusCode::from_u16(status)?;
            Ok::<_, BoxError>(r)
        });
        let svc = ThrottleLayer::new(handle.clone(), HttpClassifier).layer(svc);
        svc.clone().oneshot(200).await.unwrap();
        svc.clone().oneshot(404).await.unwrap();
        svc.clone().oneshot(500).await.unwrap();
        assert_eq!(handle.counts(), (3, 3), "answers are accepts, 5xx too");
        svc.clone().oneshot(503).await.unwrap();
        svc.clone().oneshot(429).await.unwrap();
        assert_eq!(handle.counts(), (5, 3), "503 and 429 are refusals");
        // Refused until p is certain enough that one call is refused.
        let mut refused = 0;
        for _ in 0..200 {
            if let Err(e) = svc.clone().oneshot(503).await {
                assert!(crate::error::find::<Throttled>(e.as_ref()).is_some(), "{e}");
                refused += 1;
            }
        }
        assert!(refused > 100, "{refused} of 200 refused locally");
        assert_eq!(handle.throttled_total(), refused);
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn grpc_refusals_are_resource_exhausted_or_pushback() {
        use crate::breaker::GrpcClassifier;
        let judge = |s: tonic::Status| {
            <GrpcClassifier as Judge<()>>::verdict(&GrpcClassifier, &Err(s.into()))
        };
        assert_eq!(
            judge(tonic::Status::resource_exhausted("busy")),
            Verdict::Rejected
        );
        let mut pushback = tonic::Status::unavailable("busy");
        pushback
            .metadata_mut()
            .insert(crate::retry::GRPC_PUSHBACK_HEADER, "100".parse().unwrap());
        assert_eq!(judge(pushback), Verdict::Rejected);
        assert_eq!(judge(tonic::Status::unavailable("down")), Verdict::Accepted);
        assert_eq!(judge(tonic::Status::not_found("x")), Verdict::Accepted);
        let open: BoxError = crate::error::CircuitOpen::new("x").into();
        assert_eq!(
            <GrpcClassifier as Judge<()>>::verdict(&GrpcClassifier, &Err(open)),
            Verdict::NotSent
        );
        let no_time: BoxError = crate::error::DeadlineExceeded.into();
        assert_eq!(
            <GrpcClassifier as Judge<()>>::verdict(&GrpcClassifier, &Err(no_time)),
            Verdict::NotSent
        );
    }

    #[test]
    fn calls_the_layers_below_never_sent_count_as_nothing() {
        let http = |e: BoxError| {
            <HttpClassifier as Judge<http::Response<()>>>::verdict(&HttpClassifier, &Err(e))
        };
        let errors =
            |e: BoxError| <ErrorsAreFailures as Judge<()>>::verdict(&ErrorsAreFailures, &Err(e));
        for judge in [&http as &dyn Fn(BoxError) -> Verdict, &errors] {
            assert_eq!(
                judge(crate::error::DeadlineExceeded.into()),
                Verdict::NotSent
            );
            assert_eq!(
                judge(crate::error::Overloaded { max_in_flight: 1 }.into()),
                Verdict::NotSent
            );
            assert_eq!(
                judge(crate::error::AttemptTimedOut(std::time::Duration::from_secs(1)).into()),
                Verdict::Accepted,
                "sent and timed out: the callee took it"
            );
        }
    }
}
