//! `cosched-bench overhead`: what gang scheduling costs compute-bound jobs. Two 2-process jobs
//! of fixed work, gang-scheduled together at each quantum, against the same two jobs run back
//! to back under the daemon (each alone on the machine, so nothing switches) and started
//! together under plain Linux (no daemon), in rotating order in every round.

use crate::daemon::{Daemon, DaemonSpec};
use crate::figures::median;
use crate::workloads;
use anyhow::{bail, Context, Result};
use cosched_proto::api::JobView;
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

/// One configuration: the two jobs one after the other, together without cosched, or
/// gang-scheduled together at a quantum (milliseconds).
#[derive(Clone, Copy, PartialEq)]
enum Case {
    BackToBack,
    PlainLinux,
    Gang(u64),
}

impl Case {
    fn quantum_ms(self) -> Option<u64> {
        match self {
            Case::Gang(q) => Some(q),
            _ => None,
        }
    }
}

pub fn run(args: OverheadArgs) -> Result<()> {
    workloads::build()?;
    let argv: Vec<String> = vec![
        workloads::program("burn"),
        "-t".into(),
        "2".into(),
        "-n".into(),
        args.iterations.to_string(),
    ];
    let mut cases = vec![Case::BackToBack, Case::PlainLinux];
    cases.extend(args.quanta.iter().map(|&q| Case::Gang(q)));
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
        cosched_os::usable_cpus(),
        args.rounds
    );
    println!(
        "{:<14} {:>10} {:>10} {:>14} {:>14}",
        "case", "seconds", "switches", "vs back2back", "vs plain Linux"
    );
    // The ratio within each round, then the median of the ratios.
    let ratio_to = |i: usize, base: usize| {
        let ratios: Vec<f64> = seconds[i]
            .iter()
            .zip(&seconds[base])
            .map(|(here, there)| here / there)
            .collect();
        median(&ratios).unwrap_or(f64::NAN)
    };
    let mut rows = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let (overhead, vs_plain) = (ratio_to(i, 0), ratio_to(i, 1));
        let took = median(&seconds[i]).unwrap_or(f64::NAN);
        let switched = median(&switches[i]).unwrap_or(0.0);
        println!(
            "{:<14} {:>10.3} {:>10.0} {:>13.2}% {:>13.2}%",
            label(*case),
            took,
            switched,
            (overhead - 1.0) * 100.0,
            (vs_plain - 1.0) * 100.0
        );
        rows.push(serde_json::json!({
            "case": label(*case), "quantum_ms": case.quantum_ms(), "seconds": seconds[i],
            "median_s": took, "overhead_ratio": overhead, "plain_linux_ratio": vs_plain,
            "switches": switched,
        }));
    }
    println!(
        "targets: under 0.5 % at 100 ms, under 2 % at 20 ms against back to back (SCore-D: under \
         10 % at 40 ms); within 1 % of plain Linux at 100 ms"
    );
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&rows)? + "\n")?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn label(case: Case) -> String {
    match case {
        Case::BackToBack => "back to back".into(),
        Case::PlainLinux => "plain Linux".into(),
        Case::Gang(q) => format!("gang {q} ms"),
    }
}

/// Seconds the two jobs took (sum of their times alone, or the makespan together) and how
/// many switches the daemon made.
fn measure(case: Case, argv: &[String]) -> Result<(f64, u64)> {
    let quantum_ms = match case {
        Case::PlainLinux => return Ok((together_without_cosched(argv)?, 0)),
        Case::BackToBack => 100,
        Case::Gang(q) => q,
    };
    let daemon = Daemon::start(&DaemonSpec {
        mode: "gang".into(),
        quantum_ms,
        freezer: None,
        extra: Vec::new(),
    })?;
    let output = daemon.dir().join("jobs.out");
    let patience = Duration::from_secs(600);
    let seconds = if case == Case::BackToBack {
        let mut total = 0.0;
        for _ in 0..2 {
            let id = daemon.submit(2, &output, argv)?;
            total += span(&daemon.wait_all(&[id], patience)?);
        }
        total
    } else {
        let ids = [
            daemon.submit(2, &output, argv)?,
            daemon.submit(2, &output, argv)?,
        ];
        span(&daemon.wait_all(&ids, patience)?)
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

/// Both jobs started at once as plain children (what Linux does with them unaided): seconds
/// until the later one ended.
fn together_without_cosched(argv: &[String]) -> Result<f64> {
    let start = std::time::Instant::now();
    let mut children = Vec::new();
    for _ in 0..2 {
        let child = cosched_cgroups::die_with_parent(&mut std::process::Command::new(&argv[0]))
            .args(&argv[1..])
            .stdout(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", argv[0]))?;
        children.push(child);
    }
    for mut child in children {
        let status = child.wait()?;
        if !status.success() {
            bail!("{} failed under plain Linux ({status})", argv[0]);
        }
    }
    Ok(start.elapsed().as_secs_f64())
}
