//! F3 (black hole: a `timeout` toxic with 0, data is swallowed and the
//! connection stays open) on every edge. A frozen process (SIGSTOP) looks
//! the same from the network: in-process services cannot be frozen, so the
//! toxic stands in for it.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use shopeasy_e2e::{Answer, Service};
use support::{
    Fixture, REDIS_EDGES, assert_fails_fast, assert_problem, assert_problem_within,
    assert_redis_fault_degrades, key, toxics::hang,
};

/// Activity timeout of the fast settings, and the slack a loaded two-core
/// machine needs on top of FAULTS.md's 200 ms.
const ACTIVITY: Duration = Duration::from_secs(1);
const SLACK: Duration = Duration::from_millis(400);

/// L: a 504 at the activity timeout, not before it and not much after.
fn assert_cut_at_the_activity_timeout(answer: &Answer) {
    assert_problem(answer, 504, false);
    assert!(
        answer.elapsed >= ACTIVITY && answer.elapsed < ACTIVITY + SLACK,
        "L(activity + slack): {}",
        answer.describe()
    );
}

/// gateway → order: no headers for the activity timeout → 504 with
/// `Proxy-Status`, not retried (A(1)); the order service's work is
/// cancelled or finished, and a keyed retry afterwards sees one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_gateway_order_hang_is_504_at_the_activity_timeout() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F3-GW", 10).await;
    f.add_toxic("gateway-order", hang()).await;

    let before = f.gateway_attempts("order").await;
    let get = f
        .gateway
        .get(&format!("/api/orders/{}", uuid::Uuid::new_v4()))
        .await;
    assert_cut_at_the_activity_timeout(&get);
    assert!(get.header("proxy-status").is_some());
    assert_eq!(f.gateway_attempts("order").await - before, 1.0, "A(1)");

    let k = key();
    let before = f.gateway_attempts("order").await;
    let post = f.order(&id, 1, Some(&k)).await;
    assert_problem_within(&post, 504, false, ACTIVITY + SLACK);
    assert_eq!(
        f.gateway_attempts("order").await - before,
        1.0,
        "A(1): not retried"
    );

    f.cluster.heal().await;
    let retry = f.order(&id, 1, Some(&k)).await;
    assert!(
        matches!(retry.status, Some(201 | 409)),
        "replay, resumed completion or in progress: {}",
        retry.describe()
    );
    assert!(f.order_count().await <= 1, "C1");
    f.cluster.stop().await;
}

/// gateway → product: the same 504 at the activity timeout; the gateway
/// never hangs its caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_gateway_product_hang_is_504_at_the_activity_timeout() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    f.add_toxic("gateway-product", hang()).await;
    assert_cut_at_the_activity_timeout(&f.gateway.get("/api/products").await);
    f.cluster.heal().await;
    f.assert_reads_recover("/api/products", Duration::from_secs(3), "R")
        .await;
    f.cluster.stop().await;
}

/// order → inventory: every attempt ends at its deadline (0.3 s), is never
/// retried (A(1)) and counts toward the breaker; a stale cache answers 202;
/// the breaker opens and calls fail fast; after the heal the pending
/// orders are confirmed (C8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_order_inventory_hang_times_out_once_per_attempt_and_opens_the_breaker() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed_cached("F3-INV", 50).await;
    f.add_toxic("order-inventory", hang()).await;

    let retries = f.inventory_retries().await;
    let mut pending = Vec::new();
    while !f.breaker_opened("inventory").await {
        let answer = f.order(&id, 1, Some(&key())).await;
        // Stale stock → 202 pending; the stock check may be fresh or
        // stale, the reserve times out (L).
        support::assert_answers(&answer, 202, Duration::from_millis(900));
        pending.push(support::order_id(&answer));
        assert!(
            pending.len() <= 10,
            "CB: still closed after {} orders",
            pending.len()
        );
    }
    assert_eq!(
        f.inventory_retries().await,
        retries,
        "A(1): timeouts are never retried"
    );
    let fast = f.order(&id, 1, Some(&key())).await;
    assert_eq!(fast.status, Some(202), "{}", fast.describe());
    assert_fails_fast(&fast, Duration::from_millis(200));
    pending.push(support::order_id(&fast));

    f.cluster.heal().await;
    for id in &pending {
        f.assert_confirmed_within(id, Duration::from_secs(15), "C8")
            .await;
        assert_eq!(f.reserved_for(id).await, 1, "C7");
    }
    f.cluster.stop().await;
}

