//! From one round of reads to a [`Snapshot`]: a pure function of what was
//! read, the time, and what the previous rounds left behind (counters for
//! rates, the breakers' state rings).
//!
//! Nothing here touches the network, so every derivation — a rate from two
//! counter readings, a trial from a transition count, an edge's breaker —
//! is tested with made-up pages.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::{Map, Value};
use shopeasy_runtime::topology;

use crate::{
    prom::Page,
    snapshot::{
        BreakerView, BudgetView, CacheView, EdgeView, OutboxView, Reported, ServiceView, Snapshot,
        StatePoint, Trial,
    },
};

/// How many state changes each breaker's ring keeps.
pub const HISTORY: usize = 64;

/// How many trials each breaker's ring keeps.
pub const TRIALS: usize = 32;

/// The per-attempt metric every client edge records (`target`, `outcome`).
const ATTEMPTS: &str = "shopeasy_downstream_request_duration_seconds_count";
/// Service-to-service retries (`target`, `outcome`).
const RETRIES: &str = "shopeasy_downstream_retries_total";
/// Order's outbox backlog.
const BACKLOG: &str = "shopeasy_outbox_backlog";
/// The age of the oldest order in Order's outbox (seconds, 0 when empty).
const OLDEST_PENDING: &str = "shopeasy_outbox_oldest_pending_age_seconds";
/// Every metric the console reads from the admin listeners' `/metrics`:
/// each must exist (at 0) on a freshly started system, or a healthy
/// system's panels would show nothing (a test in the launcher checks).
pub const METRICS: [&str; 4] = [ATTEMPTS, RETRIES, BACKLOG, OLDEST_PENDING];

/// Numbers a cache reports beside its counts.
const NOT_COUNTS: [&str; 8] = [
    "entries",
    "capacity",
    "bytes",
    "refreshing",
    "ttl_seconds",
    "max_staleness_seconds",
    "oldest_stale_served_seconds",
    "last_stale_served_seconds",
];
/// Attempt outcomes that are an answer from the callee.
const ANSWERED: [&str; 2] = ["ok", "response"];
/// Attempt outcomes of a call the breaker refused without trying.
const REFUSED: [&str; 2] = ["circuit_open", "breaker_open"];

/// What one service's admin listener gave this round.
#[derive(Debug, Clone, Default)]
pub struct ServiceReading {
    /// The service's name.
    pub name: String,
    /// `/admin/resilience`, when it answered.
    pub resilience: Option<Value>,
    /// `/metrics`, when it answered.
    pub metrics: Option<Page>,
    /// What went wrong, when something did.
    pub error: Option<String>,
    /// `/health/ready`, when read (only with
    /// [`crate::ConsoleSettings::show_stores`]).
    pub ready: Option<crate::stores::Readiness>,
}

/// One round of reads.
#[derive(Debug, Clone, Default)]
pub struct Readings {
    /// When the round finished (Unix ms).
    pub at_unix_ms: u64,
    /// Every service, in the configured order.
    pub services: Vec<ServiceReading>,
    /// The fault API's `GET /proxies` (`{name: proxy}`), when it answered.
    pub proxies: Option<Value>,
    /// What went wrong reading the fault API.
    pub faults_error: Option<String>,
}

/// What survives between rounds.
#[derive(Debug, Default)]
pub struct Observer {
    seq: u64,
    last_at: Option<u64>,
    /// Counter readings of the previous round, by key.
    counters: HashMap<String, f64>,
    /// Each breaker's state ring and transition counts.
    breakers: HashMap<String, BreakerMemory>,
    /// When the outbox backlog last went from empty to not.
    pending_since: Option<u64>,
}

#[derive(Debug, Default)]
struct BreakerMemory {
    history: VecDeque<StatePoint>,
    trials: VecDeque<Trial>,
    half_opened: f64,
    closed: f64,
}

