//! Partitioners: where in one slice a job's processors go.
//!
//! "Does not fit now" (`find` returns `None`) is kept apart from "can never fit" (`check`
//! returns an error): a job that does not fit now waits; one that can never fit is refused.

use crate::job::Memory;
use crate::machine::{Machine, Topology};
use crate::partition::{Partition, Shape, Span};
use crate::procset::ProcSet;
use std::fmt;
use std::str::FromStr;

/// Why a request can never be placed, whatever else is running.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NeverFits {
    #[error("a job needs at least one processor")]
    Empty,
    #[error("{asked} processors requested but the machine has {procs}")]
    TooMany { asked: u64, procs: u32 },
    #[error("{shape} requested but the machine is {machine}")]
    SubmeshTooLarge { shape: Shape, machine: String },
    #[error("{shape} needs a mesh machine and a 2-D partitioner (the machine is {machine}, the partitioner {partitioner})")]
    NeedsMesh {
        shape: Shape,
        machine: String,
        partitioner: PartitionerKind,
    },
    #[error("{shape} needs a submesh shape (WxH) with the {partitioner} partitioner")]
    NeedsSubmesh {
        shape: Shape,
        partitioner: PartitionerKind,
    },
    #[error("{asked} nodes requested but the machine has {nodes}")]
    TooManyNodes { asked: u32, nodes: u32 },
    #[error("{asked} processors per node requested but a node has {per_node}")]
    NodeTooSmall { asked: u32, per_node: u32 },
    #[error("node {node} requested but the machine has {nodes} (numbered from 0)")]
    NoSuchNode { node: u32, nodes: u32 },
    #[error("node {0} is requested twice")]
    NodeTwice(u32),
    #[error("{shape} with {memory} requested but a node has {per_node} bytes")]
    TooMuchMemory {
        shape: Shape,
        memory: Memory,
        per_node: u64,
    },
    #[error("{asked} processors need a buddy block of {block}, but the largest block on {procs} processors is {largest}")]
    BuddyBlockTooLarge {
        asked: u32,
        block: u64,
        largest: u32,
        procs: u32,
    },
}

/// One placement algorithm. Implementations hold no state: the slice's occupancy is passed in.
pub trait Partitioner {
    /// `Err` when `shape` can never be placed on `machine` by this partitioner.
    fn check(&self, machine: &Machine, shape: &Shape) -> Result<(), NeverFits>;
    /// Processors for `shape` none of which is in `busy`, or `None` if there are none now.
    /// Only called after `check` succeeded.
    fn find(&self, machine: &Machine, busy: &ProcSet, shape: &Shape) -> Option<Partition>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PartitionerKind {
    /// 1-D: the lowest-numbered free run that is long enough.
    FirstFit,
    /// 1-D: the shortest free run that is long enough (lowest on ties).
    BestFit,
    /// 1-D: power-of-two blocks aligned to their size, taken from the smallest free buddy.
    Buddy,
    /// Any free processors, lowest numbers first (no contiguity: a switched cluster).
    Scatter,
    /// 2-D: the first free `w × h` submesh in row-major order.
    FirstFit2d,
    /// 2-D (Ding & Bhuyan 1993): first fit, then the same shape rotated (`h × w`).
    AdaptiveScan,
}

impl PartitionerKind {
    pub const ALL: [PartitionerKind; 6] = [
        PartitionerKind::FirstFit,
        PartitionerKind::BestFit,
        PartitionerKind::Buddy,
        PartitionerKind::Scatter,
        PartitionerKind::FirstFit2d,
        PartitionerKind::AdaptiveScan,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PartitionerKind::FirstFit => "first-fit",
            PartitionerKind::BestFit => "best-fit",
            PartitionerKind::Buddy => "buddy",
            PartitionerKind::Scatter => "scatter",
            PartitionerKind::FirstFit2d => "first-fit-2d",
            PartitionerKind::AdaptiveScan => "adaptive-scan",
        }
    }

    pub fn is_2d(self) -> bool {
        matches!(
            self,
            PartitionerKind::FirstFit2d | PartitionerKind::AdaptiveScan
        )
    }

