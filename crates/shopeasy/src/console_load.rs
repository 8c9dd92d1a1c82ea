//! The console's load panel, driven by the launcher's own open-loop
//! generator ([`crate::load`]): the console names only its
//! [`LoadControl`] trait, this is the implementation.
//!
//! One run at a time; starting a new one stops the old. The live numbers
//! are those of the requests that ended in the last [`WINDOW`], to the
//! second, their latencies to 3 significant digits ([`Live::recent`]).

use std::{
    collections::BTreeMap,
    future::Future,
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

    /// Makes `request` the current run (stopping the old one) and runs
    /// `work` on it, on a task of its own.
    ///
    /// How the task ended is the run's end, whichever way it ended: an
    /// error, a panic or a cancellation is recorded as the run's error.
    /// Why its own task: the end was recorded after `work` on the same
    /// task, so a run that panicked recorded nothing and the panel showed
    /// it "running" for ever.
    fn launch<F>(&self, request: LoadRequest, work: impl FnOnce(Live) -> F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let run = Run {
            request,
            live: Live::default(),
            ended: Arc::default(),
        };
        if let Some(old) = self.current().replace(run.clone()) {
            old.live.stop();
        }
        let task = tokio::spawn(work(run.live.clone()));
        tokio::spawn(async move {
            let outcome = match task.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("{e:#}")),
                Err(e) => Err(format!("the load generator failed: {e}")),
            };
            *run.ended
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(outcome);
        });
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
        self.launch(request, move |live| async move {
            load::run_live(&args, &live).await.map(drop)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(rate: f64) -> LoadRequest {
        LoadRequest {
            rate,
            read_share: 1.0,
            duration_seconds: 1.0,
        }
    }

    async fn breaks(_live: Live) -> anyhow::Result<()> {
        panic!("the generator broke")
    }

    /// Before, the end was recorded after the run on the same task: a run
    /// that panicked recorded nothing, and the panel said "running" for ever.
    #[tokio::test]
    async fn a_run_that_panics_ends_with_the_panic_as_its_error() {
        let load = ConsoleLoad::new("http://127.0.0.1:9");
        load.launch(request(10.0), breaks);
        shopeasy_testkit::wait::assert_eventually(
            Duration::from_secs(5),
            "the run ends",
            async || !load.status().running,
        )
        .await;
        let error = load.status().error.expect("the panic is the run's error");
        assert!(
            error.contains("panicked") && error.contains("the generator broke"),
            "{error}"
        );
    }

    /// A rate below `bounds::MIN_RATE` is refused as the run starts; before,
    /// 1e-20 panicked on its interval, on the run's task.
    #[tokio::test]
    async fn a_rate_too_small_to_pace_is_refused_at_the_start() {
        let load = ConsoleLoad::new("http://127.0.0.1:9");
        let error = load.start(request(1e-20)).unwrap_err();
        assert!(
            error.contains("--rate") && error.contains("must be"),
            "{error}"
        );
        assert!(!load.status().running, "no run began");
    }
}
