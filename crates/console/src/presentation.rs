//! Presentation mode: faults cycled on a schedule, for talks (issue 17 pt 4,
//! after the OpenTelemetry demo's flag scheduler).
//!
//! Every `interval_s` the task picks an edge and a toxic with a seeded RNG
//! (so a rehearsal and the talk see the same sequence, see [`schedule`]),
//! adds the toxic through the fault API, and removes it after `hold_s`.
//! Stopping removes what it added. It lives in the console itself and uses
//! only the fault API, so it works with the embedded system and with the
//! standalone console alike.
//!
//! | route | what |
//! |---|---|
//! | `GET /api/presentation` | its [`PresentationStatus`] |
//! | `POST /api/presentation` | start (a [`PresentationRequest`]; admin token; 409 while a scene runs, see [`crate::stage`]) |
//! | `DELETE /api/presentation` | stop (admin token) |

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::{task::JoinHandle, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{error::ConsoleError, server::AppState, unix_ms};

/// The longest interval (and hold) accepted, in seconds.
pub const MAX_INTERVAL_S: f64 = 3600.0;
/// The shortest hold accepted, in seconds (shorter than a poll of the page
/// would never be seen).
pub const MIN_HOLD_S: f64 = 0.05;
/// The most edges or toxics a request may name.
pub const MAX_CHOICES: usize = 32;
/// The toxics presentation mode can add, and the default set.
pub const TOXICS: [&str; 3] = ["timeout", "latency", "reset_peer"];
/// How many past changes the status keeps.
const HISTORY: usize = 20;

/// What the page asks for (a JSON object only).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(remote = "Self")]
pub struct PresentationRequest {
    /// Seconds from one fault to the next, `hold_s ..= 3600`.
    pub interval_s: f64,
    /// Seconds each fault stays, `(0.05 ..= interval_s]`.
    pub hold_s: f64,
    /// Seed of the choices (the same seed, the same sequence).
    #[serde(default)]
    pub seed: u64,
    /// Edges to break; empty or absent: every edge of the fault API.
    #[serde(default)]
    pub edges: Vec<String>,
    /// Toxic types to use; empty or absent: [`TOXICS`].
    #[serde(default)]
    pub toxics: Vec<String>,
}

shopeasy_runtime::only_json_objects!(serialize: PresentationRequest);

impl PresentationRequest {
    /// Checks the ranges and names (the page sends what a person typed).
    ///
    /// # Errors
    /// The first value out of range, named.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.hold_s >= MIN_HOLD_S && self.hold_s <= MAX_INTERVAL_S) {
            return Err(format!(
                "hold_s {} is outside [{MIN_HOLD_S}, {MAX_INTERVAL_S}] seconds",
                self.hold_s
            ));
        }
        if !(self.interval_s >= self.hold_s && self.interval_s <= MAX_INTERVAL_S) {
            return Err(format!(
                "interval_s {} must be at least hold_s ({}) and at most {MAX_INTERVAL_S}",
                self.interval_s, self.hold_s
            ));
        }
        if self.edges.len() > MAX_CHOICES || self.toxics.len() > MAX_CHOICES {
            return Err(format!("name at most {MAX_CHOICES} edges and toxics"));
        }
        if let Some(bad) = self.edges.iter().find(|e| !is_name(e)) {
            return Err(format!(
                "edge {:?} is not an edge name (letters, digits, -, _, .)",
                bad.chars().take(100).collect::<String>()
            ));
        }
        if let Some(bad) = self.toxics.iter().find(|t| !TOXICS.contains(&t.as_str())) {
            return Err(format!(
                "toxic {:?} is not one of {}",
                bad.chars().take(100).collect::<String>(),
                TOXICS.join(", ")
            ));
        }
        Ok(())
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// One fault the schedule added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultChange {
    /// The edge.
    pub edge: String,
    /// The toxic type.
    pub toxic: String,
    /// Its name on the fault API (`presentation_<n>`).
    pub name: String,
    /// When it was added, Unix ms.
    pub added_unix_ms: u64,
    /// When it was (or is due to be) removed, Unix ms.
    pub until_unix_ms: u64,
}

