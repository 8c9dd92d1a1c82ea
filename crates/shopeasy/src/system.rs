//! The embedded system (SPEC §2): four services, their SQLite databases,
//! in-process caches, and a fault proxy on every service-to-service edge, all
//! in one process.
//!
//! ```text
//! client → gateway ─[gateway-product]→ product
//!                  └[gateway-order]──→ order ─[order-inventory]→ inventory
//!                                          └─[order-product]──→ product
//! ```
//!
//! The services, their ports, the edges and the wiring order are the
//! runtime's `topology`: the launcher walks `topology::WIRING_ORDER`, puts a
//! proxy on each of a service's edges before it starts, and starts each
//! service with `lifecycle`'s one handle. Each proxy listens on an ephemeral
//! loopback port and is named after its edge; the Toxiproxy-compatible API
//! (default :8474) breaks and heals them.
//!
//! Beside them runs the **demo issuer** (`topology::IDENTITY`, :8085 on
//! loopback): the identity crate's `DemoIssuer`, its Ed25519 key in the data
//! folder. Order and the gateway verify customers' tokens against its JWKS
//! (`auth.jwks_url`, unless the settings name a key source of their own),
//! and the gateway routes `POST /api/session` to it, so a customer signs in
//! through the one address clients use. It is a demo: it signs for any
//! plausible name, with no password.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use shopeasy_faults::{FaultProxy, Proxies, ProxyConfig};
use shopeasy_gateway::settings::GatewaySettings;
use shopeasy_identity::{DemoIssuer, DemoIssuerConfig, demo::JWKS_PATH};
use shopeasy_inventory::settings::InventorySettings;
use shopeasy_order::settings::OrderSettings;
use shopeasy_product::settings::ProductSettings;
use shopeasy_runtime::{
    lifecycle::{self, Running},
    settings::{self, Loader, ProcessSettings, Secret, SecretUrl, Settings},
    topology::{self, Addresses, Edge, Node},
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The edges the launcher puts a proxy on, named as SPEC §7 says: the
/// topology's service-to-service edges.
pub fn edges() -> Vec<String> {
    topology::service_edges().iter().map(Edge::name).collect()
}

/// How to start the embedded system.
#[derive(Debug, Clone)]
pub struct Options {
    /// Folder of the SQLite databases (kept across restarts).
    pub data_dir: PathBuf,
    /// A settings file read by every service (after defaults, before env).
    pub config: Option<PathBuf>,
    /// The environment the services' settings read.
    pub env: Vec<(String, String)>,
    /// The admin token; a random one when `None`.
    pub admin_token: Option<String>,
    /// Listen on ephemeral ports (tests) instead of the ports SPEC §1 names.
    pub ephemeral_ports: bool,
    /// Where the Toxiproxy-compatible API listens.
    pub faults_api: SocketAddr,
    /// Seed of the fault proxies' random choices.
    pub seed: u64,
}

impl Options {
    /// Defaults for a person at a terminal: `./.shopeasy`, the process
    /// environment, SPEC's ports, the API on 127.0.0.1:8474.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            config: None,
            env: std::env::vars().collect(),
            admin_token: std::env::var("ADMIN_TOKEN").ok().filter(|t| !t.is_empty()),
            ephemeral_ports: false,
            faults_api: SocketAddr::from((Ipv4Addr::LOCALHOST, shopeasy_faults::api::DEFAULT_PORT)),
            seed: rand::random(),
        }
    }

    /// Defaults for tests: a given folder, no environment, ephemeral ports.
    pub fn for_tests(data_dir: &Path) -> Self {
        Self {
            env: Vec::new(),
            admin_token: Some("test-admin-token".to_owned()),
            ephemeral_ports: true,
            faults_api: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            seed: 7,
            ..Self::new(data_dir)
        }
    }

    /// Puts `node`'s listeners on loopback: its topology ports, or
    /// ephemeral ones for tests.
    fn place(&self, process: &mut ProcessSettings, node: &Node) {
        process.listen_addr = self.on_loopback(node.public_port);
        process.admin_addr = self.on_loopback(node.admin_port);
    }

    /// `port` on loopback, or an ephemeral port for tests.
    fn on_loopback(&self, port: u16) -> SocketAddr {
        let port = if self.ephemeral_ports { 0 } else { port };
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
    }

    /// Where the demo issuer listens: `topology::IDENTITY`'s public port on
    /// loopback (never another interface: it signs for anyone who asks).
    fn issuer_addr(&self) -> SocketAddr {
        self.on_loopback(topology::IDENTITY.public_port)
    }

    /// True when the environment or the settings file names a key source of
    /// its own (`auth.jwks_url` or `auth.public_key_pem`, directly or as a
    /// `_FILE` variable): then the services verify against that, and the
    /// launcher does not point them at its demo issuer.
    fn names_key_source(&self) -> bool {
        let in_env = self.env.iter().any(|(name, value)| {
            !value.is_empty()
                && [
                    "AUTH__JWKS_URL",
                    "AUTH__PUBLIC_KEY_PEM",
                    "AUTH__JWKS_URL_FILE",
                    "AUTH__PUBLIC_KEY_PEM_FILE",
                ]
                .contains(&name.as_str())
        });
        // A coarse look at the file (TOML, YAML or JSON): a key source in it
        // wins the same way; the loader still checks what it says.
        let in_file = self.config.as_ref().is_some_and(|file| {
            std::fs::read_to_string(file)
                .is_ok_and(|text| text.contains("jwks_url") || text.contains("public_key_pem"))
        });
        in_env || in_file
    }

    /// The environment the services are loaded with: `env`, after the demo
    /// issuer's JWKS as `auth.jwks_url` unless a key source is named (so
    /// the services' "a key source is required" rule holds before the
    /// issuer listens; its bound address replaces this one at start).
    fn service_env(&self) -> Vec<(String, String)> {
        let mut env = Vec::with_capacity(self.env.len() + 1);
        if !self.names_key_source() {
            env.push(("AUTH__JWKS_URL".to_owned(), jwks_url(self.issuer_addr())));
        }
        env.extend(self.env.iter().cloned());
        env
    }

    fn sqlite(&self, service: &str) -> SecretUrl {
        SecretUrl::new(format!(
            "sqlite:{}",
            self.data_dir.join(format!("{service}.db")).display()
        ))
    }

    /// Loads one service's settings; keys of the other services are
    /// tolerated, so one file or environment configures them all.
    fn load<S: Settings>(&self, name: &str) -> anyhow::Result<S> {
        // The embedded demo sets its own random credentials below, so the
        // credential rules of a binary started from its environment
        // (`settings::credential`) do not apply to what it loads.
        let mut loader = Loader::new()
            .embedded_demo()
            .env(self.service_env())
            .tolerate(all_keys());
        if let Some(file) = &self.config {
            loader = loader.file(file);
        }
        loader
            .load::<S>()
            .with_context(|| format!("settings of {name}"))
    }
}

