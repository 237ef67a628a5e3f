//! What the policy bounds, and why a job waits. A job's time limit counts the time it is let
//! run: its share of the rotation's slots while in the matrix (a quarter of the slots is a
//! quarter of the wall time), all of it while it runs unscheduled (idle, or while no
//! controller runs), none while it waits or is suspended. Per-user limits keep a user's jobs
//! past the limit out of the core's queue (waiting with the reason `limit`) until others end.

use super::{ApiError, Controller, LOG};
use crate::store::JobRecord;
use cosched_core::{JobId, Micros, MICROS_PER_SEC};
use cosched_proto::{JobState, Mode, Pending};
use std::collections::BTreeMap;

/// How often a running job's count of run time is written to the store: a controller that
/// dies counts the time since as run time in full (its jobs ran unscheduled, or in their
/// share), so a restart costs a job at most this much of its limit.
pub(super) const RUN_SAVE_EVERY: Micros = 300 * MICROS_PER_SEC;

/// A started job's run time, counted as it goes.
#[derive(Clone, Copy, Debug)]
pub(super) struct RunClock {
    /// Run time up to `since_us`.
    run_us: Micros,
    since_us: Micros,
    /// It runs in `share.0` slots of every `share.1`.
    share: (u64, u64),
}

impl RunClock {
    fn new(run_us: Micros, since_us: Micros) -> RunClock {
        RunClock {
            run_us,
            since_us,
            share: (0, 1),
        }
    }

    pub(super) fn at(&self, now: Micros) -> Micros {
        let elapsed = (now - self.since_us).max(0) as u128;
        let (slots, of) = self.share;
        self.run_us + (elapsed * slots as u128 / of.max(1) as u128) as Micros
    }

    fn reshare(&mut self, share: (u64, u64), now: Micros) {
        self.run_us = self.at(now);
        self.since_us = now.max(self.since_us);
        self.share = share;
    }
}

impl Controller {
    /// Starts counting a started job's run time from what its record saved: a controller
    /// taking it back (a restart) counts the time it did not see in full.
    pub(super) fn clock_on(&mut self, job: JobId, now: Micros) {
        let Some(record) = self.records.get(&job) else {
            return;
        };
        let from = record.run_saved_us.or(record.started_us).unwrap_or(now);
        let run_us = record.run_us + (now - from).max(0);
        self.clocks
            .entry(job)
            .or_insert_with(|| RunClock::new(run_us, now));
    }

    /// Every counted job's share of the slots from now on, from the plan just published.
    pub(super) fn reshare_clocks(&mut self, now: Micros) {
        let mut slots: BTreeMap<JobId, u64> = BTreeMap::new();
        let rows = match &self.generation {
            Some(generation) => {
                for slice in &generation.plan.slices {
                    for job in slice.jobs() {
                        *slots.entry(job).or_default() += 1;
                    }
                }
                generation.plan.slices.len() as u64
            }
            None => 0,
        };
        // Local mode runs every placed job all the time (plain Linux).
        let all_slots = self.settings.mode == Mode::Local;
        for (job, clock) in &mut self.clocks {
            let record = self.records.get(job);
            let idle = record.is_some_and(|r| r.status == JobState::Idle);
            // Its grace is not run time (it keeps its place in the matrix meanwhile).
            let stopping = record.is_some_and(JobRecord::being_stopped);
            let share = match slots.get(job) {
                _ if stopping => (0, 1),
                _ if idle => (1, 1),
                Some(_) if all_slots => (1, 1),
                Some(&n) => (n, rows.max(1)),
                None => (0, 1),
            };
            clock.reshare(share, now);
        }
    }

    /// The run time a job has had so far (0 before it starts).
    pub(super) fn run_time(&self, record: &JobRecord, now: Micros) -> Micros {
        self.clocks
            .get(&record.id)
            .map_or(record.run_us, |clock| clock.at(now))
    }

    /// The job's record with its run time as of `now` (at its end, or a periodic save).
    pub(super) fn stamp_run_time(&self, record: &mut JobRecord, now: Micros) {
        record.run_us = self.run_time(record, now);
        record.run_saved_us = Some(now);
    }

    /// Jobs whose run time reached their limit are told to stop (SIGTERM, SIGKILL after the
    /// grace) and end `timeout`; run times not saved for a while are saved. Called
    /// periodically by the controller's owner.
    pub fn enforce_time_limits(&mut self, now: Micros) {
        let due: Vec<(JobId, bool)> = self
            .clocks
            .iter()
            .filter_map(|(&job, clock)| {
                let record = self.records.get(&job)?;
                if !record.launched
                    || record.status.ended()
                    || record.timed_out
                    || record.cancel_requested
                {
                    return None;
                }
                let over = record
                    .time_limit_us
                    .is_some_and(|limit| clock.at(now) >= limit);
                let stale = record
                    .run_saved_us
                    .is_none_or(|saved| now - saved >= RUN_SAVE_EVERY);
                (over || stale).then_some((job, over))
            })
            .collect();
        for (job, over) in due {
            let run_us = self.clocks[&job].at(now);
            let saved = self.update(job, |record| {
                record.run_us = run_us;
                record.run_saved_us = Some(now);
                record.timed_out |= over;
            });
            if let Err(error) = saved {
                LOG.error(format_args!("job {job}: {error}"));
                continue;
            }
            if over {
                LOG.info(format_args!(
                    "job {job}: time limit reached ({}); SIGTERM now, SIGKILL after the grace",
                    cosched_core::Clock(run_us)
                ));
                self.stop_in_grace(job, now);
            }
        }
    }

