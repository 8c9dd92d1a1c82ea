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
//! - [`App`]: the `shopeasy_runtime::lifecycle::Service` — connects the
//!   database and runs the migrations, then serves gRPC until shutdown;
//!   `lifecycle::spawn::<App>(settings)` binds both listeners and starts it.
//! - [`grpc`]: the adapter — reads the deadline (`min(grpc-timeout,
//!   request_timeout_seconds)`) and the bearer token (admin or service)
//!   from the metadata,
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
//! (`SetStock` without the admin token, `ReserveStock`/`ReleaseStock`
//! without the service token), DEADLINE_EXCEEDED, UNAVAILABLE
//! (database unreachable or overloaded: retry).

pub mod domain;
mod error;
pub mod grpc;
pub mod health;
pub mod seed;
pub mod settings;
pub mod store;

use std::time::Duration;

use anyhow::Context as _;
use shopeasy_proto::inventory::v1::inventory_service_server::InventoryServiceServer;
use shopeasy_resilience::admission::{AdmissionLayer, GrpcRefusal};
use shopeasy_runtime::{
    admin::Admin,
    lifecycle::{self, Service},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Server, server::TcpIncoming};

pub use error::Error;
pub use settings::InventorySettings;
pub use store::Store;

/// The binary's name.
pub const NAME: &str = shopeasy_runtime::topology::INVENTORY.binary;

/// The embedded migrations of `migrations/inventory/`.
pub fn migrator() -> sqlx::migrate::Migrator {
    shopeasy_runtime::db::migrator(&[(
        1,
        "init",
        include_str!("../../../migrations/inventory/0001_init.sql"),
    )])
}

/// HTTP/2 keep-alive pings to idle clients, so a vanished peer is noticed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a keep-alive ping may go unanswered before the connection closes.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request message Inventory decodes. Its largest valid one, a
/// reservation of [`domain::MAX_LINES`] lines, is about 3 KiB; tonic's
/// default of 4 MiB would let one call make the server decode (and
/// validate) a million lines. Larger messages are refused `OUT_OF_RANGE`
/// from their length prefix, before their bytes are read.
const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// The Inventory service, built, ready to be bound and run by
/// `shopeasy_runtime::lifecycle`.
#[derive(Debug)]
pub struct App {
    admin: Admin,
    api: grpc::InventoryApi,
    store: Store,
}

impl App {
    /// The store (tests check conservation through it).
    pub fn store(&self) -> &Store {
        &self.store
    }
}

impl Service for App {
    type Settings = InventorySettings;
    const NAME: &'static str = NAME;

    /// Connects the database and runs the migrations (retrying for
    /// `database.startup_timeout_seconds`).
    async fn build(settings: InventorySettings, admin: &Admin) -> anyhow::Result<Self> {
        let db =
            lifecycle::connect_database("inventory", &settings.storage, &migrator(), admin).await?;
        let store = Store::new(db);
        seed::demo_if_empty(settings.demo_seed, &store).await?;
        let credentials = grpc::Credentials {
            admin: settings.admin_token.clone(),
            service: settings.service_token.clone(),
        };
        let api = grpc::InventoryApi::new(
            store.clone(),
            credentials,
            settings.request_timeout_seconds.get(),
        );
        Ok(Self {
            admin: admin.clone(),
            api,
            store,
        })
    }

    /// Serves gRPC (Inventory, health, reflection) until `shutdown` is
    /// cancelled; the lifecycle bounds the drain of in-flight calls.
    async fn serve(self, public: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
        // Read on this task: the lifecycle lends it to `serve` only.
        let admission = lifecycle::admission()
            .map(|a| AdmissionLayer::new(a, GrpcRefusal).bypass(&["/grpc.health.v1.Health/"]));
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

        // Every method's series exist at 0 before its first call (a fresh
        // system's board shows 0, not "No data").
        const METHODS: [&str; 4] = [
            "shopeasy.inventory.v1.InventoryService/GetStock",
            "shopeasy.inventory.v1.InventoryService/ReserveStock",
            "shopeasy.inventory.v1.InventoryService/ReleaseStock",
            "shopeasy.inventory.v1.InventoryService/SetStock",
        ];
        let labels = METHODS.map(|m| [("method", m), ("code", "Ok")]);
        shopeasy_runtime::telemetry::register_at_zero(
            "shopeasy_grpc_server_requests_total",
            Some("shopeasy_grpc_server_request_duration_seconds"),
            &labels.each_ref().map(|l| &l[..]),
        );

        // Read outside in: every call is counted and timed (observe), then
        // admitted or refused with RESOURCE_EXHAUSTED + pushback before any
        // database work (admission; health checks bypass it, so probes
        // answer under overload), then routed to its service.
        let router = Server::builder()
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .layer(grpc::observe::ObserveGrpcLayer)
            .layer(tower::util::option_layer(admission))
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(
                InventoryServiceServer::new(self.api).max_decoding_message_size(MAX_REQUEST_BYTES),
            );
        let incoming = TcpIncoming::from(public).with_nodelay(Some(true));
        let served = router
            .serve_with_incoming_shutdown(incoming, async move { shutdown.cancelled().await })
            .await;
        follow.abort();
        served.context("gRPC server")
    }
}