impl Observer {
    /// A fresh observer (no rates until its second round).
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns `readings` into the next snapshot.
    pub fn observe(&mut self, readings: &Readings) -> Snapshot {
        let at = readings.at_unix_ms;
        let dt = self
            .last_at
            .map(|last| at.saturating_sub(last) as f64 / 1000.0)
            .filter(|dt| *dt > 0.0);
        self.seq += 1;
        let previous = std::mem::take(&mut self.counters);
        let mut round = Round {
            dt,
            previous: &previous,
            current: HashMap::new(),
        };
        let mut snapshot = Snapshot {
            seq: self.seq,
            at_unix_ms: at,
            interval_ms: self.last_at.map_or(0, |last| at.saturating_sub(last)),
            ..Snapshot::default()
        };
        if let Some(e) = &readings.faults_error {
            snapshot.errors.push(format!("fault API: {e}"));
        }
        for service in &readings.services {
            snapshot.services.push(ServiceView {
                name: service.name.clone(),
                up: service.error.is_none(),
            });
            if let Some(e) = &service.error {
                snapshot.errors.push(format!("{}: {e}", service.name));
            }
            let sections = service
                .resilience
                .as_ref()
                .map(sections)
                .unwrap_or_default();
            let page = service.metrics.clone().unwrap_or_default();
            self.breakers_of(service, &sections, &page, at, &mut snapshot);
            budgets_of(service, &sections, &page, &mut round, &mut snapshot);
            caches_of(service, &sections, &mut round, &mut snapshot);
            reported_of(service, &sections, &mut snapshot);
            if service.name == topology::ORDER.name && page.has(BACKLOG, &[]) {
                let pending = page.sum(BACKLOG, &[]);
                self.pending_since = match (pending > 0.0, self.pending_since) {
                    (true, None) => Some(at),
                    (true, since) => since,
                    (false, _) => None,
                };
                snapshot.outbox = Some(OutboxView {
                    pending,
                    pending_since_unix_ms: self.pending_since,
                    oldest_pending_age_seconds: page
                        .has(OLDEST_PENDING, &[])
                        .then(|| page.sum(OLDEST_PENDING, &[]))
                        .filter(|age| pending > 0.0 && *age > 0.0),
                });
            }
        }
        snapshot.edges = edges(readings, &snapshot.breakers, &mut round);
        self.counters = round.current;
        self.last_at = Some(at);
        snapshot
    }

    fn breakers_of(
        &mut self,
        service: &ServiceReading,
        sections: &Map<String, Value>,
        page: &Page,
        at: u64,
        snapshot: &mut Snapshot,
    ) {
        for (target, raw) in members(sections, "circuit_breakers") {
            let name = format!("{}/{target}", service.name);
            let state = raw["state"].as_str().unwrap_or("unknown").to_owned();
            let memory = self.breakers.entry(name.clone()).or_default();
            let half_opened = raw["transitions"]["half_open"].as_f64().unwrap_or(0.0);
            let closed = raw["transitions"]["closed"].as_f64().unwrap_or(0.0);
            if let Some(previous) = memory.history.back().map(|p| p.state.clone()) {
                let (failed, succeeded) = trials_ended(
                    growth(half_opened, memory.half_opened),
                    growth(closed, memory.closed),
                    previous == "half_open",
                    state == "half_open",
                );
                for ok in
                    std::iter::repeat_n(false, failed).chain(std::iter::repeat_n(true, succeeded))
                {
                    push_bounded(&mut memory.trials, Trial { at_unix_ms: at, ok }, TRIALS);
                }
            }
            memory.half_opened = half_opened;
            memory.closed = closed;
            if memory.history.back().is_none_or(|p| p.state != state) {
                push_bounded(
                    &mut memory.history,
                    StatePoint {
                        at_unix_ms: at,
                        state: state.clone(),
                    },
                    HISTORY,
                );
            }
            let failures = raw["failures_in_window"].as_f64().unwrap_or(0.0);
            let successes = raw["successes_in_window"].as_f64().unwrap_or(0.0);
            let refused: f64 = REFUSED
                .iter()
                .map(|o| page.sum(ATTEMPTS, &[("target", target), ("outcome", o)]))
                .sum();
            snapshot.breakers.push(BreakerView {
                name,
                service: service.name.clone(),
                target: target.to_owned(),
                state,
                failures,
                successes,
                failure_ratio: (failures + successes > 0.0)
                    .then(|| failures / (failures + successes)),
                threshold: raw["config"]["failure_ratio"].as_f64(),
                minimum_throughput: raw["config"]["minimum_throughput"].as_f64(),
                next_trial_seconds: raw["open_remaining_seconds"].as_f64(),
                break_duration_seconds: raw["config"]["break_duration_seconds"].as_f64(),
                refused_fast: page.has(ATTEMPTS, &[]).then_some(refused),
                history: memory.history.iter().cloned().collect(),
                trials: memory.trials.iter().cloned().collect(),
                raw: raw.clone(),
            });
        }
    }
}

