//! What the resilience stack costs on the happy path, and how it scales.
//!
//! Every benchmark drives an always-ready in-memory service directly
//! (`poll_ready`, `call`, one poll with a no-op waker): the figures are the
//! stack's own overhead, with no runtime scheduling in them.
//!
//! - `stack/full`: deadline → retry (budget) → breaker → bulkhead → attempt
//!   timeout → service, per call (target ≤ 250 ns median).
//! - `stack/open_breaker`: a call refused by an open breaker (≤ 100 ns).
//! - `threads/1`, `threads/2`: the full stack on one and two threads sharing
//!   one budget, breaker and bulkhead; time per call over all threads
//!   (two threads should reach ≥ 1.7× the throughput of one).
//! - `compare/ours` vs `compare/tower`: our retry + budget against tower's
//!   `Retry` + `TpsBudget`, same service, same run.
//!
//! Clock: by default each figure is the *on-CPU* time of the calling
//! thread(s) (Linux `/proc/thread-self/schedstat`), so other processes on a
//! busy machine do not inflate it; `BENCH_CLOCK=wall` measures wall-clock
//! time instead. The kernel updates a thread's CPU time at every scheduler
//! tick, so samples are flat (equal) and should be long: use
//! `--measurement-time 10` or more with the on-CPU clock. For `threads/2`
//! the on-CPU figure is the busier thread's
//! CPU time: contention between the threads (shared cache lines) shows up in
//! it, time spent waiting for a free core does not.
//!
//! Run: `cargo bench -p shopeasy-resilience -- --warm-up-time 1 --measurement-time 3`.

use std::future::Future;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{Criterion, SamplingMode, criterion_main};
use shopeasy_resilience::backoff::Backoff;
use shopeasy_resilience::breaker::{
    BreakerConfig, BreakerHandle, BreakerLayer, GrpcClassifier, Outcome,
};
use shopeasy_resilience::budget::{BudgetConfig, RetryBudget};
use shopeasy_resilience::bulkhead::BulkheadLayer;
use shopeasy_resilience::deadline::{Call, DeadlineLayer};
use shopeasy_resilience::retry::{GrpcUnavailablePolicy, RetryLayer};
use shopeasy_resilience::timeout::AttemptTimeoutLayer;
use tower::retry::budget::{Budget, TpsBudget};
use tower::{BoxError, Service, ServiceBuilder};

type Req = Call<u32>;

/// Reads the clock the figures are in (see the crate docs above).
fn clock() -> Duration {
    fn wall_origin() -> &'static tokio::time::Instant {
        static ORIGIN: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(tokio::time::Instant::now)
    }
    let wall = std::env::var("BENCH_CLOCK").is_ok_and(|v| v == "wall");
    if !wall
        && let Ok(stat) = std::fs::read_to_string("/proc/thread-self/schedstat")
        && let Some(Ok(ns)) = stat.split_whitespace().next().map(str::parse::<u64>)
    {
        return Duration::from_nanos(ns);
    }
    wall_origin().elapsed()
}

/// Times `iters` runs of `f` on this thread.
fn timed(iters: u64, mut f: impl FnMut()) -> Duration {
    let start = clock();
    for _ in 0..iters {
        f();
    }
    clock().saturating_sub(start)
}

fn service() -> impl Service<
    Req,
    Response = u32,
    Error = BoxError,
    Future = std::future::Ready<Result<u32, BoxError>>,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|c: Req| std::future::ready(Ok::<u32, BoxError>(c.message)))
}

fn full_stack(
    breaker: BreakerHandle,
    budget: RetryBudget,
    bulkhead: BulkheadLayer,
) -> impl Service<Req, Response = u32, Error = BoxError> + Clone + Send + 'static {
    ServiceBuilder::new()
        .layer(DeadlineLayer::new(Duration::from_secs(10)))
        .layer(RetryLayer::new(
            GrpcUnavailablePolicy,
            budget,
            Backoff::default(),
            2,
            "bench",
        ))
        .layer(BreakerLayer::new(breaker, GrpcClassifier))
        .layer(bulkhead)
        .layer(AttemptTimeoutLayer::new(Duration::from_secs(3)))
        .service(service())
}

/// One call, driven to completion without a scheduler.
fn call_once<S: Service<Req>>(svc: &mut S, cx: &mut Context<'_>, n: u32) -> bool {
    if !matches!(svc.poll_ready(cx), Poll::Ready(Ok(()))) {
        return false;
    }
    let mut fut = std::pin::pin!(svc.call(Call::new(n)));
    match fut.as_mut().poll(cx) {
        Poll::Ready(r) => black_box(r.is_ok()),
        Poll::Pending => false,
    }
}