/// order → product: the per-attempt timeout ends the call, not retried
/// (A(1)); the order answers 503 + Retry-After, no order row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_order_product_hang_is_one_timed_out_attempt() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F3-PRODUCT", 10).await;
    f.add_toxic("order-product", hang()).await;
    let (answer, retries) = f.order_counting_product_retries(&id).await;
    assert_problem_within(&answer, 503, true, Duration::from_millis(800));
    assert_eq!(retries, 0.0, "A(1)");
    assert_eq!(f.order_count().await, 0, "C3");
    f.cluster.stop().await;
}

/// order → Postgres hangs: requests are bounded (503, not a hang past the
/// gateway), `/health/ready` turns 503, and R once the proxy heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_order_postgres_hang_is_bounded_and_recovers() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F3-PG", 10).await;
    f.add_toxic("order-postgres", hang()).await;
    let answer = f.order(&id, 1, Some(&key())).await;
    assert!(
        matches!(answer.status, Some(503)),
        "bounded by the pool's timeouts: {}",
        answer.describe()
    );
    assert_eq!(f.health(Service::Order, "ready").await, 503);
    f.heal_and_assert_orders_recover(&id, Duration::from_secs(10))
        .await;
    f.cluster.stop().await;
}

/// service → Redis hangs: every Redis call has its own short timeout, so
/// product reads (200) and orders (201) stay within base + Redis timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_redis_hang_degrades_within_the_redis_timeout() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F3-REDIS", 10).await;
    for edge in REDIS_EDGES {
        f.add_toxic(edge, hang()).await;
    }
    assert_redis_fault_degrades(&f, &id).await;
    f.cluster.stop().await;
}

/// order → inventory, a reservation stuck on a row lock at Inventory's
/// database: the attempt deadline (0.3 s, sent as `grpc-timeout`) cancels
/// the query *on the database server* — `pg_stat_activity` never shows a
/// query of Inventory waiting longer than a second — and the order waits
/// `pending` until the lock goes (C8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_inventory_deadline_cancels_the_query_on_the_server() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed_cached("F3-CANCEL", 10).await;
    let db = f.cluster.inventory_db();
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(db)
        .await
        .unwrap();
    let mut lock = db.begin().await.unwrap();
    sqlx::query("SELECT available FROM stock WHERE product_id = $1 FOR UPDATE")
        .bind(&id)
        .execute(&mut *lock)
        .await
        .unwrap();

    let order_id = f.pending(&id, 2).await;
    // Watch for 2.5 s (the outbox worker keeps trying meanwhile).
    let watch_until = tokio::time::Instant::now() + Duration::from_millis(2_500);
    let mut seen_waiting = false;
    while tokio::time::Instant::now() < watch_until {
        let waiting: Vec<(i32, f64)> = sqlx::query_as(
            "SELECT pid, EXTRACT(EPOCH FROM now() - query_start)::FLOAT8 FROM pg_stat_activity \
             WHERE datname = $1 AND wait_event_type = 'Lock' AND state = 'active'",
        )
        .bind(&name)
        .fetch_all(f.cluster.order_db())
        .await
        .unwrap();
        seen_waiting |= !waiting.is_empty();
        assert!(
            waiting.iter().all(|(_, age)| *age < 1.0),
            "a query outlived its caller's deadline on the server: {waiting:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen_waiting, "the reservation did reach the lock");
    lock.rollback().await.unwrap();
    f.assert_confirmed_within(&order_id, Duration::from_secs(10), "C8")
        .await;
    f.cluster.stop().await;
}
