//! `shopeasy-console`: the console on its own (full mode), reading the
//! admin listeners and the fault API named by its flags or environment.

use std::{net::SocketAddr, process::ExitCode};

use clap::Parser;
use shopeasy_console::{Console, ConsoleSettings, ServiceTarget};
use shopeasy_runtime::settings::{Secret, common::LogSettings};

/// The ShopEasy console: a live resilience dashboard with the fault
/// proxy's controls.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Where to serve the page (loopback unless --allow-remote).
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    /// Accept a non-loopback --listen and any Host header.
    #[arg(long, env = "CONSOLE_ALLOW_REMOTE")]
    allow_remote: bool,
    /// With --allow-remote, still answer only a loopback Host (a container
    /// listening on 0.0.0.0, published on the host's loopback).
    #[arg(long, env = "CONSOLE_LOOPBACK_HOST_ONLY")]
    loopback_host_only: bool,
    /// The admin listeners to read, as name=url, comma-separated.
    #[arg(
        long,
        env = "CONSOLE_SERVICES",
        value_delimiter = ',',
        default_value = "gateway=http://127.0.0.1:9080,product=http://127.0.0.1:9081,order=http://127.0.0.1:9082,inventory=http://127.0.0.1:9083"
    )]
    services: Vec<String>,
    /// The fault API.
    #[arg(long, env = "FAULTS_URL", default_value = "http://127.0.0.1:8474")]
    faults_url: String,
    /// The gateway, for the "buy one" button (empty: no button).
    #[arg(long, env = "GATEWAY_URL", default_value = "http://127.0.0.1:8080")]
    gateway_url: String,
    /// The admin token every change must carry (none: a read-only console).
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true, default_value = "")]
    admin_token: String,
    /// Also show each service's Postgres and Redis (full mode).
    #[arg(long, env = "CONSOLE_SHOW_STORES")]
    show_stores: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let _telemetry =
        shopeasy_runtime::telemetry::init("shopeasy-console", &LogSettings::default(), "");
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shopeasy-console: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let services = args
        .services
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(name, url)| ServiceTarget::new(name.trim(), url.trim()))
                .ok_or_else(|| anyhow::anyhow!("--services entry {s:?} is not name=url"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut settings =
        ConsoleSettings::new(services, args.faults_url, Secret::new(args.admin_token));
    settings.listen = args.listen;
    settings.allow_remote = args.allow_remote;
    settings.loopback_host_only = args.loopback_host_only;
    settings.show_stores = args.show_stores;
    settings.gateway_url = Some(args.gateway_url).filter(|u| !u.is_empty());
    let console = Console::bind(settings, None).await?;
    println!("ShopEasy console: http://{}", console.local_addr()?);
    let shutdown = shopeasy_runtime::lifecycle::shutdown_token()?;
    console.serve(shutdown).await?;
    Ok(())
}
