//! The API on the daemon's Unix socket: one JSON object per line each way.
//!
//! A client sends one request per connection. `run` may carry the job's stdin, stdout and
//! stderr as descriptors (`SCM_RIGHTS`), so the job reads and writes the caller's own files and
//! terminal, even while the daemon is down. Replies are `{"ok": true, ...}` or
//! `{"ok": false, "error": "..."}`; `run` and `wait` send a second reply when the job ends.

use crate::{BoundaryRecord, Class, ExitInfo, JobState, Mode, NodeStatus, Pending, Role, Summary};
use cosched_core::{JobId, Micros, Partition, Shape, LONGEST_LIMIT, MICROS_PER_SEC};
use serde::{Deserialize, Serialize};

/// Longest request line: a command line and environment fit easily; anything larger is refused.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
/// Longest job name.
pub const MAX_NAME_CHARS: usize = 64;
/// Characters a job's name may not hold: control characters, and the ones that reorder text
/// around them (a name could show as another's in `ps` and the console).
pub fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Longest output path (Linux's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;

/// Longest argument or `NAME=value` environment string a job may have: the kernel's
/// MAX_ARG_STRLEN (32 pages, with the terminating NUL) refuses any longer one at exec, so
/// such a job could never start and would only hold memory and disk until it failed.
pub const MAX_ARG_BYTES: usize = 32 * 4096 - 1;

/// Bytes of a job's command a listing carries: whatever users submit, `ps` of every job stays
/// small (one job's whole command comes with `ps JOB`).
pub const LISTED_COMMAND_BYTES: usize = 1024;

/// The first arguments of `argv` holding at most `limit` bytes (the last one cut at a
/// character boundary), and whether anything was left out.
pub fn command_prefix(argv: &[String], limit: usize) -> (Vec<String>, bool) {
    let mut room = limit;
    let mut kept = Vec::new();
    for arg in argv {
        if arg.len() <= room {
            room -= arg.len();
            kept.push(arg.clone());
            continue;
        }
        let cut = clip(arg, room);
        if !cut.is_empty() {
            kept.push(cut.to_string());
        }
        return (kept, true);
    }
    (kept, false)
}

/// The longest start of `text` of at most `limit` bytes that ends at a character boundary.
pub fn clip(text: &str, limit: usize) -> &str {
    let mut end = limit.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Run(RunRequest),
    /// Waits for a job to end (a `run` whose daemon restarted reconnects with this); may carry
    /// stdio descriptors for a job that has not started yet.
    Wait {
        job: JobId,
        #[serde(default)]
        stdio: bool,
    },
    /// Unfinished jobs; with `all`, the ended ones kept in memory too; with `job`, that one.
    Ps {
        #[serde(default)]
        all: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<JobId>,
    },
    Matrix,
    Stats,
    Nodes,
    Cancel {
        job: JobId,
    },
    Suspend {
        job: JobId,
    },
    Resume {
        job: JobId,
    },
    Class {
        job: JobId,
        class: String,
    },
    /// The agent's log of slot boundaries from `since_us` on (µs, true clock): what ran when,
    /// for `cosched gantt`.
    Boundaries {
        since_us: i64,
    },
    /// A job made of processes started elsewhere (LLNL's `GangJobRegister`): answered once
    /// recorded, and again once it runs, when its processes may join.
    Register(RegisterRequest),
    /// Process `pid` joins registered job `job` (LLNL's `GangProcAdd`).
    ProcAdd {
        job: JobId,
        pid: i32,
    },
    /// The registered job is over: out of the rotation now, ended once its processes exit.
    JobEnd {
        job: JobId,
    },
    /// A token with which the web console acts as the caller (a new one replaces the old).
    ConsoleToken,
    /// Ended jobs from the store (`cosched history`), the latest ended first.
    History(HistoryRequest),
}

/// A job whose processes are started by something else (an unmodified `mpirun`) and join it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub procs: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<u32>,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Once it runs, the job ends if no process joined within this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_within_s: Option<u32>,
}

