//! `shopeasy demo <scene>`: the lesson "When the neighbour is slow:
//! timeout, retry, circuit breaker" replayed against ShopEasy itself
//! (SPEC §13, issue 17).
//!
//! The lesson's numbers come from a toy loop. A scene makes the same thing
//! happen in the real system — it starts the embedded system with short
//! settings (or uses a running one, `--target`), breaks an edge through the
//! fault API, sends traffic, and measures — and prints a [`Timeline`] in
//! the lesson's style: one row per tick or attempt, the state after it, and
//! a closing line with the measured figure and whether it is the lesson's.
//! `shopeasy demo` exits 1 when it is not, so each scene is also a test
//! (`tests/demo.rs` runs them all).
//!
//! - [`table`]: a timeline as aligned plain text.
//! - [`live`]: the system under a scene and the calls a scene makes to it.
//! - [`stub`]: a scripted HTTP upstream, for the scenes that show one
//!   mechanism of `shopeasy-resilience` on its own.
//! - one module per scene: [`slow_neighbour`], [`retry`], [`jitter`], [`breaker`],
//!   [`bulkhead`], [`fallback`], [`retry_after`], [`budget`],
//!   [`amplification`], [`idempotency`], [`deadline`].
//! - [`cli`]: `shopeasy demo --list` and a subcommand per scene.

pub mod amplification;
pub mod breaker;
pub mod budget;
pub mod bulkhead;
pub mod cli;
pub mod deadline;
pub mod fallback;
pub mod idempotency;
pub mod jitter;
pub mod live;
pub mod retry;
pub mod retry_after;
pub mod slow_neighbour;
pub mod stub;
pub mod table;

use std::{fmt, time::Duration};

pub use live::Endpoints;
pub use table::Timeline;

/// The real time of one of the lesson's ticks: short enough that a scene
/// takes seconds, long enough that scheduling noise on a busy machine
/// (tens of milliseconds) does not move a call into the next tick.
pub const TICK: Duration = Duration::from_millis(200);

/// A scene of the lesson.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scene {
    /// The 12-tick circuit breaker.
    Breaker,
    /// Retries of temporary errors only, with a growing wait.
    Retry,
    /// A retry budget while Inventory is down.
    Budget,
    /// Clients retrying without and with jitter.
    Jitter,
    /// Stale stock while Inventory is down; no stock at all → 503.
    Fallback,
    /// A lost answer, a repeated request, one order.
    Idempotency,
    /// `Retry-After` honoured, up to the deadline.
    RetryAfter,
    /// A slow neighbour holds only its own slots.
    Bulkhead,
    /// Retries multiplying across layers.
    Amplification,
    /// A provider that answers, slowly.
    SlowNeighbour,
    /// A caller's budget, travelling hop by hop.
    Deadline,
}

/// What `--list` and `--help` say about a scene.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SceneInfo {
    /// The scene's name on the command line.
    pub name: &'static str,
    /// One line: what it shows.
    pub summary: &'static str,
    /// The long help: what happens, what is measured, with which settings.
    pub help: &'static str,
    /// The lesson's outcome the run is judged against.
    pub expected: &'static str,
}

impl Scene {
    /// Every scene, in the order the lesson tells them.
    pub const ALL: [Scene; 11] = [
        Scene::SlowNeighbour,
        Scene::Retry,
        Scene::Jitter,
        Scene::Breaker,
        Scene::Bulkhead,
        Scene::Fallback,
        Scene::RetryAfter,
        Scene::Deadline,
        Scene::Budget,
        Scene::Amplification,
        Scene::Idempotency,
    ];

    /// What the scene is, for `--list`, `--help` and the closing line.
    pub fn info(self) -> &'static SceneInfo {
        match self {
            Scene::Breaker => &breaker::INFO,
            Scene::Retry => &retry::INFO,
            Scene::Budget => &budget::INFO,
            Scene::Jitter => &jitter::INFO,
            Scene::Fallback => &fallback::INFO,
            Scene::Idempotency => &idempotency::INFO,
            Scene::RetryAfter => &retry_after::INFO,
            Scene::Bulkhead => &bulkhead::INFO,
            Scene::Amplification => &amplification::INFO,
            Scene::SlowNeighbour => &slow_neighbour::INFO,
            Scene::Deadline => &deadline::INFO,
        }
    }

    /// The scene called `name` on the command line.
    pub fn from_name(name: &str) -> Option<Scene> {
        Self::ALL.into_iter().find(|s| s.info().name == name)
    }
}

impl fmt::Display for Scene {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.info().name)
    }
}

/// Where a scene runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The embedded system, started by the scene with its own settings on
    /// a temporary data folder, and stopped after.
    Embedded,
    /// A running ShopEasy. Its settings are its own: a scene prints the
    /// ones its expectation assumes, and skips a "without" half that would
    /// need a second system.
    Running(Endpoints),
}

/// How a scene is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Where.
    pub target: Target,
    /// The seed of every random choice (jitter, fault proxies).
    pub seed: u64,
}

impl Default for Run {
    fn default() -> Self {
        Self {
            target: Target::Embedded,
            seed: 7,
        }
    }
}

/// One measured number of a run, by name (what tests assert on).
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Its name (`calls_to_inventory`).
    pub name: &'static str,
    /// Its value.
    pub value: f64,
}

/// What a run of a scene came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The scene.
    pub scene: Scene,
    /// Its tables, in the order they are printed.
    pub timelines: Vec<Timeline>,
    /// The measured figures.
    pub figures: Vec<Figure>,
    /// The closing line: the measured figure in words.
    pub measured: String,
    /// Remarks printed before the verdict (settings assumed, halves
    /// skipped, how something was measured).
    pub notes: Vec<String>,
    /// Whether the measured outcome is the lesson's.
    pub passed: bool,
}

