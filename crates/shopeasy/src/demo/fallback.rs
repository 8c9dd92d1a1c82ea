//! `fallback`: what Order answers while Inventory is down — stale stock for
//! a product it has read before, 503 with `Retry-After` for one it never
//! has — and how the pending order completes once Inventory is back.
//!
//! Where each order's stock came from is Order's own count
//! (`shopeasy_stock_cache_requests_total{result}`: `miss` read Inventory,
//! `hit` a fresh copy, `stale` an old copy because Inventory did not
//! answer, `rejected` no copy at all).

use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use tokio::time::Instant;

use super::{
    Outcome, QUIET, Run, Scene, SceneInfo, TICK, Timeline,
    live::{Counters, Live},
    system,
};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "fallback",
    summary: "the answer on refusal: stale stock while Inventory is down, 503 when there is none",
    help: "Order checks stock through a cache that answers from an old copy when \
Inventory does not answer (resilience.stock_cache.ttl_seconds 0.2 here, max_stale_seconds \
3600). Product A is ordered once with Inventory up; then Inventory's edge refuses \
connections and the copy ages past its TTL. A second order of A is accepted as pending \
(202) on the stale copy, its reservation handed to the outbox; an order of product B, \
never read, gets 503 with Retry-After. Inventory comes back: the outbox reserves A's \
pending order and it is confirmed; B can be ordered again.",
    expected: "A accepted (202, pending) from stale stock; B refused with 503 and \
Retry-After; A's pending order confirmed once Inventory is back; B then 201",
};

/// The scene's settings: a one-tick TTL, short timeouts, an outbox that
/// retries quickly once Inventory is back.
pub const ENV: [(&str, &str); 8] = [
    ("RESILIENCE__STOCK_CACHE__TTL_SECONDS", "0.2"),
    ("RESILIENCE__INVENTORY__TIMEOUT_SECONDS", "0.15"),
    ("RESILIENCE__INVENTORY__CONNECT_TIMEOUT_SECONDS", "0.15"),
    ("RESILIENCE__INVENTORY__MAX_RETRIES", "0"),
    ("RESILIENCE__INVENTORY__BREAK_DURATION_SECONDS", "0.5"),
    ("OUTBOX__POLL_INTERVAL_SECONDS", "0.1"),
    ("OUTBOX__INITIAL_BACKOFF_SECONDS", "0.1"),
    ("OUTBOX__MAX_BACKOFF_SECONDS", "0.5"),
];

/// The edge broken.
const EDGE: &str = "order-inventory";

/// How long the outbox has to confirm the pending order.
const CONFIRM_WITHIN: Duration = Duration::from_secs(10);

/// Runs the scene.
///
/// # Errors
/// The system does not start or answer.
pub async fn run(run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::Fallback);
    // The per-customer limits of QUIET, not its slow outbox: here the
    // outbox's work is the point.
    let env: Vec<_> = QUIET[..3].iter().chain(&ENV).copied().collect();
    let live = system(run, &env, &mut outcome).await?;
    let result = steps(&live, &mut outcome).await;
    let healed = live.set_enabled(EDGE, true).await;
    let stopped = live.stop().await;
    result.and(healed).and(stopped)?;
    Ok(outcome)
}

/// Where a request's stock came from, by the cache counter that grew.
fn stock_from(before: &Counters, after: &Counters) -> &'static str {
    const NAME: &str = "shopeasy_stock_cache_requests_total";
    for (result, said) in [
        ("stale", "stale copy"),
        ("rejected", "no copy (rejected)"),
        ("miss", "Inventory"),
        ("hit", "fresh copy"),
        ("coalesced", "Inventory (shared read)"),
    ] {
        let labels = [("result", result)];
        if after.sum(NAME, &labels, &[]) > before.sum(NAME, &labels, &[]) {
            return said;
        }
    }
    "-"
}

