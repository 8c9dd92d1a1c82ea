//! The admin listener serves its four routes over a real socket.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use shopeasy_runtime::{admin::Admin, lifecycle};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn admin_listener_serves_the_four_routes() {
    let admin = Admin::default();
    let db_up = Arc::new(AtomicBool::new(true));
    let flag = db_up.clone();
    admin.readiness("database", move || {
        let up = flag.load(Ordering::SeqCst);
        async move {
            if up {
                Ok(())
            } else {
                Err("connection refused".to_owned())
            }
        }
    });
    admin.report("inventory", || serde_json::json!({"state": "closed"}));
    metrics::counter!("shopeasy_admin_selftest_total").increment(1);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(lifecycle::serve(
        listener,
        admin.router(),
        stop.clone(),
        Duration::from_secs(1),
    ));
    let http = reqwest::Client::new();
    let get = |path: &str| http.get(format!("http://{addr}{path}")).send();

    let metrics = get("/metrics").await.unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(
        metrics
            .text()
            .await
            .unwrap()
            .contains("shopeasy_admin_selftest_total")
    );

    assert_eq!(get("/health/live").await.unwrap().status(), 200);
    assert_eq!(get("/health/ready").await.unwrap().status(), 200);

    db_up.store(false, Ordering::SeqCst);
    let ready = get("/health/ready").await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["failures"]["database"], "connection refused");
    assert_eq!(
        get("/health/live").await.unwrap().status(),
        200,
        "live stays true while not ready"
    );

    let res = get("/admin/resilience").await.unwrap();
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"inventory": {"state": "closed"}}));

    let missing = get("/nope").await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.headers()["content-type"],
        shopeasy_runtime::problem::CONTENT_TYPE
    );

    stop.cancel();
    server.await.unwrap().unwrap();
}
