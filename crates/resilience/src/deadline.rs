//! Absolute deadlines that travel with a request.
//!
//! A [`Deadline`] is an instant on tokio's clock, not a duration: every layer
//! and every hop sees the *same* end time, so a timeout is never restarted
//! from scratch along the way (STYLE habit 11).
//!
//! - On the way in, [`DeadlineLayer`] takes the minimum of the caller's
//!   deadline (a [`Deadline`] already in the request, or the `grpc-timeout` /
//!   [`HTTP_HEADER`] header) and our own cap, and stores it in the request.
//!   A request whose deadline has already passed is not sent.
//! - Each attempt gets [`attempt_timeout`]`(per_attempt, deadline)` =
//!   `min(attempt timeout, time left)`; the
//!   [`AttemptTimeoutLayer`](crate::timeout::AttemptTimeoutLayer) enforces it
//!   and writes it to the next hop with [`HasDeadline::propagate`]:
//!   `grpc-timeout` for gRPC, [`HTTP_HEADER`] for HTTP.
//!
//! Requests find their deadline through [`HasDeadline`], implemented for
//! `http::Request` (and `tonic::Request` with the `grpc` feature) and for
//! [`Call`], a plain message with a deadline for stacks in front of a
//! generated gRPC client; a domain request type can implement it too.

use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower::{Layer, Service};

use crate::error::{BoxError, DeadlineExceeded};

/// The HTTP header carrying the caller's remaining time, in whole
/// milliseconds (`shopeasy-deadline-ms: 2500`).
///
/// Remaining time rather than an absolute timestamp, like gRPC's
/// `grpc-timeout`: hosts' clocks need not agree.
pub const HTTP_HEADER: &str = "shopeasy-deadline-ms";

/// gRPC's deadline header (remaining time, `<digits><unit>`).
pub const GRPC_HEADER: &str = "grpc-timeout";

/// The longest deadline accepted from a caller's header (one day): longer
/// values are clamped, so arithmetic on instants cannot overflow.
const MAX_WIRE: Duration = Duration::from_secs(24 * 60 * 60);

/// An absolute point in time (tokio's clock) by which a request must finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(Instant);

impl Deadline {
    /// The deadline `timeout` from now (saturating far in the future).
    pub fn after(timeout: Duration) -> Self {
        Self::after_from(Instant::now(), timeout)
    }

    /// The deadline `timeout` after `start`.
    pub fn after_from(start: Instant, timeout: Duration) -> Self {
        let far = Duration::from_secs(60 * 60 * 24 * 365 * 30);
        Self(
            start
                .checked_add(timeout.min(far))
                .unwrap_or_else(|| start + Duration::from_secs(60 * 60 * 24)),
        )
    }

    /// The deadline at `instant`.
    pub fn at(instant: Instant) -> Self {
        Self(instant)
    }

    /// The instant of the deadline.
    pub fn instant(self) -> Instant {
        self.0
    }

    /// Time left until the deadline; zero once it has passed.
    pub fn remaining(self) -> Duration {
        self.remaining_from(Instant::now())
    }

    /// Time left at `now`.
    pub fn remaining_from(self, now: Instant) -> Duration {
        self.0.saturating_duration_since(now)
    }

    /// Whether the deadline has passed.
    pub fn is_expired(self) -> bool {
        self.0 <= Instant::now()
    }

    /// The earlier of two deadlines.
    #[must_use]
    pub fn earliest(self, other: Deadline) -> Deadline {
        self.min(other)
    }

    /// The caller's deadline from request headers: `grpc-timeout` or
    /// [`HTTP_HEADER`] (the earlier if both are present). `None` when neither
    /// is present or both are malformed (a malformed header is ignored, not
    /// an error: our own cap still applies).
    pub fn from_headers(headers: &HeaderMap) -> Option<Deadline> {
        let grpc = headers.get(GRPC_HEADER).and_then(parse_grpc_timeout);
        let http = headers.get(HTTP_HEADER).and_then(parse_http_ms);
        let remaining = match (grpc, http) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(Deadline::after(remaining.min(MAX_WIRE)))
    }

    /// Writes the remaining time to [`HTTP_HEADER`] (whole milliseconds,
    /// rounded down so the next hop gives up first).
    pub fn write_http(&self, headers: &mut HeaderMap) {
        headers.insert(HTTP_HEADER, http_ms(self.remaining()));
    }

