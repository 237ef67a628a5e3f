//! `cosched-bench compare`: the same job mixes under plain Linux, cosched (gang and moderate
//! at several quanta, implicit) and Slurm's gang scheduling, side by side, repeated; the modes
//! case (each job its mode, and auto); then the seeds' experiments redone as named cases.
//! Prints Markdown, writes JSON and an SVG plot.

mod cases;
mod jobs;
mod report;
mod runners;

use anyhow::{bail, Result};
use runners::{Scheduler, Slurm};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct CompareArgs {
    /// The short mode (under 5 minutes): the fine-grain mix once under every scheduler
    #[arg(long)]
    quick: bool,
    /// Repetitions of every (scheduler, mix) pair (default: 1 quick, 3 full)
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    repeat: Option<u16>,
    /// Only these cases: mixes (fine, barrier, coarse, compute, spinbarrier, throughput), modes
    /// (a fine, a coarse and an I/O-bound job under each mode, per-job modes and auto),
    /// io-beside-gang (the I/O-bound job beside a computing gang, the jobs' time slice the
    /// daemon's and the kernel's) or seed experiments (seed004-spinbarrier, seed000-elongation,
    /// seed002-local-compile, seed001-two-of-three)
    #[arg(long, value_delimiter = ',')]
    case: Vec<String>,
    /// Only these schedulers: local, gang, moderate, implicit, slurm (gang and moderate at
    /// every quantum), or one quantum as gang-50, moderate-20; the modes case's own:
    /// gang-20+giveaway, per-job, auto; io-beside-gang's: gang-20+giveaway+kernel-slice
    /// (default: all; the mixes, modes, io-beside-gang and seed 002 follow it, the other seed
    /// cases use their own)
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    scheduler: Vec<String>,
    /// Leave Slurm out (it is installed and started otherwise)
    #[arg(long)]
    no_slurm: bool,
    /// Multiplies every job's work (1.0: a few seconds alone)
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Write the rows as JSON here (also written: the same name with .md and .svg)
    #[arg(long, default_value = "target/bench/compare.json")]
    json: PathBuf,
}

pub fn run(args: CompareArgs) -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("compare needs root (it runs the cosched daemon and Slurm)");
    }
    if !(0.01..=100.0).contains(&args.scale) {
        bail!("--scale must be between 0.01 and 100 (got {})", args.scale);
    }
    crate::workloads::build()?;
    let known = cases::names();
    if let Some(bad) = args.case.iter().find(|c| !known.contains(&c.as_str())) {
        bail!("unknown case '{bad}' (known: {})", known.join(", "));
    }
    let chosen: Vec<&str> = if !args.case.is_empty() {
        args.case.iter().map(String::as_str).collect()
    } else if args.quick {
        vec!["fine"]
    } else {
        known.clone()
    };
    let repeat = usize::from(args.repeat.unwrap_or(if args.quick { 1 } else { 3 }));
    let mut schedulers = vec![Scheduler::Local];
    for mode in ["gang", "moderate"] {
        for quantum_ms in [20, 50, 100] {
            schedulers.push(Scheduler::cosched(mode, quantum_ms));
        }
    }
    schedulers.push(Scheduler::Implicit);
    if !args.no_slurm {
        schedulers.push(Scheduler::Slurm);
    }
    let mut known: Vec<String> = Vec::new();
    for s in schedulers
        .iter()
        .chain(&cases::modes_schedulers(!args.no_slurm))
        .chain(&cases::io_beside_gang_schedulers())
    {
        for name in [s.name().to_string(), s.short_name()] {
            if !known.contains(&name) {
                known.push(name);
            }
        }
    }
    if let Some(bad) = args.scheduler.iter().find(|want| !known.contains(want)) {
        bail!(
            "unknown scheduler '{bad}' (known: {}{})",
            known.join(", "),
            if args.no_slurm {
                "; slurm is left out by --no-slurm"
            } else {
                ""
            }
        );
    }
    let wanted = args.scheduler.clone();
    schedulers.retain(|s| wanted.is_empty() || wanted.iter().any(|want| s.is_named(want)));
    let slurm = if schedulers.contains(&Scheduler::Slurm) {
        eprintln!("starting Slurm (bench/slurm/slurm-local; installs it if needed)");
        Some(Slurm::start()?)
    } else {
        None
    };
    let work_dir = std::env::temp_dir().join(format!("cosched-compare-{}", std::process::id()));
    let context = cases::Context {
        schedulers,
        wanted,
        repeat,
        scale: args.scale,
        slurm: slurm.as_ref(),
        dir: work_dir.clone(),
    };
    let mut results = report::Results::default();
    // A case that fails is reported and the others still run: a long run keeps what it measured.
    let mut failed = Vec::new();
    for name in chosen {
        if let Err(error) = cases::run(name, &context, &mut results) {
            eprintln!("compare: case {name} failed: {error:#}");
            failed.push(name);
        }
    }
    let _ = std::fs::remove_dir_all(&work_dir);
    report::write(&results, &args.json, &report::header(args.quick, repeat))?;
    if !failed.is_empty() {
        bail!("{} case(s) failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}
