//! Blocked gangs give their slot away (SCore-D's global state; LLNL saw gang scheduling slow
//! I/O-bound jobs, blocked in their own slots). Within a slot, a running job whose CPU usage
//! has not grown for `after` and none of whose tasks is runnable is blocked: its processors go,
//! for the rest of the slot, to the jobs of the slices that follow whose processors here are
//! all among them. The blocked job stays thawed (its I/O may end: it then shares its
//! processors with the borrowers, as under plain Linux, rather than wait a whole rotation) and
//! the next boundary takes the slot back as usual: the borrowers are simply running jobs
//! there, frozen ahead of it unless that slot wants them. Each node decides alone, for its own
//! processors.
//!
//! A gang that hardly used its slot (no more CPU than the window per processor, or a lender
//! none of whose tasks is runnable as it ends) is not frozen: it stays loose through the slots
//! that follow (an I/O-bound job frozen while its I/O is in flight could issue the next only
//! in its own slot, once a rotation), until it has used, within one of them, as much CPU per
//! processor as the window: then it is frozen until its own slot, so a job that wakes to
//! compute takes at most a window of another gang's slot.
//!
//! An implicit job is never switched, and a user could run a computing job so to take half of
//! every gang's slot (an auto one while it is measured too: 1-3 s, and the coarse job of the
//! modes bench took the ping-pong's gang slots so). Within the slot of a switched job (gang or
//! moderate) that shares a processor with it, an unswitched job (an outsider there) has the
//! same budget as a loose gang:
//! once it used more CPU in that slot than the window per processor, it is frozen until the
//! next boundary. An I/O-bound job's wake-ups fit; a computing job gets its own slot and a
//! window of the others'. Among implicit jobs alone (no switched job to protect) nobody is
//! held: that is implicit coscheduling.
//!
//! Detection reads one `cpu.stat` (`cpuacct.usage` on v1) per running job every `after / 2`;
//! the job's tasks' `/proc` states are read only once its usage has stood still that long
//! (a task waiting for a processor adds no usage either, and must not count as blocked), once
//! per slot at most and within a look's period.

use crate::{job_group, AgentError, Applier, Mode, SwitchRecord, FAVOURED_WEIGHT, NORMAL_WEIGHT};
use cosched_cgroups::{procfs, Actuator, CgroupError, Pid};
use cosched_core::{JobId, Micros, Partition};
use cosched_os::now_micros;
use cosched_proto::JobMoment;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The setting from its milliseconds (0: never).
pub fn give_away_after(ms: u32) -> Option<Micros> {
    (ms > 0).then_some(Micros::from(ms) * 1_000)
}

/// The running jobs of the slot under way, watched for a blocked gang. Pure bookkeeping: the
/// caller reads usage and time.
#[derive(Clone, Debug)]
pub struct BlockWatch {
    after: Micros,
    /// Each watched job's usage when last seen to change, and since when it stands still.
    jobs: BTreeMap<JobId, Option<(Duration, Micros)>>,
    next_look: Micros,
}

impl BlockWatch {
    /// A job is blocked once its usage stood still for `after` µs (at least 1 ms).
    pub fn new(after: Micros) -> Self {
        BlockWatch {
            after: after.max(1_000),
            jobs: BTreeMap::new(),
            next_look: Micros::MAX,
        }
    }

    /// How often the jobs are looked at: twice per `after`, so a job is found within 1.5 times
    /// `after` of its last use.
    pub fn period(&self) -> Micros {
        self.after / 2
    }

    /// A slot begins at `now` with `jobs` running in it: only they are watched (each once:
    /// a job that gave its processors away is not watched again before the next slot).
    pub fn slot_began(&mut self, jobs: impl IntoIterator<Item = JobId>, now: Micros) {
        self.jobs = jobs.into_iter().map(|job| (job, None)).collect();
        self.next_look = now + self.period();
    }

