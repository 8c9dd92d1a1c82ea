//! `shopeasy load --sweep`: the overload curve.
//!
//! 1. **Capacity**: offer a rising rate (`--start-rate`, ×`--ramp` per probe)
//!    until goodput stops rising (less than `--min-gain` over the best so
//!    far) or the admitted p99 passes `--p99-bound` (or after
//!    [`MAX_PROBES`] probes); the capacity is the best
//!    goodput seen (or `--capacity` skips the search).
//! 2. **Steps**: offer 0.5×, 1×, 2×, 3× and 5× of it open-loop
//!    (`--multipliers`), restocking before each step so orders are real
//!    placements, and report per step: offered, goodput (2xx within
//!    `--deadline`), shed (503 / 429), no answer, not sent, p50/p99 of
//!    admitted and of shed answers, and the target process's open
//!    descriptors (and how many of them are client connections), its RSS,
//!    and the cores it and the generator kept busy (on one machine, what
//!    the generator takes as the load rises is taken from the target;
//!    `bench/overload.sh` can pin the two to cores of their own).
//! 3. **Output**: a table on stdout, a CSV and an SVG plot (goodput and
//!    latency against offered load) under `--out`.
//! 4. **Gates**: issue 14's "Done when" judged on those figures ([`gates`]);
//!    `shopeasy load --sweep` prints each and fails when one does.
//!
//! One HTTP client serves every request, its idle pool bounded, and at most
//! `--max-outstanding` requests wait at once: the generator cannot run out
//! of descriptors itself, and what it could not send is counted apart.

use std::{fmt::Write as _, path::PathBuf, time::Duration};

use anyhow::Context as _;

use super::{
    bounds,
    client::StepClient,
    plot,
    procstat::{self, ProcStats},
    refusals,
    signin::{self, SignInArgs},
    step::{self, StepResult, Target},
};

/// `shopeasy load --sweep` options.
#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// Run the overload sweep instead of one fixed rate.
    #[arg(long)]
    pub sweep: bool,
    /// Skip the capacity search: use this many requests per second.
    #[arg(long, value_parser = bounds::rate)]
    pub capacity: Option<f64>,
    /// The first rate of the capacity search.
    #[arg(long, default_value_t = 100.0, value_parser = bounds::rate)]
    pub start_rate: f64,
    /// Each probe of the search offers this multiple of the last.
    #[arg(long, default_value_t = 1.4, value_parser = bounds::ramp)]
    pub ramp: f64,
    /// The search stops when goodput rose less than this share over the
    /// best so far.
    #[arg(long, default_value_t = 0.05, value_parser = bounds::share)]
    pub min_gain: f64,
    /// The search stops when the admitted p99 exceeds this many ms.
    #[arg(long, default_value_t = 500.0, value_parser = bounds::milliseconds)]
    pub p99_bound: f64,
    /// Seconds of each capacity probe.
    #[arg(long, default_value_t = 5.0, value_parser = bounds::seconds)]
    pub probe_seconds: f64,
    /// Seconds of each step.
    #[arg(long, default_value_t = 20.0, value_parser = bounds::seconds)]
    pub step_seconds: f64,
    /// Multiples of the capacity to offer.
    #[arg(long, value_delimiter = ',', default_value = "0.5,1,2,3,5", value_parser = bounds::multiplier)]
    pub multipliers: Vec<f64>,
    /// The client's deadline: a 2xx later than this is not goodput, and a
    /// request is given up after it (seconds).
    #[arg(long, default_value_t = 2.0, value_parser = bounds::seconds)]
    pub deadline: f64,
    /// Most requests waiting for an answer at once; beyond it a request is
    /// "not sent".
    #[arg(long, default_value_t = 4096, value_parser = bounds::count)]
    pub max_outstanding: usize,
    /// Most connections the step's client keeps open at once; a request
    /// that finds none free waits for one (its wait counts in its latency,
    /// from its intended start). Without a bound the client opened a
    /// connection per waiting request and measured its own storm.
    #[arg(long, default_value_t = 256, value_parser = bounds::count)]
    pub max_connections: usize,
    /// Inventory's gRPC address, to restock before each step (SetStock).
    #[arg(long)]
    pub inventory: Option<String>,
    /// Admin token for SetStock (default: `ADMIN_TOKEN`).
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// The target process for descriptors and RSS (default: a process
    /// named `shopeasy` other than this one, when there is exactly one).
    #[arg(long)]
    pub pid: Option<u32>,
    /// The gateway's Prometheus endpoint (its admin listener's `/metrics`):
    /// each step then also shows the p99 of the gateway's own time over the
    /// requests it shed, beside the client's (which holds every wait for a
    /// core on the way).
    #[arg(long)]
    pub metrics: Option<String>,
    /// Where the CSV and SVG go.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// File name stem of the CSV and SVG.
    #[arg(long, default_value = "overload")]
    pub name: String,
}