/// A random credential: 32 hex digits (128 bits), as long as a service
/// started from its environment requires (`settings::credential`).
pub fn random_token() -> String {
    use rand::Rng;
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The demo issuer's JWKS URL when it listens on `addr`.
fn jwks_url(addr: SocketAddr) -> String {
    format!("http://{addr}{JWKS_PATH}")
}

/// What the demo issuer puts in its tokens: the `iss` and `aud` Order
/// verifies (`auth.issuer`, `auth.audience` as `options` load them), so a
/// changed `AUTH__ISSUER` changes both sides; `shopeasy token` and the
/// embedded system use this one function, so their tokens are alike.
///
/// # Errors
/// Invalid settings (as [`check_settings`] reports them).
pub fn demo_issuer_config(options: &Options) -> anyhow::Result<DemoIssuerConfig> {
    let order: OrderSettings = options.load(topology::ORDER.name)?;
    Ok(issuer_config(&order))
}

fn issuer_config(order: &OrderSettings) -> DemoIssuerConfig {
    DemoIssuerConfig {
        issuer: order.auth.issuer.clone(),
        audience: order.auth.audience.clone(),
        ..DemoIssuerConfig::default()
    }
}

/// The keys of every service the launcher runs.
fn all_keys() -> Vec<String> {
    let mut keys = settings::keys::<GatewaySettings>();
    keys.extend(settings::keys::<ProductSettings>());
    keys.extend(settings::keys::<OrderSettings>());
    keys.extend(settings::keys::<InventorySettings>());
    keys
}

/// Every service's settings, loaded before anything starts.
struct Loaded {
    gateway: GatewaySettings,
    product: ProductSettings,
    order: OrderSettings,
    inventory: InventorySettings,
    /// Order and the gateway verify against the demo issuer's JWKS (no key
    /// source of their own was named).
    demo_auth: bool,
}

impl Loaded {
    /// Loads every service's settings, then checks the whole chain's policy
    /// (`crate::policy::check_chain`) and logs its worst-case amplification:
    /// an impossible combination refuses to start before anything listens.
    fn load(options: &Options) -> anyhow::Result<Self> {
        let loaded = Self {
            gateway: options.load(topology::GATEWAY.name)?,
            product: options.load(topology::PRODUCT.name)?,
            order: options.load(topology::ORDER.name)?,
            inventory: options.load(topology::INVENTORY.name)?,
            demo_auth: !options.names_key_source(),
        };
        let plan = crate::policy::check_chain(&loaded.gateway, &loaded.order)
            .context("the resilience policy of gateway → order → inventory")?;
        tracing::info!(plan = %plan.describe(), "resilience policy checked");
        Ok(loaded)
    }
}

/// Validates every service's settings as the launcher would load them.
///
/// # Errors
/// The first service whose settings are invalid, with every reason.
pub fn check_settings(options: &Options) -> anyhow::Result<()> {
    Loaded::load(options).map(drop)
}

/// A running embedded system.
#[derive(Debug)]
pub struct System {
    /// Where the four services listen.
    pub addresses: Addresses,
    /// The Toxiproxy-compatible API.
    pub faults_api: SocketAddr,
    /// The fault proxies, by edge name.
    pub proxies: Proxies,
    /// The admin token every service accepts.
    pub admin_token: String,
    /// The demo issuer (`GET /.well-known/jwks.json`, `POST /api/session`);
    /// clients sign in through the gateway's `/api/session` instead.
    pub identity: SocketAddr,
    /// The data folder (databases and the demo issuer's key).
    pub data_dir: PathBuf,
    /// The console (`shopeasy-console`'s page, loopback only).
    pub console: SocketAddr,
    /// Order and the gateway verify against the demo issuer.
    demo_auth: bool,
    /// The services, in the order they were wired (each stops on its own
    /// token, a child of `shutdown`).
    services: Vec<Running>,
    /// Stops what is not a service: the demo issuer, the fault API, the
    /// console (and any service still running).
    shutdown: CancellationToken,
    /// `None` once awaited (it ended first, in [`System::run_until`]).
    faults_task: Option<JoinHandle<anyhow::Result<()>>>,
    /// As `faults_task`.
    issuer_task: Option<JoinHandle<anyhow::Result<()>>>,
    console_task: JoinHandle<std::io::Result<()>>,
}

/// How long the demo issuer lets in-flight sign-ins finish at shutdown.
const ISSUER_DRAIN: Duration = Duration::from_secs(5);

/// The addresses (public, admin) of each started service, and the proxies
/// put in front of them as their callers start.
struct Wiring<'a> {
    proxies: &'a Proxies,
    started: HashMap<&'static str, (SocketAddr, SocketAddr)>,
}

