//! `shopeasy-order`: the order service binary (all of it lives in the
//! library; see `shopeasy_order`).

use clap::Parser;
use shopeasy_runtime::settings::ConfigArgs;

/// mimalloc, as in the gateway: the system allocator's malloc/free cost a
/// tenth of a service's CPU under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// ShopEasy's order service.
#[derive(Debug, Parser)]
#[command(name = "shopeasy-order", version, about)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    shopeasy_runtime::lifecycle::run::<shopeasy_order::App>(&cli.config)
}
