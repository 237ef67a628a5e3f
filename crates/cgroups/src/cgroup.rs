//! The real actuator: a cgroup per job under one cosched parent, in every hierarchy it uses.
//!
//! Stopping uses the cgroup v2 freezer (`cgroup.freeze`, confirmed in `cgroup.events`), the
//! v1 freezer (`freezer.state`, confirmed when it reads FROZEN), or SIGSTOP/SIGCONT to every
//! process (confirmed in `/proc/PID/stat`). Processors and weights use whichever tree has the
//! controller: on a hybrid machine the v2 freezer works beside the v1 cpuset and cpu trees.

use crate::affinity;
use crate::layout::Layout;
use crate::members::{self, signal_listed};
use crate::procfs;
use crate::{check_name, Actuator, CgroupError, JobGroup, Pid, Result, Spread, CONFIRM_TIMEOUT};
use cosched_core::Partition;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `spread` looks at a job's threads again after this, then after twice as long, and so on up
/// to [`SPREAD_LONGEST_WAIT`].
const SPREAD_FIRST_WAIT: Duration = Duration::from_millis(10);
const SPREAD_LONGEST_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct SpreadSeen {
    due: Instant,
    wait: Duration,
    pids: Vec<Pid>,
    /// Whether that look found working threads to pin (a job of sleepers has none).
    pinned: bool,
    /// A first look that found none: the job may be frozen and never have run, so its next
    /// thaw makes the next look due, once (a job of sleepers stays on the doubling waits).
    look_at_thaw: bool,
}

/// One step of letting a job run freely, taken by [`release`] in any process (the job's
/// supervisor keeps these for when the daemon dies).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReleaseStep {
    /// Writes 0 to `cgroup.freeze` in `dir` and waits for `cgroup.events` to say so.
    ThawV2 { dir: PathBuf },
    /// Writes THAWED to `freezer.state` in `dir` and waits for it to read so.
    ThawV1 { dir: PathBuf },
    /// Sends SIGCONT to every process listed in `procs` (a `cgroup.procs` file).
    ContinueAll { procs: PathBuf },
    /// Writes `value` to `file` (the default CPU weight back).
    Write { file: PathBuf, value: String },
    /// Lets every thread of the processes listed in `procs` use its whole cpuset again.
    Unpin { procs: PathBuf },
}

