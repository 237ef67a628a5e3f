//! cosched-agent: everything a node does. [`node::NodeAgent`] takes orders from a
//! [`cosched_proto::PlanSource`] and reports to an [`cosched_proto::EventSink`]: it launches jobs under their
//! [`supervisor`]s and switches them on the slot [`clock`].
//!
//! The [`Applier`] turns "slot `k` begins" into actuator calls, each job as its own mode says
//! (one rotation may mix them): a `gang` job is frozen as it leaves and thawed as it enters
//! (strictly leavers first: thawing first made the freeze confirmation 44 ms to 0.9 s slower,
//! notes); a `moderate` job's CPU weight moves instead; an `implicit` job (and an `auto` one
//! until its mode is chosen) is only placed on its processors (and held past its budget of a
//! switched job's slot, `lend`); in `local` mode (a whole
//! machine's) nothing is done at all.
//! [`clock`] provides the real-time slot clock that calls it.

pub mod awake;
pub mod boundaries;
pub mod chrony;
pub mod clock;
pub mod door;
pub mod holder;
mod idle;
mod join;
pub mod kick;
mod lend;
pub mod node;
mod probe;
mod process;
mod relay;
pub mod skew;
mod stall;
pub mod start;
mod stats;
pub mod supervisor;

pub use idle::IdleTracker;
pub use join::check_owner;
pub use lend::{asleep_by, give_away_after, BlockWatch};
pub use node::{NodeAgent, NodeSettings, HOSTS_DIR, STATE_SUBDIRS};
pub use process::{renewal_period, serve_node, NodeConfig};
pub use stats::{Samples, Summary};

use cosched_cgroups::{Actuator, CgroupError, JobGroup, ReleaseStep, CONFIRM_TIMEOUT};
use cosched_core::{Generation, JobId, Micros, Partition};
use cosched_os::now_micros;
use cosched_proto::JobMoment;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

const LOG: cosched_os::Log = cosched_os::Log::new("agent");

pub use cosched_proto::{Mode, UnknownMode};

/// cgroup v2 `cpu.weight` of the favoured and of the other jobs in moderate mode: 10,000 : 1
/// left a disfavoured busy job 0.04 % of a CPU here (cpu.shares 10240 : 2, notes).
pub const FAVOURED_WEIGHT: u32 = 10_000;
pub const DISFAVOURED_WEIGHT: u32 = 1;
pub const NORMAL_WEIGHT: u32 = 100;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("job {job}: {source}")]
    Actuator { job: JobId, source: CgroupError },
}

/// A job's group in the cgroup trees (the actuator takes nothing else).
pub fn job_group(job: JobId) -> JobGroup {
    JobGroup::of(job)
}

/// What one slot boundary did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchRecord {
    pub slot: i64,
    /// Each job held back and each job let run, with when it took effect (true clock): a
    /// stop when its freeze was confirmed, or when the entrants were let start if that came
    /// first (see `enter_slot`).
    pub stopped: Vec<JobMoment>,
    pub started: Vec<JobMoment>,
    /// From the first actuator call to the last confirmation.
    pub duration: Duration,
    /// Within a slot: the blocked jobs whose processors `started` were given (`lend`).
    pub blocked: Vec<JobId>,
}

impl SwitchRecord {
    /// Whether anything stopped or started.
    pub fn switched(&self) -> bool {
        !self.stopped.is_empty() || !self.started.is_empty()
    }
}

pub struct Applier<A: Actuator> {
    actuator: A,
    /// The machine's mode: every job's unless it has its own.
    mode: Mode,
    current: Option<Generation>,
    pending: Vec<Generation>,
    /// Jobs the agent knows (their cgroups exist): the processors last set, and the mode.
    jobs: BTreeMap<JobId, Known>,
    /// Jobs now allowed to run (gang: thawed; moderate: favoured).
    running: BTreeSet<JobId>,
    /// Jobs being stopped at the coming boundary (ahead of it by `leave_slot`, or on it), and
    /// the time `leave_slot` took: both go into that boundary's record.
    stopping: Vec<Stopping>,
    leaving_took: Duration,
    /// Gang entrants `leave_slot` looked at for the coming boundary, and whether that look
    /// pinned them: their thaw need not look again (until their processors change).
    looked_ahead: BTreeMap<JobId, bool>,
    /// How long the last freezes took to be confirmed (µs), newest last: any job's, and each
    /// job's own.
    freezes: RecentTimes,
    freezes_of: BTreeMap<JobId, RecentTimes>,
    /// How long each job's last looks at its threads took (µs; those that read them, not
    /// those the actuator answered from an earlier one): a job of a thousand processes takes
    /// milliseconds to read, which no boundary but its own may pay.
    looks_of: BTreeMap<JobId, RecentTimes>,
    /// Jobs found blocked in the slot under way (`lend`).
    lenders: BTreeSet<JobId>,
    /// Jobs whose freezes were not confirmed within [`FREEZE_PATIENCE`] since one was last:
    /// looked at again, without waiting, at each boundary while frozen.
    unconfirmed: BTreeMap<JobId, Unconfirmed>,
    /// Gang jobs left thawed outside their slot because they hardly used it (`keep_loose`).
    loose: BTreeSet<JobId>,
    /// Implicit jobs frozen for the rest of a switched job's slot: they used their budget of
    /// it (`hold_outsider`).
    held: BTreeSet<JobId>,
}

