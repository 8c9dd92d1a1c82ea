//! What the embedded-system tests share: reading JSON through the
//! gateway, and placing an order as a customer does.

#![allow(dead_code, unreachable_pub)]

use serde_json::{Value, json};

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

/// `POST /api/orders` of one unit of `product` for `customer`, with a
/// fresh idempotency key.
pub async fn place(
    http: &reqwest::Client,
    gw: &str,
    customer: &str,
    product: &str,
) -> reqwest::Response {
    http.post(format!("{gw}/api/orders"))
        .header("idempotency-key", uuid::Uuid::new_v4().to_string())
        .json(&json!({"customer_id": customer, "items": [{"product_id": product, "quantity": 1}]}))
        .send()
        .await
        .expect("an answer")
}
