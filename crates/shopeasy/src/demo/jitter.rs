//! `jitter`: clients that failed together retry together — unless the wait
//! is jittered.
//!
//! First the lesson's clients A, B and C: the ticks of their four retries
//! with `shopeasy_resilience::backoff` (1 tick doubling, seeded), without
//! and with full jitter. Then the AWS "Exponential Backoff and Jitter"
//! experiment, for real: 100 clients whose first call failed at the same
//! moment retry three times against a provider that keeps answering 503,
//! through a fault proxy, each with its own seeded generator; the provider
//! counts the retries arriving in every 100 ms, for no jitter and for full,
//! equal and decorrelated jitter. The figure is the peak: the most retries
//! in any 100 ms.

use std::{sync::Arc, time::Duration};

use rand::{SeedableRng, rngs::StdRng};
use shopeasy_faults::{FaultProxy, ProxyConfig};
use shopeasy_resilience::backoff::{Backoff, Jitter};
use tokio::{task::JoinSet, time::Instant};

use super::{
    Outcome, Run, Scene, SceneInfo, TICK, Timeline,
    stub::{Answer, Stub},
};

/// What `--list` and `--help` say.
pub const INFO: SceneInfo = SceneInfo {
    name: "jitter",
    summary: "clients retrying together without jitter, apart with it (100 clients, peak per 100 ms)",
    help: "First the lesson's clients A, B and C: the ticks of four retries with \
ShopEasy's backoff (shopeasy_resilience::backoff, 1 tick doubling to 8, seeded by \
--seed), without jitter and with full jitter. Then 100 clients whose first call failed \
at the same moment retry three times (400 ms doubling, at most 1.6 s) against a provider behind a \
fault proxy that answers 503 to everything; the provider counts the retries arriving \
in each 100 ms, without jitter and with full, equal and decorrelated jitter.",
    expected: "without jitter A, B and C retry on the same ticks (1 3 7 15); with full \
jitter the peak of retries per 100 ms is at most half of the peak without",
};

/// Clients of the herd.
const CLIENTS: u64 = 100;
/// Retries each client of the herd makes.
const RETRIES: u32 = 3;
/// The herd's backoff base: four bins, so that one retry's jitter has
/// room to spread (with a base of one bin, every first retry lands in the
/// first bin, jittered or not).
const BASE: Duration = Duration::from_millis(400);
/// The width of a bin, as in the AWS article's figure.
const BIN: Duration = Duration::from_millis(100);

/// The kinds, in the order they are shown.
const KINDS: [(Jitter, &str); 4] = [
    (Jitter::None, "none"),
    (Jitter::Full, "full"),
    (Jitter::Equal, "equal"),
    (Jitter::Decorrelated, "decorrelated"),
];

/// Runs the scene.
///
/// # Errors
/// The stub or the proxy cannot listen.
pub async fn run(run: &Run) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(Scene::Jitter);
    let same_ticks = three_clients(run.seed, &mut outcome);

    let stub = Stub::start(&[], Answer::Status(503)).await?;
    let proxy = FaultProxy::start_with(
        ProxyConfig::new("demo-provider", stub.addr().to_string()).listen("127.0.0.1:0"),
    )
    .await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::try_from(CLIENTS).unwrap_or(100))
        .timeout(Duration::from_secs(5))
        .build()?;
    let url = Arc::new(format!("http://{}", proxy.listen_addr()));
    let mut table = Timeline::new(
        "100 clients: retries arriving per 100 ms at the provider",
        &["jitter", "peak", "vs none", "retries", "per 100 ms"],
    );
    let mut peaks = Vec::new();
    for (jitter, name) in KINDS {
        stub.script(&[], Answer::Status(503));
        let start = herd(&http, &url, jitter, run.seed).await;
        let bins = bins(&stub, start);
        let peak = bins.iter().copied().max().unwrap_or(0);
        let retries: u32 = bins.iter().sum();
        peaks.push(peak);
        let none = peaks.first().copied().unwrap_or(peak).max(1);
        table.push([
            name.to_owned(),
            peak.to_string(),
            format!("{:.2}", f64::from(peak) / f64::from(none)),
            retries.to_string(),
            bins.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        ]);
    }
    proxy.stop().await;
    outcome.timelines.push(table);

    let [none, full, equal, decorrelated] = [peaks[0], peaks[1], peaks[2], peaks[3]];
    outcome.figure("peak_none", f64::from(none));
    outcome.figure("peak_full", f64::from(full));
    outcome.figure("peak_equal", f64::from(equal));
    outcome.figure("peak_decorrelated", f64::from(decorrelated));
    let ratio = f64::from(full) / f64::from(none.max(1));
    outcome.figure("peak_ratio_full", ratio);
    outcome.measured = format!(
        "peak retries per 100 ms: {none} without jitter, {full} with full jitter \
         (ratio {ratio:.2}), {equal} equal, {decorrelated} decorrelated"
    );
    outcome.passed = same_ticks && none > 0 && 2 * full <= none;
    Ok(outcome)
}