impl Outcome {
    /// An outcome of `scene` with nothing measured yet.
    pub fn new(scene: Scene) -> Self {
        Self {
            scene,
            timelines: Vec::new(),
            figures: Vec::new(),
            measured: String::new(),
            notes: Vec::new(),
            passed: false,
        }
    }

    /// Records figure `name`.
    pub fn figure(&mut self, name: &'static str, value: f64) {
        self.figures.push(Figure { name, value });
    }

    /// The figure `name`, if measured.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.figures
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.value)
    }

    /// The table titled `title`.
    pub fn timeline(&self, title: &str) -> Option<&Timeline> {
        self.timelines.iter().find(|t| t.title == title)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = self.scene.info();
        writeln!(f, "scene {}: {}", info.name, info.summary)?;
        writeln!(f, "expected: {}", info.expected)?;
        for timeline in &self.timelines {
            writeln!(f)?;
            write!(f, "{}", timeline.render())?;
        }
        writeln!(f)?;
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        let verdict = if self.passed {
            "PASS (the lesson's outcome)"
        } else {
            "FAIL (not the lesson's outcome)"
        };
        writeln!(f, "{}", self.measured)?;
        writeln!(f, "{verdict}")
    }
}

/// Runs `scene` as `run` says.
///
/// # Errors
/// The system does not start, or does not answer as a scene needs (not a
/// failed expectation: that is [`Outcome::passed`]).
pub async fn run(scene: Scene, run: &Run) -> anyhow::Result<Outcome> {
    match scene {
        Scene::Breaker => breaker::run(run).await,
        Scene::Retry => retry::run(run).await,
        Scene::Budget => budget::run(run).await,
        Scene::Jitter => jitter::run(run).await,
        Scene::Fallback => fallback::run(run).await,
        Scene::Idempotency => idempotency::run(run).await,
        Scene::RetryAfter => retry_after::run(run).await,
        Scene::Bulkhead => bulkhead::run(run).await,
        Scene::Amplification => amplification::run(run).await,
        Scene::SlowNeighbour => slow_neighbour::run(run).await,
        Scene::Deadline => deadline::run(run).await,
    }
}

/// The system of a live scene: the embedded one with `env`, or the running
/// one of `run` (with a note of the settings the expectation assumes).
///
/// # Errors
/// The embedded system does not start.
pub(crate) async fn system(
    run: &Run,
    env: &[(&str, &str)],
    outcome: &mut Outcome,
) -> anyhow::Result<live::Live> {
    match &run.target {
        Target::Embedded => live::Live::start(env, run.seed).await,
        Target::Running(endpoints) => {
            let settings: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            outcome.notes.push(format!(
                "a running system: the expectation assumes it was started with {}",
                settings.join(" ")
            ));
            live::Live::running(endpoints.clone())
        }
    }
}

/// The second half of a scene that compares a mechanism on and off: `half`
/// run on a system of its own with the mechanism off. Only the embedded
/// target can start one; on a running system (its settings are its own)
/// the half is skipped with a note saying what it would have shown.
///
/// # Errors
/// The half's own.
pub(crate) async fn without<T>(
    run: &Run,
    mechanism: &str,
    outcome: &mut Outcome,
    half: impl AsyncFnOnce(&mut Outcome) -> anyhow::Result<T>,
) -> anyhow::Result<Option<T>> {
    if run.target != Target::Embedded {
        outcome.notes.push(format!(
            "the half without {mechanism} needs a second system: skipped"
        ));
        return Ok(None);
    }
    half(outcome).await.map(Some)
}

/// The settings every live scene shares: no per-customer limit in the way
/// of a scene's burst of orders, and an outbox worker that leaves the
/// scene's pending orders alone until it is over (its reservations would
/// be calls to Inventory the scene did not make).
pub(crate) const QUIET: [(&str, &str); 5] = [
    ("LIMITS__CUSTOMER_ORDER_BURST", "10000"),
    ("LIMITS__CUSTOMER_ORDERS_PER_MINUTE", "100000"),
    ("ORDERS__MAX_OPEN_PER_CUSTOMER", "10000"),
    ("OUTBOX__INITIAL_BACKOFF_SECONDS", "60"),
    ("OUTBOX__MAX_BACKOFF_SECONDS", "60"),
];

/// `QUIET` followed by `own` (a later key wins).
pub(crate) fn settings<'a>(own: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    QUIET.iter().chain(own).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_half_without_runs_only_where_a_second_system_can_start() {
        let mut outcome = Outcome::new(Scene::Bulkhead);
        let ran = without(&Run::default(), "the bulkhead", &mut outcome, async |o| {
            o.figure("ran", 1.0);
            Ok(7)
        })
        .await
        .unwrap();
        assert_eq!(ran, Some(7));
        assert_eq!(outcome.get("ran"), Some(1.0));
        assert!(outcome.notes.is_empty(), "{:?}", outcome.notes);

        let running = Run {
            target: Target::Running(Endpoints::on_host("127.0.0.1")),
            seed: 7,
        };
        let mut outcome = Outcome::new(Scene::Bulkhead);
        let skipped = without(&running, "the bulkhead", &mut outcome, async |o| {
            o.figure("ran", 1.0);
            Ok(7)
        })
        .await
        .unwrap();
        assert_eq!(skipped, None);
        assert_eq!(outcome.get("ran"), None);
        assert_eq!(
            outcome.notes,
            ["the half without the bulkhead needs a second system: skipped"]
        );
    }
}
