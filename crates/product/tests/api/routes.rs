//! Every route's success and every error status, against the real server
//! with Postgres and Redis.

use serde_json::{Value, json};

use crate::helpers::{TOKEN, TestApp, body, fields, problem, spawn};

#[tokio::test]
async fn create_get_update_delete() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let app = spawn(db).await;

    let res = app
        .client
        .post(app.url("/api/products"))
        .bearer_auth(TOKEN)
        .json(&body("TEA-001"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    let created: Value = res.json().await.unwrap();
    assert_eq!(
        location,
        format!("/api/products/{}", created["id"].as_str().unwrap())
    );
    assert_eq!(created["sku"], "TEA-001");
    assert_eq!(created["price_cents"], 1250);
    assert_eq!(created["currency"], "EUR");

    let res = app.get(&location).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    assert_eq!(res.json::<Value>().await.unwrap(), created);

    let mut changed = body("TEA-002");
    changed["price_cents"] = json!(99);
    let id = created["id"].as_str().unwrap();
    let res = app.put(id, &changed).await;
    assert_eq!(res.status(), 200);
    let updated: Value = res.json().await.unwrap();
    assert_eq!(
        (updated["sku"].as_str(), updated["price_cents"].as_i64()),
        (Some("TEA-002"), Some(99))
    );
    assert_eq!(
        app.get(&location).await.json::<Value>().await.unwrap(),
        updated
    );

    let delete = || {
        app.client
            .delete(app.url(&location))
            .bearer_auth(TOKEN)
            .send()
    };
    assert_eq!(delete().await.unwrap().status(), 204);
    problem(app.get(&location).await, 404).await;
    problem(delete().await.unwrap(), 404).await;
}

#[tokio::test]
async fn list_pages_and_rejects_bad_queries() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let app = spawn(db).await;
    let empty: Value = app.get("/api/products").await.json().await.unwrap();
    assert_eq!(empty, json!({"items": [], "next_cursor": null}));

    for i in 0..25 {
        app.create(&format!("SKU-{i:03}")).await;
    }
    let page: Value = app.get("/api/products").await.json().await.unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 20, "default limit");
    let cursor = page["next_cursor"].as_str().unwrap();
    let rest: Value = app
        .get(&format!("/api/products?limit=100&cursor={cursor}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest["items"].as_array().unwrap().len(), 5);
    assert_eq!(rest["next_cursor"], Value::Null);

    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=-1", "limit"),
        ("limit=ten", "limit"),
        // Present but empty is not a number (as order answers it), not
        // the default: the document says `limit` is an integer.
        ("limit=", "limit"),
        ("cursor=abc", "cursor"),
        ("cursor=c1%00", "cursor"),
    ] {
        let p = problem(app.get(&format!("/api/products?{query}")).await, 422).await;
        assert_eq!(fields(&p), [field], "{query}");
    }
    let p = problem(app.get("/api/products?limit=0&cursor=x").await, 422).await;
    assert_eq!(fields(&p), ["limit", "cursor"]);
    // Worded as order's list words it: one API, one sentence.
    assert_eq!(
        p["errors"][0]["message"],
        "must be a whole number from 1 to 100"
    );
}

/// A product service on a fresh Postgres database holding one product
/// `sku`, and that product's path; `None` (skipped) without Postgres.
async fn with_product(sku: &str) -> Option<(TestApp, String)> {
    let app = spawn(shopeasy_testkit::postgres().await?).await;
    let product = app.create(sku).await;
    let path = format!("/api/products/{}", product["id"].as_str().unwrap());
    Some((app, path))
}

