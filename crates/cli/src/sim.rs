//! `cosched sim` and `cosched generate`.

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args};
use cosched_core::{Backfill, Machine, Micros, PartitionerKind, MICROS_PER_SEC};
use cosched_policy::Policy as SitePolicy;
use cosched_proto::Mode;
use cosched_sim::generate::{generate as generate_trace, generate_shaped, Shape, ShapeStats};
use cosched_sim::swf::{self, Trace};
use cosched_sim::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

const DEFAULT_GENERATED_PROCS: u32 = 128;

/// Replay a workload through the scheduler with a virtual clock and print its metrics.
#[derive(Args)]
#[command(
    group(ArgGroup::new("workload").required(true).args(["trace", "generate"])),
    after_help = "Examples:\n  \
  cosched sim --generate 10000 --seed 7 --procs 128 --policy gang --mpl 4\n  \
  cosched sim --trace ../shared/traces/CTC-SP2-1996-3.1-cln.swf.gz --policy easy --json\n  \
  cosched sim --trace log.swf --policy gang --mpl 8 --no-alternates --out jobs.swf\n  \
  cosched sim --trace log.swf --config /etc/cosched/cosched.toml   the daemon's policy\n  \
  cosched sim --trace log.swf --config mpl8.toml --compare /etc/cosched/cosched.toml\n  \
  cosched history --swf | cosched sim --trace - --config other.toml --compare current.toml\n\n\
With --config the replay runs the daemon's scheduler as the policy file sets it: the matrix \
with the file's MPL (moderate replays as gang; implicit is one slice, as the daemon runs it; \
local, plain Linux, has no model here), alternates, backfilling, repacking, partitioner and \
quantum. Flags given on the command line override the file (--policy fcfs or easy replaces \
the matrix by plain space sharing). Without --config the flags' own defaults apply (gang, MPL \
4, no backfilling). --compare replays the same jobs under a second policy file and prints \
both side by side with the difference (the first minus the second); scheduling flags are \
refused with it, since both sides come from files. The policy's time limits, per-user \
limits and memory keys are not replayed.\n\n\
Traces in the Standard Workload Format (plain or .gz) come from the Parallel Workloads Archive \
(https://www.cs.huji.ac.il/labs/parallel/workload/; take the cleaned logs). Records with run \
time <= 0, processors <= 0 or a negative submit time are dropped and counted, as are jobs \
that can never fit the machine."
)]
pub struct SimArgs {
    /// SWF trace to replay (plain or gzip; '-' reads standard input)
    #[arg(long, value_name = "PATH")]
    trace: Option<PathBuf>,
    /// Generate this many jobs from the Lublin-Feitelson model instead of reading a trace
    #[arg(long, value_name = "JOBS")]
    generate: Option<usize>,
    /// Seed of the generated workload (same seed, same jobs)
    #[arg(long, default_value_t = 1, requires = "generate")]
    seed: u64,
    /// Multiply the generated arrival rate (2 doubles the offered load)
    #[arg(
        long,
        default_value_t = 1.0,
        requires = "generate",
        value_name = "FACTOR"
    )]
    load_scale: f64,
    /// Processors of the machine [default: the trace's MaxProcs (else MaxNodes), or 128 when
    /// generating]
    #[arg(long, value_name = "N")]
    procs: Option<u32>,
    /// A policy file (as the daemon's): its scheduler section sets what the flags below
    /// leave unset
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Also replay under this policy file and print both side by side, with the difference
    #[arg(long, value_name = "FILE", conflicts_with_all = ["out", "gantt"])]
    compare: Option<PathBuf>,
    /// fcfs: space sharing, strict order; easy: space sharing with EASY backfilling;
    /// gang: time-shared slices (the Ousterhout matrix) [default: gang]
    #[arg(long, value_parser = parse_policy)]
    policy: Option<Policy>,
    /// Gang: most slices (multiprogramming level) [default: 4]
    #[arg(long, value_name = "K")]
    mpl: Option<u32>,
    /// Gang: slot length in seconds [default: 0.1]
    #[arg(long, value_name = "SECONDS")]
    quantum: Option<f64>,
    /// Gang: seconds lost at every slot switch while more than one slice exists [default: 0]
    #[arg(long, value_name = "SECONDS")]
    switch_overhead: Option<f64>,
    /// first-fit, best-fit, buddy (power-of-two blocks) or scatter (any free processors)
    /// [default: first-fit]
    #[arg(long, value_parser = parse_partitioner)]
    partitioner: Option<PartitionerKind>,
    /// Gang: do not run jobs in other slices where their processors are free
    #[arg(long)]
    no_alternates: bool,
    /// Gang: move jobs into earlier slices when a job leaves, to drop slices sooner
    #[arg(long)]
    repack: bool,
    /// Gang: EASY backfilling into slices (jobs behind a waiting head may start if, by their
    /// requested times stretched by the MPL, they cannot delay it)
    #[arg(long)]
    backfill: bool,
    /// Print one JSON object instead of the table
    #[arg(long)]
    json: bool,
    /// Write every replayed job as SWF with its actual wait and run time ('-' for stdout)
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Draw a Gantt chart: processors against time, a panel per slice, each job a bar for as
    /// long as it is in that slice (SVG, or PNG if the name ends in .png)
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    gantt: Option<PathBuf>,
    /// The chart's window, in seconds since the start of the log (SWF submit times) [default:
    /// 0:86400, the first day]
    #[arg(long, value_name = "FROM:TO", requires = "gantt", value_parser = parse_window)]
    gantt_window: Option<(Micros, Micros)>,
    /// Memory of each node (512M, 4G): jobs carry the log's requested memory (field 10, KB per
    /// processor) and those placed on a node must fit in its memory together [default: the
    /// policy file's memory.node_memory when it is a size and memory.fit is on]
    #[arg(long, value_name = "SIZE", value_parser = crate::client::parse_memory)]
    node_memory: Option<u64>,
    /// Processors per node, with node memory [default: the trace's MaxProcs / MaxNodes]
    #[arg(long, value_name = "N")]
    procs_per_node: Option<u32>,
    /// With node memory: admit jobs without the memory rule, only measuring what the nodes
    /// would have been asked to hold
    #[arg(long)]
    no_memory_fit: bool,
}

