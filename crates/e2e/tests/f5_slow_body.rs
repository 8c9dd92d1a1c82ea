//! F5 (slow body): `slicer` trickles bytes with gaps; what is cut is
//! silence (activity), not total time.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use shopeasy_e2e::client::eventually;
use shopeasy_faults::{Stream, Toxic, ToxicKind};
use support::{Fixture, assert_problem, key};

fn slicer(size: u64, gap: Duration) -> Toxic {
    Toxic::new(
        ToxicKind::Slicer {
            average_size: size,
            size_variation: 0,
            delay: u64::try_from(gap.as_micros()).unwrap(),
        },
        Stream::Downstream,
    )
}

/// gateway → order: gaps shorter than the activity timeout → the answer
/// completes although it takes longer than that timeout in total (the
/// negative test); gaps longer → cut off (504, or the stream aborted once
/// headers went out), never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_gateway_order_cuts_silence_not_slowness() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.cluster.seed_product("F5-GW", 500, 10).await.unwrap();
    let placed = f.order(&product.id.to_string(), 1, Some(&key())).await;
    let path = format!("/api/orders/{}", placed.json()["id"].as_str().unwrap());
    let proxy = f.cluster.proxy("gateway-order").await;

    proxy
        .add_toxic(slicer(64, Duration::from_millis(300)).named("slow"))
        .unwrap();
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
    let product = f.cluster.seed_product("F5-PRODUCT", 500, 10).await.unwrap();
    f.cluster
        .proxy("order-product")
        .await
        .add_toxic(slicer(16, Duration::from_millis(100)))
        .unwrap();
    let answer = f.order(&product.id.to_string(), 1, Some(&key())).await;
    assert_problem(&answer, 503, true);
    assert!(
        answer.elapsed < Duration::from_millis(900),
        "L: {}",
        answer.describe()
    );
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
    let product = f.cluster.seed_product("F5-INV", 500, 10).await.unwrap();
    let id = product.id.to_string();
    assert_eq!(f.order(&id, 1, Some(&key())).await.status, Some(201));
    f.cluster
        .proxy("order-inventory")
        .await
        .add_toxic(slicer(4, Duration::from_millis(100)))
        .unwrap();
    let retries = f.inventory_retries().await;
    let answer = f.order(&id, 2, Some(&key())).await;
    assert_eq!(answer.status, Some(202), "{}", answer.describe());
    assert_eq!(f.inventory_retries().await, retries, "A(1)");
    let order_id = answer.json()["id"].as_str().unwrap().to_owned();
    f.cluster.heal().await;
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

/// service → Redis: slow replies beyond the Redis timeout degrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_redis_slow_replies_degrade() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = f.cluster.seed_product("F5-REDIS", 500, 10).await.unwrap();
    let id = product.id.to_string();
    for edge in ["product-redis", "order-redis"] {
        f.cluster
            .proxy(edge)
            .await
            .add_toxic(slicer(1, Duration::from_millis(100)))
            .unwrap();
    }
    for _ in 0..3 {
        let read = f.gateway.get(&format!("/api/products/{id}")).await;
        assert_eq!(read.status, Some(200), "{}", read.describe());
        assert!(
            read.elapsed < Duration::from_millis(500),
            "{}",
            read.describe()
        );
        assert_eq!(f.order(&id, 1, Some(&key())).await.status, Some(201));
    }
    f.cluster.stop().await;
}
