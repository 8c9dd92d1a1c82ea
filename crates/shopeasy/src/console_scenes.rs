//! The console's Scenarios panel, run by the launcher's scene engine
//! ([`crate::demo`]): the console names only its [`SceneControl`] trait,
//! this is the implementation.
//!
//! A scene runs in `--target` mode against the system the console watches
//! (its gateway, fault API and Order's admin listener), so its faults and
//! traffic show on the live topology and breaker timeline while it runs.
//! That system's settings are its own: a scene's table notes the ones its
//! expectation assumes. One scene at a time — scenes measure differences
//! of the system's counters, and two would read each other's calls.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use shopeasy_console::{
    scenes::{SceneEntry, SceneStartError, SceneState, SceneStatus},
    unix_ms,
};

use crate::demo::{self, Endpoints, Run, Scene, Target};

pub use shopeasy_console::scenes::SceneControl;

/// The scene engine behind the console's Scenarios panel, aimed at one
/// running system.
#[derive(Debug, Clone)]
pub struct ConsoleScenes {
    endpoints: Endpoints,
    seed: u64,
    current: Arc<Mutex<Option<SceneStatus>>>,
}

impl ConsoleScenes {
    /// Scenes against the system at `endpoints`, with `seed` for their
    /// random choices.
    pub fn new(endpoints: Endpoints, seed: u64) -> Self {
        Self {
            endpoints,
            seed,
            current: Arc::default(),
        }
    }

    fn current_run(&self) -> MutexGuard<'_, Option<SceneStatus>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SceneControl for ConsoleScenes {
    fn list(&self) -> Vec<SceneEntry> {
        Scene::ALL
            .iter()
            .map(|scene| {
                let info = scene.info();
                SceneEntry {
                    name: info.name.to_owned(),
                    summary: info.summary.to_owned(),
                    expected: info.expected.to_owned(),
                }
            })
            .collect()
    }

    fn start(&self, name: &str) -> Result<(), SceneStartError> {
        let scene = Scene::from_name(name)
            .ok_or_else(|| SceneStartError::Unknown(name.chars().take(100).collect()))?;
        {
            let mut current = self.current_run();
            if let Some(running) = current.as_ref().filter(|s| s.state == SceneState::Running) {
                return Err(SceneStartError::Busy(running.name.clone()));
            }
            *current = Some(SceneStatus {
                name: scene.to_string(),
                state: SceneState::Running,
                started_unix_ms: unix_ms(),
                ended_unix_ms: None,
                table: None,
                error: None,
            });
        }
        let run = Run {
            target: Target::Running(self.endpoints.clone()),
            seed: self.seed,
        };
        let current = self.current.clone();
        tokio::spawn(async move {
            let outcome = demo::run(scene, &run).await;
            let mut current = current.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(status) = current.as_mut() {
                status.ended_unix_ms = Some(unix_ms());
                match outcome {
                    Ok(outcome) => {
                        status.state = if outcome.passed {
                            SceneState::Passed
                        } else {
                            SceneState::Failed
                        };
                        status.table = Some(outcome.to_string());
                    }
                    Err(e) => {
                        status.state = SceneState::Failed;
                        status.error = Some(format!("{e:#}"));
                    }
                }
            }
        });
        Ok(())
    }

    fn current(&self) -> Option<SceneStatus> {
        self.current_run().clone()
    }
}
