//! The wait queue: jobs in serving order (class, then submission order), with an index that
//! finds the next waiting job small enough to fit without walking the ones in between.
//!
//! Backfilling asks, at every event, "which jobs behind the head could start?". Walking the
//! whole queue for that costs its length per event (tens of thousands of jobs in a loaded
//! trace); the index answers "the first job after this one asking fewer than `n` processors"
//! in O(log queue), so a scan costs the jobs it actually tries.

use crate::job::{Class, JobId};
use std::collections::BTreeMap;
use std::ops::Bound;

/// A queue position: class first, then the job's sequence number (unique), then its id.
pub type QueueKey = (Class, u64, JobId);

#[derive(Clone, Debug, Default)]
pub struct WaitQueue {
    /// Every waiting job with the processors it asks for.
    jobs: BTreeMap<QueueKey, u64>,
    /// Per class, the smallest request by sequence number.
    smallest: [MinTree; 4],
}

impl WaitQueue {
    pub fn insert(&mut self, key: QueueKey, procs: u64) {
        self.jobs.insert(key, procs);
        let class = key.0;
        let tree = &mut self.smallest[class as usize];
        if !tree.covers(key.1) {
            let live = self
                .jobs
                .range(class_range(class))
                .map(|(k, &p)| (k.1, p, k.2));
            tree.rebuild(live);
        }
        tree.set(key.1, clamp(procs), key.2);
    }

    pub fn remove(&mut self, key: &QueueKey) -> bool {
        let removed = self.jobs.remove(key).is_some();
        if removed {
            self.smallest[key.0 as usize].set(key.1, EMPTY, key.2);
        }
        removed
    }

    /// The first waiting job of the classes from `from` up to (not including) `until`.
    pub fn first(&self, from: Class, until: Option<Class>) -> Option<QueueKey> {
        let end = until.map_or(Bound::Unbounded, |c| Bound::Excluded((c, 0, 0)));
        self.jobs
            .range((Bound::Included((from, 0, 0)), end))
            .next()
            .map(|(&k, _)| k)
    }

    /// The first job after `after`, of a class before `until`, asking fewer than `below`
    /// processors.
    pub fn next_smaller(&self, after: QueueKey, until: Class, below: u64) -> Option<QueueKey> {
        let mut class = after.0;
        let mut from = after.1.checked_add(1)?;
        while class < until {
            if let Some((seq, id)) = self.smallest[class as usize].first_below(from, below) {
                debug_assert!(self.jobs.contains_key(&(class, seq, id)));
                return Some((class, seq, id));
            }
            class = *Class::ALL.get(class as usize + 1)?;
            from = 0;
        }
        None
    }

