//! Random workloads shared by the simulator's property tests.

use cosched_core::Micros;
use cosched_sim::SimJob;
use proptest::prelude::*;
use std::ops::Range;

/// Up to `max_jobs` jobs of 1 to `procs` processors, sorted by submit time. Submit and run times
/// are drawn in whole `unit`s; requested times are upper bounds, sometimes generous (up to 3x).
pub fn workload(
    procs: u32,
    max_jobs: usize,
    submit: Range<i64>,
    run: Range<i64>,
    unit: Micros,
) -> impl Strategy<Value = Vec<SimJob>> {
    proptest::collection::vec((submit, run, 1..=procs, 0i64..3), 1..max_jobs).prop_map(
        move |mut specs| {
            specs.sort_by_key(|s| s.0);
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (submit, run, n, over))| SimJob {
                    id: i as u64,
                    record: i,
                    submit: submit * unit,
                    run: run * unit,
                    procs: n,
                    estimate: run * (1 + over) * unit,
                    memory_kb_per_proc: None,
                })
                .collect()
        },
    )
}
