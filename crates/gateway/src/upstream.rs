//! The pooled HTTP/1.1 client to the services: one [`Origin`] per service
//! address, each with its own pool of hyper's `client::conn::http1`
//! connections, with a connect timeout, a maximum
//! connection lifetime, hyper-util's safe re-send of a request that a dead
//! pooled connection never took, and the classification of its errors into
//! [`ProxyError`]s.
//!
//! **Why not hyper-util's legacy client.** It spawns a task for every
//! response to hand the connection back to its pool, checks out through a
//! race between the pool and a new connect, and has no maximum connection
//! age (the gateway needed a captured `Connected` and a timer per connection
//! to add one). Here a connection is a [`SendRequest`] in its origin's
//! `Vec` (the origins are known at start-up, so there is no map to hash
//! into per request): it goes back to its pool when the response body has
//! been read to the end ([`Pooled::release`]), and a checkout takes the most
//! recently used one that is ready.
//!
//! **Connection lifetime.** Every connection gets a jittered expiry (±10 %,
//! so a fleet's connections do not all turn over at once). An expired
//! connection is dropped (closed) when it is returned or next checked out,
//! never in the middle of a request: the connection is replaced between
//! requests. Idle connections are also dropped after [`POOL_IDLE_TIMEOUT`],
//! and a connection the service closed is noticed by its own task and
//! skipped.
//!
//! **Re-sending what was never sent.** When a *reused* connection turns out
//! to be dead before any byte of the request was written, hyper hands the
//! request back and it is sent once more on a fresh connection. The service
//! cannot have seen it, so this is safe for every method (like hyper-util's
//! `retry_canceled_requests`); it is not counted in
//! `shopeasy_gateway_retries_total`.
//!
//! **A cap per origin.** Each origin has `max_connections` slots (a
//! semaphore); a connection holds one from its connect until it is closed,
//! busy or pooled, so the service never sees more than that many from this
//! gateway. hyper-util's legacy pool caps only idle connections per host.
//! A request that finds every slot taken waits for a connection to come
//! back to the pool or a slot to free, and that wait plus the connect
//! itself share one connect timeout ([`UpstreamError::Busy`] when it
//! passes: 503, not 504 — nothing was tried yet).
//!
//! **Cancellation.** Dropping the request future (activity timeout, caller
//! gone, deadline) drops hyper's response callback; the connection's task
//! then closes the connection, so the service sees it closed.