    /// Checks `shape` against the machine's size and shape, then the algorithm's own limits.
    pub fn check(self, machine: &Machine, shape: &Shape) -> Result<(), NeverFits> {
        if shape.procs() == 0 {
            return Err(NeverFits::Empty);
        }
        if shape.procs() > u64::from(machine.procs()) {
            return Err(NeverFits::TooMany {
                asked: shape.procs(),
                procs: machine.procs(),
            });
        }
        let is_mesh = matches!(machine.topology(), Topology::Mesh { .. });
        let too_small = |asked: u32| {
            (asked > machine.cpus_per_node()).then_some(NeverFits::NodeTooSmall {
                asked,
                per_node: machine.cpus_per_node(),
            })
        };
        match *shape {
            Shape::Mesh { .. } if !is_mesh || !self.is_2d() => Err(NeverFits::NeedsMesh {
                shape: shape.clone(),
                machine: machine.to_string(),
                partitioner: self,
            }),
            Shape::Mesh { .. } => self.get().check(machine, shape),
            _ if self.is_2d() => Err(NeverFits::NeedsSubmesh {
                shape: shape.clone(),
                partitioner: self,
            }),
            Shape::Count(_) => self.get().check(machine, shape),
            Shape::Nodes { nodes, .. } if nodes > machine.nodes() => Err(NeverFits::TooManyNodes {
                asked: nodes,
                nodes: machine.nodes(),
            }),
            Shape::Nodes { per_node, .. } => too_small(per_node).map_or(Ok(()), Err),
            Shape::OnNodes(ref shares) => {
                for (i, share) in shares.iter().enumerate() {
                    if share.node >= machine.nodes() {
                        return Err(NeverFits::NoSuchNode {
                            node: share.node,
                            nodes: machine.nodes(),
                        });
                    }
                    if shares[..i].iter().any(|s| s.node == share.node) {
                        return Err(NeverFits::NodeTwice(share.node));
                    }
                    if let Some(error) = too_small(share.procs) {
                        return Err(error);
                    }
                }
                Ok(())
            }
        }
    }

    pub fn find(self, machine: &Machine, busy: &ProcSet, shape: &Shape) -> Option<Partition> {
        // No partitioner finds `n` processors among fewer than `n` free ones: answered from
        // the kept count, so a full slice costs nothing to ask.
        if shape.procs() > u64::from(busy.free()) {
            return None;
        }
        match *shape {
            Shape::Nodes { nodes, per_node } => spread_over_nodes(machine, busy, nodes, per_node),
            Shape::OnNodes(ref shares) => {
                let mut spans = Vec::new();
                for share in shares.iter() {
                    let taken = take_on_node(machine, busy, share.node, share.procs)?;
                    spans.extend_from_slice(taken.spans());
                }
                Some(Partition::from_spans(spans))
            }
            _ => self.get().find(machine, busy, shape),
        }
    }

    /// The smallest request that surely cannot be placed in `busy`, from what it knows without
    /// a search: more than its free processors, or (one-run partitioners) more than the
    /// longest free run a failed search measured.
    pub fn room(self, busy: &ProcSet) -> u64 {
        let free = busy.free();
        let most = match self.release_search() {
            Some(ReleaseSearch::Run(_)) => busy.longest_free_known().map_or(free, |l| l.min(free)),
            _ => free,
        };
        u64::from(most) + 1
    }

    /// Whether failing to place `n` processors proves that every larger request fails on the
    /// same occupancy: true for the 1-D partitioners (a longer run, a larger set or buddy block
    /// is never easier to find), not for submeshes (a wider but shorter one may fit where a
    /// smaller one does not).
    pub fn fails_upward(self) -> bool {
        !self.is_2d()
    }

    /// Whether this partitioner takes the lowest-numbered free processors that serve (first
    /// fit, scatter), so that [`PartitionerKind::find_from`] answers for it.
    pub fn fills_from_below(self) -> bool {
        matches!(self, PartitionerKind::FirstFit | PartitionerKind::Scatter)
    }

