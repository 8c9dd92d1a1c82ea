//! F5 (slow body): `slicer` trickles bytes with gaps; what is cut is
//! silence (activity), not total time.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use support::{
    Fixture, REDIS_EDGES, assert_problem_within, assert_redis_fault_degrades, key, toxics::slicer,
};

/// gateway → order: gaps shorter than the activity timeout → the answer
/// completes although it takes longer than that timeout in total (the
/// negative test); gaps longer → cut off (504, or the stream aborted once
/// headers went out), never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_gateway_order_cuts_silence_not_slowness() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F5-GW", 10).await;
    let placed = f.order(&id, 1, Some(&key())).await;
    let path = format!("/api/orders/{}", support::order_id(&placed));
    let proxy = f
        .add_toxic(
            "gateway-order",
            slicer(64, Duration::from_millis(300)).named("slow"),
        )
        .await;
    let answer = f.gateway.get(&path).await;
    assert_eq!(answer.status, Some(200), "{}", answer.describe());
    assert_eq!(answer.body, placed.body, "the whole body arrived");
    assert!(
        answer.elapsed > Duration::from_secs(1),
        "longer than the activity timeout: {:?}",
        answer.elapsed
    );

    proxy
        .update_toxic(slicer(64, Duration::from_millis(1_500)).named("slow"))
        .unwrap();
    let answer = f.gateway.get(&path).await;
    assert!(
        answer.status == Some(504) || answer.error.is_some(),
        "cut off: {}",
        answer.describe()
    );
    assert!(
        answer.elapsed < Duration::from_millis(2_000),
        "{}",
        answer.describe()
    );
    f.cluster.stop().await;
}

/// order → product: the per-attempt timeout covers the body, not just the
/// headers: a trickled product ends in 503 within timeout + ε, no order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_order_product_attempt_timeout_covers_the_body() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F5-PRODUCT", 10).await;
    f.add_toxic("order-product", slicer(16, Duration::from_millis(100)))
        .await;
    let answer = f.order(&id, 1, Some(&key())).await;
    assert_problem_within(&answer, 503, true, Duration::from_millis(900));
    assert_eq!(f.order_count().await, 0, "C3");
    f.cluster.stop().await;
}

/// order → inventory: a trickled answer is bounded by the attempt deadline
/// (A(1)), leaves no partial reservation, and the order is confirmed once
/// healed (C4, C7, C8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_order_inventory_trickle_is_bounded_by_the_attempt_deadline() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed_cached("F5-INV", 10).await;
    f.add_toxic("order-inventory", slicer(4, Duration::from_millis(100)))
        .await;
    let retries = f.inventory_retries().await;
    let order_id = f.pending(&id, 2).await;
    assert_eq!(f.inventory_retries().await, retries, "A(1)");
    f.cluster.heal().await;
    f.assert_confirmed_and_reserved_once(&order_id, 2).await;
    f.cluster.stop().await;
}

/// service → Redis: slow replies beyond the Redis timeout degrade, within
/// the bound of the F1 and F3 cells (a Redis call waits its timeout, never
/// the trickle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_redis_slow_replies_degrade() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F5-REDIS", 10).await;
    for edge in REDIS_EDGES {
        f.add_toxic(edge, slicer(1, Duration::from_millis(100)))
            .await;
    }
    assert_redis_fault_degrades(&f, &id).await;
    f.cluster.stop().await;
}
