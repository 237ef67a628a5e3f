//! The cases: job mixes compared under every scheduler, and the seeds' experiments.

use super::jobs::{JobOutcome, JobSpec, Mix};
use super::report::{Results, Row, Table};
use super::runners::{self, Scheduler, Slurm};
use crate::figures::median;
use crate::workloads;
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::time::Duration;

pub struct Context<'a> {
    pub schedulers: Vec<Scheduler>,
    /// `--scheduler`'s names (empty: all), for the cases with schedulers of their own.
    pub wanted: Vec<String>,
    pub repeat: usize,
    pub scale: f64,
    pub slurm: Option<&'a Slurm>,
    pub dir: PathBuf,
}

impl Context<'_> {
    /// `n` scaled by `--scale` (at least 1), as an option value.
    fn n(&self, n: u64) -> String {
        ((n as f64 * self.scale).round() as u64).max(1).to_string()
    }

    /// Those of `schedulers` that `--scheduler` asks for.
    fn pick(&self, mut schedulers: Vec<Scheduler>) -> Vec<Scheduler> {
        schedulers.retain(|s| self.wanted.is_empty() || self.wanted.iter().any(|w| s.is_named(w)));
        schedulers
    }
}

const MIXES: [&str; 6] = [
    "fine",
    "barrier",
    "coarse",
    "compute",
    "spinbarrier",
    "throughput",
];
const SEEDS: [&str; 4] = [
    "seed004-spinbarrier",
    "seed000-elongation",
    "seed002-local-compile",
    "seed001-two-of-three",
];

/// A fine-grain, a coarse and an I/O-bound job under each mode, each job in its own mode, and
/// `auto` (issue 30).
const MODES: &str = "modes";
/// The I/O-bound job beside a computing gang, the jobs' time slice short and the kernel's.
const IO_BESIDE_GANG: &str = "io-beside-gang";

pub fn names() -> Vec<&'static str> {
    MIXES
        .iter()
        .chain([MODES, IO_BESIDE_GANG].iter())
        .chain(SEEDS.iter())
        .copied()
        .collect()
}

/// A long 2-process job of a workload (sizes give about 3 s alone here, without mpirun's
/// start-up of about 2.6 s).
fn long_job(ctx: &Context, workload: &str, name: &str) -> JobSpec {
    match workload {
        // 10 work units (~4 us) before each round trip: a bare ping-pong ran 3x slower or
        // faster by the minute with the host's vCPU placement (see cacheline.c), alone too.
        "fine" => JobSpec::new(
            name,
            2,
            true,
            &["pingpong", "-n", &ctx.n(600_000), "-w", "10"],
        ),
        "barrier" => JobSpec::new(
            name,
            2,
            true,
            &["stencil", "-n", &ctx.n(35_000), "-w", "200"],
        ),
        "coarse" => JobSpec::new(
            name,
            2,
            true,
            &["coarse", "-n", &ctx.n(400), "-w", "20000", "-b", "1048576"],
        ),
        "compute" => JobSpec::new(
            name,
            2,
            true,
            &["compute", "-n", &ctx.n(8_000), "-w", "1000"],
        ),
        // Plain processes, ~10 s alone: no mpirun start-up to overlap, and each job's end
        // (its processes finish 20-90 ms apart here) weighs little against its run.
        "throughput" => JobSpec::new(name, 2, false, &["burn", "-t", "2", "-n", &ctx.n(24_000)]),
        _ => JobSpec::new(
            name,
            2,
            false,
            &["spinbarrier", "-k", "gauss", "-t", "2", "-n", &ctx.n(48)],
        ),
    }
}

/// A short job submitted while the long ones run (3 s in at scale 1, when they are about
/// half done): its turnaround is the response time.
fn interactive_job(ctx: &Context) -> JobSpec {
    JobSpec::new(
        "interactive",
        1,
        false,
        &["burn", "-t", "1", "-n", &ctx.n(1_000)],
    )
    .after(Duration::from_secs_f64(3.0 * ctx.scale))
    .interactive()
}

pub fn run(name: &str, ctx: &Context, results: &mut Results) -> Result<()> {
    match name {
        "seed004-spinbarrier" => seed004(ctx, results),
        "seed000-elongation" => seed000(ctx, results),
        "seed002-local-compile" => seed002(ctx, results),
        "seed001-two-of-three" => seed001(ctx, results),
        MODES => modes(ctx, results),
        IO_BESIDE_GANG => io_beside_gang(ctx, results),
        workload if MIXES.contains(&workload) => {
            let mut jobs = vec![long_job(ctx, workload, "a"), long_job(ctx, workload, "b")];
            // Throughput is the two long jobs' alone: an interactive job would idle a CPU under
            // gang (it runs alone in every slot while the 2-process jobs wait).
            if workload != "throughput" {
                jobs.push(interactive_job(ctx));
            }
            let mix = Mix {
                workload: workload.to_string(),
                jobs,
            };
            compare(&mix, &ctx.schedulers, ctx.repeat, ctx, results).map(|_| ())
        }
        other => bail!("unknown case '{other}'"),
    }
}

