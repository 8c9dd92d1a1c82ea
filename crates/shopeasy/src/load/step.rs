//! One step of the overload sweep: an open-loop rate held for a while, and
//! what came back, classified.
//!
//! Each request has an intended start (`start + i / rate`) and its latency
//! is measured from it, so a server that stalls is charged for the time
//! requests waited to be sent. The generator's own limits are counted
//! apart: a request it could not send because `max_outstanding` requests
//! were already waiting is *not sent*, never "no answer".
//!
//! A step keeps no answer: each is counted as it arrives ([`Answers`]),
//! its latencies into histograms of fixed size ([`Latencies`]), so a step
//! of 100,000/s for a day takes the room of one of a second.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use super::{client::StepClient, latency::Latencies, signin::Customers};
use tokio::{sync::Semaphore, time::Instant};

/// How one request ended, for the step's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// 2xx within the deadline: goodput.
    Good,
    /// 503 or 429: refused (shed) by the target.
    Shed,
    /// No answer within the deadline (or the connection failed).
    NoAnswer,
    /// Any other status, or a 2xx after the deadline.
    Other,
}

/// The class of an answer with `status` (`None`: no answer) that took
/// `latency`, against `deadline`.
pub fn classify(status: Option<u16>, latency: Duration, deadline: Duration) -> Class {
    match status {
        None => Class::NoAnswer,
        Some(s) if (200..300).contains(&s) && latency <= deadline => Class::Good,
        Some(503 | 429) => Class::Shed,
        Some(_) => Class::Other,
    }
}

/// What one step measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepResult {
    /// The multiple of the capacity this step offered (0 while searching).
    pub multiplier: f64,
    /// Requests per second offered.
    pub offered: f64,
    /// The step's offered window: its requests ÷ `offered` (what goodput
    /// is per second of).
    pub seconds: f64,
    /// How long the step took, from its start until its last request was
    /// answered or given up (up to the deadline after its last send): the
    /// span its CPU and pressure figures are read over.
    pub wall_seconds: f64,
    /// Requests sent.
    pub sent: u64,
    /// Requests the generator could not send (its outstanding cap).
    pub not_sent: u64,
    /// 2xx within the deadline.
    pub good: u64,
    /// 503 / 429.
    pub shed: u64,
    /// No answer within the deadline.
    pub no_answer: u64,
    /// Anything else.
    pub other: u64,
    /// p50 and p99 of the admitted (2xx) answers (every latency figure
    /// here: to 3 significant digits, never below the exact one; see
    /// [`latency`](super::latency)).
    pub admitted_p50: Duration,
    /// See `admitted_p50`.
    pub admitted_p99: Duration,
    /// p50 and p99 of the refusals (503 / 429).
    pub shed_p50: Duration,
    /// See `shed_p50`.
    pub shed_p99: Duration,
    /// p99 of how late the generator itself sent a request after its
    /// intended start (its own timer and scheduling). Every latency above
    /// includes it: a step whose send lag is a good part of a latency gate
    /// measured the generator as much as the target.
    pub send_lag_p99: Duration,
    /// Open descriptors of the target process at the step's end.
    pub open_fds: Option<u64>,
    /// Resident set of the target process at the step's end, in KiB.
    pub rss_kib: Option<u64>,
    /// Of `open_fds`, the client connections on the target's listener (the
    /// generator's; see [`procstat`](super::procstat)).
    pub client_connections: Option<u64>,
    /// Cores the target process kept busy over the step (its CPU time ÷
    /// the step's length).
    pub target_cpu: Option<f64>,
    /// Cores the generator itself kept busy: on a shared machine, taken
    /// from the target as the offered load rises.
    pub generator_cpu: Option<f64>,
    /// The target's threads' mean wait for a core per time slice over the
    /// step (see [`procstat::Threads`](super::procstat::Threads)): part of
    /// every latency above, and none of it the target's own doing.
    pub target_wait_per_slice: Option<Duration>,
    /// The share of the step in which some runnable task on the machine
    /// waited for a core (`/proc/pressure/cpu`), 0..=1: near 1, the cores
    /// are oversubscribed and each wake-up queues.
    pub cpu_pressure: Option<f64>,
    /// The p99 of the gateway's own time over the requests it shed in the
    /// step, as the bound of its histogram's bucket (with `--metrics`; see
    /// [`refusals`](super::refusals)): `shed_p99` without the machine's
    /// and the generator's share.
    pub target_shed_p99: Option<Duration>,
}

