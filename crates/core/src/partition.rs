//! Partitions: the processors a job holds, as sorted runs of consecutive processor numbers.

use crate::procset::ProcSet;
use std::fmt;
use std::sync::Arc;

/// Consecutive processors `start..start + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    pub start: u32,
    pub len: u32,
}

impl Span {
    pub fn new(start: u32, len: u32) -> Self {
        Span { start, len }
    }

    pub fn end(self) -> u32 {
        self.start + self.len
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.len {
            1 => write!(f, "{}", self.start),
            _ => write!(f, "{}-{}", self.start, self.end() - 1),
        }
    }
}

/// What a job asks for: a number of processors, a `width × height` submesh of a mesh machine,
/// the same number of processors on each of several distinct nodes (an MPI job that wants
/// a rank per node, whatever the partitioner), or so many on each of given nodes (a job whose
/// processes live there already: placed again, it cannot move to other nodes).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    Count(u32),
    Mesh { width: u32, height: u32 },
    Nodes { nodes: u32, per_node: u32 },
    OnNodes(Arc<[NodeShare]>),
}

/// `procs` processors on node `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeShare {
    pub node: u32,
    pub procs: u32,
}

impl Shape {
    pub fn procs(&self) -> u64 {
        match *self {
            Shape::Count(n) => u64::from(n),
            Shape::Mesh { width, height } => u64::from(width) * u64::from(height),
            Shape::Nodes { nodes, per_node } => u64::from(nodes) * u64::from(per_node),
            Shape::OnNodes(ref shares) => shares.iter().map(|s| u64::from(s.procs)).sum(),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Count(n) => write!(f, "{n} processors"),
            Shape::Mesh { width, height } => write!(f, "a {width}x{height} submesh"),
            Shape::Nodes { nodes, per_node } => {
                write!(f, "{per_node} processors on each of {nodes} nodes")
            }
            Shape::OnNodes(shares) => {
                let each: Vec<String> = shares
                    .iter()
                    .map(|s| format!("{} on node {}", s.procs, s.node))
                    .collect();
                write!(f, "processors {}", each.join(", "))
            }
        }
    }
}

/// The processors a job holds: sorted, disjoint runs, adjacent runs merged, so one set of
/// processors has exactly one representation.
/// One run for a 1-D block; one run per row for a submesh; several for a scattered set.
/// Shared, immutable spans: plans copy partitions into every slice a job is in, so a clone
/// must not allocate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Partition {
    spans: Arc<[Span]>,
    /// Processors in all spans, counted once at construction.
    size: u32,
}

impl Partition {
    /// Builds a partition from spans; they are sorted and merged, and must not overlap.
    pub fn from_spans(mut spans: Vec<Span>) -> Self {
        spans.retain(|s| s.len > 0);
        spans.sort();
        debug_assert!(spans.windows(2).all(|w| w[0].end() <= w[1].start));
        let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
        for span in spans {
            match merged.last_mut() {
                Some(last) if last.end() == span.start => last.len += span.len,
                _ => merged.push(span),
            }
        }
        Partition {
            size: merged.iter().map(|s| s.len).sum(),
            spans: merged.into(),
        }
    }

    pub fn block(start: u32, len: u32) -> Self {
        Partition::from_spans(vec![Span::new(start, len)])
    }

    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn processors(&self) -> impl Iterator<Item = u32> + '_ {
        self.spans.iter().flat_map(|s| s.start..s.end())
    }

    /// True when none of this partition's processors is in `busy`.
    pub fn is_clear_in(&self, busy: &ProcSet) -> bool {
        // More processors than are free cannot all be free: a full slice answers at once.
        self.size <= busy.free() && self.spans.iter().all(|&s| busy.is_span_clear(s))
    }

    pub fn mark(&self, busy: &mut ProcSet) {
        busy.insert_spans(&self.spans);
    }

    pub fn unmark(&self, busy: &mut ProcSet) {
        busy.remove_spans(&self.spans);
    }

    /// How many of this partition's processors lie in `span`.
    pub fn processors_in(&self, span: Span) -> u32 {
        self.spans
            .iter()
            .map(|s| {
                s.end()
                    .min(span.end())
                    .saturating_sub(s.start.max(span.start))
            })
            .sum()
    }

    /// Its processors word by word, in order: `(w, bits)` for each word of 64 processors it
    /// has any of (bit `i`: processor `64 * w + i`).
    pub fn word_masks(&self) -> Vec<(usize, u64)> {
        let mut words: Vec<(usize, u64)> = Vec::new();
        for span in self.spans.iter() {
            let (first, last) = ((span.start / 64) as usize, ((span.end() - 1) / 64) as usize);
            let low = u64::MAX << (span.start % 64);
            let high = u64::MAX >> (63 - (span.end() - 1) % 64);
            let (head, tail) = if first == last {
                (low & high, None)
            } else {
                (low, Some(high))
            };
            // Runs are sorted, so a run can only share its first word with the run before.
            match words.last_mut() {
                Some((word, bits)) if *word == first => *bits |= head,
                _ => words.push((first, head)),
            }
            if let Some(tail) = tail {
                words.extend((first + 1..last).map(|word| (word, u64::MAX)));
                words.push((last, tail));
            }
        }
        words
    }

    pub fn overlaps(&self, other: &Partition) -> bool {
        let (mut i, mut j) = (0, 0);
        while i < self.spans.len() && j < other.spans.len() {
            let (a, b) = (self.spans[i], other.spans[j]);
            if a.start < b.end() && b.start < a.end() {
                return true;
            }
            if a.end() <= b.end() {
                i += 1;
            } else {
                j += 1;
            }
        }
        false
    }
}

impl fmt::Display for Partition {
    /// The cpuset list syntax (`0-3,8,10-11`), so it can be written to `cpuset.cpus` as is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, span) in self.spans.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{span}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_as_a_cpuset_list() {
        let p = Partition::from_spans(vec![Span::new(8, 1), Span::new(0, 4), Span::new(10, 2)]);
        assert_eq!(p.to_string(), "0-3,8,10-11");
        assert_eq!(p.size(), 7);
    }

    #[test]
    fn overlap_is_exact_at_edges() {
        let a = Partition::block(0, 4);
        assert!(!a.overlaps(&Partition::block(4, 4)));
        assert!(a.overlaps(&Partition::block(3, 1)));
        let b = Partition::from_spans(vec![Span::new(0, 1), Span::new(10, 1)]);
        assert!(!b.overlaps(&Partition::block(1, 9)));
        assert!(b.overlaps(&Partition::block(5, 6)));
        assert_eq!(a.processors_in(Span::new(4, 4)), 0);
        assert_eq!(a.processors_in(Span::new(3, 10)), 1);
        assert_eq!(b.processors_in(Span::new(0, 11)), 2);
        assert_eq!(b.processors_in(Span::new(1, 9)), 0);
    }

    #[test]
    fn word_masks_hold_the_processors_of_each_word() {
        let p = Partition::from_spans(vec![
            Span::new(3, 2),
            Span::new(8, 1),
            Span::new(60, 70),
            Span::new(200, 1),
        ]);
        let masks = p.word_masks();
        assert_eq!(
            masks,
            [
                (0, 0b1_0001_1000 | (0b1111 << 60)),
                (1, u64::MAX),
                (2, 0b11),
                (3, 1 << 8)
            ]
        );
    }
}
