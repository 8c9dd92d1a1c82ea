//! One step of the overload sweep: an open-loop rate held for a while, and
//! what came back, classified.
//!
//! Each request has an intended start (`start + i / rate`) and its latency
//! is measured from it, so a server that stalls is charged for the time
//! requests waited to be sent. The generator's own limits are counted
//! apart: a request it could not send because `max_outstanding` requests
//! were already waiting is *not sent*, never "no answer".

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use super::{client::StepClient, signin::Customers};
use shopeasy_console::load::quantile;
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
    /// p50 and p99 of the admitted (2xx) answers.
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

    /// Builds the result from every `(status, latency, send lag)` of the
    /// step (the lag: see [`StepResult::send_lag_p99`]).
    pub fn from_answers(
        offered: f64,
        seconds: f64,
        not_sent: u64,
        answers: &[(Option<u16>, Duration, Duration)],
        deadline: Duration,
    ) -> Self {
        let mut r = Self {
            offered,
            seconds,
            not_sent,
            sent: answers.len() as u64,
            ..Self::default()
        };
        let mut admitted = Vec::new();
        let mut shed = Vec::new();
        let mut lags = Vec::with_capacity(answers.len());
        for &(status, latency, lag) in answers {
            lags.push(lag);
            match classify(status, latency, deadline) {
                Class::Good => {
                    r.good += 1;
                    admitted.push(latency);
                }
                Class::Shed => {
                    r.shed += 1;
                    shed.push(latency);
                }
                Class::NoAnswer => r.no_answer += 1,
                Class::Other => r.other += 1,
            }
        }
        admitted.sort_unstable();
        shed.sort_unstable();
        r.admitted_p50 = quantile(&admitted, 0.5);
        r.admitted_p99 = quantile(&admitted, 0.99);
        r.shed_p50 = quantile(&shed, 0.5);
        r.shed_p99 = quantile(&shed, 0.99);
        lags.sort_unstable();
        r.send_lag_p99 = quantile(&lags, 0.99);
        r
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

/// Most answers a step makes room for before it starts; beyond, the list
/// grows as answers come. Why a cap: the room was `rate × duration`, made
/// before the first send, and a step of 1e8/s for 20 s asked for ~80 GB.
pub const PREALLOCATED_ANSWERS: usize = 1 << 16;

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
    // A std mutex: the critical section is a push, never held across an await.
    let answers = Arc::new(Mutex::new(Vec::with_capacity(
        usize::try_from(total)
            .unwrap_or(usize::MAX)
            .min(PREALLOCATED_ANSWERS),
    )));
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
            let answer = (status, intended.elapsed(), lag);
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(answer);
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
    let mut r = StepResult::from_answers(rate, seconds, not_sent, &answers, deadline);
    r.wall_seconds = wall_seconds;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let r = StepResult::from_answers(60.0, 2.0, 3, &answers, Duration::from_secs(2));
        assert_eq!((r.sent, r.not_sent), (112, 3));
        assert_eq!((r.good, r.shed, r.no_answer, r.other), (100, 10, 1, 1));
        assert_eq!(r.admitted_p50, MS * 50);
        assert_eq!(r.admitted_p99, MS * 99);
        assert_eq!(r.shed_p99, MS);
        assert_eq!(r.send_lag_p99, MS * 98 / 100);
        assert!((r.goodput() - 50.0).abs() < 1e-9);
        assert_eq!(quantile(&[], 0.99), Duration::ZERO);
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