/// The most probes one capacity search makes. Each option is in range,
/// but together they need not end soon: `--ramp 1.0001 --min-gain 0`
/// climbs from 0.01/s towards 100,000/s in steps of 0.01 %, and a target
/// whose goodput keeps rising a hair would take days. Forty probes at the
/// default ramp of 1.4 span a factor of 700,000.
pub const MAX_PROBES: usize = 40;

/// The next rate of the capacity search after `probes` probes, or `None`
/// when it is over: goodput stopped rising, the admitted p99 passed the
/// bound, or it made [`MAX_PROBES`].
pub fn next_probe(args: &SweepArgs, best: f64, last: &StepResult, probes: usize) -> Option<f64> {
    let rose = last.goodput() >= best * (1.0 + args.min_gain);
    let p99_ok = last.admitted_p99.as_secs_f64() * 1000.0 <= args.p99_bound;
    (rose && p99_ok && probes < MAX_PROBES).then_some(last.offered * args.ramp)
}

/// The rates of the steps: each multiple of `capacity`, at least 1/s.
///
/// # Errors
/// A step above [`bounds::MAX_RATE`], named. Why: the options are each in
/// range, but their product is not (`--capacity 100000 --multipliers
/// 1000` asked a step for 1e8/s, beyond what one generator sends, and for
/// room for every answer before the first send).
pub fn step_rates(capacity: f64, multipliers: &[f64]) -> anyhow::Result<Vec<(f64, f64)>> {
    multipliers
        .iter()
        .map(|&m| {
            let rate = (capacity * m).max(1.0);
            if rate > bounds::MAX_RATE {
                anyhow::bail!(
                    "the {m}× step of a capacity of {capacity:.0}/s would offer {rate:.0}/s, \
                     more than the {max:.0}/s a step may: lower --multipliers or --capacity",
                    max = bounds::MAX_RATE
                );
            }
            Ok((m, rate))
        })
        .collect()
}

/// Everything the sweep measured.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The capacity the steps are multiples of.
    pub capacity: f64,
    /// The search's probes (empty with `--capacity`).
    pub probes: Vec<StepResult>,
    /// The steps.
    pub steps: Vec<StepResult>,
    /// The CSV written.
    pub csv: PathBuf,
    /// The SVG written.
    pub svg: PathBuf,
}

