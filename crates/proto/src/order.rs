//! What the controller orders a node agent to do, and what the agent reports back. Orders
//! and events are one-way: nothing waits for an answer, so the same agent runs in the
//! controller's process (a channel) or on its own node (through etcd).

use crate::{Generation, Mode, NodeStatus};
use cosched_core::{JobId, Micros, Partition};
use serde::{Deserialize, Serialize};

/// How a job ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when it was killed.
    pub signal: Option<i32>,
}

impl ExitInfo {
    /// A shell's convention: the code, or 128 + the signal.
    pub fn shell_status(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 1,
        }
    }

    /// It exited 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// `3` for an exit code, `SIGSEGV` (or `signal 40`) for the signal that killed it: how ps and
/// run name a failed job's end, as sacct's ExitCode column does.
impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => f.pad(&code.to_string()),
            (None, Some(signal)) => f.pad(&signal_name(signal)),
            (None, None) => f.pad("-"),
        }
    }
}

/// A signal's name as `kill -l` gives it, with SIG.
pub fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 31] = [
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
        "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
        "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
    ];
    match usize::try_from(signal)
        .ok()
        .and_then(|s| NAMES.get(s.wrapping_sub(1)))
    {
        Some(name) => format!("SIG{name}"),
        None => format!("signal {signal}"),
    }
}

/// How a job ended, as its supervisor reports and keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    #[serde(flatten)]
    pub exit: ExitInfo,
    /// Why the command never ran (its directory or program was missing...), for `ps` and `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// When it ended (µs, its node's clock), when its supervisor saw it: a controller that
    /// learns of the end later (restarted, or the disk was full) records this, not its now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_us: Option<i64>,
    /// CPU time of every process of the job on its node, from its cgroup as it ended (none
    /// where it could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_us: Option<u64>,
    /// The most memory the job held at once on its node (see `cosched_cgroups::Usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// Processes of the job the kernel's OOM killer killed at its memory limit: the job
    /// ends `failed`, out of memory.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub oom_kills: u64,
}

/// The note of a job that ended `failed` because the kernel's OOM killer killed in it at the
/// memory limit its cgroup was given.
pub const OUT_OF_MEMORY: &str = "out of memory";

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a job runs and as whom: the controller's record of it. The node adds what is its
/// own (cgroups, the job's CPUs there, where the supervisor keeps its files).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// The file (absolute) its stdout and stderr are appended to where no client's
    /// descriptors reach it (a cluster's jobs, or one whose client left before it started):
    /// opened as the job's user on its node. A pattern whose `%j` and `%N` are filled in
    /// there ([`crate::pattern`]). `None`: `cosched-JOBID.out` in `cwd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Where its stderr goes, there, when not with its stdout: a pattern as `output`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A registered job's holder (`cosched hold`): it starts with SIGTERM blocked, so that
    /// the SIGTERM asking for the job's end waits for it, however early that comes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub holder: bool,
    /// The job's nodes and its processors on each, its launcher's node first: what the node
    /// tells the job in COSCHED_NTASKS, COSCHED_NODELIST and COSCHED_HOSTFILE.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<JobHost>,
    /// Its processes' resource limits, its submitter's ([`cosched_os::limits`]); none: the
    /// supervisor's own (a job recorded before they were kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<cosched_os::limits::ResourceLimit>,
}

/// One node of a job, as an MPI launcher reaches it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobHost {
    /// The node's name in the cluster.
    pub node: String,
    /// Its address (as registered) where the job's launcher reaches it by another name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The job's processors on it.
    pub slots: u32,
}

impl Launch {
    /// Where the job's output goes when no client's descriptors reach it (see `output`), its
    /// pattern filled in with the job's id and `node` (`None`: `%N` kept, to tell a person).
    pub fn output_path(&self, job: JobId, node: Option<&str>) -> String {
        match &self.output {
            Some(pattern) => crate::pattern::fill(pattern, job, node),
            None => format!("{}/cosched-{job}.out", self.cwd.trim_end_matches('/')),
        }
    }

    /// Where its stderr goes there, when not with its stdout (as `output_path`).
    pub fn error_path(&self, job: JobId, node: Option<&str>) -> Option<String> {
        self.error
            .as_ref()
            .map(|pattern| crate::pattern::fill(pattern, job, node))
    }
}

/// A cancelled job gets SIGTERM, then SIGKILL this much later if it is still there (the
/// agent keeps it, the controller tells the client).
pub const CANCEL_GRACE: Micros = 3_000_000;

