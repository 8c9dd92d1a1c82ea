//! The order API end to end (SPEC §3, §5): validation, the saga, cancel,
//! on Postgres and SQLite.

use std::time::Duration;

use serde_json::{Value, json};
use shopeasy_runtime::settings::Seconds;
use shopeasy_testkit::all_backends;

use crate::{
    fakes::Mode,
    helpers::{Shop, TestApp, order_body, orders_of},
};

#[tokio::test]
async fn an_order_is_priced_reserved_and_confirmed() {
    for db in all_backends().await {
        let shop = Shop::new(&[10, 5]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let (a, b) = (shop.products[0], shop.products[1]);

        let res = app
            .post_order(None, &order_body("c-1", &[(a, 2), (b, 1)]))
            .await;
        assert_eq!(res.status(), 201, "{}", db.name());
        let location = res.headers()["location"].to_str().unwrap().to_owned();
        let order: Value = res.json().await.unwrap();
        assert_eq!(
            location,
            format!("/api/orders/{}", order["id"].as_str().unwrap())
        );
        assert_eq!(order["status"], "confirmed");
        assert_eq!(order["total_cents"], 750);
        assert_eq!(order["items"][0]["unit_price_cents"], 250);
        assert_eq!(order["customer_id"], "c-1");
        assert!(order["created_at"].as_str().unwrap().ends_with('Z'));
        assert_eq!(shop.inventory.stock(a), 8);
        assert_eq!(shop.inventory.stock(b), 4);
        assert_eq!(
            shop.inventory.live_reservations(),
            vec![order["id"].as_str().unwrap().to_owned()],
            "reservation id = order id"
        );

        let fetched = app.get_order(order["id"].as_str().unwrap()).await;
        assert_eq!(fetched, order);
        let list = orders_of(&app, "c-1").await;
        assert_eq!(list.len(), 1);
        assert_eq!(list[0], order);
        app.stop().await;
    }
}

#[tokio::test]
async fn bad_requests_are_problems_never_500() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let p = shop.products[0];

    let res = app
        .post_order(
            None,
            &json!({"customer_id": "", "items": [{"product_id": "nope", "quantity": 0}]}),
        )
        .await;
    assert_eq!(res.status(), 422);
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let body: Value = res.json().await.unwrap();
    let fields: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["customer_id", "items[0].product_id", "items[0].quantity"]
    );

    let dup = order_body("c", &[(p, 1), (p, 2)]);
    assert_eq!(app.post_order(None, &dup).await.status(), 422);

    let res = app.post_raw("application/json", "{not json").await;
    assert_eq!(res.status(), 400);
    let res = app.post_raw("text/plain", "{}").await;
    assert_eq!(res.status(), 415);
    let res = app
        .post_raw("application/json", vec![b' '; 70 * 1024])
        .await;
    assert_eq!(res.status(), 413);
    let res = app
        .post_order(Some("bad key with spaces"), &order_body("c", &[(p, 1)]))
        .await;
    assert_eq!(res.status(), 422);

    let unknown = uuid::Uuid::new_v4();
    let res = app
        .post_order(None, &order_body("c", &[(unknown, 1)]))
        .await;
    assert_eq!(res.status(), 404);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["type"], "urn:shopeasy:problem:unknown-product");
    assert_eq!(body["products"][0], unknown.to_string());

    for path in [
        "/api/orders/nope",
        &format!("/api/orders/{unknown}"),
        "/elsewhere",
    ] {
        let res = app.client_for("c").get(app.url(path)).send().await.unwrap();
        assert_eq!(res.status(), 404, "{path}");
    }
    let res = app.http.get(app.url("/api/orders")).send().await.unwrap();
    assert_eq!(res.status(), 401, "a token is required");
    let res = app
        .client_for("c")
        .get(app.url("/api/orders?customer_id=someone-else"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422, "only the caller's own orders");
    assert_eq!(shop.inventory.reserve_calls(), 0);
    app.stop().await;
}