/// Takes every step, even after one fails (a job must never stay stopped because its weight
/// could not be reset); returns the first error.
pub fn release(steps: &[ReleaseStep]) -> Result<()> {
    let mut first_error = None;
    for step in steps {
        let outcome = match step {
            ReleaseStep::ThawV2 { dir } => {
                ask_v2(dir, false).and_then(|()| confirm_v2(dir, false, None).map(|_| ()))
            }
            ReleaseStep::ThawV1 { dir } => {
                ask_v1(dir, false).and_then(|()| confirm_v1_thawed(dir, None).map(|_| ()))
            }
            ReleaseStep::ContinueAll { procs } => signal_listed(procs, libc::SIGCONT).map(|_| ()),
            ReleaseStep::Write { file, value } => write(file, value),
            ReleaseStep::Unpin { procs } => {
                let mut list = members::listing(procs);
                list().and_then(|pids| affinity::unpin(&pids, list))
            }
        };
        if let Err(error) = outcome {
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freezer {
    /// `cgroup.freeze` in the v2 tree.
    V2,
    /// `freezer.state` in the v1 freezer tree.
    V1,
    /// SIGSTOP and SIGCONT to every process of the job.
    Signals,
}

impl fmt::Display for Freezer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Freezer::V2 => "cgroup v2 freezer",
            Freezer::V1 => "cgroup v1 freezer",
            Freezer::Signals => "SIGSTOP/SIGCONT",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tree {
    V2,
    V1,
}

#[derive(Debug)]
pub struct Cgroups {
    freezer: Freezer,
    /// The cosched parent in the v2 tree and in each v1 tree used.
    v2: Option<PathBuf>,
    v1_freezer: Option<PathBuf>,
    v1_cpuset: Option<PathBuf>,
    v1_cpu: Option<PathBuf>,
    v1_pids: Option<PathBuf>,
    v1_memory: Option<PathBuf>,
    v1_cpuacct: Option<PathBuf>,
    cpuset: Option<Tree>,
    weight: Option<Tree>,
    /// Where a job's task limit is set, if any tree has the pids controller.
    tasks: Option<Tree>,
    /// Where a job's memory limit is set and its peak and OOM kills read, if anywhere.
    memory: Option<Tree>,
    jobs: BTreeSet<String>,
    /// Per job, what `spread` last saw: when it may look again, the wait after that, and the
    /// job's processes (a new one means a look at once).
    spread_due: BTreeMap<String, SpreadSeen>,
    /// Per job frozen with the v1 freezer and not yet seen FROZEN, when its freeze is next
    /// asked again ([`confirm_v1_frozen`]): timed from the ask, not from each wait, so that waits
    /// cut short (a clock that looks once per boundary) ask again all the same.
    v1_asks: BTreeMap<String, AskAgain>,
    /// An empty v1 cgroup kept frozen while we live: the first v1 freeze flips a kernel static
    /// key, which otherwise costs every freeze about 65 µs more (measured, notes).
    v1_keepalive: Option<PathBuf>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// cgroup v2's highest `cpu.weight` (v1's `cpu.shares` go higher; cosched keeps to the same
/// range on both).
const MOST_WEIGHT: u32 = 10_000;

fn write(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value).map_err(io_err(path))
}

pub(crate) fn read(path: &Path) -> Result<String> {
    procfs::read_kernel_file(path).map_err(io_err(path))
}

/// The pids in a `cgroup.procs` file's text.
pub(crate) fn parse_pids(text: &str) -> Vec<Pid> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn mkdir(path: &Path) -> Result<()> {
    match fs::create_dir(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(io_err(path)(e)),
        _ => Ok(()),
    }
}

/// Re-reads `path` until `done` accepts it (true), or until `until` passes (false): change
/// notifications on `cgroup.events` are rate-limited (one per ~12 ms), re-reading is not. With
/// no `until`, not done within [`CONFIRM_TIMEOUT`] is an error.
/// `unconfirmed` is called after each read that is not yet `done`, with the time waited.
fn confirm(
    path: &Path,
    wanted: &'static str,
    done: impl Fn(&str) -> bool,
    until: Option<Instant>,
    mut unconfirmed: impl FnMut(Duration) -> Result<()>,
) -> Result<bool> {
    let mut text = String::new();
    let started = Instant::now();
    let polled = poll(started, until, || {
        text = read(path)?;
        let done = done(&text);
        if !done {
            unconfirmed(started.elapsed())?;
        }
        Ok(done)
    })?;
    match polled {
        Polled::TimedOut(waited) => Err(CgroupError::NotConfirmed {
            path: path.to_path_buf(),
            wanted,
            state: text.trim().replace('\n', " "),
            waited,
        }),
        polled => Ok(polled == Polled::Done),
    }
}

#[derive(PartialEq, Eq)]
enum Polled {
    Done,
    /// `until` passed first.
    Over,
    /// No `until`, and [`CONFIRM_TIMEOUT`] passed since `started`, after this long.
    TimedOut(Duration),
}

/// Calls `done` until it says so, sleeping between calls ([`Backoff`]), for as long as `until`
/// or the confirmation bound from `started` allows.
fn poll(
    started: Instant,
    until: Option<Instant>,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<Polled> {
    let mut backoff = Backoff::default();
    loop {
        if done()? {
            return Ok(Polled::Done);
        }
        let waited = started.elapsed();
        match until {
            Some(until) if Instant::now() >= until => return Ok(Polled::Over),
            None if waited > CONFIRM_TIMEOUT => return Ok(Polled::TimedOut(waited)),
            _ => backoff.pause(until),
        }
    }
}

/// CPU time used so far by every process of the cgroup v2 group at `dir` (`cpu.stat`, which
/// v2 keeps whatever controllers are enabled).
pub fn cpu_usage_of(dir: &Path) -> Result<Duration> {
    keyed(&dir.join("cpu.stat"), "usage_usec").map(Duration::from_micros)
}

fn invalid(path: &Path, why: String) -> CgroupError {
    CgroupError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
    }
}

/// The number on the `key value` line of a flat-keyed file (`cpu.stat`, `memory.events`).
fn keyed(path: &Path, key: &str) -> Result<u64> {
    read(path)?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| invalid(path, format!("no '{key}' line with a number")))
}

/// The number a single-value file holds (`memory.peak`, `cpuacct.usage`).
fn number(path: &Path) -> Result<u64> {
    let text = read(path)?;
    text.trim()
        .parse()
        .map_err(|_| invalid(path, format!("'{}' is not a number", text.trim())))
}

/// Where a job's figures are read as it ends, each a job's directory in the tree that keeps
/// them: the supervisor, which has no actuator, reads them (as it takes [`ReleaseStep`]s).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UsageFiles {
    /// A v2 group: `cpu.stat` (`usage_usec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_v2: Option<PathBuf>,
    /// A v1 cpuacct group: `cpuacct.usage` (ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_v1: Option<PathBuf>,
    /// A v2 group with the memory controller: `memory.peak`, `memory.events` (`oom_kill`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_v2: Option<PathBuf>,
    /// A v1 memory group: `memory.max_usage_in_bytes`, `memory.oom_control` (`oom_kill`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_v1: Option<PathBuf>,
}

/// What a job's cgroup counted; `None` where this machine keeps no such figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_us: Option<u64>,
    /// The most memory the job held at once: v1's `memory.max_usage_in_bytes`, v2's
    /// `memory.peak` (Linux 5.19 on; before it, none: nothing samples `memory.current`).
    pub peak_memory_bytes: Option<u64>,
    /// The job's processes the kernel's OOM killer killed (at the job's memory limit).
    pub oom_kills: Option<u64>,
}

/// Reads what `files` name. A figure that cannot be read stays `None` (the others are still
/// read: a job's end must be recorded whatever its accounting); the first error comes back.
pub fn usage(files: &UsageFiles) -> (Usage, Option<CgroupError>) {
    let mut first_error = None;
    let mut take = |read: Result<u64>| match read {
        Ok(value) => Some(value),
        Err(error) => {
            first_error.get_or_insert(error);
            None
        }
    };
    let mut usage = Usage::default();
    if let Some(dir) = &files.cpu_v2 {
        usage.cpu_us = take(keyed(&dir.join("cpu.stat"), "usage_usec"));
    } else if let Some(dir) = &files.cpu_v1 {
        usage.cpu_us = take(number(&dir.join("cpuacct.usage")).map(|ns| ns / 1000));
    }
    if let Some(dir) = &files.memory_v2 {
        let peak = dir.join("memory.peak");
        if peak.exists() {
            usage.peak_memory_bytes = take(number(&peak));
        }
        usage.oom_kills = take(keyed(&dir.join("memory.events"), "oom_kill"));
    } else if let Some(dir) = &files.memory_v1 {
        usage.peak_memory_bytes = take(number(&dir.join("memory.max_usage_in_bytes")));
        usage.oom_kills = take(keyed(&dir.join("memory.oom_control"), "oom_kill"));
    }
    (usage, first_error)
}

/// Asks the v2 freezer of the group at `dir` to freeze or thaw it.
fn ask_v2(dir: &Path, frozen: bool) -> Result<()> {
    write(&dir.join("cgroup.freeze"), if frozen { "1" } else { "0" })
}

/// Waits for what `ask_v2` asked, until `until` (see `confirm`).
fn confirm_v2(dir: &Path, frozen: bool, until: Option<Instant>) -> Result<bool> {
    let wanted = if frozen { "frozen 1" } else { "frozen 0" };
    let events = dir.join("cgroup.events");
    confirm(
        &events,
        wanted,
        |t| t.lines().any(|l| l.trim() == wanted),
        until,
        |_| Ok(()),
    )
}