/// What presentation mode is doing (also shown on the page).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PresentationStatus {
    /// A schedule is running.
    pub running: bool,
    /// What the current (or last) schedule was asked for.
    pub request: Option<PresentationRequest>,
    /// When the next fault is added, Unix ms.
    pub next_change_unix_ms: Option<u64>,
    /// The fault in place now.
    pub current: Option<FaultChange>,
    /// The last few faults, oldest first.
    pub history: Vec<FaultChange>,
    /// Faults added by this schedule.
    pub changes: u64,
    /// The last fault API error (the schedule carries on).
    pub error: Option<String>,
}

/// The seeded choices: the `n` first (edge, toxic) pairs a schedule with
/// `seed` makes over `edges` and `toxics` (sorted first, so the order the
/// fault API lists edges in does not matter).
pub fn schedule(seed: u64, edges: &[String], toxics: &[String], n: usize) -> Vec<(String, String)> {
    let mut rng = SplitMix64(seed);
    let (edges, toxics) = (sorted(edges), sorted(toxics));
    (0..n)
        .map_while(|_| {
            let edge = edges.get(rng.below(edges.len()))?;
            let toxic = toxics.get(rng.below(toxics.len()))?;
            Some((edge.clone(), toxic.clone()))
        })
        .collect()
}

fn sorted(items: &[String]) -> Vec<String> {
    let mut items = items.to_vec();
    items.sort();
    items.dedup();
    items
}

/// SplitMix64: small, seeded, and the same on every platform (the
/// sequence is part of the contract: a seed replays a talk).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        if n == 0 {
            return 0;
        }
        usize::try_from(self.next() % n).unwrap_or(0)
    }
}

/// The toxic's body on the fault API: each fault clearly visible on the
/// page (a hang, a second's delay, a reset), on the downstream side.
fn toxic_body(kind: &str, name: &str) -> Value {
    let attributes = match kind {
        "latency" => json!({"latency": 1000, "jitter": 100}),
        _ => json!({"timeout": 0}),
    };
    json!({"name": name, "type": kind, "stream": "downstream", "toxicity": 1.0,
           "attributes": attributes})
}

/// Presentation mode's state: at most one schedule at a time.
#[derive(Debug, Clone, Default)]
pub struct Presentation {
    inner: Arc<Mutex<Inner>>,
    /// Held by [`Presentation::start`] and [`Presentation::stop`] from
    /// beginning to end, so two requests at once take turns. Without it two
    /// starts could each find nothing to stop (the first is still listing
    /// the edges), and the second would overwrite the first's handle: a
    /// schedule nobody could stop, breaking edges until the process ends.
    turn: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Debug, Default)]
struct Inner {
    status: PresentationStatus,
    stop: Option<CancellationToken>,
    task: Option<JoinHandle<()>>,
}

impl Presentation {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What it is doing.
    pub fn status(&self) -> PresentationStatus {
        self.lock().status.clone()
    }

    /// Stops the schedule, if one runs, and waits until the fault it added
    /// is removed.
    pub async fn stop(&self) {
        let _turn = self.turn.lock().await;
        self.stop_running().await;
    }

