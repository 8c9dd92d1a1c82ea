//! Customers own their orders in the embedded system (issue 15): the
//! launcher's demo issuer signs customers in through the gateway, order
//! routes need its token, a customer sees, lists and cancels only their own
//! orders, the signing key lives (0600) in the data folder and survives a
//! restart, and `shopeasy token` prints a token the running system accepts.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::{os::unix::fs::PermissionsExt, process::Command};

use serde_json::{Value, json};
use shopeasy::system::{Options, System};
use shopeasy_identity::{AuthSettings, DemoKey, Verifier, demo::KEY_FILE};
use support::{first_product, get_json_as, place_as, sign_in};

async fn start(dir: &std::path::Path) -> System {
    System::start(Options::for_tests(dir))
        .await
        .expect("the embedded system starts")
}

fn gateway(system: &System) -> String {
    format!("http://{}", system.addresses.gateway)
}

/// The ids of the orders `token`'s customer lists.
async fn listed(http: &reqwest::Client, gw: &str, token: &str) -> Vec<String> {
    let page = get_json_as(http, &format!("{gw}/api/orders"), token).await;
    page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a page of orders: {page}"))
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_routes_need_a_token_and_products_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    let http = reqwest::Client::new();
    let gw = gateway(&system);
    let product = first_product(&http, &gw).await; // anonymous read

    let order = json!({"items": [{"product_id": product, "quantity": 1}]});
    let without = http
        .post(format!("{gw}/api/orders"))
        .header("idempotency-key", uuid::Uuid::new_v4().to_string())
        .json(&order)
        .send()
        .await
        .unwrap();
    assert_eq!(without.status(), 401);
    let challenge = without.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    assert!(
        without.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/problem+json")
    );
    let problem: Value = without.json().await.unwrap();
    assert!(problem["detail"].is_string(), "{problem}");

    // A token the demo issuer did not sign (another key) is refused too.
    let foreign = shopeasy_identity::DemoIssuer::new(
        DemoKey::from_seed([9; 32]).unwrap(),
        shopeasy_identity::DemoIssuerConfig::default(),
    )
    .issue("alice")
    .unwrap()
    .access_token;
    for (what, res) in [
        (
            "a list without a token",
            http.get(format!("{gw}/api/orders")).send().await.unwrap(),
        ),
        (
            "an order with a foreign token",
            place_as(&http, &gw, &foreign, &product).await,
        ),
    ] {
        assert_eq!(res.status(), 401, "{what}");
        let challenge = res.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Bearer"), "{what}: {challenge}");
    }
    // Nothing was placed on the way.
    let alice = sign_in(&http, &gw, "alice").await;
    assert!(listed(&http, &gw, &alice).await.is_empty());
    system.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_customer_sees_lists_and_cancels_only_their_own_orders() {
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    let http = reqwest::Client::new();
    let gw = gateway(&system);
    let product = first_product(&http, &gw).await;
    let alice = sign_in(&http, &gw, "alice").await;
    let bob = sign_in(&http, &gw, "bob").await;

    let res = place_as(&http, &gw, &alice, &product).await;
    assert_eq!(res.status(), 201);
    let order: Value = res.json().await.unwrap();
    assert_eq!(
        order["customer_id"], "alice",
        "the customer is the token's sub"
    );
    let id = order["id"].as_str().unwrap().to_owned();
    let bobs = place_as(&http, &gw, &bob, &product).await;
    assert_eq!(bobs.status(), 201);
    let bobs: Value = bobs.json().await.unwrap();

    // Alice sees hers; Bob gets exactly what an unknown id gets.
    let url = format!("{gw}/api/orders/{id}");
    assert_eq!(get_json_as(&http, &url, &alice).await["id"], id.as_str());
    let unknown = format!("{gw}/api/orders/{}", uuid::Uuid::new_v4());
    let as_bob = |url: String| http.get(url).bearer_auth(&bob).send();
    let (theirs, none) = (
        as_bob(url.clone()).await.unwrap(),
        as_bob(unknown).await.unwrap(),
    );
    assert_eq!(theirs.status(), 404);
    assert_eq!(none.status(), 404);
    let (theirs, none): (Value, Value) = (theirs.json().await.unwrap(), none.json().await.unwrap());
    assert_eq!(theirs["type"], none["type"], "{theirs} vs {none}");

    let cancel = http
        .post(format!("{url}/cancel"))
        .bearer_auth(&bob)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 404, "Bob cannot cancel Alice's order");
    assert_eq!(
        get_json_as(&http, &url, &alice).await["status"],
        order["status"],
        "and it is unchanged"
    );

    assert_eq!(listed(&http, &gw, &alice).await, std::slice::from_ref(&id));
    let bob_lists = listed(&http, &gw, &bob).await;
    assert_eq!(bob_lists, [bobs["id"].as_str().unwrap().to_owned()]);
    assert!(!bob_lists.contains(&id));
    system.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_signing_key_is_private_in_the_data_folder_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let http = reqwest::Client::new();
    let system = start(&data).await;
    let gw = gateway(&system);
    let product = first_product(&http, &gw).await;
    let token = sign_in(&http, &gw, "carol").await;
    let jwks = |system: &System| format!("http://{}/.well-known/jwks.json", system.identity);
    let kid_before = support::get_json(&http, &jwks(&system)).await["keys"][0]["kid"].clone();
    system.stop().await.unwrap();

    let key = data.join(KEY_FILE);
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", key.display());

    let system = start(&data).await;
    let gw = gateway(&system);
    let kid_after = support::get_json(&http, &jwks(&system)).await["keys"][0]["kid"].clone();
    assert!(kid_before.is_string());
    assert_eq!(kid_before, kid_after, "the same key after the restart");
    let res = place_as(&http, &gw, &token, &product).await;
    assert_eq!(
        res.status(),
        201,
        "a token from before the restart verifies"
    );
    system.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shopeasy_token_prints_a_token_the_running_system_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    let http = reqwest::Client::new();
    let gw = gateway(&system);
    let product = first_product(&http, &gw).await;

    let token = |customer: &str| {
        Command::new(env!("CARGO_BIN_EXE_shopeasy"))
            .args(["token", customer, "--data-dir"])
            .arg(dir.path())
            .env_remove("ADMIN_TOKEN")
            .output()
            .unwrap()
    };
    let out = token("alice");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "only the token: {stdout:?}");
    let jwt = stdout.trim();
    assert_eq!(jwt.split('.').count(), 3, "a JWT: {jwt}");

    // Signed by the data folder's key, for alice.
    let key = DemoKey::load_or_create(dir.path()).unwrap();
    let verifier = Verifier::from_settings(&AuthSettings {
        public_key_pem: key.public_key_pem(),
        ..AuthSettings::default()
    })
    .unwrap();
    assert_eq!(verifier.verify(jwt).await.unwrap().customer_id(), "alice");

    let res = place_as(&http, &gw, jwt, &product).await;
    assert_eq!(res.status(), 201);
    let order: Value = res.json().await.unwrap();
    assert_eq!(order["customer_id"], "alice");
    let alice = sign_in(&http, &gw, "alice").await;
    assert_eq!(
        listed(&http, &gw, &alice).await,
        [order["id"].as_str().unwrap().to_owned()],
        "the same customer, however they signed in"
    );

    let bad = token("Not A Name");
    assert_eq!(bad.status.code(), Some(2));
    assert!(bad.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("a-z"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    system.stop().await.unwrap();
}