    /// Where a partitioner that [fills from below](PartitionerKind::fills_from_below) puts
    /// `shape` when every processor below `from` counts as busy too.
    pub fn find_from(self, busy: &ProcSet, from: u32, shape: &Shape) -> Option<Partition> {
        let n = count(shape);
        match self {
            PartitionerKind::FirstFit => busy
                .first_free_run_from(from, n.max(1))
                .map(|start| Partition::block(start, n)),
            PartitionerKind::Scatter => Scatter::take(busy.runs_from(from, false), n),
            _ => unreachable!("{self} does not fill from below"),
        }
    }

    /// How EASY can ask where this partitioner would put a job once some jobs end without
    /// searching a copy of the slice (`None`: it cannot).
    pub fn release_search(self) -> Option<ReleaseSearch> {
        match self {
            PartitionerKind::FirstFit => Some(ReleaseSearch::Run(RunRule::Lowest)),
            PartitionerKind::BestFit => Some(ReleaseSearch::Run(RunRule::Shortest)),
            PartitionerKind::Scatter => Some(ReleaseSearch::LowestFree),
            _ => None,
        }
    }

    fn get(self) -> &'static dyn Partitioner {
        match self {
            PartitionerKind::FirstFit => &FirstFit,
            PartitionerKind::BestFit => &BestFit,
            PartitionerKind::Buddy => &Buddy,
            PartitionerKind::Scatter => &Scatter,
            PartitionerKind::FirstFit2d => &Submesh { rotate: false },
            PartitionerKind::AdaptiveScan => &Submesh { rotate: true },
        }
    }
}

/// Where a partitioner's answer lies once some jobs end, without a copy of the slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseSearch {
    /// One free run, picked by the rule among those the ended jobs' processors join.
    Run(RunRule),
    /// The lowest-numbered free processors (scatter), among the slice's free runs and the
    /// ended jobs' processors.
    LowestFree,
}

/// The first `n` processors of two sets of free spans, each disjoint and in increasing
/// order, and disjoint from each other: where scatter goes when `released` is freed.
pub fn lowest_free(
    free: impl Iterator<Item = Span>,
    released: &[Span],
    n: u32,
) -> Option<Partition> {
    let mut free = free.peekable();
    let mut released = released.iter().copied().peekable();
    let ascending = std::iter::from_fn(|| match (free.peek(), released.peek()) {
        (Some(a), Some(b)) if b.start < a.start => released.next(),
        (Some(_), _) => free.next(),
        (None, _) => released.next(),
    });
    Scatter::take(ascending, n)
}

/// Which long-enough free run a one-run partitioner takes. Knowing the rule lets EASY ask
/// where a job would go once jobs end by looking only at the runs those jobs' processors
/// join: when the job does not fit now, every run that could hold it contains one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunRule {
    /// First fit: the lowest-numbered run.
    Lowest,
    /// Best fit: the shortest run, the lowest on ties.
    Shortest,
}

impl RunRule {
    /// The first `n` processors of the run this rule takes among `runs` (any order).
    pub fn pick(self, runs: impl Iterator<Item = Span>, n: u32) -> Option<Partition> {
        let long = runs.filter(|run| run.len >= n.max(1));
        match self {
            RunRule::Lowest => long.min_by_key(|run| run.start),
            RunRule::Shortest => long.min_by_key(|run| (run.len, run.start)),
        }
        .map(|run| Partition::block(run.start, n))
    }
}

impl fmt::Display for PartitionerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown partitioner '{0}' (known: first-fit, best-fit, buddy, scatter, first-fit-2d, adaptive-scan)")]
pub struct UnknownPartitioner(pub String);

impl FromStr for PartitionerKind {
    type Err = UnknownPartitioner;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PartitionerKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownPartitioner(s.to_string()))
    }
}

fn count(shape: &Shape) -> u32 {
    u32::try_from(shape.procs()).expect("checked against the machine's size")
}

/// `per_node` processors on each of `nodes` nodes, whatever the partitioner: the
/// lowest-numbered nodes with that many free, the lowest free processors of each.
fn spread_over_nodes(
    machine: &Machine,
    busy: &ProcSet,
    nodes: u32,
    per_node: u32,
) -> Option<Partition> {
    let mut spans = Vec::new();
    let mut taken = 0;
    for node in 0..machine.nodes() {
        if taken == nodes {
            break;
        }
        if let Some(share) = take_on_node(machine, busy, node, per_node) {
            spans.extend_from_slice(share.spans());
            taken += 1;
        }
    }
    (taken == nodes).then(|| Partition::from_spans(spans))
}

