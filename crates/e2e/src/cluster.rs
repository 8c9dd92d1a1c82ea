//! [`Cluster`]: the four services in full mode, with a fault proxy on every
//! edge, including the edges to Postgres and Redis.
//!
//! ```text
//! client → gateway ─[gateway-product]→ product ─[product-postgres]→ Postgres
//!              │                          └─────[product-redis]───→ Redis
//!              └─[gateway-order]→ order ─[order-inventory]→ inventory ─[inventory-postgres]→ Postgres
//!                                   ├─[order-product]→ product
//!                                   ├─[order-postgres]→ Postgres
//!                                   └─[order-redis]→ Redis
//! ```
//!
//! The services run in this process as their `App`s on 127.0.0.1:0 (a
//! test owns them; no binary has to be built first). Each service has its
//! own fresh Postgres database (dropped with the cluster) and reaches it,
//! and the shared Redis (isolated by a key prefix), only through its
//! proxy, so a test can break a service's storage without touching the
//! machine's shared servers. [`Cluster::kill`] and [`Cluster::respawn`]
//! stand in for SIGKILL + respawn: the service's tasks are aborted and a
//! new `App` is built on the same port.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use shopeasy_faults::{FaultProxy, Proxies, ProxyConfig};
use shopeasy_gateway::settings::GatewaySettings;
use shopeasy_inventory::settings::InventorySettings;
use shopeasy_order::settings::OrderSettings;
use shopeasy_product::settings::ProductSettings;
use shopeasy_product_api::{NewProduct, Product};
use shopeasy_proto::inventory::v1::{
    SetStockRequest, inventory_service_client::InventoryServiceClient,
};
use shopeasy_runtime::{
    lifecycle::Service as _,
    settings::{Seconds, Secret, SecretUrl, common::PoolSettings},
};
use shopeasy_testkit::TestDatabase;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Every edge the cluster puts a proxy on, named as FAULTS.md does.
pub const EDGES: [&str; 9] = [
    "gateway-order",
    "gateway-product",
    "order-inventory",
    "order-product",
    "order-postgres",
    "inventory-postgres",
    "product-postgres",
    "order-redis",
    "product-redis",
];

/// The admin token every service of a cluster accepts.
pub const ADMIN_TOKEN: &str = "e2e-admin-token";

/// One of the four services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// The gateway.
    Gateway,
    /// The product service.
    Product,
    /// The order service.
    Order,
    /// The inventory service.
    Inventory,
}

/// How to start a cluster: each service's settings (listen addresses,
/// database and upstream URLs are overwritten by the harness).
#[derive(Debug, Clone)]
pub struct Options {
    /// Seed of the fault proxies' random choices.
    pub seed: u64,
    /// The gateway's settings.
    pub gateway: GatewaySettings,
    /// The product service's settings.
    pub product: ProductSettings,
    /// The order service's settings.
    pub order: OrderSettings,
    /// The inventory service's settings.
    pub inventory: InventorySettings,
    /// Give product and order a Redis (through their proxies).
    pub redis: bool,
}

/// A database pool that fails fast: tests break the database on purpose.
fn short_pool() -> PoolSettings {
    PoolSettings {
        max_connections: 10,
        acquire_timeout_seconds: Seconds::new(0.5),
        statement_timeout_seconds: Seconds::new(2.0),
        startup_timeout_seconds: Seconds::new(15.0),
    }
}

