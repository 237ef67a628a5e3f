//! Plans: what runs where in each slice, and when each slice runs.
//!
//! A [`Plan`] is a snapshot of the matrix. A [`Generation`] pins a plan to time: from slot
//! `first_slot` on, slot `k` runs slice `(k - first_slot + first_slice) mod slices`, and slot `k`
//! starts at `epoch + k * quantum` ([`Rotation`]). Every agent can compute the current slice
//! from the clock alone; nobody has to broadcast "switch now".

use crate::job::{JobId, Micros};
use crate::partition::Partition;
use std::collections::BTreeSet;

/// Why a job is in a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// The job's own slice (its row of the matrix).
    Own,
    /// Another slice where the job's processors happen to be free (multiple tasks).
    Alternate,
    /// A preempting job (express, or interactive for its first stretch): in every slice.
    Preempting,
    /// A standby job soaking up cells nobody else uses.
    Standby,
}

impl Role {
    /// The role's name in the API and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Role::Own => "own",
            Role::Alternate => "alternate",
            Role::Preempting => "preempting",
            Role::Standby => "standby",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanEntry {
    pub job: JobId,
    pub partition: Partition,
    pub role: Role,
}

/// One row of the Ousterhout matrix: the jobs that run together during its slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanSlice {
    pub entries: Vec<PlanEntry>,
}

impl PlanSlice {
    pub fn jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.entries.iter().map(|e| e.job)
    }

    pub fn contains(&self, job: JobId) -> bool {
        self.entries.iter().any(|e| e.job == job)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub slices: Vec<PlanSlice>,
}

/// The jobs to stop and to start at the boundary between two consecutive slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Switch {
    pub stop: Vec<JobId>,
    pub start: Vec<JobId>,
}

impl Plan {
    /// Slices in which `job` runs, in order.
    pub fn slices_of(&self, job: JobId) -> Vec<usize> {
        (0..self.slices.len())
            .filter(|&s| self.slices[s].contains(job))
            .collect()
    }

    /// Every job in the plan, once, in increasing id order.
    pub fn jobs(&self) -> BTreeSet<JobId> {
        self.slices.iter().flat_map(|s| s.jobs()).collect()
    }

    /// What changes when slice `from` hands over to slice `to` (a job in both keeps running).
    pub fn switch(&self, from: usize, to: usize) -> Switch {
        let before: BTreeSet<JobId> = self.slices[from].jobs().collect();
        let after: BTreeSet<JobId> = self.slices[to].jobs().collect();
        Switch {
            stop: before.difference(&after).copied().collect(),
            start: after.difference(&before).copied().collect(),
        }
    }
}

/// The slot clock: slot `k` is `[epoch + k*quantum, epoch + (k+1)*quantum)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    pub epoch: Micros,
    pub quantum: Micros,
}

impl Rotation {
    pub fn new(epoch: Micros, quantum: Micros) -> Self {
        assert!(quantum > 0, "a quantum must be positive");
        Rotation { epoch, quantum }
    }

    pub fn slot_start(&self, slot: i64) -> Micros {
        self.epoch + slot * self.quantum
    }

    /// The slot running at time `t`.
    pub fn slot_at(&self, t: Micros) -> i64 {
        (t - self.epoch).div_euclid(self.quantum)
    }

    /// The first slot starting at or after `t`.
    pub fn next_boundary(&self, t: Micros) -> i64 {
        let slot = self.slot_at(t);
        if self.slot_start(slot) == t {
            slot
        } else {
            slot + 1
        }
    }

    /// The first moment from `now` that is neither within `after` of the boundary last passed
    /// nor within `before` of the next: `now`, or the boundary last passed or the next one
    /// plus `after`. The agent keeps work that would take a thawed rank's processor there.
    pub fn clear_of_boundaries(&self, now: Micros, after: Micros, before: Micros) -> Micros {
        let began = self.slot_start(self.slot_at(now));
        if now < began + after {
            began + after
        } else if now > began + self.quantum - before {
            began + self.quantum + after
        } else {
            now
        }
    }

    /// The one rule for when a plan changed at `now` takes effect, the daemon's and the
    /// simulator's: the first slot of the generation that follows the one whose cycle is
    /// `previous`. That is the next boundary, or the slot under way when its slice is vacant
    /// (`vacated(slice)`: every job of that slice is gone from the new plan), so a slot whose
    /// jobs all left gives its processors away at once rather than idle until the boundary
    /// (up to a quantum per job end). [`Generation::first_slot`] reads vacancy from plans; the
    /// simulator, which keeps no plans, from its count of jobs per slice.
    pub fn first_slot(
        &self,
        previous: Option<&Cycle>,
        now: Micros,
        vacated: impl FnOnce(usize) -> bool,
    ) -> i64 {
        let current = self.slot_at(now);
        let vacant = match previous {
            None => true,
            // Not begun yet: an older generation runs the slot under way, whose jobs this one
            // does not show, so only waiting for the boundary is sure to stop none mid-slot.
            Some(cycle) if cycle.first_slot > current => false,
            Some(cycle) => cycle.slice_for_slot(current).is_none_or(vacated),
        };
        if vacant {
            current
        } else {
            self.next_boundary(now)
        }
    }
}

