//! Client-side adaptive throttling (issue 14, point 2) and overload
//! refusals against the retry budget, with order's real clients against
//! real servers on 127.0.0.1:0.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use shopeasy_order::{
    catalog::Catalog,
    clients::{inventory::InventoryClient, product::ProductClient},
    settings::EdgeSettings,
    stock::StockSource,
};
use shopeasy_proto::inventory::v1::{
    self as pb,
    inventory_service_server::{InventoryService, InventoryServiceServer},
};
use shopeasy_resilience::{
    budget::{BudgetConfig, RetryBudget},
    throttle::ThrottleConfig,
};
use shopeasy_runtime::settings::{Seconds, Secret};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::{
    fakes::{FakeProduct, ProductMode},
    helpers::eventually,
};

/// An edge whose breaker never opens (so only the throttle refuses) and
/// that never retries unless a test says so.
fn edge(max_retries: u32) -> EdgeSettings {
    EdgeSettings {
        timeout_seconds: Seconds::new(0.5),
        max_retries,
        failure_ratio: 1.0,
        minimum_calls: 10_000,
        connect_timeout_seconds: Seconds::new(0.5),
        ..EdgeSettings::default()
    }
}

/// A budget of exactly `n` retries per window, whatever the traffic.
fn budget_of(n: u32) -> RetryBudget {
    RetryBudget::new(BudgetConfig {
        ratio: 0.0,
        min_retries_per_window: n,
        window: Duration::from_secs(60),
    })
}

#[tokio::test]
async fn an_overloaded_product_is_not_asked_for_most_calls_and_is_again_once_it_recovers() {
    let fake = FakeProduct::default();
    let p = Uuid::new_v4();
    fake.add(p, 99);
    fake.set_mode(ProductMode::Unavailable(None));
    let server = fake.serve().await;
    let throttle = ThrottleConfig {
        k: 2.0,
        window: Duration::from_secs(1),
        min_requests: 10,
    };
    let client =
        ProductClient::with_throttle(&server.url(), &edge(0), budget_of(0), throttle).unwrap();

    let made = 300;
    for _ in 0..made {
        assert!(client.price_cents(p, None).await.is_err());
    }
    let asked = fake.calls();
    let throttled = client.throttle().throttled_total();
    assert_eq!(
        u64::try_from(asked).unwrap() + throttled,
        made,
        "every call was sent or throttled"
    );
    assert!(
        asked < made as usize / 3,
        "the callee saw {asked} of {made} calls"
    );
    assert!(client.throttle().probability() > 0.5);

    // Product accepts again: within a few windows the client asks it for
    // (nearly) every call.
    fake.set_mode(ProductMode::Healthy);
    let recovered = eventually(Duration::from_secs(30), async || {
        for _ in 0..20 {
            if client.price_cents(p, None).await != Ok(Some(99)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                return false;
            }
        }
        true
    })
    .await;
    assert!(
        recovered,
        "p = {} after recovery",
        client.throttle().probability()
    );
    assert_eq!(client.throttle().probability(), 0.0);
}

#[tokio::test]
async fn a_product_answering_503_with_retry_after_is_retried_only_within_the_budget() {
    let fake = FakeProduct::default();
    // Retry-After: 0 — "retry now", the strongest invitation to retry.
    fake.set_mode(ProductMode::Unavailable(Some(0)));
    let server = fake.serve().await;
    let client = ProductClient::new(&server.url(), &edge(2), budget_of(3)).unwrap();
    let calls = 10;
    for _ in 0..calls {
        assert!(client.price_cents(Uuid::new_v4(), None).await.is_err());
    }
    assert_eq!(
        fake.calls(),
        calls + 3,
        "{calls} calls + the 3 retries of the budget, not {calls} × 3 attempts"
    );
}

/// Inventory answering every `GetStock` with one status.
#[derive(Clone)]
struct Refusing {
    status: Arc<Mutex<Status>>,
    calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl InventoryService for Refusing {
    async fn get_stock(
        &self,
        _request: Request<pb::GetStockRequest>,
    ) -> Result<Response<pb::GetStockResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let s = self.status.lock().unwrap();
        let mut status = Status::new(s.code(), s.message());
        *status.metadata_mut() = s.metadata().clone();
        Err(status)
    }

    async fn reserve_stock(
        &self,
        _request: Request<pb::ReserveStockRequest>,
    ) -> Result<Response<pb::ReserveStockResponse>, Status> {
        Err(Status::unimplemented("test"))
    }

    async fn release_stock(
        &self,
        _request: Request<pb::ReleaseStockRequest>,
    ) -> Result<Response<pb::ReleaseStockResponse>, Status> {
        Err(Status::unimplemented("test"))
    }

    async fn set_stock(
        &self,
        _request: Request<pb::SetStockRequest>,
    ) -> Result<Response<pb::SetStockResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
}

fn with_pushback(mut status: Status, ms: &str) -> Status {
    status
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", ms.parse().unwrap());
    status
}

#[tokio::test]
async fn an_inventory_pushing_back_is_retried_only_within_the_budget() {
    let refusing = Refusing {
        status: Arc::new(Mutex::new(with_pushback(
            Status::resource_exhausted("overloaded"),
            "0",
        ))),
        calls: Arc::default(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(InventoryServiceServer::new(refusing.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    // The throttle counts but does not refuse here (its floor is above
    // these calls), so every hit is the retry layer's doing.
    let counting_only = ThrottleConfig {
        min_requests: 1_000,
        ..ThrottleConfig::default()
    };
    let client = InventoryClient::build(
        &url,
        &Secret::default(),
        &edge(2),
        budget_of(3),
        counting_only,
    )
    .unwrap();
    let calls = 10;
    // RESOURCE_EXHAUSTED is not retried at all, pushback or not.
    for _ in 0..calls {
        assert!(client.available(Uuid::new_v4(), None).await.is_err());
    }
    assert_eq!(refusing.calls.load(Ordering::SeqCst), calls);
    // UNAVAILABLE with a pushback of 0 ms asks for a retry now: the budget
    // still caps them.
    *refusing.status.lock().unwrap() = with_pushback(Status::unavailable("overloaded"), "0");
    refusing.calls.store(0, Ordering::SeqCst);
    for _ in 0..calls {
        assert!(client.available(Uuid::new_v4(), None).await.is_err());
    }
    assert_eq!(refusing.calls.load(Ordering::SeqCst), calls + 3);
    // Both counted as overload refusals by the throttle: none accepted.
    let (requests, accepts) = client.throttle().counts();
    assert_eq!((requests, accepts), (2 * calls as u64 + 3, 0));
}
