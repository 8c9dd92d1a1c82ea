//! One act at a time: a scene or presentation mode, never both.
//!
//! Both break the system on purpose, and a scene judges the system by
//! differences of its counters: a presentation's faults landing in a
//! scene's window would make the scene's verdict a lie.
//!
//! Each start used to check that the other was idle and then start, with
//! an await in between (presentation mode lists the fault API's edges
//! before it records itself as running): a scene started in that gap was
//! accepted too, and both ran. Now both starts take the [`Stage`]'s one
//! turn from the check until the run is recorded, so of two starts at
//! once exactly one wins and the other gets the refusal a later start
//! would ([`ConsoleError::Busy`], 409). What runs is still recorded where
//! it was (the scene engine's `current`, presentation mode's status); the
//! turn only makes "check, then record" one step. A start that has to wait
//! for the turn waits at most as long as presentation mode takes to list
//! the fault API's edges (the HTTP client's timeout).
//!
//! Stopping needs no turn: it only ever makes the stage free.

use std::sync::Arc;

use crate::{
    error::ConsoleError,
    presentation::{Presentation, PresentationRequest},
    scenes::{SceneControl, SceneState},
};

/// The one turn both starts take. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Stage {
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Stage {
    /// Starts scene `name` on `scenes`, unless presentation mode runs.
    ///
    /// # Errors
    /// [`ConsoleError::Busy`] while presentation mode or another scene
    /// runs; [`ConsoleError::NotFound`] for an unknown scene.
    pub(crate) async fn start_scene(
        &self,
        scenes: &dyn SceneControl,
        presentation: &Presentation,
        name: &str,
    ) -> Result<(), ConsoleError> {
        let _turn = self.turn.lock().await;
        if presentation.status().running {
            return Err(ConsoleError::Busy(
                "presentation mode is running; stop it first".into(),
            ));
        }
        // Records the run as running before it returns (the trait's
        // contract), so the turn covers the record too.
        scenes.start(name).map_err(ConsoleError::from)
    }

    /// Starts (or restarts) presentation mode with `request`, unless a
    /// scene runs.
    ///
    /// # Errors
    /// [`ConsoleError::Busy`] while a scene runs; otherwise as
    /// [`Presentation::start`].
    pub(crate) async fn start_presentation(
        &self,
        scenes: Option<&dyn SceneControl>,
        presentation: &Presentation,
        http: reqwest::Client,
        faults_url: Arc<str>,
        request: PresentationRequest,
    ) -> Result<(), ConsoleError> {
        let _turn = self.turn.lock().await;
        let scene = scenes.and_then(|s| s.current());
        if let Some(scene) = scene.filter(|s| s.state == SceneState::Running) {
            return Err(ConsoleError::Busy(format!(
                "scene {} is running; start presentation mode after it",
                scene.name
            )));
        }
        // Still holding the turn: it returns once the schedule is recorded
        // as running, so a scene waiting for the turn sees it.
        presentation.start(http, faults_url, request).await
    }
}
