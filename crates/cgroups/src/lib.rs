//! cosched-cgroups: the only code that stops, continues and places a job's processes.
//!
//! One [`Actuator`] trait, implemented by [`Cgroups`] (cgroup v2, cgroup v1, or signals for
//! stopping, chosen by [`Freezer`]) and by [`Fake`] for tests of logic. Every stop and continue
//! is read back from the kernel with a bounded wait: an `Ok` means the kernel confirmed it.
//! Facts behind the choices are in `../shared/notes/linux-mechanisms.md`.

pub mod affinity;
mod cgroup;
pub mod delegation;
mod fake;
mod layout;
pub mod members;
pub mod procfs;

pub use cgroup::{
    cpu_usage_of, release, usage, Cgroups, Freezer, GroupMaker, ReleaseStep, Usage, UsageFiles,
};
pub use delegation::Delegation;
pub use fake::{Fake, FakeCall};
pub use layout::Layout;

use cosched_core::Partition;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub type Pid = i32;

/// The CPU weight a job has when nobody favours it (cgroup v2's default).
pub const DEFAULT_WEIGHT: u32 = 100;

/// How long a stop or continue may take to be confirmed before it is an error. Measured here:
/// 0.1 ms median, 3 ms p99 for 256 processes (v2); 0.9 s with the controller not real-time.
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not {wanted} after {waited:?} (reads '{state}')")]
    NotConfirmed {
        path: PathBuf,
        wanted: &'static str,
        state: String,
        waited: Duration,
    },
    #[error("pid {pid} (job {job}): still {state} after {waited:?}, expected {wanted}")]
    SignalNotConfirmed {
        job: String,
        pid: Pid,
        wanted: &'static str,
        state: char,
        waited: Duration,
    },
    #[error("thread {tid}: cannot set its processors to {cpus}: {source}")]
    Affinity {
        tid: Pid,
        cpus: String,
        source: std::io::Error,
    },
    #[error("job {0} has no cgroup here (not created, or already removed)")]
    UnknownJob(String),
    #[error("job name '{0}' is not usable as a cgroup name (letters, digits, '-', '_', '.' only)")]
    BadJobName(String),
    #[error("{0}")]
    Unsupported(String),
}

pub type Result<T, E = CgroupError> = std::result::Result<T, E>;

/// A job's name in the cgroup trees (`job-42`): made from its id, or checked when given, so
/// no path an actuator builds from it can leave the parent.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobGroup(String);

impl JobGroup {
    /// The group of job `job`.
    pub fn of(job: u64) -> JobGroup {
        JobGroup(format!("job-{job}"))
    }

    /// A group by name (tests and benchmarks name theirs): letters, digits, '-', '_', '.'.
    pub fn named(name: &str) -> Result<JobGroup> {
        check_name(name)?;
        Ok(JobGroup(name.to_string()))
    }
}

