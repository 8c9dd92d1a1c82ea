//! Presentation mode against the real fault API over real proxies: faults
//! are added and removed on schedule, a seed replays its sequence, stop
//! removes what it added, and changes need the admin token. Also: the
//! standalone console has no scenes (501).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{Value, json};
use shopeasy_console::{Console, ConsoleSettings, ServiceTarget, presentation};
use shopeasy_faults::{Proxies, ProxyConfig};
use shopeasy_runtime::settings::Secret;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "presentation-test-token";
const EDGES: [&str; 3] = ["gateway-product", "gateway-order", "order-inventory"];

struct Running {
    console: String,
    faults: String,
    http: reqwest::Client,
    stop: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn start() -> Running {
    let proxies = Proxies::with_seed(1);
    for edge in EDGES {
        proxies
            .create(ProxyConfig::new(edge, "127.0.0.1:9").listen("127.0.0.1:0"))
            .await
            .unwrap();
    }
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let faults = format!("http://{}", api.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(shopeasy_faults::api::serve(api, proxies, stop.clone()));
    let mut settings = ConsoleSettings::new(
        vec![ServiceTarget::new("order", "http://127.0.0.1:9")],
        faults.clone(),
        Secret::new(TOKEN),
    );
    settings.listen = "127.0.0.1:0".parse().unwrap();
    let console = Console::bind(settings, None).await.unwrap();
    let addr = console.local_addr().unwrap();
    console.spawn(stop.clone());
    Running {
        console: format!("http://{addr}"),
        faults,
        http: reqwest::Client::new(),
        stop,
    }
}

impl Running {
    async fn status(&self) -> Value {
        self.http
            .get(format!("{}/api/presentation", self.console))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn start(&self, body: Value, token: Option<&str>) -> reqwest::Response {
        let mut req = self
            .http
            .post(format!("{}/api/presentation", self.console))
            .json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.unwrap()
    }

    async fn stop_schedule(&self) -> reqwest::Response {
        self.http
            .delete(format!("{}/api/presentation", self.console))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// Every toxic on every edge, as (edge, name, type).
    async fn toxics(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for edge in EDGES {
            let list: Vec<Value> = self
                .http
                .get(format!("{}/proxies/{edge}/toxics", self.faults))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            for t in list {
                out.push((
                    edge.to_owned(),
                    t["name"].as_str().unwrap().to_owned(),
                    t["type"].as_str().unwrap().to_owned(),
                ));
            }
        }
        out
    }

    /// Polls the status until `done` holds (or 10 s pass).
    async fn until(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = self.status().await;
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{what} within 10 s: {status}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The (edge, toxic) pairs of a status's history.
fn pairs(status: &Value) -> Vec<(String, String)> {
    status["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["edge"].as_str().unwrap().to_owned(),
                c["toxic"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn faults_are_added_and_removed_on_schedule_in_the_seeded_order() {
    let running = start().await;
    let res = running
        .start(
            json!({"interval_s": 0.2, "hold_s": 0.1, "seed": 42}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(res.status(), 202);
    let started = Instant::now();

    // At any moment at most one toxic is on the fault API, one the
    // schedule added.
    let mut seen_toxics = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let toxics = running.toxics().await;
        assert!(toxics.len() <= 1, "{toxics:?}");
        seen_toxics.extend(toxics);
        let status = running.status().await;
        if status["changes"].as_u64().unwrap() >= 5 {
            break status;
        }
        assert!(Instant::now() < deadline, "5 changes within 10 s: {status}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Five changes take about 4 intervals (the first is at once).
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(750), "5 changes in {took:?}");
    assert!(took < Duration::from_secs(3), "5 changes in {took:?}");
    let history = status["history"].as_array().unwrap();
    assert!(!seen_toxics.is_empty());
    for (edge, name, kind) in &seen_toxics {
        let change = history.iter().find(|c| c["name"] == name.as_str()).unwrap();
        assert_eq!(
            (change["edge"].as_str(), change["toxic"].as_str()),
            (Some(edge.as_str()), Some(kind.as_str()))
        );
    }
    for pair in history.windows(2) {
        let gap =
            pair[1]["added_unix_ms"].as_u64().unwrap() - pair[0]["added_unix_ms"].as_u64().unwrap();
        assert!((150..=400).contains(&gap), "changes {gap} ms apart");
    }

    // The fault API's own record: each toxic was in place about 100 ms.
    let windows: Vec<Value> = running
        .http
        .get(format!("{}/windows", running.faults))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let closed: Vec<u64> = windows
        .iter()
        .filter_map(|w| Some(w["ended_unix_ms"].as_u64()? - w["started_unix_ms"].as_u64()?))
        .collect();
    assert!(closed.len() >= 4, "{windows:?}");
    assert!(
        closed.iter().all(|ms| (90..=300).contains(ms)),
        "held {closed:?} ms"
    );

    // The sequence is the seed's.
    let seen = pairs(&status);
    let expected = presentation::schedule(
        42,
        &strings(&EDGES),
        &strings(&presentation::TOXICS),
        seen.len(),
    );
    assert_eq!(seen, expected);
    assert!(
        seen.iter()
            .all(|(_, t)| presentation::TOXICS.contains(&t.as_str()))
    );

    // Stop removes what it added.
    assert_eq!(running.stop_schedule().await.status(), 204);
    assert!(running.toxics().await.is_empty());
    let status = running.status().await;
    assert_eq!(status["running"], false);
    assert!(status["current"].is_null());
}

#[tokio::test]
async fn the_same_seed_replays_the_same_faults_and_edges_can_be_chosen() {
    let running = start().await;
    let body = json!({"interval_s": 0.05, "hold_s": 0.05, "seed": 7,
                      "edges": ["order-inventory", "gateway-order"], "toxics": ["latency", "timeout"]});
    let mut runs = Vec::new();
    for _ in 0..2 {
        assert_eq!(running.start(body.clone(), Some(TOKEN)).await.status(), 202);
        let status = running
            .until("4 changes", |s| s["changes"].as_u64().unwrap() >= 4)
            .await;
        assert_eq!(running.stop_schedule().await.status(), 204);
        assert!(running.toxics().await.is_empty());
        runs.push(pairs(&status)[..4].to_vec());
    }
    assert_eq!(runs[0], runs[1]);
    assert!(
        runs[0]
            .iter()
            .all(|(e, t)| e != "gateway-product" && t != "reset_peer")
    );
}

#[tokio::test]
async fn changes_need_the_token_and_bad_schedules_are_refused_with_a_detail() {
    let running = start().await;
    let body = json!({"interval_s": 1, "hold_s": 0.5});
    assert_eq!(running.start(body.clone(), None).await.status(), 401);
    assert_eq!(running.start(body, Some("wrong")).await.status(), 401);
    let res = running
        .http
        .delete(format!("{}/api/presentation", running.console))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(running.status().await["running"], false);

    for (bad, word) in [
        (json!({"interval_s": 0.1, "hold_s": 0.5}), "interval_s"),
        (json!({"interval_s": 1, "hold_s": 0}), "hold_s"),
        (json!({"interval_s": 99999, "hold_s": 1}), "interval_s"),
        (
            json!({"interval_s": 1, "hold_s": 0.5, "toxics": ["slicer"]}),
            "slicer",
        ),
        (
            json!({"interval_s": 1, "hold_s": 0.5, "edges": ["nowhere"]}),
            "nowhere",
        ),
        (json!({"interval": 1}), "presentation request"),
    ] {
        let res = running.start(bad.clone(), Some(TOKEN)).await;
        assert_eq!(res.status(), 400, "{bad}");
        assert_eq!(res.headers()["content-type"], "application/problem+json");
        let problem: Value = res.json().await.unwrap();
        assert!(
            problem["detail"].as_str().unwrap().contains(word),
            "{bad}: {problem}"
        );
    }
    assert!(running.toxics().await.is_empty());
}

#[tokio::test]
async fn the_standalone_console_has_no_scenes() {
    let running = start().await;
    let res = running
        .http
        .get(format!("{}/api/scenes", running.console))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 501);
    let res = running
        .http
        .post(format!("{}/api/scenes/breaker", running.console))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 501);
    let res = running
        .http
        .get(format!("{}/scenes.js", running.console))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.text().await.unwrap().contains("/api/presentation"));
}