    /// [`Presentation::stop`], its turn already taken.
    async fn stop_running(&self) {
        let (stop, task) = {
            let mut inner = self.lock();
            (inner.stop.take(), inner.task.take())
        };
        if let Some(stop) = stop {
            stop.cancel();
        }
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Starts a schedule (stopping one in progress first) over the fault
    /// API at `faults_url`.
    ///
    /// # Errors
    /// The fault API cannot list its edges, or has none of those asked for.
    pub async fn start(
        &self,
        http: reqwest::Client,
        faults_url: Arc<str>,
        request: PresentationRequest,
    ) -> Result<(), ConsoleError> {
        let _turn = self.turn.lock().await;
        self.stop_running().await;
        let known = edges(&http, &faults_url).await?;
        let edges = if request.edges.is_empty() {
            known
        } else if let Some(bad) = request.edges.iter().find(|e| !known.contains(e)) {
            return Err(ConsoleError::BadRequest(format!(
                "the fault API has no edge {bad:?} (it has {})",
                known.join(", ")
            )));
        } else {
            request.edges.clone()
        };
        if edges.is_empty() {
            return Err(ConsoleError::BadRequest(
                "the fault API has no edges to break".into(),
            ));
        }
        let toxics = if request.toxics.is_empty() {
            TOXICS.iter().map(|t| (*t).to_owned()).collect()
        } else {
            request.toxics.clone()
        };
        let stop = CancellationToken::new();
        let mut inner = self.lock();
        inner.status = PresentationStatus {
            running: true,
            request: Some(request.clone()),
            next_change_unix_ms: Some(unix_ms()),
            ..PresentationStatus::default()
        };
        let schedule = Schedule {
            state: self.clone(),
            http,
            faults_url,
            edges: sorted(&edges),
            toxics: sorted(&toxics),
            request,
        };
        // Taking turns means none runs here; if one ever did, it is
        // cancelled (it removes its own fault) rather than left running.
        if let Some(orphan) = inner.stop.replace(stop.clone()) {
            orphan.cancel();
        }
        inner.task = Some(tokio::spawn(schedule.run(stop)));
        Ok(())
    }

    fn update(&self, f: impl FnOnce(&mut PresentationStatus)) {
        f(&mut self.lock().status);
    }
}

/// The names of the fault API's edges.
async fn edges(http: &reqwest::Client, faults_url: &str) -> Result<Vec<String>, ConsoleError> {
    let listed: serde_json::Map<String, Value> = http
        .get(format!("{faults_url}/proxies"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| ConsoleError::upstream("the fault API", format!("listing its edges: {e}")))?
        .json()
        .await
        .map_err(|e| ConsoleError::upstream("the fault API", format!("its edges: {e}")))?;
    Ok(listed.into_iter().map(|(name, _)| name).collect())
}

/// One running schedule.
struct Schedule {
    state: Presentation,
    http: reqwest::Client,
    faults_url: Arc<str>,
    edges: Vec<String>,
    toxics: Vec<String>,
    request: PresentationRequest,
}

impl Schedule {
    async fn run(self, stop: CancellationToken) {
        let mut rng = SplitMix64(self.request.seed);
        let interval = Duration::from_secs_f64(self.request.interval_s);
        let hold = Duration::from_secs_f64(self.request.hold_s);
        let mut next = Instant::now();
        let mut n: u64 = 0;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep_until(next) => {}
            }
            n += 1;
            let edge = self.edges[rng.below(self.edges.len())].clone();
            let toxic = self.toxics[rng.below(self.toxics.len())].clone();
            let name = format!("presentation_{n}");
            let added = self.add(&edge, &toxic, &name).await;
            let now = unix_ms();
            let change = FaultChange {
                edge,
                toxic,
                name,
                added_unix_ms: now,
                until_unix_ms: now + millis(hold),
            };
            next += interval;
            let next_ms = now + millis(next.saturating_duration_since(Instant::now()));
            self.state.update(|s| {
                s.next_change_unix_ms = Some(next_ms);
                s.changes = n;
                match &added {
                    Ok(()) => {
                        s.current = Some(change.clone());
                        s.history.push(change.clone());
                        if s.history.len() > HISTORY {
                            s.history.remove(0);
                        }
                    }
                    Err(e) => s.error = Some(e.clone()),
                }
            });
            let cancelled = tokio::select! {
                () = stop.cancelled() => true,
                () = tokio::time::sleep(hold) => false,
            };
            if added.is_ok() {
                self.remove(&change).await;
            }
            if cancelled {
                break;
            }
        }
        self.state.update(|s| {
            s.running = false;
            s.current = None;
            s.next_change_unix_ms = None;
        });
    }

    async fn add(&self, edge: &str, toxic: &str, name: &str) -> Result<(), String> {
        let url = format!("{}/proxies/{edge}/toxics", self.faults_url);
        let res = self
            .http
            .post(&url)
            .json(&toxic_body(toxic, name))
            .send()
            .await
            .map_err(|e| format!("adding {toxic} to {edge}: {e}"))?;
        if res.status().is_success() {
            tracing::info!(%edge, %toxic, %name, "presentation fault added");
            Ok(())
        } else {
            Err(format!(
                "adding {toxic} to {edge}: the fault API answered {}",
                res.status()
            ))
        }
    }