/// Asks the v1 freezer of the group at `dir` to freeze or thaw it.
fn ask_v1(dir: &Path, frozen: bool) -> Result<()> {
    let state = if frozen { "FROZEN" } else { "THAWED" };
    write(&dir.join("freezer.state"), state)
}

/// A v1 freeze not confirmed this long after it was asked (or last asked again) is asked
/// again, and again after twice as long, and so on.
const V1_ASK_AGAIN_AFTER: Duration = Duration::from_millis(5);

/// When a v1 freeze not yet confirmed is next asked again.
#[derive(Debug)]
struct AskAgain {
    at: Instant,
    interval: Duration,
}

impl AskAgain {
    fn after_ask() -> AskAgain {
        AskAgain {
            at: Instant::now() + V1_ASK_AGAIN_AFTER,
            interval: V1_ASK_AGAIN_AFTER,
        }
    }
}

/// Waits for a v1 freeze, until `until` (see `confirm`). A v1 freeze can miss a task forked
/// as it is asked and then read FREEZING for good: a shell forking `true` in a loop stayed
/// unfrozen until thawed every few dozen freezes, and one user's such job held the slot clock
/// for the whole confirmation timeout at its boundaries. Asked again (when `again` says), the
/// kernel goes over the group's tasks again, and every such freeze was confirmed within a few
/// milliseconds (`a_job_that_forks_without_pause_is_frozen_every_time` fails without it). The
/// v2 freezer showed no such miss.
fn confirm_v1_frozen(dir: &Path, until: Option<Instant>, again: &mut AskAgain) -> Result<bool> {
    confirm(
        &dir.join("freezer.state"),
        "FROZEN",
        |t| t.trim() == "FROZEN",
        until,
        |_| {
            if Instant::now() >= again.at {
                ask_v1(dir, true)?;
                again.interval *= 2;
                again.at = Instant::now() + again.interval;
            }
            Ok(())
        },
    )
}

/// Waits for a v1 thaw, until `until` (see `confirm`).
fn confirm_v1_thawed(dir: &Path, until: Option<Instant>) -> Result<bool> {
    confirm(
        &dir.join("freezer.state"),
        "THAWED",
        |t| t.trim() == "THAWED",
        until,
        |_| Ok(()),
    )
}

/// How often, at most, the signals freezer stops again a job whose stop is awaited and a
/// process of which was found running (continued by its own job or owner).
const SIGNALS_STOP_AGAIN: Duration = Duration::from_millis(1);

/// How long a thaw waits for its confirmation. The freezer cgroups confirm at once; with the
/// signals freezer a process may stay stopped after SIGCONT by its own job's doing (a SIGSTOP
/// of its own), and a thaw waited for it the whole confirmation timeout on the slot clock.
const THAW_PATIENCE: Duration = Duration::from_millis(5);

/// Pauses between confirmation reads: 10 µs, doubling up to 50 µs. Sleep, never spin: the
/// controller runs at real-time priority, and a task it stops may need this very CPU to reach
/// the freezer (a spinning raw loop measured 10-26 ms medians and ~1 s p99, the real-time
/// throttling period). Each read also costs ~20-30 µs of that CPU: with a fixed 10 µs pause
/// the daemon's freezes of two 2-process jobs took 1-12 ms; backing off to 50 µs, 0.24 ms
/// median (tried 50/100/200 µs caps: 241/368/397 µs median switch).
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_micros(10))
    }
}

impl Backoff {
    /// Sleeps the next pause, never past `until`.
    fn pause(&mut self, until: Option<Instant>) {
        let left = until.map_or(self.0, |u| u.saturating_duration_since(Instant::now()));
        std::thread::sleep(self.0.min(left));
        self.0 = (self.0 * 2).min(Duration::from_micros(50));
    }
}

