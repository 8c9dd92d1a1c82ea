//! `deadline`: a caller's 2 s budget, travelling gateway → order →
//! inventory, read from the spans of the order it pays for.
//!
//! The scene's client sends one order with `shopeasy-deadline-ms: 2000`
//! and its own `traceparent`, so it can find that order's trace among the
//! spans this process keeps ([`crate::console_traces`]). Every server span
//! records `deadline_left_ms`, the time its request had left when the hop
//! started, as the caller's header said (`shopeasy-deadline-ms` over HTTP,
//! `grpc-timeout` into Inventory). The table has one row per hop, in the
//! order they started, and one per attempt of a caller; an attempt's time
//! left is its caller's deadline at the attempt's start (the deadline is an
//! absolute instant, so that is the caller's time left minus the time
//! since). The lesson's outcome: the time left only shrinks along the path
//! and no hop ever has more than the caller's 2 s.
//!
//! A callee may see a millisecond or a few more than the attempt that
//! called it had at its start: the headers carry the time left, not an
//! instant (hosts' clocks need not agree), so the time a request spends
//! getting there — a connection through the fault proxy — is not counted.
//! The rule is therefore per hop: each hop has less than its caller had
//! when the caller's own hop started.
//!
//! The second half makes Inventory slower than the whole budget (a latency
//! toxic on `order-inventory` of 4 s, when Order's own attempt timeout is
//! 3 s): the order ends at the caller's deadline, 504, not at Order's
//! timeouts and retries.
//!
//! The spans are this process's: the scene installs the tracing subscriber
//! that keeps them when none is installed yet (the `shopeasy demo` command
//! has none; the launcher has one that already keeps them). A running
//! system (`--target`) keeps its spans in its own process: only when that
//! process is this one (the console's Scenarios panel) is the first half
//! run; otherwise only the second.

use std::{sync::OnceLock, time::Duration};

use anyhow::Context as _;
use serde_json::json;
use shopeasy_console::{OrderPath, TraceSource as _};
use shopeasy_resilience::deadline::HTTP_HEADER;
use tokio::time::Instant;

use shopeasy_runtime::{
    settings::common::LogSettings,
    telemetry::{self, TelemetryGuard},
};

use super::{Outcome, Run, Scene, SceneInfo, Timeline, live::Live, settings, system};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "deadline",
    summary: "a caller's 2 s budget: the time left at gateway, order and inventory",
    help: "The deadline that travels. One order is sent through the gateway with a 2 s \
budget (shopeasy-deadline-ms: 2000); each hop reads the time left from its caller's \
header (shopeasy-deadline-ms, grpc-timeout into Inventory) and records it on its server \
span as deadline_left_ms. The table, read from that order's spans, has one row per hop \
and per attempt of a caller, in the order they started, with the time left then. Then \
Inventory turns slower than the whole budget (a 4 s latency toxic on order-inventory, \
while Order's own attempt timeout is resilience.inventory.timeout_seconds 3 with 2 \
retries) and a second order with the same 2 s budget is timed from the caller's side.",
    expected: "the time left shrinks at every hop and no hop has more than the caller's \
2 s; with a slow Inventory the call ends at the deadline (504) within 2 s + 0.5 s, not \
after Order's own timeouts",
};

/// The caller's budget.
pub const BUDGET: Duration = Duration::from_secs(2);
/// How late after the deadline the slow call may end (scheduling on a busy
/// machine, the gateway writing its 504).
pub const SLACK: Duration = Duration::from_millis(500);
/// How much before the deadline the slow call may end (the client's clock
/// starts before the gateway's).
pub const EARLY: Duration = Duration::from_millis(100);
/// The edge made slow.
const EDGE: &str = "order-inventory";
/// Inventory's delay in the second half: more than the whole budget.
const LATENCY_MS: u64 = 4_000;
/// Order's own attempt timeout on Inventory (its default), longer than the
/// budget: in this scene the deadline is the limit, not the timeout.
const ATTEMPT_TIMEOUT_S: &str = "3";
/// Order's retries on Inventory (its default).
const MAX_RETRIES: &str = "2";