/// A plan pinned to time: in force from slot `first_slot` until the next generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    pub number: u64,
    pub first_slot: i64,
    /// The slice that runs in `first_slot`: rotation continues where the last generation was,
    /// so frequent changes do not keep restarting at slice 0 and starving the last slices.
    pub first_slice: usize,
    pub plan: Plan,
}

impl Generation {
    /// The generation that follows `previous` (if any) from `first_slot` on.
    pub fn follow(previous: Option<&Generation>, plan: Plan, first_slot: i64) -> Generation {
        let cycle = Cycle::follow(
            previous.map(Generation::cycle).as_ref(),
            plan.slices.len(),
            first_slot,
        );
        Generation {
            number: previous.map_or(1, |prev| prev.number + 1),
            first_slot,
            first_slice: cycle.first_slice,
            plan,
        }
    }

    /// The first slot of the generation that follows `previous` with `plan`, made at `now`
    /// ([`Rotation::first_slot`], a slice vacated when none of its jobs is in `plan`).
    pub fn first_slot(
        previous: Option<&Generation>,
        plan: &Plan,
        rotation: Rotation,
        now: Micros,
    ) -> i64 {
        let Some(previous) = previous else {
            return rotation.first_slot(None, now, |_| true);
        };
        rotation.first_slot(Some(&previous.cycle()), now, |slice| {
            let jobs = plan.jobs();
            previous.plan.slices[slice]
                .jobs()
                .all(|job| !jobs.contains(&job))
        })
    }

    /// Which slice runs in which slot under this generation.
    pub fn cycle(&self) -> Cycle {
        Cycle {
            first_slot: self.first_slot,
            first_slice: self.first_slice,
            slices: self.plan.slices.len(),
        }
    }

    /// The slice that runs in `slot`, or `None` when the plan is empty (or the slot precedes it).
    pub fn slice_for_slot(&self, slot: i64) -> Option<usize> {
        self.cycle().slice_for_slot(slot)
    }

    /// Position of `slice` in the cycle that begins at `first_slot` (0 = first to run).
    pub fn position_of(&self, slice: usize) -> usize {
        self.cycle().position_of(slice)
    }
}

/// The rotation's arithmetic without the plan: `slices` slices taking turns from
/// `first_slot`, slice `first_slice` first. The simulator follows cycles without building
/// plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub first_slot: i64,
    pub first_slice: usize,
    pub slices: usize,
}

impl Cycle {
    /// The cycle of `slices` slices from `first_slot` on after `previous`: the rotation
    /// continues where the last one was, so frequent changes do not keep restarting at slice
    /// 0 and starving the last slices. With as many slices as before, every slot keeps its
    /// slice.
    pub fn follow(previous: Option<&Cycle>, slices: usize, first_slot: i64) -> Cycle {
        let first_slice = previous.map_or(0, |prev| {
            prev.slice_for_slot(first_slot).unwrap_or(0) % slices.max(1)
        });
        Cycle {
            first_slot,
            first_slice,
            slices,
        }
    }

    /// The slice that runs in `slot`, or `None` without slices (or before `first_slot`).
    pub fn slice_for_slot(&self, slot: i64) -> Option<usize> {
        let count = self.slices as i64;
        if count == 0 || slot < self.first_slot {
            return None;
        }
        Some(((slot - self.first_slot + self.first_slice as i64) % count) as usize)
    }

