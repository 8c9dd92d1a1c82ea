//! What a service is, and starting and stopping one: the [`Service`]
//! description every service crate implements once, [`spawn`] that starts
//! any of them, the [`Running`] handle the launcher, the end-to-end cluster
//! and every test harness hold, shutdown signals and the bounded graceful
//! drain.
//!
//! Starting a service has the same steps for all four, written here once:
//!
//! 1. [`Service::build`] connects what the service needs (its database with
//!    [`connect_database`], its upstream clients) and registers its
//!    readiness checks and reports on the [`Admin`] it is given;
//! 2. both listeners are bound ([`Bound`]), naming the setting in the error;
//! 3. [`Bound::start`] serves the admin listener and [`Service::serve`] on
//!    the public one, until the handle stops them; in-flight work then gets
//!    at most [`Service::DRAIN`] before it is dropped.
//!
//! **Admission control** (SPEC §11) is built here once per service from the
//! `admission.*` settings ([`inbound_admission`]), reported on the admin
//! listener as `/admin/resilience`'s `admission` member, and handed to
//! [`Service::serve`] through [`admission()`]: the HTTP services serve their
//! router with [`serve_admitted`], which puts it in front with the 503
//! `overloaded` refusal; Inventory puts it in front of its gRPC routes with
//! the `RESOURCE_EXHAUSTED` one. The admin listener never has it: health
//! checks and metrics must answer under overload.

use std::{future::Future, io, net::SocketAddr, time::Duration};