/// Each job's runs alone on the machine (plain Linux), one per round, taken in the same rounds
/// as the shared runs: the host drifts by the minute (see `host_round_trip_ns`), and alone is
/// erratic too (two ranks can start stacked on one CPU), so the solo time is a median over
/// runs spread like the others.
#[derive(Default)]
struct SoloRuns {
    /// (job name, seconds, CPU seconds) in the mix's job order.
    jobs: Vec<(String, Vec<f64>, Vec<f64>)>,
}

impl SoloRuns {
    fn run_round(&mut self, mix: &Mix, ctx: &Context, round: usize) -> Result<()> {
        for job in &mix.jobs {
            let index = match self.jobs.iter().position(|(name, ..)| name == &job.name) {
                Some(index) => index,
                None => {
                    self.jobs.push((job.name.clone(), Vec::new(), Vec::new()));
                    self.jobs.len() - 1
                }
            };
            if self.jobs[index].1.len() > round {
                continue; // a second job of the same name
            }
            let alone = alone(mix, job);
            let dir = ctx
                .dir
                .join(format!("{}-solo-{}-{round}", mix.workload, job.name));
            let host = workloads::host_round_trip_ns();
            let outcome = runners::run(&Scheduler::Local, &alone, &dir, None)?;
            let seconds = outcome[0].turnaround_s();
            eprintln!(
                "  round {} {} alone: {seconds:.2} s{}",
                round + 1,
                job.name,
                host_note(host)
            );
            let (_, times, cpu) = &mut self.jobs[index];
            times.push(seconds);
            cpu.extend(outcome[0].cpu_s);
        }
        Ok(())
    }

    fn summary(&self) -> Solos {
        self.jobs
            .iter()
            .map(|(name, seconds, cpu)| {
                let median_s = median(seconds).unwrap_or(f64::NAN);
                eprintln!("  {name} alone: {median_s:.2} s (runs: {seconds:.2?})");
                (name.clone(), median_s, median(cpu))
            })
            .collect()
    }
}

/// `job` of `mix` on its own, submitted at once.
fn alone(mix: &Mix, job: &JobSpec) -> Mix {
    Mix {
        workload: format!("{} alone", mix.workload),
        jobs: vec![job.clone().after(Duration::ZERO)],
    }
}

fn host_note(host_ns: Option<f64>) -> String {
    host_ns.map_or(String::new(), |ns| format!(" (host round trip {ns:.0} ns)"))
}

/// Each job's time alone: (name, seconds, CPU seconds).
type Solos = Vec<(String, f64, Option<f64>)>;

