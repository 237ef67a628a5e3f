//! Per-switch measurements kept as samples, summarised as p50 / p99 / max / count.

pub use cosched_proto::{Histogram, Summary};
use std::time::Duration;

/// Samples in microseconds. Bounded: past `capacity` the oldest half is dropped, so a
/// long-running daemon keeps recent behaviour without growing; every sample is also counted
/// in a histogram that keeps them all.
#[derive(Clone, Debug)]
pub struct Samples {
    values: Vec<u64>,
    capacity: usize,
    total: u64,
    histogram: Histogram,
}

impl Samples {
    pub fn new(capacity: usize) -> Self {
        Samples {
            values: Vec::new(),
            capacity: capacity.max(2),
            total: 0,
            histogram: Histogram::default(),
        }
    }

    pub fn record(&mut self, value: Duration) {
        if self.values.len() == self.capacity {
            self.values.drain(..self.capacity / 2);
        }
        let us = value.as_micros().min(u128::from(u64::MAX)) as u64;
        self.values.push(us);
        self.total += 1;
        self.histogram.record(us);
    }

    /// Every sample since the start, bucketed.
    pub fn histogram(&self) -> Histogram {
        self.histogram.clone()
    }

    /// Nearest-rank percentiles of the samples kept.
    pub fn summary(&self) -> Summary {
        let mut sorted = self.values.clone();
        sorted.sort_unstable();
        let at = |q: f64| {
            if sorted.is_empty() {
                0
            } else {
                let rank = (q * sorted.len() as f64).ceil() as usize;
                sorted[rank.clamp(1, sorted.len()) - 1]
            }
        };
        Summary {
            p50: at(0.5),
            p99: at(0.99),
            max: sorted.last().copied().unwrap_or(0),
            count: self.total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank_and_bounded_memory() {
        let mut s = Samples::new(1000);
        for us in 1..=100 {
            s.record(Duration::from_micros(us));
        }
        assert_eq!(
            s.summary(),
            Summary {
                p50: 50,
                p99: 99,
                max: 100,
                count: 100
            }
        );
        let mut small = Samples::new(10);
        for us in 0..25 {
            small.record(Duration::from_micros(us));
        }
        assert!(small.values.len() <= 10);
        assert_eq!(small.summary().count, 25);
        // The histogram keeps every sample: 0-10 µs in the first bucket, 11-24 in the second.
        let histogram = small.histogram();
        assert_eq!((histogram.buckets[0], histogram.buckets[1]), (11, 14));
        assert_eq!((histogram.count, histogram.sum_us), (25, (0..25).sum()));
        let mut huge = Samples::new(4);
        huge.record(Duration::from_secs(1));
        assert_eq!(
            huge.histogram().buckets.last(),
            Some(&1),
            "past the last bound"
        );
        assert_eq!(small.summary().max, 24);
        assert_eq!(Samples::new(4).summary(), Summary::default());
    }
}
