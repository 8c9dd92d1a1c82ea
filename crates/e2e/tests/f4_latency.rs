//! F4 (added latency), once below and once above each edge's deadline.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use support::{
    Fixture, REDIS_EDGES, REDIS_FAULT_ORDER_BOUND, assert_problem, assert_problem_within,
    assert_reads_and_orders_degrade, key, toxics::latency,
};

/// `GET path` through the gateway, and the attempts it made at `route`
/// for it (A(n)).
async fn attempts_of(f: &Fixture, route: &str, path: &str) -> (shopeasy_e2e::Answer, f64) {
    let before = f.gateway_attempts(route).await;
    let answer = f.gateway.get(path).await;
    (answer, f.gateway_attempts(route).await - before)
}

/// gateway → order and gateway → product: below the activity timeout the
/// answer is a success, not retried (A(1)), about base + L; above it, 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_gateway_latency_below_succeeds_once_above_is_504() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F4-GW", 10).await;
    let placed = f.order(&id, 1, Some(&key())).await;
    let order_path = format!("/api/orders/{}", support::order_id(&placed));
    for (edge, route, path) in [
        ("gateway-order", "order", order_path.as_str()),
        ("gateway-product", "product", "/api/products"),
    ] {
        let proxy = f.add_toxic(edge, latency(300).named("slow")).await;
        let (answer, attempts) = attempts_of(&f, route, path).await;
        assert_eq!(answer.status, Some(200), "{edge}: {}", answer.describe());
        assert!(
            answer.elapsed >= Duration::from_millis(300),
            "{edge}: {}",
            answer.describe()
        );
        support::assert_within(&answer, Duration::from_millis(900), edge);
        assert_eq!(attempts, 1.0, "{edge}: A(1)");

        proxy.update_toxic(latency(1_300).named("slow")).unwrap();
        let (answer, attempts) = attempts_of(&f, route, path).await;
        assert_problem_within(&answer, 504, false, Duration::from_millis(1_400));
        assert_eq!(attempts, 1.0, "{edge}: A(1)");
        proxy.remove_all_toxics();
    }
    f.cluster.stop().await;
}

/// order → inventory: 150 ms (below the 300 ms attempt deadline) succeeds
/// without a retry and the breaker stays closed; 450 ms times out once
/// (A(1)) and the stale cache answers 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_order_inventory_latency_below_and_above_the_attempt_deadline() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F4-INV", 50).await;
    let proxy = f
        .add_toxic("order-inventory", latency(150).named("slow"))
        .await;
    let retries = f.inventory_retries().await;
    for _ in 0..3 {
        f.placed(&id, 1).await;
    }
    assert_eq!(f.inventory_retries().await, retries, "A(1)");
    assert_eq!(f.breaker_state("inventory").await, "closed");

    proxy.update_toxic(latency(450).named("slow")).unwrap();
    let answer = f.order(&id, 1, Some(&key())).await;
    // Stale stock → 202 pending, within L.
    support::assert_answers(&answer, 202, Duration::from_millis(900));
    assert_eq!(
        f.inventory_retries().await,
        retries,
        "a timeout is never retried"
    );
    f.cluster.stop().await;
}

/// order → product: below the per-attempt timeout A(1) and 201; above it
/// one timed-out attempt (not retried) and 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_order_product_latency_below_and_above_the_attempt_timeout() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F4-PRODUCT", 50).await;
    let proxy = f
        .add_toxic("order-product", latency(150).named("slow"))
        .await;
    let retried = f.downstream_retries("product", "retried").await;
    f.placed(&id, 1).await;
    proxy.update_toxic(latency(450).named("slow")).unwrap();
    let answer = f.order(&id, 1, Some(&key())).await;
    assert_problem(&answer, 503, true);
    assert_eq!(
        f.downstream_retries("product", "retried").await,
        retried,
        "A(1)"
    );
    f.cluster.stop().await;
}

/// service → Postgres: +L per round trip shows as base + round trips × L;
/// a read of one order takes a handful of round trips, not one per line
/// (no N+1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_order_postgres_latency_adds_per_round_trip() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let mut items = Vec::new();
    for i in 0..10 {
        let p = f.seed(&format!("F4-PG-{i}"), 50).await;
        items.push(serde_json::json!({"product_id": p, "quantity": 1}));
    }
    let body = serde_json::json!({"items": items});
    let placed = f
        .gateway
        .post_json("/api/orders", &body, Some(&key()))
        .await;
    assert_eq!(placed.status, Some(201), "{}", placed.describe());
    let path = format!("/api/orders/{}", support::order_id(&placed));
    let mut base = Duration::MAX;
    for _ in 0..5 {
        base = base.min(f.gateway.get(&path).await.elapsed);
    }
    f.add_toxic("order-postgres", latency(50)).await;
    let mut slow = Duration::MAX;
    for _ in 0..3 {
        let answer = f.gateway.get(&path).await;
        assert_eq!(answer.status, Some(200), "{}", answer.describe());
        slow = slow.min(answer.elapsed);
    }
    let added = slow.saturating_sub(base);
    // Ten lines: an N+1 read would add ≥ 11 × 50 ms.
    assert!(
        added >= Duration::from_millis(50) && added < Duration::from_millis(5 * 50 + 100),
        "added {added:?} (base {base:?})"
    );
    f.cluster.stop().await;
}

/// service → Redis: latency above the Redis timeout is treated as
/// unavailable: reads and orders still succeed, each within a small bound
/// (a Redis call waits its timeout, never the 300 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_redis_latency_above_its_timeout_degrades() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F4-REDIS", 10).await;
    for edge in REDIS_EDGES {
        f.add_toxic(edge, latency(300)).await;
    }
    assert_reads_and_orders_degrade(&f, &id, Duration::from_millis(300), REDIS_FAULT_ORDER_BOUND)
        .await;
    f.cluster.stop().await;
}
