//! The schedulers a mix runs under: plain Linux, the cosched daemon in each mode, and Slurm's
//! gang scheduler. Each starts the mix's jobs at their delays, waits for all, and returns when
//! each was submitted and ended (seconds from the mix's start) and its reported CPU time.

use super::jobs::{reported_cpu_s, JobOutcome, Mix, Waiting};
use crate::daemon::{Daemon, DaemonSpec};
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest a mix may take before the run is abandoned.
const PATIENCE: Duration = Duration::from_secs(900);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scheduler {
    /// Plain Linux: the jobs started together, no control.
    Local,
    /// The cosched daemon in a mode (gang, moderate, auto) at a quantum.
    Cosched {
        mode: String,
        quantum_ms: u64,
        /// `--give-away-after-ms`: a blocked gang lends its slot (`None`: never).
        give_away_ms: Option<u32>,
        /// `--time-slice-us` (`None`: the daemon's default).
        time_slice_us: Option<u32>,
        /// Jobs submitted with a mode of their own (`cosched run --mode`), by job name; the
        /// others take the daemon's. Not empty: the scheduler is called `per-job`, unless
        /// `alias` names it.
        job_modes: Vec<(String, String)>,
        /// A name of its own for a set of job modes (`implicit-each`).
        alias: Option<&'static str>,
    },
    /// cosched `implicit`: space sharing only, jobs told to spin briefly then block.
    Implicit,
    /// Slurm 22.05's gang scheduling (5 s slices).
    Slurm,
}

impl Scheduler {
    /// The daemon in `mode` at `quantum_ms`, every job in that mode, no give-away.
    pub fn cosched(mode: &str, quantum_ms: u64) -> Scheduler {
        Scheduler::Cosched {
            mode: mode.to_string(),
            quantum_ms,
            give_away_ms: None,
            time_slice_us: None,
            job_modes: Vec::new(),
            alias: None,
        }
    }

    /// The same scheduler called `name` (in tables and by `--scheduler`).
    pub fn named(mut self, name: &'static str) -> Scheduler {
        if let Scheduler::Cosched { alias, .. } = &mut self {
            *alias = Some(name);
        }
        self
    }

    /// The same daemon with `--give-away-after-ms ms`.
    pub fn give_away(mut self, ms: u32) -> Scheduler {
        if let Scheduler::Cosched { give_away_ms, .. } = &mut self {
            *give_away_ms = Some(ms);
        }
        self
    }

    /// The same daemon with `--time-slice-us us`.
    pub fn time_slice(mut self, us: u32) -> Scheduler {
        if let Scheduler::Cosched { time_slice_us, .. } = &mut self {
            *time_slice_us = Some(us);
        }
        self
    }

    /// The same daemon with these jobs (by name) submitted in their own modes.
    pub fn job_modes(mut self, modes: &[(&str, &str)]) -> Scheduler {
        if let Scheduler::Cosched { job_modes, .. } = &mut self {
            *job_modes = modes
                .iter()
                .map(|(job, mode)| (job.to_string(), mode.to_string()))
                .collect();
        }
        self
    }

    pub fn name(&self) -> &str {
        match self {
            Scheduler::Local => "local",
            Scheduler::Cosched {
                alias: Some(alias), ..
            } => alias,
            Scheduler::Cosched { job_modes, .. } if !job_modes.is_empty() => "per-job",
            Scheduler::Cosched { mode, .. } => mode,
            Scheduler::Implicit => "implicit",
            Scheduler::Slurm => "slurm",
        }
    }

    pub fn quantum_ms(&self) -> Option<u64> {
        match self {
            Scheduler::Cosched { quantum_ms, .. } => Some(*quantum_ms),
            Scheduler::Slurm => Some(5_000),
            Scheduler::Local | Scheduler::Implicit => None,
        }
    }

    pub fn give_away_ms(&self) -> Option<u32> {
        match self {
            Scheduler::Cosched { give_away_ms, .. } => *give_away_ms,
            _ => None,
        }
    }

    pub fn time_slice_us(&self) -> Option<u32> {
        match self {
            Scheduler::Cosched { time_slice_us, .. } => *time_slice_us,
            _ => None,
        }
    }

