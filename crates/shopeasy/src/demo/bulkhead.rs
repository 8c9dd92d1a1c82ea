//! `bulkhead`: a slow neighbour may hold only its own slots.
//!
//! Inventory turns slow (a 600 ms `latency` toxic on `order-inventory`)
//! and 12 orders arrive at once. With Order's bulkhead on Inventory at 4
//! calls in flight (`resilience.inventory.max_concurrency`), 4 calls wait
//! for Inventory and the other 8 are shed at once — answered in
//! milliseconds as pending orders, their reservations handed to the
//! outbox. Without it (10000 slots) all 12 wait. Calls are Order's own
//! counts (`shopeasy_downstream_request_duration_seconds_count{target=
//! "inventory"}`, `outcome="overloaded"` for the shed ones).

use std::time::Duration;

use serde_json::json;
use tokio::{task::JoinSet, time::Instant};

use super::{Outcome, Run, Scene, SceneInfo, Timeline, live::Live, settings, system};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "bulkhead",
    summary: "a slow Inventory holds at most its own 4 slots; the rest is shed at once",
    help: "Inventory's edge gets a 600 ms latency toxic and 12 orders arrive at once \
(stock cached, so each order makes one call to Inventory; no retries; the breaker kept \
out of the way). With Order's bulkhead on Inventory at 4 calls in flight \
(resilience.inventory.max_concurrency 4) four calls wait for Inventory and the other \
eight are shed at once: answered in milliseconds as pending orders, reserved later by \
the outbox. Without it (max_concurrency 10000) all twelve wait for the slow neighbour.",
    expected: "with the bulkhead at most 4 calls wait for Inventory and the other orders \
are answered at once; without it all 12 wait",
};

/// Orders sent at once.
const ORDERS: usize = 12;
/// Slots of the bulkhead.
const SLOTS: usize = 4;
/// Inventory's added latency.
const LATENCY_MS: u64 = 600;
/// An answer faster than this did not wait for Inventory.
const AT_ONCE: Duration = Duration::from_millis(300);
/// The edge slowed.
const EDGE: &str = "order-inventory";

/// Settings both halves share.
const COMMON: [(&str, &str); 5] = [
    ("RESILIENCE__INVENTORY__MAX_RETRIES", "0"),
    ("RESILIENCE__INVENTORY__MINIMUM_CALLS", "10000"),
    ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "2"),
    ("RESILIENCE__STOCK_CACHE__TTL_SECONDS", "3600"),
    ("RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS", "10"),
];

/// One half's measurements.
#[derive(Debug, Default)]
struct Half {
    sent: f64,
    shed: f64,
    at_once: usize,
    slowest: Duration,
    accepted: usize,
}

/// Runs the scene.
///
/// # Errors
/// A system does not start or answer.
pub async fn run(run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::Bulkhead);
    let mut table = Timeline::new(
        "12 orders at once while Inventory answers in 600 ms",
        &[
            "bulkhead",
            "sent to Inventory",
            "shed at once",
            "answered < 300 ms",
            "slowest",
            "accepted",
        ],
    );
    let with_env: Vec<_> = COMMON
        .iter()
        .chain(&[("RESILIENCE__INVENTORY__MAX_CONCURRENCY", "4")])
        .copied()
        .collect();
    let with = half(run, &settings(&with_env), &mut outcome).await?;
    table.push(row("4 slots", &with));
    let without = super::without(run, "the bulkhead", &mut outcome, async |outcome| {
        let env: Vec<_> = COMMON
            .iter()
            .chain(&[("RESILIENCE__INVENTORY__MAX_CONCURRENCY", "10000")])
            .copied()
            .collect();
        half(run, &settings(&env), outcome).await
    })
    .await?;
    if let Some(w) = &without {
        table.push(row("off", w));
    }
    outcome.timelines.push(table);
    outcome.figure("sent_with_bulkhead", with.sent);
    outcome.figure("shed_with_bulkhead", with.shed);
    outcome.figure("answered_at_once_with_bulkhead", with.at_once as f64);
    if let Some(w) = &without {
        outcome.figure("sent_without_bulkhead", w.sent);
        outcome.figure("answered_at_once_without_bulkhead", w.at_once as f64);
    }
    outcome.measured = format!(
        "with 4 slots: {:.0} calls waited for Inventory, {:.0} shed, {} orders answered in \
         under 300 ms{}",
        with.sent,
        with.shed,
        with.at_once,
        without.as_ref().map_or(String::new(), |w| format!(
            "; without: {:.0} waited, {} answered in under 300 ms",
            w.sent, w.at_once
        )),
    );
    outcome.passed = with.sent <= SLOTS as f64
        && with.sent + with.shed >= ORDERS as f64
        && with.at_once >= ORDERS - SLOTS
        && with.accepted == ORDERS
        && without
            .as_ref()
            .is_none_or(|w| w.sent >= ORDERS as f64 && w.at_once == 0);
    Ok(outcome)
}

fn row(name: &str, half: &Half) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{:.0}", half.sent),
        format!("{:.0}", half.shed),
        half.at_once.to_string(),
        format!("{} ms", half.slowest.as_millis()),
        format!("{} of {ORDERS}", half.accepted),
    ]
}

async fn half(run: &Run, env: &[(&str, &str)], outcome: &mut Outcome) -> anyhow::Result<Half> {
    let live = system(run, env, outcome).await?;
    let measured = burst(&live).await;
    let healed = live.remove_toxic(EDGE, "slow").await;
    let stopped = live.stop().await;
    let measured = measured?;
    healed.and(stopped)?;
    Ok(measured)
}

async fn burst(live: &Live) -> anyhow::Result<Half> {
    let token = live.sign_in("bulkhead").await?;
    let product = live.product(0).await?;
    live.order(&token, &product, &uuid::Uuid::new_v4().to_string())
        .await?;
    live.add_toxic(
        EDGE,
        &json!({"name": "slow", "type": "latency", "stream": "downstream",
                "attributes": {"latency": LATENCY_MS, "jitter": 0}}),
    )
    .await?;
    let before = live.metrics().await?;
    let mut orders = JoinSet::new();
    for _ in 0..ORDERS {
        let http = live.http.clone();
        let url = format!("{}/api/orders", live.endpoints.gateway);
        let (token, product) = (token.clone(), product.clone());
        orders.spawn(async move {
            let started = Instant::now();
            let res = http
                .post(url)
                .bearer_auth(token)
                .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                .json(&json!({"items": [{"product_id": product, "quantity": 1}]}))
                .send()
                .await;
            (res.map(|r| r.status().as_u16()), started.elapsed())
        });
    }
    let answers = orders.join_all().await;
    let after = live.metrics().await?;
    let shed_of = |c: &super::live::Counters| {
        c.sum(
            "shopeasy_downstream_request_duration_seconds_count",
            &[("target", "inventory"), ("outcome", "overloaded")],
            &[],
        )
    };
    let mut half = Half {
        sent: after.inventory_calls() - before.inventory_calls(),
        shed: shed_of(&after) - shed_of(&before),
        ..Half::default()
    };
    for (status, took) in answers {
        let status = status?;
        half.accepted += usize::from(status == 201 || status == 202);
        half.at_once += usize::from(took < AT_ONCE);
        half.slowest = half.slowest.max(took);
    }
    Ok(half)
}