/// The scene's settings (on top of the shared quiet ones).
pub const ENV: [(&str, &str); 3] = [
    ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", ATTEMPT_TIMEOUT_S),
    ("RESILIENCE__INVENTORY__MAX_RETRIES", MAX_RETRIES),
    ("RESILIENCE__STOCK_CACHE__TTL_SECONDS", "3600"),
];

/// Runs the scene.
///
/// # Errors
/// The system does not start or answer, or the order's spans are not kept
/// by this process.
pub async fn run(run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::Deadline);
    if matches!(run.target, super::Target::Embedded) {
        keep_spans()?;
    }
    let live = system(run, &settings(&ENV), &mut outcome).await?;
    let result = halves(&live, &mut outcome).await;
    // Heal the edge whatever happened (an absent toxic is not an error here).
    let _ = live.remove_toxic(EDGE, "slow").await;
    let stopped = live.stop().await;
    result.and(stopped)?;
    Ok(outcome)
}

async fn halves(live: &Live, outcome: &mut Outcome) -> anyhow::Result<()> {
    let token = live.sign_in("deadline").await?;
    let product = live.product(0).await?;
    // A running system's spans are kept only if it runs in this process
    // (the launcher's console runs scenes against itself, its subscriber
    // set): without any subscriber here, there is nothing to read.
    let path_ok = if live.is_embedded() {
        path(live, &token, &product, outcome).await?
    } else if tracing::dispatcher::has_been_set() {
        // Only the spans' absence skips the half (this process's subscriber
        // is not the console's): any other error is the system's, and a
        // scene that turned it into a note passed on a failure — an order
        // that was not confirmed, say.
        match path(live, &token, &product, outcome).await {
            Err(e) if e.downcast_ref::<SpansNotKept>().is_some() => {
                outcome
                    .notes
                    .push(format!("the per-hop half is skipped: {e:#}"));
                true
            }
            result => result?,
        }
    } else {
        outcome.notes.push(
            "a running system keeps its spans in its own process: the per-hop half is skipped"
                .to_owned(),
        );
        true
    };
    let slow_ok = slow(live, &token, &product, outcome).await?;
    outcome.passed = path_ok && slow_ok;
    Ok(())
}

/// The first half: one order's hops and the time each had left.
async fn path(
    live: &Live,
    token: &str,
    product: &str,
    outcome: &mut Outcome,
) -> anyhow::Result<bool> {
    let trace = random_hex(32);
    let res = order(live, token, product, &trace).await?;
    let status = res.status().as_u16();
    anyhow::ensure!(
        status == 201,
        "the order with a 2 s budget was not confirmed: {status}"
    );
    let path = trace_of(&trace).await?;
    let rows = rows(&path);
    let budget = ms(BUDGET);

    let mut table = Timeline::new(
        "one order with a 2 s budget, hop by hop",
        &["hop", "started at", "time left", "caller had", "answer"],
    );
    for row in &rows {
        table.push([
            row.label.clone(),
            format!("{:.1} ms", row.start_ms),
            format!("{} ms", row.left_ms),
            row.caller_left_ms
                .map_or_else(|| format!("{budget} ms (budget)"), |l| format!("{l} ms")),
            row.answer.clone(),
        ]);
    }
    outcome.timelines.push(table);

    let shrinks = rows.iter().all(|r| r.shrinks(budget));
    let within = rows.iter().all(|r| r.left_ms <= budget);
    let first = |service: &str| {
        rows.iter()
            .find(|r| r.service == service && !r.attempt)
            .map(|r| r.left_ms)
    };
    let reached = ["gateway", "order", "inventory"].map(first);
    for (name, left) in ["gateway_left_ms", "order_left_ms", "inventory_left_ms"]
        .into_iter()
        .zip(reached)
    {
        outcome.figure(name, left.map_or(-1.0, |l| l as f64));
    }
    outcome.figure("hops", rows.iter().filter(|r| !r.attempt).count() as f64);
    outcome.figure("budget_ms", budget as f64);
    outcome.notes.push(
        "an attempt's time left is its caller's deadline at the attempt's start: the caller's \
         time left minus the time since. A callee may see a little more than that: the \
         headers carry time left, not an instant, so the time on the way is not counted"
            .to_owned(),
    );
    let [gateway, order, inventory] =
        reached.map(|l| l.map_or("?".to_owned(), |l| format!("{l} ms")));
    outcome.measured = format!(
        "2 s budget: gateway {gateway} left, order {order}, inventory {inventory}; {}",
        if shrinks && within {
            "every hop saw less than the one before"
        } else {
            "a hop saw as much as or more than its caller"
        }
    );
    Ok(shrinks && within && reached.iter().all(Option::is_some))
}

