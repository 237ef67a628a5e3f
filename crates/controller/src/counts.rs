//! What the controller counts for `/metrics` (the daemon encodes it): submissions, ends,
//! queue waits, requests, and the spread of a job's starts across nodes.

use cosched_core::Micros;
use cosched_proto::api::{JobView, NodeView, StatsView};
use cosched_proto::{Histogram, SlotStart};
use std::collections::BTreeMap;

/// Upper bounds (seconds) of the queue-wait histogram: from an idle machine's instant start to
/// a day in the queue.
pub const WAIT_BOUNDS_S: [f64; 10] = [
    0.01, 0.1, 1.0, 10.0, 60.0, 300.0, 900.0, 3_600.0, 14_400.0, 86_400.0,
];

/// Queue waits, counted per bucket of [`WAIT_BOUNDS_S`] (not cumulative; a last bucket past
/// them).
#[derive(Clone, Debug)]
pub struct WaitHistogram {
    pub buckets: [u64; WAIT_BOUNDS_S.len() + 1],
    pub sum: f64,
    pub count: u64,
}

impl Default for WaitHistogram {
    fn default() -> Self {
        WaitHistogram {
            buckets: [0; WAIT_BOUNDS_S.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }
}

impl WaitHistogram {
    pub fn record(&mut self, seconds: f64) {
        let bucket = WAIT_BOUNDS_S.partition_point(|&bound| bound < seconds);
        self.buckets[bucket] += 1;
        self.sum += seconds;
        self.count += 1;
    }
}

/// Across nodes: for each (slot, job) that several nodes started, how far apart their starts
/// were (true clock), gathered from the nodes' reports into a histogram.
#[derive(Debug, Default)]
pub struct StartSpreads {
    /// Per (slot, job): the earliest and latest start heard, how many nodes, first heard.
    open: BTreeMap<(i64, u64), (Micros, Micros, u32, Micros)>,
}

impl StartSpreads {
    /// Takes a node's starts; boundaries first heard of `patience` ago (time for every node's
    /// report of them) are closed into `spreads` (those only one node started are no spread).
    pub fn heard(
        &mut self,
        starts: &[SlotStart],
        now: Micros,
        patience: Micros,
        spreads: &mut Histogram,
    ) {
        for start in starts {
            let entry = self.open.entry((start.slot, start.job)).or_insert((
                start.at_us,
                start.at_us,
                0,
                now,
            ));
            entry.0 = entry.0.min(start.at_us);
            entry.1 = entry.1.max(start.at_us);
            entry.2 += 1;
        }
        self.open.retain(|_, &mut (first, last, nodes, heard)| {
            let waiting = now - heard < patience;
            if !waiting && nodes >= 2 {
                spreads.record((last - first).max(0) as u64);
            }
            waiting
        });
    }
}

/// What the daemon counts since it started (Prometheus counters restart at zero with it).
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub submitted: u64,
    /// Submissions refused (bad, forbidden, too many, unrecordable).
    pub refused: u64,
    /// Ends by result: ok, failed, cancelled, lost.
    pub ended: BTreeMap<&'static str, u64>,
    pub queue_wait: WaitHistogram,
    /// Across nodes, the spread of a job's starts at one boundary (µs).
    pub start_spread: Histogram,
    /// API requests by operation and result (ok, error).
    pub requests: BTreeMap<(&'static str, &'static str), u64>,
}

/// Everything one scrape shows.
#[derive(Debug)]
pub struct Scrape {
    pub jobs: Vec<JobView>,
    pub stats: StatsView,
    pub nodes: Vec<NodeView>,
    pub counts: Counts,
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATIENCE: Micros = 2_000_000;

    #[test]
    fn a_boundary_two_nodes_started_gives_their_spread_once_both_have_reported() {
        let start = |slot, at_us| SlotStart {
            slot,
            job: 7,
            at_us,
        };
        let mut spreads = StartSpreads::default();
        let mut histogram = Histogram::default();
        spreads.heard(
            &[start(1, 1_000_000), start(2, 2_000_000)],
            0,
            PATIENCE,
            &mut histogram,
        );
        spreads.heard(&[start(1, 1_000_300)], 900_000, PATIENCE, &mut histogram);
        assert_eq!(histogram.count, 0, "still waiting for late reports");
        // Slot 2 only one node started (a job on one node): no spread.
        spreads.heard(&[], PATIENCE + 1, PATIENCE, &mut histogram);
        assert_eq!((histogram.count, histogram.sum_us), (1, 300));
        assert!(spreads.open.is_empty());
    }

    #[test]
    fn queue_waits_fall_in_their_buckets() {
        let mut wait = WaitHistogram::default();
        for seconds in [0.0, 0.05, 5.0, 1e6] {
            wait.record(seconds);
        }
        assert_eq!(wait.buckets[0], 1);
        assert_eq!(wait.buckets[1], 1);
        assert_eq!(wait.buckets[3], 1);
        assert_eq!(wait.buckets[WAIT_BOUNDS_S.len()], 1, "past the last bound");
        assert_eq!(wait.count, 4);
    }
}