/// How long a registered job waits for its first process by default, and at most.
pub const JOIN_WITHIN_S: u32 = 60;
pub const MAX_JOIN_WITHIN_S: u32 = 3600;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub procs: u32,
    /// Spread `procs` evenly over this many distinct nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<u32>,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Reply once with the job id instead of waiting for the end.
    #[serde(default)]
    pub detach: bool,
    /// Three descriptors (stdin, stdout, stderr) come with the request.
    #[serde(default)]
    pub stdio: bool,
    /// The file (absolute) the job appends its output to where the descriptors sent cannot
    /// reach it (a cluster's nodes); by default `cosched-JOBID.out` in `cwd`. A pattern:
    /// `%j` and `%N` are filled in there, `%%` is a percent sign (`crate::pattern`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Where its stderr goes, there: a pattern as `output`'s. None: with its stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Seconds it may run (time it is let run, not time frozen in others' slots); then
    /// SIGTERM, SIGKILL after the grace, and it ends `timeout`. None: its class's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
    /// Bytes of memory it needs on each node it runs on (`--mem`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    /// Bytes of memory it needs per processor (`--mem-per-cpu`); not with `mem_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_per_cpu_bytes: Option<u64>,
    /// How its processes are made to run together (`--mode`); none: the daemon's mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

/// The most memory a job may name: far beyond any node, far below overflow when multiplied.
pub const MAX_MEM_BYTES: u64 = 1 << 50;

impl RunRequest {
    /// The time limit asked for, in µs.
    pub fn time_limit(&self) -> Option<Micros> {
        self.time_limit_s.map(|s| s as Micros * MICROS_PER_SEC)
    }
}

impl Request {
    /// The operation's name, as `op` spells it.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Run(_) => "run",
            Request::Wait { .. } => "wait",
            Request::Ps { .. } => "ps",
            Request::Matrix => "matrix",
            Request::Stats => "stats",
            Request::Nodes => "nodes",
            Request::Cancel { .. } => "cancel",
            Request::Suspend { .. } => "suspend",
            Request::Resume { .. } => "resume",
            Request::Class { .. } => "class",
            Request::Boundaries { .. } => "boundaries",
            Request::Register(_) => "register",
            Request::ProcAdd { .. } => "proc_add",
            Request::JobEnd { .. } => "job_end",
            Request::ConsoleToken => "console_token",
            Request::History(_) => "history",
        }
    }
}

/// Reads one request line; the error is the one-line reply for the client.
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    // serde quotes what it could not match after decoding escapes: `"c\ncel"` as an op
    // puts a newline in the message.
    serde_json::from_slice(line)
        .map_err(|error| cosched_os::one_line(&format!("bad request: {error}")))
}

/// What the core is asked for: `procs` processors, spread evenly over `node_count` nodes
/// when given (checked by [`validate_run`] to divide).
pub fn job_shape(procs: u32, node_count: Option<u32>) -> Shape {
    match node_count {
        Some(nodes) => Shape::Nodes {
            nodes,
            per_node: procs / nodes,
        },
        None => Shape::Count(procs),
    }
}

