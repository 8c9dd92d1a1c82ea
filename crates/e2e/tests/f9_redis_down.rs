//! F9 (Redis down): the product read cache falls back to Postgres with
//! single flight per key, Postgres load rises but stays within the pool,
//! and the Redis clients reconnect with backoff and recover.
//!
//! Counting Postgres queries: `pg_stat_statements` is not loaded on the
//! shared server (and cannot be without a restart), and the product
//! service has no per-query metric (its cache counters do not count
//! `miss`/`coalesced` when Redis failed). So the test puts a wire-protocol
//! tap (`support::PgTap`) behind the `product-postgres` proxy and counts
//! the executions of `ProductStore::get`'s statement exactly.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod support;

use std::{sync::Arc, time::Duration};

use shopeasy_e2e::{Options, Service};
use shopeasy_runtime::settings::Seconds;
use shopeasy_testkit::{Metrics, assert_eventually, quantile};
use support::{
    ConnectionLog, Fixture, PRODUCT_BY_ID_SQL, PgTap, REDIS_EDGES, assert_redis_backoff, key,
    redis_keys, seed_catalogue, toxics::latency,
};
use tokio::time::Instant;

/// Puts a [`PgTap`] between the `product-postgres` proxy and Postgres; the
/// proxy restarts (closing the pool's connections, which the pool replaces
/// through the tap). Returns once product reads work through it.
async fn tap_product_postgres(f: &Fixture) -> PgTap {
    let upstream = f
        .cluster
        .proxy("product-postgres")
        .await
        .upstream()
        .to_owned();
    let tap = PgTap::start(upstream).await;
    f.cluster
        .redirect("product-postgres", tap.addr())
        .await
        .unwrap();
    let probe = seed_catalogue(&f.cluster, "F9-TAP", 1, 10).await[0];
    f.assert_reads_recover(
        &format!("/api/products/{probe}"),
        Duration::from_secs(5),
        "product reads work through the tap",
    )
    .await;
    assert!(tap.executions(PRODUCT_BY_ID_SQL) >= 1, "the tap sees reads");
    tap
}

/// Holds gateway's and product's adaptive concurrency limits at 64 or more,
/// above every cell's concurrent readers. Reads that turn 50× slower once
/// Redis is down make a limit that has learnt the cached reads' minimum RTT
/// fall to its floor and refuse the excess while it learns the new one;
/// these cells are about single flight and the pool, and admission has its
/// own tests.
fn hold_admission_above_the_readers(o: &mut Options) {
    for admission in [
        &mut o.gateway.process.admission,
        &mut o.product.process.admission,
    ] {
        admission.min_limit = 64;
        admission.initial_limit = admission.initial_limit.max(64);
    }
}

/// `n` concurrent `GET path` through the gateway, released together.
async fn burst(f: &Fixture, path: &str, n: usize) -> Vec<shopeasy_e2e::Answer> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (client, path, barrier) = (f.gateway.clone(), path.to_owned(), barrier.clone());
        set.spawn(async move {
            barrier.wait().await;
            client.get(&path).await
        });
    }
    set.join_all().await
}

