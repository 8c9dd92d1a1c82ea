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

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
};

use anyhow::Context;
use shopeasy_faults::{FaultProxy, Proxies, ProxyConfig};
use shopeasy_gateway::settings::GatewaySettings;
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
        let port = |port| if self.ephemeral_ports { 0 } else { port };
        let on = |p| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port(p));
        process.listen_addr = on(node.public_port);
        process.admin_addr = on(node.admin_port);
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
            .env(self.env.clone())
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
    /// The services, in the order they were wired.
    services: Vec<Running>,
    shutdown: CancellationToken,
    faults_task: JoinHandle<anyhow::Result<()>>,
}

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
    /// Starts the four services in the topology's wiring order, a fault
    /// proxy on each of their edges, and the fault API, and seeds the demo
    /// catalogue on first start.
    ///
    /// # Errors
    /// Invalid settings, a port in use (named in the error), or a service
    /// that fails to start.
    pub async fn start(options: Options) -> anyhow::Result<Self> {
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
        let loaded = Loaded::load(&options)?;
        let shutdown = CancellationToken::new();
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
                    start::<shopeasy_order::App>(s, &shutdown).await?
                }
                _ => {
                    let mut s = loaded.gateway.clone();
                    options.place(&mut s.process, node);
                    s.routes.product_url = url(topology::PRODUCT.name);
                    s.routes.order_url = url(topology::ORDER.name);
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
        let system = Self {
            addresses,
            faults_api,
            proxies,
            admin_token,
            services,
            shutdown,
            faults_task: api,
        };
        Ok(system)
    }

    /// What to print at start: the URLs, the admin token and three commands
    /// to copy.
    pub fn banner(&self) -> String {
        let a = &self.addresses;
        format!(
            "ShopEasy is running (embedded mode).\n\
             \n\
             gateway        http://{gw}         (the one address clients use)\n\
             admin          http://{gwa}/metrics  …/health/ready  …/admin/resilience\n\
             product        http://{p}  (admin http://{pa})\n\
             order          http://{o}  (admin http://{oa})\n\
             inventory      grpc://{i}  (admin http://{ia})\n\
             fault proxies  http://{f}/proxies   (Toxiproxy API; edges: {edges})\n\
             admin token    {token}\n\
             \n\
             Try:\n\
             curl -s http://{gw}/api/products | head -c 400; echo\n\
             curl -si http://{gw}/api/orders -H 'content-type: application/json' \\\n  \
               -H \"idempotency-key: $(date +%s%N)\" \\\n  \
               -d '{{\"customer_id\":\"alice\",\"items\":[{{\"product_id\":\"<id from the list>\",\"quantity\":1}}]}}'\n\
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
            edges = edges().join(", "),
            token = self.admin_token,
        )
    }

    /// Stops everything and waits for it: in-flight requests drain first.
    ///
    /// # Errors
    /// The first service that stopped with an error.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let mut first_error = None;
        for running in self.services {
            if let (Err(e), None) = (running.stop().await, &first_error) {
                first_error = Some(e);
            }
        }
        let api = self
            .faults_task
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r);
        if let (Err(e), None) = (api, &first_error) {
            first_error = Some(e);
        }
        self.proxies.shutdown().await;
        first_error.map_or(Ok(()), Err)
    }

    /// Runs until `stop` resolves or a service ends on its own, then stops.
    ///
    /// # Errors
    /// A service that ended with an error.
    pub async fn run_until(
        mut self,
        stop: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let ended = {
            let any = first_to_end(&mut self.services);
            tokio::select! {
                () = stop => None,
                outcome = any => Some(outcome),
                api = &mut self.faults_task => Some(api.map_err(anyhow::Error::from).and_then(|r| r)),
            }
        };
        match ended {
            None => self.stop().await,
            Some(outcome) => {
                self.shutdown.cancel();
                self.proxies.shutdown().await;
                outcome.and(Err(anyhow::anyhow!("a service stopped on its own")))
            }
        }
    }
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
    use super::*;

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