/// The trials that ended between two rounds, as (failed, succeeded), from
/// the transitions counted meanwhile. Every trial begins with a move to
/// `half_open` and only a trial's success moves to `closed`, so the trials
/// that ended are those begun, plus one under way at the last round, less
/// one under way now; those that did not close failed. Counting opens
/// instead read a trip out of `closed` as a failed trial whenever a
/// half-open → closed → open passed inside one round. Exact because the
/// breaker reports its state and its counts from one moment (read under
/// its lock); the order of several trials inside one round is not known,
/// and the failed ones are listed first.
fn trials_ended(
    half_opens: usize,
    closes: usize,
    was_half_open: bool,
    is_half_open: bool,
) -> (usize, usize) {
    let ended = (half_opens + usize::from(was_half_open)).saturating_sub(usize::from(is_half_open));
    (ended.saturating_sub(closes), closes)
}

/// How many times a transition count grew since the last round, at most
/// one more than the trial ring holds: the ring keeps only its last
/// [`TRIALS`], so more would change nothing shown, and a count read as
/// 1e20 (or +Inf) must not become ~1.8e19 pushes into a 32-slot ring —
/// the loop would spin for ever and no snapshot would follow.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn growth(now: f64, before: f64) -> usize {
    // `max` first: it turns NaN into 0; the cast of what is left is exact.
    (now - before).max(0.0).min((TRIALS + 1) as f64) as usize
}

/// Counter readings of this round, and the rates against the last one.
struct Round<'a> {
    dt: Option<f64>,
    previous: &'a HashMap<String, f64>,
    current: HashMap<String, f64>,
}

impl Round<'_> {
    /// Records counter `key` at `value`; its growth since the last round
    /// (0 on the first round, after a restart, or when it is not a finite
    /// number: a counter read as +Inf grows by +Inf, then by NaN, and the
    /// snapshot's JSON would carry `null` where the page expects a number).
    fn delta(&mut self, key: String, value: f64) -> f64 {
        let before = self.previous.get(&key).copied();
        self.current.insert(key, value);
        match before {
            Some(b) if value >= b && self.dt.is_some() => finite(value - b),
            _ => 0.0,
        }
    }

    /// [`Round::delta`] per second.
    fn rate(&mut self, key: String, value: f64) -> f64 {
        let d = self.delta(key, value);
        self.per_second(d)
    }

    /// `d` over this round's interval (0 on the first round; finite, as a
    /// huge `d` over a millisecond could overflow).
    fn per_second(&self, d: f64) -> f64 {
        self.dt.map_or(0.0, |dt| finite(d / dt))
    }
}

