//! F2 (reset mid-request) on the service → Redis edges: `reset_peer` on
//! the `product-redis` and `order-redis` proxies resets every command on
//! the open connection and every reconnect attempt (the Redis client's
//! connection set-up sends `CLIENT SETINFO`, which the toxic resets).
//!
//! What must hold (FAULTS.md, F2 × service → Redis): command errors
//! degrade as F1 does (product reads from Postgres, orders placed), and the
//! clients reconnect by their backoff schedule, not in a tight loop: at
//! most one connection attempt per backoff step (see
//! `support::redis_reconnect_bound`).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::time::Duration;

use shopeasy_faults::Stream;
use support::{ConnectionLog, Fixture, REDIS_EDGES, assert_redis_backoff, toxics::reset};
use tokio::time::Instant;

/// service → Redis, `reset_peer` on both Redis proxies for 8 s of steady
/// load (a product read every 50 ms, an order every 200 ms): every read
/// answers 200 from Postgres within 500 ms, every order 201 within 1 s;
/// connection attempts at each proxy stay within the backoff schedule's
/// bound; after the heal the product cache hits again (R) and orders go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_redis_reset_degrades_and_reconnects_with_backoff() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed("F2-REDIS", 1_000).await;
    let path = format!("/api/products/{id}");

    // Warm: both Redis connections open, the product cached in Redis.
    let first = f.gateway.get(&path).await;
    assert_eq!(first.status, Some(200), "{}", first.describe());
    f.assert_product_cache_hits(
        &path,
        Duration::from_secs(5),
        "the product is served from Redis before the fault",
    )
    .await;
    f.placed(&id, 1).await;

    let edges = REDIS_EDGES;
    let mut logs = Vec::new();
    for edge in edges {
        let proxy = f.add_toxic(edge, reset(Stream::Upstream)).await;
        logs.push(ConnectionLog::start(proxy));
    }
    let errors = f.product_cache("error").await;
    let (reads, orders, window) = f
        .stays_healthy(
            &path,
            &id,
            Duration::from_secs(8),
            Duration::from_millis(50),
            4,
        )
        .await;
    assert!(
        f.product_cache("error").await > errors,
        "the reset reached the product cache as an error (degraded, not hidden)"
    );
    for (edge, log) in edges.iter().zip(&logs) {
        assert_redis_backoff(edge, &log.offsets(), window);
    }
    println!("{reads} reads, {orders} orders during the reset");
    drop(logs);

    for edge in edges {
        f.cluster.proxy(edge).await.remove_all_toxics();
    }
    let healed = Instant::now();
    f.assert_product_cache_hits(
        &path,
        Duration::from_secs(15),
        "R: the product cache hits again after the heal",
    )
    .await;
    println!(
        "product cache hit again {:?} after the heal",
        healed.elapsed()
    );
    f.placed(&id, 1).await;
    f.cluster.stop().await;
}
