//! The Scenarios panel's contract: list the lesson's scenes, run one
//! against the live system, and read how it went (issue 17 pt 4).
//!
//! The scenes live in the launcher (`shopeasy demo`), which depends on
//! every service; the console names only the [`SceneControl`] trait and
//! the launcher implements it. Without one (the standalone
//! `shopeasy-console` binary) the routes answer 501, as the load panel's.
//! While a scene runs, its faults and traffic show on the live topology
//! and breaker timeline like any other.
//!
//! | route | what |
//! |---|---|
//! | `GET /api/scenes` | every [`SceneEntry`] |
//! | `POST /api/scenes/{name}` | run one (admin token; 409 while one or presentation mode runs, see [`crate::stage`]) |
//! | `GET /api/scenes/current` | the current (or last) run's [`SceneStatus`] |
//! | `GET /scenes.js` | the panel's script |

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Serialize;
use shopeasy_runtime::problem::{Path, Problem};

use crate::{error::ConsoleError, server::AppState};

const SCRIPT: &str = include_str!("../assets/scenes.js");

/// A scene the panel lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SceneEntry {
    /// Its name (`breaker`), as `shopeasy demo <name>`.
    pub name: String,
    /// One line: what it shows.
    pub summary: String,
    /// The lesson's outcome a run is judged against (written above it).
    pub expected: String,
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SceneState {
    /// Still running.
    Running,
    /// Done; the measured outcome is the lesson's.
    Passed,
    /// Done; it is not, or the scene could not run (see `error`).
    Failed,
}

/// One run of a scene.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SceneStatus {
    /// The scene.
    pub name: String,
    /// Where it is.
    pub state: SceneState,
    /// When it started, Unix ms.
    pub started_unix_ms: u64,
    /// When it ended, Unix ms.
    pub ended_unix_ms: Option<u64>,
    /// The rendered timeline tables and verdict, once done.
    pub table: Option<String>,
    /// Why it could not run, if it could not.
    pub error: Option<String>,
}

/// Why a scene did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SceneStartError {
    /// No scene of that name.
    #[error("there is no scene {0:?} (GET /api/scenes lists them)")]
    Unknown(String),
    /// Another scene is running (one at a time: they share the system).
    #[error("scene {0} is still running; one scene at a time")]
    Busy(String),
}

/// Scenes the console can run.
pub trait SceneControl: Send + Sync + std::fmt::Debug + 'static {
    /// Every scene, in the lesson's order.
    fn list(&self) -> Vec<SceneEntry>;

    /// Starts scene `name` in the background, recording it as
    /// [`SceneState::Running`] before it returns: the console checks
    /// [`SceneControl::current`] to refuse presentation mode meanwhile, and
    /// a run recorded only later could be missed (see [`crate::stage`]).
    ///
    /// # Errors
    /// An unknown name, or a scene already running.
    fn start(&self, name: &str) -> Result<(), SceneStartError>;

    /// The current (or last) run, if any.
    fn current(&self) -> Option<SceneStatus>;
}

/// The routes (merged into [`crate::server::router`], behind its guard).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/scenes.js", get(script))
        .route("/api/scenes", get(list))
        .route("/api/scenes/current", get(current))
        .route("/api/scenes/{name}", post(start))
}

async fn script() -> Response {
    crate::assets::asset("text/javascript; charset=utf-8", SCRIPT)
}

fn scenes_of(state: &AppState) -> Result<&Arc<dyn SceneControl>, ConsoleError> {
    state.scenes.as_ref().ok_or_else(|| {
        ConsoleError::NotAvailable(
            "this console cannot run scenes (run `shopeasy demo <scene> --target ...`)".into(),
        )
    })
}

async fn list(State(state): State<AppState>) -> Result<Json<Vec<SceneEntry>>, ConsoleError> {
    Ok(Json(scenes_of(&state)?.list()))
}

async fn current(State(state): State<AppState>) -> Result<Response, ConsoleError> {
    Ok(match scenes_of(&state)?.current() {
        Some(status) => Json(status).into_response(),
        None => Problem::not_found("no scene has run yet").into_response(),
    })
}

async fn start(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ConsoleError> {
    let scenes = scenes_of(&state)?;
    state
        .stage
        .start_scene(&**scenes, &state.presentation, &name)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(scenes.current())).into_response())
}

impl From<SceneStartError> for ConsoleError {
    fn from(e: SceneStartError) -> Self {
        match e {
            SceneStartError::Unknown(_) => Self::NotFound(e.to_string()),
            SceneStartError::Busy(_) => Self::Busy(e.to_string()),
        }
    }
}
