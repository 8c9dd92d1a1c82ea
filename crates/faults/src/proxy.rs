//! One proxy: a listener, an upstream address, an enabled flag and a toxic
//! set, driven in-process through [`FaultProxy`].

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use rand::{RngCore, SeedableRng, rngs::SmallRng};
use serde::{Deserialize, Serialize};
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::{
    Error, Toxic, link,
    toxic::MAX_WAIT_MS,
    windows::{Closed, WindowEnd, WindowHistory, WindowLog},
};

/// How long a new connection waits for its upstream to accept it when its
/// proxy's config sets no `connect_timeout_ms`: far above a healthy
/// connect (well under a millisecond on a LAN), far below the kernel's SYN
/// retries (about two minutes on Linux), which a black-holed upstream
/// would otherwise hold each client for.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The toxics of a proxy, in the order they were added, as every open
/// connection sees them.
pub(crate) type ToxicSet = Arc<Vec<ToxicEntry>>;

/// A toxic with an id that changes whenever it is added or updated, so each
/// connection re-rolls its toxicity and restarts its clocks for the new one.
#[derive(Debug, Clone)]
pub(crate) struct ToxicEntry {
    pub(crate) id: u64,
    pub(crate) toxic: Toxic,
}

/// How to create a proxy (Toxiproxy's proxy JSON, plus an optional `seed`);
/// a JSON object only, as Go's decoder takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct ProxyConfig {
    /// Unique name, for example `order-inventory`.
    #[serde(default)]
    pub name: String,
    /// `host:port` to listen on; port 0 picks a free port.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// `host:port` to forward to, resolved at each new connection.
    #[serde(default)]
    pub upstream: String,
    /// Whether it accepts connections (default true).
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// Seed of every random choice it makes (toxicity rolls, jitter, slice
    /// sizes); derived from the name when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// How long, in milliseconds (1 to [`MAX_WAIT_MS`]), a new connection
    /// waits for the upstream to accept it; then the client is closed, as
    /// when the upstream refuses. Absent: [`DEFAULT_CONNECT_TIMEOUT`]. Our
    /// addition, like `seed` (Toxiproxy waits as long as the kernel does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
}

shopeasy_runtime::only_json_objects!(serialize: ProxyConfig);

fn default_listen() -> String {
    "127.0.0.1:0".to_owned()
}

fn enabled_by_default() -> bool {
    true
}

impl ProxyConfig {
    /// An enabled proxy named `name` on a free local port forwarding to
    /// `upstream`.
    pub fn new(name: impl Into<String>, upstream: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            listen: default_listen(),
            upstream: upstream.into(),
            enabled: true,
            seed: None,
            connect_timeout_ms: None,
        }
    }

    /// The same, listening on `listen`.
    #[must_use]
    pub fn listen(mut self, listen: impl Into<String>) -> Self {
        self.listen = listen.into();
        self
    }

    /// The same, with a fixed seed.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The same, created disabled (`down`).
    #[must_use]
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The same, giving up on connecting to the upstream after `timeout`
    /// (rounded up to whole milliseconds).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        let ms = timeout.as_nanos().div_ceil(1_000_000);
        self.connect_timeout_ms = Some(u64::try_from(ms).unwrap_or(u64::MAX));
        self
    }

    /// The connect timeout it asks for, or the default.
    pub fn connect_timeout_or_default(&self) -> Duration {
        self.connect_timeout_ms
            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_millis)
    }

    /// Refuses a config no proxy can start with, before anything changes.
    ///
    /// # Errors
    /// [`Error::MissingField`] for an empty name or upstream;
    /// [`Error::BadBody`] for a `connect_timeout_ms` of 0 (every connection
    /// would fail) or above [`MAX_WAIT_MS`] (a typo, as for a toxic).
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.name.is_empty() {
            return Err(Error::MissingField("name"));
        }
        if self.upstream.is_empty() {
            return Err(Error::MissingField("upstream"));
        }
        match self.connect_timeout_ms {
            Some(ms) if !(1..=MAX_WAIT_MS).contains(&ms) => Err(Error::BadBody(format!(
                "connect_timeout_ms must be between 1 and {MAX_WAIT_MS} ms (24 h), not {ms}"
            ))),
            _ => Ok(()),
        }
    }
}

