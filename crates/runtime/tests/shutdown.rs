//! SIGTERM lets an in-flight request finish, then the server stops.
//!
//! This file holds one test on purpose: it sends SIGTERM to its own test
//! process, which is safe only once the handler is installed and no other
//! test shares the process.

use std::time::Duration;

use axum::{Router, routing::get};
use shopeasy_runtime::lifecycle;

#[tokio::test]
async fn sigterm_finishes_the_in_flight_request() {
    let token = lifecycle::shutdown_token().expect("signal handlers");
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = std::sync::Arc::new(std::sync::Mutex::new(Some(started_tx)));
    let router = Router::new().route(
        "/slow",
        get(move || {
            let started_tx = started_tx.clone();
            if let Some(tx) = started_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "finished"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(lifecycle::serve(
        listener,
        router,
        token.clone(),
        Duration::from_secs(5),
    ));

    let request = tokio::spawn(async move {
        reqwest::get(format!("http://{addr}/slow"))
            .await?
            .text()
            .await
    });
    started_rx.await.expect("the request reached the handler");

    let pid = std::process::id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::time::timeout(Duration::from_secs(2), token.cancelled())
        .await
        .expect("SIGTERM cancels the shutdown token");

    let body = request.await.unwrap().expect("in-flight request completes");
    assert_eq!(body, "finished");
    tokio::time::timeout(Duration::from_secs(2), server)
        .await
        .expect("server stops after draining")
        .unwrap()
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
}