/// Runs the sweep against `base` (the gateway), its orders placed by the
/// customers `sign_in` names (signed in first, when there is a product to
/// order). `args` are in their ranges ([`bounds`], as parsing them makes
/// sure).
///
/// # Errors
/// A step above [`bounds::MAX_RATE`] (before anything is sent when
/// `--capacity` is given, else after the search), a catalogue that cannot
/// be read, customers who cannot be signed in, or the CSV / SVG cannot be
/// written.
pub async fn run(
    base: &str,
    args: &SweepArgs,
    sign_in: &SignInArgs,
    seed: u64,
    quiet: bool,
) -> anyhow::Result<Sweep> {
    if let Some(capacity) = args.capacity {
        step_rates(capacity, &args.multipliers)?;
    }
    let deadline = Duration::from_secs_f64(args.deadline);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.max_outstanding.min(1024))
        .pool_idle_timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()?;
    let base = base.trim_end_matches('/').to_owned();
    // Not an empty catalogue when it cannot be read: that would run the
    // sweep on reads instead of orders (see `super::run_live`).
    let products = super::product_ids(&client, &base).await?;
    let customers = if products.is_empty() {
        signin::Customers::default()
    } else {
        signin::sign_in(&client, &base, sign_in).await?
    };
    let step_client = StepClient::new(
        Target {
            base,
            products,
            customers,
            seed,
        },
        args.max_connections,
    )?;
    let target = step_client.target();
    let pid = args.pid.or_else(procstat::find_shopeasy);
    // The listener whose accepted connections are the generator's own.
    let port = reqwest::Url::parse(&target.base)
        .ok()
        .and_then(|u| u.port_or_known_default());
    if !quiet {
        eprintln!(
            "sweep: {} products to order by {} customers{}, target pid {}",
            target.products.len(),
            target.customers.len(),
            if args.inventory.is_some() {
                ", restocking"
            } else {
                ""
            },
            pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
        );
    }
    let restock = async || {
        if let (Some(url), Some(token)) = (&args.inventory, &args.admin_token)
            && let Err(e) = super::restock::restock(url, token, &target.products).await
        {
            eprintln!("sweep: restock failed: {e:#}");
        }
    };
    let me = std::process::id();
    // What the step's figures are read against at its end: the target's
    // and the generator's CPU time, the target's threads' waits for a
    // core, the machine's CPU pressure, the gateway's own refusals.
    let usage = async || Usage {
        target_cpu: pid.and_then(procstat::cpu_seconds),
        generator_cpu: procstat::cpu_seconds(me),
        target_threads: pid.and_then(procstat::sched_stats),
        cpu_pressure_us: procstat::cpu_pressure_us(),
        own_refusals: match &args.metrics {
            Some(url) => refusals::read(&client, url).await,
            None => None,
        },
    };
    let measure = async |mut r: StepResult, before: Usage| {
        let stats = pid.map(|p| procstat::read(p, port)).unwrap_or_default();
        let ProcStats {
            open_fds,
            rss_kib,
            client_connections,
        } = stats;
        r.open_fds = open_fds;
        r.rss_kib = rss_kib;
        r.client_connections = client_connections;
        let after = usage().await;
        used_over_the_step(r, before, after)
    };

    let mut probes = Vec::new();
    let capacity = match args.capacity {
        Some(c) => c,
        None => {
            let mut rate = args.start_rate;
            let mut best = 0.0_f64;
            loop {
                restock().await;
                let before = usage().await;
                let r = step::offer(
                    &step_client,
                    rate,
                    Duration::from_secs_f64(args.probe_seconds),
                    deadline,
                    args.max_outstanding,
                )
                .await;
                let r = measure(r, before).await;
                if !quiet {
                    eprintln!("probe {}", row(&r));
                }
                let next = next_probe(args, best, &r, probes.len() + 1);
                best = best.max(r.goodput());
                probes.push(r);
                match next {
                    Some(n) if n <= bounds::MAX_RATE => rate = n,
                    _ => break,
                }
                // Let queues drain between probes.
                tokio::time::sleep(pause(args.probe_seconds, 1.0)).await;
            }
            best.max(1.0)
        }
    };
    if !quiet {
        eprintln!("capacity: {capacity:.0}/s");
    }

    let mut steps = Vec::new();
    for (multiplier, rate) in step_rates(capacity, &args.multipliers)? {
        restock().await;
        let before = usage().await;
        let mut r = step::offer(
            &step_client,
            rate,
            Duration::from_secs_f64(args.step_seconds),
            deadline,
            args.max_outstanding,
        )
        .await;
        r.multiplier = multiplier;
        let r = measure(r, before).await;
        if !quiet {
            eprintln!("step  {}", row(&r));
        }
        steps.push(r);
        tokio::time::sleep(pause(args.step_seconds, 2.0)).await;
    }

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let csv = args.out.join(format!("{}.csv", args.name));
    std::fs::write(&csv, to_csv(&steps)).with_context(|| format!("writing {}", csv.display()))?;
    let svg = args.out.join(format!("{}.svg", args.name));
    plot::draw(&svg, capacity, &steps)?;
    Ok(Sweep {
        capacity,
        probes,
        steps,
        csv,
        svg,
    })
}

/// One of issue 14's gates on a sweep, judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// What is required, with the figures measured.
    pub text: String,
    /// `None` when the sweep has no step to judge it by.
    pub passed: Option<bool>,
}

