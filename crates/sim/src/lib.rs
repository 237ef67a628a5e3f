//! cosched-sim: replays workloads through the cosched core with a virtual clock.
//!
//! SWF traces (plain or gzip) or a seeded Lublin–Feitelson workload go in; per-job results
//! (as SWF) and metrics come out. The core is the very code the daemon runs.

pub mod engine;
pub mod gantt;
pub mod generate;
pub mod memory;
pub mod metrics;
pub mod rng;
pub mod swf;
pub mod workload;

pub use engine::{simulate, JobResult, Outcome, Policy, SimConfig, SimError, UnknownPolicy};
pub use memory::{MemoryStats, NodeMemory};
pub use metrics::{metrics, Metrics};
pub use workload::{jobs_from_trace, Dropped, SimJob};

use cosched_core::MICROS_PER_SEC;
use swf::{Header, Trace};

/// The trace's records with each job's actual wait (field 3) and elapsed run time (field 4)
/// from the replay, in the trace's order; jobs not replayed are left out.
pub fn results_as_swf(trace: &Trace, results: &[JobResult], note: &str) -> Trace {
    let mut by_record: Vec<Option<&JobResult>> = vec![None; trace.records.len()];
    for result in results {
        by_record[result.record] = Some(result);
    }
    let round = |t: i64| ((t + MICROS_PER_SEC / 2).div_euclid(MICROS_PER_SEC)) as f64;
    let records = trace
        .records
        .iter()
        .zip(by_record)
        .filter_map(|(record, result)| {
            let result = result?;
            let mut out = record.clone();
            out.fields[2] = round(result.start - result.submit);
            out.fields[3] = round(result.end - result.start);
            Some(out)
        })
        .collect();
    let mut lines = trace.header.lines.clone();
    lines.push(format!("; Note: {note}"));
    // The tally describes what was read; this trace is written, not read.
    Trace {
        header: Header { lines },
        records,
        ..Trace::default()
    }
}
