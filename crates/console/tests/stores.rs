//! The stores under each service (full mode), against stub admin
//! listeners: order's database is down and its Redis resting, product's
//! both answer.

#![allow(clippy::unwrap_used)]

use std::{net::SocketAddr, time::Duration};

use axum::http::StatusCode;
use serde_json::{Value, json};
use shopeasy_console::{Console, ConsoleSettings, ServiceTarget};
use shopeasy_runtime::settings::Secret;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// An admin listener whose readiness and Redis report are fixed.
async fn stub_admin(ready: bool, redis_resting: bool) -> SocketAddr {
    let app = axum::Router::new()
        .route(
            "/health/ready",
            axum::routing::get(move || async move {
                if ready {
                    (StatusCode::OK, axum::Json(json!({"status": "ready"})))
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        axum::Json(json!({"status": "not ready",
                            "failures": {"database": "connection refused"}})),
                    )
                }
            }),
        )
        .route(
            "/admin/resilience",
            axum::routing::get(move || async move {
                axum::Json(json!({"redis": {
                    "configured": true, "resting": redis_resting, "failures": 2
                }}))
            }),
        )
        .route("/metrics", axum::routing::get(|| async { "" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A console over a failing order and a healthy product; the first
/// snapshot it publishes.
async fn first_snapshot(show_stores: bool) -> Value {
    let order = stub_admin(false, true).await;
    let product = stub_admin(true, false).await;
    // No fault API: the snapshot only records that it could not be read.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let faults = closed.local_addr().unwrap();
    drop(closed);
    let mut settings = ConsoleSettings::new(
        vec![
            ServiceTarget::new("product", format!("http://{product}")),
            ServiceTarget::new("order", format!("http://{order}")),
        ],
        format!("http://{faults}"),
        Secret::new("t"),
    );
    settings.listen = "127.0.0.1:0".parse().unwrap();
    settings.show_stores = show_stores;
    let console = Console::bind(settings, None).await.unwrap();
    let url = format!("http://{}/events", console.local_addr().unwrap());
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    console.spawn(stop);

    let mut res = reqwest::get(url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buffer = String::new();
    loop {
        let chunk = tokio::time::timeout_at(deadline, res.chunk())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .expect("the stream stays open");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        if let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data:")) {
                return serde_json::from_str(data.trim()).unwrap();
            }
        }
    }
}

fn store<'a>(snapshot: &'a Value, service: &str, name: &str) -> &'a Value {
    snapshot["stores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["service"] == service && s["store"] == name)
        .unwrap_or_else(|| panic!("{service}/{name} in {}", snapshot["stores"]))
}

#[tokio::test]
async fn with_show_stores_a_down_database_and_a_resting_redis_show_down() {
    let snapshot = first_snapshot(true).await;
    assert_eq!(snapshot["stores"].as_array().unwrap().len(), 4);
    let pg = store(&snapshot, "order", "postgres");
    assert_eq!(pg["up"], false);
    assert_eq!(pg["detail"], "connection refused");
    assert_eq!(store(&snapshot, "order", "redis")["up"], false);
    assert_eq!(store(&snapshot, "product", "postgres")["up"], true);
    assert_eq!(store(&snapshot, "product", "redis")["up"], true);
}

#[tokio::test]
async fn by_default_no_store_is_shown() {
    let snapshot = first_snapshot(false).await;
    assert_eq!(snapshot["stores"], json!([]));
    assert_eq!(snapshot["services"].as_array().unwrap().len(), 2);
}