    /// When to look next (`Micros::MAX`: nobody to watch, and no job kept `loose`).
    pub fn next_look(&self, loose: bool) -> Micros {
        match self.jobs.is_empty() && !loose {
            true => Micros::MAX,
            false => self.next_look,
        }
    }

    /// Whether a look is due at `now` (`loose`: some job is kept loose, and is looked at
    /// too); if so, the next is planned a period on.
    pub fn due(&mut self, now: Micros, loose: bool) -> bool {
        if now < self.next_look(loose) {
            return false;
        }
        self.next_look = now + self.period();
        true
    }

    /// The window: how long a job stands still before it counts as blocked.
    pub fn after(&self) -> Micros {
        self.after
    }

    /// Another window (at least 1 ms), from the next slot on.
    pub fn set_after(&mut self, after: Micros) {
        self.after = after.max(1_000);
    }

    pub fn watched(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs.keys().copied()
    }

    /// `job` had used `usage` by `now`: true when that has not changed for `after`.
    pub fn still(&mut self, job: JobId, usage: Duration, now: Micros) -> bool {
        let Some(seen) = self.jobs.get_mut(&job) else {
            return false;
        };
        match seen {
            Some((last, since)) if *last == usage => now - *since >= self.after,
            _ => {
                *seen = Some((usage, now));
                false
            }
        }
    }

    /// The job's tasks were read (or it left): not watched again in this slot.
    pub fn drop_job(&mut self, job: JobId) {
        self.jobs.remove(&job);
    }
}

/// What an outsider used of the slot under way, and its own budget (the window per processor
/// it has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spent {
    pub job: JobId,
    pub used: Duration,
    pub budget: Duration,
}

/// The outsiders to hold: each past its own budget, and, once all of them together used more
/// than `shared` (the window per processor of the node), each past its equal part of it, so
/// that one user's many implicit jobs cannot each take a budget (an I/O-bound one, using
/// little, stays under its part).
pub fn over_budget(spent: &[Spent], shared: Duration) -> Vec<JobId> {
    let total: Duration = spent.iter().map(|s| s.used).sum();
    let part = shared / spent.len().max(1) as u32;
    spent
        .iter()
        .filter(|s| s.used > s.budget || (total > shared && s.used > part))
        .map(|s| s.job)
        .collect()
}

/// Whether no task of these processes is runnable (state `R`: on a processor, or waiting for
/// one), as far as could be read by `until` (true clock, µs): a scan cut short says no, so a
/// job of thousands of sleeping threads cannot hold the clock thread past its boundary. A
/// process gone meanwhile counts as asleep.
pub fn asleep_by(pids: &[Pid], until: Micros) -> bool {
    pids.iter().all(|&pid| {
        procfs::tasks(pid).into_iter().all(|tid| {
            now_micros() < until
                && procfs::thread_stat(pid, tid).map_or(true, |stat| stat.state != 'R')
        })
    })
}

