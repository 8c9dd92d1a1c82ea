//! Exponential backoff with a cap and jitter.
//!
//! Without jitter, clients that failed together retry together and knock the
//! recovering dependency over again (the thundering herd). The three jitter
//! kinds are the ones from the AWS Architecture Blog's "Exponential Backoff
//! and Jitter". With `ceiling(n) = min(cap, base × 2ⁿ)` for the `n`-th retry
//! (0-based):
//!
//! | kind | delay of retry `n` |
//! |---|---|
//! | [`Jitter::None`] | `ceiling(n)` |
//! | [`Jitter::Full`] | uniform in `[0, ceiling(n)]` |
//! | [`Jitter::Equal`] | uniform in `[ceiling(n)/2, ceiling(n)]` |
//! | [`Jitter::Decorrelated`] | uniform in `[base, max(base, 3 × prev)]`, capped at `cap` |
//!
//! Randomness is injected (`&mut impl Rng`) so tests are seeded.
//!
//! ```
//! use rand::SeedableRng;
//! use shopeasy_resilience::backoff::{Backoff, Jitter};
//! use std::time::Duration;
//!
//! let backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2), Jitter::Full);
//! let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
//! let d = backoff.delay(3, Duration::ZERO, &mut rng);
//! assert!(d <= Duration::from_millis(400));
//! ```

use std::time::Duration;

use rand::Rng;
use serde::Serialize;

/// How the delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// No randomness: `ceiling(n)`. Only for tests and demonstrations.
    None,
    /// Uniform in `[0, ceiling(n)]`: the least contention (the default).
    Full,
    /// Uniform in `[ceiling(n)/2, ceiling(n)]`: never retries immediately.
    Equal,
    /// Uniform in `[base, 3 × previous delay]`, capped.
    Decorrelated,
}

/// Exponential backoff: `base × 2ⁿ` capped at `cap`, jittered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Backoff {
    /// The delay before the first retry (before jitter).
    pub base: Duration,
    /// The largest delay.
    pub cap: Duration,
    /// How the delay is randomised.
    pub jitter: Jitter,
}

impl Default for Backoff {
    /// 25 ms doubling to at most 1 s, full jitter.
    fn default() -> Self {
        Self::new(
            Duration::from_millis(25),
            Duration::from_secs(1),
            Jitter::Full,
        )
    }
}

impl Backoff {
    /// A backoff from `base` doubling up to `cap`.
    pub fn new(base: Duration, cap: Duration, jitter: Jitter) -> Self {
        Self { base, cap, jitter }
    }

    /// `min(cap, base × 2^attempt)`: the upper end of retry `attempt`'s delay
    /// (0-based), before jitter.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The longest delay retry `attempt` can get: what a deadline check must
    /// assume.
    pub fn max_delay(&self, attempt: u32) -> Duration {
        match self.jitter {
            Jitter::Decorrelated => self.cap,
            _ => self.ceiling(attempt),
        }
    }

    /// The delay before retry `attempt` (0-based). `prev` is the previous
    /// delay (used by [`Jitter::Decorrelated`]; pass zero for the first).
    pub fn delay(&self, attempt: u32, prev: Duration, rng: &mut impl Rng) -> Duration {
        let ceiling = self.ceiling(attempt);
        match self.jitter {
            Jitter::None => ceiling,
            Jitter::Full => uniform(rng, Duration::ZERO, ceiling),
            Jitter::Equal => uniform(rng, ceiling / 2, ceiling),
            Jitter::Decorrelated => {
                let prev = prev.max(self.base);
                let high = prev.saturating_mul(3).max(self.base);
                uniform(rng, self.base, high).min(self.cap)
            }
        }
    }
}