/// The lowest `procs` free processors of node `node`, if it has that many.
fn take_on_node(machine: &Machine, busy: &ProcSet, node: u32, procs: u32) -> Option<Partition> {
    let span = machine.node_span(node);
    if span.len - busy.count_in(span) < procs {
        return None;
    }
    if procs == 0 {
        return Some(Partition::from_spans(Vec::new()));
    }
    let free_runs = busy
        .runs_from(span.start, false)
        .take_while(|run| run.start < span.end())
        .map(|run| Span::new(run.start, run.len.min(span.end() - run.start)));
    Scatter::take(free_runs, procs)
}

struct FirstFit;

impl Partitioner for FirstFit {
    fn check(&self, _: &Machine, _: &Shape) -> Result<(), NeverFits> {
        Ok(())
    }

    fn find(&self, _: &Machine, busy: &ProcSet, shape: &Shape) -> Option<Partition> {
        let n = count(shape);
        // A run of 0 is any run: the first free processor, as a run of 1.
        busy.first_free_run(n.max(1))
            .map(|start| Partition::block(start, n))
    }
}

struct BestFit;

impl Partitioner for BestFit {
    fn check(&self, _: &Machine, _: &Shape) -> Result<(), NeverFits> {
        Ok(())
    }

    fn find(&self, _: &Machine, busy: &ProcSet, shape: &Shape) -> Option<Partition> {
        RunRule::Shortest.pick(busy.runs(false), count(shape))
    }
}

struct Scatter;

impl Partitioner for Scatter {
    fn check(&self, _: &Machine, _: &Shape) -> Result<(), NeverFits> {
        Ok(())
    }

    fn find(&self, _: &Machine, busy: &ProcSet, shape: &Shape) -> Option<Partition> {
        Scatter::take(busy.runs(false), count(shape))
    }
}

impl Scatter {
    /// The first `needed` processors of the free runs given in increasing order.
    fn take(runs: impl Iterator<Item = Span>, mut needed: u32) -> Option<Partition> {
        let mut spans = Vec::new();
        for run in runs {
            let take = run.len.min(needed);
            spans.push(Span::new(run.start, take));
            needed -= take;
            if needed == 0 {
                return Some(Partition::from_spans(spans));
            }
        }
        None
    }
}

struct Buddy;

impl Buddy {
    /// The largest power-of-two block that fits on `procs` processors.
    fn largest(procs: u32) -> u32 {
        1 << (31 - procs.leading_zeros())
    }

    /// Aligned blocks of `size` lying wholly inside the free runs, in increasing order.
    fn free_blocks(busy: &ProcSet, size: u32) -> impl Iterator<Item = u32> + '_ {
        busy.runs(false).flat_map(move |run| {
            let first = run.start.div_ceil(size) * size;
            (first..run.end().saturating_sub(size - 1)).step_by(size as usize)
        })
    }
}

impl Partitioner for Buddy {
    fn check(&self, machine: &Machine, shape: &Shape) -> Result<(), NeverFits> {
        let asked = count(shape);
        let block = u64::from(asked).next_power_of_two();
        let largest = Buddy::largest(machine.procs());
        if block > u64::from(largest) {
            return Err(NeverFits::BuddyBlockTooLarge {
                asked,
                block,
                largest,
                procs: machine.procs(),
            });
        }
        Ok(())
    }

    fn find(&self, machine: &Machine, busy: &ProcSet, shape: &Shape) -> Option<Partition> {
        let block = count(shape).next_power_of_two();
        let top = Buddy::largest(machine.procs());
        // Take the block from the smallest free buddy that holds it, so large buddies stay whole:
        // a free block of `size` whose parent block is not wholly free is the smallest there is.
        let mut size = block;
        loop {
            let parent_free = |start: u32| {
                let parent = Span::new(start / (2 * size) * (2 * size), 2 * size);
                parent.end() <= machine.procs() && busy.is_span_clear(parent)
            };
            let found = Buddy::free_blocks(busy, size).find(|&s| size == top || !parent_free(s));
            if let Some(start) = found {
                return Some(Partition::block(start, block));
            }
            if size == top {
                return None;
            }
            size *= 2;
        }
    }
}

