//! The public listener's accept loop: HTTP/1.1 connections served by hyper
//! straight into the [`Proxy`].
//!
//! It is its own loop rather than `shopeasy_runtime::lifecycle::serve`
//! (which the admin listener uses) for two reasons: every connection is
//! wrapped in a [`Sniffed`] reader so ambiguous framing can be rejected (see
//! [`crate::framing`]), and hyper's HTTP/1 options are set — the read buffer
//! (a hard cap on the request head) and the header read timeout (a client
//! that trickles its head is cut off like any other silence). Shutdown is
//! the same: stop accepting, let in-flight exchanges finish for at most the
//! drain bound, then drop the rest.

use std::{sync::Arc, time::Duration};

use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    framing::{FramingWatch, Sniffed},
    proxy::Proxy,
};

/// What the proxy learns about the connection a request came on.
#[derive(Debug, Clone)]
pub(crate) struct ClientConnection {
    /// The peer's IP as an `X-Forwarded-For` value, formatted once.
    pub(crate) forwarded_for: Option<http::HeaderValue>,
    /// The framing notes of the connection's request heads.
    pub(crate) framing: Arc<FramingWatch>,
}

/// hyper's read buffer: the longest request head it will parse at all (the
/// configurable `limits.max_header_bytes` is checked below it, with a
/// problem+json answer).
pub(crate) const MAX_BUF: usize = 1024 * 1024;

/// Serves `listener` until `shutdown`, then drains for at most `drain`.
pub(crate) async fn serve(
    listener: TcpListener,
    proxy: Proxy,
    header_timeout: Duration,
    shutdown: CancellationToken,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_BUF)
        .keep_alive(true);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off briefly.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let framing = Arc::new(FramingWatch::default());
        let connection = Arc::new(ClientConnection {
            forwarded_for: crate::headers::forwarded_for(peer.ip()),
            framing: framing.clone(),
        });
        let proxy = proxy.clone();
        let service = service_fn(move |request: http::Request<Incoming>| {
            proxy.serve(connection.clone(), request)
        });
        let io = TokioIo::new(Sniffed::new(stream, framing));
        let conn = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "client connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "drain timeout passed; dropping remaining connections"
        );
    }
}
