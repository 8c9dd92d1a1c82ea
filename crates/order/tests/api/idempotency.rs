//! Idempotency keys (SPEC §3) and the saga's crash points (FAULTS.md C1,
//! C2, C7, C8, C9).

use std::time::Duration;

use serde_json::Value;
use shopeasy_order::failpoints::Failpoint;
use shopeasy_runtime::settings::Seconds;
use shopeasy_testkit::all_backends;

use crate::{
    fakes::Mode,
    helpers::{Shop, TestApp, eventually, order_body, orders_of},
};

#[tokio::test]
async fn ten_concurrent_posts_with_one_key_create_one_order() {
    for db in all_backends().await {
        let shop = Shop::new(&[100]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let body = order_body("c-conc", &[(shop.products[0], 1)]);
        let responses = futures::future::join_all((0..10).map(|_| async {
            let res = app.post_order(Some("key-concurrent"), &body).await;
            let status = res.status().as_u16();
            let replayed = res.headers().contains_key("idempotent-replayed");
            (status, replayed, res.text().await.unwrap())
        }))
        .await;
        let created: Vec<_> = responses
            .iter()
            .filter(|(s, replayed, _)| *s == 201 && !replayed)
            .collect();
        assert_eq!(created.len(), 1, "{}: {responses:?}", db.name());
        for (status, replayed, text) in &responses {
            match status {
                201 => assert!(*replayed || text == &created[0].2),
                409 => assert!(text.contains("request-in-progress"), "{text}"),
                other => panic!("unexpected {other}: {text}"),
            }
        }
        assert_eq!(
            orders_of(&app, "c-conc").await.len(),
            1,
            "exactly one order"
        );
        assert_eq!(shop.inventory.stock(shop.products[0]), 99);
        app.stop().await;
    }
}

#[tokio::test]
async fn a_replay_is_byte_identical_and_marked() {
    for db in all_backends().await {
        let shop = Shop::new(&[5]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let body = order_body("c-replay", &[(shop.products[0], 2)]);

        let first = app.post_order(Some("key-1"), &body).await;
        assert_eq!(first.status(), 201);
        assert!(!first.headers().contains_key("idempotent-replayed"));
        let location = first.headers()["location"].clone();
        let first_bytes = first.bytes().await.unwrap();

        // Field order and spacing differ; the canonical request is the same.
        let same = serde_json::json!({
            "items": [{"quantity": 2, "product_id": shop.products[0].to_string().to_uppercase()}],
            "customer_id": "c-replay",
        });
        let again = app.post_order(Some("key-1"), &same).await;
        assert_eq!(again.status(), 201);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.headers()["location"], location);
        assert_eq!(again.bytes().await.unwrap(), first_bytes, "byte for byte");
        assert_eq!(orders_of(&app, "c-replay").await.len(), 1);
        assert_eq!(shop.inventory.stock(shop.products[0]), 3, "reserved once");

        // Same key, another request: 422.
        let other = order_body("c-replay", &[(shop.products[0], 3)]);
        let res = app.post_order(Some("key-1"), &other).await;
        assert_eq!(res.status(), 422);
        let problem: Value = res.json().await.unwrap();
        assert_eq!(
            problem["type"],
            "urn:shopeasy:problem:idempotency-key-reused"
        );

        // A request that failed before creating anything is not stored: the
        // retry runs again (and now succeeds).
        let unknown = uuid::Uuid::new_v4();
        let late = order_body("c-replay", &[(unknown, 1)]);
        assert_eq!(app.post_order(Some("key-2"), &late).await.status(), 404);
        shop.product.add(unknown, 10);
        shop.inventory.set_stock(unknown, 1);
        assert_eq!(app.post_order(Some("key-2"), &late).await.status(), 201);
        app.stop().await;
    }
}

#[tokio::test]
async fn a_key_in_flight_answers_409_with_retry_after() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[5]).await;
    let mut settings = shop.settings(db.url());
    settings.resilience.inventory.timeout_seconds = Seconds::new(5.0);
    let app = TestApp::spawn(settings).await;
    // Between commit (a) (key + order) and (c) (the response) lies the
    // reservation: make it slow.
    shop.inventory
        .set_reserve_delay(Duration::from_millis(1500));
    let body = order_body("c-flight", &[(shop.products[0], 1)]);

    let first = {
        let http = app.client_for("c-flight");
        let url = app.url("/api/orders");
        let body = body.clone();
        tokio::spawn(async move {
            http.post(url)
                .header("Idempotency-Key", "key-flight")
                .json(&body)
                .send()
                .await
                .unwrap()
        })
    };
    // The key commits with the order, before the (slow) reservation.
    let claimed = eventually(Duration::from_secs(2), || async {
        shop.inventory.reserve_calls() >= 1
    })
    .await;
    assert!(claimed);
    let seen = std::cell::RefCell::new(None);
    let got_409 = eventually(Duration::from_secs(1), || async {
        let res = app.post_order(Some("key-flight"), &body).await;
        if res.status() == 409 {
            *seen.borrow_mut() = Some((
                res.headers().get("retry-after").cloned(),
                res.text().await.unwrap(),
            ));
            true
        } else {
            false
        }
    })
    .await;
    assert!(got_409, "no 409 while the first request ran");
    let (retry_after, text) = seen.into_inner().unwrap();
    assert!(retry_after.is_some(), "Retry-After");
    assert!(text.contains("request-in-progress"), "{text}");

    let first = first.await.unwrap();
    assert_eq!(first.status(), 201);
    let first_bytes = first.bytes().await.unwrap();
    let replay = app.post_order(Some("key-flight"), &body).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.bytes().await.unwrap(), first_bytes);
    app.stop().await;
}