use anyhow::Context as _;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::{GracefulConnection, GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::{
    net::{TcpListener, TcpSocket, TcpStream},
    task::{JoinHandle, JoinSet},
};
use tokio_util::sync::CancellationToken;

use shopeasy_resilience::admission::{Admission, AdmissionLayer};

use crate::{
    admin::Admin,
    db::Database,
    problem::OverloadedProblem,
    settings::{AdmissionSettings, DatabaseSettings, ProcessSettings},
};

tokio::task_local! {
    /// The public listener's admission while [`Service::serve`] runs.
    static INBOUND: Option<Admission>;
}

/// The admission control of the public listener of the service being
/// served: what [`Bound::start`] built from its `admission.*` settings and
/// reported on its admin listener. Call it in [`Service::serve`] (on its
/// task, before spawning) and put it in front of your own server as an
/// [`AdmissionLayer`]; [`serve_admitted`] reads it itself. `None` when
/// `admission.enabled` is false, or outside a service started by [`Bound`].
pub fn admission() -> Option<Admission> {
    INBOUND.try_with(Clone::clone).ok().flatten()
}

/// Builds a listener's admission control from `settings` and reports its
/// live state on `admin` as `/admin/resilience`'s `admission` member; `None`
/// when `settings.enabled` is false. [`Bound`] calls it for the public
/// listener; a test or a second listener may too.
pub fn inbound_admission(
    listener: &str,
    settings: &AdmissionSettings,
    admin: &Admin,
) -> Option<Admission> {
    if !settings.enabled {
        return None;
    }
    let admission = Admission::new(listener, settings.config());
    let report = admission.clone();
    admin.report("admission", move || {
        serde_json::to_value(report.snapshot()).unwrap_or_default()
    });
    Some(admission)
}

/// Raises the soft limit of open file descriptors to the hard limit, so a
/// burst of connections meets admission control (a fast 503) rather than
/// `Too many open files`: returns `(soft before, soft after, hard)`.
/// [`run`] calls it at start-up; the launcher calls it once for its
/// process.
///
/// # Errors
/// When the limit cannot be read or set.
pub fn raise_fd_limit() -> io::Result<(u64, u64, u64)> {
    let (before, hard) = rlimit::Resource::NOFILE.get()?;
    let after = rlimit::increase_nofile_limit(hard)?;
    Ok((before, after, hard))
}

/// [`raise_fd_limit`], logging both limits (a failure is a warning: the
/// process still runs with the limit it has).
pub fn raise_and_log_fd_limit() {
    match raise_fd_limit() {
        Ok((before, after, hard)) => tracing::info!(
            soft_before = before,
            soft = after,
            hard,
            "open-file limit raised to the hard limit"
        ),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
}

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

/// Runs `work` (a server that stops accepting when `shutdown` is cancelled
/// and then finishes what is in flight) until it ends, or until `drain` has
/// passed since `shutdown`: a stuck client cannot hold a stop forever.
///
/// # Errors
/// `work`'s own error.
pub async fn drain_within<T: Default, E>(
    work: impl Future<Output = Result<T, E>>,
    shutdown: &CancellationToken,
    drain: Duration,
    what: &str,
) -> Result<T, E> {
    tokio::select! {
        r = work => r,
        () = async { shutdown.cancelled().await; tokio::time::sleep(drain).await } => {
            tracing::warn!(?drain, "{what}: drain timeout passed; dropping remaining work");
            Ok(T::default())
        }
    }
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then stops
/// accepting, lets in-flight requests finish for at most `drain`, and
/// returns. No admission control: for listeners that must answer under
/// overload (the admin listener, the fault API); a service's public listener
/// uses [`serve_admitted`].
///
/// # Errors
/// None today: a failed accept (out of descriptors, say) is logged and
/// retried after 50 ms, as the gateway's loop does. The `Result` keeps the
/// callers' `?` should serving ever fail for good.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    drain: Duration,
) -> io::Result<()> {
    serve_http(listener, router, None, HEADER_READ_TIMEOUT, shutdown, drain).await
}

/// [`serve`] behind the service's admission control: called from
/// [`Service::serve`] (awaited on its task, where [`admission()`] is
/// readable), every request passes the public listener's admission first,
/// and a refused one gets a 503 `overloaded` problem with `Retry-After`
/// before the router sees it. With `admission.enabled` false it is
/// [`serve`].
///
/// # Errors
/// As [`serve`]: none today.
pub async fn serve_admitted(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    drain: Duration,
) -> io::Result<()> {
    serve_http(
        listener,
        router,
        admission(),
        HEADER_READ_TIMEOUT,
        shutdown,
        drain,
    )
    .await
}

/// How long a client may take to send a request's head on every listener
/// [`serve`] and [`serve_admitted`] run, and how long a connection may sit
/// idle before its first request or between two: hyper's own default,
/// which takes effect only with a timer. `axum::serve` sets none, so a head
/// trickled a byte at a time held its connection, task and buffer for ever
/// (measured: a byte every 5 s kept a connection to product's listener open
/// past 150 s). The gateway, the public edge, sets its own from its
/// activity timeout. A constant rather than a setting: behind the gateway
/// this is a backstop, not a tuning knob.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The one HTTP server of every listener but the gateway's public one, with
/// or without admission: HTTP/1.1 with a header read timeout
/// ([`HEADER_READ_TIMEOUT`]; a parameter so its test need not wait 30 s).
/// On `shutdown` it stops accepting and lets open connections finish for
/// at most `drain`.
///
/// HTTP/1.1 only: every caller of these listeners (the gateway's pool,
/// Prometheus, browsers on plain HTTP, the tests) speaks it, and hyper's
/// HTTP/1 timer covers a connection from its first byte. Served as
/// `axum::serve` serves (hyper-util's `auto`, which also speaks HTTP/2), a
/// connection that sent nothing, part of the HTTP/2 preface, or the whole
/// preface and then nothing was held for ever: the version sniff and
/// HTTP/2 have no timer.
async fn serve_http(
    listener: TcpListener,
    router: Router,
    admission: Option<Admission>,
    header_timeout: Duration,
    shutdown: CancellationToken,
    drain: Duration,
) -> io::Result<()> {
    let router = match admission {
        Some(a) => router.layer(AdmissionLayer::new(a, OverloadedProblem)),
        None => router,
    };
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let mut connections = Connections::new();
    loop {
        let stream = tokio::select! {
            (stream, _) = accept(&listener) => stream,
            () = shutdown.cancelled() => break,
        };
        let service = TowerToHyperService::new(router.clone());
        connections.serve(http.serve_connection(TokioIo::new(stream), service), ());
    }
    drop(listener);
    connections.drain(drain).await;
    Ok(())
}

/// The next connection of every accept loop (this module's and the
/// gateway's). A failed accept (out of descriptors and the like) is logged
/// and tried again after 50 ms rather than ending the loop or spinning on
/// it. Cancel-safe: dropped while backing off, it has taken nothing.
pub async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The open connections of one accept loop (this module's and the
/// gateway's), each served on a task of its own, and their drain.
///
/// The tasks belong to this set rather than being detached, so that a
/// connection ends with its server: at the drain's end those still open are
/// dropped, and a server dropped mid-flight (a service aborted, as SIGKILL
/// would end it) drops them all at once. Detached, they outlived both: a
/// request still running when the drain timed out was answered whenever it
/// finished, and an aborted service drained gracefully and answered every
/// request it held.
#[derive(Debug)]
pub struct Connections {
    graceful: GracefulShutdown,
    tasks: JoinSet<()>,
}

impl Default for Connections {
    fn default() -> Self {
        Self::new()
    }
}

impl Connections {
    /// No connections yet.
    pub fn new() -> Self {
        Self {
            graceful: GracefulShutdown::new(),
            tasks: JoinSet::new(),
        }
    }

    /// Serves `connection` on a task of its own until it ends, is drained,
    /// or this set is dropped; `held` (a connection slot, a gauge's guard)
    /// is dropped with it, whichever way it ends.
    pub fn serve<C>(&mut self, connection: C, held: impl Send + 'static)
    where
        C: GracefulConnection + Send + 'static,
        C::Error: std::fmt::Display + Send,
    {
        // Reap the tasks that ended, so the set holds only open connections.
        while self.tasks.try_join_next().is_some() {}
        let connection = self.graceful.watch(connection);
        self.tasks.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(held);
        });
    }

    /// The end of an accept loop: asks every connection to finish its
    /// requests and close, waits for them for at most `drain`, then drops
    /// those still open (their clients see the connection close).
    pub async fn drain(self, drain: Duration) {
        let Self {
            graceful,
            mut tasks,
        } = self;
        if tokio::time::timeout(drain, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                ?drain,
                "drain timeout passed; dropping remaining connections"
            );
        }
        tasks.shutdown().await;
    }
}

/// The listen backlog every listener asks for: connections the kernel has
/// completed and holds until the process accepts them. The kernel caps it
/// at `net.core.somaxconn` (4096 on current Linux).
///
/// Why not the runtime's default (128 here): a client that opens many
/// connections at once — an open-loop load stepping into overload, a pool
/// refilling after a restart — overflows 128 in a moment, and the kernel
/// then drops the handshake's packets: the client retransmits after 1 s,
/// then 3 s, so the request waits seconds before admission control can see
/// it, let alone refuse it fast (measured: the gateway's accept queue at
/// 129 of 128 while the generator opened 4,000 connections in 3 s, and
/// requests without an answer within 2 s). nginx asks for 511; Go and
/// Envoy for `somaxconn`.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds a TCP listener with [`LISTEN_BACKLOG`], naming the address and the
/// setting in the error (a port in use is the commonest start-up failure).
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    let listen = || -> io::Result<TcpListener> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // As `TcpListener::bind` does: a restart may bind while the old
        // process's connections linger in TIME_WAIT.
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    listen().map_err(|e| anyhow::anyhow!("cannot listen on {addr} ({what}): {e}"))
}

