//! The console's server against real listeners: stub admin listeners that
//! count their reads, and the real fault API over real proxies.

#![allow(clippy::unwrap_used)]

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::{Value, json};
use shopeasy_console::{
    Console, ConsoleSettings, ServiceTarget, StartError, settings::SettingsError,
};
use shopeasy_faults::{Proxies, ProxyConfig};
use shopeasy_runtime::settings::Secret;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "console-test-token";

/// An admin listener whose inventory attempts grow by 10 per read.
async fn stub_admin() -> SocketAddr {
    let reads = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new()
        .route(
            "/admin/resilience",
            axum::routing::get(|| async {
                axum::Json(json!({
                    "circuit_breakers": {"inventory": {
                        "state": "closed", "failures_in_window": 0, "successes_in_window": 3,
                        "open_remaining_seconds": null,
                        "transitions": {"open": 0, "closed": 0, "half_open": 0},
                        "config": {"failure_ratio": 0.5, "minimum_throughput": 5}
                    }},
                    "retry_budgets": {"inventory": {"balance": 10.0}},
                    "caches": {"stock": {"entries": 1, "requests": {"hit": 1}}}
                }))
            }),
        )
        .route(
            "/metrics",
            axum::routing::get(move || {
                let n = reads.fetch_add(1, Ordering::SeqCst) * 10;
                async move {
                    format!(
                        "shopeasy_downstream_request_duration_seconds_count{{target=\"inventory\",outcome=\"ok\"}} {n}\n"
                    )
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

struct Running {
    console: String,
    proxies: Proxies,
    stop: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A gateway that signs in, lists one product and takes an order at once,
/// but never answers a read of an order: hung, as behind a `timeout` toxic.
async fn hung_gateway() -> SocketAddr {
    let placed = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new()
        .route(
            "/api/session",
            axum::routing::post(|| async { axum::Json(json!({"access_token": "t"})) }),
        )
        .route(
            "/api/products",
            axum::routing::get(|| async { axum::Json(json!({"items": [{"id": "p1"}]})) }),
        )
        .route(
            "/api/orders",
            axum::routing::post(move || {
                let n = placed.fetch_add(1, Ordering::SeqCst);
                async move {
                    (
                        axum::http::StatusCode::ACCEPTED,
                        axum::Json(json!({"id": format!("order-{n}"), "status": "pending"})),
                    )
                }
            }),
        )
        .route(
            "/api/orders/{id}",
            axum::routing::get(std::future::pending::<String>),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn start() -> Running {
    start_with(|_| {}).await
}

/// [`start`], with `tweak` applied to the console's settings last.
async fn start_with(tweak: impl FnOnce(&mut ConsoleSettings)) -> Running {
    let admin = stub_admin().await;
    let proxies = Proxies::with_seed(1);
    proxies
        .create(ProxyConfig::new("order-inventory", admin.to_string()).listen("127.0.0.1:0"))
        .await
        .unwrap();
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = api.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(shopeasy_faults::api::serve(
        api,
        proxies.clone(),
        stop.clone(),
    ));
    let mut settings = ConsoleSettings::new(
        vec![ServiceTarget::new("order", format!("http://{admin}"))],
        format!("http://{api_addr}"),
        Secret::new(TOKEN),
    );
    settings.listen = "127.0.0.1:0".parse().unwrap();
    tweak(&mut settings);
    let console = Console::bind(settings, None).await.unwrap();
    let addr = console.local_addr().unwrap();
    console.spawn(stop.clone());
    Running {
        console: format!("http://{addr}"),
        proxies,
        stop,
    }
}

/// Reads server-sent events from `res` until `n` snapshots arrived; each
/// with the time it was received.
async fn snapshots(res: &mut reqwest::Response, n: usize) -> Vec<(Value, u64)> {
    let mut buffer = String::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let chunk = tokio::time::timeout_at(deadline, res.chunk())
            .await
            .expect("events within 10 s")
            .unwrap()
            .expect("the stream stays open");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data:")) {
                out.push((
                    serde_json::from_str(data.trim()).unwrap(),
                    shopeasy_console::unix_ms(),
                ));
            }
        }
    }
    out
}

#[tokio::test]
async fn events_arrive_about_twice_a_second_and_carry_their_time() {
    let running = start().await;
    let mut res = reqwest::get(format!("{}/events", running.console))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let events = snapshots(&mut res, 5).await;
    let mut previous: Option<&Value> = None;
    for (snapshot, received) in &events {
        let at = snapshot["at_unix_ms"].as_u64().unwrap();
        assert!(
            received.saturating_sub(at) < 1_000,
            "an event is fresh: {received} vs {at}"
        );
        if let Some(p) = previous {
            assert_eq!(snapshot["seq"].as_u64(), p["seq"].as_u64().map(|s| s + 1));
            let gap = at - p["at_unix_ms"].as_u64().unwrap();
            assert!((300..=900).contains(&gap), "about twice a second: {gap} ms");
        }
        previous = Some(snapshot);
    }
    let last = &events.last().unwrap().0;
    assert_eq!(last["services"][0], json!({"name": "order", "up": true}));
    assert_eq!(last["breakers"][0]["name"], "order/inventory");
    assert_eq!(last["budgets"][0]["balance"], 10.0);
    let edge = last["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "order-inventory")
        .unwrap();
    assert!(
        edge["request_rate"].as_f64().unwrap() > 5.0,
        "10 attempts per read: {edge}"
    );
    assert_eq!(edge["success_rate"], 1.0);
}

#[tokio::test]
async fn a_fault_change_without_the_token_is_refused_and_changes_nothing() {
    let running = start().await;
    let http = reqwest::Client::new();
    let url = format!(
        "{}/api/faults/proxies/order-inventory/toxics",
        running.console
    );
    let toxic = json!({"name": "hang", "type": "timeout", "stream": "downstream", "attributes": {"timeout": 0}});
    for auth in [None, Some("Bearer wrong"), Some(TOKEN)] {
        let mut req = http.post(&url).json(&toxic);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 401, "{auth:?}");
        assert_eq!(res.headers()["content-type"], "application/problem+json");
        assert!(res.headers().contains_key("www-authenticate"));
        let body: Value = res.json().await.unwrap();
        assert!(!body["detail"].as_str().unwrap().is_empty());
    }
    let proxy = running.proxies.get("order-inventory").await.unwrap();
    assert!(proxy.toxics().is_empty(), "nothing changed");

    let res = http
        .post(&url)
        .bearer_auth(TOKEN)
        .json(&toxic)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(proxy.toxics().len(), 1, "with the token the toxic is added");

    let res = http
        .post(format!("{}/api/faults/reset", running.console))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(proxy.toxics().len(), 1);
    let res = http
        .post(format!("{}/api/faults/reset", running.console))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    assert!(proxy.toxics().is_empty(), "heal everything");

    let res = http
        .post(format!("{}/api/faults/version", running.console))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400, "only fault controls are forwarded");

    // A path that does not decode is a problem too, not axum's plain text.
    for path in ["api/faults/proxies/%FF", "api/scenes/%FF"] {
        let res = http
            .post(format!("{}/{path}", running.console))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{path}");
        assert_eq!(
            res.headers()["content-type"],
            "application/problem+json",
            "{path}"
        );
        let problem: serde_json::Value = res.json().await.unwrap();
        assert!(
            problem["detail"].as_str().unwrap().contains("UTF-8"),
            "{problem}"
        );
    }
}

#[tokio::test]
async fn cross_origin_requests_are_refused_even_with_the_token() {
    let running = start().await;
    let http = reqwest::Client::new();
    let url = format!("{}/api/faults/reset", running.console);
    let proxy = running.proxies.get("order-inventory").await.unwrap();
    proxy
        .add_toxic(
            shopeasy_faults::Toxic::from_json(
                br#"{"name":"t","type":"latency","attributes":{"latency":1}}"#,
            )
            .unwrap(),
        )
        .unwrap();
    for (name, value) in [
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
        ("host", "evil.example"),
    ] {
        let res = http
            .post(&url)
            .bearer_auth(TOKEN)
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 403, "{name}: {value}");
        let body: Value = res.json().await.unwrap();
        assert!(body["detail"].as_str().unwrap().len() > 5, "{body}");
    }
    assert_eq!(proxy.toxics().len(), 1, "nothing changed");
    let res = http
        .get(format!("{}/", running.console))
        .header("host", "rebound.example:8090")
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        403,
        "a rebinding page cannot read the console"
    );
}

#[tokio::test]
async fn a_non_loopback_listener_is_refused() {
    let mut settings = ConsoleSettings::new(
        vec![ServiceTarget::new("order", "http://127.0.0.1:1")],
        "http://127.0.0.1:1",
        Secret::new(TOKEN),
    );
    settings.listen = "0.0.0.0:0".parse().unwrap();
    let err = Console::bind(settings.clone(), None).await.unwrap_err();
    assert!(
        matches!(err, StartError::Settings(SettingsError::RemoteListen(_))),
        "{err}"
    );
    settings.allow_remote = true;
    Console::bind(settings, None).await.unwrap();
}

#[tokio::test]
async fn the_page_is_served_with_a_strict_policy_and_the_load_panel_says_it_is_absent() {
    let running = start().await;
    let http = reqwest::Client::new();
    let res = http
        .get(format!("{}/", running.console))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/html; charset=utf-8");
    let csp = res.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    let html = res.text().await.unwrap();
    assert!(html.contains(r#"<script type="module" src="/console.js">"#));
    let js = http
        .get(format!("{}/console.js", running.console))
        .send()
        .await
        .unwrap();
    assert_eq!(
        js.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert!(js.text().await.unwrap().contains("EventSource"));

    let res = http
        .post(format!("{}/api/load/start", running.console))
        .bearer_auth(TOKEN)
        .json(&json!({"rate": 10, "read_share": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 501);
    let body: Value = res.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("no load generator")
    );
    let res = http
        .get(format!("{}/nope", running.console))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
}

/// The orders bought from the page are read again every round. Read one
/// after another with the client's 10 s timeout, a hung gateway held each
/// round — and so every snapshot — for 10 s per order still pending (here
/// 30 s: not four events within the helper's 10 s). Each read is now
/// bounded by the poll's read timeout and they run at once.
#[tokio::test]
async fn a_hung_gateway_does_not_hold_the_snapshots_back() {
    let gateway = hung_gateway().await;
    let running = start_with(|s| s.gateway_url = Some(format!("http://{gateway}"))).await;
    let http = reqwest::Client::new();
    for _ in 0..3 {
        let res = http
            .post(format!("{}/api/orders/buy", running.console))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201);
    }
    let mut res = reqwest::get(format!("{}/events", running.console))
        .await
        .unwrap();
    let events = snapshots(&mut res, 4).await;
    for pair in events.windows(2) {
        let gap =
            pair[1].0["at_unix_ms"].as_u64().unwrap() - pair[0].0["at_unix_ms"].as_u64().unwrap();
        assert!(
            gap < 2_000,
            "a snapshot at least every 2 s while the gateway hangs: {gap} ms"
        );
    }
    let orders = events.last().unwrap().0["orders"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(orders.len(), 3, "{orders:?}");
    assert!(
        orders.iter().all(|o| o["status"] == "pending"),
        "not read, so as bought: {orders:?}"
    );
}

/// Any method on a fault path and any body to an edge used to be
/// forwarded: `DELETE proxies/{edge}` deleted the edge for good (Heal
/// everything cannot bring it back) and `{"upstream": …}` pointed it
/// somewhere else. Only each control's own method, and on an edge only its
/// switch, pass.
#[tokio::test]
async fn an_edge_can_be_switched_but_never_deleted_or_moved() {
    let running = start().await;
    let http = reqwest::Client::new();
    let edge = format!("{}/api/faults/proxies/order-inventory", running.console);
    let upstream = running
        .proxies
        .get("order-inventory")
        .await
        .unwrap()
        .upstream()
        .to_owned();

    let res = http.delete(&edge).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    assert_eq!(res.headers()["allow"], "POST");
    let problem: Value = res.json().await.unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains("DELETE"),
        "{problem}"
    );

    for body in [
        json!({"upstream": "10.0.0.5:80"}),
        json!({"enabled": true, "upstream": "10.0.0.5:80"}),
        json!({"listen": "127.0.0.1:0"}),
    ] {
        let res = http
            .post(&edge)
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{body}");
        assert_eq!(res.headers()["content-type"], "application/problem+json");
        let problem: Value = res.json().await.unwrap();
        assert!(
            problem["detail"].as_str().unwrap().contains("enabled"),
            "{body}: {problem}"
        );
    }
    let proxy = running
        .proxies
        .get("order-inventory")
        .await
        .expect("the edge is still there");
    assert_eq!(proxy.upstream(), upstream, "and still points where it did");
    assert!(proxy.enabled());

    let res = http
        .post(&edge)
        .bearer_auth(TOKEN)
        .json(&json!({"enabled": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "its switch is forwarded");
    assert!(
        !running
            .proxies
            .get("order-inventory")
            .await
            .unwrap()
            .enabled()
    );

    let res = http
        .delete(format!("{}/api/faults/reset", running.console))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405, "heal everything is a POST");
}

/// A wrong method was axum's empty 405 (no body, no type), which the page
/// shows as "Refused (405): " with nothing to say why.
#[tokio::test]
async fn a_wrong_method_is_a_problem_with_a_detail() {
    let running = start().await;
    let http = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::PUT, "/api/presentation"),
        (reqwest::Method::GET, "/api/load/start"),
        (reqwest::Method::DELETE, "/api/snapshot"),
        (reqwest::Method::POST, "/"),
        (
            reqwest::Method::PATCH,
            "/api/faults/proxies/order-inventory",
        ),
    ] {
        let res = http
            .request(method.clone(), format!("{}{path}", running.console))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405, "{method} {path}");
        assert_eq!(
            res.headers().get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/problem+json"[..]),
            "{method} {path}"
        );
        let problem: Value = res.json().await.unwrap();
        assert_eq!(problem["status"], 405);
        assert!(
            !problem["detail"].as_str().unwrap_or("").is_empty(),
            "{method} {path}: {problem}"
        );
    }
}

/// The fault API's address is internal: when it cannot be reached, the
/// cause (reqwest's text, with the URL) is logged and the refusal names
/// only which part failed.
#[tokio::test]
async fn an_unreachable_fault_api_is_named_without_its_address() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let running = start_with(|s| s.faults_url = format!("http://{closed}")).await;
    let http = reqwest::Client::new();
    for (path, body) in [
        ("/api/faults/reset", None),
        (
            "/api/presentation",
            Some(json!({"interval_s": 1, "hold_s": 0.5})),
        ),
    ] {
        let mut req = http
            .post(format!("{}{path}", running.console))
            .bearer_auth(TOKEN);
        if let Some(body) = &body {
            req = req.json(body);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 502, "{path}");
        let problem: Value = res.json().await.unwrap();
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains("the fault API"), "{path}: {detail}");
        assert!(
            !detail.contains("127.0.0.1") && !detail.contains(&closed.port().to_string()),
            "{path}: {detail}"
        );
    }
}