#[tokio::test]
async fn crash_after_commit_before_reserve_the_worker_reserves_once() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let a = shop.products[0];
        app.failpoints.arm(Failpoint::AfterOrderCommit);
        let body = order_body("c-crash1", &[(a, 3)]);
        let res = app.post_order(Some("key-crash1"), &body).await;
        assert_eq!(res.status(), 500, "the simulated crash");
        assert_eq!(shop.inventory.reserve_calls(), 0);
        let orders = orders_of(&app, "c-crash1").await;
        assert_eq!(orders.len(), 1);
        assert_eq!(orders[0]["status"], "pending", "committed before the crash");
        let id = orders[0]["id"].as_str().unwrap().to_owned();

        // The worker takes the row over once the crashed request's lease
        // (1 s) runs out.
        app.wait_status(&id, "confirmed", Duration::from_secs(5))
            .await;
        assert_eq!(shop.inventory.stock(a), 7);

        // The client's retry resumes the key (its lock ran out) and answers
        // for the same order.
        let ok = eventually(Duration::from_secs(5), || async {
            app.post_order(Some("key-crash1"), &body).await.status() == 201
        })
        .await;
        assert!(ok, "the retry never succeeded");
        let orders = orders_of(&app, "c-crash1").await;
        assert_eq!(orders.len(), 1, "no second order");
        assert_eq!(orders[0]["id"], id.as_str());
        assert_eq!(shop.inventory.stock(a), 7, "reserved once (C7)");
        assert_eq!(shop.inventory.reserved(a), 3);
        app.stop().await;
    }
}

#[tokio::test]
async fn a_panicking_outbox_task_does_not_stop_the_worker() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let a = shop.products[0];
    app.failpoints.arm(Failpoint::AfterOrderCommit);
    app.failpoints.arm(Failpoint::OutboxTaskPanics);
    let res = app
        .post_order(Some("key-panic"), &order_body("c-panic", &[(a, 2)]))
        .await;
    assert_eq!(res.status(), 500, "the simulated crash");
    let orders = orders_of(&app, "c-panic").await;
    let id = orders[0]["id"].as_str().unwrap().to_owned();
    // The worker's first run of the task panics; once the lease runs out the
    // row is claimed again by the same, still running, worker.
    app.wait_status(&id, "confirmed", Duration::from_secs(8))
        .await;
    assert_eq!(shop.inventory.stock(a), 8, "reserved once");
    app.stop().await;
}

