//! `cosched-bench control-plane --pool REPORT...`: the churn generations of several runs'
//! reports pooled by size and push, so that a tail percentile rests on hundreds of
//! generations instead of being one run's slowest. Generations stamped shortly before a
//! boundary are told apart: there every agent's clock in the bench's one process wakes at
//! once on the same two processors (a real node's clock has its own).

use super::{write_report, EtcdRates, ProcessLoad, Push, Spread};
use crate::figures::{command_line, summary, Provenance};
use anyhow::{bail, Context, Result};
use cosched_proto::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Issue 27's target for the fan-out at 1,000 nodes: p99 under this.
const TARGET_US: u64 = 100_000;
/// Generations stamped this close before a boundary meet every agent's clock at work there.
const BESIDE_BOUNDARY_MS: f64 = 60.0;
/// The benchmark's slot length when a report's command names none (`--quantum-ms`).
const DEFAULT_QUANTUM_MS: f64 = 100.0;

/// What pooling reads of a report; its other fields are ignored.
#[derive(Deserialize)]
struct Recorded {
    provenance: RecordedProvenance,
    rows: Vec<RecordedRow>,
}

#[derive(Deserialize)]
struct RecordedProvenance {
    command: String,
    machine: String,
}

#[derive(Deserialize)]
struct RecordedRow {
    nodes: usize,
    push: Push,
    steady: RecordedPhase,
    churn: RecordedPhase,
}

#[derive(Deserialize)]
struct RecordedPhase {
    each: Vec<Spread>,
    etcd: EtcdRates,
    controller: ProcessLoad,
}

/// One size's churn generations over every report that measured it.
#[derive(Serialize)]
struct Pooled {
    nodes: usize,
    push: Push,
    /// The reports, in the order given, and the machines they name.
    reports: Vec<PathBuf>,
    machines: Vec<String>,
    /// From the controller's stamp to the last node taking it, every generation (µs).
    fan_out_us: Summary,
    /// Generations whose last node took longer than the target.
    over_target: usize,
    /// Each report's own p99 (µs), in the order given.
    each_run_p99_us: Vec<u64>,
    /// Stamped in the last `BESIDE_BOUNDARY_MS` before a boundary.
    beside_boundary_us: Summary,
    /// Stamped anywhere else in the slot.
    elsewhere_us: Summary,
    /// Per report: etcd writes per node per second at steady state, and the controller's
    /// share of a CPU under churn.
    steady_etcd_writes_per_node_per_s: Vec<f64>,
    churn_controller_cpu: Vec<f64>,
}

#[derive(Serialize)]
struct PoolReport {
    provenance: Provenance,
    pooled: Vec<Pooled>,
}

pub fn run(paths: &[PathBuf], json: Option<&Path>) -> Result<()> {
    let mut reports = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the report {}", path.display()))?;
        let report: Recorded = serde_json::from_str(&text).with_context(|| {
            format!(
                "{}: not a report of a control-plane run (its --json; floors have no generations)",
                path.display()
            )
        })?;
        reports.push((path.clone(), report));
    }
    let pooled = pool(&reports)?;
    for size in &pooled {
        print_pooled(size);
    }
    if let Some(path) = json {
        let report = PoolReport {
            provenance: Provenance::now(command_line("bench/control-plane")),
            pooled,
        };
        write_report(path, &report)?;
    }
    Ok(())
}

