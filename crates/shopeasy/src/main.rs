//! `shopeasy`: run the whole system, or load it.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use shopeasy::{
    load::{self, LoadArgs},
    system::{Options, System},
};
use shopeasy_runtime::settings::common::LogSettings;

/// mimalloc, as in every service binary: the system allocator's malloc and
/// free were 9 % of the embedded system's CPU at 3× its capacity (the
/// overload sweep's profile); the load generator shares it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// ShopEasy in one process: the gateway (:8080), product (:8081), order
/// (:8082) and inventory (gRPC :50051) services, their admin listeners
/// (:9080–:9083), SQLite databases under --data-dir, in-process caches, a
/// fault proxy on every service-to-service edge (gateway-product,
/// gateway-order, order-inventory, order-product) and the
/// Toxiproxy-compatible API on :8474 to break them, and a demo issuer
/// (:8085, loopback) whose tokens order and the gateway verify; customers sign
/// in with `POST /api/session` through the gateway or `shopeasy token NAME`.
/// Stops cleanly on Ctrl-C or SIGTERM.
#[derive(Debug, Parser)]
#[command(
    name = "shopeasy",
    version,
    after_help = "Settings: every service's keys, from --config FILE and the environment \
(key a.b.c is A__B__C; top-level keys plain, e.g. ADMIN_TOKEN). A key one of the four \
services knows reaches it; an unknown key is an error. Every key is listed in \
deploy/SETTINGS.md.\n\nExamples:\n  shopeasy                          run everything\n  \
shopeasy --data-dir /tmp/shop     keep the databases elsewhere\n  \
TOKEN=$(shopeasy token alice)     sign in as the demo customer alice\n  \
shopeasy load --rate 200 --duration 30 --p99 250   load a running system (as 1000 signed-in demo customers)\n  \
shopeasy load --sweep --inventory http://127.0.0.1:50051   the overload curve (bench/overload.sh)\n  \
shopeasy demo breaker             the lesson's circuit breaker, live (shopeasy demo --list)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Folder of the SQLite databases and the demo issuer's signing key
    /// (kept across restarts).
    #[arg(long, value_name = "DIR", default_value = ".shopeasy", global = true)]
    data_dir: PathBuf,
    /// Settings file (TOML, YAML or JSON) read by every service.
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// Validate every service's settings and exit.
    #[arg(long)]
    check_config: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send an open-loop load to a running ShopEasy and print a summary
    /// (exit 1 when a gate fails).
    Load(Box<LoadArgs>),
    /// Replay a pattern of the lesson (breaker, retry, jitter, …) against
    /// the live system and print its timeline (exit 1 when the measured
    /// outcome is not the lesson's); `shopeasy demo --list` lists them.
    Demo(shopeasy::demo::cli::DemoArgs),
    /// Print a demo access token for CUSTOMER (only the token, so
    /// `TOKEN=$(shopeasy token alice)` works), signed with the demo
    /// issuer's key in --data-dir (created when absent). The system need
    /// not be running; a running one with the same --data-dir accepts it.
    Token {
        /// The demo customer: 1 to 32 characters of a-z, 0-9, _ and -.
        customer: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The load generator runs on one thread: it shares the machine with the
    // system it measures, and on a multi-threaded runtime a third of its CPU
    // went to its workers waking and parking each other (futex, context
    // switches) — CPU taken from the system under test. One thread sends
    // tens of thousands of requests a second, and its pacing and every
    // latency are measured the same way.
    let runtime = match cli.command {
        Some(Command::Load(_)) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Runtime::new(),
    };
    let Ok(runtime) = runtime else {
        eprintln!("shopeasy: cannot start the async runtime");
        return ExitCode::FAILURE;
    };
    match cli.command {
        Some(Command::Load(args)) => runtime.block_on(run_load(&args)),
        Some(Command::Demo(args)) => runtime.block_on(shopeasy::demo::cli::main(&args)),
        Some(Command::Token { customer }) => token(&cli.data_dir, cli.config, &customer),
        None => runtime.block_on(run_system(cli)),
    }
}

