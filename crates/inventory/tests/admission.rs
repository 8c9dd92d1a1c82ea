//! Inventory's gRPC listener under admission control, against a real server
//! on 127.0.0.1:0 and Postgres: with its one slot taken by a reservation
//! held on a row lock, the next call is refused at once with
//! `RESOURCE_EXHAUSTED` and `grpc-retry-pushback-ms` (before any database
//! work), the gRPC health check still answers, and once the lock is gone the
//! admitted call completes and new calls are served again.

// Test helpers panic on a failed set-up, like the tests themselves.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use shopeasy_proto::inventory::v1::{GetStockRequest, ReserveStockRequest, StockLine};
use shopeasy_testkit::eventually;
use sqlx::{Connection, PgConnection};
use support::{as_service, product, settings, start};
use tokio::time::Instant;
use tonic::Code;

/// `/admin/resilience` of a server, as JSON (a macro: the JSON type is
/// not a dependency of this crate, so it is never named).
macro_rules! resilience {
    ($http:expr, $server:expr) => {
        shopeasy_testkit::get_json(
            $http,
            format!("http://{}/admin/resilience", $server.admin_addr),
        )
        .await
    };
}

#[tokio::test]
async fn a_saturated_inventory_refuses_with_resource_exhausted_and_pushback() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let mut s = settings(db.url());
    s.process.admission.initial_limit = 1;
    s.process.admission.min_limit = 1;
    s.process.admission.max_limit = 1;
    s.process.admission.queue_size = 0;
    s.process.admission.retry_after_seconds = 2;
    let server = start(s).await;
    let http = reqwest::Client::new();

    let p = product();
    server.set_stock(&p, 5).await;
    let mut blocker = PgConnection::connect(db.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("UPDATE stock SET updated_at = updated_at WHERE product_id = $1")
        .bind(&p)
        .execute(&mut blocker)
        .await
        .unwrap();

    // The one slot: a reservation waiting on the held row lock.
    let mut client = server.client().await;
    let held = tokio::spawn(async move {
        client
            .reserve_stock(as_service(ReserveStockRequest {
                reservation_id: product(),
                lines: vec![StockLine {
                    product_id: p,
                    quantity: 1,
                }],
            }))
            .await
    });
    assert!(
        eventually(Duration::from_secs(5), async || {
            resilience!(&http, &server)["admission"]["in_flight"] == 1
        })
        .await,
        "the reservation holds the only slot"
    );

    let mut client = server.client().await;
    for _ in 0..3 {
        let started = Instant::now();
        let status = client
            .get_stock(GetStockRequest {
                product_id: product(),
            })
            .await
            .unwrap_err();
        // Bounded, not a speed claim: the refusal does not wait for the lock.
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(status.message().starts_with("overloaded"), "{status:?}");
        assert_eq!(
            status.metadata().get("grpc-retry-pushback-ms").unwrap(),
            "2000"
        );
    }

    // Health checks bypass the gate.
    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(serving.status, 1, "SERVING under overload");

    let report = resilience!(&http, &server);
    assert_eq!(report["admission"]["listener"], "inventory");
    assert_eq!(report["admission"]["requests"]["refused_full"], 3);

    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    held.await
        .unwrap()
        .expect("the admitted reservation completes");
    let stock = client
        .get_stock(GetStockRequest {
            product_id: product(),
        })
        .await;
    assert!(
        !matches!(stock, Err(ref s) if s.code() == Code::ResourceExhausted),
        "served again: {stock:?}"
    );

    let (_, metrics) = server.admin_get("/metrics").await;
    let m = shopeasy_testkit::Metrics::parse(&metrics);
    assert!(
        m.sum(
            "shopeasy_admission_requests_total",
            &[("listener", "inventory"), ("outcome", "refused_full")]
        ) >= 3.0,
        "{metrics}"
    );
    server.stop().await;
}
