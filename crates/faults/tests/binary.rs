//! The `shopeasy-faults` binary: serves the API, stops with exit 0 on
//! SIGTERM, names the address when its port is taken, and creates the
//! proxies of a Toxiproxy config file at start (how compose declares one
//! proxy per edge: deploy/faults/proxies.json).
#![allow(clippy::unwrap_used)]

use std::{process::Stdio, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    process::{Child, Command},
    time::Instant,
};

const BIN: &str = env!("CARGO_BIN_EXE_shopeasy-faults");

async fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn serves_the_api_and_exits_zero_on_sigterm() {
    let (mut child, base) = start_with(&[]).await;
    let version: serde_json::Value = reqwest::get(format!("{base}/version"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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

#[tokio::test]
async fn creates_the_proxies_of_its_config_file_and_forwards_through_them() {
    // The upstream: answers "pong" to whatever it is sent.
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = upstream.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4];
                if socket.read_exact(&mut buf).await.is_ok() {
                    let _ = socket.write_all(b"pong").await;
                }
            });
        }
    });
    let (api_port, proxy_port) = (free_port().await, free_port().await);
    let dir = std::env::temp_dir().join(format!("shopeasy-faults-{api_port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("proxies.json");
    std::fs::write(
        &config,
        format!(
            r#"[{{"name": "order-inventory", "listen": "127.0.0.1:{proxy_port}", "upstream": "{upstream_addr}"}}]"#
        ),
    )
    .unwrap();
    let (_child, base) = start_on(api_port, |command| {
        command.env("FAULTS_CONFIG", &config);
    })
    .await;

    let proxies: serde_json::Value = reqwest::get(format!("{base}/proxies"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let edge = &proxies["order-inventory"];
    assert_eq!(
        edge["listen"],
        format!("127.0.0.1:{proxy_port}"),
        "{proxies}"
    );
    assert_eq!(edge["upstream"], upstream_addr.to_string());
    assert_eq!(edge["enabled"], true);

    let mut client = TcpStream::connect(("127.0.0.1", proxy_port)).await.unwrap();
    client.write_all(b"ping").await.unwrap();
    let mut answer = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut answer))
        .await
        .expect("an answer through the proxy")
        .unwrap();
    assert_eq!(&answer, b"pong");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts the binary with `args` on a free port; the API's base URL.
async fn start_with(args: &[&str]) -> (Child, String) {
    start_on(free_port().await, |command| {
        command.args(args);
    })
    .await
}

/// Starts the binary listening on 127.0.0.1:`port`, its command
/// `configure`d further (arguments, environment), and waits until its API
/// answers; the child (killed when dropped) and the API's base URL.
async fn start_on(port: u16, configure: impl FnOnce(&mut Command)) -> (Child, String) {
    let mut command = Command::new(BIN);
    command.args(["--listen", &format!("127.0.0.1:{port}")]);
    configure(&mut command);
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while reqwest::get(format!("{base}/version")).await.is_err() {
        assert!(Instant::now() < deadline, "the API never came up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (child, base)
}

/// By default a proxy created through the API may listen on loopback only;
/// `--allow-listen 0.0.0.0` (compose: the container's own interfaces) lets
/// it listen there too, and nothing else.
#[tokio::test]
async fn allow_listen_widens_the_loopback_rule_to_the_named_address_only() {
    let http = reqwest::Client::new();
    let create = |base: String, listen: &'static str| {
        let http = http.clone();
        async move {
            http.post(format!("{base}/proxies"))
                .json(&serde_json::json!({"name": listen, "listen": listen, "upstream": "127.0.0.1:1"}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let (_default, base) = start_with(&[]).await;
    assert_eq!(create(base.clone(), "0.0.0.0:0").await, 400);
    assert_eq!(create(base, "127.0.0.1:0").await, 201);

    let (_compose, base) = start_with(&["--allow-listen", "0.0.0.0"]).await;
    assert_eq!(create(base.clone(), "0.0.0.0:0").await, 201);
    assert_eq!(create(base, "[::]:0").await, 400);
}

/// The standalone binary records fault windows like the embedded launcher
/// (`GET /windows`), and with `--otlp-endpoint` sends each one to the
/// collector as a `toxic_window` span. The collector here is a bare
/// HTTP/2 listener: the span's name and edge are plain strings inside the
/// OTLP protobuf, so reading the bytes the exporter sends is enough.
#[tokio::test]
async fn the_binary_serves_its_windows_and_exports_them_as_spans() {
    let collector = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", collector.local_addr().unwrap());
    let received = tokio::spawn(async move {
        let (mut socket, _) = collector.accept().await.unwrap();
        // An empty SETTINGS frame, then an ACK of the client's.
        socket
            .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0])
            .await
            .unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        while !(contains(&seen, b"toxic_window") && contains(&seen, b"order-inventory")) {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        seen
    });

    let (_child, base) = start_on(free_port().await, |command| {
        command
            .args(["--otlp-endpoint", &endpoint])
            .env("OTEL_BSP_SCHEDULE_DELAY", "50");
    })
    .await;
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{base}/proxies"))
        .json(&serde_json::json!({"name": "order-inventory", "upstream": "127.0.0.1:1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let added = http
        .post(format!("{base}/proxies/order-inventory/toxics"))
        .json(&serde_json::json!({"name": "hang", "type": "timeout"}))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 200);
    let removed = http
        .delete(format!("{base}/proxies/order-inventory/toxics/hang"))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), 204);

    let windows: serde_json::Value = http
        .get(format!("{base}/windows"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(windows.as_array().unwrap().len(), 1, "{windows}");
    assert_eq!(windows[0]["proxy"], "order-inventory");
    assert_eq!(windows[0]["ended_by"], "removed");

    // The span is exported once it has ended (the window closed).
    let seen = tokio::time::timeout(Duration::from_secs(15), received)
        .await
        .expect("the collector got the window's span in time")
        .unwrap();
    assert!(
        contains(&seen, b"toxic_window") && contains(&seen, b"order-inventory"),
        "the export carries the span and its edge ({} bytes)",
        seen.len()
    );
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
