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
//! Each proxy listens on an ephemeral loopback port and is named after its
//! edge; the Toxiproxy-compatible API (default :8474) breaks and heals them.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
};

use anyhow::Context;
use shopeasy_faults::{FaultProxy, Proxies, ProxyConfig};
use shopeasy_runtime::{
    lifecycle::Service,
    settings::{self, Loader, Secret, SecretUrl, Settings},
};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The edges the launcher puts a proxy on, named as SPEC §7 says.
pub const EDGES: [&str; 4] = [
    "gateway-product",
    "gateway-order",
    "order-inventory",
    "order-product",
];

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

    fn addr(&self, port: u16) -> SocketAddr {
        let port = if self.ephemeral_ports { 0 } else { port };
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
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
        let mut loader = Loader::new().env(self.env.clone()).tolerate(all_keys());
        if let Some(file) = &self.config {
            loader = loader.file(file);
        }
        loader
            .load::<S>()
            .with_context(|| format!("settings of {name}"))
    }
}

/// The keys of every service the launcher runs.
fn all_keys() -> Vec<String> {
    let mut keys = settings::keys::<shopeasy_gateway::settings::GatewaySettings>();
    keys.extend(settings::keys::<shopeasy_product::settings::ProductSettings>());
    keys.extend(settings::keys::<shopeasy_order::settings::OrderSettings>());
    keys.extend(settings::keys::<
        shopeasy_inventory::settings::InventorySettings,
    >());
    keys
}

/// Validates every service's settings as the launcher would load them.
///
/// # Errors
/// The first service whose settings are invalid, with every reason.
pub fn check_settings(options: &Options) -> anyhow::Result<()> {
    options.load::<shopeasy_gateway::settings::GatewaySettings>("gateway")?;
    options.load::<shopeasy_product::settings::ProductSettings>("product")?;
    options.load::<shopeasy_order::settings::OrderSettings>("order")?;
    options.load::<shopeasy_inventory::settings::InventorySettings>("inventory")?;
    Ok(())
}

/// The addresses of a running embedded system.
#[derive(Debug, Clone)]
pub struct Addresses {
    /// The gateway: the one address clients use.
    pub gateway: SocketAddr,
    /// The gateway's admin listener.
    pub gateway_admin: SocketAddr,
    /// The product service (direct, not through a proxy).
    pub product: SocketAddr,
    /// The product service's admin listener.
    pub product_admin: SocketAddr,
    /// The order service (direct).
    pub order: SocketAddr,
    /// The order service's admin listener.
    pub order_admin: SocketAddr,
    /// The inventory service (gRPC, direct).
    pub inventory: SocketAddr,
    /// The inventory service's admin listener.
    pub inventory_admin: SocketAddr,
    /// The Toxiproxy-compatible API.
    pub faults_api: SocketAddr,
}

/// A running embedded system.
#[derive(Debug)]
pub struct System {
    /// Where everything listens.
    pub addresses: Addresses,
    /// The fault proxies, by edge name.
    pub proxies: Proxies,
    /// The admin token every service accepts.
    pub admin_token: String,
    shutdown: CancellationToken,
    tasks: JoinSet<anyhow::Result<()>>,
}

impl System {
    /// Starts the four services, the proxies and the fault API, and seeds the
    /// demo catalogue on first start.
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
        let admin_token = options.admin_token.clone().unwrap_or_else(|| {
            use rand::Rng;
            let bytes: [u8; 16] = rand::rng().random();
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        });
        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let proxies = Proxies::with_seed(options.seed);

        // Inventory and Product first: everything else calls them.
        let mut inventory =
            options.load::<shopeasy_inventory::settings::InventorySettings>("inventory")?;
        inventory.listen_addr = options.addr(50051);
        inventory.admin_addr = options.addr(9083);
        inventory.database_url = options.sqlite("inventory");
        inventory.admin_token = Secret::new(admin_token.clone());
        let inventory = shopeasy_inventory::App::build(inventory).await?;
        let (inventory_addr, inventory_admin) = (inventory.local_addr(), inventory.admin_addr());
        tasks.spawn(inventory.run_until_stopped(shutdown.clone()));

