//! The agent's thread: the only one that touches cgroups. It sleeps to each slot boundary at
//! real-time priority and switches; between boundaries it takes the daemon's messages (admit a
//! job, a new generation, suspend, cancel, discard) in order. It measures lateness, switch time
//! and skew, and reports idle jobs back to the daemon.

use cosched_agent::clock::{self, now_micros};
use cosched_agent::skew::Baseline;
use cosched_agent::{job_name, Applier, IdleTracker, Mode, Samples};
use cosched_cgroups::{Actuator, ReleaseStep};
use cosched_core::{Generation, JobId, Micros, Partition, Rotation};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A cancelled job gets SIGTERM, then SIGKILL this much later if it is still there.
pub const CANCEL_GRACE: Micros = 3_000_000;
/// How often jobs out of the rotation for idleness are checked for work.
const IDLE_WATCH_PERIOD: Micros = 1_000_000;
/// Samples kept per measure (older ones are dropped in halves).
const SAMPLES_KEPT: usize = 100_000;

pub type Reply<T> = Sender<Result<T, String>>;

/// What a launched job's supervisor needs from the actuator.
#[derive(Clone, Debug)]
pub struct Admitted {
    pub join_files: Vec<PathBuf>,
    pub release: Vec<ReleaseStep>,
}

pub enum AgentMsg {
    /// Make (or find again) the job's cgroup, place it and take charge of it.
    Admit {
        job: JobId,
        cpus: Option<Partition>,
        reply: Reply<Admitted>,
    },
    Publish(Generation),
    /// Out of the rotation and stopped (`cosched suspend`, or queued again after a resume).
    Suspend {
        job: JobId,
        reply: Reply<()>,
    },
    /// Out of the rotation and free to run; watched for work (an idle job).
    LetLoose {
        job: JobId,
    },
    /// Let loose, SIGTERM now, SIGKILL after the grace period.
    Cancel {
        job: JobId,
    },
    /// The job ended: clear its cgroup.
    Discard {
        job: JobId,
    },
    /// Clean stop: every job let loose (or killed); the thread ends after replying.
    Stop {
        cancel: bool,
        reply: Reply<()>,
    },
}

pub enum AgentEvent {
    Idle(JobId),
    Woke(JobId),
}

/// Measurements shared with the API (`cosched stats`).
#[derive(Clone, Debug)]
pub struct Stats {
    pub lateness: Samples,
    pub switch: Samples,
    pub skew: Samples,
    pub missed_slots: u64,
    pub idle_departures: u64,
    pub realtime: bool,
    pub actuator: String,
}

impl Stats {
    pub fn new(actuator: String) -> Stats {
        Stats {
            lateness: Samples::new(SAMPLES_KEPT),
            switch: Samples::new(SAMPLES_KEPT),
            skew: Samples::new(SAMPLES_KEPT),
            missed_slots: 0,
            idle_departures: 0,
            realtime: false,
            actuator,
        }
    }
}

pub struct AgentLoop<A: Actuator> {
    applier: Applier<A>,
    rotation: Rotation,
    stats: Arc<Mutex<Stats>>,
    events: Sender<AgentEvent>,
    idle: Option<IdleTracker>,
    /// Idle jobs let loose, with their CPU usage when last looked at.
    watching: BTreeMap<JobId, Duration>,
    last_watch: Micros,
    suspended: BTreeSet<JobId>,
    /// Cancelled jobs and when they get SIGKILL.
    kill_at: BTreeMap<JobId, Micros>,
    /// Ended jobs whose cgroup could not be removed yet (processes still exiting).
    discard_later: BTreeSet<JobId>,
    /// Processors of each job's partition (skew is measured only when its tasks fit).
    sizes: BTreeMap<JobId, usize>,
    baselines: BTreeMap<JobId, Baseline>,
    /// Each job's full baseline at its last entry: who worked in its slot since ([`Baseline::busy_since`]).
    last_captures: BTreeMap<JobId, Baseline>,
}

