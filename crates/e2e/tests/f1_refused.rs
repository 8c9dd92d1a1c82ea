//! F1 (refused: the edge's proxy is `down`) on every edge FAULTS.md names.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use shopeasy_e2e::Service;
use support::{
    Fixture, REDIS_EDGES, assert_bad_gateway_within, assert_fails_fast, assert_problem,
    assert_problem_within, assert_redis_fault_degrades, key,
};

/// `shopeasy_gateway_retries_total{outcome="retried"}`.
async fn gateway_retries(f: &Fixture) -> f64 {
    f.counter("shopeasy_gateway_retries_total", &[("outcome", "retried")])
        .await
}

/// gateway → order, GET: A(3) with jitter from the budget, then 502 in
/// < 1 s, problem+json with `Proxy-Status`. No breaker at the gateway: the
/// next call tries again (A(3) again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_gateway_order_get_is_retried_twice_then_502() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    f.refuse(&["gateway-order"]).await;
    for _ in 0..2 {
        let before = f.gateway_attempts("order").await;
        let retried = gateway_retries(&f).await;
        let answer = f
            .gateway
            .get(&format!("/api/orders/{}", uuid::Uuid::new_v4()))
            .await;
        assert_bad_gateway_within(&answer, Duration::from_secs(1));
        assert_eq!(f.gateway_attempts("order").await - before, 3.0, "A(3)");
        assert_eq!(gateway_retries(&f).await - retried, 2.0);
    }
    f.cluster.stop().await;
}

/// gateway → order, POST without a key: never repeated (A(1)), 502, no
/// order. With a key: A(3), 502, no order (C3); the same key after the
/// heal creates exactly one (C1, R).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_gateway_order_post_is_repeated_only_with_a_key() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F1-POST", 10).await;
    f.refuse(&["gateway-order"]).await;

    let before = f.gateway_attempts("order").await;
    let plain = f.order(&id, 1, None).await;
    assert_problem(&plain, 502, false);
    assert_eq!(
        f.gateway_attempts("order").await - before,
        1.0,
        "plain POST: A(1)"
    );

    let k = key();
    let before = f.gateway_attempts("order").await;
    let keyed = f.order(&id, 1, Some(&k)).await;
    assert_problem_within(&keyed, 502, false, Duration::from_secs(1));
    assert_eq!(
        f.gateway_attempts("order").await - before,
        3.0,
        "keyed POST: A(3)"
    );
    assert_eq!(f.order_count().await, 0, "C3: no order while refused");

    f.cluster.heal().await;
    let healed = f.order(&id, 1, Some(&k)).await;
    assert_eq!(healed.status, Some(201), "{}", healed.describe());
    let again = f.order(&id, 1, Some(&k)).await;
    assert_eq!(again.status, Some(201));
    assert!(again.replayed());
    assert_eq!(again.body, healed.body, "C9");
    assert_eq!(f.order_count().await, 1, "C1");
    f.cluster.stop().await;
}

/// gateway → product, GET: A(3) then 502 in < 1 s; the budget counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_gateway_product_get_is_retried_twice_then_502() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    f.refuse(&["gateway-product"]).await;
    let before = f.gateway_attempts("product").await;
    let answer = f.gateway.get("/api/products").await;
    assert_problem_within(&answer, 502, false, Duration::from_secs(1));
    // The order service's product client shares the label; nothing else
    // calls product here.
    assert_eq!(f.gateway_attempts("product").await - before, 3.0, "A(3)");
    f.cluster.heal().await;
    assert_eq!(f.gateway.get("/api/products").await.status, Some(200), "R");
    f.cluster.stop().await;
}

