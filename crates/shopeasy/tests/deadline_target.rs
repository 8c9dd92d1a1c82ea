//! The `deadline` scene against a running system (`--target`) from a
//! process that has a tracing subscriber but does not keep the order's
//! spans: the per-hop half is skipped only for want of the spans, never
//! because the system failed it.
//!
//! A binary of its own: the scene decides by whether a global subscriber is
//! set, which this file sets for its whole process (in `tests/demo.rs` it
//! would stop the embedded `deadline` scene from installing its own).
//!
//! The "running system" is a stub of the four routes the scene calls: the
//! gateway's sign-in, catalogue and orders, and the fault API's toxic. Its
//! first order answers `first` at once; every later one (the slow half's)
//! answers 504 at the scene's 2 s budget, as ShopEasy does.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    Json,
    http::StatusCode,
    routing::{delete, get, post},
};
use serde_json::json;
use shopeasy::demo::{self, Endpoints, Run, Scene, Target};

/// A global subscriber that keeps nothing: "some subscriber is set", as in
/// a process whose subscriber is not the console's.
fn a_subscriber_that_keeps_no_spans() {
    let _ = tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::new());
}

/// The running system's endpoints (all on one stub server).
async fn system(first: StatusCode) -> Endpoints {
    let placed = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new()
        .route(
            "/api/session",
            post(|| async { Json(json!({ "access_token": "t" })) }),
        )
        .route(
            "/api/products",
            get(|| async { Json(json!({ "items": [{ "id": "p1" }] })) }),
        )
        .route(
            "/api/orders",
            post(move || {
                let n = placed.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n == 0 {
                        return (first, Json(json!({})));
                    }
                    tokio::time::sleep(demo::deadline::BUDGET).await;
                    let problem = json!({ "type": "urn:problem:deadline_exceeded" });
                    (StatusCode::GATEWAY_TIMEOUT, Json(problem))
                }
            }),
        )
        .route(
            "/proxies/order-inventory/toxics",
            post(|| async { Json(json!({})) }),
        )
        .route(
            "/proxies/order-inventory/toxics/slow",
            delete(|| async { StatusCode::NO_CONTENT }),
        )
        .route("/reset", post(|| async { StatusCode::NO_CONTENT }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Endpoints {
        gateway: base.clone(),
        faults: base.clone(),
        order_admin: base,
    }
}

fn on(endpoints: Endpoints) -> Run {
    Run {
        target: Target::Running(endpoints),
        seed: 7,
    }
}

/// An order with a 2 s budget that the system answers 500 is the scene's
/// error. Before, with any subscriber set, every error of the half became
/// a note and the half a pass: with the slow half at its deadline, the
/// scene passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_that_fails_is_an_error_not_a_skipped_half() {
    a_subscriber_that_keeps_no_spans();
    let result = demo::run(
        Scene::Deadline,
        &on(system(StatusCode::INTERNAL_SERVER_ERROR).await),
    )
    .await;
    let err = match result {
        Ok(outcome) => panic!("the failed order passed as a skipped half:\n{outcome}"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("was not confirmed: 500"), "{err}");
}

/// A confirmed order whose spans this process did not keep skips the half,
/// with a note saying why, and the scene is judged by the slow half.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_not_kept_skip_the_per_hop_half_with_a_note() {
    a_subscriber_that_keeps_no_spans();
    let outcome = demo::run(Scene::Deadline, &on(system(StatusCode::CREATED).await))
        .await
        .unwrap();
    let skipped: Vec<&String> = outcome
        .notes
        .iter()
        .filter(|n| n.starts_with("the per-hop half is skipped") && n.contains("were not kept"))
        .collect();
    assert_eq!(skipped.len(), 1, "{outcome}");
    assert!(
        outcome
            .timeline("one order with a 2 s budget, hop by hop")
            .is_none()
    );
    assert_eq!(outcome.get("slow_status"), Some(504.0), "{outcome}");
    assert!(outcome.passed, "{outcome}");
}