/// Runs `mix` under every scheduler `repeat` times (the order rotating each round) and adds a
/// row per scheduler. Returns the outcomes, [scheduler][round][job], and the solo times.
fn compare(
    mix: &Mix,
    schedulers: &[Scheduler],
    repeat: usize,
    ctx: &Context,
    results: &mut Results,
) -> Result<(Vec<Vec<Vec<JobOutcome>>>, Solos)> {
    if schedulers.is_empty() {
        // `--scheduler per-job` leaves the mixes none, `--scheduler gang-50` the modes case.
        bail!("--scheduler leaves none of this case's schedulers");
    }
    eprintln!(
        "== {}: {} job(s), {} round(s)",
        mix.workload,
        mix.jobs.len(),
        repeat
    );
    let mut solo_runs = SoloRuns::default();
    let mut runs: Vec<Vec<Vec<JobOutcome>>> = vec![Vec::new(); schedulers.len()];
    let mut hosts: Vec<Vec<f64>> = vec![Vec::new(); schedulers.len()];
    let mut failures: Vec<Vec<String>> = vec![Vec::new(); schedulers.len()];
    for round in 0..repeat {
        solo_runs.run_round(mix, ctx, round)?;
        for k in 0..schedulers.len() {
            let i = (k + round) % schedulers.len();
            let scheduler = &schedulers[i];
            let dir = ctx.dir.join(format!(
                "{}-{}-{round}",
                mix.workload,
                scheduler.short_name()
            ));
            let host = workloads::host_round_trip_ns();
            // One failed run does not throw the rounds before away: it is recorded with why,
            // and run once more; a second failure ends the case.
            let outcomes = match runners::run(scheduler, mix, &dir, ctx.slurm) {
                Ok(outcomes) => outcomes,
                Err(error) => {
                    let why = format!("round {}: {error:#}", round + 1);
                    eprintln!(
                        "  {} failed in {why}\n  running it once more",
                        scheduler.label()
                    );
                    failures[i].push(why);
                    let again = PathBuf::from(format!("{}-again", dir.display()));
                    runners::run(scheduler, mix, &again, ctx.slurm)?
                }
            };
            let makespan = outcomes.iter().map(|o| o.ended_s).fold(0.0, f64::max);
            eprintln!(
                "  round {}/{repeat} {:<16} makespan {makespan:.2} s{}",
                round + 1,
                scheduler.label(),
                host_note(host)
            );
            runs[i].push(outcomes);
            hosts[i].extend(host);
        }
    }
    let solos = solo_runs.summary();
    let cpus = cosched_os::usable_cpus();
    for (((scheduler, rounds), host), failed) in
        schedulers.iter().zip(&runs).zip(hosts).zip(failures)
    {
        let row = Row::from_runs(
            scheduler,
            &mix.workload,
            &mix.jobs,
            rounds,
            &solos,
            cpus,
            host,
        );
        results.rows.push(Row {
            failed_runs: failed,
            ..row
        });
    }
    Ok((runs, solos))
}

/// Seed 004 (Jette, tables 3 and 4): the spin-barrier program, gang against plain scheduling,
/// 10 alternating runs: mean and deviation of each job's time.
fn seed004(ctx: &Context, results: &mut Results) -> Result<()> {
    let mix = Mix {
        workload: "seed004-spinbarrier".into(),
        jobs: vec![
            long_job(ctx, "spinbarrier", "a"),
            long_job(ctx, "spinbarrier", "b"),
        ],
    };
    let schedulers = [Scheduler::Local, Scheduler::cosched("gang", 100)];
    let (runs, _) = compare(&mix, &schedulers, 10.max(ctx.repeat), ctx, results)?;
    let mut table = Table::new(
        "Seed 004 (LLNL, tables 3-4): two 2-thread spin-barrier jobs, 10 alternating runs",
        &[
            "scheduler",
            "job time mean (s)",
            "deviation (s)",
            "min (s)",
            "max (s)",
        ],
    );
    for (scheduler, rounds) in schedulers.iter().zip(&runs) {
        let times: Vec<f64> = rounds
            .iter()
            .flatten()
            .map(JobOutcome::turnaround_s)
            .collect();
        let (mean, deviation) = mean_and_deviation(&times);
        table.row(vec![
            scheduler.label(),
            format!("{mean:.2}"),
            format!("{deviation:.2}"),
            format!("{:.2}", times.iter().copied().fold(f64::INFINITY, f64::min)),
            format!("{:.2}", times.iter().copied().fold(0.0, f64::max)),
        ]);
    }
    results.tables.push(table);
    Ok(())
}

/// The median turnaround of the job called `name` over the rounds.
fn median_turnaround(rounds: &[Vec<JobOutcome>], name: &str) -> f64 {
    let times: Vec<f64> = rounds
        .iter()
        .flatten()
        .filter(|o| o.name == name)
        .map(JobOutcome::turnaround_s)
        .collect();
    median(&times).unwrap_or(f64::NAN)
}

/// Mean and sample standard deviation (0 for fewer than two values).
fn mean_and_deviation(values: &[f64]) -> (f64, f64) {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance.sqrt())
}

/// Seed 000 (AP/Linux, table 3): elongation of the total time as 1-process jobs are added:
/// the first two share one slice (space sharing), the next ones open a new slice.
fn seed000(ctx: &Context, results: &mut Results) -> Result<()> {
    let gang = Scheduler::cosched("gang", 50);
    let job = |i: usize| {
        JobSpec::new(
            &format!("j{i}"),
            1,
            false,
            &["burn", "-t", "1", "-n", &ctx.n(6_000)],
        )
    };
    let cpus = cosched_os::usable_cpus() as usize;
    let mut table = Table::new(
        "Seed 000 (AP/Linux, table 3): total time as 1-process jobs are added, gang 50 ms",
        &["jobs", "slices", "total (s)", "elongation"],
    );
    let mut alone = None;
    for count in 1..=2 * cpus {
        let mix = Mix {
            workload: format!("seed000-elongation-{count}"),
            jobs: (0..count).map(job).collect(),
        };
        let (runs, _) = compare(&mix, std::slice::from_ref(&gang), ctx.repeat, ctx, results)?;
        let totals: Vec<f64> = runs[0]
            .iter()
            .map(|r| r.iter().map(|o| o.ended_s).fold(0.0, f64::max))
            .collect();
        let total = median(&totals).unwrap_or(f64::NAN);
        let base = *alone.get_or_insert(total);
        table.row(vec![
            count.to_string(),
            count.div_ceil(cpus).to_string(),
            format!("{total:.2}"),
            format!("{:.2}", total / base),
        ]);
    }
    results.tables.push(table);
    Ok(())
}