impl<A: Actuator> Applier<A> {
    /// Gives the processors of `blocked` (jobs whose slot `slot` is: running ones, or
    /// unswitched ones such as an implicit job, which runs anyway) to the switched jobs of
    /// the slices that follow, in rotation order, whose processors here are all among them
    /// and not yet given: they are let run now (a gang job thawed, a moderate one favoured)
    /// until the next boundary, which takes them back as any other running job. The record
    /// lists what was let run.
    pub fn lend(
        &mut self,
        slot: i64,
        blocked: &BTreeSet<JobId>,
    ) -> Result<SwitchRecord, AgentError> {
        let began = Instant::now();
        let mut record = SwitchRecord {
            slot,
            ..SwitchRecord::default()
        };
        let Some(generation) = self.current.as_ref().filter(|_| self.mode != Mode::Local) else {
            return Ok(record);
        };
        let processors = |job: &JobId| self.jobs.get(job).and_then(|known| known.cpus.clone());
        let holders = self.slot_holders(slot);
        // Whether or not a borrower fits, a blocked job may stay loose past the slot.
        self.lenders
            .extend(blocked.iter().filter(|job| holders.contains(*job)));
        let mut free: BTreeSet<u32> = BTreeSet::new();
        for job in blocked.iter().filter(|job| holders.contains(*job)) {
            match processors(job) {
                Some(cpus) => free.extend(cpus.processors()),
                None => return Ok(record),
            }
        }
        // Processors of a running job that is not blocked (or not known) are never given.
        for job in self.running.iter().filter(|job| !blocked.contains(*job)) {
            match processors(job) {
                Some(cpus) => cpus.processors().for_each(|cpu| {
                    free.remove(&cpu);
                }),
                None => return Ok(record),
            }
        }
        let lent = free.clone();
        let slices = generation.plan.slices.len() as i64;
        let mut borrowers = Vec::new();
        for ahead in 1..slices {
            let Some(index) = generation.slice_for_slot(slot + ahead) else {
                continue;
            };
            for job in generation.plan.slices[index].jobs() {
                let switched = self.jobs.get(&job).is_some_and(|known| known.switched());
                if !switched || self.running.contains(&job) || borrowers.contains(&job) {
                    continue;
                }
                let Some(cpus) = processors(&job) else {
                    continue;
                };
                if !cpus.is_empty() && cpus.processors().all(|cpu| free.contains(&cpu)) {
                    cpus.processors().for_each(|cpu| {
                        free.remove(&cpu);
                    });
                    borrowers.push(job);
                }
            }
        }
        // The lenders: blocked jobs some of whose processors went to a borrower.
        record.blocked = blocked
            .iter()
            .copied()
            .filter(|job| {
                processors(job).is_some_and(|cpus| {
                    cpus.processors()
                        .any(|cpu| lent.contains(&cpu) && !free.contains(&cpu))
                })
            })
            .collect();
        // A lender's I/O may end while the borrowers run: it then takes whichever of its
        // processors frees first, not the one its slot pinned it to.
        for &job in &record.blocked {
            self.unpin(job)?;
        }
        for job in borrowers {
            self.unloose(job)?;
            let at_us = self.steer(job, true)?;
            self.running.insert(job);
            record.started.push(JobMoment { job, at_us });
        }
        record.duration = began.elapsed();
        Ok(record)
    }