/// Longest chart window: a week; a longer one is mostly bars thinner than a pixel.
const MOST_CHART_SECONDS: i64 = 7 * 86_400;

fn parse_window(text: &str) -> Result<(Micros, Micros), String> {
    let (from, to) = text
        .split_once(':')
        .ok_or_else(|| format!("'{text}' is not FROM:TO (seconds, e.g. 3600:7200)"))?;
    let number = |s: &str| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0 && *v <= 1e12)
            .ok_or_else(|| format!("'{s}' is not a number of seconds"))
    };
    let (from, to) = (number(from)?, number(to)?);
    if to <= from {
        return Err(format!(
            "the window ends ({to} s) before it begins ({from} s)"
        ));
    }
    if to - from > MOST_CHART_SECONDS as f64 {
        return Err(format!(
            "the window is longer than a week ({MOST_CHART_SECONDS} s): choose a narrower one"
        ));
    }
    let micros = |v: f64| (v * MICROS_PER_SEC as f64).round() as Micros;
    Ok((micros(from), micros(to)))
}

/// Write a synthetic workload (Lublin-Feitelson model) as SWF.
#[derive(Args)]
pub struct GenerateArgs {
    /// How many jobs
    #[arg(long)]
    jobs: usize,
    /// Processors of the machine the workload is for
    #[arg(long, default_value_t = DEFAULT_GENERATED_PROCS)]
    procs: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Multiply the arrival rate (2 doubles the offered load)
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR")]
    load_scale: f64,
    /// published: the model as published (sizes grow with the machine); curie: shaped like
    /// CEA-Curie-2011 on 93,312 processors (median job 32 processors, bursts of submissions,
    /// offered load about 0.6 with --jobs 312826 --procs 93312)
    #[arg(long, default_value = "published", value_parser = ["published", "curie"])]
    shape: String,
    /// Print the workload's shape on stderr (median size, share of jobs of at most 32
    /// processors, busiest hour, offered load)
    #[arg(long)]
    stats: bool,
    /// Output file [default: stdout]
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    s.parse().map_err(|e: UnknownPolicy| e.to_string())
}

