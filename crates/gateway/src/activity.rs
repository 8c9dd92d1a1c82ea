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
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The exchange was silent for the activity timeout.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("no bytes in either direction for the activity timeout")]
pub(crate) struct Silent;

/// The request body went over its cap.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the request body is over the limit")]
pub(crate) struct TooLarge;

/// The request body was still unfinished at its deadline.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the request body took longer than its deadline")]
pub(crate) struct BodyLate;

/// The idle clock of one exchange.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    /// Nanoseconds after `base` of the last activity.
    last: AtomicU64,
    timeout: Duration,
}

impl Activity {
    /// A clock that expires after `timeout` of silence, starting now.
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            base: Instant::now(),
            last: AtomicU64::new(0),
            timeout,
        }
    }

    /// Records activity now.
    pub(crate) fn touch(&self) {
        let since = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.store(since, Ordering::Relaxed);
    }

    /// When the exchange expires if nothing happens before.
    pub(crate) fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.last.load(Ordering::Relaxed)) + self.timeout
    }

    /// Resolves once the exchange has been silent for the timeout.
    pub(crate) async fn idle(&self) {
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
pub(crate) struct ClientSide {
    waiting: AtomicBool,
    finished: AtomicBool,
    too_large: AtomicBool,
    failed: AtomicBool,
    late: AtomicBool,
}

impl ClientSide {
    /// The body is unfinished and the last read is waiting for the client.
    pub(crate) fn stalled(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) && !self.finished.load(Ordering::Relaxed)
    }

    /// The body went over its cap.
    pub(crate) fn too_large(&self) -> bool {
        self.too_large.load(Ordering::Relaxed)
    }

    /// The client's body ended abnormally (it went away).
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// The body was still unfinished at its deadline.
    pub(crate) fn late(&self) -> bool {
        self.late.load(Ordering::Relaxed)
    }
}

/// A body on its way through the gateway in either direction: one [`Body`]
/// impl that feeds the exchange's [`Activity`] and tells its [`Watch`] what
/// the inner body did; each direction's own work is in its watch.
#[derive(Debug)]
pub(crate) struct Watched<B, W> {
    inner: B,
    activity: Arc<Activity>,
    watch: W,
}

/// What one direction does as its body is read.
pub(crate) trait Watch {
    /// A frame came through (the activity clock is already touched); an
    /// `Err` fails the body instead of passing the frame on.
    fn on_frame(&mut self, frame: &Frame<Bytes>) -> Result<(), BoxError>;
    /// The inner body has no frame yet; `Ready` fails the body with that
    /// error.
    fn on_pending(&mut self, activity: &Activity, cx: &mut Context<'_>) -> Poll<BoxError>;
    /// The inner body ended, with its last frame or after it (may be called
    /// twice).
    fn on_finished(&mut self);
    /// The inner body failed.
    fn on_failed(&mut self);
}

impl<B, W> Body for Watched<B, W>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
    W: Watch + Unpin,
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
                if let Err(e) = this.watch.on_frame(&frame) {
                    return Poll::Ready(Some(Err(e)));
                }
                if this.inner.is_end_stream() {
                    this.watch.on_finished();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.watch.on_failed();
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                this.watch.on_finished();
                Poll::Ready(None)
            }
            Poll::Pending => {
                let error = ready!(this.watch.on_pending(&this.activity, cx));
                Poll::Ready(Some(Err(error)))
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

/// The client's request body on its way to the service.
pub(crate) type RequestBody<B> = Watched<B, RequestWatch>;

/// The request side's watch: notes in [`ClientSide`] whether the exchange
/// waits on the client, and enforces the body cap and the body deadline.
#[derive(Debug)]
pub(crate) struct RequestWatch {
    side: Arc<ClientSide>,
    received: u64,
    limit: u64,
    /// The whole body must have come by then, however steady the trickle
    /// (the activity clock alone is reset by every byte).
    deadline: Instant,
    /// Made on the first wait for the client, so a body that never waits
    /// never allocates one.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> RequestBody<B> {
    /// Wraps `inner`, failing it with [`TooLarge`] past `limit` bytes and
    /// with [`BodyLate`] if it is still waiting for the client at
    /// `deadline`.
    pub(crate) fn new(
        inner: B,
        activity: Arc<Activity>,
        side: Arc<ClientSide>,
        limit: u64,
        deadline: Instant,
    ) -> Self {
        Self {
            inner,
            activity,
            watch: RequestWatch {
                side,
                received: 0,
                limit,
                deadline,
                timer: None,
            },
        }
    }
}

impl Watch for RequestWatch {
    fn on_frame(&mut self, frame: &Frame<Bytes>) -> Result<(), BoxError> {
        self.side.waiting.store(false, Ordering::Relaxed);
        if let Some(data) = frame.data_ref() {
            self.received += data.len() as u64;
            if self.received > self.limit {
                self.side.too_large.store(true, Ordering::Relaxed);
                return Err(TooLarge.into());
            }
        }
        Ok(())
    }

    fn on_pending(&mut self, _: &Activity, cx: &mut Context<'_>) -> Poll<BoxError> {
        self.side.waiting.store(true, Ordering::Relaxed);
        let deadline = self.deadline;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(sleep_until(deadline)));
        ready!(timer.as_mut().poll(cx));
        self.side.waiting.store(false, Ordering::Relaxed);
        self.side.late.store(true, Ordering::Relaxed);
        Poll::Ready(BodyLate.into())
    }

    fn on_finished(&mut self) {
        self.side.waiting.store(false, Ordering::Relaxed);
        self.side.finished.store(true, Ordering::Relaxed);
    }

    fn on_failed(&mut self) {
        self.side.waiting.store(false, Ordering::Relaxed);
        self.side.failed.store(true, Ordering::Relaxed);
    }
}

/// How a forwarded response ended, for the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
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
    pub(crate) fn outcome(self) -> &'static str {
        match self {
            Self::Completed => crate::observe::FORWARDED,
            Self::Aborted => "response_aborted",
            Self::UpstreamFailed => "response_failed",
            Self::ClientGone => "client_gone",
        }
    }
}