/// order → inventory refused: UNAVAILABLE retried (A(3)) while closed;
/// a product with a cached stock answers 202 pending (+ outbox row), one
/// with none 503 + Retry-After; the breaker opens; after the heal the
/// pending order is confirmed (C8) and reserved once (C7), new orders 201.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_order_inventory_refused_goes_pending_opens_the_breaker_and_recovers() {
    let Some(f) = Fixture::start(|o| {
        // The outbox worker leaves the deferred order alone for 1 s, so the
        // retries counted right after the answer are the request's own.
        o.order.outbox.initial_backoff_seconds = shopeasy_runtime::settings::Seconds::new(1.0);
    })
    .await
    else {
        return;
    };
    let cached = f.seed_cached("F1-INV-CACHED", 10).await;
    let uncached = f.seed("F1-INV-NEW", 10).await;

    f.refuse(&["order-inventory"]).await;
    let retries = f.inventory_retries().await;
    let pending = f.order(&cached, 2, Some(&key())).await;
    assert_eq!(
        pending.status,
        Some(202),
        "stale cache → 202: {}",
        pending.describe()
    );
    assert!(pending.header("location").is_some());
    let pending_id = support::order_id(&pending);
    // Whether the stock check was fresh (the reservation failed) or stale
    // (the refresh failed, the reservation deferred), one call met the
    // refusal: retried exactly twice.
    assert_eq!(
        f.inventory_retries().await - retries,
        2.0,
        "A(3) while closed"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE order_id = $1")
        .bind(&pending_id)
        .fetch_one(f.cluster.order_db())
        .await
        .unwrap();
    assert_eq!(rows, 1, "outbox row beside the pending order");

    let refused = f.order(&uncached, 1, Some(&key())).await;
    assert_problem(&refused, 503, true);
    // Keep calling until the breaker opens (≥ 5 calls, ≥ 50 % failed).
    let mut calls = 0;
    while f.breaker_state("inventory").await != "open" && calls < 10 {
        let _ = f.order(&uncached, 1, Some(&key())).await;
        calls += 1;
    }
    assert!(
        f.breaker_opened("inventory").await,
        "CB after {calls} more calls"
    );
    let fast = f.order(&uncached, 1, Some(&key())).await;
    assert_problem(&fast, 503, true);
    assert_fails_fast(&fast, Duration::from_millis(250));

    f.cluster.heal().await;
    // R(break + trial): the worker's trial closes the breaker and
    // confirms the pending order.
    f.assert_confirmed_and_reserved_once(&pending_id, 2).await;
    assert!(
        f.orders_recover(&uncached, None, Duration::from_secs(5))
            .await,
        "R: new orders confirmed"
    );
    f.cluster.stop().await;
}

/// order → product refused: retried from the budget, then 503 +
/// Retry-After and no order row (C3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_order_product_refused_is_503_without_an_order() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F1-PRODUCT", 10).await;
    f.refuse(&["order-product"]).await;
    let (answer, retries) = f.order_counting_product_retries(&id).await;
    assert_problem(&answer, 503, true);
    assert!(
        (1.0..=2.0).contains(&retries),
        "A ≤ 3 with retries: {retries}"
    );
    assert_eq!(f.order_count().await, 0, "C3");
    f.heal_and_assert_orders_recover(&id, Duration::from_secs(5))
        .await;
    f.cluster.stop().await;
}

/// service → Postgres refused (order): ready 503 while live 200; a write
/// answers 503 + Retry-After within acquire timeout + slack, no partial
/// rows; R(5 s) when the proxy comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_order_postgres_refused_is_503_and_not_ready() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F1-PG", 10).await;
    f.refuse(&["order-postgres"]).await;
    assert_eq!(f.health(Service::Order, "ready").await, 503, "not ready");
    assert_eq!(f.health(Service::Order, "live").await, 200, "still live");
    let k = key();
    let answer = f.order(&id, 1, Some(&k)).await;
    // L(acquire timeout 0.5 s + 100 ms), with slack for a loaded machine.
    assert_problem_within(&answer, 503, true, Duration::from_millis(900));
    assert_eq!(f.order_count().await, 0, "no partial rows");
    f.cluster.heal().await;
    assert!(
        f.orders_recover(&id, Some(&k), Duration::from_secs(5))
            .await,
        "R(5 s)"
    );
    assert_eq!(f.order_count().await, 1, "C1: one order for the key");
    f.cluster.stop().await;
}

/// service → Redis refused: product reads bypass the cache (200), orders
/// are unaffected (201), each within a small bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_redis_refused_degrades_to_postgres_and_in_process() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F1-REDIS", 10).await;
    f.refuse(&REDIS_EDGES).await;
    assert_redis_fault_degrades(&f, &id).await;
    f.cluster.stop().await;
}