fn parse_partitioner(s: &str) -> Result<PartitionerKind, String> {
    let kind: PartitionerKind = s
        .parse()
        .map_err(|e: cosched_core::UnknownPartitioner| e.to_string())?;
    if kind.is_2d() {
        return Err(format!("'{s}' places submeshes; the simulator's machine is 1-D (use first-fit, best-fit, buddy or scatter)"));
    }
    Ok(kind)
}

fn seconds(name: &str, value: f64, allow_zero: bool) -> Result<i64> {
    let ok = value.is_finite() && (value > 0.0 || allow_zero && value == 0.0);
    if !ok || value > 1e9 {
        bail!(
            "{name} must be a {} number of seconds (got {value})",
            if allow_zero {
                "non-negative"
            } else {
                "positive"
            }
        );
    }
    let micros = (value * MICROS_PER_SEC as f64).round() as i64;
    if micros == 0 && !allow_zero {
        bail!("{name} must be at least 1 µs (got {value} s)");
    }
    Ok(micros)
}

/// The generator's bounds: ten million jobs is thirty times the archive's largest log (and
/// about 5 GB to replay: a million took 0.5 GB); a thousandfold slower arrival rate already
/// spaces jobs days apart, and each half hour of gap costs the generator a step.
const MOST_GENERATED_JOBS: usize = 10_000_000;
const LOAD_SCALES: std::ops::RangeInclusive<f64> = 0.001..=1000.0;

/// Checks what `cosched sim --generate` and `cosched generate` are given.
fn check_generation(jobs: usize, jobs_flag: &str, procs: u32, scale: f64) -> Result<()> {
    if !(1..=MOST_GENERATED_JOBS).contains(&jobs) {
        bail!("{jobs_flag} must be between 1 and {MOST_GENERATED_JOBS} jobs (got {jobs})");
    }
    if procs == 0 {
        bail!("--procs must be at least 1");
    }
    if !LOAD_SCALES.contains(&scale) {
        bail!(
            "--load-scale must be a factor between {} and {} (got {scale})",
            LOAD_SCALES.start(),
            LOAD_SCALES.end()
        );
    }
    Ok(())
}

fn open_out(path: &Path) -> Result<Box<dyn Write>> {
    if path == Path::new("-") {
        return Ok(Box::new(BufWriter::new(io::stdout().lock())));
    }
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(Box::new(BufWriter::new(file)))
}

#[derive(Serialize)]
struct Report {
    workload: String,
    dropped: u64,
    dropped_by_reason: Dropped,
    procs: u32,
    policy: String,
    mpl: Option<u32>,
    quantum_s: Option<f64>,
    partitioner: String,
    alternates: Option<bool>,
    repack: Option<bool>,
    backfill: Option<bool>,
    switch_overhead_s: Option<f64>,
    /// Values outside the SWF range kept as read (fields the replay does not use); only
    /// when there are some, so a clean log's row keeps the keys it always had.
    #[serde(skip_serializing_if = "swf::OutOfRangeTally::is_empty")]
    out_of_range: swf::OutOfRangeTally,
    #[serde(flatten)]
    metrics: Metrics,
    #[serde(flatten)]
    memory: Option<MemoryStats>,
    generations: u64,
    wall_seconds: f64,
}

/// The workload: the trace (a file, or standard input for '-') or generated jobs, and its name.
fn workload(args: &SimArgs) -> Result<(Trace, String)> {
    match (&args.trace, args.generate) {
        (Some(path), _) if path == Path::new("-") => Ok((
            swf::read_any(io::stdin().lock(), Path::new("stdin"))?,
            "stdin".into(),
        )),
        (Some(path), _) => Ok((swf::read_path(path)?, path.display().to_string())),
        (None, Some(jobs)) => {
            let procs = args.procs.unwrap_or(DEFAULT_GENERATED_PROCS);
            check_generation(jobs, "--generate", procs, args.load_scale)?;
            let trace = generate_trace(jobs, procs, args.seed, args.load_scale);
            let name = format!(
                "lublin-feitelson:{jobs}:seed={}:load-scale={}",
                args.seed, args.load_scale
            );
            Ok((trace, name))
        }
        (None, None) => unreachable!("clap requires --trace or --generate"),
    }
}