/// Pools the reports' rows by size and push, ordered by size, then push.
fn pool(reports: &[(PathBuf, Recorded)]) -> Result<Vec<Pooled>> {
    #[derive(Default)]
    struct Gathered {
        reports: Vec<PathBuf>,
        machines: Vec<String>,
        fan_out: Vec<u64>,
        beside_boundary: Vec<u64>,
        elsewhere: Vec<u64>,
        each_run_p99_us: Vec<u64>,
        steady_writes: Vec<f64>,
        churn_controller: Vec<f64>,
    }
    let mut by_size: BTreeMap<(usize, Push), Gathered> = BTreeMap::new();
    for (path, report) in reports {
        let quantum_ms = quantum_ms(&report.provenance.command)
            .with_context(|| format!("{}: its command", path.display()))?;
        for row in &report.rows {
            let gathered = by_size.entry((row.nodes, row.push)).or_default();
            gathered.reports.push(path.clone());
            if !gathered.machines.contains(&report.provenance.machine) {
                gathered.machines.push(report.provenance.machine.clone());
            }
            let mut run = Vec::new();
            for spread in &row.churn.each {
                let last_us = (spread.last_ms * 1e3).round() as u64;
                run.push(last_us);
                if spread.into_slot_ms >= quantum_ms - BESIDE_BOUNDARY_MS {
                    gathered.beside_boundary.push(last_us);
                } else {
                    gathered.elsewhere.push(last_us);
                }
            }
            gathered.each_run_p99_us.push(summary(&run).p99);
            gathered.fan_out.extend(run);
            gathered
                .steady_writes
                .push(row.steady.etcd.writes_per_node_per_s);
            gathered.churn_controller.push(row.churn.controller.cpu);
        }
    }
    if by_size.is_empty() {
        bail!("the reports hold no measured size (no rows)");
    }
    Ok(by_size
        .into_iter()
        .map(|((nodes, push), gathered)| Pooled {
            nodes,
            push,
            reports: gathered.reports,
            machines: gathered.machines,
            fan_out_us: summary(&gathered.fan_out),
            over_target: gathered
                .fan_out
                .iter()
                .filter(|&&us| us > TARGET_US)
                .count(),
            each_run_p99_us: gathered.each_run_p99_us,
            beside_boundary_us: summary(&gathered.beside_boundary),
            elsewhere_us: summary(&gathered.elsewhere),
            steady_etcd_writes_per_node_per_s: gathered.steady_writes,
            churn_controller_cpu: gathered.churn_controller,
        })
        .collect())
}

/// The slot length a report's command ran with (`--quantum-ms N` or `--quantum-ms=N`).
fn quantum_ms(command: &str) -> Result<f64> {
    let mut words = command.split_whitespace();
    while let Some(word) = words.next() {
        let value = match word.strip_prefix("--quantum-ms") {
            Some("") => words.next(),
            Some(rest) => rest.strip_prefix('='),
            None => continue,
        };
        return value.and_then(|v| v.parse().ok()).with_context(|| {
            format!("--quantum-ms without a number of milliseconds in `{command}`")
        });
    }
    Ok(DEFAULT_QUANTUM_MS)
}