/// Submesh partitioners on a `width × height` mesh: first fit, optionally trying the rotation.
struct Submesh {
    rotate: bool,
}

impl Submesh {
    fn mesh(machine: &Machine) -> (u32, u32) {
        match machine.topology() {
            Topology::Mesh { width, height } => (width, height),
            Topology::Line => (machine.procs(), 1),
        }
    }

    fn orientations(&self, shape: &Shape) -> Vec<(u32, u32)> {
        let Shape::Mesh { width, height } = *shape else {
            return Vec::new();
        };
        if self.rotate && width != height {
            vec![(width, height), (height, width)]
        } else {
            vec![(width, height)]
        }
    }

    fn first_fit(mesh: (u32, u32), busy: &ProcSet, w: u32, h: u32) -> Option<Partition> {
        let (mw, mh) = mesh;
        if w > mw || h > mh {
            return None;
        }
        for y in 0..=(mh - h) {
            let mut x = 0;
            'scan: while x + w <= mw {
                for dy in 0..h {
                    let row_start = (y + dy) * mw + x;
                    if let Some(hit) = busy.next(row_start, true).filter(|&p| p < row_start + w) {
                        // Nothing starting at or left of the busy column can fit: jump past it.
                        x = hit - (y + dy) * mw + 1;
                        continue 'scan;
                    }
                }
                let spans = (0..h).map(|dy| Span::new((y + dy) * mw + x, w)).collect();
                return Some(Partition::from_spans(spans));
            }
        }
        None
    }
}

impl Partitioner for Submesh {
    fn check(&self, machine: &Machine, shape: &Shape) -> Result<(), NeverFits> {
        let (mw, mh) = Submesh::mesh(machine);
        if self
            .orientations(shape)
            .iter()
            .any(|&(w, h)| w <= mw && h <= mh)
        {
            Ok(())
        } else {
            Err(NeverFits::SubmeshTooLarge {
                shape: shape.clone(),
                machine: machine.to_string(),
            })
        }
    }