/// A proxy as the HTTP API shows it (Toxiproxy's JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProxyView {
    /// Its name.
    pub name: String,
    /// The address it listens on (with the port it got).
    pub listen: String,
    /// Where it forwards to.
    pub upstream: String,
    /// Whether it accepts connections.
    pub enabled: bool,
    /// Its toxics, in the order they were added.
    pub toxics: Vec<Toxic>,
}

/// A running fault-injecting TCP proxy.
///
/// Cheap to clone; the proxy stops (closing its listener and every
/// connection) when [`FaultProxy::stop`] is called or the last clone is
/// dropped.
///
/// ```no_run
/// # async fn demo() -> Result<(), shopeasy_faults::Error> {
/// use shopeasy_faults::{FaultProxy, Stream, Toxic, ToxicKind};
/// let proxy = FaultProxy::start("order-inventory", "127.0.0.1:50051").await?;
/// // point the client at proxy.listen_addr(), then:
/// proxy.add_toxic(Toxic::new(ToxicKind::Timeout { timeout: 0 }, Stream::Downstream))?;
/// proxy.set_enabled(false).await; // refuse new connections, close open ones
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    _stop_on_drop: Arc<DropGuard>,
}

/// What the handle and the accept loop share.
#[derive(Debug)]
struct Shared {
    name: String,
    upstream: Arc<str>,
    listen: SocketAddr,
    seed: u64,
    /// How long each connection waits for the upstream to accept it.
    connect_timeout: Duration,
    /// Wanted state: set by the handle.
    enabled: watch::Sender<bool>,
    /// Actual state: whether the listener is bound, set by the accept loop.
    listening: watch::Sender<bool>,
    toxics: watch::Sender<ToxicSet>,
    /// When each toxic and disabled period began and ended.
    windows: Arc<WindowLog>,
    next_toxic_id: AtomicU64,
    accepted: AtomicU64,
    open: Arc<AtomicUsize>,
    /// Draws each connection's seed, in accept order.
    rng: Mutex<SmallRng>,
    stop: CancellationToken,
    accept_loop: Mutex<Option<JoinHandle<()>>>,
}

impl FaultProxy {
    /// Starts an enabled proxy named `name` on a free port of 127.0.0.1,
    /// forwarding to `upstream` (`host:port`).
    ///
    /// # Errors
    /// [`Error::MissingField`] for an empty name or upstream.
    pub async fn start(
        name: impl Into<String>,
        upstream: impl Into<String>,
    ) -> Result<Self, Error> {
        Self::start_with(ProxyConfig::new(name, upstream)).await
    }

    /// Starts a proxy as `config` says. The listen address is bound before
    /// this returns (even when disabled, to fix the port).
    ///
    /// # Errors
    /// [`Error::MissingField`] for an empty name or upstream,
    /// [`Error::BadBody`] for a `connect_timeout_ms` out of range,
    /// [`Error::Listen`] when the listen address cannot be bound.
    pub async fn start_with(config: ProxyConfig) -> Result<Self, Error> {
        let windows = Arc::new(WindowLog::new(&config.name));
        Self::start_in(config, windows).await
    }

