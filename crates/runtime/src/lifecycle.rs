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

/// What a service binary is, to [`run`]: its settings, how it is built, how
/// it runs. Each service crate implements this for its `App`.
pub trait Service: Sized {
    /// The service's settings type.
    type Settings: crate::settings::Settings;

    /// The binary's name (`shopeasy-inventory`), used in logs and traces.
    const NAME: &'static str;

    /// Its log settings.
    fn log(settings: &Self::Settings) -> &crate::settings::common::LogSettings;

    /// Its OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`); empty for none.
    fn otlp_endpoint(settings: &Self::Settings) -> &str;

    /// Binds the listeners and connects what must be connected.
    fn build(settings: Self::Settings) -> impl Future<Output = anyhow::Result<Self>>;

    /// Serves until `shutdown` is cancelled, then drains.
    fn run_until_stopped(
        self,
        shutdown: CancellationToken,
    ) -> impl Future<Output = anyhow::Result<()>>;
}

/// The whole `main` of a service binary: loads settings (handling
/// `--print-defaults` and `--check-config`), initialises telemetry, builds
/// the service and runs it until SIGINT or SIGTERM.
///
/// Exit codes: 0 after a clean stop or a printing flag; 1 for invalid
/// settings or a failure to start or serve (the reason is logged).
pub fn run<S: Service>(args: &crate::settings::ConfigArgs) -> std::process::ExitCode {
    use std::process::ExitCode;
    let settings = match args.load::<S::Settings>(S::NAME) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}: cannot start the async runtime: {e}", S::NAME);
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let _telemetry =
            match crate::telemetry::init(S::NAME, S::log(&settings), S::otlp_endpoint(&settings)) {
                Ok(guard) => guard,
                Err(e) => {
                    eprintln!("{}: telemetry: {e:#}", S::NAME);
                    return ExitCode::FAILURE;
                }
            };
        let result = async {
            let shutdown = shutdown_token()?;
            let service = S::build(settings).await?;
            service.run_until_stopped(shutdown).await
        }
        .await;
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(
                    error = format!("{e:#}"),
                    "{} stopped with an error",
                    S::NAME
                );
                ExitCode::FAILURE
            }
        }
    })
}
