//! `cosched`: the command line. Argument parsing and output only; the work is in the crates.
//!
//! Exit codes: 0 success, 1 the command failed (bad input file, bad option value, I/O),
//! 2 the command line itself is malformed (from the argument parser).

mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cosched",
    version,
    about = "Gang scheduler and coscheduler for parallel jobs on Linux",
    long_about = "cosched gives each parallel job its own processors where they fit (space \
sharing), opens time-shared slices where they do not (an Ousterhout matrix), and runs every \
process of a job at the same moments.\n\nThis build has the trace simulator; the daemon comes next."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Sim(sim::SimArgs),
    Generate(sim::GenerateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Generate(args) => sim::generate(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("cosched: {err:#}");
            ExitCode::FAILURE
        }
    }
}