impl Wiring<'_> {
    /// Where `node` listens (public, admin), once started.
    fn addresses(&self, node: &Node) -> anyhow::Result<(SocketAddr, SocketAddr)> {
        self.started
            .get(node.name)
            .copied()
            .with_context(|| format!("{} has not started", node.name))
    }

    /// A proxy on every edge from `node` to a service, each named after its
    /// edge; returns the URL `node` should call each upstream at.
    async fn upstreams(
        &self,
        node: &'static Node,
    ) -> anyhow::Result<HashMap<&'static str, String>> {
        let mut urls = HashMap::new();
        for upstream in node.upstreams() {
            let (target, _) = self.addresses(upstream)?;
            let edge = Edge {
                from: node,
                to: upstream.name,
            };
            let proxy = proxy(self.proxies, &edge.name(), target).await?;
            urls.insert(upstream.name, format!("http://{}", proxy.listen_addr()));
        }
        Ok(urls)
    }
}

impl System {
    /// Starts the demo issuer, then the four services in the topology's
    /// wiring order, a fault proxy on each of their edges, and the fault
    /// API, and seeds the demo catalogue on first start.
    ///
    /// # Errors
    /// Invalid settings, an unusable demo issuer key, a port in use (named
    /// in the error), or a service that fails to start.
    pub async fn start(options: Options) -> anyhow::Result<Self> {
        let loaded = Loaded::load(&options)?;
        // The key first: on a first run it creates the data folder 0700.
        let issuer = DemoIssuer::open(&options.data_dir, issuer_config(&loaded.order))
            .context("the demo issuer's signing key")?;
        std::fs::create_dir_all(&options.data_dir).with_context(|| {
            format!(
                "cannot create the data folder {}",
                options.data_dir.display()
            )
        })?;
        let admin_token = options.admin_token.clone().unwrap_or_else(random_token);
        // Order's credential at Inventory: new every run, known only to
        // this process.
        let service_token = Secret::new(random_token());
        let shutdown = CancellationToken::new();
        // A start that fails half-way stops what it had started (the
        // issuer, services, proxies' users) instead of leaving it listening.
        let stop_on_error = shutdown.clone().drop_guard();

        // The issuer listens before Order and the gateway start, so their
        // first JWKS fetch finds it.
        let issuer_listener = lifecycle::bind(options.issuer_addr(), "demo issuer").await?;
        let identity = issuer_listener.local_addr()?;
        let issuer_stop = shutdown.child_token();
        let issuer_task = tokio::spawn(async move {
            lifecycle::serve(issuer_listener, issuer.router(), issuer_stop, ISSUER_DRAIN)
                .await
                .map_err(|e| anyhow::anyhow!("demo issuer: {e}"))
        });
        tracing::info!(%identity, "demo issuer listening (a demo: it signs for any customer name)");

        let proxies = Proxies::with_seed(options.seed);
        let mut wiring = Wiring {
            proxies: &proxies,
            started: HashMap::new(),
        };
        let mut services = Vec::new();
        for node in topology::WIRING_ORDER {
            let urls = wiring.upstreams(node).await?;
            let url = |name: &str| urls.get(name).cloned().unwrap_or_default();
            let token = Secret::new(admin_token.clone());
            let running = match *node {
                topology::INVENTORY => {
                    let mut s = loaded.inventory.clone();
                    options.place(&mut s.process, node);
                    s.storage.database_url = options.sqlite(node.name);
                    s.admin_token = token;
                    s.service_token = service_token.clone();
                    s.demo_seed = true; // crate::seed: the services seed themselves
                    start::<shopeasy_inventory::App>(s, &shutdown).await?
                }
                topology::PRODUCT => {
                    let mut s = loaded.product.clone();
                    options.place(&mut s.process, node);
                    s.storage.database_url = options.sqlite(node.name);
                    s.redis.redis_url = SecretUrl::default();
                    s.admin_token = token;
                    s.demo_seed = true;
                    start::<shopeasy_product::App>(s, &shutdown).await?
                }
                topology::ORDER => {
                    let mut s = loaded.order.clone();
                    options.place(&mut s.process, node);
                    s.storage.database_url = options.sqlite(node.name);
                    s.redis.redis_url = SecretUrl::default();
                    s.admin_token = token;
                    s.inventory.url = url(topology::INVENTORY.name);
                    s.inventory.service_token = service_token.clone();
                    s.product.url = url(topology::PRODUCT.name);
                    if loaded.demo_auth {
                        s.auth.jwks_url = jwks_url(identity);
                    }
                    start::<shopeasy_order::App>(s, &shutdown).await?
                }
                _ => {
                    let mut s = loaded.gateway.clone();
                    options.place(&mut s.process, node);
                    s.routes.product_url = url(topology::PRODUCT.name);
                    s.routes.order_url = url(topology::ORDER.name);
                    s.routes.identity_url = format!("http://{identity}");
                    if loaded.demo_auth {
                        s.auth.jwks_url = jwks_url(identity);
                    }
                    start::<shopeasy_gateway::App>(s, &shutdown).await?
                }
            };
            wiring
                .started
                .insert(node.name, (running.local_addr(), running.admin_addr()));
            services.push(running);
        }

        let api_listener = lifecycle::bind(options.faults_api, "fault proxy API").await?;
        let faults_api = api_listener.local_addr()?;
        let api_proxies = proxies.clone();
        let api_stop = shutdown.clone();
        let api = tokio::spawn(async move {
            shopeasy_faults::api::serve(api_listener, api_proxies, api_stop)
                .await
                .map_err(anyhow::Error::from)
        });

        let addresses = Addresses::try_collect(|node| wiring.addresses(node))?;
        let console = start_console(&options, &addresses, faults_api, &admin_token).await?;
        let console_addr = console.local_addr()?;
        let console_task = console.spawn(shutdown.child_token());
        let system = Self {
            addresses,
            faults_api,
            proxies,
            admin_token,
            identity,
            data_dir: options.data_dir.clone(),
            console: console_addr,
            demo_auth: loaded.demo_auth,
            services,
            shutdown,
            faults_task: Some(api),
            issuer_task: Some(issuer_task),
            console_task,
        };
        stop_on_error.disarm();
        Ok(system)
    }

