//! Partitions: the processors a job holds, as sorted runs of consecutive processor numbers.
//! The same type is every CPU set of cosched: a node's CPU numbers on the wire, what an agent
//! writes to a job's cpuset, what the kernel's cpuset files list. Only the numbers' meaning
//! changes (the core's processors, or one node's CPUs), so nothing converts between types.

use crate::procset::ProcSet;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
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
/// must not allocate. On the wire: `[[first, last], ...]`, refused unless in that one form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<[u32; 2]>", into = "Vec<[u32; 2]>")]
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

    /// The partition of these processors (in any order, repeats ignored).
    pub fn from_processors(processors: impl IntoIterator<Item = u32>) -> Self {
        let mut processors: Vec<u32> = processors.into_iter().collect();
        processors.sort_unstable();
        processors.dedup();
        let mut spans: Vec<Span> = Vec::new();
        for p in processors {
            match spans.last_mut() {
                Some(last) if last.end() == p => last.len += 1,
                _ => spans.push(Span::new(p, 1)),
            }
        }
        Partition::from_spans(spans)
    }

    /// A CPU list as the kernel writes it (`cpuset.cpus.effective`, `Cpus_allowed_list`):
    /// ranges and single CPUs in any order, overlaps merged, surrounding blanks ignored, and
    /// possibly nothing at all (a cpuset with no CPUs), which is the empty partition. A list
    /// a person gives is read by `FromStr`, which refuses the empty one.
    pub fn from_kernel_list(text: &str) -> Result<Self, CpuListError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Partition::from_spans(Vec::new()));
        }
        let syntax = || CpuListError::Syntax(text.chars().take(80).collect());
        let mut spans = Vec::new();
        for part in text.split(',') {
            let (first, last) = part.split_once('-').unwrap_or((part, part));
            let first: u32 = first.trim().parse().map_err(|_| syntax())?;
            let last: u32 = last.trim().parse().map_err(|_| syntax())?;
            spans.push(cpu_range(first, last)?);
        }
        // People write overlaps ("0-3,2-5"); `from_spans` takes disjoint runs only.
        spans.sort_unstable();
        let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
        for span in spans {
            match merged.last_mut() {
                Some(last) if last.end() >= span.start => {
                    last.len = last.end().max(span.end()) - last.start;
                }
                _ => merged.push(span),
            }
        }
        Ok(Partition::from_spans(merged))
    }

    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
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

/// Why a text or the wire's ranges are not a CPU list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("an empty CPU list names no CPU (give one like 0-3,8)")]
    Empty,
    #[error("CPU range {0}-{1} runs backwards")]
    Reversed(u32, u32),
    #[error("CPU range {0}-{1} is larger than any node")]
    TooLarge(u32, u32),
    #[error("CPU ranges are not in order, apart and not touching at {0}-{1}")]
    NotCanonical(u32, u32),
    #[error("'{0}' is not a CPU list (like 0-3,8)")]
    Syntax(String),
}

/// CPUs `first..=last` as a run. A node has thousands of CPUs at most: a wider range is a
/// mistake, and one ending at `u32::MAX` would overflow the run's end.
fn cpu_range(first: u32, last: u32) -> Result<Span, CpuListError> {
    if first > last {
        return Err(CpuListError::Reversed(first, last));
    }
    if last - first > 1 << 16 || last == u32::MAX {
        return Err(CpuListError::TooLarge(first, last));
    }
    Ok(Span::new(first, last - first + 1))
}

impl FromStr for Partition {
    type Err = CpuListError;
    /// A CPU list a person or a setting gives (`--cpus 0-3,8`): the kernel's syntax, but an
    /// empty list is refused, since a node or job with no CPU is always a mistake there.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim().is_empty() {
            return Err(CpuListError::Empty);
        }
        Partition::from_kernel_list(text)
    }
}

impl TryFrom<Vec<[u32; 2]>> for Partition {
    type Error = CpuListError;
    /// The wire's form: one set has one form, so two equal sets compare equal as JSON too.
    fn try_from(ranges: Vec<[u32; 2]>) -> Result<Self, Self::Error> {
        for pair in ranges.windows(2) {
            if pair[0][1].saturating_add(1) >= pair[1][0] {
                return Err(CpuListError::NotCanonical(pair[1][0], pair[1][1]));
            }
        }
        let spans = ranges
            .into_iter()
            .map(|[first, last]| cpu_range(first, last))
            .collect::<Result<_, _>>()?;
        Ok(Partition::from_spans(spans))
    }
}

impl From<Partition> for Vec<[u32; 2]> {
    fn from(partition: Partition) -> Self {
        partition
            .spans
            .iter()
            .map(|s| [s.start, s.end() - 1])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_print_and_round_trip_on_the_wire() {
        let set: Partition = "8,0-3,4".parse().unwrap();
        assert_eq!(set.to_string(), "0-4,8");
        assert_eq!(set.size(), 6);
        assert_eq!("0-3,2-5".parse::<Partition>().unwrap().to_string(), "0-5");
        assert_eq!(
            Partition::from_processors([5, 1, 2, 1]).to_string(),
            "1-2,5"
        );
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, "[[0,4],[8,8]]");
        assert_eq!(serde_json::from_str::<Partition>(&json).unwrap(), set);
        for bad in [
            "[[3,1]]",
            "[[0,2],[3,4]]",
            "[[4,5],[0,1]]",
            "[[0,4294967295]]",
        ] {
            assert!(serde_json::from_str::<Partition>(bad).is_err(), "{bad}");
        }
        for bad in ["a", "3-1", "1-", "1,,2", "0-99999999", "4294967295"] {
            assert!(bad.parse::<Partition>().is_err(), "{bad}");
            assert!(Partition::from_kernel_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_empty_list_is_the_kernels_no_cpus_and_a_persons_mistake() {
        assert_eq!(
            Partition::from_kernel_list("\n"),
            Ok(Partition::from_spans(vec![]))
        );
        assert_eq!(Partition::from_kernel_list("0-3,8\n").unwrap().size(), 5);
        for empty in ["", " ", "\n"] {
            let refused = empty.parse::<Partition>().unwrap_err();
            assert_eq!(refused, CpuListError::Empty);
        }
        assert!(!CpuListError::Empty.to_string().contains('\n'));
    }

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