    /// [`FaultProxy::start_with`], recording into `windows`: the history of
    /// a name, continued by the proxy that bears it now. A disabled window
    /// left open by its predecessor stays open if this one starts disabled,
    /// and closes if it starts enabled.
    pub(crate) async fn start_in(
        config: ProxyConfig,
        windows: Arc<WindowLog>,
    ) -> Result<Self, Error> {
        config.check()?;
        let connect_timeout = config.connect_timeout_or_default();
        let listener = TcpListener::bind(config.listen.as_str())
            .await
            .map_err(|source| Error::Listen {
                listen: config.listen.clone(),
                source,
            })?;
        let listen = listener.local_addr().map_err(|source| Error::Listen {
            listen: config.listen.clone(),
            source,
        })?;
        let seed = config.seed.unwrap_or_else(|| seed_for(&config.name));
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            name: config.name,
            upstream: config.upstream.into(),
            listen,
            seed,
            connect_timeout,
            enabled: watch::Sender::new(config.enabled),
            listening: watch::Sender::new(true),
            toxics: watch::Sender::new(Arc::new(Vec::new())),
            windows: windows.clone(),
            next_toxic_id: AtomicU64::new(1),
            accepted: AtomicU64::new(0),
            open: Arc::new(AtomicUsize::new(0)),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            stop: stop.clone(),
            accept_loop: Mutex::new(None),
        });
        drop(windows.enabled_changed(config.enabled, WindowEnd::Enabled));
        let task = tokio::spawn(accept_loop(shared.clone(), listener));
        if let Ok(mut slot) = shared.accept_loop.lock() {
            *slot = Some(task);
        }
        let proxy = Self {
            shared,
            _stop_on_drop: Arc::new(stop.drop_guard()),
        };
        if !config.enabled {
            proxy.set_enabled(false).await;
        }
        tracing::info!(
            proxy = proxy.name(),
            listen = %listen,
            upstream = %proxy.upstream(),
            seed,
            "fault proxy started"
        );
        Ok(proxy)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The address it listens on (clients connect here).
    pub fn listen_addr(&self) -> SocketAddr {
        self.shared.listen
    }

    /// The `host:port` it forwards to.
    pub fn upstream(&self) -> &str {
        &self.shared.upstream
    }

    /// The seed of its random choices (print it when a test fails).
    pub fn seed(&self) -> u64 {
        self.shared.seed
    }

    /// How long each new connection waits for the upstream to accept it.
    pub fn connect_timeout(&self) -> Duration {
        self.shared.connect_timeout
    }

    /// The config it would start again with: as created, with its state
    /// now (enabled or not) and the seed it drew.
    pub(crate) fn config(&self) -> ProxyConfig {
        ProxyConfig {
            name: self.shared.name.clone(),
            listen: self.shared.listen.to_string(),
            upstream: self.shared.upstream.to_string(),
            enabled: self.enabled(),
            seed: Some(self.shared.seed),
            connect_timeout_ms: Some(
                u64::try_from(self.shared.connect_timeout.as_millis()).unwrap_or(MAX_WAIT_MS),
            ),
        }
    }

    /// Whether it accepts connections.
    pub fn enabled(&self) -> bool {
        *self.shared.enabled.borrow()
    }

    /// Enables it, or disables it (`down`): a disabled proxy closes its
    /// listener, so new connections are refused, and closes every open
    /// connection. Returns once the listener is closed or bound again.
    ///
    /// A disabled period is a fault window of type
    /// [`crate::windows::DISABLED`] ([`FaultProxy::windows`]).
    ///
    /// Once it is stopped this does nothing, as a toxic change is refused
    /// then ([`FaultProxy::try_set_enabled`] says so).
    pub async fn set_enabled(&self, enabled: bool) {
        if let Err(e) = self.try_set_enabled(enabled).await {
            tracing::debug!(
                proxy = self.name(),
                enabled,
                error = %e,
                "stopped proxy: enabling or disabling ignored"
            );
        }
    }

    /// [`FaultProxy::set_enabled`], telling whether the change was made.
    ///
    /// # Errors
    /// [`Error::ProxyNotFound`] once it is stopped (removed, or restarted
    /// by its [`crate::Proxies`] set): nothing changes, and no window opens
    /// or closes. The history is shared with the proxy that restarted it,
    /// so a handle kept across the restart would otherwise record a
    /// disabled window for an edge that is up (or close the one of an edge
    /// still down).
    pub async fn try_set_enabled(&self, enabled: bool) -> Result<(), Error> {
        self.set_enabled_for(enabled, WindowEnd::Enabled).await
    }

    /// [`FaultProxy::try_set_enabled`], closing a disabled window for `end`.
    async fn set_enabled_for(&self, enabled: bool, end: WindowEnd) -> Result<(), Error> {
        let mut closed = Closed::default();
        let mut refused = false;
        self.shared.enabled.send_if_modified(|current| {
            // Checked under the flag's lock, as the toxics are under the
            // set's: a change lands before a restart reads the flag, or is
            // refused.
            if self.stopped() {
                refused = true;
                return false;
            }
            if *current != enabled {
                closed = self.shared.windows.enabled_changed(enabled, end);
            }
            *current = enabled;
            true
        });
        drop(closed);
        if refused {
            return Err(Error::ProxyNotFound);
        }
        let mut listening = self.shared.listening.subscribe();
        let stopped = self.shared.stop.cancelled();
        tokio::select! {
            _ = listening.wait_for(|l| *l == enabled) => {}
            () = stopped => {}
            // Re-binding can fail (the port taken meanwhile); the accept loop
            // keeps trying and logs it, so do not wait forever.
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
        Ok(())
    }

    /// Connections accepted since it started (each one counts, whatever
    /// happened to it next).
    pub fn connections(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::Relaxed)
    }

    /// Its toxics, in the order they were added.
    pub fn toxics(&self) -> Vec<Toxic> {
        self.shared
            .toxics
            .borrow()
            .iter()
            .map(|e| e.toxic.clone())
            .collect()
    }

    /// The toxic named `name`.
    pub fn toxic(&self, name: &str) -> Option<Toxic> {
        self.shared
            .toxics
            .borrow()
            .iter()
            .find(|e| e.toxic.name == name)
            .map(|e| e.toxic.clone())
    }

    /// Adds a toxic; it applies to open connections at once, and its fault
    /// window opens ([`FaultProxy::windows`]).
    ///
    /// # Errors
    /// [`Error::ToxicExists`] when the proxy has a toxic of that name;
    /// [`Error::ProxyNotFound`] once it is stopped (removed, or restarted
    /// by its [`crate::Proxies`] set).
    pub fn add_toxic(&self, toxic: Toxic) -> Result<(), Error> {
        let id = self.next_id();
        let mut result = Ok(());
        self.shared.toxics.send_if_modified(|set| {
            if self.stopped() {
                result = Err(Error::ProxyNotFound);
                return false;
            }
            if set.iter().any(|e| e.toxic.name == toxic.name) {
                result = Err(Error::ToxicExists);
                return false;
            }
            let mut next: Vec<ToxicEntry> = set.iter().map(ToxicEntry::clone).collect();
            next.push(ToxicEntry {
                id,
                toxic: toxic.clone(),
            });
            *set = Arc::new(next);
            // Recorded under the set's lock, so the history's order is the
            // order the changes took effect in.
            self.shared.windows.toxic_added(&toxic);
            true
        });
        result
    }

    /// Replaces the toxic of the same name (keeping its place in the
    /// order); its fault window closes and one with the new values opens.
    ///
    /// # Errors
    /// [`Error::ToxicNotFound`]; [`Error::ProxyNotFound`] once it is
    /// stopped (removed, or restarted by its [`crate::Proxies`] set).
    pub fn update_toxic(&self, toxic: Toxic) -> Result<(), Error> {
        let id = self.next_id();
        let mut found = false;
        let mut stopped = false;
        let mut closed = Closed::default();
        self.shared.toxics.send_if_modified(|set| {
            if self.stopped() {
                stopped = true;
                return false;
            }
            let next: Vec<ToxicEntry> = set
                .iter()
                .map(|e| {
                    if e.toxic.name == toxic.name {
                        found = true;
                        ToxicEntry {
                            id,
                            toxic: toxic.clone(),
                        }
                    } else {
                        e.clone()
                    }
                })
                .collect();
            if found {
                *set = Arc::new(next);
                closed = self.shared.windows.toxic_updated(&toxic);
            }
            found
        });
        drop(closed);
        if stopped {
            Err(Error::ProxyNotFound)
        } else if found {
            Ok(())
        } else {
            Err(Error::ToxicNotFound)
        }
    }

    /// Removes the toxic named `name`; open connections heal at once, and
    /// its fault window closes.
    ///
    /// # Errors
    /// [`Error::ToxicNotFound`]; [`Error::ProxyNotFound`] once it is
    /// stopped (removed, or restarted by its [`crate::Proxies`] set).
    pub fn remove_toxic(&self, name: &str) -> Result<(), Error> {
        let mut closed = Closed::default();
        let mut stopped = false;
        let removed = self.shared.toxics.send_if_modified(|set| {
            if self.stopped() {
                stopped = true;
                return false;
            }
            if !set.iter().any(|e| e.toxic.name == name) {
                return false;
            }
            let next = set
                .iter()
                .filter(|e| e.toxic.name != name)
                .map(ToxicEntry::clone)
                .collect();
            *set = Arc::new(next);
            closed = self.shared.windows.toxic_removed(name, WindowEnd::Removed);
            true
        });
        drop(closed);
        if stopped {
            Err(Error::ProxyNotFound)
        } else if removed {
            Ok(())
        } else {
            Err(Error::ToxicNotFound)
        }
    }

    /// Removes every toxic, closing their fault windows; nothing once it
    /// is stopped.
    pub fn remove_all_toxics(&self) {
        self.remove_all_toxics_for(WindowEnd::Removed);
    }

    fn remove_all_toxics_for(&self, end: WindowEnd) {
        let mut closed = Closed::default();
        self.shared.toxics.send_if_modified(|set| {
            if self.stopped() || set.is_empty() {
                return false;
            }
            *set = Arc::new(Vec::new());
            closed = self.shared.windows.all_toxics_removed(end);
            true
        });
        drop(closed);
    }

    /// Toxiproxy's reset of one proxy: every toxic removed, enabled; the
    /// windows this ends close as `reset`.
    ///
    /// # Errors
    /// [`Error::ProxyNotFound`] once it is stopped, with nothing changed
    /// (its successor's toxics and disabled window are not its own).
    pub(crate) async fn reset(&self) -> Result<(), Error> {
        self.remove_all_toxics_for(WindowEnd::Reset);
        self.set_enabled_for(true, WindowEnd::Reset).await
    }

    /// Puts back the toxics of the proxy this one restarted, whose windows
    /// are still open in the shared history: nothing is recorded.
    pub(crate) fn restore_toxics(&self, toxics: Vec<Toxic>) {
        let entries: Vec<ToxicEntry> = toxics
            .into_iter()
            .map(|toxic| ToxicEntry {
                id: self.next_id(),
                toxic,
            })
            .collect();
        self.shared.toxics.send_replace(Arc::new(entries));
    }

    /// Its fault windows: when each toxic was added and removed (or
    /// updated), and when it was disabled, oldest first; the last
    /// [`crate::windows::DEFAULT_CAPACITY`] closed ones and every open one.
    pub fn windows(&self) -> WindowHistory {
        self.shared.windows.history(None)
    }

    /// Its fault windows open at any moment at or after `since_unix_ms`.
    pub fn windows_since(&self, since_unix_ms: u64) -> WindowHistory {
        self.shared.windows.history(Some(since_unix_ms))
    }

    /// The history it records into (shared with its successors under the
    /// same name in a [`crate::Proxies`] set).
    pub(crate) fn window_log(&self) -> Arc<WindowLog> {
        self.shared.windows.clone()
    }

    /// Its Toxiproxy JSON view.
    pub fn view(&self) -> ProxyView {
        ProxyView {
            name: self.shared.name.clone(),
            listen: self.shared.listen.to_string(),
            upstream: self.shared.upstream.to_string(),
            enabled: self.enabled(),
            toxics: self.toxics(),
        }
    }

    /// Whether it was stopped ([`FaultProxy::stop`], or removed or
    /// restarted by its [`crate::Proxies`] set). A stopped proxy refuses
    /// toxic changes, and enabling or disabling it, with
    /// [`Error::ProxyNotFound`]: its toxics and state are gone with it, or
    /// carried over by the proxy that restarted it (whose window history it
    /// shares), so a change through an old handle would be lost (with its
    /// window left open) or undo one made to its successor. Checked under
    /// the toxic set's (or the enabled flag's) lock, so a change either
    /// lands before a restart reads them or is refused.
    fn stopped(&self) -> bool {
        self.shared.stop.is_cancelled()
    }

    /// Stops it: closes the listener and every connection, and its open
    /// fault windows (`stopped`); returns once the listener is closed.
    pub async fn stop(&self) {
        self.stop_keeping_windows().await;
        drop(self.shared.windows.stopped());
    }

    /// Stops it, leaving its windows open for the proxy that restarts it.
    pub(crate) async fn stop_keeping_windows(&self) {
        self.shared.stop.cancel();
        let task = self
            .shared
            .accept_loop
            .lock()
            .ok()
            .and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    fn next_id(&self) -> u64 {
        self.shared.next_toxic_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// A stable seed for a proxy without one (FNV-1a of its name).
pub(crate) fn seed_for(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Accepts connections while enabled; closes the listener and every open
/// connection when disabled; binds the same address again when re-enabled.
async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut listener = Some(listener);
    let mut enabled = shared.enabled.subscribe();
    // Connections of the current enabled period; cancelled when disabled.
    let mut period = shared.stop.child_token();
    loop {
        let want = *enabled.borrow_and_update();
        if !want && listener.is_some() {
            listener = None;
            period.cancel();
            period = shared.stop.child_token();
            tracing::info!(proxy = %shared.name, "proxy disabled: refusing and closing connections");
        }
        if want && listener.is_none() {
            match TcpListener::bind(shared.listen).await {
                Ok(l) => {
                    listener = Some(l);
                    tracing::info!(proxy = %shared.name, "proxy enabled");
                }
                Err(e) => {
                    tracing::warn!(proxy = %shared.name, listen = %shared.listen, error = %e, "cannot listen again; retrying");
                }
            }
        }
        shared.listening.send_replace(listener.is_some());
        let Some(bound) = &listener else {
            tokio::select! {
                () = shared.stop.cancelled() => break,
                changed = enabled.changed() => if changed.is_err() { break },
                () = tokio::time::sleep(Duration::from_millis(200)), if want => {}
            }
            continue;
        };
        tokio::select! {
            () = shared.stop.cancelled() => break,
            changed = enabled.changed() => if changed.is_err() { break },
            accepted = bound.accept() => match accepted {
                Ok((socket, _peer)) => spawn_connection(&shared, socket, period.clone()),
                Err(e) => {
                    // For example out of file descriptors: do not spin.
                    tracing::warn!(proxy = %shared.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    shared.listening.send_replace(false);
}

fn spawn_connection(shared: &Shared, socket: tokio::net::TcpStream, cancel: CancellationToken) {
    shared.accepted.fetch_add(1, Ordering::Relaxed);
    let seed = shared
        .rng
        .lock()
        .map_or(shared.seed, |mut rng| rng.next_u64());
    let open = OpenGuard::new(shared.open.clone());
    let upstream = shared.upstream.clone();
    let connect_timeout = shared.connect_timeout;
    let toxics = shared.toxics.subscribe();
    tokio::spawn(async move {
        let _open = open;
        link::serve(socket, upstream, connect_timeout, toxics, cancel, seed).await;
    });
}

/// Counts a connection as open while it lives.
struct OpenGuard(Arc<AtomicUsize>);

impl OpenGuard {
    fn new(open: Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(open)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
