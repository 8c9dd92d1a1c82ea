//! `breaker`: the lesson's 12 ticks, with Order's real breaker on
//! Inventory.
//!
//! Each tick one customer orders one unit of a product whose stock is
//! cached, so the order's only call to Inventory is `ReserveStock`, with no
//! retries: one tick, at most one call. Inventory's edge is down (the
//! fault proxy refuses connections) until tick 7. The breaker opens after
//! 3 failures out of 3 calls in its window, stays open 3.5 ticks, then lets
//! one trial through (tick 6, Inventory still down: open again; tick 10,
//! Inventory up: closed). The column "sent" is whether Order made the call
//! (its `shopeasy_downstream_request_duration_seconds{target="inventory"}`
//! count, refusals excluded); "state after" is `/admin/resilience`.

use tokio::time::{Instant, sleep_until};

use super::{Outcome, Run, Scene, SceneInfo, TICK, Timeline, settings, system};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "breaker",
    summary: "the circuit breaker over 12 ticks: closed, open, one probe, closed again",
    help: "The lesson's 12-tick circuit breaker, with Order's real breaker on its \
Inventory edge (a tick is 200 ms). Every tick one order is placed; its one call to \
Inventory is ReserveStock (stock is cached, no retries). The order-inventory proxy \
refuses connections until tick 7. Settings: 3 failed calls of 3 open the breaker \
(resilience.inventory.failure_ratio 1, minimum_calls 3, sampling_window 0.5 s), it \
stays open 3.5 ticks (break_duration 0.7 s) and then lets exactly one trial through. \
The table shows each tick's result, the state after it, and whether the call was \
sent to Inventory at all.",
    expected: "Inventory reached at most 6 times in 12 ticks; the breaker opens, and \
closes after the first good probe",
};

/// Ticks of the scene, as in the lesson.
const TICKS: u32 = 12;
/// The tick Inventory is back (the lesson's `tick >= 7`).
const UP_FROM: u32 = 7;
/// The edge broken.
const EDGE: &str = "order-inventory";

/// The scene's settings (on top of the shared quiet ones).
pub const ENV: [(&str, &str); 8] = [
    ("RESILIENCE__INVENTORY__MAX_RETRIES", "0"),
    ("RESILIENCE__INVENTORY__FAILURE_RATIO", "1"),
    ("RESILIENCE__INVENTORY__MINIMUM_CALLS", "3"),
    ("RESILIENCE__INVENTORY__SAMPLING_WINDOW_SECONDS", "0.5"),
    ("RESILIENCE__INVENTORY__BREAK_DURATION_SECONDS", "0.7"),
    ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.15"),
    ("RESILIENCE__INVENTORY__CONNECT_TIMEOUT_SECONDS", "0.15"),
    ("RESILIENCE__STOCK_CACHE__TTL_SECONDS", "3600"),
];

/// Runs the scene.
///
/// # Errors
/// The system does not start or answer.
pub async fn run(run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::Breaker);
    let live = system(run, &settings(&ENV), &mut outcome).await?;
    let result = ticks(&live, &mut outcome).await;
    let healed = live.set_enabled(EDGE, true).await;
    let stopped = live.stop().await;
    result.and(healed).and(stopped)?;
    Ok(outcome)
}

async fn ticks(live: &super::live::Live, outcome: &mut Outcome) -> anyhow::Result<()> {
    let token = live.sign_in("breaker").await?;
    let product = live.product(0).await?;
    // One good order first: the product's stock is cached, so each tick's
    // order makes exactly one call (the reservation).
    let warm = live
        .order(&token, &product, &uuid::Uuid::new_v4().to_string())
        .await?;
    anyhow::ensure!(
        warm.status().as_u16() == 201,
        "the first order was not confirmed: {}",
        warm.status()
    );
    // That success leaves the sampling window before tick 0.
    tokio::time::sleep(TICK * 3).await;
    live.set_enabled(EDGE, false).await?;

    let mut table = Timeline::new(
        "the breaker over 12 ticks",
        &["tick", "inventory", "result", "sent", "state after"],
    );
    let start = Instant::now();
    let mut calls = 0_u32;
    let mut states = Vec::new();
    let mut results = Vec::new();
    for tick in 0..TICKS {
        sleep_until(start + TICK * tick).await;
        if tick == UP_FROM {
            live.set_enabled(EDGE, true).await?;
        }
        let before = live.metrics().await?.inventory_calls();
        let res = live
            .order(&token, &product, &uuid::Uuid::new_v4().to_string())
            .await?;
        let sent = live.metrics().await?.inventory_calls() - before > 0.0;
        let status = res.status().as_u16();
        let result = match (sent, status) {
            (true, 201) => "ok",
            (true, _) => "error",
            (false, _) => "refused at once",
        };
        let state = live.inventory_breaker().await?;
        calls += u32::from(sent);
        table.push([
            tick.to_string(),
            if tick >= UP_FROM { "up" } else { "down" }.to_owned(),
            format!("{result} ({status})"),
            if sent { "yes" } else { "no" }.to_owned(),
            state.clone(),
        ]);
        results.push(result);
        states.push(state);
    }
    outcome.timelines.push(table);

    let opened = states.iter().any(|s| s == "open");
    // The first tick at which a call was sent to an Inventory that was up:
    // that probe must succeed and close the breaker.
    let first_good = (UP_FROM..TICKS).find(|&t| results[t as usize] != "refused at once");
    let closed_at_probe =
        first_good.is_some_and(|t| results[t as usize] == "ok" && states[t as usize] == "closed");
    let stays_closed =
        first_good.is_some_and(|t| states[t as usize..].iter().all(|s| s == "closed"));
    outcome.figure("calls_to_inventory", f64::from(calls));
    outcome.figure("ticks", f64::from(TICKS));
    outcome.figure("first_good_probe_tick", first_good.map_or(-1.0, f64::from));
    outcome.measured = format!(
        "calls to Inventory: {calls} of {TICKS}; {}",
        match first_good {
            Some(t) if closed_at_probe =>
                format!("the probe at tick {t} succeeded and closed the breaker"),
            Some(t) => format!("the call at tick {t} did not close the breaker"),
            None => "no probe reached Inventory after it was back".to_owned(),
        }
    );
    outcome.passed = calls <= 6 && opened && closed_at_probe && stays_closed;
    Ok(())
}
