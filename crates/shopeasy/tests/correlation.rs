//! Fault windows beside retry spans (issue 17, "Correlation"): under a
//! toggled fault schedule on `order-inventory`, every retry attempt of the
//! order → inventory edge lies inside a toxic window of that edge, and none
//! outside one, across at least [`MIN_RETRIES`] retries.
//!
//! The run: the embedded system with an in-memory OpenTelemetry exporter as
//! the global subscriber; a control phase with the same traffic and no
//! fault (which must show no retry at all); then a schedule that, every
//! cycle, adds a `reset_peer` toxic to `order-inventory` through the fault
//! API, holds it [`HOLD`], removes it and leaves the edge healthy for
//! [`GAP`], while customers place orders (each reads stock and reserves it
//! over that edge, and the outbox reserves what was left pending, each
//! task in a trace of its own, `outbox.task`). The
//! windows come from the fault API (`GET /proxies/order-inventory/windows`),
//! the attempts from the exporter (`attempt` spans, `peer.service =
//! inventory`, numbered from 1 by the retry layer), and [`check`] lays one
//! beside the other.
//!
//! # The invariant, precisely
//!
//! Write a window `W = [s, e]` (the API's Unix ms: the start rounded down,
//! the end rounded up, so it contains the real one), `B(n)` for the longest
//! backoff before attempt `n` (the edge's own `Backoff`, read from order's
//! settings), and `ε` = [`EPSILON`]. For every retry attempt span `R`
//! (attempt `n ≥ 2`) there is a window `W` of `order-inventory` such that
//!
//! 1. the attempt `R` repeats — `P`, the span of the same trace with the
//!    same parent and attempt `n − 1` — ended `retryable` while `W` was
//!    open: `s ≤ P.end ≤ e + ε`; and
//! 2. `R` started no later than the backoff allows after `W` closed:
//!    `s ≤ R.start ≤ e + B(n) + ε`.
//!
//! Why not simply "`R` starts inside `W`": the retry layer sleeps its
//! backoff *after* the failure it saw, so a failure observed just before
//! the toxic is removed legitimately produces a retry that starts just
//! after (and succeeds). (1) says the retry was caused by a failure seen
//! during a fault; (2) bounds how long after the fault that cause can
//! echo. `ε` covers the two things the code does not bound: the moment a
//! reset surfaces as an error (`P.end`) and scheduling on a loaded
//! two-core machine. Every gap between windows is [`GAP`], far longer than
//! `B(n) + ε`, so a retry made while the edge was healthy — one that
//! retried with no fault, or after a failure with no fault — lands in a
//! gap and breaks (1) or (2). [`the_check_rejects_retries_outside_the_windows`]
//! shows the check failing on such spans; the control phase shows the
//! system making none.
//!
//! The run also checks that the proxy exported one `toxic_window` span per
//! window, named with the edge, and matching the API's windows (id, toxic,
//! type, start and end).
//!
//! The edge is set up so that retrying is the only mechanism at work: the
//! breaker never opens (only if every one of at least 10 000 calls failed)
//! and the retry budget never runs dry, otherwise both would, rightly, stop the
//! retries the test counts. The stock cache's TTL is short so that orders
//! keep reading stock from Inventory.
//!
//! The same correlation is meant for a trace viewer: the launcher exports
//! its traces over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, fault
//! windows and attempts alike ([`the_launcher_exports_fault_windows_and_attempts`],
//! the binary against a stand-in collector).
//!
//! One test here installs the process's global tracing subscriber; the
//! others run the binary in a process of its own, or check the checker.
//! The two system tests take [`SYSTEMS`] in turn, so neither measures its
//! timings on a machine the other loads.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod support;

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use opentelemetry::{
    KeyValue, global,
    trace::{SpanId, TraceId, TracerProvider as _},
};
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{InMemorySpanExporter, SdkTracerProvider, SpanData},
};
use serde_json::{Value, json};
use shopeasy_faults::ToxicWindow;
use shopeasy_resilience::backoff::Backoff;
use tracing_subscriber::{Layer as _, filter::LevelFilter, layer::SubscriberExt};