/// An order for one node's agent, carried out in the order sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "order", rename_all = "snake_case", deny_unknown_fields)]
pub enum Command {
    /// A new matrix generation, applied at its first slot: each node is sent its own part
    /// ([`Generation::parts`]).
    Publish { generation: Generation },
    /// The job is placed on `cpus` of this node: its cgroup is made (or found again) and
    /// taken into the rotation; with `launch`, its supervisor starts it (once: the
    /// controller stored the intent first).
    Start {
        job: JobId,
        cpus: Partition,
        /// The memory (bytes) the job may hold on this node, swap included: its cgroup's
        /// limit, set on every node of the job before any of its processes starts there
        /// (launched, added or joining). A node that cannot enforce it refuses the job (it
        /// ends lost, with that reason). Never 0 (no job runs in no memory).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory: Option<std::num::NonZeroU64>,
        launch: Option<Launch>,
        /// How the job is switched here: `gang`, `moderate`, `implicit`, or `auto` (run as
        /// implicit and measured until `SetMode`); none: the node's mode.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<Mode>,
    },
    /// After a controller restart: find the job's supervisor again (or its kept exit status);
    /// keep it stopped if it was suspended.
    Adopt { job: JobId, suspended: bool },
    /// An `auto` job's mode was chosen: it is switched that way from the next boundary.
    SetMode { job: JobId, mode: Mode },
    /// Out of the rotation and stopped.
    Suspend { job: JobId },
    /// Out of the rotation and free to run; watched for work (an idle job).
    LetLoose { job: JobId },
    /// Let loose at the least weight, SIGTERM now, SIGKILL after [`CANCEL_GRACE`].
    Cancel { job: JobId },
    /// The controller recorded the job's end (`stored`: durably; else `Stored` follows):
    /// its cgroup goes, and once stored its supervisor may drop the exit status it keeps.
    Ended { job: JobId, stored: bool },
    /// An end that could not be stored earlier now is.
    Stored { job: JobId },
    /// Clean stop: every job let loose (or killed) and no more switching; orders about
    /// ends are still carried out until the controller lets go.
    Stop { cancel: bool },
    /// Start a process of the job on this node (LLNL's `GangProcAdd`: an MPI launcher's
    /// remote daemon), in the job's cgroup, as the job's user, under a supervisor of its own.
    AddProcess {
        job: JobId,
        process: ProcessRef,
        launch: Launch,
    },
    /// The process another node asked for ended (or was refused): the asker's waiting
    /// `launch-remote` gets the status.
    ProcessEnded {
        job: JobId,
        process: ProcessRef,
        ending: Ending,
    },
    /// A process started elsewhere joins a registered job (LLNL's `GangProcAdd`): moved into
    /// the job's cgroup if it is a process of `uid`'s, of no other job, and in the cgroup of
    /// process `asker` (the one that asked; none: root asked), all checked here. The agent
    /// answers with `Event::Joined` and the same `request`.
    Join {
        job: JobId,
        pid: i32,
        uid: u32,
        asker: Option<i32>,
        request: u64,
    },
    /// The registrant ended the registered job: let loose (out of the rotation, never
    /// watched for work), and its holder exits once the processes that joined have (the job
    /// ends with it).
    Finish { job: JobId },
}

/// An agent reports an `auto` job's behaviour once per window of its working time, at most
/// this many times (the job's first seconds); the controller chooses its mode as soon as the
/// reports are clear, at the last one at the latest. Out of step, a fine-grained job's ranks
/// sometimes share one processor and wait between every few microseconds, sometimes sit
/// beside another job's and look coarser for a second (`bench/compare --case modes`).
pub const BEHAVIOUR_WINDOWS: usize = 3;

/// What an `auto` job's processes on one node did in one window while they ran unswitched
/// (as `implicit` jobs do) in their first seconds: the shares of their time, over its working
/// processes (the busiest tasks, one per processor it has there, so a launcher asleep does
/// not count).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Behaviour {
    /// How long it was watched (µs).
    pub window_us: i64,
    /// On a processor.
    pub run: f64,
    /// Runnable, waiting for a processor (others had it).
    pub queued: f64,
    /// Asleep by its own choice: waiting for a message, a peer, a timer or I/O.
    pub asleep: f64,
    /// CPU time (µs) it ran, on average, each time it was switched in: a process that waits by
    /// yielding or napping between every few microseconds of work (a fine-grained one, out of
    /// step with its peers) is switched in again and again; one that computes runs until the
    /// kernel preempts it, milliseconds.
    pub run_per_switch_in_us: f64,
    /// At least one of its tasks stalled on storage I/O (the cgroup's `io.pressure` "some";
    /// none where the kernel has no pressure accounting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<f64>,
}

impl Eq for Behaviour {}

impl std::fmt::Display for Behaviour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let percent = |share: f64| (share * 100.0).round();
        write!(
            f,
            "over {:.1} s: ran {} %, queued {} %, asleep {} %, {:.0} µs a switch-in",
            self.window_us as f64 / 1e6,
            percent(self.run),
            percent(self.queued),
            percent(self.asleep),
            self.run_per_switch_in_us
        )?;
        match self.io {
            Some(io) => write!(f, ", stalled on I/O {} %", percent(io)),
            None => write!(f, ", I/O stalls not measured"),
        }
    }
}

/// A process added to a job at another node's request: the asking node and its request
/// number (unique on that node), which name the process everywhere.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessRef {
    pub node: String,
    pub request: u64,
}

