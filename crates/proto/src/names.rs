//! The enums that name things on the wire: job classes, job states, switching modes. Each
//! is written as its lower-case name, the same word the CLI prints.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A job class: the core's own, which the wire and the stored records write by its name.
pub use cosched_core::Class;

/// Where a job is in its life: the one lifecycle, kept in the controller's records and shown
/// by the API's views and `ps`. (The core's `JobState`, queued or placed in the matrix, is
/// the scheduler's placement of a job that has not ended, not this.) A record is never
/// `Waiting`: it keeps `Queued` and whether the job's processes exist (`launched`), as stored
/// records always have; views show that as `Waiting` ([`JobState::shown`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for processors; never started.
    Queued,
    /// Waiting for processors again; its processes exist, held stopped.
    Waiting,
    Running,
    /// Stopped by its owner, out of the rotation.
    Suspended,
    /// Out of the rotation for using no CPU in its slots; runs unscheduled.
    Idle,
    /// Its command exited 0. Stores written before the distinction call it `done`.
    #[serde(alias = "done")]
    Completed,
    Cancelled,
    /// Killed at its time limit.
    Timeout,
    /// Its command exited non-zero or was killed by a signal that was no cancel or limit's,
    /// or cosched ended it for what it did (over its memory: the reason in its record's note).
    Failed,
    /// Its supervisor and exit status were gone, or it could not start.
    Lost,
}

impl JobState {
    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Waiting => "waiting",
            JobState::Running => "running",
            JobState::Suspended => "suspended",
            JobState::Idle => "idle",
            JobState::Completed => "completed",
            JobState::Cancelled => "cancelled",
            JobState::Timeout => "timeout",
            JobState::Failed => "failed",
            JobState::Lost => "lost",
        }
    }

    /// Every state a view shows, in the order of a job's life.
    pub const ALL: [JobState; 10] = [
        JobState::Queued,
        JobState::Waiting,
        JobState::Running,
        JobState::Suspended,
        JobState::Idle,
        JobState::Completed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::Failed,
        JobState::Lost,
    ];

    /// The states a job ends in. A new way of ending goes here: `ended` and the stores'
    /// queries of unfinished jobs read this list.
    pub const ENDED: [JobState; 5] = [
        JobState::Completed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::Failed,
        JobState::Lost,
    ];

    /// Whether a job in this state is over.
    pub fn ended(self) -> bool {
        JobState::ENDED.contains(&self)
    }

    /// The state a view shows for a record in this state: a queued job whose processes exist
    /// (`launched`: queued again, held stopped) is waiting.
    pub fn shown(self, launched: bool) -> JobState {
        match self {
            JobState::Queued if launched => JobState::Waiting,
            state => state,
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state '{0}' (known: queued, waiting, running, suspended, idle, completed, cancelled, timeout, failed, lost)")]
pub struct UnknownState(pub String);

impl FromStr for JobState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.name() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

/// Why a job that has not started (or was taken out of the rotation) waits: Slurm's habit of
/// a reason on every pending job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pending {
    /// No slice has the processors it needs free.
    Resources,
    /// Processors are free, but not with the memory it asked for beside the jobs resident there.
    Memory,
    /// It would fit, but an earlier job comes first (strict order, or its reservation).
    Priority,
    /// Its owner holds as many jobs or processors as the policy's per-user limits allow.
    Limit,
    /// It is pinned to a node whose agent left.
    Node,
    /// Its owner suspended it.
    Held,
}

impl Pending {
    pub const ALL: [Pending; 6] = [
        Pending::Resources,
        Pending::Memory,
        Pending::Priority,
        Pending::Limit,
        Pending::Node,
        Pending::Held,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Pending::Resources => "resources",
            Pending::Memory => "memory",
            Pending::Priority => "priority",
            Pending::Limit => "limit",
            Pending::Node => "node",
            Pending::Held => "held",
        }
    }

    /// What the reason means, for a person.
    pub fn explained(self) -> &'static str {
        match self {
            Pending::Resources => "waiting for processors",
            Pending::Memory => "waiting for memory on the nodes with free processors",
            Pending::Priority => "waiting behind an earlier job's turn",
            Pending::Limit => "waiting: its owner is at a per-user limit",
            Pending::Node => "waiting for its node to come back",
            Pending::Held => "suspended by its owner",
        }
    }
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// How the processes of a slice are made to run together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Jobs outside the current slice are frozen.
    Gang,
    /// Nothing is frozen: the current slice's jobs get full weight, the others almost none.
    Moderate,
    /// No switching; jobs are told to spin briefly then block (space sharing only).
    Implicit,
    /// No control at all: plain Linux, the baseline (a whole machine's mode, never a job's).
    Local,
    /// A job's mode chosen from its measured behaviour in its first seconds (it runs as
    /// `implicit`, waiting spin-then-block, until then): `gang`, `moderate` or `implicit`.
    Auto,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Gang,
        Mode::Moderate,
        Mode::Implicit,
        Mode::Local,
        Mode::Auto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Gang => "gang",
            Mode::Moderate => "moderate",
            Mode::Implicit => "implicit",
            Mode::Local => "local",
            Mode::Auto => "auto",
        }
    }

    /// Whether a job may ask for it (`run --mode`): every mode but `local`.
    pub fn for_jobs(self) -> bool {
        self != Mode::Local
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode '{0}' (known: gang, moderate, implicit, local, auto)")]
pub struct UnknownMode(pub String);

impl FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownMode(s.to_string()))
    }
}

