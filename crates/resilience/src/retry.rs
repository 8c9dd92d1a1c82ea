//! Budgeted, jittered, deadline-aware retries decided by a policy object.
//!
//! A call site never writes a retry loop: it puts a [`RetryLayer`] in its
//! stack with a [`RetryPolicy`] saying which outcomes are transient and how
//! to copy a request. For each failed attempt the layer asks, in order:
//!
//! 1. the policy: retry now, retry no earlier than a server's hint
//!    (`Retry-After`, `grpc-retry-pushback-ms`), or stop;
//! 2. `max_retries`: stop when reached (`attempts_exhausted`);
//! 3. the deadline: a retry whose delay would reach the request's
//!    [`Deadline`] is not made
//!    (`deadline_exhausted`);
//! 4. the [`RetryBudget`]: stop when it refuses (`budget_exhausted`).
//!
//! Giving up returns the last attempt's result. Each decision is counted in
//! `shopeasy_downstream_retries_total{target,outcome}` (`retried`,
//! `budget_exhausted`, `deadline_exhausted`, `attempts_exhausted`: the
//! retry half of [`Outcome`]), and each
//! attempt runs in a tracing span `attempt` with fields `target`, `attempt`
//! (1-based) and `outcome` (`ok`, `retryable` or `failed`).
//!
//! Stock policies: [`GrpcUnavailablePolicy`] (Inventory: only `UNAVAILABLE`,
//! never after a timeout) and [`HttpRetryPolicy`] (connection failures,
//! 502/503/504 and 429, never other 4xx, and only for a request that is
//! safe to repeat: [`is_repeatable`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use pin_project_lite::pin_project;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use tower::{Layer, Service, ServiceExt};
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::budget::RetryBudget;
use crate::deadline::{Deadline, HasDeadline};
use crate::error::{BoxError, is_rejected, is_timeout};
use crate::outcome::Outcome;

/// The retry decisions counter, `{target,outcome}`.
pub const RETRIES_TOTAL: &str = "shopeasy_downstream_retries_total";

/// The `outcome` values of [`RETRIES_TOTAL`]: the retry half of [`Outcome`].
pub const RETRY_OUTCOMES: [Outcome; 4] = [
    Outcome::Retried,
    Outcome::BudgetExhausted,
    Outcome::DeadlineExhausted,
    Outcome::AttemptsExhausted,
];

/// What a policy says about one attempt's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Transient: retry after the backoff.
    Retry,
    /// Transient, and the server asked to wait at least this long.
    RetryAfter(Duration),
    /// Done (success, or an error a retry would not fix).
    Stop,
}

/// Classifies attempt results and copies requests for a [`Retry`].
pub trait RetryPolicy<Req, Res, E> {
    /// Whether `result` is worth another attempt.
    fn classify(&self, result: &Result<Res, E>) -> Decision;
    /// A copy of `req` for the next attempt; `None` when it cannot be
    /// repeated (the result then stands).
    fn clone_request(&self, req: &Req) -> Option<Req>;
}

/// Inventory's policy (SPEC §5): retry only connection failures —
/// `UNAVAILABLE`, a refused or reset connection surfacing as an I/O error,
/// tonic's `UNKNOWN` "transport error" over a connection reset mid-call
/// (safe because the calls it guards are idempotent), and tonic's
/// `CANCELLED` over a call that was never written ([`is_unsent`]) —
/// honouring `grpc-retry-pushback-ms` (a negative or malformed
/// pushback means "do not retry", as in gRPC's retry design), and never
/// after a timeout, an open circuit or a shed call.
#[cfg(feature = "grpc")]
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcUnavailablePolicy;

/// gRPC's server pushback header.
#[cfg(feature = "grpc")]
pub const GRPC_PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";