impl std::fmt::Display for ProcessRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.node, self.request)
    }
}

/// What `cosched launch-remote` asks its node's agent, inside a job: run `command` (shell
/// words, joined as sshd would for `sh -c`) on the node known as `host`. The answer is one
/// [`Ending`] when that process ends (or is refused: code 255, as ssh, and a note).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessRequest {
    pub job: JobId,
    pub host: String,
    pub command: String,
}

/// A report from a node's agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// The job ended (reported by its supervisor, or found in its kept exit status).
    Ended { job: JobId, ending: Ending },
    /// The job cannot run or be found here (its supervisor could not start, or died).
    Lost { job: JobId, why: String },
    /// `Adopt` found no trace that the job ever started: it may be launched (again).
    NotStarted { job: JobId },
    /// The job used no CPU in its own slots for the idle time: out of the rotation.
    Idle { job: JobId },
    /// A job let loose for idleness computes again.
    Woke { job: JobId },
    /// The job's processes on `node` did nothing (no CPU, no byte moved, no process come or
    /// gone) in its own slots for the stall time, since `since_us`; `None`: they work again.
    /// The controller calls the job stalled once every node of it says so.
    Stalled {
        job: JobId,
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since_us: Option<i64>,
    },
    /// How an `auto` job's processes on `node` behaved in its first seconds, for the
    /// controller to choose its mode once every node of it reported.
    Behaviour {
        job: JobId,
        node: String,
        behaviour: Behaviour,
    },
    /// An order about the job could not be carried out (it is logged, nothing else).
    Trouble { job: JobId, what: String },
    /// The node's figures, about once a second and when it stops.
    Status { status: Box<NodeStatus> },
    /// A process of the job (uid `uid`, checked against the job's cgroup here) asks for a
    /// process on node `host` (an address or a node name).
    ProcessWanted {
        job: JobId,
        process: ProcessRef,
        host: String,
        command: String,
        uid: u32,
    },
    /// A process started by `AddProcess` ended (or could not start).
    ProcessEnded {
        job: JobId,
        process: ProcessRef,
        ending: Ending,
    },
    /// What the job's cgroup on a node other than its first counted, read as the job's end
    /// took it away there (its first node's figures come with its `Ending`): the controller
    /// adds the CPU time and keeps the largest peak.
    Used {
        job: JobId,
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cpu_us: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peak_memory_bytes: Option<u64>,
        #[serde(default, skip_serializing_if = "is_zero")]
        oom_kills: u64,
    },
    /// The answer to `Command::Join`: `refusal` says why the process did not join.
    Joined {
        job: JobId,
        pid: i32,
        request: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refusal: Option<String>,
    },
}

impl Ending {
    /// A process that never ran: status 255 (as ssh's own failures) and why.
    pub fn refused(why: impl Into<String>) -> Ending {
        Ending {
            exit: ExitInfo {
                code: Some(255),
                signal: None,
            },
            note: Some(why.into()),
            ..Ending::default()
        }
    }
}

impl Command {
    /// The job an order is about, if one.
    pub fn job(&self) -> Option<JobId> {
        match self {
            Command::Publish { .. } | Command::Stop { .. } => None,
            Command::Start { job, .. }
            | Command::Adopt { job, .. }
            | Command::SetMode { job, .. }
            | Command::Suspend { job }
            | Command::LetLoose { job }
            | Command::Cancel { job }
            | Command::Ended { job, .. }
            | Command::Stored { job }
            | Command::AddProcess { job, .. }
            | Command::ProcessEnded { job, .. }
            | Command::Join { job, .. }
            | Command::Finish { job } => Some(*job),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_and_events_are_tagged_enums_on_the_wire() {
        let start = Command::Start {
            job: 3,
            cpus: "0-1".parse().unwrap(),
            memory: None,
            launch: None,
            mode: None,
        };
        let text = serde_json::to_string(&start).unwrap();
        assert_eq!(
            text,
            r#"{"order":"start","job":3,"cpus":[[0,1]],"launch":null}"#
        );
        assert_eq!(serde_json::from_str::<Command>(&text).unwrap(), start);
        let ended = Event::Ended {
            job: 3,
            ending: Ending {
                exit: ExitInfo {
                    code: Some(0),
                    signal: None,
                },
                note: None,
                at_us: None,
                cpu_us: Some(1500),
                peak_memory_bytes: Some(64 << 20),
                oom_kills: 1,
            },
        };
        let text = serde_json::to_string(&ended).unwrap();
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), ended);
        // What an older supervisor kept (no figures) still reads.
        let kept: Ending = serde_json::from_str(r#"{"code":0,"signal":null}"#).unwrap();
        assert_eq!((kept.cpu_us, kept.oom_kills), (None, 0));
        assert!(serde_json::from_str::<Command>(r#"{"order":"explode","job":1}"#).is_err());
        assert!(serde_json::from_str::<Command>(r#"{"order":"cancel","job":1,"x":2}"#).is_err());
    }
}
