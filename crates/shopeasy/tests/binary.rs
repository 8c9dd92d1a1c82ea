//! The `shopeasy` binary as a person runs it: it serves on SPEC's ports,
//! runs the demo issuer on :8085, prints its banner, signs a customer in
//! through the gateway, and exits 0 on SIGTERM.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

#[tokio::test(flavor = "multi_thread")]
async fn serves_then_exits_zero_on_sigterm() {
    if std::net::TcpListener::bind("127.0.0.1:8080").is_err() {
        shopeasy_testkit::skip("free port 8080", "something else listens there");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shopeasy"))
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut banner = Vec::new();
    let gateway = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a banner within 60 s");
        banner.push(line.clone());
        if let Some(rest) = line.strip_prefix("gateway") {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    assert_eq!(gateway, "http://127.0.0.1:8080");
    while !banner.iter().any(|l| l.starts_with("admin token")) {
        banner.push(
            rx.recv_timeout(Duration::from_secs(5))
                .expect("the rest of the banner"),
        );
    }
    let issuer = banner
        .iter()
        .find_map(|l| l.strip_prefix("demo issuer"))
        .expect("the banner names the demo issuer");
    assert!(
        issuer.contains("http://127.0.0.1:8085/.well-known/jwks.json") && issuer.contains("DEMO"),
        "{issuer}"
    );

    let res = reqwest::get(format!("{gateway}/api/products"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = reqwest::Client::new()
        .post(format!("{gateway}/api/session"))
        .json(&serde_json::json!({"customer": "alice"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "signing in through the gateway");
    assert_eq!(res.headers()["shopeasy-demo-issuer"], "true");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still running 20 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "exit status {exit:?}");
}