/// The service's response body on its way to the client.
pub(crate) type ResponseBody<B> = Watched<B, ResponseWatch>;

/// The response side's watch: aborts the stream after the activity timeout
/// of silence and reports, exactly once, how the exchange ended — also when
/// the body is dropped unfinished.
pub(crate) struct ResponseWatch {
    timer: Option<Pin<Box<Sleep>>>,
    on_end: Option<Box<dyn FnOnce(Ending) + Send>>,
    /// Empty from the start (204, 304, a HEAD answer): hyper writes the head
    /// and drops such a body without polling it, which is its completion.
    empty: bool,
}

impl std::fmt::Debug for ResponseWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseWatch").finish_non_exhaustive()
    }
}

impl<B: Body> ResponseBody<B> {
    /// Wraps `inner`; `on_end` is called exactly once with how it ended.
    pub(crate) fn new(
        inner: B,
        activity: Arc<Activity>,
        on_end: impl FnOnce(Ending) + Send + 'static,
    ) -> Self {
        Self {
            watch: ResponseWatch {
                empty: inner.is_end_stream(),
                timer: None,
                on_end: Some(Box::new(on_end)),
            },
            inner,
            activity,
        }
    }
}

impl ResponseWatch {
    fn end(&mut self, how: Ending) {
        if let Some(f) = self.on_end.take() {
            f(how);
        }
    }
}

impl Watch for ResponseWatch {
    fn on_frame(&mut self, _: &Frame<Bytes>) -> Result<(), BoxError> {
        Ok(())
    }

    fn on_pending(&mut self, activity: &Activity, cx: &mut Context<'_>) -> Poll<BoxError> {
        ready!(activity.poll_idle(&mut self.timer, cx));
        self.end(Ending::Aborted);
        Poll::Ready(Silent.into())
    }

    fn on_finished(&mut self) {
        self.end(Ending::Completed);
    }

    fn on_failed(&mut self) {
        self.end(Ending::UpstreamFailed);
    }
}

impl Drop for ResponseWatch {
    fn drop(&mut self) {
        self.end(if self.empty {
            Ending::Completed
        } else {
            Ending::ClientGone
        });
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
        let far = Instant::now() + Duration::from_secs(3600);
        let mut body = RequestBody::new(body, activity.clone(), side.clone(), 10, far);
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

    #[tokio::test(start_paused = true)]
    async fn a_steady_trickle_ends_at_the_body_deadline() {
        let activity = Arc::new(Activity::new(Duration::from_secs(1)));
        let side = Arc::new(ClientSide::default());
        let (tx, body) = channel();
        let started = Instant::now();
        let deadline = started + Duration::from_secs(5);
        let mut body = RequestBody::new(body, activity, side.clone(), 1 << 20, deadline);
        tokio::spawn(async move {
            let mut tx = tx;
            loop {
                tokio::time::sleep(Duration::from_millis(900)).await;
                if tx.send(Bytes::from_static(b"x")).await.is_err() {
                    return;
                }
            }
        });
        let mut bytes = 0;
        let err = loop {
            match body.frame().await.unwrap() {
                Ok(_) => bytes += 1,
                Err(e) => break e,
            }
        };
        assert!(err.is::<BodyLate>(), "{err}");
        assert!(side.late() && !side.stalled());
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert_eq!(bytes, 5);
    }
}