/// gateway → product with Redis down (`product-redis` proxy down): reads
/// answer 200 from Postgres, and single flight makes each burst of 50
/// concurrent GETs of one uncached product cost ≈ 1 query (at most 2:
/// a straggler arriving after the shared read ended starts another),
/// counted on the wire. Postgres is given 50 ms per round trip, as a
/// database loaded by a Redis outage would be, so that a burst is
/// concurrent with the read it shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f9_redis_down_single_flight_makes_a_burst_one_query() {
    // Reads slowed to 50 ms per round trip would shrink the adaptive limit
    // below 50 and let the burst in in waves, each starting a read of its own.
    let Some(f) = Fixture::start(hold_admission_above_the_readers).await else {
        return;
    };
    let tap = tap_product_postgres(&f).await;
    f.cluster
        .proxy("product-redis")
        .await
        .set_enabled(false)
        .await;
    let hot = seed_catalogue(&f.cluster, "F9-HOT", 1, 200).await[0];
    let path = format!("/api/products/{hot}");
    f.add_toxic("product-postgres", latency(50)).await;

    let mut per_burst = Vec::new();
    for _ in 0..2 {
        let before = tap.executions(PRODUCT_BY_ID_SQL);
        let answers = burst(&f, &path, 50).await;
        let queries = tap.executions(PRODUCT_BY_ID_SQL) - before;
        for a in &answers {
            assert_eq!(a.status, Some(200), "{}", a.describe());
            assert_eq!(a.body, answers[0].body, "every caller got the one product");
        }
        assert!(
            queries >= 1,
            "Redis is down: the burst had to read Postgres"
        );
        assert!(
            queries <= 2,
            "single flight: 50 concurrent GETs cost {queries} queries"
        );
        per_burst.push(queries);
    }
    println!("F9 single flight: queries per burst of 50: {per_burst:?}");
    f.cluster.stop().await;
}

/// service → Postgres with Redis down: 24 concurrent readers over 30
/// products for 4 s (Postgres at 20 ms per round trip). With Redis up the
/// same load hardly reads Postgres; with Redis down the reads go to
/// Postgres (merged per product by single flight) — the load rises — but the product service never holds more Postgres
/// connections than its pool's `max_connections` (10, counted at the
/// proxy every 5 ms; the load does fill it), every read answers 200 (none
/// waits past the 0.5 s acquire timeout) and p99 stays under 750 ms
/// (acquire timeout + Redis probe timeout + 50 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f9_redis_down_postgres_load_stays_within_the_pool() {
    // A Redis timeout of 0.2 s (not 50 ms) for the Redis-up baseline: on
    // two loaded cores 24 readers can push a healthy Redis call past 50 ms,
    // and the cache then (rightly) degrades to Postgres, blurring the
    // comparison. While Redis is down, every read arriving when the 1 s
    // rest ends waits for the probe (the client's reconnect is in its
    // backoff), so that timeout is part of the p99 budget below.
    let Some(f) = Fixture::start(|o| {
        o.product.cache.redis.timeout_seconds = Seconds::new(0.2);
        hold_admission_above_the_readers(o);
    })
    .await
    else {
        return;
    };
    let max_connections = 10; // `Options::fast`'s pool
    let tap = tap_product_postgres(&f).await;
    let ids = seed_catalogue(&f.cluster, "F9-POOL", 30, 200).await;
    let paths: Arc<Vec<String>> =
        Arc::new(ids.iter().map(|id| format!("/api/products/{id}")).collect());
    // Warm the Redis cache with every product.
    for path in paths.iter() {
        assert_eq!(f.gateway.get(path).await.status, Some(200));
    }
    let proxy = f.add_toxic("product-postgres", latency(20)).await;

    let load = |seconds: u64| {
        let (client, paths, proxy) = (f.gateway.clone(), paths.clone(), proxy.clone());
        async move {
            let stop = Instant::now() + Duration::from_secs(seconds);
            let sampler = tokio::spawn(async move {
                let mut most = 0;
                while Instant::now() < stop {
                    most = most.max(proxy.open_connections());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                most
            });
            let mut set = tokio::task::JoinSet::new();
            for worker in 0..24 {
                let (client, paths) = (client.clone(), paths.clone());
                set.spawn(async move {
                    let mut answers = Vec::new();
                    let mut i = worker;
                    while Instant::now() < stop {
                        answers.push(client.get(&paths[i % paths.len()]).await);
                        i += 1;
                    }
                    answers
                });
            }
            let answers: Vec<_> = set.join_all().await.into_iter().flatten().collect();
            (answers, sampler.await.unwrap())
        }
    };

    let before = tap.executions(PRODUCT_BY_ID_SQL);
    let (cached, _) = load(2).await;
    let cached_queries = tap.executions(PRODUCT_BY_ID_SQL) - before;

    f.cluster
        .proxy("product-redis")
        .await
        .set_enabled(false)
        .await;
    let before = tap.executions(PRODUCT_BY_ID_SQL);
    let (answers, most_open) = load(4).await;
    let queries = tap.executions(PRODUCT_BY_ID_SQL) - before;

    let failed: Vec<_> = answers
        .iter()
        .filter(|a| a.status != Some(200))
        .map(shopeasy_e2e::Answer::describe)
        .collect();
    let mut latencies: Vec<Duration> = answers.iter().map(|a| a.elapsed).collect();
    latencies.sort_unstable();
    let p50 = quantile(&latencies, 0.50);
    let p99 = quantile(&latencies, 0.99);
    println!(
        "F9 pool: Redis up {} reads → {cached_queries} queries; Redis down {} reads → \
         {queries} queries, at most {most_open} connections (max {max_connections}), \
         p50 {p50:?}, p99 {p99:?}",
        cached.len(),
        answers.len()
    );
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(
        cached_queries * 10 <= cached.len(),
        "with Redis up the reads are cached: {cached_queries} queries for {} reads",
        cached.len()
    );
    // Single flight still merges concurrent reads of one product, so
    // fewer queries than reads; but far more than with Redis up.
    assert!(
        queries * 10 >= answers.len() && queries >= 20 * cached_queries.max(1),
        "with Redis down the load reaches Postgres: {queries} queries for {} reads",
        answers.len()
    );
    assert!(
        most_open <= max_connections,
        "pool in use ≤ max: {most_open} connections"
    );
    assert_eq!(
        most_open, max_connections,
        "the load filled the pool (else the bound was not tested)"
    );
    // Budget: the acquire timeout (a read waiting longer would be a 503)
    // + the Redis probe's timeout (0.2 s) + 50 ms for the round trips.
    assert!(p99 < Duration::from_millis(750), "p99 {p99:?}");
    f.cluster.stop().await;
}