impl std::ops::Deref for JobGroup {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::path::Path> for JobGroup {
    fn as_ref(&self) -> &std::path::Path {
        self.0.as_ref()
    }
}

impl std::fmt::Display for JobGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an actuator does to one job's processes. Jobs are named by the caller (`job-42`).
pub trait Actuator {
    /// A one-line description: which mechanism does what.
    fn describe(&self) -> String;
    /// Makes the job's (empty) groups.
    fn create(&mut self, job: &JobGroup) -> Result<()>;
    /// Whether the job's groups were made (or found) by this actuator and not removed since.
    fn knows(&self, job: &JobGroup) -> bool;
    /// What makes a job's groups from another thread, ahead of `create` (which then finds
    /// them made), if making them can wait on others: a directory made in a cgroup tree takes
    /// the kernel's cgroup lock, which a process joining any cgroup holds through an RCU
    /// grace period (milliseconds), and a slot clock must not wait on it.
    fn maker(&self) -> Option<GroupMaker> {
        None
    }
    /// Moves a process into the job; its future children follow.
    fn add(&mut self, job: &JobGroup, pid: Pid) -> Result<()>;
    /// Every process of the job.
    fn pids(&self, job: &JobGroup) -> Result<Vec<Pid>>;
    /// Restricts the job to these CPUs of this machine.
    fn set_cpus(&mut self, job: &JobGroup, cpus: &Partition) -> Result<()>;
    /// Sets the job's CPU weight on the cgroup v2 scale, 1 to 10,000 (100 is the default).
    fn set_weight(&mut self, job: &JobGroup, weight: u32) -> Result<()>;
    /// Caps the job's tasks (processes and threads) at `most`: a fork or thread past it fails.
    /// Thousands of a job's tasks would make its every freeze and thaw long.
    fn limit_tasks(&mut self, job: &JobGroup, most: u64) -> Result<()>;
    /// How many more tasks the job may take under that cap (`None`: no cap). Moving a process
    /// in is not held to the cap by the kernel (only forks are): a join asks first.
    fn task_room(&self, job: &JobGroup) -> Result<Option<u64>>;
    /// Stops every process of the job; returns once the kernel confirms it, with the wait.
    fn freeze(&mut self, job: &JobGroup) -> Result<Duration> {
        let asked = Instant::now();
        self.ask_freeze(job)?;
        self.frozen_by(job, None)?;
        Ok(asked.elapsed())
    }
    /// Whether a process that joins a stopped job stops there (a freezer cgroup) rather than
    /// run until it is stopped itself (SIGSTOP reaches only the processes listed as it is sent).
    fn stops_joiners(&self) -> bool {
        true
    }
    /// Asks the kernel to stop every process of the job and returns at once (`frozen_by`
    /// waits for the confirmation). A running task stops within microseconds; one waiting for
    /// a processor stops when it next gets one, before it runs any of its own code.
    fn ask_freeze(&mut self, job: &JobGroup) -> Result<()>;
    /// Waits for the freeze `ask_freeze` asked to be confirmed, until `until`: whether it
    /// was. With no `until`, not confirmed within [`CONFIRM_TIMEOUT`] is an error.
    fn frozen_by(&mut self, job: &JobGroup, until: Option<Instant>) -> Result<bool>;
    /// Lets every process run again; returns once the kernel confirms it (or a few
    /// milliseconds later: a process a signal stopped may stay so by its own job's doing),
    /// with the wait.
    fn thaw(&mut self, job: &JobGroup) -> Result<Duration>;
    /// Asks every process of the job to end (SIGTERM), none but the job's: a process that
    /// took the pid of one of them since it was listed is never signalled.
    fn terminate(&mut self, job: &JobGroup) -> Result<()>;
    /// Kills every process of the job (continuing them first, so a stopped job dies too).
    fn kill(&mut self, job: &JobGroup) -> Result<()>;
    /// Removes the job's groups. They must be empty; the job is continued first regardless,
    /// so an error never leaves it stopped.
    fn remove(&mut self, job: &JobGroup) -> Result<()>;
    /// The `cgroup.procs` files a new process writes itself into (before it executes the job),
    /// so that nothing it starts can escape the job by forking early.
    fn join_files(&self, job: &JobGroup) -> Result<Vec<PathBuf>>;
    /// What lets the job run freely again, as steps another process can take without this
    /// actuator ([`release`]): the job's supervisor takes them when the daemon dies.
    fn release_steps(&self, job: &JobGroup) -> Result<Vec<ReleaseStep>>;
    /// CPU time used so far by every process of the job.
    fn cpu_usage(&self, job: &JobGroup) -> Result<Duration>;
    /// Holds the job to `bytes` of memory, swap included (past it the kernel reclaims, then
    /// its OOM killer kills in the job). Set before the job's processes start.
    fn limit_memory(&mut self, job: &JobGroup, bytes: u64) -> Result<()>;
    /// Where the job's CPU time, peak memory and OOM kills are read as it ends ([`usage`]).
    fn usage_files(&self, job: &JobGroup) -> Result<UsageFiles>;
    /// Pins the job's working threads (running or frozen) one per processor of its cpuset,
    /// moving as few as it can ([`affinity::spread_plan`]): the kernel may leave two busy
    /// threads stacked on one processor for tens of milliseconds after a weight change or a
    /// thaw. Pins last until `unpin` or a cpuset change, so an implementation may skip calls
    /// soon after one that looked. Says whether the working threads are pinned (now, or by a
    /// look still trusted: not for a frozen job that never ran, whose threads have no CPU
    /// time to tell the workers by; call again once it runs) and whether it read them.
    fn spread(&mut self, job: &JobGroup) -> Result<Spread>;
    /// Lets every thread of the job use every processor of its cpuset again.
    fn unpin(&mut self, job: &JobGroup) -> Result<()>;
}

/// What [`Actuator::spread`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    /// The job's working threads are pinned (now, or by a look still trusted).
    pub pinned: bool,
    /// Its threads were read now (a look costs in proportion to them: milliseconds for a
    /// thousand processes), not trusted from a recent look.
    pub looked: bool,
}

fn check_name(job: &str) -> Result<()> {
    let ok = !job.is_empty()
        && job != "."
        && job != ".."
        && job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(CgroupError::BadJobName(job.to_string()))
    }
}

/// Makes a child die (SIGKILL) when the thread that spawns it exits: for test and benchmark
/// workloads, so a run that panics or is killed leaves no spinning process behind. (Jobs must
/// not use it: a job outlives its daemon.)
pub fn die_with_parent(command: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })
    }
}
