//! The console in a real headless Chromium against the embedded system
//! (issue 18, point 5): a change without the token is refused on the page;
//! with it, a `timeout` toxic added on `order-inventory` by clicking opens
//! the breaker on the page, a purchase goes `pending`, "Heal everything"
//! confirms it — all without reloading. Screenshots of each step, one of
//! them `console-outage.png` (the README's picture of an Inventory outage).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

#[path = "support/browser.rs"]
mod browser;

use std::time::Duration;

use browser::Browser;
use shopeasy::system::{Options, System};
use tokio::time::Instant;

/// Short settings so the outage and the recovery take seconds (as the
/// tour: attempt 300 ms, break 2 s, outbox every 200 ms).
fn fast_env() -> Vec<(String, String)> {
    [
        ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.3"),
        ("RESILIENCE__INVENTORY__BREAK_DURATION_SECONDS", "2"),
        ("RESILIENCE__PRODUCT__TIMEOUT_SECONDS", "0.3"),
        ("RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS", "1"),
        ("OUTBOX__POLL_INTERVAL_SECONDS", "0.2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

const WAIT: Duration = Duration::from_secs(10);

/// How many orders the page lists.
async fn orders_listed(browser: &Browser) -> u64 {
    browser
        .js("return document.querySelectorAll('#order-list li[data-order]').length;")
        .await
        .as_u64()
        .unwrap_or(0)
}

/// Clicks "Buy one" and waits until the page lists one more order.
async fn buy(browser: &Browser) {
    let before = orders_listed(browser).await;
    browser.click("#buy", WAIT).await;
    browser
        .wait_for_js(
            &format!(
                "return document.querySelectorAll('#order-list li[data-order]').length > {before};"
            ),
            WAIT,
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_breaks_and_heals_inventory_by_clicking() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut options = Options::for_tests(dir.path());
    options.env = fast_env();
    let system = System::start(options)
        .await
        .expect("the embedded system starts");
    let console = format!("http://{}/", system.console);
    let order_inventory = system.proxies.get("order-inventory").await.unwrap();

    // Open the console: the topology and the breakers arrive over SSE.
    browser.goto(&console).await;
    browser
        .wait_for("#graph [data-edge='order-inventory']", WAIT)
        .await;
    browser
        .wait_for(
            "[data-breaker='order/inventory'][data-state='closed']",
            WAIT,
        )
        .await;
    let load = browser.page_load().await;
    eprintln!("console page load: {load:?}");
    browser.screenshot("console-healthy").await;

    // Without the token a change is refused, on the page, and nothing changes.
    browser.click("#heal", WAIT).await;
    browser
        .wait_for_text("#status", "Refused (401)", WAIT)
        .await;
    browser
        .click("#graph [data-edge='order-inventory']", WAIT)
        .await;
    browser.click("#toxic-add", WAIT).await;
    browser
        .wait_for_text("#status", "Refused (401)", WAIT)
        .await;
    assert!(order_inventory.toxics().is_empty(), "nothing changed");
    browser.screenshot("console-refused").await;

    // Enter the admin token; buy once while healthy (the stock cache then
    // knows the product): confirmed.
    browser.use_admin_token(&system.admin_token, WAIT).await;
    buy(&browser).await;
    browser
        .wait_for("#order-list li[data-status='confirmed']", WAIT)
        .await;

    // Break Inventory by clicking: a black-hole `timeout` toxic on the edge.
    browser.fill("#toxic-name", "hang", WAIT).await;
    browser.click("#toxic-add", WAIT).await;
    browser
        .wait_for(
            "#graph [data-edge='order-inventory'][data-toxics='hang']",
            WAIT,
        )
        .await;
    assert_eq!(
        order_inventory.toxics().len(),
        1,
        "the click added the toxic"
    );

    // Buy until the breaker opens on the page; each purchase answers
    // `pending` (the cached stock says yes, the outbox will reserve).
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        buy(&browser).await;
        let newest = browser
            .js("return document.querySelector('#order-list li[data-order]').dataset.status;")
            .await;
        assert_eq!(newest, "pending", "an order during the outage is pending");
        let open = browser
            .js("return !!document.querySelector(\"[data-breaker='order/inventory'][data-state='open']\");")
            .await;
        if open == true {
            break;
        }
        assert!(Instant::now() < deadline, "the breaker opens within 40 s");
    }
    browser
        .wait_for(
            "#graph [data-edge='order-inventory'][data-breaker='open']",
            WAIT,
        )
        .await;
    browser.screenshot("console-outage").await;

    // Heal everything: the edge is clean and every pending order turns
    // confirmed on the page, without a reload.
    let seq_before = browser
        .js("return Number(document.body.dataset.seq);")
        .await;
    browser.click("#heal", WAIT).await;
    browser.wait_for_text("#status", "Healed", WAIT).await;
    assert!(order_inventory.toxics().is_empty(), "healed");
    browser
        .wait_for_js(
            "const all = [...document.querySelectorAll('#order-list li[data-order]')];\
             return all.length > 1 && all.every(li => li.dataset.status === 'confirmed');",
            Duration::from_secs(30),
        )
        .await;
    let seq_after = browser
        .js("return Number(document.body.dataset.seq);")
        .await;
    assert!(
        seq_after.as_u64() > seq_before.as_u64(),
        "the same page kept updating: {seq_before} → {seq_after}"
    );
    browser
        .wait_for(
            "[data-breaker='order/inventory'][data-state='closed']",
            Duration::from_secs(20),
        )
        .await;
    browser.screenshot("console-healed").await;

    // On a phone-sized screen the page still fits its width.
    browser.set_window_size(390, 844).await.unwrap();
    browser
        .wait_for_js(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1;",
            WAIT,
        )
        .await;
    browser.screenshot("console-phone").await;

    browser.close().await;
    system.stop().await.unwrap();
}
