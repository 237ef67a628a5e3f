//! `/metrics`: the daemon's figures in the Prometheus (OpenMetrics) text format, encoded by
//! `prometheus-client` from a snapshot taken under the state's lock at each scrape. Names have
//! the `cosched_` prefix and base units; no job id or user is a label.

use cosched_core::Micros;
use cosched_proto::api::{JobView, NodeView, StatsView};
use cosched_proto::{Histogram, SlotStart, HISTOGRAM_BOUNDS_US};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;

/// Upper bounds (seconds) of the queue-wait histogram: from an idle machine's instant start to
/// a day in the queue.
const WAIT_BOUNDS_S: [f64; 10] = [
    0.01, 0.1, 1.0, 10.0, 60.0, 300.0, 900.0, 3_600.0, 14_400.0, 86_400.0,
];

/// Queue waits, counted per bucket of [`WAIT_BOUNDS_S`] (not cumulative; a last bucket past
/// them).
#[derive(Clone, Debug)]
pub struct WaitHistogram {
    buckets: [u64; WAIT_BOUNDS_S.len() + 1],
    sum: f64,
    count: u64,
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

/// How long the controller waits for every node's report of a boundary before it takes the
/// spread of the starts it has (nodes report about once a second).
const SPREAD_PATIENCE_US: i64 = 5_000_000;

/// Across nodes: for each (slot, job) that several nodes started, how far apart their starts
/// were (true clock), gathered from the nodes' reports into a histogram.
#[derive(Debug, Default)]
pub struct StartSpreads {
    /// Per (slot, job): the earliest and latest start heard, how many nodes, first heard.
    open: BTreeMap<(i64, u64), (Micros, Micros, u32, Micros)>,
}

impl StartSpreads {
    /// Takes a node's starts; boundaries heard from long enough ago are closed into `spreads`
    /// (those only one node started are no spread).
    pub fn heard(&mut self, starts: &[SlotStart], now: Micros, spreads: &mut Histogram) {
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
            let waiting = now - heard < SPREAD_PATIENCE_US;
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

/// The scrape as the text a Prometheus server reads.
pub fn encode(scrape: Scrape) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("writing to a String cannot fail");
    text
}

/// A family of counters or gauges, one per label set.
fn family<L: prometheus_client::encoding::EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    values: impl IntoIterator<Item = (L, u64)>,
) -> std::fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in values {
        constant(kind, value, metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One counter's or gauge's value.
fn constant(kind: MetricType, value: u64, sample: MetricEncoder) -> std::fmt::Result {
    match kind {
        MetricType::Counter => ConstCounter::new(value).encode(sample),
        _ => ConstGauge::new(value as i64).encode(sample),
    }
}

/// One histogram: `counts` per bucket of `bounds` (seconds; +Inf is added after them).
fn histogram(
    mut sample: MetricEncoder,
    bounds: impl Iterator<Item = f64>,
    counts: &[u64],
    sum: f64,
    count: u64,
) -> std::fmt::Result {
    let buckets: Vec<(f64, u64)> = bounds
        .chain(std::iter::once(f64::INFINITY))
        .zip(counts.iter().copied())
        .collect();
    sample.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
}

/// A counter or gauge without labels.
fn single(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    value: u64,
) -> std::fmt::Result {
    constant(
        kind,
        value,
        encoder.encode_descriptor(name, help, None, kind)?,
    )
}

/// A node's latency histogram, in seconds.
fn node_histograms<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    histograms: impl IntoIterator<Item = (&'a str, &'a Histogram)>,
) -> std::fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (node, samples) in histograms {
        let labels = [("node", node)];
        histogram(
            metric.encode_family(&labels)?,
            HISTOGRAM_BOUNDS_US.iter().map(|&us| us as f64 / 1e6),
            &samples.buckets,
            samples.sum_us as f64 / 1e6,
            samples.count,
        )?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut by_state: BTreeMap<(String, String), u64> = BTreeMap::new();
        for job in &self.jobs {
            *by_state
                .entry((job.state.to_string(), job.class.to_string()))
                .or_default() += 1;
        }
        family(
            &mut encoder,
            "cosched_jobs",
            "Unfinished jobs by state and class",
            MetricType::Gauge,
            by_state
                .iter()
                .map(|((state, class), &n)| ([("state", state.as_str()), ("class", class)], n)),
        )?;
        family(
            &mut encoder,
            "cosched_jobs_submitted",
            "Submissions, by whether they were taken",
            MetricType::Counter,
            [
                ([("result", "accepted")], self.counts.submitted),
                ([("result", "refused")], self.counts.refused),
            ],
        )?;
        family(
            &mut encoder,
            "cosched_jobs_ended",
            "Jobs ended, by result: ok (exit 0), failed, cancelled, lost",
            MetricType::Counter,
            ["ok", "failed", "cancelled", "lost"].map(|result| {
                let n = self.counts.ended.get(result).copied().unwrap_or(0);
                ([("result", result)], n)
            }),
        )?;
        let wait = &self.counts.queue_wait;
        histogram(
            encoder.encode_descriptor(
                "cosched_queue_wait_seconds",
                "From submission to first start",
                None,
                MetricType::Histogram,
            )?,
            WAIT_BOUNDS_S.iter().copied(),
            &wait.buckets,
            wait.sum,
            wait.count,
        )?;
        let spread = &self.counts.start_spread;
        histogram(
            encoder.encode_descriptor(
                "cosched_cross_node_start_spread_seconds",
                "Across nodes: from the first to the last node starting a job at one slot \
                 boundary (true clock; no clock correction)",
                None,
                MetricType::Histogram,
            )?,
            HISTOGRAM_BOUNDS_US.iter().map(|&us| us as f64 / 1e6),
            &spread.buckets,
            spread.sum_us as f64 / 1e6,
            spread.count,
        )?;
        let live: Vec<&NodeView> = self.nodes.iter().filter(|n| !n.left).collect();
        node_histograms(
            &mut encoder,
            "cosched_switch_duration_seconds",
            "A slot switch: from the first stop asked to the last start, confirmed",
            live.iter()
                .map(|n| (n.name.as_str(), &n.status.histograms.switch)),
        )?;
        node_histograms(
            &mut encoder,
            "cosched_slot_lateness_seconds",
            "How late a node's clock thread woke for a slot boundary",
            live.iter()
                .map(|n| (n.name.as_str(), &n.status.histograms.lateness)),
        )?;
        node_histograms(
            &mut encoder,
            "cosched_skew_seconds",
            "Within a node: from the first to the last of a job's processes running after a start",
            live.iter()
                .map(|n| (n.name.as_str(), &n.status.histograms.skew)),
        )?;
        family(
            &mut encoder,
            "cosched_missed_slots",
            "Slot boundaries a node's clock slept through entirely",
            MetricType::Counter,
            live.iter()
                .map(|n| ([("node", n.name.as_str())], n.status.missed_slots)),
        )?;
        family(
            &mut encoder,
            "cosched_node_scheduling",
            "1 while a node follows the plan, 0 while it lets its jobs run loose",
            MetricType::Gauge,
            self.nodes.iter().map(|n| {
                (
                    [("node", n.name.as_str())],
                    u64::from(!n.left && n.status.scheduling),
                )
            }),
        )?;
        single(
            &mut encoder,
            "cosched_idle_departures",
            "Jobs that left the rotation for idleness",
            MetricType::Counter,
            self.stats.idle_departures,
        )?;
        single(
            &mut encoder,
            "cosched_clients_waiting",
            "Clients waiting for a job's end",
            MetricType::Gauge,
            self.stats.clients_waiting as u64,
        )?;
        family(
            &mut encoder,
            "cosched_api_requests",
            "Requests on the daemon's socket, by operation and result",
            MetricType::Counter,
            self.counts
                .requests
                .iter()
                .map(|(&(op, result), &n)| ([("op", op), ("result", result)], n)),
        )?;
        family(
            &mut encoder,
            "cosched_build_info",
            "The daemon's version (always 1)",
            MetricType::Gauge,
            [([("version", env!("CARGO_PKG_VERSION"))], 1)],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            &mut histogram,
        );
        spreads.heard(&[start(1, 1_000_300)], 900_000, &mut histogram);
        assert_eq!(histogram.count, 0, "still waiting for late reports");
        // Slot 2 only one node started (a job on one node): no spread.
        spreads.heard(&[], SPREAD_PATIENCE_US + 1, &mut histogram);
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
