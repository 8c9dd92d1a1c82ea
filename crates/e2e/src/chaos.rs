//! The seeded chaos run (FAULTS.md, "The generator"): K concurrent clients,
//! each signed in as its own customer (`chaos-0`, `chaos-1`, …), place
//! orders through the gateway — fresh keys, retries of earlier keys with
//! the same body, reuses of a key with another body, and another
//! customer's key (which is a fresh key of this one's) — while a fault
//! schedule toggles faults on `gateway-order` and `order-inventory` every
//! few hundred milliseconds. Then every edge is healed, the outbox drains
//! (C8), and the checker reads both databases ([`crate::invariants`]).
//!
//! Everything random comes from one seed: the schedule ([`schedule`]) and
//! each client's choices. The interleaving with real time is not
//! reproducible, but the schedule and every request body are.
//!
//! By default each client is closed-loop (the next request once the last
//! is answered). With [`ChaosConfig::rate`] the clients are open-loop
//! instead, together offering that many orders per second whatever the
//! answers — a rate above the capacity meets the services' admission
//! control, whose refusals (503 `overloaded`, 429) are counted like any
//! answer and checked like a definite failure: a shed request made no
//! order (issue 14).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use anyhow::Context as _;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::{Value, json};
use shopeasy_faults::{Stream, Toxic, ToxicKind};
use tokio::time::Instant;

use crate::{
    client::Client,
    cluster::Cluster,
    history::{History, Intent, Op, Outcome},
    invariants::{self, Snapshot},
};

/// A fault the schedule can put on an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The proxy refuses connections and closes open ones (F1).
    Down,
    /// Requests are delivered, answers lost with a reset (F2 downstream).
    ResetDownstream,
    /// Requests are never delivered: reset on the first byte (F2 upstream).
    ResetUpstream,
    /// Black hole (F3).
    Hang,
    /// Latency above the edge's deadline (F4).
    Slow,
}

/// One step of an edge's schedule: a fault (or none) held for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The fault, `None` for a healthy interval.
    pub fault: Option<Fault>,
    /// How long it is held.
    pub hold: Duration,
}

/// FAULTS.md's faulted edges and the latency above each one's deadline.
pub const CHAOS_EDGES: [(&str, u64); 2] = [("gateway-order", 1_300), ("order-inventory", 450)];

/// The storage edges of the order saga, and a latency above the pool's
/// acquire timeout.
pub const STORAGE_EDGES: [(&str, u64); 2] = [("order-postgres", 700), ("inventory-postgres", 700)];

/// The schedule of one edge for `length`: healthy and faulty intervals of
/// 100–600 ms alternating, each fault drawn from the seed.
pub fn schedule(seed: u64, length: Duration) -> Vec<Step> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let mut total = Duration::ZERO;
    let faults = [
        Fault::Down,
        Fault::ResetDownstream,
        Fault::ResetUpstream,
        Fault::Hang,
        Fault::Slow,
    ];
    let mut faulty = false;
    while total < length {
        let hold = Duration::from_millis(rng.random_range(100..=600));
        let fault = faulty.then(|| faults[rng.random_range(0..faults.len())]);
        steps.push(Step { fault, hold });
        total += hold;
        faulty = !faulty;
    }
    steps
}

/// How to run the chaos.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// The seed of everything random.
    pub seed: u64,
    /// The edges the schedule breaks, each with a latency above its
    /// deadline (usually [`CHAOS_EDGES`]).
    pub edges: Vec<(&'static str, u64)>,
    /// Concurrent clients.
    pub clients: usize,
    /// How long faults are injected.
    pub duration: Duration,
    /// How long pending orders may take to resolve once healed (C8).
    pub drain_within: Duration,
    /// Open-loop load: orders per second offered by all clients together,
    /// each sent at its intended time without waiting for earlier answers.
    /// `None`: closed-loop clients.
    pub rate: Option<f64>,
}

/// What a run found.
#[derive(Debug)]
pub struct ChaosReport {
    /// The seed (print it when anything fails).
    pub seed: u64,
    /// Every request and answer.
    pub history: History,
    /// The databases after the drain.
    pub snapshot: Snapshot,
    /// The invariants' violations (empty when C1–C9 hold).
    pub violations: Vec<String>,
    /// Answers per status (`None` = no answer).
    pub statuses: BTreeMap<Option<u16>, usize>,
    /// Time from healing until nothing was pending (C8).
    pub drained_in: Duration,
    /// Faults the schedule put on each edge (a toxic added, or the proxy
    /// turned off): the run was faulted, not only loaded.
    pub faults: BTreeMap<&'static str, usize>,
}