#[tokio::test]
async fn admin_routes_need_the_token_and_never_say_why() {
    let Some((app, path)) = with_product("AUTH-1").await else {
        return;
    };
    let product: Value = app.get(&path).await.json().await.unwrap();

    let mut bodies = Vec::new();
    for auth in [
        None,
        Some("Bearer wrong-token".to_owned()),
        Some(format!("Basic {TOKEN}")),
        Some(format!("Bearer {TOKEN}x")),
        Some("Bearer".to_owned()),
    ] {
        for method in [
            reqwest::Method::POST,
            reqwest::Method::PUT,
            reqwest::Method::DELETE,
        ] {
            let url = if method == reqwest::Method::POST {
                app.url("/api/products")
            } else {
                app.url(&path)
            };
            let mut req = app
                .client
                .request(method.clone(), url)
                .json(&body("AUTH-2"));
            if let Some(auth) = &auth {
                req = req.header("authorization", auth);
            }
            let res = req.send().await.unwrap();
            assert_eq!(
                res.headers()["www-authenticate"],
                "Bearer realm=\"shopeasy\""
            );
            bodies.push(problem(res, 401).await);
        }
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "identical 401s");
    // Nothing was changed.
    assert_eq!(app.get(&path).await.json::<Value>().await.unwrap(), product);
    // The scheme is case-insensitive.
    let res = app
        .client
        .put(app.url(&path))
        .header("authorization", format!("bearer {TOKEN}"))
        .json(&body("AUTH-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn every_error_status_is_problem_json() {
    let Some(db) = shopeasy_testkit::postgres().await else {
        return;
    };
    let app = spawn(db).await;
    let existing = app.create("DUP-1").await;
    let id = existing["id"].as_str().unwrap();
    let post = |body: reqwest::Body, content_type: &str| {
        app.client
            .post(app.url("/api/products"))
            .bearer_auth(TOKEN)
            .header("content-type", content_type)
            .body(body)
            .send()
    };

    // 400 malformed JSON.
    problem(
        post("{\"sku\":".into(), "application/json").await.unwrap(),
        400,
    )
    .await;
    // 415 wrong content type (and none at all).
    problem(
        post(body("X-1").to_string().into(), "text/plain")
            .await
            .unwrap(),
        415,
    )
    .await;
    let res = app
        .client
        .post(app.url("/api/products"))
        .bearer_auth(TOKEN)
        .body(body("X-1").to_string())
        .send()
        .await
        .unwrap();
    problem(res, 415).await;
    // 413 over 64 KiB.
    let mut big = body("BIG-1");
    big["description"] = json!("x".repeat(70 * 1024));
    problem(
        post(big.to_string().into(), "application/json")
            .await
            .unwrap(),
        413,
    )
    .await;
    // 422 naming each field.
    let bad = json!({"sku": "no good", "name": "", "price_cents": -1, "currency": "EURO"});
    let p = problem(
        post(bad.to_string().into(), "application/json")
            .await
            .unwrap(),
        422,
    )
    .await;
    assert_eq!(fields(&p), ["sku", "name", "price_cents", "currency"]);
    let p = problem(post("{}".into(), "application/json").await.unwrap(), 422).await;
    assert_eq!(fields(&p), ["sku", "name", "price_cents", "currency"]);
    let p = problem(post("[1,2]".into(), "application/json").await.unwrap(), 422).await;
    assert_eq!(fields(&p), ["body"]);
    // 422 for a member sent twice (which one counts would depend on the
    // parser, so neither does), and nothing is created: the SKU is free.
    let twice =
        r#"{"sku":"TWICE-1","name":"Twice","price_cents":100,"currency":"EUR","price_cents":1}"#;
    let p = problem(post(twice.into(), "application/json").await.unwrap(), 422).await;
    assert_eq!(fields(&p), ["price_cents"]);
    assert_eq!(p["errors"][0]["message"], "must be sent once", "{p}");
    let once = post(body("TWICE-1").to_string().into(), "application/json")
        .await
        .unwrap();
    assert_eq!(once.status(), 201);
    // 409 duplicate SKU, on create and on update.
    let p = problem(
        post(body("DUP-1").to_string().into(), "application/json")
            .await
            .unwrap(),
        409,
    )
    .await;
    assert_eq!(fields(&p), ["sku"]);
    let other = app.create("DUP-2").await;
    let p = problem(
        app.put(other["id"].as_str().unwrap(), &body("DUP-1")).await,
        409,
    )
    .await;
    assert_eq!(p["type"], "urn:shopeasy:problem:duplicate-sku");
    // 404 unknown or malformed id, on every method.
    let unknown = uuid::Uuid::now_v7().to_string();
    for bad_id in [unknown.as_str(), "not-a-uuid", "%FF%FE"] {
        problem(app.get(&format!("/api/products/{bad_id}")).await, 404).await;
        problem(app.put(bad_id, &body("NEW-1")).await, 404).await;
        let res = app
            .client
            .delete(app.url(&format!("/api/products/{bad_id}")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        problem(res, 404).await;
    }
    // 422 on update.
    let p = problem(app.put(id, &json!({"sku": "DUP-1"})).await, 422).await;
    assert_eq!(fields(&p), ["name", "price_cents", "currency"]);
    // Unknown routes and methods.
    problem(app.get("/api/nothing").await, 404).await;
    problem(app.get("/api/products/a/b").await, 404).await;
    let res = app
        .client
        .patch(app.url("/api/products"))
        .send()
        .await
        .unwrap();
    problem(res, 405).await;
    // The product is untouched by all of this.
    assert_eq!(
        app.get(&format!("/api/products/{id}"))
            .await
            .json::<Value>()
            .await
            .unwrap(),
        existing
    );
}

#[tokio::test]
async fn openapi_document_describes_every_operation() {
    let db = shopeasy_testkit::sqlite();
    let app = spawn(db).await;
    let res = app.get("/api/products/openapi.json").await;
    assert_eq!(res.status(), 200);
    let doc: Value = res.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = &doc["paths"];
    for (path, methods) in [
        ("/api/products", &["get", "post"][..]),
        ("/api/products/{id}", &["get", "put", "delete"][..]),
    ] {
        for m in methods {
            assert!(paths[path][m].is_object(), "{m} {path} documented");
        }
    }
    assert!(paths["/api/products"]["post"]["responses"]["409"].is_object());
    assert!(paths["/api/products/{id}"]["put"]["security"].is_array());
    for schema in ["Product", "ProductPage", "NewProduct", "ProblemDetails"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
    assert_eq!(
        doc,
        serde_json::to_value(shopeasy_product::http::openapi()).unwrap()
    );
}

#[tokio::test]
async fn admin_listener_reports_health_metrics_and_cache() {
    let Some((app, path)) = with_product("MET-1").await else {
        return;
    };
    app.get(&path).await;
    app.get(&path).await;
    let admin = |p: &str| {
        app.client
            .get(format!("http://{}{p}", app.admin_addr))
            .send()
    };
    assert_eq!(admin("/health/ready").await.unwrap().status(), 200);
    assert_eq!(admin("/health/live").await.unwrap().status(), 200);
    let text = app.metrics_text().await;
    let metrics = shopeasy_testkit::Metrics::parse(&text);
    let series = [
        ("service", "shopeasy-product"),
        ("route", "/api/products/{id}"),
        ("method", "GET"),
        ("status", "200"),
    ];
    assert!(
        metrics
            .get("shopeasy_http_server_requests_total", &series)
            .is_some(),
        "{text}"
    );
    for result in ["miss", "hit"] {
        let series = [("kind", "item"), ("result", result)];
        assert!(
            metrics
                .get("shopeasy_product_cache_requests_total", &series)
                .is_some(),
            "{result}: {text}"
        );
    }
    let stats = app.cache_stats().await;
    assert_eq!(
        stats["backend"],
        if shopeasy_testkit::redis_url().is_some() {
            "redis"
        } else {
            "local"
        }
    );
    assert!(stats["hit"].as_u64().unwrap() >= 1, "{stats}");
}

#[tokio::test]
async fn made_up_methods_share_one_other_series() {
    let app = spawn(shopeasy_testkit::sqlite()).await;
    for name in ["FOO1", "FOO2", "FOO3"] {
        let method = reqwest::Method::from_bytes(name.as_bytes()).unwrap();
        let res = app
            .client
            .request(method, app.url("/api/products"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405, "{name}");
    }
    let text = app.metrics_text().await;
    assert!(
        !text.contains("method=\"FOO"),
        "a made-up method is a label:\n{text}"
    );
    let metrics = shopeasy_testkit::Metrics::parse(&text);
    let other = [("service", "shopeasy-product"), ("method", "_OTHER")];
    let series: Vec<_> = metrics
        .matching("shopeasy_http_server_requests_total", &other)
        .collect();
    assert_eq!(series.len(), 1, "{text}");
    assert_eq!(series[0].value, 3.0, "{text}");
    assert_eq!(
        metrics
            .matching(
                "shopeasy_http_server_request_duration_seconds_count",
                &other
            )
            .count(),
        1,
        "{text}"
    );
}
