//! `shopeasy-gateway`: the public entrance (see the library docs).

use clap::Parser;
use shopeasy_runtime::settings::ConfigArgs;

/// The ShopEasy gateway.
#[derive(Debug, Parser)]
#[command(name = "shopeasy-gateway", version, about)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    shopeasy_runtime::lifecycle::run::<shopeasy_gateway::App>(&cli.config)
}
