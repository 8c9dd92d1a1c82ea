//! The adaptive concurrency limit: a pure function of observed latency.
//!
//! A gradient controller after Envoy's adaptive concurrency filter. The
//! limit is compared with one fixed point, the **minimum RTT**: the service
//! time of a request when (almost) nothing else is in flight, measured now
//! and then by letting only `min` requests in for a short while. Between
//! measurements, every window of samples (about one limit's worth, so one
//! update per round trip) gives a **sample RTT**, the window's p90, and
//!
//! ```text
//! gradient = clamp(min_rtt × (1 + buffer) / sample_rtt, 0.5, 2.0)
//! limit    = limit × gradient + √(limit × gradient)    within [min, max]
//! ```
//!
//! (`buffer` a setting, 0 by default where Envoy's is 25 %; √ is the
//! headroom a short queue may use). While requests take no longer than the
//! minimum RTT plus the buffer, the limit grows; once more are let in than
//! the service can work on at once, each extra one only waits inside the
//! service, the sample RTT rises in proportion and the limit falls back to
//! about `(1 + buffer) × capacity` plus the headroom in one step. Admitted
//! requests thus take at most about `1 + buffer` times their unloaded time
//! plus the headroom, however large the offered load.
//!
//! **Why not Gradient2's two moving averages.** The limit used to compare a
//! short average of the service time with a long one. Under lasting
//! overload the long average follows the queued latency up, the gradient
//! returns to 1 and the limit grows again: the queue becomes "the new
//! normal" (measured: admitted p99 423 ms against 11 ms unloaded at 3× the
//! capacity). A minimum RTT measured with nothing queued cannot drift with
//! the queue.
//!
//! **Measuring the minimum RTT.** Three ways, one rule — the p90 of samples
//! served while no more than `min` requests were in flight:
//!
//! - at the start, as soon as the load is large enough for the limit to
//!   matter (until then the limit stays at `initial`);
//! - every `min_rtt_interval` under load (plus up to 25 % jitter, so that
//!   listeners do not measure in lockstep), the limit drops to `min` until
//!   [`MEASUREMENT_SAMPLES`] requests *admitted during the measurement*
//!   have been served (requests admitted before it are still draining and
//!   would measure the old queue: each admission carries a [`Ticket`] that
//!   tells them apart), then it returns to where it was;
//! - for free, whenever two windows in a row never had more than `min`
//!   requests in flight (light load, or a limit pushed to its floor). This
//!   is how a large lasting rise of the base latency (a disk twice as slow)
//!   is learnt at once: the gradient pushes the limit to its floor, where
//!   the next windows measure the new normal; a smaller rise only lowers
//!   the limit until the next scheduled measurement.
//!
//! The same percentile for the minimum and the sample RTT keeps a mix of
//! cheap and costly requests from reading as a queue.
//!
//! **Application-limited.** A service that has less work than its limit
//! tells us nothing about what more it could take: the limit grows to at
//! most twice the peak concurrency of the window (or back to `initial`),
//! so a burst after a quiet spell meets a limit that was earned under load
//! — and a stale minimum RTT cannot inflate an idle limit. Nor is the
//! minimum RTT measured on a schedule while fewer than half the slots are
//! busy (holding the limit at `min` would only queue light load); it is
//! measured as soon as the load makes the limit bind again.
//!
//! Pure: it takes each sample with the in-flight count and the time (the
//! caller's clock), keeps no clock and no atomics, so every property is a
//! unit test (only the jitter is random, and tests bound it).

use std::time::Duration;

use rand::Rng;
use serde::Serialize;
use tokio::time::Instant;

/// The percentile of a window that stands for it (sample and minimum RTT).
const PERCENTILE: f64 = 0.9;
/// How many requests admitted during a measurement make the minimum RTT.
pub const MEASUREMENT_SAMPLES: usize = 25;
/// A window has about one limit's worth of samples, within these bounds.
const MIN_WINDOW: usize = 64;
const MAX_WINDOW: usize = 256;
/// The extra delay of each measurement, up to this share of the interval.
const JITTER: f64 = 0.25;
/// The moving-average length of the recent service time, in samples.
const RECENT_WINDOW: f64 = 20.0;
/// The gradient's bounds (Envoy's): at most halve or double per window.
const GRADIENT: (f64, f64) = (0.5, 2.0);