impl Options {
    /// The short timeouts of FAULTS.md: attempt 0.3 s, gateway activity
    /// 1 s, break 2 s, outbox poll 0.2 s; database acquire 0.5 s (below
    /// the gateway's activity timeout, so a storage outage reaches the
    /// client as 503, not 504).
    pub fn fast(seed: u64) -> Self {
        let mut gateway = GatewaySettings::default();
        let g = &mut gateway.resilience.gateway;
        g.activity_timeout_seconds = Seconds::new(1.0);
        g.connect_timeout_seconds = Seconds::new(0.5);

        let mut order = OrderSettings {
            database: short_pool(),
            ..OrderSettings::default()
        };
        for edge in [
            &mut order.resilience.inventory,
            &mut order.resilience.product,
        ] {
            edge.timeout_seconds = Seconds::new(0.3);
            edge.break_duration_seconds = Seconds::new(2.0);
            edge.connect_timeout_seconds = Seconds::new(0.3);
        }
        order.outbox.poll_interval_seconds = Seconds::new(0.2);
        order.outbox.initial_backoff_seconds = Seconds::new(0.2);
        order.outbox.max_backoff_seconds = Seconds::new(1.0);
        order.outbox.lease_seconds = Seconds::new(3.0);
        order.idempotency.lock_seconds = Seconds::new(3.0);

        let product = ProductSettings {
            database: short_pool(),
            ..ProductSettings::default()
        };
        let inventory = InventorySettings {
            database: short_pool(),
            request_timeout_seconds: Seconds::new(2.0),
            ..InventorySettings::default()
        };

        Self {
            seed,
            gateway,
            product,
            order,
            inventory,
            redis: true,
        }
    }
}

/// Where a running cluster listens.
#[derive(Debug, Clone, Copy)]
pub struct Addresses {
    /// The gateway: the address clients use.
    pub gateway: SocketAddr,
    /// The gateway's admin listener.
    pub gateway_admin: SocketAddr,
    /// The product service (direct, no proxy).
    pub product: SocketAddr,
    /// The product service's admin listener.
    pub product_admin: SocketAddr,
    /// The order service (direct, no proxy).
    pub order: SocketAddr,
    /// The order service's admin listener.
    pub order_admin: SocketAddr,
    /// The inventory service (gRPC, direct).
    pub inventory: SocketAddr,
    /// The inventory service's admin listener.
    pub inventory_admin: SocketAddr,
}

/// A service's tasks: stop them gracefully or abort them.
#[derive(Debug)]
struct Running {
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

/// The four services, their databases and proxies.
#[derive(Debug)]
pub struct Cluster {
    /// Where everything listens.
    pub addresses: Addresses,
    /// The proxies, by edge name ([`EDGES`]).
    pub proxies: Proxies,
    /// The settings each service was started with (after the harness's
    /// overrides), used again by [`Cluster::respawn`].
    options: Options,
    running: Mutex<HashMap<Service, Running>>,
    order_db: PgPool,
    inventory_db: PgPool,
    product_db: PgPool,
    // Dropped last: the databases go when the cluster goes.
    _databases: Arc<[TestDatabase; 3]>,
}

impl Cluster {
    /// Starts a cluster, or returns `None` (announced as a skip) when no
    /// test Postgres or Redis is configured.
    ///
    /// # Errors
    /// A service or proxy that fails to start.
    pub async fn start(mut options: Options) -> anyhow::Result<Option<Self>> {
        let Some(order_db) = shopeasy_testkit::postgres().await else {
            return Ok(None);
        };
        let Some(inventory_db) = shopeasy_testkit::postgres().await else {
            return Ok(None);
        };
        let Some(product_db) = shopeasy_testkit::postgres().await else {
            return Ok(None);
        };
        let redis = if options.redis {
            match shopeasy_testkit::redis_url() {
                Some(url) => Some(host_port(&url)?),
                None => return Ok(None),
            }
        } else {
            None
        };
        let proxies = Proxies::with_seed(options.seed);
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));

        // Storage edges first.
        let pg = host_port(order_db.url())?;
        let order_pg = edge(&proxies, "order-postgres", &pg).await?;
        let inventory_pg = edge(&proxies, "inventory-postgres", &pg).await?;
        let product_pg = edge(&proxies, "product-postgres", &pg).await?;
        let redis_target = redis.clone().unwrap_or_else(|| "127.0.0.1:6379".to_owned());
        let order_redis = edge(&proxies, "order-redis", &redis_target).await?;
        let product_redis = edge(&proxies, "product-redis", &redis_target).await?;