/// Rejects what no job can be made of, naming the first thing wrong.
pub fn validate_run(run: &RunRequest) -> Result<(), String> {
    let has_nul = |s: &str| s.contains('\0');
    if run.argv.is_empty() || run.argv[0].is_empty() {
        return Err("no command given (argv is empty)".into());
    }
    for (index, arg) in run.argv.iter().enumerate() {
        if has_nul(arg) {
            return Err(format!("argument {index} holds a NUL byte"));
        }
        if arg.len() > MAX_ARG_BYTES {
            return Err(format!(
                "argument {index} is {} bytes: the kernel starts no program with an argument over {MAX_ARG_BYTES} bytes (MAX_ARG_STRLEN)",
                arg.len()
            ));
        }
    }
    for (key, value) in &run.env {
        if key.is_empty() || key.contains('=') || has_nul(key) || has_nul(value) {
            return Err(format!(
                "environment variable name {:?} is not usable (empty, '=' or NUL)",
                clip(key, 64)
            ));
        }
        if key.len() + 1 + value.len() > MAX_ARG_BYTES {
            return Err(format!(
                "environment variable {:?} is {} bytes: the kernel starts no program with an environment string over {MAX_ARG_BYTES} bytes (MAX_ARG_STRLEN)",
                clip(key, 64),
                key.len() + 1 + value.len()
            ));
        }
    }
    if !run.cwd.starts_with('/') || has_nul(&run.cwd) || run.cwd.len() > MAX_PATH_BYTES {
        return Err(format!(
            "working directory {:?} is not an absolute path (of at most {MAX_PATH_BYTES} bytes)",
            clip(&run.cwd, 64)
        ));
    }
    for (what, file) in [("output", &run.output), ("error", &run.error)] {
        let Some(file) = file else { continue };
        crate::pattern::expand(file, &crate::pattern::PatternFields::default())
            .map_err(|error| error.to_string())?;
        if !file.starts_with('/') || has_nul(file) || file.len() > MAX_PATH_BYTES {
            return Err(format!(
                "{what} file {:?} is not an absolute path (of at most {MAX_PATH_BYTES} bytes)",
                clip(file, 64)
            ));
        }
    }
    if run.procs == 0 {
        return Err("a job needs at least one processor (-n 1 or more)".into());
    }
    match run.node_count {
        Some(0) => return Err("a job needs at least one node (-N 1 or more)".into()),
        Some(nodes) if !run.procs.is_multiple_of(nodes) => {
            return Err(format!(
            "{} processors do not split evenly over {nodes} nodes (-n must be a multiple of -N)",
            run.procs
        ))
        }
        _ => {}
    }
    if let Some(seconds) = run.time_limit_s {
        if seconds == 0 || seconds > (LONGEST_LIMIT / MICROS_PER_SEC) as u64 {
            return Err(format!(
                "time limit {seconds} s is not between 1 s and a year"
            ));
        }
    }
    match (run.mem_bytes, run.mem_per_cpu_bytes) {
        (Some(_), Some(_)) => {
            return Err(
                "give the job's memory per node (--mem) or per processor (--mem-per-cpu), not both"
                    .into(),
            )
        }
        (Some(bytes), None) | (None, Some(bytes)) if bytes == 0 || bytes > MAX_MEM_BYTES => {
            return Err(format!(
                "memory {bytes} bytes is not between 1 byte and {MAX_MEM_BYTES}"
            ))
        }
        _ => {}
    }
    if let Some(mode) = run.mode.filter(|mode| !mode.for_jobs()) {
        return Err(format!(
            "mode {mode} is a whole machine's, not a job's (a job's: gang, moderate, implicit, auto)"
        ));
    }
    if let Some(name) = &run.name {
        if name.chars().count() > MAX_NAME_CHARS || name.is_empty() || name.chars().any(unprintable)
        {
            return Err(format!(
                "job name {name:?} must be 1 to {MAX_NAME_CHARS} printable characters"
            ));
        }
    }
    Ok(())
}

/// One job as `ps` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    pub id: JobId,
    pub name: String,
    pub uid: u32,
    pub user: String,
    pub class: Class,
    pub procs: u32,
    /// The distinct nodes its processors are spread over, when it asked for a spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<u32>,
    pub state: JobState,
    /// Its partition (cpuset list), once placed.
    pub cpus: Option<String>,
    /// Slices of the current matrix it runs in.
    pub slices: Vec<usize>,
    pub submitted_us: i64,
    pub started_us: Option<i64>,
    pub ended_us: Option<i64>,
    pub exit: Option<ExitInfo>,
    /// Its command; in a listing, only its first [`LISTED_COMMAND_BYTES`] bytes.
    pub argv: Vec<String>,
    /// `argv` is a prefix of the command: `ps JOB` has it whole (as far as it is kept: an
    /// ended job's is cut to the daemon store's `KEPT_COMMAND_BYTES`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argv_cut: bool,
    /// Why it ended without an exit status, if it did.
    pub note: Option<String>,
    /// How long it has been suspended in all (µs).
    #[serde(default)]
    pub suspended_us: i64,
    /// Why it waits, while it has not started or is out of the rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Pending>,
    /// How long it may run in all (µs), if it has a limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_us: Option<i64>,
    /// How long it has been let run (µs): wall time in its slots, not frozen in others'.
    #[serde(default)]
    pub run_us: i64,
    /// Memory it asked for on each node it runs on (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    /// Since when every process of it has waited in its own slots (no CPU, no I/O), if it
    /// is stalled: a running job's deadlock, say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled_since_us: Option<i64>,
    /// Its mode: the one it asked for, or the daemon's.
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// What an `auto` job was found to run best in, and why (measured in its first seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_as: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_why: Option<String>,
}