/// Uniform in `[low, high]` at nanosecond resolution.
fn uniform(rng: &mut impl Rng, low: Duration, high: Duration) -> Duration {
    let lo = u64::try_from(low.as_nanos()).unwrap_or(u64::MAX);
    let hi = u64::try_from(high.as_nanos()).unwrap_or(u64::MAX);
    if hi <= lo {
        return low;
    }
    Duration::from_nanos(rng.random_range(lo..=hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    const BASE: Duration = Duration::from_millis(10);
    const CAP: Duration = Duration::from_millis(1000);

    #[test]
    fn ceiling_doubles_and_caps() {
        let b = Backoff::new(BASE, CAP, Jitter::None);
        let got: Vec<u64> = (0..10).map(|n| b.ceiling(n).as_millis() as u64).collect();
        assert_eq!(got, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        assert_eq!(b.ceiling(u32::MAX), CAP);
    }

    #[test]
    fn every_delay_lies_in_its_documented_range() {
        let mut rng = SmallRng::seed_from_u64(0x5eed);
        for jitter in [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ] {
            let b = Backoff::new(BASE, CAP, jitter);
            let mut prev = Duration::ZERO;
            for round in 0..20_000u32 {
                let n = round % 12;
                let d = b.delay(n, prev, &mut rng);
                let c = b.ceiling(n);
                let (lo, hi) = match jitter {
                    Jitter::None => (c, c),
                    Jitter::Full => (Duration::ZERO, c),
                    Jitter::Equal => (c / 2, c),
                    Jitter::Decorrelated => (BASE, (prev.max(BASE) * 3).min(CAP)),
                };
                assert!(
                    lo <= d && d <= hi,
                    "{jitter:?} n={n}: {d:?} not in [{lo:?}, {hi:?}]"
                );
                assert!(d <= b.max_delay(n));
                prev = d;
            }
        }
    }

    /// Kolmogorov–Smirnov: full jitter's delays (fixed seed, n = 10,000) are
    /// uniform on `[0, ceiling]`. At α = 0.01 the critical value is
    /// 1.628 / √n = 0.01628.
    #[test]
    fn full_jitter_is_uniform_kolmogorov_smirnov() {
        let n = 10_000;
        let b = Backoff::new(BASE, CAP, Jitter::Full);
        let ceiling = b.ceiling(4).as_secs_f64();
        let mut rng = SmallRng::seed_from_u64(42);
        let mut xs: Vec<f64> = (0..n)
            .map(|_| b.delay(4, Duration::ZERO, &mut rng).as_secs_f64() / ceiling)
            .collect();
        xs.sort_by(f64::total_cmp);
        let nf = n as f64;
        let d = xs
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let above = (i + 1) as f64 / nf - x;
                let below = x - i as f64 / nf;
                above.max(below)
            })
            .fold(0.0, f64::max);
        let critical = 1.628 / nf.sqrt();
        assert!(d < critical, "KS statistic {d} ≥ {critical}");

        // The test has teeth: equal jitter is not uniform on [0, ceiling].
        let e = Backoff::new(BASE, CAP, Jitter::Equal);
        let mut ys: Vec<f64> = (0..n)
            .map(|_| e.delay(4, Duration::ZERO, &mut rng).as_secs_f64() / ceiling)
            .collect();
        ys.sort_by(f64::total_cmp);
        let d_equal = ys
            .iter()
            .enumerate()
            .map(|(i, &x)| ((i + 1) as f64 / nf - x).abs())
            .fold(0.0, f64::max);
        assert!(d_equal > critical);
    }

    /// 1,000 clients fail at once and take their first retry: the busiest
    /// 10 ms bucket holds ≤ 2× the ideal (uniform) share with full jitter,
    /// and all 1,000 without jitter.
    #[test]
    fn herd_spreads_with_full_jitter_and_not_without() {
        let clients = 1_000;
        let bucket = Duration::from_millis(10);
        let peak = |jitter: Jitter, seed: u64| {
            let b = Backoff::new(Duration::from_millis(200), Duration::from_secs(10), jitter);
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut buckets = vec![0u32; 64];
            for _ in 0..clients {
                let d = b.delay(0, Duration::ZERO, &mut rng);
                let i = (d.as_nanos() / bucket.as_nanos()) as usize;
                buckets[i.min(63)] += 1;
            }
            buckets.into_iter().max().unwrap_or(0)
        };
        // 200 ms spread over 10 ms buckets: 20 buckets, ideal 50 per bucket.
        let ideal = clients / 20;
        let full = peak(Jitter::Full, 1);
        assert!(full <= 2 * ideal, "peak {full} > 2 × {ideal}");
        assert_eq!(peak(Jitter::None, 1), clients);
    }
}