impl StepResult {
    /// Goodput: 2xx within the deadline, per second of the offered window
    /// (`seconds`).
    pub fn goodput(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let good = self.good as f64;
        good / self.seconds.max(1e-9)
    }

    /// The result of the step's `answers` (the other figures are the
    /// caller's).
    pub fn from_answers(offered: f64, seconds: f64, not_sent: u64, answers: &Answers) -> Self {
        Self {
            offered,
            seconds,
            not_sent,
            sent: answers.sent,
            good: answers.good,
            shed: answers.shed,
            no_answer: answers.no_answer,
            other: answers.other,
            admitted_p50: answers.admitted.quantile(0.5),
            admitted_p99: answers.admitted.quantile(0.99),
            shed_p50: answers.refused.quantile(0.5),
            shed_p99: answers.refused.quantile(0.99),
            send_lag_p99: answers.send_lags.quantile(0.99),
            ..Self::default()
        }
    }
}

/// What a step's answers came to, counted as each arrives: how many of each
/// [`Class`], and the latencies of the admitted and of the refused answers
/// and every request's send lag (see [`StepResult::send_lag_p99`]), in
/// histograms. Its room is fixed (three histograms, under 1 MiB), however
/// many answers it counts. Why: it was a list of every answer, up to
/// `rate × duration` of them (a step of 100,000/s for a day: 8.6 G
/// answers, hundreds of GB).
#[derive(Debug, Clone)]
pub struct Answers {
    deadline: Duration,
    sent: u64,
    good: u64,
    shed: u64,
    no_answer: u64,
    other: u64,
    admitted: Latencies,
    refused: Latencies,
    send_lags: Latencies,
}

impl Answers {
    /// None yet, of a step whose client gives up after `deadline`.
    pub fn new(deadline: Duration) -> Self {
        Self {
            deadline,
            sent: 0,
            good: 0,
            shed: 0,
            no_answer: 0,
            other: 0,
            admitted: Latencies::new(),
            refused: Latencies::new(),
            send_lags: Latencies::new(),
        }
    }

    /// Counts the answer with `status` (`None`: no answer) that took
    /// `latency`, to a request sent `lag` after its intended start.
    pub fn record(&mut self, status: Option<u16>, latency: Duration, lag: Duration) {
        self.sent += 1;
        self.send_lags.record(lag);
        match classify(status, latency, self.deadline) {
            Class::Good => {
                self.good += 1;
                self.admitted.record(latency);
            }
            Class::Shed => {
                self.shed += 1;
                self.refused.record(latency);
            }
            Class::NoAnswer => self.no_answer += 1,
            Class::Other => self.other += 1,
        }
    }

    /// The bytes its histograms take: the same however many answers it
    /// counted.
    pub fn footprint(&self) -> usize {
        self.admitted.footprint() + self.refused.footprint() + self.send_lags.footprint()
    }
}

/// What a step sends, and to whom.
#[derive(Debug, Clone)]
pub struct Target {
    /// The gateway's base URL.
    pub base: String,
    /// Products to order (empty: the step reads the catalogue instead).
    pub products: Vec<String>,
    /// Who orders: request `i` carries the token of a customer picked by
    /// [`pick`] from `seed` and `i`.
    pub customers: Customers,
    /// Seed of the customer choice.
    pub seed: u64,
}

/// The customer of request `i` among `n`: a SplitMix64 hash of `seed` and
/// `i`, so the choice is random-looking, repeatable and needs no shared
/// generator across the step's tasks.
pub fn pick(seed: u64, i: u64, n: usize) -> usize {
    let mut z = seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    usize::try_from(z % (n.max(1) as u64)).unwrap_or(0)
}

