//! ShopEasy's Inventory service: stock per product and reservations of it,
//! over gRPC (`shopeasy.inventory.v1.InventoryService`, SPEC §4).
//!
//! It exists so that stock is decided in one place that never oversells:
//! the order service reserves with `ReserveStock(reservation_id = order id)`
//! and cancels with `ReleaseStock`, retrying either safely because both are
//! idempotent.
//!
//! How the pieces fit, outside in:
//!
//! - [`settings`]: [`InventorySettings`], the typed, validated settings.
//! - [`App`]: binds the gRPC and admin listeners, connects the database and
//!   runs the migrations ([`App::build`]), then serves until shutdown.
//! - [`grpc`]: the adapter — reads the deadline (`min(grpc-timeout,
//!   request_timeout_seconds)`) and the admin token from the metadata,
//!   parses messages into [`domain`] types, calls the [`store`], and maps
//!   [`Error`] onto a `tonic::Status` in one place. [`grpc::observe`] counts
//!   and times every call.
//! - [`domain`]: validated ids, lines and reservations; no gRPC, no SQL.
//! - [`store`]: the transactions that reserve all-or-nothing with atomic
//!   conditional updates, and that let the database cancel a query when the
//!   caller's deadline passes.
//! - [`health`]: `grpc.health.v1` following the admin listener's readiness;
//!   server reflection is registered too, so `grpcurl -plaintext
//!   localhost:50051 list` works without the proto file.
//!
//! Status codes: INVALID_ARGUMENT (bad field, named, with `FieldViolations`
//! details), NOT_FOUND (no stock record), FAILED_PRECONDITION (short stock,
//! with `InsufficientStock` details; or a reservation already released),
//! ALREADY_EXISTS (reservation id reused with other lines), UNAUTHENTICATED
//! (`SetStock` without the admin token), DEADLINE_EXCEEDED, UNAVAILABLE
//! (database unreachable or overloaded: retry).

pub mod domain;
mod error;
pub mod grpc;
pub mod health;
pub mod settings;
pub mod store;

use std::{net::SocketAddr, time::Duration};

use anyhow::Context as _;
use shopeasy_proto::inventory::v1::inventory_service_server::InventoryServiceServer;
use shopeasy_runtime::{
    admin::Admin,
    db::{self, Database},
    lifecycle,
    settings::common::LogSettings,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Server, server::TcpIncoming};

pub use error::Error;
pub use settings::InventorySettings;
pub use store::Store;

/// The binary's name.
pub const NAME: &str = "shopeasy-inventory";

/// The embedded migrations of `migrations/inventory/`.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[(
    1,
    "init",
    include_str!("../../../migrations/inventory/0001_init.sql"),
)];

/// HTTP/2 keep-alive pings to idle clients, so a vanished peer is noticed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a keep-alive ping may go unanswered before the connection closes.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The Inventory service, built and bound, ready to run.
#[derive(Debug)]
pub struct App {
    grpc: TcpListener,
    admin_listener: TcpListener,
    admin: Admin,
    api: grpc::InventoryApi,
    store: Store,
}

impl App {
    /// Binds both listeners (port 0 allowed), connects the database and runs
    /// the migrations (retrying for `database.startup_timeout_seconds`).
    ///
    /// # Errors
    /// When a listener cannot be bound, the database URL is unusable, the
    /// database does not answer in time or a migration fails.
    pub async fn build(settings: InventorySettings) -> anyhow::Result<Self> {
        let grpc = lifecycle::bind(settings.listen_addr, "gRPC").await?;
        let admin_listener = lifecycle::bind(settings.admin_addr, "admin").await?;
        let db = Database::connect_and_migrate(
            settings.database_url.expose(),
            &settings.database,
            &db::migrator(MIGRATIONS),
        )
        .await
        .with_context(|| format!("inventory database {}", settings.database_url))?;

        let admin = Admin::default();
        let ping = db.clone();
        admin.readiness("database", move || {
            let db = ping.clone();
            async move { db.ping().await.map_err(|e| e.to_string()) }
        });
        let store = Store::new(db);
        let api = grpc::InventoryApi::new(
            store.clone(),
            settings.admin_token.clone(),
            settings.request_timeout_seconds.get(),
        );
        Ok(Self {
            grpc,
            admin_listener,
            admin,
            api,
            store,
        })
    }

    /// The gRPC listener's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.grpc
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The store (tests check conservation through it).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Serves gRPC (Inventory, health, reflection) and the admin listener
    /// until `shutdown` is cancelled, then drains in-flight calls for at most
    /// [`lifecycle::DEFAULT_DRAIN`].
    ///
    /// # Errors
    /// When reflection cannot be built or a listener fails.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let (addr, admin_addr) = (self.local_addr(), self.admin_addr());
        let (reporter, health_service) = tonic_health::server::health_reporter();
        let status = health::init(&self.admin, &reporter).await;
        let follow = tokio::spawn(health::follow(
            self.admin.clone(),
            reporter,
            status,
            shutdown.clone(),
        ));
        // Both reflection versions: older grpcurl releases speak v1alpha only.
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(shopeasy_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection().build_v1()?;
        let reflection_v1alpha = reflection().build_v1alpha()?;

        // Read outside in: every call is counted and timed (observe), then
        // routed to its service.
        let router = Server::builder()
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .layer(grpc::observe::ObserveGrpcLayer)
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(InventoryServiceServer::new(self.api));
        let incoming = TcpIncoming::from(self.grpc).with_nodelay(Some(true));
        let stop = shutdown.clone();
        let grpc = async {
            tokio::select! {
                r = router.serve_with_incoming_shutdown(incoming, async move { stop.cancelled().await }) => {
                    r.context("gRPC server")
                }
                () = async {
                    shutdown.cancelled().await;
                    tokio::time::sleep(lifecycle::DEFAULT_DRAIN).await;
                } => {
                    tracing::warn!("drain timeout passed; dropping remaining gRPC calls");
                    Ok(())
                }
            }
        };
        let admin = lifecycle::serve(
            self.admin_listener,
            self.admin.router(),
            shutdown.clone(),
            lifecycle::DEFAULT_DRAIN,
        );
        tracing::info!(%addr, %admin_addr, "inventory serving gRPC and admin");
        let (grpc, admin) = tokio::join!(grpc, admin);
        follow.abort();
        grpc?;
        admin.context("admin listener")?;
        Ok(())
    }
}

impl lifecycle::Service for App {
    type Settings = InventorySettings;
    const NAME: &'static str = NAME;

    fn log(settings: &InventorySettings) -> &LogSettings {
        &settings.log
    }

    fn otlp_endpoint(settings: &InventorySettings) -> &str {
        &settings.otel_exporter_otlp_endpoint
    }

    async fn build(settings: InventorySettings) -> anyhow::Result<Self> {
        App::build(settings).await
    }

    async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        App::run_until_stopped(self, shutdown).await
    }
}
