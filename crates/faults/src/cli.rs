//! The `shopeasy-faults` command line: serve the API, optionally populated
//! from a Toxiproxy config file, until SIGINT or SIGTERM.

use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    process::ExitCode,
};

use anyhow::Context;
use shopeasy_runtime::{lifecycle, settings::common::LogSettings, telemetry};

use crate::{Proxies, ProxyConfig, api, guard::Guard};

/// Command-line arguments.
#[derive(Debug, clap::Parser)]
#[command(
    name = "shopeasy-faults",
    version,
    about = "Fault-injecting TCP proxy with a Toxiproxy-compatible HTTP API"
)]
pub struct Cli {
    /// Address of the HTTP API.
    #[arg(long, env = "FAULTS_LISTEN", default_value = "127.0.0.1:8474")]
    pub listen: SocketAddr,
    /// A Toxiproxy config file (a JSON array of proxies) to create at start.
    #[arg(long, env = "FAULTS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Seed of every random choice (toxicity, jitter, slice sizes).
    #[arg(long, env = "FAULTS_SEED", default_value_t = 0)]
    pub seed: u64,
    /// An IP address (besides loopback) that proxies created through the
    /// API may listen on; repeat it, or comma-separate in the variable.
    /// For a proxy in its own container (compose: `0.0.0.0`, the
    /// container's own interfaces, reached on the compose network only).
    #[arg(long, env = "FAULTS_ALLOW_LISTEN", value_delimiter = ',')]
    pub allow_listen: Vec<IpAddr>,
    /// A `Host` name (besides localhost, 127.0.0.1 and `[::1]`) the API
    /// answers to, such as a compose service name; repeatable.
    #[arg(long, env = "FAULTS_ALLOW_HOST", value_delimiter = ',')]
    pub allow_host: Vec<String>,
    /// An OTLP/gRPC collector (for example `http://jaeger:4317`) to send
    /// traces to, as every service does; each fault window is a
    /// `toxic_window` span, so a trace viewer shows the faults beside the
    /// attempts they caused. Empty: no traces are sent.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", default_value = "")]
    pub otlp_endpoint: String,
}

impl Cli {
    /// The API's guard from `--allow-listen` and `--allow-host`.
    pub fn guard(&self) -> Guard {
        Guard {
            allow_hosts: self.allow_host.clone(),
            allow_listen: self.allow_listen.clone(),
        }
    }
}

/// Runs the binary: 0 after a clean stop, 1 when it cannot start.
pub fn run(cli: &Cli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shopeasy-faults: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let _telemetry = match telemetry::init(
            "shopeasy-faults",
            &LogSettings::default(),
            &cli.otlp_endpoint,
        ) {
            Ok(guard) => guard,
            Err(e) => {
                eprintln!("shopeasy-faults: telemetry: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        match serve(cli).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(
                    error = format!("{e:#}"),
                    "shopeasy-faults stopped with an error"
                );
                ExitCode::FAILURE
            }
        }
    })
}

async fn serve(cli: &Cli) -> anyhow::Result<()> {
    let shutdown = lifecycle::shutdown_token()?;
    let proxies = Proxies::with_seed(cli.seed);
    if let Some(path) = &cli.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let configs: Vec<ProxyConfig> = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a Toxiproxy config (a JSON array of proxies)",
                path.display()
            )
        })?;
        proxies.populate(configs).await?;
    }
    let listener = lifecycle::bind(cli.listen, "fault proxy API").await?;
    tracing::info!(listen = %cli.listen, seed = cli.seed, "fault proxy API listening");
    api::serve_with(listener, proxies.clone(), cli.guard(), shutdown).await?;
    proxies.shutdown().await;
    Ok(())
}