    /// Writes the remaining time to `grpc-timeout`.
    pub fn write_grpc(&self, headers: &mut HeaderMap) {
        headers.insert(GRPC_HEADER, grpc_timeout(self.remaining()));
    }
}

/// The timeout for one attempt: `min(per_attempt, time left)`. Zero means
/// the deadline has passed and the attempt must not be sent.
pub fn attempt_timeout(per_attempt: Duration, deadline: Option<Deadline>) -> Duration {
    match deadline {
        Some(d) => per_attempt.min(d.remaining()),
        None => per_attempt,
    }
}

/// `timeout` in gRPC's wire format: at most 8 digits and a unit (`H`, `M`,
/// `S`, `m`, `u`, `n`), the finest unit that fits, rounded down.
pub fn grpc_timeout(timeout: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let nanos = timeout.as_nanos();
    let units: [(u128, &str); 6] = [
        (1, "n"),
        (1_000, "u"),
        (1_000_000, "m"),
        (1_000_000_000, "S"),
        (60_000_000_000, "M"),
        (3_600_000_000_000, "H"),
    ];
    for (per, unit) in units {
        let value = nanos / per;
        if value <= MAX {
            return header_value(format!("{value}{unit}"));
        }
    }
    header_value(format!("{MAX}H"))
}

/// Parses a `grpc-timeout` value; `None` when malformed.
pub fn parse_grpc_timeout(value: &HeaderValue) -> Option<Duration> {
    let s = value.to_str().ok()?;
    if s.len() < 2 || s.len() > 9 {
        return None;
    }
    let (digits, unit) = s.split_at(s.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn parse_http_ms(value: &HeaderValue) -> Option<Duration> {
    let s = value.to_str().ok()?;
    if s.is_empty() || s.len() > 12 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Duration::from_millis(s.parse().ok()?))
}

fn http_ms(remaining: Duration) -> HeaderValue {
    let ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
    HeaderValue::from(ms)
}

fn header_value(s: String) -> HeaderValue {
    // Digits and an ASCII unit are always a valid header value.
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static("0n"))
}

/// A request that can carry a [`Deadline`].
pub trait HasDeadline {
    /// The request's deadline, if it has one.
    fn deadline(&self) -> Option<Deadline>;
    /// Stores `deadline` in the request (replacing any earlier one).
    fn set_deadline(&mut self, deadline: Deadline);
    /// Tells the next hop how long it has (`timeout`, already
    /// `min(attempt timeout, time left)`). The default does nothing: an
    /// in-process request has no next hop.
    fn propagate(&mut self, timeout: Duration) {
        let _ = timeout;
    }
}

impl<B> HasDeadline for http::Request<B> {
    /// The [`Deadline`] extension; else the caller's headers.
    fn deadline(&self) -> Option<Deadline> {
        self.extensions()
            .get::<Deadline>()
            .copied()
            .or_else(|| Deadline::from_headers(self.headers()))
    }

    fn set_deadline(&mut self, deadline: Deadline) {
        self.extensions_mut().insert(deadline);
    }

    /// `grpc-timeout` when the request is gRPC (`content-type:
    /// application/grpc…`), else [`HTTP_HEADER`].
    fn propagate(&mut self, timeout: Duration) {
        let is_grpc = self
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|ct| ct.as_bytes().starts_with(b"application/grpc"));
        if is_grpc {
            self.headers_mut()
                .insert(GRPC_HEADER, grpc_timeout(timeout));
        } else {
            self.headers_mut().insert(HTTP_HEADER, http_ms(timeout));
        }
    }
}

#[cfg(feature = "grpc")]
impl<T> HasDeadline for tonic::Request<T> {
    /// The [`Deadline`] extension; else the caller's `grpc-timeout`.
    fn deadline(&self) -> Option<Deadline> {
        self.extensions().get::<Deadline>().copied().or_else(|| {
            self.metadata()
                .get(GRPC_HEADER)
                .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
                .and_then(|v| parse_grpc_timeout(&v))
                .map(|d| Deadline::after(d.min(MAX_WIRE)))
        })
    }

    fn set_deadline(&mut self, deadline: Deadline) {
        self.extensions_mut().insert(deadline);
    }

    /// Sets `grpc-timeout` (tonic's [`tonic::Request::set_timeout`]).
    fn propagate(&mut self, timeout: Duration) {
        self.set_timeout(timeout);
    }
}

