//! What jobs' cgroups counted, folded into their records: the first node's figures come with
//! the job's `Ending`, every other node's with an `Event::Used` once the job's end removed its
//! cgroup there. CPU time adds up over nodes; the peak is the largest node's (memory is held
//! per node); an OOM kill on any node fails a job that would have ended done.

use super::{Controller, LOG};
use crate::store::JobRecord;
use cosched_core::JobId;
use cosched_proto::{Ending, JobState, OUT_OF_MEMORY};

/// One node's figures for a job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeUsage {
    pub cpu_us: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
    pub oom_kills: u64,
}

impl NodeUsage {
    /// The figures of the job's first node, as its supervisor reported them.
    pub fn of(ending: &Ending) -> NodeUsage {
        NodeUsage {
            cpu_us: ending.cpu_us,
            peak_memory_bytes: ending.peak_memory_bytes,
            oom_kills: ending.oom_kills,
        }
    }
}

/// Adds one node's figures to an ended job's record.
pub(super) fn account(record: &mut JobRecord, usage: NodeUsage) {
    record.cpu_us = match (record.cpu_us, usage.cpu_us) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    };
    record.peak_memory_bytes = record.peak_memory_bytes.max(usage.peak_memory_bytes);
    if usage.oom_kills > 0 && matches!(record.status, JobState::Completed | JobState::Failed) {
        // The kernel killed in the job at the memory limit cosched set: not the job's own
        // end, whatever status its process left.
        record.status = JobState::Failed;
        record.note = Some(OUT_OF_MEMORY.to_string());
    }
}

impl Controller {
    /// A node other than the job's first counted its part of the job (`Event::Used`), after
    /// the job's end was recorded (the end removes the cgroups).
    pub fn used(&mut self, job: JobId, node: &str, usage: NodeUsage) {
        // Its first node's figures came with its ending: an agent that restarted without
        // hearing the job was its own must not count them twice.
        let first = |record: &JobRecord| record.nodes.first().is_some_and(|n| n == node);
        if let Some(record) = self.unsaved.get_mut(&job) {
            // Saved with the end, when the store takes it.
            if !first(record) {
                account(record, usage);
            }
            return;
        }
        let stored = match self.records.get(&job) {
            Some(record) => Ok(Some(record.clone())),
            None => self.store.get(job),
        };
        let mut record = match stored {
            Ok(Some(record)) if first(&record) => return,
            Ok(Some(record)) if record.status.ended() => record,
            Ok(_) => {
                LOG.warn(format_args!(
                    "job {job}: node {node} counted a part of a job that has not ended: ignored"
                ));
                return;
            }
            Err(error) => {
                LOG.warn(format_args!(
                    "job {job}: node {node}'s figures are lost: {error}"
                ));
                return;
            }
        };
        account(&mut record, usage);
        match self.store.put(&record) {
            Ok(()) => {
                if let Some(kept) = self.records.get_mut(&job) {
                    *kept = record;
                }
            }
            Err(error) => LOG.error(format_args!(
                "job {job}: node {node}'s figures cannot be saved: {error}"
            )),
        }
    }
}