/// Connects a service's database, runs its migrations (retrying for
/// `database.startup_timeout_seconds`) and makes the admin listener's
/// readiness follow it: the one way a service gets its storage.
///
/// # Errors
/// When the URL is unusable, the database does not answer in time or a
/// migration fails; the error names the service and the (masked) URL.
pub async fn connect_database(
    service: &str,
    settings: &DatabaseSettings,
    migrator: &sqlx::migrate::Migrator,
    admin: &Admin,
) -> anyhow::Result<Database> {
    let db =
        Database::connect_and_migrate(settings.database_url.expose(), &settings.database, migrator)
            .await
            .with_context(|| format!("{service} database {}", settings.database_url))?;
    let ping = db.clone();
    admin.readiness("database", move || {
        let db = ping.clone();
        async move { db.ping().await.map_err(|e| e.to_string()) }
    });
    Ok(db)
}

/// The whole description of a service: its name, its settings, how it is
/// built, how it serves and how long it may drain. Each service crate
/// implements this once for its `App`; [`run`] (a binary's `main`) and
/// [`spawn`] (the launcher, the end-to-end cluster, tests) do the rest.
pub trait Service: Sized + Send + 'static {
    /// The service's settings type. It embeds the [`ProcessSettings`] (its
    /// listeners, logging and trace export) that the lifecycle reads before
    /// building the service; `AsRef` is how the lifecycle finds them.
    type Settings: crate::settings::Settings + AsRef<ProcessSettings> + Send + 'static;

    /// The binary's name (`shopeasy-inventory`), used in logs and traces.
    const NAME: &'static str;

    /// How long in-flight work may finish after a stop before it is dropped.
    const DRAIN: Duration = DEFAULT_DRAIN;

    /// Connects what must be connected and builds the service, registering
    /// its readiness checks and its `/admin/resilience` reports on `admin`.
    /// The listeners are not bound yet.
    fn build(
        settings: Self::Settings,
        admin: &Admin,
    ) -> impl Future<Output = anyhow::Result<Self>> + Send;

    /// Serves the public listener (and runs the service's own workers) until
    /// `shutdown` is cancelled, then finishes in-flight work and returns.
    fn serve(
        self,
        public: TcpListener,
        shutdown: CancellationToken,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// A service built and its listeners bound, not serving yet: tests take
/// what they need from [`Bound::service`] before [`Bound::start`].
#[derive(Debug)]
pub struct Bound<S> {
    service: S,
    admin: Admin,
    admission: Option<Admission>,
    public: TcpListener,
    admin_listener: TcpListener,
    local_addr: SocketAddr,
    admin_addr: SocketAddr,
}

impl<S: Service> Bound<S> {
    /// Builds the service ([`Service::build`]) and binds both listeners.
    ///
    /// # Errors
    /// When the service cannot be built or a listener cannot be bound.
    pub async fn build(settings: S::Settings) -> anyhow::Result<Self> {
        let process = settings.as_ref().clone();
        let admin = Admin::default();
        let service = S::build(settings, &admin).await?;
        Self::bind(&process, admin, service).await
    }

    /// Loads the settings from `env` alone (defaults, then these variables,
    /// as a binary started with exactly this environment would), with both
    /// listeners on ephemeral loopback ports unless `env` names them, and
    /// builds the service: how a test starts a service "as full mode starts
    /// it".
    ///
    /// # Errors
    /// Invalid settings (every reason), or as [`Bound::build`].
    pub async fn from_env(env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let ephemeral = [
            ("LISTEN_ADDR", "127.0.0.1:0"),
            ("ADMIN_ADDR", "127.0.0.1:0"),
        ];
        let settings = crate::settings::Loader::new()
            .env(ephemeral.iter().chain(env).copied())
            .load::<S::Settings>()?;
        Self::build(settings).await
    }

    /// Binds both listeners for a service built another way (with test
    /// failpoints, say) on `admin`.
    ///
    /// # Errors
    /// When a listener cannot be bound.
    pub async fn bind(process: &ProcessSettings, admin: Admin, service: S) -> anyhow::Result<Self> {
        let public = bind(process.listen_addr, "listen_addr").await?;
        let admin_listener = bind(process.admin_addr, "admin_addr").await?;
        let listener = S::NAME.strip_prefix("shopeasy-").unwrap_or(S::NAME);
        let admission = inbound_admission(listener, &process.admission, &admin);
        Ok(Self {
            admission,
            local_addr: public.local_addr()?,
            admin_addr: admin_listener.local_addr()?,
            service,
            admin,
            public,
            admin_listener,
        })
    }

    /// The service, before it serves.
    pub fn service(&self) -> &S {
        &self.service
    }

    /// The public listener's address (the port chosen when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Starts serving both listeners on a task of their own.
    pub fn start(self) -> Running {
        self.start_until(CancellationToken::new())
    }

    /// [`Bound::start`], stopping as well when `shutdown` is cancelled (a
    /// signal, or a launcher stopping everything at once).
    pub fn start_until(self, shutdown: CancellationToken) -> Running {
        let (local_addr, admin_addr) = (self.local_addr, self.admin_addr);
        tracing::info!(service = S::NAME, listen = %local_addr, admin = %admin_addr, "serving");
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            let public = INBOUND.scope(
                self.admission,
                drain_within(
                    self.service.serve(self.public, stop.clone()),
                    &stop,
                    S::DRAIN,
                    S::NAME,
                ),
            );
            let admin = serve(
                self.admin_listener,
                self.admin.router(),
                stop.clone(),
                S::DRAIN,
            );
            let (public, admin) = tokio::join!(public, admin);
            public?;
            admin.context("admin listener")
        });
        Running {
            name: S::NAME,
            local_addr,
            admin_addr,
            shutdown,
            task: Some(task),
        }
    }
}