/// What the controller does with a job found stalled (the policy's `stall.action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StallAction {
    /// Shows it (`ps`, the console, the metrics) and lets it be.
    #[default]
    Report,
    /// Ends it as a cancel does (SIGTERM, SIGKILL after the grace): `failed`, noted "stalled".
    Cancel,
}

impl StallAction {
    pub fn name(self) -> &'static str {
        match self {
            StallAction::Report => "report",
            StallAction::Cancel => "cancel",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown stall action '{0}' (known: report, cancel)")]
pub struct UnknownStallAction(pub String);

impl FromStr for StallAction {
    type Err = UnknownStallAction;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [StallAction::Report, StallAction::Cancel]
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownStallAction(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pending_reason_is_written_by_its_name() {
        for reason in Pending::ALL {
            let wire = serde_json::to_string(&reason).unwrap();
            assert_eq!(wire, format!("\"{reason}\""));
            assert_eq!(serde_json::from_str::<Pending>(&wire).unwrap(), reason);
        }
    }

    #[test]
    fn names_on_the_wire_are_the_printed_names() {
        for class in Class::ALL {
            let wire = serde_json::to_string(&class).unwrap();
            assert_eq!(wire, format!("\"{class}\""));
            assert_eq!(serde_json::from_str::<Class>(&wire).unwrap(), class);
        }
        for state in [JobState::Waiting, JobState::Cancelled] {
            assert_eq!(
                serde_json::to_string(&state).unwrap(),
                format!("\"{}\"", state.name())
            );
        }
        for mode in ["gang", "moderate", "implicit", "local", "auto"] {
            let parsed: Mode = mode.parse().unwrap();
            assert_eq!(
                serde_json::to_string(&parsed).unwrap(),
                format!("\"{mode}\"")
            );
        }
        assert!("fast".parse::<Mode>().is_err());
        assert_eq!(format!("{:<10}|", JobState::Completed), "completed |");
    }

    #[test]
    fn a_records_state_is_shown_as_views_name_it() {
        assert_eq!(JobState::Queued.shown(true), JobState::Waiting);
        assert_eq!(JobState::Queued.shown(false), JobState::Queued);
        assert_eq!(JobState::Suspended.shown(true), JobState::Suspended);
        // Records and views write every state by its one name.
        let running = [JobState::Queued, JobState::Waiting, JobState::Running];
        let held = [JobState::Suspended, JobState::Idle];
        for state in running.into_iter().chain(held) {
            assert!(!state.ended(), "{state}");
        }
        for state in running.into_iter().chain(held).chain(JobState::ENDED) {
            let wire = serde_json::to_string(&state).unwrap();
            assert_eq!(wire, format!("\"{}\"", state.name()));
            assert_eq!(serde_json::from_str::<JobState>(&wire).unwrap(), state);
        }
        assert!(JobState::ENDED.iter().all(|s| s.ended()));
        for state in JobState::ALL {
            assert_eq!(state.name().parse::<JobState>(), Ok(state));
        }
        assert!("done".parse::<JobState>().is_err());
        // Records stored before `completed` and `failed` were told apart still read.
        assert_eq!(
            serde_json::from_str::<JobState>("\"done\"").unwrap(),
            JobState::Completed
        );
    }
}
