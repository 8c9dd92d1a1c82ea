//! The `shopeasy-faults` binary: serves the API, stops with exit 0 on
//! SIGTERM, and names the address when its port is taken.
#![allow(clippy::unwrap_used)]

use std::{process::Stdio, time::Duration};

use tokio::{net::TcpListener, process::Command, time::Instant};

const BIN: &str = env!("CARGO_BIN_EXE_shopeasy-faults");

async fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn serves_the_api_and_exits_zero_on_sigterm() {
    let port = free_port().await;
    let mut child = Command::new(BIN)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/version");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let version = loop {
        if let Ok(response) = http.get(&url).send().await {
            break response.json::<serde_json::Value>().await.unwrap();
        }
        assert!(Instant::now() < deadline, "the API never came up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(version["version"].is_string());

    let pid = child.id().unwrap().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("stops within 10 s")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn a_port_in_use_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = tokio::time::timeout(
        Duration::from_secs(10),
        Command::new(BIN).args(["--listen", &addr]).output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let log = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    assert!(log.contains(&addr), "the error names the address: {log}");
}