impl Cgroups {
    /// Opens (creating as needed) the parent cgroup `parent` in every hierarchy the chosen
    /// freezer, the cpuset and the cpu weight need. `freezer: None` picks the best available:
    /// the v2 freezer, else v1, else signals.
    pub fn open(layout: &Layout, parent: &str, freezer: Option<Freezer>) -> Result<Cgroups> {
        check_name(parent)?;
        let controllers = layout.v2_controllers();
        let has = |c: &str| controllers.iter().any(|x| x == c);
        let v2 = match &layout.v2 {
            Some(root) => {
                let dir = root.join(parent);
                mkdir(&dir)?;
                Some(dir)
            }
            None => None,
        };
        let v2_freeze = v2
            .as_ref()
            .is_some_and(|d| d.join("cgroup.freeze").exists());
        let freezer = match freezer {
            Some(Freezer::V2) if !v2_freeze => {
                return Err(CgroupError::Unsupported(
                    "no cgroup v2 freezer here (no cgroup2 mount, or a kernel before 5.2)".into(),
                ))
            }
            Some(Freezer::V1) if layout.v1_freezer.is_none() => {
                return Err(CgroupError::Unsupported(
                    "no cgroup v1 freezer hierarchy is mounted".into(),
                ))
            }
            Some(chosen) => chosen,
            // The v1 freezer first where both are: a write to `cgroup.freeze` takes the
            // kernel's cgroup mutex, which a process joining any cgroup holds while it waits
            // for an RCU grace period (4-12 ms here), so a job's start held the clock's next
            // freeze or thaw that long; `freezer.state` takes only the freezer's own lock
            // (results/freezer-join.json). On pure v2, `favordynmods` on the mount shortens
            // those waits (`daemon --check` says).
            None if layout.v1_freezer.is_some() => Freezer::V1,
            None if v2_freeze => Freezer::V2,
            None => Freezer::Signals,
        };
        let cpuset = if has("cpuset") {
            Some(Tree::V2)
        } else {
            layout.v1_cpuset.as_ref().map(|_| Tree::V1)
        };
        let weight = if has("cpu") {
            Some(Tree::V2)
        } else {
            layout.v1_cpu.as_ref().map(|_| Tree::V1)
        };
        let tasks = if has("pids") {
            Some(Tree::V2)
        } else {
            layout.v1_pids.as_ref().map(|_| Tree::V1)
        };
        let memory = if has("memory") {
            Some(Tree::V2)
        } else {
            layout.v1_memory.as_ref().map(|_| Tree::V1)
        };
        if let Some(dir) = &v2 {
            // Pass the v2 controllers we use down to the jobs (root, then our parent).
            let wanted: Vec<&str> = [
                (cpuset, "cpuset"),
                (weight, "cpu"),
                (tasks, "pids"),
                (memory, "memory"),
            ]
            .into_iter()
            .filter(|(tree, _)| *tree == Some(Tree::V2))
            .map(|(_, name)| name)
            .collect();
            for name in wanted {
                let enable = format!("+{name}");
                for level in [dir.parent().unwrap_or(dir), dir.as_path()] {
                    write(&level.join("cgroup.subtree_control"), &enable)?;
                }
            }
        }
        let v1_dir = |root: &Option<PathBuf>, used: bool| -> Result<Option<PathBuf>> {
            match root {
                Some(root) if used => {
                    let dir = root.join(parent);
                    mkdir(&dir)?;
                    Ok(Some(dir))
                }
                _ => Ok(None),
            }
        };
        let v1_freezer = v1_dir(&layout.v1_freezer, freezer == Freezer::V1)?;
        let v1_cpuset = v1_dir(&layout.v1_cpuset, cpuset == Some(Tree::V1))?;
        let v1_cpu = v1_dir(&layout.v1_cpu, weight == Some(Tree::V1))?;
        let v1_pids = v1_dir(&layout.v1_pids, tasks == Some(Tree::V1))?;
        let v1_memory = v1_dir(&layout.v1_memory, memory == Some(Tree::V1))?;
        // Every v2 group keeps `cpu.stat`: cpuacct only counts where there is no v2 tree.
        let v1_cpuacct = v1_dir(&layout.v1_cpuacct, v2.is_none())?;
        if let Some(dir) = &v1_cpuset {
            // A v1 cpuset takes no task until it has processors and memory nodes.
            inherit_cpuset(dir)?;
        }
        if v2.is_none()
            && v1_freezer.is_none()
            && v1_cpuset.is_none()
            && v1_cpu.is_none()
            && v1_pids.is_none()
            && v1_memory.is_none()
            && v1_cpuacct.is_none()
        {
            return Err(CgroupError::Unsupported(
                "no cgroup hierarchy is mounted to hold a job's processes".into(),
            ));
        }
        let mut cgroups = Cgroups {
            freezer,
            v2,
            v1_freezer,
            v1_cpuset,
            v1_cpu,
            v1_pids,
            v1_memory,
            v1_cpuacct,
            cpuset,
            weight,
            tasks,
            memory,
            jobs: BTreeSet::new(),
            spread_due: BTreeMap::new(),
            v1_asks: BTreeMap::new(),
            v1_keepalive: None,
        };
        if let Some(dir) = &cgroups.v1_freezer {
            let keepalive = dir.join("keepalive");
            mkdir(&keepalive)?;
            write(&keepalive.join("freezer.state"), "FROZEN")?;
            cgroups.v1_keepalive = Some(keepalive);
        }
        Ok(cgroups)
    }

    pub fn freezer(&self) -> Freezer {
        self.freezer
    }

    /// The cosched parent in each hierarchy used, v2 first, each once (v1 controllers may
    /// share a mount: `cpu,cpuacct`).
    fn parents(&self) -> Vec<&PathBuf> {
        let mut parents: Vec<&PathBuf> = Vec::with_capacity(7);
        for parent in [
            &self.v2,
            &self.v1_freezer,
            &self.v1_cpuset,
            &self.v1_cpu,
            &self.v1_pids,
            &self.v1_memory,
            &self.v1_cpuacct,
        ]
        .into_iter()
        .flatten()
        {
            if !parents.contains(&parent) {
                parents.push(parent);
            }
        }
        parents
    }

    /// The job groups already under the parent (an earlier daemon's), each with the number of
    /// processes it holds, in name order.
    pub fn existing_jobs(&self) -> Result<Vec<(String, usize)>> {
        let parent = self
            .parents()
            .into_iter()
            .next()
            .expect("open() ensures one hierarchy");
        let mut jobs = Vec::new();
        for entry in fs::read_dir(parent).map_err(io_err(parent))? {
            let path = entry.map_err(io_err(parent))?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if !path.is_dir() || Some(&path) == self.v1_keepalive.as_ref() {
                continue;
            }
            let procs = parse_pids(&read(&path.join("cgroup.procs"))?).len();
            jobs.push((name.to_string(), procs));
        }
        jobs.sort();
        Ok(jobs)
    }

    fn group_maker(&self) -> GroupMaker {
        GroupMaker {
            parents: self.parents().into_iter().cloned().collect(),
            v1_cpuset: self.v1_cpuset.clone(),
        }
    }

