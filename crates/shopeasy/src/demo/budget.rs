//! `budget`: Order's retries on Inventory while Inventory is down, with the
//! retry budget and without it.
//!
//! Inventory's edge refuses connections; one customer places orders one
//! after another (stock cached, so each order makes one call, retried up
//! to twice). Attempts per call are Order's own counts: calls
//! (`shopeasy_downstream_request_duration_seconds_count{target="inventory"}`)
//! plus retries (`shopeasy_downstream_retries_total{outcome="retried"}`).
//! The breaker is kept out of the way (it would stop the calls before the
//! budget does). Without the budget (`ratio` 1, a huge minimum) every call
//! makes 3 attempts; with it (`ratio` 0.2, 2 per window) they stay within
//! `1 + ratio + min / requests`.
//!
//! Each order is also checked against the proxy's fault windows: orders
//! are sequential, so an order whose call was retried had its retries
//! while it ran, and that must lie inside a window of `order-inventory`;
//! the orders placed before the fault must not have been retried.

use super::{
    Outcome, Run, Scene, SceneInfo, Timeline, live::Live, live::unix_ms, settings, system,
};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "budget",
    summary: "a retry budget while Inventory is down: attempts per call with and without it",
    help: "Inventory's edge refuses connections while one customer places 20 orders one \
after another; each order makes one call to Inventory, which Order may retry twice \
(resilience.inventory.max_retries 2). Without a budget (resilience.retry_budget.ratio 1, \
min_retries_per_window 100000) every call is tried 3 times. With the budget (ratio 0.2, \
min_retries_per_window 2, window 10 s) retries are capped at a fifth of the calls plus \
2. Attempts are counted from Order's metrics; every retried order is checked to lie \
inside a fault window the proxy recorded on order-inventory. The breaker is set not to \
open (minimum_calls 10000), so the budget is what limits the retries.",
    expected: "with the budget, attempts per call ≤ 1 + ratio + min/requests = 1.3; \
without it, 3; every retried call inside a fault window, none outside",
};

/// Orders placed while Inventory is down.
const REQUESTS: u32 = 20;
/// Orders placed before, while it is up (none may be retried).
const BEFORE: u32 = 3;
/// The budget's ratio and minimum (as the settings below say).
const RATIO: f64 = 0.2;
const MIN_PER_WINDOW: u32 = 2;
/// The edge broken.
const EDGE: &str = "order-inventory";

/// Settings both halves share.
const COMMON: [(&str, &str); 6] = [
    ("RESILIENCE__INVENTORY__MAX_RETRIES", "2"),
    ("RESILIENCE__INVENTORY__MINIMUM_CALLS", "10000"),
    ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.15"),
    ("RESILIENCE__INVENTORY__CONNECT_TIMEOUT_SECONDS", "0.15"),
    ("RESILIENCE__STOCK_CACHE__TTL_SECONDS", "3600"),
    ("RESILIENCE__RETRY_BUDGET__WINDOW_SECONDS", "10"),
];

/// The budget on.
pub const WITH: [(&str, &str); 2] = [
    ("RESILIENCE__RETRY_BUDGET__RATIO", "0.2"),
    ("RESILIENCE__RETRY_BUDGET__MIN_RETRIES_PER_WINDOW", "2"),
];

/// The budget off: every retry allowed.
pub const WITHOUT: [(&str, &str); 2] = [
    ("RESILIENCE__RETRY_BUDGET__RATIO", "1"),
    ("RESILIENCE__RETRY_BUDGET__MIN_RETRIES_PER_WINDOW", "100000"),
];

/// One half's measurements.
#[derive(Debug, Default)]
struct Half {
    calls: f64,
    retries: f64,
    retried_inside: u32,
    retried_outside: u32,
    retried_before_fault: u32,
}

impl Half {
    fn per_call(&self) -> f64 {
        if self.calls > 0.0 {
            (self.calls + self.retries) / self.calls
        } else {
            0.0
        }
    }
}