/// The edge under test: its proxy's name, and the retry layer's target.
const EDGE: &str = "order-inventory";
const TARGET: &str = "inventory";

/// Retries the schedule must produce before the check means anything.
const MIN_RETRIES: usize = 50;
/// How long each toxic stays on.
const HOLD: Duration = Duration::from_millis(300);
/// How long the edge stays healthy between two toxics: four times the
/// slack `B(n) + ε` (at most 200 ms), so a retry made while healthy has
/// nowhere to hide.
const GAP: Duration = Duration::from_millis(800);
/// The schedule gives up after this many cycles.
const MAX_CYCLES: usize = 20;
/// The allowance `ε` of the invariant (see the module docs), in ms. The
/// latest retry measured after a window's end came 84 ms after it (backoff
/// included), on two cores at a load average of 10.
const EPSILON: f64 = 150.0;
/// Customers placing orders concurrently.
const CUSTOMERS: usize = 4;
/// The pause between two orders of one customer: the traffic's shape
/// (about 4 × 40 orders a second), not a synchronisation.
const PACE: Duration = Duration::from_millis(25);

/// Held by each system test while it runs (see the module docs).
static SYSTEMS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---- spans --------------------------------------------------------------

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a opentelemetry::Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| &kv.value)
}

fn attr_str(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

/// A number attribute (exported as a number or as its text).
fn attr_i64(span: &SpanData, key: &str) -> Option<i64> {
    match attr(span, key)? {
        opentelemetry::Value::I64(n) => Some(*n),
        other => other.as_str().parse().ok(),
    }
}

/// Unix milliseconds, with the fraction.
fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0
}

fn now_unix_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(u64::MAX)
}

/// One `attempt` span of the edge, as the check needs it.
#[derive(Debug, Clone, PartialEq)]
struct Attempt {
    trace: TraceId,
    parent: SpanId,
    /// 1-based, as the retry layer numbers it.
    number: i64,
    /// `ok`, `retryable` or `failed`.
    outcome: String,
    start_ms: f64,
    end_ms: f64,
}

/// The edge's attempt spans among `spans`.
fn attempts(spans: &[SpanData]) -> Vec<Attempt> {
    spans
        .iter()
        .filter(|s| s.name == "attempt" && attr_str(s, "peer.service").as_deref() == Some(TARGET))
        .filter_map(|s| {
            Some(Attempt {
                trace: s.span_context.trace_id(),
                parent: s.parent_span_id,
                number: attr_i64(s, "attempt")?,
                outcome: attr_str(s, "outcome").unwrap_or_default(),
                start_ms: unix_ms(s.start_time),
                end_ms: unix_ms(s.end_time),
            })
        })
        .collect()
}

// ---- the check ----------------------------------------------------------

/// A closed fault window, Unix ms.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Window {
    start_ms: f64,
    end_ms: f64,
}

/// What [`check`] found.
#[derive(Debug, Default)]
struct Verdict {
    /// Retry attempts (attempt ≥ 2) checked.
    retries: usize,
    /// Of those, how many started inside a window itself…
    inside: usize,
    /// …and how many in its backoff tail `(e, e + B(n) + ε]`.
    in_tail: usize,
    /// The latest start after a window's end, ms (0 when none was late).
    max_lateness_ms: f64,
    /// Every retry that breaks the invariant, and why.
    violations: Vec<String>,
}

