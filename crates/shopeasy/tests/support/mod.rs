//! What the embedded-system tests share: reading JSON through the
//! gateway, signing in as a demo customer (through the gateway's
//! `POST /api/session`, i.e. the launcher's real demo issuer), and placing
//! an order as a signed-in customer does.

#![allow(dead_code, unreachable_pub)]

use serde_json::{Value, json};
use shopeasy::system::{Options, System};

/// The embedded system on ephemeral ports with its data in `dir`, every
/// service reading `env` (`KEY`, value, as the environment names them):
/// how a test shortens timeouts or moves a limit out of its way.
///
/// # Panics
/// When the system does not start.
pub async fn start_system(dir: &std::path::Path, env: &[(&str, &str)]) -> System {
    let mut options = Options::for_tests(dir);
    options.env = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    System::start(options)
        .await
        .expect("the embedded system starts")
}

/// `GET url` as JSON.
///
/// # Panics
/// When there is no answer or its body is not JSON.
pub async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    http.get(url)
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("a JSON body")
}

/// `GET url` as JSON, as the customer whose access token is `token`.
///
/// # Panics
/// When there is no answer or its body is not JSON.
pub async fn get_json_as(http: &reqwest::Client, url: &str, token: &str) -> Value {
    http.get(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("a JSON body")
}

/// The catalogue's first page of up to 100 products, through the
/// gateway at `gw`.
pub async fn catalogue(http: &reqwest::Client, gw: &str) -> Value {
    get_json(http, &format!("{gw}/api/products?limit=100")).await
}

/// The id of the catalogue's first product.
pub async fn first_product(http: &reqwest::Client, gw: &str) -> String {
    catalogue(http, gw).await["items"][0]["id"]
        .as_str()
        .expect("a seeded product")
        .to_owned()
}

/// Signs `customer` in through the gateway at `gw`: their access token.
///
/// # Panics
/// When the sign-in does not answer 200 with an `access_token`.
pub async fn sign_in(http: &reqwest::Client, gw: &str, customer: &str) -> String {
    let res = http
        .post(format!("{gw}/api/session"))
        .json(&json!({ "customer": customer }))
        .send()
        .await
        .expect("an answer");
    assert_eq!(res.status(), 200, "signing in {customer}");
    let body: Value = res.json().await.expect("a JSON body");
    body["access_token"]
        .as_str()
        .expect("an access token")
        .to_owned()
}

/// `POST /api/orders` of one unit of `product` for `customer` (signed in
/// first), with a fresh idempotency key.
pub async fn place(
    http: &reqwest::Client,
    gw: &str,
    customer: &str,
    product: &str,
) -> reqwest::Response {
    let token = sign_in(http, gw, customer).await;
    place_as(http, gw, &token, product).await
}

/// `POST /api/orders` of one unit of `product` as the customer whose access
/// token is `token` (no `customer_id` in the body: it comes from `sub`),
/// with a fresh idempotency key.
pub async fn place_as(
    http: &reqwest::Client,
    gw: &str,
    token: &str,
    product: &str,
) -> reqwest::Response {
    http.post(format!("{gw}/api/orders"))
        .bearer_auth(token)
        .header("idempotency-key", uuid::Uuid::new_v4().to_string())
        .json(&json!({"items": [{"product_id": product, "quantity": 1}]}))
        .send()
        .await
        .expect("an answer")
}