/// The second half: a slow Inventory, the same budget, timed by the caller.
async fn slow(
    live: &Live,
    token: &str,
    product: &str,
    outcome: &mut Outcome,
) -> anyhow::Result<bool> {
    live.add_toxic(
        EDGE,
        &json!({"name": "slow", "type": "latency", "stream": "downstream",
                "attributes": {"latency": LATENCY_MS, "jitter": 0}}),
    )
    .await?;
    let started = Instant::now();
    let res = order(live, token, product, &random_hex(32)).await?;
    let elapsed = started.elapsed();
    let status = res.status().as_u16();
    let problem: serde_json::Value = res.json().await.unwrap_or_default();
    live.remove_toxic(EDGE, "slow").await?;
    let kind = problem["type"]
        .as_str()
        .and_then(|t| t.rsplit([':', '/']).next())
        .unwrap_or("-")
        .to_owned();
    let own = format!(
        "{ATTEMPT_TIMEOUT_S} s × {} attempts",
        1 + MAX_RETRIES.parse::<u32>().unwrap_or(0)
    );
    let mut table = Timeline::new(
        "Inventory slower than the budget",
        &[
            "inventory",
            "budget",
            "Order's own limit",
            "answer",
            "after",
        ],
    );
    table.push([
        format!("+{LATENCY_MS} ms"),
        format!("{} ms", ms(BUDGET)),
        own.clone(),
        format!("{status} {kind}"),
        format!("{} ms", ms(elapsed)),
    ]);
    outcome.timelines.push(table);
    outcome.figure("slow_status", f64::from(status));
    outcome.figure("slow_elapsed_ms", ms(elapsed) as f64);
    // At the deadline: not before it (the call waited for its budget), not
    // much after (nothing waited for Order's own timeouts).
    let at_deadline = status == 504 && elapsed + EARLY >= BUDGET && elapsed <= BUDGET + SLACK;
    if !outcome.measured.is_empty() {
        outcome.measured.push_str("; ");
    }
    outcome.measured.push_str(&format!(
        "Inventory {LATENCY_MS} ms slow: {status} after {} ms ({})",
        ms(elapsed),
        if at_deadline {
            format!("at the deadline, not after {own}")
        } else {
            "not at the deadline".to_owned()
        }
    ));
    Ok(at_deadline)
}

/// `POST /api/orders` of one unit with the caller's budget and trace.
async fn order(
    live: &Live,
    token: &str,
    product: &str,
    trace: &str,
) -> anyhow::Result<reqwest::Response> {
    let url = format!("{}/api/orders", live.endpoints.gateway);
    Ok(live
        .http
        .post(url)
        .bearer_auth(token)
        .header("idempotency-key", uuid::Uuid::new_v4().to_string())
        .header(HTTP_HEADER, ms(BUDGET).to_string())
        .header("traceparent", format!("00-{trace}-{}-01", random_hex(16)))
        .json(&json!({"items": [{"product_id": product, "quantity": 1}]}))
        .send()
        .await?)
}

/// The order's spans were not kept by this process: its tracing subscriber
/// does not feed [`crate::console_traces`]. The one error that skips the
/// first half on a running system (see `halves`).
#[derive(Debug)]
struct SpansNotKept {
    trace: String,
}

impl std::fmt::Display for SpansNotKept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the order's spans ({}) were not kept: this process's tracing \
             subscriber does not feed console_traces",
            self.trace
        )
    }
}

impl std::error::Error for SpansNotKept {}