/// The limit's parameters (validated by the caller: `1 ≤ min ≤ initial ≤
/// max`, a positive interval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitConfig {
    /// Where the limit starts, and what it recovers to under light load.
    pub initial: usize,
    /// It never falls below this (at least 1); also the concurrency at
    /// which the minimum RTT is measured.
    pub min: usize,
    /// It never grows above this.
    pub max: usize,
    /// How often the minimum RTT is measured again under load (each time
    /// delayed by up to a quarter more, at random).
    pub min_rtt_interval: Duration,
    /// How much slower than the minimum RTT (in per cent) a window's p90
    /// may be before the limit shrinks: Envoy's `buffer`. Together with
    /// the √ headroom it sets where the limit settles above the
    /// concurrency at which the minimum RTT was measured (a service
    /// already saturated there settles near `min × (1 + buffer)` plus that
    /// figure's square root).
    pub buffer_percent: u32,
}

impl LimitConfig {
    /// The default interval between two measurements of the minimum RTT.
    pub const DEFAULT_MIN_RTT_INTERVAL: Duration = Duration::from_secs(5);
    /// The default `buffer`: none, where Envoy's is 25 %. The √ headroom
    /// already lets the limit settle above the concurrency it measured at;
    /// in three interleaved pairs of full-mode sweeps at 3× capacity, 0
    /// against 25 % gave admitted p99 40 / 37 / 44 against 47 / 54 / 57 ms,
    /// refusals' p99 9.9 / 8.6 / 8.7 against 13.1 / 10.1 / 11.9 ms and
    /// goodput alike (1,086–1,326 against 1,187–1,294 per s); embedded, two
    /// pairs, no difference beyond the noise.
    pub const DEFAULT_BUFFER_PERCENT: u32 = 0;
}

impl Default for LimitConfig {
    /// The defaults the runtime's `admission.*` settings repeat.
    fn default() -> Self {
        Self {
            initial: 64,
            min: 16,
            max: 1000,
            min_rtt_interval: Self::DEFAULT_MIN_RTT_INTERVAL,
            buffer_percent: Self::DEFAULT_BUFFER_PERCENT,
        }
    }
}

/// What the limit is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The limit follows the gradient (or sits at `initial` until the
    /// first minimum RTT).
    Tracking,
    /// The limit is held at `min` while the minimum RTT is measured.
    Measuring,
}

/// Taken at admission and given back with the sample: which phase the
/// request was admitted in (so a measurement counts only requests admitted
/// during it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

