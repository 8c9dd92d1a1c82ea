//! The console's load panel, driven by the launcher's own open-loop
//! generator ([`crate::load`]): the console names only its
//! [`LoadControl`] trait, this is the implementation.
//!
//! One run at a time; starting a new one stops the old. The live numbers
//! are those of the requests that ended in the last [`WINDOW`].

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use clap::Parser;
use shopeasy_console::{LoadControl, LoadRequest, LoadStatus};

use crate::load::{self, Live, LoadArgs};

/// The live numbers' window.
pub const WINDOW: Duration = Duration::from_secs(3);

/// How many demo customers a console run signs in (fewer than
/// `shopeasy load`'s default, so a run starts in a moment).
const CUSTOMERS: &str = "50";

/// The generator behind the console's load panel, aimed at one gateway.
#[derive(Debug, Clone)]
pub struct ConsoleLoad {
    gateway: String,
    current: Arc<Mutex<Option<Run>>>,
}

#[derive(Debug, Clone)]
struct Run {
    request: LoadRequest,
    live: Live,
    /// Set when the run ends: `Ok` or why it failed.
    ended: Arc<Mutex<Option<Result<(), String>>>>,
}

impl ConsoleLoad {
    /// A generator for the gateway at `gateway` (`http://127.0.0.1:8080`).
    pub fn new(gateway: impl Into<String>) -> Self {
        Self {
            gateway: gateway.into(),
            current: Arc::default(),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Run>> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The arguments of `shopeasy load` for `request` against `gateway`.
fn args(gateway: &str, request: &LoadRequest) -> Result<LoadArgs, String> {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }
    let rate = request.rate.to_string();
    let read_ratio = request.read_share.to_string();
    let duration = request.duration_seconds.to_string();
    Cli::try_parse_from([
        "load",
        "--target",
        gateway,
        "--rate",
        &rate,
        "--read-ratio",
        &read_ratio,
        "--duration",
        &duration,
        "--customers",
        CUSTOMERS,
        "--timeout",
        "5",
        "--quiet",
    ])
    .map(|cli| cli.load)
    .map_err(|e| e.to_string())
}

impl LoadControl for ConsoleLoad {
    fn start(&self, request: LoadRequest) -> Result<(), String> {
        let args = args(&self.gateway, &request)?;
        let run = Run {
            request,
            live: Live::default(),
            ended: Arc::default(),
        };
        if let Some(old) = self.current().replace(run.clone()) {
            old.live.stop();
        }
        tokio::spawn(async move {
            let outcome = load::run_live(&args, &run.live)
                .await
                .map(drop)
                .map_err(|e| format!("{e:#}"));
            *run.ended
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(outcome);
        });
        Ok(())
    }

    fn stop(&self) {
        if let Some(run) = self.current().as_ref() {
            run.live.stop();
        }
    }

    fn status(&self) -> LoadStatus {
        let Some(run) = self.current().clone() else {
            return LoadStatus::default();
        };
        let ended = run
            .ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let recent = run.live.recent(WINDOW);
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        LoadStatus {
            running: ended.is_none(),
            request: Some(run.request),
            live_rate: recent.achieved_rate,
            statuses: recent
                .statuses
                .iter()
                .map(|(s, n)| (s.to_string(), *n as u64))
                .collect::<BTreeMap<_, _>>(),
            p50_ms: ms(recent.percentiles[0].1),
            p99_ms: ms(recent.p99()),
            sent: run.live.sent() as u64,
            error: ended.and_then(Result::err),
        }
    }
}
