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
//! [`App`] wires them together: it binds the public and admin listeners,
//! and runs the outbox worker and the idempotency-key cleanup beside them.
//!
//! Choices where SPEC is silent: a 409 for insufficient stock found by
//! Inventory leaves the order `rejected` (its id is in the problem's
//! `order_id`); one found by the stock check creates nothing. Failures
//! before an order exists are not stored under the idempotency key (a retry
//! runs again); every outcome after is. `GET /api/orders?customer_id=`
//! answers `{"items": [Order]}`, newest first, at most 100. Cancelling a
//! `rejected` order is a 409 `not-cancellable`.

pub mod catalog;
pub mod clients;
pub mod domain;
pub mod error;
pub mod failpoints;
pub mod http;
pub mod idempotency;
pub mod outbox;
pub mod saga;
pub mod settings;
pub mod stock;
pub mod stock_cache;
pub mod store;

use std::{net::SocketAddr, sync::Arc};

use shopeasy_resilience::{
    budget::{BudgetConfig, RetryBudget},
    registry::Registry,
};
use shopeasy_runtime::{
    admin::Admin,
    db::Database,
    lifecycle::{self, DEFAULT_DRAIN},
    settings::common::{LogSettings, RetryBudgetSettings},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    clients::{inventory::InventoryClient, product::ProductClient},
    failpoints::Failpoints,
    outbox::WorkerConfig,
    saga::{Orders, SagaTimings},
    settings::OrderSettings,
    stock_cache::StockCache,
    store::Store,
};

/// The order database's migrations, embedded in the binary.
pub fn migrator() -> sqlx::migrate::Migrator {
    shopeasy_runtime::db::migrator(&[(
        1,
        "init",
        include_str!("../../../migrations/order/0001_init.sql"),
    )])
}

/// The order service, built and bound, ready to run.
#[derive(Debug)]
pub struct App {
    settings: OrderSettings,
    listener: TcpListener,
    admin_listener: TcpListener,
    orders: Orders,
    admin: Admin,
    inventory: InventoryClient,
    product: ProductClient,
    stock_cache: StockCache,
}

impl App {
    /// Connects the database (running migrations), builds the clients and
    /// binds both listeners (port 0 allowed).
    ///
    /// # Errors
    /// When the database cannot be reached in `database.startup_timeout_seconds`,
    /// a migration fails, an upstream URL is invalid, or a port cannot be bound.
    pub async fn build(settings: OrderSettings) -> anyhow::Result<Self> {
        Self::build_with(settings, Failpoints::default()).await
    }

    /// [`App::build`] with test failpoints.
    ///
    /// # Errors
    /// As [`App::build`].
    pub async fn build_with(
        settings: OrderSettings,
        failpoints: Failpoints,
    ) -> anyhow::Result<Self> {
        let db = Database::connect_and_migrate(
            settings.database_url.expose(),
            &settings.database,
            &migrator(),
        )
        .await?;
        let r = &settings.resilience;
        let inventory = InventoryClient::new(
            &settings.inventory.url,
            &r.inventory,
            RetryBudget::new(budget_config(&r.retry_budget)),
        )?;
        let product = ProductClient::new(
            &settings.product.url,
            &r.product,
            RetryBudget::new(budget_config(&r.retry_budget)),
        )?;
        let stock_cache = StockCache::new(
            Arc::new(inventory.clone()),
            &r.stock_cache,
            settings.redis_url.expose(),
        )?;
        let o = &settings.outbox;
        let orders = Orders::new(
            Store::new(db.clone()),
            Arc::new(product.clone()),
            Arc::new(stock_cache.clone()),
            Arc::new(inventory.clone()),
            failpoints,
            SagaTimings {
                lease: o.lease_seconds.get(),
                initial_backoff: o.initial_backoff_seconds.get(),
                max_backoff: o.max_backoff_seconds.get(),
            },
        );

        let admin = Admin::default();
        admin.readiness("database", move || {
            let db = db.clone();
            async move { db.ping().await.map_err(|e| e.to_string()) }
        });
        let registry = Registry::new();
        registry
            .breaker(inventory.breaker())
            .breaker(product.breaker())
            .budget(clients::inventory::TARGET, inventory.budget())
            .budget(clients::product::TARGET, product.budget())
            .cache("stock", stock_cache.layer());
        for section in ["circuit_breakers", "retry_budgets", "caches"] {
            let registry = registry.clone();
            admin.report(section, move || registry.snapshot()[section].clone());
        }

        let listener = lifecycle::bind(settings.listen_addr, "public HTTP").await?;
        let admin_listener = lifecycle::bind(settings.admin_addr, "admin HTTP").await?;
        Ok(Self {
            settings,
            listener,
            admin_listener,
            orders,
            admin,
            inventory,
            product,
            stock_cache,
        })
    }

    /// The public listener's address.
    ///
    /// # Errors
    /// When the socket cannot say.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The admin listener's address.
    ///
    /// # Errors
    /// When the socket cannot say.
    pub fn admin_addr(&self) -> std::io::Result<SocketAddr> {
        self.admin_listener.local_addr()
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

    /// Serves both listeners and runs the outbox worker and the key
    /// cleanup until `shutdown`, then drains.
    ///
    /// # Errors
    /// When serving fails.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
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
        let public = http::router(self.orders.clone(), s.idempotency.lock_seconds.get());
        let (a, b) = tokio::join!(
            lifecycle::serve(self.listener, public, shutdown.clone(), DEFAULT_DRAIN),
            lifecycle::serve(
                self.admin_listener,
                self.admin.router(),
                shutdown.clone(),
                DEFAULT_DRAIN
            ),
        );
        workers.cancel();
        let _ = tokio::join!(outbox, cleanup);
        a?;
        b?;
        Ok(())
    }
}

fn budget_config(s: &RetryBudgetSettings) -> BudgetConfig {
    BudgetConfig {
        ratio: s.ratio,
        min_retries_per_window: s.min_retries_per_window,
        window: s.window_seconds.get(),
    }
}

impl lifecycle::Service for App {
    type Settings = OrderSettings;
    const NAME: &'static str = "shopeasy-order";

    fn log(settings: &OrderSettings) -> &LogSettings {
        &settings.log
    }

    fn otlp_endpoint(settings: &OrderSettings) -> &str {
        &settings.otel_exporter_otlp_endpoint
    }

    async fn build(settings: OrderSettings) -> anyhow::Result<Self> {
        App::build(settings).await
    }

    async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        App::run_until_stopped(self, shutdown).await
    }
}