/// Issue 14's "Done when" on the sweep's figures, so every run (embedded or
/// full mode) says the same thing the same way: at 3× goodput ≥ 90 % of the
/// peak (steps and probes), admitted p99 ≤ 3× the unloaded p99 (the lowest
/// step's), refusals' p99 ≤ 5 ms; at 5× goodput ≥ 80 % of the peak; no step
/// leaves a request without an answer.
pub fn gates(sweep: &Sweep) -> Vec<Gate> {
    let peak = sweep
        .steps
        .iter()
        .chain(&sweep.probes)
        .map(StepResult::goodput)
        .fold(0.0_f64, f64::max);
    let at = |m: f64| sweep.steps.iter().find(|s| (s.multiplier - m).abs() < 1e-9);
    let unloaded = sweep
        .steps
        .iter()
        .min_by(|a, b| a.multiplier.total_cmp(&b.multiplier));
    let gate = |text: String, passed: Option<bool>| Gate { text, passed };
    let share = |m: f64, min: f64| match at(m) {
        Some(s) => gate(
            format!(
                "{m}× goodput {:.0}/s ≥ {:.0} % of the peak {peak:.0}/s",
                s.goodput(),
                min * 100.0
            ),
            Some(s.goodput() >= peak * min),
        ),
        None => gate(
            format!("{m}× goodput ≥ {:.0} % of the peak", min * 100.0),
            None,
        ),
    };
    let mut out = vec![share(3.0, 0.9)];
    out.push(match (at(3.0), unloaded) {
        (Some(s), Some(u)) => gate(
            format!(
                "3× admitted p99 {:.1} ms ≤ {:.1} ms (3× the unloaded {}× step's {:.1} ms)",
                ms(s.admitted_p99),
                3.0 * ms(u.admitted_p99),
                u.multiplier,
                ms(u.admitted_p99)
            ),
            Some(s.admitted_p99 <= u.admitted_p99 * 3),
        ),
        _ => gate("3× admitted p99 ≤ 3× the unloaded p99".to_owned(), None),
    });
    out.push(match at(3.0) {
        Some(s) => gate(
            format!("3× refusals' p99 {:.1} ms ≤ 5 ms", ms(s.shed_p99)),
            Some(s.shed == 0 || s.shed_p99 <= Duration::from_millis(5)),
        ),
        None => gate("3× refusals' p99 ≤ 5 ms".to_owned(), None),
    });
    out.push(share(5.0, 0.8));
    // A request the generator could not send (its bound on outstanding
    // requests was full) got no answer either: it counts, or a generator
    // that fell behind would pass this gate by not asking.
    let unanswered: u64 = sweep.steps.iter().map(|s| s.no_answer).sum();
    let not_sent: u64 = sweep.steps.iter().map(|s| s.not_sent).sum();
    out.push(gate(
        format!(
            "{unanswered} requests without an answer and {not_sent} not sent by the \
             generator (0 allowed)"
        ),
        Some(unanswered == 0 && not_sent == 0),
    ));
    out
}

/// What a step's use of the machine is measured from (see `run`).
struct Usage {
    target_cpu: Option<f64>,
    generator_cpu: Option<f64>,
    target_threads: Option<procstat::Threads>,
    cpu_pressure_us: Option<u64>,
    own_refusals: Option<refusals::Buckets>,
}

/// `r` with the figures of its use of the machine: what `after` (read once
/// its last request was answered or given up) adds to `before` (read
/// before its first send), per second of the step's wall time.
///
/// Why the wall time and not the send window (`r.seconds`): the CPU the
/// target spends on the answers after the last send is in `after`, so
/// over the send window alone it read up to `--deadline` seconds' worth
/// too many cores (and too much pressure) for a step.
fn used_over_the_step(mut r: StepResult, before: Usage, after: Usage) -> StepResult {
    let seconds = r.wall_seconds.max(1e-9);
    let cores = |before: Option<f64>, after: Option<f64>| Some((after? - before?) / seconds);
    r.target_cpu = cores(before.target_cpu, after.target_cpu);
    r.generator_cpu = cores(before.generator_cpu, after.generator_cpu);
    r.target_wait_per_slice = after
        .target_threads
        .zip(before.target_threads)
        .and_then(|(after, before)| after.wait_per_slice_since(&before));
    #[allow(clippy::cast_precision_loss)]
    let pressure = after
        .cpu_pressure_us
        .zip(before.cpu_pressure_us)
        .map(|(after, before)| after.saturating_sub(before) as f64 / 1e6 / seconds);
    r.cpu_pressure = pressure.map(|p| p.min(1.0));
    r.target_shed_p99 = after
        .own_refusals
        .zip(before.own_refusals)
        .and_then(|(after, before)| after.p99_since(&before));
    r
}

/// The pause after a step of `seconds`: a tenth of it, at most `max`.
fn pause(seconds: f64, max: f64) -> Duration {
    Duration::from_secs_f64((seconds / 10.0).min(max))
}