/// Builds, binds and starts any service: the one way a launcher, a cluster
/// or a test starts one.
///
/// # Errors
/// When the service cannot be built or a listener cannot be bound.
pub async fn spawn<S: Service>(settings: S::Settings) -> anyhow::Result<Running> {
    Ok(Bound::<S>::build(settings).await?.start())
}

/// A serving service: both addresses, a graceful [`Running::stop`] and an
/// [`Running::abort`] that stands in for SIGKILL. Dropping it stops the
/// service without waiting.
#[derive(Debug)]
pub struct Running {
    name: &'static str,
    local_addr: SocketAddr,
    admin_addr: SocketAddr,
    shutdown: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    /// The service's binary name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The public listener's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Stops accepting, lets in-flight work drain (bounded by the service's
    /// [`Service::DRAIN`]) and waits for it.
    ///
    /// # Errors
    /// The service's own error, or its task's panic.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.finished().await
    }

    /// Kills the service as SIGKILL would: its task is aborted, in-flight
    /// requests get no answer, nothing drains. Returns once it is gone and
    /// its ports are free.
    pub async fn abort(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Resolves when the service has ended, on its own or after a stop.
    ///
    /// # Errors
    /// The service's own error, or its task's panic.
    pub async fn finished(&mut self) -> anyhow::Result<()> {
        match self.task.as_mut() {
            Some(task) => {
                let result = task.await;
                self.task = None;
                result
                    .with_context(|| format!("{} task", self.name))
                    .and_then(|r| r)
            }
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
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
        let process = settings.as_ref();
        let _telemetry = match crate::telemetry::init(
            S::NAME,
            &process.log,
            &process.otel_exporter_otlp_endpoint,
        ) {
            Ok(guard) => guard,
            Err(e) => {
                eprintln!("{}: telemetry: {e:#}", S::NAME);
                return ExitCode::FAILURE;
            }
        };
        raise_and_log_fd_limit();
        let result = async {
            let shutdown = shutdown_token()?;
            let mut running = Bound::<S>::build(settings).await?.start_until(shutdown);
            running.finished().await
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::time::Instant;

    use axum::routing::get;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };

    use super::*;

    /// A whole request is served; a head trickled a byte every 50 ms is cut
    /// off once the header timeout has passed, however steadily it trickles.
    #[tokio::test]
    async fn a_trickled_head_is_cut_off_and_a_whole_one_is_served() {
        const TIMEOUT: Duration = Duration::from_millis(300);
        let router = Router::new().route("/", get(|| async { "ok" }));
        let (addr, stop, server) = served(router, TIMEOUT, Duration::from_secs(1)).await;

        let mut whole = TcpStream::connect(addr).await.unwrap();
        whole
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        whole.read_to_end(&mut answer).await.unwrap();
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answer)
        );

        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        let started = Instant::now();
        let mut buf = [0_u8; 256];
        let held = loop {
            tokio::select! {
                // An end, an error or hyper's own answer: cut off.
                _ = slow.read(&mut buf) => break started.elapsed(),
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    if slow.write_all(b"a").await.is_err() {
                        break started.elapsed();
                    }
                    assert!(started.elapsed() < TIMEOUT * 10, "the trickled head is still held");
                }
            }
        };
        assert!(
            held >= TIMEOUT - Duration::from_millis(100),
            "cut off early: {held:?}"
        );
        stop.cancel();
        server.await.unwrap().unwrap();
    }

    /// A listener served on 127.0.0.1:0 with `router`, `header_timeout`
    /// and `drain`: its address, its stop, and its task.
    async fn served(
        router: Router,
        header_timeout: Duration,
        drain: Duration,
    ) -> (SocketAddr, CancellationToken, JoinHandle<io::Result<()>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve_http(
            listener,
            router,
            None,
            header_timeout,
            stop.clone(),
            drain,
        ));
        (addr, stop, server)
    }

    /// How long `stream` stays open (reading and dropping what comes),
    /// failing once it has stayed open for `bound`.
    async fn open_for(stream: &mut TcpStream, bound: Duration, what: &str) -> Duration {
        let started = Instant::now();
        let mut buf = [0_u8; 1024];
        loop {
            match tokio::time::timeout_at(started + bound, stream.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return started.elapsed(),
                Ok(Ok(_)) => {}
                Err(_) => panic!("{what}: still open after {bound:?}"),
            }
        }
    }

    /// A connection that sends nothing, one that sends part of the HTTP/2
    /// preface, one that sends all of it, and one idle after a whole
    /// request are each closed once the header timeout has passed. Served
    /// as `axum::serve` serves (HTTP/1 and HTTP/2 sniffed), the first three
    /// were held for ever: neither the sniff nor HTTP/2 had a timer.
    #[tokio::test]
    async fn a_silent_or_idle_connection_is_closed_after_the_header_timeout() {
        const TIMEOUT: Duration = Duration::from_millis(300);
        let router = Router::new().route("/", get(|| async { "ok" }));
        let (addr, stop, server) = served(router, TIMEOUT, Duration::from_secs(1)).await;
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        for (what, sent) in [
            ("nothing", &b""[..]),
            ("half the HTTP/2 preface", &preface[..14]),
            ("the whole HTTP/2 preface", &preface[..]),
        ] {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(sent).await.unwrap();
            open_for(&mut stream, TIMEOUT * 10, what).await;
        }
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0_u8; 12];
        idle.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        let held = open_for(&mut idle, TIMEOUT * 10, "idle after a request").await;
        assert!(
            held >= TIMEOUT - Duration::from_millis(100),
            "closed early: {held:?}"
        );
        stop.cancel();
        server.await.unwrap().unwrap();
    }

    /// A server with `drain` whose `/slow` holds its request for 30 s, and
    /// a client whose request it holds: returned once the handler has it.
    async fn slow_request_held(
        drain: Duration,
    ) -> (TcpStream, CancellationToken, JoinHandle<io::Result<()>>) {
        let entered = Arc::new(tokio::sync::Notify::new());
        let told = entered.clone();
        let router = Router::new().route(
            "/slow",
            get(move || {
                told.notify_one();
                async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    "late"
                }
            }),
        );
        let (addr, stop, server) = served(router, HEADER_READ_TIMEOUT, drain).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        entered.notified().await;
        (client, stop, server)
    }

    /// `client`'s connection closes within 5 s without an answer.
    async fn assert_closed_unanswered(client: &mut TcpStream) {
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer))
            .await
            .expect("the connection closes with the server");
        assert!(
            answer.is_empty(),
            "no answer: {}",
            String::from_utf8_lossy(&answer)
        );
    }

    /// A request still running when the drain ends is dropped with its
    /// connection: the server returns after the drain and the client sees
    /// the connection close then, not an answer 30 s later (detached
    /// connection tasks outlived their server).
    #[tokio::test]
    async fn a_request_that_outlives_the_drain_is_dropped_with_it() {
        let drain = Duration::from_millis(200);
        let (mut client, stop, server) = slow_request_held(drain).await;
        let stopped = Instant::now();
        stop.cancel();
        server.await.unwrap().unwrap();
        assert!(stopped.elapsed() < drain * 5, "the drain is bounded");
        assert_closed_unanswered(&mut client).await;
    }

    /// A server dropped mid-request (a service aborted, as SIGKILL would
    /// end it) drops its connections at once: the request in flight gets no
    /// answer. Detached, the connections drained gracefully instead.
    #[tokio::test]
    async fn an_aborted_server_answers_no_request_in_flight() {
        let (mut client, _stop, server) = slow_request_held(Duration::from_secs(60)).await;
        server.abort();
        let _ = server.await;
        assert_closed_unanswered(&mut client).await;
    }
}
