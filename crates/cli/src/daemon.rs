//! `cosched daemon` (and `--check`), and the hidden `cosched supervise` the daemon starts per job.

use anyhow::{bail, Context, Result};
use clap::Args;
use cosched_agent::Mode;
use cosched_cgroups::Freezer;
use cosched_daemon::{check, DaemonConfig, OnStop};
use std::path::PathBuf;

pub const DEFAULT_SOCKET: &str = "/run/cosched/cosched.sock";

/// Run the scheduler daemon (API server, job store, scheduler and agent in one process).
#[derive(Args)]
#[command(after_help = "Examples:\n  \
  cosched daemon --check                      what this machine offers, which actuator\n  \
  cosched daemon                              gang mode, 100 ms slots, /var/lib/cosched\n  \
  cosched daemon --mode moderate --quantum-ms 50\n  \
  cosched daemon --state-dir /var/lib/cosched-test --socket /run/cosched-test.sock\n\n\
The state directory holds the job store and what supervisors keep; it must be owned by root \
and writable by nobody else, nor may any directory above it be (a sticky /tmp is fine as a \
parent, a directory another user made there is not): the daemon refuses one that is not. \
Modes: gang freezes the jobs outside the running slice; moderate gives the running slice all \
the CPU weight and the others almost none; implicit only places jobs (space sharing) and tells \
their MPI and OpenMP libraries to spin briefly and then block; local does nothing (plain Linux, \
the baseline). SIGTERM or SIGINT stops the daemon cleanly: every job is thawed and left \
running (or cancelled, with --on-stop cancel); a restarted daemon takes them back. Must run as \
root (cgroups, real-time priority, running jobs as their submitters).")]
pub struct DaemonArgs {
    /// Report what the machine offers (freezers, cpuset, cpu weight, real-time priority) and
    /// which actuator would be used, then exit (non-zero if none can be used)
    #[arg(long)]
    check: bool,
    /// With --check: print the report as JSON
    #[arg(long, requires = "check")]
    json: bool,
    /// Where the job store (jobs.sqlite) and the supervisors' files live
    #[arg(long, default_value = "/var/lib/cosched", value_name = "DIR")]
    state_dir: PathBuf,
    /// The API socket
    #[arg(long, env = "COSCHED_SOCKET", default_value = DEFAULT_SOCKET, value_name = "PATH")]
    socket: PathBuf,
    /// Slot length: from 10 ms to 10 minutes
    #[arg(long, default_value_t = 100, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(10..=600_000))]
    quantum_ms: u64,
    /// gang, moderate, implicit or local
    #[arg(long, default_value = "gang")]
    mode: Mode,
    /// Most time slices (multiprogramming level) in gang and moderate modes
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    mpl: u32,
    /// Processors to schedule [default: every CPU this process may use]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    procs: Option<u32>,
    /// A job that uses no CPU in its own slots for this long leaves the rotation until it
    /// computes again (0: never)
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    idle_after: f64,
    /// An interactive job runs in every slot, ahead of batch jobs on its processors, for its
    /// first SECONDS (a quick answer), then time-shares in a slice of its own (0: at once)
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    interactive_preempt: f64,
    /// What a clean stop does to the jobs: leave them running unscheduled, or cancel them
    #[arg(long, default_value = "leave", value_parser = ["leave", "cancel"])]
    on_stop: String,
    /// Name of the cgroup (in each hierarchy) under which the jobs' cgroups are made
    #[arg(long, default_value = "cosched", value_name = "NAME")]
    cgroup_parent: String,
    /// Force a freezer instead of the best available: v2, v1 or signals
    #[arg(long, value_parser = ["v2", "v1", "signals"])]
    freezer: Option<String>,
    /// Ended jobs kept in memory for `ps --all` (every record stays in the store)
    #[arg(long, default_value_t = 1000, value_name = "N")]
    keep_ended: usize,
}

pub fn run(args: DaemonArgs) -> Result<()> {
    if args.check {
        return report(args.json);
    }
    for (flag, value) in [
        ("--idle-after", args.idle_after),
        ("--interactive-preempt", args.interactive_preempt),
    ] {
        if !(value.is_finite() && value >= 0.0) {
            bail!("{flag} must be a number of seconds, 0 or more (got {value})");
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the daemon must run as root (it makes cgroups and runs jobs as their submitters)");
    }
    let config = DaemonConfig {
        state_dir: args.state_dir,
        socket: args.socket,
        quantum: args.quantum_ms as i64 * 1_000,
        mode: args.mode,
        mpl: args.mpl,
        procs: args.procs,
        idle_after: (args.idle_after > 0.0).then_some((args.idle_after * 1e6) as i64),
        interactive_preempt: (args.interactive_preempt > 0.0)
            .then_some((args.interactive_preempt * 1e6) as i64),
        on_stop: if args.on_stop == "cancel" {
            OnStop::Cancel
        } else {
            OnStop::Leave
        },
        cgroup_parent: args.cgroup_parent,
        freezer: args.freezer.map(|f| match f.as_str() {
            "v2" => Freezer::V2,
            "v1" => Freezer::V1,
            _ => Freezer::Signals,
        }),
        supervisor_exe: std::env::current_exe().context("finding this program for supervisors")?,
        keep_ended: args.keep_ended,
    };
    cosched_daemon::serve(config, |banner| eprintln!("{banner}"))?;
    Ok(())
}

fn report(json: bool) -> Result<()> {
    let report = check::check();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for f in &report.features {
            println!(
                "{:<20} {:<4} {}",
                f.name,
                if f.available { "yes" } else { "no" },
                f.detail
            );
        }
        println!("{:<20}      {}", "processors", report.cpus);
        match &report.actuator {
            Ok(description) => println!("{:<20}      {description}", "actuator"),
            Err(why) => println!("{:<20}      none: {why}", "actuator"),
        }
    }
    if !report.usable() {
        bail!("this machine cannot run the daemon (see above)");
    }
    Ok(())
}

/// Internal: the per-job supervisor, started by the daemon (its spec and connections are
/// inherited descriptors).
pub fn supervise() -> Result<()> {
    cosched_agent::supervisor::supervise()?;
    Ok(())
}