/// The CSV's header.
pub const CSV_HEADER: &str = "multiplier,offered_rps,seconds,sent,not_sent,goodput_rps,good,shed,no_answer,other,admitted_p50_ms,admitted_p99_ms,shed_p50_ms,shed_p99_ms,send_lag_p99_ms,open_fds,client_connections,rss_kib,target_cpu_cores,generator_cpu_cores,target_wait_per_slice_us,cpu_pressure,target_shed_p99_ms";

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

/// Whole microseconds (empty when unknown).
fn micros(v: Option<Duration>) -> String {
    opt(v.and_then(|d| u64::try_from(d.as_micros()).ok()))
}

/// Cores, or a share, to two decimals (empty when unknown).
fn two_places(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.2}"))
}

/// The steps as CSV, one row each.
pub fn to_csv(steps: &[StepResult]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for r in steps {
        let _ = writeln!(
            out,
            "{},{:.1},{:.2},{},{},{:.1},{},{},{},{},{:.2},{:.2},{:.2},{:.2},{:.2},{},{},{},{},{},{},{},{}",
            r.multiplier,
            r.offered,
            r.seconds,
            r.sent,
            r.not_sent,
            r.goodput(),
            r.good,
            r.shed,
            r.no_answer,
            r.other,
            ms(r.admitted_p50),
            ms(r.admitted_p99),
            ms(r.shed_p50),
            ms(r.shed_p99),
            ms(r.send_lag_p99),
            opt(r.open_fds),
            opt(r.client_connections),
            opt(r.rss_kib),
            two_places(r.target_cpu),
            two_places(r.generator_cpu),
            micros(r.target_wait_per_slice),
            two_places(r.cpu_pressure),
            r.target_shed_p99
                .map_or_else(String::new, |d| ms(d).to_string()),
        );
    }
    out
}

