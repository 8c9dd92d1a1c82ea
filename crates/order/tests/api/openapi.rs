//! The order API's OpenAPI document over the real router (issue 15: "the
//! README and OpenAPI say so"): served without a token, it describes the
//! four order operations with their bearer requirement, statuses and
//! headers, and the anonymous stock of a product; every route the router
//! serves under `/api/orders` and `/api/stock` is in it (and nothing else
//! is).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use shopeasy_order::openapi::{PATH, SECURITY_SCHEME};

use crate::helpers::{Shop, TestApp};

/// The order API, as the router serves it: (method, path, statuses the
/// document must list). The guard below checks this list against both the
/// document and the live router, so a route added to one alone fails.
const OPERATIONS: &[(&str, &str, &[u16])] = &[
    (
        "post",
        "/api/orders",
        &[201, 202, 400, 401, 404, 409, 413, 415, 422, 429, 503, 504],
    ),
    ("get", "/api/orders", &[200, 401, 422, 429, 503, 504]),
    (
        "get",
        "/api/orders/{id}",
        &[200, 400, 401, 404, 429, 503, 504],
    ),
    (
        "post",
        "/api/orders/{id}/cancel",
        &[200, 400, 401, 404, 409, 429, 503, 504],
    ),
];

/// The anonymous operations (no bearer requirement), as the router
/// serves them: (method, path, statuses the document must list).
const ANONYMOUS: &[(&str, &str, &[u16])] =
    &[("get", "/api/stock/{product_id}", &[200, 400, 404, 503, 504])];

/// The methods probed for 405 on every documented path.
const METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

/// The service over SQLite, with what must outlive it (the shop's fakes,
/// the database's folder).
async fn spawn() -> (TestApp, Shop, shopeasy_testkit::TestDatabase) {
    let db = shopeasy_testkit::sqlite();
    let shop = Shop::new(&[1]).await;
    let app = TestApp::spawn(shop.settings(db.url())).await;
    (app, shop, db)
}

/// `GET` the document without a token: 200 JSON.
async fn fetch(app: &TestApp) -> Value {
    let res = app.http.get(app.url(PATH)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    res.json().await.unwrap()
}

/// Follows a local `$ref` (`#/components/schemas/Order`).
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(r) => doc
            .pointer(r.strip_prefix('#').unwrap())
            .unwrap_or_else(|| panic!("dangling $ref {r}")),
        None => value,
    }
}

