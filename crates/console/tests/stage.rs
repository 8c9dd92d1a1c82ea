//! A scene and presentation mode never run together, however their starts
//! meet: over real HTTP, against a stub fault API whose edge listing can be
//! held (presentation mode lists the edges before it records itself as
//! running) and a stub scene engine.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use axum::{
    Json, Router,
    http::StatusCode,
    routing::{delete, get, post},
};
use serde_json::{Value, json};
use shopeasy_console::{
    Console, ConsoleSettings, ServiceTarget,
    scenes::{SceneControl, SceneEntry, SceneStartError, SceneState, SceneStatus},
    unix_ms,
};
use shopeasy_runtime::settings::Secret;
use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "stage-test-token";
/// How long the stub fault API takes to list its edges: the window in
/// which a presentation start has checked the scenes but is not recorded
/// as running yet.
const LISTING: Duration = Duration::from_millis(20);

/// A scene engine with one scene, `breaker`, that runs until
/// [`Scenes::finish`].
#[derive(Debug, Default)]
struct Scenes {
    current: Mutex<Option<SceneStatus>>,
}

impl Scenes {
    fn run(&self) -> MutexGuard<'_, Option<SceneStatus>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self) {
        if let Some(run) = self.run().as_mut() {
            run.state = SceneState::Passed;
            run.ended_unix_ms = Some(unix_ms());
        }
    }
}

impl SceneControl for Scenes {
    fn list(&self) -> Vec<SceneEntry> {
        vec![SceneEntry {
            name: "breaker".into(),
            summary: "a stub".into(),
            expected: "nothing".into(),
        }]
    }

    fn start(&self, name: &str) -> Result<(), SceneStartError> {
        if name != "breaker" {
            return Err(SceneStartError::Unknown(name.into()));
        }
        let mut run = self.run();
        if let Some(running) = run.as_ref().filter(|r| r.state == SceneState::Running) {
            return Err(SceneStartError::Busy(running.name.clone()));
        }
        *run = Some(SceneStatus {
            name: name.into(),
            state: SceneState::Running,
            started_unix_ms: unix_ms(),
            ended_unix_ms: None,
            table: None,
            error: None,
        });
        Ok(())
    }

    fn current(&self) -> Option<SceneStatus> {
        self.run().clone()
    }
}

/// A fault API with one edge. Its listing counts itself, waits while the
/// gate is shut, then takes [`LISTING`]; toxics are accepted and removed.
#[derive(Clone)]
struct FaultApi {
    open: Arc<watch::Sender<bool>>,
    listings: Arc<watch::Sender<usize>>,
}