/// Seed 002 (Solsona et al., table 1): slowdown of a sequential local load (a compile loop)
/// beside a fine-grain parallel job, under each mode.
fn seed002(ctx: &Context, results: &mut Results) -> Result<()> {
    let compile = JobSpec::new("compile", 1, false, &["compile_loop.sh", "-n", &ctx.n(30)]);
    let mix = Mix {
        workload: "seed002-local-compile".into(),
        jobs: vec![compile, long_job(ctx, "fine", "parallel")],
    };
    let schedulers: Vec<Scheduler> = ctx
        .schedulers
        .iter()
        .filter(|s| !matches!(s, Scheduler::Slurm))
        .cloned()
        .collect();
    let (runs, solos) = compare(&mix, &schedulers, ctx.repeat, ctx, results)?;
    let compile_alone = solos[0].1;
    let mut table = Table::new(
        "Seed 002 (Solsona et al., table 1): a compile loop beside a 2-rank ping-pong",
        &[
            "scheduler",
            "compile (s)",
            "compile slowdown",
            "parallel job (s)",
        ],
    );
    for (scheduler, rounds) in schedulers.iter().zip(&runs) {
        let of = |name: &str| median_turnaround(rounds, name);
        table.row(vec![
            scheduler.label(),
            format!("{:.2}", of("compile")),
            format!("{:.2}", of("compile") / compile_alone),
            format!("{:.2}", of("parallel")),
        ]);
    }
    results.tables.push(table);
    Ok(())
}

/// Seed 001 (AP/Linux `sliced`, Fig. 7): on two processors, a 2-process job fills slice 1;
/// 1-process jobs b and c share slice 2; d opens slice 3 on processor 0, where c's processor
/// is free, so c runs in slices 2 and 3 (an alternate). c should finish in about 2/3 of b's
/// time.
fn seed001(ctx: &Context, results: &mut Results) -> Result<()> {
    let gang = Scheduler::cosched("gang", 100);
    let small =
        |name: &str| JobSpec::new(name, 1, false, &["burn", "-t", "1", "-n", &ctx.n(3_000)]);
    let mix = Mix {
        workload: "seed001-two-of-three".into(),
        jobs: vec![
            JobSpec::new("a", 2, false, &["burn", "-t", "2", "-n", &ctx.n(12_000)]),
            small("b"),
            small("c").after(Duration::from_millis(200)),
            small("d").after(Duration::from_millis(400)),
        ],
    };
    let (runs, _) = compare(&mix, std::slice::from_ref(&gang), ctx.repeat, ctx, results)?;
    let of = |name: &str| median_turnaround(&runs[0], name);
    let mut table = Table::new(
        "Seed 001 (AP/Linux, Fig. 7): a job in 2 of 3 slices (c) against one-slice jobs (b, d)",
        &["job", "turnaround (s)", "relative to b"],
    );
    for name in ["b", "c", "d"] {
        table.row(vec![
            name.to_string(),
            format!("{:.2}", of(name)),
            format!("{:.2}", of(name) / of("b")),
        ]);
    }
    results.tables.push(table);
    Ok(())
}

/// A blocked gang gives its slot away after this long in the modes case's give-away rows:
/// a quarter of the 20 ms quantum.
const GIVE_AWAY_MS: u32 = 5;