    /// The running gang jobs found blocked in the slot under way (lenders, or would-be ones
    /// no borrower fitted).
    pub fn lenders(&self) -> impl Iterator<Item = JobId> + '_ {
        self.lenders
            .iter()
            .copied()
            .filter(|job| self.running.contains(job) && self.mode_of(*job) == Mode::Gang)
    }

    /// Leaves a running gang job (blocked as its slot ends: the caller looked) thawed through the
    /// boundary: out of the running set, so no boundary stops it, until its own slot wants it
    /// again or `hold_loose` freezes it.
    pub fn keep_loose(&mut self, job: JobId) -> Result<(), AgentError> {
        if self.running.remove(&job) {
            self.loose.insert(job);
            // Waking from its I/O, it takes whichever of its processors is free first, not
            // the one its slot pinned it to (where a gang now runs), and at once: favoured
            // over the gang there (what it may take is bounded by `hold_loose`).
            self.unpin(job)?;
            self.weigh(job, FAVOURED_WEIGHT)?;
        }
        Ok(())
    }

    /// Takes a job out of the loose ones, at normal weight again.
    pub(crate) fn unloose(&mut self, job: JobId) -> Result<(), AgentError> {
        match self.loose.remove(&job) {
            true => self.weigh(job, NORMAL_WEIGHT),
            false => Ok(()),
        }
    }

    /// Lets a job's threads use any of its processors again.
    fn unpin(&mut self, job: JobId) -> Result<(), AgentError> {
        self.actuator
            .unpin(&job_group(job))
            .map_err(|source| AgentError::Actuator { job, source })
    }

    /// A gang job's weight, where the machine has a cpu controller (a gang needs none).
    fn weigh(&mut self, job: JobId, weight: u32) -> Result<(), AgentError> {
        match self.actuator.set_weight(&job_group(job), weight) {
            Ok(()) | Err(CgroupError::Unsupported(_)) => Ok(()),
            Err(source) => Err(AgentError::Actuator { job, source }),
        }
    }

    /// The jobs kept loose.
    pub fn loose(&self) -> impl Iterator<Item = JobId> + '_ {
        self.loose.iter().copied()
    }

    /// The unswitched jobs (implicit, and auto ones being measured) that are outsiders in slot
    /// `slot`: not among its holders, and sharing a processor with a switched job that is (one
    /// whose processors are not known shares).
    pub fn outsiders(&self, slot: i64) -> BTreeSet<JobId> {
        let holders = self.slot_holders(slot);
        let switched: Vec<Option<&Partition>> = holders
            .iter()
            .filter_map(|job| self.jobs.get(job))
            .filter(|known| known.switched())
            .map(|known| known.cpus.as_ref())
            .collect();
        let shares = |cpus: Option<&Partition>| {
            switched.iter().any(|holder| match (holder, cpus) {
                (Some(holder), Some(cpus)) => holder.overlaps(cpus),
                _ => true,
            })
        };
        self.jobs
            .iter()
            .filter(|(job, known)| {
                matches!(known.mode, Mode::Implicit | Mode::Auto)
                    && !holders.contains(*job)
                    && shares(known.cpus.as_ref())
            })
            .map(|(&job, _)| job)
            .collect()
    }

    /// Freezes an outsider that used its budget of the slot under way, until the next
    /// boundary. Asked only, never awaited: a task of it that another process took the
    /// processor from traps only when it gets one again (a scheduler tick, 4 ms at HZ=250),
    /// and waiting for that on the clock thread made boundaries of 10 and 20 ms slots that
    /// late (`bench/slot-lateness --churn --cases implicit`); it runs none of its own code
    /// before it traps.
    pub fn hold_outsider(&mut self, job: JobId) -> Result<(), AgentError> {
        self.held.insert(job);
        self.ask_freeze(job)
    }

    /// Thaws a held outsider (nothing for any other job).
    pub(crate) fn unhold(&mut self, job: JobId) -> Result<(), AgentError> {
        if !self.held.remove(&job) {
            return Ok(());
        }
        self.actuator
            .thaw(&job_group(job))
            .map(|_| ())
            .map_err(|source| AgentError::Actuator { job, source })
    }

    /// Whether `job` is an outsider held until the next boundary.
    pub fn is_held(&self, job: JobId) -> bool {
        self.held.contains(&job)
    }

    /// Freezes a loose job that used its budget: it waits for its own slot, as any gang job
    /// outside it. The freeze is asked, not awaited (see `hold_outsider`). The record lists it
    /// stopped.
    pub fn hold_loose(&mut self, slot: i64, job: JobId) -> Result<SwitchRecord, AgentError> {
        let began = Instant::now();
        let mut record = SwitchRecord {
            slot,
            ..SwitchRecord::default()
        };
        if self.loose.contains(&job) {
            self.unloose(job)?;
            self.ask_freeze(job)?;
            let at_us = now_micros();
            record.stopped.push(JobMoment { job, at_us });
        }
        record.duration = began.elapsed();
        Ok(record)
    }
}

