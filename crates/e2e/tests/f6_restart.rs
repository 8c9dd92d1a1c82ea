//! F6 (restart during retries). The services run in-process, so a SIGKILL
//! is an abort of the service's tasks (no drain, in-flight requests get no
//! answer) and the respawn a new `App` on the same port with the same
//! database ([`shopeasy_e2e::Cluster::kill`], `respawn`). A Postgres or
//! Redis restart is their proxy going down (closing every connection) and
//! up again.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use shopeasy_e2e::Service;
use support::{Fixture, REDIS_EDGES, assert_problem, key, redis_delete};

/// Kill `order`, POST with a key (502: nothing listens), respawn: the
/// keyed retry creates exactly one order (C1, C2); a GET over the gateway's
/// stale pooled connections is retried → 200 (R(2 s)).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_order_restart_loses_and_duplicates_nothing() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F6-ORDER", 10).await;
    let first = f.placed(&id, 1).await;
    let path = format!("/api/orders/{}", support::order_id(&first));

    f.cluster.kill(Service::Order).await;
    let k = key();
    let during = f.order(&id, 2, Some(&k)).await;
    assert_problem(&during, 502, false);
    f.cluster.respawn(Service::Order).await.unwrap();
    let start = tokio::time::Instant::now();
    f.assert_reads_recover(&path, Duration::from_secs(2), "R(2 s)")
        .await;
    let retry = f.order(&id, 2, Some(&k)).await;
    assert_eq!(retry.status, Some(201), "{}", retry.describe());
    let replay = f.order(&id, 2, Some(&k)).await;
    assert!(replay.replayed() && replay.body == retry.body, "C9");
    assert_eq!(f.order_count().await, 2, "C1: one order per key");
    eprintln!(
        "order answered again {:?} after the respawn",
        start.elapsed()
    );
    f.cluster.stop().await;
}

/// Kill `inventory`: an order with a cached stock is accepted `pending`;
/// after the respawn the worker confirms it (C8), reserved once (C7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_inventory_restart_pending_orders_are_confirmed() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed_cached("F6-INV", 10).await;
    f.cluster.kill(Service::Inventory).await;
    let order_id = f.pending(&id, 2).await;
    f.cluster.respawn(Service::Inventory).await.unwrap();
    f.assert_confirmed_and_reserved_once(&order_id, 2).await;
    f.cluster.stop().await;
}

/// Kill `product`: GET → 502; after the respawn GETs are 200 within 2 s,
/// and orders (order → product) succeed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_product_restart_recovers_within_two_seconds() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F6-PRODUCT", 10).await;
    assert_eq!(f.gateway.get("/api/products").await.status, Some(200));
    f.placed(&id, 1).await;
    f.cluster.kill(Service::Product).await;
    assert_problem(&f.gateway.get("/api/products").await, 502, false);
    f.cluster.respawn(Service::Product).await.unwrap();
    f.assert_reads_recover("/api/products", Duration::from_secs(2), "R(2 s)")
        .await;
    assert!(
        f.orders_recover(&id, None, Duration::from_secs(3)).await,
        "order → product recovers"
    );
    f.cluster.stop().await;
}

/// Postgres "restart" (order's proxy down, every connection closed, then
/// up): the pool drops the dead connections and recovers without a
/// service restart, R(5 s); a keyed retry creates one order (C1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_postgres_restart_pool_recovers() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed_cached("F6-PG", 10).await;
    let proxy = f.cluster.proxy("order-postgres").await;
    proxy.set_enabled(false).await;
    let k = key();
    let during = f.order(&id, 1, Some(&k)).await;
    assert_problem(&during, 503, true);
    proxy.set_enabled(true).await;
    assert!(
        f.orders_recover(&id, Some(&k), Duration::from_secs(5))
            .await,
        "R(5 s)"
    );
    assert_eq!(f.order_count().await, 2, "C1");
    f.cluster.stop().await;
}

/// Redis restart (proxies down, the product's keys deleted as a restart
/// without persistence loses them, proxies up): no errors while it is
/// gone, none once it is back cold (FAULTS.md F6: "cache cold, no
/// errors"); the product cache meets the cold entry (a miss) and hits
/// again after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_redis_restart_is_invisible() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F6-REDIS", 10).await;
    let path = format!("/api/products/{id}");
    assert_eq!(f.gateway.get(&path).await.status, Some(200));
    f.refuse(&REDIS_EDGES).await;
    assert_eq!(f.gateway.get(&path).await.status, Some(200));
    f.placed(&id, 1).await;
    // Its keys (product's entry, order's stock) all end with its UUID, so
    // no other test's are touched; nothing can write them back while the
    // proxies are down.
    let lost = redis_delete(&format!("*{id}")).await;
    let misses = f.product_cache("miss").await;
    for edge in REDIS_EDGES {
        f.cluster.proxy(edge).await.set_enabled(true).await;
    }
    for _ in 0..3 {
        assert_eq!(f.gateway.get(&path).await.status, Some(200));
        f.placed(&id, 1).await;
    }
    f.assert_product_cache_hits(
        &path,
        Duration::from_secs(10),
        "the product cache fills again",
    )
    .await;
    assert!(
        f.product_cache("miss").await > misses,
        "Redis came back cold (deleted {lost:?}), yet no product read missed"
    );
    f.cluster.stop().await;
}
