//! Order service benchmarks (issue 6), printed as a Markdown table:
//!
//! 1. **throughput**: order placement end to end — HTTP → order service →
//!    Postgres, with the real Inventory service (gRPC, its own Postgres
//!    database) and a stub Product service, `BENCH_CONCURRENCY` clients for
//!    `BENCH_SECONDS`;
//! 2. **stampede**: 1,000 concurrent orders for one product whose stock
//!    cache entry just expired, counting `GetStock` calls at Inventory;
//! 3. **breaker open, stale entry**: latency of `POST /api/orders` while
//!    Inventory's breaker is open and the stock cache holds a stale entry.
//!
//! Needs `SHOPEASY_TEST_POSTGRES` (as the tests do). Run with
//! `cargo bench -p shopeasy-order --bench order`; `bench/order.sh` wraps it.

#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

#[allow(dead_code)]
#[path = "../tests/api/fakes.rs"]
mod fakes;
#[allow(dead_code)]
#[path = "../tests/api/helpers.rs"]
mod helpers;

use std::time::Duration;

use shopeasy_inventory::domain::ProductId;
use shopeasy_order::settings::OrderSettings;
use shopeasy_runtime::settings::Seconds;
use tokio::time::Instant;
use uuid::Uuid;

use crate::{
    fakes::{FakeProduct, Mode},
    helpers::{Shop, TestApp, order_body, real_inventory, test_settings},
};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    // `cargo test --benches` runs this with `--bench` absent: do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::var(shopeasy_testkit::POSTGRES_VAR).is_err() {
        eprintln!("order bench: set {} to run", shopeasy_testkit::POSTGRES_VAR);
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // `cargo bench --bench order -- stampede` runs the parts whose name
    // contains the filter.
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let wanted = |name: &str| name.contains(filter.as_str());
    runtime.block_on(async {
        println!("| benchmark | result |\n|---|---|");
        if wanted("throughput") {
            throughput().await;
        }
        if wanted("stampede") {
            stampede().await;
        }
        if wanted("breaker_open_stale") {
            breaker_open_stale().await;
        }
    });
}

async fn throughput() {
    let seconds = env("BENCH_SECONDS", 10);
    let concurrency = env("BENCH_CONCURRENCY", 32);
    let inventory_db = shopeasy_testkit::postgres().await.unwrap();
    let order_db = shopeasy_testkit::postgres().await.unwrap();
    let (inventory, store) = real_inventory(inventory_db.url()).await;
    let url = format!("http://{}", inventory.local_addr());
    let catalogue = FakeProduct::default();
    let products: Vec<Uuid> = (0..50).map(|_| Uuid::new_v4()).collect();
    for p in &products {
        catalogue.add(*p, 100);
        let id = ProductId::parse("product_id", &p.to_string()).unwrap();
        store
            .set_stock(&id, 1_000_000_000, Instant::now() + Duration::from_secs(5))
            .await
            .unwrap();
    }
    let catalogue_server = catalogue.serve().await;
    let mut settings = test_settings(order_db.url(), &url, &catalogue_server.url());
    settings.resilience.inventory.timeout_seconds = Seconds::new(3.0);
    settings.resilience.product.timeout_seconds = Seconds::new(3.0);
    settings.resilience.stock_cache.ttl_seconds = Seconds::new(2.0);
    settings.storage.database.max_connections = 20;
    let app = TestApp::spawn(settings).await;

    let end = Instant::now() + Duration::from_secs(seconds);
    let clients = (0..concurrency).map(|c| {
        let app = &app;
        let products = &products;
        async move {
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            let mut i = 0usize;
            while Instant::now() < end {
                let p = products[(c as usize * 7 + i) % products.len()];
                i += 1;
                let started = Instant::now();
                let res = app
                    .post_order(
                        Some(&format!("bench-{c}-{i}")),
                        &order_body("bench", &[(p, 1)]),
                    )
                    .await;
                if res.status() == 201 {
                    latencies.push(started.elapsed());
                } else {
                    errors += 1;
                }
            }
            (latencies, errors)
        }
    });
    let started = Instant::now();
    let results = futures::future::join_all(clients).await;
    let elapsed = started.elapsed();
    let mut all: Vec<Duration> = results.iter().flat_map(|(l, _)| l.clone()).collect();
    let errors: u64 = results.iter().map(|(_, e)| e).sum();
    all.sort();
    println!(
        "| order placement, end to end on Postgres ({concurrency} clients, {seconds} s) | {:.0} orders/s, p50 {:.1} ms, p99 {:.1} ms, {errors} non-201 |",
        all.len() as f64 / elapsed.as_secs_f64(),
        percentile(&all, 0.5).as_secs_f64() * 1e3,
        percentile(&all, 0.99).as_secs_f64() * 1e3,
    );
    app.stop().await;
    let _ = tokio::time::timeout(Duration::from_secs(15), inventory.stop()).await;
}