/// The machine: `--procs`, else the trace header's size, else its widest job.
fn machine_procs(args: &SimArgs, trace: &Trace, workload: &str) -> Result<u32> {
    Ok(match args.procs {
        Some(0) => bail!("--procs must be at least 1"),
        Some(n) => n,
        None => match trace.header.max_procs() {
            Some(n) if n > i64::from(Machine::MAX_PROCS) => bail!(
                "{workload}: the header declares {n} processors (MaxProcs, else MaxNodes), more than cosched models (at most {}): give --procs",
                Machine::MAX_PROCS
            ),
            Some(n) if n > 0 => n as u32,
            _ => trace
                .records
                .iter()
                .map(|r| r.procs())
                .max()
                .filter(|&n| n > 0)
                .context("the trace declares no MaxProcs or MaxNodes and no job has processors: give --procs")?
                .min(i64::from(u32::MAX)) as u32,
        },
    })
}

/// The daemon's scheduler under `policy`, replayed: the matrix with the policy's core
/// configuration and quantum, so `core_config` is the policy's (interactive preemption
/// aside: trace jobs are all batch). Implicit mode is one slice, as the daemon runs it.
fn from_policy(policy: &SitePolicy, origin: &Path, procs: u32) -> Result<SimConfig> {
    if policy.scheduler.mode == Mode::Local {
        bail!(
            "{}: scheduler.mode = \"local\" is plain Linux sharing, which the simulator does not model (it replays coscheduled slices): replay gang, moderate or implicit",
            origin.display()
        );
    }
    let core = policy.core_config();
    let mut config = SimConfig::new(procs, Policy::Gang);
    config.mpl = core.mpl;
    config.quantum = policy.quantum();
    config.partitioner = core.partitioner;
    config.alternates = core.alternates;
    config.repack = core.repack;
    config.backfill = core.backfill == Backfill::Easy;
    Ok(config)
}