    /// The job's directory in every hierarchy in use, v2 first.
    fn dirs(&self, job: &JobGroup) -> impl Iterator<Item = PathBuf> + '_ {
        let job = job.to_string();
        self.parents()
            .into_iter()
            .map(move |parent| parent.join(&job))
    }

    /// The job's directory in the tree that holds its cpuset, if any tree does.
    fn cpuset_dir(&self, job: &JobGroup) -> Option<PathBuf> {
        self.cpuset_parent().map(|parent| parent.join(job))
    }

    fn cpuset_parent(&self) -> Option<&PathBuf> {
        match self.cpuset {
            Some(Tree::V2) => self.v2.as_ref(),
            Some(Tree::V1) => self.v1_cpuset.as_ref(),
            None => None,
        }
    }

    /// Keeps every job under this parent on `cpus` (a cluster node's processors) in every
    /// mode, also those that place no job on processors of its own (`local`): without it a
    /// node's jobs would run on another node's processors of the same machine.
    pub fn confine(&self, cpus: &Partition) -> Result<()> {
        let parent = self.cpuset_parent().ok_or_else(|| {
            CgroupError::Unsupported("no cpuset controller on this machine".into())
        })?;
        write(&parent.join("cpuset.cpus"), &cpus.to_string())
    }

    /// The processors the job may use: its effective cpuset, or every online one.
    fn usable_cpus(&self, job: &JobGroup) -> Result<Partition> {
        self.known(job)?;
        let file = match self.cpuset {
            Some(Tree::V2) => self
                .cpuset_dir(job)
                .map(|d| d.join("cpuset.cpus.effective")),
            Some(Tree::V1) => self
                .cpuset_dir(job)
                .map(|d| d.join("cpuset.effective_cpus")),
            None => None,
        }
        .unwrap_or_else(|| PathBuf::from("/sys/devices/system/cpu/online"));
        let text = read(&file)?;
        Partition::from_kernel_list(&text).map_err(|e| CgroupError::Io {
            path: file,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    fn known(&self, job: &JobGroup) -> Result<()> {
        if self.jobs.contains(&**job) {
            Ok(())
        } else {
            Err(CgroupError::UnknownJob(job.to_string()))
        }
    }

    /// The file `pids` reads: the job's `cgroup.procs` in its first hierarchy.
    fn procs(&self, job: &JobGroup) -> Result<PathBuf> {
        self.known(job)?;
        let dir = self.dirs(job).next().expect("open() ensures one hierarchy");
        Ok(dir.join("cgroup.procs"))
    }

    fn signal_all(&self, job: &JobGroup, sig: libc::c_int) -> Result<()> {
        signal_listed(&self.procs(job)?, sig).map(|_| ())
    }

    /// Waits until every process of the job is (or is no longer) stopped by a signal, or until
    /// `until` (false); with no `until`, an error past [`CONFIRM_TIMEOUT`]. A process held by
    /// its tracer (`t`) counts as continued: SIGCONT does not end a tracer's stop, and a thaw
    /// that waited for it held the slot clock. A process found running while a stop is awaited
    /// was continued by its own job or owner (SIGCONT, a tracer): the job is stopped again, at
    /// most every [`SIGNALS_STOP_AGAIN`].
    fn confirm_signals(
        &self,
        job: &JobGroup,
        stopped: bool,
        until: Option<Instant>,
    ) -> Result<bool> {
        let started = Instant::now();
        let wanted = if stopped { "stopped" } else { "running" };
        let mut stopped_again: Option<Instant> = None;
        for pid in self.pids(job)? {
            let mut state = '?';
            let polled = poll(started, until, || {
                // A process that has exited has nothing left to stop or continue.
                let done = procfs::stat(pid).map_or(true, |stat| {
                    state = stat.state;
                    match stopped {
                        true => matches!(state, 'T' | 't' | 'Z' | 'X'),
                        false => state != 'T',
                    }
                });
                let due = stopped_again.is_none_or(|at| at.elapsed() >= SIGNALS_STOP_AGAIN);
                if stopped && !done && due {
                    self.signal_all(job, libc::SIGSTOP)?;
                    stopped_again = Some(Instant::now());
                }
                Ok(done)
            })?;
            match polled {
                Polled::Done => {}
                Polled::Over => return Ok(false),
                Polled::TimedOut(waited) => {
                    return Err(CgroupError::SignalNotConfirmed {
                        job: job.to_string(),
                        pid,
                        wanted,
                        state,
                        waited,
                    })
                }
            }
        }
        Ok(true)
    }

    /// Asks the chosen mechanism to freeze or thaw a job, without waiting.
    fn ask_frozen(&mut self, job: &JobGroup, frozen: bool) -> Result<()> {
        self.known(job)?;
        match self.freezer {
            Freezer::V2 => ask_v2(&self.v2_dir(job), frozen),
            Freezer::V1 => {
                match frozen {
                    true => self.v1_asks.insert(job.to_string(), AskAgain::after_ask()),
                    false => self.v1_asks.remove(&**job),
                };
                ask_v1(&self.v1_freezer_dir(job), frozen)
            }
            Freezer::Signals => {
                self.signal_all(job, if frozen { libc::SIGSTOP } else { libc::SIGCONT })
            }
        }
    }

    /// Waits for the kernel to confirm what `ask_frozen` asked, until `until` (see `confirm`).
    fn confirm_frozen(
        &mut self,
        job: &JobGroup,
        frozen: bool,
        until: Option<Instant>,
    ) -> Result<bool> {
        self.known(job)?;
        match self.freezer {
            Freezer::V2 => confirm_v2(&self.v2_dir(job), frozen, until),
            Freezer::V1 if frozen => {
                let dir = self.v1_freezer_dir(job);
                let again = (self.v1_asks)
                    .entry(job.to_string())
                    .or_insert_with(AskAgain::after_ask);
                let confirmed = confirm_v1_frozen(&dir, until, again)?;
                if confirmed {
                    self.v1_asks.remove(&**job);
                }
                Ok(confirmed)
            }
            Freezer::V1 => confirm_v1_thawed(&self.v1_freezer_dir(job), until),
            Freezer::Signals => self.confirm_signals(job, frozen, until),
        }
    }

    /// The job's group in the tree with the pids controller, if there is one.
    fn tasks_dir(&self, job: &JobGroup) -> Result<Option<PathBuf>> {
        self.known(job)?;
        let parent = match self.tasks {
            Some(Tree::V2) => self.v2.as_ref(),
            Some(Tree::V1) => self.v1_pids.as_ref(),
            None => None,
        };
        Ok(parent.map(|parent| parent.join(job)))
    }

    fn v2_dir(&self, job: &JobGroup) -> PathBuf {
        self.v2.as_ref().expect("v2 freezer has a v2 dir").join(job)
    }

    fn v1_freezer_dir(&self, job: &JobGroup) -> PathBuf {
        self.v1_freezer
            .as_ref()
            .expect("v1 freezer has a v1 dir")
            .join(job)
    }

    /// The file and value that give the group `name` under the parent (empty: the parent
    /// itself) `weight`, on cgroup v2's scale and within its bounds (1 to 10,000), in the tree
    /// with the cpu controller.
    fn weight_in(&self, name: &str, weight: u32) -> Result<(PathBuf, String)> {
        let weight = weight.clamp(1, MOST_WEIGHT);
        match (self.weight, &self.v2, &self.v1_cpu) {
            (Some(Tree::V2), Some(dir), _) => {
                Ok((dir.join(name).join("cpu.weight"), weight.to_string()))
            }
            (Some(Tree::V1), _, Some(dir)) => {
                // v1 shares: 1024 is the default weight 100.
                let shares = (u64::from(weight) * 1024 / 100).clamp(2, 262_144);
                Ok((dir.join(name).join("cpu.shares"), shares.to_string()))
            }
            _ => Err(CgroupError::Unsupported(
                "no cpu controller on this machine".into(),
            )),
        }
    }

    /// Gives the jobs together, against the processes outside cosched, the weight of
    /// `per_processor` such processes on each of `processors` (the parent's weight; 0: the
    /// kernel's default, one process shared over every processor the jobs run on). A thawed
    /// rank whose processor a process outside took meanwhile gets it back sooner the more it
    /// weighs. Returns the weight set, on cgroup v2's scale ([`crate::DEFAULT_WEIGHT`] is one
    /// process): at most 10,000, the kernel's bound.
    pub fn weigh_jobs(&self, per_processor: u32, processors: u32) -> Result<u32> {
        let one = u64::from(crate::DEFAULT_WEIGHT);
        let wanted = match per_processor {
            0 => one,
            n => u64::from(n) * u64::from(processors.max(1)) * one,
        };
        let weight = wanted.min(u64::from(MOST_WEIGHT)) as u32;
        let (file, value) = self.weight_in("", weight)?;
        write(&file, &value)?;
        Ok(weight)
    }

    /// Removes the parent cgroups (which must hold no job) and the v1 keep-alive group.
    pub fn close(mut self) -> Result<()> {
        self.release_keepalive()?;
        for parent in self.parents() {
            match fs::remove_dir(parent) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_err(parent)(e))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn release_keepalive(&mut self) -> Result<()> {
        if let Some(keepalive) = self.v1_keepalive.take() {
            write(&keepalive.join("freezer.state"), "THAWED")?;
            fs::remove_dir(&keepalive).map_err(io_err(&keepalive))?;
        }
        Ok(())
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        let _ = self.release_keepalive();
    }
}

/// Makes a job's groups in every tree in use, from any thread: [`Actuator::maker`].
#[derive(Clone, Debug)]
pub struct GroupMaker {
    parents: Vec<PathBuf>,
    /// A v1 cpuset parent: a new group there starts with no processors and must be given some.
    v1_cpuset: Option<PathBuf>,
}

impl GroupMaker {
    /// Makes what is missing of the job's groups (those that exist are left as they are).
    pub fn make(&self, job: &JobGroup) -> Result<()> {
        for parent in &self.parents {
            mkdir(&parent.join(job))?;
        }
        if let Some(parent) = &self.v1_cpuset {
            inherit_cpuset(&parent.join(job))?;
        }
        Ok(())
    }
}

/// Copies the parent's `cpuset.cpus` and `cpuset.mems` into a new v1 cpuset.
fn inherit_cpuset(dir: &Path) -> Result<()> {
    let parent = dir.parent().unwrap_or(dir);
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let value = read(&parent.join(file))?;
        if read(&dir.join(file))?.trim().is_empty() {
            write(&dir.join(file), value.trim())?;
        }
    }
    Ok(())
}

impl Actuator for Cgroups {
    fn describe(&self) -> String {
        let tree = |t: Option<Tree>| match t {
            Some(Tree::V2) => "cgroup v2",
            Some(Tree::V1) => "cgroup v1",
            None => "unavailable",
        };
        format!(
            "stop: {}; processors: {} cpuset; weight: {} cpu; tasks: {} pids; memory: {} memory",
            self.freezer,
            tree(self.cpuset),
            tree(self.weight),
            tree(self.tasks),
            tree(self.memory)
        )
    }

    fn stops_joiners(&self) -> bool {
        self.freezer != Freezer::Signals
    }

    fn limit_tasks(&mut self, job: &JobGroup, most: u64) -> Result<()> {
        let dir = self
            .tasks_dir(job)?
            .ok_or_else(|| CgroupError::Unsupported("no pids controller on this machine".into()))?;
        write(&dir.join("pids.max"), &most.to_string())
    }

    fn task_room(&self, job: &JobGroup) -> Result<Option<u64>> {
        let Some(dir) = self.tasks_dir(job)? else {
            return Ok(None);
        };
        let most = read(&dir.join("pids.max"))?;
        if most.trim() == "max" {
            return Ok(None);
        }
        let number = |file: &str, text: &str| {
            text.trim().parse::<u64>().map_err(|e| CgroupError::Io {
                path: dir.join(file),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
        };
        let most = number("pids.max", &most)?;
        let current = number("pids.current", &read(&dir.join("pids.current"))?)?;
        Ok(Some(most.saturating_sub(current)))
    }

    fn create(&mut self, job: &JobGroup) -> Result<()> {
        self.group_maker().make(job)?;
        self.jobs.insert(job.to_string());
        Ok(())
    }

    fn knows(&self, job: &JobGroup) -> bool {
        self.known(job).is_ok()
    }

    fn maker(&self) -> Option<GroupMaker> {
        Some(self.group_maker())
    }

    fn add(&mut self, job: &JobGroup, pid: Pid) -> Result<()> {
        self.known(job)?;
        for dir in self.dirs(job) {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    fn pids(&self, job: &JobGroup) -> Result<Vec<Pid>> {
        Ok(parse_pids(&read(&self.procs(job)?)?))
    }

    fn set_cpus(&mut self, job: &JobGroup, cpus: &Partition) -> Result<()> {
        self.known(job)?;
        let dir = self.cpuset_dir(job).ok_or_else(|| {
            CgroupError::Unsupported("no cpuset controller on this machine".into())
        })?;
        self.spread_due.remove(&**job);
        write(&dir.join("cpuset.cpus"), &cpus.to_string())
    }

    fn set_weight(&mut self, job: &JobGroup, weight: u32) -> Result<()> {
        self.known(job)?;
        let (file, value) = self.weight_in(job, weight)?;
        write(&file, &value)
    }

    fn ask_freeze(&mut self, job: &JobGroup) -> Result<()> {
        self.ask_frozen(job, true)
    }

    fn frozen_by(&mut self, job: &JobGroup, until: Option<Instant>) -> Result<bool> {
        self.confirm_frozen(job, true, until)
    }

    fn thaw(&mut self, job: &JobGroup) -> Result<Duration> {
        let asked = Instant::now();
        self.ask_frozen(job, false)?;
        // Asked is done: what stays stopped past the patience is the job's own doing.
        self.confirm_frozen(job, false, Some(asked + THAW_PATIENCE))?;
        let took = asked.elapsed();
        // A frozen job that never ran showed no workers; running, its threads will.
        if let Some(seen) = self.spread_due.get_mut(&**job).filter(|s| s.look_at_thaw) {
            seen.due = Instant::now();
            seen.look_at_thaw = false;
        }
        Ok(took)
    }

    fn terminate(&mut self, job: &JobGroup) -> Result<()> {
        self.signal_all(job, libc::SIGTERM)
    }

    fn kill(&mut self, job: &JobGroup) -> Result<()> {
        self.known(job)?;
        let cgroup_kill = self.v2.as_ref().map(|d| d.join(job).join("cgroup.kill"));
        match cgroup_kill.filter(|f| f.exists()) {
            Some(file) => write(&file, "1")?,
            None => self.signal_all(job, libc::SIGKILL)?,
        }
        // A v1-frozen or SIGSTOPped process dies only once it runs again.
        self.thaw(job).map(|_| ())
    }

    fn remove(&mut self, job: &JobGroup) -> Result<()> {
        self.known(job)?;
        self.thaw(job)?;
        for dir in self.dirs(job).collect::<Vec<_>>() {
            match fs::remove_dir(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err(&dir)(e)),
                _ => {}
            }
        }
        self.jobs.remove(&**job);
        self.spread_due.remove(&**job);
        self.v1_asks.remove(&**job);
        Ok(())
    }

    fn join_files(&self, job: &JobGroup) -> Result<Vec<PathBuf>> {
        self.known(job)?;
        // The freezing hierarchy last: a process that joins a frozen group stops there, and
        // joined the others only once thawed, in its first slot, each join able to wait
        // milliseconds for an RCU grace period while the process showed no CPU use (the
        // give-away took its slot as blocked).
        let freezing = match self.freezer {
            Freezer::V2 => Some(self.v2_dir(job)),
            Freezer::V1 => Some(self.v1_freezer_dir(job)),
            Freezer::Signals => None,
        };
        let (mut dirs, last): (Vec<PathBuf>, Vec<PathBuf>) = self
            .dirs(job)
            .partition(|dir| Some(dir) != freezing.as_ref());
        dirs.extend(last);
        Ok(dirs.into_iter().map(|d| d.join("cgroup.procs")).collect())
    }

    fn release_steps(&self, job: &JobGroup) -> Result<Vec<ReleaseStep>> {
        self.known(job)?;
        let first_dir = self.dirs(job).next().expect("open() ensures one hierarchy");
        let mut steps = vec![match self.freezer {
            Freezer::V2 => ReleaseStep::ThawV2 {
                dir: self.v2.as_ref().expect("v2 freezer has a v2 dir").join(job),
            },
            Freezer::V1 => ReleaseStep::ThawV1 {
                dir: self
                    .v1_freezer
                    .as_ref()
                    .expect("v1 freezer has a v1 dir")
                    .join(job),
            },
            Freezer::Signals => ReleaseStep::ContinueAll {
                procs: first_dir.join("cgroup.procs"),
            },
        }];
        if self.weight.is_some() {
            let (file, value) = self.weight_in(job, crate::DEFAULT_WEIGHT)?;
            steps.push(ReleaseStep::Write { file, value });
        }
        Ok(steps)
    }

    fn spread(&mut self, job: &JobGroup) -> Result<Spread> {
        // Pinned threads stay pinned while frozen: once a job's ranks are spread, looking again
        // at every thaw only costs (~250 us a switch for an MPI job's ~14 threads, the clock
        // thread's CPU taken from the job). Look at every thaw at first, then at doubling
        // intervals up to a second, in case the working threads change (a launcher that
        // starts its ranks, a job that runs one program after another).
        let now = Instant::now();
        let pids = self.pids(job)?;
        let waited = match self.spread_due.get(&**job) {
            Some(seen) if seen.pids != pids => Duration::ZERO,
            Some(seen) if now < seen.due => {
                return Ok(Spread {
                    pinned: seen.pinned,
                    looked: false,
                })
            }
            Some(seen) => seen.wait,
            None => Duration::ZERO,
        };
        let cpus = self.usable_cpus(job)?;
        let pinned = affinity::spread(&pids, || self.pids(job), &cpus)?;
        let wait = (waited * 2).clamp(SPREAD_FIRST_WAIT, SPREAD_LONGEST_WAIT);
        let seen = SpreadSeen {
            due: now + wait,
            wait,
            pids,
            pinned,
            look_at_thaw: !pinned && waited.is_zero(),
        };
        self.spread_due.insert(job.to_string(), seen);
        Ok(Spread {
            pinned,
            looked: true,
        })
    }

    fn unpin(&mut self, job: &JobGroup) -> Result<()> {
        self.spread_due.remove(&**job);
        affinity::unpin(&self.pids(job)?, || self.pids(job))
    }

    fn limit_memory(&mut self, job: &JobGroup, bytes: u64) -> Result<()> {
        self.known(job)?;
        let bytes = bytes.to_string();
        match (self.memory, &self.v2, &self.v1_memory) {
            (Some(Tree::V2), Some(parent), _) => {
                let dir = parent.join(job);
                write(&dir.join("memory.max"), &bytes)?;
                // Swap would let the job run on past its limit, paging (absent: no swap).
                let swap = dir.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
                Ok(())
            }
            (Some(Tree::V1), _, Some(parent)) => {
                let dir = parent.join(job);
                write(&dir.join("memory.limit_in_bytes"), &bytes)?;
                // Memory and swap together, at the same bound: swap does not dodge the limit.
                // Absent when the kernel does not account swap (`daemon --check` says so).
                let memsw = dir.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write(&memsw, &bytes)?;
                }
                Ok(())
            }
            _ => Err(CgroupError::Unsupported(
                "no memory controller on this machine: memory limits cannot be enforced".into(),
            )),
        }
    }

    fn usage_files(&self, job: &JobGroup) -> Result<UsageFiles> {
        self.known(job)?;
        let v2 = self.v2.as_ref().map(|parent| parent.join(job));
        Ok(UsageFiles {
            cpu_v2: v2.clone(),
            cpu_v1: self.v1_cpuacct.as_ref().map(|parent| parent.join(job)),
            memory_v2: v2.filter(|_| self.memory == Some(Tree::V2)),
            memory_v1: self.v1_memory.as_ref().map(|parent| parent.join(job)),
        })
    }

    fn cpu_usage(&self, job: &JobGroup) -> Result<Duration> {
        self.known(job)?;
        if let Some(v2) = &self.v2 {
            return cpu_usage_of(&v2.join(job));
        }
        // No v2 tree: the job's cpuacct group counts every process it ever held. Summing the
        // live processes instead let a job hide its work in short-lived children and look
        // idle (its cells given to others while it ran on).
        if let Some(cpuacct) = &self.v1_cpuacct {
            return number(&cpuacct.join(job).join("cpuacct.usage")).map(Duration::from_nanos);
        }
        // Not even cpuacct: the live processes' own counters (clock-tick resolution; the time
        // of processes that already exited is lost, which only makes a job look idler).
        let ticks: u64 = self
            .pids(job)?
            .into_iter()
            .filter_map(|pid| procfs::stat(pid).ok())
            .map(|s| s.cpu_ticks)
            .sum();
        Ok(procfs::ticks_to_duration(ticks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of cgroup files as the kernel writes them, for the machines this one is not.
    fn group(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cosched-usage-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for (file, text) in files {
            fs::write(dir.join(file), text).unwrap();
        }
        dir
    }

    #[test]
    fn a_v2_groups_figures_and_one_without_memory_peak() {
        let events = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n";
        let stat = "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n";
        let dir = group("v2", &[("cpu.stat", stat), ("memory.events", events)]);
        let files = UsageFiles {
            cpu_v2: Some(dir.clone()),
            memory_v2: Some(dir.clone()),
            ..UsageFiles::default()
        };
        // Before Linux 5.19 there is no memory.peak: no peak, and no error.
        let (usage, error) = usage(&files);
        assert!(error.is_none(), "{error:?}");
        let expected = Usage {
            cpu_us: Some(1_234_567),
            peak_memory_bytes: None,
            oom_kills: Some(2),
        };
        assert_eq!(usage, expected);
        fs::write(dir.join("memory.peak"), "67108864\n").unwrap();
        assert_eq!(usage_of(&files).peak_memory_bytes, Some(64 << 20));
        fs::remove_dir_all(&dir).unwrap();
    }

    fn usage_of(files: &UsageFiles) -> Usage {
        usage(files).0
    }

    #[test]
    fn a_v1_groups_figures_in_nanoseconds_and_its_oom_control() {
        let control = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n";
        let dir = group(
            "v1",
            &[
                ("cpuacct.usage", "2500000000\n"),
                ("memory.max_usage_in_bytes", "4096\n"),
                ("memory.oom_control", control),
            ],
        );
        let files = UsageFiles {
            cpu_v1: Some(dir.clone()),
            memory_v1: Some(dir.clone()),
            ..UsageFiles::default()
        };
        let expected = Usage {
            cpu_us: Some(2_500_000),
            peak_memory_bytes: Some(4096),
            oom_kills: Some(1),
        };
        let (read, error) = usage(&files);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(read, expected);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A figure that cannot be read is left out, the others are still read, and the error
    /// names the file.
    #[test]
    fn an_unreadable_figure_is_left_out_and_named() {
        let dir = group(
            "bad",
            &[
                ("cpu.stat", "user_usec 5\n"),
                ("memory.events", "oom_kill 0\n"),
            ],
        );
        let files = UsageFiles {
            cpu_v2: Some(dir.clone()),
            memory_v2: Some(dir.clone()),
            ..UsageFiles::default()
        };
        let (usage, error) = usage(&files);
        assert_eq!((usage.cpu_us, usage.oom_kills), (None, Some(0)));
        let error = error.unwrap().to_string();
        assert!(
            error.contains("cpu.stat") && error.contains("no 'usage_usec' line"),
            "{error}"
        );
        // A key that only starts another key's name is not it.
        fs::write(dir.join("cpu.stat"), "usage_usec_total 7\n").unwrap();
        assert_eq!(usage_of(&files).cpu_us, None);
        assert_eq!(usage_of(&UsageFiles::default()), Usage::default());
        fs::remove_dir_all(&dir).unwrap();
    }
}
