//! The retry budget: retries may add at most `ratio` of recent traffic.
//!
//! A fixed "3 attempts" multiplies load by 3 exactly when a dependency is
//! struggling; a budget caps the *extra* load instead (Finagle's
//! `RetryBudget`, gRPC's retry throttling, tower's `TpsBudget`). Over a
//! sliding window of `window`, retries are allowed while
//!
//! ```text
//! retries ≤ min_retries_per_window + ratio × requests
//! ```
//!
//! Each original request is counted once ([`RetryBudget::deposit`]) and each
//! retry once ([`RetryBudget::try_withdraw`]). The ratio is kept as an `f64`:
//! tower's `TpsBudget` turns it into an integer cost per retry (`1 / ratio`
//! truncated), so a ratio of 0.3 really allows one retry in 3 requests
//! (0.33); the tests below show the difference.
//!
//! Thread safety without a global lock: deposits go to per-thread cells of a
//! lock-free sliding window; a withdrawal checks the balance and counts
//! itself in one compare-and-swap, so two threads cannot both take the last
//! retry.
//!
//! ```
//! use shopeasy_resilience::budget::{BudgetConfig, RetryBudget};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let budget = RetryBudget::new(BudgetConfig {
//!     ratio: 0.2,
//!     min_retries_per_window: 0,
//!     window: Duration::from_secs(10),
//! });
//! for _ in 0..10 {
//!     budget.deposit();
//! }
//! assert!(budget.try_withdraw());
//! assert!(budget.try_withdraw());
//! assert!(!budget.try_withdraw(), "10 requests × 0.2 = 2 retries");
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::window::{SHARDS, SlidingWindow};

/// Slots in the sliding window (a power of two): it slides in steps of
/// `window / 16`.
const SLOTS: u32 = 16;

/// A retry budget's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BudgetConfig {
    /// Retries allowed per request seen (0..=1).
    pub ratio: f64,
    /// Retries always allowed per window, so a quiet service can retry.
    pub min_retries_per_window: u32,
    /// Length of the sliding window.
    pub window: Duration,
}

impl Default for BudgetConfig {
    /// 0.2, 10 per window, 10 s (SPEC §5 and `resilience.retry_budget`).
    fn default() -> Self {
        Self {
            ratio: 0.2,
            min_retries_per_window: 10,
            window: Duration::from_secs(10),
        }
    }
}

/// A shared retry budget for one downstream target. Cloning shares it.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: BudgetConfig,
    target: Option<&'static str>,
    requests: SlidingWindow,
    retries: SlidingWindow,
}

/// The balance gauge is refreshed on every withdrawal and on one deposit in
/// this many per thread (refreshing it on every call would cost more than
/// the budget itself).
const GAUGE_EVERY: u32 = 64;

