//! The job records and the store that keeps them durably, so a killed controller loses none.
//! The controller sees only the [`Store`] trait: the daemon keeps records in SQLite (one
//! machine) or etcd (a cluster), the harness in memory.

use cosched_core::{Class, JobId, Memory};
use cosched_os::unix::Credentials;
use cosched_proto::api::HistoryRequest;
use cosched_proto::{ExitInfo, JobState};
use serde::{Deserialize, Serialize};

/// Everything known of a job: enough to launch it again after a restart, and its outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: JobId,
    pub name: String,
    pub owner: Credentials,
    pub class: Class,
    pub procs: u32,
    /// The distinct nodes `procs` are spread over evenly, when the job asked for a spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<u32>,
    pub argv: Vec<String>,
    /// `argv` was cut to [`KEPT_COMMAND_BYTES`] when the job ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argv_cut: bool,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// Where its output goes when no client's descriptors reach it (`Launch::output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Where its stderr goes there, when not with its output (`Launch::error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its processes are started elsewhere and join it (`register`); its own is a holder.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub registered: bool,
    /// Never `Waiting`: a queued job's `launched` says whether its processes exist.
    pub status: JobState,
    /// Its supervisor (and so its processes) exists.
    pub launched: bool,
    pub cancel_requested: bool,
    pub submitted_us: i64,
    pub started_us: Option<i64>,
    pub ended_us: Option<i64>,
    pub exit: Option<ExitInfo>,
    /// Why it ended without an exit status, if it did.
    #[serde(default)]
    pub note: Option<String>,
    /// How long it was suspended (µs), stretches that ended; and since when it is, if it is.
    #[serde(default)]
    pub suspended_us: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_since_us: Option<i64>,
    /// Root suspended it (an operator's hold): its owner may not resume it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended_by_root: bool,
    /// The nodes it was started on, the one running its launcher first.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// How many of its processors are on each of `nodes`, in the same order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus_on_nodes: Vec<u32>,
    /// How long it may be let run in all (µs); `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_us: Option<i64>,
    /// How long it had been let run (µs) when `run_saved_us` was written: time in its slots
    /// (or unscheduled), not time frozen in others'.
    #[serde(default)]
    pub run_us: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_saved_us: Option<i64>,
    /// It reached its time limit and was told to stop: its end is a timeout.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// It stalled and the policy's stall action told it to stop: its end is a failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stalled: bool,
    /// Memory it asked for on each node it runs on (bytes), or per processor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_per_cpu_bytes: Option<u64>,
    /// CPU time of its processes (µs) and the most memory they held at once (bytes), from
    /// its cgroup as it ended: none while it runs, or where its node could not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// The mode it asked for (`--mode`); none: the daemon's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<cosched_proto::Mode>,
    /// An auto job's chosen mode, and why: it is started in it again after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_as: Option<cosched_proto::Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_why: Option<String>,
}

/// Bytes of its command an ended job keeps, in memory and in the store: what a job was is
/// history, and a user's arguments and environment count against them only while it can run.
pub const KEPT_COMMAND_BYTES: usize = 4096;

/// A job's memory as the core admits it: per node (`--mem`) or per processor.
pub fn core_memory(mem: Option<u64>, per_cpu: Option<u64>) -> Option<Memory> {
    mem.map(Memory::PerNode).or(per_cpu.map(Memory::PerCpu))
}

/// Bytes a job's submission holds: arguments, environment, working directory.
pub fn submitted_bytes(argv: &[String], env: &[(String, String)], cwd: &str) -> usize {
    let argv: usize = argv.iter().map(String::len).sum();
    let env: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    argv + env + cwd.len()
}

impl JobRecord {
    /// Told to stop (cancelled, past its time limit, or stalled under the policy's cancel):
    /// it ends within the grace.
    pub fn being_stopped(&self) -> bool {
        self.cancel_requested || self.timed_out || self.stalled
    }

    /// Bytes of its own that the daemon holds for the job: arguments, environment, directory.
    pub fn submitted_bytes(&self) -> usize {
        submitted_bytes(&self.argv, &self.env, &self.cwd)
    }

    /// The memory it asked for, as the core admits it.
    pub fn core_memory(&self) -> Option<Memory> {
        core_memory(self.mem_bytes, self.mem_per_cpu_bytes)
    }