/// Checks the invariant of the module docs for every retry among
/// `attempts` against `windows`, with `backoff` the edge's backoff (its
/// `max_delay(n − 2)` is `B(n)`) and `epsilon_ms` the allowance `ε`.
fn check(attempts: &[Attempt], windows: &[Window], backoff: &Backoff, epsilon_ms: f64) -> Verdict {
    let mut verdict = Verdict::default();
    for retry in attempts.iter().filter(|a| a.number >= 2) {
        verdict.retries += 1;
        let Some(repeated) = attempts.iter().find(|p| {
            p.trace == retry.trace && p.parent == retry.parent && p.number == retry.number - 1
        }) else {
            verdict.violations.push(format!(
                "{retry:?}: no attempt {} before it",
                retry.number - 1
            ));
            continue;
        };
        if repeated.outcome != "retryable" {
            verdict.violations.push(format!(
                "{retry:?}: the attempt it repeats ended {:?}, not retryable",
                repeated.outcome
            ));
            continue;
        }
        let retry_index = u32::try_from(retry.number - 2).unwrap_or(u32::MAX);
        let bound_ms = backoff.max_delay(retry_index).as_secs_f64() * 1000.0;
        let cause = windows.iter().find(|w| {
            let failed_inside =
                w.start_ms <= repeated.end_ms && repeated.end_ms <= w.end_ms + epsilon_ms;
            let started_in_time =
                w.start_ms <= retry.start_ms && retry.start_ms <= w.end_ms + bound_ms + epsilon_ms;
            failed_inside && started_in_time
        });
        match cause {
            None => verdict.violations.push(format!(
                "{retry:?} (repeating an attempt that failed at {:.1}) lies outside every \
                 fault window (+ B = {bound_ms} ms + ε = {epsilon_ms} ms)",
                repeated.end_ms
            )),
            Some(w) if retry.start_ms <= w.end_ms => verdict.inside += 1,
            Some(w) => {
                verdict.in_tail += 1;
                verdict.max_lateness_ms = verdict.max_lateness_ms.max(retry.start_ms - w.end_ms);
            }
        }
    }
    verdict
}

/// The closed windows among the API's `windows`.
fn closed(windows: &[ToxicWindow]) -> Vec<Window> {
    windows
        .iter()
        .map(|w| Window {
            start_ms: w.started_unix_ms as f64,
            end_ms: w.ended_unix_ms.expect("every window of the run closed") as f64,
        })
        .collect()
}

// ---- the fault API and the traffic --------------------------------------

/// The fault API's base URL and a client for it.
struct Faults {
    http: reqwest::Client,
    base: String,
}

