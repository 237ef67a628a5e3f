//! `/metrics`: the daemon's figures, encoded by `prometheus-client` from a snapshot taken under
//! the state's lock at each scrape. Names have the `cosched_` prefix and base units; no job id
//! or user is a label. Two text formats ([`Format`]): OpenMetrics 1.0.0 when the scraper's
//! `Accept` asks for it (Prometheus does), else the Prometheus text format 0.0.4 (what `curl`
//! gets, and the one format `promtool check metrics` and older scrapers read).

use cosched_cluster::PushStats;
use cosched_controller::counts::{Scrape, WAIT_BOUNDS_S};
use cosched_proto::api::NodeView;
use cosched_proto::{Histogram, JobState, Mode, Pending, HISTOGRAM_BOUNDS_US};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};

/// A text format of the scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0: counter families named without `_total`, a closing `# EOF`.
    OpenMetrics,
    /// The Prometheus text format 0.0.4: each family named as its samples are.
    Text,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` with a weight (`q`) no lower than any media range text
    /// matches (`text/plain`, `text/*`, `*/*`); the text format otherwise, with no header or
    /// one that names neither (as Prometheus' own libraries answer).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let (mut openmetrics, mut text) = (0.0f32, 0.0f32);
        for range in accept.unwrap_or("").split(',') {
            let mut parts = range.split(';');
            let kind = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let weight = parts
                .filter_map(|p| p.trim().strip_prefix("q=")?.trim().parse::<f32>().ok())
                .next()
                .unwrap_or(1.0)
                .clamp(0.0, 1.0);
            match kind.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(weight),
                "text/plain" | "text/*" | "*/*" => text = text.max(weight),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The scrape as the text a Prometheus server reads, in `format`.
pub fn encode(scrape: Scrape, push: Option<PushStats>, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Metrics(scrape)));
    if let Some(push) = push {
        registry.register_collector(Box::new(PushMetrics(push)));
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("writing to a String cannot fail");
    match format {
        Format::OpenMetrics => text,
        Format::Text => prometheus_text(&text),
    }
}

/// OpenMetrics as `prometheus-client` writes it (it writes no other text format) in the
/// Prometheus text format 0.0.4. For the families made here (counters, gauges, histograms;
/// no unit, exemplar, `_created` or info) two things differ: a counter family's HELP and TYPE
/// name its samples (`x_total`: the old format has no family name apart from them, and a
/// reader of it sees `x_total` samples under no HELP or TYPE), and there is no `# EOF`.
/// Samples, label escaping and numbers are written alike in both.
fn prometheus_text(openmetrics: &str) -> String {
    let counters: BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut text = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "].into_iter().find_map(|tag| {
            let (name, rest) = line.strip_prefix(tag)?.split_once(' ')?;
            counters.contains(name).then_some((tag, name, rest))
        });
        match descriptor {
            Some((tag, name, rest)) => {
                text.push_str(tag);
                text.push_str(name);
                text.push_str("_total ");
                text.push_str(rest);
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
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

/// A latency histogram of µs samples, in seconds.
fn latency(sample: MetricEncoder, samples: &Histogram) -> std::fmt::Result {
    histogram(
        sample,
        HISTOGRAM_BOUNDS_US.iter().map(|&us| us as f64 / 1e6),
        &samples.buckets,
        samples.sum_us as f64 / 1e6,
        samples.count,
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
        latency(metric.encode_family(&labels)?, samples)?;
    }
    Ok(())
}

/// The leader's push (`--push-listen`), when it pushes.
#[derive(Debug)]
struct PushMetrics(PushStats);

impl Collector for PushMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let PushMetrics(push) = self;
        single(
            &mut encoder,
            "cosched_push_agents",
            "Agents connected to the leader's push",
            MetricType::Gauge,
            push.agents as u64,
        )?;
        latency(
            encoder.encode_descriptor(
                "cosched_push_header_write_seconds",
                "The leader writing one generation header to every agent connected, first \
                 to last write (on one machine, the agents it wakes run in between)",
                None,
                MetricType::Histogram,
            )?,
            &push.header_writes,
        )
    }
}

