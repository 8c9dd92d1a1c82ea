//! `shopeasy load`: an open-loop load generator for a running ShopEasy.
//!
//! Open loop: requests are sent on a fixed schedule (`rate` per second)
//! whether or not earlier ones have answered, and each latency is measured
//! from the request's *intended* send time. A closed-loop tool that waits for
//! answers before sending hides a stalled server (coordinated omission); this
//! one does not.
//!
//! `--sweep` draws the overload curve instead ([`sweep`]): capacity
//! search, then steps at multiples of it, a CSV and an SVG plot.
//!
//! Orders are placed as signed-in customers ([`signin`]): the generator
//! signs `--customers` demo customers in through the target's
//! `POST /api/session` before the load starts (or reads `--token-file`),
//! and each order carries one of their tokens, picked at random.
//!
//! Modules: [`step`] (one open-loop step and its counts), [`client`] (how
//! a step sends, at as little cost to the shared machine as it can),
//! [`pace`] (waiting for each intended start, to well under a
//! millisecond), [`sweep`] (the search and the steps), [`plot`] (the SVG),
//! [`procstat`] (the target's descriptors and RSS), [`restock`] (stock
//! before each step), [`signin`] (the customers the load acts as),
//! [`latency`] (latencies as a histogram of fixed size).
//!
//! No answer is kept: each is counted as it arrives, its latency into a
//! histogram ([`latency`]: 3 significant digits), so a run's memory does
//! not grow with its rate × duration (the console's longest run, 5,000/s
//! for an hour, kept 18 M samples until it ended).

pub mod bounds;
pub mod client;
pub mod latency;
pub mod pace;
pub mod plot;
pub mod procstat;
pub mod refusals;
pub mod restock;
pub mod signin;
pub mod step;
pub mod sweep;

use std::{
    collections::BTreeMap,
    fmt,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use latency::Latencies;

/// What to run.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// The gateway's base URL (`http://` or `https://`).
    #[arg(long, default_value = "http://127.0.0.1:8080", value_parser = bounds::target)]
    pub target: String,
    /// Requests per second.
    #[arg(long, default_value_t = 200.0, value_parser = bounds::rate)]
    pub rate: f64,
    /// How long to send, in seconds.
    #[arg(long, default_value_t = 30.0, value_parser = bounds::seconds)]
    pub duration: f64,
    /// Share of reads (the rest are orders), 0..=1.
    #[arg(long, default_value_t = 0.8, value_parser = bounds::share)]
    pub read_ratio: f64,
    /// Fail (exit 1) when more than this share of requests errs (5xx or no
    /// answer), 0..=1.
    #[arg(long, value_parser = bounds::share)]
    pub max_error_rate: Option<f64>,
    /// Fail (exit 1) when the 99th percentile latency exceeds this many
    /// milliseconds.
    #[arg(long, value_parser = bounds::milliseconds)]
    pub p99: Option<f64>,
    /// Per-request timeout in seconds (a request without an answer by then is
    /// an error).
    #[arg(long, default_value_t = 10.0, value_parser = bounds::seconds)]
    pub timeout: f64,
    /// Seed of the request mix.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print no progress line.
    #[arg(long)]
    pub quiet: bool,
    /// Who places the orders (`--customers`, `--token-file`).
    #[command(flatten)]
    pub sign_in: signin::SignInArgs,
    /// The overload sweep (`--sweep` and its options).
    #[command(flatten)]
    pub sweep: sweep::SweepArgs,
}

/// The longest window [`Live::recent`] can report on, in seconds: it keeps
/// the answers of that many whole seconds apart, and of the current one.
pub const RECENT_SECONDS: u64 = 10;

/// What answers came to: how many, how many were reads, their count per
/// status and their latencies. Its room is fixed, whatever their number:
/// the latencies are a histogram, and the statuses at most the 65,536 of
/// a `u16` (a handful in practice).
#[derive(Debug, Clone, Default)]
struct Tally {
    answered: usize,
    reads: usize,
    /// Count per status (`0` = no answer).
    statuses: BTreeMap<u16, usize>,
    latencies: Latencies,
}

impl Tally {
    fn record(&mut self, read: bool, status: u16, latency: Duration) {
        self.answered += 1;
        self.reads += usize::from(read);
        *self.statuses.entry(status).or_default() += 1;
        self.latencies.record(latency);
    }