#[tokio::test]
async fn insufficient_stock_is_409_naming_the_products() {
    for db in all_backends().await {
        let shop = Shop::new(&[3, 10]).await;
        let mut settings = shop.settings(db.url());
        // Keep the first answer cached, so the cache says yes after it.
        settings.resilience.stock_cache.ttl_seconds = Seconds::new(60.0);
        let app = TestApp::spawn(settings).await;
        let (a, b) = (shop.products[0], shop.products[1]);

        // The cached stock already says no: nothing is created.
        let res = app
            .post_order(None, &order_body("c", &[(a, 5), (b, 1)]))
            .await;
        assert_eq!(res.status(), 409);
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["type"], "urn:shopeasy:problem:out-of-stock");
        assert_eq!(body["products"][0]["product_id"], a.to_string());
        assert_eq!(body["products"][0]["available"], 3);
        assert_eq!(shop.inventory.reserve_calls(), 0);

        // The cache says yes but Inventory says no: the order is rejected.
        let cached_ok = app.post_order(None, &order_body("c", &[(a, 2)])).await;
        assert_eq!(cached_ok.status(), 201);
        let res = app.post_order(None, &order_body("c", &[(a, 2)])).await;
        assert_eq!(res.status(), 409, "{}", db.name());
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["products"][0]["available"], 1);
        let rejected = app.get_order(body["order_id"].as_str().unwrap()).await;
        assert_eq!(rejected["status"], "rejected");
        assert_eq!(shop.inventory.stock(a), 1, "nothing more reserved");
        app.stop().await;
    }
}

#[tokio::test]
async fn cancel_releases_stock_once_and_is_idempotent() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let a = shop.products[0];
        let order: Value = app
            .post_order(None, &order_body("c", &[(a, 4)]))
            .await
            .json()
            .await
            .unwrap();
        let id = order["id"].as_str().unwrap();
        assert_eq!(shop.inventory.stock(a), 6);
        for _ in 0..2 {
            let res = app.cancel(id).await;
            assert_eq!(res.status(), 200);
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["status"], "cancelled");
        }
        assert_eq!(shop.inventory.stock(a), 10, "released once");
        assert!(shop.inventory.live_reservations().is_empty());
        assert_eq!(
            shop.inventory.release_calls(),
            1,
            "a second cancel calls nothing"
        );
        let missing = uuid::Uuid::new_v4();
        let res = app.cancel(&missing.to_string()).await;
        assert_eq!(res.status(), 404);
        app.stop().await;
    }
}

#[tokio::test]
async fn inventory_down_cached_stock_gives_202_then_the_worker_confirms() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let a = shop.products[0];
    // Warm the stock cache.
    assert_eq!(
        app.post_order(None, &order_body("c", &[(a, 1)]))
            .await
            .status(),
        201
    );

    shop.inventory.set_mode(Mode::Unavailable);
    let res = app.post_order(None, &order_body("c", &[(a, 2)])).await;
    assert_eq!(res.status(), 202);
    assert!(res.headers().contains_key("location"));
    let order: Value = res.json().await.unwrap();
    assert_eq!(order["status"], "pending");
    let id = order["id"].as_str().unwrap().to_owned();

    // A product never seen before has nothing cached: 503 + Retry-After.
    let fresh = uuid::Uuid::new_v4();
    shop.product.add(fresh, 100);
    shop.inventory.set_stock(fresh, 5);
    let res = app.post_order(None, &order_body("c", &[(fresh, 1)])).await;
    assert_eq!(res.status(), 503);
    assert!(res.headers().contains_key("retry-after"));

    shop.inventory.set_mode(Mode::Healthy);
    // Break duration (1 s) + a few seconds.
    app.wait_status(&id, "confirmed", Duration::from_secs(6))
        .await;
    assert_eq!(shop.inventory.stock(a), 7);
    assert_eq!(shop.inventory.reserved(a), 3, "each order reserved once");
    let backlog = app.orders.store().backlog().await.unwrap();
    assert_eq!(backlog, 0, "outbox drained");
    app.stop().await;
}

