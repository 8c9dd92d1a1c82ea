//! The activity timeout (SPEC §6): one idle timer per exchange, shared by
//! the wait for response headers and every body chunk in both directions.
//!
//! [`Activity`] is the clock: any byte either way [`touch`](Activity::touch)es
//! it, and it expires only after `timeout` of silence, so a slow but steady
//! transfer lives as long as it needs. Two body wrappers feed it:
//!
//! - [`RequestBody`] (client → service) records whether the exchange is
//!   waiting on the *client*, so a stall before response headers can be
//!   answered 408 (client at fault) rather than 504 (service at fault); it
//!   also enforces the body cap.
//! - [`ResponseBody`] (service → client) aborts the stream when the service
//!   goes silent after headers (a 504 is no longer possible) and reports how
//!   the exchange ended.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll, ready},
    time::Duration,
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep, sleep_until};

/// A boxed error, as bodies and tower use.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The exchange was silent for the activity timeout.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("no bytes in either direction for the activity timeout")]
pub struct Silent;

/// The request body went over its cap.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the request body is over the limit")]
pub struct TooLarge;

/// The idle clock of one exchange.
#[derive(Debug)]
pub struct Activity {
    base: Instant,
    /// Nanoseconds after `base` of the last activity.
    last: AtomicU64,
    timeout: Duration,
}

impl Activity {
    /// A clock that expires after `timeout` of silence, starting now.
    pub fn new(timeout: Duration) -> Self {
        Self {
            base: Instant::now(),
            last: AtomicU64::new(0),
            timeout,
        }
    }

    /// Records activity now.
    pub fn touch(&self) {
        let since = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.store(since, Ordering::Relaxed);
    }

    /// When the exchange expires if nothing happens before.
    pub fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.last.load(Ordering::Relaxed)) + self.timeout
    }

    /// Resolves once the exchange has been silent for the timeout.
    pub async fn idle(&self) {
        loop {
            let deadline = self.deadline();
            if Instant::now() >= deadline {
                return;
            }
            sleep_until(deadline).await;
        }
    }

    /// Poll form of [`idle`](Self::idle) for body wrappers; `timer` is
    /// created on first use, so a body that never waits never allocates one.
    fn poll_idle(&self, timer: &mut Option<Pin<Box<Sleep>>>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let deadline = self.deadline();
            let sleep = timer.get_or_insert_with(|| Box::pin(sleep_until(deadline)));
            if sleep.deadline() != deadline {
                sleep.as_mut().reset(deadline);
            }
            ready!(sleep.as_mut().poll(cx));
            if Instant::now() >= self.deadline() {
                return Poll::Ready(());
            }
        }
    }
}

/// What the client side of an exchange is doing, shared between the
/// [`RequestBody`] (which writes it) and the proxy (which reads it when the
/// timer fires or the upstream request fails).
#[derive(Debug, Default)]
pub struct ClientSide {
    waiting: AtomicBool,
    finished: AtomicBool,
    too_large: AtomicBool,
    failed: AtomicBool,
}

impl ClientSide {
    /// The body is unfinished and the last read is waiting for the client.
    pub fn stalled(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) && !self.finished.load(Ordering::Relaxed)
    }

    /// The body went over its cap.
    pub fn too_large(&self) -> bool {
        self.too_large.load(Ordering::Relaxed)
    }

    /// The client's body ended abnormally (it went away).
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }
}

/// The client's request body on its way to the service.
#[derive(Debug)]
pub struct RequestBody<B> {
    inner: B,
    activity: Arc<Activity>,
    side: Arc<ClientSide>,
    received: u64,
    limit: u64,
}

impl<B> RequestBody<B> {
    /// Wraps `inner`, failing it with [`TooLarge`] past `limit` bytes.
    pub fn new(inner: B, activity: Arc<Activity>, side: Arc<ClientSide>, limit: u64) -> Self {
        Self {
            inner,
            activity,
            side,
            received: 0,
            limit,
        }
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let side = &this.side;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                side.waiting.store(true, Ordering::Relaxed);
                Poll::Pending
            }
            Poll::Ready(Some(Ok(frame))) => {
                side.waiting.store(false, Ordering::Relaxed);
                this.activity.touch();
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    if this.received > this.limit {
                        side.too_large.store(true, Ordering::Relaxed);
                        return Poll::Ready(Some(Err(TooLarge.into())));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                side.waiting.store(false, Ordering::Relaxed);
                side.failed.store(true, Ordering::Relaxed);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                side.waiting.store(false, Ordering::Relaxed);
                side.finished.store(true, Ordering::Relaxed);
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How a forwarded response ended, for the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every byte reached the client.
    Completed,
    /// The service went silent after headers: the stream was aborted.
    Aborted,
    /// The service's body failed (reset mid-body).
    UpstreamFailed,
    /// The client went away first.
    ClientGone,
}

impl Ending {
    /// The `outcome` label.
    pub fn outcome(self) -> &'static str {
        match self {
            Self::Completed => crate::observe::FORWARDED,
            Self::Aborted => "response_aborted",
            Self::UpstreamFailed => "response_failed",
            Self::ClientGone => "client_gone",
        }
    }
}

/// The service's response body on its way to the client.
pub struct ResponseBody<B> {
    inner: B,
    activity: Arc<Activity>,
    timer: Option<Pin<Box<Sleep>>>,
    on_end: Option<Box<dyn FnOnce(Ending) + Send>>,
    /// Empty from the start (204, 304, a HEAD answer): hyper writes the head
    /// and drops such a body without polling it, which is its completion.
    empty: bool,
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody").finish_non_exhaustive()
    }
}

