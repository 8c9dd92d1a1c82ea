//! `shopeasy-faults`: the fault proxy on its own, serving the
//! Toxiproxy-compatible API (default 127.0.0.1:8474).

use clap::Parser;

fn main() -> std::process::ExitCode {
    shopeasy_faults::cli::run(&shopeasy_faults::cli::Cli::parse())
}
