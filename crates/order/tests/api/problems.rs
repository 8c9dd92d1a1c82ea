//! SPEC §3 over the real router: every error path answers a complete
//! problem (`type`, `title`, `status`, `detail`), the extractor rejections,
//! the fallbacks and the saga's answers included. (The variants that need a
//! staged failure — 409 not-cancellable or in-progress, 504, 500 — are
//! covered next to the mapping, in `error`.)

use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{Shop, TestApp, bearer, order_body};

/// Asserts a complete problem+json answer with `status`; returns its body.
async fn complete(res: reqwest::Response, status: u16) -> Value {
    let path = res.url().path().to_owned();
    assert_eq!(res.status(), status, "{path}");
    assert_eq!(
        res.headers()["content-type"],
        "application/problem+json",
        "{status} {path}"
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], status, "{body}");
    for member in ["type", "title", "detail"] {
        assert!(
            body[member].as_str().is_some_and(|v| !v.trim().is_empty()),
            "{member} of {status} {path}: {body}"
        );
    }
    body
}

#[tokio::test]
async fn every_error_path_answers_a_complete_problem() {
    let db = shopeasy_testkit::sqlite();
    let mut shop = Shop::new(&[3, 10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let (scarce, plenty) = (shop.products[0], shop.products[1]);
    let raw = |text: Vec<u8>, content_type: &'static str| {
        app.http
            .post(app.url("/api/orders"))
            .header("authorization", bearer("c"))
            .header("content-type", content_type)
            .body(text)
            .send()
    };

    // 400, 415, 413: the extractor's rejections.
    let json = "application/json";
    for (status, text, content_type) in [
        (400, b"{not json".to_vec(), json),
        (415, b"{}".to_vec(), "text/plain"),
        (413, vec![b' '; 70 * 1024], json),
    ] {
        complete(raw(text, content_type).await.unwrap(), status).await;
    }

    // 422: invalid fields, a field of the wrong type, a bad key, a bad
    // query, a key reused with another request.
    let p = complete(
        app.post_order(None, &json!({"customer_id": "", "items": []}))
            .await,
        422,
    )
    .await;
    assert!(p["errors"].is_array(), "{p}");
    complete(
        raw(br#"{"customer_id":"c","items":"many"}"#.to_vec(), json)
            .await
            .unwrap(),
        422,
    )
    .await;
    complete(
        app.post_order(Some("bad key"), &order_body("c", &[(plenty, 1)]))
            .await,
        422,
    )
    .await;
    complete(
        app.client_for("c")
            .get(app.url("/api/orders?limit=0"))
            .send()
            .await
            .unwrap(),
        422,
    )
    .await;

    // 401: no token, or one that does not verify (with its challenge).
    for res in [
        app.http.get(app.url("/api/orders")).send().await.unwrap(),
        app.http
            .post(app.url("/api/orders"))
            .header("authorization", "Bearer not.a.token")
            .json(&order_body("c", &[(plenty, 1)]))
            .send()
            .await
            .unwrap(),
    ] {
        assert!(res.headers().contains_key("www-authenticate"));
        complete(res, 401).await;
    }
    let placed = app
        .post_order(Some("k-1"), &order_body("c", &[(plenty, 1)]))
        .await;
    assert_eq!(placed.status(), 201);
    complete(
        app.post_order(Some("k-1"), &order_body("c", &[(plenty, 2)]))
            .await,
        422,
    )
    .await;

    // 404: an unknown product, an unknown order, an id that is none, a
    // path no route serves; 405: a known path, an unknown method.
    complete(
        app.post_order(None, &order_body("c", &[(Uuid::new_v4(), 1)]))
            .await,
        404,
    )
    .await;
    for path in [
        format!("/api/orders/{}", Uuid::new_v4()),
        "/api/orders/nope".to_owned(),
        "/elsewhere".to_owned(),
    ] {
        complete(
            app.client_for("c")
                .get(app.url(&path))
                .send()
                .await
                .unwrap(),
            404,
        )
        .await;
    }
    // 400: a path segment that does not decode (axum's rejection would be
    // plain text).
    for path in [
        "/api/orders/%FF",
        "/api/orders/%FF/cancel",
        "/api/stock/%FF",
    ] {
        let client = app.client_for("c");
        let request = if path.ends_with("cancel") {
            client.post(app.url(path))
        } else {
            client.get(app.url(path))
        };
        complete(request.send().await.unwrap(), 400).await;
    }
    complete(
        app.http
            .delete(app.url("/api/orders"))
            .send()
            .await
            .unwrap(),
        405,
    )
    .await;

    // 409: not enough stock.
    complete(
        app.post_order(None, &order_body("c", &[(scarce, 5)])).await,
        409,
    )
    .await;

    // 503: Inventory gone, and nothing cached for a product nobody asked
    // about yet.
    if let Some(inventory) = shop.inventory_server.take() {
        inventory.stop().await;
    }
    let fresh = Uuid::new_v4();
    shop.product.add(fresh, 100);
    let res = app.post_order(None, &order_body("c", &[(fresh, 1)])).await;
    assert!(res.headers().contains_key("retry-after"));
    complete(res, 503).await;
    app.stop().await;
}

/// The document says object: an array of the fields (which serde's derive
/// would read in order) is refused, and a field error speaks JSON's kinds
/// rather than Rust's types.
#[tokio::test]
async fn an_array_is_never_an_order_or_a_line() {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[10]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    let id = shop.products[0].to_string();
    for (body, field, message) in [
        (
            json!({"items": [[id, 1]]}),
            "items[0]",
            "must be a JSON object, found an array",
        ),
        (
            json!(["c", [{"product_id": id, "quantity": 1}]]),
            "body",
            "must be a JSON object, found an array",
        ),
        (
            json!({"items": [{"product_id": id, "quantity": "1"}]}),
            "items[0].quantity",
            "must be an integer, found a string",
        ),
        (
            json!({"items": [{"product_id": id}]}),
            "items[0].quantity",
            "is required",
        ),
    ] {
        let p = complete(app.post_order(None, &body).await, 422).await;
        assert_eq!(
            (&p["errors"][0]["field"], &p["errors"][0]["message"]),
            (&field.into(), &message.into()),
            "{body}"
        );
    }
    assert_eq!(shop.inventory.reserve_calls(), 0, "nothing was reserved");
    let placed = app
        .post_order(None, &json!({"items": [{"product_id": id, "quantity": 1}]}))
        .await;
    assert_eq!(placed.status(), 201, "an object still places the order");
    app.stop().await;
}