impl<B: Body> ResponseBody<B> {
    /// Wraps `inner`; `on_end` is called exactly once with how it ended.
    pub fn new(
        inner: B,
        activity: Arc<Activity>,
        on_end: impl FnOnce(Ending) + Send + 'static,
    ) -> Self {
        Self {
            empty: inner.is_end_stream(),
            inner,
            activity,
            timer: None,
            on_end: Some(Box::new(on_end)),
        }
    }

    fn end(&mut self, how: Ending) {
        if let Some(f) = self.on_end.take() {
            f(how);
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.activity.touch();
                if this.inner.is_end_stream() {
                    this.end(Ending::Completed);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.end(Ending::UpstreamFailed);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                this.end(Ending::Completed);
                Poll::Ready(None)
            }
            Poll::Pending => {
                ready!(this.activity.poll_idle(&mut this.timer, cx));
                this.end(Ending::Aborted);
                Poll::Ready(Some(Err(Silent.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for ResponseBody<B> {
    fn drop(&mut self) {
        if let Some(f) = self.on_end.take() {
            f(if self.empty {
                Ending::Completed
            } else {
                Ending::ClientGone
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use futures::{SinkExt, StreamExt, channel::mpsc};
    use http_body_util::{BodyExt, StreamBody};

    use super::*;

    /// A body fed by the test through a channel.
    fn channel() -> (
        mpsc::Sender<Bytes>,
        impl Body<Data = Bytes, Error = Infallible> + Unpin,
    ) {
        let (tx, rx) = mpsc::channel(4);
        (tx, StreamBody::new(rx.map(|b| Ok(Frame::data(b)))))
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_trickle_outlives_the_timeout_many_times() {
        let activity = Arc::new(Activity::new(Duration::from_secs(1)));
        let (tx, body) = channel();
        let ended = Arc::new(std::sync::Mutex::new(None));
        let seen = ended.clone();
        let mut body = ResponseBody::new(body, activity, move |e| {
            *seen.lock().unwrap() = Some(e);
        });
        tokio::spawn(async move {
            let mut tx = tx;
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(750)).await;
                tx.send(Bytes::from_static(b"x")).await.unwrap();
            }
        });
        let started = Instant::now();
        let mut n = 0;
        while let Some(frame) = body.frame().await {
            frame.unwrap();
            n += 1;
        }
        assert_eq!(n, 10);
        assert!(started.elapsed() >= Duration::from_millis(7500));
        assert_eq!(*ended.lock().unwrap(), Some(Ending::Completed));
    }

    #[tokio::test(start_paused = true)]
    async fn silence_after_headers_aborts_the_stream_at_the_timeout() {
        let activity = Arc::new(Activity::new(Duration::from_secs(1)));
        let (mut tx, body) = channel();
        let ended = Arc::new(std::sync::Mutex::new(None));
        let seen = ended.clone();
        let mut body = ResponseBody::new(body, activity, move |e| {
            *seen.lock().unwrap() = Some(e);
        });
        tx.send(Bytes::from_static(b"first")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(body.frame().await.unwrap().is_ok());
        let started = Instant::now();
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.is::<Silent>(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(*ended.lock().unwrap(), Some(Ending::Aborted));
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn request_body_says_when_the_client_is_the_one_stalling() {
        let activity = Arc::new(Activity::new(Duration::from_secs(1)));
        let side = Arc::new(ClientSide::default());
        let (mut tx, body) = channel();
        let mut body = RequestBody::new(body, activity.clone(), side.clone(), 10);
        tx.send(Bytes::from_static(b"12345")).await.unwrap();
        assert!(body.frame().await.unwrap().is_ok());
        let waited = tokio::select! {
            _ = body.frame() => false,
            () = activity.idle() => true,
        };
        assert!(waited && side.stalled());
        tx.send(Bytes::from_static(b"678901")).await.unwrap();
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.is::<TooLarge>() && side.too_large());
    }
}