impl ChaosReport {
    /// A few lines for the test log.
    pub fn summary(&self) -> String {
        format!(
            "seed {} ops {} statuses {:?} shed {} orders {} out of stock {} keys sent by \
             several customers {} faults {:?} drained in {:?} violations {}",
            self.seed,
            self.history.ops().len(),
            self.statuses,
            self.shed(),
            self.snapshot.orders.len(),
            self.out_of_stock(),
            self.shared_keys(),
            self.faults,
            self.drained_in,
            self.violations.len()
        )
    }

    /// Answers whose outcome is unknown (FAULTS.md's `info`: timeouts,
    /// 502/503/504, 409 in progress, no answer): what the faults made.
    pub fn unknown(&self) -> usize {
        self.history
            .ops()
            .iter()
            .filter(|op| op.outcome() == Outcome::Info)
            .count()
    }

    /// Orders turned away for want of stock: 409 `out-of-stock` answers,
    /// and orders left `rejected` (accepted `pending` on a stale stock
    /// entry, the outbox worker learns it only later, so a run can exhaust
    /// its stock without a client ever seeing a 409).
    pub fn out_of_stock(&self) -> usize {
        let answered = self
            .history
            .ops()
            .iter()
            .filter(|op| op.is_out_of_stock())
            .count();
        let rejected = self
            .snapshot
            .orders
            .values()
            .filter(|(_, status)| status == "rejected")
            .count();
        answered + rejected
    }

    /// Requests refused by admission control or a rate limit (503
    /// `overloaded`, 429): no work was done for them.
    pub fn shed(&self) -> usize {
        self.history.ops().iter().filter(|op| is_shed(op)).count()
    }

    /// Keys that more than one customer sent (each its own key: scoped).
    pub fn shared_keys(&self) -> usize {
        let mut customers: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
        for op in self.history.ops() {
            customers.entry(op.key).or_default().insert(op.customer);
        }
        customers.values().filter(|c| c.len() > 1).count()
    }
}

