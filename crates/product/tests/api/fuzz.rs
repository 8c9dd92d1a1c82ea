//! 1,000 random bodies and query strings sent to every route: no 5xx, no
//! hang. Seeded; the seed is printed so a failure can be replayed with
//! `PRODUCT_FUZZ_SEED=<seed>`.

use std::time::Duration;

use futures::StreamExt;
use rand::{Rng, SeedableRng, rngs::SmallRng, seq::IndexedRandom};

use crate::helpers::{TOKEN, spawn};

const REQUESTS: usize = 1_000;

fn random_text(rng: &mut SmallRng, max: usize) -> String {
    const PIECES: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\"",
        "\\",
        "null",
        "true",
        "-",
        "0",
        "1e999",
        "9999999999999999999",
        "\"sku\"",
        "\"name\"",
        "\"price_cents\"",
        "\"currency\"",
        "\"description\"",
        "\"EUR\"",
        "\"TEA-1\"",
        "\u{0}",
        "é",
        "😀",
        " ",
        "\n",
        "%",
        "&",
        "=",
        "+",
        "limit",
        "cursor",
        "c1",
        "?",
        "#",
        "/",
        "..",
        "%00",
        "%FF",
        "\u{7f}",
    ];
    let n = rng.random_range(0..max);
    (0..n).map(|_| *PIECES.choose(rng).unwrap()).collect()
}

fn random_body(rng: &mut SmallRng) -> Vec<u8> {
    match rng.random_range(0..5) {
        0 => Vec::new(),
        1 => (0..rng.random_range(0..200))
            .map(|_| rng.random())
            .collect(),
        2 => {
            // A mostly-valid product with one field mangled.
            let mut v = serde_json::json!({
                "sku": "FUZZ-1", "name": "n", "price_cents": 1, "currency": "EUR"
            });
            let field = *["sku", "name", "price_cents", "currency", "description"]
                .choose(rng)
                .unwrap();
            v[field] = match rng.random_range(0..5) {
                0 => serde_json::json!(random_text(rng, 10)),
                1 => serde_json::json!(rng.random::<i64>()),
                2 => serde_json::json!(rng.random::<f64>()),
                3 => serde_json::json!([random_text(rng, 3)]),
                _ => serde_json::Value::Null,
            };
            v.to_string().into_bytes()
        }
        3 => format!(
            "{{\"sku\":\"FZ-{}\",\"name\":\"x\",\"price_cents\":{},\"currency\":\"USD\"}}",
            rng.random_range(100..999),
            rng.random_range(-5..5)
        )
        .into_bytes(),
        _ => random_text(rng, 40).into_bytes(),
    }
}

#[tokio::test]
async fn random_requests_never_get_a_5xx_or_hang() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let seed: u64 = std::env::var("PRODUCT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("fuzz seed: {seed} (replay with PRODUCT_FUZZ_SEED={seed})");
    let app = spawn(db).await;
    let existing = app.create("FUZZ-0").await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut rng = SmallRng::seed_from_u64(seed);
    let requests: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let method = [
                reqwest::Method::GET,
                reqwest::Method::POST,
                reqwest::Method::PUT,
                reqwest::Method::DELETE,
                reqwest::Method::PATCH,
            ]
            .choose(&mut rng)
            .unwrap()
            .clone();
            let path = match rng.random_range(0..5) {
                0 => "/api/products".to_owned(),
                1 => format!("/api/products/{existing}"),
                2 => format!("/api/products/{}", uuid::Uuid::now_v7()),
                3 => "/api/products/openapi.json".to_owned(),
                _ => format!(
                    "/api/products/{}",
                    random_text(&mut rng, 5).replace(['?', '#', '/'], "")
                ),
            };
            let query = random_text(&mut rng, 12);
            let content_type = *[
                "application/json",
                "text/plain",
                "application/json; charset=utf-8",
                "",
            ]
            .choose(&mut rng)
            .unwrap();
            let authorized = rng.random_bool(0.7);
            (
                method,
                path,
                query,
                content_type,
                authorized,
                random_body(&mut rng),
            )
        })
        .collect();

    let results: Vec<_> = futures::stream::iter(requests.into_iter().enumerate())
        .map(
            |(i, (method, path, query, content_type, authorized, body))| {
                let app = &app;
                async move {
                    let url = format!("{}?{query}", app.url(&path));
                    let mut req = app.client.request(method.clone(), &url).body(body);
                    if !content_type.is_empty() {
                        req = req.header("content-type", content_type);
                    }
                    if authorized {
                        req = req.bearer_auth(TOKEN);
                    }
                    let outcome = tokio::time::timeout(Duration::from_secs(5), req.send()).await;
                    (i, format!("{method} {url}"), outcome)
                }
            },
        )
        .buffer_unordered(8)
        .collect()
        .await;

    let mut statuses = std::collections::BTreeMap::new();
    for (i, what, outcome) in results {
        let res = outcome
            .unwrap_or_else(|_| panic!("seed {seed}: request {i} ({what}) hung"))
            .unwrap_or_else(|e| panic!("seed {seed}: request {i} ({what}) failed: {e}"));
        let status = res.status().as_u16();
        assert!(
            status < 500,
            "seed {seed}: request {i} ({what}) answered {status}"
        );
        *statuses.entry(status).or_insert(0) += 1;
    }
    eprintln!("fuzz statuses: {statuses:?}");
    assert!(
        statuses.len() >= 5,
        "the fuzz reached several outcomes: {statuses:?}"
    );
}
