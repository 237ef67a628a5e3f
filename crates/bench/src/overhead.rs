//! `cosched-bench overhead`: what gang scheduling costs compute-bound jobs. Two 2-process jobs
//! of fixed work, gang-scheduled together at each quantum, against the same two jobs run back
//! to back (each alone on the machine, so nothing switches), alternating in every round.

use crate::daemon::{Daemon, DaemonSpec};
use crate::figures::median;
use crate::workloads;
use anyhow::Result;
use cosched_daemon::protocol::JobView;
use std::time::Duration;

#[derive(clap::Args)]
pub struct OverheadArgs {
    /// Quanta to measure, in milliseconds
    #[arg(long, value_delimiter = ',', default_value = "10,20,50,100,200")]
    quanta: Vec<u64>,
    /// Rounds (each runs back to back once and every quantum once; figures are medians)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// Work of each process (`burn -n`; 8000 is about 3 s here)
    #[arg(long, default_value_t = 8000)]
    iterations: u64,
    /// Also write the figures as JSON here
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// One configuration: back to back (`None`) or gang at a quantum.
type Case = Option<u64>;

pub fn run(args: OverheadArgs) -> Result<()> {
    workloads::build()?;
    let argv: Vec<String> = vec![
        workloads::program("burn"),
        "-t".into(),
        "2".into(),
        "-n".into(),
        args.iterations.to_string(),
    ];
    let mut cases: Vec<Case> = vec![None];
    cases.extend(args.quanta.iter().map(|&q| Some(q)));
    // seconds[case][round]
    let mut seconds = vec![Vec::new(); cases.len()];
    let mut switches = vec![Vec::new(); cases.len()];
    for round in 0..usize::from(args.rounds) {
        // Rotate the order each round, so drift in the machine's speed favours no case.
        for k in 0..cases.len() {
            let i = (k + round) % cases.len();
            let (took, switched) = measure(cases[i], &argv)?;
            eprintln!(
                "round {}/{}: {} {:.3} s",
                round + 1,
                args.rounds,
                label(cases[i]),
                took
            );
            seconds[i].push(took);
            switches[i].push(switched as f64);
        }
    }
    println!(
        "overhead: two 2-process `burn -n {}` jobs on {} CPUs; medians of {} rounds",
        args.iterations,
        cosched_daemon::usable_cpus(),
        args.rounds
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10}",
        "case", "seconds", "switches", "overhead"
    );
    let mut rows = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        // The ratio within each round, then the median of the ratios.
        let ratios: Vec<f64> = seconds[i]
            .iter()
            .zip(&seconds[0])
            .map(|(gang, alone)| gang / alone)
            .collect();
        let ratio = median(&ratios).unwrap_or(f64::NAN);
        let took = median(&seconds[i]).unwrap_or(f64::NAN);
        let switched = median(&switches[i]).unwrap_or(0.0);
        println!(
            "{:<14} {:>10.3} {:>10.0} {:>9.2}%",
            label(*case),
            took,
            switched,
            (ratio - 1.0) * 100.0
        );
        rows.push(serde_json::json!({
            "case": label(*case), "quantum_ms": case, "seconds": seconds[i],
            "median_s": took, "overhead_ratio": ratio, "switches": switched,
        }));
    }
    println!("targets: under 0.5 % at 100 ms, under 2 % at 20 ms (SCore-D: under 10 % at 40 ms)");
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&rows)? + "\n")?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn label(case: Case) -> String {
    match case {
        None => "back to back".into(),
        Some(q) => format!("gang {q} ms"),
    }
}

/// Seconds the two jobs took (sum of their times alone, or the makespan together) and how
/// many switches the daemon made.
fn measure(case: Case, argv: &[String]) -> Result<(f64, u64)> {
    let spec = DaemonSpec {
        mode: "gang".into(),
        quantum_ms: case.unwrap_or(100),
        freezer: None,
    };
    let daemon = Daemon::start(&spec)?;
    let output = daemon.dir().join("jobs.out");
    let patience = Duration::from_secs(600);
    let seconds = match case {
        None => {
            let mut total = 0.0;
            for _ in 0..2 {
                let id = daemon.submit(2, &output, argv)?;
                total += span(&daemon.wait_all(&[id], patience)?);
            }
            total
        }
        Some(_) => {
            let ids = [
                daemon.submit(2, &output, argv)?,
                daemon.submit(2, &output, argv)?,
            ];
            span(&daemon.wait_all(&ids, patience)?)
        }
    };
    let switched = daemon.stats()?.switch_us.count;
    daemon.stop()?;
    Ok((seconds, switched))
}

/// From the first job's start to the last one's end, in seconds.
fn span(jobs: &[JobView]) -> f64 {
    let start = jobs.iter().filter_map(|j| j.started_us).min().unwrap_or(0);
    let end = jobs.iter().filter_map(|j| j.ended_us).max().unwrap_or(0);
    (end - start) as f64 / 1e6
}