#[tokio::test]
async fn a_backlog_drains_batch_after_batch_without_waiting_a_poll_each() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let shop = Shop::new(&[100]).await;
    let mut settings = shop.settings(db.url());
    // Two rows a batch, a poll every 4 s: twelve pending orders would take
    // six polls (20 s and more) if each batch waited for the next poll.
    settings.outbox.batch_size = 2;
    settings.outbox.poll_interval_seconds = Seconds::new(4.0);
    settings.orders.max_open_per_customer = 100;
    let app = TestApp::spawn(settings).await;
    let a = shop.products[0];
    let body = order_body("c", &[(a, 1)]);
    assert_eq!(app.post_order(None, &body).await.status(), 201);
    shop.inventory.set_mode(Mode::Unavailable);
    let mut ids = Vec::new();
    for _ in 0..12 {
        let res = app.post_order(None, &body).await;
        assert_eq!(res.status(), 202);
        let order: Value = res.json().await.unwrap();
        ids.push(order["id"].as_str().unwrap().to_owned());
    }
    shop.inventory.set_mode(Mode::Healthy);
    let healed = tokio::time::Instant::now();
    let drained = crate::helpers::eventually(Duration::from_secs(9), || async {
        app.orders.store().backlog().await.unwrap() == 0
    })
    .await;
    assert!(drained, "not drained {:?} after healing", healed.elapsed());
    // At most one poll interval (4 s) plus the breaker's 1 s and the rows'
    // backoffs, not six intervals.
    assert!(healed.elapsed() < Duration::from_secs(9));
    for id in &ids {
        app.wait_status(id, "confirmed", Duration::from_secs(1))
            .await;
    }
    assert_eq!(shop.inventory.reserved(a), 13, "each order reserved once");
    app.stop().await;
}