thread_local! {
    static DEPOSITS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

impl RetryBudget {
    /// A budget with `config`; a ratio outside 0..=1 is clamped.
    pub fn new(config: BudgetConfig) -> Self {
        Self::build(None, config)
    }

    /// A budget for `target` that also reports its balance as the gauge
    /// `shopeasy_downstream_retry_budget_balance{target}` (refreshed on
    /// every withdrawal and on a sample of deposits).
    pub fn for_target(target: &'static str, config: BudgetConfig) -> Self {
        let budget = Self::build(Some(target), config);
        budget.publish();
        budget
    }

    fn build(target: Option<&'static str>, config: BudgetConfig) -> Self {
        let config = BudgetConfig {
            ratio: if config.ratio.is_finite() {
                config.ratio.clamp(0.0, 1.0)
            } else {
                0.0
            },
            ..config
        };
        Self {
            inner: Arc::new(Inner {
                config,
                target,
                requests: SlidingWindow::new(config.window, SLOTS, SHARDS),
                retries: SlidingWindow::new(config.window, SLOTS, 1),
            }),
        }
    }

    /// The budget's settings.
    pub fn config(&self) -> &BudgetConfig {
        &self.inner.config
    }

    /// Counts one original request (not a retry).
    pub fn deposit(&self) {
        self.inner.requests.add(crate::clock::now());
        if self.inner.target.is_some() {
            let n = DEPOSITS.with(|c| {
                let n = c.get().wrapping_add(1);
                c.set(n);
                n
            });
            if n.is_multiple_of(GAUGE_EVERY) {
                self.publish();
            }
        }
    }

    /// Takes one retry from the budget: `true` if allowed (and counted).
    pub fn try_withdraw(&self) -> bool {
        let now = Instant::now();
        let allowed = self.allowed(now);
        let granted = self
            .inner
            .retries
            .add_if(now, |retries| (retries + 1) as f64 <= allowed + 1e-9);
        self.publish();
        granted
    }

    /// Sets the balance gauge now (only for a budget made with
    /// [`RetryBudget::for_target`]).
    pub fn publish(&self) {
        if let Some(target) = self.inner.target {
            metrics::gauge!("shopeasy_downstream_retry_budget_balance", "target" => target)
                .set(self.balance());
        }
    }

    /// Retries still allowed in the current window (may be fractional).
    pub fn balance(&self) -> f64 {
        let now = Instant::now();
        self.allowed(now) - self.inner.retries.sum(now) as f64
    }

    fn allowed(&self, now: Instant) -> f64 {
        let c = &self.inner.config;
        f64::from(c.min_retries_per_window) + c.ratio * self.inner.requests.sum(now) as f64
    }

    /// Live state for `/admin/resilience`.
    pub fn snapshot(&self) -> serde_json::Value {
        self.publish();
        let now = Instant::now();
        let c = &self.inner.config;
        serde_json::json!({
            "balance": self.balance(),
            "requests_in_window": self.inner.requests.sum(now),
            "retries_in_window": self.inner.retries.sum(now),
            "ratio": c.ratio,
            "min_retries_per_window": c.min_retries_per_window,
            "window_seconds": c.window.as_secs_f64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::retry::budget::{Budget, TpsBudget};

    fn budget(ratio: f64, floor: u32) -> RetryBudget {
        RetryBudget::new(BudgetConfig {
            ratio,
            min_retries_per_window: floor,
            window: Duration::from_secs(10),
        })
    }

    /// Finagle's `RetryBudgetTest`: with time frozen, `n` rounds of
    /// deposit-then-withdraw allow `n × ratio + floor` retries, within 1.
    fn finagle_rounds(deposit: impl Fn(), withdraw: impl Fn() -> bool, n: u32) -> u32 {
        (0..n)
            .map(|_| {
                deposit();
                u32::from(withdraw())
            })
            .sum()
    }

    #[tokio::test(start_paused = true)]
    async fn finagle_budget_test_passes() {
        for (ratio, floor) in [(0.1, 0), (0.2, 10), (0.3, 0), (0.4, 5), (0.5, 0), (1.0, 0)] {
            let b = budget(ratio, floor);
            let n = 10_000;
            let got = finagle_rounds(|| b.deposit(), || b.try_withdraw(), n);
            let want = f64::from(n) * ratio + f64::from(floor);
            assert!(
                (f64::from(got) - want).abs() <= 1.0,
                "ratio {ratio} floor {floor}: {got} retries, want {want} ± 1"
            );
        }
    }

    /// tower's `TpsBudget` costs each retry `(1 / ratio) as isize` deposits:
    /// the truncation makes 0.3 behave as 0.33 and 0.4 as 0.5, so the same
    /// test fails for it.
    #[tokio::test(start_paused = true)]
    async fn tower_tps_budget_truncation_fails_the_finagle_test() {
        for ratio in [0.3f32, 0.4] {
            let b = TpsBudget::new(Duration::from_secs(10), 0, ratio);
            let n = 10_000;
            let got = finagle_rounds(|| b.deposit(), || b.withdraw(), n);
            let want = f64::from(n) * f64::from(ratio);
            assert!(
                (f64::from(got) - want).abs() > 1.0,
                "tower {ratio}: {got} vs {want}"
            );
            let ours = budget(f64::from(ratio), 0);
            let got = finagle_rounds(|| ours.deposit(), || ours.try_withdraw(), n);
            assert!((f64::from(got) - want).abs() <= 1.0);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn refuses_past_ratio_plus_floor_and_recovers_as_the_window_slides() {
        let b = budget(0.2, 3);
        for _ in 0..50 {
            b.deposit();
        }
        assert!((b.balance() - 13.0).abs() < 1e-9);
        let taken = (0..100).filter(|_| b.try_withdraw()).count();
        assert_eq!(taken, 13, "50 × 0.2 + 3");
        assert!(!b.try_withdraw());
        assert!(b.balance().abs() < 1e-9);

        // Half a window later nothing has slid out yet.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!b.try_withdraw());
        // A full window later both the requests and the retries slid out:
        // only the floor is left.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!((b.balance() - 3.0).abs() < 1e-9);
        assert_eq!((0..10).filter(|_| b.try_withdraw()).count(), 3);
        let snap = b.snapshot();
        assert_eq!(snap["retries_in_window"], 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_named_budget_reports_its_balance_as_a_gauge() {
        use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
        use std::sync::Mutex;
        #[derive(Default)]
        struct Last(Mutex<f64>);
        impl metrics::GaugeFn for Last {
            fn increment(&self, _: f64) {}
            fn decrement(&self, _: f64) {}
            fn set(&self, v: f64) {
                *self.0.lock().unwrap() = v;
            }
        }
        #[derive(Default)]
        struct Rec(Arc<Last>);
        impl metrics::Recorder for Rec {
            fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
            fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
            fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
            fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
                Counter::noop()
            }
            fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
                assert_eq!(key.name(), "shopeasy_downstream_retry_budget_balance");
                Gauge::from_arc(self.0.clone())
            }
            fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
                Histogram::noop()
            }
        }
        let rec = Rec::default();
        let last = rec.0.clone();
        let _guard = metrics::set_default_local_recorder(&rec);
        let b = RetryBudget::for_target("inventory", BudgetConfig::default());
        assert_eq!(*last.0.lock().unwrap(), 10.0);
        for _ in 0..GAUGE_EVERY * 2 {
            b.deposit();
        }
        assert!(
            *last.0.lock().unwrap() > 10.0,
            "sampled deposits refresh it"
        );
        assert!(b.try_withdraw());
        assert!((*last.0.lock().unwrap() - b.balance()).abs() < 1e-9);
    }

    /// 8 threads deposit and withdraw at once: the retries granted never
    /// exceed ratio × requests + floor, and no deposit is lost.
    #[test]
    fn correct_under_eight_threads_hammering() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let _guard = rt.enter();
        let b = budget(0.25, 7);
        let per_thread = 20_000u32;
        let granted: u32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let b = b.clone();
                    let handle = rt.handle().clone();
                    s.spawn(move || {
                        let _g = handle.enter();
                        let mut granted = 0;
                        for i in 0..per_thread {
                            b.deposit();
                            // Ask for far more than allowed: three per request.
                            for _ in 0..3 {
                                granted += u32::from(b.try_withdraw());
                            }
                            if i % 1000 == 0 {
                                std::hint::spin_loop();
                            }
                        }
                        granted
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let requests = 8 * per_thread;
        let allowed = f64::from(requests) * 0.25 + 7.0;
        assert_eq!(b.snapshot()["requests_in_window"], u64::from(requests));
        assert!(f64::from(granted) <= allowed, "{granted} > {allowed}");
        // The last request's deposit came after the last withdrawals of the
        // other threads, so at most a few grants are still owed.
        assert!(f64::from(granted) >= allowed - 8.0, "{granted} ≪ {allowed}");
    }
}