/// The order service's stock look-ups (`shopeasy_stock_cache_requests_total`,
/// all results) and failed Redis calls of its stock cache
/// (`shopeasy_stock_cache_l2_requests_total{result="error"}`).
async fn stock_cache_counts(f: &Fixture) -> (f64, f64) {
    let metrics = Metrics::parse(&f.metrics(Service::Order).await);
    (
        metrics.sum("shopeasy_stock_cache_requests_total", &[]),
        metrics.sum(
            "shopeasy_stock_cache_l2_requests_total",
            &[("result", "error")],
        ),
    )
}

/// service → Redis (direct), Redis gone for 8 s: both Redis proxies point
/// at a port nothing listens on, so each of the clients' connection
/// attempts is accepted (and counted) by the proxy and closed at once.
/// Reads answer 200, orders 201; `shopeasy_stock_cache_requests_total`
/// keeps counting every stock look-up; connection attempts at each proxy
/// stay within the backoff schedule's bound. When Redis returns, the
/// product cache hits again and the order service writes stock to Redis
/// again (R).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f9_redis_down_reconnects_with_backoff_and_recovers() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed_cached("F9-DIRECT", 1_000).await;
    let path = format!("/api/products/{id}");
    assert_eventually(
        Duration::from_secs(5),
        "the order service keeps stock in Redis before the fault",
        async || {
            redis_keys(&format!("*stock:{id}"))
                .await
                .is_some_and(|k| k.len() == 1)
        },
    )
    .await;
    assert_eq!(f.gateway.get(&path).await.status, Some(200));

    let edges = REDIS_EDGES;
    let mut redis = Vec::new();
    let nowhere: std::net::SocketAddr = ([127, 0, 0, 1], shopeasy_testkit::free_port()).into();
    let mut logs = Vec::new();
    for edge in edges {
        redis.push(f.stand_in(edge, nowhere).await);
        logs.push(ConnectionLog::start(f.cluster.proxy(edge).await));
    }
    let (lookups, l2_errors) = stock_cache_counts(&f).await;
    let (reads, orders, window) = f
        .stays_healthy(
            &path,
            &id,
            Duration::from_secs(8),
            Duration::from_millis(100),
            2,
        )
        .await;
    let (lookups_after, l2_errors_after) = stock_cache_counts(&f).await;
    assert!(
        lookups_after - lookups >= f64::from(orders),
        "shopeasy_stock_cache_requests_total keeps counting: {} for {orders} orders",
        lookups_after - lookups
    );
    assert!(
        l2_errors_after > l2_errors,
        "the order service did try Redis (and degraded)"
    );
    for (edge, log) in edges.iter().zip(&logs) {
        assert_redis_backoff(edge, &log.offsets(), window);
    }
    println!("{reads} reads, {orders} orders while Redis was gone");
    drop(logs);

    // Redis returns.
    for (edge, upstream) in edges.iter().zip(&redis) {
        f.cluster.redirect(edge, *upstream).await.unwrap();
    }
    let returned = Instant::now();
    let product_back = f
        .assert_product_cache_hits(
            &path,
            Duration::from_secs(15),
            "R: the product cache hits again",
        )
        .await;
    let fresh_id = f.seed("F9-BACK", 10_000).await;
    assert_eventually(
        Duration::from_secs(15),
        "R: the order service writes stock to Redis again",
        async || {
            f.placed(&fresh_id, 1).await;
            redis_keys(&format!("*stock:{fresh_id}"))
                .await
                .is_some_and(|k| k.len() == 1)
        },
    )
    .await;
    println!(
        "Redis back: product cache hit after {product_back:?}, order stock in Redis after {:?}",
        returned.elapsed()
    );
    f.cluster.stop().await;
}

