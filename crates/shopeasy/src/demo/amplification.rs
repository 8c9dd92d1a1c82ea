//! `amplification`: the lesson's 3 × 3 × 3 = 27, and what ShopEasy's
//! chain allows and does.
//!
//! The numbers come from the start-up policy check (`crate::policy`,
//! `shopeasy_resilience::plan::Plan`): the worst case of a chain is
//! `Π (1 + max_retries)`, and with retry budgets `Π (1 + ratio)`. The
//! lesson's three layers that each try 3 times make 27 attempts at the
//! bottom for one click; ShopEasy's gateway → order → inventory, with its
//! default settings, at most 9, and with its budgets about 1.44. Then the
//! measurement: Inventory's edge refuses connections and 50 orders go
//! through the gateway; the attempts that reach for Inventory per order are
//! Order's counts (calls + retries on `inventory`), the gateway's are its
//! `shopeasy_gateway_retries_total{outcome="retried"}` (embedded: one
//! recorder, read from Order's `/metrics`).

use shopeasy_gateway::settings::GatewaySettings;
use shopeasy_order::settings::OrderSettings;
use shopeasy_resilience::{
    budget::BudgetConfig,
    plan::{HopPolicy, Plan},
};
use std::time::Duration;

use super::{Outcome, Run, Scene, SceneInfo, Timeline, live::Live, settings, system};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "amplification",
    summary: "3 × 3 × 3 = 27 when every layer retries, against ShopEasy's measured attempts per call",
    help: "The start-up policy check computes a chain's worst case, the product of \
(1 + max_retries) over its hops, and its load with retry budgets in force. The lesson's \
three layers that each try 3 times: 27. ShopEasy's gateway → order → inventory with its \
default settings: the gateway retries only connection failures (of GETs and keyed \
POSTs), Order twice on Inventory, each from a budget. Then Inventory's edge refuses \
connections while 50 orders go through the gateway, and the attempts per order are \
counted: the gateway's retries and Order's calls and retries on Inventory.",
    expected: "the lesson's chain 27; ShopEasy's worst case 9; measured attempts at \
Inventory per order ≤ 1 + (ratio × calls + min) / orders, far below both",
};

/// Orders placed while Inventory is down.
const ORDERS: u32 = 50;
/// The edge broken.
const EDGE: &str = "order-inventory";

/// The scene's settings: the default retries and budgets (those the plan
/// is computed from), short timeouts, a breaker that does not open (it
/// would end the retries before the budget shows).
pub const ENV: [(&str, &str); 4] = [
    ("RESILIENCE__INVENTORY__MINIMUM_CALLS", "10000"),
    ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.15"),
    ("RESILIENCE__INVENTORY__CONNECT_TIMEOUT_SECONDS", "0.15"),
    ("RESILIENCE__STOCK_CACHE__TTL_SECONDS", "3600"),
];

/// The lesson's chain: three layers, each trying 3 times, each inner one
/// giving up before the one above, and no budget anywhere.
fn lesson_chain() -> Vec<HopPolicy> {
    let hop = |name, seconds| {
        HopPolicy::new(name, Duration::from_secs(seconds))
            .retries(2)
            .deadline(Duration::from_secs(seconds * 4))
    };
    vec![hop("gateway", 60), hop("orders", 10), hop("payment", 1)]
}

/// `Π (1 + max_retries)`: the most attempts the bottom sees for one
/// request (what [`Plan::worst_case_attempts`] computes for a valid plan).
fn worst_case(hops: &[HopPolicy]) -> u64 {
    hops.iter().map(|h| 1 + u64::from(h.max_retries)).product()
}

