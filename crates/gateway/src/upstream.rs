//! The pooled HTTP/1.1 client to the services: hyper-util's legacy `Client`
//! over an `HttpConnector` with a connect timeout, plus what that pool lacks —
//! a maximum connection lifetime — and the classification of its errors into
//! [`ProxyError`]s.
//!
//! **Connection lifetime.** hyper-util's pool has an idle timeout but no
//! maximum age, so a gateway behind one DNS name would keep talking to the
//! replicas it first found. [`Connector`] stamps every new connection with a
//! jittered expiry (±10 %, so a fleet's connections do not all turn over at
//! once) carried in its `Connected` extras. The first response over a
//! connection starts one timer ([`watch_lifetime`]); at the expiry it
//! *poisons* the connection, which the pool honours only when the connection
//! is next returned or checked out. A request in flight is therefore never
//! cut: the connection is replaced between requests.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use http::{Response, Uri};
use hyper::body::Incoming;
use hyper_util::{
    client::legacy::{
        self, Client,
        connect::{CaptureConnection, Connected, Connection, HttpConnector},
    },
    rt::{TokioExecutor, TokioIo, TokioTimer},
};
use rand::Rng;
use tokio::{net::TcpStream, time::Instant};

use crate::{activity::BoxError, error::ProxyError};

/// The body type the gateway sends upstream.
pub type UpstreamBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, BoxError>;

/// The pooled client.
pub type UpstreamClient = Client<Connector, UpstreamBody>;

/// How long an idle pooled connection is kept before it is closed.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Builds the client: connect timeout, connection lifetime, keep-alive pool.
///
/// hyper-util's own re-send of a request that a reused connection failed
/// *before any byte of it was written* (`retry_canceled_requests`) is kept:
/// it can never repeat a request the service saw, so it is safe for every
/// method. It happens inside the client and is not counted in
/// `shopeasy_gateway_retries_total`.
pub fn client(connect_timeout: Duration, lifetime: Duration) -> UpstreamClient {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .retry_canceled_requests(true)
        .build(Connector { http, lifetime })
}

/// An `HttpConnector` whose connections carry a jittered expiry.
#[derive(Debug, Clone)]
pub struct Connector {
    http: HttpConnector,
    lifetime: Duration,
}

impl tower::Service<Uri> for Connector {
    type Response = Expiring;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Expiring, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.http.call(uri);
        let lifetime = jittered(self.lifetime, &mut rand::rng());
        Box::pin(async move {
            let io = connecting.await?;
            Ok(Expiring {
                io,
                lifetime: ConnectionLifetime {
                    expires_at: Instant::now() + lifetime,
                    watched: Arc::new(AtomicBool::new(false)),
                },
            })
        })
    }
}

/// `lifetime` ± 10 %.
fn jittered(lifetime: Duration, rng: &mut impl Rng) -> Duration {
    lifetime.mul_f64(rng.random_range(0.9..=1.1))
}

/// A connection's expiry, carried in its `Connected` extras (and so in the
/// extensions of every response received over it).
#[derive(Debug, Clone)]
pub struct ConnectionLifetime {
    /// When the connection stops being reused.
    pub expires_at: Instant,
    watched: Arc<AtomicBool>,
}

/// A TCP connection with its [`ConnectionLifetime`].
#[derive(Debug)]
pub struct Expiring {
    io: TokioIo<TcpStream>,
    lifetime: ConnectionLifetime,
}

impl Connection for Expiring {
    fn connected(&self) -> Connected {
        self.io.connected().extra(self.lifetime.clone())
    }
}

impl hyper::rt::Read for Expiring {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Expiring {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// On the first response over a connection, starts the timer that poisons
/// it at its expiry (see the module docs). Later responses cost one atomic
/// load.
pub fn watch_lifetime(response: &Response<Incoming>, capture: CaptureConnection) {
    let Some(lifetime) = response.extensions().get::<ConnectionLifetime>() else {
        return;
    };
    if lifetime.watched.load(Ordering::Relaxed) || lifetime.watched.swap(true, Ordering::AcqRel) {
        return;
    }
    let expires_at = lifetime.expires_at;
    tokio::spawn(async move {
        tokio::time::sleep_until(expires_at).await;
        if let Some(connected) = capture.connection_metadata().as_ref() {
            connected.poison();
        }
    });
}

/// Maps a transport error onto what the caller is told. (Failures of the
/// caller's own body are told apart by the proxy first, from its
/// [`ClientSide`](crate::activity::ClientSide).)
pub fn classify(error: &legacy::Error) -> ProxyError {
    let io_kind = io_kind(error);
    if error.is_connect() {
        return match io_kind {
            Some(io::ErrorKind::TimedOut) => ProxyError::ConnectTimeout,
            Some(io::ErrorKind::ConnectionRefused) => ProxyError::ConnectionRefused,
            _ => ProxyError::ConnectionFailed,
        };
    }
    let hyper_error = source_of::<hyper::Error>(error);
    let closed = hyper_error.is_some_and(|e| e.is_incomplete_message() || e.is_canceled());
    let reset = matches!(
        io_kind,
        Some(
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof
        )
    );
    if closed || reset {
        ProxyError::ConnectionTerminated
    } else if hyper_error.is_some_and(hyper::Error::is_parse) {
        ProxyError::Protocol
    } else {
        tracing::warn!(error = %error_chain(error), "unexpected upstream error");
        ProxyError::ConnectionTerminated
    }
}

fn source_of<'a, T: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        current = e.source();
    }
    None
}

fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    source_of::<io::Error>(error).map(io::Error::kind)
}

/// The error and its sources on one line, for logs.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut current = error.source();
    while let Some(e) = current {
        out.push_str(": ");
        out.push_str(&e.to_string());
        current = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use rand::{SeedableRng, rngs::SmallRng};

    use super::*;

    #[test]
    fn lifetimes_are_jittered_within_ten_percent() {
        let mut rng = SmallRng::seed_from_u64(7);
        let base = Duration::from_secs(120);
        let all: Vec<Duration> = (0..1000).map(|_| jittered(base, &mut rng)).collect();
        assert!(
            all.iter()
                .all(|d| *d >= base.mul_f64(0.9) && *d <= base.mul_f64(1.1))
        );
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        assert!(distinct.len() > 900, "jitter spreads expiries");
    }
}
