//! `cosched-bench churn`: the slot clock while jobs start and end. Two 2-process compute jobs
//! take turns (gang mode); in the churn case a short 1-process job (`sh -c 'exit 7'`, as a
//! user's quick command) is submitted every `--every-ms` beside them. The steady case, the
//! same two jobs alone, runs in the same invocation: the figures are compared side by side.

use crate::daemon::{Daemon, DaemonSpec};
use crate::figures::{command_line, Provenance};
use crate::workloads;
use anyhow::{Context, Result};
use cosched_proto::api::{NodeView, StatsView};
use cosched_proto::{Histogram, HISTOGRAM_BOUNDS_US};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct ChurnArgs {
    /// Slot lengths to measure, in milliseconds
    #[arg(long, value_delimiter = ',', default_value = "100,20")]
    quantum_ms: Vec<u64>,
    /// How long each case runs, in seconds
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// A short job is submitted this often in the churn case (ms)
    #[arg(long, default_value_t = 500)]
    every_ms: u64,
    /// Rounds of each case (the figures of every round are printed; compare medians)
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Also write the figures as JSON here
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// The lateness bucket bound past which a boundary counts as "late" (µs).
const LATE_US: u64 = 1_000;

pub fn run(args: ChurnArgs) -> Result<()> {
    workloads::build()?;
    println!(
        "churn: two 2-process `burn` jobs gang-scheduled; churn adds `cosched run -n 1 -- sh -c 'exit 7'` every {} ms; {} s a case",
        args.every_ms, args.seconds
    );
    println!(
        "{:<6} {:>4} {:>5} {:>7} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>8} {:>8} {:>6}",
        "case",
        "ms",
        "round",
        "starts",
        "late p50",
        "late p99",
        "late max",
        ">1ms",
        "swtch p50",
        "swtch p99",
        "skew p50",
        "skew p99",
        "missed"
    );
    let mut rows = Vec::new();
    for round in 1..=args.rounds {
        for &quantum_ms in &args.quantum_ms {
            for churn in [false, true] {
                let row = measure(&args, quantum_ms, churn)?;
                let stats = &row.stats;
                println!(
                    "{:<6} {:>4} {:>5} {:>7} {:>7}µs {:>7}µs {:>7}µs {:>7} {:>7}µs {:>7}µs {:>6}µs {:>6}µs {:>6}",
                    if churn { "churn" } else { "steady" },
                    quantum_ms,
                    round,
                    row.short_jobs,
                    stats.lateness_us.p50,
                    stats.lateness_us.p99,
                    stats.lateness_us.max,
                    row.late_boundaries,
                    stats.switch_us.p50,
                    stats.switch_us.p99,
                    stats.skew_us.p50,
                    stats.skew_us.p99,
                    stats.missed_slots,
                );
                rows.push(serde_json::json!({
                    "case": if churn { "churn" } else { "steady" },
                    "quantum_ms": quantum_ms,
                    "round": round,
                    "seconds": args.seconds,
                    "every_ms": args.every_ms,
                    "short_jobs": row.short_jobs,
                    "boundaries": stats.lateness_us.count,
                    "late_over_1ms": row.late_boundaries,
                    "stats": stats,
                    "lateness_p99_under_100us": stats.lateness_us.p99 < 100,
                    "no_boundary_over_1ms": row.late_boundaries == 0,
                    "skew_p99_under_200us": stats.skew_us.p99 < 200,
                }));
            }
        }
    }
    println!(
        "targets: lateness p99 < 100 µs and no boundary later than 1 ms under churn; skew p99 < 200 µs"
    );
    if let Some(path) = args.json {
        let taken = Provenance::now(command_line("bench/slot-lateness --churn"));
        let report = serde_json::json!({ "provenance": taken, "rows": rows });
        std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

struct Row {
    stats: StatsView,
    short_jobs: usize,
    late_boundaries: u64,
}

fn measure(args: &ChurnArgs, quantum_ms: u64, churn: bool) -> Result<Row> {
    let daemon = Daemon::start(&DaemonSpec {
        mode: "gang".into(),
        quantum_ms,
        freezer: None,
    })?;
    let output = daemon.dir().join("jobs.out");
    workloads::submit_two_endless_gangs(&daemon, &output)?;
    let short: Vec<String> = ["sh", "-c", "exit 7"].map(String::from).into();
    let every = Duration::from_millis(args.every_ms.max(1));
    let began = Instant::now();
    let (mut ticks, mut short_jobs) = (0, 0);
    while began.elapsed() < Duration::from_secs(args.seconds) {
        ticks += 1;
        std::thread::sleep((began + every * ticks).saturating_duration_since(Instant::now()));
        if churn {
            daemon.submit(1, &output, &short)?;
            short_jobs += 1;
        }
    }
    let stats = daemon.stats()?;
    let late_boundaries = late_boundaries(&daemon)?;
    daemon.stop()?;
    Ok(Row {
        stats,
        short_jobs,
        late_boundaries,
    })
}

/// Boundaries later than [`LATE_US`], from the node's lateness histogram (every boundary since
/// the agent started, not only the samples kept).
fn late_boundaries(daemon: &Daemon) -> Result<u64> {
    let out = crate::daemon::succeeded(
        &mut daemon.command(&["nodes", "--json"]),
        &["nodes", "--json"],
    )?;
    let nodes: Vec<NodeView> =
        serde_json::from_slice(&out.stdout).context("cosched nodes --json")?;
    let within = HISTOGRAM_BOUNDS_US
        .iter()
        .position(|&bound| bound == LATE_US)
        .context("1 ms is a bucket bound")?;
    Ok(nodes
        .iter()
        .map(|n| over(&n.status.histograms.lateness, within))
        .sum())
}

/// Samples in the buckets after bucket `within` (bounds are upper bounds).
fn over(histogram: &Histogram, within: usize) -> u64 {
    histogram.buckets.iter().skip(within + 1).sum()
}