    fn merge(&mut self, other: &Self) {
        self.answered += other.answered;
        self.reads += other.reads;
        for (status, n) in &other.statuses {
            *self.statuses.entry(*status).or_default() += n;
        }
        self.latencies.merge(&other.latencies);
    }

    fn clear(&mut self) {
        self.answered = 0;
        self.reads = 0;
        self.statuses.clear();
        self.latencies.reset();
    }

    /// Answers that erred (5xx or no answer).
    fn errors(&self) -> usize {
        self.statuses
            .iter()
            .filter(|&(&status, _)| status == 0 || status >= 500)
            .map(|(_, &n)| n)
            .sum()
    }

    #[cfg(test)]
    fn footprint(&self) -> usize {
        self.latencies.footprint() + self.statuses.len() * size_of::<(u16, usize)>()
    }
}

/// The answers of a run: the whole run's tally, and one per second of the
/// last [`RECENT_SECONDS`] (and the current one) for [`Live::recent`], in
/// a ring that never grows.
#[derive(Debug)]
struct Answers {
    /// Second 0 begins here.
    epoch: Instant,
    run: Tally,
    /// Second `n` (since `epoch`) at `n % len`, with its `n` (`None`:
    /// nothing yet).
    seconds: Vec<(Option<u64>, Tally)>,
}

impl Default for Answers {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl Answers {
    fn new(epoch: Instant) -> Self {
        Self {
            epoch,
            run: Tally::default(),
            seconds: (0..=RECENT_SECONDS)
                .map(|_| (None, Tally::default()))
                .collect(),
        }
    }

    /// Counts an answer that came `at`.
    fn record(&mut self, at: Instant, read: bool, status: u16, latency: Duration) {
        self.run.record(read, status, latency);
        let second = at.saturating_duration_since(self.epoch).as_secs();
        let len = self.seconds.len() as u64;
        let slot = usize::try_from(second % len).unwrap_or(0);
        let (tag, tally) = &mut self.seconds[slot];
        match *tag {
            Some(t) if t == second => {}
            // Older than the ring holds (a later second took its place).
            Some(t) if t > second => return,
            _ => {
                tally.clear();
                *tag = Some(second);
            }
        }
        tally.record(read, status, latency);
    }

    /// The answers that came in the seconds overlapping the last `window`
    /// before `now` (at most [`RECENT_SECONDS`] whole ones before the
    /// current), and the time those seconds span until `now`: at least
    /// `window` (once the run is that old), less than a second more.
    fn recent(&self, now: Instant, window: Duration) -> (Tally, Duration) {
        let elapsed = now.saturating_duration_since(self.epoch);
        let current = elapsed.as_secs();
        let first = elapsed
            .saturating_sub(window)
            .as_secs()
            .max(current.saturating_sub(RECENT_SECONDS));
        let mut tally = Tally::default();
        for (tag, second) in &self.seconds {
            if tag.is_some_and(|t| (first..=current).contains(&t)) {
                tally.merge(second);
            }
        }
        (tally, elapsed.saturating_sub(Duration::from_secs(first)))
    }

    #[cfg(test)]
    fn footprint(&self) -> usize {
        std::iter::once(&self.run)
            .chain(self.seconds.iter().map(|(_, tally)| tally))
            .map(Tally::footprint)
            .sum()
    }
}

/// A run seen from outside while it goes on: its answers as they arrive,
/// and a way to end it early (the console's load panel). Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Live {
    answers: Arc<Mutex<Answers>>,
    sent: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl Live {
    /// Ends the run: nothing more is sent; requests in flight finish.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Requests sent so far.
    pub fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }

