//! The Inventory and Product clients against real servers on 127.0.0.1:0
//! (SPEC §5; FAULTS.md F1, F3, F7 on the order → inventory and
//! order → product edges).

use std::time::Duration;

use shopeasy_order::{
    catalog::{Catalog, CatalogError},
    clients::{inventory::InventoryClient, product::ProductClient},
    settings::EdgeSettings,
    stock::{StockError, StockSource},
};
use shopeasy_resilience::{
    breaker::State,
    budget::{BudgetConfig, RetryBudget},
    deadline::{Deadline, parse_grpc_timeout},
};
use shopeasy_runtime::settings::Seconds;
use tokio::time::Instant;
use uuid::Uuid;

use crate::{
    fakes::{FakeInventory, FakeProduct, Mode, ProductMode},
    helpers::eventually,
};

fn edge() -> EdgeSettings {
    EdgeSettings {
        timeout_seconds: Seconds::new(0.3),
        break_duration_seconds: Seconds::new(1.0),
        connect_timeout_seconds: Seconds::new(0.5),
        ..EdgeSettings::default()
    }
}

fn budget() -> RetryBudget {
    RetryBudget::new(BudgetConfig::default())
}

fn retries_taken(b: &RetryBudget) -> u64 {
    b.snapshot()["retries_in_window"].as_u64().unwrap()
}

#[tokio::test]
async fn inventory_healthy_call_sends_its_deadline() {
    let fake = FakeInventory::default();
    let p = Uuid::new_v4();
    fake.set_stock(p, 7);
    let server = fake.serve().await;
    let client = InventoryClient::new(&server.url(), &edge(), budget()).unwrap();
    assert_eq!(client.available(p, None).await, Ok(Some(7)));
    assert_eq!(
        client.available(Uuid::new_v4(), None).await,
        Ok(None),
        "NOT_FOUND is an answer"
    );
    let sent = |t: &String| parse_grpc_timeout(&t.parse().unwrap()).unwrap();
    // The attempt timeout (300 ms) travels as grpc-timeout…
    let first = sent(&fake.timeouts()[0]);
    assert!(
        first <= Duration::from_millis(300) && first > Duration::from_millis(200),
        "{first:?}"
    );
    // …and never beyond the caller's remaining deadline.
    client
        .available(p, Some(Deadline::after(Duration::from_millis(100))))
        .await
        .unwrap();
    let last = sent(&fake.timeouts().pop().unwrap());
    assert!(last <= Duration::from_millis(100), "{last:?}");
    assert_eq!(client.breaker().state(), State::Closed);
}