/// The Redis clients' reconnect jitter differs between clients. `redis` 1.8
/// depends on `backon` without its `std` feature, and without it
/// `ExponentialBuilder::with_jitter` seeds its generator with a constant,
/// so two clients (or two replicas) that lose Redis together would
/// reconnect in lockstep (found by this test; the workspace now enables
/// `backon/std`). This test takes the
/// product's and the order's clients down together and expects their
/// first four backoff gaps to differ somewhere by more than 20 ms (with
/// real jitter the chance they all agree is below 0.1 %).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f9_redis_reconnect_jitter_differs_between_clients() {
    let Some(f) = Fixture::start(|_| {}).await else {
        return;
    };
    let id = f.seed_cached("F9-JITTER", 10_000).await;
    let path = format!("/api/products/{id}");
    assert_eq!(f.gateway.get(&path).await.status, Some(200));
    let nowhere: std::net::SocketAddr = ([127, 0, 0, 1], shopeasy_testkit::free_port()).into();
    let mut logs = Vec::new();
    for edge in REDIS_EDGES {
        logs.push(ConnectionLog::start(
            f.cluster.redirect(edge, nowhere).await.unwrap(),
        ));
    }
    assert_eventually(
        Duration::from_secs(15),
        "both clients made five attempts",
        async || {
            let _ = f.gateway.get(&path).await;
            let _ = f.order(&id, 1, Some(&key())).await;
            logs.iter().all(|l| l.offsets().len() >= 5)
        },
    )
    .await;
    let gaps: Vec<Vec<Duration>> = logs
        .iter()
        .map(|l| {
            l.offsets()
                .windows(2)
                .take(4)
                .map(|w| w[1] - w[0])
                .collect()
        })
        .collect();
    println!("backoff gaps: product {:?}, order {:?}", gaps[0], gaps[1]);
    assert!(
        gaps[0]
            .iter()
            .zip(&gaps[1])
            .any(|(a, b)| a.abs_diff(*b) > Duration::from_millis(20)),
        "the two clients back off in lockstep: {gaps:?}"
    );
    f.cluster.stop().await;
}