    /// The summary of the requests that ended within the last `window`, to
    /// the second: those of the seconds it overlaps (at most
    /// [`RECENT_SECONDS`] before the current one). Its `achieved_rate` is
    /// their number per second of the time those seconds span (`window`
    /// and less than a second more, once the run is that old).
    pub fn recent(&self, window: Duration) -> Summary {
        let (tally, span) = lock(&self.answers).recent(Instant::now(), window);
        Summary::from_tally(&tally, span)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Requests sent.
    pub sent: usize,
    /// Requests that erred (5xx or no answer).
    pub errors: usize,
    /// Count per status (`0` = no answer).
    pub statuses: BTreeMap<u16, usize>,
    /// Latency percentiles: p50, p90, p99, p99.9, max; to 3 significant
    /// digits, never below the exact figure (see [`latency`]).
    pub percentiles: [(f64, Duration); 5],
    /// Achieved send rate per second: requests sent per second of the time
    /// the sends took (the offered window, longer when the generator fell
    /// behind its schedule).
    pub achieved_rate: f64,
}

/// The time `sent` requests at `rate` per second took to send when the last
/// went out `last_send` after the start: the offered window (`sent / rate`)
/// when the generator kept to its schedule, longer when it fell behind.
///
/// Why not the time until the last send: that is one interval short (the
/// last request's own interval is part of the window), so a run's rate
/// read `sent / (sent − 1)` times too high: twice for two requests, and
/// without bound for one (its window the microseconds after its send).
fn send_window(sent: usize, rate: f64, last_send: Duration) -> Duration {
    if sent == 0 {
        return Duration::ZERO;
    }
    #[allow(clippy::cast_precision_loss)]
    let offered = sent as f64 / rate;
    // `1 / rate` is at most 100 s and `sent / rate` at most a day (bounds).
    let interval = Duration::from_secs_f64(1.0 / rate);
    Duration::from_secs_f64(offered).max(last_send + interval)
}

impl Summary {
    fn from_tally(tally: &Tally, elapsed: Duration) -> Self {
        let at = |q: f64| tally.latencies.quantile(q);
        Self {
            sent: tally.answered,
            errors: tally.errors(),
            statuses: tally.statuses.clone(),
            percentiles: [
                (50.0, at(0.50)),
                (90.0, at(0.90)),
                (99.0, at(0.99)),
                (99.9, at(0.999)),
                (100.0, at(1.0)),
            ],
            achieved_rate: tally.answered as f64 / elapsed.as_secs_f64().max(1e-9),
        }
    }

    /// The share of requests that erred.
    pub fn error_rate(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.errors as f64 / self.sent as f64
        }
    }

    /// The 99th percentile latency.
    pub fn p99(&self) -> Duration {
        self.percentiles[2].1
    }

    /// The gates that failed, each as a sentence; empty when all passed.
    pub fn failed_gates(&self, args: &LoadArgs) -> Vec<String> {
        let mut failed = Vec::new();
        if let Some(max) = args.max_error_rate
            && self.error_rate() > max
        {
            failed.push(format!(
                "error rate {:.2}% is above --max-error-rate {:.2}%",
                self.error_rate() * 100.0,
                max * 100.0
            ));
        }
        if let Some(p99) = args.p99
            && self.p99().as_secs_f64() * 1000.0 > p99
        {
            failed.push(format!(
                "p99 {:.1} ms is above --p99 {p99} ms",
                self.p99().as_secs_f64() * 1000.0
            ));
        }
        if self.sent == 0 {
            failed.push("no request was sent".to_owned());
        }
        failed
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sent {} requests ({:.1}/s), errors {} ({:.2}%)",
            self.sent,
            self.achieved_rate,
            self.errors,
            self.error_rate() * 100.0
        )?;
        writeln!(f, "{:>10} | {:>12}", "percentile", "latency (ms)")?;
        for (q, d) in &self.percentiles {
            let name = if *q >= 100.0 {
                "max".to_owned()
            } else {
                format!("p{q}")
            };
            writeln!(f, "{name:>10} | {:>12.2}", d.as_secs_f64() * 1000.0)?;
        }
        writeln!(f, "{:>10} | {:>12}", "status", "count")?;
        for (status, n) in &self.statuses {
            let name = if *status == 0 {
                "no answer".to_owned()
            } else {
                status.to_string()
            };
            writeln!(f, "{name:>10} | {n:>12}")?;
        }
        Ok(())
    }
}

/// Signs the customers in (when orders will be sent), then runs the load
/// and returns its summary. `args` are in their ranges ([`bounds`], as
/// parsing them makes sure).
///
/// # Errors
/// When the catalogue cannot be read or the customers cannot be signed in.
pub async fn run(args: &LoadArgs) -> anyhow::Result<Summary> {
    run_live(args, &Live::default()).await
}

