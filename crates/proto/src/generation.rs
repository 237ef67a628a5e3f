//! Plan generations as they cross to node agents: the matrix with each entry's processors
//! split by node and written as that node's CPU numbers, pinned to a first slot of the shared
//! rotation.

use crate::{ProtoError, PROTOCOL_VERSION};
use cosched_core::{
    JobId, Machine, MachineError, Micros, Partition, PlanEntry, PlanSlice, Rotation,
};
use serde::{Deserialize, Serialize};

/// Why a job is in a slice (the core's [`cosched_core::Role`], on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Own,
    Alternate,
    Preempting,
    Standby,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(cosched_core::Role::from(*self).name())
    }
}

impl From<cosched_core::Role> for Role {
    fn from(role: cosched_core::Role) -> Self {
        match role {
            cosched_core::Role::Own => Role::Own,
            cosched_core::Role::Alternate => Role::Alternate,
            cosched_core::Role::Preempting => Role::Preempting,
            cosched_core::Role::Standby => Role::Standby,
        }
    }
}

impl From<Role> for cosched_core::Role {
    fn from(role: Role) -> Self {
        match role {
            Role::Own => cosched_core::Role::Own,
            Role::Alternate => cosched_core::Role::Alternate,
            Role::Preempting => cosched_core::Role::Preempting,
            Role::Standby => cosched_core::Role::Standby,
        }
    }
}

/// One node of the machine and the CPUs cosched may use there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub name: String,
    pub cpus: Partition,
    /// Where the node's MPI daemons are reached (an address or host name, as a hostfile
    /// gives it); none on one machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// The machine as nodes: processor `p` of the core's machine is the `p % n`-th CPU of node
/// `p / n`, with `n` CPUs per node (the core's `Machine::with_nodes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMap {
    nodes: Vec<Node>,
    /// Each node's CPUs in order, for the processor-to-CPU lookup.
    cpus: Vec<Vec<u32>>,
    per_node: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeMapError {
    #[error("a machine needs at least one node")]
    NoNodes,
    #[error("node '{0}' is named twice")]
    Duplicate(String),
    #[error("node name '{0}' must be 1-63 letters, digits, '-', '_' or '.'")]
    BadName(String),
    #[error("node '{node}' has {has} CPUs and node '{first}' {want}: nodes must be the same size")]
    Uneven {
        node: String,
        has: u32,
        first: String,
        want: u32,
    },
    #[error(transparent)]
    Machine(#[from] MachineError),
}

/// Whether `name` may name a node: it becomes part of etcd keys and cgroup paths.
pub fn valid_node_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.starts_with('.')
}

impl NodeMap {
    pub fn new(nodes: Vec<Node>) -> Result<NodeMap, NodeMapError> {
        let first = nodes.first().ok_or(NodeMapError::NoNodes)?;
        let per_node = first.cpus.size();
        for (i, node) in nodes.iter().enumerate() {
            if !valid_node_name(&node.name) {
                return Err(NodeMapError::BadName(node.name.clone()));
            }
            if nodes[..i].iter().any(|other| other.name == node.name) {
                return Err(NodeMapError::Duplicate(node.name.clone()));
            }
            if node.cpus.size() != per_node {
                return Err(NodeMapError::Uneven {
                    node: node.name.clone(),
                    has: node.cpus.size(),
                    first: first.name.clone(),
                    want: per_node,
                });
            }
        }
        let total = u64::from(per_node) * nodes.len() as u64;
        Machine::line(u32::try_from(total).unwrap_or(u32::MAX))?;
        Ok(NodeMap {
            cpus: nodes
                .iter()
                .map(|n| n.cpus.processors().collect())
                .collect(),
            nodes,
            per_node,
        })
    }

    /// Adds a node after the others (the core's `Scheduler::add_node` numbers it so), checked
    /// as `new` checks them all.
    pub fn add(&mut self, node: Node) -> Result<(), NodeMapError> {
        let mut nodes = self.nodes.clone();
        nodes.push(node);
        *self = NodeMap::new(nodes)?;
        Ok(())
    }

