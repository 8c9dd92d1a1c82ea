//! F7 (503 / UNAVAILABLE burst): a stub upstream answering 503 (or 404)
//! stands behind the edge's proxy.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use shopeasy_e2e::stub::Stub;
use support::{Fixture, assert_problem, key};

const PROBLEM: &str =
    r#"{"type":"urn:stub:overloaded","title":"Overloaded","status":503,"detail":"stub"}"#;

/// gateway → order and gateway → product: a 503 passes through unchanged
/// (status, body, `Retry-After`), not retried (A(1)), for GET and keyed
/// POST alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_gateway_passes_a_503_through_unchanged() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    for (edge, path) in [
        ("gateway-order", "/api/orders"),
        ("gateway-product", "/api/products"),
    ] {
        let stub = Stub::start(
            503,
            &[
                ("content-type", "application/problem+json"),
                ("retry-after", "7"),
            ],
            PROBLEM,
        )
        .await
        .unwrap();
        f.cluster.redirect(edge, stub.addr()).await.unwrap();
        let get = f
            .gateway
            .get(&format!("{path}/{}", uuid::Uuid::new_v4()))
            .await;
        assert_eq!(get.status, Some(503), "{edge}: {}", get.describe());
        assert_eq!(get.body, PROBLEM.as_bytes(), "{edge}: body unchanged");
        assert_eq!(get.header("retry-after"), Some("7"), "{edge}");
        assert_eq!(stub.requests(), 1, "{edge}: A(1)");
        if edge == "gateway-order" {
            let post = f
                .order(&uuid::Uuid::new_v4().to_string(), 1, Some(&key()))
                .await;
            assert_eq!(post.status, Some(503));
            assert_eq!(stub.requests(), 2, "keyed POST: A(1)");
        }
    }
    f.cluster.stop().await;
}

/// order → product: 503 is retried from the budget (A ≤ 3) and ends in
/// 503 + Retry-After with no order row; a 404 is never retried (A(1)).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_order_product_retries_503_never_404() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let product = uuid::Uuid::new_v4().to_string();
    let unavailable = Stub::start(
        503,
        &[("content-type", "application/problem+json")],
        PROBLEM,
    )
    .await
    .unwrap();
    f.cluster
        .redirect("order-product", unavailable.addr())
        .await
        .unwrap();
    let answer = f.order(&product, 1, Some(&key())).await;
    assert_problem(&answer, 503, true);
    assert!(
        (2..=3).contains(&unavailable.requests()),
        "A ≤ 3: {}",
        unavailable.requests()
    );
    assert_eq!(f.order_count().await, 0, "C3");

    let missing = Stub::start(
        404,
        &[("content-type", "application/problem+json")],
        r#"{"type":"urn:stub:not-found","title":"Not found","status":404,"detail":"stub"}"#,
    )
    .await
    .unwrap();
    f.cluster
        .redirect("order-product", missing.addr())
        .await
        .unwrap();
    let answer = f.order(&product, 1, Some(&key())).await;
    assert_problem(&answer, 404, false);
    assert_eq!(missing.requests(), 1, "a 4xx is never retried");
    f.cluster.stop().await;
}

/// order → inventory: `UNAVAILABLE` is retried ≤ 2 (A(3)) while closed and
/// the breaker opens on the sustained burst; `INTERNAL` is never retried
/// (A(1)).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_order_inventory_retries_unavailable_only() {
    use shopeasy_e2e::stub::GrpcStub;
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F7-INV", 10).await;

    let internal = GrpcStub::start(tonic::Code::Internal).await.unwrap();
    f.cluster
        .redirect("order-inventory", internal.addr())
        .await
        .unwrap();
    let answer = f.order(&id, 1, Some(&key())).await;
    assert_problem(&answer, 503, true);
    assert_eq!(internal.calls(), 1, "INTERNAL: A(1)");

    let unavailable = GrpcStub::start(tonic::Code::Unavailable).await.unwrap();
    f.cluster
        .redirect("order-inventory", unavailable.addr())
        .await
        .unwrap();
    let answer = f.order(&id, 1, Some(&key())).await;
    assert_problem(&answer, 503, true);
    assert_eq!(unavailable.calls(), 3, "UNAVAILABLE: A(3)");
    let mut orders = 1;
    while !f.breaker_opened("inventory").await {
        let _ = f.order(&id, 1, Some(&key())).await;
        orders += 1;
        assert!(orders <= 10, "CB: still closed after {orders} orders");
    }
    let calls = unavailable.calls();
    let fast = f.order(&id, 1, Some(&key())).await;
    assert_problem(&fast, 503, true);
    assert_eq!(
        unavailable.calls(),
        calls,
        "open: no call reaches Inventory"
    );
    f.cluster.stop().await;
}