/// The lesson's A, B and C: the tick of each of four retries, without
/// jitter and with full jitter. True when, without jitter, all three retry
/// on the same ticks.
fn three_clients(seed: u64, outcome: &mut Outcome) -> bool {
    let backoff = |jitter| Backoff::new(TICK, TICK * 8, jitter);
    let mut table = Timeline::new(
        "clients A, B and C: the ticks of their retries",
        &["client", "jitter", "retry ticks"],
    );
    let mut plain = Vec::new();
    for (jitter, name) in [(Jitter::None, "no"), (Jitter::Full, "full")] {
        for (i, client) in ["A", "B", "C"].into_iter().enumerate() {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_add(i as u64));
            let ticks = schedule(&backoff(jitter), 4, &mut rng)
                .iter()
                .map(|at| format!("{:.1}", at.as_secs_f64() / TICK.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(" ");
            if jitter == Jitter::None {
                plain.push(ticks.clone());
            }
            table.push([client.to_owned(), name.to_owned(), ticks]);
        }
    }
    outcome.timelines.push(table);
    plain.windows(2).all(|w| w[0] == w[1]) && plain.first().is_some_and(|t| t == "1.0 3.0 7.0 15.0")
}

/// When each retry happens, from the failure: the running sum of the
/// backoff's delays.
fn schedule(backoff: &Backoff, retries: u32, rng: &mut StdRng) -> Vec<Duration> {
    let mut at = Duration::ZERO;
    let mut prev = Duration::ZERO;
    (0..retries)
        .map(|n| {
            prev = backoff.delay(n, prev, rng);
            at += prev;
            at
        })
        .collect()
}

/// The herd: every client's first attempt at once, then its retries on its
/// own schedule. Returns when the herd started.
async fn herd(http: &reqwest::Client, url: &Arc<String>, jitter: Jitter, seed: u64) -> Instant {
    // Capped at the third retry's ceiling: no-jitter and full jitter are
    // not cut, decorrelated jitter cannot wander for seconds.
    let backoff = Backoff::new(BASE, BASE * 4, jitter);
    let start = Instant::now();
    let mut clients = JoinSet::new();
    for client in 0..CLIENTS {
        let http = http.clone();
        let url = url.clone();
        let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(client));
        let plan = schedule(&backoff, RETRIES, &mut rng);
        clients.spawn(async move {
            let _ = http.get(format!("{url}/attempt/0")).send().await;
            for (n, at) in plan.into_iter().enumerate() {
                tokio::time::sleep_until(start + at).await;
                let _ = http.get(format!("{url}/attempt/{}", n + 1)).send().await;
            }
        });
    }
    while clients.join_next().await.is_some() {}
    start
}

/// Retries (attempts after the first) arriving in each 100 ms from `start`.
fn bins(stub: &Stub, start: Instant) -> Vec<u32> {
    let mut bins = Vec::new();
    for arrival in stub.arrivals() {
        if arrival.path.ends_with("/attempt/0") {
            continue;
        }
        let at = arrival.at.saturating_duration_since(start);
        let bin = usize::try_from(at.as_millis() / BIN.as_millis()).unwrap_or(usize::MAX);
        if bin >= 1000 {
            continue;
        }
        if bins.len() <= bin {
            bins.resize(bin + 1, 0);
        }
        bins[bin] += 1;
    }
    bins
}
