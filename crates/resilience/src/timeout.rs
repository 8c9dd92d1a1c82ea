//! The per-attempt timeout: `min(attempt timeout, time left)`, enforced here
//! and told to the next hop.
//!
//! It sits innermost, just above the transport, so every attempt a retry
//! makes gets its own timeout, and a breaker above it sees a hung call as a
//! failure ([`AttemptTimedOut`]) instead of waiting forever. An attempt whose
//! deadline has already passed is not sent ([`DeadlineExceeded`]).
//!
//! The timer is only armed when the inner future is not ready on its first
//! poll, so an always-ready service pays no timer cost.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use crate::deadline::{HasDeadline, attempt_timeout};
use crate::error::{AttemptTimedOut, BoxError, DeadlineExceeded, poll_sent};

/// Bounds each attempt by `min(per_attempt, time left)` (see
/// [`AttemptTimeout`]).
#[derive(Debug, Clone, Copy)]
pub struct AttemptTimeoutLayer {
    per_attempt: Duration,
}

impl AttemptTimeoutLayer {
    /// A layer giving each attempt at most `per_attempt`.
    pub fn new(per_attempt: Duration) -> Self {
        Self { per_attempt }
    }
}

impl<S> Layer<S> for AttemptTimeoutLayer {
    type Service = AttemptTimeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AttemptTimeout {
            inner,
            per_attempt: self.per_attempt,
        }
    }
}

/// Fails an attempt with [`AttemptTimedOut`] after `min(per_attempt, time
/// left)`, writes that timeout to the next hop
/// ([`HasDeadline::propagate`]), and refuses with [`DeadlineExceeded`] once
/// the request's deadline has passed. Backpressure: `poll_ready` is the
/// inner service's.
#[derive(Debug, Clone)]
pub struct AttemptTimeout<S> {
    inner: S,
    per_attempt: Duration,
}

impl<S, Req> Service<Req> for AttemptTimeout<S>
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
        let start = crate::clock::now();
        let timeout = match req.deadline() {
            Some(d) => self.per_attempt.min(d.remaining_from(start)),
            None => attempt_timeout(self.per_attempt, None),
        };
        if timeout.is_zero() {
            return ResponseFuture {
                inner: None,
                sleep: None,
                start,
                timeout,
            };
        }
        req.propagate(timeout);
        ResponseFuture {
            inner: Some(self.inner.call(req)),
            sleep: None,
            start,
            timeout,
        }
    }
}

pin_project! {
    /// [`AttemptTimeout`]'s future.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
        sleep: Option<Pin<Box<Sleep>>>,
        start: Instant,
        timeout: Duration,
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = poll_sent(this.inner.as_pin_mut(), cx, || DeadlineExceeded.into())
        {
            return Poll::Ready(out);
        }
        // Armed on the first `Pending` only (boxed: keeps the future small).
        let at = *this.start + *this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(Err(AttemptTimedOut(*this.timeout).into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadline::{Deadline, HTTP_HEADER};
    use tower::ServiceExt;

    #[tokio::test(start_paused = true)]
    async fn a_hung_attempt_times_out_at_the_attempt_timeout() {
        let svc = tower::service_fn(|_req: http::Request<()>| {
            std::future::pending::<Result<(), BoxError>>()
        });
        let svc = AttemptTimeoutLayer::new(Duration::from_secs(3)).layer(svc);
        let start = Instant::now();
        let err = svc.oneshot(http::Request::new(())).await.unwrap_err();
        assert_eq!(
            err.downcast_ref::<AttemptTimedOut>(),
            Some(&AttemptTimedOut(Duration::from_secs(3)))
        );
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn the_attempt_never_outlives_the_deadline_and_tells_the_next_hop() {
        let svc = tower::service_fn(|req: http::Request<()>| async move {
            let sent = req.headers()[HTTP_HEADER].to_str()?.to_owned();
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, BoxError>(sent)
        });
        let svc = AttemptTimeoutLayer::new(Duration::from_secs(3)).layer(svc);
        let mut req = http::Request::new(());
        req.set_deadline(Deadline::after(Duration::from_millis(700)));
        let start = Instant::now();
        let err = svc.clone().oneshot(req).await.unwrap_err();
        assert!(err.is::<AttemptTimedOut>());
        assert_eq!(start.elapsed(), Duration::from_millis(700));

        // Expired: not sent at all.
        let mut req = http::Request::new(());
        req.set_deadline(Deadline::after(Duration::ZERO));
        let err = svc.oneshot(req).await.unwrap_err();
        assert!(err.is::<DeadlineExceeded>());
    }

    #[tokio::test(start_paused = true)]
    async fn the_header_carries_the_attempt_timeout() {
        let svc = tower::service_fn(|req: http::Request<()>| async move {
            Ok::<_, BoxError>(req.headers()[HTTP_HEADER].to_str()?.to_owned())
        });
        let svc = AttemptTimeoutLayer::new(Duration::from_secs(3)).layer(svc);
        let mut req = http::Request::new(());
        req.set_deadline(Deadline::after(Duration::from_secs(60)));
        assert_eq!(svc.oneshot(req).await.unwrap(), "3000");
    }
}
