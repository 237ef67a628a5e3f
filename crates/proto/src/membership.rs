//! Who is in the cluster: a node as its agent registers it, its joining and leaving as the
//! controller learns of them, and how a silent writer is told apart from a live one. Both
//! sides and the store between them (etcd, `cosched-cluster`) read these.

use crate::{Mode, Node};
use cosched_core::{Micros, Partition};
use serde::{Deserialize, Serialize};

/// A node as its agent registers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeInfo {
    pub protocol: u32,
    pub node: String,
    pub cpus: Partition,
    /// How it steers jobs (the controller must use the same).
    pub mode: Mode,
    /// Host name and process id of the agent (for messages).
    pub agent: String,
    /// When it joined, on its clock.
    pub joined_us: Micros,
    /// Where its jobs' MPI daemons are reached, when not at the node's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Seconds its key outlives its agent (`--lease-ttl`): the controller gives a node that
    /// sends no status this long up as gone, even if something else keeps its lease alive.
    #[serde(default)]
    pub lease_ttl_s: i64,
    /// Its memory (bytes), for memory-fit admission when the policy's `node_memory` is auto.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

impl NodeInfo {
    /// How often the node's agent reports its status when nothing else made it report: once
    /// per lease, a second at least. A controller that hears nothing from a node for three
    /// periods knows its agent stopped, whatever its lease says.
    pub fn status_period_us(&self) -> Micros {
        (self.lease_ttl_s * 1_000_000).max(crate::STATUS_PERIOD_US)
    }

    /// The node as the machine knows it: MPI reaches it at its address, else its name.
    pub fn to_node(&self) -> Node {
        Node {
            name: self.node.clone(),
            cpus: self.cpus.clone(),
            address: Some(self.address.clone().unwrap_or_else(|| self.node.clone())),
        }
    }
}

/// A node joining (its agent registered) or leaving (its lease expired or it left).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeChange {
    Joined(NodeInfo),
    Left(String),
}

/// How long a key has stayed at one revision, as seen by whoever asks again and again (a
/// writer that stopped, whatever keeps its lease alive).
#[derive(Debug, Default)]
pub struct WriteWatch {
    seen: Option<(i64, Micros)>,
}

impl WriteWatch {
    /// Seen at `revision` at `now`: `Some(how long, µs)` once it has been at that revision
    /// for more than `limit` µs.
    pub fn unchanged_for(&mut self, revision: i64, limit: Micros, now: Micros) -> Option<Micros> {
        match self.seen {
            Some((seen, since)) if seen == revision => (now - since > limit).then_some(now - since),
            _ => {
                self.seen = Some((revision, now));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_silent_once_one_revision_outlasts_the_limit() {
        let mut watch = WriteWatch::default();
        assert_eq!(watch.unchanged_for(7, 1_000, 0), None, "first seen");
        assert_eq!(
            watch.unchanged_for(7, 1_000, 1_000),
            None,
            "not past the limit"
        );
        assert_eq!(watch.unchanged_for(7, 1_000, 1_500), Some(1_500));
        // A write starts the count again.
        assert_eq!(watch.unchanged_for(8, 1_000, 2_000), None);
        assert_eq!(watch.unchanged_for(8, 1_000, 2_900), None);
        assert_eq!(watch.unchanged_for(8, 1_000, 3_001), Some(1_001));
    }
}
