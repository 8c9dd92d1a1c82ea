//! Starting and stopping: shutdown signals, and serving HTTP with a bounded
//! graceful drain.

use std::{future::Future, io, time::Duration};

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The default bound on draining in-flight requests at shutdown.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
///
/// The handlers are registered when this function is called, not when the
/// future is first polled, so a signal that arrives in between is not lost.
///
/// # Errors
/// When the signal handlers cannot be registered.
pub fn shutdown_signal() -> io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
            _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
        }
    })
}

/// A token cancelled on the first SIGINT or SIGTERM.
///
/// # Errors
/// When the signal handlers cannot be registered.
pub fn shutdown_token() -> io::Result<CancellationToken> {
    let token = CancellationToken::new();
    let signal = shutdown_signal()?;
    let child = token.clone();
    tokio::spawn(async move {
        signal.await;
        child.cancel();
    });
    Ok(token)
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then stops
/// accepting, lets in-flight requests finish for at most `drain`, and
/// returns.
///
/// # Errors
/// When accepting connections fails.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    drain: Duration,
) -> io::Result<()> {
    let stop = shutdown.clone();
    let server = axum::serve(
        listener,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move { stop.cancelled().await });
    tokio::select! {
        r = server => r,
        () = async { shutdown.cancelled().await; tokio::time::sleep(drain).await } => {
            tracing::warn!(?drain, "drain timeout passed; dropping remaining connections");
            Ok(())
        }
    }
}

/// Binds a TCP listener, naming the address in the error (a port in use is
/// the commonest start-up failure).
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(addr: std::net::SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} ({what}): {e}"))
}