#[tokio::test]
async fn crash_after_reserve_before_confirmed_never_reserves_twice() {
    for db in all_backends().await {
        let shop = Shop::new(&[10]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let a = shop.products[0];
        app.failpoints.arm(Failpoint::AfterReserve);
        let body = order_body("c-crash2", &[(a, 4)]);
        assert_eq!(
            app.post_order(Some("key-crash2"), &body).await.status(),
            500
        );
        assert_eq!(shop.inventory.stock(a), 6, "reserved before the crash");
        let orders = orders_of(&app, "c-crash2").await;
        assert_eq!(orders[0]["status"], "pending");
        let id = orders[0]["id"].as_str().unwrap().to_owned();

        // Retry until the key's lock (2 s) runs out: resumes, reserves again
        // with the same reservation id (nothing more), confirms.
        let last = std::cell::RefCell::new(Value::Null);
        let ok = eventually(Duration::from_secs(6), || async {
            let res = app.post_order(Some("key-crash2"), &body).await;
            let status = res.status();
            *last.borrow_mut() = res.json().await.unwrap();
            status == 201
        })
        .await;
        let final_body = last.into_inner();
        assert!(ok, "retry never succeeded: {final_body}");
        assert_eq!(final_body["id"], id.as_str());
        assert_eq!(final_body["status"], "confirmed");
        app.wait_status(&id, "confirmed", Duration::from_secs(1))
            .await;
        // Let the worker run over it too (its lease ran out as well).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(shop.inventory.reserve_calls() >= 2, "reserve was repeated");
        assert_eq!(shop.inventory.stock(a), 6, "but reserved once (C7)");
        assert_eq!(shop.inventory.reserved(a), 4);
        assert_eq!(app.orders.store().backlog().await.unwrap(), 0);
        app.stop().await;
    }
}

#[tokio::test]
async fn crash_after_release_a_second_cancel_releases_nothing_more() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let a = shop.products[0];
    let order: Value = app
        .post_order(None, &order_body("c", &[(a, 5)]))
        .await
        .json()
        .await
        .unwrap();
    let cancel = app.url(&format!(
        "/api/orders/{}/cancel",
        order["id"].as_str().unwrap()
    ));
    app.failpoints.arm(Failpoint::AfterRelease);
    let http = app.client_for("c");
    assert_eq!(http.post(&cancel).send().await.unwrap().status(), 500);
    assert_eq!(shop.inventory.stock(a), 10);
    let res = http.post(&cancel).send().await.unwrap();
    assert_eq!(res.status(), 200);
    // The worker finishes the leased release row (idempotent at Inventory).
    let drained = eventually(Duration::from_secs(5), || async {
        app.orders.store().backlog().await.unwrap() == 0
    })
    .await;
    assert!(drained);
    assert_eq!(shop.inventory.stock(a), 10, "released once");
    app.stop().await;
}

#[tokio::test]
async fn a_restart_between_accepting_and_confirming_loses_nothing() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let shop = Shop::new(&[10]).await;
    let settings = shop.settings(db.url());
    let app = TestApp::spawn(settings.clone()).await;
    let a = shop.products[0];
    assert_eq!(
        app.post_order(None, &order_body("c-rs", &[(a, 1)]))
            .await
            .status(),
        201
    );
    shop.inventory.set_mode(Mode::Unavailable);
    let res = app
        .post_order(Some("key-rs"), &order_body("c-rs", &[(a, 2)]))
        .await;
    assert_eq!(res.status(), 202);
    let pending: Value = res.json().await.unwrap();
    app.stop().await;

    shop.inventory.set_mode(Mode::Healthy);
    let app = TestApp::spawn(settings).await;
    let id = pending["id"].as_str().unwrap();
    app.wait_status(id, "confirmed", Duration::from_secs(5))
        .await;
    assert_eq!(shop.inventory.stock(a), 7);
    // The stored 202 is still what the key replays.
    let replay = app
        .post_order(Some("key-rs"), &order_body("c-rs", &[(a, 2)]))
        .await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    app.stop().await;
}

