//! cosched-core: the pure scheduling core of cosched.
//!
//! No clock, no I/O, no threads: time is an argument, results are returned as [`Decision`]s and
//! [`Plan`]s, and the same inputs always give the same outputs. The simulator and the daemon
//! drive this same code. See ARCHITECTURE.md for the invariants it keeps.

pub mod job;
pub mod limits;
pub mod machine;
pub mod partition;
pub mod partitioner;
pub mod plan;
pub mod procset;
pub mod queue;
pub mod scheduler;

pub use job::{Class, JobId, JobRequest, Memory, Micros, UnknownClass, MICROS_PER_SEC};
pub use limits::{
    parse_duration, parse_size, ClassTimes, Clock, ClockField, DurationError, OverMaxTime,
    SizeError, TimeLimits, UserLimits, LONGEST_LIMIT,
};
pub use machine::{Machine, MachineError, Topology};
pub use partition::{CpuListError, NodeShare, Partition, Shape, Span};
pub use partitioner::{NeverFits, PartitionerKind, ReleaseSearch, RunRule, UnknownPartitioner};
pub use plan::{Cycle, Generation, Plan, PlanEntry, PlanSlice, Role, Rotation, Switch};
pub use procset::{ProcSet, Released};
pub use scheduler::{
    Backfill, Config, ConfigError, Decision, Home, JobError, JobState, Pending, PlanChanges,
    RowMove, Scheduler, SubmitError, UnknownNode,
};
