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
//! The services run in this process as their `App`s on loopback ports
//! below the ephemeral range (a test owns them; no binary has to be built
//! first). Each service has its
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
    lifecycle::{self, Running},
    settings::{ProcessSettings, Seconds, Secret, SecretUrl, common::PoolSettings},
    topology::{self, Edge, Node},
};
use shopeasy_testkit::TestDatabase;
use sqlx::PgPool;

/// Every edge the cluster puts a proxy on, named as FAULTS.md does: the
/// topology's service-to-service edges and every service-to-store edge.
pub fn edges() -> Vec<String> {
    topology::service_edges()
        .into_iter()
        .chain(topology::store_edges())
        .map(|e| e.name())
        .collect()
}

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

impl Service {
    /// The four services.
    pub const ALL: [Self; 4] = [Self::Gateway, Self::Product, Self::Order, Self::Inventory];

    /// Every service, in the topology's wiring order.
    pub fn wiring_order() -> impl Iterator<Item = Self> {
        topology::WIRING_ORDER
            .into_iter()
            .filter_map(|node| Self::ALL.into_iter().find(|s| s.node() == node))
    }

    /// Its node in the topology.
    pub fn node(self) -> &'static Node {
        match self {
            Self::Gateway => &topology::GATEWAY,
            Self::Product => &topology::PRODUCT,
            Self::Order => &topology::ORDER,
            Self::Inventory => &topology::INVENTORY,
        }
    }
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
    /// client as 503, not 504). The gateway and the order service verify
    /// tokens of the suite's key ([`crate::identity`]) and allow each
    /// customer far more placements and open orders than a cell makes.
    pub fn fast(seed: u64) -> Self {
        let mut gateway = GatewaySettings::default();
        let g = &mut gateway.resilience.gateway;
        g.activity_timeout_seconds = Seconds::new(1.0);
        g.connect_timeout_seconds = Seconds::new(0.5);

        let mut order = OrderSettings::default();
        order.storage.database = short_pool();
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

        let mut product = ProductSettings::default();
        product.storage.database = short_pool();
        let mut inventory = InventorySettings {
            request_timeout_seconds: Seconds::new(2.0),
            ..InventorySettings::default()
        };
        inventory.storage.database = short_pool();

        // Signed-in customers (issue 15): both verifiers trust the suite's
        // key; the per-customer limits are lifted far above what a cell
        // sends (the chaos run places ~50 orders a second per customer and
        // leaves hundreds pending while Inventory is faulted), so no cell
        // but one about limits meets a 429 it did not ask for.
        gateway.auth = crate::identity::auth_settings();
        gateway.limits.customer_orders_per_minute = 1_000_000;
        gateway.limits.customer_order_burst = 100_000;
        order.auth = crate::identity::auth_settings();
        order.orders.max_open_per_customer = 10_000;
        // Every cell's load comes from one address (the test process), and
        // a closed loop of cached reads can pass the per-client 1,000/s:
        // lifted too (the rate limiter is tested in the gateway crate and
        // by the ownership cell, which sets its own).
        gateway.limits.client_requests_per_second = 1_000_000;
        gateway.limits.client_burst = 1_000_000;

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

impl Options {
    /// The listeners, logging and trace export of `service`.
    fn process_mut(&mut self, service: Service) -> &mut ProcessSettings {
        match service {
            Service::Gateway => &mut self.gateway.process,
            Service::Product => &mut self.product.process,
            Service::Order => &mut self.order.process,
            Service::Inventory => &mut self.inventory.process,
        }
    }

    /// Points `service` at its upstreams (`urls` by service name: the
    /// proxies on its edges).
    fn route(&mut self, service: Service, urls: &HashMap<&str, String>) {
        let url = |node: &Node| urls.get(node.name).cloned().unwrap_or_default();
        match service {
            Service::Order => {
                self.order.inventory.url = url(&topology::INVENTORY);
                self.order.product.url = url(&topology::PRODUCT);
            }
            Service::Gateway => {
                self.gateway.routes.order_url = url(&topology::ORDER);
                self.gateway.routes.product_url = url(&topology::PRODUCT);
            }
            Service::Product | Service::Inventory => {}
        }
    }

    /// Starts `service` with its settings here.
    async fn spawn(&self, service: Service) -> anyhow::Result<Running> {
        let running = match service {
            Service::Gateway => {
                lifecycle::spawn::<shopeasy_gateway::App>(self.gateway.clone()).await
            }
            Service::Product => {
                lifecycle::spawn::<shopeasy_product::App>(self.product.clone()).await
            }
            Service::Order => lifecycle::spawn::<shopeasy_order::App>(self.order.clone()).await,
            Service::Inventory => {
                lifecycle::spawn::<shopeasy_inventory::App>(self.inventory.clone()).await
            }
        };
        running.with_context(|| format!("starting {}", service.node().name))
    }
}

/// Where a running cluster listens: the topology's one address type, the
/// same the embedded launcher reports.
pub use shopeasy_runtime::topology::Addresses;

/// The four services, their databases and proxies.
#[derive(Debug)]
pub struct Cluster {
    /// Where everything listens.
    pub addresses: Addresses,
    /// The proxies, by edge name ([`edges`]).
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

        // Storage edges first.
        let pg = host_port(order_db.url())?;
        let redis_target = redis.clone().unwrap_or_else(|| "127.0.0.1:6379".to_owned());
        let mut stores = HashMap::new();
        for store_edge in topology::store_edges() {
            let target = if store_edge.to == "redis" {
                &redis_target
            } else {
                &pg
            };
            let name = store_edge.name();
            stores.insert(name.clone(), edge(&proxies, &name, target).await?);
        }
        let store = |name: &str| {
            stores
                .get(name)
                .with_context(|| format!("no store edge {name}"))
        };

        let o = &mut options;
        for service in Service::ALL {
            o.process_mut(service).ephemeral();
        }
        o.inventory.storage.database_url = via(inventory_db.url(), store("inventory-postgres")?)?;
        o.inventory.admin_token = Secret::new(ADMIN_TOKEN);
        o.product.storage.database_url = via(product_db.url(), store("product-postgres")?)?;
        o.product.admin_token = Secret::new(ADMIN_TOKEN);
        o.product.cache.key_prefix = shopeasy_testkit::key_prefix();
        o.order.storage.database_url = via(order_db.url(), store("order-postgres")?)?;
        o.order.admin_token = Secret::new(ADMIN_TOKEN);
        // Order's credential at Inventory (ReserveStock/ReleaseStock): random
        // per run, as the embedded launcher's.
        let service_token = Secret::new(uuid::Uuid::new_v4().simple().to_string());
        o.inventory.service_token = service_token.clone();
        o.order.inventory.service_token = service_token;
        o.order.resilience.stock_cache.key_prefix = shopeasy_testkit::key_prefix();
        let redis_via = |name: &str| -> anyhow::Result<SecretUrl> {
            Ok(match redis {
                Some(_) => SecretUrl::new(format!("redis://{}", store(name)?.listen_addr())),
                None => SecretUrl::default(),
            })
        };
        o.product.redis.redis_url = redis_via("product-redis")?;
        o.order.redis.redis_url = redis_via("order-redis")?;

        // Then each service in the topology's wiring order, a proxy on each
        // of its edges to the services it calls.
        let mut running = HashMap::new();
        for service in Service::wiring_order() {
            let mut urls = HashMap::new();
            for upstream in service.node().upstreams() {
                let target: &Running = Service::ALL
                    .iter()
                    .find(|s| s.node() == upstream)
                    .and_then(|s| running.get(s))
                    .with_context(|| {
                        format!("{} starts after {}", service.node().name, upstream.name)
                    })?;
                let name = Edge {
                    from: service.node(),
                    to: upstream.name,
                }
                .name();
                let proxy = edge(&proxies, &name, &target.local_addr().to_string()).await?;
                urls.insert(upstream.name, format!("http://{}", proxy.listen_addr()));
            }
            options.route(service, &urls);
            // Ports below the kernel's ephemeral range, not port 0:
            // [`Cluster::respawn`] binds the same ports again, and between
            // the kill and the respawn the kernel may give a port of its
            // ephemeral range to any outgoing connection as its source port.
            let process = options.process_mut(service);
            for addr in [&mut process.listen_addr, &mut process.admin_addr] {
                if addr.port() == 0 {
                    addr.set_port(shopeasy_testkit::free_port());
                }
            }
            running.insert(service, options.spawn(service).await?);
        }
        let addresses = Addresses::try_collect(|node| {
            running
                .iter()
                .find(|(service, _)| service.node() == node)
                .map(|(_, r)| (r.local_addr(), r.admin_addr()))
                .with_context(|| format!("{} has not started", node.name))
        })?;

        let cluster = Self {
            addresses,
            proxies,
            order_db: direct(order_db.url()).await?,
            inventory_db: direct(inventory_db.url()).await?,
            product_db: direct(product_db.url()).await?,
            options,
            running: Mutex::new(running),
            _databases: Arc::new([order_db, inventory_db, product_db]),
        };
        Ok(Some(cluster))
    }

    /// The proxy on `edge` (one of [`edges`]).
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

    /// A bearer token for `customer`, signed with the key the gateway and
    /// the order service trust.
    pub fn token(&self, customer: &str) -> String {
        crate::identity::token(customer)
    }

    /// A client of the gateway signed in as `customer`, giving up after
    /// `timeout`.
    pub fn client(&self, customer: &str, timeout: Duration) -> crate::Client {
        crate::Client::signed_in(self.gateway_url(), timeout, customer)
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
            running.abort().await;
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
        let (listen, admin) = match service {
            Service::Gateway => (a.gateway, a.gateway_admin),
            Service::Product => (a.product, a.product_admin),
            Service::Order => (a.order, a.order_admin),
            Service::Inventory => (a.inventory, a.inventory_admin),
        };
        let process = options.process_mut(service);
        process.listen_addr = listen;
        process.admin_addr = admin;
        let running = options.spawn(service).await?;
        if let Ok(mut all) = self.running.lock() {
            all.insert(service, running);
        }
        Ok(())
    }

    /// Stops every service gracefully and the proxies.
    pub async fn stop(self) {
        let all: Vec<Running> = self
            .running
            .lock()
            .map(|mut r| r.drain().map(|(_, v)| v).collect())
            .unwrap_or_default();
        // All stop at once; each gets the same bound.
        let mut stopping = tokio::task::JoinSet::new();
        for running in all {
            stopping.spawn(async move {
                let name = running.name();
                if tokio::time::timeout(Duration::from_secs(5), running.stop())
                    .await
                    .is_err()
                {
                    tracing::warn!("{name} did not stop within 5 s");
                }
            });
        }
        while stopping.join_next().await.is_some() {}
        self.proxies.shutdown().await;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_wires_the_topology() {
        let order: Vec<&str> = Service::wiring_order().map(|s| s.node().name).collect();
        let want: Vec<&str> = topology::WIRING_ORDER.iter().map(|n| n.name).collect();
        assert_eq!(order, want);
        let edges = edges();
        for edge in [
            "gateway-order",
            "gateway-product",
            "order-inventory",
            "order-product",
            "order-postgres",
            "inventory-postgres",
            "product-postgres",
            "order-redis",
            "product-redis",
        ] {
            assert!(edges.iter().any(|e| e == edge), "{edge} in {edges:?}");
        }
        assert_eq!(edges.len(), 9);
    }
}