#[tokio::test]
async fn a_hundred_concurrent_orders_on_stock_ten_never_oversell() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let shop = Shop::new(&[10]).await;
    let mut settings = shop.settings(db.url());
    // Correctness under concurrency, not latency: generous bounds (a 503
    // would still be a correct answer on a loaded machine).
    settings.resilience.product.timeout_seconds = Seconds::new(3.0);
    settings.resilience.inventory.timeout_seconds = Seconds::new(3.0);
    settings.storage.database.acquire_timeout_seconds = Seconds::new(10.0);
    // One customer's hundred placements are all `pending` at once for a
    // moment: above the default open-order limit, which is not under test.
    settings.orders.max_open_per_customer = 1000;
    let app = TestApp::spawn(settings).await;
    let a = shop.products[0];
    let statuses = futures::future::join_all((0..100).map(|i| {
        let body = order_body("c-100", &[(a, 1)]);
        let app = &app;
        async move {
            app.post_order(Some(&format!("key-100-{i}")), &body)
                .await
                .status()
                .as_u16()
        }
    }))
    .await;
    let created = statuses.iter().filter(|s| **s == 201).count();
    assert!(
        statuses.iter().all(|s| [201, 202, 409, 503].contains(s)),
        "{statuses:?}"
    );
    // Let any pending orders resolve (C8), then check C4–C7.
    let resolved = eventually(Duration::from_secs(10), || async {
        orders_of(&app, "c-100")
            .await
            .iter()
            .all(|o| o["status"] != "pending")
    })
    .await;
    assert!(resolved);
    let orders = orders_of(&app, "c-100").await;
    let confirmed: Vec<String> = orders
        .iter()
        .filter(|o| o["status"] == "confirmed")
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(confirmed.len() <= 10, "oversold: {}", confirmed.len());
    assert!(created <= 10);
    assert_eq!(
        shop.inventory.stock(a) + shop.inventory.reserved(a),
        10,
        "stock conserved (C4)"
    );
    assert_eq!(shop.inventory.reserved(a), confirmed.len() as i64, "C5/C7");
    let mut live = shop.inventory.live_reservations();
    live.sort();
    let mut confirmed = confirmed;
    confirmed.sort();
    assert_eq!(live, confirmed, "reservations = confirmed orders (C6)");
    app.stop().await;
}

#[tokio::test]
async fn a_key_sent_twice_is_refused_and_places_nothing() {
    for db in all_backends().await {
        let shop = Shop::new(&[5]).await;
        let app = TestApp::spawn(shop.settings(db.url())).await;
        let body = order_body("c-twice", &[(shop.products[0], 1)]);
        let res = app
            .client_for("c-twice")
            .post(app.url("/api/orders"))
            .header("Idempotency-Key", "twice-a")
            .header("Idempotency-Key", "twice-b")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 422, "{}", db.name());
        let problem: Value = res.json().await.unwrap();
        assert_eq!(
            problem["errors"],
            serde_json::json!([{"field": "Idempotency-Key", "message": "must be sent once"}]),
            "{problem}"
        );
        assert!(
            orders_of(&app, "c-twice").await.is_empty(),
            "nothing placed"
        );
        assert_eq!(
            shop.inventory.stock(shop.products[0]),
            5,
            "nothing reserved"
        );

        // Either key alone is then fresh: the refused request stored neither.
        for key in ["twice-a", "twice-b"] {
            let placed = app.post_order(Some(key), &body).await;
            assert_eq!(placed.status(), 201, "{key}");
            assert!(!placed.headers().contains_key("idempotent-replayed"));
        }
        assert_eq!(orders_of(&app, "c-twice").await.len(), 2);
        app.stop().await;
    }
}