use std::{
    io,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use http::{HeaderValue, Request, Response, header, uri::Authority};
use hyper::{
    body::Incoming,
    client::conn::http1::{self, SendRequest},
};
use hyper_util::rt::TokioIo;
use rand::Rng;
use tokio::{
    net::TcpStream,
    sync::{Notify, OwnedSemaphorePermit, Semaphore},
    time::Instant,
};

use shopeasy_resilience::deadline::Deadline;

use crate::{activity::BoxError, error::ProxyError};

/// The body type the gateway sends upstream.
pub(crate) type UpstreamBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, BoxError>;

/// How long an idle pooled connection is kept before it is closed.
pub(crate) const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Why an exchange with a service failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// The TCP connect did not finish within the connect timeout.
    #[error("connect timed out")]
    ConnectTimeout,
    /// Every connection slot of the origin stayed taken for the connect
    /// timeout.
    #[error("no connection slot came free")]
    Busy(u32),
    /// The TCP connect failed.
    #[error("connect failed")]
    Connect(#[source] io::Error),
    /// The exchange failed after the connection was made.
    #[error("request failed")]
    Request(#[source] hyper::Error),
}

/// One service address and its pool of keep-alive connections. Shared
/// (`Arc`) by every route that points at the same address.
#[derive(Debug)]
pub(crate) struct Origin {
    authority: Authority,
    /// The `Host` header sent to it, formatted once.
    host: HeaderValue,
    connect_timeout: Duration,
    lifetime: Duration,
    /// Idle connections in return order: the oldest in front.
    idle: Mutex<Vec<Idle>>,
    /// One permit per connection that may exist (busy or pooled).
    slots: Arc<Semaphore>,
    max_connections: u32,
    /// Signalled when a connection goes back to the pool.
    returned: Notify,
}

/// A connection waiting in its pool.
#[derive(Debug)]
struct Idle {
    send: SendRequest<UpstreamBody>,
    expires_at: Instant,
    since: Instant,
    /// Its slot of the origin's cap, freed when the connection is dropped.
    slot: OwnedSemaphorePermit,
}

/// A connection checked out for one exchange. Give it back with
/// [`release`](Self::release) once the response body has been read to the
/// end; dropped instead, it closes the connection.
#[derive(Debug)]
pub(crate) struct Pooled {
    send: SendRequest<UpstreamBody>,
    expires_at: Instant,
    slot: OwnedSemaphorePermit,
    origin: Arc<Origin>,
}

impl Pooled {
    /// Returns the connection to its pool, unless it is closed or expired.
    pub(crate) fn release(self) {
        let now = Instant::now();
        if self.send.is_closed() || now >= self.expires_at {
            return;
        }
        let mut idle = self.origin.lock();
        let stale = idle
            .iter()
            .take_while(|c| now - c.since >= POOL_IDLE_TIMEOUT)
            .count();
        idle.drain(..stale);
        idle.push(Idle {
            send: self.send,
            expires_at: self.expires_at,
            since: now,
            slot: self.slot,
        });
        drop(idle);
        self.origin.returned.notify_one();
    }
}

impl Origin {
    /// An origin at `authority` (`host:port`) with an empty pool and room
    /// for `max_connections`.
    ///
    /// # Errors
    /// When `authority` cannot be a `Host` header value.
    pub(crate) fn new(
        authority: Authority,
        connect_timeout: Duration,
        lifetime: Duration,
        max_connections: u32,
    ) -> Result<Self, http::header::InvalidHeaderValue> {
        let host = match authority.port_u16() {
            Some(80) => HeaderValue::from_str(authority.host())?,
            _ => HeaderValue::from_str(authority.as_str())?,
        };
        Ok(Self {
            authority,
            host,
            connect_timeout,
            lifetime,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(
                usize::try_from(max_connections.max(1)).unwrap_or(usize::MAX),
            )),
            max_connections,
            returned: Notify::new(),
        })
    }

    /// The `host:port` this origin connects to.
    pub(crate) fn authority(&self) -> &Authority {
        &self.authority
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most recently used ready connection. Closed, expired and
    /// long-idle ones met on the way are dropped; busy ones (a connection is
    /// returned when its response body ends, a moment before hyper is ready
    /// for the next request on it) are left in place, unless `busy_too`
    /// (at the cap, where waiting for one beats waiting for a slot), when
    /// the most recent open one is taken.
    fn checkout(&self, busy_too: bool) -> Option<Idle> {
        let now = Instant::now();
        let mut idle = self.lock();
        let mut i = idle.len();
        while i > 0 {
            i -= 1;
            let c = &idle[i];
            if c.send.is_closed() || now >= c.expires_at || now - c.since >= POOL_IDLE_TIMEOUT {
                drop(idle.remove(i));
            } else if c.send.is_ready() {
                return Some(idle.remove(i));
            }
        }
        if busy_too { idle.pop() } else { None }
    }

    /// A pooled connection (`true`) or a new one (`false`) — at the cap,
    /// after waiting for either, until `until`.
    async fn obtain(&self, until: Instant) -> Result<(Idle, bool), UpstreamError> {
        if let Some(idle) = self.checkout(false) {
            return Ok((idle, true));
        }
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let waited = tokio::time::timeout_at(until, async {
                    loop {
                        let returned = self.returned.notified();
                        if let Some(idle) = self.checkout(true) {
                            return Err(idle);
                        }
                        tokio::select! {
                            slot = self.slots.clone().acquire_owned() => {
                                // The semaphore is never closed.
                                if let Ok(slot) = slot { return Ok(slot) }
                            }
                            () = returned => {}
                        }
                    }
                })
                .await
                .map_err(|_| UpstreamError::Busy(self.max_connections))?;
                match waited {
                    Ok(slot) => slot,
                    Err(idle) => return Ok((idle, true)),
                }
            }
        };
        Ok((self.connect(slot, until).await?, false))
    }

    async fn connect(
        &self,
        slot: OwnedSemaphorePermit,
        until: Instant,
    ) -> Result<Idle, UpstreamError> {
        let port = self.authority.port_u16().unwrap_or(80);
        let host = self.authority.host();
        // An IPv6 literal comes bracketed in the authority.
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let expires_at = Instant::now() + jittered(self.lifetime, &mut rand::rng());
        let stream = tokio::time::timeout_at(until, TcpStream::connect((host, port)))
            .await
            .map_err(|_| UpstreamError::ConnectTimeout)?
            .map_err(UpstreamError::Connect)?;
        let _ = stream.set_nodelay(true);
        let (send, connection) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(UpstreamError::Request)?;
        // The connection's task: spawned from the requesting task, so it
        // starts on the same runtime thread.
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(Idle {
            send,
            expires_at,
            since: Instant::now(),
            slot,
        })
    }

    /// Sends `request` over a pooled or new connection, with this origin's
    /// `Host` and the request target in origin form (`/path?query`). On
    /// success the response comes with its connection, to be
    /// [`release`](Pooled::release)d after the body.
    ///
    /// The caller's `deadline` is written again as the request goes on the
    /// wire: the wait for a connection slot and the connect (up to the
    /// connect timeout) come after the attempt was built, and the service
    /// must be told what is left then, not before them.
    ///
    /// # Errors
    /// [`UpstreamError`]; classify it with [`classify`].
    pub(crate) async fn request(
        self: &Arc<Self>,
        mut request: Request<UpstreamBody>,
        deadline: Option<Deadline>,
    ) -> Result<(Response<Incoming>, Pooled), UpstreamError> {
        self.origin_form(&mut request);
        // Waiting for a slot and connecting share one connect timeout.
        let until = Instant::now() + self.connect_timeout;
        loop {
            let (mut idle, reused) = self.obtain(until).await?;
            if !idle.send.is_ready() {
                // A fresh connection is ready once its task has run, a
                // returned one once hyper has finished its last exchange;
                // wait for it (a failure here is the connection's, not the
                // request's: nothing was sent).
                match idle.send.ready().await {
                    Ok(()) => {}
                    Err(_) if reused => continue,
                    Err(e) => return Err(UpstreamError::Request(e)),
                }
            }
            if let Some(d) = deadline {
                d.write_http(request.headers_mut());
            }
            match idle.send.try_send_request(request).await {
                Ok(response) => {
                    let pooled = Pooled {
                        send: idle.send,
                        expires_at: idle.expires_at,
                        slot: idle.slot,
                        origin: self.clone(),
                    };
                    return Ok((response, pooled));
                }
                Err(mut failed) => match failed.take_message() {
                    // Never written on a reused connection that turned out
                    // dead: safe to send again, on another connection.
                    Some(unsent) if reused => {
                        tracing::debug!(error = %failed.error(), "pooled connection was dead; re-sending");
                        request = unsent;
                    }
                    _ => return Err(UpstreamError::Request(failed.into_error())),
                },
            }
        }
    }

    /// HTTP/1.1 sends the path and query on the request line and the origin
    /// in `Host` (the caller's `Host` was already moved to
    /// `X-Forwarded-Host`). A target that came in origin form, as nearly all
    /// do, is kept as it is.
    fn origin_form(&self, request: &mut Request<UpstreamBody>) {
        request
            .headers_mut()
            .insert(header::HOST, self.host.clone());
        let uri = request.uri();
        if uri.scheme().is_some() || uri.authority().is_some() {
            let path = uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
            *request.uri_mut() = http::Uri::from(path);
        }
    }
}

/// `lifetime` ± 10 %.
fn jittered(lifetime: Duration, rng: &mut impl Rng) -> Duration {
    lifetime.mul_f64(rng.random_range(0.9..=1.1))
}

/// Maps a transport error onto what the caller is told. (Failures of the
/// caller's own body are told apart by the proxy first, from its
/// [`ClientSide`](crate::activity::ClientSide).)
pub(crate) fn classify(error: &UpstreamError) -> ProxyError {
    let hyper_error = match error {
        UpstreamError::ConnectTimeout => return ProxyError::ConnectTimeout,
        UpstreamError::Busy(max) => return ProxyError::UpstreamBusy(*max),
        UpstreamError::Connect(e) => {
            return match e.kind() {
                io::ErrorKind::TimedOut => ProxyError::ConnectTimeout,
                io::ErrorKind::ConnectionRefused => ProxyError::ConnectionRefused,
                _ => ProxyError::ConnectionFailed,
            };
        }
        UpstreamError::Request(e) => e,
    };
    let io_kind = io_kind(hyper_error);
    let closed = hyper_error.is_incomplete_message() || hyper_error.is_canceled();
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
    } else if hyper_error.is_parse() {
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
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
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