    async fn remove(&self, change: &FaultChange) {
        let url = format!(
            "{}/proxies/{}/toxics/{}",
            self.faults_url, change.edge, change.name
        );
        let removed = self.http.delete(&url).send().await;
        let error = match removed {
            Ok(res) if res.status().is_success() || res.status() == StatusCode::NOT_FOUND => None,
            Ok(res) => Some(format!(
                "removing {} from {}: the fault API answered {}",
                change.name,
                change.edge,
                res.status()
            )),
            Err(e) => Some(format!(
                "removing {} from {}: {e}",
                change.name, change.edge
            )),
        };
        self.state.update(|s| {
            if s.current.as_ref().is_some_and(|c| c.name == change.name) {
                s.current = None;
            }
            if error.is_some() {
                s.error.clone_from(&error);
            }
        });
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The routes (merged into [`crate::server::router`], behind its guard).
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route(
        "/api/presentation",
        get(status).post(start).delete(stop_route),
    )
}

async fn status(State(state): State<AppState>) -> Json<PresentationStatus> {
    Json(state.presentation.status())
}

async fn start(State(state): State<AppState>, body: Bytes) -> Result<Response, ConsoleError> {
    let request: PresentationRequest = serde_json::from_slice(&body)
        .map_err(|e| ConsoleError::BadRequest(format!("not a presentation request: {e}")))?;
    request.validate().map_err(ConsoleError::BadRequest)?;
    // Its faults would land in a running scene's measurements.
    state
        .stage
        .start_presentation(
            state.scenes.as_deref(),
            &state.presentation,
            state.http.clone(),
            state.faults_url.clone(),
            request,
        )
        .await?;
    Ok((StatusCode::ACCEPTED, Json(state.presentation.status())).into_response())
}

async fn stop_route(State(state): State<AppState>) -> StatusCode {
    state.presentation.stop().await;
    StatusCode::NO_CONTENT
}

#[cfg(test)]
mod tests {
    use std::{
        collections::BTreeSet,
        sync::atomic::{AtomicU64, Ordering::SeqCst},
    };

    use axum::routing::{delete, post};

    use super::*;

    /// How long the stub's edge listing waits for a second one.
    const MEET: Duration = Duration::from_millis(300);

    /// A fault API with one edge that keeps count: adding a toxic records
    /// its name, removing it forgets it. Its edge listing waits (up to
    /// [`MEET`]) until a second listing is in flight, so two starts that
    /// can both reach it at once surely do.
    #[derive(Clone, Default)]
    struct Stub {
        listing: Arc<tokio::sync::watch::Sender<usize>>,
        added: Arc<AtomicU64>,
        present: Arc<Mutex<BTreeSet<String>>>,
    }

    impl Stub {
        async fn serve(&self) -> Arc<str> {
            let (list, add, remove) = (self.clone(), self.clone(), self.clone());
            let app = Router::new()
                .route("/proxies", get(move || list.clone().list()))
                .route(
                    "/proxies/{edge}/toxics",
                    post(move |body: Bytes| add.clone().add(body)),
                )
                .route(
                    "/proxies/{edge}/toxics/{name}",
                    delete(
                        move |axum::extract::Path((_, name)): axum::extract::Path<(
                            String,
                            String,
                        )>| remove.clone().remove(name),
                    ),
                );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await });
            url.into()
        }

        async fn list(self) -> Json<Value> {
            self.listing.send_modify(|n| *n += 1);
            let mut listings = self.listing.subscribe();
            let _ = tokio::time::timeout(MEET, listings.wait_for(|n| *n >= 2)).await;
            self.listing.send_modify(|n| *n -= 1);
            Json(json!({"order-inventory": {"enabled": true, "toxics": []}}))
        }

        async fn add(self, body: Bytes) -> StatusCode {
            let toxic: Value = serde_json::from_slice(&body).unwrap();
            let name = toxic["name"].as_str().unwrap().to_owned();
            self.added.fetch_add(1, SeqCst);
            self.present().insert(name);
            StatusCode::OK
        }

