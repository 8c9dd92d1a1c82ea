//! The standard gRPC health service (`grpc.health.v1`) following the admin
//! listener's readiness: SERVING while every readiness check passes (the
//! database answers), NOT_SERVING otherwise and from shutdown on. Both the
//! server as a whole (`""`) and `shopeasy.inventory.v1.InventoryService`
//! are reported.

use std::time::Duration;

use shopeasy_runtime::admin::Admin;
use tokio_util::sync::CancellationToken;
use tonic_health::{ServingStatus, server::HealthReporter};

/// How often readiness is re-checked.
pub const POLL: Duration = Duration::from_secs(1);

/// The service name reported besides the whole server (`""`).
const SERVICE: &str = "shopeasy.inventory.v1.InventoryService";

/// Sets both statuses.
async fn set(reporter: &HealthReporter, status: ServingStatus) {
    reporter.set_service_status("", status).await;
    reporter.set_service_status(SERVICE, status).await;
}

/// The status readiness gives now.
pub(crate) async fn current(admin: &Admin) -> ServingStatus {
    if admin.ready().await.is_ok() {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

/// Sets the initial status from readiness.
pub(crate) async fn init(admin: &Admin, reporter: &HealthReporter) -> ServingStatus {
    let status = current(admin).await;
    set(reporter, status).await;
    status
}

/// Re-checks readiness every [`POLL`] and reports changes until `shutdown`,
/// then reports NOT_SERVING so balancers stop sending calls.
pub(crate) async fn follow(
    admin: Admin,
    reporter: HealthReporter,
    mut last: ServingStatus,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(POLL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let now = tokio::select! {
            () = shutdown.cancelled() => break,
            s = current(&admin) => s,
        };
        if now != last {
            tracing::info!(status = ?now, "gRPC health changed");
            set(&reporter, now).await;
            last = now;
        }
    }
    set(&reporter, ServingStatus::NotServing).await;
}
