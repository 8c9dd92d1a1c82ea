//! Bulkhead (issue 10, point 6): a hung Inventory does not move the p95 of
//! `GET /api/products` or `GET /api/orders/{id}` by more than 20 %.
//!
//! Orders keep arriving (paced) while Inventory hangs: they wait at most
//! their attempt deadline, the bulkhead (4 in flight) sheds the rest, the
//! breaker opens and the outbox worker retries the pending backlog. The
//! reads must not notice.
//!
//! Measured finding: the outbox worker's retries of the growing pending
//! backlog compete with the reads for the order database. With the
//! breaker disabled (minimum calls 10 000), or with the suite's fast
//! outbox settings (every row retried at least once a second), the p95 of
//! `GET /api/orders/{id}` rises by ~50 %; with the deployed outbox
//! settings and the breaker it holds.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use shopeasy_e2e::Client;
use support::{Fixture, key, order_body, toxics::hang};
use tokio::time::Instant;

/// p95 of `n` sequential GETs of each path.
async fn p95s(client: &Client, paths: &[String], n: usize) -> Vec<Duration> {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); paths.len()];
    for _ in 0..n {
        for (i, path) in paths.iter().enumerate() {
            let answer = client.get(path).await;
            assert_eq!(answer.status, Some(200), "{path}: {}", answer.describe());
            samples[i].push(answer.elapsed);
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort();
            s[(s.len() * 95 / 100).min(s.len() - 1)]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_inventory_does_not_slow_product_or_order_reads() {
    let Some(f) = Fixture::start(|o| {
        o.order.resilience.inventory.max_concurrency = 4;
        // The outbox worker as deployed (the fast settings retry every
        // pending row at least once a second, which is a load test of its
        // own).
        o.order.outbox = shopeasy_order::settings::OutboxSettings::default();
    })
    .await
    else {
        return;
    };
    let id = f.seed("BULKHEAD", 10_000).await;
    let order_id = support::order_id(&f.placed(&id, 1).await);
    let paths = vec![
        format!("/api/products/{id}"),
        format!("/api/orders/{order_id}"),
    ];
    // The order's owner reads it (anyone else would get 404).
    let reader = f.cluster.client(support::CUSTOMER, Duration::from_secs(5));
    // The same paced order load runs throughout: the baseline is measured
    // with Inventory healthy, then again with it hung, so the only change
    // is the hang.
    let stop = Instant::now() + Duration::from_secs(60);
    let mut load = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let client = f.gateway.clone();
        let body = order_body(&id, 1);
        load.spawn(async move {
            while Instant::now() < stop {
                let _ = client.post_json("/api/orders", &body, Some(&key())).await;
                // Paced, so the load generator does not eat the CPU the
                // readers are measured on.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }
    p95s(&reader, &paths, 20).await;
    let before = p95s(&reader, &paths, 200).await;
    f.add_toxic("order-inventory", hang()).await;
    p95s(&reader, &paths, 20).await;
    let during = p95s(&reader, &paths, 200).await;
    let refused = f
        .counter(
            "shopeasy_downstream_request_duration_seconds_count",
            &[("target", "inventory"), ("outcome", "circuit_open")],
        )
        .await
        + f.counter(
            "shopeasy_downstream_request_duration_seconds_count",
            &[("target", "inventory"), ("outcome", "overloaded")],
        )
        .await;
    load.abort_all();
    assert!(refused > 0.0, "the breaker or the bulkhead refused calls");
    eprintln!("p95 before {before:?}, with a hung inventory {during:?}");
    for ((path, b), d) in paths.iter().zip(&before).zip(&during) {
        // 20 % of the baseline, plus 5 ms: below that the scheduler's noise
        // on a two-core machine dominates.
        let bound = b.mul_f64(1.2) + Duration::from_millis(5);
        assert!(*d <= bound, "{path}: p95 {d:?} > {bound:?} (before {b:?})");
    }
    f.cluster.stop().await;
}