#[cfg(feature = "grpc")]
impl GrpcUnavailablePolicy {
    /// The decision for an error.
    pub fn classify_error(err: &(dyn std::error::Error + 'static)) -> Decision {
        if is_timeout(err) || is_rejected(err) {
            return Decision::Stop;
        }
        let Some(status) = crate::error::find::<tonic::Status>(err) else {
            // A transport that reports a refused or reset connection as an
            // I/O error rather than `UNAVAILABLE`.
            return if is_connection_failure(err) {
                Decision::Retry
            } else {
                Decision::Stop
            };
        };
        if status.code() != tonic::Code::Unavailable {
            // tonic reports a connection reset or closed mid-call as UNKNOWN
            // "transport error" with the I/O error as its source, and a call
            // queued for a connection that closed before writing it (a retry
            // right after a reset, say) as CANCELLED with hyper's "canceled"
            // as its source. Both are connection failures (FAULTS.md F2),
            // safe to retry: the calls this policy guards are idempotent, and
            // the second was never sent. A status the server sent has no
            // such source.
            let transport = matches!(status.code(), tonic::Code::Unknown | tonic::Code::Cancelled)
                && is_connection_failure(err);
            return if transport {
                Decision::Retry
            } else {
                Decision::Stop
            };
        }
        match status.metadata().get(GRPC_PUSHBACK_HEADER) {
            None => Decision::Retry,
            Some(v) => match v.to_str().ok().and_then(|s| s.trim().parse::<i64>().ok()) {
                Some(ms) if ms >= 0 => {
                    Decision::RetryAfter(Duration::from_millis(ms.unsigned_abs()))
                }
                _ => Decision::Stop,
            },
        }
    }
}

#[cfg(feature = "grpc")]
impl<Req: Clone, Res> RetryPolicy<Req, Res, BoxError> for GrpcUnavailablePolicy {
    fn classify(&self, result: &Result<Res, BoxError>) -> Decision {
        match result {
            Ok(_) => Decision::Stop,
            Err(e) => Self::classify_error(e.as_ref()),
        }
    }