/// The modes case's schedulers: the fixed modes at 20 ms, gang with and without give-away,
/// implicit as a mode (every job in it, all at once: implicit coscheduling) and as cosched's
/// implicit daemon (space sharing only, one slice: the jobs queue), each job in the mode that
/// suits it, `auto`, and the baselines (Slurm unless left out).
pub fn modes_schedulers(slurm: bool) -> Vec<Scheduler> {
    let gang = Scheduler::cosched("gang", 20);
    let mut schedulers = vec![
        Scheduler::Local,
        gang.clone(),
        gang.clone().give_away(GIVE_AWAY_MS),
        Scheduler::cosched("moderate", 20),
        gang.clone()
            .job_modes(&[
                ("fine", "implicit"),
                ("coarse", "implicit"),
                ("io", "implicit"),
            ])
            .named("implicit-each"),
        Scheduler::Implicit,
        gang.give_away(GIVE_AWAY_MS).job_modes(&[
            ("fine", "gang"),
            ("coarse", "moderate"),
            ("io", "implicit"),
        ]),
        Scheduler::cosched("auto", 20).give_away(GIVE_AWAY_MS),
    ];
    if slurm {
        schedulers.push(Scheduler::Slurm);
    }
    schedulers
}

/// The I/O-bound job: two processes, ~3.8 s alone at scale 1, 11 % of a CPU, each write
/// blocking its process ~23 ms (see iobound.c): beyond the give-away's 5 ms. Two wide like the
/// MPI jobs, so that its slot, given away, is one they can use (a job borrows only where all
/// its processors are the lender's). In /var/tmp, on the disk here (/tmp is too, but may be
/// tmpfs elsewhere).
fn io_job(ctx: &Context) -> JobSpec {
    JobSpec::new(
        "io",
        2,
        false,
        &[
            "iobound",
            "-t",
            "2",
            "-n",
            &ctx.n(300),
            "-w",
            "100",
            "-b",
            "33554432",
            "-d",
            "/var/tmp",
        ],
    )
}

/// Issue 30's side-by-side measure: makespan over the ideal and each job's slowdown under
/// every scheduler, then the targets: `auto` within 5 % of the best fixed mode for every job,
/// and the I/O-bound job no slower under gang with give-away than under plain Linux.
fn modes(ctx: &Context, results: &mut Results) -> Result<()> {
    let mix = Mix {
        workload: MODES.into(),
        jobs: vec![
            long_job(ctx, "fine", "fine"),
            long_job(ctx, "coarse", "coarse"),
            io_job(ctx),
        ],
    };
    let schedulers = ctx.pick(modes_schedulers(ctx.slurm.is_some()));
    let (runs, solos) = compare(&mix, &schedulers, ctx.repeat, ctx, results)?;
    let (ideal, cpus) = (cpu_ideal(&solos), cosched_os::usable_cpus());
    let slowdown = |rounds: &[Vec<JobOutcome>], job: &str| job_slowdown(&solos, rounds, job);
    let jobs = ["fine", "coarse", "io"];
    let table = slowdown_table(
        &format!(
            "Each job its mode: a 2-rank ping-pong (fine), a 2-rank coarse job and an I/O-bound \
             job together; ideal {ideal:.2} s (CPU time alone over {cpus} CPUs, at least the \
             longest job alone); slowdown: turnaround over time alone"
        ),
        &jobs,
        &schedulers,
        &runs,
        results,
        &solos,
        ideal,
    );
    results.tables.push(table);

    let of = |found: Option<usize>, job: &str| found.map(|i| slowdown(&runs[i], job));
    let auto = schedulers.iter().position(|s| s.name() == "auto");
    if let Some(auto) = auto {
        results.tables.push(auto_choices(&runs[auto], &jobs));
        results.tables.push(waiting_cost(&mix, &solos, ctx)?);
    }
    // The fixed modes, every job in one: not the implicit daemon, whose one slice makes the
    // jobs queue (a job's slowdown there is its place in the queue, not its mode).
    let fixed: Vec<usize> = (0..schedulers.len())
        .filter(|&i| matches!(schedulers[i].name(), "gang" | "moderate" | "implicit-each"))
        .collect();
    let mut targets = Table::new(
        "Each job its mode, the targets (within 5 %: the ratio of the medians at most 1.05; \
         per round: the two turnarounds of one round, the rounds' median and range)",
        &[
            "target",
            "slowdown",
            "against",
            "ratio",
            "met",
            "per round",
            "rounds within 5 %",
        ],
    );
    let paired = |a: Option<usize>, b: Option<usize>, job: &str| {
        a.zip(b)
            .map_or_else(Vec::new, |(a, b)| per_round_ratios(&runs[a], &runs[b], job))
    };
    for job in jobs {
        let best = fixed
            .iter()
            .map(|&i| (i, slowdown(&runs[i], job)))
            .filter(|(_, v)| v.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1));
        targets.row(target_row(
            &format!("{job}: auto within 5 % of the best fixed mode"),
            of(auto, job),
            best.map(|(i, v)| (schedulers[i].label(), v)),
            &paired(auto, best.map(|(i, _)| i), job),
        ));
    }
    let local = schedulers.iter().position(|s| *s == Scheduler::Local);
    let gang_give_away = schedulers
        .iter()
        .position(|s| s.name() == "gang" && s.give_away_ms().is_some());
    targets.row(target_row(
        "io: gang with give-away no slower than plain Linux",
        of(gang_give_away, "io"),
        of(local, "io").map(|v| (Scheduler::Local.label(), v)),
        &paired(gang_give_away, local, "io"),
    ));
    results.tables.push(targets);
    Ok(())
}