/// Every `$ref` anywhere in `value`.
fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn the_document_is_served_anonymously_and_describes_the_four_operations() {
    let (app, _shop, _db) = spawn().await;
    let doc = fetch(&app).await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    // As built: the served text is the router's own document.
    assert_eq!(
        doc,
        serde_json::to_value(shopeasy_order::http::openapi()).unwrap()
    );

    let scheme = &doc["components"]["securitySchemes"][SECURITY_SCHEME];
    assert_eq!(scheme["type"], "http", "{scheme}");
    assert_eq!(scheme["scheme"], "bearer", "{scheme}");
    assert_eq!(scheme["bearerFormat"], "JWT", "{scheme}");

    for (method, path, statuses) in OPERATIONS {
        let op = &doc["paths"][path][method];
        let what = format!("{method} {path}");
        assert!(op.is_object(), "{what} missing");
        assert_eq!(
            op["security"],
            serde_json::json!([{ SECURITY_SCHEME: [] }]),
            "{what}"
        );
        let documented: BTreeSet<u16> = op["responses"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.parse().unwrap())
            .collect();
        let expected: BTreeSet<u16> = statuses.iter().copied().collect();
        assert_eq!(documented, expected, "{what}");
        let responses = &op["responses"];
        let unauthorized = &responses["401"];
        assert!(
            unauthorized["headers"]["WWW-Authenticate"].is_object(),
            "{what}: {unauthorized}"
        );
        assert!(
            unauthorized["content"]["application/problem+json"].is_object(),
            "{what}: {unauthorized}"
        );
        for status in ["429", "503"] {
            assert!(
                responses[status]["headers"]["Retry-After"].is_object(),
                "{what} {status}: {}",
                responses[status]
            );
        }
        if let Some(not_found) = responses.get("404")
            && path.contains("{id}")
        {
            let text = not_found["description"].as_str().unwrap();
            assert!(text.contains("another customer"), "{what}: {text}");
        }
    }

    // The stock of a product: anonymous, never stored, `Age` when stale.
    for (method, path, statuses) in ANONYMOUS {
        let op = &doc["paths"][path][method];
        let what = format!("{method} {path}");
        assert_eq!(op["security"], serde_json::json!([{}]), "{what}: anonymous");
        let documented: BTreeSet<u16> = op["responses"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.parse().unwrap())
            .collect();
        assert_eq!(documented, statuses.iter().copied().collect(), "{what}");
        let ok = &op["responses"]["200"];
        for name in ["Cache-Control", "Age"] {
            assert!(ok["headers"][name].is_object(), "{what} {name}: {ok}");
        }
        let body = resolve(&doc, &ok["content"]["application/json"]["schema"]);
        for field in ["product_id", "available", "stale", "as_of", "age_seconds"] {
            assert!(
                body["properties"][field].is_object(),
                "{what} {field}: {body}"
            );
        }
        assert!(
            op["responses"]["503"]["headers"]["Retry-After"].is_object(),
            "{what} 503"
        );
    }

    // Placing: the key, the replay and location headers, the body.
    let place = &doc["paths"]["/api/orders"]["post"];
    let params = place["parameters"].as_array().unwrap();
    assert!(
        params
            .iter()
            .any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header"),
        "{params:?}"
    );
    for status in ["201", "202"] {
        let headers = &place["responses"][status]["headers"];
        for name in ["Location", "Idempotent-Replayed"] {
            assert!(headers[name].is_object(), "{status} {name}: {headers}");
        }
    }
    assert!(
        place["responses"]["409"]["headers"]["Retry-After"].is_object(),
        "request-in-progress has Retry-After"
    );
    let too_many = place["responses"]["429"]["description"].as_str().unwrap();
    assert!(too_many.contains("too-many-open-orders"), "{too_many}");
    let body = resolve(
        &doc,
        &place["requestBody"]["content"]["application/json"]["schema"],
    );
    let required: Vec<&str> = body["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(required, ["items"], "customer_id is optional: {body}");
    let customer = body["properties"]["customer_id"]["description"]
        .as_str()
        .unwrap();
    assert!(
        customer.contains("`sub`") && customer.contains("422"),
        "{customer}"
    );
    let item = resolve(&doc, &body["properties"]["items"]["items"]);
    for field in ["product_id", "quantity"] {
        assert!(item["properties"][field].is_object(), "{item}");
    }

    // Listing: the caller's own, paged.
    let list = &doc["paths"]["/api/orders"]["get"];
    assert!(
        list["description"].as_str().unwrap().contains("own orders"),
        "{list}"
    );
    let params: BTreeMap<&str, &Value> = list["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p))
        .collect();
    let limit = &params["limit"]["schema"];
    assert_eq!(limit["minimum"], 1, "{limit}");
    assert_eq!(limit["maximum"], 100, "{limit}");
    assert!(params.contains_key("cursor"), "{params:?}");
    let page = resolve(
        &doc,
        &list["responses"]["200"]["content"]["application/json"]["schema"],
    );
    assert!(page["properties"]["next_cursor"].is_object(), "{page}");

    // No dangling reference anywhere.
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in &all {
        assert!(
            doc.pointer(r.strip_prefix('#').unwrap()).is_some(),
            "dangling {r}"
        );
    }
    app.stop().await;
}

/// The route guard: the document has exactly [`OPERATIONS`], and the live
/// router serves exactly those (each guarded: 401 without a token) and
/// answers 405 to every other method on their paths.
#[tokio::test]
async fn every_route_under_api_orders_is_documented_and_nothing_else() {
    let (app, _shop, _db) = spawn().await;
    let doc = fetch(&app).await;

    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| METHODS.contains(&k.as_str()))
                .map(move |m| (m.clone(), path.clone()))
        })
        .collect();
    let listed: BTreeSet<(String, String)> = OPERATIONS
        .iter()
        .chain(ANONYMOUS)
        .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(documented, listed);
    let anonymous: BTreeSet<(String, String)> = ANONYMOUS
        .iter()
        .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
        .collect();

    let id = uuid::Uuid::new_v4().to_string();
    let paths: BTreeSet<&str> = OPERATIONS
        .iter()
        .chain(ANONYMOUS)
        .map(|(_, p, _)| *p)
        .collect();
    for path in paths {
        let url = app.url(&path.replace("{id}", &id).replace("{product_id}", &id));
        for method in METHODS {
            let res = app
                .http
                .request(method.to_uppercase().parse().unwrap(), &url)
                .send()
                .await
                .unwrap();
            let what = format!("{method} {path}");
            let op = ((*method).to_owned(), path.to_owned());
            if anonymous.contains(&op) {
                // Served to anyone: the handler's own 404 (no stock for an
                // unknown product), not the router's.
                assert_eq!(res.status(), 404, "{what}");
                let problem: Value = res.json().await.unwrap();
                assert!(
                    problem["detail"].as_str().unwrap().contains("stock"),
                    "{what}: {problem}"
                );
            } else if listed.contains(&op) {
                // Served, and only for a signed-in customer.
                assert_eq!(res.status(), 401, "{what}");
                assert!(res.headers().contains_key("www-authenticate"), "{what}");
            } else {
                assert_eq!(res.status(), 405, "{what}");
            }
        }
    }
    // The document's own route is the one anonymous one, and read-only.
    let res = app.http.post(app.url(PATH)).send().await.unwrap();
    assert_eq!(res.status(), 405);
    app.stop().await;
}
