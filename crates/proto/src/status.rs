//! What a node's agent reports about itself, about once a second and when it stops.

use crate::Mode;
use cosched_core::{JobId, Micros, Partition};
use serde::{Deserialize, Serialize};

/// Percentiles of a measure, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    /// Every sample ever recorded, including ones no longer kept.
    pub count: u64,
}

impl Summary {
    /// The worst of several nodes' figures (percentiles are not additive: this bounds them).
    pub fn worst<'a>(summaries: impl IntoIterator<Item = &'a Summary>) -> Summary {
        summaries
            .into_iter()
            .fold(Summary::default(), |acc, s| Summary {
                p50: acc.p50.max(s.p50),
                p99: acc.p99.max(s.p99),
                max: acc.max.max(s.max),
                count: acc.count + s.count,
            })
    }
}

/// Upper bounds (µs) of the latency histograms' buckets, a last one (+Inf) after them: from
/// timer lateness (tens of µs) to a switch the machine stalled (100 ms).
pub const HISTOGRAM_BOUNDS_US: [u64; 12] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000,
];

/// Every sample of a measure since the agent started, counted per bucket of
/// [`HISTOGRAM_BOUNDS_US`] (not cumulative; the last bucket is past the last bound), for
/// Prometheus histograms: percentiles of several scrapes or nodes cannot be added, buckets can.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    pub buckets: Vec<u64>,
    pub sum_us: u64,
    pub count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; HISTOGRAM_BOUNDS_US.len() + 1],
            sum_us: 0,
            count: 0,
        }
    }
}

impl Histogram {
    pub fn record(&mut self, us: u64) {
        let bucket = HISTOGRAM_BOUNDS_US.partition_point(|&bound| bound < us);
        if let Some(count) = self.buckets.get_mut(bucket) {
            *count += 1;
        }
        self.sum_us = self.sum_us.saturating_add(us);
        self.count += 1;
    }
}

/// The latency histograms a node reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHistograms {
    pub lateness: Histogram,
    pub switch: Histogram,
    pub skew: Histogram,
}

/// A node agent's report on itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeStatus {
    pub node: String,
    /// The CPUs this node schedules.
    pub cpus: Partition,
    pub mode: Mode,
    /// How it stops and starts jobs (the cgroup freezer and which hierarchy, or signals).
    pub actuator: String,
    /// Whether its clock thread got real-time priority.
    pub realtime: bool,
    /// The last generation it entered a slot with.
    pub generation: Option<u64>,
    /// How late it woke for boundaries.
    pub lateness_us: Summary,
    /// From the first stop to the last start of a switch.
    pub switch_us: Summary,
    /// Between the first and the last of a job's processes to run after a start.
    pub skew_us: Summary,
    /// From the controller making a generation to this agent having it (includes the
    /// clocks' difference between the two machines).
    #[serde(default)]
    pub publish_us: Summary,
    /// Boundaries its clock slept through entirely.
    pub missed_slots: u64,
    /// Its clock's offset from true time as its time daemon estimates it (chrony's tracking;
    /// positive: ahead); `None` when nothing disciplines the clock or chrony cannot be asked.
    pub clock_offset_us: Option<i64>,
    /// A shift applied to its clock on purpose (test-only `--clock-offset-us`).
    pub clock_shift_us: i64,
    /// When it sent this, on its own clock.
    pub sent_us: Micros,
    /// Whether it follows the controller's plan (false: it lost the controller or etcd, and
    /// lets every job run unscheduled until it is back).
    pub scheduling: bool,
    /// Lateness, switch and skew since the agent started, bucketed (absent from older agents).
    #[serde(default)]
    pub histograms: NodeHistograms,
    /// The jobs it started at slot boundaries since its last report (the latest
    /// [`MAX_REPORTED_STARTS`]), on the true clock: the controller compares nodes with them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub starts: Vec<SlotStart>,
}

/// How often the agent of one machine reports its status (µs). A cluster's agents report once
/// per lease instead ([`crate::NodeInfo::status_period_us`]): each report is an etcd write,
/// and 1,000 nodes reporting every second would be 1,000 writes a second with nothing changed.
pub const STATUS_PERIOD_US: i64 = 1_000_000;

/// Most boundary starts one status carries: the starts of sampled boundaries
/// ([`SPREAD_SAMPLE_US`]) for a 10 s period with five jobs each.
pub const MAX_REPORTED_STARTS: usize = 512;

/// The boundaries whose starts are reported are about this far apart (µs): the same slots on
/// every node (`slot % (SPREAD_SAMPLE_US / quantum) == 0`), so that reports sent seconds apart
/// still describe the same boundaries.
pub const SPREAD_SAMPLE_US: i64 = 100_000;

/// A job started at the boundary into `slot`, at `at_us` (true clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotStart {
    pub slot: i64,
    pub job: JobId,
    pub at_us: Micros,
}

/// One slot boundary at which a node stopped or started jobs, as its agent logs it (one JSON
/// line each in `boundaries.jsonl` in its state directory, bounded in size). Times are on the
/// true clock (CLOCK_REALTIME, never shifted by `--clock-offset-us`), so that the records of
/// several nodes can be laid side by side: a job's cross-node skew at a boundary is the
/// spread of its `started` moments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundaryRecord {
    pub node: String,
    pub slot: i64,
    /// The generation in force after the boundary.
    pub generation: Option<u64>,
    /// When the agent woke for the boundary (it was due `lateness_us` earlier; no lateness:
    /// the switch was made within the slot, for a generation that applies to it at once).
    pub woke_us: Micros,
    pub lateness_us: Option<Micros>,
    /// Each job stopped (freeze confirmed, or weight lowered), and when.
    pub stopped: Vec<JobMoment>,
    /// Each job let run (thawed, or favoured), and when.
    pub started: Vec<JobMoment>,
    /// Jobs of the slot whose processes were all blocked, whose processors the `started` jobs
    /// were given for the rest of the slot (within a slot only; none in older logs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<JobId>,
    /// The skew of each `started` job whose skew was measured (a gang job whose working tasks
    /// fit its processors here): so that a skewed start can be laid beside what else happened
    /// then (none in older logs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skews: Vec<JobSkew>,
}

/// How long after the first of a started job's working tasks the last began to run (µs), at
/// one boundary on one node: the patience of the measurement when one had not run by then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSkew {
    pub job: JobId,
    pub skew_us: Micros,
}

/// When something happened to a job (true clock, µs since the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobMoment {
    pub job: JobId,
    pub at_us: Micros,
}