    /// What `uid`'s jobs hold against the per-user limits: jobs started or in the core's
    /// queue, not ended, and their processors.
    fn usage(&self, uid: u32) -> (u64, u64) {
        self.records
            .values()
            .filter(|r| r.owner.uid == uid && !r.status.ended() && !self.limited.contains(&r.id))
            .filter(|r| r.launched || self.scheduler.state(r.id).is_some())
            .fold((0, 0), |(jobs, procs), r| {
                (jobs + 1, procs + u64::from(r.procs))
            })
    }

    /// Whether one more job of `procs` processors keeps a user holding `usage` within the
    /// per-user limits.
    fn within_limits(&self, (jobs, held): (u64, u64), procs: u32) -> bool {
        let limits = self.settings.user_limits;
        limits
            .running_jobs
            .is_none_or(|most| jobs < u64::from(most))
            && limits
                .procs
                .is_none_or(|most| held + u64::from(procs) <= u64::from(most))
    }

    /// Hands a job to the core unless its owner is at a per-user limit (root never is): then
    /// it waits outside the core's queue (a user's thousandth job must not hold others' turns).
    pub(super) fn enqueue_within_limits(
        &mut self,
        job: JobId,
        now: Micros,
    ) -> Result<(), ApiError> {
        let record = &self.records[&job];
        let bounded = self.settings.user_limits.running_jobs.is_some()
            || self.settings.user_limits.procs.is_some();
        if bounded
            && !record.owner.is_root()
            && !self.within_limits(self.usage(record.owner.uid), record.procs)
        {
            self.limited.insert(job);
            return Ok(());
        }
        self.enqueue(job, now)
    }

    /// Jobs held for per-user limits go to the core, oldest first, as far as the limits now
    /// allow: those of `uid` (one of whose jobs ended), or everyone's (the limits changed).
    /// One pass over the records per user, whatever the number of jobs held.
    pub(super) fn release_limited(&mut self, uid: Option<u32>, now: Micros) {
        let mut held: BTreeMap<u32, Vec<JobId>> = BTreeMap::new();
        for &job in &self.limited {
            let owner = self.records[&job].owner.uid;
            if uid.is_none_or(|uid| uid == owner) {
                held.entry(owner).or_default().push(job);
            }
        }
        for (owner, jobs) in held {
            let (mut count, mut procs) = self.usage(owner);
            for job in jobs {
                // Released meanwhile by a release nested in an end (below).
                if !self.limited.contains(&job) {
                    continue;
                }
                let size = self.records[&job].procs;
                if !self.within_limits((count, procs), size) {
                    continue;
                }
                self.limited.remove(&job);
                let placed = self.enqueue(job, now);
                if let Err(error) = &placed {
                    self.fail(job, &error.to_string(), now);
                }
                let ended = self.latest(job).is_none_or(|r| r.status.ended());
                if placed.is_err() || ended {
                    // A start the store refused ends the job, and that end released others
                    // of this user: count again.
                    (count, procs) = self.usage(owner);
                } else {
                    count += 1;
                    procs += u64::from(size);
                }
            }
        }
    }

    /// A job of more processors than its owner may ever hold could never start: refused.
    pub(super) fn check_procs_limit(&self, procs: u32, root: bool) -> Result<(), ApiError> {
        match self.settings.user_limits.procs {
            Some(most) if !root && procs > most => Err(ApiError::Invalid(format!(
                "the job can never run: it asks for {procs} processors and a user may hold at most {most} (limits.procs)"
            ))),
            _ => Ok(()),
        }
    }

    /// The user's jobs not started yet, against the policy's `queued_jobs`.
    pub(super) fn check_queued_limit(&self, uid: u32, root: bool) -> Result<(), ApiError> {
        let Some(most) = self.settings.user_limits.queued_jobs else {
            return Ok(());
        };
        if root {
            return Ok(());
        }
        let queued = self
            .records
            .values()
            .filter(|r| r.owner.uid == uid && !r.launched && !r.status.ended())
            .count();
        if queued >= most as usize {
            return Err(ApiError::Busy(format!(
                "uid {uid} has {queued} jobs waiting to start, the most the policy allows a user (limits.queued_jobs = {most}); wait for some to start"
            )));
        }
        Ok(())
    }

    /// Why a job that has not started, or is out of the rotation, waits.
    pub(super) fn pending_reason(&self, record: &JobRecord) -> Option<Pending> {
        match record.status {
            JobState::Suspended => Some(Pending::Held),
            JobState::Queued if self.limited.contains(&record.id) => Some(Pending::Limit),
            JobState::Queued if self.pinned_to_absent_node(record) => Some(Pending::Node),
            JobState::Queued => self
                .scheduler
                .pending_reason(record.id)
                .map(|why| match why {
                    cosched_core::Pending::Resources => Pending::Resources,
                    cosched_core::Pending::Memory => Pending::Memory,
                    cosched_core::Pending::Priority => Pending::Priority,
                    cosched_core::Pending::Node => Pending::Node,
                }),
            _ => None,
        }
    }

    fn pinned_to_absent_node(&self, record: &JobRecord) -> bool {
        record.launched && self.pins_jobs() && record.nodes.iter().any(|n| self.absent.contains(n))
    }
}