/// [`run`], its answers visible in `live` as they arrive, ending early
/// when `live` is stopped.
///
/// # Errors
/// As [`run`].
pub async fn run_live(args: &LoadArgs, live: &Live) -> anyhow::Result<Summary> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs_f64(args.timeout))
        .pool_max_idle_per_host(256)
        .build()?;
    let base = args.target.trim_end_matches('/').to_owned();
    // A catalogue that cannot be read is an error, not an empty one: an
    // empty catalogue turns every request into a read, so a failed list
    // ran `--read-ratio 0` as all reads and reported it as a pass.
    let products = product_ids(&client, &base).await?;
    let customers = if products.is_empty() || args.read_ratio >= 1.0 {
        signin::Customers::default()
    } else {
        let customers = signin::sign_in(&client, &base, &args.sign_in).await?;
        if !args.quiet {
            eprintln!("signed in {} customers", customers.len());
        }
        customers
    };

    let total = (args.rate * args.duration).round() as usize;
    // `rate` is at least `bounds::MIN_RATE`: at most 100 s.
    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let answers = live.answers.clone();
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut next_progress = start + Duration::from_secs(1);
    let mut pacer = pace::Pacer::new();
    let (mut sent, mut last_send) = (0, Duration::ZERO);
    for i in 0..total {
        let intended = start + interval.mul_f64(i as f64);
        tokio::select! {
            () = pacer.until(intended) => {}
            () = live.stop.cancelled() => break,
        }
        sent += 1;
        last_send = start.elapsed();
        live.sent.fetch_add(1, Ordering::Relaxed);
        let read = products.is_empty() || rng.random_bool(args.read_ratio);
        let request = if read {
            match products.len() {
                0 => client.get(format!("{base}/api/products?limit=20")),
                n => client.get(format!(
                    "{base}/api/products/{}",
                    products[rng.random_range(0..n)]
                )),
            }
        } else {
            let product = &products[rng.random_range(0..products.len())];
            let customer = rng.random_range(0..customers.len().max(1));
            let order = client
                .post(format!("{base}/api/orders"))
                .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                .json(&json!({"items": [{"product_id": product, "quantity": 1}]}));
            customers.authorize(order, customer)
        };
        let sink = answers.clone();
        tasks.spawn(async move {
            // Read the body: the latency includes it, and an answer whose
            // body broke off is no answer (0), as the sweep's client counts
            // it — not a success because its head arrived.
            let status = match request.send().await {
                Ok(res) => {
                    let status = res.status().as_u16();
                    match res.bytes().await {
                        Ok(_) => status,
                        Err(_) => 0,
                    }
                }
                Err(_) => 0,
            };
            let latency = intended.elapsed();
            lock(&sink).record(Instant::now(), read, status, latency);
        });
        while tasks.try_join_next().is_some() {}
        if !args.quiet && Instant::now() >= next_progress {
            next_progress += Duration::from_secs(1);
            let done = lock(&answers);
            eprint!(
                "\r{:>5.1}s  sent {:>7}  answered {:>7}  errors {:>5}  in flight {:>5}",
                start.elapsed().as_secs_f64(),
                i + 1,
                done.run.answered,
                done.run.errors(),
                tasks.len()
            );
        }
    }
    let window = send_window(sent, args.rate, last_send);
    while tasks.join_next().await.is_some() {}
    if !args.quiet {
        eprintln!();
    }
    let done = lock(&answers);
    let summary = Summary::from_tally(&done.run, window);
    if !args.quiet {
        let reads = done.run.reads;
        eprintln!("mix: {reads} reads, {} orders", done.run.answered - reads);
    }
    Ok(summary)
}

