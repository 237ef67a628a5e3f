//! `/metrics`: the daemon's figures in the Prometheus (OpenMetrics) text format, encoded by
//! `prometheus-client` from a snapshot taken under the state's lock at each scrape. Names have
//! the `cosched_` prefix and base units; no job id or user is a label.

use cosched_controller::counts::{Scrape, WAIT_BOUNDS_S};
use cosched_proto::api::NodeView;
use cosched_proto::{Histogram, JobState, Pending, HISTOGRAM_BOUNDS_US};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;

/// The scrape as the text a Prometheus server reads.
pub fn encode(scrape: Scrape) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Metrics(scrape)));
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

/// A scrape as `prometheus-client` collects it.
#[derive(Debug)]
struct Metrics(Scrape);

impl Collector for Metrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let Metrics(scrape) = self;
        let mut by_state: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut by_reason: BTreeMap<&'static str, u64> = BTreeMap::new();
        for job in &scrape.jobs {
            *by_state
                .entry((job.state.to_string(), job.class.to_string()))
                .or_default() += 1;
            if let Some(reason) = job.reason {
                *by_reason.entry(reason.name()).or_default() += 1;
            }
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
            "cosched_jobs_waiting",
            "Jobs waiting (queued or suspended), by why they wait",
            MetricType::Gauge,
            Pending::ALL.map(|reason| {
                let n = by_reason.get(reason.name()).copied().unwrap_or(0);
                ([("reason", reason.name())], n)
            }),
        )?;
        family(
            &mut encoder,
            "cosched_jobs_submitted",
            "Submissions, by whether they were taken",
            MetricType::Counter,
            [
                ([("result", "accepted")], scrape.counts.submitted),
                ([("result", "refused")], scrape.counts.refused),
            ],
        )?;
        family(
            &mut encoder,
            "cosched_jobs_ended",
            "Jobs ended, by result: completed (exit 0), failed, cancelled, timeout, lost",
            MetricType::Counter,
            JobState::ENDED.map(|state| {
                let result = state.name();
                let n = scrape.counts.ended.get(result).copied().unwrap_or(0);
                ([("result", result)], n)
            }),
        )?;
        let wait = &scrape.counts.queue_wait;
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
        let spread = &scrape.counts.start_spread;
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
        let live: Vec<&NodeView> = scrape.nodes.iter().filter(|n| !n.left).collect();
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
            scrape.nodes.iter().map(|n| {
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
            scrape.stats.idle_departures,
        )?;
        single(
            &mut encoder,
            "cosched_clients_waiting",
            "Clients waiting for a job's end",
            MetricType::Gauge,
            scrape.stats.clients_waiting as u64,
        )?;
        family(
            &mut encoder,
            "cosched_api_requests",
            "Requests on the daemon's socket, by operation and result",
            MetricType::Counter,
            scrape
                .counts
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
