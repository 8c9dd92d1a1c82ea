//! A client that stops reading its answer is cut off after the activity
//! timeout, as one that stops sending is.
//!
//! The response body's silence check ([`crate::activity`]) runs only when
//! hyper polls that body, and hyper stops polling it while its write buffer
//! is full: a client that never reads (a full receive window) would hold
//! its connection, its route's in-flight slot and an upstream connection
//! for as long as it likes, and hyper's HTTP/1 server has no write timeout
//! of its own. [`WriteStall`] wraps each client connection's socket: a
//! write that stays pending for the timeout fails with `TimedOut`, which
//! ends the connection and drops the response (freeing the slot and the
//! upstream connection). Any progress disarms the clock, so a slow but
//! steady reader lives as long as it needs, as the activity timeout
//! promises.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Sleep,
};

/// The client read nothing of the answer for the activity timeout.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the client read nothing for the activity timeout")]
pub(crate) struct Stalled;

/// A client connection whose writes may stay pending for `timeout` at most.
#[derive(Debug)]
pub(crate) struct WriteStall<S> {
    inner: S,
    timeout: Duration,
    /// Armed at the first pending write, disarmed by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteStall<S> {
    /// Wraps `inner`; a write pending for `timeout` fails.
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// Passes on a write's result: progress disarms the clock; a pending
    /// write arms it (and registers its wake-up, so hyper tries the write
    /// again when it fires) and fails once it has run out.
    fn follow<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let timeout = self.timeout;
        let clock = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match clock.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, Stalled))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStall<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStall<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.follow(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.follow(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.follow(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.follow(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // A duplex pipe whose reader never reads: the writer's buffer fills.
    #[tokio::test(start_paused = true)]
    async fn a_write_pending_for_the_timeout_fails_and_progress_resets_the_clock() {
        let (near, mut far) = tokio::io::duplex(16);
        let mut io = WriteStall::new(near, Duration::from_secs(1));
        io.write_all(&[0; 16]).await.expect("fits the pipe");

        // The reader takes a byte every 0.9 s: each write waits < 1 s.
        let reader = tokio::spawn(async move {
            let mut byte = [0; 1];
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(900)).await;
                far.read_exact(&mut byte).await.expect("read");
            }
            far // kept open, never read again
        });
        for _ in 0..3 {
            io.write_all(&[1]).await.expect("slow but steady: no stall");
        }
        let started = tokio::time::Instant::now();
        let err = io.write_all(&[2]).await.expect_err("nobody reads any more");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        drop(reader.await);
    }
}
