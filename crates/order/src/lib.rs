//! ShopEasy's order service (SPEC §3, §5): the heart of the system.
//!
//! A customer's `POST /api/orders` is priced by the Product service, checked
//! against a stale-serving stock cache, written `pending` together with an
//! outbox row, and then reserved at Inventory (gRPC) with the order id as
//! the reservation id. Idempotency keys make the whole request safe to
//! repeat; the outbox worker finishes what Inventory outages interrupt.
//!
//! How the pieces fit:
//!
//! - [`domain`]: the request, its validation and the `Order` (no I/O);
//! - [`stock`] and [`catalog`]: the small ports the saga depends on;
//! - [`clients`]: their real implementations — the Inventory gRPC client
//!   and the Product HTTP client, each one tower stack from
//!   `shopeasy-resilience` (deadline → retry → breaker → bulkhead →
//!   attempt timeout → transport);
//! - [`stock_cache`]: the stale-serving, single-flight stock cache
//!   (in-process, then Redis) in front of Inventory;
//! - [`saga`]: placing and cancelling orders ([`saga::Orders`]);
//! - [`idempotency`]: Stripe's atomic phases around [`saga::Orders::place`];
//! - [`store`]: orders, keys and the outbox on Postgres or SQLite;
//! - [`outbox`]: the relay worker;
//! - [`http`]: the public routes; [`error`]: their one error mapping;
//! - [`settings`]: every key; [`failpoints`]: test-only crash points.
//!
//! Every route acts for the verified bearer token's `sub` (issue 15, see
//! [`http`]): another customer's order is a 404 like an unknown id, and a
//! customer with `orders.max_open_per_customer` pending orders gets 429
//! `too-many-open-orders` for a new placement.
//!
//! [`App`] wires them together: it binds the public and admin listeners,
//! and runs the outbox worker and the idempotency-key cleanup beside them.
//!
//! Choices where SPEC is silent: a 409 for insufficient stock found by
//! Inventory leaves the order `rejected` (its id is in the problem's
//! `order_id`); one found by the stock check creates nothing. Failures
//! before an order exists are not stored under the idempotency key (a retry
//! runs again); every outcome after is. `GET /api/orders` answers the
//! caller's `{"items": [Order], "next_cursor"}`, newest first, `limit`
//! 1..=100 (default 100), `cursor` the previous page's `next_cursor`
//! (absent on the last page). Cancelling a
//! `rejected` order is a 409 `not-cancellable`.

pub mod catalog;
pub mod clients;
pub mod domain;
pub mod error;
pub mod failpoints;
pub mod http;
pub mod idempotency;
pub mod openapi;
pub mod outbox;
pub mod saga;
pub mod settings;
pub mod stock;
pub mod stock_cache;
pub mod store;

use std::sync::Arc;

use shopeasy_identity::Verifier;
use shopeasy_resilience::{budget::RetryBudget, registry::Registry};
use shopeasy_runtime::{
    admin::Admin,
    lifecycle::{self, Bound, Service},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    clients::{inventory::InventoryClient, product::ProductClient},
    failpoints::Failpoints,
    outbox::WorkerConfig,
    saga::{OpenOrderLimit, Orders, Ports, SagaTimings},
    settings::OrderSettings,
    stock_cache::StockCache,
    store::Store,
};

/// The order database's migrations, embedded in the binary.
pub fn migrator() -> sqlx::migrate::Migrator {
    shopeasy_runtime::db::migrator(&[
        (
            1,
            "init",
            include_str!("../../../migrations/order/0001_init.sql"),
        ),
        (
            2,
            "scoped_fenced_keys",
            include_str!("../../../migrations/order/0002_scoped_fenced_keys.sql"),
        ),
        (
            3,
            "open_orders_by_customer",
            include_str!("../../../migrations/order/0003_open_orders_by_customer.sql"),
        ),
    ])
}

/// The binary's name.
pub const NAME: &str = shopeasy_runtime::topology::ORDER.binary;

/// The order service, built, ready to be bound and run by
/// `shopeasy_runtime::lifecycle`.
#[derive(Debug)]
pub struct App {
    settings: OrderSettings,
    orders: Orders,
    inventory: InventoryClient,
    product: ProductClient,
    stock_cache: StockCache,
    verifier: Verifier,
}

impl App {
    /// The service with test failpoints, built and bound
    /// ([`Service::build`] builds it without any).
    ///
    /// # Errors
    /// As [`Service::build`], or when a port cannot be bound.
    pub async fn build_with(
        settings: OrderSettings,
        failpoints: Failpoints,
    ) -> anyhow::Result<Bound<Self>> {
        let process = settings.process.clone();
        let admin = Admin::default();
        let app = Self::assemble(settings, failpoints, &admin).await?;
        Bound::bind(&process, admin, app).await
    }