        let o = &mut options;
        o.inventory.listen_addr = loopback;
        o.inventory.admin_addr = loopback;
        o.inventory.database_url = via(inventory_db.url(), &inventory_pg)?;
        o.inventory.admin_token = Secret::new(ADMIN_TOKEN);
        o.product.listen_addr = loopback;
        o.product.admin_addr = loopback;
        o.product.database_url = via(product_db.url(), &product_pg)?;
        o.product.admin_token = Secret::new(ADMIN_TOKEN);
        o.product.cache.key_prefix = shopeasy_testkit::key_prefix();
        o.order.listen_addr = loopback;
        o.order.admin_addr = loopback;
        o.order.database_url = via(order_db.url(), &order_pg)?;
        o.order.admin_token = Secret::new(ADMIN_TOKEN);
        o.order.resilience.stock_cache.key_prefix = shopeasy_testkit::key_prefix();
        o.gateway.listen_addr = loopback;
        o.gateway.admin_addr = loopback;
        if redis.is_some() {
            o.product.redis_url =
                SecretUrl::new(format!("redis://{}", product_redis.listen_addr()));
            o.order.redis_url = SecretUrl::new(format!("redis://{}", order_redis.listen_addr()));
        } else {
            o.product.redis_url = SecretUrl::default();
            o.order.redis_url = SecretUrl::default();
        }

        let running = Mutex::new(HashMap::new());
        let (inventory, inventory_admin) =
            start_service(&running, Service::Inventory, &options).await?;
        let (product, product_admin) = start_service(&running, Service::Product, &options).await?;
        let order_inventory = edge(&proxies, "order-inventory", &inventory.to_string()).await?;
        let order_product = edge(&proxies, "order-product", &product.to_string()).await?;
        options.order.inventory.url = format!("http://{}", order_inventory.listen_addr());
        options.order.product.url = format!("http://{}", order_product.listen_addr());
        let (order, order_admin) = start_service(&running, Service::Order, &options).await?;
        let gateway_order = edge(&proxies, "gateway-order", &order.to_string()).await?;
        let gateway_product = edge(&proxies, "gateway-product", &product.to_string()).await?;
        options.gateway.routes.order_url = format!("http://{}", gateway_order.listen_addr());
        options.gateway.routes.product_url = format!("http://{}", gateway_product.listen_addr());
        let (gateway, gateway_admin) = start_service(&running, Service::Gateway, &options).await?;

