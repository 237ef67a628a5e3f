//! `cosched-bench skew`: the daemon's own skew record (first to last working process of a job
//! running after a thaw), for each freezer, two 2-process compute jobs on the slot clock.

use crate::daemon::{Daemon, DaemonSpec};
use crate::figures::{command_line, Provenance};
use crate::workloads;
use anyhow::Result;
use cosched_proto::api::StatsView;
use std::time::Duration;

#[derive(clap::Args)]
pub struct SkewArgs {
    /// Slot length in milliseconds (short slots give many samples)
    #[arg(long, default_value_t = 20)]
    quantum_ms: u64,
    /// How long each freezer runs, in seconds
    #[arg(long, default_value_t = 8)]
    seconds: u64,
    /// Freezers to compare (v2, v1, signals); the ones this machine lacks are skipped
    #[arg(long, value_delimiter = ',', default_value = "v2,v1,signals")]
    freezers: Vec<String>,
    /// Also write the figures as JSON here
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

pub fn run(args: SkewArgs) -> Result<()> {
    workloads::build()?;
    println!(
        "skew: two 2-process jobs of `burn` (compute bound) gang-scheduled at {} ms, {} s per freezer",
        args.quantum_ms, args.seconds
    );
    println!(
        "{:<9} {:>8} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10} {:>12}",
        "freezer",
        "switches",
        "switch p50",
        "switch p99",
        "skews",
        "skew p50",
        "skew p99",
        "skew max",
        "lateness p99"
    );
    let mut rows = Vec::new();
    for freezer in &args.freezers {
        let spec = DaemonSpec {
            mode: "gang".into(),
            quantum_ms: args.quantum_ms,
            freezer: Some(freezer.clone()),
            extra: Vec::new(),
        };
        let daemon = match Daemon::start(&spec) {
            Ok(daemon) => daemon,
            Err(error) => {
                println!("{freezer:<9} skipped: {}", first_line(&error.to_string()));
                continue;
            }
        };
        let stats = measure(&daemon, args.seconds)?;
        daemon.stop()?;
        println!(
            "{:<9} {:>8} {:>8}µs {:>8}µs {:>8} {:>8}µs {:>8}µs {:>8}µs {:>10}µs",
            freezer,
            stats.switch_us.count,
            stats.switch_us.p50,
            stats.switch_us.p99,
            stats.skew_us.count,
            stats.skew_us.p50,
            stats.skew_us.p99,
            stats.skew_us.max,
            stats.lateness_us.p99
        );
        let met = stats.skew_us.count > 0 && stats.skew_us.p99 < 200;
        rows.push(serde_json::json!({
            "freezer": freezer, "quantum_ms": args.quantum_ms, "stats": stats,
            "skew_p99_under_200us": met,
        }));
    }
    println!("target: skew p99 under 200 µs (AP/Linux reported 10 ms ± 5 ms)");
    if let Some(path) = args.json {
        let report = serde_json::json!({
            "provenance": Provenance::now(command_line("bench/skew")),
            "rows": rows,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs two long compute jobs for `seconds` and returns the daemon's statistics.
fn measure(daemon: &Daemon, seconds: u64) -> Result<StatsView> {
    let output = daemon.dir().join("jobs.out");
    workloads::submit_two_endless_gangs(daemon, &output)?;
    std::thread::sleep(Duration::from_secs(seconds));
    daemon.stats()
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}