fn shared() -> (BreakerHandle, RetryBudget, BulkheadLayer) {
    (
        BreakerHandle::new("bench", BreakerConfig::default()),
        RetryBudget::new(BudgetConfig::default()),
        BulkheadLayer::new(1024),
    )
}

/// A current-thread runtime with timers: the services are polled by hand
/// on it, so that a sample measures the stack, not a scheduler.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// A benchmark group of equal samples, each long enough for the on-CPU
/// clock (updated per tick).
fn flat_group<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sampling_mode(SamplingMode::Flat);
    g
}

fn bench_stack(c: &mut Criterion) {
    let rt = runtime();
    let _rt = rt.enter();
    let mut cx = Context::from_waker(Waker::noop());
    let mut g = flat_group(c, "stack");

    let (breaker, budget, bulkhead) = shared();
    let mut svc = full_stack(breaker, budget, bulkhead);
    let mut n = 0u32;
    g.bench_function("full", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                n = n.wrapping_add(1);
                assert!(call_once(&mut svc, &mut cx, n));
            })
        })
    });

    let open = BreakerHandle::new("bench-open", BreakerConfig::default());
    for _ in 0..5 {
        if let Ok(p) = open.try_acquire() {
            p.record(Outcome::Failure);
        }
    }
    let mut svc = ServiceBuilder::new()
        .layer(BreakerLayer::new(open, GrpcClassifier))
        .service(service());
    g.bench_function("open_breaker", |b| {
        b.iter_custom(|iters| timed(iters, || assert!(!call_once(&mut svc, &mut cx, 1))))
    });
    g.finish();
}

/// `iters` calls of the full stack spread over `threads` threads (one
/// service clone each, shared breaker, budget and bulkhead).
fn run_threads(threads: usize, iters: u64) -> Duration {
    let (breaker, budget, bulkhead) = shared();
    let svc = full_stack(breaker, budget, bulkhead);
    let per = iters / threads as u64;
    let barrier = Arc::new(Barrier::new(threads));
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let mut svc = svc.clone();
                let barrier = barrier.clone();
                s.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_time()
                        .build()
                        .expect("runtime");
                    let _rt = rt.enter();
                    let mut cx = Context::from_waker(Waker::noop());
                    barrier.wait();
                    let mut i = 0u32;
                    timed(per, || {
                        i = i.wrapping_add(1);
                        assert!(call_once(&mut svc, &mut cx, i));
                    })
                })
            })
            .collect();
        // The run takes as long as its slowest thread.
        workers
            .into_iter()
            .map(|w| w.join().expect("bench thread"))
            .max()
            .unwrap_or_default()
    })
}

fn bench_threads(c: &mut Criterion) {
    let mut g = flat_group(c, "threads");
    for threads in [1, 2] {
        g.bench_function(threads.to_string(), |b| {
            b.iter_custom(|iters| run_threads(threads, iters.max(threads as u64)))
        });
    }
    g.finish();
}

/// tower's `Retry` with a `TpsBudget`: deposit on success, withdraw to retry.
#[derive(Clone)]
struct TowerPolicy(Arc<TpsBudget>);

impl tower::retry::Policy<Req, u32, BoxError> for TowerPolicy {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        _req: &mut Req,
        result: &mut Result<u32, BoxError>,
    ) -> Option<Self::Future> {
        match result {
            Ok(_) => {
                self.0.deposit();
                None
            }
            Err(_) => self.0.withdraw().then(|| std::future::ready(())),
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

fn bench_compare(c: &mut Criterion) {
    let rt = runtime();
    let _rt = rt.enter();
    let mut cx = Context::from_waker(Waker::noop());
    let mut g = flat_group(c, "compare");

    let mut ours = ServiceBuilder::new()
        .layer(RetryLayer::new(
            GrpcUnavailablePolicy,
            RetryBudget::new(BudgetConfig::default()),
            Backoff::default(),
            2,
            "bench",
        ))
        .service(service());
    g.bench_function("ours", |b| {
        b.iter_custom(|iters| timed(iters, || assert!(call_once(&mut ours, &mut cx, 1))))
    });

    let budget = Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2));
    let mut theirs = tower::retry::Retry::new(TowerPolicy(budget), service());
    g.bench_function("tower", |b| {
        b.iter_custom(|iters| timed(iters, || assert!(call_once(&mut theirs, &mut cx, 1))))
    });
    g.finish();
}

// The macro generates an undocumented `pub fn benches`.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(
        benches,
        super::bench_stack,
        super::bench_threads,
        super::bench_compare
    );
}
criterion_main!(group::benches);