/// Offers `rate` requests per second for `duration` through `client`, at
/// most `max_outstanding` waiting at once, each given up after `deadline`.
///
/// The result's `seconds` is the offered window (`total / rate`: the sends
/// span it, the last one's interval included), and `wall_seconds` the
/// whole step, its last answers included.
pub async fn offer(
    client: &StepClient,
    rate: f64,
    duration: Duration,
    deadline: Duration,
    max_outstanding: usize,
) -> StepResult {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let total = (rate * duration.as_secs_f64()).round() as u64;
    // `rate` is at least `bounds::MIN_RATE` (an interval of 100 s); a
    // smaller one sends nothing in a day, whatever its interval.
    let interval = Duration::try_from_secs_f64(1.0 / rate).unwrap_or(Duration::MAX);
    // A std mutex: the critical section is a count, never held across an
    // await.
    let answers = Arc::new(Mutex::new(Answers::new(deadline)));
    let permits = Arc::new(Semaphore::new(max_outstanding.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let mut not_sent = 0;
    let start = Instant::now();
    let mut pacer = super::pace::Pacer::new();
    for i in 0..total {
        #[allow(clippy::cast_precision_loss)]
        let intended = start + interval.mul_f64(i as f64);
        pacer.until(intended).await;
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            not_sent += 1;
            continue;
        };
        let request = client.request(i);
        let (client, sink) = (client.clone(), answers.clone());
        tasks.spawn(async move {
            // How late the generator is: its timer's wake-up and this task's
            // first poll, before anything is sent.
            let lag = intended.elapsed();
            // The deadline runs from the intended start, as the latency does.
            let status = tokio::time::timeout_at(intended + deadline, client.send(request))
                .await
                .unwrap_or_default();
            drop(permit);
            let latency = intended.elapsed();
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(status, latency, lag);
        });
        while tasks.try_join_next().is_some() {}
    }
    // The offered window, not the time until the last send: that is one
    // interval short, and read goodput `total / (total − 1)` times too high
    // (a probe of one request at 1/s: thousands a second, taken for the
    // capacity).
    #[allow(clippy::cast_precision_loss)]
    let seconds = total as f64 / rate;
    while tasks.join_next().await.is_some() {}
    let wall_seconds = start.elapsed().as_secs_f64();
    let answers = answers.lock().unwrap_or_else(PoisonError::into_inner);
    let mut r = StepResult::from_answers(rate, seconds, not_sent, &answers);
    r.wall_seconds = wall_seconds;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::latency::within_precision;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn customers_are_picked_repeatably_and_spread() {
        let picks: Vec<usize> = (0..1000).map(|i| pick(7, i, 10)).collect();
        assert_eq!(picks, (0..1000).map(|i| pick(7, i, 10)).collect::<Vec<_>>());
        assert_ne!(picks, (0..1000).map(|i| pick(8, i, 10)).collect::<Vec<_>>());
        for c in 0..10 {
            let n = picks.iter().filter(|p| **p == c).count();
            assert!(
                (50..=150).contains(&n),
                "customer {c} picked {n} times of 1000"
            );
        }
        assert_eq!(pick(1, 5, 0), 0);
    }

    #[test]
    fn answers_are_classified_against_the_deadline() {
        let d = Duration::from_secs(2);
        assert_eq!(classify(Some(201), MS, d), Class::Good);
        assert_eq!(classify(Some(201), d * 2, d), Class::Other, "late");
        assert_eq!(classify(Some(503), MS, d), Class::Shed);
        assert_eq!(classify(Some(429), MS, d), Class::Shed);
        assert_eq!(classify(Some(500), MS, d), Class::Other);
        assert_eq!(classify(None, d, d), Class::NoAnswer);
    }

    #[test]
    fn a_step_counts_and_ranks_each_class_apart() {
        // Send lags 0.99, 0.98 … 0 ms on the admitted answers, none on the rest.
        let answers: Vec<_> = (1..=100)
            .map(|i| (Some(200), MS * i, MS * (100 - i) / 100))
            .chain((1..=10).map(|i| (Some(503), MS * i / 10, Duration::ZERO)))
            .chain([
                (None, Duration::from_secs(2), Duration::ZERO),
                (Some(500), MS, Duration::ZERO),
            ])
            .collect();
        let mut counted = Answers::new(Duration::from_secs(2));
        for &(status, latency, lag) in &answers {
            counted.record(status, latency, lag);
        }
        let r = StepResult::from_answers(60.0, 2.0, 3, &counted);
        assert_eq!((r.sent, r.not_sent), (112, 3));
        assert_eq!((r.good, r.shed, r.no_answer, r.other), (100, 10, 1, 1));
        // Above 2 ms, to 3 significant digits (50.015 and 99.007 ms); below,
        // to the microsecond.
        assert!(within_precision(r.admitted_p50, MS * 50), "{r:?}");
        assert!(within_precision(r.admitted_p99, MS * 99), "{r:?}");
        assert_eq!(r.shed_p50, MS / 2);
        assert_eq!(r.shed_p99, MS);
        assert_eq!(r.send_lag_p99, MS * 98 / 100);
        assert!((r.goodput() - 50.0).abs() < 1e-9);
        let none = StepResult::from_answers(1.0, 1.0, 0, &Answers::new(MS));
        assert_eq!((none.sent, none.admitted_p99), (0, Duration::ZERO));
    }

    /// Before, a step kept every answer: `rate × duration` of them (a day
    /// at 100,000/s: 8.6 G). Two million answers of every class take the
    /// room of none.
    #[test]
    fn a_step_counts_its_answers_in_a_fixed_room() {
        let mut answers = Answers::new(Duration::from_secs(2));
        let room = answers.footprint();
        assert!(room <= 3 * 256 * 1024, "{room} bytes");
        let statuses = [Some(200), Some(503), None, Some(500)];
        for i in 0..2_000_000_u64 {
            let status = statuses[usize::try_from(i % 4).unwrap()];
            answers.record(status, Duration::from_micros(i % 1_000_000), MS);
        }
        assert_eq!(answers.footprint(), room, "no room was added");
        let r = StepResult::from_answers(1.0, 1.0, 0, &answers);
        assert_eq!(r.sent, 2_000_000);
        assert_eq!(
            (r.good, r.shed, r.no_answer, r.other),
            (500_000, 500_000, 500_000, 500_000)
        );
    }

    /// A client of a catalogue that answers each read after `delay`.
    async fn client_of(delay: Duration) -> StepClient {
        let app = axum::Router::new().route(
            "/api/products",
            axum::routing::get(move || async move {
                tokio::time::sleep(delay).await;
                r#"{"items":[],"next_cursor":null}"#
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let target = Target {
            base: format!("http://{addr}"),
            products: Vec::new(),
            customers: Customers::default(),
            seed: 1,
        };
        StepClient::new(target, 4).unwrap()
    }

    /// One request at 1/s for 1 s is a goodput of 1/s, three at 10/s of
    /// 10/s. Before, the window ended at the last send: the probe of one
    /// request read thousands a second, and the sweep took that for the
    /// capacity (`--start-rate 1 --probe-seconds 1`).
    #[tokio::test]
    async fn goodput_is_per_second_of_the_offered_window() {
        let client = client_of(Duration::ZERO).await;
        let deadline = Duration::from_secs(2);
        for (rate, length, sent) in [(1.0, 1000, 1), (10.0, 300, 3)] {
            let r = offer(&client, rate, MS * length, deadline, 4).await;
            assert_eq!((r.sent, r.good), (sent, sent), "{r:?}");
            assert!(
                (r.seconds - f64::from(length) / 1000.0).abs() < 1e-9,
                "{r:?}"
            );
            assert!((r.goodput() - rate).abs() < 1e-9, "{r:?}");
        }
    }

    /// Answers 300 ms late to sends at 0 and 100 ms: the step's offered
    /// window is 0.2 s, its wall time at least 0.4 s. The sweep reads the
    /// target's CPU after the last answer, so it divides by the latter
    /// (before, by the send window: the cores read twice too many here).
    #[tokio::test]
    async fn a_step_lasts_until_its_last_answer_not_its_last_send() {
        let client = client_of(MS * 300).await;
        let r = offer(&client, 10.0, MS * 200, Duration::from_secs(2), 4).await;
        assert_eq!((r.sent, r.good), (2, 2), "{r:?}");
        assert!((r.seconds - 0.2).abs() < 1e-9, "{r:?}");
        assert!(r.wall_seconds >= 0.4, "{r:?}");
    }
}