    fn find(&self, machine: &Machine, busy: &ProcSet, shape: &Shape) -> Option<Partition> {
        let mesh = Submesh::mesh(machine);
        self.orientations(shape)
            .into_iter()
            .find_map(|(w, h)| Submesh::first_fit(mesh, busy, w, h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(procs: u32, spans: &[(u32, u32)]) -> ProcSet {
        let mut set = ProcSet::new(procs);
        for &(s, l) in spans {
            set.insert_span(Span::new(s, l));
        }
        set
    }

    fn find(kind: PartitionerKind, m: &Machine, b: &ProcSet, shape: Shape) -> Option<String> {
        kind.check(m, &shape).unwrap();
        kind.find(m, b, &shape).map(|p| p.to_string())
    }

    #[test]
    fn one_dimensional_choices_differ_as_designed() {
        let m = Machine::line(16).unwrap();
        // Free: 0-2 (3), 6-7 (2), 12-15 (4).
        let b = busy(16, &[(3, 3), (8, 4)]);
        let two = Shape::Count(2);
        assert_eq!(
            find(PartitionerKind::FirstFit, &m, &b, two.clone()).unwrap(),
            "0-1"
        );
        assert_eq!(
            find(PartitionerKind::BestFit, &m, &b, two.clone()).unwrap(),
            "6-7"
        );
        // 0-1 sits in a broken 4-block already, so buddy takes it too.
        assert_eq!(
            find(PartitionerKind::Buddy, &m, &b, two.clone()).unwrap(),
            "0-1"
        );
        assert_eq!(
            find(PartitionerKind::Scatter, &m, &b, Shape::Count(5)).unwrap(),
            "0-2,6-7"
        );
        assert_eq!(
            find(PartitionerKind::FirstFit, &m, &b, Shape::Count(4)).unwrap(),
            "12-15"
        );
        assert_eq!(
            find(PartitionerKind::FirstFit, &m, &b, Shape::Count(5)),
            None
        );
    }

    #[test]
    fn buddy_keeps_large_blocks_whole() {
        let m = Machine::line(16).unwrap();
        // 0-3 busy: a 1-proc job goes to 4 (inside the broken 4-7 buddy), not to 8.
        let b = busy(16, &[(0, 2), (2, 1)]);
        assert_eq!(
            find(PartitionerKind::Buddy, &m, &b, Shape::Count(1)).unwrap(),
            "3"
        );
        let b = busy(16, &[(0, 4)]);
        assert_eq!(
            find(PartitionerKind::Buddy, &m, &b, Shape::Count(1)).unwrap(),
            "4"
        );
        assert_eq!(
            find(PartitionerKind::Buddy, &m, &b, Shape::Count(3)).unwrap(),
            "4-7"
        );
        assert_eq!(
            find(PartitionerKind::Buddy, &m, &b, Shape::Count(5)).unwrap(),
            "8-15"
        );
    }

    #[test]
    fn never_fits_is_an_error_not_a_wait() {
        let m = Machine::line(338).unwrap();
        let k = PartitionerKind::FirstFit;
        assert_eq!(k.check(&m, &Shape::Count(0)), Err(NeverFits::Empty));
        assert!(matches!(
            k.check(&m, &Shape::Count(339)),
            Err(NeverFits::TooMany {
                asked: 339,
                procs: 338
            })
        ));
        assert!(matches!(
            PartitionerKind::Buddy.check(&m, &Shape::Count(257)),
            Err(NeverFits::BuddyBlockTooLarge {
                block: 512,
                largest: 256,
                ..
            })
        ));
        assert!(PartitionerKind::Buddy.check(&m, &Shape::Count(256)).is_ok());
        let mesh_shape = Shape::Mesh {
            width: 2,
            height: 2,
        };
        assert!(matches!(
            k.check(&m, &mesh_shape),
            Err(NeverFits::NeedsMesh { .. })
        ));
    }

    #[test]
    fn submesh_first_fit_and_adaptive_scan() {
        let m = Machine::mesh(4, 4).unwrap();
        // Column 0 rows 0-3 and row 0 busy except (3,0):
        //   B B B .
        //   B . . .
        //   B . . .
        //   B . . .
        let b = busy(16, &[(0, 3), (4, 1), (8, 1), (12, 1)]);
        let tall = Shape::Mesh {
            width: 1,
            height: 4,
        };
        assert_eq!(
            find(PartitionerKind::FirstFit2d, &m, &b, tall).unwrap(),
            "3,7,11,15"
        );
        let wide = Shape::Mesh {
            width: 3,
            height: 2,
        };
        assert_eq!(
            find(PartitionerKind::FirstFit2d, &m, &b, wide).unwrap(),
            "5-7,9-11"
        );
        // 4x1 never fits unrotated here, but rotated to 1x4 it does.
        let row = Shape::Mesh {
            width: 4,
            height: 1,
        };
        assert_eq!(find(PartitionerKind::FirstFit2d, &m, &b, row.clone()), None);
        assert_eq!(
            find(PartitionerKind::AdaptiveScan, &m, &b, row).unwrap(),
            "3,7,11,15"
        );
        let m2 = Machine::mesh(4, 2).unwrap();
        let shape = Shape::Mesh {
            width: 1,
            height: 4,
        };
        assert!(PartitionerKind::FirstFit2d.check(&m2, &shape).is_err());
        assert!(PartitionerKind::AdaptiveScan.check(&m2, &shape).is_ok());
        assert!(matches!(
            PartitionerKind::AdaptiveScan.check(&m2, &Shape::Count(2)),
            Err(NeverFits::NeedsSubmesh { .. })
        ));
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for kind in PartitionerKind::ALL {
            assert_eq!(kind.name().parse::<PartitionerKind>().unwrap(), kind);
        }
        let err = "worst-fit".parse::<PartitionerKind>().unwrap_err();
        assert!(err.to_string().contains("unknown partitioner 'worst-fit'"));
    }
}