    /// What to print at start: the URLs, the admin token, how to sign in
    /// and the commands to copy.
    pub fn banner(&self) -> String {
        let a = &self.addresses;
        let data_dir = if self.data_dir == Path::new(".shopeasy") {
            String::new()
        } else {
            format!(" --data-dir {}", self.data_dir.display())
        };
        let verified = if self.demo_auth {
            "order and the gateway trust it"
        } else {
            "NOT trusted: auth.* names another key source"
        };
        format!(
            "ShopEasy is running (embedded mode).\n\
             \n\
             gateway        http://{gw}         (the one address clients use)\n\
             admin          http://{gwa}/metrics  …/health/ready  …/admin/resilience\n\
             product        http://{p}  (admin http://{pa})\n\
             order          http://{o}  (admin http://{oa})\n\
             inventory      grpc://{i}  (admin http://{ia})\n\
             fault proxies  http://{f}/proxies   (Toxiproxy API; edges: {edges})\n\
             console        http://{c}/   (live breakers, budgets, caches; fault changes need the admin token)\n\
             demo issuer    http://{id}/.well-known/jwks.json   (a DEMO issuer: signs for any name, no password; {verified})\n\
             admin token    {token}\n\
             \n\
             Try:\n\
             curl -s http://{gw}/api/products | head -c 400; echo\n\
             # Sign in as alice (a demo customer) with the launcher…\n\
             TOKEN=$(shopeasy token alice{data_dir})\n\
             # …or through the gateway, as a browser does (the answer's access_token):\n\
             curl -s -X POST http://{gw}/api/session -H 'content-type: application/json' -d '{{\"customer\":\"alice\"}}'\n\
             curl -si http://{gw}/api/orders -H 'content-type: application/json' \\\n  \
               -H \"authorization: Bearer $TOKEN\" -H \"idempotency-key: $(date +%s%N)\" \\\n  \
               -d '{{\"items\":[{{\"product_id\":\"<id from the list>\",\"quantity\":1}}]}}'\n\
             # Alice's orders (and only hers):\n\
             curl -s http://{gw}/api/orders -H \"authorization: Bearer $TOKEN\"\n\
             curl -s -XPOST http://{f}/proxies/order-inventory/toxics \\\n  \
               -H 'content-type: application/json' \\\n  \
               -d '{{\"name\":\"hang\",\"type\":\"timeout\",\"stream\":\"downstream\",\"attributes\":{{\"timeout\":0}}}}'\n\
             (heal it: curl -XDELETE http://{f}/proxies/order-inventory/toxics/hang)\n",
            gw = a.gateway,
            gwa = a.gateway_admin,
            p = a.product,
            pa = a.product_admin,
            o = a.order,
            oa = a.order_admin,
            i = a.inventory,
            ia = a.inventory_admin,
            f = self.faults_api,
            c = self.console,
            id = self.identity,
            edges = edges().join(", "),
            token = self.admin_token,
        )
    }