        let cluster = Self {
            addresses: Addresses {
                gateway,
                gateway_admin,
                product,
                product_admin,
                order,
                order_admin,
                inventory,
                inventory_admin,
            },
            proxies,
            order_db: direct(order_db.url()).await?,
            inventory_db: direct(inventory_db.url()).await?,
            product_db: direct(product_db.url()).await?,
            options,
            running,
            _databases: Arc::new([order_db, inventory_db, product_db]),
        };
        Ok(Some(cluster))
    }

    /// The proxy on `edge` (one of [`EDGES`]).
    ///
    /// # Panics
    /// When there is no such edge (a typo in a test).
    pub async fn proxy(&self, edge: &str) -> FaultProxy {
        self.proxies
            .get(edge)
            .await
            .unwrap_or_else(|_| panic!("no proxy named {edge}"))
    }

    /// Points `edge`'s proxy at another upstream (a stub), keeping its
    /// listen address, so the service behind it is replaced for its callers.
    ///
    /// # Errors
    /// When the proxy cannot be restarted.
    pub async fn redirect(&self, edge: &str, upstream: SocketAddr) -> anyhow::Result<FaultProxy> {
        Ok(self
            .proxies
            .update(
                edge,
                shopeasy_faults::ProxyUpdate {
                    upstream: Some(upstream.to_string()),
                    ..Default::default()
                },
            )
            .await?)
    }

    /// Heals every edge: all proxies enabled, all toxics removed.
    ///
    /// A proxy with a `timeout` toxic (black hole) is first taken down,
    /// closing its connections: the toxic drops what it swallowed, and a
    /// connection resuming mid-frame is not a fault any real network makes.
    pub async fn heal(&self) {
        for proxy in self.proxies.list().await {
            let black_hole = proxy
                .toxics()
                .iter()
                .any(|t| matches!(t.kind, shopeasy_faults::ToxicKind::Timeout { .. }));
            if black_hole {
                proxy.set_enabled(false).await;
            }
            proxy.remove_all_toxics();
            proxy.set_enabled(true).await;
        }
    }

    /// The order database (direct, not through its proxy).
    pub fn order_db(&self) -> &PgPool {
        &self.order_db
    }

    /// The inventory database (direct).
    pub fn inventory_db(&self) -> &PgPool {
        &self.inventory_db
    }

    /// The product database (direct).
    pub fn product_db(&self) -> &PgPool {
        &self.product_db
    }

    /// The gateway's base URL.
    pub fn gateway_url(&self) -> String {
        format!("http://{}", self.addresses.gateway)
    }

    /// The base URL of a service's admin listener.
    pub fn admin_url(&self, service: Service) -> String {
        let a = &self.addresses;
        let addr = match service {
            Service::Gateway => a.gateway_admin,
            Service::Product => a.product_admin,
            Service::Order => a.order_admin,
            Service::Inventory => a.inventory_admin,
        };
        format!("http://{addr}")
    }

    /// Creates a product (through the product service's admin API) and
    /// sets its stock at Inventory; returns the product.
    ///
    /// # Errors
    /// When either service refuses.
    pub async fn seed_product(
        &self,
        sku: &str,
        price_cents: i64,
        stock: i64,
    ) -> anyhow::Result<Product> {
        let product: Product = reqwest::Client::new()
            .post(format!("http://{}/api/products", self.addresses.product))
            .bearer_auth(ADMIN_TOKEN)
            .json(&NewProduct {
                sku: sku.to_owned(),
                name: format!("e2e {sku}"),
                description: "seeded by the end-to-end suite".to_owned(),
                price_cents,
                currency: "EUR".to_owned(),
            })
            .send()
            .await?
            .error_for_status()
            .with_context(|| format!("creating {sku}"))?
            .json()
            .await?;
        self.set_stock(product.id, stock).await?;
        Ok(product)
    }

    /// Sets a product's available stock at Inventory (direct).
    ///
    /// # Errors
    /// When Inventory refuses.
    pub async fn set_stock(&self, product: uuid::Uuid, available: i64) -> anyhow::Result<()> {
        let mut client =
            InventoryServiceClient::connect(format!("http://{}", self.addresses.inventory)).await?;
        let mut request = tonic::Request::new(SetStockRequest {
            product_id: product.to_string(),
            available,
        });
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {ADMIN_TOKEN}").parse()?);
        client.set_stock(request).await?;
        Ok(())
    }

    /// Kills a service as SIGKILL would: its tasks are aborted, in-flight
    /// requests get no answer, nothing drains.
    pub async fn kill(&self, service: Service) {
        let running = self
            .running
            .lock()
            .ok()
            .and_then(|mut r| r.remove(&service));
        if let Some(running) = running {
            running.stop.cancel();
            running.task.abort();
            let _ = running.task.await;
        }
    }

    /// Starts a killed service again on the same ports, with the same
    /// settings and database.
    ///
    /// # Errors
    /// When it cannot start (for example its port was taken meanwhile).
    pub async fn respawn(&self, service: Service) -> anyhow::Result<()> {
        let mut options = self.options.clone();
        let a = &self.addresses;
        match service {
            Service::Gateway => {
                options.gateway.listen_addr = a.gateway;
                options.gateway.admin_addr = a.gateway_admin;
            }
            Service::Product => {
                options.product.listen_addr = a.product;
                options.product.admin_addr = a.product_admin;
            }
            Service::Order => {
                options.order.listen_addr = a.order;
                options.order.admin_addr = a.order_admin;
            }
            Service::Inventory => {
                options.inventory.listen_addr = a.inventory;
                options.inventory.admin_addr = a.inventory_admin;
            }
        }
        start_service(&self.running, service, &options).await?;
        Ok(())
    }

    /// Stops every service gracefully and the proxies.
    pub async fn stop(self) {
        let all: Vec<Running> = self
            .running
            .lock()
            .map(|mut r| r.drain().map(|(_, v)| v).collect())
            .unwrap_or_default();
        for running in &all {
            running.stop.cancel();
        }
        for running in all {
            if tokio::time::timeout(Duration::from_secs(5), running.task)
                .await
                .is_err()
            {
                tracing::warn!("a service did not stop within 5 s");
            }
        }
        self.proxies.shutdown().await;
    }
}