/// A plain request carrying a deadline: the request type of a stack in front
/// of a generated gRPC client or an in-process service.
///
/// [`HasDeadline::propagate`] stores the attempt's timeout in
/// [`Call::timeout`]; the transport adapter passes it on (for tonic,
/// [`Call::into_request`] sets `grpc-timeout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<T> {
    /// The message.
    pub message: T,
    /// The caller's deadline.
    pub deadline: Option<Deadline>,
    /// This attempt's timeout (`min(attempt timeout, time left)`), set by
    /// the attempt-timeout layer.
    pub timeout: Option<Duration>,
}

impl<T> Call<T> {
    /// A call with no deadline yet.
    pub fn new(message: T) -> Self {
        Self {
            message,
            deadline: None,
            timeout: None,
        }
    }

    /// A call with `deadline`.
    pub fn with_deadline(message: T, deadline: Option<Deadline>) -> Self {
        Self {
            message,
            deadline,
            timeout: None,
        }
    }

    /// The tonic request for this attempt: `grpc-timeout` set to the
    /// attempt's timeout (or the time left), the deadline in its extensions.
    #[cfg(feature = "grpc")]
    pub fn into_request(self) -> tonic::Request<T> {
        let mut req = tonic::Request::new(self.message);
        let timeout = self
            .timeout
            .or_else(|| self.deadline.map(Deadline::remaining));
        if let Some(t) = timeout {
            req.set_timeout(t);
        }
        if let Some(d) = self.deadline {
            req.extensions_mut().insert(d);
        }
        req
    }
}

impl<T> HasDeadline for Call<T> {
    fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    fn set_deadline(&mut self, deadline: Deadline) {
        self.deadline = Some(deadline);
    }

    fn propagate(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }
}

/// Gives every request a deadline of at most `cap` from now, keeping the
/// caller's if it is earlier (see [`WithDeadline`]).
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    cap: Duration,
}

impl DeadlineLayer {
    /// A layer capping every request's deadline at `cap` from its arrival.
    pub fn new(cap: Duration) -> Self {
        Self { cap }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = WithDeadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WithDeadline {
            inner,
            cap: self.cap,
        }
    }
}

/// Sets or narrows a request's [`Deadline`] to `min(caller's, now + cap)`,
/// and fails with [`DeadlineExceeded`] without calling the inner service when
/// it has already passed.
///
/// It adds no timer: the layers inside (retry, attempt timeout) read the
/// deadline and never run past it. Backpressure: `poll_ready` is the inner
/// service's.
#[derive(Debug, Clone)]
pub struct WithDeadline<S> {
    inner: S,
    cap: Duration,
}

impl<S, Req> Service<Req> for WithDeadline<S>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    Req: HasDeadline,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        let now = Instant::now();
        let ours = Deadline::after_from(now, self.cap);
        let deadline = match req.deadline() {
            Some(theirs) => theirs.earliest(ours),
            None => ours,
        };
        if deadline.instant() <= now {
            return ResponseFuture { inner: None };
        }
        req.set_deadline(deadline);
        // The layers below read this same instant during their `call`s.
        let inner = crate::clock::with_now(now, || self.inner.call(req));
        ResponseFuture { inner: Some(inner) }
    }
}

pin_project! {
    /// [`WithDeadline`]'s future.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
    }
}