    /// Stops everything and waits for it, edge first: the services in the
    /// reverse of their wiring order (the gateway, then order, product,
    /// inventory), each drained — its in-flight requests answered, within
    /// its drain time — before the next is told to stop; then the rest (the
    /// demo issuer, the fault API, the console); then the fault proxies.
    ///
    /// Why in that order: a service's in-flight requests call the services
    /// wired before it. Stopped all at once, Inventory stopped while Order
    /// still drained, and an order in flight at Ctrl-C, whose reservation
    /// had not reached Inventory yet, ended pending instead of confirmed.
    /// The proxies go last: every edge's calls pass through one.
    ///
    /// # Errors
    /// The first service or task that stopped with an error.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let mut first_error = None;
        while let Some(running) = self.services.pop() {
            keep_first(&mut first_error, running.stop().await);
        }
        self.shutdown.cancel();
        keep_first(&mut first_error, ended(&mut self.faults_task).await);
        keep_first(&mut first_error, ended(&mut self.issuer_task).await);
        let console = self
            .console_task
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r.map_err(|e| anyhow::anyhow!("console: {e}")));
        keep_first(&mut first_error, console);
        self.proxies.shutdown().await;
        first_error.map_or(Ok(()), Err)
    }

    /// Runs until `stop` resolves or a service (or the fault API, or the
    /// demo issuer) ends on its own, then stops everything as
    /// [`System::stop`] does: the others drain and are awaited either way.
    ///
    /// # Errors
    /// What ended on its own: its error, or, when it ended cleanly, "a
    /// service stopped on its own"; else the first error of the stop.
    pub async fn run_until(
        mut self,
        stop: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let ended_first = {
            let any = first_to_end(&mut self.services);
            tokio::select! {
                () = stop => None,
                outcome = any => Some(outcome),
                api = ended(&mut self.faults_task) => Some(api),
                issuer = ended(&mut self.issuer_task) => Some(issuer),
            }
        };
        // What ended has been awaited (a service's `finished`, a task's
        // `ended`): `stop` does not wait for it again.
        let stopped = self.stop().await;
        match ended_first {
            None => stopped,
            Some(outcome) => outcome
                .and(stopped)
                .and(Err(anyhow::anyhow!("a service stopped on its own"))),
        }
    }
}

