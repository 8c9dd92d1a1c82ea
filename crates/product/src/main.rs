//! `shopeasy-product`: the Product service binary (see the library docs).

use clap::Parser;
use shopeasy_runtime::settings::ConfigArgs;

/// mimalloc, as in the gateway: the system allocator's malloc/free cost a
/// tenth of a service's CPU under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The ShopEasy Product service.
#[derive(Debug, Parser)]
#[command(name = "shopeasy-product", version, about)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    shopeasy_runtime::lifecycle::run::<shopeasy_product::App>(&cli.config)
}
