//! `shopeasy-gateway`: the public entrance (see the library docs).

use clap::Parser;
use shopeasy_runtime::settings::ConfigArgs;

/// mimalloc instead of the system allocator: every proxied request makes a
/// few dozen small allocations (headers, bodies, hyper's buffers), and
/// glibc's malloc/free cost about a tenth of the gateway's CPU under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