    /// One machine: node `name` with CPUs `0..procs`.
    pub fn single(name: &str, procs: u32) -> Result<NodeMap, NodeMapError> {
        NodeMap::new(vec![Node {
            name: name.to_string(),
            cpus: Partition::block(0, procs),
            address: None,
        }])
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The core's machine for these nodes.
    pub fn machine(&self) -> Result<Machine, MachineError> {
        Machine::line(self.per_node * self.nodes.len() as u32)?.with_nodes(self.per_node)
    }

    /// Each processor of the core's machine as `node/cpu`, in order.
    pub fn processor_names(&self) -> Vec<String> {
        self.nodes
            .iter()
            .zip(&self.cpus)
            .flat_map(|(node, cpus)| cpus.iter().map(move |cpu| format!("{}/{cpu}", node.name)))
            .collect()
    }

    /// A partition's processors, node by node (nodes it does not touch left out). Processors
    /// come in order, so each node's are adjacent: one pass over the partition, not over every
    /// node (which, once per entry, cost the controller milliseconds a generation at 1,000).
    pub fn place(&self, partition: &Partition) -> Vec<NodeCpus> {
        let mut per_node: Vec<(usize, Vec<u32>)> = Vec::new();
        for proc in partition.processors() {
            let node = (proc / self.per_node) as usize;
            let cpu = self.cpus[node][(proc % self.per_node) as usize];
            match per_node.last_mut() {
                Some((last, cpus)) if *last == node => cpus.push(cpu),
                _ => per_node.push((node, vec![cpu])),
            }
        }
        per_node
            .into_iter()
            .map(|(node, cpus)| NodeCpus {
                node: self.nodes[node].name.clone(),
                cpus: Partition::from_processors(cpus),
            })
            .collect()
    }
}

/// A job's CPUs on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeCpus {
    pub node: String,
    pub cpus: Partition,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub job: JobId,
    pub role: Role,
    pub cpus: Vec<NodeCpus>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slice {
    pub entries: Vec<Entry>,
}

/// A plan generation for every node: from slot `first_slot` on, slot `k` (starting at
/// `epoch_us + k * quantum_us` on each node's clock) runs slice
/// `(k - first_slot + first_slice) mod slices`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    pub protocol: u32,
    pub number: u64,
    /// When the controller made it, on its clock (0: not said): agents measure how long it
    /// took to reach them.
    #[serde(default)]
    pub published_us: Micros,
    pub epoch_us: Micros,
    pub quantum_us: Micros,
    pub first_slot: i64,
    pub first_slice: usize,
    pub slices: Vec<Slice>,
}