/// Builds and spawns one service; returns its public and admin addresses.
async fn start_service(
    running: &Mutex<HashMap<Service, Running>>,
    service: Service,
    options: &Options,
) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let stop = CancellationToken::new();
    let (addrs, task) = match service {
        Service::Gateway => {
            let app = shopeasy_gateway::App::build(options.gateway.clone()).await?;
            let addrs = (app.local_addr(), app.admin_addr());
            (addrs, tokio::spawn(app.run_until_stopped(stop.clone())))
        }
        Service::Product => {
            let app = shopeasy_product::App::build(options.product.clone()).await?;
            let addrs = (app.local_addr()?, app.admin_addr()?);
            (addrs, tokio::spawn(app.run_until_stopped(stop.clone())))
        }
        Service::Order => {
            let app = shopeasy_order::App::build(options.order.clone()).await?;
            let addrs = (app.local_addr()?, app.admin_addr()?);
            (addrs, tokio::spawn(app.run_until_stopped(stop.clone())))
        }
        Service::Inventory => {
            let app = shopeasy_inventory::App::build(options.inventory.clone()).await?;
            let addrs = (app.local_addr(), app.admin_addr());
            (addrs, tokio::spawn(app.run_until_stopped(stop.clone())))
        }
    };
    if let Ok(mut running) = running.lock() {
        running.insert(service, Running { stop, task });
    }
    Ok(addrs)
}

/// A small pool straight to a test database (no proxy).
async fn direct(url: &str) -> anyhow::Result<PgPool> {
    Ok(sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await?)
}

async fn edge(proxies: &Proxies, name: &str, upstream: &str) -> anyhow::Result<FaultProxy> {
    proxies
        .create(ProxyConfig::new(name, upstream).listen("127.0.0.1:0"))
        .await
        .with_context(|| format!("fault proxy {name}"))
}

/// `host:port` of a URL.
fn host_port(url: &str) -> anyhow::Result<String> {
    let parsed = url::Url::parse(url).with_context(|| format!("not a URL: {url}"))?;
    let host = parsed.host_str().context("URL without a host")?;
    let port = parsed
        .port_or_known_default()
        .unwrap_or(match parsed.scheme() {
            "redis" => 6379,
            _ => 5432,
        });
    Ok(format!("{host}:{port}"))
}

/// The same database URL, through `proxy`.
fn via(url: &str, proxy: &FaultProxy) -> anyhow::Result<SecretUrl> {
    let mut parsed = url::Url::parse(url).with_context(|| format!("not a URL: {url}"))?;
    let addr = proxy.listen_addr();
    parsed
        .set_host(Some(&addr.ip().to_string()))
        .context("cannot set the host")?;
    parsed
        .set_port(Some(addr.port()))
        .map_err(|()| anyhow::anyhow!("cannot set the port"))?;
    Ok(SecretUrl::new(parsed.to_string()))
}
