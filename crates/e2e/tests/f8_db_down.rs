//! F8 (the upstream's database down): the proxy in front of a service's
//! Postgres is `down`, and its callers see what SPEC promises.
//! (order's own Postgres down through the gateway is
//! `f1_refused::f1_order_postgres_refused_is_503_and_not_ready`.)

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::{collections::BTreeMap, time::Duration};

use shopeasy_e2e::invariants;
use support::{Fixture, assert_problem, assert_problem_within, key};

/// product's Postgres down: a cached read is still 200; an uncached one is
/// 503 fast (acquire timeout + ε).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f8_product_postgres_down_cached_reads_still_answer() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let cached = f.seed("F8-CACHED", 10).await;
    let path = format!("/api/products/{cached}");
    assert_eq!(f.gateway.get(&path).await.status, Some(200));
    f.refuse(&["product-postgres"]).await;
    let read = f.gateway.get(&path).await;
    assert_eq!(read.status, Some(200), "cached: {}", read.describe());
    let uncached = f
        .gateway
        .get(&format!("/api/products/{}", uuid::Uuid::new_v4()))
        .await;
    assert_problem_within(&uncached, 503, false, Duration::from_millis(900));
    f.cluster.stop().await;
}

/// inventory's Postgres down: Inventory answers UNAVAILABLE quickly (not a
/// hang), the order goes `pending` on the stale cache, and after the heal
/// it is confirmed (C8) with stock conserved (C4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f8_inventory_postgres_down_orders_wait_pending() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed_cached("F8-INV", 10).await;
    f.refuse(&["inventory-postgres"]).await;
    let answer = f.order(&id, 2, Some(&key())).await;
    support::assert_answers(&answer, 202, Duration::from_millis(900));
    let order_id = support::order_id(&answer);
    f.cluster.heal().await;
    f.assert_confirmed_within(&order_id, Duration::from_secs(10), "C8")
        .await;
    let initial = BTreeMap::from([(id, 10)]);
    let broken = invariants::stock_conservation(f.cluster.inventory_db(), &initial)
        .await
        .unwrap();
    assert!(broken.is_empty(), "{broken:?}");
    f.cluster.stop().await;
}

/// product's Postgres down, seen from order → product: an uncached
/// product cannot be priced → 503 + Retry-After, no order row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f8_product_postgres_down_order_answers_503() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    f.refuse(&["product-postgres"]).await;
    let answer = f
        .order(&uuid::Uuid::new_v4().to_string(), 1, Some(&key()))
        .await;
    assert_problem(&answer, 503, true);
    assert_eq!(f.order_count().await, 0, "C3");
    f.cluster.stop().await;
}
