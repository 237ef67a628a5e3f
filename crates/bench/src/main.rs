//! `cosched-bench`: benchmark drivers that run real jobs through a real cosched daemon and
//! print figures and ratios (never pass/fail on speed). Needs root, as the daemon does.
//! Thin scripts in `bench/` build and call it.

mod bystander;
mod churn;
mod cluster;
mod compare;
mod control_plane;
mod daemon;
mod figures;
mod overhead;
mod skew;
mod steal;
mod stop;
mod workloads;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cosched-bench",
    version,
    about = "cosched's benchmarks: figures and ratios from real jobs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The slot clock while short jobs start and end beside two gangs, against the same gangs alone
    Churn(churn::ChurnArgs),
    /// Skew after a thaw (first to last working process running), per freezer
    Skew(skew::SkewArgs),
    /// Total time of compute-bound jobs gang-scheduled at several quanta vs back to back
    Overhead(overhead::OverheadArgs),
    /// Job mixes under plain Linux, cosched's modes and Slurm, and the seeds' experiments
    Compare(compare::CompareArgs),
    /// The cluster lab: cross-node skew at several clock offsets, MPI jobs across nodes
    Cluster(cluster::ClusterArgs),
    /// The control plane alone at 10 to 1,000 nodes: fan-out, etcd writes, controller CPU
    ControlPlane(control_plane::ControlPlaneArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Err(error) = stop::clean_up_on_stop() {
        eprintln!("cosched-bench: starting the thread that cleans up on a stop signal: {error}");
        return std::process::ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Churn(args) => churn::run(args),
        Command::Skew(args) => skew::run(args),
        Command::Overhead(args) => overhead::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::ControlPlane(args) => control_plane::run(args),
    };
    stop::unless_stopping();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cosched-bench: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
