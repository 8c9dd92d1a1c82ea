//! The adaptive concurrency limit: a pure function of observed latency.
//!
//! Gradient2-like (Netflix concurrency-limits): two moving averages of the
//! service time of admitted requests, a *short* one (the last few dozen
//! requests: what the service does now) and a *long* one (the last several
//! hundred: what it does normally). Their ratio is the gradient:
//!
//! ```text
//! gradient = clamp(tolerance × long / short, 0.5, 1.0)
//! target   = limit × gradient + √limit          (√limit: the headroom a queue may use)
//! limit    = limit × (1 − smoothing) + target × smoothing,  within [min, max]
//! ```
//!
//! While the service answers as fast as usual (`short ≤ tolerance × long`)
//! the gradient is 1 and the limit grows by a smoothed √limit per request;
//! when work piles up inside the service and latency rises, the gradient
//! falls below 1 and the limit shrinks in proportion. Because the long
//! average follows slowly, a lasting change of the normal latency (a slower
//! disk, a cold cache) is learnt as the new normal instead of holding the
//! limit down forever; when latency drops below the long average by more
//! than half, the long average is pulled down quickly (as Gradient2 does),
//! so recovery is not held back by an inflated baseline.
//!
//! **Application-limited.** A service that has less work than its limit
//! tells us nothing about what more it could take: while fewer than half the
//! limit's slots are busy, the limit does not grow past its initial value
//! (Gradient2 does not grow at all then; we let it recover to the initial
//! value, so a limit pushed down by a slow spell is back where it started
//! once latency is normal again, even if the load that follows is light).
//!
//! Pure: it takes each sample and the in-flight count, keeps no clock and no
//! atomics, so every property is a unit test.

use std::time::Duration;

/// The moving-average length of the short (recent) service time, in samples.
const SHORT_WINDOW: f64 = 20.0;
/// The moving-average length of the long (normal) service time, in samples
/// (Gradient2's default).
const LONG_WINDOW: f64 = 600.0;
/// How much slower than normal the service may answer before the limit
/// shrinks (Gradient2 uses 1.5; 2 keeps ordinary jitter from shrinking it).
const TOLERANCE: f64 = 2.0;
/// The share of each new target taken into the limit per sample.
const SMOOTHING: f64 = 0.05;

/// The limit's parameters (validated by the caller: `1 ≤ min ≤ initial ≤
/// max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitConfig {
    /// Where the limit starts, and what it recovers to under light load.
    pub initial: usize,
    /// It never falls below this (at least 1).
    pub min: usize,
    /// It never grows above this.
    pub max: usize,
}

/// The state of the adaptive limit.
#[derive(Debug, Clone)]
pub struct GradientLimit {
    config: LimitConfig,
    limit: f64,
    short: Ema,
    long: Ema,
}

impl GradientLimit {
    /// A limit at `config.initial`, with no latency seen yet.
    pub fn new(config: LimitConfig) -> Self {
        let min = config.min.max(1);
        let max = config.max.max(min);
        let config = LimitConfig {
            initial: config.initial.clamp(min, max),
            min,
            max,
        };
        Self {
            config,
            limit: config.initial as f64,
            short: Ema::new(SHORT_WINDOW),
            long: Ema::new(LONG_WINDOW),
        }
    }

    /// The limit now: how many requests may be in flight at once.
    pub fn limit(&self) -> usize {
        // Truncation is intended: a limit of 4.9 admits 4.
        (self.limit as usize).clamp(self.config.min, self.config.max)
    }

    /// The parameters.
    pub fn config(&self) -> LimitConfig {
        self.config
    }

    /// The recent service time (what a request admitted now is expected to
    /// take); zero before the first sample.
    pub fn expected(&self) -> Duration {
        Duration::from_secs_f64(self.short.value.unwrap_or(0.0))
    }

    /// The normal service time (the long average); zero before the first
    /// sample.
    pub fn baseline(&self) -> Duration {
        Duration::from_secs_f64(self.long.value.unwrap_or(0.0))
    }