    fn clone_request(&self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

#[cfg(feature = "grpc")]
impl<Req: Clone, Res> RetryPolicy<Req, Res, tonic::Status> for GrpcUnavailablePolicy {
    fn classify(&self, result: &Result<Res, tonic::Status>) -> Decision {
        match result {
            Ok(_) => Decision::Stop,
            Err(e) => Self::classify_error(e),
        }
    }

    fn clone_request(&self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

/// HTTP's policy (SPEC §5): retry connection failures, 502, 503, 504 and
/// 429, honouring `Retry-After` (delta-seconds or an HTTP-date; a date in
/// the past means "now", a malformed value counts as absent); never other
/// 4xx, never after a timeout, an open circuit or a shed call.
///
/// A connection failure is, by default, an [`std::io::Error`] of kind
/// refused / reset / aborted / not connected / broken pipe anywhere in the
/// error chain; a client library with its own error type adds its test with
/// [`HttpRetryPolicy::with_connection_error`] (for hyper-util:
/// `|e| find::<hyper_util::client::legacy::Error>(e).is_some_and(|e| e.is_connect())`).
/// The request body must be `Clone` (buffered on purpose, with a cap).
///
/// Only a request that is safe to repeat is ever retried
/// ([`is_repeatable`]): a failed attempt may still have been acted on, so a
/// plain POST, a PATCH or an unknown method gets its first answer however
/// transient the failure looks.
#[derive(Debug, Clone, Copy)]
pub struct HttpRetryPolicy {
    connection_error: fn(&(dyn std::error::Error + 'static)) -> bool,
}

impl Default for HttpRetryPolicy {
    fn default() -> Self {
        Self {
            connection_error: is_io_connection_error,
        }
    }
}

impl HttpRetryPolicy {
    /// The policy with the default connection-failure test.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also treats errors for which `test` holds as connection failures.
    #[must_use]
    pub fn with_connection_error(
        mut self,
        test: fn(&(dyn std::error::Error + 'static)) -> bool,
    ) -> Self {
        self.connection_error = test;
        self
    }

    /// The decision for a response status and its `Retry-After`.
    pub fn classify_response(status: http::StatusCode, headers: &http::HeaderMap) -> Decision {
        use http::StatusCode as S;
        if !matches!(
            status,
            S::BAD_GATEWAY | S::SERVICE_UNAVAILABLE | S::GATEWAY_TIMEOUT | S::TOO_MANY_REQUESTS
        ) {
            return Decision::Stop;
        }
        match headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, std::time::SystemTime::now()))
        {
            Some(wait) => Decision::RetryAfter(wait),
            None => Decision::Retry,
        }
    }

    /// The decision for an error.
    pub fn classify_error(&self, err: &(dyn std::error::Error + 'static)) -> Decision {
        if is_timeout(err) || is_rejected(err) {
            Decision::Stop
        } else if is_io_connection_error(err) || (self.connection_error)(err) {
            Decision::Retry
        } else {
            Decision::Stop
        }
    }
}

/// The header that makes a POST safe to repeat: the callee keeps the first
/// answer under the key and replays it for a repeat.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// Whether an HTTP request may be sent again after a failed attempt (SPEC
/// §5): GET, HEAD, OPTIONS, PUT and DELETE (idempotent by RFC 9110 §9.2.2),
/// or a POST carrying [`IDEMPOTENCY_KEY_HEADER`]. Anything else — a POST
/// without the key, PATCH, CONNECT, an unknown method — is never repeated:
/// the failed attempt may have been acted on (a timeout, a reset after the
/// request was written), and a repeat could do the work twice.
pub fn is_repeatable<B>(req: &http::Request<B>) -> bool {
    use http::Method as M;
    let method = req.method();
    if *method == M::POST {
        return req.headers().contains_key(IDEMPOTENCY_KEY_HEADER);
    }
    [M::GET, M::HEAD, M::OPTIONS, M::PUT, M::DELETE].contains(method)
}

/// How long a `Retry-After` value asks to wait, seen at `now`:
/// delta-seconds, or an HTTP-date (RFC 9110 §10.2.3; a date already past is
/// zero). `None` when malformed.
fn retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Whether `err` means the connection failed, so the call got no answer:
/// an I/O error of a failed connection ([`is_io_connection_error`]) or,
/// with the `grpc` feature, a call that was never written ([`is_unsent`]).
pub fn is_connection_failure(err: &(dyn std::error::Error + 'static)) -> bool {
    is_io_connection_error(err) || is_unsent(err)
}

/// Whether `err`'s chain holds hyper's "canceled": the client never wrote
/// the request — it was queued for a connection that then closed
/// ("connection closed"), or the connection was not ready. hyper raises it
/// only for a request "never even started, so it's safe" to send again;
/// tonic reports it as `CANCELLED` "operation was canceled".
#[cfg(feature = "grpc")]
pub fn is_unsent(err: &(dyn std::error::Error + 'static)) -> bool {
    crate::error::find::<hyper::Error>(err).is_some_and(hyper::Error::is_canceled)
}

/// Without the `grpc` feature no hyper client is in the chain: never.
#[cfg(not(feature = "grpc"))]
pub fn is_unsent(_err: &(dyn std::error::Error + 'static)) -> bool {
    false
}

/// Whether `err`'s chain holds an I/O error meaning the connection failed.
pub fn is_io_connection_error(err: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind as K;
    crate::error::find::<std::io::Error>(err).is_some_and(|e| {
        matches!(
            e.kind(),
            K::ConnectionRefused
                | K::ConnectionReset
                | K::ConnectionAborted
                | K::NotConnected
                | K::BrokenPipe
        )
    })
}

impl<B: Clone, RB> RetryPolicy<http::Request<B>, http::Response<RB>, BoxError> for HttpRetryPolicy {
    fn classify(&self, result: &Result<http::Response<RB>, BoxError>) -> Decision {
        match result {
            Ok(r) => Self::classify_response(r.status(), r.headers()),
            Err(e) => self.classify_error(e.as_ref()),
        }
    }

    /// A copy of `req` for the next attempt, or `None` — the first answer
    /// stands, whatever it is — for a request that is not safe to repeat
    /// ([`is_repeatable`]).
    fn clone_request(&self, req: &http::Request<B>) -> Option<http::Request<B>> {
        if !is_repeatable(req) {
            return None;
        }
        let mut out = http::Request::new(req.body().clone());
        *out.method_mut() = req.method().clone();
        *out.uri_mut() = req.uri().clone();
        *out.version_mut() = req.version();
        *out.headers_mut() = req.headers().clone();
        *out.extensions_mut() = req.extensions().clone();
        Some(out)
    }
}

#[derive(Debug)]
struct Config<P> {
    policy: P,
    budget: RetryBudget,
    backoff: Backoff,
    max_retries: u32,
    target: &'static str,
    rng: Option<Mutex<SmallRng>>,
}

impl<P> Config<P> {
    fn delay(&self, retry: u32, prev: Duration) -> Duration {
        match &self.rng {
            Some(rng) => {
                let mut rng = rng.lock().unwrap_or_else(|p| p.into_inner());
                self.backoff.delay(retry, prev, &mut *rng)
            }
            None => self.backoff.delay(retry, prev, &mut rand::rng()),
        }
    }

    fn count(&self, outcome: Outcome) {
        metrics::counter!(
            RETRIES_TOTAL,
            "target" => self.target,
            "outcome" => outcome.as_str()
        )
        .increment(1);
    }
}

/// Adds budgeted retries to a service (see the module docs).
#[derive(Debug)]
pub struct RetryLayer<P> {
    config: Arc<Config<P>>,
}

impl<P> Clone for RetryLayer<P> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
        }
    }
}

impl<P> RetryLayer<P> {
    /// Retries what `policy` calls transient, at most `max_retries` times,
    /// each taken from `budget`, after `backoff`; `target` labels the
    /// metrics and spans. Every [`RETRY_OUTCOMES`] series of `target` is
    /// registered at 0 here, so "no retries yet" shows as 0, not no data.
    pub fn new(
        policy: P,
        budget: RetryBudget,
        backoff: Backoff,
        max_retries: u32,
        target: &'static str,
    ) -> Self {
        for outcome in RETRY_OUTCOMES {
            metrics::counter!(
                RETRIES_TOTAL,
                "target" => target,
                "outcome" => outcome.as_str()
            )
            .increment(0);
        }
        Self {
            config: Arc::new(Config {
                policy,
                budget,
                backoff,
                max_retries,
                target,
                rng: None,
            }),
        }
    }

    /// Uses a seeded random source for the jitter (tests).
    #[must_use]
    pub fn with_seed(self, seed: u64) -> Self
    where
        P: Clone,
    {
        let c = &self.config;
        Self {
            config: Arc::new(Config {
                policy: c.policy.clone(),
                budget: c.budget.clone(),
                backoff: c.backoff,
                max_retries: c.max_retries,
                target: c.target,
                rng: Some(Mutex::new(SmallRng::seed_from_u64(seed))),
            }),
        }
    }

    /// The budget retries are taken from.
    pub fn budget(&self) -> &RetryBudget {
        &self.config.budget
    }
}

/// Retries failed attempts as its [`RetryLayer`] says. `S` must be `Clone`:
/// a later attempt runs on a copy of the service. Backpressure:
/// `poll_ready` is the inner service's for the first attempt; later attempts
/// wait for their copy to be ready.
///
/// The first attempt runs without allocating; only a call that retries
/// moves into a boxed retry loop. Each instance (each clone) keeps its own
/// spare copy of the inner service behind its own cache-line-padded `Arc`,
/// so calls never clone the inner service and clones on different threads
/// do not contend on one reference count, nor on one cache line (see
/// [`Breaker`](crate::breaker::Breaker)).
#[derive(Debug)]
pub struct Retry<S, P> {
    inner: S,
    local: Arc<CachePadded<Spare<S, P>>>,
}

/// What a retrying call needs after its first attempt.
#[derive(Debug)]
struct Spare<S, P> {
    config: Arc<Config<P>>,
    service: Mutex<S>,
}

impl<S: Clone, P> Clone for Retry<S, P> {
    fn clone(&self) -> Self {
        Self::with_config(self.inner.clone(), self.local.config.clone())
    }
}

impl<S, P> Retry<S, P> {
    /// Wraps `inner` (see [`RetryLayer::new`]).
    pub fn new(
        inner: S,
        policy: P,
        budget: RetryBudget,
        backoff: Backoff,
        max_retries: u32,
        target: &'static str,
    ) -> Self
    where
        S: Clone,
    {
        RetryLayer::new(policy, budget, backoff, max_retries, target).layer(inner)
    }

    fn with_config(inner: S, config: Arc<Config<P>>) -> Self
    where
        S: Clone,
    {
        let spare = inner.clone();
        Self {
            inner,
            local: Arc::new(CachePadded::new(Spare {
                config,
                service: Mutex::new(spare),
            })),
        }
    }
}

impl<S: Clone, P> Layer<S> for RetryLayer<P> {
    type Service = Retry<S, P>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry::with_config(inner, self.config.clone())
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// What a [`Retry`] needs of the service it wraps, named once for the
/// service and its future: cloneable (a retry runs on a copy) and `Send`
/// with everything it returns (a retrying call moves into a boxed loop).
/// Every such service is one; there is nothing to implement.
pub trait RetryService<Req>:
    Service<Req, Future: Send, Response: Send, Error: Into<BoxError> + Send> + Clone + Send + 'static
{
}

impl<S, Req> RetryService<Req> for S where
    S: Service<Req, Future: Send, Response: Send, Error: Into<BoxError> + Send>
        + Clone
        + Send
        + 'static
{
}

impl<S, P, Req> Service<Req> for Retry<S, P>
where
    S: RetryService<Req>,
    P: RetryPolicy<Req, S::Response, S::Error> + Send + Sync + 'static,
    Req: HasDeadline + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S, P, Req>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let config = &self.local.config;
        config.budget.deposit();
        let deadline = req.deadline();
        let backup = config.policy.clone_request(&req);
        let first = attempt(self.inner.call(req), config.target, 1);
        ResponseFuture {
            first: Some(first),
            later: None,
            state: Some((self.local.clone(), backup, deadline)),
        }
    }
}

pin_project! {
    /// [`Retry`]'s future.
    pub struct ResponseFuture<S, P, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        first: Option<Attempt<S::Future>>,
        later: Option<BoxFuture<S::Response>>,
        state: Option<(Arc<CachePadded<Spare<S, P>>>, Option<Req>, Option<Deadline>)>,
    }
}

impl<S, P, Req> fmt::Debug for ResponseFuture<S, P, Req>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("retrying", &self.later.is_some())
            .finish_non_exhaustive()
    }
}

impl<S, P, Req> Future for ResponseFuture<S, P, Req>
where
    S: RetryService<Req>,
    P: RetryPolicy<Req, S::Response, S::Error> + Send + Sync + 'static,
    Req: HasDeadline + Send + 'static,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(later) = this.later.as_mut() {
            return later.as_mut().poll(cx);
        }
        let Some(first) = this.first.as_mut().as_pin_mut() else {
            return Poll::Ready(Err("retry future polled after completion".into()));
        };
        let result = ready!(first.poll(cx));
        let Some((spare, backup, deadline)) = this.state.take() else {
            return Poll::Ready(result.map_err(Into::into));
        };
        let decision = spare.config.policy.classify(&result);
        if let Some(first) = this.first.as_mut().as_pin_mut() {
            first.span().record("outcome", outcome(&result, decision));
        }
        this.first.set(None);
        if decision == Decision::Stop {
            return Poll::Ready(result.map_err(Into::into));
        }
        let mut later: BoxFuture<S::Response> =
            Box::pin(retry_loop(spare, backup, deadline, result));
        let out = later.as_mut().poll(cx);
        *this.later = Some(later);
        out
    }
}

/// The slow path: decides and makes retries after a failed first attempt.
async fn retry_loop<S, P, Req>(
    spare: Arc<CachePadded<Spare<S, P>>>,
    mut backup: Option<Req>,
    deadline: Option<Deadline>,
    mut result: Result<S::Response, S::Error>,
) -> Result<S::Response, BoxError>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    P: RetryPolicy<Req, S::Response, S::Error>,
{
    let config = &spare.config;
    let mut svc = spare
        .service
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut retries = 0u32;
    let mut prev = Duration::ZERO;
    let mut decision = config.policy.classify(&result);
    loop {
        let hint = match decision {
            Decision::Stop => return result.map_err(Into::into),
            Decision::Retry => Duration::ZERO,
            Decision::RetryAfter(d) => d,
        };
        let Some(next) = backup.take() else {
            return result.map_err(Into::into);
        };
        if retries >= config.max_retries {
            config.count(Outcome::AttemptsExhausted);
            return result.map_err(Into::into);
        }
        let delay = config.delay(retries, prev).max(hint);
        if deadline.is_some_and(|d| delay >= d.remaining()) {
            config.count(Outcome::DeadlineExhausted);
            return result.map_err(Into::into);
        }
        if !config.budget.try_withdraw() {
            config.count(Outcome::BudgetExhausted);
            return result.map_err(Into::into);
        }
        config.count(Outcome::Retried);
        drop(result);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        retries += 1;
        prev = delay;
        backup = config.policy.clone_request(&next);
        let ready = match svc.ready().await {
            Ok(ready) => ready,
            Err(e) => return Err(e.into()),
        };
        let span = attempt_span(config.target, retries + 1);
        result = ready.call(next).instrument(span.clone()).await;
        decision = config.policy.classify(&result);
        span.record("outcome", outcome(&result, decision));
    }
}

/// One attempt in its `attempt` span.
type Attempt<F> = tracing::instrument::Instrumented<F>;

/// Runs one attempt in its span.
fn attempt<F: Future>(fut: F, target: &'static str, n: u32) -> Attempt<F> {
    fut.instrument(attempt_span(target, n))
}

/// The span of attempt `n` (1-based); `outcome` is recorded when it ends.
fn attempt_span(target: &'static str, n: u32) -> tracing::Span {
    // `peer.service` (OpenTelemetry's name for the remote service), not
    // `target`: exporters already use `target` for the module path.
    tracing::info_span!(
        "attempt",
        peer.service = target,
        attempt = n,
        outcome = tracing::field::Empty
    )
}

/// An attempt's outcome for its span: `ok`, `retryable` or `failed`.
fn outcome<T, E>(result: &Result<T, E>, decision: Decision) -> &'static str {
    match (result, decision) {
        (_, Decision::Retry | Decision::RetryAfter(_)) => "retryable",
        (Ok(_), Decision::Stop) => "ok",
        (Err(_), Decision::Stop) => "failed",
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(retry_after(" 3 ", now), Some(Duration::from_secs(3)));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:05 GMT", now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO),
            "a date already past: retry now"
        );
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-1", now), None);
    }

    #[test]
    fn a_503_with_an_http_date_waits_until_then() {
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::RETRY_AFTER, later.parse().unwrap());
        let Decision::RetryAfter(wait) =
            HttpRetryPolicy::classify_response(http::StatusCode::SERVICE_UNAVAILABLE, &headers)
        else {
            panic!("not a RetryAfter")
        };
        assert!(
            (Duration::from_secs(118)..=Duration::from_secs(120)).contains(&wait),
            "{wait:?}"
        );
    }
}
