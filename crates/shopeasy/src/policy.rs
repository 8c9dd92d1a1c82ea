//! The whole chain's policy check, run by the launcher before anything
//! starts: a lower layer must give up before the layer above it.
//!
//! Each service checks its own edges when its settings are validated (a
//! breaker window that cannot hold two attempts, …); only the launcher
//! sees the gateway's and the order service's settings together, so the
//! rule across them lives here: the order service's worst case for one
//! call to Inventory (or Product) — every attempt timing out, plus the
//! pauses between them — must fit inside the gateway's
//! `resilience.gateway.activity_timeout_seconds`, or the gateway answers
//! 504 while the order service is still retrying, and the retries are load
//! nobody waits for. The chain then goes through [`Plan::new`] (the inner
//! hop's attempt shorter than the outer one's, budgets in range, …).

use std::time::Duration;

use anyhow::bail;
use shopeasy_gateway::settings::GatewaySettings;
use shopeasy_order::settings::{EdgeSettings, OrderSettings};
use shopeasy_resilience::{
    backoff::{Backoff, Jitter},
    plan::{HopPolicy, Plan},
};

/// The longest pause between two gateway retries (the gateway's own cap).
const GATEWAY_MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Checks the chains gateway → order → inventory and gateway → order →
/// product, and returns the Inventory chain (the one an order's worst case
/// runs through) as a [`Plan`], whose [`describe`](Plan::describe) is the
/// start-up log line.
///
/// # Errors
/// When either order edge's worst case outlasts the gateway's activity
/// timeout (the message names both keys), or a chain breaks a rule of
/// [`Plan::new`].
pub fn check_chain(gateway: &GatewaySettings, order: &OrderSettings) -> anyhow::Result<Plan> {
    let [inventory, _] = order.resilience.hops();
    let plan = chain(
        gateway,
        "resilience.inventory",
        &order.resilience.inventory,
        inventory,
    )?;
    check_product_chain(gateway, order)?;
    Ok(plan)
}

/// Checks the chain gateway → order → product as [`check_chain`] checks
/// Inventory's.
///
/// # Errors
/// As [`check_chain`], for `resilience.product.*`.
pub fn check_product_chain(
    gateway: &GatewaySettings,
    order: &OrderSettings,
) -> anyhow::Result<Plan> {
    let [_, product] = order.resilience.hops();
    chain(
        gateway,
        "resilience.product",
        &order.resilience.product,
        product,
    )
}

/// The gateway's hop followed by the order edge under `prefix`.
fn chain(
    gateway: &GatewaySettings,
    prefix: &str,
    edge: &EdgeSettings,
    hop: HopPolicy,
) -> anyhow::Result<Plan> {
    let g = &gateway.resilience.gateway;
    let activity = g.activity_timeout_seconds.get();
    let gateway_hop = HopPolicy::new("gateway→order", activity)
        .retries(g.get_retries)
        .backoff(Backoff::new(
            g.retry_backoff_seconds.get(),
            GATEWAY_MAX_BACKOFF,
            Jitter::Full,
        ))
        .budget(gateway.resilience.budget());
    fits_in_activity(prefix, edge, &hop, activity)?;
    Ok(Plan::new(vec![gateway_hop, hop])?)
}

/// The order edge under `prefix` gives up inside the gateway's activity
/// timeout.
fn fits_in_activity(
    prefix: &str,
    edge: &EdgeSettings,
    hop: &HopPolicy,
    activity: Duration,
) -> anyhow::Result<()> {
    let worst = hop.worst_case_duration();
    if worst > activity {
        bail!(
            "{prefix}.timeout_seconds ({}) × ({prefix}.max_retries ({}) + 1), with backoff, \
             is {worst:?}: longer than resilience.gateway.activity_timeout_seconds \
             ({activity:?}), so the gateway would give up while the order service still \
             retries; lower the order edge's timeout or retries, or raise the gateway's \
             activity timeout",
            edge.timeout_seconds.as_f64(),
            edge.max_retries,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use shopeasy_runtime::settings::Seconds;

    use super::*;

    #[test]
    fn the_defaults_pass_and_amplify_nine_times_at_worst() {
        let plan = check_chain(&GatewaySettings::default(), &OrderSettings::default()).unwrap();
        let names: Vec<&str> = plan.hops().iter().map(|h| h.name).collect();
        assert_eq!(names, ["gateway→order", "order→inventory"]);
        // (1 + 2 gateway retries) × (1 + 2 order retries).
        assert_eq!(plan.worst_case_attempts(), 9);
        // Budgets of 0.2 at both hops: 1.2 × 1.2.
        assert!(
            (plan.budgeted_amplification() - 1.44).abs() < 1e-9,
            "{}",
            plan.describe()
        );
        // 3 s × 3 attempts plus 25 + 50 ms of backoff, inside 30 s.
        assert_eq!(
            plan.hops()[1].worst_case_duration(),
            Duration::from_millis(9075)
        );
    }

    #[test]
    fn an_order_edge_outlasting_the_gateway_is_refused_naming_both_keys() {
        let mut gateway = GatewaySettings::default();
        gateway.resilience.gateway.activity_timeout_seconds = Seconds::new(5.0);
        let err = check_chain(&gateway, &OrderSettings::default())
            .unwrap_err()
            .to_string();
        for key in [
            "resilience.inventory.timeout_seconds",
            "resilience.inventory.max_retries",
            "resilience.gateway.activity_timeout_seconds",
        ] {
            assert!(err.contains(key), "{key} not in: {err}");
        }

        // One attempt fits where three do not.
        let mut order = OrderSettings::default();
        order.resilience.inventory.max_retries = 0;
        order.resilience.product.max_retries = 0;
        let plan = check_chain(&gateway, &order).unwrap();
        assert_eq!(plan.worst_case_attempts(), 3);
    }

    #[test]
    fn a_product_edge_outlasting_the_gateway_is_refused_too() {
        let mut gateway = GatewaySettings::default();
        gateway.resilience.gateway.activity_timeout_seconds = Seconds::new(10.0);
        let mut order = OrderSettings::default();
        order.resilience.inventory.max_retries = 0;
        assert!(check_product_chain(&gateway, &order).is_ok());
        order.resilience.product.timeout_seconds = Seconds::new(4.0);
        let err = check_chain(&gateway, &order).unwrap_err().to_string();
        assert!(err.contains("resilience.product.timeout_seconds"), "{err}");
        assert!(
            err.contains("resilience.gateway.activity_timeout_seconds"),
            "{err}"
        );
    }
}