    /// Takes one admitted request's service time, `in_flight` being the
    /// number of requests in flight when it finished (itself included).
    pub fn on_sample(&mut self, rtt: Duration, in_flight: usize) {
        // A zero sample (a clock that did not move) would make the ratio
        // meaningless: count it as one microsecond.
        let rtt = rtt.as_secs_f64().max(1e-6);
        let short = self.short.update(rtt);
        let mut long = self.long.update(rtt);
        if long / short > 2.0 {
            // Latency fell well below the baseline: let the baseline follow
            // quickly, or the limit would keep growing on a stale high one.
            long *= 0.95;
            self.long.value = Some(long);
        }

        let gradient = (TOLERANCE * long / short).clamp(0.5, 1.0);
        let target = self.limit * gradient + self.limit.sqrt();
        let mut next = self.limit * (1.0 - SMOOTHING) + target * SMOOTHING;

        let app_limited = (in_flight as f64) < self.limit / 2.0;
        if app_limited && next > self.limit {
            // Idle capacity says nothing about more: grow only back to the
            // initial limit.
            next = next.min(self.limit.max(self.config.initial as f64));
        }
        self.limit = next.clamp(self.config.min as f64, self.config.max as f64);
    }
}

/// An exponential moving average over about `window` samples (the first
/// sample is taken as is).
#[derive(Debug, Clone, Copy)]
struct Ema {
    alpha: f64,
    value: Option<f64>,
}

impl Ema {
    fn new(window: f64) -> Self {
        Self {
            alpha: 2.0 / (window + 1.0),
            value: None,
        }
    }

    fn update(&mut self, sample: f64) -> f64 {
        let v = match self.value {
            None => sample,
            Some(v) => v + self.alpha * (sample - v),
        };
        self.value = Some(v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: LimitConfig = LimitConfig {
        initial: 20,
        min: 2,
        max: 200,
    };

    fn feed(l: &mut GradientLimit, n: usize, ms: u64, busy: bool) {
        for _ in 0..n {
            let in_flight = if busy { l.limit() } else { 1 };
            l.on_sample(Duration::from_millis(ms), in_flight);
        }
    }

    #[test]
    fn steady_latency_under_full_load_grows_the_limit_to_its_ceiling() {
        let mut l = GradientLimit::new(CFG);
        feed(&mut l, 3000, 5, true);
        assert_eq!(l.limit(), 200);
    }

    #[test]
    fn rising_latency_shrinks_the_limit_and_normal_latency_brings_it_back() {
        let mut l = GradientLimit::new(CFG);
        feed(&mut l, 600, 5, true);
        let before = l.limit();
        assert!(before > 20, "grew under load at normal latency: {before}");
        feed(&mut l, 100, 50, true);
        let during = l.limit();
        assert!(
            during < before / 2,
            "10× latency must shrink it: {before} → {during}"
        );
        feed(&mut l, 1500, 5, true);
        assert!(l.limit() >= before, "back up: {} vs {before}", l.limit());
    }

    #[test]
    fn light_load_recovers_to_the_initial_limit_but_not_beyond() {
        let mut l = GradientLimit::new(CFG);
        feed(&mut l, 50, 5, false);
        assert_eq!(l.limit(), 20, "light load does not grow it");
        feed(&mut l, 60, 60, true);
        assert!(l.limit() < 15, "shrunk: {}", l.limit());
        feed(&mut l, 2000, 5, false);
        assert_eq!(l.limit(), 20, "recovered to the initial value only");
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let mut l = GradientLimit::new(CFG);
        feed(&mut l, 2000, 1, true);
        feed(&mut l, 2000, 10_000, true);
        assert!(l.limit() >= 2);
        for ms in [0, 1, 100_000] {
            l.on_sample(Duration::from_millis(ms), 1000);
            assert!((2..=200).contains(&l.limit()));
        }
        let odd = GradientLimit::new(LimitConfig {
            initial: 500,
            min: 0,
            max: 10,
        });
        assert_eq!(odd.limit(), 10);
    }

    #[test]
    fn the_expected_service_time_follows_recent_samples() {
        let mut l = GradientLimit::new(CFG);
        assert_eq!(l.expected(), Duration::ZERO);
        feed(&mut l, 100, 40, true);
        let e = l.expected().as_secs_f64();
        assert!((0.039..0.041).contains(&e), "{e}");
    }
}
