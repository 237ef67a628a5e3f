//! From SWF records to the jobs the simulator replays, with the stated dropping rule.

use crate::swf::Trace;
use cosched_core::{Micros, MICROS_PER_SEC};
use serde::Serialize;

/// A job to replay: when it arrives, how many processors, how long it runs on them alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimJob {
    pub id: u64,
    /// Index of the record in the trace (for writing results back).
    pub record: usize,
    pub submit: Micros,
    pub run: Micros,
    pub procs: u32,
    /// What backfilling believes: the requested time, or the run time when none was given.
    pub estimate: Micros,
    /// Requested memory per processor in KB (SWF field 10); `None` when the record gives
    /// none (-1, or 0).
    pub memory_kb_per_proc: Option<u64>,
}

/// Records left out, by reason. The rule: run time (field 4) ≤ 0, or processors (field 5,
/// else field 8) ≤ 0, or submit time (field 2) < 0 — cancelled before start or unusable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Dropped {
    pub run_time_not_positive: u64,
    pub procs_not_positive: u64,
    pub submit_negative: u64,
    /// Accepted from the trace but refused by the scheduler: can never fit (larger than the
    /// machine, or than the largest buddy block).
    pub never_fits: u64,
}

impl Dropped {
    pub fn total(&self) -> u64 {
        self.run_time_not_positive
            + self.procs_not_positive
            + self.submit_negative
            + self.never_fits
    }
}

/// Turns a trace into jobs sorted by submit time (ties by record order).
pub fn jobs_from_trace(trace: &Trace) -> (Vec<SimJob>, Dropped) {
    let mut dropped = Dropped::default();
    let mut jobs = Vec::with_capacity(trace.records.len());
    for (index, record) in trace.records.iter().enumerate() {
        let (run, procs, submit) = (record.run_time(), record.procs(), record.submit());
        if run <= 0 {
            dropped.run_time_not_positive += 1;
        } else if procs <= 0 {
            dropped.procs_not_positive += 1;
        } else if submit < 0 {
            dropped.submit_negative += 1;
        } else {
            let requested = record.requested_time();
            jobs.push(SimJob {
                id: index as u64,
                record: index,
                submit: submit * MICROS_PER_SEC,
                run: run * MICROS_PER_SEC,
                procs: procs.min(i64::from(u32::MAX)) as u32,
                estimate: if requested > 0 {
                    requested.max(run)
                } else {
                    run
                } * MICROS_PER_SEC,
                memory_kb_per_proc: u64::try_from(record.requested_memory())
                    .ok()
                    .filter(|&kb| kb > 0),
            });
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.record));
    (jobs, dropped)
}