/// The state of the adaptive limit.
#[derive(Debug, Clone)]
pub struct GradientLimit {
    config: LimitConfig,
    limit: f64,
    phase: Phase,
    /// Bumped when a measurement begins: tickets of older epochs are not
    /// measured.
    epoch: u64,
    min_rtt: Option<f64>,
    /// When the next measurement begins (`None`: none measured yet).
    next_measurement: Option<Instant>,
    /// The samples of the current measurement.
    measurement: Vec<f64>,
    /// The samples of the current window, and its peak in-flight count.
    window: Vec<f64>,
    window_peak: usize,
    /// Whether the previous window's peak was within `min`.
    quiet_before: bool,
    sample_rtt: Option<f64>,
    gradient: Option<f64>,
    recent: Ema,
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
            min_rtt_interval: config.min_rtt_interval.max(Duration::from_millis(1)),
            buffer_percent: config.buffer_percent,
        };
        Self {
            config,
            limit: config.initial as f64,
            phase: Phase::Tracking,
            epoch: 0,
            min_rtt: None,
            next_measurement: None,
            measurement: Vec::with_capacity(MEASUREMENT_SAMPLES),
            window: Vec::with_capacity(MIN_WINDOW),
            window_peak: 0,
            quiet_before: false,
            sample_rtt: None,
            gradient: None,
            recent: Ema::new(RECENT_WINDOW),
        }
    }

    /// The limit now: how many requests may be in flight at once (`min`
    /// while the minimum RTT is measured).
    pub fn limit(&self) -> usize {
        match self.phase {
            Phase::Measuring => self.config.min,
            // Truncation is intended: a limit of 4.9 admits 4.
            Phase::Tracking => (self.limit as usize).clamp(self.config.min, self.config.max),
        }
    }

    /// The parameters.
    pub fn config(&self) -> LimitConfig {
        self.config
    }

    /// What the limit is doing.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The ticket of a request admitted now.
    pub fn ticket(&self) -> Ticket {
        Ticket(self.epoch)
    }

    /// The recent service time (what a request admitted now is expected to
    /// take); zero before the first sample.
    pub fn expected(&self) -> Duration {
        secs(self.recent.value.unwrap_or(0.0))
    }

    /// The last measured minimum RTT (the unqueued service time's p90).
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt.map(secs)
    }

    /// The last window's sample RTT (its p90).
    pub fn sample_rtt(&self) -> Option<Duration> {
        self.sample_rtt.map(secs)
    }

    /// The last gradient applied.
    pub fn gradient(&self) -> Option<f64> {
        self.gradient
    }

    /// When the next measurement of the minimum RTT begins (`None` before
    /// the first one, and while one is under way).
    pub fn next_measurement(&self) -> Option<Instant> {
        match self.phase {
            Phase::Measuring => None,
            Phase::Tracking => self.next_measurement,
        }
    }

    /// Takes one admitted request's service time at `now`: `in_flight` is
    /// the number of requests in flight when it finished (itself included),
    /// `ticket` what [`ticket`](Self::ticket) said when it was admitted.
    pub fn on_sample(&mut self, rtt: Duration, in_flight: usize, ticket: Ticket, now: Instant) {
        // A zero sample (a clock that did not move) would make the ratio
        // meaningless: count it as one microsecond.
        let rtt = rtt.as_secs_f64().max(1e-6);
        self.recent.update(rtt);
        match self.phase {
            Phase::Measuring => {
                if ticket.0 == self.epoch {
                    self.measurement.push(rtt);
                }
                if self.measurement.len() >= MEASUREMENT_SAMPLES {
                    let measured = percentile(&mut self.measurement);
                    self.measurement.clear();
                    self.phase = Phase::Tracking;
                    self.measured(measured, now);
                }
            }
            Phase::Tracking => {
                self.window.push(rtt);
                self.window_peak = self.window_peak.max(in_flight);
                let size = (self.limit as usize).clamp(MIN_WINDOW, MAX_WINDOW);
                if self.window.len() >= size {
                    self.close_window(now);
                }
            }
        }
    }

    /// A window is complete: update the limit from its sample RTT, then
    /// decide whether the minimum RTT is (or must be) measured.
    fn close_window(&mut self, now: Instant) {
        let sample = percentile(&mut self.window);
        let peak = self.window_peak;
        self.window.clear();
        self.window_peak = 0;
        self.sample_rtt = Some(sample);

        let quiet = peak <= self.config.min;
        let quiet_twice = quiet && self.quiet_before;
        self.quiet_before = quiet;
        let app_limited = (peak as f64) < self.limit / 2.0;

        if let Some(min_rtt) = self.min_rtt {
            let buffer = f64::from(self.config.buffer_percent) / 100.0;
            let gradient = (min_rtt * (1.0 + buffer) / sample).clamp(GRADIENT.0, GRADIENT.1);
            let scaled = self.limit * gradient;
            let mut next = scaled + scaled.sqrt();
            if next > self.limit {
                // Idle capacity says nothing about more: grow to at most
                // twice the concurrency the window had (or back to the
                // initial limit).
                let ceiling = (2.0 * peak as f64).max(self.config.initial as f64);
                next = next.min(ceiling.max(self.limit));
            }
            self.limit = next.clamp(self.config.min as f64, self.config.max as f64);
            self.gradient = Some(gradient);
        }

        if quiet_twice {
            // Nothing was queued in this window nor the one before it: its
            // p90 is a minimum RTT, measured for free.
            self.measured(sample, now);
        } else if self.min_rtt.is_none() {
            if !app_limited {
                self.begin_measurement();
            }
        } else if !app_limited && self.next_measurement.is_some_and(|at| now >= at) {
            // Due, and the limit binds (a limit that does not cannot hurt,
            // and holding it at `min` would only queue light load).
            self.begin_measurement();
        }
    }

    fn begin_measurement(&mut self) {
        self.phase = Phase::Measuring;
        self.epoch += 1;
        self.measurement.clear();
        self.window.clear();
        self.window_peak = 0;
        self.quiet_before = false;
    }

    fn measured(&mut self, min_rtt: f64, now: Instant) {
        self.min_rtt = Some(min_rtt);
        let jitter = rand::rng().random_range(0.0..=JITTER);
        self.next_measurement = Some(now + self.config.min_rtt_interval.mul_f64(1.0 + jitter));
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

/// The [`PERCENTILE`] of `samples` (not empty; reordered).
fn percentile(samples: &mut [f64]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    // The nearest-rank percentile: the smallest sample at or above which
    // lie `PERCENTILE` of them.
    let rank = ((samples.len() as f64) * PERCENTILE).ceil() as usize;
    let i = rank.clamp(1, samples.len()) - 1;
    let (_, v, _) = samples.select_nth_unstable_by(i, f64::total_cmp);
    *v
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
        min: 4,
        max: 1000,
        min_rtt_interval: Duration::from_secs(5),
        buffer_percent: 25,
    };

    const MS: Duration = Duration::from_millis(1);

    /// A server with `capacity` slots serving each request in `service`
    /// (`service × in_flight / capacity` beyond them), kept full by an
    /// endless queue: each round admits up to the limit, all finish together.
    struct Model {
        limit: GradientLimit,
        now: Instant,
        capacity: usize,
        service: Duration,
    }

    impl Model {
        fn new(config: LimitConfig, capacity: usize, service: Duration) -> Self {
            Self {
                limit: GradientLimit::new(config),
                now: Instant::now(),
                capacity,
                service,
            }
        }

        /// Runs for `span` with `load` requests always waiting (`None`:
        /// more than any limit), and on until a measurement under way has
        /// ended (so the limit read next is the one it tracks); returns the
        /// longest service time seen in the last half.
        fn run(&mut self, span: Duration, load: Option<usize>) -> Duration {
            let end = self.now + span;
            let half = self.now + span / 2;
            let mut worst = Duration::ZERO;
            while self.now < end || self.limit.phase() == Phase::Measuring {
                let n = load.map_or(self.limit.limit(), |l| l.min(self.limit.limit()));
                let ticket = self.limit.ticket();
                let rtt = self
                    .service
                    .mul_f64((n as f64 / self.capacity as f64).max(1.0));
                self.now += rtt;
                if self.now >= half {
                    worst = worst.max(rtt);
                }
                for done in 0..n {
                    self.limit.on_sample(rtt, n - done, ticket, self.now);
                }
            }
            worst
        }
    }

    #[test]
    fn under_overload_the_limit_settles_near_capacity_and_latency_near_unloaded() {
        let mut m = Model::new(CFG, 50, 10 * MS);
        let worst = m.run(Duration::from_secs(30), None);
        let limit = m.limit.limit();
        assert!(
            (50..=100).contains(&limit),
            "near the capacity of 50: {limit}"
        );
        assert!(worst <= 20 * MS, "worst service time {worst:?}");
        assert_eq!(m.limit.min_rtt(), Some(10 * MS));
        assert!(m.limit.next_measurement().is_some());
    }

    #[test]
    fn the_buffer_sets_how_far_above_its_measurement_the_limit_settles() {
        // Saturated already at the floor (capacity 10, min 16): the minimum
        // RTT carries a queue, and the limit settles at about
        // `min × (1 + buffer) + √` — 24.5 with Envoy's 25 %, 20 with none.
        let settle = |buffer_percent| {
            let config = LimitConfig {
                initial: 16,
                min: 16,
                buffer_percent,
                ..CFG
            };
            let mut m = Model::new(config, 10, 10 * MS);
            let worst = m.run(Duration::from_secs(60), None);
            (m.limit.limit(), worst)
        };
        let (envoy, envoy_worst) = settle(25);
        let (none, none_worst) = settle(0);
        assert!((23..=26).contains(&envoy), "25 %: {envoy}");
        assert!((19..=21).contains(&none), "0 %: {none}");
        assert!(none_worst < envoy_worst, "{none_worst:?} {envoy_worst:?}");
    }

    #[test]
    fn under_minutes_of_overload_the_limit_does_not_creep_up_with_the_queue() {
        // The failure this algorithm replaces: after minutes of overload
        // the limit is where it was after seconds.
        let mut m = Model::new(CFG, 50, 10 * MS);
        m.run(Duration::from_secs(10), None);
        let early = m.limit.limit();
        let worst = m.run(Duration::from_secs(300), None);
        assert!(
            m.limit.limit() <= early * 3 / 2,
            "{early} → {}",
            m.limit.limit()
        );
        assert!(worst <= 20 * MS, "{worst:?}");
    }

    #[test]
    fn a_measurement_holds_the_limit_at_min_and_counts_only_its_own_admissions() {
        let mut l = GradientLimit::new(CFG);
        let t0 = Instant::now();
        let old = l.ticket();
        // A window (one limit's worth of samples, at least `MIN_WINDOW`)
        // under load, not application-limited, starts the first measurement.
        for i in 0..MIN_WINDOW {
            l.on_sample(10 * MS, 20, old, t0 + i as u32 * MS);
        }
        assert_eq!(l.phase(), Phase::Measuring);
        assert_eq!(l.limit(), 4, "held at min");
        // Requests admitted before it drain, slow: not measured.
        for _ in 0..100 {
            l.on_sample(500 * MS, 20, old, t0);
        }
        assert_eq!(l.phase(), Phase::Measuring);
        let fresh = l.ticket();
        assert_ne!(fresh, old);
        for i in 0..MEASUREMENT_SAMPLES {
            let ms = if i == 0 { 40 } else { 8 + (i % 3) as u64 };
            l.on_sample(Duration::from_millis(ms), 4, fresh, t0);
        }
        assert_eq!(l.phase(), Phase::Tracking);
        assert_eq!(l.min_rtt(), Some(10 * MS), "p90, not the outlier");
        assert_eq!(l.limit(), 20, "back where it was");
        let next = l.next_measurement().unwrap();
        assert!(
            next >= t0 + 5 * 1000 * MS && next <= t0 + 6250 * MS,
            "jittered interval"
        );
    }

    #[test]
    fn a_lasting_doubling_of_the_base_latency_is_learnt() {
        let mut m = Model::new(CFG, 50, 10 * MS);
        m.run(Duration::from_secs(10), None);
        m.service = 20 * MS;
        let worst = m.run(Duration::from_secs(20), None);
        let limit = m.limit.limit();
        assert!(
            (50..=100).contains(&limit),
            "not held at the floor: {limit}"
        );
        assert_eq!(m.limit.min_rtt(), Some(20 * MS), "the new normal");
        assert!(worst <= 40 * MS, "{worst:?}");
    }

    #[test]
    fn a_faster_service_is_learnt_at_the_next_measurement() {
        let mut m = Model::new(CFG, 50, 20 * MS);
        m.run(Duration::from_secs(10), None);
        m.service = 10 * MS;
        m.run(Duration::from_secs(20), None);
        assert_eq!(m.limit.min_rtt(), Some(10 * MS));
        assert!((50..=100).contains(&m.limit.limit()), "{}", m.limit.limit());
    }

    #[test]
    fn light_load_recovers_to_the_initial_limit_but_not_beyond() {
        let mut m = Model::new(CFG, 50, 10 * MS);
        m.run(Duration::from_secs(2), Some(3));
        assert_eq!(m.limit.limit(), 20, "light load does not grow it");
        assert_eq!(m.limit.min_rtt(), Some(10 * MS), "measured for free");
        assert_eq!(m.limit.phase(), Phase::Tracking, "never held at min");
        // Slow spell at full load: the limit shrinks…
        m.service = 100 * MS;
        m.capacity = 5;
        m.run(Duration::from_secs(5), None);
        assert!(m.limit.limit() < 15, "shrunk: {}", m.limit.limit());
        // …and light load at normal latency brings it back to initial only.
        m.service = 10 * MS;
        m.capacity = 50;
        m.run(Duration::from_secs(20), Some(3));
        assert_eq!(m.limit.limit(), 20, "recovered to the initial value only");
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let mut l = GradientLimit::new(LimitConfig {
            initial: 20,
            min: 2,
            max: 200,
            ..CFG
        });
        let t0 = Instant::now();
        for ms in [0, 1, 10_000, 100_000, 1, 1] {
            for _ in 0..300 {
                let t = l.ticket();
                l.on_sample(Duration::from_millis(ms), 1000, t, t0);
                assert!((2..=200).contains(&l.limit()));
            }
        }
        let odd = GradientLimit::new(LimitConfig {
            initial: 500,
            min: 0,
            max: 10,
            min_rtt_interval: Duration::ZERO,
            buffer_percent: 25,
        });
        assert_eq!(odd.limit(), 10);
        assert_eq!(odd.config().min, 1);
    }

    #[test]
    fn the_expected_service_time_follows_recent_samples() {
        let mut l = GradientLimit::new(CFG);
        assert_eq!(l.expected(), Duration::ZERO);
        let t = l.ticket();
        for _ in 0..100 {
            l.on_sample(40 * MS, 1, t, Instant::now());
        }
        let e = l.expected().as_secs_f64();
        assert!((0.039..0.041).contains(&e), "{e}");
    }

    #[test]
    fn the_percentile_is_the_p90() {
        let mut v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&mut v), 18.0);
        assert_eq!(percentile(&mut [3.0]), 3.0);
        assert_eq!(percentile(&mut []), 0.0);
    }
}