/// The flags that shape the matrix, and whether each was given.
fn matrix_flags(args: &SimArgs) -> [(bool, &'static str); 5] {
    [
        (args.mpl.is_some(), "--mpl"),
        (args.quantum.is_some(), "--quantum"),
        (args.no_alternates, "--no-alternates"),
        (args.repack, "--repack"),
        (args.backfill, "--backfill"),
    ]
}

/// The replay's configuration: the policy file's (else the flags' defaults), then the flags
/// given; and the policy file read.
fn sim_config(args: &SimArgs, procs: u32) -> Result<(SimConfig, Option<SitePolicy>)> {
    let site = match &args.config {
        Some(path) => Some(SitePolicy::read(path)?),
        None => None,
    };
    let mut config = match (&site, &args.config) {
        (Some(site), Some(path)) => from_policy(site, path, procs)?,
        _ => SimConfig::new(procs, Policy::Gang),
    };
    config.policy = args.policy.unwrap_or(config.policy);
    let gang = config.policy == Policy::Gang;
    let overhead = (args.switch_overhead.is_some(), "--switch-overhead");
    for (given, flag) in matrix_flags(args).into_iter().chain([overhead]) {
        if given && !gang {
            bail!(
                "{flag} applies to --policy gang only (the policy is {})",
                config.policy
            );
        }
    }
    config.partitioner = args.partitioner.unwrap_or(config.partitioner);
    config.mpl = args.mpl.unwrap_or(config.mpl);
    if let Some(quantum) = args.quantum {
        config.quantum = seconds("--quantum", quantum, false)?;
    }
    if let Some(overhead) = args.switch_overhead {
        config.switch_overhead = seconds("--switch-overhead", overhead, true)?;
    }
    config.alternates &= !args.no_alternates;
    config.repack |= args.repack;
    config.backfill |= args.backfill;
    Ok((config, site))
}

pub fn run(args: SimArgs) -> Result<()> {
    let (trace, workload) = workload(&args)?;
    if !trace.out_of_range.is_empty() {
        note!("{workload}: {}", trace.out_of_range);
    }
    let procs = machine_procs(&args, &trace, &workload)?;
    if let Some(other) = &args.compare {
        return compare(&args, &trace, workload, procs, other);
    }
    let (mut config, site) = sim_config(&args, procs)?;
    config.chart = args
        .gantt
        .as_ref()
        .map(|_| args.gantt_window.unwrap_or((0, 86_400 * MICROS_PER_SEC)));
    config.node_memory = node_memory(&args, &trace.header, site.as_ref())?;
    if config.node_memory.is_none() {
        memory_flags_alone(&args)?;
    }

    let started = Instant::now();
    let (jobs, dropped) = jobs_from_trace(&trace);
    let mut bar = Progress::new(io::stderr().is_terminal());
    let outcome = simulate(&jobs, dropped, &config, &mut |done, total| {
        bar.show(done, total)
    })?;
    bar.finish();
    let wall_seconds = started.elapsed().as_secs_f64();
    let gang = config.policy == Policy::Gang;

    if let Some(path) = &args.out {
        let note = format!("replayed by cosched sim, policy {}, {procs} processors; wait and run time are the simulated ones", config.policy);
        let mut out = open_out(path)?;
        swf::write(&results_as_swf(&trace, &outcome.results, &note), &mut out)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let (Some(path), Some((from, to))) = (&args.gantt, config.chart) {
        let last_end = outcome.results.iter().map(|r| r.end).max().unwrap_or(to);
        let name = args
            .trace
            .as_ref()
            .filter(|p| *p != Path::new("-"))
            .and_then(|p| p.file_name())
            .map_or(workload.clone(), |n| n.to_string_lossy().into_owned());
        let title = format!(
            "{name}: {}{}, {procs} processors, {}",
            config.policy,
            if gang {
                format!(
                    " (MPL {}{})",
                    config.mpl,
                    if config.backfill { ", backfilling" } else { "" }
                )
            } else {
                String::new()
            },
            config.partitioner
        );
        let slices = outcome.bars.iter().map(|b| b.slice + 1).max().unwrap_or(1);
        let frame = gantt::Frame {
            title: &title,
            panels: (0..slices)
                .map(|slice| gantt::Panel {
                    name: format!("slice {slice}"),
                    rows: procs,
                    row_names: Vec::new(),
                })
                .collect(),
            from,
            to: to.min(last_end).max(from + 1),
            origin: 0,
            axis: "time since the start of the log; processors top to bottom",
        };
        // Labelled with the log's own job numbers (field 1), as the SWF output is.
        let bars: Vec<gantt::Bar> = outcome
            .bars
            .iter()
            .map(|bar| gantt::Bar {
                job: trace.records[bar.job as usize].fields[0] as u64,
                ..bar.clone()
            })
            .collect();
        crate::gantt::write_chart(path, &gantt::svg(&bars, &frame))?;
    }
    let report = Report::of(workload, &trace, &config, &outcome, wall_seconds);
    if args.out.as_deref() == Some(Path::new("-")) {
        // The SWF went to stdout: keep it clean and put the summary on stderr.
        print_report(&report, args.json, &mut io::stderr().lock())
    } else {
        print_report(&report, args.json, &mut io::stdout().lock())
    }
}

impl Report {
    fn of(
        workload: String,
        trace: &Trace,
        config: &SimConfig,
        outcome: &Outcome,
        wall_seconds: f64,
    ) -> Report {
        let gang = config.policy == Policy::Gang;
        let secs = |t: Micros| t as f64 / MICROS_PER_SEC as f64;
        Report {
            workload,
            dropped: outcome.dropped.total(),
            dropped_by_reason: outcome.dropped,
            procs: config.procs,
            policy: config.policy.to_string(),
            mpl: gang.then_some(config.mpl),
            quantum_s: gang.then_some(secs(config.quantum)),
            partitioner: config.partitioner.to_string(),
            alternates: gang.then_some(config.alternates),
            repack: gang.then_some(config.repack),
            backfill: gang.then_some(config.backfill),
            switch_overhead_s: gang.then_some(secs(config.switch_overhead)),
            out_of_range: trace.out_of_range.clone(),
            metrics: metrics(&outcome.results, config.procs),
            memory: outcome.memory.clone(),
            generations: outcome.generations,
            wall_seconds,
        }
    }

    /// The policy in words: "policy gang (MPL 4, quantum 0.1 s, alternates on), EASY
    /// backfilling, partitioner first-fit".
    fn setup(&self) -> String {
        let mut setup = format!("policy {}", self.policy);
        if let (Some(mpl), Some(q), Some(alt)) = (self.mpl, self.quantum_s, self.alternates) {
            setup += &format!(
                " (MPL {mpl}, quantum {q} s, alternates {})",
                if alt { "on" } else { "off" }
            );
            if self.repack == Some(true) {
                setup += ", repacking";
            }
            if self.backfill == Some(true) {
                setup += ", EASY backfilling";
            }
        }
        setup + &format!(", partitioner {}", self.partitioner)
    }
}

/// The figures `--compare` sets side by side: key, label, value.
fn compared(m: &Metrics) -> [(&'static str, &'static str, f64); 5] {
    [
        ("mean_wait_s", "mean wait (s)", m.mean_wait_s),
        ("median_wait_s", "median wait (s)", m.median_wait_s),
        (
            "mean_bounded_slowdown",
            "mean bounded slowdown",
            m.mean_bounded_slowdown,
        ),
        ("utilization", "utilization", m.utilization),
        ("makespan_s", "makespan (s)", m.makespan_s),
    ]
}

#[derive(Serialize)]
struct Comparison {
    /// `--config`'s (or the built-in defaults'), then `--compare`'s.
    reports: [Report; 2],
    /// The first minus the second, by figure.
    difference: BTreeMap<&'static str, f64>,
}

/// Replays the workload under `--config`'s policy and `other`'s, and prints both.
fn compare(
    args: &SimArgs,
    trace: &Trace,
    workload: String,
    procs: u32,
    other: &Path,
) -> Result<()> {
    let policy = [
        (args.policy.is_some(), "--policy"),
        (args.partitioner.is_some(), "--partitioner"),
    ];
    for (given, flag) in policy.into_iter().chain(matrix_flags(args)) {
        if given {
            bail!("{flag} with --compare: both policies come from files (--config and --compare), so put it in one");
        }
    }
    let first = match &args.config {
        Some(path) => (path.display().to_string(), SitePolicy::read(path)?),
        None => ("built-in defaults".into(), SitePolicy::default()),
    };
    let second = (other.display().to_string(), SitePolicy::read(other)?);
    let (jobs, dropped) = jobs_from_trace(trace);
    let mut reports = Vec::new();
    let mut names = Vec::new();
    let mut modelled = false;
    for (name, policy) in [first, second] {
        let mut config = from_policy(&policy, Path::new(&name), procs)?;
        config.node_memory = node_memory(args, &trace.header, Some(&policy))?;
        modelled |= config.node_memory.is_some();
        if let Some(overhead) = args.switch_overhead {
            config.switch_overhead = seconds("--switch-overhead", overhead, true)?;
        }
        let started = Instant::now();
        let outcome = simulate(&jobs, dropped, &config, &mut |_, _| ())?;
        let wall = started.elapsed().as_secs_f64();
        reports.push(Report::of(workload.clone(), trace, &config, &outcome, wall));
        names.push(name);
    }
    if !modelled {
        memory_flags_alone(args)?;
    }
    let [first, second]: [Report; 2] = reports.try_into().ok().expect("two policies replayed");
    let (a, b) = (compared(&first.metrics), compared(&second.metrics));
    let difference = a
        .iter()
        .zip(&b)
        .map(|(&(key, _, x), &(_, _, y))| (key, x - y))
        .collect();
    let mut out = io::stdout().lock();
    if args.json {
        let comparison = Comparison {
            reports: [first, second],
            difference,
        };
        serde_json::to_writer(&mut out, &comparison)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{workload} on {procs} processors: {} jobs replayed, {} dropped",
        first.metrics.jobs, first.dropped
    )?;
    for (name, report) in names.iter().zip([&first, &second]) {
        writeln!(out, "  {name}: {}", report.setup())?;
    }
    if first.metrics.jobs != second.metrics.jobs {
        // Memory-fit drops jobs larger than a node: the two columns cover different jobs.
        writeln!(
            out,
            "  note: {} replayed {} jobs and {} replayed {}: the figures cover different jobs",
            names[0], first.metrics.jobs, names[1], second.metrics.jobs
        )?;
    }
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0).max(12);
    writeln!(
        out,
        "  {:<22} {:>width$} {:>width$} {:>24}",
        "", names[0], names[1], "difference"
    )?;
    for (&(_, label, x), &(_, _, y)) in a.iter().zip(&b) {
        let relative = if y != 0.0 {
            format!(" ({:+.1} %)", (x - y) / y * 100.0)
        } else {
            String::new()
        };
        writeln!(
            out,
            "  {label:<22} {:>width$} {:>width$} {:>24}",
            figure(x),
            figure(y),
            format!("{}{relative}", signed(x - y)),
        )?;
    }
    Ok(())
}

/// A figure with as many decimals as its size needs.
fn figure(value: f64) -> String {
    if value.abs() < 10.0 {
        format!("{value:.3}")
    } else {
        format!("{value:.1}")
    }
}

fn signed(value: f64) -> String {
    match value >= 0.0 {
        true => format!("+{}", figure(value)),
        false => figure(value),
    }
}

fn print_report(report: &Report, json: bool, out: &mut dyn Write) -> Result<()> {
    if json {
        serde_json::to_writer(&mut *out, report)?;
        writeln!(out)?;
        return Ok(());
    }
    let m = &report.metrics;
    let d = &report.dropped_by_reason;
    writeln!(
        out,
        "{} on {} processors, {}",
        report.workload,
        report.procs,
        report.setup()
    )?;
    writeln!(out, "  jobs replayed            {}", m.jobs)?;
    writeln!(
        out,
        "  dropped                  {} (run time <= 0: {}, processors <= 0: {}, submit < 0: {}, never fits: {})",
        report.dropped, d.run_time_not_positive, d.procs_not_positive, d.submit_negative, d.never_fits
    )?;
    writeln!(out, "  utilization              {:.4}", m.utilization)?;
    writeln!(
        out,
        "  mean response            {:.1} s (median {:.1} s)",
        m.mean_response_s, m.median_response_s
    )?;
    writeln!(
        out,
        "  mean wait                {:.1} s (median {:.1} s)",
        m.mean_wait_s, m.median_wait_s
    )?;
    writeln!(out, "  mean slowdown            {:.2}", m.mean_slowdown)?;
    writeln!(
        out,
        "  mean bounded slowdown    {:.2} (tau 10 s; p95 {:.2})",
        m.mean_bounded_slowdown, m.p95_bounded_slowdown
    )?;
    writeln!(out, "  makespan                 {:.0} s", m.makespan_s)?;
    if let Some(memory) = &report.memory {
        print_memory(memory, out)?;
    }
    writeln!(out, "  plan generations         {}", report.generations)?;
    let rate = (m.jobs as f64 + report.dropped as f64) / report.wall_seconds.max(1e-9);
    writeln!(
        out,
        "  wall time                {:.3} s ({:.0} jobs/s)",
        report.wall_seconds, rate
    )?;
    Ok(())
}

/// `--procs-per-node` and `--no-memory-fit` shape nodes' memory: alone they are a mistake.
fn memory_flags_alone(args: &SimArgs) -> Result<()> {
    if args.procs_per_node.is_some() || args.no_memory_fit {
        bail!("--procs-per-node and --no-memory-fit shape the nodes' memory: give --node-memory (or a policy file whose memory.node_memory is a size)");
    }
    Ok(())
}

/// The nodes' memory, `--node-memory`'s or the policy's (`memory.node_memory` as a size,
/// with `memory.fit` on: `auto` names no size a log could have), on nodes of
/// `--procs-per-node` processors or as many as the header's MaxProcs / MaxNodes gives.
fn node_memory(
    args: &SimArgs,
    header: &swf::Header,
    policy: Option<&SitePolicy>,
) -> Result<Option<NodeMemory>> {
    // `auto` is the node's own size: a log's nodes have none to find.
    let from_policy = policy.and_then(|p| p.memory.node_size(None));
    let Some(bytes) = args.node_memory.or(from_policy) else {
        return Ok(None);
    };
    let from_header = || {
        let (procs, nodes) = (header.get_int("MaxProcs")?, header.get_int("MaxNodes")?);
        (nodes > 0 && procs % nodes == 0).then(|| u32::try_from(procs / nodes).ok())?
    };
    let procs_per_node = match args.procs_per_node.or_else(from_header) {
        Some(0) => bail!("--procs-per-node must be at least 1"),
        Some(n) => n,
        None => bail!("--node-memory needs nodes: give --procs-per-node (the trace's header gives no MaxProcs and MaxNodes to divide)"),
    };
    Ok(Some(NodeMemory {
        procs_per_node,
        bytes,
        fit: !args.no_memory_fit,
    }))
}

fn print_memory(m: &MemoryStats, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "  node memory              {} MiB on each node of {} processors, rule {}",
        m.node_memory_bytes >> 20,
        m.procs_per_node,
        if m.memory_fit { "on" } else { "off" }
    )?;
    writeln!(
        out,
        "  memory requests          {} jobs without one (counted at {} KB per processor), {} larger than a node (dropped)",
        m.memory_unknown, m.memory_default_kb_per_proc, m.memory_never_fits
    )?;
    writeln!(out, "  waited for memory        {} jobs", m.memory_waited)?;
    writeln!(
        out,
        "  overcommitted nodes      {} times, {:.4} of node time, peak {:.2} x a node's memory",
        m.overcommits, m.overcommitted_node_time, m.peak_node_memory
    )?;
    Ok(())
}

