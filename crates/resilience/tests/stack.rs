//! The whole client stack, the policy check and the `/admin/resilience`
//! registry.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shopeasy_resilience::backoff::{Backoff, Jitter};
use shopeasy_resilience::breaker::{BreakerConfig, BreakerHandle, BreakerLayer, GrpcClassifier};
use shopeasy_resilience::budget::{BudgetConfig, RetryBudget};
use shopeasy_resilience::bulkhead::BulkheadLayer;
use shopeasy_resilience::deadline::{Call, Deadline, DeadlineLayer};
use shopeasy_resilience::plan::{HopPolicy, Plan};
use shopeasy_resilience::registry::Registry;
use shopeasy_resilience::retry::{GrpcUnavailablePolicy, RetryLayer};
use shopeasy_resilience::timeout::AttemptTimeoutLayer;
use shopeasy_resilience::{BoxError, CircuitOpen};
use tower::{ServiceBuilder, ServiceExt};

/// The order → inventory stack of SPEC §5, around an in-memory dependency
/// that records the timeout each attempt was sent with.
#[tokio::test(start_paused = true)]
async fn the_inventory_stack_sends_the_remaining_time_retries_and_then_opens() {
    let sent: Arc<Mutex<Vec<Option<Duration>>>> = Arc::default();
    let log = sent.clone();
    let inventory = tower::service_fn(move |call: Call<u32>| {
        log.lock().expect("lock").push(call.timeout);
        async { Err::<u32, BoxError>(tonic::Status::unavailable("refused").into()) }
    });
    let budget = RetryBudget::new(BudgetConfig::default());
    let breaker = BreakerHandle::new("inventory", BreakerConfig::default());
    let registry = Registry::new();
    registry.breaker(&breaker).budget("inventory", &budget);
    let client = ServiceBuilder::new()
        .layer(DeadlineLayer::new(Duration::from_secs(10)))
        .layer(RetryLayer::new(
            GrpcUnavailablePolicy,
            budget,
            Backoff::new(
                Duration::from_millis(100),
                Duration::from_millis(100),
                Jitter::None,
            ),
            2,
            "inventory",
        ))
        .layer(BreakerLayer::new(breaker.clone(), GrpcClassifier))
        .layer(BulkheadLayer::new(8))
        .layer(AttemptTimeoutLayer::new(Duration::from_secs(3)))
        .service(inventory);

    // The caller has 1 s left: each attempt is sent with what remains.
    let call = Call::with_deadline(7, Some(Deadline::after(Duration::from_secs(1))));
    let err = client.clone().oneshot(call).await.unwrap_err();
    assert!(err.is::<tonic::Status>());
    assert_eq!(
        *sent.lock().expect("lock"),
        [
            Some(Duration::from_millis(1000)),
            Some(Duration::from_millis(900)),
            Some(Duration::from_millis(800)),
        ]
    );

    // Three attempts per call: the second call's failures reach 5 of 5 and
    // open the breaker; the open breaker's error is not retried.
    let _ = client.clone().oneshot(Call::new(7)).await;
    assert_eq!(breaker.state(), shopeasy_resilience::breaker::State::Open);
    let before = sent.lock().expect("lock").len();
    let err = client.clone().oneshot(Call::new(7)).await.unwrap_err();
    assert!(err.is::<CircuitOpen>());
    assert_eq!(
        sent.lock().expect("lock").len(),
        before,
        "nothing sent while open"
    );

    let snap = registry.snapshot();
    assert_eq!(snap["circuit_breakers"]["inventory"]["state"], "open");
    assert!(snap["retry_budgets"]["inventory"]["balance"].is_number());
    assert!(snap["caches"].as_object().unwrap().is_empty());
}

#[test]
fn the_policy_check_reports_every_broken_rule_and_the_amplification() {
    let budget = BudgetConfig::default();
    let gateway = HopPolicy::new("gateway→order", Duration::from_secs(10))
        .deadline(Duration::from_secs(30))
        .retries(2)
        .budget(budget);
    let order = HopPolicy::new("order→inventory", Duration::from_secs(3))
        .retries(2)
        .budget(budget)
        .breaker(BreakerConfig::default());
    let plan = Plan::new(vec![gateway.clone(), order.clone()]).unwrap();
    assert_eq!(plan.worst_case_attempts(), 9);
    assert!(
        plan.describe().contains("worst case 9 attempts"),
        "{}",
        plan.describe()
    );

    let bad = HopPolicy::new("order→inventory", Duration::from_secs(20))
        .deadline(Duration::from_secs(5))
        .retries(1)
        .breaker(BreakerConfig {
            sampling_duration: Duration::from_secs(30),
            ..BreakerConfig::default()
        });
    let err = Plan::new(vec![gateway, bad]).unwrap_err();
    let rules: Vec<&str> = err.violations.iter().map(|v| v.rule).collect();
    assert_eq!(
        rules,
        [
            "attempt_timeout_within_deadline",
            "retries_are_budgeted",
            "breaker_window_covers_two_attempts",
            "trial_timeout_covers_attempt",
            "inner_gives_up_first",
        ]
    );
    assert!(
        err.to_string()
            .contains("attempt timeout 20s > deadline 5s")
    );
    assert_eq!(
        order.worst_case_duration(),
        Duration::from_millis(9_000 + 25 + 50)
    );
}
