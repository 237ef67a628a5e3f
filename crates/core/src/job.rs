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
        // Padded as asked: `ps` lines its columns up with `{:<11}`.
        f.pad(self.name())
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
    /// The memory the job needs on each node it uses. `None` (not declared) counts as none:
    /// a caller with a site default fills it in before submitting.
    pub memory: Option<Memory>,
    /// It had its preempting stretch already (an interactive job back from a suspension):
    /// it takes a slice like batch, else a suspend and resume would give it another.
    pub settled: bool,
}

/// Memory a job needs: so many bytes on each node it uses (`--mem`), or so many for each of
/// its processors there (`--mem-per-cpu`, and SWF's requested memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    PerNode(u64),
    PerCpu(u64),
}

impl Memory {
    /// Bytes it holds on a node where it has `procs` processors.
    pub fn on_node(self, procs: u32) -> u64 {
        match self {
            Memory::PerNode(bytes) => bytes,
            Memory::PerCpu(bytes) => bytes.saturating_mul(u64::from(procs)),
        }
    }

    /// How many processors of a node with `free` bytes left it may take there (`u32::MAX`:
    /// as many as it likes).
    pub fn procs_within(self, free: u64) -> u32 {
        match self {
            Memory::PerNode(bytes) if bytes <= free => u32::MAX,
            Memory::PerNode(_) => 0,
            Memory::PerCpu(0) => u32::MAX,
            Memory::PerCpu(bytes) => u32::try_from(free / bytes).unwrap_or(u32::MAX),
        }
    }

    /// Whether it needs any memory at all.
    pub fn is_some(self) -> bool {
        !matches!(self, Memory::PerNode(0) | Memory::PerCpu(0))
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Memory::PerNode(bytes) => write!(f, "{bytes} bytes of memory per node"),
            Memory::PerCpu(bytes) => write!(f, "{bytes} bytes of memory per processor"),
        }
    }
}

impl JobRequest {
    pub fn new(id: JobId, shape: Shape) -> Self {
        JobRequest {
            id,
            shape,
            class: Class::Batch,
            estimate: None,
            memory: None,
            settled: false,
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

    pub fn memory(mut self, memory: Memory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Its memory if it needs any.
    pub fn needs_memory(&self) -> Option<Memory> {
        self.memory.filter(|m| m.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_is_padded_to_the_width_asked() {
        assert_eq!(format!("{:<11}|", Class::Batch), "batch      |");
        assert_eq!(format!("{}", Class::Standby), "standby");
    }
}
