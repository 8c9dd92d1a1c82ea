//! C1–C9 under a seeded fault schedule (FAULTS.md, "The generator").
//!
//! `SHOPEASY_CHAOS_SEED` fixes the seed (printed by every run);
//! `SHOPEASY_CHAOS_SECONDS` the length (CI: 20 s). The 5-minute run is
//! `cargo test -p shopeasy-e2e --test chaos -- --ignored`.
//!
//! `SHOPEASY_CHAOS_RATE=<orders per second>` makes the clients of
//! `invariants_hold_under_chaos` open-loop at that rate (issue 14: one run
//! at 2× capacity, e.g. 1600): admission control sheds the excess (503
//! `overloaded`, 429), which is counted and must have made no order; the
//! stock grows with the rate so placements last most of the run. Unset (CI),
//! the run is closed-loop as before.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::time::Duration;

use shopeasy_e2e::{
    Cluster, Options,
    chaos::{self, ChaosConfig},
};

fn seed() -> u64 {
    std::env::var("SHOPEASY_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}

/// `SHOPEASY_CHAOS_RATE`, when set to a positive number.
fn rate() -> Option<f64> {
    std::env::var("SHOPEASY_CHAOS_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|r: &f64| *r > 0.0)
}

async fn chaos_run(seconds: u64, edges: &[(&'static str, u64)], rate: Option<f64>) {
    let seed = seed();
    eprintln!("chaos seed {seed} (SHOPEASY_CHAOS_SEED={seed} reproduces the schedule)");
    let Some(cluster) = Cluster::start(Options::fast(seed)).await.unwrap() else {
        return;
    };
    let config = ChaosConfig {
        seed,
        edges: edges.to_vec(),
        clients: 8,
        duration: Duration::from_secs(seconds),
        drain_within: Duration::from_secs(30),
        rate,
    };
    // Small stock, scaled with the length so it runs out near the end:
    // oversell is reachable, and most of the run still places orders.
    let stock = match rate {
        None => {
            let scale = i64::try_from(seconds.div_ceil(20)).unwrap();
            vec![40 * scale, 25 * scale, 12 * scale]
        }
        // Open loop: scaled with the orders offered (about three units an
        // order; a third of them could be placed), over as many products
        // as it takes to keep each below the warm-up's 1,000 units (an
        // order's most), so the warm-up order stays out of stock.
        Some(r) => {
            let units = (r * seconds as f64).ceil() as u64;
            vec![999; usize::try_from(units.div_ceil(999)).unwrap().max(3)]
        }
    };
    if let Some(r) = rate {
        eprintln!(
            "open loop: {r}/s for {seconds} s over {} products of 999 units",
            stock.len()
        );
    }
    let report = chaos::run(&cluster, &config, &stock).await.unwrap();
    eprintln!("{}", report.summary());
    assert!(
        report.violations.is_empty(),
        "seed {seed}: {} violations:\n{}",
        report.violations.len(),
        report.violations.join("\n")
    );
    // The run exercised what it claims to: orders succeeded, stock ran
    // out, and faults produced unknown outcomes.
    let ok = report.statuses.get(&Some(201)).copied().unwrap_or(0)
        + report.statuses.get(&Some(202)).copied().unwrap_or(0);
    assert!(
        ok > 10,
        "seed {seed}: too few orders succeeded: {:?}",
        report.statuses
    );
    // Every schedule opens with one healthy hold (≤ 600 ms) and then puts
    // a fault on its edge; the first edge of each set sits on every
    // order's path, and a fault there leaves the requests in flight
    // without a known outcome (502/503/504).
    for (edge, _) in edges {
        assert!(
            report.faults.get(edge).copied().unwrap_or(0) > 0,
            "seed {seed}: no fault was put on {edge}: {:?}",
            report.faults
        );
    }
    assert!(
        report.unknown() > 0,
        "seed {seed}: the faults left no outcome unknown: {:?}",
        report.statuses
    );
    if rate.is_none() {
        // Closed loop: the stock is a fraction of what is ordered (77 units
        // per started 20 s; the slowest measured run, 10 s on the
        // databases, made 92 orders of ~3 units), so orders were turned
        // away for stock: answered 409, or accepted on a stale stock entry
        // and `rejected` later (C8 and C5 above leave no other end for
        // them); C4 proved the stock consistent after it ran out.
        assert!(
            report.out_of_stock() > 0,
            "seed {seed}: the stock never ran out: {:?}",
            report.statuses
        );
    }
    assert!(
        report.shared_keys() > 0,
        "seed {seed}: no key was sent by two customers"
    );
    if let Some(r) = rate {
        // Open loop: the run offered about the rate asked for (the
        // generator kept up), whatever share of it was shed.
        let offered = report.history.ops().len() as f64 / seconds as f64;
        assert!(
            offered > r * 0.5,
            "seed {seed}: offered {offered:.0}/s of the {r}/s asked for"
        );
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invariants_hold_under_chaos() {
    let seconds = std::env::var("SHOPEASY_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    chaos_run(seconds, &chaos::CHAOS_EDGES, rate()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "five minutes: run with --ignored"]
async fn invariants_hold_under_five_minutes_of_chaos() {
    chaos_run(300, &chaos::CHAOS_EDGES, None).await;
}

/// The same generator with the faults on the order and inventory
/// databases instead (F1–F4 on the Postgres edges, both directions of
/// `reset_peer`: some resets hit a COMMIT's answer, so a keyed retry must
/// find the committed order instead of inserting another: C1, C2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invariants_hold_under_chaos_on_the_databases() {
    chaos_run(10, &chaos::STORAGE_EDGES, None).await;
}

#[test]
fn the_same_seed_gives_the_same_schedule() {
    let a = chaos::schedule(42, Duration::from_secs(30));
    let b = chaos::schedule(42, Duration::from_secs(30));
    let c = chaos::schedule(43, Duration::from_secs(30));
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert!(a.iter().any(|s| s.fault.is_some()));
}