#[tokio::test]
async fn inventory_hung_call_times_out_once_and_counts_as_failure() {
    let fake = FakeInventory::default();
    fake.set_mode(Mode::Hang);
    let server = fake.serve().await;
    let client = InventoryClient::new(&server.url(), &edge(), budget()).unwrap();
    let started = Instant::now();
    let result = client.available(Uuid::new_v4(), None).await;
    let took = started.elapsed();
    assert!(
        matches!(result, Err(StockError::Unavailable(_))),
        "{result:?}"
    );
    assert!(took >= Duration::from_millis(290), "{took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(fake.get_calls(), 1, "a timeout is never retried");
    assert_eq!(retries_taken(client.budget()), 0);
    assert_eq!(
        client.breaker().snapshot()["failures_in_window"],
        1,
        "counted by the breaker"
    );
}

#[tokio::test]
async fn inventory_unavailable_is_tried_three_times() {
    let fake = FakeInventory::default();
    fake.set_mode(Mode::Unavailable);
    let server = fake.serve().await;
    let client = InventoryClient::new(&server.url(), &edge(), budget()).unwrap();
    let result = client.available(Uuid::new_v4(), None).await;
    assert!(
        matches!(result, Err(StockError::Unavailable(_))),
        "{result:?}"
    );
    assert_eq!(fake.get_calls(), 3, "1 + max_retries (2)");
    assert_eq!(retries_taken(client.budget()), 2, "from the budget");
}

#[tokio::test]
async fn inventory_refused_is_retried_then_unavailable() {
    let fake = FakeInventory::default();
    let server = fake.serve().await;
    let url = server.url();
    server.stop().await;
    let client = InventoryClient::new(&url, &edge(), budget()).unwrap();
    let started = Instant::now();
    let result = client.available(Uuid::new_v4(), None).await;
    assert!(
        matches!(result, Err(StockError::Unavailable(_))),
        "{result:?}"
    );
    assert_eq!(
        retries_taken(client.budget()),
        2,
        "refused connections are retried"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn inventory_open_breaker_fails_fast_without_a_connection_then_one_trial() {
    let fake = FakeInventory::default();
    let p = Uuid::new_v4();
    fake.set_stock(p, 3);
    fake.set_mode(Mode::Unavailable);
    let server = fake.serve().await;
    let mut settings = edge();
    settings.max_retries = 0;
    let client = InventoryClient::new(&server.url(), &settings, budget()).unwrap();
    for _ in 0..5 {
        let _ = client.available(p, None).await;
    }
    assert_eq!(client.breaker().state(), State::Open);

    let (calls, connections) = (fake.get_calls(), fake.connections());
    for _ in 0..20 {
        let started = Instant::now();
        assert!(client.available(p, None).await.is_err());
        assert!(started.elapsed() < Duration::from_millis(20), "fails fast");
    }
    assert_eq!(fake.get_calls(), calls, "no call reached Inventory");
    assert_eq!(fake.connections(), connections, "no new connection");

    // After the break: exactly one trial, everyone else fails fast.
    fake.set_mode(Mode::Healthy);
    fake.set_get_delay(Duration::from_millis(200));
    let half_open = eventually(Duration::from_secs(3), || async {
        client.breaker().state() != State::Open
            || client.breaker().snapshot()["open_remaining_seconds"]
                .as_f64()
                .is_some_and(|s| s <= 0.0)
    })
    .await;
    assert!(half_open);
    let results = futures::future::join_all((0..10).map(|_| client.available(p, None))).await;
    assert_eq!(fake.get_calls(), calls + 1, "exactly one trial");
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert_eq!(
        client.breaker().state(),
        State::Closed,
        "the trial closed it"
    );
}

#[tokio::test]
async fn product_client_retries_503_no_earlier_than_retry_after() {
    let fake = FakeProduct::default();
    let p = Uuid::new_v4();
    fake.add(p, 99);
    fake.set_mode(ProductMode::Unavailable(Some(1)));
    let server = fake.serve().await;
    let mut settings = edge();
    settings.max_retries = 1;
    let client = ProductClient::new(&server.url(), &settings, budget()).unwrap();
    let result = client.price_cents(p, None).await;
    assert!(
        matches!(result, Err(CatalogError::Unavailable(_))),
        "{result:?}"
    );
    let times = fake.call_times();
    assert_eq!(times.len(), 2);
    assert!(
        times[1] - times[0] >= Duration::from_secs(1),
        "Retry-After honoured"
    );

    fake.set_mode(ProductMode::Healthy);
    assert_eq!(client.price_cents(p, None).await, Ok(Some(99)));
    assert_eq!(client.price_cents(Uuid::new_v4(), None).await, Ok(None));
}

#[tokio::test]
async fn product_client_never_retries_4xx_or_timeouts() {
    let fake = FakeProduct::default();
    let server = fake.serve().await;
    let client = ProductClient::new(&server.url(), &edge(), budget()).unwrap();
    fake.set_mode(ProductMode::BadRequest);
    assert!(client.price_cents(Uuid::new_v4(), None).await.is_err());
    assert_eq!(fake.calls(), 1);

    fake.set_mode(ProductMode::Hang);
    let started = Instant::now();
    assert!(client.price_cents(Uuid::new_v4(), None).await.is_err());
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(1),
        "{took:?}"
    );
    assert_eq!(fake.calls(), 2, "a timeout is not retried");

    fake.set_mode(ProductMode::Unavailable(None));
    assert!(client.price_cents(Uuid::new_v4(), None).await.is_err());
    assert_eq!(fake.calls(), 5, "503 retried twice");
    assert_eq!(retries_taken(client.budget()), 2);
}

#[tokio::test]
async fn product_client_retries_only_what_the_budget_allows() {
    let fake = FakeProduct::default();
    fake.set_mode(ProductMode::Unavailable(None));
    let server = fake.serve().await;
    let tight = RetryBudget::new(BudgetConfig {
        ratio: 0.0,
        min_retries_per_window: 1,
        window: Duration::from_secs(10),
    });
    let client = ProductClient::new(&server.url(), &edge(), tight).unwrap();
    for _ in 0..3 {
        assert!(client.price_cents(Uuid::new_v4(), None).await.is_err());
    }
    assert_eq!(fake.calls(), 4, "3 calls + the 1 retry the budget allowed");
}

#[tokio::test]
async fn product_client_refused_is_retried() {
    let fake = FakeProduct::default();
    let server = fake.serve().await;
    let url = server.url();
    server.stop().await;
    let client = ProductClient::new(&url, &edge(), budget()).unwrap();
    assert!(client.price_cents(Uuid::new_v4(), None).await.is_err());
    assert_eq!(retries_taken(client.budget()), 2);
}

#[tokio::test]
async fn inventory_caller_cancellation_is_not_a_failure() {
    let fake = FakeInventory::default();
    fake.set_mode(Mode::Hang);
    let server = fake.serve().await;
    let client = InventoryClient::new(&server.url(), &edge(), budget()).unwrap();
    for _ in 0..6 {
        // The caller gives up (drops the call) before the attempt times out.
        let gave_up = tokio::time::timeout(
            Duration::from_millis(50),
            client.available(Uuid::new_v4(), None),
        )
        .await;
        assert!(gave_up.is_err());
    }
    let snapshot = client.breaker().snapshot();
    assert_eq!(snapshot["failures_in_window"], 0, "{snapshot}");
    assert_eq!(client.breaker().state(), State::Closed);
    assert_eq!(retries_taken(client.budget()), 0);
}
