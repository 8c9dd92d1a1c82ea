//! `shopeasy-identity`: the demo issuer as its own process (see
//! `shopeasy_identity::server`). A demo issuer, not for production.

use clap::Parser;
use shopeasy_runtime::settings::ConfigArgs;

/// ShopEasy's demo issuer: signs demo customers' access tokens and serves
/// its JWKS. For demos only; production uses a real OIDC provider.
#[derive(Debug, Parser)]
#[command(name = "shopeasy-identity", version, about)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    shopeasy_runtime::lifecycle::run::<shopeasy_identity::server::App>(&cli.config)
}
