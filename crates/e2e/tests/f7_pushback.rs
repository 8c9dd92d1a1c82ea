//! F7, the timing half: a server's "not before" is honoured.
//!
//! - order → inventory: `UNAVAILABLE` + `grpc-retry-pushback-ms: N` — the
//!   retry arrives no earlier than N ms after the failed answer; a negative
//!   or malformed pushback, or one beyond the caller's remaining deadline,
//!   means no retry (A(1)); other codes are never retried, with or without
//!   a pushback.
//! - order → product: `503`/`429` + `Retry-After: 1` — no retry earlier than
//!   1 s; a `Retry-After` beyond the time left is not waited out, the call
//!   stops at once (`deadline_exhausted`).
//!
//! A scripted stub stands behind the edge's proxy and records when each
//! request arrived and when its answer left. The order service's deadline
//! for one downstream call is the caller's remaining time
//! (`shopeasy-deadline-ms`, passed on by the gateway) capped at
//! `timeout × (max_retries + 1) + 1 s` = 1.9 s with the fast settings. The
//! gateway's activity timeout is raised to 5 s so that a 1 s wait inside
//! the order service is not cut at the edge.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use shopeasy_e2e::{
    Answer, Options,
    stub::{Canned, GrpcReply, ScriptedInventory, ScriptedStub, waits},
};
use support::{Fixture, assert_problem, key, order_body, order_id};

/// Fast settings, with room for a 1 s wait: gateway activity 5 s; the
/// edge's breaker needs 100 calls (it is not under test, and the cases
/// fail on purpose); the outbox worker waits 10 s before its first try, so
/// every `ReserveStock` a stub sees within a case is the caller's.
fn tweak(o: &mut Options) {
    o.gateway.resilience.gateway.activity_timeout_seconds =
        shopeasy_runtime::settings::Seconds::new(5.0);
    o.order.resilience.inventory.minimum_calls = 100;
    o.order.resilience.product.minimum_calls = 100;
    o.order.outbox.initial_backoff_seconds = shopeasy_runtime::settings::Seconds::new(10.0);
    o.order.outbox.max_backoff_seconds = shopeasy_runtime::settings::Seconds::new(10.0);
}

/// Places an order through the gateway, optionally with the caller's
/// deadline (`shopeasy-deadline-ms`).
async fn place(f: &Fixture, product: &str, deadline_ms: Option<u64>) -> Answer {
    let deadline = deadline_ms.map(|ms| ms.to_string());
    let headers: Vec<(&str, &str)> = deadline
        .iter()
        .map(|ms| ("shopeasy-deadline-ms", ms.as_str()))
        .collect();
    let answer = f
        .gateway
        .post_json_with(
            "/api/orders",
            &order_body(product, 1),
            Some(&key()),
            &headers,
        )
        .await;
    assert!(
        answer.error.is_none(),
        "the gateway answers: {}",
        answer.describe()
    );
    answer
}

/// `shopeasy_downstream_retries_total{target,outcome}` (process-wide).
async fn retries(f: &Fixture, target: &str, outcome: &str) -> f64 {
    f.downstream_retries(target, outcome).await
}