fn print_pooled(size: &Pooled) {
    let ms = |us: u64| us as f64 / 1e3;
    let push = match size.push {
        Push::On => "pushed",
        Push::Off => "etcd",
    };
    let range = |values: &[f64]| {
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if low == high {
            format!("{low:.3}")
        } else {
            format!("{low:.3}-{high:.3}")
        }
    };
    let runs: Vec<String> = size
        .each_run_p99_us
        .iter()
        .map(|&us| format!("{:.1}", ms(us)))
        .collect();
    println!(
        "{:>6} nodes {push}: {} run{}, {} churn generations on {}",
        size.nodes,
        size.reports.len(),
        if size.reports.len() == 1 { "" } else { "s" },
        size.fan_out_us.count,
        size.machines.join("; ")
    );
    println!(
        "  fan-out p50/p99/max {:.1}/{:.1}/{:.1} ms, {} over {:.0} ms; each run's p99 {} ms",
        ms(size.fan_out_us.p50),
        ms(size.fan_out_us.p99),
        ms(size.fan_out_us.max),
        size.over_target,
        ms(TARGET_US),
        runs.join(", ")
    );
    println!(
        "  stamped in the last {BESIDE_BOUNDARY_MS:.0} ms before a boundary: {}, p50/p99 {:.1}/{:.1} ms; \
         elsewhere: {}, p50/p99 {:.1}/{:.1} ms",
        size.beside_boundary_us.count,
        ms(size.beside_boundary_us.p50),
        ms(size.beside_boundary_us.p99),
        size.elsewhere_us.count,
        ms(size.elsewhere_us.p50),
        ms(size.elsewhere_us.p99)
    );
    println!(
        "  etcd writes per node per second at steady state {}; the controller under churn {} of a CPU",
        range(&size.steady_etcd_writes_per_node_per_s),
        range(&size.churn_controller_cpu)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of one 1,000-node row whose churn generations were stamped `into_slot_ms`
    /// into 1 s slots and reached their last node after `last_ms`.
    fn report(generations: &[(f64, f64)]) -> Recorded {
        let each: Vec<serde_json::Value> = generations
            .iter()
            .enumerate()
            .map(|(i, &(into_slot_ms, last_ms))| {
                serde_json::json!({"number": i, "at_s": i, "into_slot_ms": into_slot_ms,
                    "first_ms": 1.0, "median_ms": last_ms / 2.0, "last_ms": last_ms})
            })
            .collect();
        let phase = |each: &[serde_json::Value]| {
            serde_json::json!({"each": each, "etcd": {"writes_per_node_per_s": 0.09},
                "controller": {"cpu": 0.05, "rss_mb": 40.0}})
        };
        serde_json::from_value(serde_json::json!({
            "provenance": {"machine": "2 CPUs, test", "command":
                "bench/control-plane --nodes 1000 --push on --quantum-ms 1000", "date": "now"},
            "rows": [{"nodes": 1000, "push": "on", "steady": phase(&[]), "churn": phase(&each)}]
        }))
        .expect("a report")
    }

    #[test]
    fn runs_pool_into_one_tail_told_apart_beside_the_boundary() {
        let first = report(&[(100.0, 30.0), (950.0, 120.0), (500.0, 40.0)]);
        let second = report(&[(939.0, 50.0), (10.0, 90.0)]);
        let pooled = pool(&[("a.json".into(), first), ("b.json".into(), second)]).unwrap();
        assert_eq!(pooled.len(), 1);
        let size = &pooled[0];
        assert_eq!(size.fan_out_us.count, 5);
        assert_eq!(size.fan_out_us.max, 120_000);
        assert_eq!(size.over_target, 1);
        assert_eq!(size.each_run_p99_us, vec![120_000, 90_000]);
        // 950 ms into a 1 s slot is beside its end; 939 is not.
        assert_eq!(size.beside_boundary_us.count, 1);
        assert_eq!(size.elsewhere_us.count, 4);
        assert_eq!(size.reports, vec![PathBuf::from("a.json"), "b.json".into()]);
        assert_eq!(size.machines, vec!["2 CPUs, test".to_string()]);
    }

    #[test]
    fn the_slot_length_is_read_from_the_command() {
        assert_eq!(
            quantum_ms("bench/control-plane --quantum-ms 1000").unwrap(),
            1000.0
        );
        assert_eq!(
            quantum_ms("bench/control-plane --quantum-ms=20 --nodes 10").unwrap(),
            20.0
        );
        assert_eq!(
            quantum_ms("bench/control-plane --nodes 10").unwrap(),
            DEFAULT_QUANTUM_MS
        );
        let error = quantum_ms("bench/control-plane --quantum-ms").unwrap_err();
        assert!(
            error.to_string().contains("--quantum-ms without"),
            "{error}"
        );
    }

    #[test]
    fn a_report_without_rows_is_refused() {
        let empty: Recorded = serde_json::from_value(serde_json::json!({
            "provenance": {"machine": "m", "command": "bench/control-plane"}, "rows": []
        }))
        .unwrap();
        let error = pool(&[("floors.json".into(), empty)])
            .err()
            .expect("refused");
        assert!(error.to_string().contains("no measured size"), "{error}");
    }
}