impl FaultApi {
    async fn serve() -> (Self, String) {
        let api = Self {
            open: Arc::new(watch::channel(true).0),
            listings: Arc::new(watch::channel(0).0),
        };
        let list = api.clone();
        let app = Router::new()
            .route("/proxies", get(move || list.clone().list()))
            .route("/proxies/{edge}/toxics", post(|| async { StatusCode::OK }))
            .route(
                "/proxies/{edge}/toxics/{name}",
                delete(|| async { StatusCode::NO_CONTENT }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (api, url)
    }

    async fn list(self) -> Json<Value> {
        self.listings.send_modify(|n| *n += 1);
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|open| *open).await;
        tokio::time::sleep(LISTING).await;
        Json(json!({"order-inventory": {"enabled": true, "toxics": []}}))
    }
}

struct Running {
    console: String,
    api: FaultApi,
    scenes: Arc<Scenes>,
    http: reqwest::Client,
    stop: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A console over the stub fault API and scene engine, its first poll
/// round done (it polls every 10 s, so no other listing comes meanwhile).
async fn start() -> Running {
    let (api, faults) = FaultApi::serve().await;
    let scenes = Arc::new(Scenes::default());
    let mut settings = ConsoleSettings::new(
        vec![ServiceTarget::new("order", "http://127.0.0.1:9")],
        faults,
        Secret::new(TOKEN),
    );
    settings.listen = "127.0.0.1:0".parse().unwrap();
    settings.poll_interval = Duration::from_secs(10);
    let console = Console::bind(settings, None)
        .await
        .unwrap()
        .with_scenes(scenes.clone());
    let addr = console.local_addr().unwrap();
    let stop = CancellationToken::new();
    console.spawn(stop.clone());
    let running = Running {
        console: format!("http://{addr}"),
        api,
        scenes,
        http: reqwest::Client::new(),
        stop,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while running.get("/api/snapshot").await.status() != 200 {
        assert!(Instant::now() < deadline, "a first snapshot within 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running
}

impl Running {
    async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.console))
            .send()
            .await
            .unwrap()
    }

    async fn start_presentation(&self) -> reqwest::Response {
        self.http
            .post(format!("{}/api/presentation", self.console))
            .bearer_auth(TOKEN)
            .json(&json!({"interval_s": 60, "hold_s": 0.05}))
            .send()
            .await
            .unwrap()
    }

    async fn start_scene(&self) -> reqwest::Response {
        self.http
            .post(format!("{}/api/scenes/breaker", self.console))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// Stops presentation mode and ends the scene: the stage is free.
    async fn clear(&self) {
        let res = self
            .http
            .delete(format!("{}/api/presentation", self.console))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 204);
        self.scenes.finish();
    }
}

/// The two answers of a round: exactly one 202, and the other the same
/// 409 `busy` problem a start after it gets.
async fn one_won(round: usize, answers: [reqwest::Response; 2]) -> usize {
    let statuses = answers.each_ref().map(reqwest::Response::status);
    let won: Vec<usize> = (0..2).filter(|i| statuses[*i] == 202).collect();
    assert_eq!(
        won.len(),
        1,
        "round {round}: exactly one start wins, not {statuses:?}"
    );
    let [a, b] = answers;
    let lost = if won[0] == 0 { b } else { a };
    assert_eq!(lost.status(), 409, "round {round}");
    assert_eq!(lost.headers()["content-type"], "application/problem+json");
    let problem: Value = lost.json().await.unwrap();
    assert!(
        problem["type"].as_str().unwrap().ends_with("busy"),
        "round {round}: {problem}"
    );
    won[0]
}

/// The presentation start checked that no scene ran, then listed the fault
/// API's edges before recording itself as running; a scene started in that
/// gap was accepted too. Here the listing is held until the scene start
/// has had its answer (or 300 ms): the old check-then-start accepts both
/// (the scene at once, the presentation once the gate opens); with one
/// turn over check and record the scene start waits for the presentation
/// to be recorded and is refused.
#[tokio::test]
async fn a_scene_started_while_presentation_mode_starts_is_refused() {
    let running = start().await;
    running.api.open.send_replace(false);
    let mut listings = running.api.listings.subscribe();
    let before = *listings.borrow_and_update();
    let presentation = running.start_presentation();
    let scene = async {
        // The presentation start is past its check: it is listing.
        let _ = listings.wait_for(|n| *n > before).await;
        let mut scene = std::pin::pin!(running.start_scene());
        let answered = tokio::time::timeout(Duration::from_millis(300), &mut scene).await;
        running.api.open.send_replace(true);
        match answered {
            Ok(res) => res,
            Err(_) => scene.await,
        }
    };
    let (presentation, scene) = tokio::join!(presentation, scene);
    assert_eq!(
        one_won(0, [presentation, scene]).await,
        0,
        "the first start"
    );
    let status: Value = running.get("/api/presentation").await.json().await.unwrap();
    assert_eq!(status["running"], true);
    assert!(
        running.scenes.current().is_none(),
        "no scene ran: {:?}",
        running.scenes.current()
    );
    running.clear().await;
}

/// Fifty times, a scene and presentation mode started at the same moment:
/// each time exactly one is accepted and the other refused as busy. (With
/// the old check-then-start, every round whose presentation start checked
/// first accepted both.)
#[tokio::test]
async fn of_a_scene_and_presentation_mode_started_at_once_exactly_one_runs() {
    let running = start().await;
    let mut wins = [0; 2];
    for round in 0..50 {
        let (presentation, scene) =
            tokio::join!(running.start_presentation(), running.start_scene());
        wins[one_won(round, [presentation, scene]).await] += 1;
        running.clear().await;
    }
    // Sequentially too, each refuses the other.
    assert_eq!(running.start_scene().await.status(), 202);
    let refused = running.start_presentation().await;
    assert_eq!(refused.status(), 409);
    let problem: Value = refused.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("scene breaker"),
        "{problem}"
    );
    running.clear().await;
    assert_eq!(running.start_presentation().await.status(), 202);
    assert_eq!(running.start_scene().await.status(), 409);
    running.clear().await;
    eprintln!("presentation won {} rounds, the scene {}", wins[0], wins[1]);
}