/// order → inventory: `grpc-retry-pushback-ms` decides whether and when
/// the reservation is retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_order_inventory_pushback_is_honoured() {
    let Some(f) = Fixture::start(tweak).await else {
        return;
    };
    let id = f.seed("F7-PUSH", 100).await;
    let redirect = |script: Vec<GrpcReply>| {
        let f = &f;
        async move {
            let stub = ScriptedInventory::start(100, script).await.unwrap();
            f.cluster
                .redirect("order-inventory", stub.addr())
                .await
                .unwrap();
            stub
        }
    };

    // 1. A pushback within the deadline (1000 ms of 1.9 s) is waited out:
    //    the retry comes no earlier, and succeeds.
    let stub = redirect(vec![
        GrpcReply::Status(tonic::Code::Unavailable, Some("1000")),
        GrpcReply::Reserved,
    ])
    .await;
    let answer = place(&f, &id, None).await;
    assert_eq!(answer.status, Some(201), "{}", answer.describe());
    let order = order_id(&answer);
    let calls = stub.reserves_of(&order);
    assert_eq!(calls.len(), 2, "pushback 1000: A(2)");
    let wait = waits(&calls)[0];
    println!("pushback 1000 ms: the retry came {wait:?} after the refusal");
    assert!(
        wait >= Duration::from_millis(1000),
        "retried {wait:?} after a 1000 ms pushback"
    );
    assert!(
        wait < Duration::from_millis(1000 + 400),
        "the pushback, not the backoff, sets the wait: {wait:?}"
    );
    assert_eq!(f.order_status(&order).await.as_deref(), Some("confirmed"));

    // 2. A negative or malformed pushback means "do not retry": A(1), the
    //    order waits in the outbox (202).
    for value in ["-1", "soon"] {
        let stub = redirect(vec![GrpcReply::Status(
            tonic::Code::Unavailable,
            Some(value),
        )])
        .await;
        let answer = place(&f, &id, None).await;
        assert_eq!(answer.status, Some(202), "{value}: {}", answer.describe());
        let order = order_id(&answer);
        assert_eq!(
            stub.reserves_of(&order).len(),
            1,
            "pushback {value:?}: A(1)"
        );
        assert_eq!(f.order_status(&order).await.as_deref(), Some("pending"));
    }

    // 3. A pushback beyond the time left is not waited out: no retry, and
    //    the answer does not wait for it. Once beyond the 1.9 s cap, once
    //    beyond the caller's own deadline (800 ms; the same 1000 ms that
    //    case 1 waited for).
    for (pushback, deadline) in [("5000", None), ("1000", Some(800))] {
        let exhausted = retries(&f, "inventory", "deadline_exhausted").await;
        let stub = redirect(vec![
            GrpcReply::Status(tonic::Code::Unavailable, Some(pushback)),
            GrpcReply::Reserved,
        ])
        .await;
        let answer = place(&f, &id, deadline).await;
        let what = format!("pushback {pushback} ms, caller's deadline {deadline:?} ms");
        println!("{what}: {}", answer.describe());
        assert_eq!(answer.status, Some(202), "{what}: {}", answer.describe());
        let order = order_id(&answer);
        assert_eq!(stub.reserves_of(&order).len(), 1, "{what}: A(1)");
        assert!(
            answer.elapsed < Duration::from_millis(700),
            "{what}: the answer waited: {:?}",
            answer.elapsed
        );
        assert_eq!(
            retries(&f, "inventory", "deadline_exhausted").await,
            exhausted + 1.0,
            "{what}: counted as deadline_exhausted"
        );
    }

    // 4. Only UNAVAILABLE is retried, a pushback does not make another
    //    code retryable (gRPC's retry design: pushback applies to retryable
    //    codes). INTERNAL on every call is f7_unavailable.rs's; here the
    //    stock read succeeds and only the reservation fails.
    for (code, pushback, status) in [
        (tonic::Code::FailedPrecondition, None, 409),
        (tonic::Code::ResourceExhausted, None, 202),
        (tonic::Code::ResourceExhausted, Some("100"), 202),
        (tonic::Code::Internal, Some("100"), 202),
    ] {
        let stub = redirect(vec![GrpcReply::Status(code, pushback), GrpcReply::Reserved]).await;
        let answer = place(&f, &id, None).await;
        let what = format!("{code:?} with pushback {pushback:?}");
        assert_eq!(answer.status, Some(status), "{what}: {}", answer.describe());
        let calls = stub.reserves();
        assert_eq!(calls.len(), 1, "{what}: A(1): {calls:?}");
        let expected = if status == 409 { "rejected" } else { "pending" };
        assert_eq!(
            f.order_status(&calls[0].0).await.as_deref(),
            Some(expected),
            "{what}"
        );
    }
    f.cluster.stop().await;
}

/// A product as the product service renders it.
fn product_json(id: &str) -> String {
    serde_json::json!({
        "id": id, "sku": "F7-RA", "name": "e2e F7-RA", "description": "stub",
        "price_cents": 500, "currency": "EUR"
    })
    .to_string()
}

