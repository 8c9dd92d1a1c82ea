//! `slow-neighbour`: the lesson's opening — a provider that answers, but
//! slowly — with ShopEasy's attempt timeout and bulkhead on, and off.
//!
//! Inventory answers in 1.5 s (a `latency` toxic on `order-inventory`).
//! For 8 ticks, every tick one order and one catalogue request arrive,
//! without waiting for the earlier ones. At the end of tick 8 the scene
//! counts the orders still waiting for Inventory — the lesson's "busy
//! threads" — and, once everything has answered, how long the slowest
//! order and catalogue request took. With the mechanisms on (an attempt
//! timeout of 0.3 s, 4 slots) nothing is left waiting; with them off (a
//! 10 s timeout, 10000 slots, a second system) every order since the first
//! tick still waits. The catalogue does not call Inventory, and the
//! gateway limits each route on its own, so it answers at once both ways.

use std::time::Duration;

use serde_json::json;
use tokio::{
    task::JoinSet,
    time::{Instant, sleep_until},
};

use super::{Outcome, Run, Scene, SceneInfo, TICK, Timeline, live::Live, settings, system};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "slow-neighbour",
    summary: "Inventory turns slow: what orders and the catalogue see with and without timeout and bulkhead",
    help: "Inventory's edge gets a 1.5 s latency toxic. For 8 ticks (200 ms each) one \
order and one catalogue request arrive every tick. With the attempt timeout and the \
bulkhead on (resilience.inventory.timeout_seconds 0.3, max_concurrency 4) every order \
is answered within the timeout (pending, reserved later by the outbox) and nothing is \
left waiting for Inventory. With them off (a second system: timeout 10 s, \
max_concurrency 10000) the orders pile up waiting for the slow neighbour. The \
catalogue, which does not call Inventory, answers at once in both.",
    expected: "with timeout and bulkhead no order is still waiting at the end of tick 8 \
and each is answered within 3 ticks; without them most are still waiting; the \
catalogue answers every request at once both ways",
};

/// Ticks of arrivals.
const TICKS: u32 = 8;
/// Inventory's added latency.
const LATENCY_MS: u64 = 1500;
/// The edge slowed.
const EDGE: &str = "order-inventory";

/// Settings both halves share: no retries, the breaker's default rules, a
/// gateway that waits for as long as Order does.
const COMMON: [(&str, &str); 3] = [
    ("RESILIENCE__INVENTORY__MAX_RETRIES", "0"),
    ("RESILIENCE__STOCK_CACHE__TTL_SECONDS", "3600"),
    ("RESILIENCE__GATEWAY__ACTIVITY_TIMEOUT_SECONDS", "30"),
];

/// The mechanisms on.
pub const ON: [(&str, &str); 2] = [
    ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.3"),
    ("RESILIENCE__INVENTORY__MAX_CONCURRENCY", "4"),
];

/// The mechanisms off: a timeout longer than the slowness, no useful
/// bulkhead.
pub const OFF: [(&str, &str); 2] = [
    ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "10"),
    ("RESILIENCE__INVENTORY__MAX_CONCURRENCY", "10000"),
];

/// One half's measurements.
#[derive(Debug, Default)]
struct Half {
    waiting_at_end: usize,
    slowest_order: Duration,
    slowest_catalogue: Duration,
    catalogue_ok: usize,
    orders_accepted: usize,
}

