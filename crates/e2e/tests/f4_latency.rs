//! F4 (added latency), once below and once above each edge's deadline.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use shopeasy_faults::{Stream, Toxic, ToxicKind};
use support::{Fixture, assert_problem, key};

fn latency(ms: u64) -> Toxic {
    Toxic::new(
        ToxicKind::Latency {
            latency: ms,
            jitter: 0,
        },
        Stream::Downstream,
    )
}

/// gateway → order and gateway → product: below the activity timeout the
/// answer is a success, not retried (A(1)), about base + L; above it, 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_gateway_latency_below_succeeds_once_above_is_504() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.cluster.seed_product("F4-GW", 500, 10).await.unwrap();
    let placed = f.order(&product.id.to_string(), 1, Some(&key())).await;
    let order_path = format!("/api/orders/{}", placed.json()["id"].as_str().unwrap());
    for (edge, route, path) in [
        ("gateway-order", "order", order_path.as_str()),
        ("gateway-product", "product", "/api/products"),
    ] {
        let proxy = f.cluster.proxy(edge).await;
        proxy.add_toxic(latency(300).named("slow")).unwrap();
        let before = f.gateway_attempts(route).await;
        let answer = f.gateway.get(path).await;
        assert_eq!(answer.status, Some(200), "{edge}: {}", answer.describe());
        assert!(
            answer.elapsed >= Duration::from_millis(300),
            "{edge}: {}",
            answer.describe()
        );
        assert!(
            answer.elapsed < Duration::from_millis(900),
            "{edge}: {}",
            answer.describe()
        );
        assert_eq!(
            f.gateway_attempts(route).await - before,
            1.0,
            "{edge}: A(1)"
        );

        proxy.update_toxic(latency(1_300).named("slow")).unwrap();
        let before = f.gateway_attempts(route).await;
        let answer = f.gateway.get(path).await;
        assert_problem(&answer, 504, false);
        assert!(
            answer.elapsed < Duration::from_millis(1_400),
            "{edge}: {}",
            answer.describe()
        );
        assert_eq!(
            f.gateway_attempts(route).await - before,
            1.0,
            "{edge}: A(1)"
        );
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
    let product = f.cluster.seed_product("F4-INV", 500, 50).await.unwrap();
    let id = product.id.to_string();
    let proxy = f.cluster.proxy("order-inventory").await;
    proxy.add_toxic(latency(150).named("slow")).unwrap();
    let retries = f.inventory_retries().await;
    for _ in 0..3 {
        let answer = f.order(&id, 1, Some(&key())).await;
        assert_eq!(answer.status, Some(201), "{}", answer.describe());
    }
    assert_eq!(f.inventory_retries().await, retries, "A(1)");
    assert_eq!(f.breaker_state("inventory").await, "closed");

    proxy.update_toxic(latency(450).named("slow")).unwrap();
    let answer = f.order(&id, 1, Some(&key())).await;
    assert_eq!(
        answer.status,
        Some(202),
        "stale → 202: {}",
        answer.describe()
    );
    assert!(
        answer.elapsed < Duration::from_millis(900),
        "{}",
        answer.describe()
    );
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
    let product = f.cluster.seed_product("F4-PRODUCT", 500, 50).await.unwrap();
    let id = product.id.to_string();
    let labels = [("target", "product"), ("outcome", "retried")];
    let proxy = f.cluster.proxy("order-product").await;
    proxy.add_toxic(latency(150).named("slow")).unwrap();
    let retried = f
        .counter("shopeasy_downstream_retries_total", &labels)
        .await;
    let answer = f.order(&id, 1, Some(&key())).await;
    assert_eq!(answer.status, Some(201), "{}", answer.describe());
    proxy.update_toxic(latency(450).named("slow")).unwrap();
    let answer = f.order(&id, 1, Some(&key())).await;
    assert_problem(&answer, 503, true);
    assert_eq!(
        f.counter("shopeasy_downstream_retries_total", &labels)
            .await,
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
        let p = f
            .cluster
            .seed_product(&format!("F4-PG-{i}"), 100, 50)
            .await
            .unwrap();
        items.push(serde_json::json!({"product_id": p.id.to_string(), "quantity": 1}));
    }
    let body = serde_json::json!({"customer_id": "e2e", "items": items});
    let placed = f
        .gateway
        .post_json("/api/orders", &body, Some(&key()))
        .await;
    assert_eq!(placed.status, Some(201), "{}", placed.describe());
    let path = format!("/api/orders/{}", placed.json()["id"].as_str().unwrap());
    let mut base = Duration::MAX;
    for _ in 0..5 {
        base = base.min(f.gateway.get(&path).await.elapsed);
    }
    f.cluster
        .proxy("order-postgres")
        .await
        .add_toxic(latency(50))
        .unwrap();
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
/// unavailable: reads and orders still succeed within a small bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_redis_latency_above_its_timeout_degrades() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.cluster.seed_product("F4-REDIS", 500, 10).await.unwrap();
    let id = product.id.to_string();
    f.cluster
        .proxy("product-redis")
        .await
        .add_toxic(latency(300))
        .unwrap();
    f.cluster
        .proxy("order-redis")
        .await
        .add_toxic(latency(300))
        .unwrap();
    for _ in 0..3 {
        let read = f.gateway.get(&format!("/api/products/{id}")).await;
        assert_eq!(read.status, Some(200), "{}", read.describe());
        assert!(
            read.elapsed < Duration::from_millis(300),
            "{}",
            read.describe()
        );
        let placed = f.order(&id, 1, Some(&key())).await;
        assert_eq!(placed.status, Some(201), "{}", placed.describe());
    }
    f.cluster.stop().await;
}