#[tokio::test]
async fn the_admin_listener_shows_health_metrics_and_resilience() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    assert_eq!(
        app.post_order(None, &order_body("c", &[(shop.products[0], 1)]))
            .await
            .status(),
        201
    );
    let admin = |path: &str| format!("http://{}{path}", app.admin);
    let ready = app.http.get(admin("/health/ready")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let r = app.admin_json("/admin/resilience").await;
    assert_eq!(r["circuit_breakers"]["inventory"]["state"], "closed", "{r}");
    assert_eq!(r["circuit_breakers"]["product"]["state"], "closed", "{r}");
    assert!(
        r["retry_budgets"]["inventory"]["balance"].is_number(),
        "{r}"
    );
    assert!(r["retry_budgets"]["product"]["balance"].is_number(), "{r}");
    assert!(
        r["caches"]["stock"]["requests"]["miss"].as_u64().unwrap() >= 1,
        "{r}"
    );
    let ok = crate::helpers::eventually(Duration::from_secs(2), || async {
        let metrics = app
            .http
            .get(admin("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metrics.contains("shopeasy_outbox_backlog")
            && metrics.contains("shopeasy_stock_cache_requests_total")
            && metrics.contains("shopeasy_downstream_request_duration_seconds")
    })
    .await;
    assert!(ok, "metrics missing");
    // The public listener serves none of it.
    let res = app.http.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(res.status(), 404);
    app.stop().await;
}

#[tokio::test]
async fn the_callers_deadline_bounds_the_request() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let mut settings = shop.settings(db.url());
    settings.resilience.inventory.timeout_seconds = Seconds::new(3.0);
    settings.resilience.stock_cache.ttl_seconds = Seconds::new(60.0);
    let app = TestApp::spawn(settings).await;
    let body = order_body("c", &[(shop.products[0], 1)]);
    assert_eq!(app.post_order(None, &body).await.status(), 201);

    shop.inventory.set_mode(Mode::Hang);
    let started = tokio::time::Instant::now();
    let res = app
        .client_for("c")
        .post(app.url("/api/orders"))
        .header("shopeasy-deadline-ms", "300")
        .json(&body)
        .send()
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1000),
        "took {took:?} for a 300 ms deadline"
    );
    assert_eq!(
        res.status(),
        202,
        "cached stock says yes: accepted as pending"
    );
    // Inventory was told the caller's remaining time, not its own 3 s.
    let last = shop.inventory.timeouts().pop().unwrap();
    let sent = shopeasy_resilience::deadline::parse_grpc_timeout(&last.parse().unwrap()).unwrap();
    assert!(
        sent <= Duration::from_millis(300),
        "inventory was given {sent:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_hung_inventory_does_not_slow_reading_orders() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let mut settings = shop.settings(db.url());
    settings.resilience.inventory.timeout_seconds = Seconds::new(5.0);
    settings.resilience.inventory.max_concurrency = 4;
    let app = TestApp::spawn(settings).await;
    let order: Value = app
        .post_order(None, &order_body("c", &[(shop.products[0], 1)]))
        .await
        .json()
        .await
        .unwrap();
    let id = order["id"].as_str().unwrap().to_owned();
    shop.inventory.set_mode(Mode::Hang);
    // Stuck order placements fill Inventory's bulkhead…
    let stuck: Vec<_> = (0..8)
        .map(|_| {
            let http = app.client_for("c");
            let url = app.url("/api/orders");
            let body = order_body("c", &[(uuid::Uuid::new_v4(), 1)]);
            tokio::spawn(async move { http.post(url).json(&body).send().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // …while reading an order stays fast.
    let started = tokio::time::Instant::now();
    assert_eq!(app.get_order(&id).await["id"], id.as_str());
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    for s in stuck {
        s.abort();
    }
    app.stop().await;
}

#[tokio::test]
async fn a_customers_orders_are_listed_in_bounded_pages() {
    for db in all_backends().await {
        let shop = Shop::new(&[100, 100]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let (a, b) = (shop.products[0], shop.products[1]);
        for _ in 0..5 {
            let res = app
                .post_order(None, &order_body("c-page", &[(a, 1), (b, 2)]))
                .await;
            assert_eq!(res.status(), 201);
        }
        assert_eq!(
            app.post_order(None, &order_body("c-other", &[(a, 1)]))
                .await
                .status(),
            201
        );
        let page = |query: String| {
            let app = &app;
            async move {
                let res = app
                    .client_for("c-page")
                    .get(app.url(&format!("/api/orders?customer_id=c-page{query}")))
                    .send()
                    .await
                    .unwrap();
                (res.status().as_u16(), res.json::<Value>().await.unwrap())
            }
        };
        let mut seen = Vec::new();
        let mut cursor = String::new();
        let mut sizes = Vec::new();
        loop {
            let (status, body) = page(format!("&limit=2{cursor}")).await;
            assert_eq!(status, 200, "{body}");
            let items = body["items"].as_array().unwrap();
            sizes.push(items.len());
            for o in items {
                assert_eq!(o["customer_id"], "c-page");
                assert_eq!(o["items"].as_array().unwrap().len(), 2, "its lines: {o}");
                seen.push(o.clone());
            }
            match body["next_cursor"].as_str() {
                Some(c) => cursor = format!("&cursor={c}"),
                None => break,
            }
        }
        assert_eq!(sizes, [2, 2, 1], "{}", db.name());
        let ids: std::collections::HashSet<_> = seen.iter().map(|o| o["id"].clone()).collect();
        assert_eq!(ids.len(), 5, "each order once");
        let created: Vec<&str> = seen
            .iter()
            .map(|o| o["created_at"].as_str().unwrap())
            .collect();
        let mut newest_first = created.clone();
        newest_first.sort_unstable_by(|x, y| y.cmp(x));
        assert_eq!(created, newest_first);
        // Without a limit: the whole (short) list, no cursor, as before paging.
        let (status, body) = page(String::new()).await;
        assert_eq!(status, 200);
        assert_eq!(body["items"].as_array().unwrap().len(), 5);
        assert!(body.get("next_cursor").is_none(), "{body}");
        for bad in ["&limit=0", "&limit=101", "&limit=ten", "&cursor=nope"] {
            let (status, body) = page(bad.to_owned()).await;
            assert_eq!(status, 422, "{bad}: {body}");
            assert!(body["detail"].is_string(), "{body}");
        }
        // Worded as product's list words it: one API, one sentence.
        let (_, body) = page("&limit=0".to_owned()).await;
        assert_eq!(
            body["errors"][0],
            json!({"field": "limit", "message": "must be a whole number from 1 to 100"}),
            "{body}"
        );
        app.stop().await;
    }
}