/// Keeps `outcome`'s error in `first` unless an earlier one is there.
fn keep_first(first: &mut Option<anyhow::Error>, outcome: anyhow::Result<()>) {
    if first.is_none()
        && let Err(e) = outcome
    {
        *first = Some(e);
    }
}

/// Waits for `task` to end and leaves `None` in its place, so it is never
/// awaited twice (a `JoinHandle` polled after it completed panics);
/// resolves at once with `Ok` when it is `None` already.
async fn ended(task: &mut Option<JoinHandle<anyhow::Result<()>>>) -> anyhow::Result<()> {
    let Some(handle) = task.as_mut() else {
        return Ok(());
    };
    let outcome = handle.await;
    *task = None;
    outcome.map_err(anyhow::Error::from).and_then(|r| r)
}

/// Binds the console on loopback (`shopeasy_console::settings::DEFAULT_PORT`,
/// or an ephemeral port for tests), reading every admin listener and the
/// fault API, its load panel driven by the launcher's generator, its order
/// path drawn from the spans this process keeps ([`crate::console_traces`]).
async fn start_console(
    options: &Options,
    addresses: &Addresses,
    faults_api: SocketAddr,
    admin_token: &str,
) -> anyhow::Result<shopeasy_console::Console> {
    use shopeasy_console::{ConsoleSettings, ServiceTarget};
    let services = [
        (topology::GATEWAY.name, addresses.gateway_admin),
        (topology::PRODUCT.name, addresses.product_admin),
        (topology::ORDER.name, addresses.order_admin),
        (topology::INVENTORY.name, addresses.inventory_admin),
    ]
    .into_iter()
    .map(|(name, admin)| ServiceTarget::new(name, format!("http://{admin}")))
    .collect();
    let gateway = format!("http://{}", addresses.gateway);
    let mut settings = ConsoleSettings::new(
        services,
        format!("http://{faults_api}"),
        Secret::new(admin_token),
    );
    settings.listen = options.on_loopback(shopeasy_console::settings::DEFAULT_PORT);
    settings.gateway_url = Some(gateway.clone());
    let load = std::sync::Arc::new(crate::console_load::ConsoleLoad::new(gateway.clone()));
    let traces = std::sync::Arc::new(crate::console_traces::global().clone());
    let endpoints = crate::demo::Endpoints {
        gateway,
        faults: format!("http://{faults_api}"),
        order_admin: format!("http://{}", addresses.order_admin),
    };
    let scenes =
        crate::console_scenes::ConsoleScenes::new(endpoints, crate::demo::Run::default().seed);
    Ok(shopeasy_console::Console::bind(settings, Some(load))
        .await
        .context("starting the console")?
        .with_traces(traces)
        .with_scenes(std::sync::Arc::new(scenes)))
}