    /// As the tables name it: `gang 20 ms`, `per-job (gang 20 ms) + give-away 5 ms`.
    pub fn label(&self) -> String {
        let base = match self {
            Scheduler::Cosched {
                mode,
                quantum_ms,
                job_modes,
                ..
            } if !job_modes.is_empty() => {
                format!("{} (daemon {mode} {quantum_ms} ms)", self.name())
            }
            Scheduler::Cosched { quantum_ms, .. } => format!("{} {quantum_ms} ms", self.name()),
            _ => self.name().to_string(),
        };
        let base = match self.give_away_ms() {
            Some(ms) => format!("{base} + give-away {ms} ms"),
            None => base,
        };
        match self.time_slice_us() {
            Some(0) => format!("{base}, the kernel's time slice"),
            Some(us) => format!("{base}, time slice {us} µs"),
            None => base,
        }
    }

    /// The label as one word, as `--scheduler` takes it: `gang-50`, `gang-20+giveaway`,
    /// `gang-20+giveaway+kernel-slice`, `per-job`, `local`.
    pub fn short_name(&self) -> String {
        let base = match self {
            Scheduler::Cosched { job_modes, .. } if !job_modes.is_empty() => self.name().into(),
            Scheduler::Cosched {
                mode, quantum_ms, ..
            } => format!("{mode}-{quantum_ms}"),
            _ => self.name().to_string(),
        };
        let base = match self {
            Scheduler::Cosched {
                give_away_ms: Some(_),
                job_modes,
                ..
            } if job_modes.is_empty() => format!("{base}+giveaway"),
            _ => base,
        };
        match self.time_slice_us() {
            Some(0) => format!("{base}+kernel-slice"),
            Some(us) => format!("{base}+slice-{us}"),
            None => base,
        }
    }

    /// Whether `--scheduler NAME` asks for this one: its name or its short name.
    pub fn is_named(&self, name: &str) -> bool {
        name == self.name() || name == self.short_name()
    }

    /// The mode job `job` is submitted with, where it has one of its own.
    pub(super) fn own_mode(&self, job: &str) -> Option<&str> {
        match self {
            Scheduler::Cosched { job_modes, .. } => job_modes
                .iter()
                .find(|(name, _)| name == job)
                .map(|(_, mode)| mode.as_str()),
            _ => None,
        }
    }

    /// Jobs in implicit and auto modes spin briefly, then block (auto jobs may run
    /// uncoordinated); the others busy-poll, as Open MPI does by default.
    pub(super) fn waiting(&self, job: &str) -> Waiting {
        let mode = match self {
            Scheduler::Cosched { mode, .. } => self.own_mode(job).unwrap_or(mode),
            other => other.name(),
        };
        if matches!(mode, "implicit" | "auto") {
            Waiting::SpinBlock
        } else {
            Waiting::Spin
        }
    }

    /// How its daemon runs (`None`: not cosched).
    pub(super) fn daemon(&self) -> Option<DaemonSpec> {
        let (mode, quantum_ms) = match self {
            Scheduler::Cosched {
                mode, quantum_ms, ..
            } => (mode.as_str(), *quantum_ms),
            Scheduler::Implicit => ("implicit", 100),
            Scheduler::Local | Scheduler::Slurm => return None,
        };
        Some(DaemonSpec {
            mode: mode.to_string(),
            quantum_ms,
            freezer: None,
            extra: [
                ("--give-away-after-ms", self.give_away_ms()),
                ("--time-slice-us", self.time_slice_us()),
            ]
            .into_iter()
            .filter_map(|(flag, value)| Some([flag.to_string(), value?.to_string()]))
            .flatten()
            .collect(),
        })
    }
}

/// Seconds since the Unix epoch, as a float.
fn epoch_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Sleeps until `delay` after `start`.
fn wait_until(start: Instant, delay: Duration) {
    if let Some(left) = delay.checked_sub(start.elapsed()) {
        std::thread::sleep(left);
    }
}

/// Runs `mix` under `scheduler`, its outputs in `dir`.
pub fn run(
    scheduler: &Scheduler,
    mix: &Mix,
    dir: &Path,
    slurm: Option<&Slurm>,
) -> Result<Vec<JobOutcome>> {
    std::fs::create_dir_all(dir)?;
    match scheduler {
        Scheduler::Local => run_plain(mix, dir),
        Scheduler::Slurm => slurm.context("Slurm was not started")?.run(mix, dir),
        Scheduler::Cosched { .. } | Scheduler::Implicit => run_cosched(mix, dir, scheduler),
    }
}

fn output_file(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("job-{index}.out"))
}

/// How many of a failed job's last output lines a failure shows: the mix's directory is
/// removed at the end, and its output is what says why.
const FAILED_OUTPUT_LINES: usize = 12;

