//! `shopeasy load` against the embedded system: it signs its customers in
//! through the gateway's `POST /api/session` first, and every order it then
//! places as one of them is admitted (2xx).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use clap::Parser;
use shopeasy::{
    load::{self, LoadArgs},
    system::{Options, System},
};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    load: LoadArgs,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_load_signs_in_and_every_order_is_admitted() {
    let dir = tempfile::tempdir().unwrap();
    let system = System::start(Options::for_tests(dir.path())).await.unwrap();
    let target = format!("http://{}", system.addresses.gateway);
    // Enough stock of every product that no order is a 409.
    let http = reqwest::Client::new();
    let page: serde_json::Value = http
        .get(format!("{target}/api/products?limit=100"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let products: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect();
    load::restock::restock(
        &format!("http://{}", system.addresses.inventory),
        &system.admin_token,
        &products,
    )
    .await
    .unwrap();
    let args = Cli::parse_from([
        "x",
        "--target",
        &target,
        "--rate",
        "20",
        "--duration",
        "1",
        "--read-ratio",
        "0",
        "--customers",
        "50",
        "--quiet",
    ])
    .load;
    let summary = load::run(&args).await.unwrap();
    assert_eq!(summary.sent, 20, "{summary}");
    let admitted: usize = summary
        .statuses
        .iter()
        .filter(|(s, _)| (200..300).contains(*s))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(admitted, 20, "every order 2xx: {summary}");
    assert!(summary.failed_gates(&args).is_empty(), "{summary}");

    // The orders are the signed-in customers' own.
    let mut owners = 0;
    for i in 0..50 {
        let res = http
            .post(format!("{target}/api/session"))
            .json(&serde_json::json!({ "customer": load::signin::name(i) }))
            .send()
            .await
            .unwrap();
        let token: serde_json::Value = res.json().await.unwrap();
        let page: serde_json::Value = http
            .get(format!("{target}/api/orders"))
            .bearer_auth(token["access_token"].as_str().unwrap())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let n = page["items"].as_array().unwrap().len();
        owners += usize::from(n > 0);
    }
    assert!(owners > 5, "orders spread over customers: {owners} of 50");
    system.stop().await.unwrap();
}