/// The ids of the catalogue's first 100 products (none: the load reads).
///
/// # Errors
/// No answer, not 2xx, or not JSON: named, with the URL.
async fn product_ids(client: &reqwest::Client, base: &str) -> anyhow::Result<Vec<String>> {
    use anyhow::Context as _;
    let url = format!("{base}/api/products?limit=100");
    let what = || format!("reading the catalogue (GET {url})");
    let page: serde_json::Value = client
        .get(&url)
        .send()
        .await
        .with_context(what)?
        .error_for_status()
        .with_context(what)?
        .json()
        .await
        .with_context(what)?;
    Ok(page["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|p| p["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(target: String) -> LoadArgs {
        LoadArgs {
            target,
            rate: 200.0,
            duration: 0.5,
            read_ratio: 1.0,
            max_error_rate: Some(0.01),
            p99: Some(1000.0),
            timeout: 2.0,
            seed: 7,
            quiet: true,
            sign_in: signin::SignInArgs {
                customers: 10,
                token_file: None,
            },
            sweep: sweep_defaults(),
        }
    }

    /// `shopeasy load`'s options, as the binary parses them.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn sweep_defaults() -> sweep::SweepArgs {
        use clap::Parser;
        Cli::parse_from(["x"]).load.sweep
    }

    #[test]
    fn options_out_of_their_range_are_refused_as_they_are_parsed() {
        use clap::Parser;
        // Each is refused by name; before, several of them panicked
        // (`--timeout=-1`), measured nothing (`--capacity=-5`) or never
        // sent (`--max-connections 0`).
        let bad = [
            // No scheme: every request failed before it left, as "no answer".
            ("--target", "127.0.0.1:8080"),
            // Positive, but its interval overflowed a Duration (a panic).
            ("--rate", "1e-20"),
            ("--timeout", "-1"),
            ("--duration", "0"),
            ("--rate", "NaN"),
            ("--read-ratio", "1.5"),
            ("--max-error-rate", "7"),
            ("--p99", "-3"),
            ("--deadline", "inf"),
            ("--step-seconds", "-1"),
            ("--probe-seconds", "1e300"),
            ("--capacity", "-5"),
            ("--start-rate", "0"),
            ("--ramp", "1"),
            ("--min-gain", "-0.1"),
            ("--p99-bound", "0"),
            ("--multipliers", "1,-3"),
            ("--max-outstanding", "0"),
            ("--max-connections", "0"),
        ];
        for (option, value) in bad {
            let error = Cli::try_parse_from(["x", &format!("{option}={value}")])
                .err()
                .unwrap_or_else(|| panic!("{option}={value} was accepted"));
            let text = error.to_string();
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{text}"
            );
            assert!(text.contains(option) && text.contains("must be"), "{text}");
        }
        let good = Cli::try_parse_from([
            "x",
            "--timeout=0.5",
            "--max-connections=1",
            "--multipliers=0.5,5",
            "--max-error-rate=0",
            "--target=https://shop.example/",
        ])
        .expect("values in range parse");
        assert_eq!(good.load.target, "https://shop.example");
        assert_eq!(good.load.sweep.max_connections, 1);
        assert_eq!(good.load.sweep.multipliers, [0.5, 5.0]);
    }

    async fn stub(fail_every: usize, delay: Duration) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let n = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new().route(
            "/api/products",
            axum::routing::get(move || {
                let n = n.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(delay).await;
                    if fail_every > 0 && n % fail_every == 1 {
                        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "{}")
                    } else {
                        (
                            axum::http::StatusCode::OK,
                            r#"{"items":[],"next_cursor":null}"#,
                        )
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    /// What the shop stub saw of each order: its `Authorization` and body.
    type Seen = Arc<std::sync::Mutex<Vec<(Option<String>, serde_json::Value)>>>;

    /// A shop with one product, orders that record what they carried, and
    /// a sign-in when `sign_in` (tokens `tok-<customer>`).
    async fn shop_stub(sign_in: bool) -> (String, Seen) {
        use axum::{Json, http::HeaderMap, routing::post};
        let seen: Seen = Arc::default();
        let sink = seen.clone();
        let mut app = axum::Router::new()
            .route(
                "/api/products",
                axum::routing::get(|| async { r#"{"items":[{"id":"p1"}],"next_cursor":null}"# }),
            )
            .route(
                "/api/orders",
                post(
                    move |headers: HeaderMap, Json(body): Json<serde_json::Value>| {
                        let auth = headers
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_owned());
                        sink.lock().unwrap().push((auth, body));
                        async { (axum::http::StatusCode::CREATED, "{}") }
                    },
                ),
            );
        if sign_in {
            app = app.route(
                "/api/session",
                post(|Json(body): Json<serde_json::Value>| async move {
                    Json(json!({"access_token": format!("tok-{}", body["customer"].as_str().unwrap())}))
                }),
            );
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), seen)
    }

    #[tokio::test]
    async fn orders_are_placed_by_signed_in_customers_picked_at_random() {
        let (base, seen) = shop_stub(true).await;
        let mut a = args(base);
        a.read_ratio = 0.0;
        let summary = run(&a).await.unwrap();
        assert_eq!(summary.statuses.get(&201), Some(&100), "{summary}");
        let seen = seen.lock().unwrap();
        let mut customers = std::collections::BTreeSet::new();
        for (auth, body) in seen.iter() {
            let auth = auth.as_deref().expect("every order carries a token");
            let customer = auth.strip_prefix("Bearer tok-load-").expect(auth);
            assert!(customer.parse::<usize>().unwrap() < 10, "{auth}");
            customers.insert(customer.to_owned());
            assert!(body.get("customer_id").is_none(), "{body}");
            assert_eq!(body["items"][0]["product_id"], "p1");
        }
        assert!(customers.len() >= 5, "spread over customers: {customers:?}");
    }

    #[tokio::test]
    async fn a_target_without_a_sign_in_is_a_clear_error_unless_tokens_are_given() {
        let (base, seen) = shop_stub(false).await;
        let mut a = args(base);
        a.read_ratio = 0.0;
        let err = format!("{:#}", run(&a).await.unwrap_err());
        assert!(
            err.contains("no sign-in") && err.contains("--token-file"),
            "{err}"
        );
        assert!(seen.lock().unwrap().is_empty(), "no order sent");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, "# from the provider\nt1\n\n t2 \n").unwrap();
        a.sign_in.token_file = Some(file);
        run(&a).await.unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 100);
        assert!(
            seen.iter()
                .all(|(auth, _)| matches!(auth.as_deref(), Some("Bearer t1" | "Bearer t2")))
        );
    }

    /// One request at 1/s, four at 4/s: the rate is theirs, not
    /// `sent / (sent − 1)` times it. Before, the window ended at the last
    /// send, so one request "ran" at thousands a second.
    #[tokio::test]
    async fn the_achieved_rate_is_per_second_of_the_offered_window() {
        let base = stub(0, Duration::ZERO).await;
        for (rate, sent) in [(1.0, 1), (4.0, 4)] {
            let mut a = args(base.clone());
            (a.rate, a.duration) = (rate, 1.0);
            let summary = run(&a).await.unwrap();
            assert_eq!(summary.sent, sent, "{summary}");
            assert!(
                summary.achieved_rate <= rate + 1e-9 && summary.achieved_rate > rate * 0.9,
                "{rate}/s offered: {summary}"
            );
        }
        assert_eq!(send_window(0, 5.0, Duration::ZERO), Duration::ZERO);
        // A generator that fell behind: its sends took 3 s, not 2.
        assert_eq!(
            send_window(4, 2.0, Duration::from_millis(2500)),
            Duration::from_secs(3)
        );
    }

    /// A server whose catalogue (`?limit=100`) is empty and whose every
    /// other answer breaks off: a 200 whose body stops 5 bytes into the 100
    /// its `content-length` promised.
    async fn cut_short_stub() -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    // The request's head (a GET: no body follows it).
                    let mut head = Vec::new();
                    let mut buf = [0_u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let answer = if head.starts_with(b"GET /api/products?limit=100 ") {
                        let body = r#"{"items":[],"next_cursor":null}"#;
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    } else {
                        "HTTP/1.1 200 OK\r\ncontent-length: 100\r\nconnection: close\r\n\r\nshort"
                            .to_owned()
                    };
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        format!("http://{addr}")
    }

    /// Before, the body's error was dropped and the 200 of its head
    /// counted: a target that cut every answer short passed the gates.
    #[tokio::test]
    async fn an_answer_whose_body_breaks_off_is_no_answer() {
        let args = args(cut_short_stub().await);
        let summary = run(&args).await.unwrap();
        assert_eq!(summary.sent, 100, "{summary}");
        assert_eq!(summary.statuses.get(&0), Some(&100), "{summary}");
        assert_eq!(summary.errors, 100, "{summary}");
        assert!(!summary.failed_gates(&args).is_empty(), "{summary}");
    }

    /// Before, the failed list read as an empty catalogue: `--read-ratio 0`
    /// ran as all reads, against a catalogue that answered 500.
    #[tokio::test]
    async fn a_catalogue_that_cannot_be_read_is_an_error_not_a_run_of_reads() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let reads = Arc::new(AtomicUsize::new(0));
        let counted = reads.clone();
        let app = axum::Router::new().route(
            "/api/products",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "{}") }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let mut a = args(format!("http://{addr}"));
        a.read_ratio = 0.0;
        let err = format!("{:#}", run(&a).await.unwrap_err());
        assert!(
            err.contains("reading the catalogue") && err.contains("500"),
            "{err}"
        );
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "only the catalogue was read"
        );
    }

    #[tokio::test]
    async fn a_healthy_target_passes_the_gates() {
        let args = args(stub(0, Duration::ZERO).await);
        let summary = run(&args).await.unwrap();
        assert_eq!(summary.sent, 100);
        assert_eq!(summary.statuses.get(&200), Some(&100), "{summary}");
        assert!(summary.failed_gates(&args).is_empty(), "{summary}");
        let table = summary.to_string();
        assert!(table.contains("p99") && table.contains("200 |"), "{table}");
    }

    #[tokio::test]
    async fn errors_above_the_gate_fail_the_run() {
        let args = args(stub(4, Duration::ZERO).await);
        let summary = run(&args).await.unwrap();
        assert!(summary.error_rate() > 0.2, "{summary}");
        let failed = summary.failed_gates(&args);
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(failed[0].starts_with("error rate"), "{failed:?}");
    }

    #[tokio::test]
    async fn latency_above_the_gate_fails_the_run() {
        let mut args = args(stub(0, Duration::from_millis(60)).await);
        args.p99 = Some(20.0);
        let summary = run(&args).await.unwrap();
        assert!(summary.p99() >= Duration::from_millis(60), "{summary}");
        let failed = summary.failed_gates(&args);
        assert!(failed.iter().any(|f| f.starts_with("p99")), "{failed:?}");
    }

    /// Before, a run kept every answer until it ended (the console's
    /// longest: 18 M). An hour of answers at 250/s: the room after the
    /// first seconds is the room at the end, the run's figures are those
    /// of every answer (to 3 digits), and the live ones of the last
    /// seconds only.
    #[test]
    fn a_run_counts_its_answers_in_a_fixed_room() {
        use crate::load::latency::within_precision;
        const MS: Duration = Duration::from_millis(1);
        let epoch = Instant::now();
        let mut answers = Answers::new(epoch);
        let mut room = 0;
        for second in 0..3_600 {
            if second == RECENT_SECONDS + 1 {
                // Every second of the ring has been used once.
                room = answers.footprint();
            }
            // The last four seconds are slow.
            let latency = if second >= 3_596 { MS * 500 } else { MS };
            for j in 0..250 {
                let at = epoch + Duration::from_secs(second) + MS * 4 * j;
                let status = if j % 50 == 0 { 503 } else { 200 };
                answers.record(at, j % 2 == 0, status, latency);
            }
        }
        assert_eq!(answers.footprint(), room, "no room was added");

        let run = Summary::from_tally(&answers.run, Duration::from_secs(3_600));
        assert_eq!((run.sent, answers.run.reads), (900_000, 450_000));
        assert_eq!(
            (run.errors, run.statuses.get(&503)),
            (18_000, Some(&18_000))
        );
        assert!((run.achieved_rate - 250.0).abs() < 1e-9, "{run}");
        let [p50, p90, p99, p999, max] = run.percentiles.map(|(_, d)| d);
        for p in [p50, p90, p99] {
            assert!(within_precision(p, MS), "{run}");
        }
        // 1,000 answers of 900,000 were slow: more than 0.1 %.
        assert!(within_precision(p999, MS * 500), "{run}");
        assert!(within_precision(max, MS * 500), "{run}");

        // Half a second into the last second: the three seconds before it
        // and this one, 1,000 answers over 3.5 s, all slow.
        let now = epoch + Duration::from_millis(3_599_500);
        let live = |answers: &Answers| {
            let (tally, span) = answers.recent(now, Duration::from_secs(3));
            Summary::from_tally(&tally, span)
        };
        let recent = live(&answers);
        assert_eq!(recent.sent, 1_000, "{recent}");
        assert_eq!(recent.statuses.get(&503), Some(&20), "{recent}");
        assert!(
            (recent.achieved_rate - 1_000.0 / 3.5).abs() < 1e-6,
            "{recent}"
        );
        assert!(
            within_precision(recent.percentiles[0].1, MS * 500),
            "{recent}"
        );
        // An answer of second 1 coming now counts in the run, and takes no
        // later second's place in the ring.
        answers.record(epoch + Duration::from_secs(1), true, 200, MS);
        assert_eq!(answers.run.answered, 900_001);
        assert_eq!(live(&answers).sent, 1_000);
        // Long after the last answer, nothing is recent.
        let (tally, _) = answers.recent(now + Duration::from_secs(100), Duration::from_secs(3));
        assert_eq!(tally.answered, 0);
    }
}