/// Runs the scene.
///
/// # Errors
/// A system does not start or answer.
pub async fn run(run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::Budget);
    let mut table = Timeline::new(
        "attempts per call while Inventory is down",
        &[
            "budget",
            "calls",
            "retries",
            "attempts per call",
            "bound",
            "retried outside a window",
        ],
    );
    let bound = 1.0 + RATIO + f64::from(MIN_PER_WINDOW) / f64::from(REQUESTS);
    let env_with: Vec<_> = COMMON.iter().chain(&WITH).copied().collect();
    let with = half(run, &settings(&env_with), &mut outcome).await?;
    table.push(row("on (0.2, min 2)", &with, &format!("≤ {bound:.2}")));
    let without = super::without(run, "the budget", &mut outcome, async |outcome| {
        let env_without: Vec<_> = COMMON.iter().chain(&WITHOUT).copied().collect();
        half(run, &settings(&env_without), outcome).await
    })
    .await?;
    if let Some(w) = &without {
        table.push(row("off", w, "3.00"));
    }
    outcome.timelines.push(table);

    outcome.figure("attempts_per_call_with_budget", with.per_call());
    outcome.figure("bound", bound);
    let outside = with.retried_outside + without.as_ref().map_or(0, |w| w.retried_outside);
    let before = with.retried_before_fault + without.as_ref().map_or(0, |w| w.retried_before_fault);
    let inside = with.retried_inside + without.as_ref().map_or(0, |w| w.retried_inside);
    outcome.figure("retried_calls_inside_window", f64::from(inside));
    outcome.figure("retried_calls_outside_window", f64::from(outside + before));
    if let Some(w) = &without {
        outcome.figure("attempts_per_call_without_budget", w.per_call());
    }
    outcome.measured = format!(
        "attempts per call: {:.2} with the budget (bound {bound:.2}){}; retried calls inside \
         a fault window: {inside}, outside: {}",
        with.per_call(),
        without
            .as_ref()
            .map_or(String::new(), |w| format!(", {:.2} without", w.per_call())),
        outside + before,
    );
    outcome.notes.push(
        "attempts are Order's own counts (calls + retried decisions on the inventory \
         target); windows are the fault proxy's (GET /proxies/order-inventory/windows)"
            .to_owned(),
    );
    outcome.passed = with.per_call() <= bound + 1e-9
        && with.calls >= f64::from(REQUESTS)
        && without
            .as_ref()
            .is_none_or(|w| w.per_call() > bound && w.per_call() <= 3.0)
        && outside + before == 0
        && inside > 0;
    Ok(outcome)
}

fn row(name: &str, half: &Half, bound: &str) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{:.0}", half.calls),
        format!("{:.0}", half.retries),
        format!("{:.2}", half.per_call()),
        bound.to_owned(),
        half.retried_outside.to_string(),
    ]
}

/// One system, one run of orders: a few with Inventory up, then
/// [`REQUESTS`] with it down.
async fn half(run: &Run, env: &[(&str, &str)], outcome: &mut Outcome) -> anyhow::Result<Half> {
    let live = system(run, env, outcome).await?;
    let measured = orders(&live).await;
    let healed = live.set_enabled(EDGE, true).await;
    let stopped = live.stop().await;
    let measured = measured?;
    healed.and(stopped)?;
    Ok(measured)
}

async fn orders(live: &Live) -> anyhow::Result<Half> {
    let token = live.sign_in("budget").await?;
    let product = live.product(0).await?;
    let since = unix_ms();
    let mut half = Half::default();
    // (sent, answered, retried) of each order, wall clock.
    let mut placed = Vec::new();
    for i in 0..BEFORE + REQUESTS {
        if i == BEFORE {
            live.set_enabled(EDGE, false).await?;
        }
        let before = live.metrics().await?;
        let sent = unix_ms();
        live.order(&token, &product, &uuid::Uuid::new_v4().to_string())
            .await?;
        let answered = unix_ms();
        let after = live.metrics().await?;
        let calls = after.inventory_calls() - before.inventory_calls();
        let retries = after.inventory_retries() - before.inventory_retries();
        if i >= BEFORE {
            half.calls += calls;
            half.retries += retries;
        } else if retries > 0.0 {
            half.retried_before_fault += 1;
        }
        placed.push((sent, answered, retries > 0.0));
    }
    // The last window closes when the API has answered.
    live.set_enabled(EDGE, true).await?;
    let windows = live.windows(EDGE, since).await?;
    for (sent, answered, retried) in placed {
        if !retried {
            continue;
        }
        let inside = windows.iter().any(|w| {
            w.started_unix_ms <= sent && w.ended_unix_ms.is_none_or(|end| answered <= end)
        });
        if inside {
            half.retried_inside += 1;
        } else {
            half.retried_outside += 1;
        }
    }
    Ok(half)
}