/// order → product: `Retry-After` is a floor on the retry's time, and a
/// `Retry-After` beyond the time left stops the retries at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_order_product_retry_after_is_honoured() {
    let Some(f) = Fixture::start(tweak).await else {
        return;
    };
    let id = uuid::Uuid::new_v4().to_string();
    f.cluster.set_stock(id.parse().unwrap(), 100).await.unwrap();
    let problem = |status: u16| {
        format!(r#"{{"type":"urn:stub:busy","title":"Busy","status":{status},"detail":"stub"}}"#)
    };
    let refuse = |status: u16, after: &str| {
        Canned::new(
            status,
            &[
                ("content-type", "application/problem+json"),
                ("retry-after", after),
            ],
            problem(status),
        )
    };
    let found = Canned::new(
        200,
        &[("content-type", "application/json")],
        product_json(&id),
    );
    let redirect = |script: Vec<Canned>| {
        let f = &f;
        async move {
            let stub = ScriptedStub::start(script).await.unwrap();
            f.cluster
                .redirect("order-product", stub.addr())
                .await
                .unwrap();
            stub
        }
    };

    // 1. 503 or 429 with Retry-After: 1, within the 1.9 s deadline: the
    //    retry comes no earlier than 1 s after the refusal, and succeeds.
    for status in [503, 429] {
        let stub = redirect(vec![refuse(status, "1"), found.clone()]).await;
        let answer = place(&f, &id, None).await;
        assert_eq!(answer.status, Some(201), "{status}: {}", answer.describe());
        let arrivals = stub.arrivals();
        assert_eq!(arrivals.len(), 2, "{status}: A(2)");
        let wait = waits(&arrivals)[0];
        println!("{status} + Retry-After: 1 → retried after {wait:?}");
        assert!(
            wait >= Duration::from_secs(1),
            "{status}: retried {wait:?} after Retry-After: 1"
        );
        assert!(wait < Duration::from_millis(1400), "{status}: {wait:?}");
    }

    // 2. Every answer 503 + Retry-After: 1: the first retry waits 1 s; a
    //    second would need 1 s more but ~0.9 s is left, so the call stops
    //    there (A(2)) and the order service answers 503 + Retry-After.
    let exhausted = retries(&f, "product", "deadline_exhausted").await;
    let stub = redirect(vec![refuse(503, "1")]).await;
    let answer = place(&f, &id, None).await;
    println!(
        "503 + Retry-After: 1 on every attempt: {}",
        answer.describe()
    );
    assert_problem(&answer, 503, true);
    let arrivals = stub.arrivals();
    assert_eq!(
        arrivals.len(),
        2,
        "A(2): the second retry is past the deadline"
    );
    assert!(waits(&arrivals)[0] >= Duration::from_secs(1));
    assert!(
        answer.elapsed < Duration::from_millis(1900),
        "answered within the call's deadline: {:?}",
        answer.elapsed
    );
    assert_eq!(
        retries(&f, "product", "deadline_exhausted").await,
        exhausted + 1.0
    );

    // 3. Retry-After beyond the time left — 2 s against the 1.9 s cap, and
    //    1 s against the caller's 800 ms — is not clamped into an early
    //    retry: there is no retry (A(1)) and the 503 comes at once.
    for (after, deadline) in [("2", None), ("1", Some(800))] {
        let exhausted = retries(&f, "product", "deadline_exhausted").await;
        let stub = redirect(vec![refuse(503, after), found.clone()]).await;
        let answer = place(&f, &id, deadline).await;
        let what = format!("Retry-After: {after}, caller's deadline {deadline:?} ms");
        println!("{what}: {}", answer.describe());
        assert_problem(&answer, 503, true);
        assert_eq!(stub.requests(), 1, "{what}: A(1)");
        assert!(
            answer.elapsed < Duration::from_millis(500),
            "{what}: the answer waited: {:?}",
            answer.elapsed
        );
        assert_eq!(
            retries(&f, "product", "deadline_exhausted").await,
            exhausted + 1.0,
            "{what}"
        );
    }
    assert_eq!(
        f.order_count().await,
        2,
        "orders only for the two 201s (C3)"
    );
    f.cluster.stop().await;
}