/// What the applier keeps of a job it has in charge.
#[derive(Clone, Debug)]
struct Known {
    cpus: Option<Partition>,
    mode: Mode,
    /// Whether it was ever let run: before, its threads have no CPU time to tell workers by.
    ran: bool,
}

impl Known {
    /// Whether boundaries switch it (gang and moderate jobs).
    fn switched(&self) -> bool {
        switching(self.mode) != Switching::None
    }
}

/// How a mode switches a job at boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Switching {
    Freeze,
    Weight,
    /// Never switched: implicit, auto until chosen, local.
    None,
}

fn switching(mode: Mode) -> Switching {
    match mode {
        Mode::Gang => Switching::Freeze,
        Mode::Moderate => Switching::Weight,
        Mode::Implicit | Mode::Auto | Mode::Local => Switching::None,
    }
}

/// A job asked to stop at the coming boundary, and when the kernel confirmed it did.
struct Stopping {
    job: JobId,
    asked: Micros,
    confirmed: Option<Micros>,
    /// Until when the entrants waited for it (`enter_slot`).
    given: Option<Micros>,
}

/// A job whose freezes have not been confirmed since `since` (the first such ask).
struct Unconfirmed {
    since: Micros,
    /// Whether the log said so (once, past [`CONFIRM_TIMEOUT`]).
    said: bool,
}

/// How long the clock waits for a freeze's confirmation: from the entrants' start for a job
/// leaving its slot, from the ask for one frozen on its own (placed, suspended). More than a
/// scheduler tick at HZ=250 (4 ms), the longest a task that had no processor takes to reach
/// the freezer. A task not stopped by then is asleep in the kernel where no freezer reaches
/// (an exec waiting for a traced thread nobody reaps, a dead NFS server): it runs none of its
/// own code while there and stops as it leaves, so the freeze holds unconfirmed. The clock
/// waited for it up to the confirmation timeout (2 s), at every boundary it left: one user's
/// job made every job of the node switch every 2.1 s instead of every 100 ms.
pub const FREEZE_PATIENCE: Micros = 5_000;

/// The latest times something took (µs), newest last: what the clock plans by.
#[derive(Default)]
pub(crate) struct RecentTimes(VecDeque<Micros>);

impl RecentTimes {
    /// How many it looks at.
    const KEPT: usize = 16;

    pub(crate) fn record(&mut self, took: Micros) {
        if self.0.len() == Self::KEPT {
            self.0.pop_front();
        }
        self.0.push_back(took);
    }

    pub(crate) fn slowest(&self) -> Option<Micros> {
        self.0.iter().max().copied()
    }

    /// The middle one, or the latest if more: what the times usually are (one that stood out
    /// left aside), unless they are growing.
    pub(crate) fn usual_or_latest(&self) -> Option<Micros> {
        let mut times: Vec<Micros> = self.0.iter().copied().collect();
        times.sort_unstable();
        let median = times.get(times.len() / 2).copied();
        median.max(self.0.back().copied())
    }
}

/// What `Applier::lead` adds to the slowest freeze.
const LEAD_SLACK: Micros = 100;
/// The lead before any freeze was measured.
const FIRST_LEAD: Micros = 1_000;
/// A look at a job's threads (`Actuator::spread`) that usually takes no longer than this may
/// be made on the boundary, before the job's thaw (an MPI job of ~14 threads: ~250 µs).
const QUICK_LOOK: Micros = 1_000;

impl<A: Actuator> Applier<A> {
    pub fn new(actuator: A, mode: Mode) -> Self {
        Applier {
            actuator,
            mode,
            current: None,
            pending: Vec::new(),
            jobs: BTreeMap::new(),
            running: BTreeSet::new(),
            stopping: Vec::new(),
            leaving_took: Duration::ZERO,
            looked_ahead: BTreeMap::new(),
            freezes: RecentTimes::default(),
            freezes_of: BTreeMap::new(),
            looks_of: BTreeMap::new(),
            lenders: BTreeSet::new(),
            unconfirmed: BTreeMap::new(),
            loose: BTreeSet::new(),
            held: BTreeSet::new(),
        }
    }