    /// Position of `slice` in the cycle that begins at `first_slot` (0 = first to run).
    pub fn position_of(&self, slice: usize) -> usize {
        (slice + self.slices - self.first_slice) % self.slices
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::Partition;

    fn slice(jobs: &[JobId]) -> PlanSlice {
        PlanSlice {
            entries: jobs
                .iter()
                .map(|&job| PlanEntry {
                    job,
                    partition: Partition::block(0, 1),
                    role: Role::Own,
                })
                .collect(),
        }
    }

    /// Work kept off boundaries begins at once mid-slot, after the last boundary's first
    /// moments, or after the next one's when it is too near.
    #[test]
    fn a_moment_clear_of_boundaries_is_never_within_them() {
        let r = Rotation::new(1_000, 100);
        // Slot [1_100, 1_200): 10 clear after a boundary, 30 before the next.
        assert_eq!(r.clear_of_boundaries(1_105, 10, 30), 1_110);
        assert_eq!(r.clear_of_boundaries(1_110, 10, 30), 1_110);
        assert_eq!(r.clear_of_boundaries(1_150, 10, 30), 1_150);
        assert_eq!(r.clear_of_boundaries(1_170, 10, 30), 1_170);
        assert_eq!(r.clear_of_boundaries(1_171, 10, 30), 1_210);
        assert_eq!(r.clear_of_boundaries(1_199, 10, 30), 1_210);
    }

    #[test]
    fn slot_arithmetic_never_drifts() {
        let r = Rotation::new(1_000, 100);
        assert_eq!(r.slot_at(1_000), 0);
        assert_eq!(r.slot_at(1_099), 0);
        assert_eq!(r.slot_at(999), -1);
        assert_eq!(r.next_boundary(1_100), 1);
        assert_eq!(r.next_boundary(1_101), 2);
        assert_eq!(r.slot_start(1_000_000), 1_000 + 100_000_000);
    }

    #[test]
    fn rotation_continues_across_generations() {
        let plan = Plan {
            slices: vec![slice(&[1]), slice(&[2]), slice(&[3])],
        };
        let g1 = Generation::follow(None, plan.clone(), 10);
        assert_eq!(g1.slice_for_slot(9), None);
        assert_eq!(
            (10..14)
                .map(|k| g1.slice_for_slot(k).unwrap())
                .collect::<Vec<_>>(),
            vec![0, 1, 2, 0]
        );
        // A change taking effect at slot 15 starts where g1 would have been: slice 2.
        let g2 = Generation::follow(Some(&g1), plan, 15);
        assert_eq!((g2.number, g2.first_slice), (2, 2));
        assert_eq!(g2.slice_for_slot(16), Some(0));
        assert_eq!(g2.position_of(2), 0);
        assert_eq!(g2.position_of(0), 1);
    }

    #[test]
    fn a_plan_takes_effect_at_the_boundary_unless_the_slot_under_way_is_vacant() {
        let r = Rotation::new(0, 100);
        let plan = |rows: &[&[JobId]]| Plan {
            slices: rows.iter().map(|jobs| slice(jobs)).collect(),
        };
        let first = |previous: Option<&Generation>, next: &Plan, now| {
            Generation::first_slot(previous, next, r, now)
        };
        // Nothing before, or nothing planned: at once.
        assert_eq!(first(None, &plan(&[&[1]]), 250), 2);
        let empty = Generation::follow(None, plan(&[]), 2);
        assert_eq!(first(Some(&empty), &plan(&[&[1]]), 250), 2);
        // Slot 2 runs slice 0 (jobs 1 and 2) of g; slot 3 slice 1 (job 3).
        let g = Generation::follow(None, plan(&[&[1, 2], &[3]]), 2);
        // Job 2 is still planned (in another slice even): the boundary.
        assert_eq!(first(Some(&g), &plan(&[&[3], &[2]]), 250), 3);
        // Jobs 1 and 2 both gone: slot 2 is vacant and goes at once.
        assert_eq!(first(Some(&g), &plan(&[&[3], &[4]]), 250), 2);
        // On a boundary, that slot in any case.
        assert_eq!(first(Some(&g), &plan(&[&[1, 2, 4]]), 300), 3);
        // A generation not begun yet (from slot 4): an older one runs slot 3, unseen here.
        let later = Generation::follow(Some(&g), plan(&[&[3]]), 4);
        assert_eq!(first(Some(&later), &plan(&[&[3], &[5]]), 350), 4);
    }

    proptest::proptest! {
        /// Whatever the plans, a new generation starts on the next boundary or in the slot
        /// under way, never before its predecessor, and in the slot under way only when no
        /// job of the slice running there is still planned (none is stopped mid-slot).
        #[test]
        fn a_generation_never_stops_a_planned_job_mid_slot(
            old in proptest::collection::vec(proptest::collection::vec(0u64..8, 0..4), 0..4),
            new in proptest::collection::vec(proptest::collection::vec(0u64..8, 0..4), 0..4),
            old_first in 0i64..12,
            now in 0i64..1_000,
        ) {
            let r = Rotation::new(0, 100);
            // The predecessor was made earlier: it starts by the boundary at `now` at the latest.
            let old_first = old_first % (r.next_boundary(now) + 1);
            let plan = |rows: &[Vec<JobId>]| Plan {
                slices: rows.iter().map(|jobs| slice(jobs)).collect(),
            };
            let previous = Generation::follow(None, plan(&old), old_first);
            let next = plan(&new);
            let first = Generation::first_slot(Some(&previous), &next, r, now);
            let current = r.slot_at(now);
            proptest::prop_assert!(first == current || first == r.next_boundary(now));
            proptest::prop_assert!(first >= previous.first_slot);
            if first == current && r.slot_start(current) < now {
                let running = previous.slice_for_slot(current);
                let planned = next.jobs();
                let vacant = running.is_none_or(|s| {
                    previous.plan.slices[s].jobs().all(|j| !planned.contains(&j))
                });
                proptest::prop_assert!(vacant);
                proptest::prop_assert!(previous.first_slot <= current);
            }
        }
    }

    #[test]
    fn switch_stops_leavers_and_starts_entrants_only() {
        let plan = Plan {
            slices: vec![slice(&[1, 2]), slice(&[2, 3])],
        };
        let sw = plan.switch(0, 1);
        assert_eq!(sw.stop, vec![1]);
        assert_eq!(sw.start, vec![3]);
        assert_eq!(plan.slices_of(2), vec![0, 1]);
    }
}