/// The ideal by CPU time: the jobs' CPU time alone over the CPUs, at least the longest job
/// alone (an I/O-bound job is mostly off the CPU, and time alone counted whole would give an
/// ideal that plain Linux beats).
fn cpu_ideal(solos: &Solos) -> f64 {
    let cpus = f64::from(cosched_os::usable_cpus());
    let longest = solos.iter().map(|s| s.1).fold(0.0, f64::max);
    let cpu_alone: Option<f64> = solos.iter().map(|s| s.2).sum();
    cpu_alone.map_or(f64::NAN, |cpu| (cpu / cpus).max(longest))
}

/// `job`'s median turnaround over its time alone.
fn job_slowdown(solos: &Solos, rounds: &[Vec<JobOutcome>], job: &str) -> f64 {
    let alone = solos.iter().find(|s| s.0 == job).map_or(f64::NAN, |s| s.1);
    median_turnaround(rounds, job) / alone
}

/// A row per scheduler: its median makespan, that over `ideal`, and each of `jobs`'
/// slowdown. The last rows of `results` are `compare`'s for `schedulers`.
fn slowdown_table(
    title: &str,
    jobs: &[&str],
    schedulers: &[Scheduler],
    runs: &[Vec<Vec<JobOutcome>>],
    results: &Results,
    solos: &Solos,
    ideal: f64,
) -> Table {
    let mut headers = vec![
        "scheduler".to_string(),
        "makespan (s)".into(),
        "/ ideal".into(),
    ];
    headers.extend(jobs.iter().map(|job| format!("{job} slowdown")));
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut table = Table::new(title, &headers);
    let rows = &results.rows[results.rows.len() - schedulers.len()..];
    for ((scheduler, rounds), row) in schedulers.iter().zip(runs).zip(rows) {
        let mut cells = vec![
            scheduler.label(),
            format!("{:.2}", row.makespan_s),
            format!("{:.2}", row.makespan_s / ideal),
        ];
        cells.extend(
            jobs.iter()
                .map(|job| format!("{:.2}", job_slowdown(solos, rounds, job))),
        );
        table.row(cells);
    }
    table
}

/// Plain Linux, and gang with give-away at 20 ms with the jobs' time slice the daemon's and the
/// kernel's.
pub fn io_beside_gang_schedulers() -> Vec<Scheduler> {
    let gang = Scheduler::cosched("gang", 20).give_away(GIVE_AWAY_MS);
    vec![Scheduler::Local, gang.clone(), gang.time_slice(0)]
}

/// The I/O-bound job beside a computing gang (2 processes of `burn`, longer than it), under
/// gang with give-away with the jobs' time slice the daemon's (100 µs) and the kernel's own,
/// and plain Linux: the kernel threads completing the I/O job's writes run on a processor the
/// gang holds, and wait behind its process there (docs/performance.md, "A job's time slice").
fn io_beside_gang(ctx: &Context, results: &mut Results) -> Result<()> {
    let mix = Mix {
        workload: IO_BESIDE_GANG.into(),
        jobs: vec![long_job(ctx, "throughput", "burn"), io_job(ctx)],
    };
    let schedulers = ctx.pick(io_beside_gang_schedulers());
    let (runs, solos) = compare(&mix, &schedulers, ctx.repeat, ctx, results)?;
    let table = slowdown_table(
        "An I/O-bound job beside a computing gang (2 processes of burn), the jobs' time slice \
         the daemon's and the kernel's; slowdown: turnaround over time alone",
        &["io", "burn"],
        &schedulers,
        &runs,
        results,
        &solos,
        cpu_ideal(&solos),
    );
    results.tables.push(table);
    Ok(())
}