        async fn remove(self, name: String) -> StatusCode {
            self.present().remove(&name);
            StatusCode::NO_CONTENT
        }

        fn present(&self) -> MutexGuard<'_, BTreeSet<String>> {
            self.present.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    /// Two starts at the same moment used to both find nothing to stop
    /// (the other was still listing the edges), and the second overwrote
    /// the first's handle: a schedule that stop could not reach kept adding
    /// faults. The stub makes the two overlap for sure; after stop, no
    /// fault may be added any more.
    #[tokio::test]
    async fn two_starts_at_once_leave_one_schedule_that_stop_ends() {
        let stub = Stub::default();
        let faults = stub.serve().await;
        let presentation = Presentation::default();
        let http = reqwest::Client::new();
        let (a, b) = tokio::join!(
            presentation.start(http.clone(), faults.clone(), request(0.1, 0.05)),
            presentation.start(http.clone(), faults.clone(), request(0.1, 0.05)),
        );
        a.unwrap();
        b.unwrap();
        let ran = Instant::now() + Duration::from_secs(5);
        while stub.added.load(SeqCst) == 0 {
            assert!(Instant::now() < ran, "a schedule ran within 5 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        presentation.stop().await;
        assert!(!presentation.status().running);
        assert!(stub.present().is_empty(), "stop removed what was added");
        // Nothing runs any more: over five intervals no fault is added (a
        // schedule left running adds one every 100 ms).
        let added = stub.added.load(SeqCst);
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            assert_eq!(stub.added.load(SeqCst), added, "a schedule still runs");
            assert!(stub.present().is_empty(), "{:?}", *stub.present());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn request(interval_s: f64, hold_s: f64) -> PresentationRequest {
        PresentationRequest {
            interval_s,
            hold_s,
            seed: 1,
            edges: vec![],
            toxics: vec![],
        }
    }

    #[test]
    fn a_request_is_an_object_never_an_array_of_its_fields() {
        let text = serde_json::to_string(&request(1.0, 0.5)).unwrap();
        let back: PresentationRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, request(1.0, 0.5));
        let e = serde_json::from_str::<PresentationRequest>("[1.0, 0.5]").unwrap_err();
        assert!(e.to_string().contains("expected a JSON object"), "{e}");
    }

    #[test]
    fn requests_out_of_range_are_named() {
        request(1.0, 0.5).validate().unwrap();
        request(0.5, 0.5).validate().unwrap();
        assert!(
            request(0.4, 0.5)
                .validate()
                .unwrap_err()
                .contains("interval_s")
        );
        assert!(request(1.0, 0.0).validate().unwrap_err().contains("hold_s"));
        assert!(
            request(1.0, f64::NAN)
                .validate()
                .unwrap_err()
                .contains("hold_s")
        );
        assert!(
            request(4000.0, 1.0)
                .validate()
                .unwrap_err()
                .contains("interval_s")
        );
        let mut bad = request(1.0, 0.5);
        bad.toxics = vec!["slicer".into()];
        assert!(bad.validate().unwrap_err().contains("slicer"));
        let mut bad = request(1.0, 0.5);
        bad.edges = vec!["../reset".into()];
        assert!(bad.validate().unwrap_err().contains("edge"));
    }

    #[test]
    fn a_seed_gives_the_same_sequence_whatever_the_order_of_the_edges() {
        let edges: Vec<String> = ["b", "a", "c"].map(String::from).to_vec();
        let reversed: Vec<String> = edges.iter().rev().cloned().collect();
        let toxics: Vec<String> = TOXICS.map(String::from).to_vec();
        let one = schedule(42, &edges, &toxics, 20);
        assert_eq!(one, schedule(42, &reversed, &toxics, 20));
        assert_ne!(one, schedule(43, &edges, &toxics, 20));
        assert_eq!(one.len(), 20);
        assert!(
            one.iter()
                .map(|(e, _)| e)
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 1
        );
        assert!(schedule(1, &[], &toxics, 5).is_empty());
    }
}