    /// Connects the database (running migrations) and builds the clients,
    /// the stock cache and the use cases.
    async fn assemble(
        settings: OrderSettings,
        failpoints: Failpoints,
        admin: &Admin,
    ) -> anyhow::Result<Self> {
        // Settings validation has checked `auth.*`; a key the verifier
        // still cannot use is a start-up error too, never a service that
        // answers 401 to everyone.
        let verifier = Verifier::from_settings(&settings.auth)?;
        {
            // The provider may start after us (compose, the launcher): a
            // failed warm-up is only logged; the first token fetches again,
            // and keys once fetched keep verifying while it is down.
            let verifier = verifier.clone();
            tokio::spawn(async move {
                if let Err(e) = verifier.warm_up().await {
                    tracing::warn!(error = %e, "could not fetch the token keys yet; will retry on the first request");
                }
            });
        }
        let db =
            lifecycle::connect_database("order", &settings.storage, &migrator(), admin).await?;
        let r = &settings.resilience;
        tracing::info!(policy = %r.describe(), "worst-case amplification");
        let inventory = InventoryClient::build(
            &settings.inventory.url,
            &settings.inventory.service_token,
            &r.inventory,
            RetryBudget::new(r.budget()),
            r.throttle.config(),
        )?;
        let product = ProductClient::with_throttle(
            &settings.product.url,
            &r.product,
            RetryBudget::new(r.budget()),
            r.throttle.config(),
        )?;
        let stock_cache = StockCache::new(
            Arc::new(inventory.clone()),
            &r.stock_cache,
            settings.redis.redis_url.expose(),
        )?;
        let o = &settings.outbox;
        let orders = Orders::new(
            Store::new(db),
            Ports {
                catalog: Arc::new(product.clone()),
                stock: Arc::new(stock_cache.clone()),
                reservations: Arc::new(inventory.clone()),
            },
            failpoints,
            SagaTimings {
                lease: o.lease_seconds.get(),
                initial_backoff: o.initial_backoff_seconds.get(),
                max_backoff: o.max_backoff_seconds.get(),
            },
        )
        .with_open_limit(OpenOrderLimit {
            max_open: settings.orders.max_open_per_customer,
            // About when the outbox next tries a pending order.
            retry_after: {
                let d = o.max_backoff_seconds.get();
                (d.as_secs() + u64::from(d.subsec_nanos() > 0)).clamp(1, 3600)
            },
        });

        let registry = Registry::new();
        registry
            .breaker(inventory.breaker())
            .breaker(product.breaker())
            .budget(clients::inventory::TARGET, inventory.budget())
            .budget(clients::product::TARGET, product.budget())
            .register("throttles", clients::inventory::TARGET, {
                let t = inventory.throttle().clone();
                move || t.snapshot()
            })
            .register("throttles", clients::product::TARGET, {
                let t = product.throttle().clone();
                move || t.snapshot()
            })
            .cache("stock", stock_cache.layer());
        for section in ["circuit_breakers", "retry_budgets", "throttles", "caches"] {
            let registry = registry.clone();
            admin.report(section, move || registry.snapshot()[section].clone());
        }
        if let Some(redis) = stock_cache.redis_guard().cloned() {
            admin.report("redis", move || redis.report());
        }

        Ok(Self {
            settings,
            orders,
            inventory,
            product,
            stock_cache,
            verifier,
        })
    }

    /// The use cases (tests drive the outbox worker through them).
    pub fn orders(&self) -> &Orders {
        &self.orders
    }

    /// The Inventory client.
    pub fn inventory(&self) -> &InventoryClient {
        &self.inventory
    }

    /// The Product client.
    pub fn product(&self) -> &ProductClient {
        &self.product
    }

    /// The stock cache.
    pub fn stock_cache(&self) -> &StockCache {
        &self.stock_cache
    }

    /// The bearer-token verifier every `/api/orders*` route uses.
    pub fn verifier(&self) -> &Verifier {
        &self.verifier
    }
}

impl Service for App {
    type Settings = OrderSettings;
    const NAME: &'static str = NAME;

    /// Connects the database (running migrations) and builds the clients.
    ///
    /// # Errors
    /// When the database cannot be reached in `database.startup_timeout_seconds`,
    /// a migration fails or an upstream URL is invalid.
    async fn build(settings: OrderSettings, admin: &Admin) -> anyhow::Result<Self> {
        Self::assemble(settings, Failpoints::default(), admin).await
    }

    /// Serves the public routes and runs the outbox worker and the key
    /// cleanup until `shutdown`; the workers stop once the routes drained.
    async fn serve(self, public: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
        let s = &self.settings;
        let workers = shutdown.child_token();
        let outbox = tokio::spawn(outbox::run(
            self.orders.clone(),
            WorkerConfig {
                poll_interval: s.outbox.poll_interval_seconds.get(),
                batch_size: s.outbox.batch_size,
                lease: s.outbox.lease_seconds.get(),
            },
            workers.clone(),
        ));
        let cleanup = tokio::spawn(idempotency::cleanup(
            self.orders.clone(),
            s.idempotency.retention_seconds.get(),
            s.idempotency.cleanup_interval_seconds.get(),
            workers.clone(),
        ));
        let router = http::router(
            self.orders.clone(),
            s.idempotency.lock_seconds.get(),
            self.verifier.clone(),
        );
        let served = lifecycle::serve_admitted(public, router, shutdown, Self::DRAIN).await;
        workers.cancel();
        let _ = tokio::join!(outbox, cleanup);
        served?;
        Ok(())
    }
}