/// The finished order whose trace is `trace`, from the spans this process
/// keeps (its last span ends just after the answer: polled, 5 s at most).
/// A callee's server span may end after its caller's (it closes once the
/// answer has gone out, which the caller may have read already), so the
/// path is taken once Inventory's hop has joined it, or as it is at the end.
///
/// # Errors
/// [`SpansNotKept`] when no such trace turned up.
async fn trace_of(trace: &str) -> anyhow::Result<OrderPath> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let late = Instant::now() >= until;
        if let Some(path) = crate::console_traces::global().recent_order()
            && path.trace_id == trace
            && (late || path.hops.iter().any(|hop| hop.service == "inventory"))
        {
            return Ok(path);
        }
        if late {
            return Err(SpansNotKept {
                trace: trace.to_owned(),
            }
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One row of the first half's table.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    /// `gateway`, `order`, `inventory`, `product`: whose row it is (an
    /// attempt's is its caller's).
    service: String,
    label: String,
    attempt: bool,
    /// A shared cache fill (single flight) or an attempt of one: it runs
    /// under its own deadline, not the order's, and is not judged.
    shared: bool,
    start_ms: f64,
    left_ms: u64,
    /// What the caller had left when its own hop started (`None` for the
    /// first hop: its caller is the scene, with the whole budget).
    caller_left_ms: Option<u64>,
    answer: String,
}

impl Row {
    /// The lesson's rule for one row: a hop has less time than its caller
    /// had (the first hop at most the budget); an attempt, at the instant
    /// it starts, no more than its caller had.
    fn shrinks(&self, budget: u64) -> bool {
        match self.caller_left_ms {
            _ if self.shared => true,
            None => self.left_ms <= budget,
            Some(caller) if self.attempt => self.left_ms <= caller,
            Some(caller) => self.left_ms < caller,
        }
    }
}

/// Who calls `service` on an order's path.
fn caller_of(service: &str) -> Option<&'static str> {
    match service {
        "order" => Some("gateway"),
        "inventory" | "product" => Some("order"),
        _ => None,
    }
}

/// A hop's answer for the table: an HTTP status as it is, gRPC's `0` as
/// `OK` (Inventory's spans record the numeric code).
fn answer(status: Option<&str>) -> String {
    match status {
        Some("0") => "OK".to_owned(),
        Some(s) => s.to_owned(),
        None => String::new(),
    }
}

/// Whole milliseconds of a time left, never negative.
fn whole(ms: f64) -> u64 {
    // A time left is under a day: the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let whole = ms.max(0.0).floor() as u64;
    whole
}

/// The rows of `path`: each hop with a recorded deadline, and each attempt
/// of its caller that reached it, in the order they started.
fn rows(path: &OrderPath) -> Vec<Row> {
    // The hop of `service` that started last at or before `at`: its start
    // and the time it had left then.
    let caller_hop = |service: &str, at: f64| -> Option<(f64, u64)> {
        path.hops
            .iter()
            .filter(|h| h.service == service && h.start_ms <= at)
            .filter_map(|h| Some((h.start_ms, h.deadline_left_ms?)))
            .next_back()
    };
    let mut rows = Vec::new();
    for hop in &path.hops {
        let Some(left) = hop.deadline_left_ms else {
            continue;
        };
        let caller = caller_of(&hop.service);
        let fill = if hop.shared { " (shared fill)" } else { "" };
        let had = caller.and_then(|c| caller_hop(c, hop.start_ms));
        if let (Some(caller), Some(_)) = (caller, had) {
            for attempt in &hop.attempts {
                let Some((start, had)) = caller_hop(caller, attempt.start_ms) else {
                    continue;
                };
                #[allow(clippy::cast_precision_loss)] // under a day of ms
                let left = had as f64 - (attempt.start_ms - start);
                rows.push(Row {
                    service: caller.to_owned(),
                    label: format!(
                        "{caller} → {} attempt {}{fill}",
                        hop.service, attempt.number
                    ),
                    attempt: true,
                    shared: hop.shared,
                    start_ms: attempt.start_ms,
                    left_ms: whole(left),
                    caller_left_ms: Some(had),
                    answer: attempt.outcome.clone(),
                });
            }
        }
        rows.push(Row {
            service: hop.service.clone(),
            label: format!("{} {}{fill}", hop.service, hop.operation),
            attempt: false,
            shared: hop.shared,
            start_ms: hop.start_ms,
            left_ms: left,
            caller_left_ms: had.map(|(_, l)| l),
            answer: answer(hop.status.as_deref()),
        });
    }
    rows.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    rows
}