    pub fn actuator(&self) -> &A {
        &self.actuator
    }

    /// For what the modes do not cover (kill a cancelled job, thaw a suspended one).
    pub fn actuator_mut(&mut self) -> &mut A {
        &mut self.actuator
    }

    /// Jobs allowed to run now (gang: thawed; moderate: favoured).
    pub fn running(&self) -> impl Iterator<Item = JobId> + '_ {
        self.running.iter().copied()
    }

    /// Jobs held back ahead of the coming boundary, which ran until then.
    pub fn leaving(&self) -> impl Iterator<Item = JobId> + '_ {
        self.stopping.iter().map(|s| s.job)
    }

    /// Hands the actuator back (after `release_all`), e.g. to remove the jobs' cgroups.
    pub fn into_actuator(self) -> A {
        self.actuator
    }

    /// The machine's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether a job's processes that start while it is frozen are stopped as they join it
    /// (not with the signals freezer).
    pub fn stops_joiners(&self) -> bool {
        self.actuator.stops_joiners()
    }

    /// A job's mode: its own, or the machine's.
    pub fn mode_of(&self, job: JobId) -> Mode {
        self.jobs.get(&job).map_or(self.mode, |known| known.mode)
    }

    /// Makes a job's cgroup (or finds it again after a restart), puts it on `cpus` and takes
    /// charge of it in `mode` (none: the machine's; a machine in `local` mode switches no
    /// job): a gang job frozen until its slot, any other continued (a job suspended earlier
    /// must run again). A job placed again while it runs (a class change) is stopped too, so
    /// it is no longer counted as running: else the boundary that wants it would find it
    /// "running" and never thaw it.
    pub fn admit(
        &mut self,
        job: JobId,
        cpus: Option<&Partition>,
        mode: Option<Mode>,
    ) -> Result<(), AgentError> {
        let mode = match self.mode {
            Mode::Local => Mode::Local,
            machine => mode.unwrap_or(machine),
        };
        let name = job_group(job);
        let fail = |source| AgentError::Actuator { job, source };
        self.actuator.create(&name).map_err(fail)?;
        if let (Some(cpus), false) = (cpus, mode == Mode::Local) {
            self.actuator.set_cpus(&name, cpus).map_err(fail)?;
        }
        if mode != Mode::Gang {
            self.held.remove(&job);
            self.actuator.thaw(&name).map_err(fail)?;
        }
        let cpus = cpus.filter(|_| mode != Mode::Local).cloned();
        self.jobs.insert(
            job,
            Known {
                cpus,
                mode,
                ran: false,
            },
        );
        self.steer(job, false)?;
        self.running.remove(&job);
        Ok(())
    }

    /// Moves a job to another mode (an `auto` job's choice): what its old mode did is undone
    /// and it waits, as its new mode has it, for the next boundary that wants it.
    pub fn set_mode(&mut self, job: JobId, mode: Mode) -> Result<(), AgentError> {
        if self.mode == Mode::Local || self.mode_of(job) == mode || !self.jobs.contains_key(&job) {
            return Ok(());
        }
        self.unloose(job)?;
        self.unhold(job)?;
        self.let_loose(job)?;
        self.running.remove(&job);
        self.stopping.retain(|s| s.job != job);
        if let Some(known) = self.jobs.get_mut(&job) {
            known.mode = mode;
        }
        self.steer(job, false).map(|_| ())
    }

    /// Takes a job out of the rotation and stops it, whatever its mode (`cosched suspend`).
    pub fn suspend(&mut self, job: JobId) -> Result<(), AgentError> {
        self.running.remove(&job);
        self.unloose(job)?;
        self.held.remove(&job);
        self.jobs.remove(&job);
        self.freeze_within_patience(job).map(|_| ())
    }

    /// Forgets a job that ended and clears its cgroup: it is let loose, what is left of it is
    /// killed, and the cgroup removed. Removal fails while killed processes are still exiting;
    /// call again later.
    pub fn discard(&mut self, job: JobId) -> Result<(), AgentError> {
        self.release(job)?;
        let name = job_group(job);
        let fail = |source| AgentError::Actuator { job, source };
        if !self.actuator.pids(&name).map_err(fail)?.is_empty() {
            self.actuator.kill(&name).map_err(fail)?;
        }
        self.freezes_of.remove(&job);
        self.looks_of.remove(&job);
        self.actuator.remove(&name).map_err(fail)
    }

    /// Jobs the agent has in charge.
    pub fn jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs.keys().copied()
    }

    /// The jobs that will start at the boundary into `slot`, as things stand now.
    pub fn entrants(&self, slot: i64) -> Vec<JobId> {
        self.wanted(self.in_force(slot), slot)
            .difference(&self.running)
            .copied()
            .collect()
    }

    /// The generation that will be in force in `slot`, as things stand now.
    fn in_force(&self, slot: i64) -> Option<&Generation> {
        self.pending
            .iter()
            .rev()
            .find(|g| g.first_slot <= slot)
            .or(self.current.as_ref())
    }

    /// How long before the boundary into `slot` to call `leave_slot`: for each gang job that
    /// leaves there, the slowest of its own last freezes (any job's for one never frozen
    /// yet), plus some slack, so the jobs that leave are frozen by the boundary and those
    /// that enter are thawed on it. A big job's slow freeze starts its own leaving early, not
    /// every job's. Nothing when no gang job leaves.
    pub fn lead(&self, slot: i64) -> Micros {
        let wanted = self.wanted(self.in_force(slot), slot);
        self.running
            .difference(&wanted)
            .filter(|&&job| self.mode_of(job) == Mode::Gang)
            .map(|&job| self.expected_freeze(job))
            .max()
            .unwrap_or(0)
    }

    /// How long a freeze of `job` is given to be confirmed: the slowest of its own last ones
    /// (any job's for one never frozen yet), plus slack.
    fn expected_freeze(&self, job: JobId) -> Micros {
        self.freezes_of
            .get(&job)
            .and_then(RecentTimes::slowest)
            .or(self.freezes.slowest())
            .map_or(FIRST_LEAD, |slowest| slowest + LEAD_SLACK)
    }

    /// Holds back, ahead of the boundary into `slot` (due at `boundary`), the gang jobs that
    /// do not run in it: asks their freezes and waits for them until the boundary, no later.
    /// A freeze is confirmed 0.3-0.8 ms after it is asked (notes): done on the boundary, it
    /// delayed every start behind it, by a different time on each node, which was the tail
    /// of the cross-node start spread.
    pub fn leave_slot(&mut self, slot: i64, boundary: Micros) -> Result<(), AgentError> {
        let began = Instant::now();
        let wanted = self.wanted(self.in_force(slot), slot);
        let leave: Vec<JobId> = self
            .running
            .difference(&wanted)
            .filter(|&&job| self.mode_of(job) == Mode::Gang)
            .copied()
            .collect();
        // Looks are made ahead for the coming boundary only (one that failed kept its own).
        self.looked_ahead.clear();
        if leave.is_empty() {
            return Ok(());
        }
        for job in leave {
            self.ask_stop(job)?;
        }
        // While the freezes take effect: the boundary itself then only thaws the entrants.
        // A look is made here if its usual cost fits before the boundary: one that does not
        // (a job of a thousand processes takes milliseconds to read; one never looked at
        // never ran and has nothing to pin yet) is made after its thaw, in its own slot, not
        // in the leavers'. One that fails is tried again on the boundary.
        let gangs: Vec<JobId> = (self.entrants(slot).into_iter())
            .filter(|&job| self.mode_of(job) == Mode::Gang)
            .collect();
        for job in gangs {
            let left = boundary - now_micros();
            if self.look_cost(job).is_none_or(|cost| cost >= left) {
                continue;
            }
            if let Some(pinned) = self.look_or_say(job, "ahead of its boundary") {
                self.looked_ahead.insert(job, pinned);
            }
        }
        // One whose last freeze was not confirmed in time is looked at once, not polled.
        let overdue = self.overdue();
        self.await_stops(|s| match overdue.contains(&s.job) {
            true => s.asked,
            false => boundary,
        })?;
        self.leaving_took += began.elapsed();
        Ok(())
    }

    /// Asks a running job to stop at (or ahead of) a boundary. A gang job's freeze is only
    /// asked: `await_stops` waits for it.
    fn ask_stop(&mut self, job: JobId) -> Result<(), AgentError> {
        let asked = now_micros();
        let confirmed = if self.mode_of(job) == Mode::Gang {
            self.ask_freeze(job)?;
            None
        } else {
            Some(self.steer(job, false)?)
        };
        self.running.remove(&job);
        self.stopping.push(Stopping {
            job,
            asked,
            confirmed,
            given: None,
        });
        Ok(())
    }

    /// Asks the kernel to stop every process of the job and returns at once.
    fn ask_freeze(&mut self, job: JobId) -> Result<(), AgentError> {
        self.actuator
            .ask_freeze(&job_group(job))
            .map_err(|source| AgentError::Actuator { job, source })
    }

    /// Waits for each stop not yet confirmed until the time `until` gives it, keeping how long
    /// each confirmed freeze took.
    fn await_stops(&mut self, until: impl Fn(&Stopping) -> Micros) -> Result<(), AgentError> {
        for index in 0..self.stopping.len() {
            let stop = &self.stopping[index];
            if stop.confirmed.is_some() {
                continue;
            }
            let (job, asked) = (stop.job, stop.asked);
            let confirmed = self.frozen_by(job, until(stop))?;
            if confirmed {
                self.confirmed_at_last(job);
                let at_us = now_micros();
                self.stopping[index].confirmed = Some(at_us);
                self.freezes.record(at_us - asked);
                self.freezes_of
                    .entry(job)
                    .or_default()
                    .record(at_us - asked);
            }
        }
        Ok(())
    }

    /// Waits until `until` (true clock) for the job's freeze to be confirmed: whether it was.
    fn frozen_by(&mut self, job: JobId, until: Micros) -> Result<bool, AgentError> {
        let deadline = Instant::now() + Duration::from_micros((until - now_micros()).max(0) as u64);
        self.actuator
            .frozen_by(&job_group(job), Some(deadline))
            .map_err(|source| AgentError::Actuator { job, source })
    }

    /// Freezes a job on its own (not at a boundary), waiting [`FREEZE_PATIENCE`] at most for
    /// the confirmation (not at all for a job whose last freeze was not confirmed in time:
    /// its owner could ask for such freezes again and again, a class change each): returns
    /// when it was confirmed, or when the wait ended.
    fn freeze_within_patience(&mut self, job: JobId) -> Result<Micros, AgentError> {
        let asked = now_micros();
        self.ask_freeze(job)?;
        let patience = match self.unconfirmed.contains_key(&job) {
            true => 0,
            false => FREEZE_PATIENCE,
        };
        match self.frozen_by(job, asked + patience)? {
            true => self.confirmed_at_last(job),
            false => self.carry_unconfirmed(job, asked),
        }
        Ok(now_micros())
    }

    /// Whether a freeze of the job not confirmed in time is still not: looked at once more,
    /// now, without waiting.
    pub fn freeze_pending(&mut self, job: JobId) -> bool {
        if !self.unconfirmed.contains_key(&job) {
            return false;
        }
        let confirmed = self.frozen_by(job, now_micros()).unwrap_or(false);
        if confirmed {
            self.confirmed_at_last(job);
        }
        !confirmed
    }

    /// The jobs whose last freeze was not confirmed in time: their freezes are asked and looked
    /// at, not waited for.
    fn overdue(&self) -> BTreeSet<JobId> {
        self.unconfirmed.keys().copied().collect()
    }

    /// Keeps a job whose freeze was not confirmed in time, to look at it again at the next
    /// boundaries (its next freezes too, until one is).
    fn carry_unconfirmed(&mut self, job: JobId, asked: Micros) {
        self.unconfirmed.entry(job).or_insert(Unconfirmed {
            since: asked,
            said: false,
        });
    }

    /// A freeze of `job` was confirmed: if the log had said it was not, it says it is now.
    fn confirmed_at_last(&mut self, job: JobId) {
        if let Some(Unconfirmed { since, said: true }) = self.unconfirmed.remove(&job) {
            LOG.info(format_args!(
                "job {job}: frozen again, {:.1} s after its freezes stopped being confirmed",
                (now_micros() - since) as f64 / 1e6
            ));
        }
    }

    /// Looks once, without waiting, at each job frozen whose freeze was not confirmed in time,
    /// and says in the log (once) which have had none confirmed for [`CONFIRM_TIMEOUT`].
    fn look_at_unconfirmed(&mut self) {
        let now = now_micros();
        let frozen: Vec<JobId> = (self.unconfirmed.keys())
            .filter(|job| !self.running.contains(job) && !self.loose.contains(job))
            .copied()
            .collect();
        for job in frozen {
            // An error is a group gone (the job ended): nothing is left to stop.
            if self.frozen_by(job, now).unwrap_or(true) {
                self.confirmed_at_last(job);
            }
        }
        for (job, entry) in &mut self.unconfirmed {
            let waited = Duration::from_micros((now - entry.since).max(0) as u64);
            if !entry.said && waited >= CONFIRM_TIMEOUT {
                entry.said = true;
                LOG.warn(format_args!(
                    "job {job}: no freeze of it confirmed for {:.1} s: a process of it is \
                     asleep in the kernel where the freezer cannot reach it (a stuck exec, a \
                     dead network file system: it runs none of its code there and stops as it \
                     leaves) or, with the signals freezer, something of its owner's keeps \
                     continuing it (it is stopped again at each boundary); the other jobs' \
                     slots go on without waiting for it",
                    waited.as_secs_f64()
                ));
            }
        }
    }

    /// The known jobs that `generation` runs in `slot` and that are switched (gang and
    /// moderate ones).
    fn wanted(&self, generation: Option<&Generation>, slot: i64) -> BTreeSet<JobId> {
        self.holders(generation, slot)
            .into_iter()
            .filter(|job| self.jobs.get(job).is_some_and(Known::switched))
            .collect()
    }

    /// The known jobs of the slice that `generation` runs in `slot`, whatever their mode.
    fn holders(&self, generation: Option<&Generation>, slot: i64) -> BTreeSet<JobId> {
        let Some(g) = generation.filter(|_| self.mode != Mode::Local) else {
            return BTreeSet::new();
        };
        g.slice_for_slot(slot)
            .map(|s| {
                g.plan.slices[s]
                    .jobs()
                    .filter(|j| self.jobs.contains_key(j))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The jobs whose slot `slot` is, by the generation in force: the ones that may give it
    /// away when they block (`lend`), unswitched ones too.
    pub fn slot_holders(&self, slot: i64) -> BTreeSet<JobId> {
        self.holders(self.current.as_ref(), slot)
    }

    /// Whether a job is held frozen until a boundary lets it run: a gang job outside its slot
    /// (neither running nor let loose).
    pub fn waits_for_slot(&self, job: JobId) -> bool {
        self.mode_of(job) == Mode::Gang
            && self.jobs.contains_key(&job)
            && !self.running.contains(&job)
            && !self.loose.contains(&job)
    }

    /// Forgets a job (it ended): it is let loose first, so it is never left frozen.
    pub fn release(&mut self, job: JobId) -> Result<(), AgentError> {
        self.running.remove(&job);
        self.unconfirmed.remove(&job);
        self.unloose(job)?;
        self.unhold(job)?;
        if !self.jobs.contains_key(&job) {
            return Ok(());
        }
        // Its mode says what to undo: forgotten after.
        let loose = self.let_loose(job);
        self.jobs.remove(&job);
        loose
    }

    /// The number of the generation in force.
    pub fn generation(&self) -> Option<u64> {
        self.current.as_ref().map(|g| g.number)
    }

    /// Whether a queued generation is in force by `slot` (and waits for `enter_slot`).
    pub fn has_due(&self, slot: i64) -> bool {
        self.pending.iter().any(|g| g.first_slot <= slot)
    }

    /// Queues a generation; it takes effect at the boundary of its `first_slot`.
    pub fn publish(&mut self, generation: Generation) {
        self.pending
            .retain(|g| g.first_slot < generation.first_slot);
        self.pending.push(generation);
    }

    /// Applies the boundary into `slot` (due at `boundary`): any generation due by now, then
    /// the switch.
    pub fn enter_slot(&mut self, slot: i64, boundary: Micros) -> Result<SwitchRecord, AgentError> {
        let started_at = Instant::now();
        let took_ahead = std::mem::take(&mut self.leaving_took);
        self.look_at_unconfirmed();
        // Held back ahead and not let loose or forgotten since.
        let (jobs, running) = (&self.jobs, &self.running);
        self.stopping
            .retain(|s| jobs.contains_key(&s.job) && !running.contains(&s.job));
        if let Some(due) = self.pending.iter().rposition(|g| g.first_slot <= slot) {
            let generation = self.pending.drain(..=due).next_back().expect("found");
            self.place(&generation)?;
            self.current = Some(generation);
        }
        // A held implicit job's budget was of the slot that ends.
        for job in self.held.clone() {
            self.unhold(job)?;
        }
        let wanted = self.wanted(self.current.as_ref(), slot);
        let stop: Vec<JobId> = self.running.difference(&wanted).copied().collect();
        let start: Vec<JobId> = wanted.difference(&self.running).copied().collect();
        self.lenders.clear();
        let back: Vec<JobId> = self.loose.intersection(&wanted).copied().collect();
        for job in back {
            self.unloose(job)?;
        }
        for &job in &stop {
            self.ask_stop(job)?;
        }
        // Stop before start: a freeze asked ahead is awaited until the boundary, one asked on
        // it for as long as the job's freezes take. One still unconfirmed then waits on a task
        // that has had no processor since the freeze was asked (another process took it: a job
        // starting or ending beside the gangs, a compiler): it stops the moment it gets one,
        // before running any of its own code, and waiting for that held the entrants back up
        // to a scheduler tick (4 ms at HZ=250) past the boundary.
        let given: Vec<Micros> = self
            .stopping
            .iter()
            .map(|s| match s.asked < boundary {
                true => boundary,
                false => s.asked + self.expected_freeze(s.job),
            })
            .collect();
        for (stop, given) in self.stopping.iter_mut().zip(given) {
            stop.given = Some(given);
        }
        self.await_stops(|s| s.given.expect("given above"))?;
        let mut started = Vec::with_capacity(start.len());
        for &job in &start {
            let at_us = self.steer(job, true)?;
            self.running.insert(job);
            started.push(JobMoment { job, at_us });
        }
        // A leaver the new plan lets run again runs: its freeze is not awaited any more.
        self.stopping
            .retain(|s| s.confirmed.is_some() || !start.contains(&s.job));
        // Looks made ahead serve this boundary only (an entrant a new plan left out included).
        self.looked_ahead.clear();
        // The record says when each leaver stopped running its own code: when its freeze was
        // confirmed, or, for one confirmed after the entrants started or not at all, when
        // they were let. A job whose last freeze was not confirmed in time is not waited for
        // again: the clock's polls would take an entrant's processor for nothing.
        let overdue = self.overdue();
        self.await_stops(|s| {
            let patience = if overdue.contains(&s.job) {
                0
            } else {
                FREEZE_PATIENCE
            };
            s.given.expect("given above") + patience
        })?;
        let mut stopped = Vec::with_capacity(self.stopping.len());
        for s in std::mem::take(&mut self.stopping) {
            let given = s.given.expect("given above");
            if s.confirmed.is_none() && !overdue.contains(&s.job) {
                // At least this long, in its own history only: its next freezes are asked
                // earlier (within the clock's bound on leads), a job's slowness costs no
                // other job's slot.
                (self.freezes_of.entry(s.job).or_default()).record(now_micros() - s.asked);
                self.carry_unconfirmed(s.job, s.asked);
            }
            stopped.push(JobMoment {
                job: s.job,
                at_us: s.confirmed.map_or(given, |confirmed| confirmed.min(given)),
            });
        }
        // A job that keeps running is spread too: its launcher may have started the working
        // processes since (a job alone in its slice is never thawed again; its ranks, pinned
        // where the launcher was, shared one processor for good). The actuator keeps this
        // cheap when nothing changed.
        let kept: Vec<JobId> = (self.running.iter())
            .filter(|job| !start.contains(job))
            .copied()
            .collect();
        for job in kept {
            self.look(job)
                .map_err(|source| AgentError::Actuator { job, source })?;
        }
        Ok(SwitchRecord {
            slot,
            stopped,
            started,
            duration: took_ahead + started_at.elapsed(),
            blocked: Vec::new(),
        })
    }

    /// Lets a job run (`run`) or holds it back, as the mode does it. Returns when that took
    /// effect (true clock): after the thaw or the confirmed freeze, before any spreading.
    fn steer(&mut self, job: JobId, run: bool) -> Result<Micros, AgentError> {
        let name = job_group(job);
        let fail = |source| AgentError::Actuator { job, source };
        match (self.mode_of(job), run) {
            // Thawed tasks wake where they last ran, often two on one processor: the second
            // waited milliseconds for the balancer while its partner spun (a 20 ms gang of
            // 2-rank ping-pongs ran at 30 % CPU efficiency). Pinned while still frozen (ahead
            // of the boundary, `leave_slot`, or on it when the look is quick), they wake each
            // on its own: spreading after the thaw kept the real-time clock thread busy (up to
            // ~100 µs) on a processor where a thawed rank waited, a skew. A slow look is made
            // after the thaw, in the job's own slot; so is a job's first (a frozen look finds
            // no workers in a job that never ran); a job of sleepers is not looked at again.
            (Mode::Gang, true) => {
                let ahead = self.looked_ahead.remove(&job);
                let quick = self.look_cost(job).is_some_and(|cost| cost <= QUICK_LOOK);
                // A look that fails before the thaw is made again after it.
                let before = match ahead {
                    None if quick => self.look_or_say(job, "before its thaw"),
                    looked => looked,
                };
                let at = self
                    .actuator
                    .thaw(&name)
                    .map(|_| now_micros())
                    .map_err(fail)?;
                let first_run = (self.jobs.get_mut(&job))
                    .is_some_and(|known| !std::mem::replace(&mut known.ran, true));
                // Thawed, the job runs and must be counted running, whatever the look does.
                if before.is_none() || (before == Some(false) && first_run) {
                    self.look_or_say(job, "after its thaw");
                }
                Ok(at)
            }
            (Mode::Gang, false) => self.freeze_within_patience(job),
            // Weight alone is not enough: see `Actuator::spread`.
            (Mode::Moderate, true) => {
                self.actuator
                    .set_weight(&name, FAVOURED_WEIGHT)
                    .map_err(fail)?;
                let at = now_micros();
                self.look(job).map_err(fail)?;
                Ok(at)
            }
            (Mode::Moderate, false) => {
                self.actuator
                    .set_weight(&name, DISFAVOURED_WEIGHT)
                    .map_err(fail)?;
                let at = now_micros();
                self.actuator.unpin(&name).map_err(fail)?;
                Ok(at)
            }
            (Mode::Implicit | Mode::Auto | Mode::Local, _) => Ok(now_micros()),
        }
    }

    /// Looks at a job's threads and pins its workers (`Actuator::spread`); returns whether
    /// they are pinned. A look that read the threads is timed.
    fn look(&mut self, job: JobId) -> Result<bool, CgroupError> {
        let began = Instant::now();
        let spread = self.actuator.spread(&job_group(job))?;
        if spread.looked {
            let took = began.elapsed().as_micros() as Micros;
            self.looks_of.entry(job).or_default().record(took);
        }
        Ok(spread.pinned)
    }

    /// `look` where a failed pin must not fail the switch (pins only place the threads): the
    /// error is said, with `when` the look was made, and `None` returned.
    fn look_or_say(&mut self, job: JobId, when: &str) -> Option<bool> {
        self.look(job)
            .inspect_err(|error| LOG.warn(format_args!("job {job}: pinning {when}: {error}")))
            .ok()
    }

    /// What a look that reads `job`'s threads may take, whether or not the next one will read
    /// them: the median of its last ones, or the latest while a job grows (a crowd forking);
    /// none before the first.
    fn look_cost(&self, job: JobId) -> Option<Micros> {
        self.looks_of
            .get(&job)
            .and_then(RecentTimes::usual_or_latest)
    }

    /// Gives each known job of a new generation its processors (local mode leaves them be).
    fn place(&mut self, generation: &Generation) -> Result<(), AgentError> {
        if self.mode == Mode::Local {
            return Ok(());
        }
        for slice in &generation.plan.slices {
            for entry in &slice.entries {
                let Some(Known { cpus: last, .. }) = self.jobs.get_mut(&entry.job) else {
                    continue;
                };
                // The cgroup is written only when the processors change.
                if last.as_ref() != Some(&entry.partition) {
                    // A cpuset change undoes the pins.
                    self.looked_ahead.remove(&entry.job);
                    self.actuator
                        .set_cpus(&job_group(entry.job), &entry.partition)
                        .map_err(|source| AgentError::Actuator {
                            job: entry.job,
                            source,
                        })?;
                    *last = Some(entry.partition.clone());
                }
            }
        }
        Ok(())
    }

    /// Lets every job run freely again (clean stop, or losing the control plane): thawed and
    /// at normal weight. Every job is attempted; the first error is returned.
    pub fn release_all(&mut self) -> Result<(), AgentError> {
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        let mut first_error = None;
        for job in jobs {
            if let Err(error) = self.let_loose(job) {
                first_error.get_or_insert(error);
            }
        }
        let loose: Vec<JobId> = self.loose.iter().copied().collect();
        for job in loose {
            if let Err(error) = self.unloose(job) {
                first_error.get_or_insert(error);
            }
        }
        for job in self.held.clone() {
            if let Err(error) = self.unhold(job) {
                first_error.get_or_insert(error);
            }
        }
        self.running = self.jobs.keys().copied().collect();
        first_error.map_or(Ok(()), Err)
    }

    /// Undoes what its mode did to a job: thawed (gang) or back at normal weight (moderate),
    /// and its threads unpinned.
    fn let_loose(&mut self, job: JobId) -> Result<(), AgentError> {
        let name = job_group(job);
        let outcome = match switching(self.mode_of(job)) {
            Switching::Freeze => self
                .actuator
                .thaw(&name)
                .and_then(|_| self.actuator.unpin(&name)),
            Switching::Weight => self
                .actuator
                .set_weight(&name, NORMAL_WEIGHT)
                .and_then(|()| self.actuator.unpin(&name)),
            Switching::None => Ok(()),
        };
        outcome.map_err(|source| AgentError::Actuator { job, source })
    }

    /// What lets a job run freely without this agent (its supervisor takes these steps when
    /// the daemon dies): the actuator's steps, and unpinning its threads in the modes that
    /// pin them.
    pub fn release_steps(&self, job: JobId) -> Result<Vec<ReleaseStep>, AgentError> {
        let name = job_group(job);
        let fail = |source| AgentError::Actuator { job, source };
        let mut steps = self.actuator.release_steps(&name).map_err(fail)?;
        if switching(self.mode_of(job)) != Switching::None {
            if let Some(procs) = self.actuator.join_files(&name).map_err(fail)?.first() {
                steps.push(ReleaseStep::Unpin {
                    procs: procs.clone(),
                });
            }
        }
        Ok(steps)
    }
}