/// Whether `job` of `applier` counts as blocked now: a running job none of whose tasks is
/// runnable, as read by `until` (a job whose processes cannot be listed is not).
pub fn asleep<A: Actuator>(applier: &Applier<A>, job: JobId, until: Micros) -> bool {
    applier
        .actuator()
        .pids(&job_group(job))
        .is_ok_and(|pids| !pids.is_empty() && asleep_by(&pids, until))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Micros = 1_000;

    #[test]
    fn outsiders_share_one_budget_and_each_has_its_own() {
        let ms = Duration::from_millis;
        let spent = |job, used, budget| Spent {
            job,
            used: ms(used),
            budget: ms(budget),
        };
        // One computing outsider: held past its own budget only.
        assert_eq!(over_budget(&[spent(1, 9, 10)], ms(10)), Vec::<JobId>::new());
        assert_eq!(over_budget(&[spent(1, 11, 10)], ms(10)), vec![1]);
        // Four of one user, each under its own budget, together past the node's: each past
        // its part (2.5 ms) is held; an I/O-bound one using 1 ms is not.
        let many = [
            spent(1, 4, 5),
            spent(2, 4, 5),
            spent(3, 3, 5),
            spent(4, 1, 5),
        ];
        assert_eq!(over_budget(&many, ms(10)), vec![1, 2, 3]);
        // Together within the node's budget: nobody.
        let few = [spent(1, 4, 5), spent(2, 4, 5)];
        assert_eq!(over_budget(&few, ms(10)), Vec::<JobId>::new());
        assert_eq!(over_budget(&[], ms(10)), Vec::<JobId>::new());
    }

    #[test]
    fn a_job_is_blocked_once_its_usage_stood_still_for_the_window() {
        let mut w = BlockWatch::new(5 * MS);
        assert_eq!(w.next_look(false), Micros::MAX, "nobody watched yet");
        w.slot_began([1, 2], 0);
        assert_eq!(w.period(), 2_500);
        assert!(!w.due(2 * MS, false) && w.due(2_500, false) && !w.due(3 * MS, false));
        let used = Duration::from_micros;
        // Job 1 stands still from 2.5 ms on; job 2 keeps computing.
        for (now, two) in [(2_500, 10), (5 * MS, 20), (7_499, 30)] {
            assert!(!w.still(1, used(100), now));
            assert!(!w.still(2, used(two), now));
        }
        assert!(w.still(1, used(100), 7_500));
        assert!(!w.still(2, used(40), 10 * MS));
        // Any use starts the window again.
        assert!(!w.still(1, used(101), 11 * MS));
        assert!(!w.still(1, used(101), 15 * MS));
        assert!(w.still(1, used(101), 16 * MS));
        // A job that gave its slot away, or one not running in the slot, is not watched.
        w.drop_job(1);
        assert!(!w.still(1, used(101), 30 * MS));
        assert!(!w.still(3, used(0), 30 * MS));
        assert_eq!(w.watched().collect::<Vec<_>>(), vec![2]);
        w.drop_job(2);
        assert_eq!(w.next_look(false), Micros::MAX);
        let next = w.next_look(true);
        assert!(next < Micros::MAX, "a loose job is looked at still");
        assert!(w.due(next, true) && !w.due(next, false));
        // A new slot watches afresh.
        w.slot_began([1], 100 * MS);
        assert_eq!(w.next_look(false), 102_500);
        assert!(!w.still(1, used(101), 101 * MS));
    }

    #[test]
    fn this_process_is_runnable_and_a_sleeper_is_not() {
        let forever = Micros::MAX;
        assert!(!asleep_by(&[std::process::id() as Pid], forever));
        let mut sleeper = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pid = sleeper.id() as Pid;
        // Off the CPU once is not enough: a page fault while `sleep` loads shows as `D` for a
        // moment, and it runs again after. Inside its sleep call, it stays off.
        let in_its_sleep = || {
            let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
            let number = call.split(' ').next().and_then(|n| n.parse::<i64>().ok());
            number.is_some_and(|n| n == libc::SYS_clock_nanosleep || n == libc::SYS_nanosleep)
        };
        let start = Instant::now();
        while !in_its_sleep() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(in_its_sleep(), "the sleeper reached its sleep");
        assert!(asleep_by(&[pid], forever));
        assert!(
            !asleep_by(&[pid], now_micros()),
            "a scan out of time says no"
        );
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        // Past any pid_max (2^22): the sleeper's own pid may be taken again by now.
        assert!(asleep_by(&[1 << 30], forever), "a process gone is asleep");
    }
}
