//! `shopeasy`: run the whole system, or load it.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use shopeasy::load::{self, LoadArgs};

/// ShopEasy: the whole system in one process, or a load generator.
#[derive(Debug, Parser)]
#[command(name = "shopeasy", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send an open-loop load to a running ShopEasy and print a summary.
    Load(LoadArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Load(args)) => run_load(&args),
        None => {
            eprintln!("the embedded system is not wired yet");
            ExitCode::FAILURE
        }
    }
}

fn run_load(args: &LoadArgs) -> ExitCode {
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        eprintln!("cannot start the async runtime");
        return ExitCode::FAILURE;
    };
    match runtime.block_on(load::run(args)) {
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