/// Every job's last lines of output, to follow a failure of the mix.
fn outputs_tail(mix: &Mix, dir: &Path) -> String {
    let mut shown = String::new();
    for (index, job) in mix.jobs.iter().enumerate() {
        let output = std::fs::read_to_string(output_file(dir, index)).unwrap_or_default();
        let lines: Vec<&str> = output.lines().collect();
        let last = &lines[lines.len().saturating_sub(FAILED_OUTPUT_LINES)..];
        shown.push_str(&format!("\n  {} ({index}) output ends:", job.name));
        for line in last {
            shown.push_str(&format!("\n    {line}"));
        }
    }
    shown
}

fn outcome(mix: &Mix, index: usize, dir: &Path, submitted_s: f64, ended_s: f64) -> JobOutcome {
    let output = std::fs::read_to_string(output_file(dir, index)).unwrap_or_default();
    JobOutcome {
        name: mix.jobs[index].name.clone(),
        interactive: mix.jobs[index].interactive,
        submitted_s,
        ended_s,
        cpu_s: reported_cpu_s(&output),
        mode: None,
        mode_why: None,
    }
}

/// Plain Linux: each job a child process of this one, started at its delay.
fn run_plain(mix: &Mix, dir: &Path) -> Result<Vec<JobOutcome>> {
    let start = Instant::now();
    let mut order: Vec<usize> = (0..mix.jobs.len()).collect();
    order.sort_by_key(|&i| mix.jobs[i].delay);
    let mut running = Started(Vec::new());
    let mut done: Vec<Option<JobOutcome>> = vec![None; mix.jobs.len()];
    let mut next = 0;
    while done.iter().any(Option::is_none) {
        while next < order.len() && start.elapsed() >= mix.jobs[order[next]].delay {
            let i = order[next];
            let spec = &mix.jobs[i];
            let argv = spec.command();
            let out = std::fs::File::create(output_file(dir, i))?;
            let child = cosched_cgroups::die_with_parent(&mut Command::new(&argv[0]))
                .args(&argv[1..])
                .envs(spec.env(Waiting::Spin))
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out)
                .spawn()
                .with_context(|| format!("starting {}", argv[0]))?;
            running.0.push((i, start.elapsed().as_secs_f64(), child));
            next += 1;
        }
        let mut still = Vec::new();
        for (i, submitted, mut child) in std::mem::take(&mut running.0) {
            match child.try_wait()? {
                Some(status) if status.success() => {
                    done[i] = Some(outcome(
                        mix,
                        i,
                        dir,
                        submitted,
                        start.elapsed().as_secs_f64(),
                    ));
                }
                Some(status) => bail!(
                    "{} failed ({status}) under plain Linux{}",
                    mix.jobs[i].name,
                    outputs_tail(mix, dir)
                ),
                None => still.push((i, submitted, child)),
            }
        }
        running.0 = still;
        if start.elapsed() > PATIENCE {
            bail!("the {} mix ran longer than {PATIENCE:?}", mix.workload);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(done.into_iter().flatten().collect())
}

/// The jobs of a plain run still running: when the run fails, they are ended (SIGTERM, so
/// that `mpirun` takes its ranks with it, then SIGKILL), not left to weigh on the next run.
struct Started(Vec<(usize, f64, Child)>);

/// How long a job of a failed plain run has to end after SIGTERM.
const TERM_PATIENCE: Duration = Duration::from_secs(10);

impl Drop for Started {
    fn drop(&mut self) {
        for (_, _, child) in &mut self.0 {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        let asked = Instant::now();
        for (_, _, child) in &mut self.0 {
            while matches!(child.try_wait(), Ok(None)) && asked.elapsed() < TERM_PATIENCE {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The cosched daemon: each job through `cosched run --detach`, times from its records.
fn run_cosched(mix: &Mix, dir: &Path, scheduler: &Scheduler) -> Result<Vec<JobOutcome>> {
    let daemon = Daemon::start(&scheduler.daemon().context("not a cosched scheduler")?)?;
    let start = Instant::now();
    let start_us = (epoch_s() * 1e6) as i64;
    let mut order: Vec<usize> = (0..mix.jobs.len()).collect();
    order.sort_by_key(|&i| mix.jobs[i].delay);
    let mut ids = vec![0; mix.jobs.len()];
    for i in order {
        let spec = &mix.jobs[i];
        wait_until(start, spec.delay);
        let class = if spec.interactive {
            "interactive"
        } else {
            "batch"
        };
        let mut options = vec!["--class", class];
        if let Some(mode) = scheduler.own_mode(&spec.name) {
            options.extend(["--mode", mode]);
        }
        ids[i] = daemon.submit_with(
            spec.procs,
            &output_file(dir, i),
            &spec.command(),
            &options,
            &spec.env(scheduler.waiting(&spec.name)),
        )?;
    }
    let records = daemon
        .wait_all(&ids, PATIENCE)
        .map_err(|error| anyhow!("{error:#}{}", outputs_tail(mix, dir)))?;
    let seconds = |us: i64| (us - start_us) as f64 / 1e6;
    let outcomes = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let record = records.iter().find(|r| r.id == *id).expect("waited for");
            JobOutcome {
                mode: Some(record.mode_shown()),
                mode_why: record.mode_why.clone(),
                ..outcome(
                    mix,
                    i,
                    dir,
                    seconds(record.submitted_us),
                    seconds(record.ended_us.unwrap_or(record.submitted_us)),
                )
            }
        })
        .collect();
    daemon.stop()?;
    Ok(outcomes)
}

/// Slurm on this machine (`bench/slurm/slurm-local`), started once for every mix.
pub struct Slurm {
    dir: PathBuf,
}

fn slurm_local() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/slurm/slurm-local"
    ))
}

impl Slurm {
    pub fn start() -> Result<Slurm> {
        let dir = PathBuf::from(format!("/tmp/cosched-bench-slurm-{}", std::process::id()));
        let status = Command::new(slurm_local())
            .arg("start")
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .status()
            .context("running bench/slurm/slurm-local")?;
        if !status.success() {
            bail!("bench/slurm/slurm-local start failed ({status})");
        }
        Ok(Slurm { dir })
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// Each job through `sbatch --wrap`; it ends when its wrapper writes its exit code (the
    /// file's modification time is the end).
    fn run(&self, mix: &Mix, dir: &Path) -> Result<Vec<JobOutcome>> {
        let start = Instant::now();
        let start_s = epoch_s();
        let mut order: Vec<usize> = (0..mix.jobs.len()).collect();
        order.sort_by_key(|&i| mix.jobs[i].delay);
        let mut submitted = vec![0.0; mix.jobs.len()];
        let done_file = |i: usize| dir.join(format!("job-{i}.rc"));
        for i in order {
            let spec = &mix.jobs[i];
            wait_until(start, spec.delay);
            let _ = std::fs::remove_file(done_file(i));
            let wrap = format!(
                "{}; echo $? > {}",
                spec.command().join(" "),
                done_file(i).display()
            );
            submitted[i] = start.elapsed().as_secs_f64();
            let out = Command::new("sbatch")
                .args(["-Q", "-c", &spec.procs.to_string(), "-o"])
                .arg(output_file(dir, i))
                .arg("--wrap")
                .arg(&wrap)
                .env("SLURM_CONF", self.conf())
                .envs(spec.env(Waiting::Spin))
                .output()
                .context("running sbatch")?;
            if !out.status.success() {
                bail!("sbatch: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
        }
        let mut outcomes = Vec::new();
        for (i, spec) in mix.jobs.iter().enumerate() {
            let file = done_file(i);
            let ended = loop {
                if let Ok(meta) = std::fs::metadata(&file) {
                    if meta.len() > 0 {
                        break meta.modified()?;
                    }
                }
                if start.elapsed() > PATIENCE {
                    bail!("Slurm job {} did not end within {PATIENCE:?}", spec.name);
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let code = std::fs::read_to_string(&file)?;
            if code.trim() != "0" {
                bail!("{} failed under Slurm (exit {})", spec.name, code.trim());
            }
            let ended_s = ended.duration_since(UNIX_EPOCH)?.as_secs_f64() - start_s;
            outcomes.push(outcome(mix, i, dir, submitted[i], ended_s));
        }
        Ok(outcomes)
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new(slurm_local())
            .arg("stop")
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_of_a_failed_plain_run_are_ended_with_it() {
        let child = Command::new("sleep").arg("600").spawn().unwrap();
        let pid = child.id() as i32;
        drop(Started(vec![(0, 0.0, child)]));
        // Reaped: the pid is no longer this process's child.
        // SAFETY: waitpid(2) with a null status pointer has no memory-safety preconditions.
        let reaped = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        assert_eq!(reaped, -1, "sleep {pid} is still this process's child");
        // SAFETY: kill(2) with signal 0 only checks that the process exists.
        assert_eq!(unsafe { libc::kill(pid, 0) }, -1, "sleep {pid} still runs");
    }
}
