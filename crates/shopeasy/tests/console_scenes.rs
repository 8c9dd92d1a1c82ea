//! The console's Scenarios panel on the embedded system: it lists the
//! lesson's scenes with their expected outcomes, runs `breaker` against the
//! live system when asked with the admin token, and shows its table.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::time::Duration;

use serde_json::Value;
use shopeasy::{
    demo::{Scene, breaker},
    system::{Options, System},
};
use tokio::time::Instant;

/// The settings `breaker`'s expectation assumes (its own and the quiet
/// ones every live scene shares), as a person would start the system for
/// a talk.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_breaker_scene_runs_from_the_console_and_shows_its_table() {
    let dir =
        std::env::temp_dir().join(format!("shopeasy-console-scenes-{}", uuid::Uuid::new_v4()));
    let mut options = Options::for_tests(&dir);
    options.env = breaker_settings();
    let system = System::start(options)
        .await
        .expect("the embedded system starts");
    let console = format!("http://{}", system.console);
    let http = reqwest::Client::new();

    // The list: every scene, with its summary and expected outcome.
    let list: Vec<Value> = http
        .get(format!("{console}/api/scenes"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list.len(), Scene::ALL.len());
    let entry = list.iter().find(|s| s["name"] == "breaker").unwrap();
    assert_eq!(entry["expected"], Scene::Breaker.info().expected);
    assert!(!entry["summary"].as_str().unwrap().is_empty());
    let res = http
        .get(format!("{console}/api/scenes/current"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404, "nothing has run yet");

    // Without the token: refused, and nothing runs.
    let res = http
        .post(format!("{console}/api/scenes/breaker"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let res = http
        .post(format!("{console}/api/scenes/no-such-scene"))
        .bearer_auth(&system.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let problem: Value = res.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("no-such-scene")
    );

    // With it: running, one at a time, then passed with the lesson's table.
    let res = http
        .post(format!("{console}/api/scenes/breaker"))
        .bearer_auth(&system.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let status: Value = res.json().await.unwrap();
    assert_eq!(status["state"], "running");
    let res = http
        .post(format!("{console}/api/scenes/retry"))
        .bearer_auth(&system.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 409, "one scene at a time");
    let res = http
        .post(format!("{console}/api/presentation"))
        .bearer_auth(&system.admin_token)
        .json(&serde_json::json!({"interval_s": 1, "hold_s": 0.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 409, "no presentation faults inside a scene");

    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let status: Value = http
            .get(format!("{console}/api/scenes/current"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if status["state"] != "running" {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the scene did not end within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let table = status["table"].as_str().unwrap_or_default();
    println!("{table}");
    assert_eq!(status["state"], "passed", "{status}");
    assert!(status["ended_unix_ms"].as_u64() >= status["started_unix_ms"].as_u64());
    assert!(table.contains("the breaker over 12 ticks"), "{table}");
    for column in ["tick", "inventory", "result", "sent", "state after"] {
        assert!(table.contains(column), "no column {column}: {table}");
    }
    assert!(table.contains("refused at once"), "{table}");
    assert!(
        table.contains("open") && table.contains("closed"),
        "{table}"
    );
    assert!(table.contains("PASS"), "{table}");

    // The events carry it too.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let snapshot: Value = http
            .get(format!("{console}/api/snapshot"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if snapshot["scene"]["state"] == "passed" {
            assert_eq!(snapshot["presentation"]["running"], false);
            break;
        }
        assert!(Instant::now() < deadline, "no passed scene in the snapshot");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    system.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