/// One step as a line of the table.
pub fn row(r: &StepResult) -> String {
    format!(
        "{:>4}× offered {:>7.0}/s  goodput {:>7.0}/s  shed {:>6}  no answer {:>5}  not sent {:>5}  other {:>4}  admitted p50/p99 {:>7.1}/{:>7.1} ms  shed p50/p99 {:>6.1}/{:>6.1} ms  send lag p99 {:>5.1} ms  fds {:>5} (clients {:>5})  rss {:>6} KiB  cpu target/generator {:>4}/{:>4} cores  wait for a core {:>5} µs  cpu pressure {:>4}  gateway's own shed p99 {:>9}",
        r.multiplier,
        r.offered,
        r.goodput(),
        r.shed,
        r.no_answer,
        r.not_sent,
        r.other,
        ms(r.admitted_p50),
        ms(r.admitted_p99),
        ms(r.shed_p50),
        ms(r.shed_p99),
        ms(r.send_lag_p99),
        opt(r.open_fds),
        opt(r.client_connections),
        opt(r.rss_kib),
        two_places(r.target_cpu),
        two_places(r.generator_cpu),
        micros(r.target_wait_per_slice),
        two_places(r.cpu_pressure),
        r.target_shed_p99
            .map_or_else(|| "-".to_owned(), |d| format!("≤ {} ms", ms(d))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sweep: SweepArgs,
    }

    fn args() -> SweepArgs {
        Cli::parse_from(["x", "--sweep"]).sweep
    }

    fn result(offered: f64, good: u64, p99_ms: u64) -> StepResult {
        StepResult {
            offered,
            seconds: 1.0,
            good,
            admitted_p99: Duration::from_millis(p99_ms),
            ..StepResult::default()
        }
    }

    #[test]
    fn the_search_ramps_while_goodput_rises_and_latency_holds() {
        let a = args();
        assert_eq!(a.multipliers, vec![0.5, 1.0, 2.0, 3.0, 5.0]);
        let next = next_probe(&a, 0.0, &result(100.0, 100, 10), 1).unwrap();
        assert!((next - 140.0).abs() < 1e-9);
        assert_eq!(
            next_probe(&a, 500.0, &result(700.0, 510, 10), 2),
            None,
            "goodput rose 2 %"
        );
        assert_eq!(
            next_probe(&a, 100.0, &result(140.0, 140, 900), 2),
            None,
            "p99 past the bound"
        );
        // Rising and within the bound, but the search has made its probes.
        assert!(next_probe(&a, 100.0, &result(140.0, 140, 10), MAX_PROBES - 1).is_some());
        assert_eq!(
            next_probe(&a, 100.0, &result(140.0, 140, 10), MAX_PROBES),
            None,
            "{MAX_PROBES} probes made"
        );
    }

    fn sweep(steps: Vec<StepResult>) -> Sweep {
        Sweep {
            capacity: 100.0,
            probes: Vec::new(),
            steps,
            csv: PathBuf::new(),
            svg: PathBuf::new(),
        }
    }

    fn step_at(multiplier: f64, good: u64, p99_ms: u64) -> StepResult {
        StepResult {
            multiplier,
            ..result(multiplier * 100.0, good, p99_ms)
        }
    }

    #[test]
    fn the_gates_pass_a_flat_curve_and_fail_a_collapse() {
        let flat = sweep(vec![
            step_at(0.5, 50, 10),
            step_at(1.0, 100, 12),
            step_at(3.0, 95, 25),
            step_at(5.0, 85, 29),
        ]);
        let g = gates(&flat);
        assert_eq!(g.len(), 5);
        assert!(g.iter().all(|g| g.passed == Some(true)), "{g:?}");

        let mut collapse = sweep(vec![
            step_at(0.5, 50, 10),
            step_at(1.0, 100, 12),
            step_at(3.0, 60, 400),
            step_at(5.0, 20, 900),
        ]);
        collapse.steps[2].shed = 10;
        collapse.steps[2].shed_p99 = Duration::from_millis(40);
        collapse.steps[3].no_answer = 3;
        let failed: Vec<_> = gates(&collapse)
            .into_iter()
            .filter(|g| g.passed == Some(false))
            .collect();
        assert_eq!(failed.len(), 5, "{failed:?}");

        // Requests the generator never sent are not answered either.
        let mut behind = flat.clone();
        behind.steps[3].not_sent = 1;
        let last = gates(&behind).pop().unwrap();
        assert_eq!(last.passed, Some(false), "{last:?}");

        let partial = gates(&sweep(vec![step_at(0.5, 50, 10)]));
        assert_eq!(partial[0].passed, None, "no 3× step: not judged");
    }

    #[test]
    fn steps_are_multiples_of_the_capacity() {
        let rates = step_rates(800.0, &[0.5, 1.0, 5.0]).unwrap();
        assert_eq!(rates, vec![(0.5, 400.0), (1.0, 800.0), (5.0, 4000.0)]);
    }

    /// Each option in range, their product not: before, the step ran at
    /// 1e8/s and first made room for 2e9 answers (~80 GB).
    #[test]
    fn a_step_above_the_most_a_step_may_offer_is_refused_by_name() {
        let err = step_rates(100_000.0, &[1.0, 1000.0])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("1000× step")
                && err.contains("100000000/s")
                && err.contains("--multipliers"),
            "{err}"
        );
        assert!(step_rates(20_000.0, &[5.0]).is_ok(), "at the bound");
    }

    /// `--capacity` and `--multipliers` that make a step too fast are an
    /// error before the sweep signs in or sends anything (the target here
    /// does not exist: nothing was tried).
    #[tokio::test]
    async fn a_sweep_with_a_step_too_fast_fails_before_it_sends() {
        let a = Cli::parse_from([
            "x",
            "--sweep",
            "--capacity",
            "100000",
            "--multipliers",
            "1000",
        ])
        .sweep;
        let err = run("http://127.0.0.1:9", &a, &SignInArgs::default(), 1, true)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than the 100000/s a step may"), "{err}");
    }

    fn usage(cpu: f64, pressure_us: u64) -> Usage {
        Usage {
            target_cpu: Some(cpu),
            generator_cpu: Some(cpu / 2.0),
            target_threads: None,
            cpu_pressure_us: Some(pressure_us),
            own_refusals: None,
        }
    }

    /// A step that sent for 1 s and took 2 s in all (answers up to its
    /// deadline after the last send): 1 s of CPU over it is half a core,
    /// not the one core its send window made of it.
    #[test]
    fn cores_and_pressure_are_per_second_of_the_whole_step() {
        let r = StepResult {
            seconds: 1.0,
            wall_seconds: 2.0,
            ..StepResult::default()
        };
        let r = used_over_the_step(r, usage(10.0, 0), usage(11.0, 500_000));
        assert_eq!(r.target_cpu, Some(0.5));
        assert_eq!(r.generator_cpu, Some(0.25));
        assert_eq!(r.cpu_pressure, Some(0.25));
    }

    #[test]
    fn the_csv_has_a_header_and_a_row_per_step() {
        let csv = to_csv(&[result(100.0, 90, 12), result(200.0, 95, 30)]);
        let lines: Vec<_> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], CSV_HEADER);
        let cols = CSV_HEADER.split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == cols));
        assert!(lines[1].starts_with("0,100.0,1.00,0,0,90.0,90,"));
    }

    /// A server that does 20 ms of work at most 4 at a time and refuses
    /// the rest at once with 503: a capacity of about 200/s. Its
    /// `/metrics` counts the refusals as the gateway's histogram does, all
    /// within its first bucket (1 ms).
    async fn limited_stub() -> String {
        use std::sync::{
            Arc,
            atomic::{AtomicU64, Ordering},
        };
        let slots = Arc::new(tokio::sync::Semaphore::new(4));
        let shed = Arc::new(AtomicU64::new(0));
        let counted = shed.clone();
        let app = axum::Router::new()
            .route(
                "/api/products",
                axum::routing::get(move || {
                    let (slots, shed) = (slots.clone(), shed.clone());
                    async move {
                        let Ok(_slot) = slots.try_acquire_owned() else {
                            shed.fetch_add(1, Ordering::Relaxed);
                            return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "{}");
                        };
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        (
                            axum::http::StatusCode::OK,
                            r#"{"items":[],"next_cursor":null}"#,
                        )
                    }
                }),
            )
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let n = counted.load(Ordering::Relaxed);
                    let series = "shopeasy_gateway_request_duration_seconds_bucket{route=\"products\",status=\"503\",outcome=\"shed\"";
                    async move { format!("{series},le=\"0.001\"}} {n}\n{series},le=\"+Inf\"}} {n}\n") }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_sweep_finds_the_capacity_and_writes_the_csv_and_the_plot() {
        let base = limited_stub().await;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().display().to_string();
        let a = Cli::parse_from([
            "x",
            "--sweep",
            "--start-rate",
            "50",
            "--ramp",
            "2",
            "--probe-seconds",
            "0.5",
            "--step-seconds",
            "0.6",
            "--multipliers",
            "0.5,1,3",
            "--out",
            &out,
            "--pid",
            &std::process::id().to_string(),
            "--metrics",
            &format!("{base}/metrics"),
        ])
        .sweep;
        let sweep = run(&base, &a, &SignInArgs::default(), 1, true)
            .await
            .unwrap();
        assert!(!sweep.probes.is_empty());
        // The stub serves about 200/s; the search stops near it.
        assert!(
            sweep.capacity > 50.0 && sweep.capacity < 400.0,
            "capacity {}",
            sweep.capacity
        );
        assert_eq!(sweep.steps.len(), 3);
        let over = &sweep.steps[2];
        assert!(over.shed > 0, "3× is shed: {}", row(over));
        // The target's own account of its refusals is read over the step.
        assert_eq!(
            over.target_shed_p99,
            Some(Duration::from_millis(1)),
            "{}",
            row(over)
        );
        assert!(over.open_fds.is_some() && over.rss_kib.is_some());
        // Target and generator are this one process here: both kept some
        // CPU busy, and the same amount.
        let (t, g) = (over.target_cpu.unwrap(), over.generator_cpu.unwrap());
        assert!(t > 0.0 && (t - g).abs() < 0.05, "{}", row(over));
        // Its threads ran time slices (so their wait for a core is known),
        // and the machine's CPU pressure is read where the kernel has it.
        #[cfg(target_os = "linux")]
        assert!(over.target_wait_per_slice.is_some(), "{}", row(over));
        if std::path::Path::new("/proc/pressure/cpu").exists() {
            assert!(
                over.cpu_pressure.is_some_and(|p| (0.0..=1.0).contains(&p)),
                "{}",
                row(over)
            );
        }
        // This process is the target here, and the stub's listener is in
        // it: the generator's connections to it are counted.
        assert!(
            over.client_connections.is_some_and(|n| n >= 1),
            "{}",
            row(over)
        );
        let csv = std::fs::read_to_string(&sweep.csv).unwrap();
        assert_eq!(csv.lines().next(), Some(CSV_HEADER));
        assert_eq!(csv.lines().count(), 4);
        let svg = std::fs::read_to_string(&sweep.svg).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("goodput"),
            "{}",
            &svg[..200.min(svg.len())]
        );
    }
}
