//! Idle jobs (LLNL's gang scheduler): a job that used (almost) no CPU in its own slots for a
//! while leaves the rotation, so its cells go to jobs that compute. Pure bookkeeping: the caller
//! reads CPU usage and time and acts on the answer.

use cosched_core::{JobId, Micros};
use std::collections::BTreeMap;
use std::time::Duration;

/// Below this share of its slot a job counts as idle: a job blocked in a system call still
/// burns a few microseconds at every freeze and thaw (the freezer wakes sleeping tasks).
pub(crate) const BUSY_SHARE: u32 = 100;

#[derive(Clone, Copy, Debug)]
struct Track {
    /// Usage and time when its current slot began, if it is in one.
    slot_start: Option<(Duration, Micros)>,
    /// The end of the last own slot in which it computed (or when it was first seen).
    last_busy: Micros,
}

#[derive(Clone, Debug)]
pub struct IdleTracker {
    after: Micros,
    jobs: BTreeMap<JobId, Track>,
}

impl IdleTracker {
    /// A job is idle once it computed in none of its slots for `after` microseconds.
    pub fn new(after: Micros) -> Self {
        IdleTracker {
            after,
            jobs: BTreeMap::new(),
        }
    }

    /// `job` enters its slot at `now`, having used `usage` CPU time so far.
    pub fn slot_started(&mut self, job: JobId, usage: Duration, now: Micros) {
        let track = self.jobs.entry(job).or_insert(Track {
            slot_start: None,
            last_busy: now,
        });
        track.slot_start = Some((usage, now));
    }

    /// `job` leaves its slot at `now` with `usage`: true when it has now been idle long enough
    /// to leave the rotation.
    pub fn slot_ended(&mut self, job: JobId, usage: Duration, now: Micros) -> bool {
        let Some(track) = self.jobs.get_mut(&job) else {
            return false;
        };
        let Some((start_usage, start)) = track.slot_start.take() else {
            return false;
        };
        let slot = Duration::from_micros((now - start).max(0) as u64);
        if usage.saturating_sub(start_usage) >= slot / BUSY_SHARE {
            track.last_busy = now;
            return false;
        }
        now - track.last_busy >= self.after
    }

    /// The job ended or left the rotation: it starts afresh if it comes back.
    pub fn forget(&mut self, job: JobId) {
        self.jobs.remove(&job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Micros = 1_000;

    fn slot(t: &mut IdleTracker, job: JobId, used: Duration, at: Micros) -> bool {
        t.slot_started(job, Duration::ZERO, at);
        t.slot_ended(job, used, at + 100 * MS)
    }

    #[test]
    fn idle_only_after_enough_slots_without_work() {
        let mut t = IdleTracker::new(1_000 * MS);
        // Busy, then idle slots every 200 ms: idle once 1 s has passed since the last busy end.
        assert!(!slot(&mut t, 1, Duration::from_millis(90), 0));
        let verdicts: Vec<bool> = (1..8)
            .map(|k| slot(&mut t, 1, Duration::from_micros(50), k * 200 * MS))
            .collect();
        assert_eq!(
            verdicts,
            vec![false, false, false, false, true, true, true],
            "last busy at 100 ms; the slot ending at 1100 ms is the first 1 s later"
        );
    }

    #[test]
    fn work_resets_the_clock_and_forgetting_starts_afresh() {
        let mut t = IdleTracker::new(500 * MS);
        assert!(!slot(&mut t, 7, Duration::ZERO, 0));
        assert!(!slot(&mut t, 7, Duration::from_millis(5), 400 * MS));
        assert!(!slot(&mut t, 7, Duration::ZERO, 800 * MS));
        assert!(slot(&mut t, 7, Duration::ZERO, 1_000 * MS));
        t.forget(7);
        assert!(!slot(&mut t, 7, Duration::ZERO, 2_000 * MS));
        // A slot that never started says nothing.
        assert!(!t.slot_ended(8, Duration::ZERO, 5_000 * MS));
    }
}