    /// The memory it asked for on each node it runs on (bytes): `--mem`, or `--mem-per-cpu`
    /// times its processors per node (all of them, unless spread over `node_count` nodes).
    pub fn memory_per_node(&self) -> Option<u64> {
        let per_node = self.procs / self.node_count.unwrap_or(1).max(1);
        self.core_memory().map(|memory| memory.on_node(per_node))
    }

    /// A record as this daemon reads it: one an older daemon stored as `done` (read as
    /// `completed`) that did not exit 0 failed. This one never stores such a pair, so it tells
    /// an old record. (SQLite rewrites its records when opened; etcd's are read through this.)
    pub fn told_apart(mut self) -> JobRecord {
        if self.status == JobState::Completed && self.exit.is_some_and(|e| !e.success()) {
            self.status = JobState::Failed;
        }
        self
    }

    /// An ended job sheds what only a run needs: its environment, and its command past
    /// [`KEPT_COMMAND_BYTES`].
    pub fn shed_for_history(&mut self) {
        self.env = Vec::new();
        let (kept, cut) = cosched_proto::api::command_prefix(&self.argv, KEPT_COMMAND_BYTES);
        if cut {
            self.argv = kept;
            self.argv_cut = true;
        }
    }
}

/// Why a store could not do what it was asked, in its implementation's own words (a path and
/// SQLite's error, etcd's, a deposed leader). Like `anyhow::Error` it is not itself an
/// `Error`, so that every implementation's typed error converts into it with `?`.
pub struct StoreError(Box<dyn std::error::Error + Send + Sync>);

impl<E: std::error::Error + Send + Sync + 'static> From<E> for StoreError {
    fn from(error: E) -> Self {
        StoreError(Box::new(error))
    }
}

impl From<StoreError> for Box<dyn std::error::Error + Send + Sync> {
    fn from(error: StoreError) -> Self {
        error.0
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

pub trait Store: Send {
    /// Every unfinished record and the `ended` latest ended ones, by id.
    fn load(&self, ended: usize) -> Result<Vec<JobRecord>, StoreError>;
    /// One record.
    fn get(&self, job: JobId) -> Result<Option<JobRecord>, StoreError>;
    /// Adds a new job's record; fails (never overwrites) if the id is taken. Durable when it
    /// returns.
    fn insert(&mut self, record: &JobRecord) -> Result<(), StoreError>;
    /// Replaces a job's record; durable when it returns.
    fn put(&mut self, record: &JobRecord) -> Result<(), StoreError>;
    /// A job id never handed out before (above every id in the store), durable when it returns
    /// or with its record (`insert`): an id whose record never came was given to no one.
    fn next_id(&mut self) -> Result<JobId, StoreError>;
    /// The ended records `query` asks for, the latest ended first (the higher id first among
    /// those that ended together), at most `query.rows()`.
    fn history(&self, query: &HistoryRequest) -> Result<Vec<JobRecord>, StoreError>;
}

/// Whether `record` is an ended job `query` asks for: what SQLite asks in SQL, for the stores
/// that look at every record.
pub fn wanted_in_history(query: &HistoryRequest, record: &JobRecord) -> bool {
    let ended = record.ended_us.unwrap_or(i64::MIN);
    record.status.ended()
        && query.uid.is_none_or(|uid| record.owner.uid == uid)
        && (query.jobs.is_empty() || query.jobs.contains(&record.id))
        && (query.states.is_empty() || query.states.contains(&record.status))
        && query.since_us.is_none_or(|since| ended >= since)
        && query.until_us.is_none_or(|until| ended < until)
}

/// The answer of a store that looks at every record: those wanted, in history's order,
/// bounded (never more than `query.rows()` held at once beyond the input).
pub fn history_of(
    query: &HistoryRequest,
    records: impl IntoIterator<Item = JobRecord>,
) -> Vec<JobRecord> {
    let rows = query.rows();
    let newest_first = |r: &JobRecord| std::cmp::Reverse((r.ended_us, r.id));
    let mut kept: Vec<JobRecord> = Vec::new();
    for record in records {
        if !wanted_in_history(query, &record) {
            continue;
        }
        kept.push(record);
        if kept.len() >= 2 * rows.max(1) {
            kept.sort_by_key(newest_first);
            kept.truncate(rows);
        }
    }
    kept.sort_by_key(newest_first);
    kept.truncate(rows);
    kept
}