fn default_mode() -> Mode {
    Mode::Gang
}

impl JobView {
    /// Its mode as `ps` shows it: `auto:gang` once an auto job's was chosen.
    pub fn mode_shown(&self) -> String {
        match self.runs_as {
            Some(chosen) => format!("{}:{chosen}", self.mode),
            None => self.mode.to_string(),
        }
    }

    /// How much of its limit is left (µs), if it has one.
    pub fn time_left_us(&self) -> Option<i64> {
        self.time_limit_us.map(|limit| (limit - self.run_us).max(0))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixEntryView {
    pub job: JobId,
    pub cpus: String,
    pub role: Role,
}

impl MatrixEntryView {
    /// Its processors, from the cpuset list (`0-2,5`; none if it does not parse).
    pub fn processors(&self) -> Vec<usize> {
        self.cpus.parse::<Partition>().map_or_else(
            |_| Vec::new(),
            |set| set.processors().map(|cpu| cpu as usize).collect(),
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixView {
    pub procs: u32,
    /// On a machine of several nodes, each processor as `node/cpu` (its node's CPU number).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processors: Vec<String>,
    pub mode: Mode,
    pub epoch_us: i64,
    pub quantum_us: i64,
    /// The slot running now and the slice it runs (none when the matrix is empty).
    pub slot: i64,
    pub running_slice: Option<usize>,
    pub generation: u64,
    pub slices: Vec<Vec<MatrixEntryView>>,
    pub queued: Vec<JobId>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsView {
    pub mode: Mode,
    pub quantum_ms: f64,
    pub actuator: String,
    /// Whether the clock thread got real-time priority.
    pub realtime: bool,
    /// Over every node: the worst percentiles, the sum of counts.
    pub lateness_us: Summary,
    pub switch_us: Summary,
    pub skew_us: Summary,
    /// Boundaries the clock slept through entirely.
    pub missed_slots: u64,
    pub jobs_running: usize,
    pub jobs_queued: usize,
    pub jobs_ended: usize,
    pub idle_departures: u64,
    /// Clients waiting for jobs to end (`run` without `--detach`, `wait`).
    #[serde(default)]
    pub clients_waiting: usize,
}

/// A node as the controller knows it: the agent's latest report and how old it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    /// When the node joined (its agent's first report or its lease), on the controller's clock.
    pub joined_us: Micros,
    /// How long ago its latest report came.
    pub heard_ms_ago: u64,
    pub status: NodeStatus,
    /// It left the cluster (its lease expired): its processors are withheld until it is back,
    /// and `status` is its last report.
    #[serde(default)]
    pub left: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// Untagged: a reader tries the variants in order, so the ones with more fields come first.
#[serde(untagged)]
pub enum Reply {
    Error {
        ok: bool,
        error: String,
    },
    /// A registered job runs on `cpus`: its processes may join.
    Started {
        ok: bool,
        job: JobId,
        cpus: String,
    },
    /// The web console's token for the caller.
    Token {
        ok: bool,
        token: String,
    },
    Ended {
        ok: bool,
        job: JobId,
        state: JobState,
        exit: Option<ExitInfo>,
        /// Why the job ended without running its command, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    Jobs {
        ok: bool,
        jobs: Vec<JobView>,
    },
    Matrix {
        ok: bool,
        matrix: MatrixView,
    },
    Stats {
        ok: bool,
        stats: StatsView,
    },
    Nodes {
        ok: bool,
        nodes: Vec<NodeView>,
    },
    Boundaries {
        ok: bool,
        boundaries: Vec<BoundaryRecord>,
    },
    Submitted {
        ok: bool,
        job: JobId,
        /// Where the job's output goes when not to the descriptors sent (a cluster's jobs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
        /// Why it waits, when it did not start at once.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<Pending>,
        /// What its submitter should know of how it will run: an interactive job past its
        /// user's share of preemption time-shares from its start.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    Done {
        ok: bool,
        message: String,
    },
    History {
        ok: bool,
        history: Vec<HistoryView>,
        /// More jobs matched than one reply carries ([`HISTORY_REPLY_BYTES`]): the oldest
        /// of them were left out.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
    },
}

impl Reply {
    pub fn error(error: impl Into<String>) -> Reply {
        Reply::Error {
            ok: false,
            error: error.into(),
        }
    }

    pub fn done(message: impl Into<String>) -> Reply {
        Reply::Done {
            ok: true,
            message: message.into(),
        }
    }
}

/// Which ended jobs `history` asks for: each filter given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryRequest {
    /// Only this user's jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Only these jobs (at most [`MAX_HISTORY_JOBS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobId>,
    /// Only jobs that ended so (ended states only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<JobState>,
    /// Only jobs that ended at or after this time (µs since the epoch)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_us: Option<i64>,
    /// ...and before this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_us: Option<i64>,
    /// At most this many jobs, the latest ended (default [`DEFAULT_HISTORY_ROWS`], at most
    /// [`MAX_HISTORY_ROWS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Jobs a `history` reply carries unless asked for fewer or more, and at most.
pub const DEFAULT_HISTORY_ROWS: u32 = 1000;
pub const MAX_HISTORY_ROWS: u32 = 10_000;
/// Job ids one `history` request may name.
pub const MAX_HISTORY_JOBS: usize = 1000;
/// Bytes of views a `history` reply carries at most (each command already bounded to
/// [`LISTED_COMMAND_BYTES`]): past them the reply stops early and says so (`truncated`).
pub const HISTORY_REPLY_BYTES: usize = 4 << 20;

impl HistoryRequest {
    /// The rows asked for, bounded.
    pub fn rows(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_HISTORY_ROWS) as usize
    }

    /// Rejects a request no store should run, naming what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.limit == Some(0) || self.limit.is_some_and(|l| l > MAX_HISTORY_ROWS) {
            return Err(format!(
                "a history limit is 1 to {MAX_HISTORY_ROWS} jobs (asked {})",
                self.limit.unwrap_or(0)
            ));
        }
        if self.jobs.len() > MAX_HISTORY_JOBS {
            return Err(format!(
                "a history request names at most {MAX_HISTORY_JOBS} jobs ({} given)",
                self.jobs.len()
            ));
        }
        if let Some(state) = self.states.iter().find(|s| !s.ended()) {
            return Err(format!(
                "history holds ended jobs only: '{state}' is not a way of ending (one of {})",
                JobState::ENDED.map(JobState::name).join(", ")
            ));
        }
        if let (Some(since), Some(until)) = (self.since_us, self.until_us) {
            if since >= until {
                return Err("the history window is empty (since is not before until)".into());
            }
        }
        Ok(())
    }
}

/// One ended job as `history` shows it: as `ps` shows anyone's job (no environment, the
/// command's start only), with its accounting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryView {
    pub id: JobId,
    pub name: String,
    pub uid: u32,
    pub user: String,
    pub gid: u32,
    pub class: Class,
    pub procs: u32,
    pub state: JobState,
    pub exit: Option<ExitInfo>,
    /// Why it ended so, when something other than its exit says (`out of memory`).
    pub note: Option<String>,
    pub submitted_us: i64,
    pub started_us: Option<i64>,
    pub ended_us: i64,
    /// From submission to start (to the end, for one that never started).
    pub wait_us: i64,
    /// From start to end, frozen time included; none if it never started.
    pub elapsed_us: Option<i64>,
    /// How long it was suspended by its owner.
    pub suspended_us: i64,
    /// How long it was let run (not frozen in others' slots), and its limit of that, if any.
    pub run_us: i64,
    pub time_limit_us: Option<i64>,
    /// Memory it asked for on each node it ran on (bytes), if it did.
    pub mem_bytes: Option<u64>,
    /// CPU time of its processes, and the most memory they held, from its cgroup.
    pub cpu_us: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
    /// The nodes it ran on and how many of its processors each had.
    pub nodes: Vec<String>,
    pub cpus_on_nodes: Vec<u32>,
    /// The first [`LISTED_COMMAND_BYTES`] bytes of its command.
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argv_cut: bool,
}

impl HistoryView {
    /// Roughly the bytes it takes in a reply, for [`HISTORY_REPLY_BYTES`].
    pub fn size(&self) -> usize {
        let texts = self.name.len() + self.user.len() + self.note.as_ref().map_or(0, String::len);
        let argv: usize = self.argv.iter().map(|a| a.len() + 3).sum();
        let nodes: usize = self.nodes.iter().map(|n| n.len() + 8).sum();
        // The field names and numbers.
        400 + texts + argv + nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunRequest {
        RunRequest {
            argv: vec!["true".into()],
            env: vec![("PATH".into(), "/bin".into())],
            cwd: "/".into(),
            procs: 1,
            node_count: None,
            class: None,
            name: None,
            detach: false,
            stdio: false,
            output: None,
            error: None,
            time_limit_s: None,
            mem_bytes: None,
            mem_per_cpu_bytes: None,
            mode: None,
        }
    }

    #[test]
    fn a_job_may_ask_for_any_mode_but_a_whole_machines() {
        for mode in [Mode::Gang, Mode::Moderate, Mode::Implicit, Mode::Auto] {
            assert_eq!(
                validate_run(&RunRequest {
                    mode: Some(mode),
                    ..run()
                }),
                Ok(())
            );
        }
        let local = RunRequest {
            mode: Some(Mode::Local),
            ..run()
        };
        assert!(validate_run(&local)
            .unwrap_err()
            .contains("mode local is a whole machine's"));
    }

    #[test]
    fn requests_round_trip_and_unknown_fields_are_refused() {
        let request = Request::Run(run());
        let text = serde_json::to_string(&request).unwrap();
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), request);
        assert!(serde_json::from_str::<Request>(r#"{"op":"ps","evil":1}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"launch"}"#).is_err());
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"op":"ps"}"#).unwrap(),
            Request::Ps {
                all: false,
                job: None
            }
        );
    }

    #[test]
    fn bad_runs_are_named() {
        type Spoil = fn(&mut RunRequest);
        let cases: Vec<(Spoil, &str)> = vec![
            (|r| r.argv.clear(), "no command"),
            (|r| r.argv.push("a\0b".into()), "NUL"),
            (
                |r| r.env.push(("A=B".into(), "x".into())),
                "environment variable",
            ),
            (|r| r.cwd = "relative".into(), "absolute"),
            (
                |r| r.error = Some("err.log".into()),
                "error file \"err.log\"",
            ),
            (|r| r.output = Some("/o-%q".into()), "'%q'"),
            (
                |r| r.cwd = format!("/{}", "d".repeat(MAX_PATH_BYTES)),
                "of at most 4096 bytes",
            ),
            (|r| r.procs = 0, "at least one processor"),
            (|r| r.name = Some("x".repeat(65)), "printable"),
            (
                |r| r.argv.push("a".repeat(MAX_ARG_BYTES + 1)),
                "argument 1 is 131072 bytes",
            ),
            (
                |r| r.env.push(("BIG".into(), "v".repeat(MAX_ARG_BYTES - 3))),
                "environment variable \"BIG\" is 131072 bytes",
            ),
        ];
        for (spoil, expected) in cases {
            let mut r = run();
            spoil(&mut r);
            let error = validate_run(&r).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
        assert_eq!(validate_run(&run()), Ok(()));
        let mut longest = run();
        longest.argv.push("a".repeat(MAX_ARG_BYTES));
        longest
            .env
            .push(("BIG".into(), "v".repeat(MAX_ARG_BYTES - 4)));
        assert_eq!(validate_run(&longest), Ok(()));
    }

    #[test]
    fn a_listing_carries_a_bounded_start_of_the_command() {
        let argv: Vec<String> = ["prog", "--flag", "ééé"].map(String::from).into();
        assert_eq!(command_prefix(&argv, 100), (argv.clone(), false));
        assert_eq!(command_prefix(&argv, 16), (argv.clone(), false));
        // "é" is two bytes: a cut never splits one.
        assert_eq!(
            command_prefix(&argv, 15),
            (["prog", "--flag", "éé"].map(String::from).into(), true)
        );
        assert_eq!(
            command_prefix(&argv, 5),
            (["prog", "-"].map(String::from).into(), true)
        );
        assert_eq!(command_prefix(&argv, 4), (vec!["prog".into()], true));
        assert_eq!(clip("aé", 2), "a");
    }

    #[test]
    fn replies_carry_ok_and_shell_status() {
        let text = serde_json::to_string(&Reply::error("no job 5")).unwrap();
        assert_eq!(text, r#"{"ok":false,"error":"no job 5"}"#);
        let killed = ExitInfo {
            code: None,
            signal: Some(9),
        };
        assert_eq!(killed.shell_status(), 137);
    }
}
