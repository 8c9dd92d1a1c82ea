//! Latencies kept as a histogram of fixed size, not as samples.
//!
//! Why a histogram: the generator kept every answer's latency until the
//! run's end to sort them for its percentiles. The console's longest run
//! (5,000/s for an hour) held 18 M of them, and `shopeasy load` may ask for
//! 100,000/s for a day (8.6 G). A histogram's room is set by its range and
//! its precision, never by how many latencies it holds: recording one more
//! only adds to a counter. It is the `hdrhistogram` crate's
//! ([HdrHistogram], the usual one for latencies): one histogram gives
//! every figure a run prints (p50 to p99.9 and the max), and the live
//! panel's seconds merge into one.
//!
//! Precision: 3 significant digits over 1 µs ..= [`HIGHEST`] (about
//! 232 KiB of counters). A latency is recorded rounded up to the
//! microsecond; a quantile takes the sample of the same nearest rank as
//! [`quantile`](shopeasy_console::load::quantile) (the rank rule of every
//! latency figure ShopEasy prints) and reports the highest value of the
//! bucket it fell in. So a figure is never below the exact one, and above
//! it by at most 0.1 % of it plus 1 µs (exact to the microsecond below
//! 2.048 ms). A latency above [`HIGHEST`] is counted as [`HIGHEST`].
//!
//! [HdrHistogram]: https://hdrhistogram.github.io/HdrHistogram/

use std::time::Duration;

use hdrhistogram::Histogram;

/// The longest latency told apart from longer ones: two days (a request
/// is given up after a day at most, `bounds::MAX_SECONDS`, and a generator
/// behind its schedule adds its lag to that).
pub const HIGHEST: Duration = Duration::from_secs(2 * 86_400);

/// Significant decimal digits every figure keeps.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Nanoseconds in the histogram's unit (a microsecond).
const UNIT_NANOS: u128 = 1_000;

/// Latencies, counted into buckets (see the module's doc for the precision).
#[derive(Debug, Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    /// None yet.
    pub fn new() -> Self {
        let highest = u64::try_from(HIGHEST.as_micros()).unwrap_or(u64::MAX);
        Self(
            Histogram::new_with_bounds(1, highest, SIGNIFICANT_DIGITS)
                .expect("1 µs ..= two days at 3 digits is a valid range"),
        )
    }

    /// Counts `latency`, rounded up to the microsecond (so that no figure is
    /// below the latency it stands for), at most [`HIGHEST`].
    pub fn record(&mut self, latency: Duration) {
        let micros = latency.as_nanos().div_ceil(UNIT_NANOS);
        self.0
            .saturating_record(u64::try_from(micros).unwrap_or(u64::MAX));
    }

    /// How many latencies were recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `q`-quantile (0..=1) by nearest rank, as
    /// [`quantile`](shopeasy_console::load::quantile) of the samples would
    /// be, within the module's precision; zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        // The top of the bucket for every `q` (the crate reports its bottom
        // for 0): never below the exact figure.
        let value = self.0.value_at_quantile(q);
        Duration::from_micros(self.0.highest_equivalent(value))
    }

    /// Adds `other`'s latencies to these.
    pub fn merge(&mut self, other: &Self) {
        // Both have the same range, so every value of `other` fits: adding
        // cannot fail.
        let _ = self.0.add(&other.0);
    }

    /// Forgets every latency (the room stays).
    pub fn reset(&mut self) {
        self.0.reset();
    }

    /// The bytes its counters take: set by the range and the precision,
    /// the same however many latencies were recorded.
    pub fn footprint(&self) -> usize {
        self.0.distinct_values() * size_of::<u64>()
    }
}

/// The module's precision: `figure` is not below `exact`, and above it by
/// at most 0.1 % of it plus 1 µs.
#[cfg(test)]
pub(crate) fn within_precision(figure: Duration, exact: Duration) -> bool {
    exact <= figure && figure <= exact + exact / 1000 + Duration::from_micros(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::SmallRng};
    use shopeasy_console::load::quantile;

    /// Before, each latency was a sample kept until the run's end: 10 M of
    /// them took 10 M places. Here the counters are the same before and
    /// after, and small.
    #[test]
    fn ten_million_latencies_take_the_room_of_none() {
        let mut latencies = Latencies::new();
        let room = latencies.footprint();
        assert!(room <= 256 * 1024, "{room} bytes");
        for i in 0..10_000_000_u64 {
            // 1 µs .. ~10 s, and some past the highest trackable value.
            let micros = (i * 7_919) % 10_000_000 + 1;
            latencies.record(Duration::from_micros(micros));
        }
        latencies.record(HIGHEST * 3);
        assert_eq!(latencies.len(), 10_000_001);
        assert_eq!(latencies.footprint(), room, "no room was added");
        let max = latencies.quantile(1.0);
        assert!(
            within_precision(max, HIGHEST),
            "beyond it, counted as it: {max:?}"
        );
    }

    /// A known distribution: 100,000 latencies log-uniform from 1 ns to
    /// ~10 s (every bucket size of the range). Each figure is within the
    /// stated precision of the exact nearest-rank one.
    #[test]
    fn percentiles_are_within_three_digits_of_the_exact_ones() {
        let mut rng = SmallRng::seed_from_u64(14);
        let mut exact: Vec<Duration> = (0..100_000)
            .map(|_| {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let nanos = rng.random_range(0.0..23.0_f64).exp() as u64;
                Duration::from_nanos(nanos)
            })
            .collect();
        let mut latencies = Latencies::new();
        for l in &exact {
            latencies.record(*l);
        }
        exact.sort_unstable();
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
            let (figure, exact) = (latencies.quantile(q), quantile(&exact, q));
            assert!(
                within_precision(figure, exact),
                "q {q}: {figure:?} for {exact:?}"
            );
        }
        assert_eq!(Latencies::new().quantile(0.99), Duration::ZERO, "empty");
    }

    /// Whole microseconds below 2.048 ms are kept exactly: there the
    /// figures are the console's rank rule's own, to the microsecond.
    #[test]
    fn below_two_milliseconds_the_figures_are_the_rank_rules_exactly() {
        let exact: Vec<_> = (1..=2_000).map(Duration::from_micros).collect();
        let mut latencies = Latencies::new();
        // Recorded in reverse: order does not matter.
        for l in exact.iter().rev() {
            latencies.record(*l);
        }
        for q in [0.0, 0.001, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(latencies.quantile(q), quantile(&exact, q), "q {q}");
        }
        let mut two = Latencies::new();
        two.merge(&latencies);
        two.merge(&latencies);
        assert_eq!(two.len(), 4_000);
        assert_eq!(two.quantile(0.5), Duration::from_micros(1_000));
        two.reset();
        assert!(two.is_empty());
        assert_eq!(two.footprint(), latencies.footprint());
    }
}
