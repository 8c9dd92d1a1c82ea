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

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::{Value, json};
use shopeasy_faults::{Stream, Toxic, ToxicKind};
use tokio::time::Instant;

use crate::{
    client::Client,
    cluster::Cluster,
    history::{History, Intent, Op},
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
}

impl ChaosReport {
    /// A few lines for the test log.
    pub fn summary(&self) -> String {
        format!(
            "seed {} ops {} statuses {:?} orders {} keys sent by several customers {} \
             drained in {:?} violations {}",
            self.seed,
            self.history.ops().len(),
            self.statuses,
            self.snapshot.orders.len(),
            self.shared_keys(),
            self.drained_in,
            self.violations.len()
        )
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
    for (i, (edge, slow_ms)) in config.edges.iter().enumerate() {
        let proxy = cluster.proxy(edge).await;
        let steps = schedule(config.seed.wrapping_add(i as u64), config.duration);
        let slow_ms = *slow_ms;
        tasks.spawn(async move {
            for step in steps {
                if Instant::now() >= deadline {
                    break;
                }
                apply(&proxy, step.fault, slow_ms).await;
                tokio::time::sleep(
                    step.hold
                        .min(deadline.saturating_duration_since(Instant::now())),
                )
                .await;
                clear(&proxy, step.fault).await;
            }
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
        tasks.spawn(async move {
            let me = Customer {
                index: c,
                name,
                client,
            };
            customer(me, seed, products, history, shared, deadline).await;
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
    let mut violations = bank.lock().await.clone();
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
    })
}

async fn apply(proxy: &shopeasy_faults::FaultProxy, fault: Option<Fault>, slow_ms: u64) {
    let toxic = match fault {
        None => return,
        Some(Fault::Down) => {
            proxy.set_enabled(false).await;
            return;
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
    let _ = proxy.add_toxic(toxic.named("chaos"));
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
async fn customer(
    me: Customer,
    seed: u64,
    products: Vec<String>,
    history: History,
    shared: Keys,
    deadline: Instant,
) {
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
}
