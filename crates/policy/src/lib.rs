//! cosched-policy: the policy file (`/etc/cosched/cosched.toml`), read and checked.
//!
//! One job: turn a TOML file into a checked [`Policy`] and the policy into what the others
//! take: the core's [`Config`] (the daemon and the simulator both build their scheduler from
//! [`Policy::core_config`]), the controller's [`TimeLimits`] and [`UserLimits`]. The core never
//! reads a file. Every key is optional (an absent key takes its default) and an unknown one is
//! refused by name; every refusal is one line naming the file, the line, the key and the value.

mod document;
#[cfg(test)]
mod tests;

use cosched_core::{
    Backfill, Config, Micros, PartitionerKind, TimeLimits, UserLimits, MICROS_PER_SEC,
};
use cosched_proto::{Mode, StallAction};
use std::fmt;
use std::path::{Path, PathBuf};

/// Where the daemon and `cosched config` look when no `--config` is given.
pub const DEFAULT_PATH: &str = "/etc/cosched/cosched.toml";

/// Slices in `local` mode: every job runs at once, as plain Linux would run them.
const LOCAL_MPL: u32 = 4096;

/// Keys that hold only while the daemon runs as it started: the scheduler and the agent are
/// built from them. The rest (`classes.*`, `limits.*`) change on SIGHUP.
pub const RESTART_KEYS: [&str; 15] = [
    "scheduler.mode",
    "scheduler.quantum_ms",
    "scheduler.mpl",
    "scheduler.partitioner",
    "scheduler.alternates",
    "scheduler.backfill",
    "scheduler.repack",
    "scheduler.interactive_preempt",
    "scheduler.idle_after",
    "scheduler.give_away_after_ms",
    "memory.fit",
    "memory.node_memory",
    "memory.default_mem_per_cpu",
    "stall.after",
    "stall.action",
];

/// Everything a site decides, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub scheduler: SchedulerPolicy,
    /// Each class's default and longest time limit.
    pub classes: TimeLimits,
    /// What one user (root aside) may hold.
    pub limits: UserLimits,
    pub memory: MemoryPolicy,
    pub stall: StallPolicy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerPolicy {
    pub mode: Mode,
    /// Slot length, 10 ms to 10 minutes.
    pub quantum_ms: u32,
    /// Most slices in gang and moderate modes (implicit runs 1, local every job at once).
    pub mpl: u32,
    /// A 1-D partitioner: the daemon and the simulator schedule 1-D machines.
    pub partitioner: PartitionerKind,
    pub alternates: bool,
    pub backfill: Backfill,
    pub repack: bool,
    /// An interactive job runs in every slot this long before taking a slice of its own.
    pub interactive_preempt: Option<Micros>,
    /// A job using no CPU in its own slots this long leaves the rotation.
    pub idle_after: Option<Micros>,
    /// A gang whose processes have all been off the CPU this many ms within its slot gives
    /// its processors to the next slices' jobs until the boundary (gang mode; 0: never).
    pub give_away_after_ms: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPolicy {
    /// Jobs sharing a node's processors in different slices must fit its memory together.
    pub fit: bool,
    /// What jobs may hold on a node in all.
    pub node_memory: NodeMemory,
    /// Memory counted for a job that names none, per processor (bytes).
    pub default_mem_per_cpu: Option<u64>,
}

impl MemoryPolicy {
    /// What jobs may hold on a node in all, with the rule on: the policy's size, or with
    /// `auto` the node's own (`found`, if known). `None`: jobs are admitted by processors
    /// alone.
    pub fn node_size(&self, found: Option<u64>) -> Option<u64> {
        if !self.fit {
            return None;
        }
        match self.node_memory {
            NodeMemory::Bytes(bytes) => Some(bytes),
            NodeMemory::Auto => found,
        }
    }
}

/// Stalled jobs: every process waiting in its own slots, no CPU and no I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StallPolicy {
    /// A job doing nothing in this long of its own slots is stalled; `None`: never looked for.
    pub after: Option<Micros>,
    pub action: StallAction,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeMemory {
    /// The node's own size, as the agent finds it.
    Auto,
    Bytes(u64),
}

impl Default for Policy {
    /// The best configuration the trace tables of docs/simulator.md support ("Results on the
    /// archive's SP2 logs", both the first-fit and the scatter table, rows `gang`, alternates on,
    /// backfill on): gang with EASY backfilling keeps EASY's utilization and cuts the mean
    /// bounded slowdown on every log. MPL 8 cuts it further but lengthens the mean response
    /// (long jobs stretched), and every slice holds its frozen jobs' memory: MPL 4 is the
    /// middle the tables and `scripts/quickstart` show. First fit: contiguous CPUs share
    /// caches on a node, and the tables show contiguity costs backfilling almost nothing.
    /// No time limit and no per-user bound: killing jobs or refusing users is a site's
    /// choice, not a default.
    fn default() -> Self {
        Policy {
            scheduler: SchedulerPolicy {
                mode: Mode::Gang,
                quantum_ms: 100,
                mpl: 4,
                partitioner: PartitionerKind::FirstFit,
                alternates: true,
                backfill: Backfill::Easy,
                repack: false,
                interactive_preempt: Some(10 * MICROS_PER_SEC),
                idle_after: Some(600 * MICROS_PER_SEC),
                give_away_after_ms: 0,
            },
            classes: TimeLimits::default(),
            limits: UserLimits::default(),
            memory: MemoryPolicy {
                fit: true,
                node_memory: NodeMemory::Auto,
                default_mem_per_cpu: None,
            },
            stall: StallPolicy::default(),
        }
    }
}

/// Where a refusal points: the file (or "the command line") and, when known, the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub origin: String,
    pub line: Option<u32>,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.origin),
            None => f.write_str(&self.origin),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// (`error`, not `source`: its text is in this one's, and printed once.)
    #[error("{path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// The daemon's file could be changed by someone other than root.
    #[error("{path}: {why}: the policy sets every user's limits, so only root may write it (chown root, chmod go-w)")]
    Untrusted { path: String, why: String },
    /// Not TOML, an unknown key or section, a key given twice.
    #[error("{at}: {message}")]
    Syntax { at: Place, message: String },
    #[error("{at}: {key} = {value}: {problem}")]
    Invalid {
        at: Place,
        key: String,
        value: String,
        problem: Problem,
    },
}

