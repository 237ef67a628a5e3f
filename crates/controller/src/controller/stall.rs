//! Stalled jobs: each node's agent reports a job's part there stalled (every process waiting
//! in its own slots: no CPU, no I/O) or moving again; the job is stalled once every node it
//! runs on says so, since the latest of their times. Kept in memory only: agents say it again
//! after each further stall time, so a controller that takes over hears it; what a node said
//! goes when it leaves or joins (a restarted agent knows nothing of it, and would never say
//! that the job moves again).

use super::{Controller, LOG};
use cosched_core::{Clock, JobId, Micros};
use cosched_proto::{JobState, StallAction};

/// The note of a job the stall action ended.
pub(super) const STALLED_NOTE: &str = "stalled";

impl Controller {
    /// Node `node` says job `job` is stalled there since `since` (`None`: it moves again).
    pub fn stall_reported(&mut self, job: JobId, node: String, since: Option<Micros>, now: Micros) {
        // A late word on a job that left the rotation (suspended, idle, ended) is dropped.
        if self.latest(job).map(|r| r.status) != Some(JobState::Running) {
            return;
        }
        let was = self.stalled_since(job);
        match since {
            Some(since) => {
                self.stalls.entry(job).or_default().insert(node, since);
            }
            None => {
                if let Some(nodes) = self.stalls.get_mut(&job) {
                    nodes.remove(&node);
                    if nodes.is_empty() {
                        self.stalls.remove(&job);
                    }
                }
            }
        }
        match (was, self.stalled_since(job)) {
            (None, Some(since)) => self.stalled(job, since, now),
            (Some(_), None) => LOG.info(format_args!("job {job}: no longer stalled")),
            _ => {}
        }
    }

    /// Since when the job is stalled: every node it runs on reported it.
    pub(super) fn stalled_since(&self, job: JobId) -> Option<Micros> {
        let reports = self.stalls.get(&job)?;
        self.reported_by_every_node(job, reports)?.into_iter().max()
    }

    /// A node left or (re)joined: what it said goes.
    pub(super) fn forget_node_stalls(&mut self, node: &str) {
        self.stalls.retain(|_, nodes| {
            nodes.remove(node);
            !nodes.is_empty()
        });
    }

    fn stalled(&mut self, job: JobId, since: Micros, now: Micros) {
        LOG.warn(format_args!(
            "job {job}: stalled for {} (every process waits: no CPU, no I/O in its slots)",
            Clock((now - since).max(0))
        ));
        if self.settings.stall_action != StallAction::Cancel {
            return;
        }
        if let Err(error) = self.update(job, |record| record.stalled = true) {
            LOG.error(error);
            return;
        }
        LOG.info(format_args!(
            "job {job}: ended for the stall (SIGTERM now, SIGKILL after the grace)"
        ));
        self.stop_in_grace(job, now);
    }
}
