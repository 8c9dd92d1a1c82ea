//! The embedded system's console: it sees the four services, their four
//! edges and their breakers, under load its events stay fresh, and it draws
//! a recent order's path with the deadline left at every hop.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::time::Duration;

use serde_json::{Value, json};
use shopeasy::system::{Options, System};
use tokio::time::Instant;

async fn start(dir: &std::path::Path) -> System {
    // Before any system of this process makes a span: a callsite first
    // seen with no subscriber may keep that verdict when tests race.
    record_spans();
    System::start(Options::for_tests(dir))
        .await
        .expect("the embedded system starts")
}

/// Taken by the tests that place orders: the recent-orders recorder is the
/// process's (as its tracing subscriber is), so a path test must not race a
/// load run's thousands of orders.
static ORDERING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The console's latest snapshot, once it has one.
async fn snapshot(http: &reqwest::Client, console: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let res = http
            .get(format!("{console}/api/snapshot"))
            .send()
            .await
            .unwrap();
        if res.status() == 200 {
            return res.json().await.unwrap();
        }
        assert!(Instant::now() < deadline, "no snapshot within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads server-sent snapshots from `res` for `how_long`: each with the
/// time it was received (Unix ms).
async fn events_for(res: &mut reqwest::Response, how_long: Duration) -> Vec<(Value, u64)> {
    let mut buffer = String::new();
    let mut out = Vec::new();
    let end = Instant::now() + how_long;
    while Instant::now() < end {
        let Ok(chunk) = tokio::time::timeout_at(end, res.chunk()).await else {
            break;
        };
        let chunk = chunk.unwrap().expect("the stream stays open");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(at) = buffer.find("\n\n") {
            let event: String = buffer.drain(..at + 2).collect();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_sees_four_services_four_edges_and_their_breakers() {
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    assert!(system.console.ip().is_loopback());
    assert!(
        system
            .banner()
            .contains(&format!("http://{}/", system.console))
    );
    let http = reqwest::Client::new();
    let console = format!("http://{}", system.console);
    // The outbox gauge appears once the worker has run.
    let deadline = Instant::now() + Duration::from_secs(10);
    let snap = loop {
        let snap = snapshot(&http, &console).await;
        if !snap["outbox"].is_null() {
            break snap;
        }
        assert!(Instant::now() < deadline, "no outbox within 10 s: {snap:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let services: Vec<(&str, bool)> = snap["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["up"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        services,
        [
            ("gateway", true),
            ("product", true),
            ("order", true),
            ("inventory", true)
        ],
        "{snap:#}"
    );
    let edges: Vec<&str> = snap["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        edges,
        [
            "gateway-product",
            "gateway-order",
            "order-inventory",
            "order-product"
        ]
    );
    let breakers: Vec<&str> = snap["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    for expected in ["order/inventory", "order/product"] {
        assert!(breakers.contains(&expected), "{breakers:?}");
    }
    for b in snap["breakers"].as_array().unwrap() {
        assert_eq!(b["state"], "closed", "{b}");
        assert!(b["threshold"].as_f64().is_some(), "{b}");
    }
    assert!(
        snap["caches"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "order/stock"),
        "{snap:#}"
    );
    assert!(snap["outbox"]["pending"].as_f64().is_some(), "{snap:#}");
    assert!(snap["errors"].as_array().unwrap().is_empty(), "{snap:#}");
    let order_inventory = &snap["edges"][2];
    assert_eq!(order_inventory["breaker"], "closed");
    assert_eq!(order_inventory["enabled"], true);
    system.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_load_every_event_is_at_most_two_seconds_old() {
    // The figure, 1000/s, open loop (80 % reads): the system may
    // shed some of it in a debug build; the console must not fall behind.
    // `SHOPEASY_CONSOLE_RATE` sets another.
    let _turn = ORDERING.lock().await;
    let rate: f64 = std::env::var("SHOPEASY_CONSOLE_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000.0);
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    let http = reqwest::Client::new();
    let console = format!("http://{}", system.console);
    snapshot(&http, &console).await;

    let res = http
        .post(format!("{console}/api/load/start"))
        .bearer_auth(&system.admin_token)
        .json(&json!({"rate": rate, "read_share": 0.8, "duration_seconds": 6}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());

    let mut stream = http.get(format!("{console}/events")).send().await.unwrap();
    let events = events_for(&mut stream, Duration::from_secs(5)).await;
    assert!(
        events.len() >= 7,
        "about two events a second: {}",
        events.len()
    );
    let ages: Vec<u64> = events
        .iter()
        .map(|(s, received)| received.saturating_sub(s["at_unix_ms"].as_u64().unwrap()))
        .collect();
    let worst = ages.iter().max().copied().unwrap_or_default();
    let best_rate = events
        .iter()
        .filter_map(|(s, _)| s["load"]["live_rate"].as_f64())
        .fold(0.0, f64::max);
    let edge_rate = events
        .iter()
        .filter_map(|(s, _)| s["edges"][0]["request_rate"].as_f64())
        .fold(0.0, f64::max);
    eprintln!(
        "console under {rate}/s: {} events in 5 s, oldest {worst} ms on receipt, \
         load live rate up to {best_rate:.0}/s, gateway-product up to {edge_rate:.0} attempts/s",
        events.len()
    );
    assert!(worst <= 2_000, "each event at most 2 s old: {ages:?}");
    assert!(
        edge_rate > 10.0,
        "the gateway's reads show on its edge: {edge_rate}"
    );
    assert!(
        best_rate > rate / 3.0,
        "the load panel shows the load running: {best_rate}"
    );
    assert!(events.iter().any(|(s, _)| s["load"]["running"] == true));

    let res = http
        .post(format!("{console}/api/load/stop"))
        .bearer_auth(&system.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    let deadline = Instant::now() + Duration::from_secs(10);
    while snapshot(&http, &console).await["load"]["running"] == true {
        assert!(Instant::now() < deadline, "the run stops");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    system.stop().await.unwrap();
}

/// Installs, once per test process, a tracing subscriber whose spans feed
/// the launcher's recent-orders recorder, as `shopeasy`'s `main` does with
/// `telemetry::init_with_spans` (without its log output).
fn record_spans() {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;
    static ONCE: std::sync::OnceLock<opentelemetry_sdk::trace::SdkTracerProvider> =
        std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(shopeasy::console_traces::recorder())
            .build();
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::set_global_default(subscriber).unwrap();
        provider
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recent_orders_path_shows_every_hop_and_the_deadline_it_had_left() {
    let _turn = ORDERING.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    let http = reqwest::Client::new();
    let gw = format!("http://{}", system.addresses.gateway);
    let console = format!("http://{}", system.console);
    let product = catalogue_first(&http, &gw).await;
    let token = sign_in(&http, &gw).await;

    // The client gives the whole order 3 s (every hop must see less), in
    // a trace of its own id, to know the path is this order's.
    let trace = format!("{:032x}", uuid::Uuid::new_v4().as_u128());
    let res = order(&http, &gw, &token, &product, Some(&trace)).await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());

    let deadline = Instant::now() + Duration::from_secs(10);
    let path = loop {
        let snap = snapshot(&http, &console).await;
        let path = &snap["order_path"]["path"];
        if path["trace_id"] == trace.as_str() {
            break path.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no order path within 10 s: {snap:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let hops = path["hops"].as_array().unwrap();
    let left = |service: &str, shared: bool| -> Vec<u64> {
        hops.iter()
            .filter(|h| h["service"] == service && h["shared"] == shared)
            .filter_map(|h| h["deadline_left_ms"].as_u64())
            .collect()
    };
    let mut services: Vec<&str> = hops
        .iter()
        .map(|h| h["service"].as_str().unwrap())
        .collect();
    services.dedup();
    assert!(services.len() >= 3, "{path:#}");
    assert_eq!(
        services[0], "gateway",
        "the gateway starts the path: {path:#}"
    );
    let gateway = left("gateway", false);
    let order = left("order", false);
    let inventory = left("inventory", false);
    let product = left("product", false);
    eprintln!(
        "deadline left: gateway {gateway:?}, order {order:?}, inventory {inventory:?}, \
         product {product:?}; shared stock fill {:?}",
        left("inventory", true)
    );
    assert!(gateway[0] <= 3000 && gateway[0] > 2000, "{path:#}");
    assert!(!order.is_empty() && order[0] < gateway[0], "{path:#}");
    assert!(
        !inventory.is_empty() && !product.is_empty(),
        "the reservation and the product lookup: {path:#}"
    );
    assert!(
        inventory.iter().chain(&product).all(|i| *i < order[0]),
        "the deadline shrinks along the path: {path:#}"
    );
    // The cold stock cache's fill is shared between callers: it is marked,
    // and runs under its own deadline.
    assert!(
        hops.iter()
            .any(|h| h["shared"] == true && h["service"] == "inventory"),
        "{path:#}"
    );
    // Order's calls came from one attempt each (healthy: no retry), and
    // every one reached its service.
    for hop in hops
        .iter()
        .filter(|h| h["service"] == "inventory" || h["service"] == "product")
    {
        assert_ne!(hop["operation"], "not reached", "{hop:#}");
        let attempts = hop["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "{hop:#}");
        assert_eq!(attempts[0]["number"], 1, "{hop:#}");
        assert_eq!(attempts[0]["outcome"], "ok", "{hop:#}");
    }
    system.stop().await.unwrap();
}

/// Orders one unit of `product` as `token`'s customer; with `trace`, in that
/// trace, giving it 3 s.
async fn order(
    http: &reqwest::Client,
    gw: &str,
    token: &str,
    product: &str,
    trace: Option<&str>,
) -> reqwest::Response {
    let mut req = http
        .post(format!("{gw}/api/orders"))
        .bearer_auth(token)
        .header("idempotency-key", uuid::Uuid::new_v4().to_string())
        .json(&json!({"items": [{"product_id": product, "quantity": 1}]}));
    if let Some(trace) = trace {
        req = req
            .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
            .header("shopeasy-deadline-ms", "3000");
    }
    req.send().await.unwrap()
}

async fn catalogue_first(http: &reqwest::Client, gw: &str) -> String {
    let body: Value = http
        .get(format!("{gw}/api/products?limit=1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["items"][0]["id"].as_str().unwrap().to_owned()
}

async fn sign_in(http: &reqwest::Client, gw: &str) -> String {
    let body: Value = http
        .post(format!("{gw}/api/session"))
        .json(&json!({"customer": "path"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["access_token"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_outbox_panel_shows_how_long_the_oldest_order_has_waited() {
    let _turn = ORDERING.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    let http = reqwest::Client::new();
    let gw = format!("http://{}", system.addresses.gateway);
    let console = format!("http://{}", system.console);
    let product = catalogue_first(&http, &gw).await;
    let token = sign_in(&http, &gw).await;
    // A first order while healthy warms the stock cache: the next one can
    // then be accepted as pending when Inventory is away.
    let res = order(&http, &gw, &token, &product, None).await;
    assert_eq!(res.status(), 201);
    system
        .proxies
        .get("order-inventory")
        .await
        .unwrap()
        .set_enabled(false)
        .await;
    let res = order(&http, &gw, &token, &product, None).await;
    assert_eq!(res.status(), 202, "pending while Inventory is away");

    // The age is Order's own measure of its oldest row: it appears, and grows.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut first = None;
    let grown = loop {
        let snap = snapshot(&http, &console).await;
        let age = snap["outbox"]["oldest_pending_age_seconds"].as_f64();
        match (first, age) {
            (None, Some(age)) => first = Some(age),
            (Some(then), Some(now)) if now > then + 0.2 => break (then, now),
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no growing oldest-pending age within 15 s: {:#}",
            snap["outbox"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(grown.0 > 0.0 && grown.1 < 15.0, "{grown:?}");
    system.stop().await.unwrap();
}