/// A one-line progress bar on stderr, only when stderr is a terminal.
struct Progress {
    enabled: bool,
    shown: bool,
}

impl Progress {
    fn new(enabled: bool) -> Self {
        Progress {
            enabled,
            shown: false,
        }
    }

    fn show(&mut self, done: usize, total: usize) {
        if !self.enabled || total == 0 {
            return;
        }
        let width = 40;
        let filled = done * width / total;
        let _ = write!(
            std::io::stderr(),
            "\r[{}{}] {done}/{total} jobs",
            "#".repeat(filled),
            ".".repeat(width - filled)
        );
        self.shown = true;
    }

    fn finish(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r{}\r", " ".repeat(70));
        }
    }
}

pub fn generate(args: GenerateArgs) -> Result<()> {
    check_generation(args.jobs, "--jobs", args.procs, args.load_scale)?;
    let mut shape = match args.shape.as_str() {
        "curie" => Shape::curie(),
        _ => Shape::published(1.0),
    };
    shape.load_scale *= args.load_scale;
    let trace = generate_shaped(args.jobs, args.procs, args.seed, &shape);
    if args.stats {
        note!("{}", ShapeStats::of(&trace, args.procs));
    }
    let path = args.out.unwrap_or_else(|| PathBuf::from("-"));
    let mut out = open_out(&path)?;
    swf::write(&trace, &mut out).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosched_core::Config;

    /// Invariant: a policy file's replay drives the core as the daemon does with that file.
    #[test]
    fn a_policy_replays_with_the_daemon_s_core_config() {
        let origin = Path::new("site.toml");
        for mode in ["gang", "moderate", "implicit"] {
            for (mpl, backfill, alternates, repack, partitioner) in [
                (4, "easy", true, false, "first-fit"),
                (2, "none", false, true, "scatter"),
                (8, "easy", false, false, "buddy"),
            ] {
                let text = format!(
                    "[scheduler]\nmode = \"{mode}\"\nmpl = {mpl}\nbackfill = \"{backfill}\"\n\
                     alternates = {alternates}\nrepack = {repack}\npartitioner = \"{partitioner}\"\n\
                     quantum_ms = 250\n"
                );
                let policy = SitePolicy::parse(&text, "site.toml").unwrap();
                let config = from_policy(&policy, origin, 64).unwrap();
                assert_eq!(
                    config.core_config(),
                    Config {
                        interactive_preempts: false,
                        ..policy.core_config()
                    },
                    "{text}"
                );
                assert_eq!(config.quantum, 250_000);
            }
        }
        let local = SitePolicy::parse("[scheduler]\nmode = \"local\"\n", "site.toml").unwrap();
        let refused = from_policy(&local, origin, 64).unwrap_err().to_string();
        assert!(
            refused.starts_with("site.toml: scheduler.mode = \"local\""),
            "{refused}"
        );
    }
}
