//! The public listener's accept loop: HTTP/1.1 connections served by hyper
//! straight into the [`Proxy`].
//!
//! It is its own loop rather than `shopeasy_runtime::lifecycle::serve`
//! (which the admin listener uses) for two reasons: every connection is
//! wrapped in a [`Sniffed`] reader so ambiguous framing can be rejected (see
//! [`crate::framing`]), and hyper's HTTP/1 options are set — the read buffer
//! (a hard cap on the request head) and the header read timeout from the
//! activity timeout (a client that trickles its head is cut off like any
//! other silence; the runtime's loop has a fixed 30 s one). Shutdown is
//! the same: stop accepting, let in-flight exchanges finish for at most the
//! drain bound, then drop the rest.
//!
//! **The connection cap.** The loop takes a slot (a semaphore permit) before
//! it accepts, and the connection gives it back when it closes: at
//! `limits.max_connections` it simply stops calling `accept`, so further
//! clients wait in the kernel's listen backlog (`lifecycle::LISTEN_BACKLOG`;
//! beyond it the kernel drops their handshakes and they retry) instead of
//! each costing a descriptor, a task and buffers here. Accepting and then
//! dropping would spend a descriptor per attempt and give the client
//! nothing better than the backlog does. The open count is the gauge
//! `shopeasy_gateway_open_connections`.
//!
//! **A client that stops reading.** Each connection's socket is a
//! [`WriteStall`]: a write to the client pending for the activity timeout
//! ends the connection, so a caller that never reads its answer cannot hold
//! a route slot and an upstream connection (hyper has no write timeout).
//!
//! **The head buffer.** hyper's read buffer (`max_buf_size`) is set just
//! above `limits.max_header_bytes` (hyper's floor is 8 KiB): a head that
//! fits is checked against the cap with a problem+json 431; one that does
//! not fit the buffer gets hyper's own 431 as soon as the buffer is full,
//! so an unfinished head never holds more than that.

use std::{sync::Arc, time::Duration};

use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use shopeasy_runtime::lifecycle;
use tokio::{net::TcpListener, sync::Semaphore};
use tokio_util::sync::CancellationToken;

use crate::{
    framing::{FramingWatch, Sniffed},
    proxy::Proxy,
    ratelimit::ClientKey,
    stall::WriteStall,
};

/// The gauge of open client connections.
const OPEN_CONNECTIONS: &str = "shopeasy_gateway_open_connections";

/// What the proxy learns about the connection a request came on.
#[derive(Debug, Clone)]
pub(crate) struct ClientConnection {
    /// The peer's IP as an `X-Forwarded-For` value, formatted once.
    pub(crate) forwarded_for: Option<http::HeaderValue>,
    /// The framing notes of the connection's request heads.
    pub(crate) framing: Arc<FramingWatch>,
    /// Whose rate limit its requests count against.
    pub(crate) client: ClientKey,
}

/// hyper's smallest allowed read buffer.
const MIN_BUF: usize = 8192;
/// Room in the read buffer beyond the header cap, for what the cap does
/// not count exactly (the method, version and line ends) and for the start
/// of a body read along with the head.
const BUF_SLACK: usize = 1024;

/// The largest read buffer any valid `limits.max_header_bytes` gives (the
/// framing follower's longest line).
pub(crate) const MAX_BUF: usize = 1024 * 1024 + BUF_SLACK;

/// hyper's read buffer for a header cap of `max_header_bytes`: the longest
/// request head it will parse at all (the cap itself is checked below it,
/// with a problem+json answer).
pub(crate) fn read_buffer(max_header_bytes: u64) -> usize {
    usize::try_from(max_header_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(BUF_SLACK)
        .clamp(MIN_BUF, MAX_BUF)
}

/// How the listener treats its clients.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listening {
    /// hyper's header read timeout.
    pub(crate) header_timeout: Duration,
    /// How long a write to the client may stay pending ([`WriteStall`]).
    pub(crate) write_stall: Duration,
    /// hyper's read buffer ([`read_buffer`]).
    pub(crate) max_buf: usize,
    /// Open client connections at most.
    pub(crate) max_connections: u32,
}

/// Serves `listener` until `shutdown`, then drains for at most `drain`.
pub(crate) async fn serve(
    listener: TcpListener,
    proxy: Proxy,
    listening: Listening,
    shutdown: CancellationToken,
    drain: Duration,
) {
    let mut connections = lifecycle::Connections::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(listening.header_timeout)
        .max_buf_size(listening.max_buf)
        .keep_alive(true);
    let slots = Arc::new(Semaphore::new(
        usize::try_from(listening.max_connections).unwrap_or(usize::MAX),
    ));
    let open = metrics::gauge!(OPEN_CONNECTIONS);
    open.set(0.0);
    loop {
        // At the cap, wait here: not accepting leaves clients in the backlog.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = lifecycle::accept(&listener) => accepted,
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let framing = Arc::new(FramingWatch::default());
        let connection = Arc::new(ClientConnection {
            forwarded_for: crate::headers::forwarded_for(peer.ip()),
            framing: framing.clone(),
            client: ClientKey::of_address(peer.ip()),
        });
        let proxy = proxy.clone();
        let service = service_fn(move |request: http::Request<Incoming>| {
            proxy.serve(connection.clone(), request)
        });
        let io = TokioIo::new(Sniffed::new(
            WriteStall::new(stream, listening.write_stall),
            framing,
        ));
        open.increment(1.0);
        let counted = OpenConnection(open.clone());
        connections.serve(http.serve_connection(io, service), (slot, counted));
    }
    drop(listener);
    connections.drain(drain).await;
}

/// One count in the open-connections gauge, taken back when the connection
/// ends, however it ends (closed, drained, or dropped with the server).
struct OpenConnection(metrics::Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