impl Generation {
    pub fn new(generation: &cosched_core::Generation, rotation: Rotation, nodes: &NodeMap) -> Self {
        Generation {
            protocol: PROTOCOL_VERSION,
            number: generation.number,
            published_us: 0,
            epoch_us: rotation.epoch,
            quantum_us: rotation.quantum,
            first_slot: generation.first_slot,
            first_slice: generation.first_slice,
            slices: generation
                .plan
                .slices
                .iter()
                .map(|slice| Slice {
                    entries: slice
                        .entries
                        .iter()
                        .map(|entry| Entry {
                            job: entry.job,
                            role: entry.role.into(),
                            cpus: nodes.place(&entry.partition),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    pub fn rotation(&self) -> Rotation {
        Rotation::new(self.epoch_us, self.quantum_us)
    }

    /// Refuses a generation this build cannot read right.
    pub fn check(&self) -> Result<(), ProtoError> {
        if self.protocol != PROTOCOL_VERSION {
            return Err(ProtoError::Version {
                what: "generation",
                got: self.protocol,
            });
        }
        if self.quantum_us <= 0 {
            return Err(ProtoError::Invalid(format!(
                "generation {}: quantum {} µs",
                self.number, self.quantum_us
            )));
        }
        Ok(())
    }

    /// What each of `nodes` is sent: every slice (so slot arithmetic is the same everywhere)
    /// with only the entries that have processors on that node, and only those processors.
    /// A node's part does not grow with the machine: a whole generation for 1,000 nodes sent
    /// to each would be a million entries on the wire. Made in one pass over the entries.
    pub fn parts(&self, nodes: &[&str]) -> Vec<Generation> {
        let mut parts: Vec<Generation> = nodes
            .iter()
            .map(|_| Generation {
                slices: vec![Slice::default(); self.slices.len()],
                ..*self
            })
            .collect();
        let index: std::collections::HashMap<&str, usize> =
            nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        for (s, slice) in self.slices.iter().enumerate() {
            for entry in &slice.entries {
                for here in &entry.cpus {
                    if let Some(&i) = index.get(here.node.as_str()) {
                        parts[i].slices[s].entries.push(Entry {
                            job: entry.job,
                            role: entry.role,
                            cpus: vec![here.clone()],
                        });
                    }
                }
            }
        }
        parts
    }

    /// What `node` runs: every slice (so slot arithmetic is the same everywhere) with the
    /// entries that have processors there, as CPU numbers of that node.
    pub fn for_node(&self, node: &str) -> cosched_core::Generation {
        let slices = self
            .slices
            .iter()
            .map(|slice| PlanSlice {
                entries: slice
                    .entries
                    .iter()
                    .filter_map(|entry| {
                        let here = entry.cpus.iter().find(|c| c.node == node)?;
                        Some(PlanEntry {
                            job: entry.job,
                            partition: here.cpus.clone(),
                            role: entry.role.into(),
                        })
                    })
                    .collect(),
            })
            .collect();
        cosched_core::Generation {
            number: self.number,
            first_slot: self.first_slot,
            first_slice: self.first_slice,
            plan: cosched_core::Plan { slices },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosched_core::{Plan, Span};

    fn two_nodes() -> NodeMap {
        NodeMap::new(vec![
            Node {
                name: "a".into(),
                cpus: "2-3".parse().unwrap(),
                address: None,
            },
            Node {
                name: "b".into(),
                cpus: "0,5".parse().unwrap(),
                address: None,
            },
        ])
        .unwrap()
    }

    #[test]
    fn partitions_split_into_each_nodes_cpu_numbers() {
        let nodes = two_nodes();
        assert_eq!(nodes.machine().unwrap().nodes(), 2);
        let placed = nodes.place(&Partition::from_spans(vec![Span::new(1, 2)]));
        assert_eq!(
            placed,
            vec![
                NodeCpus {
                    node: "a".into(),
                    cpus: "3".parse().unwrap()
                },
                NodeCpus {
                    node: "b".into(),
                    cpus: "0".parse().unwrap()
                }
            ]
        );
        assert!(nodes.place(&Partition::block(2, 2))[0].node == "b");
    }

    #[test]
    fn node_maps_refuse_what_cannot_be_a_machine() {
        let node = |name: &str, cpus: &str| Node {
            name: name.into(),
            cpus: cpus.parse().unwrap(),
            address: None,
        };
        assert_eq!(NodeMap::new(vec![]), Err(NodeMapError::NoNodes));
        assert!(matches!(
            NodeMap::new(vec![node("a", "0"), node("a", "1")]),
            Err(NodeMapError::Duplicate(_))
        ));
        assert!(matches!(
            NodeMap::new(vec![node("a", "0"), node("b", "0-1")]),
            Err(NodeMapError::Uneven { .. })
        ));
        for bad in ["", "a/b", "../x", ".hidden", &"x".repeat(64)] {
            assert!(
                matches!(
                    NodeMap::new(vec![node(bad, "0")]),
                    Err(NodeMapError::BadName(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_node_added_comes_after_the_others_and_is_checked() {
        let mut nodes = two_nodes();
        let node = |name: &str, cpus: &str| Node {
            name: name.into(),
            cpus: cpus.parse().unwrap(),
            address: None,
        };
        nodes.add(node("c", "0-1")).unwrap();
        assert_eq!(nodes.machine().unwrap().nodes(), 3);
        let placed = nodes.place(&Partition::block(4, 2));
        assert_eq!(placed[0].node, "c");
        assert_eq!(
            nodes.add(node("a", "0-1")),
            Err(NodeMapError::Duplicate("a".into()))
        );
        assert!(matches!(
            nodes.add(node("d", "0-3")),
            Err(NodeMapError::Uneven { has: 4, .. })
        ));
        assert_eq!(nodes.nodes().len(), 3, "a refused node is not added");
    }

    /// Job 7 on all four processors, then job 9 (an alternate) on `nine` from processor 2.
    fn job_7_then_9(nine: u32) -> Plan {
        let slice = |job, partition, role| PlanSlice {
            entries: vec![PlanEntry {
                job,
                partition,
                role,
            }],
        };
        Plan {
            slices: vec![
                slice(7, Partition::block(0, 4), cosched_core::Role::Own),
                slice(9, Partition::block(2, nine), cosched_core::Role::Alternate),
            ],
        }
    }

    #[test]
    fn each_node_is_sent_its_part_and_sees_what_the_whole_shows_it() {
        let nodes = two_nodes();
        let core = cosched_core::Generation::follow(None, job_7_then_9(2), 40);
        let whole = Generation::new(&core, Rotation::new(1_000, 100), &nodes);
        let parts = whole.parts(&["a", "b", "absent"]);
        for (part, node) in parts.iter().zip(["a", "b", "absent"]) {
            assert_eq!(part.slices.len(), 2, "every slice, for the slot arithmetic");
            assert_eq!(part.for_node(node), whole.for_node(node), "{node}");
            assert!(part
                .slices
                .iter()
                .flat_map(|s| &s.entries)
                .all(|e| e.cpus.len() == 1 && e.cpus[0].node == node));
        }
        assert!(parts[0].slices[1].entries.is_empty(), "job 9 is on b only");
        assert_eq!(parts[1].slices[1].entries[0].job, 9);
    }

    #[test]
    fn a_generation_crosses_the_wire_and_each_node_sees_its_part() {
        let nodes = two_nodes();
        let core = cosched_core::Generation::follow(None, job_7_then_9(1), 40);
        let wire = Generation::new(&core, Rotation::new(1_000, 100), &nodes);
        let text = serde_json::to_string(&wire).unwrap();
        assert!(text.contains(r#""role":"alternate""#), "{text}");
        let back: Generation = serde_json::from_str(&text).unwrap();
        assert_eq!(back, wire);
        back.check().unwrap();
        let a = back.for_node("a");
        assert_eq!(a.plan.slices.len(), 2);
        assert_eq!(a.plan.slices[0].entries[0].partition.to_string(), "2-3");
        assert!(a.plan.slices[1].entries.is_empty());
        let b = back.for_node("b");
        assert_eq!(b.plan.slices[0].entries[0].partition.to_string(), "0,5");
        assert_eq!(b.plan.slices[1].entries[0].partition.to_string(), "0");
        assert_eq!(
            b.plan.slices[1].entries[0].role,
            cosched_core::Role::Alternate
        );
        assert_eq!((b.first_slot, b.number), (core.first_slot, core.number));
        let mut newer = back.clone();
        newer.protocol += 1;
        assert!(newer.check().unwrap_err().to_string().contains("protocol"));
    }
}