/// Runs the scene.
///
/// # Errors
/// The system does not start or answer, or the default settings fail the
/// policy check.
pub async fn run(run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::Amplification);
    let lesson = lesson_chain();
    let lesson_worst = worst_case(&lesson);
    let refusal = match Plan::new(lesson.clone()) {
        Ok(_) => "accepted".to_owned(),
        Err(e) => format!("refused: {}", rules(&e)),
    };
    let shopeasy =
        crate::policy::check_chain(&GatewaySettings::default(), &OrderSettings::default())?;
    let mut plans = Timeline::new(
        "the policy check: attempts at the bottom for one request",
        &[
            "chain",
            "tries per hop",
            "worst case",
            "with budgets",
            "policy check",
        ],
    );
    plans.push([
        "the lesson: gateway → orders → payment".to_owned(),
        tries(&lesson),
        lesson_worst.to_string(),
        "no budgets".to_owned(),
        refusal,
    ]);
    plans.push([
        "ShopEasy: gateway → order → inventory".to_owned(),
        tries(shopeasy.hops()),
        shopeasy.worst_case_attempts().to_string(),
        format!("{:.2}", shopeasy.budgeted_amplification()),
        "accepted".to_owned(),
    ]);
    outcome.timelines.push(plans);

    let live = system(run, &settings(&ENV), &mut outcome).await?;
    let measured = measure(&live).await;
    let healed = live.set_enabled(EDGE, true).await;
    let stopped = live.stop().await;
    let (gateway_retries, calls, retries) = measured?;
    healed.and(stopped)?;

    let budget = BudgetConfig::default();
    let orders = f64::from(ORDERS);
    let per_order = (calls + retries) / orders;
    // Every call the budget saw (the warm-up's too) earns `ratio`.
    let bound =
        1.0 + (budget.ratio * (calls + 1.0) + f64::from(budget.min_retries_per_window)) / orders;
    let mut table = Timeline::new(
        "measured: 50 orders while Inventory refuses connections",
        &["hop", "calls", "retries", "attempts per order"],
    );
    table.push([
        "gateway → order".to_owned(),
        format!("{orders:.0}"),
        format!("{gateway_retries:.0}"),
        format!("{:.2}", (orders + gateway_retries) / orders),
    ]);
    table.push([
        "order → inventory".to_owned(),
        format!("{calls:.0}"),
        format!("{retries:.0}"),
        format!("{per_order:.2}"),
    ]);
    outcome.timelines.push(table);
    let total = (orders + gateway_retries) / orders * per_order;
    outcome.figure("lesson_worst_case", lesson_worst as f64);
    outcome.figure("shopeasy_worst_case", shopeasy.worst_case_attempts() as f64);
    outcome.figure("attempts_at_inventory_per_order", total);
    outcome.figure("bound", bound);
    outcome.measured = format!(
        "attempts at Inventory per order: {total:.2} measured (budget bound {bound:.2}); \
         worst case {} for ShopEasy's chain, {} for the lesson's",
        shopeasy.worst_case_attempts(),
        lesson_worst
    );
    outcome.notes.push(format!(
        "the plans are computed from the default settings; the run changes only timeouts \
         and the breaker's minimum_calls, which the counts do not depend on (retry budget: \
         ratio {}, {} per window)",
        budget.ratio, budget.min_retries_per_window
    ));
    outcome.passed = lesson_worst == 27
        && calls >= orders
        && total <= bound + 1e-9
        && total <= shopeasy.worst_case_attempts() as f64;
    Ok(outcome)
}

/// `3 × 3 × 3`: each hop's attempts.
fn tries(hops: &[HopPolicy]) -> String {
    hops.iter()
        .map(|h| (h.max_retries + 1).to_string())
        .collect::<Vec<_>>()
        .join(" × ")
}

/// The names of the rules a plan broke, once each.
fn rules(error: &shopeasy_resilience::plan::PlanError) -> String {
    let mut names: Vec<&str> = error.violations.iter().map(|v| v.rule).collect();
    names.dedup();
    names.join(", ")
}

/// Breaks the edge, places the orders; returns the gateway's retries and
/// Order's calls and retries on Inventory while it was down.
async fn measure(live: &Live) -> anyhow::Result<(f64, f64, f64)> {
    let token = live.sign_in("amplification").await?;
    let product = live.product(0).await?;
    live.order(&token, &product, &uuid::Uuid::new_v4().to_string())
        .await?;
    live.set_enabled(EDGE, false).await?;
    let gateway_retries = |c: &super::live::Counters| {
        c.sum(
            "shopeasy_gateway_retries_total",
            &[("outcome", "retried")],
            &[],
        )
    };
    let before = live.metrics().await?;
    for _ in 0..ORDERS {
        live.order(&token, &product, &uuid::Uuid::new_v4().to_string())
            .await?;
    }
    let after = live.metrics().await?;
    Ok((
        gateway_retries(&after) - gateway_retries(&before),
        after.inventory_calls() - before.inventory_calls(),
        after.inventory_retries() - before.inventory_retries(),
    ))
}
