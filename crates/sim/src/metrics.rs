//! Job-level and machine-level figures of a replay.

use crate::engine::JobResult;
use cosched_core::{Micros, MICROS_PER_SEC};
use serde::Serialize;

/// Bounded slowdown's threshold τ: jobs shorter than this count as this long.
pub const BOUNDED_SLOWDOWN_TAU: Micros = 10 * MICROS_PER_SEC;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metrics {
    pub jobs: usize,
    /// Useful processor-seconds over processors × makespan.
    pub utilization: f64,
    pub mean_response_s: f64,
    pub median_response_s: f64,
    pub mean_wait_s: f64,
    pub median_wait_s: f64,
    pub mean_slowdown: f64,
    pub mean_bounded_slowdown: f64,
    pub p95_bounded_slowdown: f64,
    /// From the first submission to the last completion.
    pub makespan_s: f64,
}

fn secs(t: Micros) -> f64 {
    t as f64 / MICROS_PER_SEC as f64
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// The value at quantile `q` (nearest rank) of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn metrics(results: &[JobResult], procs: u32) -> Metrics {
    let first = results.iter().map(|r| r.submit).min().unwrap_or(0);
    let last = results.iter().map(|r| r.end).max().unwrap_or(0);
    let makespan = last - first;
    let work: f64 = results
        .iter()
        .map(|r| secs(r.run) * f64::from(r.procs))
        .sum();
    let response = |r: &JobResult| r.end - r.submit;
    let bounded =
        |r: &JobResult| (secs(response(r)) / secs(r.run.max(BOUNDED_SLOWDOWN_TAU))).max(1.0);
    let mut responses: Vec<f64> = results.iter().map(|r| secs(response(r))).collect();
    responses.sort_by(f64::total_cmp);
    let mut waits: Vec<f64> = results.iter().map(|r| secs(r.start - r.submit)).collect();
    waits.sort_by(f64::total_cmp);
    let mut bounded_slowdowns: Vec<f64> = results.iter().map(bounded).collect();
    bounded_slowdowns.sort_by(f64::total_cmp);
    Metrics {
        jobs: results.len(),
        utilization: if makespan > 0 {
            work / (f64::from(procs) * secs(makespan))
        } else {
            0.0
        },
        mean_response_s: mean(responses.iter().copied()),
        median_response_s: quantile(&responses, 0.5),
        // In the results' order, as before the median was added: a sum's last bit depends
        // on its order, and scripts/trace-results --check holds every figure bit for bit.
        mean_wait_s: mean(results.iter().map(|r| secs(r.start - r.submit))),
        median_wait_s: quantile(&waits, 0.5),
        mean_slowdown: mean(results.iter().map(|r| secs(response(r)) / secs(r.run))),
        mean_bounded_slowdown: mean(bounded_slowdowns.iter().copied()),
        p95_bounded_slowdown: quantile(&bounded_slowdowns, 0.95),
        makespan_s: secs(makespan),
    }
}