fn log(message: impl std::fmt::Display) {
    eprintln!("cosched daemon: {message}");
}

impl<A: Actuator> AgentLoop<A> {
    pub fn new(
        applier: Applier<A>,
        rotation: Rotation,
        idle_after: Option<Micros>,
        stats: Arc<Mutex<Stats>>,
        events: Sender<AgentEvent>,
    ) -> Self {
        let slotted = matches!(applier.mode(), Mode::Gang | Mode::Moderate);
        AgentLoop {
            applier,
            rotation,
            stats,
            events,
            idle: idle_after.filter(|_| slotted).map(IdleTracker::new),
            watching: BTreeMap::new(),
            last_watch: 0,
            suspended: BTreeSet::new(),
            kill_at: BTreeMap::new(),
            discard_later: BTreeSet::new(),
            sizes: BTreeMap::new(),
            baselines: BTreeMap::new(),
            last_captures: BTreeMap::new(),
        }
    }

    /// Runs until `Stop` (or until the daemon drops its sender, which also lets every job loose).
    pub fn run(mut self, inbox: Receiver<AgentMsg>) -> A {
        let realtime = clock::make_realtime(50);
        if let Err(error) = &realtime {
            log(format_args!(
                "no real-time priority for the clock thread ({error}): switches may be late by milliseconds"
            ));
        }
        self.stats.lock().expect("stats").realtime = realtime.is_ok();
        let quantum = self.rotation.quantum;
        let margin = (quantum / 4).min(1_000);
        let mut slot = self.rotation.next_boundary(now_micros());
        loop {
            let deadline = self.rotation.slot_start(slot);
            loop {
                let until = deadline - margin;
                let now = now_micros();
                if now >= until {
                    break;
                }
                match inbox.recv_timeout(Duration::from_micros((until - now) as u64)) {
                    Ok(AgentMsg::Stop { cancel, reply }) => {
                        let _ = reply.send(self.stop(cancel));
                        return self.applier.into_actuator();
                    }
                    Ok(message) => {
                        self.handle(message);
                        self.apply_early();
                    }
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        let _ = self.stop(false);
                        return self.applier.into_actuator();
                    }
                }
            }
            clock::sleep_until(deadline);
            let woke = now_micros();
            self.tick(slot, deadline, woke);
            let next = (slot + 1).max(self.rotation.slot_at(now_micros()) + 1);
            if next > slot + 1 {
                self.stats.lock().expect("stats").missed_slots += (next - slot - 1) as u64;
            }
            slot = next;
        }
    }

    fn handle(&mut self, message: AgentMsg) {
        match message {
            AgentMsg::Admit { job, cpus, reply } => {
                self.forget(job);
                let outcome = self
                    .applier
                    .admit(job, cpus.as_ref())
                    .map_err(|e| e.to_string())
                    .and_then(|()| {
                        let name = job_name(job);
                        let actuator = self.applier.actuator();
                        Ok(Admitted {
                            join_files: actuator.join_files(&name).map_err(|e| e.to_string())?,
                            release: self.applier.release_steps(job).map_err(|e| e.to_string())?,
                        })
                    });
                if let Some(cpus) = &cpus {
                    self.sizes.insert(job, cpus.size() as usize);
                }
                let _ = reply.send(outcome);
            }
            AgentMsg::Publish(generation) => {
                for slice in &generation.plan.slices {
                    for entry in &slice.entries {
                        self.sizes
                            .insert(entry.job, entry.partition.size() as usize);
                    }
                }
                self.applier.publish(generation);
            }
            AgentMsg::Suspend { job, reply } => {
                self.forget(job);
                let outcome = self.applier.suspend(job).map_err(|e| e.to_string());
                if outcome.is_ok() {
                    self.suspended.insert(job);
                }
                let _ = reply.send(outcome);
            }
            AgentMsg::LetLoose { job } => {
                self.forget(job);
                match self.let_loose(job) {
                    Ok(()) => {
                        let usage = self.usage(job).unwrap_or_default();
                        self.watching.insert(job, usage);
                    }
                    Err(error) => log(error),
                }
            }
            AgentMsg::Cancel { job } => {
                self.forget(job);
                if let Err(error) = self.let_loose(job) {
                    log(error);
                }
                if let Ok(pids) = self.applier.actuator().pids(&job_name(job)) {
                    for pid in pids {
                        // SAFETY: kill(2) has no memory-safety preconditions.
                        unsafe { libc::kill(pid, libc::SIGTERM) };
                    }
                }
                self.kill_at.insert(job, now_micros() + CANCEL_GRACE);
            }
            AgentMsg::Discard { job } => {
                self.forget(job);
                self.kill_at.remove(&job);
                self.sizes.remove(&job);
                self.discard(job);
            }
            AgentMsg::Stop { .. } => unreachable!("handled by run"),
        }
    }

    /// Drops what the loop tracks of a job that changes hands (not its cgroup).
    fn forget(&mut self, job: JobId) {
        self.watching.remove(&job);
        self.suspended.remove(&job);
        self.baselines.remove(&job);
        self.last_captures.remove(&job);
        if let Some(tracker) = &mut self.idle {
            tracker.forget(job);
        }
    }

    /// Lets a job run freely: out of the applier's charge, thawed, default weight.
    fn let_loose(&mut self, job: JobId) -> Result<(), String> {
        self.applier.release(job).map_err(|e| e.to_string())?;
        let steps = self.applier.release_steps(job).map_err(|e| e.to_string())?;
        cosched_cgroups::release(&steps).map_err(|e| format!("job {job}: {e}"))
    }

    fn discard(&mut self, job: JobId) {
        // Known again after a restart: creating is idempotent.
        let name = job_name(job);
        let created = self.applier.actuator_mut().create(&name);
        match created
            .map_err(|e| e.to_string())
            .and_then(|()| self.applier.discard(job).map_err(|e| e.to_string()))
        {
            Ok(()) => {
                self.discard_later.remove(&job);
            }
            Err(error) => {
                if self.discard_later.insert(job) {
                    log(format_args!("{error} (will retry)"));
                }
            }
        }
    }

    fn usage(&self, job: JobId) -> Option<Duration> {
        self.applier.actuator().cpu_usage(&job_name(job)).ok()
    }

    fn tick(&mut self, slot: i64, deadline: Micros, woke: Micros) {
        let before: Vec<JobId> = self.applier.running().collect();
        let record = match self.applier.enter_slot(slot) {
            Ok(record) => record,
            Err(error) => {
                log(format_args!("slot {slot}: {error}"));
                return;
            }
        };
        let mut skews = Vec::new();
        if self.applier.mode() == Mode::Gang {
            // A task that sleeps (a launcher waiting for its ranks) never shows: give up soon.
            let patience = Duration::from_micros((self.rotation.quantum / 10).min(5_000) as u64);
            for job in &record.started {
                if let Some(skew) = self.baselines.remove(job).and_then(|b| b.measure(patience)) {
                    skews.push(skew);
                }
            }
        }
        self.baselines.clear();
        {
            let mut stats = self.stats.lock().expect("stats");
            stats
                .lateness
                .record(Duration::from_micros((woke - deadline).max(0) as u64));
            if !record.stopped.is_empty() || !record.started.is_empty() {
                stats.switch.record(record.duration);
            }
            for skew in skews {
                stats.skew.record(skew);
            }
        }
        self.track_idleness(&before, woke);
        self.watch_idle(woke);
        self.enforce_cancels(woke);
        for job in self.discard_later.clone() {
            self.discard(job);
        }
        self.capture_baselines(slot + 1);
    }

    /// Applies a generation published for the slot under way (the daemon does that when no
    /// unfinished job runs in it), so idle processors go to the next jobs before the boundary.
    fn apply_early(&mut self) {
        let now = now_micros();
        let slot = self.rotation.slot_at(now);
        if !self.applier.has_due(slot) {
            return;
        }
        let before: Vec<JobId> = self.applier.running().collect();
        match self.applier.enter_slot(slot) {
            Ok(record) if !record.stopped.is_empty() || !record.started.is_empty() => {
                self.stats
                    .lock()
                    .expect("stats")
                    .switch
                    .record(record.duration);
            }
            Ok(_) => {}
            Err(error) => log(format_args!("slot {slot} (early): {error}")),
        }
        self.track_idleness(&before, now);
        self.capture_baselines(slot + 1);
    }

    fn track_idleness(&mut self, before: &[JobId], now: Micros) {
        if self.idle.is_none() {
            return;
        }
        let usages: BTreeMap<JobId, Duration> = before
            .iter()
            .copied()
            .chain(self.applier.running())
            .filter_map(|job| Some((job, self.usage(job)?)))
            .collect();
        let tracker = self.idle.as_mut().expect("checked");
        for job in before {
            if let Some(&usage) = usages.get(job) {
                if tracker.slot_ended(*job, usage, now) {
                    tracker.forget(*job);
                    let _ = self.events.send(AgentEvent::Idle(*job));
                }
            }
        }
        for job in self.applier.running().collect::<Vec<_>>() {
            if let Some(&usage) = usages.get(&job) {
                tracker.slot_started(job, usage, now);
            }
        }
    }

    fn watch_idle(&mut self, now: Micros) {
        let interval = now - self.last_watch;
        if interval < IDLE_WATCH_PERIOD || self.watching.is_empty() {
            return;
        }
        self.last_watch = now;
        let threshold = Duration::from_micros((interval / 100) as u64);
        for (job, before) in self.watching.clone() {
            let Some(usage) = self.usage(job) else {
                continue;
            };
            if usage.saturating_sub(before) >= threshold {
                self.watching.remove(&job);
                let _ = self.events.send(AgentEvent::Woke(job));
            } else {
                self.watching.insert(job, usage);
            }
        }
    }

    fn enforce_cancels(&mut self, now: Micros) {
        let due: Vec<JobId> = self
            .kill_at
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&job, _)| job)
            .collect();
        for job in due {
            self.kill_at.remove(&job);
            if let Err(error) = self.applier.actuator_mut().kill(&job_name(job)) {
                log(format_args!("job {job}: {error}"));
            }
        }
    }

    /// Run times of the next slot's entrants while they are still frozen.
    fn capture_baselines(&mut self, next_slot: i64) {
        if self.applier.mode() != Mode::Gang {
            return;
        }
        for job in self.applier.entrants(next_slot) {
            let Ok(pids) = self.applier.actuator().pids(&job_name(job)) else {
                continue;
            };
            let mut baseline = Baseline::capture(&pids);
            if let Some(previous) = self.last_captures.insert(job, baseline.clone()) {
                baseline = baseline.busy_since(&previous);
            }
            let size = self.sizes.get(&job).copied().unwrap_or(0);
            if baseline.task_count() > 0 && baseline.task_count() <= size {
                self.baselines.insert(job, baseline);
            }
        }
    }

    fn stop(&mut self, cancel: bool) -> Result<(), String> {
        let mut first_error = None;
        if let Err(error) = self.applier.release_all() {
            first_error.get_or_insert(error.to_string());
        }
        let suspended = std::mem::take(&mut self.suspended);
        for &job in &suspended {
            if let Err(error) = self.applier.actuator_mut().thaw(&job_name(job)) {
                first_error.get_or_insert(error.to_string());
            }
        }
        if cancel {
            // Every job this agent holds: scheduled, suspended, idle, or already cancelled.
            let jobs: Vec<JobId> = self
                .applier
                .jobs()
                .chain(suspended)
                .chain(self.watching.keys().copied())
                .chain(self.kill_at.keys().copied())
                .collect();
            for job in jobs {
                if let Err(error) = self.applier.actuator_mut().kill(&job_name(job)) {
                    first_error.get_or_insert(error.to_string());
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