/// The order service on `settings`, after one order of `p` for
/// `customer` (201): the product's stock is in its cache.
async fn placed_once(settings: OrderSettings, customer: &str, p: Uuid) -> TestApp {
    let app = TestApp::spawn(settings).await;
    assert_eq!(
        app.post_order(None, &order_body(customer, &[(p, 1)]))
            .await
            .status(),
        201
    );
    app
}

/// `n` orders of one unit of `p`, one after the other: their latencies,
/// sorted, and how many answered `status`.
async fn sequential(app: &TestApp, p: Uuid, n: u64, status: u16) -> (Vec<Duration>, usize) {
    let mut latencies = Vec::with_capacity(usize::try_from(n).unwrap());
    let mut answered = 0;
    for _ in 0..n {
        let started = Instant::now();
        let res = app.post_order(None, &order_body("b", &[(p, 1)])).await;
        latencies.push(started.elapsed());
        answered += usize::from(res.status() == status);
    }
    latencies.sort();
    (latencies, answered)
}

async fn stampede() {
    let db = shopeasy_testkit::postgres().await.unwrap();
    let shop = Shop::new(&[1_000_000]).await;
    let (inventory, p) = (&shop.inventory, shop.products[0]);
    let mut settings = shop.settings(db.url());
    // Long enough that the refreshed entry stays fresh for the whole burst.
    settings.resilience.stock_cache.ttl_seconds = Seconds::new(5.0);
    settings.resilience.inventory.timeout_seconds = Seconds::new(5.0);
    settings.resilience.inventory.max_concurrency = 2000;
    settings.resilience.product.max_concurrency = 2000;
    settings.resilience.product.timeout_seconds = Seconds::new(10.0);
    settings.storage.database.max_connections = 20;
    settings.storage.database.acquire_timeout_seconds = Seconds::new(30.0);
    let app = placed_once(settings, "s", p).await;
    tokio::time::sleep(Duration::from_millis(5100)).await; // the entry expires
    inventory.set_get_delay(Duration::from_millis(50));
    let before = inventory.get_calls();
    let statuses = futures::future::join_all((0..1000).map(|_| {
        let app = &app;
        async move {
            app.post_order(None, &order_body("s", &[(p, 1)]))
                .await
                .status()
                .as_u16()
        }
    }))
    .await;
    let calls = inventory.get_calls() - before;
    let ok = statuses.iter().filter(|s| **s == 201).count();
    println!(
        "| stampede: 1,000 concurrent orders, one product, expired cache entry | {calls} GetStock call(s); {ok} of 1,000 confirmed |"
    );
    app.stop().await;
}

async fn breaker_open_stale() {
    let db = shopeasy_testkit::postgres().await.unwrap();
    let shop = Shop::new(&[1_000_000]).await;
    let (inventory, p) = (&shop.inventory, shop.products[0]);
    let mut settings = shop.settings(db.url());
    settings.resilience.inventory.break_duration_seconds = Seconds::new(600.0);
    settings.resilience.stock_cache.ttl_seconds = Seconds::new(0.05);
    settings.outbox.initial_backoff_seconds = Seconds::new(60.0);
    settings.outbox.max_backoff_seconds = Seconds::new(600.0);
    let app = placed_once(settings, "b", p).await;
    inventory.set_mode(Mode::Unavailable);
    // Fail enough calls to open the breaker.
    for _ in 0..5 {
        let _ = app.post_order(None, &order_body("b", &[(p, 1)])).await;
    }
    let n = env("BENCH_REQUESTS", 2000);
    let (latencies, accepted) = sequential(&app, p, n, 202).await;
    println!(
        "| breaker open + stale stock entry: POST /api/orders ({n} sequential, Postgres) | p50 {:.2} ms, p99 {:.2} ms; {accepted} of {n} answered 202 |",
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
    );
    // Fast fail: a product never cached, so nothing can vouch for its
    // stock; the open breaker answers without a call and nothing is written.
    let unknown = Uuid::new_v4();
    shop.product.add(unknown, 100);
    let (latencies, refused) = sequential(&app, unknown, n, 503).await;
    println!(
        "| breaker open, no cached stock: POST /api/orders fails fast ({n} sequential) | p50 {:.2} ms, p99 {:.2} ms; {refused} of {n} answered 503 + Retry-After |",
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
    );
    app.stop().await;
}
