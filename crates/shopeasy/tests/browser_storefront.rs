//! The storefront in a real headless Chromium, against the real embedded
//! system (issue 18, points 1 and 5): browse the catalogue page by page,
//! open a product and see its stock, buy it (201 shown), see its stock
//! badged "stock as of N s ago" while Inventory hangs, buy again (202
//! `pending`) and watch the order turn `confirmed` without a reload once it
//! is healed, list the customer's orders; every footer names the
//! trace id of the last API call. Errors show in place: a refused edge
//! (502), no cached stock (the product page says the stock is unavailable;
//! the checkout 503 + Retry-After → "try again in N s"), and a
//! checkout repeated with its kept idempotency key shows "repeat absorbed".
//!
//! Screenshots of each step go to the harness's folder (see
//! `support/browser.rs`); `storefront.png` is the catalogue, for the
//! README. Without Chromium these tests print `SKIPPED …` (and fail under
//! `SHOPEASY_REQUIRE_SERVICES=1`).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::time::Duration;

use browser::Browser;
use serde_json::{Value, json};
use shopeasy::system::System;

/// How long a step of the page may take (a wait, not a sleep).
const STEP: Duration = Duration::from_secs(10);

/// What the issue asks of a page load from the embedded system.
const PAGE_LOAD_BUDGET_MS: f64 = 300.0;

/// Short settings, as the tour's, so an outage and its healing take
/// seconds; a short stock-cache TTL, so a cached count turns stale (and is
/// badged) within a second of Inventory hanging.
async fn start(dir: &std::path::Path) -> System {
    support::start_system(
        dir,
        &[
            ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.3"),
            ("RESILIENCE__INVENTORY__BREAK_DURATION_SECONDS", "1"),
            ("OUTBOX__POLL_INTERVAL_SECONDS", "0.2"),
            ("RESILIENCE__STOCK_CACHE__TTL_SECONDS", "0.5"),
        ],
    )
    .await
}

/// Moves the page to `hash` without reloading it.
async fn go(browser: &Browser, hash: &str) {
    browser
        .js(&format!("location.hash = {};", json!(hash)))
        .await;
}

/// The ids of the products on the catalogue page shown.
async fn shown_products(browser: &Browser) -> Vec<String> {
    let ids = browser
        .wait_for_js(
            "const ids = [...document.querySelectorAll('#products li.card')].map(li => li.dataset.id);\
             return ids.length ? ids : null;",
            STEP,
        )
        .await;
    serde_json::from_value(ids).unwrap()
}

/// The footer's trace id, once it is a W3C trace id (32 hex digits).
async fn footer_trace(browser: &Browser) -> String {
    let id = browser.text("#trace-id").await.unwrap_or_default();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "a trace id in the footer: {id:?}"
    );
    id
}

/// Signs in through the page's form as `customer`.
async fn sign_in(browser: &Browser, customer: &str) {
    browser.fill("#customer", customer, STEP).await;
    browser.click("#signin-button", STEP).await;
    browser.wait_for_text("#signed-in", customer, STEP).await;
}

/// Puts one unit of `product` in the cart from its page and opens the
/// cart.
async fn add_to_cart(browser: &Browser, product: &str) {
    go(browser, &format!("#/product/{product}")).await;
    browser.wait_for("#product #price", STEP).await;
    browser.fill("#quantity", "1", STEP).await;
    browser.click("#add-to-cart", STEP).await;
    browser
        .wait_for_text("#added", "added to your cart", STEP)
        .await;
    browser.click("#go-cart", STEP).await;
    browser.wait_for("#cart-lines", STEP).await;
}

/// The product page's stock line (`#stock-count`), once it is filled in
/// (the page shows first, the stock follows).
async fn stock_line(browser: &Browser) -> String {
    let text = browser
        .wait_for_js(
            "const s = document.querySelector('#product #stock-count'); return s ? s.textContent : null;",
            STEP,
        )
        .await;
    text.as_str().unwrap().to_owned()
}