impl Faults {
    async fn add_reset_peer(&self, name: &str) {
        let res = self
            .http
            .post(format!("{}/proxies/{EDGE}/toxics", self.base))
            .json(&json!({
                "name": name,
                "type": "reset_peer",
                "stream": "upstream",
                "attributes": {"timeout": 0},
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.status(),
            200,
            "adding {name}: {}",
            res.text().await.unwrap()
        );
    }

    async fn remove(&self, name: &str) {
        let res = self
            .http
            .delete(format!("{}/proxies/{EDGE}/toxics/{name}", self.base))
            .send()
            .await
            .unwrap();
        assert!(
            res.status().is_success(),
            "removing {name}: {}",
            res.status()
        );
    }

    async fn windows_since(&self, since_unix_ms: u64) -> Vec<ToxicWindow> {
        let res = self
            .http
            .get(format!(
                "{}/proxies/{EDGE}/windows?since={since_unix_ms}",
                self.base
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    }
}

/// How many answers had each status.
type Statuses = BTreeMap<u16, usize>;
/// Orders answered `pending`: (their customer's token, their id).
type Pending = Vec<(String, String)>;

/// Customers placing orders until told to stop; each answer's status is
/// counted, and the ids of orders answered `pending` kept (the outbox must
/// settle them before the spans are read).
struct Traffic {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<(Statuses, Pending)>>,
}

impl Traffic {
    fn start(http: &reqwest::Client, gw: &str, tokens: &[String], products: &[String]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = tokens
            .iter()
            .enumerate()
            .map(|(i, token)| {
                let (http, gw, token) = (http.clone(), gw.to_owned(), token.clone());
                let products = products.to_vec();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut statuses = BTreeMap::new();
                    let mut pending = Vec::new();
                    let mut pace = tokio::time::interval(PACE);
                    let mut n = i;
                    while !stop.load(Ordering::Relaxed) {
                        pace.tick().await;
                        let product = &products[n % products.len()];
                        n += 1;
                        let res = support::place_as(&http, &gw, &token, product).await;
                        let status = res.status().as_u16();
                        *statuses.entry(status).or_default() += 1;
                        if status == 202 {
                            let body: Value = res.json().await.unwrap();
                            let id = body["id"].as_str().unwrap().to_owned();
                            pending.push((token.clone(), id));
                        }
                    }
                    (statuses, pending)
                })
            })
            .collect();
        Self { stop, tasks }
    }

    /// Stops the customers; every status counted, and the pending orders.
    async fn stop(self) -> (Statuses, Pending) {
        self.stop.store(true, Ordering::Relaxed);
        let mut statuses = BTreeMap::new();
        let mut pending = Vec::new();
        for task in self.tasks {
            let (s, p) = task.await.unwrap();
            for (status, n) in s {
                *statuses.entry(status).or_default() += n;
            }
            pending.extend(p);
        }
        (statuses, pending)
    }
}

/// Waits until the outbox has settled every order in `pending`.
async fn settle(http: &reqwest::Client, gw: &str, mut pending: Pending) {
    shopeasy_testkit::wait::assert_eventually(
        Duration::from_secs(20),
        "the outbox settles the orders left pending by the faults",
        async || {
            let mut still = Vec::new();
            for (token, id) in pending.drain(..) {
                let order =
                    support::get_json_as(http, &format!("{gw}/api/orders/{id}"), &token).await;
                if order["status"] == "pending" {
                    still.push((token, id));
                }
            }
            pending = still;
            pending.is_empty()
        },
    )
    .await;
}

/// Runs `traffic` for `during`, then stops it: the statuses and pending
/// orders.
async fn traffic_for(
    http: &reqwest::Client,
    gw: &str,
    tokens: &[String],
    products: &[String],
    during: Duration,
) -> (Statuses, Pending) {
    let traffic = Traffic::start(http, gw, tokens, products);
    tokio::time::sleep(during).await;
    traffic.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_retry_lies_inside_a_fault_window_of_its_edge() {
    let _alone = SYSTEMS.lock().await;
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    global::set_text_map_propagator(TraceContextPropagator::new());
    let subscriber = tracing_subscriber::registry().with(
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("test"))
            .with_filter(LevelFilter::INFO),
    );
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let system = support::start_system(
        dir.path(),
        &[
            ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.3"),
            // Only the retry layer at work: the breaker never opens…
            ("RESILIENCE__INVENTORY__FAILURE_RATIO", "1"),
            ("RESILIENCE__INVENTORY__MINIMUM_CALLS", "10000"),
            // …and the budget never refuses.
            ("RESILIENCE__RETRY_BUDGET__RATIO", "1"),
            ("RESILIENCE__RETRY_BUDGET__MIN_RETRIES_PER_WINDOW", "100000"),
            // Orders keep reading stock from Inventory.
            ("RESILIENCE__STOCK_CACHE__TTL_SECONDS", "0.1"),
            // Pending orders are settled soon after a window.
            ("OUTBOX__POLL_INTERVAL_SECONDS", "0.1"),
            ("OUTBOX__INITIAL_BACKOFF_SECONDS", "0.1"),
            ("OUTBOX__MAX_BACKOFF_SECONDS", "0.5"),
            // Nothing but faults refuses an order.
            ("ORDERS__MAX_OPEN_PER_CUSTOMER", "10000"),
            ("LIMITS__CUSTOMER_ORDERS_PER_MINUTE", "100000"),
            ("LIMITS__CUSTOMER_ORDER_BURST", "10000"),
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let gw = format!("http://{}", system.addresses.gateway);
    let faults = Faults {
        http: http.clone(),
        base: format!("http://{}", system.faults_api),
    };
    let products: Vec<String> = support::catalogue(&http, &gw).await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect();
    let mut tokens = Vec::new();
    for i in 0..CUSTOMERS {
        tokens.push(support::sign_in(&http, &gw, &format!("correlation-{i}")).await);
    }
    // The edge's backoff, as order builds it from its settings.
    let backoff = shopeasy_order::settings::EdgeSettings::default()
        .config(TARGET)
        .backoff;

    // Control: the same traffic with no fault makes no retry at all.
    let control_from = now_unix_ms();
    let (statuses, pending) =
        traffic_for(&http, &gw, &tokens, &products, Duration::from_secs(1)).await;
    provider.force_flush().unwrap();
    let control = attempts(&exporter.get_finished_spans().unwrap());
    let first_attempts = control.iter().filter(|a| a.number == 1).count();
    let control_retries: Vec<&Attempt> = control.iter().filter(|a| a.number >= 2).collect();
    assert!(
        first_attempts >= 20,
        "the control traffic reached Inventory: {first_attempts} attempts, statuses {statuses:?}"
    );
    assert!(
        control_retries.is_empty(),
        "no fault, no retry: {control_retries:?}"
    );
    assert!(pending.is_empty(), "no fault, nothing pending: {pending:?}");
    assert!(
        faults.windows_since(control_from).await.is_empty(),
        "no window during the control"
    );
    eprintln!("control: {first_attempts} attempts, 0 retries, statuses {statuses:?}");

    // The schedule: reset_peer on, HOLD, off, GAP; until enough retries.
    // The sleeps are the fault schedule's shape (what is measured against
    // it is read afterwards), not a wait for something to happen.
    exporter.reset();
    let run_from = now_unix_ms();
    let traffic = Traffic::start(&http, &gw, &tokens, &products);
    let mut cycles = 0;
    let mut seen = 0;
    while cycles < MAX_CYCLES && (cycles < 3 || seen < MIN_RETRIES + 10) {
        let name = format!("reset-{cycles}");
        faults.add_reset_peer(&name).await;
        tokio::time::sleep(HOLD).await;
        faults.remove(&name).await;
        tokio::time::sleep(GAP).await;
        cycles += 1;
        provider.force_flush().unwrap();
        seen = attempts(&exporter.get_finished_spans().unwrap())
            .iter()
            .filter(|a| a.number >= 2)
            .count();
    }
    let (statuses, pending) = traffic.stop().await;
    let pending_count = pending.len();
    // The outbox settles what the faults left pending; its calls are part
    // of the run (none of them may retry: the edge is healthy now).
    settle(&http, &gw, pending).await;

    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let windows = faults.windows_since(run_from).await;
    assert_eq!(windows.len(), cycles, "one window per cycle: {windows:?}");
    assert!(windows.iter().all(|w| w.kind == "reset_peer"));
    let run = attempts(&spans);
    let verdict = check(&run, &closed(&windows), &backoff, EPSILON);
    eprintln!(
        "schedule: {cycles} cycles of {HOLD:?} on / {GAP:?} off; {} attempts, {} retries \
         ({} inside a window, {} in its backoff tail, latest {:.1} ms after a window's end), \
         {} violations; statuses {statuses:?}; {pending_count} orders pending, all settled",
        run.len(),
        verdict.retries,
        verdict.inside,
        verdict.in_tail,
        verdict.max_lateness_ms,
        verdict.violations.len(),
    );
    assert!(
        verdict.retries >= MIN_RETRIES,
        "at least {MIN_RETRIES} retries: {verdict:?}"
    );
    assert!(
        verdict.violations.is_empty(),
        "every retry lies inside a fault window of {EDGE}: {:#?}",
        verdict.violations
    );
    // The check has teeth on these very spans: each window moved to the
    // middle of the healthy gap after it (its tail still inside the gap)
    // explains none of the retries.
    let into_gaps: Vec<Window> = closed(&windows)
        .iter()
        .map(|w| {
            let shift = (HOLD + (GAP - HOLD) / 2).as_secs_f64() * 1000.0;
            Window {
                start_ms: w.start_ms + shift,
                end_ms: w.end_ms + shift,
            }
        })
        .collect();
    let shifted = check(&run, &into_gaps, &backoff, EPSILON);
    assert_eq!(
        shifted.violations.len(),
        verdict.retries,
        "every retry breaks the invariant against windows in the gaps"
    );
    // The faults were absorbed: confirmed, pending (the stock cache said
    // yes), or out of stock (two demo products have none); never an error.
    assert!(
        statuses.keys().all(|s| [201, 202, 409].contains(s)),
        "{statuses:?}"
    );

    // The proxy exported each window as a `toxic_window` span, named with
    // the edge, matching the API's window.
    let exported: HashMap<i64, &SpanData> = spans
        .iter()
        .filter(|s| s.name == "toxic_window" && attr_str(s, "edge").as_deref() == Some(EDGE))
        .filter_map(|s| Some((attr_i64(s, "window.id")?, s)))
        .collect();
    assert_eq!(
        exported.len(),
        windows.len(),
        "one toxic_window span per window"
    );
    for w in &windows {
        let span = exported
            .get(&i64::try_from(w.id).unwrap())
            .unwrap_or_else(|| panic!("no toxic_window span for window {}", w.id));
        assert_eq!(attr_str(span, "toxic").as_deref(), Some(w.toxic.as_str()));
        assert_eq!(attr_str(span, "toxic.type").as_deref(), Some("reset_peer"));
        assert_eq!(
            attr_str(span, "window.ended_by").as_deref(),
            Some("removed")
        );
        let (start, end) = (unix_ms(span.start_time), unix_ms(span.end_time));
        let (api_start, api_end) = (w.started_unix_ms as f64, w.ended_unix_ms.unwrap() as f64);
        // The API stamps the moment first (start rounded down, end up);
        // the span opens and closes just after.
        assert!(
            (api_start..=api_start + 50.0).contains(&start),
            "window {}: span starts at {start}, the API says {api_start}",
            w.id
        );
        assert!(
            (api_end - 1.0..=api_end + 50.0).contains(&end),
            "window {}: span ends at {end}, the API says {api_end}",
            w.id
        );
    }

    system.stop().await.unwrap();
}

/// The check itself: it accepts a retry caused by a failure inside a
/// window (also one starting in the backoff tail), and rejects a retry in
/// a healthy gap, a retry after a failure seen in a gap, and a retry whose
/// first attempt is missing.
#[test]
fn the_check_rejects_retries_outside_the_windows() {
    let backoff = shopeasy_order::settings::EdgeSettings::default()
        .config(TARGET)
        .backoff;
    let windows = [Window {
        start_ms: 1_000.0,
        end_ms: 1_300.0,
    }];
    let trace = TraceId::from_bytes([1; 16]);
    let parent = SpanId::from_bytes([2; 8]);
    let attempt = |number, outcome: &str, start_ms, end_ms| Attempt {
        trace,
        parent,
        number,
        outcome: outcome.to_owned(),
        start_ms,
        end_ms,
    };
    let verdict_of = |pair: &[Attempt]| check(pair, &windows, &backoff, EPSILON);

    let inside = verdict_of(&[
        attempt(1, "retryable", 1_100.0, 1_101.0),
        attempt(2, "ok", 1_120.0, 1_125.0),
    ]);
    assert_eq!((inside.retries, inside.inside), (1, 1));
    assert!(inside.violations.is_empty(), "{inside:?}");

    let tail = verdict_of(&[
        attempt(1, "retryable", 1_295.0, 1_299.0),
        attempt(2, "ok", 1_320.0, 1_322.0),
    ]);
    assert_eq!(tail.in_tail, 1);
    assert!(tail.violations.is_empty(), "{tail:?}");

    // A failure in the healthy gap, retried: no window caused it.
    let in_gap = verdict_of(&[
        attempt(1, "retryable", 1_700.0, 1_701.0),
        attempt(2, "ok", 1_710.0, 1_712.0),
    ]);
    assert_eq!(in_gap.violations.len(), 1, "{in_gap:?}");

    // A failure inside, but the retry came after the bound e + B(2) + ε:
    // accepted up to it, rejected a millisecond past it.
    let bound = 1_300.0 + backoff.max_delay(0).as_secs_f64() * 1000.0 + EPSILON;
    let at_bound = verdict_of(&[
        attempt(1, "retryable", 1_290.0, 1_295.0),
        attempt(2, "ok", bound, bound + 1.0),
    ]);
    assert!(at_bound.violations.is_empty(), "{at_bound:?}");
    let late = verdict_of(&[
        attempt(1, "retryable", 1_290.0, 1_295.0),
        attempt(2, "ok", bound + 1.0, bound + 2.0),
    ]);
    assert_eq!(late.violations.len(), 1, "{late:?}");

    // A retry of an attempt that did not fail retryably, or of none.
    let not_retryable = verdict_of(&[
        attempt(1, "ok", 1_100.0, 1_101.0),
        attempt(2, "ok", 1_110.0, 1_111.0),
    ]);
    assert_eq!(not_retryable.violations.len(), 1, "{not_retryable:?}");
    let orphan = verdict_of(&[attempt(3, "ok", 1_110.0, 1_111.0)]);
    assert_eq!(orphan.violations.len(), 1, "{orphan:?}");
}

/// A stand-in OTLP/gRPC collector on an ephemeral port: keeps the bytes of
/// every request it is sent and answers each with gRPC status 0.
async fn collector() -> (SocketAddr, Arc<std::sync::Mutex<Vec<u8>>>) {
    let received = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = received.clone();
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        keep.lock().unwrap().extend_from_slice(&body);
        async {
            (
                [("content-type", "application/grpc"), ("grpc-status", "0")],
                "",
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// `shopeasy` with `OTEL_EXPORTER_OTLP_ENDPOINT` set exports its traces
/// (flushed at SIGTERM): the proxy's `toxic_window` span with the edge's
/// name, and the retry layer's `attempt` spans, under the service name
/// `shopeasy`. The binary listens on SPEC's ports, so the test is skipped
/// when they are taken.
#[tokio::test(flavor = "multi_thread")]
async fn the_launcher_exports_fault_windows_and_attempts() {
    let _alone = SYSTEMS.lock().await;
    for port in [8080, 8474] {
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            shopeasy_testkit::skip(
                "the launcher's trace export",
                &format!("something else listens on {port}"),
            );
            return;
        }
    }
    let (otlp, received) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_shopeasy"))
        .arg("--data-dir")
        .arg(dir.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp}"))
        .env_remove("ADMIN_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    // The banner's last line: everything listens.
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the banner within 60 s");
        if line.starts_with("admin token") {
            break;
        }
    }

    let http = reqwest::Client::new();
    let gw = "http://127.0.0.1:8080";
    let faults = Faults {
        http: http.clone(),
        base: "http://127.0.0.1:8474".into(),
    };
    let product = support::first_product(&http, gw).await;
    let token = support::sign_in(&http, gw, "otlp").await;
    // Healthy first (the stock is cached), then one order under a fault:
    // pending, after attempts that were retried.
    let healthy = support::place_as(&http, gw, &token, &product).await;
    assert_eq!(healthy.status(), 201);
    faults.add_reset_peer("otlp-reset").await;
    let faulty = support::place_as(&http, gw, &token, &product).await;
    faults.remove("otlp-reset").await;
    assert_eq!(faulty.status(), 202, "pending while Inventory resets");

    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    shopeasy_testkit::wait::assert_eventually(
        Duration::from_secs(20),
        "the launcher exits after SIGTERM",
        async || child.try_wait().unwrap().is_some(),
    )
    .await;
    assert!(child.wait().unwrap().success());

    let received = received.lock().unwrap().clone();
    for expected in ["shopeasy", "toxic_window", EDGE, "otlp-reset", "attempt"] {
        assert!(
            contains(&received, expected),
            "the exported traces name {expected:?} ({} bytes received)",
            received.len()
        );
    }
}