/// What spin-then-block waits cost each MPI job of `mix` alone: an auto job waits so from its
/// start (its measure needs waits that yield or nap), and keeps them once chosen gang, where
/// busy-polling would do. Each runs alone `ctx.repeat` times under the implicit daemon (the job
/// alone, unswitched, told to spin then block), against its time alone busy-polling (`solos`).
fn waiting_cost(mix: &Mix, solos: &Solos, ctx: &Context) -> Result<Table> {
    let mut table = Table::new(
        "What auto's waits (spin, then yield or nap) cost a job alone, against busy-polling",
        &[
            "job",
            "alone busy-polling (s)",
            "alone spin-then-block (s)",
            "ratio",
        ],
    );
    for job in mix.jobs.iter().filter(|job| job.mpi) {
        let alone = alone(mix, job);
        let mut seconds = Vec::new();
        for round in 0..ctx.repeat {
            let dir = ctx
                .dir
                .join(format!("{}-spinblock-{}-{round}", mix.workload, job.name));
            let outcome = runners::run(&Scheduler::Implicit, &alone, &dir, None)?;
            seconds.push(outcome[0].turnaround_s());
        }
        eprintln!("  {} alone spin-then-block: {seconds:.2?} s", job.name);
        let block = median(&seconds).unwrap_or(f64::NAN);
        let poll = solos
            .iter()
            .find(|s| s.0 == job.name)
            .map_or(f64::NAN, |s| s.1);
        table.row(vec![
            job.name.clone(),
            format!("{poll:.2}"),
            format!("{block:.2}"),
            format!("{:.2}", block / poll),
        ]);
    }
    Ok(table)
}

/// What `auto` chose for each job over the rounds (`gang (3 of 3)`), with one reason given.
fn auto_choices(rounds: &[Vec<JobOutcome>], jobs: &[&str]) -> Table {
    let mut table = Table::new(
        "What auto chose, from each job's first seconds unswitched (the daemon's measure, per round)",
        &["job", "chosen", "why (last round)"],
    );
    for &job in jobs {
        let seen: Vec<&JobOutcome> = rounds.iter().flatten().filter(|o| o.name == job).collect();
        let mut counts: Vec<(String, usize)> = Vec::new();
        for outcome in &seen {
            let mode = outcome.mode.clone().unwrap_or_else(|| "-".into());
            match counts.iter_mut().find(|(m, _)| *m == mode) {
                Some((_, n)) => *n += 1,
                None => counts.push((mode, 1)),
            }
        }
        let chosen: Vec<String> = counts
            .iter()
            .map(|(mode, n)| format!("{mode} ({n} of {})", seen.len()))
            .collect();
        let why = seen.last().and_then(|o| o.mode_why.clone());
        table.row(vec![
            job.to_string(),
            chosen.join(", "),
            why.unwrap_or_else(|| "-".into()),
        ]);
    }
    table
}

/// `job`'s turnaround under `a` over its turnaround under `b`, round by round: the rounds run
/// every scheduler in turn, so the two of a round met the same moment of a noisy machine.
fn per_round_ratios(a: &[Vec<JobOutcome>], b: &[Vec<JobOutcome>], job: &str) -> Vec<f64> {
    let turnaround = |round: &Vec<JobOutcome>| {
        let outcome = round.iter().find(|o| o.name == job)?;
        Some(outcome.turnaround_s())
    };
    a.iter()
        .zip(b)
        .filter_map(|(a, b)| Some(turnaround(a)? / turnaround(b)?))
        .filter(|ratio| ratio.is_finite())
        .collect()
}

