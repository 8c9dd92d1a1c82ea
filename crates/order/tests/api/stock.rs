//! `GET /api/stock/{product_id}` (issue 18): a product's stock for anyone,
//! read through the orders' own stale-serving stock cache — fresh, then
//! stale with its age while Inventory is down, 503 when nothing cached can
//! answer, 404 for an id that is no product's.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::{
    fakes::Mode,
    helpers::{Shop, TestApp, eventually, order_body},
};

/// How long a condition may take to hold (a bound, not a sleep).
const WITHIN: Duration = Duration::from_secs(5);

/// The service over SQLite with a shop of `stock`, and what must outlive
/// it.
async fn spawn(stock: &[i64]) -> (TestApp, Shop, shopeasy_testkit::TestDatabase) {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(stock).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    (app, shop, db)
}

/// `GET /api/stock/{id}` with no token at all.
async fn get_stock(app: &TestApp, id: &str) -> reqwest::Response {
    app.http
        .get(app.url(&format!("/api/stock/{id}")))
        .send()
        .await
        .unwrap()
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test]
async fn fresh_stock_is_served_without_a_token_and_never_stored() {
    let (app, shop, _db) = spawn(&[7]).await;
    let p = shop.products[0];
    let before = now_ms();
    let res = get_stock(&app, &p.to_string()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["cache-control"], "no-store");
    assert_eq!(res.headers()["content-type"], "application/json");
    assert!(
        !res.headers().contains_key("age"),
        "a fresh count has no Age"
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["product_id"], p.to_string());
    assert_eq!(body["available"], 7);
    assert_eq!(body["stale"], false);
    assert_eq!(body["age_seconds"], 0);
    let as_of = body["as_of"].as_i64().unwrap();
    assert!(
        (before - 1000..=now_ms()).contains(&as_of),
        "as_of is the fetch's time: {as_of}, asked at {before}"
    );

    // A token is neither needed nor checked: a garbage one changes nothing.
    let res = app
        .http
        .get(app.url(&format!("/api/stock/{p}")))
        .header("authorization", "Bearer not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // HEAD answers the same headers, no body.
    let res = app
        .http
        .head(app.url(&format!("/api/stock/{p}")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["cache-control"], "no-store");
    assert!(res.bytes().await.unwrap().is_empty());
    // Writing is not a thing here.
    let res = app
        .http
        .post(app.url(&format!("/api/stock/{p}")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);

    // An order takes 2: once the cached count expires, the page sees 5.
    let res = app.post_order(None, &order_body("c-1", &[(p, 2)])).await;
    assert_eq!(res.status(), 201);
    let live = eventually(WITHIN, || async {
        let body: Value = get_stock(&app, &p.to_string()).await.json().await.unwrap();
        body["available"] == 5
    })
    .await;
    assert!(live, "the count follows Inventory once the TTL passed");
    app.stop().await;
}

#[tokio::test]
async fn concurrent_readers_of_an_expired_count_make_one_inventory_call() {
    let (app, shop, _db) = spawn(&[3]).await;
    let p = shop.products[0].to_string();
    assert_eq!(get_stock(&app, &p).await.status(), 200);
    // Let the entry expire (TTL 0.2 s), then 50 readers at once, with a
    // slow Inventory so they all find the refresh in flight.
    shop.inventory.set_get_delay(Duration::from_millis(300));
    // Time passing is the condition here (as in `stock_cache.rs`).
    tokio::time::sleep(Duration::from_millis(250)).await; // past the 0.2 s TTL
    let before = shop.inventory.get_calls();
    let answers = futures::future::join_all((0..50).map(|_| get_stock(&app, &p))).await;
    assert!(answers.iter().all(|r| r.status() == 200));
    assert_eq!(
        shop.inventory.get_calls() - before,
        1,
        "one shared fetch for 50 readers"
    );
    app.stop().await;
}

#[tokio::test]
async fn while_inventory_is_down_the_cached_count_answers_stale_with_its_age() {
    let (app, shop, _db) = spawn(&[4]).await;
    let p = shop.products[0];
    assert_eq!(get_stock(&app, &p.to_string()).await.status(), 200);
    shop.inventory.set_mode(Mode::Unavailable);

    // Past the TTL, the cached count answers, marked stale; its age grows
    // to a whole second (the page's "stock as of 1 s ago").
    let last = std::cell::RefCell::new((Value::Null, None));
    let aged = eventually(WITHIN, || async {
        let res = get_stock(&app, &p.to_string()).await;
        assert_eq!(res.status(), 200, "a cached count answers");
        let age = res
            .headers()
            .get("age")
            .map(|v| v.to_str().unwrap().to_owned());
        let body: Value = res.json().await.unwrap();
        let done = body["stale"] == true && body["age_seconds"].as_u64() >= Some(1);
        *last.borrow_mut() = (body, age);
        done
    })
    .await;
    let (body, age) = last.into_inner();
    assert!(aged, "stale with an age of 1 s or more: {body}");
    assert_eq!(body["available"], 4);
    assert_eq!(
        age.as_deref(),
        Some(body["age_seconds"].to_string().as_str()),
        "Age is the count's age"
    );
    let as_of = body["as_of"].as_i64().unwrap();
    assert!(as_of <= now_ms() - 1000, "as_of is the cached count's time");

    // The same cache the orders check: the product was never ordered, yet
    // an order for it is accepted (202) on the count the page read.
    let res = app.post_order(None, &order_body("c-2", &[(p, 1)])).await;
    assert_eq!(res.status(), 202);
    app.stop().await;
}

#[tokio::test]
async fn a_product_never_cached_is_503_with_retry_after_while_inventory_is_down() {
    let (app, shop, _db) = spawn(&[4]).await;
    shop.inventory.set_mode(Mode::Unavailable);
    let res = get_stock(&app, &shop.products[0].to_string()).await;
    assert_eq!(res.status(), 503);
    assert_eq!(
        res.headers()["content-type"],
        "application/problem+json",
        "a problem"
    );
    let retry: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let problem: Value = res.json().await.unwrap();
    assert_eq!(problem["status"], 503);
    assert!(
        problem["detail"].as_str().unwrap().contains("inventory"),
        "{problem}"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_id_that_is_no_products_is_a_404_problem() {
    let (app, _shop, _db) = spawn(&[1]).await;
    for id in [
        "not-a-uuid".to_owned(),
        "%20".to_owned(),
        Uuid::new_v4().to_string(), // Inventory has no record of it
    ] {
        let res = get_stock(&app, &id).await;
        assert_eq!(res.status(), 404, "{id}");
        assert_eq!(
            res.headers()["content-type"],
            "application/problem+json",
            "{id}"
        );
        let problem: Value = res.json().await.unwrap();
        assert!(
            problem["detail"].as_str().unwrap().contains("stock"),
            "{id}: {problem}"
        );
    }
    // Nothing under the prefix but a product's stock.
    let res = get_stock(&app, "a/b").await;
    assert_eq!(res.status(), 404);
    app.stop().await;
}
