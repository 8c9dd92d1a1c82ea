//! The console's Scenarios and Presentation panels in a real headless
//! Chromium against the embedded system (issue 17, point 4).
//!
//! Scenarios: the page lists the lesson's scenes and writes the chosen
//! one's expected outcome above it; Run without the token is refused on the
//! page; with it, `breaker` runs against the live system and the page shows
//! it running, then passed with the lesson's table (`console-scenario.png`).
//!
//! Presentation: with a short interval and hold, Start makes the page show
//! a current fault and the topology a toxic badge on its edge; Stop leaves
//! no toxic anywhere, as the fault API confirms (`console-presentation.png`).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

#[path = "support/browser.rs"]
mod browser;

use std::{collections::BTreeMap, time::Duration};

use browser::{Browser, WINDOW};
use serde_json::Value;
use shopeasy::{
    demo::{Scene, breaker},
    system::{Options, System},
};

/// How long an ordinary page update may take (SSE every 500 ms, the
/// panels poll every second).
const WAIT: Duration = Duration::from_secs(10);

/// How long the `breaker` scene may take on a loaded machine.
const SCENE: Duration = Duration::from_secs(90);

/// The settings `breaker`'s expectation assumes (its own and the quiet
/// ones every live scene shares), as `console_scenes.rs` starts it.
fn breaker_settings() -> Vec<(String, String)> {
    [
        ("LIMITS__CUSTOMER_ORDER_BURST", "10000"),
        ("LIMITS__CUSTOMER_ORDERS_PER_MINUTE", "100000"),
        ("ORDERS__MAX_OPEN_PER_CUSTOMER", "10000"),
        ("OUTBOX__INITIAL_BACKOFF_SECONDS", "60"),
        ("OUTBOX__MAX_BACKOFF_SECONDS", "60"),
    ]
    .iter()
    .chain(breaker::ENV.iter())
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

/// Every toxic on every edge, as the fault API lists them.
async fn toxics_on_the_fault_api(system: &System) -> BTreeMap<String, Vec<String>> {
    let proxies: BTreeMap<String, Value> =
        reqwest::get(format!("http://{}/proxies", system.faults_api))
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
    proxies
        .into_iter()
        .map(|(edge, view)| {
            let names = view["toxics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect();
            (edge, names)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scenarios_panel_runs_breaker_and_shows_its_table() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut options = Options::for_tests(dir.path());
    options.env = breaker_settings();
    let system = System::start(options)
        .await
        .expect("the embedded system starts");
    browser.goto(&format!("http://{}/", system.console)).await;

    // The panel lists every scene; choosing `breaker` writes its expected
    // outcome above the form.
    browser
        .wait_for("#scene-select option[value='breaker']", WAIT)
        .await;
    let listed = browser
        .js("return [...document.querySelectorAll('#scene-select option')].map(o => o.value);")
        .await;
    let names: Vec<&str> = Scene::ALL.iter().map(|s| s.info().name).collect();
    assert_eq!(
        listed,
        serde_json::json!(names),
        "the page lists the scenes"
    );
    let first = browser
        .wait_for_text("#scene-expected", "Expected: ", WAIT)
        .await;
    assert_eq!(
        first,
        format!("Expected: {}", Scene::ALL[0].info().expected),
        "the first scene's expected outcome is shown at once"
    );
    browser
        .js("const s = document.getElementById('scene-select');\
             s.value = 'breaker'; s.dispatchEvent(new Event('change'));\
             return s.value;")
        .await;
    let expected = browser
        .wait_for_text("#scene-expected", "Expected: ", WAIT)
        .await;
    assert_eq!(
        expected,
        format!("Expected: {}", Scene::Breaker.info().expected),
        "the expected outcome is written above"
    );
    let summary = browser.text("#scene-summary").await.unwrap_or_default();
    assert!(!summary.is_empty(), "the scene's summary is shown");

    // Without the token: refused on the page, and nothing runs.
    browser.click("#scene-run", WAIT).await;
    let refused = browser.wait_for_text("#scene-status", "401", WAIT).await;
    assert!(refused.contains("enter the admin token"), "{refused}");
    let res = reqwest::get(format!("http://{}/api/scenes/current", system.console))
        .await
        .unwrap();
    assert_eq!(res.status(), 404, "nothing ran without the token");

    // With it: running on the page, then passed with the lesson's table.
    browser.use_admin_token(&system.admin_token, WAIT).await;
    browser.click("#scene-run", WAIT).await;
    browser
        .wait_for_text("#scene-status", "scene breaker started", WAIT)
        .await;
    let state = browser
        .wait_for_js(
            "const s = document.getElementById('scene-state').dataset.state;\
             return s === 'running' || s === 'passed' || s === 'failed' ? s : null;",
            WAIT,
        )
        .await;
    assert_eq!(state, "running", "the page shows the scene running");
    browser
        .wait_for_text("#scene-table", "running…", WAIT)
        .await;
    browser
        .wait_for_js(
            "const s = document.getElementById('scene-state').dataset.state;\
             return s !== 'running' ? s : null;",
            SCENE,
        )
        .await;
    let state = browser.text("#scene-state").await.unwrap_or_default();
    let table = browser.text("#scene-table").await.unwrap_or_default();
    assert!(state.starts_with("breaker: passed in "), "{state}\n{table}");
    assert!(table.contains("the breaker over 12 ticks"), "{table}");
    for column in ["tick", "inventory", "result", "sent", "state after"] {
        assert!(table.contains(column), "no column {column}: {table}");
    }
    assert!(table.contains("refused at once"), "{table}");
    assert!(table.contains("PASS"), "{table}");
    browser
        .js("document.getElementById('scenarios').scrollIntoView(); return true;")
        .await;
    browser.screenshot("console-scenario").await;

    browser.close().await;
    system.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_presentation_panel_cycles_faults_and_stop_removes_them() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let system = System::start(Options::for_tests(dir.path()))
        .await
        .expect("the embedded system starts");
    browser.goto(&format!("http://{}/", system.console)).await;
    browser
        .wait_for("#graph [data-edge='order-inventory']", WAIT)
        .await;
    browser.use_admin_token(&system.admin_token, WAIT).await;

    // A fault every second, held for most of it, so the 500 ms snapshots
    // and the 1 s panel refresh both see one in place.
    browser.fill("#presentation-interval", "1", WAIT).await;
    browser.fill("#presentation-hold", "0.8", WAIT).await;
    browser.fill("#presentation-seed", "42", WAIT).await;
    browser.click("#presentation-start", WAIT).await;
    browser
        .wait_for_text("#presentation-status", "presentation started", WAIT)
        .await;

    // The page names the current fault while the topology shows its toxic
    // badge on that edge — both at the same moment, in one tall screenshot
    // (the topology is at the top of the page, this panel near the end).
    browser.set_window_size(WINDOW.0, 2000).await.unwrap();
    let seen = browser
        .wait_for_js(
            "const body = document.getElementById('presentation-body').textContent;\
             const m = body.match(/now (\\S+) on (\\S+) until/);\
             if (!m) return null;\
             const edge = document.querySelector(`#graph [data-edge='${m[2]}']`);\
             const badge = document.querySelector(`[data-badges='${m[2]}'] .badge.toxic`);\
             return edge && (edge.dataset.toxics || '').includes('presentation_') && badge\
               ? [m[1], m[2], badge.textContent] : null;",
            Duration::from_secs(20),
        )
        .await;
    eprintln!("presentation fault seen on the page: {seen}");
    let body = browser.text("#presentation-body").await.unwrap_or_default();
    assert!(body.starts_with("running: "), "{body}");
    browser.js("window.scrollTo(0, 0); return true;").await;
    browser.screenshot("console-presentation").await;
    browser.set_window_size(WINDOW.0, WINDOW.1).await.unwrap();

    // Stop: the page says so, and no toxic is left on any edge.
    browser.click("#presentation-stop", WAIT).await;
    browser
        .wait_for_text("#presentation-status", "presentation stopped", WAIT)
        .await;
    browser
        .wait_for_text("#presentation-body", "stopped after", WAIT)
        .await;
    let status: Value = reqwest::get(format!("http://{}/api/presentation", system.console))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["running"], false, "{status}");
    let asked = &status["request"];
    assert_eq!(
        (&asked["interval_s"], &asked["hold_s"], &asked["seed"]),
        (
            &serde_json::json!(1.0),
            &serde_json::json!(0.8),
            &serde_json::json!(42)
        ),
        "the page sent what was typed: {status}"
    );
    let left = toxics_on_the_fault_api(&system).await;
    assert!(
        left.values().all(Vec::is_empty),
        "stop removed every fault: {left:?}"
    );
    browser
        .wait_for_js(
            "return [...document.querySelectorAll('#graph [data-edge]')]\
               .every(e => !e.dataset.toxics);",
            WAIT,
        )
        .await;

    browser.close().await;
    system.stop().await.unwrap();
}