/// Installs, once, a tracing subscriber that keeps this process's order
/// spans in [`crate::console_traces`], unless one is installed already.
///
/// A global subscriber, not a scoped one: the services run on tasks the
/// embedded system spawns, which a `with_default` around the scene would
/// not reach. Its log output is limited to errors, so the table stays
/// readable; the filter lets through the modules whose spans make the
/// path (server spans and attempts).
///
/// # Errors
/// The subscriber cannot be built.
fn keep_spans() -> anyhow::Result<()> {
    static GUARD: OnceLock<TelemetryGuard> = OnceLock::new();
    if GUARD.get().is_some() || tracing::dispatcher::has_been_set() {
        return Ok(());
    }
    let log = LogSettings {
        format: "text".into(),
        level: [
            "error",
            "shopeasy_gateway::proxy=info",
            "shopeasy_runtime::telemetry=info",
            "shopeasy_inventory::grpc::observe=info",
            "shopeasy_resilience::retry=info",
        ]
        .join(","),
    };
    let guard = telemetry::init_with_spans(
        "shopeasy",
        &log,
        "",
        vec![crate::console_traces::processor()],
    )
    .context("installing the span recorder")?;
    let _ = GUARD.set(guard);
    Ok(())
}

/// `n` random hex digits (a trace id is 32, a span id 16), never all zero.
fn random_hex(n: usize) -> String {
    let mut hex = String::new();
    while hex.len() < n {
        hex.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    hex.truncate(n);
    hex.replace_range(n - 1.., "1");
    hex
}

/// Whole milliseconds of `d`.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use shopeasy_console::{AttemptView, Hop};

    use super::*;

    fn hop(service: &str, start_ms: f64, left: u64, attempts: Vec<AttemptView>) -> Hop {
        Hop {
            service: service.into(),
            operation: "op".into(),
            start_ms,
            duration_ms: 1.0,
            deadline_left_ms: Some(left),
            status: Some("0".into()),
            shared: false,
            attempts,
        }
    }

    fn attempt(number: u32, start_ms: f64) -> AttemptView {
        AttemptView {
            number,
            outcome: "ok".into(),
            start_ms,
            duration_ms: 1.0,
        }
    }

    fn path(hops: Vec<Hop>) -> OrderPath {
        OrderPath {
            trace_id: "t".into(),
            started_unix_ms: 0,
            duration_ms: 30.0,
            hops,
        }
    }

    #[test]
    fn an_attempt_has_its_callers_deadline_at_its_start_and_hops_compare_to_their_caller() {
        let table = rows(&path(vec![
            hop("gateway", 0.0, 1999, vec![]),
            hop("order", 2.0, 1997, vec![]),
            hop("inventory", 12.0, 1986, vec![attempt(1, 10.5)]),
        ]));
        let labels: Vec<&str> = table.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "gateway op",
                "order op",
                "order → inventory attempt 1",
                "inventory op"
            ]
        );
        // 1997 at 2.0 ms → 1988.5 at 10.5 ms.
        assert_eq!(table[2].left_ms, 1988);
        assert_eq!(table[3].caller_left_ms, Some(1997));
        assert_eq!(table[3].answer, "OK");
        assert!(table.iter().all(|r| r.shrinks(2000)));
    }

    #[test]
    fn a_hop_with_as_much_as_its_caller_breaks_the_rule() {
        let table = rows(&path(vec![
            hop("gateway", 0.0, 1999, vec![]),
            hop("order", 2.0, 1999, vec![]),
        ]));
        assert!(!table[1].shrinks(2000));
        let first = rows(&path(vec![hop("gateway", 0.0, 2500, vec![])]));
        assert!(!first[0].shrinks(2000), "more than the caller's budget");
        let mut fill = hop("product", 3.0, 2900, vec![]);
        fill.shared = true;
        let shared = rows(&path(vec![hop("order", 0.0, 1999, vec![]), fill]));
        assert!(
            shared[1].label.ends_with("(shared fill)") && shared[1].shrinks(2000),
            "a shared fill runs under its own deadline: not judged"
        );
    }
}