/// Runs the scene.
///
/// # Errors
/// A system does not start or answer.
pub async fn run(run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::SlowNeighbour);
    let mut table = Timeline::new(
        "8 ticks of one order and one catalogue request while Inventory answers in 1.5 s",
        &[
            "timeout and bulkhead",
            "orders waiting after tick 8",
            "slowest order",
            "orders accepted",
            "catalogue answered",
            "slowest catalogue",
        ],
    );
    let on_env: Vec<_> = COMMON.iter().chain(&ON).copied().collect();
    let on = half(run, &settings(&on_env), &mut outcome).await?;
    table.push(row("on (0.3 s, 4 slots)", &on));
    let off = super::without(run, "the mechanisms", &mut outcome, async |outcome| {
        let env: Vec<_> = COMMON.iter().chain(&OFF).copied().collect();
        half(run, &settings(&env), outcome).await
    })
    .await?;
    if let Some(off) = &off {
        table.push(row("off (10 s, no limit)", off));
    }
    outcome.timelines.push(table);
    outcome.figure("waiting_with", on.waiting_at_end as f64);
    outcome.figure("slowest_order_with_ms", on.slowest_order.as_millis() as f64);
    if let Some(off) = &off {
        outcome.figure("waiting_without", off.waiting_at_end as f64);
    }
    let catalogue_fine = |h: &Half| h.catalogue_ok == TICKS as usize && h.slowest_catalogue < TICK;
    outcome.measured = format!(
        "orders still waiting after tick 8: {} with timeout and bulkhead{}; the catalogue \
         answered {} of {TICKS} (slowest {} ms)",
        on.waiting_at_end,
        off.as_ref()
            .map_or(String::new(), |o| format!(", {} without", o.waiting_at_end)),
        on.catalogue_ok,
        on.slowest_catalogue.as_millis(),
    );
    outcome.passed = on.waiting_at_end == 0
        && on.slowest_order < TICK * 3
        && on.orders_accepted == TICKS as usize
        && catalogue_fine(&on)
        && off
            .as_ref()
            .is_none_or(|o| o.waiting_at_end * 2 >= TICKS as usize && catalogue_fine(o));
    Ok(outcome)
}

fn row(name: &str, half: &Half) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{} of {TICKS}", half.waiting_at_end),
        format!("{} ms", half.slowest_order.as_millis()),
        format!("{} of {TICKS}", half.orders_accepted),
        format!("{} of {TICKS}", half.catalogue_ok),
        format!("{} ms", half.slowest_catalogue.as_millis()),
    ]
}

async fn half(run: &Run, env: &[(&str, &str)], outcome: &mut Outcome) -> anyhow::Result<Half> {
    let live = system(run, env, outcome).await?;
    let measured = ticks(&live).await;
    let healed = live.remove_toxic(EDGE, "slow").await;
    let stopped = live.stop().await;
    let measured = measured?;
    healed.and(stopped)?;
    Ok(measured)
}

/// What one request came to: order or catalogue, its status (`None`: no
/// answer), how long it took.
type Answered = (bool, Option<u16>, Duration);

async fn ticks(live: &Live) -> anyhow::Result<Half> {
    let token = live.sign_in("slow-neighbour").await?;
    let product = live.product(0).await?;
    live.order(&token, &product, &uuid::Uuid::new_v4().to_string())
        .await?;
    live.add_toxic(
        EDGE,
        &json!({"name": "slow", "type": "latency", "stream": "downstream",
                "attributes": {"latency": LATENCY_MS, "jitter": 0}}),
    )
    .await?;
    let gateway = live.endpoints.gateway.clone();
    let mut requests: JoinSet<Answered> = JoinSet::new();
    let start = Instant::now();
    for tick in 0..TICKS {
        sleep_until(start + TICK * tick).await;
        let (http, url) = (live.http.clone(), format!("{gateway}/api/orders"));
        let (token, product) = (token.clone(), product.clone());
        requests.spawn(async move {
            let sent = Instant::now();
            let res = http
                .post(url)
                .bearer_auth(token)
                .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                .json(&json!({"items": [{"product_id": product, "quantity": 1}]}))
                .send()
                .await;
            (true, res.ok().map(|r| r.status().as_u16()), sent.elapsed())
        });
        let (http, url) = (live.http.clone(), format!("{gateway}/api/products?limit=5"));
        requests.spawn(async move {
            let sent = Instant::now();
            let res = http.get(url).send().await;
            (false, res.ok().map(|r| r.status().as_u16()), sent.elapsed())
        });
    }
    sleep_until(start + TICK * TICKS).await;
    // Orders still waiting now: sent, not answered.
    let mut answered = Vec::new();
    while let Some(done) = requests.try_join_next() {
        answered.push(done?);
    }
    let orders_done = answered.iter().filter(|(order, _, _)| *order).count();
    let waiting_at_end = TICKS as usize - orders_done;
    answered.extend(requests.join_all().await);
    let mut half = Half {
        waiting_at_end,
        ..Half::default()
    };
    for (order, status, took) in answered {
        let ok = status.is_some_and(|s| (200..300).contains(&s));
        if order {
            half.orders_accepted += usize::from(ok);
            half.slowest_order = half.slowest_order.max(took);
        } else {
            half.catalogue_ok += usize::from(ok);
            half.slowest_catalogue = half.slowest_catalogue.max(took);
        }
    }
    Ok(half)
}