/// Builds, binds and starts one service, stopped with everything else by
/// `shutdown`.
async fn start<S: lifecycle::Service>(
    settings: S::Settings,
    shutdown: &CancellationToken,
) -> anyhow::Result<Running> {
    Ok(lifecycle::Bound::<S>::build(settings)
        .await
        .with_context(|| format!("starting {}", S::NAME))?
        .start_until(shutdown.child_token()))
}

/// Resolves when the first of `services` ends, with its outcome; never when
/// there are none.
async fn first_to_end(services: &mut [Running]) -> anyhow::Result<()> {
    use std::{future::Future as _, task::Poll};
    let mut ends: Vec<_> = services
        .iter_mut()
        .map(|r| Box::pin(r.finished()))
        .collect();
    std::future::poll_fn(|cx| {
        for end in &mut ends {
            if let Poll::Ready(outcome) = end.as_mut().poll(cx) {
                return Poll::Ready(outcome);
            }
        }
        Poll::Pending
    })
    .await
}

async fn proxy(proxies: &Proxies, name: &str, upstream: SocketAddr) -> anyhow::Result<FaultProxy> {
    proxies
        .create(ProxyConfig::new(name, upstream.to_string()).listen("127.0.0.1:0"))
        .await
        .with_context(|| format!("fault proxy {name}"))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// How long a latency toxic holds each request on its way from Order to
    /// Inventory: the stop begins while the order's first call to Inventory
    /// is still on its way (on a new connection, which a stopped Inventory
    /// closes), and each call stays well within Order's 3 s attempt timeout.
    const HELD_MS: u64 = 500;

    /// Places an order through `system`'s gateway with every request from
    /// Order to Inventory held [`HELD_MS`] (a latency toxic on the upstream
    /// stream of `order-inventory`, through the fault API), and returns once
    /// Order holds it (its admission's `in_flight`): the status of its
    /// answer to come, 0 for none.
    async fn an_order_in_flight(system: &System) -> JoinHandle<u16> {
        let http = reqwest::Client::new();
        let gw = format!("http://{}", system.addresses.gateway);
        let session: Value = http
            .post(format!("{gw}/api/session"))
            .json(&json!({ "customer": "alice" }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let token = session["access_token"].as_str().unwrap().to_owned();
        let page: Value = http
            .get(format!("{gw}/api/products?limit=1"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let product = page["items"][0]["id"].as_str().unwrap().to_owned();
        let toxic = json!({"name": "held", "type": "latency", "stream": "upstream",
                           "attributes": {"latency": HELD_MS, "jitter": 0}});
        http.post(format!(
            "http://{}/proxies/order-inventory/toxics",
            system.faults_api
        ))
        .json(&toxic)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
        let client = http.clone();
        let order = tokio::spawn(async move {
            client
                .post(format!("{gw}/api/orders"))
                .bearer_auth(token)
                .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                .json(&json!({"items": [{"product_id": product, "quantity": 1}]}))
                .send()
                .await
                .map_or(0, |res| res.status().as_u16())
        });
        let resilience = format!("http://{}/admin/resilience", system.addresses.order_admin);
        shopeasy_testkit::wait::assert_eventually(
            Duration::from_secs(10),
            "Order holds the order",
            async || {
                let report: Value = match http.get(&resilience).send().await {
                    Ok(res) => res.json().await.unwrap_or_default(),
                    Err(_) => Value::Null,
                };
                report["admission"]["in_flight"]
                    .as_u64()
                    .is_some_and(|n| n >= 1)
            },
        )
        .await;
        order
    }

    /// Stopped all at once, Inventory closed while the order's call was on
    /// its way to it, and the order did not end confirmed (201) though it
    /// was in flight at the stop; edge first, the gateway drains it while
    /// every service behind it still answers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_order_in_flight_at_the_stop_is_confirmed_before_inventory_stops() {
        let dir = tempfile::tempdir().unwrap();
        let system = System::start(Options::for_tests(dir.path())).await.unwrap();
        let order = an_order_in_flight(&system).await;
        system.stop().await.unwrap();
        assert_eq!(order.await.unwrap(), 201, "the order in flight at the stop");
    }

    /// When something ends on its own (here the fault API's task, failing),
    /// the rest stops in the same order and is awaited: the order in flight
    /// is confirmed, every listener is closed when `run_until` returns, and
    /// the first error is what ended. Before, everything was cancelled at
    /// once and left running, detached.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_task_that_ends_on_its_own_stops_the_rest_in_order_and_waits_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut system = System::start(Options::for_tests(dir.path())).await.unwrap();
        let order = an_order_in_flight(&system).await;
        let listeners = [system.addresses.gateway, system.addresses.order];
        // The real task is stopped by `shutdown` with the rest, detached.
        system.faults_task = Some(tokio::spawn(async {
            Err::<(), _>(anyhow::anyhow!("the fault API failed"))
        }));
        let err = system.run_until(std::future::pending()).await.unwrap_err();
        assert_eq!(format!("{err:#}"), "the fault API failed");
        for addr in listeners {
            assert!(
                tokio::net::TcpStream::connect(addr).await.is_err(),
                "{addr} still listens"
            );
        }
        assert_eq!(order.await.unwrap(), 201, "the order in flight at the end");
    }

    #[test]
    fn the_launcher_refuses_a_chain_whose_retries_outlast_the_gateway() {
        let mut options = Options::for_tests(Path::new("data"));
        check_settings(&options).unwrap();
        options.env = vec![
            (
                "RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS".to_owned(),
                "1".to_owned(),
            ),
            (
                "RESILIENCE__INVENTORY__TIMEOUT_SECONDS".to_owned(),
                "2".to_owned(),
            ),
        ];
        let message = format!("{:#}", check_settings(&options).unwrap_err());
        assert!(
            message.contains("resilience.gateway.activity_timeout_seconds"),
            "{message}"
        );
        assert!(message.contains("resilience.inventory"), "{message}");
    }

    #[test]
    fn the_services_verify_against_the_demo_issuer_unless_a_key_source_is_named() {
        let mut options = Options::for_tests(Path::new("data"));
        let order: OrderSettings = options.load("order").unwrap();
        assert_eq!(
            order.auth.jwks_url, "http://127.0.0.1:0/.well-known/jwks.json",
            "replaced by the bound address at start"
        );
        options.ephemeral_ports = false;
        let gateway: GatewaySettings = options.load("gateway").unwrap();
        assert_eq!(
            gateway.auth.jwks_url,
            "http://127.0.0.1:8085/.well-known/jwks.json"
        );
        assert!(!options.names_key_source());

        options.env = vec![(
            "AUTH__JWKS_URL".to_owned(),
            "https://idp.example/jwks".to_owned(),
        )];
        let order: OrderSettings = options.load("order").unwrap();
        assert_eq!(order.auth.jwks_url, "https://idp.example/jwks");
        assert!(options.names_key_source());

        let pem = shopeasy_identity::DemoKey::from_seed([3; 32])
            .unwrap()
            .public_key_pem();
        options.env = vec![("AUTH__PUBLIC_KEY_PEM".to_owned(), pem.clone())];
        let order: OrderSettings = options.load("order").unwrap();
        assert_eq!(
            (
                order.auth.jwks_url.as_str(),
                order.auth.public_key_pem.as_str()
            ),
            ("", pem.as_str())
        );

        options.env = vec![("AUTH__ISSUER".to_owned(), "https://shop.example".to_owned())];
        let config = demo_issuer_config(&options).unwrap();
        assert_eq!(
            config.issuer, "https://shop.example",
            "the demo signs what Order checks"
        );
        assert_eq!(config.audience, "shopeasy");
    }

    #[test]
    fn listeners_are_placed_on_the_topology_ports_or_ephemeral_ones() {
        let mut process = ProcessSettings::new(&topology::ORDER);
        let options = Options::new("data");
        options.place(&mut process, &topology::ORDER);
        assert_eq!(
            process.listen_addr,
            SocketAddr::from(([127, 0, 0, 1], topology::ORDER.public_port))
        );
        assert_eq!(
            process.admin_addr,
            SocketAddr::from(([127, 0, 0, 1], topology::ORDER.admin_port))
        );
        let options = Options::for_tests(Path::new("data"));
        options.place(&mut process, &topology::ORDER);
        assert_eq!(process.listen_addr.port(), 0);
        assert_eq!(process.admin_addr.port(), 0);
    }
}