/// A target's row: `measured` over the slowdown `against` (ratio of the medians, met within
/// 5 %; `-` where a scheduler did not run), and the same ratio `per_round` (median and range,
/// and how many rounds were within 5 %).
fn target_row(
    target: &str,
    measured: Option<f64>,
    against: Option<(String, f64)>,
    per_round: &[f64],
) -> Vec<String> {
    let cell = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let ratio = measured
        .zip(against.as_ref().map(|a| a.1))
        .map(|(m, a)| m / a);
    let least = per_round.iter().copied().reduce(f64::min);
    let most = per_round.iter().copied().reduce(f64::max);
    let rounds = match (median(per_round), least, most) {
        (Some(mid), Some(least), Some(most)) => format!("{mid:.2} ({least:.2}-{most:.2})"),
        _ => "-".into(),
    };
    let within = per_round.iter().filter(|&&r| r <= 1.05).count();
    vec![
        target.to_string(),
        cell(measured),
        against
            .as_ref()
            .map_or("-".into(), |(label, v)| format!("{v:.2} ({label})")),
        cell(ratio),
        ratio.map_or("-".into(), |r| {
            if r <= 1.05 { "yes" } else { "no" }.to_string()
        }),
        rounds,
        match per_round.len() {
            0 => "-".into(),
            n => format!("{within} of {n}"),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::jobs::Waiting;

    fn context(wanted: &[&str]) -> Context<'static> {
        Context {
            schedulers: Vec::new(),
            wanted: wanted.iter().map(|w| w.to_string()).collect(),
            repeat: 1,
            scale: 1.0,
            slurm: None,
            dir: PathBuf::new(),
        }
    }

    fn short_names(schedulers: &[Scheduler]) -> Vec<String> {
        schedulers.iter().map(Scheduler::short_name).collect()
    }

    #[test]
    fn the_modes_case_runs_every_mode_and_scheduler_picks_among_them() {
        let all = modes_schedulers(true);
        assert_eq!(
            short_names(&all),
            [
                "local",
                "gang-20",
                "gang-20+giveaway",
                "moderate-20",
                "implicit-each",
                "implicit",
                "per-job",
                "auto-20+giveaway",
                "slurm"
            ]
        );
        let each = &all[4];
        assert_eq!(each.label(), "implicit-each (daemon gang 20 ms)");
        assert_eq!(each.own_mode("io"), Some("implicit"));
        assert_eq!(each.waiting("fine"), Waiting::SpinBlock);
        assert!(!modes_schedulers(false).contains(&Scheduler::Slurm));
        assert_eq!(context(&[]).pick(all.clone()), all);
        // A mode's name takes its every row; a short name one row.
        assert_eq!(
            short_names(&context(&["gang", "auto"]).pick(all.clone())),
            ["gang-20", "gang-20+giveaway", "auto-20+giveaway"]
        );
        assert_eq!(
            short_names(&context(&["gang-20", "per-job"]).pick(all)),
            ["gang-20", "per-job"]
        );
    }

    #[test]
    fn io_beside_gang_sets_the_kernels_slice_on_one_row_only() {
        let all = io_beside_gang_schedulers();
        assert_eq!(
            short_names(&all),
            ["local", "gang-20+giveaway", "gang-20+giveaway+kernel-slice"]
        );
        assert_eq!(
            all[2].label(),
            "gang 20 ms + give-away 5 ms, the kernel's time slice"
        );
        assert_eq!(
            all[2].daemon().unwrap().extra,
            ["--give-away-after-ms", "5", "--time-slice-us", "0"]
        );
        assert_eq!(
            all[1].daemon().unwrap().extra,
            ["--give-away-after-ms", "5"]
        );
        // `--scheduler gang-20+giveaway` takes the daemon's slice alone.
        assert_eq!(
            short_names(&context(&["gang-20+giveaway"]).pick(all)),
            ["gang-20+giveaway"]
        );
    }

    #[test]
    fn per_job_and_auto_jobs_get_their_modes_and_waiting() {
        let all = modes_schedulers(false);
        let per_job = all.iter().find(|s| s.name() == "per-job").unwrap();
        assert_eq!(
            per_job.label(),
            "per-job (daemon gang 20 ms) + give-away 5 ms"
        );
        let daemon = per_job.daemon().unwrap();
        assert_eq!((daemon.mode.as_str(), daemon.quantum_ms), ("gang", 20));
        assert_eq!(daemon.extra, ["--give-away-after-ms", "5"]);
        assert_eq!(per_job.own_mode("coarse"), Some("moderate"));
        assert_eq!(per_job.waiting("fine"), Waiting::Spin);
        assert_eq!(per_job.waiting("io"), Waiting::SpinBlock);
        let auto = all.iter().find(|s| s.name() == "auto").unwrap();
        assert_eq!(auto.own_mode("fine"), None);
        assert_eq!(auto.waiting("fine"), Waiting::SpinBlock);
        let gang = Scheduler::cosched("gang", 20);
        assert_eq!(gang.waiting("fine"), Waiting::Spin);
        assert!(gang.daemon().unwrap().extra.is_empty());
        assert_eq!(Scheduler::Local.daemon().map(|d| d.mode), None);
    }

    #[test]
    fn a_target_is_met_within_five_percent_and_unknown_without_its_rows() {
        let against = |v: f64| Some(("gang 20 ms".to_string(), v));
        assert_eq!(
            target_row("t", Some(1.05), against(1.0), &[1.1, 0.9, 1.0]),
            [
                "t",
                "1.05",
                "1.00 (gang 20 ms)",
                "1.05",
                "yes",
                "1.00 (0.90-1.10)",
                "2 of 3"
            ]
        );
        assert_eq!(target_row("t", Some(1.2), against(1.0), &[])[4], "no");
        assert_eq!(
            target_row("t", None, against(1.0), &[]),
            ["t", "-", "1.00 (gang 20 ms)", "-", "-", "-", "-"]
        );
    }
}