impl<F, T, E> std::future::Future for ResponseFuture<F>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        crate::error::poll_sent(self.project().inner.as_pin_mut(), cx, || {
            DeadlineExceeded.into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[test]
    fn grpc_timeout_round_trips_in_the_finest_unit_that_fits() {
        let cases = [
            (Duration::from_nanos(5), "5n"),
            (Duration::from_millis(1), "1000000n"),
            (Duration::from_secs(1), "1000000u"),
            (Duration::from_secs(150), "150000m"),
            (Duration::from_secs(200_000), "200000S"),
        ];
        for (d, wire) in cases {
            let v = grpc_timeout(d);
            assert_eq!(v, wire);
            assert_eq!(parse_grpc_timeout(&v), Some(d));
        }
        assert_eq!(
            parse_grpc_timeout(&HeaderValue::from_static("2H")),
            Some(Duration::from_secs(7200))
        );
        for bad in ["", "5", "m", "123456789m", "5x", "-5m", "1.5S"] {
            assert_eq!(parse_grpc_timeout(&HeaderValue::from_static(bad)), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn headers_give_the_earliest_deadline_and_round_trip() {
        let mut h = HeaderMap::new();
        assert_eq!(Deadline::from_headers(&h), None);
        h.insert(GRPC_HEADER, HeaderValue::from_static("3S"));
        h.insert(HTTP_HEADER, HeaderValue::from_static("1500"));
        let d = Deadline::from_headers(&h).unwrap();
        assert_eq!(d.remaining(), Duration::from_millis(1500));
        h.insert(HTTP_HEADER, HeaderValue::from_static("nonsense"));
        assert_eq!(
            Deadline::from_headers(&h).unwrap().remaining(),
            Duration::from_secs(3)
        );

        let mut out = HeaderMap::new();
        let d = Deadline::after(Duration::from_millis(2500));
        d.write_http(&mut out);
        d.write_grpc(&mut out);
        assert_eq!(out[HTTP_HEADER], "2500");
        assert_eq!(out[GRPC_HEADER], "2500000u");
        tokio::time::advance(Duration::from_millis(1000)).await;
        d.write_http(&mut out);
        assert_eq!(out[HTTP_HEADER], "1500");
    }

    #[tokio::test(start_paused = true)]
    async fn attempt_timeout_is_the_smaller_of_timeout_and_time_left() {
        let per = Duration::from_secs(3);
        assert_eq!(attempt_timeout(per, None), per);
        let d = Deadline::after(Duration::from_secs(1));
        assert_eq!(attempt_timeout(per, Some(d)), Duration::from_secs(1));
        assert!(!d.is_expired());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(d.is_expired());
        assert_eq!(attempt_timeout(per, Some(d)), Duration::ZERO);
        let later = Deadline::after(Duration::from_secs(9));
        assert_eq!(d.earliest(later), d);
        assert_eq!(later.earliest(d), d);
    }

    #[tokio::test(start_paused = true)]
    async fn layer_narrows_to_the_callers_deadline_or_the_cap() {
        let svc = tower::service_fn(|req: http::Request<()>| async move {
            Ok::<_, BoxError>(req.deadline().map(Deadline::remaining))
        });
        let svc = DeadlineLayer::new(Duration::from_secs(5)).layer(svc);

        let req = http::Request::builder()
            .header(HTTP_HEADER, "800")
            .body(())
            .unwrap();
        let got = svc.clone().oneshot(req).await.unwrap();
        assert_eq!(got, Some(Duration::from_millis(800)));

        let req = http::Request::builder()
            .header(GRPC_HEADER, "60S")
            .body(())
            .unwrap();
        let got = svc.clone().oneshot(req).await.unwrap();
        assert_eq!(got, Some(Duration::from_secs(5)), "capped at our own 5 s");

        let mut req = http::Request::new(());
        let expired = Deadline::after(Duration::from_millis(10));
        req.set_deadline(expired);
        tokio::time::advance(Duration::from_millis(20)).await;
        let err = svc.oneshot(req).await.unwrap_err();
        assert!(err.is::<DeadlineExceeded>(), "not sent once expired: {err}");
    }

    #[cfg(feature = "grpc")]
    #[tokio::test(start_paused = true)]
    async fn a_call_becomes_a_tonic_request_with_grpc_timeout() {
        let mut call = Call::with_deadline(5u32, Some(Deadline::after(Duration::from_secs(2))));
        call.propagate(Duration::from_millis(1500));
        let req = call.into_request();
        assert_eq!(req.metadata().get(GRPC_HEADER).unwrap(), "1500000u");
        // The server side reads the caller's deadline back from it.
        let mut inbound = tonic::Request::new(());
        *inbound.metadata_mut() = req.metadata().clone();
        assert_eq!(
            inbound.deadline().map(Deadline::remaining),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn propagate_picks_the_header_by_protocol() {
        let mut req = http::Request::new(());
        req.propagate(Duration::from_millis(1234));
        assert_eq!(req.headers()[HTTP_HEADER], "1234");
        let mut req = http::Request::builder()
            .header(http::header::CONTENT_TYPE, "application/grpc+proto")
            .body(())
            .unwrap();
        req.propagate(Duration::from_millis(1234));
        assert_eq!(req.headers()[GRPC_HEADER], "1234000u");
        assert!(req.headers().get(HTTP_HEADER).is_none());
    }
}