/// Opens `product`'s page, coming back from the catalogue (a new stock
/// call each time), until its stock line carries the stale badge — once the
/// cached count's TTL has passed with Inventory down; the badge's text.
async fn stale_badge(browser: &Browser, product: &str) -> String {
    let mut badge = None;
    shopeasy_testkit::assert_eventually(STEP, "the \"stock as of\" badge", async || {
        go(browser, "#/").await;
        shown_products(browser).await;
        go(browser, &format!("#/product/{product}")).await;
        stock_line(browser).await;
        badge = browser.text("#stock-age").await;
        badge.is_some()
    })
    .await;
    badge.unwrap()
}

async fn toxic(http: &reqwest::Client, faults: &str, edge: &str) {
    let res = http
        .post(format!("{faults}/proxies/{edge}/toxics"))
        .json(
            &json!({"name": "hang", "type": "timeout", "stream": "downstream",
                      "toxicity": 1.0, "attributes": {"timeout": 0}}),
        )
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
}

async fn heal(http: &reqwest::Client, faults: &str, edge: &str) {
    let res = http
        .delete(format!("{faults}/proxies/{edge}/toxics/hang"))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn browse_buy_and_watch_an_order_confirm_live() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    let gw = format!("http://{}", system.addresses.gateway);
    let faults = format!("http://{}", system.faults_api);
    let http = reqwest::Client::new();

    // The catalogue, first page, and how fast it loaded.
    browser.goto(&format!("{gw}/")).await;
    let first = shown_products(&browser).await;
    assert_eq!(first.len(), 6, "six products a page");
    let cold = browser.page_load().await;
    let trace_one = footer_trace(&browser).await;
    // Once more as a returning visitor (assets revalidated: 304s). The
    // budget holds for the better of the two: the other tests of this
    // file start their own systems and browsers on the same cores.
    browser.refresh().await.unwrap();
    assert_eq!(shown_products(&browser).await, first, "the same first page");
    let warm = browser.page_load().await;
    eprintln!(
        "storefront page load: cold DOMContentLoaded {:.1} ms, load {:.1} ms; \
         reload DOMContentLoaded {:.1} ms, load {:.1} ms",
        cold.dom_content_loaded_ms, cold.load_ms, warm.dom_content_loaded_ms, warm.load_ms
    );
    assert!(
        cold.load_ms.min(warm.load_ms) < PAGE_LOAD_BUDGET_MS,
        "the page loads in under {PAGE_LOAD_BUDGET_MS} ms: {cold:?}, {warm:?}"
    );
    assert_ne!(
        footer_trace(&browser).await,
        trace_one,
        "one trace per call"
    );
    assert!(
        browser
            .text("#last-call")
            .await
            .unwrap()
            .starts_with("GET /api/products?limit=6 → 200"),
        "the footer names the last call"
    );
    browser.screenshot("storefront").await;

    // Keyboard: Tab reaches a link or button and its focus is visible.
    let body = browser.wait_for("body", STEP).await;
    body.send_keys(&char::from(fantoccini::key::Key::Tab).to_string())
        .await
        .unwrap();
    let focus = browser
        .js(
            "const e = document.activeElement; const s = getComputedStyle(e);\
             return [e.tagName, s.outlineStyle, s.outlineWidth];",
        )
        .await;
    assert!(
        ["A", "BUTTON"].contains(&focus[0].as_str().unwrap()) && focus[1] != "none",
        "a visible keyboard focus: {focus}"
    );

    // Paging: the second page is other products; back again.
    browser.click("#next", STEP).await;
    browser.wait_for_text("#page", "Page 2", STEP).await;
    let second = shown_products(&browser).await;
    assert_eq!(second.len(), 6);
    assert!(
        second.iter().all(|id| !first.contains(id)),
        "page 2 is new products"
    );
    assert_ne!(
        footer_trace(&browser).await,
        trace_one,
        "one trace per call"
    );
    browser.screenshot("catalogue-page-2").await;
    browser.click("#prev", STEP).await;
    browser.wait_for_text("#page", "Page 1", STEP).await;
    assert_eq!(shown_products(&browser).await, first);

    // A product's page (from the catalogue's link).
    browser.click("#products li.card .product-link", STEP).await;
    browser.wait_for("#product #price", STEP).await;
    let shown = browser
        .js("return decodeURIComponent(location.hash.slice('#/product/'.length));")
        .await;
    let shown = shown.as_str().unwrap().to_owned();
    let stock: Value = http
        .get(format!("{gw}/api/stock/{shown}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        stock_line(&browser).await,
        format!("{} in stock", stock["available"]),
        "the page shows the product's stock: {stock}"
    );
    assert_eq!(browser.text("#stock-age").await, None, "fresh: no badge");
    browser.screenshot("product").await;
    assert_eq!(
        browser
            .js("return [...document.querySelectorAll('input')].every(i => i.labels.length > 0);")
            .await,
        Value::Bool(true),
        "every input has its label"
    );

    // Buy it: sign in from the cart, place the order, 201 confirmed.
    add_to_cart(&browser, &first[0]).await;
    sign_in(&browser, "shopper").await;
    browser.screenshot("cart").await;
    browser.click("#checkout", STEP).await;
    browser.wait_for_text("#order-code", "201", STEP).await;
    browser
        .wait_for_text("#order-status", "confirmed", STEP)
        .await;
    browser.screenshot("order-created").await;
    let created = browser.text("#order-id").await.unwrap();

    // Inventory hangs: the same product (its stock is cached) is accepted
    // as pending; healed, the page shows it confirmed without a reload.
    toxic(&http, &faults, "order-inventory").await;
    browser.js("window.sameDocument = true;").await;
    // Its page shows the cached count, badged with its age.
    let badge = stale_badge(&browser, &first[0]).await;
    let seconds: u64 = badge
        .strip_prefix("stock as of ")
        .and_then(|b| b.strip_suffix(" s ago"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("\"stock as of N s ago\": {badge:?}"));
    assert!(seconds >= 1, "{badge:?}");
    assert!(
        stock_line(&browser).await.ends_with(" in stock"),
        "the count still shows"
    );
    browser.screenshot("product-stale-stock").await;
    add_to_cart(&browser, &first[0]).await;
    browser.click("#checkout", STEP).await;
    browser.wait_for_text("#order-code", "202", STEP).await;
    browser
        .wait_for_text("#order-status", "pending", STEP)
        .await;
    browser.screenshot("order-pending").await;
    heal(&http, &faults, "order-inventory").await;
    browser
        .wait_for_text("#order-status", "confirmed", Duration::from_secs(20))
        .await;
    assert_eq!(
        browser.js("return window.sameDocument === true;").await,
        Value::Bool(true),
        "no reload"
    );
    browser.screenshot("order-confirmed-live").await;
    let accepted = browser.text("#order-id").await.unwrap();

    // The customer's orders: both, confirmed.
    browser.click("#nav-orders", STEP).await;
    let rows = browser
        .wait_for_js(
            "const r = [...document.querySelectorAll('#orders tbody tr')];\
             return r.length === 2 ? r.map(tr => [tr.dataset.id, tr.querySelector('.badge').textContent]) : null;",
            STEP,
        )
        .await;
    assert_eq!(
        rows,
        json!([[accepted, "confirmed"], [created, "confirmed"]]),
        "newest first, both confirmed"
    );
    assert!(!browser.text("#view").await.unwrap().contains("null"));
    assert!(
        browser
            .text("#last-call")
            .await
            .unwrap()
            .starts_with("GET /api/orders?limit=20 → 200")
    );
    footer_trace(&browser).await;
    browser.screenshot("orders").await;

    // A phone-sized window: one column, the footer still there.
    browser.set_window_size(390, 844).await.unwrap();
    go(&browser, "#/").await;
    shown_products(&browser).await;
    let columns = browser
        .js("return getComputedStyle(document.getElementById('products')).gridTemplateColumns.split(' ').length;")
        .await;
    assert_eq!(columns, json!(1), "one column on a phone");
    browser.screenshot("storefront-phone").await;

    browser.close().await;
    system.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn errors_show_in_place_and_a_repeated_checkout_is_absorbed() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let system = start(dir.path()).await;
    let gw = format!("http://{}", system.addresses.gateway);
    let faults = format!("http://{}", system.faults_api);
    let http = reqwest::Client::new();
    browser.goto(&format!("{gw}/#/orders")).await;
    sign_in(&browser, "second").await;
    browser.wait_for("#no-orders", STEP).await;

    // The order edge refuses: 502 shown in place, with a way to try again.
    let edge = system.proxies.get("gateway-order").await.unwrap();
    edge.set_enabled(false).await;
    browser.click("#nav-catalogue", STEP).await;
    shown_products(&browser).await;
    browser.click("#nav-orders", STEP).await;
    let text = browser.wait_for_text("#message", "(502)", STEP).await;
    assert!(text.len() > "(502)".len(), "the problem's detail: {text:?}");
    assert!(
        browser
            .text("#view h1")
            .await
            .unwrap()
            .contains("My orders")
    );
    assert!(browser.text("#last-call").await.unwrap().contains("502"));
    browser.screenshot("error-502").await;
    edge.set_enabled(true).await;
    browser.click("#retry", STEP).await;
    browser.wait_for("#no-orders", STEP).await;

    // No cached stock while Inventory hangs: 503 + Retry-After, "try again".
    let product = support::first_product(&http, &gw).await;
    toxic(&http, &faults, "order-inventory").await;
    go(&browser, &format!("#/product/{product}")).await;
    let line = stock_line(&browser).await;
    assert!(
        line.starts_with("Stock unavailable") && line.contains("(503)"),
        "{line}"
    );
    add_to_cart(&browser, &product).await;
    browser.click("#checkout", STEP).await;
    let text = browser
        .wait_for_text("#checkout-error", "try again in", STEP)
        .await;
    assert!(text.contains("(503)"), "{text}");
    browser.screenshot("error-503").await;
    heal(&http, &faults, "order-inventory").await;

    // The checkout's key is kept for the repeat. Its request reaches the
    // shop (as if the page's first answer were lost): pressing the button
    // again replays that answer — one order, "repeat absorbed".
    let key = browser
        .js("return JSON.parse(sessionStorage.getItem('shopeasy.checkout')).key;")
        .await;
    let key = key.as_str().unwrap().to_owned();
    let token = support::sign_in(&http, &gw, "second").await;
    let body = json!({"items": [{"product_id": product, "quantity": 1}]});
    let mut first = None;
    shopeasy_testkit::assert_eventually(STEP, "Inventory answers again", async || {
        let res = http
            .post(format!("{gw}/api/orders"))
            .bearer_auth(&token)
            .header("idempotency-key", &key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let ok = res.status() == 201;
        if ok {
            first = Some(res.json::<Value>().await.unwrap());
        }
        ok
    })
    .await;
    let first = first.unwrap();
    browser.click("#checkout", STEP).await;
    browser
        .wait_for_text("#replayed", "Repeat absorbed", STEP)
        .await;
    browser.wait_for_text("#order-code", "201", STEP).await;
    assert_eq!(
        browser.text("#order-id").await.unwrap(),
        first["id"].as_str().unwrap(),
        "the replay is the same order"
    );
    browser.screenshot("repeat-absorbed").await;
    go(&browser, "#/orders").await;
    let rows = browser
        .wait_for_js(
            "const r = document.querySelectorAll('#orders tbody tr').length; return r || null;",
            STEP,
        )
        .await;
    assert_eq!(rows, json!(1), "one order for the two checkouts");

    browser.close().await;
    system.stop().await.unwrap();
}

/// The harness itself: a page loads, a wait sees text that appears later,
/// a PNG is written, the window is 1280×800.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_harness_drives_a_page() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    browser
        .goto("data:text/html,<title>t</title><p id=x>hello</p><script>setTimeout(()=>{document.getElementById('x').textContent='later'},200)</script>")
        .await;
    let text = browser
        .wait_for_text("#x", "later", Duration::from_secs(5))
        .await;
    assert_eq!(text, "later");
    let shot = browser.screenshot("harness-smoke").await;
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG file");
    let (w, h) = browser.get_window_size().await.unwrap();
    let (ww, wh) = browser::WINDOW;
    assert_eq!((w, h), (u64::from(ww), u64::from(wh)));
    browser.close().await;
}
