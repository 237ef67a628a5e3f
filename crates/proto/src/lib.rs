//! cosched-proto: what crosses the seam between the controller (API, store, core) and the
//! agent of each node: plan generations whose partitions are per-node CPU sets, orders, and
//! job events, all versioned by [`PROTOCOL_VERSION`]; the traits orders and events pass
//! through ([`OrderSink`], [`PlanSource`], [`EventSink`]) and the nodes' membership. Classes, roles and states are enums
//! here, never formatted strings.

pub mod api;
mod generation;
mod membership;
mod names;
mod order;
pub mod pattern;
mod seam;
mod status;

pub use generation::{
    valid_node_name, Entry, Generation, Node, NodeCpus, NodeMap, NodeMapError, Role, Slice,
};
pub use membership::{NodeChange, NodeInfo, WriteWatch};
pub use names::{
    Class, JobState, Mode, Pending, StallAction, UnknownMode, UnknownStallAction, UnknownState,
};
pub use order::{
    signal_name, Behaviour, Command, Ending, Event, ExitInfo, JobHost, Launch, ProcessRef,
    ProcessRequest, BEHAVIOUR_WINDOWS, CANCEL_GRACE, OUT_OF_MEMORY,
};
pub use seam::{receive_by, EventSink, Order, OrderSink, PlanSource, Received};
pub use status::{
    BoundaryRecord, Histogram, JobMoment, JobSkew, NodeHistograms, NodeStatus, SlotStart, Summary,
    HISTOGRAM_BOUNDS_US, MAX_REPORTED_STARTS, SPREAD_SAMPLE_US, STATUS_PERIOD_US,
};

/// Bumped whenever a wire type changes meaning; a reader refuses another version.
pub const PROTOCOL_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("{what} speaks protocol {got}, this build protocol {PROTOCOL_VERSION}: run the same cosched version everywhere")]
    Version { what: &'static str, got: u32 },
    #[error("{0}")]
    Invalid(String),
}