/// What is wrong with one value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("expected {0}")]
    Type(&'static str),
    #[error("not one of {0}")]
    Unknown(&'static str),
    #[error("must be from {min} to {max}{unit}")]
    Range {
        min: i64,
        max: i64,
        unit: &'static str,
    },
    #[error("a bare number here would be minutes (Slurm's format): write the time as a string (\"0:10\" is 10 s, \"10\" is 10 minutes), or \"none\"")]
    BareDuration,
    #[error(transparent)]
    Duration(#[from] cosched_core::DurationError),
    #[error(transparent)]
    Size(#[from] cosched_core::SizeError),
    #[error("{0} places submeshes of a mesh; the daemon and the simulator schedule 1-D machines (first-fit, best-fit, buddy or scatter)")]
    NeedsMesh(PartitionerKind),
    #[error("longer than max_time ({})", cosched_core::Clock(*.0))]
    AboveMax(Micros),
    #[error("not shorter than scheduler.idle_after ({}): a job doing nothing leaves the rotation as idle first, and is never found stalled", cosched_core::Clock(*.0))]
    NotBeforeIdle(Micros),
}

/// One key whose value differs between two policies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    pub before: String,
    pub after: String,
    /// The running daemon applies it on SIGHUP (else it waits for a restart).
    pub live: bool,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {}", self.key, self.before, self.after)
    }
}

/// Why a file's directories would let a user other than root replace it, if they would:
/// each directory above it, as written and as resolved, must be root's and writable by no
/// one else, unless sticky (as /tmp: others cannot rename root's file there).
fn unsafe_directories(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let written = std::path::absolute(&parent).unwrap_or_else(|_| parent.clone());
    let resolved = std::fs::canonicalize(&parent).unwrap_or_else(|_| parent.clone());
    for dir in written.ancestors().chain(resolved.ancestors()) {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.uid() != 0 || (meta.mode() & 0o022 != 0 && !sticky) {
            return Some(format!(
                "its directory {} is not root's alone (owner uid {}, mode {:o}): another user could replace the file",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
    }
    None
}

impl Policy {
    /// Reads and checks a policy file.
    pub fn read(path: &Path) -> Result<Policy, PolicyError> {
        Policy::read_checked(path, false, |_| None)
    }

    /// Reads a policy file for the daemon, which runs as root: refused unless root owns it
    /// and no one else may write it (else a user could lift their own limits).
    pub fn read_trusted(path: &Path) -> Result<Policy, PolicyError> {
        use std::os::unix::fs::MetadataExt;
        if let Some(why) = unsafe_directories(path) {
            return Err(PolicyError::Untrusted {
                path: path.display().to_string(),
                why,
            });
        }
        // Not through a link: one in a directory a user could once write points anywhere.
        Policy::read_checked(path, true, |meta| {
            if meta.uid() != 0 {
                Some(format!("owned by uid {}, not root", meta.uid()))
            } else if meta.mode() & 0o022 != 0 {
                Some(format!(
                    "mode {:o} lets others write it",
                    meta.mode() & 0o777
                ))
            } else {
                None
            }
        })
    }

    /// Reads the file `refuse` finds nothing wrong with: judged by the open file's own
    /// metadata, so what is read is what was judged.
    fn read_checked(
        path: &Path,
        no_links: bool,
        refuse: impl FnOnce(&std::fs::Metadata) -> Option<String>,
    ) -> Result<Policy, PolicyError> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let name = path.display().to_string();
        let io = |error| PolicyError::Read {
            path: name.clone(),
            error,
        };
        let flags = if no_links { libc::O_NOFOLLOW } else { 0 };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)
            .map_err(io)?;
        if let Some(why) = refuse(&file.metadata().map_err(io)?) {
            return Err(PolicyError::Untrusted { path: name, why });
        }
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(io)?;
        Policy::parse(&text, &name)
    }

    /// Checks a policy's text; `origin` names it in errors (the file's path).
    pub fn parse(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        document::parse(text, origin)
    }

    /// Every key and its value, by section (what `cosched config --show --json` prints).
    pub fn document(&self) -> toml::Table {
        toml::Table::try_from(document::of(self)).expect("a document of plain values is a table")
    }

    /// The effective policy as TOML, every key written in the file's order: `parse` reads it
    /// back to this policy.
    pub fn to_toml(&self) -> String {
        toml::to_string(&document::of(self)).expect("a document of plain values is TOML")
    }

    /// The scheduling core's configuration. `local` mode runs every job at once (the most
    /// slices there are), `implicit` shares space only (one slice).
    pub fn core_config(&self) -> Config {
        let s = &self.scheduler;
        Config {
            partitioner: s.partitioner,
            mpl: match s.mode {
                Mode::Local => LOCAL_MPL,
                Mode::Implicit => 1,
                Mode::Gang | Mode::Moderate | Mode::Auto => s.mpl,
            },
            alternates: s.alternates,
            backfill: s.backfill,
            repack: s.repack,
            interactive_preempts: s.interactive_preempt.is_some(),
        }
    }

    /// The slot length in microseconds.
    pub fn quantum(&self) -> Micros {
        Micros::from(self.scheduler.quantum_ms) * 1_000
    }

    pub fn time_limits(&self) -> TimeLimits {
        self.classes.clone()
    }

    pub fn user_limits(&self) -> UserLimits {
        self.limits
    }

    /// Every key whose value differs from `before`'s, by key.
    pub fn changes(&self, before: &Policy) -> Vec<Change> {
        let (old, new) = (flat(&before.document()), flat(&self.document()));
        new.into_iter()
            .zip(old)
            .filter(|((_, after), (_, before))| after != before)
            .map(|((key, after), (_, before))| Change {
                live: !RESTART_KEYS.contains(&key.as_str()),
                key,
                before,
                after,
            })
            .collect()
    }

    /// The keys that differ from the running policy's and cannot change while jobs run.
    pub fn restart_needed(&self, running: &Policy) -> Vec<&'static str> {
        let changed = self.changes(running);
        RESTART_KEYS
            .into_iter()
            .filter(|key| changed.iter().any(|c| c.key == *key))
            .collect()
    }
}

/// `section.key` and the value as TOML writes it, sorted by key.
fn flat(document: &toml::Table) -> Vec<(String, String)> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut Vec<(String, String)>) {
        for (key, value) in table {
            let key = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                toml::Value::Table(inner) => walk(&key, inner, out),
                value => out.push((key, value.to_string())),
            }
        }
    }
    let mut out = Vec::new();
    walk("", document, &mut out);
    out
}