async fn run_system(cli: Cli) -> ExitCode {
    let mut options = Options::new(&cli.data_dir);
    options.config = cli.config;
    if cli.check_config {
        return match shopeasy::system::check_settings(&options) {
            Ok(()) => {
                println!("settings are valid for all four services");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("shopeasy: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    // One trace exporter for the process (the four services and the fault
    // proxies): OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set, as for a
    // service, so a trace viewer shows the attempts beside the
    // `toxic_window` spans of the faults that caused them.
    let endpoint = options
        .env
        .iter()
        .find(|(key, _)| key == "OTEL_EXPORTER_OTLP_ENDPOINT")
        .map_or("", |(_, value)| value.as_str());
    // The console's "recent order's path" reads the spans kept in memory.
    let spans = vec![shopeasy::console_traces::processor()];
    let _telemetry = match shopeasy_runtime::telemetry::init_with_spans(
        "shopeasy",
        &LogSettings::default(),
        endpoint,
        spans,
    ) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("shopeasy: telemetry: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    // Four services and the fault proxy share this process's descriptors.
    shopeasy_runtime::lifecycle::raise_and_log_fd_limit();
    let stop = match shopeasy_runtime::lifecycle::shutdown_signal() {
        Ok(stop) => stop,
        Err(e) => {
            eprintln!("shopeasy: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let system = match System::start(options).await {
        Ok(system) => system,
        Err(e) => {
            eprintln!("shopeasy: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", system.banner());
    match system.run_until(stop).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shopeasy: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `shopeasy token CUSTOMER`: exit 2 for a bad name (a usage error, like
/// clap's), 1 when the key or the settings are unusable.
fn token(data_dir: &std::path::Path, config: Option<PathBuf>, customer: &str) -> ExitCode {
    use shopeasy_identity::{DemoIssuer, demo::CustomerName};
    if let Err(e) = CustomerName::parse(customer) {
        eprintln!("shopeasy token: {customer:?}: {e}");
        return ExitCode::from(2);
    }
    let mut options = Options::new(data_dir);
    options.config = config;
    let issued = shopeasy::system::demo_issuer_config(&options)
        .and_then(|config| Ok(DemoIssuer::open(data_dir, config)?))
        .and_then(|issuer| Ok(issuer.issue(customer)?));
    match issued {
        Ok(token) => {
            println!("{}", token.access_token);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shopeasy token: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run_load(args: &LoadArgs) -> ExitCode {
    // An open-loop generator holds a connection per outstanding request.
    let _ = shopeasy_runtime::lifecycle::raise_fd_limit();
    if args.sweep.sweep {
        return match load::sweep::run(
            &args.target,
            &args.sweep,
            &args.sign_in,
            args.seed,
            args.quiet,
        )
        .await
        {
            Ok(sweep) => {
                println!("capacity {:.0}/s", sweep.capacity);
                for step in &sweep.steps {
                    println!("{}", load::sweep::row(step));
                }
                println!("csv {}\nsvg {}", sweep.csv.display(), sweep.svg.display());
                let gates = load::sweep::gates(&sweep);
                for gate in &gates {
                    let verdict = match gate.passed {
                        Some(true) => "gate ok",
                        Some(false) => "GATE FAILED",
                        None => "gate not judged",
                    };
                    println!("{verdict}: {}", gate.text);
                }
                if gates.iter().any(|g| g.passed == Some(false)) {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => {
                eprintln!("shopeasy load --sweep: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match load::run(args).await {
        Ok(summary) => {
            print!("{summary}");
            let failed = summary.failed_gates(args);
            for gate in &failed {
                println!("GATE FAILED: {gate}");
            }
            if failed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("shopeasy load: {e:#}");
            ExitCode::FAILURE
        }
    }
}
