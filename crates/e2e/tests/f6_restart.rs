//! F6 (restart during retries). The services run in-process, so a SIGKILL
//! is an abort of the service's tasks (no drain, in-flight requests get no
//! answer) and the respawn a new `App` on the same port with the same
//! database ([`shopeasy_e2e::Cluster::kill`], `respawn`). A Postgres or
//! Redis restart is their proxy going down (closing every connection) and
//! up again.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use shopeasy_e2e::{Service, client::eventually};
use support::{Fixture, assert_problem, key};

/// Kill `order`, POST with a key (502: nothing listens), respawn: the
/// keyed retry creates exactly one order (C1, C2); a GET over the gateway's
/// stale pooled connections is retried → 200 (R(2 s)).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_order_restart_loses_and_duplicates_nothing() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.cluster.seed_product("F6-ORDER", 500, 10).await.unwrap();
    let id = product.id.to_string();
    let first = f.order(&id, 1, Some(&key())).await;
    assert_eq!(first.status, Some(201));
    let path = format!("/api/orders/{}", first.json()["id"].as_str().unwrap());

    f.cluster.kill(Service::Order).await;
    let k = key();
    let during = f.order(&id, 2, Some(&k)).await;
    assert_problem(&during, 502, false);
    f.cluster.respawn(Service::Order).await.unwrap();
    let start = tokio::time::Instant::now();
    assert!(
        eventually(Duration::from_secs(2), || async {
            f.gateway.get(&path).await.status == Some(200)
        })
        .await,
        "R(2 s)"
    );
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
    let product = f.cluster.seed_product("F6-INV", 500, 10).await.unwrap();
    let id = product.id.to_string();
    assert_eq!(f.order(&id, 1, Some(&key())).await.status, Some(201));
    f.cluster.kill(Service::Inventory).await;
    let pending = f.order(&id, 2, Some(&key())).await;
    assert_eq!(pending.status, Some(202), "{}", pending.describe());
    let order_id = pending.json()["id"].as_str().unwrap().to_owned();
    f.cluster.respawn(Service::Inventory).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            f.order_status(&order_id).await.as_deref() == Some("confirmed")
        })
        .await,
        "C8"
    );
    assert_eq!(f.reserved_for(&order_id).await, 2, "C7");
    f.cluster.stop().await;
}

/// Kill `product`: GET → 502; after the respawn GETs are 200 within 2 s,
/// and orders (order → product) succeed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_product_restart_recovers_within_two_seconds() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.cluster.seed_product("F6-PRODUCT", 500, 10).await.unwrap();
    let id = product.id.to_string();
    assert_eq!(f.gateway.get("/api/products").await.status, Some(200));
    assert_eq!(f.order(&id, 1, Some(&key())).await.status, Some(201));
    f.cluster.kill(Service::Product).await;
    assert_problem(&f.gateway.get("/api/products").await, 502, false);
    f.cluster.respawn(Service::Product).await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || async {
            f.gateway.get("/api/products").await.status == Some(200)
        })
        .await,
        "R(2 s)"
    );
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
    let product = f.cluster.seed_product("F6-PG", 500, 10).await.unwrap();
    let id = product.id.to_string();
    assert_eq!(f.order(&id, 1, Some(&key())).await.status, Some(201));
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

/// Redis "restart" (proxies down then up): no errors while it is gone,
/// the caches work again after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_redis_restart_is_invisible() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.cluster.seed_product("F6-REDIS", 500, 10).await.unwrap();
    let id = product.id.to_string();
    let path = format!("/api/products/{id}");
    assert_eq!(f.gateway.get(&path).await.status, Some(200));
    for edge in ["product-redis", "order-redis"] {
        f.cluster.proxy(edge).await.set_enabled(false).await;
    }
    assert_eq!(f.gateway.get(&path).await.status, Some(200));
    assert_eq!(f.order(&id, 1, Some(&key())).await.status, Some(201));
    for edge in ["product-redis", "order-redis"] {
        f.cluster.proxy(edge).await.set_enabled(true).await;
    }
    for _ in 0..3 {
        assert_eq!(f.gateway.get(&path).await.status, Some(200));
        assert_eq!(f.order(&id, 1, Some(&key())).await.status, Some(201));
    }
    f.cluster.stop().await;
}