/// `x`, or 0 when it is infinite or NaN (JSON has no such numbers).
fn finite(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

fn push_bounded<T>(ring: &mut VecDeque<T>, item: T, cap: usize) {
    if ring.len() == cap {
        ring.pop_front();
    }
    ring.push_back(item);
}

/// A service's `/admin/resilience` as one map of sections: Order reports
/// them at the top level, the gateway under `resilience`.
fn sections(report: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(top) = report.as_object() {
        for (k, v) in top {
            if k == "resilience" {
                if let Some(inner) = v.as_object() {
                    out.extend(inner.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            } else {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn members<'a>(
    sections: &'a Map<String, Value>,
    section: &str,
) -> impl Iterator<Item = (&'a str, &'a Value)> + 'a {
    sections
        .get(section)
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.iter().map(|(k, v)| (k.as_str(), v)))
}

fn budgets_of(
    service: &ServiceReading,
    sections: &Map<String, Value>,
    page: &Page,
    round: &mut Round<'_>,
    snapshot: &mut Snapshot,
) {
    for (target, raw) in members(sections, "retry_budgets") {
        let name = format!("{}/{target}", service.name);
        // Service-to-service retries are counted per target; the gateway's
        // only in total, so its budgets show none rather than a shared sum.
        let per_target = page
            .matching(RETRIES, &[("target", target)])
            .next()
            .is_some();
        let retried =
            per_target.then(|| page.sum(RETRIES, &[("target", target), ("outcome", "retried")]));
        let denied = per_target.then(|| {
            page.sum(
                RETRIES,
                &[("target", target), ("outcome", "budget_exhausted")],
            )
        });
        let attempts = page.sum(ATTEMPTS, &[("target", target)]);
        let new_attempts = round.delta(format!("{name}/attempts"), attempts);
        let new_retries = round.delta(format!("{name}/retried"), retried.unwrap_or(0.0));
        let calls = new_attempts - new_retries;
        snapshot.budgets.push(BudgetView {
            name,
            balance: raw["balance"].as_f64(),
            retried,
            denied,
            attempts_per_call: (per_target && calls >= 1.0).then(|| new_attempts / calls),
            raw: raw.clone(),
        });
    }
}

fn caches_of(
    service: &ServiceReading,
    sections: &Map<String, Value>,
    round: &mut Round<'_>,
    snapshot: &mut Snapshot,
) {
    let named = members(sections, "caches").map(|(n, v)| (n.to_owned(), v));
    // The product service reports its own cache as a top-level member.
    let product = sections
        .get("product_cache")
        .map(|v| ("catalogue".to_owned(), v));
    for (cache, raw) in named.chain(product) {
        let name = format!("{}/{cache}", service.name);
        // The stock cache nests its counts under `requests`; the
        // catalogue's cache lists them beside its size.
        let counts: BTreeMap<String, f64> = raw["requests"]
            .as_object()
            .or_else(|| raw.as_object())
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !NOT_COUNTS.contains(&k.as_str()))
                    .filter_map(|(k, v)| v.as_f64().map(|v| (k.clone(), v)))
                    .collect()
            })
            .unwrap_or_default();
        let rates = counts
            .iter()
            .map(|(k, v)| (k.clone(), round.rate(format!("{name}/{k}"), *v)))
            .collect();
        snapshot.caches.push(CacheView {
            name,
            entries: raw["entries"].as_f64(),
            counts,
            rates,
            max_staleness_seconds: raw["max_staleness_seconds"].as_f64(),
            oldest_stale_served_seconds: raw["oldest_stale_served_seconds"].as_f64(),
            last_stale_served_seconds: raw["last_stale_served_seconds"].as_f64(),
            raw: raw.clone(),
        });
    }
}

fn reported_of(service: &ServiceReading, sections: &Map<String, Value>, snapshot: &mut Snapshot) {
    if let Some(admission) = sections.get("admission") {
        snapshot.admission.push(Reported {
            name: service.name.clone(),
            value: admission.clone(),
        });
    }
    for (name, value) in members(sections, "throttles") {
        snapshot.limits.push(Reported {
            name: format!("{}/throttle/{name}", service.name),
            value: value.clone(),
        });
    }
    for (key, value) in sections {
        if key.contains("rate_limit") {
            snapshot.limits.push(Reported {
                name: format!("{}/{key}", service.name),
                value: value.clone(),
            });
        }
    }
}

fn edges(readings: &Readings, breakers: &[BreakerView], round: &mut Round<'_>) -> Vec<EdgeView> {
    topology::service_edges()
        .iter()
        .map(|edge| {
            let name = edge.name();
            let proxy = readings.proxies.as_ref().and_then(|p| p.get(&name));
            let caller = readings
                .services
                .iter()
                .find(|s| s.name == edge.from.name)
                .and_then(|s| s.metrics.as_ref());
            let (attempts, answered) = caller.map_or((0.0, 0.0), |page| {
                let attempts = page.sum(ATTEMPTS, &[("target", edge.to)]);
                let answered = ANSWERED
                    .iter()
                    .map(|o| page.sum(ATTEMPTS, &[("target", edge.to), ("outcome", o)]))
                    .sum();
                (attempts, answered)
            });
            let new_attempts = round.delta(format!("{name}/attempts"), attempts);
            let new_answered = round.delta(format!("{name}/answered"), answered);
            EdgeView {
                from: edge.from.name.to_owned(),
                to: edge.to.to_owned(),
                enabled: proxy.and_then(|p| p["enabled"].as_bool()).unwrap_or(true),
                toxics: proxy
                    .and_then(|p| p["toxics"].as_array())
                    .cloned()
                    .unwrap_or_default(),
                request_rate: round.per_second(new_attempts),
                success_rate: (new_attempts > 0.0).then(|| new_answered / new_attempts),
                breaker: breakers
                    .iter()
                    .find(|b| b.service == edge.from.name && b.target == edge.to)
                    .map(|b| b.state.clone()),
                name,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn breaker(state: &str, opened: u64, closed: u64) -> Value {
        json!({
            "state": state,
            "failures_in_window": 3,
            "successes_in_window": 1,
            "open_remaining_seconds": if state == "open" { json!(1.5) } else { Value::Null },
            // A consistent breaker's count: every open but a standing
            // trip out of `closed` came after a trial, and so did a close.
            "transitions": {"open": opened, "closed": closed,
                "half_open": opened.saturating_sub(u64::from(state == "open"))},
            "config": {"failure_ratio": 0.5, "minimum_throughput": 5, "break_duration_seconds": 2.0},
        })
    }

    fn order(
        state: &str,
        opened: u64,
        closed: u64,
        attempts_ok: u64,
        attempts_err: u64,
    ) -> ServiceReading {
        let metrics = format!(
            "{ATTEMPTS}{{target=\"inventory\",outcome=\"ok\"}} {attempts_ok}\n\
             {ATTEMPTS}{{target=\"inventory\",outcome=\"timeout\"}} {attempts_err}\n\
             {ATTEMPTS}{{target=\"inventory\",outcome=\"circuit_open\"}} 4\n\
             {RETRIES}{{target=\"inventory\",outcome=\"retried\"}} {attempts_err}\n\
             {BACKLOG} 2\n\
             {OLDEST_PENDING} 4.5\n"
        );
        ServiceReading {
            name: "order".into(),
            resilience: Some(json!({
                "circuit_breakers": {"inventory": breaker(state, opened, closed)},
                "retry_budgets": {"inventory": {"balance": 9.0}},
                "caches": {"stock": {"entries": 3, "requests": {"hit": 10, "stale": 1}, "max_staleness_seconds": 60.0,
                    "oldest_stale_served_seconds": 12.5, "last_stale_served_seconds": 3.0}},
                "admission": {"limit": 20},
            })),
            metrics: Some(Page::parse(&metrics)),
            error: None,
            ready: None,
        }
    }

    fn readings(at: u64, order: ServiceReading) -> Readings {
        Readings {
            at_unix_ms: at,
            services: vec![order],
            proxies: Some(json!({
                "order-inventory": {"enabled": true, "toxics": [{"name": "hang", "type": "timeout"}]},
                "gateway-order": {"enabled": false, "toxics": []},
            })),
            faults_error: None,
        }
    }

    #[test]
    fn edges_get_rates_success_toxics_and_breaker_from_two_rounds() {
        let mut o = Observer::new();
        let first = o.observe(&readings(1_000, order("closed", 0, 0, 10, 0)));
        assert_eq!(first.edges.len(), 4);
        let edge = &first.edges[2];
        assert_eq!(edge.name, "order-inventory");
        assert_eq!(edge.request_rate, 0.0, "no rate on the first round");
        let second = o.observe(&readings(1_500, order("closed", 0, 0, 13, 1)));
        let edge = second
            .edges
            .iter()
            .find(|e| e.name == "order-inventory")
            .unwrap();
        // 3 ok + 1 timeout + 0 refused more in 0.5 s.
        assert_eq!(edge.request_rate, 8.0);
        assert_eq!(edge.success_rate, Some(0.75));
        assert_eq!(edge.toxics.len(), 1);
        assert_eq!(edge.breaker.as_deref(), Some("closed"));
        let disabled = second
            .edges
            .iter()
            .find(|e| e.name == "gateway-order")
            .unwrap();
        assert!(!disabled.enabled);
        assert_eq!(second.interval_ms, 500);
        assert_eq!(second.seq, 2);
    }

    #[test]
    fn breaker_rings_record_state_steps_and_trials() {
        let mut o = Observer::new();
        o.observe(&readings(1_000, order("closed", 0, 0, 0, 0)));
        o.observe(&readings(1_500, order("open", 1, 0, 0, 0)));
        o.observe(&readings(2_000, order("open", 2, 0, 0, 0))); // a failed trial
        let s = o.observe(&readings(2_500, order("closed", 2, 1, 0, 0))); // a good one
        let b = &s.breakers[0];
        assert_eq!(b.name, "order/inventory");
        let states: Vec<&str> = b.history.iter().map(|p| p.state.as_str()).collect();
        assert_eq!(states, ["closed", "open", "closed"]);
        let trials: Vec<bool> = b.trials.iter().map(|t| t.ok).collect();
        assert_eq!(trials, [false, true]);
        assert_eq!(b.failure_ratio, Some(0.75));
        assert_eq!(b.threshold, Some(0.5));
        assert_eq!(b.refused_fast, Some(4.0));
    }

    /// Half-open → closed → open inside one round is one good trial and a
    /// trip: the trip is no failed trial (counting opens read it as one).
    #[test]
    fn a_trial_and_a_trip_inside_one_round_read_as_one_good_trial() {
        let mut o = Observer::new();
        o.observe(&readings(1_000, order("half_open", 1, 0, 0, 0)));
        let s = o.observe(&readings(1_500, order("open", 2, 1, 0, 0)));
        let trials: Vec<bool> = s.breakers[0].trials.iter().map(|t| t.ok).collect();
        assert_eq!(trials, [true]);
        // Two failed trials inside the next round.
        let s = o.observe(&readings(2_000, order("open", 4, 1, 0, 0)));
        let trials: Vec<bool> = s.breakers[0].trials.iter().map(|t| t.ok).collect();
        assert_eq!(trials, [true, false, false]);
        // One under way at the round's end is not counted until it ends.
        let s = o.observe(&readings(2_500, order("half_open", 4, 1, 0, 0)));
        assert_eq!(s.breakers[0].trials.len(), 3);
    }

    #[test]
    fn budgets_caches_outbox_and_admission_are_read() {
        let mut o = Observer::new();
        o.observe(&readings(1_000, order("closed", 0, 0, 10, 0)));
        let s = o.observe(&readings(2_000, order("closed", 0, 0, 12, 2)));
        let budget = &s.budgets[0];
        assert_eq!(budget.balance, Some(9.0));
        assert_eq!(budget.retried, Some(2.0));
        // 4 attempts, 2 of them retries: 2 calls.
        assert_eq!(budget.attempts_per_call, Some(2.0));
        assert_eq!(s.caches[0].name, "order/stock");
        assert_eq!(s.caches[0].entries, Some(3.0));
        assert_eq!(s.caches[0].counts["hit"], 10.0);
        let outbox = s.outbox.as_ref().unwrap();
        assert_eq!(outbox.pending, 2.0);
        assert_eq!(outbox.pending_since_unix_ms, Some(1_000));
        assert_eq!(outbox.oldest_pending_age_seconds, Some(4.5));
        assert_eq!(s.caches[0].oldest_stale_served_seconds, Some(12.5));
        assert_eq!(s.caches[0].last_stale_served_seconds, Some(3.0));
        assert!(
            !s.caches[0]
                .counts
                .contains_key("oldest_stale_served_seconds")
        );
        assert_eq!(s.admission[0].name, "order");
    }

    /// A transition count of 1e20 once became ~1.8e19 pushes into the
    /// 32-slot trial ring: `observe` never returned, and the poll loop
    /// published nothing more. Run on a thread so that, broken, the test
    /// fails after a few seconds instead of hanging.
    #[test]
    fn a_huge_transition_count_fills_the_trial_ring_at_once() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut o = Observer::new();
            o.observe(&readings(1_000, order("open", 1, 0, 0, 0)));
            let mut huge = order("open", 0, 0, 0, 0);
            huge.resilience.as_mut().unwrap()["circuit_breakers"]["inventory"]["transitions"] =
                json!({"open": 1e20, "closed": 1e20, "half_open": 0});
            let s = o.observe(&readings(1_500, huge));
            let _ = done.send(s);
        });
        let s = finished
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("observe returns at once whatever the count");
        let trials = &s.breakers[0].trials;
        assert_eq!(trials.len(), TRIALS, "the ring is full, no more");
        assert!(trials.iter().all(|t| t.ok), "the closes came last");
    }

    /// A counter at +Inf made `request_rate` +Inf (then NaN), serialized
    /// as `null`, and the page's `toFixed` on it threw and blanked the
    /// page: only finite rates leave the observer.
    #[test]
    fn a_counter_at_infinity_gives_finite_rates() {
        let infinite = || {
            let mut r = order("closed", 0, 0, 0, 0);
            r.metrics = Some(Page::parse(&format!(
                "{ATTEMPTS}{{target=\"inventory\",outcome=\"ok\"}} +Inf\n"
            )));
            r.resilience.as_mut().unwrap()["caches"]["stock"]["requests"]["hit"] = json!(1e308);
            r
        };
        let mut o = Observer::new();
        o.observe(&readings(1_000, order("closed", 0, 0, 10, 0)));
        // +Inf - 14, then +Inf - +Inf (NaN); a cache grown by 1e308 in
        // half a second (its rate overflows to +Inf).
        for at in [1_500, 1_501, 1_502] {
            let s = o.observe(&readings(at, infinite()));
            let json = serde_json::to_value(&s).unwrap();
            for edge in json["edges"].as_array().unwrap() {
                assert!(edge["request_rate"].is_number(), "{at}: {edge}");
            }
            for (k, rate) in json["caches"][0]["rates"].as_object().unwrap() {
                assert!(rate.is_number(), "{at}: cache {k} {rate}");
            }
            for b in &s.budgets {
                assert!(b.attempts_per_call.is_none_or(f64::is_finite), "{b:?}");
            }
        }
    }

    #[test]
    fn a_service_that_does_not_answer_is_down_and_named() {
        let mut o = Observer::new();
        let mut r = readings(1_000, order("closed", 0, 0, 0, 0));
        r.services[0].error = Some("connection refused".into());
        r.services[0].resilience = None;
        r.services[0].metrics = None;
        let s = o.observe(&r);
        assert!(!s.services[0].up);
        assert_eq!(s.errors, ["order: connection refused"]);
        assert!(s.breakers.is_empty());
    }
}
