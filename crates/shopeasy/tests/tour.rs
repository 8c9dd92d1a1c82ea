//! The five-minute tour of the README, run against the embedded system on
//! ephemeral ports: browse, sign in, order, break Inventory, watch orders go
//! pending and the breaker open, heal, watch them confirm; break the
//! gateway's edges.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use shopeasy::system::{Options, System};
use shopeasy_testkit::assert_eventually;
use support::{catalogue, first_product};
use tokio::time::Instant;

/// Short settings so the tour takes seconds (FAULTS.md: attempt 300 ms,
/// gateway activity 1 s, break 2 s).
fn fast_env() -> Vec<(String, String)> {
    [
        ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.3"),
        ("RESILIENCE__INVENTORY__BREAK_DURATION_SECONDS", "2"),
        ("RESILIENCE__PRODUCT__TIMEOUT_SECONDS", "0.3"),
        ("RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS", "1"),
        ("OUTBOX__POLL_INTERVAL_SECONDS", "0.2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

async fn start(dir: &std::path::Path) -> System {
    let mut options = Options::for_tests(dir);
    options.env = fast_env();
    System::start(options)
        .await
        .expect("the embedded system starts")
}

/// The tour customer's order of one unit of `product`, with their `token`.
async fn place(http: &reqwest::Client, gw: &str, token: &str, product: &str) -> reqwest::Response {
    support::place_as(http, gw, token, product).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_tour() {
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    let http = reqwest::Client::new();
    let gw = format!("http://{}", system.addresses.gateway);
    let faults = format!("http://{}", system.faults_api);

    // Browse.
    let page = catalogue(&http, &gw).await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 12, "the demo catalogue is seeded");
    let cached = items[0]["id"].as_str().unwrap().to_owned();
    let uncached = items[1]["id"].as_str().unwrap().to_owned();

    // Sign in through the gateway: the demo issuer says it is one.
    let res = http
        .post(format!("{gw}/api/session"))
        .json(&json!({"customer": "tour"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["shopeasy-demo-issuer"], "true");
    let session: Value = res.json().await.unwrap();
    assert_eq!(session["demo"], true);
    let token = session["access_token"].as_str().unwrap().to_owned();

    // Order: confirmed.
    let res = place(&http, &gw, &token, &cached).await;
    assert_eq!(res.status(), 201);
    let order: Value = res.json().await.unwrap();
    assert_eq!(order["status"], "confirmed");

    // Break Inventory with one call to the Toxiproxy API.
    let res = http
        .post(format!("{faults}/proxies/order-inventory/toxics"))
        .json(&json!({"name": "hang", "type": "timeout", "stream": "downstream", "toxicity": 1.0, "attributes": {"timeout": 0}}))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());

    let mut pending = Vec::new();
    for _ in 0..6 {
        let res = place(&http, &gw, &token, &cached).await;
        assert_eq!(res.status(), 202, "cached stock says yes → pending");
        let order: Value = res.json().await.unwrap();
        assert_eq!(order["status"], "pending");
        pending.push(order["id"].as_str().unwrap().to_owned());
    }
    let admin = format!("http://{}/admin/resilience", system.addresses.order_admin);
    let state: Value = http.get(&admin).send().await.unwrap().json().await.unwrap();
    assert!(
        state.to_string().contains("open"),
        "the breaker is open: {state}"
    );

    let res = place(&http, &gw, &token, &uncached).await;
    assert_eq!(res.status(), 503, "no cached stock → 503");
    assert!(res.headers().contains_key("retry-after"));

    // Heal: the pending orders confirm.
    let res = http
        .delete(format!("{faults}/proxies/order-inventory/toxics/hang"))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());
    for id in &pending {
        let url = format!("{gw}/api/orders/{id}");
        assert_eventually(
            Duration::from_secs(15),
            "pending order confirmed",
            async || support::get_json_as(&http, &url, &token).await["status"] == "confirmed",
        )
        .await;
    }

    // `down` on gateway-product: 502 in well under a second.
    system
        .proxies
        .get("gateway-product")
        .await
        .unwrap()
        .set_enabled(false)
        .await;
    let started = Instant::now();
    let res = http.get(format!("{gw}/api/products")).send().await.unwrap();
    assert_eq!(res.status(), 502);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    system
        .proxies
        .get("gateway-product")
        .await
        .unwrap()
        .set_enabled(true)
        .await;

    // `timeout` on gateway-order: 504 after the activity timeout (1 s).
    let res = http
        .post(format!("{faults}/proxies/gateway-order/toxics"))
        .json(&json!({"name": "hang", "type": "timeout", "stream": "downstream", "attributes": {"timeout": 0}}))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());
    let started = Instant::now();
    let res = http
        .get(format!("{gw}/api/orders/{}", pending[0]))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 504);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );

    system.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_keeps_orders_and_does_not_reseed() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let system = start(dir.path()).await;
    let gw = format!("http://{}", system.addresses.gateway);
    let product = first_product(&http, &gw).await;
    let token = support::sign_in(&http, &gw, "tour").await;
    let order: Value = place(&http, &gw, &token, &product)
        .await
        .json()
        .await
        .unwrap();
    system.stop().await.unwrap();

    let system = start(dir.path()).await;
    let gw = format!("http://{}", system.addresses.gateway);
    let page = catalogue(&http, &gw).await;
    assert_eq!(
        page["items"].as_array().unwrap().len(),
        12,
        "not seeded twice"
    );
    // The token signed before the restart still verifies: the demo
    // issuer's key is kept in the data folder.
    let again = support::get_json_as(
        &http,
        &format!("{gw}/api/orders/{}", order["id"].as_str().unwrap()),
        &token,
    )
    .await;
    assert_eq!(again["status"], "confirmed");
    system.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_is_a_clear_error_not_a_panic() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut options = Options::for_tests(dir.path());
    options.faults_api = addr;
    let err = System::start(options).await.unwrap_err();
    let message = format!("{err:#}");
    assert!(message.contains(&addr.to_string()), "{message}");
    assert!(message.contains("fault proxy API"), "{message}");
}
