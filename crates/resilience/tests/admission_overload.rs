//! The adaptive limit against a modelled server under open-loop overload,
//! on tokio's paused clock: the property the overload benchmark checks
//! (admitted latency stays within 3× the unloaded latency while goodput
//! stays near capacity), a lasting change of the base latency being learnt,
//! and recovery once the load drops.
//!
//! The model: a server that serves `capacity` requests at once in `service`
//! each; a request admitted while `n` are in flight (itself included) takes
//! `service × max(1, n / capacity)` — the work queued inside the service
//! (pools, locks, the runtime) that admission exists to keep out. Its
//! throughput is `capacity / service` whatever the concurrency, so every
//! request admitted beyond `capacity` only adds latency.

// The model's helpers panic on a broken model, as the tests themselves do.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shopeasy_resilience::admission::{Admission, AdmissionConfig, LimitConfig, Phase};
use tokio::time::Instant;

/// The modelled server.
struct Server {
    capacity: usize,
    service_us: AtomicU64,
    in_flight: AtomicUsize,
}

impl Server {
    fn new(capacity: usize, service: Duration) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            service_us: AtomicU64::new(u64::try_from(service.as_micros()).unwrap()),
            in_flight: AtomicUsize::new(0),
        })
    }

    fn set_service(&self, service: Duration) {
        self.service_us.store(
            u64::try_from(service.as_micros()).unwrap(),
            Ordering::SeqCst,
        );
    }

    /// Serves one admitted request.
    async fn serve(&self) {
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let base = self.service_us.load(Ordering::SeqCst) as f64;
        let factor = (n as f64 / self.capacity as f64).max(1.0);
        tokio::time::sleep(Duration::from_micros((base * factor) as u64)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One answered request: when it arrived (from the run's start), how long
/// its answer took, and whether it was admitted.
#[derive(Debug, Clone, Copy)]
struct Answer {
    arrived: Duration,
    took: Duration,
    admitted: bool,
}

/// What a span of a run saw.
#[derive(Debug)]
struct Stats {
    offered: usize,
    admitted: usize,
    p99_admitted: Duration,
    p99_refused: Duration,
}

/// Everything a run saw: each answer, and the limit every 10 ms while it
/// followed the gradient (not while held at `min` for a measurement).
#[derive(Debug, Default)]
struct Record {
    answers: Vec<Answer>,
    limits: Vec<(Duration, usize)>,
}

type Log = Arc<Mutex<Record>>;

/// The median limit between `from` and `to`, measurements left out.
fn tracking_limit(record: &Record, from: Duration, to: Duration) -> usize {
    let mut l: Vec<_> = record
        .limits
        .iter()
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|(_, l)| *l)
        .collect();
    l.sort_unstable();
    l.get(l.len() / 2).copied().unwrap_or_default()
}

fn stats(record: &Record, from: Duration, to: Duration) -> Stats {
    let span: Vec<_> = record
        .answers
        .iter()
        .filter(|a| a.arrived >= from && a.arrived < to)
        .collect();
    let p99 = |admitted: bool| {
        let mut t: Vec<_> = span
            .iter()
            .filter(|a| a.admitted == admitted)
            .map(|a| a.took)
            .collect();
        t.sort();
        t.get((t.len() * 99).div_ceil(100).saturating_sub(1))
            .copied()
            .unwrap_or_default()
    };
    Stats {
        offered: span.len(),
        admitted: span.iter().filter(|a| a.admitted).count(),
        p99_admitted: p99(true),
        p99_refused: p99(false),
    }
}

/// How much load: `per_tick` requests every `tick`.
#[derive(Debug, Clone, Copy)]
struct Rate {
    per_tick: usize,
    tick: Duration,
}

/// `n` times the modelled capacity (1,000 requests per second).
fn times_capacity(n: usize) -> Rate {
    Rate {
        per_tick: n,
        tick: Duration::from_millis(1),
    }
}

/// Offers `rate`, open loop, from `from` to `to` after `t0`; each admitted
/// request is served by `server`. Returns once every request of the span
/// has been answered.
async fn offer(
    a: &Admission,
    server: &Arc<Server>,
    t0: Instant,
    (from, to): (Duration, Duration),
    rate: Rate,
    log: &Log,
) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut at = from;
    while at < to {
        tokio::time::sleep_until(t0 + at).await;
        if at.as_millis() % 10 == 0 {
            let s = a.snapshot();
            if s.phase == Phase::Tracking {
                log.lock().unwrap().limits.push((at, s.limit));
            }
        }
        for _ in 0..rate.per_tick {
            let (a, server, log) = (a.clone(), server.clone(), log.clone());
            tasks.spawn(async move {
                let arrived = Instant::now();
                let admitted = match a.acquire(None).await {
                    Ok(permit) => {
                        server.serve().await;
                        permit.complete();
                        true
                    }
                    Err(_) => false,
                };
                log.lock().unwrap().answers.push(Answer {
                    arrived: arrived - t0,
                    took: arrived.elapsed(),
                    admitted,
                });
            });
        }
        at += rate.tick;
    }
    tasks.join_all().await;
}

fn admission() -> Admission {
    Admission::new(
        "model",
        AdmissionConfig {
            limit: LimitConfig {
                initial: 64,
                min: 4,
                max: 1000,
                ..LimitConfig::default()
            },
            ..AdmissionConfig::default()
        },
    )
}

const CAPACITY: usize = 20;
const SERVICE: Duration = Duration::from_millis(20);
const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn at_three_times_capacity_admitted_latency_stays_within_three_times_the_unloaded() {
    let a = admission();
    let server = Server::new(CAPACITY, SERVICE);
    let log = Log::default();
    let t0 = Instant::now();
    offer(
        &a,
        &server,
        t0,
        (Duration::ZERO, 20 * SECOND),
        times_capacity(3),
        &log,
    )
    .await;

    let record = log.lock().unwrap();
    // The first seconds find the limit; the rest is the steady state.
    let s = stats(&record, 5 * SECOND, 20 * SECOND);
    let goodput = s.admitted as f64 / 15.0;
    let limit = tracking_limit(&record, 5 * SECOND, 20 * SECOND);
    eprintln!("3× capacity, steady state: {s:?}, goodput {goodput:.0}/s, limit {limit}");
    assert!(
        s.p99_admitted <= 3 * SERVICE,
        "p99 of admitted {:?} > 3 × {SERVICE:?} (limit {limit}, {s:?})",
        s.p99_admitted
    );
    assert!(
        goodput >= 900.0,
        "goodput {goodput:.0}/s < 90 % of 1,000/s ({s:?})"
    );
    assert!(
        s.p99_refused <= Duration::from_millis(5),
        "refusals within the standing-queue target: {s:?}"
    );
    assert!(
        (CAPACITY..=3 * CAPACITY).contains(&limit),
        "the limit sits near the capacity {CAPACITY}: {limit}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lasting_doubling_of_the_service_time_is_learnt_not_held_at_the_floor() {
    let a = admission();
    let server = Server::new(CAPACITY, SERVICE);
    let log = Log::default();
    let t0 = Instant::now();
    offer(
        &a,
        &server,
        t0,
        (Duration::ZERO, 5 * SECOND),
        times_capacity(3),
        &log,
    )
    .await;
    // A slower disk: every request now takes twice as long; capacity halves.
    server.set_service(2 * SERVICE);
    offer(
        &a,
        &server,
        t0,
        (5 * SECOND, 25 * SECOND),
        times_capacity(3),
        &log,
    )
    .await;

    let record = log.lock().unwrap();
    let s = stats(&record, 15 * SECOND, 25 * SECOND);
    let goodput = s.admitted as f64 / 10.0;
    let before = tracking_limit(&record, 2 * SECOND, 5 * SECOND);
    let limit = tracking_limit(&record, 15 * SECOND, 25 * SECOND);
    let after = a.snapshot();
    eprintln!("service time doubled: {s:?}, goodput {goodput:.0}/s, limit {limit}, {after:?}");
    assert!(
        limit >= CAPACITY * 3 / 4,
        "the limit came back near the capacity ({CAPACITY}) instead of staying \
         near its floor: {limit} (before the change {before})"
    );
    assert!(
        goodput >= 0.8 * 500.0,
        "goodput {goodput:.0}/s at the new capacity of 500/s ({s:?})"
    );
    assert!(
        s.p99_admitted <= 3 * 2 * SERVICE,
        "admitted latency within 3× the new service time: {s:?}"
    );
    assert!(
        after.min_rtt_ms.unwrap() >= 1.5 * SERVICE.as_secs_f64() * 1e3,
        "the new normal was measured: {after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn after_the_overload_ends_nothing_is_refused_and_latency_is_back_to_normal() {
    let a = admission();
    let server = Server::new(CAPACITY, SERVICE);
    let log = Log::default();
    let t0 = Instant::now();
    // Overloaded while slow (a database slowed to 4× its latency), then
    // half the capacity at the normal latency.
    server.set_service(4 * SERVICE);
    offer(
        &a,
        &server,
        t0,
        (Duration::ZERO, 5 * SECOND),
        times_capacity(3),
        &log,
    )
    .await;
    let shed = a.snapshot().requests;
    assert!(shed.refused_full > 0, "the overload was shed: {shed:?}");
    server.set_service(SERVICE);
    let half = Rate {
        per_tick: 1,
        tick: Duration::from_millis(2),
    };
    offer(&a, &server, t0, (5 * SECOND, 15 * SECOND), half, &log).await;

    let record = log.lock().unwrap();
    let s = stats(&record, 8 * SECOND, 15 * SECOND);
    let during = tracking_limit(&record, 2 * SECOND, 5 * SECOND);
    let after = tracking_limit(&record, 10 * SECOND, 15 * SECOND);
    eprintln!("after the overload: {s:?}, limit {during} → {after}");
    assert_eq!(
        s.admitted, s.offered,
        "nothing refused after recovery: {s:?}"
    );
    assert!(
        s.p99_admitted <= SERVICE + Duration::from_millis(1),
        "unqueued again: {s:?}"
    );
    assert!(
        after >= CAPACITY,
        "the limit came back up: {after} (during the overload {during})"
    );
}