/// A scrape as `prometheus-client` collects it.
#[derive(Debug)]
struct Metrics(Scrape);

impl Collector for Metrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let Metrics(scrape) = self;
        let mut by_state: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut by_reason: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut stalled = 0;
        let mut running_as: BTreeMap<&'static str, u64> = BTreeMap::new();
        for job in &scrape.jobs {
            stalled += u64::from(job.stalled_since_us.is_some());
            if job.state == JobState::Running {
                let mode = job.runs_as.unwrap_or(job.mode);
                *running_as.entry(mode.name()).or_default() += 1;
            }
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
        single(
            &mut encoder,
            "cosched_jobs_stalled",
            "Running jobs every process of which waits in its own slots (no CPU, no I/O)",
            MetricType::Gauge,
            stalled,
        )?;
        family(
            &mut encoder,
            "cosched_jobs_running_mode",
            "Running jobs by the mode they are switched in (an auto job: auto until chosen)",
            MetricType::Gauge,
            Mode::ALL.map(|mode| {
                let n = running_as.get(mode.name()).copied().unwrap_or(0);
                ([("mode", mode.name())], n)
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
        latency(
            encoder.encode_descriptor(
                "cosched_cross_node_start_spread_seconds",
                "Across nodes: from the first to the last node starting a job at one slot \
                 boundary (true clock; no clock correction)",
                None,
                MetricType::Histogram,
            )?,
            &scrape.counts.start_spread,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_accept_asks_for_it_at_least_as_much_as_text() {
        let openmetrics = [
            // Prometheus 2.42's scrape.
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
             version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            "application/openmetrics-text",
            "Application/OpenMetrics-Text; version=1.0.0",
            "text/plain;q=0.5, application/openmetrics-text;q=0.6",
        ];
        for accept in openmetrics {
            assert_eq!(
                Format::negotiate(Some(accept)),
                Format::OpenMetrics,
                "{accept}"
            );
        }
        let text = [
            None,
            Some(""),
            Some("*/*"),
            Some("text/plain;version=0.0.4"),
            Some("text/html"),
            Some("application/openmetrics-text;q=0"),
            Some("application/openmetrics-text;q=0.2, */*;q=0.5"),
            Some("application/openmetrics-text;q=nonsense;q=0.1, text/*"),
        ];
        for accept in text {
            assert_eq!(Format::negotiate(accept), Format::Text, "{accept:?}");
        }
    }

    #[test]
    fn the_text_format_names_counter_families_for_their_samples_and_has_no_eof() {
        let openmetrics = "# HELP a_jobs Jobs\n# TYPE a_jobs gauge\na_jobs 1\n\
                           # HELP a_ends Ends\n# TYPE a_ends counter\n\
                           a_ends_total{result=\"ok\"} 2\n\
                           # HELP a_wait_seconds Wait\n# TYPE a_wait_seconds histogram\n\
                           a_wait_seconds_sum 0.5\na_wait_seconds_count 1\n\
                           a_wait_seconds_bucket{le=\"+Inf\"} 1\n# EOF\n";
        assert_eq!(
            prometheus_text(openmetrics),
            "# HELP a_jobs Jobs\n# TYPE a_jobs gauge\na_jobs 1\n\
             # HELP a_ends_total Ends\n# TYPE a_ends_total counter\n\
             a_ends_total{result=\"ok\"} 2\n\
             # HELP a_wait_seconds Wait\n# TYPE a_wait_seconds histogram\n\
             a_wait_seconds_sum 0.5\na_wait_seconds_count 1\n\
             a_wait_seconds_bucket{le=\"+Inf\"} 1\n"
        );
    }
}