        let mut product = options.load::<shopeasy_product::settings::ProductSettings>("product")?;
        product.listen_addr = options.addr(8081);
        product.admin_addr = options.addr(9081);
        product.database_url = options.sqlite("product");
        product.redis_url = SecretUrl::default();
        product.admin_token = Secret::new(admin_token.clone());
        let product = shopeasy_product::App::build(product).await?;
        let (product_addr, product_admin) = (product.local_addr()?, product.admin_addr()?);
        tasks.spawn(product.run_until_stopped(shutdown.clone()));

        let order_inventory = edge(&proxies, "order-inventory", inventory_addr).await?;
        let order_product = edge(&proxies, "order-product", product_addr).await?;
        let mut order = options.load::<shopeasy_order::settings::OrderSettings>("order")?;
        order.listen_addr = options.addr(8082);
        order.admin_addr = options.addr(9082);
        order.database_url = options.sqlite("order");
        order.redis_url = SecretUrl::default();
        order.admin_token = Secret::new(admin_token.clone());
        order.inventory.url = format!("http://{}", order_inventory.listen_addr());
        order.product.url = format!("http://{}", order_product.listen_addr());
        let order = shopeasy_order::App::build(order).await?;
        let (order_addr, order_admin) = (order.local_addr()?, order.admin_addr()?);
        tasks.spawn(order.run_until_stopped(shutdown.clone()));

        let gateway_product = edge(&proxies, "gateway-product", product_addr).await?;
        let gateway_order = edge(&proxies, "gateway-order", order_addr).await?;
        let mut gateway = options.load::<shopeasy_gateway::settings::GatewaySettings>("gateway")?;
        gateway.listen_addr = options.addr(8080);
        gateway.admin_addr = options.addr(9080);
        gateway.routes.product_url = format!("http://{}", gateway_product.listen_addr());
        gateway.routes.order_url = format!("http://{}", gateway_order.listen_addr());
        let gateway = shopeasy_gateway::App::build(gateway).await?;
        let (gateway_addr, gateway_admin) = (gateway.local_addr(), gateway.admin_addr());
        tasks.spawn(gateway.run_until_stopped(shutdown.clone()));

        let api_listener =
            shopeasy_runtime::lifecycle::bind(options.faults_api, "fault proxy API").await?;
        let faults_api = api_listener.local_addr()?;
        let api_proxies = proxies.clone();
        let api_stop = shutdown.clone();
        tasks.spawn(async move {
            shopeasy_faults::api::serve(api_listener, api_proxies, api_stop)
                .await
                .map_err(anyhow::Error::from)
        });

        let system = Self {
            addresses: Addresses {
                gateway: gateway_addr,
                gateway_admin,
                product: product_addr,
                product_admin,
                order: order_addr,
                order_admin,
                inventory: inventory_addr,
                inventory_admin,
                faults_api,
            },
            proxies,
            admin_token,
            shutdown,
            tasks,
        };
        crate::seed::seed_if_empty(&system).await?;
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
            f = a.faults_api,
            edges = EDGES.join(", "),
            token = self.admin_token,
        )
    }

    /// Stops everything and waits for it: in-flight requests drain first.
    ///
    /// # Errors
    /// The first service that stopped with an error.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let mut first_error = None;
        while let Some(result) = self.tasks.join_next().await {
            let result = result.map_err(anyhow::Error::from).and_then(|r| r);
            if let (Err(e), None) = (result, &first_error) {
                first_error = Some(e);
            }
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
        tokio::select! {
            () = stop => {}
            Some(ended) = self.tasks.join_next() => {
                let outcome = ended.map_err(anyhow::Error::from).and_then(|r| r);
                self.stop().await?;
                return outcome.and(Err(anyhow::anyhow!("a service stopped on its own")));
            }
        }
        self.stop().await
    }
}

async fn edge(proxies: &Proxies, name: &str, upstream: SocketAddr) -> anyhow::Result<FaultProxy> {
    proxies
        .create(ProxyConfig::new(name, upstream.to_string()).listen("127.0.0.1:0"))
        .await
        .with_context(|| format!("fault proxy {name}"))
}