    pub fn contains(&self, key: &QueueKey) -> bool {
        self.jobs.contains_key(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = QueueKey> + '_ {
        self.jobs.keys().copied()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

fn clamp(procs: u64) -> u32 {
    u32::try_from(procs).unwrap_or(EMPTY - 1).min(EMPTY - 1)
}

fn class_range(class: Class) -> std::ops::RangeInclusive<QueueKey> {
    (class, 0, 0)..=(class, u64::MAX, JobId::MAX)
}

/// A segment tree of minimums over a window of sequence numbers (`base..base + leaves`).
/// The window moves and grows by rebuilding from the live entries, so its size follows the
/// span of sequence numbers waiting now, not every number ever given out.
const EMPTY: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
struct MinTree {
    base: u64,
    leaves: usize,
    /// `nodes[1]` is the root; leaf `i` is `nodes[leaves + i]`. Empty leaves hold `EMPTY`.
    /// Requests are at most the machine's processor count, which is below `u32::MAX`.
    nodes: Vec<u32>,
    /// The job at each leaf: a found job's queue key needs no search of the queue.
    ids: Vec<JobId>,
}

impl MinTree {
    fn covers(&self, seq: u64) -> bool {
        seq >= self.base && seq - self.base < self.leaves as u64
    }

    /// Lays the window out again around `live` (sequence, value, job) entries, with room to
    /// grow.
    fn rebuild(&mut self, live: impl Iterator<Item = (u64, u64, JobId)>) {
        let live: Vec<(u64, u64, JobId)> = live.collect();
        let low = live.iter().map(|&(s, _, _)| s).min().unwrap_or(0);
        let high = live.iter().map(|&(s, _, _)| s).max().unwrap_or(0);
        // Room for the span twice over, and for new sequence numbers above it.
        let span = usize::try_from(high - low + 1).expect("sequence numbers span memory");
        self.leaves = (2 * span).next_power_of_two().max(64);
        // New numbers come above the live ones; old ones re-enter (a requeue) below.
        self.base = low.saturating_sub(self.leaves as u64 / 4);
        self.nodes = vec![EMPTY; 2 * self.leaves];
        self.ids = vec![0; self.leaves];
        for (seq, value, id) in live {
            let leaf = (seq - self.base) as usize;
            self.nodes[self.leaves + leaf] = clamp(value);
            self.ids[leaf] = id;
        }
        for node in (1..self.leaves).rev() {
            self.nodes[node] = self.nodes[2 * node].min(self.nodes[2 * node + 1]);
        }
    }

    fn set(&mut self, seq: u64, value: u32, id: JobId) {
        if !self.covers(seq) {
            // Only a removal can miss the window (an insert rebuilds first): nothing is there.
            return;
        }
        let leaf = (seq - self.base) as usize;
        self.ids[leaf] = id;
        let mut node = self.leaves + leaf;
        self.nodes[node] = value;
        while node > 1 {
            node /= 2;
            self.nodes[node] = self.nodes[2 * node].min(self.nodes[2 * node + 1]);
        }
    }

    /// The smallest sequence number at or after `from` whose value is below `below`, with
    /// its job.
    fn first_below(&self, from: u64, below: u64) -> Option<(u64, JobId)> {
        if self.leaves == 0 || from >= self.base + self.leaves as u64 {
            return None;
        }
        let mut node = self.leaves + from.saturating_sub(self.base) as usize;
        loop {
            if u64::from(self.nodes[node]) < below {
                while node < self.leaves {
                    node *= 2;
                    if u64::from(self.nodes[node]) >= below {
                        node += 1;
                    }
                }
                let leaf = node - self.leaves;
                return Some((self.base + leaf as u64, self.ids[leaf]));
            }
            // On to the next subtree to the right: climb while we are a right child.
            while node % 2 == 1 {
                if node == 1 {
                    return None;
                }
                node /= 2;
            }
            node += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_next_small_enough_job_in_serving_order() {
        let mut queue = WaitQueue::default();
        queue.insert((Class::Interactive, 5, 50), 8);
        queue.insert((Class::Batch, 1, 10), 64);
        queue.insert((Class::Batch, 2, 20), 4);
        queue.insert((Class::Batch, 3, 30), 2);
        queue.insert((Class::Standby, 4, 40), 1);
        let head = (Class::Interactive, 5, 50);
        assert_eq!(
            queue.next_smaller(head, Class::Standby, 8),
            Some((Class::Batch, 2, 20))
        );
        assert_eq!(
            queue.next_smaller((Class::Batch, 2, 20), Class::Standby, 8),
            Some((Class::Batch, 3, 30))
        );
        assert_eq!(
            queue.next_smaller((Class::Batch, 3, 30), Class::Standby, 8),
            None
        );
        assert_eq!(queue.next_smaller(head, Class::Standby, 2), None);
        assert!(queue.remove(&(Class::Batch, 2, 20)));
        assert_eq!(
            queue.next_smaller(head, Class::Standby, 8),
            Some((Class::Batch, 3, 30))
        );
    }

    #[test]
    fn the_window_follows_far_apart_and_reinserted_numbers() {
        let mut queue = WaitQueue::default();
        let key = |seq: u64| (Class::Batch, seq, seq);
        for seq in [100_000, 3, 500_000, 2] {
            queue.insert(key(seq), seq % 7);
        }
        queue.remove(&key(3));
        let found: Vec<u64> = std::iter::successors(
            queue.next_smaller((Class::Batch, 0, 0), Class::Standby, 7),
            |&k| queue.next_smaller(k, Class::Standby, 7),
        )
        .map(|k| k.1)
        .collect();
        assert_eq!(found, vec![2, 100_000, 500_000]);
    }
}
