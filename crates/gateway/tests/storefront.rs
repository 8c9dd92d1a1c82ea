//! The storefront's static pages through a real gateway (SPEC §6, issue
//! 18): `/` and `/assets/*` served from the binary with their types and
//! security and cache headers, GET and HEAD only, never charged to the
//! client's rate limit; every other path still 404, and `/api/*` routed as
//! before.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::net::SocketAddr;

use axum::{Json, Router, routing::get};
use shopeasy_gateway::{App, GatewaySettings};
use shopeasy_runtime::lifecycle::{self, Running};

/// A product service answering one fixed catalogue page.
async fn fake_product() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route(
        "/api/products",
        get(|| async { Json(serde_json::json!({"items": [], "next_cursor": null})) }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A gateway whose product route goes to `product` and whose order route
/// goes nowhere, allowing `per_second` API calls per client (burst alike).
async fn gateway(product: SocketAddr, per_second: u32) -> (Running, String) {
    let mut s = GatewaySettings::default();
    s.process.ephemeral();
    s.routes.product_url = format!("http://{product}");
    s.routes.order_url = "http://127.0.0.1:9".into();
    s.limits.client_requests_per_second = per_second;
    s.limits.client_burst = per_second;
    s.auth = support::auth();
    let server = lifecycle::spawn::<App>(s).await.unwrap();
    let url = format!("http://{}", server.local_addr());
    (server, url)
}

/// The body of `GET url`, as text.
async fn text(http: &reqwest::Client, url: String) -> String {
    http.get(url).send().await.unwrap().text().await.unwrap()
}

/// Every file the page loads: index.html's `src`/`href` targets and the
/// modules app.js imports.
async fn page_files(http: &reqwest::Client, gw: &str) -> Vec<String> {
    let html = text(http, format!("{gw}/")).await;
    let mut files: Vec<String> = ["src=\"", "href=\""]
        .iter()
        .flat_map(|attr| html.split(attr).skip(1))
        .filter_map(|rest| rest.split('"').next())
        .filter(|target| target.starts_with("/assets/"))
        .map(str::to_owned)
        .collect();
    let app = text(http, format!("{gw}/assets/app.js")).await;
    for line in app.lines().filter(|l| l.starts_with("import ")) {
        let module = line.split('"').nth(1).unwrap();
        files.push(format!("/assets/{}", module.trim_start_matches("./")));
    }
    files
}

#[tokio::test]
async fn the_page_and_its_assets_are_served_with_their_types_and_headers() {
    let (_gw, gw) = gateway(fake_product().await, 1000).await;
    let http = reqwest::Client::new();
    let res = http.get(format!("{gw}/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let h = res.headers().clone();
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["cache-control"], "no-cache");
    let csp = h["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("http"),
        "{csp}"
    );
    let html = res.text().await.unwrap();
    assert!(
        html.contains(r#"<script type="module" src="/assets/app.js">"#),
        "{html}"
    );
    // The CSP forbids inline code, so the page must have none.
    assert!(
        !html.contains("<script>") && !html.contains(" style="),
        "{html}"
    );
    assert!(html.contains(r#"id="trace-id""#), "the footer's trace id");

    let files = page_files(&http, &gw).await;
    assert!(files.len() >= 3, "{files:?}");
    for file in files {
        let res = http.get(format!("{gw}{file}")).send().await.unwrap();
        assert_eq!(res.status(), 200, "{file}");
        let expected = if file.ends_with(".js") {
            "text/javascript; charset=utf-8"
        } else {
            "text/css; charset=utf-8"
        };
        assert_eq!(res.headers()["content-type"], expected, "{file}");
        assert_eq!(res.headers()["x-content-type-options"], "nosniff");
        assert!(res.headers().contains_key("etag"), "{file}");
        assert!(!res.bytes().await.unwrap().is_empty(), "{file}");
    }
}

#[tokio::test]
async fn a_matching_etag_is_a_304_and_head_has_no_body() {
    let (_gw, gw) = gateway(fake_product().await, 1000).await;
    let http = reqwest::Client::new();
    let url = format!("{gw}/assets/app.js");
    let first = http.get(&url).send().await.unwrap();
    let etag = first.headers()["etag"].clone();
    let length = first.bytes().await.unwrap().len();

    let res = http
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 304);
    assert_eq!(res.headers()["etag"], etag);
    assert!(res.bytes().await.unwrap().is_empty());
    let res = http
        .get(&url)
        .header("if-none-match", "\"something-else\"")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "a stale tag gets the file");

    let res = http.head(&url).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-length"], length.to_string().as_str());
    assert!(res.bytes().await.unwrap().is_empty());
}

#[tokio::test]
async fn other_methods_are_405_and_other_paths_still_404() {
    let (_gw, gw) = gateway(fake_product().await, 1000).await;
    let http = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::POST, "/"),
        (reqwest::Method::PUT, "/assets/app.js"),
        (reqwest::Method::DELETE, "/assets/style.css"),
    ] {
        let res = http
            .request(method.clone(), format!("{gw}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405, "{method} {path}");
        assert_eq!(res.headers()["allow"], "GET, HEAD");
        assert_eq!(res.headers()["content-type"], "application/problem+json");
        let body: serde_json::Value = res.json().await.unwrap();
        assert!(
            body["detail"].as_str().unwrap().contains("GET, HEAD"),
            "{body}"
        );
    }
    for path in [
        "/index.html",
        "/assets",
        "/assets/",
        "/assets/nope.js",
        "/favicon.ico",
        "/metrics",
        "/admin/resilience",
    ] {
        let res = http.get(format!("{gw}{path}")).send().await.unwrap();
        assert_eq!(res.status(), 404, "{path}");
        assert_eq!(
            res.headers()["content-type"],
            "application/problem+json",
            "{path}"
        );
    }
}

/// The pages cost the client none of its API budget: with one API call a
/// second allowed, twenty page loads still pass, then the second API call
/// is refused as before.
#[tokio::test]
async fn pages_are_not_charged_to_the_clients_rate_limit_but_api_calls_are() {
    let (_gw, gw) = gateway(fake_product().await, 1).await;
    let http = reqwest::Client::new();
    for _ in 0..20 {
        for path in ["/", "/assets/app.js", "/assets/style.css"] {
            let res = http.get(format!("{gw}{path}")).send().await.unwrap();
            assert_eq!(res.status(), 200, "{path}");
            assert!(!res.headers().contains_key("ratelimit"), "{path}");
        }
    }
    let res = http.get(format!("{gw}/api/products")).send().await.unwrap();
    assert_eq!(res.status(), 200, "/api/* is still routed to product");
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["items"], serde_json::json!([]));
    let res = http.get(format!("{gw}/api/products")).send().await.unwrap();
    assert_eq!(res.status(), 429, "the API budget is one call a second");
}
