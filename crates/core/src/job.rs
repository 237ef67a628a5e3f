//! Jobs as the core sees them: an id, a shape, a class, an optional run-time estimate and
//! the memory they need on each node.

use crate::partition::Shape;
use std::fmt;
use std::str::FromStr;

pub type JobId = u64;

/// Microseconds. Every time in the core is an integer number of microseconds passed in by the
/// caller (virtual in the simulator, `CLOCK_REALTIME` in the daemon): no float drift, no clock.
pub type Micros = i64;

pub const MICROS_PER_SEC: Micros = 1_000_000;

/// Job classes of the LLNL gang scheduler, highest priority first (the derived order is that).
/// Written by its name on the wire and in stored records.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Runs at once in every slot until done, preempting what it overlaps. Root only.
    Express,
    /// Placed before batch.
    Interactive,
    Batch,
    /// Never gets a slice of its own: runs only in cells no other job uses.
    Standby,
}

impl Class {
    pub const ALL: [Class; 4] = [
        Class::Express,
        Class::Interactive,
        Class::Batch,
        Class::Standby,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Class::Express => "express",
            Class::Interactive => "interactive",
            Class::Batch => "batch",
            Class::Standby => "standby",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown class '{0}' (known: express, interactive, batch, standby)")]
pub struct UnknownClass(pub String);

impl FromStr for Class {
    type Err = UnknownClass;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Class::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownClass(s.to_string()))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRequest {
    pub id: JobId,
    pub shape: Shape,
    pub class: Class,
    /// The user's run-time estimate (wall clock on dedicated processors), used by backfilling.
    pub estimate: Option<Micros>,
    /// Bytes of memory the job needs on each node it uses. `None` (not declared) counts as
    /// none: a caller with a site default fills it in before submitting.
    pub memory: Option<u64>,
}

impl JobRequest {
    pub fn new(id: JobId, shape: Shape) -> Self {
        JobRequest {
            id,
            shape,
            class: Class::Batch,
            estimate: None,
            memory: None,
        }
    }

    pub fn class(mut self, class: Class) -> Self {
        self.class = class;
        self
    }

    pub fn estimate(mut self, estimate: Micros) -> Self {
        self.estimate = Some(estimate);
        self
    }

    pub fn memory(mut self, bytes_per_node: u64) -> Self {
        self.memory = Some(bytes_per_node);
        self
    }

    /// The memory it holds on each of its nodes while placed, frozen or not.
    pub fn memory_per_node(&self) -> u64 {
        self.memory.unwrap_or(0)
    }
}