/// Seeds `stock` (one product per entry), runs the clients against the
/// gateway under the schedule, heals, drains and checks.
///
/// # Errors
/// When seeding or reading a database fails (not a violation: those are in
/// the report).
pub async fn run(
    cluster: &Cluster,
    config: &ChaosConfig,
    stock: &[i64],
) -> anyhow::Result<ChaosReport> {
    let mut initial = BTreeMap::new();
    let mut products = Vec::new();
    for (i, units) in stock.iter().enumerate() {
        let product = cluster
            .seed_product(
                &format!("CHAOS-{}-{i}", config.seed),
                100 + i as i64,
                *units,
            )
            .await?;
        initial.insert(product.id.to_string(), *units);
        products.push(product.id.to_string());
    }
    // Warm the stock cache so a stale answer exists (the 202 path).
    let warm = cluster.client(WARM_UP, Duration::from_secs(5));
    for product in &products {
        let _ = warm
            .post_json(
                "/api/orders",
                &json!({"items": [{"product_id": product, "quantity": 1000}]}),
                Some(&format!("warm-{product}")),
            )
            .await;
    }

    let history = History::default();
    let deadline = Instant::now() + config.duration;
    let bank = Arc::new(tokio::sync::Mutex::new(Vec::<String>::new()));

    let mut tasks = tokio::task::JoinSet::new();
    // Each edge's schedule ends with how many faults it put on, or with
    // the error that stopped it.
    let mut faulting = tokio::task::JoinSet::new();
    for (i, &(edge, slow_ms)) in config.edges.iter().enumerate() {
        let proxy = cluster.proxy(edge).await;
        let steps = schedule(config.seed.wrapping_add(i as u64), config.duration);
        faulting.spawn(async move {
            let mut applied = 0usize;
            for step in steps {
                if Instant::now() >= deadline {
                    break;
                }
                if apply(&proxy, step.fault, slow_ms)
                    .await
                    .with_context(|| format!("{edge}: putting on {:?}", step.fault))?
                {
                    applied += 1;
                }
                tokio::time::sleep(
                    step.hold
                        .min(deadline.saturating_duration_since(Instant::now())),
                )
                .await;
                clear(&proxy, step.fault).await;
            }
            anyhow::Ok((edge, applied))
        });
    }
    let shared = Keys::default();
    for c in 0..config.clients {
        let name = format!("chaos-{c}");
        let client = cluster.client(&name, Duration::from_secs(5));
        let history = history.clone();
        let products = products.clone();
        let shared = shared.clone();
        let seed = config.seed ^ ((c as u64 + 1) << 32);
        // Each client's share of the open-loop rate.
        let pace = config
            .rate
            .filter(|r| *r > 0.0)
            .map(|r| Duration::from_secs_f64(config.clients as f64 / r));
        tasks.spawn(async move {
            let me = Customer {
                index: c,
                name,
                client,
            };
            customer(me, seed, products, history, shared, deadline, pace).await;
        });
    }
    {
        let bank = bank.clone();
        let db = cluster.inventory_db().clone();
        let initial = initial.clone();
        tasks.spawn(async move {
            while Instant::now() < deadline {
                if let Ok(found) = invariants::stock_conservation(&db, &initial).await {
                    bank.lock().await.extend(found);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    // A schedule that could not put its faults on makes the run a lie
    // (faults "injected" that never were): a violation, not a shrug.
    let mut faults = BTreeMap::new();
    let mut harness = Vec::new();
    while let Some(done) = faulting.join_next().await {
        match done {
            Ok(Ok((edge, applied))) => {
                faults.insert(edge, applied);
            }
            Ok(Err(e)) => harness.push(format!("harness: fault schedule stopped: {e:#}")),
            Err(e) => harness.push(format!("harness: fault schedule panicked: {e}")),
        }
    }

    cluster.heal().await;
    let healed = Instant::now();
    let mut snapshot;
    loop {
        snapshot = Snapshot::read(cluster.order_db(), cluster.inventory_db()).await?;
        if (snapshot.pending() == 0 && snapshot.outbox_rows == 0)
            || healed.elapsed() > config.drain_within
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained_in = healed.elapsed();
    let mut violations = harness;
    violations.extend(bank.lock().await.iter().cloned());
    if snapshot.pending() > 0 || snapshot.outbox_rows > 0 {
        violations.push(format!(
            "C8 {} pending orders and {} outbox rows {:?} after healing",
            snapshot.pending(),
            snapshot.outbox_rows,
            drained_in
        ));
    }
    // The warm-up orders are not in the history; leave them out.
    snapshot.without_customer(WARM_UP);
    violations.extend(invariants::check(&history, &snapshot, &initial));
    violations.extend(shed_made_no_order(&history, &snapshot));
    // Faults never make a signed-in customer a stranger: the token is
    // checked by the gateway and the order service alike, with no call
    // out (a fixed key), so no fault may turn into a 401 or 403.
    for op in history.ops() {
        if matches!(op.answer.status, Some(401 | 403)) {
            violations.push(format!(
                "auth: {} (key {}) got {}",
                op.customer,
                op.key,
                op.answer.describe()
            ));
        }
    }
    let mut statuses = BTreeMap::new();
    for op in history.ops() {
        *statuses.entry(op.answer.status).or_default() += 1;
    }
    Ok(ChaosReport {
        seed: config.seed,
        history,
        snapshot,
        violations,
        statuses,
        drained_in,
        faults,
    })
}

/// Puts `fault` on `proxy`; `Ok(true)` when there was one to put.
///
/// # Errors
/// When the proxy refuses the toxic (one of that name is still on it, or
/// the proxy was stopped).
async fn apply(
    proxy: &shopeasy_faults::FaultProxy,
    fault: Option<Fault>,
    slow_ms: u64,
) -> Result<bool, shopeasy_faults::Error> {
    let toxic = match fault {
        None => return Ok(false),
        Some(Fault::Down) => {
            proxy.set_enabled(false).await;
            return Ok(true);
        }
        Some(Fault::ResetDownstream) => {
            Toxic::new(ToxicKind::ResetPeer { timeout: 0 }, Stream::Downstream)
        }
        Some(Fault::ResetUpstream) => {
            Toxic::new(ToxicKind::ResetPeer { timeout: 0 }, Stream::Upstream)
        }
        Some(Fault::Hang) => Toxic::new(ToxicKind::Timeout { timeout: 0 }, Stream::Downstream),
        Some(Fault::Slow) => Toxic::new(
            ToxicKind::Latency {
                latency: slow_ms,
                jitter: 0,
            },
            Stream::Downstream,
        ),
    };
    proxy.add_toxic(toxic.named("chaos"))?;
    Ok(true)
}

/// Removes the fault. A black hole ends with its connections closed: the
/// `timeout` toxic *drops* the bytes it swallows (as Toxiproxy's does), so a
/// connection that lived through it would resume mid-frame, which no real
/// network does (a frozen peer delays bytes, TCP never loses them).
async fn clear(proxy: &shopeasy_faults::FaultProxy, fault: Option<Fault>) {
    if fault == Some(Fault::Hang) {
        proxy.set_enabled(false).await;
    }
    proxy.remove_all_toxics();
    proxy.set_enabled(true).await;
}

/// Whether the answer is a refusal before any work: admission control's
/// 503 `overloaded` (any layer) or a rate limit's 429.
pub fn is_shed(op: &Op) -> bool {
    match op.answer.status {
        Some(429) => true,
        Some(503) => op.problem_type().ends_with("overloaded"),
        _ => false,
    }
}

/// A shed request made no order: every key whose answers were all
/// refusals (or definite failures) names no order (C3 for shedding), but
/// for C3's one exception: a key also answered 409 `out-of-stock` may keep
/// its `rejected` order.
fn shed_made_no_order(history: &History, snapshot: &Snapshot) -> Vec<String> {
    let mut keys: BTreeMap<(String, String), Vec<Op>> = BTreeMap::new();
    for op in history.ops() {
        keys.entry((op.customer.clone(), op.key.clone()))
            .or_default()
            .push(op);
    }
    keys.into_iter()
        .filter_map(|(scoped, ops)| {
            // As C3: a reuse's 422 is about another body, not this key's.
            let relevant: Vec<&Op> = ops
                .iter()
                .filter(|op| op.intent != Intent::Reuse || op.outcome() != Outcome::Fail)
                .collect();
            let only_refused = relevant.iter().any(|op| is_shed(op))
                && relevant
                    .iter()
                    .all(|op| is_shed(op) || op.outcome() == Outcome::Fail);
            if !only_refused {
                return None;
            }
            let id = snapshot.keys.get(&scoped)?;
            let (_, status) = snapshot.orders.get(id)?;
            let short = status == "rejected" && relevant.iter().any(|op| op.is_out_of_stock());
            (!short).then(|| {
                format!(
                    "shed: key {} of {} was only refused (503 overloaded / 429), \
                     yet order {id} is {status}",
                    scoped.1, scoped.0
                )
            })
        })
        .collect()
}

/// The customer the runs' warm-up orders are placed as (left out of the
/// check: they are not in the history).
pub const WARM_UP: &str = "warm-up";

/// The keys every client has used so far, so one can borrow another's.
type Keys = Arc<std::sync::Mutex<Vec<String>>>;

/// One signed-in client of a run.
struct Customer {
    index: usize,
    /// Its token's `sub`.
    name: String,
    client: Client,
}

/// One customer: until `deadline`, a fresh order (65 %), another
/// customer's key with a body of its own (5 %: scoped keys make it a fresh
/// key, never a replay of the other's order), a retry of one of its
/// earlier keys with the same body (20 %) or a reuse of an earlier key with
/// another body (10 %).
///
/// With a `pace` it is open-loop: request `n` leaves at `start + n·pace`
/// (late ones at once), each answered in a task of its own, and the run
/// ends once every answer is in (or the client's timeout passed).
async fn customer(
    me: Customer,
    seed: u64,
    products: Vec<String>,
    history: History,
    shared: Keys,
    deadline: Instant,
    pace: Option<Duration>,
) {
    let start = Instant::now();
    let mut in_flight = tokio::task::JoinSet::new();
    let mut sent = 0u32;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut earlier: Vec<(String, Value)> = Vec::new();
    let mut mine: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut n = 0u32;
    while Instant::now() < deadline {
        let roll: f64 = rng.random();
        let (key, body, intent) = if earlier.is_empty() || roll < 0.7 {
            // Drawn whether or not it is used, so the seed's stream (and
            // every body after it) does not depend on the interleaving.
            let pick = rng.random::<u32>() as usize;
            // One draw from everyone's keys; one of this customer's own
            // (or one it borrowed before) means a fresh key instead.
            let borrowed = (roll >= 0.65)
                .then(|| {
                    let keys = shared.lock().ok()?;
                    let key = keys.get(pick % keys.len().max(1))?;
                    (!mine.contains(key)).then(|| key.clone())
                })
                .flatten();
            let key = borrowed.unwrap_or_else(|| {
                n += 1;
                let key = format!("chaos-{seed:x}-{}-{n}", me.index);
                if let Ok(mut keys) = shared.lock() {
                    keys.push(key.clone());
                }
                key
            });
            let lines = rng.random_range(1..=2usize).min(products.len());
            let first = rng.random_range(0..products.len());
            let items: Vec<Value> = (0..lines)
                .map(|l| {
                    json!({
                        "product_id": products[(first + l) % products.len()],
                        "quantity": rng.random_range(1..=3),
                    })
                })
                .collect();
            let body = json!({"items": items});
            mine.insert(key.clone());
            earlier.push((key.clone(), body.clone()));
            (key, body, Intent::Fresh)
        } else if roll < 0.9 {
            let (key, body) = earlier[rng.random_range(0..earlier.len())].clone();
            (key, body, Intent::Retry)
        } else {
            let (key, mut body) = earlier[rng.random_range(0..earlier.len())].clone();
            if let Some(q) = body["items"][0]["quantity"].as_i64() {
                body["items"][0]["quantity"] = json!(q + 10);
            }
            (key, body, Intent::Reuse)
        };
        if let Some(pace) = pace {
            sent += 1;
            let (client, history) = (me.client.clone(), history.clone());
            let (index, name) = (me.index, me.name.clone());
            in_flight.spawn(async move {
                let answer = client.post_json("/api/orders", &body, Some(&key)).await;
                history.record(Op {
                    client: index,
                    customer: name,
                    key,
                    intent,
                    body,
                    answer,
                });
            });
            // Reap what has finished so the set stays small.
            while in_flight.try_join_next().is_some() {}
            tokio::time::sleep_until(start + pace * sent).await;
            continue;
        }
        let answer = me.client.post_json("/api/orders", &body, Some(&key)).await;
        // A failing edge answers in microseconds; back off a little, as a
        // real client would, so a fault does not flood the history.
        let pause = if answer.status.is_none_or(|s| s >= 500) {
            rng.random_range(50..150)
        } else {
            rng.random_range(0..20)
        };
        history.record(Op {
            client: me.index,
            customer: me.name.clone(),
            key,
            intent,
            body,
            answer,
        });
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    while in_flight.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Answer;

    fn op(key: &str, status: u16, kind: &str, intent: Intent) -> Op {
        let body = json!({"type": format!("urn:shopeasy:problem:{kind}")});
        Op {
            client: 0,
            customer: "c".to_owned(),
            key: key.to_owned(),
            intent,
            body: json!({"items": []}),
            answer: Answer {
                status: Some(status),
                headers: Vec::new(),
                body: body.to_string().into_bytes(),
                elapsed: Duration::ZERO,
                error: None,
            },
        }
    }

    fn stored(snapshot: &mut Snapshot, key: &str, id: &str, status: &str) {
        snapshot
            .keys
            .insert(("c".to_owned(), key.to_owned()), id.to_owned());
        snapshot
            .orders
            .insert(id.to_owned(), ("c".to_owned(), status.to_owned()));
    }

    #[test]
    fn a_shed_request_must_not_have_made_an_order() {
        let history = History::default();
        // Only refused: any live order of these keys is a violation.
        history.record(op("k1", 503, "overloaded", Intent::Fresh));
        history.record(op("k2", 429, "rate-limited", Intent::Fresh));
        history.record(op("k2", 503, "overloaded", Intent::Retry));
        // Refused, then an unknown outcome: an order may exist.
        history.record(op("k3", 503, "overloaded", Intent::Fresh));
        history.record(op("k3", 504, "gateway-timeout", Intent::Retry));
        // Another 503 is not a refusal before work.
        history.record(op("k4", 503, "dependency-unavailable", Intent::Fresh));
        let mut snapshot = Snapshot::default();
        assert!(shed_made_no_order(&history, &snapshot).is_empty());
        for (key, id) in [("k1", "o1"), ("k2", "o2"), ("k3", "o3"), ("k4", "o4")] {
            stored(&mut snapshot, key, id, "confirmed");
        }
        let found = shed_made_no_order(&history, &snapshot);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].contains("k1") && found[1].contains("k2"),
            "{found:?}"
        );
        // A rejected order is Inventory's "short": only a key also answered
        // 409 out-of-stock may have made one.
        stored(&mut snapshot, "k1", "o1", "rejected");
        assert_eq!(shed_made_no_order(&history, &snapshot).len(), 2);
        history.record(op("k5", 503, "overloaded", Intent::Fresh));
        history.record(op("k5", 409, "out-of-stock", Intent::Retry));
        stored(&mut snapshot, "k5", "o5", "rejected");
        assert_eq!(shed_made_no_order(&history, &snapshot).len(), 2);
        stored(&mut snapshot, "k5", "o5", "confirmed");
        assert_eq!(shed_made_no_order(&history, &snapshot).len(), 3);
        assert!(is_shed(&op("k", 429, "rate-limited", Intent::Fresh)));
        assert!(!is_shed(&op("k", 503, "bad-gateway", Intent::Fresh)));
    }
}