/// One order and what it came to: the row, its status, and the body.
async fn order(
    live: &Live,
    token: &str,
    product: &str,
) -> anyhow::Result<(u16, Option<String>, &'static str, Value)> {
    let before = live.metrics().await?;
    let res = live
        .order(token, product, &uuid::Uuid::new_v4().to_string())
        .await?;
    let status = res.status().as_u16();
    let retry_after = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: Value = res.json().await.unwrap_or(Value::Null);
    let after = live.metrics().await?;
    Ok((status, retry_after, stock_from(&before, &after), body))
}

fn answer(status: u16, retry_after: Option<&str>, body: &Value) -> String {
    match (body["status"].as_str(), retry_after) {
        (Some(s), _) => format!("{status} {s}"),
        (None, Some(after)) => format!("{status}, Retry-After: {after}"),
        (None, None) => status.to_string(),
    }
}

async fn steps(live: &Live, outcome: &mut Outcome) -> anyhow::Result<()> {
    let token = live.sign_in("fallback").await?;
    let a = live.product(0).await?;
    let b = live.product(1).await?;
    let mut table = Timeline::new(
        "orders while Inventory is down",
        &["step", "inventory", "order", "answer", "stock from"],
    );

    let (first, ra, from, body) = order(live, &token, &a).await?;
    table.push(["1", "up", "A", &answer(first, ra.as_deref(), &body), from]);

    live.set_enabled(EDGE, false).await?;
    // The copy of A's stock ages past its one-tick TTL.
    tokio::time::sleep(TICK * 2).await;
    let (stale, ra, stale_from, body) = order(live, &token, &a).await?;
    let pending = body["id"].as_str().map(str::to_owned);
    table.push([
        "2",
        "down",
        "A",
        &answer(stale, ra.as_deref(), &body),
        stale_from,
    ]);
    let (refused, refused_after, refused_from, body) = order(live, &token, &b).await?;
    table.push([
        "3",
        "down",
        "B (never read)",
        &answer(refused, refused_after.as_deref(), &body),
        refused_from,
    ]);

    live.set_enabled(EDGE, true).await?;
    let healed_at = Instant::now();
    let confirmed = match &pending {
        Some(id) => confirmed(live, &token, id).await?,
        None => false,
    };
    let took = healed_at.elapsed().as_millis();
    table.push([
        "4".to_owned(),
        "up".to_owned(),
        "A's pending order".to_owned(),
        if confirmed {
            format!("confirmed by the outbox after {took} ms")
        } else {
            format!("not confirmed within {} s", CONFIRM_WITHIN.as_secs())
        },
        "-".to_owned(),
    ]);
    let (again, ra, from, body) = order(live, &token, &b).await?;
    table.push(["5", "up", "B", &answer(again, ra.as_deref(), &body), from]);
    outcome.timelines.push(table);

    outcome.figure("stale_order_status", f64::from(stale));
    outcome.figure("uncached_order_status", f64::from(refused));
    outcome.figure(
        "confirmed_after_ms",
        if confirmed { took as f64 } else { -1.0 },
    );
    outcome.measured = format!(
        "A while down: {stale} ({stale_from}); B while down: {refused}{}; A's pending order \
         {}; B after: {again}",
        refused_after
            .as_deref()
            .map_or(String::new(), |s| format!(" with Retry-After: {s}")),
        if confirmed {
            format!("confirmed {took} ms after Inventory was back")
        } else {
            "never confirmed".to_owned()
        },
    );
    outcome.passed = first == 201
        && stale == 202
        && stale_from == "stale copy"
        && refused == 503
        && refused_after.is_some()
        && confirmed
        && again == 201;
    Ok(())
}

/// Polls the order until it is confirmed (true) or [`CONFIRM_WITHIN`]
/// passes (false).
async fn confirmed(live: &Live, token: &str, id: &str) -> anyhow::Result<bool> {
    let url = format!("{}/api/orders/{id}", live.endpoints.gateway);
    let deadline = Instant::now() + CONFIRM_WITHIN;
    while Instant::now() < deadline {
        let order: Value = live
            .http
            .get(&url)
            .bearer_auth(token)
            .send()
            .await?
            .json()
            .await
            .context("the order as JSON")?;
        if order["status"] == "confirmed" {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(false)
}
