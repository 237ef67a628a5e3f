//! The machine being scheduled: processors on a line or on a `width × height` mesh.

use crate::partition::Span;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// Processors `0..n`, neighbours by number (a multicore machine, a cluster of SMPs).
    Line,
    /// Processor `y * width + x` sits at `(x, y)` (the AP1000+ case); partitions are submeshes.
    Mesh { width: u32, height: u32 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    procs: u32,
    topology: Topology,
    /// Processors per node; a processor's node is `proc / cpus_per_node`. One node by default.
    cpus_per_node: u32,
    /// Bytes of memory on each node (`None`: not declared, so memory never refuses a job).
    node_memory: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    #[error("a machine needs at least one processor")]
    NoProcessors,
    #[error("{procs} processors is more than cosched models (at most {max})", max = Machine::MAX_PROCS)]
    TooManyProcessors { procs: u64 },
    #[error("a mesh needs a width and a height of at least 1 (got {width}x{height})")]
    EmptyMesh { width: u32, height: u32 },
    #[error("{procs} processors do not split into nodes of {cpus_per_node}")]
    BadNodeSize { procs: u32, cpus_per_node: u32 },
    #[error("a mesh machine cannot gain a node")]
    MeshCannotGrow,
}

impl Machine {
    /// The largest machine: 2^24 processors (the largest systems built have about 10^7 cores).
    /// Every slice keeps a bitset of this size, so a mistyped count would otherwise cost
    /// gigabytes before anything is scheduled.
    pub const MAX_PROCS: u32 = 1 << 24;

    fn check_size(procs: u64) -> Result<(), MachineError> {
        match procs {
            0 => Err(MachineError::NoProcessors),
            n if n > u64::from(Machine::MAX_PROCS) => {
                Err(MachineError::TooManyProcessors { procs: n })
            }
            _ => Ok(()),
        }
    }

    pub fn line(procs: u32) -> Result<Self, MachineError> {
        Machine::check_size(u64::from(procs))?;
        Ok(Machine {
            procs,
            topology: Topology::Line,
            cpus_per_node: procs,
            node_memory: None,
        })
    }

    pub fn mesh(width: u32, height: u32) -> Result<Self, MachineError> {
        if width == 0 || height == 0 {
            return Err(MachineError::EmptyMesh { width, height });
        }
        Machine::check_size(u64::from(width) * u64::from(height))?;
        let procs = width * height;
        Ok(Machine {
            procs,
            topology: Topology::Mesh { width, height },
            cpus_per_node: procs,
            node_memory: None,
        })
    }

    /// Groups processors into nodes of `cpus_per_node` consecutive numbers.
    pub fn with_nodes(mut self, cpus_per_node: u32) -> Result<Self, MachineError> {
        if cpus_per_node == 0 || !self.procs.is_multiple_of(cpus_per_node) {
            return Err(MachineError::BadNodeSize {
                procs: self.procs,
                cpus_per_node,
            });
        }
        self.cpus_per_node = cpus_per_node;
        Ok(self)
    }

    /// Gives every node `bytes` of memory: jobs placed on a node must fit in it together.
    pub fn with_node_memory(mut self, bytes: u64) -> Self {
        self.node_memory = Some(bytes);
        self
    }

    pub fn node_memory(&self) -> Option<u64> {
        self.node_memory
    }

    /// This machine with one more node of the same size, numbered after the others.
    pub fn with_another_node(&self) -> Result<Machine, MachineError> {
        if self.topology != Topology::Line {
            return Err(MachineError::MeshCannotGrow);
        }
        let procs = u64::from(self.procs) + u64::from(self.cpus_per_node);
        Machine::check_size(procs)?;
        Ok(Machine {
            procs: procs as u32,
            ..self.clone()
        })
    }

    pub fn procs(&self) -> u32 {
        self.procs
    }

    pub fn topology(&self) -> Topology {
        self.topology
    }

    pub fn node_of(&self, proc: u32) -> u32 {
        proc / self.cpus_per_node
    }

    pub fn nodes(&self) -> u32 {
        self.procs / self.cpus_per_node
    }

    pub fn cpus_per_node(&self) -> u32 {
        self.cpus_per_node
    }

    /// Node `node`'s processors.
    pub fn node_span(&self, node: u32) -> Span {
        Span::new(node * self.cpus_per_node, self.cpus_per_node)
    }

    /// The nodes a set of spans touches, each once, in order (spans sorted and apart).
    pub fn nodes_under<'a>(&self, spans: &'a [Span]) -> impl Iterator<Item = u32> + 'a {
        let per_node = self.cpus_per_node;
        let mut last = None;
        spans
            .iter()
            .flat_map(move |span| span.start / per_node..=(span.end() - 1) / per_node)
            .filter(move |&node| last.replace(node) != Some(node))
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.topology {
            Topology::Line => write!(f, "{} processors", self.procs),
            Topology::Mesh { width, height } => write!(f, "a {width}x{height} mesh"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processors_know_their_node() {
        let m = Machine::line(8).unwrap().with_nodes(2).unwrap();
        assert_eq!(
            (m.nodes(), m.node_of(0), m.node_of(1), m.node_of(7)),
            (4, 0, 0, 3)
        );
        assert_eq!(Machine::line(8).unwrap().nodes(), 1);
        assert!(Machine::line(8).unwrap().with_nodes(3).is_err());
        assert_eq!(Machine::line(0), Err(MachineError::NoProcessors));
        assert!(Machine::mesh(0, 4).is_err());
        assert_eq!(Machine::mesh(4, 2).unwrap().procs(), 8);
        assert_eq!(
            Machine::line(u32::MAX).unwrap_err().to_string(),
            "4294967295 processors is more than cosched models (at most 16777216)"
        );
        assert!(Machine::mesh(65_536, 65_536).is_err());
        assert!(Machine::line(Machine::MAX_PROCS).is_ok());
    }

    #[test]
    fn spans_name_each_node_they_touch_once() {
        let m = Machine::line(8).unwrap().with_nodes(2).unwrap();
        let spans = [Span::new(1, 2), Span::new(3, 1), Span::new(6, 2)];
        assert_eq!(m.nodes_under(&spans).collect::<Vec<_>>(), [0, 1, 3]);
        assert_eq!(m.with_node_memory(1 << 30).node_memory(), Some(1 << 30));
    }
}
