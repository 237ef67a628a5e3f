//! A node's agent: the only code that touches the node's processes and cgroups. On the slot
//! clock (real-time priority) it switches at each boundary; between boundaries it carries out
//! the controller's orders in the order sent (publish a generation, start or adopt a job,
//! suspend, cancel, forget an ended one). It launches jobs under their supervisors, measures
//! lateness, switch time and skew, and reports job events (ended, lost, idle, woke).
//!
//! Orders come from a [`PlanSource`] and events go to an [`EventSink`]; nothing is answered,
//! so the same agent runs in the daemon's process (channels) or on its own node.

use crate::awake::Awake;
use crate::boundaries::{BoundaryLog, BOUNDARY_LOG_LIMIT};
use crate::chrony::ClockOffset;
use crate::clock::{self, SlotWork, Tick};
use crate::door::{Door, DOOR_ENV};
use crate::join;
use crate::kick::Kickers;
use crate::lend::{self, BlockWatch, Spent};
use crate::probe::{self, Look, Probe};
use crate::relay::{self, Errand, Relayed};
use crate::skew::{Baseline, MOST_TASKS_PER_CPU};
use crate::stall::{Activity, IoReader, StallTracker, Verdict};
use crate::supervisor::{self, LaunchSpec};
use crate::{
    job_group, AgentError, Applier, IdleTracker, Mode, RecentTimes, Samples, SwitchRecord,
    DISFAVOURED_WEIGHT,
};
use cosched_cgroups::{affinity, procfs, Actuator, CgroupError, Cgroups, Usage};
use cosched_core::{JobId, Micros, Partition, Rotation};
use cosched_os::{fault, now_micros, unix};
use cosched_proto::{
    BoundaryRecord, Command, Ending, Event, EventSink, Generation, JobSkew, Launch, NodeHistograms,
    NodeStatus, Order, PlanSource, ProcessRef, Received, SlotStart, CANCEL_GRACE,
    MAX_REPORTED_STARTS, SPREAD_SAMPLE_US,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::num::NonZeroU64;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How often jobs out of the rotation for idleness are checked for work.
const IDLE_WATCH_PERIOD: Micros = 1_000_000;
/// Samples kept per measure (older ones are dropped in halves): minutes of recent switches,
/// summarised in well under a millisecond for each status report.
const SAMPLES_KEPT: usize = 10_000;
/// The longest report a supervisor sends (an exit status and a note).
const REPORT_LIMIT: usize = 64 << 10;

/// The agent's measurements, reported in its status.
struct Stats {
    lateness: Samples,
    switch: Samples,
    skew: Samples,
    publish: Samples,
    missed_slots: u64,
    realtime: bool,
}

/// Who the node is and how it works.
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// The node's name in generations (its entries are the ones it applies).
    pub node: String,
    /// The CPUs it schedules (reported in its status).
    pub cpus: Partition,
    pub mode: Mode,
    /// A job using no CPU in its own slots this long leaves the rotation (gang, moderate).
    pub idle_after: Option<Micros>,
    /// A running job whose processes have all been off the CPU this long within its slot
    /// gives its processors to the next slices' jobs until the boundary (gang; none: never).
    pub give_away_after: Option<Micros>,
    /// Where supervisors keep their files (`jobs/`, `run/`): root's and writable by nobody
    /// else (the caller checked).
    pub state_dir: PathBuf,
    /// The program that runs `supervise` (this very binary).
    pub supervisor_exe: PathBuf,
    /// Test-only: the agent's clock reads true time plus this (`--clock-offset-us`), so that
    /// what clock error does to a cluster can be shown on one machine.
    pub clock_shift_us: Micros,
    /// Each job may have this many tasks (processes and threads) per processor it has here
    /// (`--tasks-per-cpu`); none: no cap.
    pub tasks_per_cpu: Option<u64>,
    /// The time slice of the processes of the jobs it starts (µs, `--time-slice-us`); none:
    /// the kernel's own.
    pub time_slice_us: Option<u32>,
    /// How often it reports its figures when nothing else made it report (µs): every second
    /// on one machine, once per lease in a cluster (`NodeInfo::status_period_us`).
    pub status_every: Micros,
    /// Whether the clock thread asks for real-time priority (every agent does; the control
    /// plane's benchmark runs a thousand agents in one process on a few CPUs, where a thousand
    /// real-time threads would starve the etcd and controller it measures).
    pub realtime: bool,
}

/// Where in the state directory supervisors keep markers and exit statuses, and listen for a
/// restarted daemon.
const JOBS_DIR: &str = "jobs";
const RUN_DIR: &str = "run";
/// Jobs' host files: root's, which every user may pass through (not list) to read their job's.
pub const HOSTS_DIR: &str = "hosts";
/// The subdirectories the agent's files live in (the daemon makes them, root's alone).
pub const STATE_SUBDIRS: [&str; 3] = [JOBS_DIR, RUN_DIR, HOSTS_DIR];

impl NodeSettings {
    fn file(&self, dir: &str, job: JobId, suffix: &str) -> PathBuf {
        self.state_dir
            .join(dir)
            .join(format!("{}{suffix}", job_group(job)))
    }

    pub fn exit_file(&self, job: JobId) -> PathBuf {
        self.file(JOBS_DIR, job, ".exit")
    }

    pub fn started_file(&self, job: JobId) -> PathBuf {
        self.file(JOBS_DIR, job, ".started")
    }

    pub fn socket_file(&self, job: JobId) -> PathBuf {
        self.file(RUN_DIR, job, ".sock")
    }

    /// The job's host file (COSCHED_HOSTFILE).
    pub fn hosts_file(&self, job: JobId) -> PathBuf {
        self.file(HOSTS_DIR, job, ".hosts")
    }

    /// The supervisor's files of a process added to a job (beside the job's own).
    fn process_files(&self, job: JobId, process: &ProcessRef) -> [PathBuf; 3] {
        [
            self.file(JOBS_DIR, job, &format!(".{process}.exit")),
            self.file(JOBS_DIR, job, &format!(".{process}.started")),
            self.file(RUN_DIR, job, &format!(".{process}.sock")),
        ]
    }
}

pub struct NodeAgent<A: Actuator> {
    settings: NodeSettings,
    applier: Applier<A>,
    /// The slot clock in force: none until the first generation brings it (a generation
    /// with another one restarts the clock loop).
    rotation: Option<Rotation>,
    stats: Stats,
    last_status: Micros,
    /// How long the latest orders took to carry out on the clock thread.
    order_times: RecentTimes,
    events: Arc<dyn EventSink>,
    idle: Option<IdleTracker>,
    /// The slot's running jobs, watched for a blocked gang when `lending`, and its outsiders
    /// (implicit jobs beside a switched one) watched for their budget in any mode that slots.
    blocked: Option<BlockWatch>,
    /// Blocked gangs give their slots away (`give_away_after`).
    lending: bool,
    /// The unswitched jobs that are outsiders in the slot under way (held ones too).
    outsiders: BTreeSet<JobId>,
    /// With `blocked`: each running, loose or outsider job's CPU usage as the slot under way
    /// began (what it used of the slot decides whether it stays loose, or is held).
    slot_usage: BTreeMap<JobId, Duration>,
    stalls: Option<StallTracker>,
    /// Reads the I/O counters stall tracking needs off the clock thread; started at first use.
    stall_io: Option<IoReader>,
    /// Auto jobs whose behaviour is being measured (until the controller chooses a mode).
    probes: BTreeMap<JobId, Probe>,
    /// Idle jobs let loose, with their CPU usage when last looked at.
    watching: BTreeMap<JobId, Duration>,
    last_watch: Micros,
    suspended: BTreeSet<JobId>,
    /// Cancelled jobs and when they get SIGKILL.
    kill_at: BTreeMap<JobId, Micros>,
    /// Ended jobs whose cgroup could not be removed yet (processes still exiting).
    discard_later: BTreeSet<JobId>,
    /// Processors of each job's partition here (skew is measured only when its tasks fit).
    sizes: BTreeMap<JobId, usize>,
    baselines: BTreeMap<JobId, Baseline>,
    /// Each job's full baseline at its last entry: who worked in its slot since ([`Baseline::busy_since`]).
    last_captures: BTreeMap<JobId, Baseline>,
    /// Entrants whose baseline waits for their freeze's confirmation (`capture_baselines`).
    baselines_put_off: BTreeSet<JobId>,
    /// The supervisors watched, and their connections.
    watchers: Watchers,
    /// What the orders carried out left to do off the clock ([`relay`]): supervisors to
    /// start. The receiving end goes to the relay as the agent runs.
    errands: Sender<Errand>,
    errands_queued: Option<Receiver<Errand>>,
    /// Supervisors of gang jobs outside their slot whose start order came outside the start
    /// window (`start_window`): a start (the fork, the supervisor's exec, the cgroup joins:
    /// a millisecond or two of a processor, spread over [`START_SPAN`]) would take a
    /// processor from a rank thawed meanwhile. They start at the next window, or at their
    /// job's slot if that comes first (always, when slots are too short for a window).
    launches: BTreeMap<JobId, Errand>,
    /// How long after a boundary no such start begins ([`START_CLEAR`]).
    start_clear: Micros,
    /// Starts those off the clock (a thread made at the first).
    starter: Option<Sender<Errand>>,
    /// Keeps idle processors polling while there are jobs to switch (a real-time clock's).
    awake: Awake,
    /// Make the kernel choose again where a thawed rank waits (`measure_skews`).
    kickers: Kickers,
    /// The CPUs of each job placed here (its processes added later go there too).
    placed: BTreeMap<JobId, Partition>,
    /// Jobs whose first node this is (launched or adopted here): their figures go with their
    /// ending; other jobs' parts here are reported as their end removes them (`Event::Used`).
    first_here: BTreeSet<JobId>,
    /// Where the jobs' processes ask for processes on other nodes (a cluster's agents).
    door: Option<Arc<Door>>,
    /// Set by `Stop`: no more switching; what the stop gave.
    stopped: Option<Result<(), String>>,
    /// The source closed: the agent ends.
    closed: bool,
    /// The control plane is lost: jobs run unscheduled, no switching.
    adrift: bool,
    boundaries: BoundaryLog,
    /// Jobs started at boundaries since the last status report.
    starts: VecDeque<SlotStart>,
    clock_offset: ClockOffset,
}

const LOG: cosched_os::Log = cosched_os::Log::new("agent");

/// Without `give_away_after`, the window per processor an implicit job may use of a switched
/// job's slot (a quarter of the slot at most): an I/O-bound job's wake-ups fit in it.
const OUTSIDER_WINDOW: Micros = 5_000;

/// How long after a boundary no supervisor of a job outside its slot starts: the thawed
/// ranks' first moments, when one that waits for a processor is the gang's skew.
const START_CLEAR: Micros = 3_000;

/// How long a supervisor's start lasts, from the fork to its job's process stopped in the
/// frozen group (the cgroup joins wait for RCU grace periods): a start out of its job's slot
/// begins only this long before a boundary or earlier. About 17 ms on the 2-vCPU VMs (a short
/// job's slot lasted 19-20 ms when its start was in it, 2-3 ms when it was not:
/// `cosched-bench churn`'s `short` columns).
const START_SPAN: Micros = 25_000;

/// How long a closing agent retries removing ended jobs' cgroups.
const DISCARD_SETTLE: Micros = 3_000_000;

impl<A: Actuator> NodeAgent<A> {
    pub fn new(settings: NodeSettings, actuator: A, events: Arc<dyn EventSink>) -> Self {
        // Any mode but local may switch some jobs (a job may have its own mode).
        let slotted = settings.mode != Mode::Local;
        if settings.give_away_after.is_some() && !slotted {
            LOG.warn("giving blocked gangs' slots away does nothing in local mode: ignored");
        }
        let (errands, errands_queued) = mpsc::channel();
        NodeAgent {
            applier: Applier::new(actuator, settings.mode),
            rotation: None,
            stats: Stats {
                lateness: Samples::new(SAMPLES_KEPT),
                switch: Samples::new(SAMPLES_KEPT),
                skew: Samples::new(SAMPLES_KEPT),
                publish: Samples::new(SAMPLES_KEPT),
                missed_slots: 0,
                realtime: false,
            },
            last_status: 0,
            order_times: RecentTimes::default(),
            idle: settings
                .idle_after
                .filter(|_| slotted)
                .map(IdleTracker::new),
            blocked: slotted
                .then(|| BlockWatch::new(settings.give_away_after.unwrap_or(OUTSIDER_WINDOW))),
            lending: slotted && settings.give_away_after.is_some(),
            outsiders: BTreeSet::new(),
            stalls: None,
            stall_io: None,
            probes: BTreeMap::new(),
            slot_usage: BTreeMap::new(),
            events: Arc::clone(&events),
            watching: BTreeMap::new(),
            last_watch: 0,
            suspended: BTreeSet::new(),
            kill_at: BTreeMap::new(),
            discard_later: BTreeSet::new(),
            sizes: BTreeMap::new(),
            baselines: BTreeMap::new(),
            last_captures: BTreeMap::new(),
            baselines_put_off: BTreeSet::new(),
            watchers: Watchers {
                events,
                supervisors: Arc::default(),
            },
            errands,
            errands_queued: Some(errands_queued),
            launches: BTreeMap::new(),
            start_clear: START_CLEAR,
            starter: None,
            awake: Awake::none(),
            kickers: Kickers::default(),
            placed: BTreeMap::new(),
            first_here: BTreeSet::new(),
            door: None,
            stopped: None,
            closed: false,
            adrift: false,
            boundaries: BoundaryLog::new(&settings.state_dir, BOUNDARY_LOG_LIMIT),
            starts: VecDeque::new(),
            clock_offset: ClockOffset::watch(),
            settings,
        }
    }

    /// Reports jobs that did nothing in `after` of their own slots (gang and moderate jobs):
    /// see [`StallTracker`].
    pub fn with_stall_after(mut self, after: Option<Micros>) -> Self {
        let slotted = self.settings.mode != Mode::Local;
        self.stalls = after.filter(|_| slotted).map(StallTracker::new);
        self
    }

    /// How long after a boundary a supervisor of a job outside its slot waits to start
    /// (default [`START_CLEAR`]; tests widen it to make the wait certain).
    pub fn with_start_clear(mut self, clear: Micros) -> Self {
        self.start_clear = clear;
        self
    }

    /// Opens the jobs' way to add processes on other nodes (`cosched launch-remote`).
    pub fn with_door(mut self, door: Arc<Door>) -> Self {
        self.door = Some(door);
        self
    }

    /// Runs until the source closes. Every job is let loose by then (by `Stop`, or at the
    /// close itself). Returns the actuator and what the stop gave.
    pub fn run(mut self, source: impl PlanSource + Send + 'static) -> (A, Result<(), String>) {
        if self.settings.realtime {
            let realtime =
                cosched_os::realtime::make_realtime(cosched_os::realtime::CLOCK_PRIORITY);
            if let Err(error) = &realtime {
                LOG.warn(format_args!(
                    "no real-time priority for the clock thread ({error}): switches may be late by milliseconds"
                ));
            }
            self.stats.realtime = realtime.is_ok();
            self.awake = Awake::open();
            let cpus = self.settings.cpus.processors().map(|cpu| cpu as usize);
            self.kickers = Kickers::start(cpus);
        }
        self.report_status(now_micros());
        // What in an order may wait on other processes is done off the clock: before it takes
        // the order, or as an errand after.
        let errands = self
            .errands_queued
            .take()
            .unwrap_or_else(|| mpsc::channel().1);
        let mut source = relay::relay(
            source,
            self.applier.actuator().maker(),
            errands,
            self.stats.realtime,
            self.settings.clock_shift_us,
        );
        while !self.closed {
            match self.rotation {
                Some(rotation) => {
                    // A generation for the slot under way takes effect now, not a slot later.
                    if self.switching() {
                        self.apply_early();
                    }
                    let margin = (rotation.quantum / 4).min(1_000);
                    let mut on_clock = OnClock {
                        agent: &mut self,
                        source: &mut source,
                        rotation,
                    };
                    clock::drive(rotation, margin, &mut on_clock);
                }
                None => self.await_rotation(&mut source),
            }
        }
        self.report_status(now_micros());
        let stopped = self.stopped.take().unwrap_or(Ok(()));
        (self.applier.into_actuator(), stopped)
    }

    /// Before any generation there is no clock to keep: orders are carried out as they come.
    fn await_rotation(&mut self, source: &mut Relayed) {
        while self.rotation.is_none() && !self.closed {
            match source.next_order(now_micros() + self.settings.status_every) {
                Received::Order(order) => {
                    self.handle(*order, source.arrived());
                    source.carried_out();
                }
                Received::Timeout => self.report_status(now_micros()),
                Received::Closed => self.close(),
                Received::Adrift => self.go_adrift(),
                Received::Back => self.come_back(),
            }
        }
    }

    /// Whether the agent follows the plan (not stopped, not cut off from the control plane).
    fn switching(&self) -> bool {
        self.stopped.is_none() && !self.adrift
    }

    fn go_adrift(&mut self) {
        LOG.warn(
            "lost the control plane past the deadline: every job runs unscheduled until it is back",
        );
        self.adrift = true;
        if let Err(error) = self.applier.release_all() {
            LOG.error(format_args!("letting jobs loose: {error}"));
        }
        self.start_due(false);
        self.report_status(now_micros());
    }

    fn come_back(&mut self) {
        LOG.info("the control plane is back: scheduling from the next boundary");
        self.adrift = false;
        self.report_status(now_micros());
    }

    /// What every boundary does, switching or not: cancels, cgroup removals. (The status
    /// waits for this node's moment of the slot: `next_status`.)
    fn quiet_tick(&mut self, now: Micros) {
        let switching_jobs = self.switching() && self.applier.jobs().next().is_some();
        self.awake.hold(switching_jobs);
        self.probe_auto_jobs(now);
        self.enforce_cancels(now);
        self.retry_discards();
    }

    /// When the periodic status is due: a period after the last one, at this node's moment
    /// of the slot when slots are at most half the period (so a report comes at most one and
    /// a half periods after the last: a controller gives up on a node after three).
    fn next_status(&self) -> Micros {
        let due = self.last_status + self.settings.status_every;
        match self.rotation {
            Some(rotation) if rotation.quantum <= self.settings.status_every / 2 => at_offset(
                due,
                status_offset(&self.settings.node, rotation.quantum),
                rotation,
            ),
            _ => due,
        }
    }

    /// The controller let go: every job is let loose (unless a stop did it) and the agent ends,
    /// leaving no cgroup of an ended job behind.
    fn close(&mut self) {
        self.drop_launches();
        if self.stopped.is_none() {
            let outcome = self.stop(false);
            self.stopped = Some(outcome);
        }
        self.settle_discards();
        self.closed = true;
    }

    /// Retries the cgroup removals still due, for a bounded time: a job killed just before
    /// the stop keeps its cgroup busy until its last process has exited, and nothing retries
    /// once the agent has ended.
    fn settle_discards(&mut self) {
        let deadline = now_micros() + DISCARD_SETTLE;
        while !self.discard_later.is_empty() && now_micros() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            self.retry_discards();
        }
        for job in &self.discard_later {
            LOG.warn(format_args!(
                "the cgroups of ended job {job} are left behind: still busy at the stop"
            ));
        }
    }

    /// Sends the node's figures to the controller.
    fn report_status(&mut self, now: Micros) {
        self.last_status = now;
        let stats = &self.stats;
        let status = NodeStatus {
            node: self.settings.node.clone(),
            cpus: self.settings.cpus.clone(),
            mode: self.settings.mode,
            actuator: self.applier.actuator().describe(),
            realtime: stats.realtime,
            generation: self.applier.generation(),
            lateness_us: stats.lateness.summary(),
            switch_us: stats.switch.summary(),
            skew_us: stats.skew.summary(),
            publish_us: stats.publish.summary(),
            missed_slots: stats.missed_slots,
            clock_offset_us: self.clock_offset.get(),
            clock_shift_us: self.settings.clock_shift_us,
            sent_us: now,
            scheduling: self.switching(),
            histograms: NodeHistograms {
                lateness: stats.lateness.histogram(),
                switch: stats.switch.histogram(),
                skew: stats.skew.histogram(),
            },
            starts: self.starts.drain(..).collect(),
        };
        self.events.report(Event::Status {
            status: Box::new(status),
        });
    }

    /// Carries `order`, which came to the relay at `arrived`, out; the supervisors it lets
    /// start are the relay's errands, or, after a generation, which the relay does not wait
    /// for, the starter's.
    fn handle(&mut self, order: Order, arrived: Micros) {
        let awaited = relay::awaited(&order);
        self.carry_out(order, arrived);
        self.start_due(awaited);
    }

    fn carry_out(&mut self, order: Order, arrived: Micros) {
        let Order { command, stdio } = order;
        match command {
            Command::Publish { generation } => {
                if let Err(error) = generation.check() {
                    LOG.error(error);
                    return;
                }
                if generation.published_us > 0 {
                    let took = (arrived - generation.published_us).max(0);
                    self.stats
                        .publish
                        .record(Duration::from_micros(took as u64));
                }
                let rotation = slot_clock(&generation, self.settings.clock_shift_us);
                if self.rotation.is_some_and(|r| r != rotation) {
                    LOG.info(format_args!(
                        "generation {}: a new slot clock (quantum {} µs from {})",
                        generation.number, rotation.quantum, rotation.epoch
                    ));
                }
                self.rotation = Some(rotation);
                let mine = generation.for_node(&self.settings.node);
                for slice in &mine.plan.slices {
                    for entry in &slice.entries {
                        self.sizes
                            .insert(entry.job, entry.partition.size() as usize);
                    }
                }
                self.applier.publish(mine);
            }
            Command::Start {
                job,
                cpus,
                memory,
                launch,
                mode,
            } => {
                self.forget(job);
                let started = self
                    .admit(job, &cpus, mode)
                    .and_then(|()| self.limit_memory(job, memory))
                    .and_then(|()| match launch {
                        Some(launch) => self.launch(job, &cpus, launch, stdio),
                        None => Ok(()),
                    });
                if let Err(why) = started {
                    // The controller logs it as it records the job lost.
                    self.events.report(Event::Lost { job, why });
                }
            }
            Command::Adopt { job, suspended } => self.adopt(job, suspended),
            Command::Suspend { job } => {
                self.forget(job);
                match self.applier.suspend(job) {
                    Ok(()) => {
                        self.suspended.insert(job);
                    }
                    Err(error) => self.trouble(job, error),
                }
            }
            Command::LetLoose { job } => {
                self.forget(job);
                match self.let_loose(job) {
                    Ok(()) => {
                        let usage = self.usage(job).unwrap_or_default();
                        self.watching.insert(job, usage);
                    }
                    Err(error) => self.trouble(job, error),
                }
            }
            Command::Cancel { job } => {
                self.end_unstarted(job, "cancelled before it started");
                self.forget(job);
                if let Err(error) = self.let_loose(job) {
                    self.trouble(job, error);
                }
                // Its grace runs at the least weight, as a moderate job's outside its slot: on
                // its own processors in its own slots (the controller keeps its place), barely
                // in others'. At full weight, a job ignoring SIGTERM computed beside the slot's
                // gang in every slot. (No weight controller: nothing to lower.)
                let _ = self
                    .applier
                    .actuator_mut()
                    .set_weight(&job_group(job), DISFAVOURED_WEIGHT);
                // A job of no process (or none left) has nothing to be told.
                let _ = self.applier.actuator_mut().terminate(&job_group(job));
                // A command not exec'd yet may not have joined the group listed: its
                // supervisor kills it before it runs (no supervisor here: nothing to say).
                self.tell_supervisor(job, supervisor::CANCEL, false);
                self.kill_at.insert(job, now_micros() + CANCEL_GRACE);
            }
            Command::Ended { job, stored } => {
                self.launches.remove(&job);
                self.forget(job);
                self.kill_at.remove(&job);
                self.sizes.remove(&job);
                let first = self.first_here.remove(&job);
                if self.placed.remove(&job).is_some() && !first {
                    self.report_used(job);
                }
                if let Some(door) = &self.door {
                    door.forget(job);
                }
                self.discard(job);
                if stored {
                    self.confirm_stored(job);
                }
            }
            Command::Stored { job } => self.confirm_stored(job),
            Command::SetMode { job, mode } => {
                self.probes.remove(&job);
                if let Err(error) = self.applier.set_mode(job, mode) {
                    self.trouble(job, error);
                }
            }
            Command::Stop { cancel } => {
                self.drop_launches();
                let outcome = self.stop(cancel);
                self.stopped = Some(outcome);
            }
            Command::AddProcess {
                job,
                process,
                launch,
            } => {
                if let Err(why) = self.add_process(job, &process, launch) {
                    let ending = Ending::refused(why);
                    self.events.report(Event::ProcessEnded {
                        job,
                        process,
                        ending,
                    });
                }
            }
            Command::ProcessEnded {
                process, ending, ..
            } => {
                if let Some(door) = &self.door {
                    door.answer(process.request, &ending);
                }
            }
            Command::Join {
                job,
                pid,
                uid,
                asker,
                request,
            } => {
                let refusal = self.join(job, pid, uid, asker).err();
                self.events.report(Event::Joined {
                    job,
                    pid,
                    request,
                    refusal,
                });
            }
            Command::Finish { job } => {
                if self.end_unstarted(job, "ended before it started") {
                    return;
                }
                // Out of the rotation and never watched for work: the job ends once its
                // processes have left, and they are not killed (`discard` would).
                self.forget(job);
                if let Err(error) = self.let_loose(job) {
                    self.trouble(job, error);
                }
                self.tell_supervisor(job, supervisor::FINISH, true);
            }
        }
    }

    /// Writes `word` to the supervisor of `job`, after the starts handed to the starter's
    /// thread (one released there just before may not be connected yet); reports it as the
    /// job's trouble if `needed` and no supervisor here took it.
    fn tell_supervisor(&self, job: JobId, word: u8, needed: bool) {
        let watchers = self.watchers.clone();
        self.after_starts(Box::new(move || {
            let told = watchers
                .connected()
                .get(&job)
                .map(|stream| (&*stream).write_all(&[word]));
            if needed && !matches!(told, Some(Ok(()))) {
                watchers.events.report(Event::Trouble {
                    job,
                    what: "cannot reach its supervisor to end it".into(),
                });
            }
        }));
    }

    /// Moves process `pid` (started elsewhere) into a registered job's cgroup, at `asker`'s
    /// request: only a process of the job's user (root's jobs: any but init and this agent),
    /// from the asker's own cgroup (root asking: any), in no other job (see [`join`]).
    fn join(
        &mut self,
        job: JobId,
        pid: libc::pid_t,
        uid: u32,
        asker: Option<libc::pid_t>,
    ) -> Result<(), String> {
        if !self.placed.contains_key(&job) {
            return Err(format!(
                "job {job} is not running on node {}",
                self.settings.node
            ));
        }
        if pid <= 1 || pid == std::process::id() as libc::pid_t {
            return Err("init and the agent itself may not join a job".into());
        }
        join::check_owner(pid, uid)?;
        let born = join::start_time(pid)?;
        let pidfd = unix::pidfd_open(pid).map_err(|e| e.to_string())?;
        for other in self.placed.keys() {
            let pids = self.applier.actuator().pids(&job_group(*other));
            if pids.is_ok_and(|pids| pids.contains(&pid)) {
                return match *other == job {
                    true => Ok(()),
                    false => Err(format!("it belongs to job {other}")),
                };
            }
        }
        if let Some(asker) = asker {
            join::check_same_cgroup(pid, asker)?;
        }
        // The kernel holds forks to the job's task cap, not moves: a process of more tasks
        // than the job has room for would take it past the cap (threads it starts while the
        // move is under way still can, by as many as it makes meanwhile).
        let room = self
            .applier
            .actuator()
            .task_room(&job_group(job))
            .map_err(|e| e.to_string())?;
        let tasks = procfs::tasks(pid).len() as u64;
        if let Some(room) = room.filter(|&room| tasks > room) {
            return Err(format!(
                "it has {tasks} tasks and job {job} has room for {room} more (its cap is \
                 --tasks-per-cpu times its processors)"
            ));
        }
        let files = self.join_files(job)?;
        join::move_held(pid, &pidfd, born, uid, &files, move || {
            fault::delay("joining", job)
        })?;
        // Joining a job stopped by signals does not stop the process: it would run in
        // other jobs' slots until its job's next turn. (One that has exited needs no stop.)
        if !self.applier.stops_joiners() && self.applier.waits_for_slot(job) {
            let _ = unix::pidfd_send_signal(&pidfd, libc::SIGSTOP);
        }
        Ok(())
    }

    /// An order about `job` failed: the controller hears (and logs) it.
    fn trouble(&self, job: JobId, what: impl std::fmt::Display) {
        self.events.report(Event::Trouble {
            job,
            what: what.to_string(),
        });
    }

    /// Drops what the loop tracks of a job that changes hands (not its cgroup). A supervisor
    /// still held back by a boundary starts now, so what follows finds it started.
    fn forget(&mut self, job: JobId) {
        if let Some(launch) = self.launches.remove(&job) {
            self.errand(launch);
        }
        self.watching.remove(&job);
        self.suspended.remove(&job);
        self.baselines.remove(&job);
        self.last_captures.remove(&job);
        self.baselines_put_off.remove(&job);
        if let Some(tracker) = &mut self.idle {
            tracker.forget(job);
        }
        if let Some(watch) = &mut self.blocked {
            watch.drop_job(job);
        }
        self.outsiders.remove(&job);
        if let Some(tracker) = &mut self.stalls {
            tracker.forget(job);
        }
        self.probes.remove(&job);
    }

    /// An auto job is watched from its start here until its behaviour is reported.
    fn probe_if_auto(&mut self, job: JobId) {
        if self.applier.mode_of(job) == Mode::Auto {
            let width = self.sizes.get(&job).copied().unwrap_or(1);
            self.probes.entry(job).or_insert_with(|| Probe::new(width));
        }
    }

    /// Looks at the auto jobs due a look, the longest unlooked first; reports each whose
    /// window is full (until its mode is chosen, or its last window). On the clock thread,
    /// just past a boundary: each read may take a quarter of the slot (5 ms at most), all of
    /// a boundary's half; a job whose tasks cannot be read in its share (hundreds of threads)
    /// is not measured at all, and stays unswitched.
    fn probe_auto_jobs(&mut self, now: Micros) {
        let mut due: Vec<(Micros, JobId)> = self
            .probes
            .iter()
            .filter(|(_, probe)| probe.due(now))
            .map(|(&job, probe)| (probe.last_look(), job))
            .collect();
        due.sort_unstable();
        let quantum = self.rotation.map_or(probe::PROBE_PERIOD, |r| r.quantum);
        let share = (quantum / 4).min(5_000);
        let began = now_micros();
        for (_, job) in due {
            let start = now_micros();
            if start - began >= 2 * share {
                break;
            }
            let group = job_group(job);
            let actuator = self.applier.actuator();
            let Ok(pids) = actuator.pids(&group) else {
                continue;
            };
            let io_pressure = actuator
                .usage_files(&group)
                .ok()
                .and_then(|files| files.cpu_v2)
                .map(|group| probe::io_pressure_of(&group));
            let Some(look) = Look::read(&pids, io_pressure.as_deref(), start, start + share) else {
                self.probes.remove(&job);
                LOG.warn(format_args!(
                    "job {job}: too many tasks to measure within {share} µs: it stays unswitched (auto)"
                ));
                continue;
            };
            let Some(probe) = self.probes.get_mut(&job) else {
                continue;
            };
            if let Some(behaviour) = probe.add(look) {
                if probe.finished() {
                    self.probes.remove(&job);
                }
                self.events.report(Event::Behaviour {
                    job,
                    node: self.settings.node.clone(),
                    behaviour,
                });
            }
        }
    }

    fn admit(&mut self, job: JobId, cpus: &Partition, mode: Option<Mode>) -> Result<(), String> {
        self.applier
            .admit(job, Some(cpus), mode)
            .map_err(|e| e.to_string())?;
        if let Some(per_cpu) = self.settings.tasks_per_cpu {
            // Before any process starts: a job of thousands of tasks makes its every switch
            // long. A machine with no pids controller runs jobs uncapped (`daemon --check`).
            let most = per_cpu.saturating_mul(u64::from(cpus.size()));
            match self
                .applier
                .actuator_mut()
                .limit_tasks(&job_group(job), most)
            {
                Ok(()) | Err(CgroupError::Unsupported(_)) => {}
                Err(error) => return Err(error.to_string()),
            }
        }
        self.sizes.insert(job, cpus.size() as usize);
        self.placed.insert(job, cpus.clone());
        self.probe_if_auto(job);
        if let Some(door) = &self.door {
            // The hierarchy a process joins last: one listed there has joined them all.
            let files = self.join_files(job)?;
            if let Some(procs) = files.last() {
                door.admit(job, procs.clone());
            }
        }
        Ok(())
    }

    fn join_files(&self, job: JobId) -> Result<Vec<PathBuf>, String> {
        self.applier
            .actuator()
            .join_files(&job_group(job))
            .map_err(|e| e.to_string())
    }

    /// What the node adds to the environment of a job's processes: who they are, where they
    /// run, how they wait in implicit mode, and (in a cluster) how an MPI launcher starts its
    /// remote daemons through this agent. Values a user set are kept where they only tune.
    fn node_env(&self, job: JobId, cpus: &Partition, env: &mut Vec<(String, String)>) {
        let mut set_default = |key: &str, value: &str| {
            if !env.iter().any(|(k, _)| k == key) {
                env.push((key.to_string(), value.to_string()));
            }
        };
        if matches!(self.applier.mode_of(job), Mode::Implicit | Mode::Auto) {
            // Spin briefly, then yield or block (Arpaci-Dusseau; Solsona): an auto job's
            // waits show as sleep only so (`probe`).
            set_default("OMPI_MCA_mpi_yield_when_idle", "1");
            set_default("GOMP_SPINCOUNT", "10000");
            set_default("COSCHED_WAIT", "spinblock");
        }
        if self.door.is_some() {
            let exe = &self.settings.supervisor_exe;
            set_default(
                "OMPI_MCA_plm_rsh_agent",
                &format!("{} launch-remote", exe.display()),
            );
            // Hydra's ssh launcher passes ssh's -x; its rsh launcher passes the host first.
            let hydra = crate::door::launch_remote_link(exe);
            if hydra.exists() {
                set_default("HYDRA_LAUNCHER", "rsh");
                set_default("HYDRA_LAUNCHER_EXEC", &hydra.display().to_string());
            }
        }
        let mut ours = vec![
            ("COSCHED_JOB_ID", job.to_string()),
            ("COSCHED_CPUS", cpus.to_string()),
            ("COSCHED_NODE", self.settings.node.clone()),
        ];
        if let Some(door) = &self.door {
            ours.push((DOOR_ENV, door.path().display().to_string()));
        }
        env.retain(|(k, _)| !ours.iter().any(|(o, _)| o == k));
        env.extend(ours.into_iter().map(|(k, v)| (k.to_string(), v)));
    }

    /// A node's name as the job's processes know it: on one machine (no door: the daemon's
    /// own agent) the machine's host name, as Slurm's node lists name hosts; else the name.
    fn host_name(&self, node: &str) -> String {
        if self.door.is_none() && node == self.settings.node {
            if let Ok(host) = cosched_os::host_name() {
                return host;
            }
        }
        node.to_string()
    }

    /// Tells the job its tasks and nodes as Slurm's SLURM_NTASKS and SLURM_JOB_NODELIST do,
    /// and writes its host file (one `HOST slots=N` line a node, Open MPI's `--hostfile`
    /// format). The file is made by root in root's state directory (no user can plant a link
    /// or file there), readable by all (it names hosts only), removed once the job's end is
    /// stored.
    fn tell_hosts(&self, job: JobId, launch: &mut Launch) -> Result<(), String> {
        if launch.hosts.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = launch
            .hosts
            .iter()
            .map(|h| self.host_name(&h.node))
            .collect();
        let lines: String = launch
            .hosts
            .iter()
            .zip(&names)
            .map(|(host, name)| {
                let reached = host.address.as_deref().unwrap_or(name);
                format!("{reached} slots={}\n", host.slots)
            })
            .collect();
        let path = self.settings.hosts_file(job);
        let _ = std::fs::remove_file(&path);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|mut file| file.write_all(lines.as_bytes()));
        written.map_err(|e| format!("writing the job's host file {}: {e}", path.display()))?;
        let tasks: u32 = launch.hosts.iter().map(|h| h.slots).sum();
        let ours = [
            ("COSCHED_NTASKS", tasks.to_string()),
            ("COSCHED_NODELIST", names.join(",")),
            ("COSCHED_HOSTFILE", path.display().to_string()),
        ];
        launch
            .env
            .retain(|(k, _)| !ours.iter().any(|(o, _)| o == k));
        launch
            .env
            .extend(ours.into_iter().map(|(k, v)| (k.to_string(), v)));
        Ok(())
    }

    /// Starts a process of a job placed here, asked for by a process of the job on another
    /// node: in the job's cgroup, as the job's user, under a supervisor that lets the job
    /// loose if this agent dies. Its output goes to the job's output file on this node.
    fn add_process(
        &mut self,
        job: JobId,
        process: &ProcessRef,
        launch: Launch,
    ) -> Result<(), String> {
        let cpus = self
            .placed
            .get(&job)
            .cloned()
            .ok_or_else(|| format!("job {job} is not placed on node {}", self.settings.node))?;
        let files = self.settings.process_files(job, process);
        let mut spec = self.spec(job, &cpus, launch, files)?;
        let stdio = self.output_to_file(&mut spec)?;
        let exe = self.settings.supervisor_exe.clone();
        let events = Arc::clone(&self.events);
        let process = process.clone();
        self.errand(Box::new(move || {
            if let Err(why) = start_process(&exe, spec, stdio, &process, &events) {
                let ending = Ending::refused(why);
                events.report(Event::ProcessEnded {
                    job,
                    process,
                    ending,
                });
            }
        }));
        Ok(())
    }

    /// A supervisor's spec: the command with the node's environment, the job's cgroup and
    /// release steps, and the supervisor's files (exit status, started marker, socket).
    fn spec(
        &self,
        job: JobId,
        cpus: &Partition,
        mut launch: Launch,
        [exit_file, started_file, socket]: [PathBuf; 3],
    ) -> Result<LaunchSpec, String> {
        self.node_env(job, cpus, &mut launch.env);
        self.tell_hosts(job, &mut launch)?;
        Ok(LaunchSpec {
            job,
            launch,
            join_files: self.join_files(job)?,
            release: self.applier.release_steps(job).map_err(|e| e.to_string())?,
            exit_file,
            started_file,
            socket,
            output_file: None,
            error_file: None,
            usage: self
                .applier
                .actuator()
                .usage_files(&job_group(job))
                .map_err(|e| e.to_string())?,
            time_slice_us: self.settings.time_slice_us,
        })
    }

    /// Holds the job's cgroup here to the memory it may use on this node, before any process
    /// of it starts or joins here.
    fn limit_memory(&mut self, job: JobId, memory: Option<NonZeroU64>) -> Result<(), String> {
        let Some(bytes) = memory else {
            return Ok(());
        };
        self.applier
            .actuator_mut()
            .limit_memory(&job_group(job), bytes.get())
            .map_err(|error| {
                format!(
                    "node {} cannot hold job {job} to {bytes} bytes of memory: {error}",
                    self.settings.node
                )
            })
    }

    /// Starts the job's supervisor (the controller stored the intent before ordering it).
    fn launch(
        &mut self,
        job: JobId,
        cpus: &Partition,
        launch: Launch,
        stdio: Option<[OwnedFd; 3]>,
    ) -> Result<(), String> {
        let files = [
            self.settings.exit_file(job),
            self.settings.started_file(job),
            self.settings.socket_file(job),
        ];
        let mut spec = self.spec(job, cpus, launch, files)?;
        let stdio = match stdio {
            Some(stdio) => stdio,
            None => self.output_to_file(&mut spec)?,
        };
        self.first_here.insert(job);
        let exe = self.settings.supervisor_exe.clone();
        let watchers = self.watchers.clone();
        let exit_file = self.settings.exit_file(job);
        let affinity = (self.applier.mode_of(job) != Mode::Local).then(|| affinity::mask_of(cpus));
        // A fork waits for the exec, and the new process for a processor (busy jobs may hold
        // them all for milliseconds): off the clock, clear of the boundaries (`start_due`).
        let launch: Errand = Box::new(move || {
            match spawn_supervisor(&exe, &spec, stdio, affinity) {
                Ok((child, stream)) => {
                    fault::point("spawned", job);
                    watchers.watch(job, stream, Some(child), exit_file);
                }
                // The controller logs it as it records the job lost.
                Err(why) => watchers.events.report(Event::Lost { job, why }),
            }
        });
        self.launches.insert(job, launch);
        Ok(())
    }

    /// Starts the supervisors that may start now: in the start window, or whose jobs may
    /// run (their slot, or the agent stopped switching). `after_order`, by the orders' thread
    /// once the order is carried out (before it takes the next); else by the starter's, at
    /// once. A job outside its slot starts there too, its processes frozen as they join: its
    /// slot is not spent on its start, nor another's thaw.
    fn start_due(&mut self, after_order: bool) {
        // Called after every order and wake of the clock thread: most find nothing held.
        if self.launches.is_empty() {
            return;
        }
        let now = now_micros();
        let clear = self.start_window(now) <= now;
        let held = |job: &JobId| !clear && self.switching() && self.applier.waits_for_slot(*job);
        let due: Vec<JobId> = self
            .launches
            .keys()
            .filter(|job| !held(job))
            .copied()
            .collect();
        for job in due {
            let launch = self.launches.remove(&job).expect("listed above");
            match after_order {
                true => self.errand(launch),
                false => self.start_off_clock(launch),
            }
        }
    }

    /// The first moment from `now` at which a start out of its job's slot meets no thaw:
    /// `start_clear` after a boundary, and [`START_SPAN`] before the next (`Micros::MAX`:
    /// slots too short for that, or a freezer that does not stop joiners: a start waits for
    /// its job's slot). `now` before the first generation (no boundary yet).
    fn start_window(&self, now: Micros) -> Micros {
        let Some(rotation) = self.rotation else {
            return now;
        };
        // A job's processes started out of its slot would run there, beside the slot's job,
        // if joining did not stop them.
        if self.start_clear + START_SPAN > rotation.quantum || !self.applier.stops_joiners() {
            return Micros::MAX;
        }
        rotation.clear_of_boundaries(now, self.start_clear, START_SPAN)
    }

    /// When the clock thread must next start supervisors held back by a boundary
    /// (`Micros::MAX`: none are).
    fn next_start(&self) -> Micros {
        match self.launches.is_empty() {
            true => Micros::MAX,
            false => self.start_window(now_micros()),
        }
    }

    fn start_off_clock(&mut self, launch: Errand) {
        self.starter.get_or_insert_with(|| {
            let (sender, launches) = mpsc::channel::<Errand>();
            let spawned = std::thread::Builder::new()
                .name("cosched-starts".into())
                .spawn(move || launches.into_iter().for_each(|launch| launch()));
            if let Err(error) = spawned {
                LOG.error(format_args!("starting the starter's thread: {error}"));
            }
            sender
        });
        self.after_starts(launch);
    }

    /// Runs `errand` on the starter's thread once the starts handed to it are done; here, at
    /// once, if it was never given any or could not be started.
    fn after_starts(&self, errand: Errand) {
        match &self.starter {
            Some(starter) => {
                if let Err(mpsc::SendError(errand)) = starter.send(errand) {
                    errand();
                }
            }
            None => errand(),
        }
    }

    /// A job whose supervisor is still held back ends here without starting, and says
    /// so (the controller records it ended, as its cancel or end asked). False if it started.
    fn end_unstarted(&mut self, job: JobId, why: &str) -> bool {
        if self.launches.remove(&job).is_none() {
            return false;
        }
        let ending = Ending {
            note: Some(why.into()),
            at_us: Some(now_micros()),
            ..Ending::default()
        };
        self.events.report(Event::Ended { job, ending });
        true
    }

    /// Supervisors not started when the agent stops or is let go: the job never ran, and the
    /// next controller's adoption finds it not started (`Event::NotStarted`) and starts it.
    fn drop_launches(&mut self) {
        self.launches.clear();
    }

    /// Has the orders' thread do `errand` once the clock is done with this order (here, if
    /// that thread is gone).
    fn errand(&self, errand: Errand) {
        if let Err(mpsc::SendError(errand)) = self.errands.send(errand) {
            errand();
        }
    }

    /// A job no client's descriptors reach (recovered after a restart, started on another
    /// node than its client's, or a process added to it): no input; its output file is
    /// opened by the job itself, as its user (root opening it could be steered by a link).
    fn output_to_file(&self, spec: &mut LaunchSpec) -> Result<[OwnedFd; 3], String> {
        let node = self.host_name(&self.settings.node);
        spec.output_file = Some(spec.launch.output_path(spec.job, Some(&node)));
        spec.error_file = spec.launch.error_path(spec.job, Some(&node));
        let null = || {
            std::fs::File::open("/dev/null")
                .map(OwnedFd::from)
                .map_err(|e| format!("/dev/null: {e}"))
        };
        Ok([null()?, null()?, null()?])
    }

    /// After a controller restart: the job's live supervisor, else its kept exit status, else
    /// (it started but left nothing) lost, else it never started and may be launched.
    fn adopt(&mut self, job: JobId, suspended: bool) {
        self.first_here.insert(job);
        if self.watchers.connected().contains_key(&job) {
            // A new controller took over while this agent ran on: it still watches the
            // supervisor (connecting again would break that watch and report a false loss).
            if suspended {
                self.keep_suspended(job);
            }
            return;
        }
        // The supervisor holds its listening socket from birth: connecting finds a live one.
        match UnixStream::connect(self.settings.socket_file(job)) {
            Ok(stream) => {
                let exit_file = self.settings.exit_file(job);
                self.watchers.watch(job, stream, None, exit_file);
                if suspended {
                    self.keep_suspended(job);
                }
            }
            Err(error) => {
                let event =
                    if let Some(ending) = supervisor::kept_exit(&self.settings.exit_file(job)) {
                        Event::Ended { job, ending }
                    } else if self.settings.started_file(job).exists() {
                        Event::Lost {
                            job,
                            why: format!("its supervisor is gone ({error})"),
                        }
                    } else {
                        Event::NotStarted { job }
                    };
                self.events.report(event);
            }
        }
    }

    /// An adopted job that its owner had suspended stays stopped, out of the rotation.
    fn keep_suspended(&mut self, job: JobId) {
        self.forget(job);
        let stopped = self
            .applier
            .admit(job, None, None)
            .and_then(|()| self.applier.suspend(job));
        match stopped {
            Ok(()) => {
                self.suspended.insert(job);
            }
            Err(error) => self.trouble(job, error),
        }
    }

    /// The controller stored the job's end: the supervisor may drop the status it keeps (it
    /// is told; one that is gone left its files, removed here).
    fn confirm_stored(&mut self, job: JobId) {
        let stream = self.watchers.connected().remove(&job);
        let files = [
            self.settings.exit_file(job),
            self.settings.socket_file(job),
            self.settings.started_file(job),
            self.settings.hosts_file(job),
        ];
        // On the orders' thread, before it takes the next order: on the clock thread the
        // write and four unlinks were the larger part of a job's end, and an unlink can wait
        // for the filesystem's journal (ftrace showed the clock thread asleep there).
        // The slowest recent order sets the clock's quiet window before each boundary: an
        // order arriving in it waits for the boundary and runs beside the gang just thawed.
        self.errand(Box::new(move || {
            if let Some(stream) = stream {
                let _ = (&stream).write_all(b"ok\n");
            }
            for file in files {
                let _ = std::fs::remove_file(file);
            }
        }));
    }

    /// Lets a job run freely: out of the applier's charge, thawed, default weight.
    fn let_loose(&mut self, job: JobId) -> Result<(), String> {
        self.applier.release(job).map_err(|e| e.to_string())?;
        let steps = self.applier.release_steps(job).map_err(|e| e.to_string())?;
        cosched_cgroups::release(&steps).map_err(|e| format!("job {job}: {e}"))
    }

    fn discard(&mut self, job: JobId) {
        // Unknown after a restart: creating is idempotent. Not otherwise: a directory made in
        // a cgroup tree, even one that exists, takes the kernel's cgroup lock, which a process
        // joining any cgroup holds through an RCU grace period (see `relay`).
        let name = job_group(job);
        let created = match self.applier.actuator().knows(&name) {
            true => Ok(()),
            false => self.applier.actuator_mut().create(&name),
        };
        let discarded = created
            .map_err(|source| AgentError::Actuator { job, source })
            .and_then(|()| self.applier.discard(job));
        match discarded {
            Ok(()) => {
                self.discard_later.remove(&job);
            }
            // Processes it left (a daemonized child) were killed and are still exiting: the
            // usual case, not a fault.
            Err(AgentError::Actuator {
                source: CgroupError::Io { source, .. },
                ..
            }) if source.raw_os_error() == Some(libc::EBUSY) => {
                if self.discard_later.insert(job) {
                    LOG.info(format_args!(
                        "job {job}: processes it left are being killed; its cgroups go once \
                         they have exited"
                    ));
                }
            }
            Err(error) => {
                if self.discard_later.insert(job) {
                    LOG.warn(format_args!("{error} (will retry)"));
                }
            }
        }
    }

    /// Reports what the cgroup of a job's part here counted (read before `discard` kills
    /// what is left of it), when it counted anything.
    fn report_used(&mut self, job: JobId) {
        let files = self.applier.actuator().usage_files(&job_group(job));
        let (usage, error) = match files {
            Ok(files) => cosched_cgroups::usage(&files),
            Err(error) => (Usage::default(), Some(error)),
        };
        if let Some(error) = error {
            self.trouble(job, format_args!("its cgroup's figures here: {error}"));
        }
        if usage != Usage::default() {
            self.events.report(Event::Used {
                job,
                node: self.settings.node.clone(),
                cpu_us: usage.cpu_us,
                peak_memory_bytes: usage.peak_memory_bytes,
                oom_kills: usage.oom_kills.unwrap_or(0),
            });
        }
    }

    fn usage(&self, job: JobId) -> Option<Duration> {
        self.applier.actuator().cpu_usage(&job_group(job)).ok()
    }

    fn tick(&mut self, tick: Tick) {
        let Tick {
            slot,
            deadline,
            woke,
            missed,
        } = tick;
        let before: Vec<JobId> = self
            .applier
            .running()
            .chain(self.applier.leaving())
            .collect();
        // Counted whatever the boundary does: a boundary that failed was late all the same,
        // and the slots it missed were missed.
        self.stats.missed_slots += missed;
        self.stats.lateness.record(tick.lateness());
        let record = match self.applier.enter_slot(slot, deadline) {
            Ok(record) => record,
            Err(error) => {
                LOG.error(format_args!("slot {slot}: {error}"));
                return;
            }
        };
        let skews = self.measure_skews(&record);
        self.baselines.clear();
        if record.switched() {
            self.stats.switch.record(record.duration);
        }
        let lateness_us = tick.lateness().as_micros() as Micros;
        self.log_boundary(record, skews, woke, Some(lateness_us));
        self.track_slots(&before, woke);
        self.watch_blocked(slot, woke);
        self.watch_idle(woke);
        self.capture_baselines(slot + 1, false);
        self.start_due(false);
        self.quiet_tick(woke);
    }

    /// Records how far apart the tasks of each gang job `record` started began to run (the
    /// jobs with a baseline, `capture_baselines`), drops their baselines and returns the skews
    /// for the boundary log.
    fn measure_skews(&mut self, record: &SwitchRecord) -> Vec<JobSkew> {
        // A task that sleeps (a launcher waiting for its ranks) never shows: give up soon.
        let quantum = self.rotation.map_or(0, |r| r.quantum);
        let patience = Duration::from_micros((quantum / 10).min(5_000) as u64);
        let mut skews = Vec::new();
        for moment in &record.started {
            let baseline = self.baselines.remove(&moment.job);
            let kick = &mut |cpu| self.kickers.kick(cpu);
            if let Some(skew) = baseline.and_then(|b| b.measure(patience, kick)) {
                self.stats.skew.record(skew);
                skews.push(JobSkew {
                    job: moment.job,
                    skew_us: skew.as_micros() as Micros,
                });
            }
        }
        skews
    }

    /// Keeps a boundary that stopped or started something in the node's boundary log.
    fn log_boundary(
        &mut self,
        record: SwitchRecord,
        skews: Vec<JobSkew>,
        woke_us: Micros,
        lateness_us: Option<Micros>,
    ) {
        if !record.switched() {
            return;
        }
        // Starts on a boundary (not a generation applied within a slot) are the ones the
        // nodes make at the same moment: the controller compares them across nodes, on the
        // boundaries every node samples.
        let sampled = self
            .rotation
            .is_some_and(|r| record.slot % (SPREAD_SAMPLE_US / r.quantum).max(1) == 0);
        if lateness_us.is_some() && sampled {
            for start in &record.started {
                if self.starts.len() == MAX_REPORTED_STARTS {
                    self.starts.pop_front();
                }
                self.starts.push_back(SlotStart {
                    slot: record.slot,
                    job: start.job,
                    at_us: start.at_us,
                });
            }
        }
        self.boundaries.record(&BoundaryRecord {
            node: self.settings.node.clone(),
            slot: record.slot,
            generation: self.applier.generation(),
            woke_us,
            lateness_us,
            stopped: record.stopped,
            started: record.started,
            blocked: record.blocked,
            skews,
        });
    }

    fn retry_discards(&mut self) {
        for job in self.discard_later.clone() {
            self.discard(job);
        }
    }

    /// Applies a generation published for the slot under way (the daemon does that when no
    /// unfinished job runs in it), so idle processors go to the next jobs before the boundary.
    fn apply_early(&mut self) {
        let now = now_micros();
        let Some(slot) = self.rotation.map(|r| r.slot_at(now)) else {
            return;
        };
        if !self.applier.has_due(slot) {
            return;
        }
        let before: Vec<JobId> = self.applier.running().collect();
        // Entrants the boundary's plan did not have get their baselines now (a job frozen since
        // it was taken keeps its own: a second one would show no task that worked).
        self.capture_baselines(slot, false);
        match self.applier.enter_slot(slot, now) {
            Ok(record) => {
                let skews = self.measure_skews(&record);
                if record.switched() {
                    self.stats.switch.record(record.duration);
                }
                self.log_boundary(record, skews, now, None);
            }
            Err(error) => LOG.warn(format_args!("slot {slot} (early): {error}")),
        }
        self.track_slots(&before, now);
        self.watch_blocked(slot, now);
        self.capture_baselines(slot + 1, false);
        self.start_due(false);
    }

    /// From `now`, the jobs whose slot `slot` is are watched for a blocked gang (an
    /// unswitched one among them too: an implicit job asleep leaves its slot idle as well).
    fn watch_blocked(&mut self, slot: i64, now: Micros) {
        let Some(rotation) = self.rotation.filter(|_| self.blocked.is_some()) else {
            return;
        };
        self.outsiders = self.applier.outsiders(slot);
        let mut jobs = self.outsiders.clone();
        if self.lending {
            jobs.extend(self.applier.running().chain(self.applier.loose()));
        }
        self.slot_usage = jobs
            .into_iter()
            .filter_map(|job| Some((job, self.usage(job)?)))
            .collect();
        let watched = match self.lending {
            true => self.applier.slot_holders(slot),
            false => BTreeSet::new(),
        };
        if let Some(watch) = &mut self.blocked {
            if !self.lending {
                watch.set_after(OUTSIDER_WINDOW.min(rotation.quantum / 4));
            }
            watch.slot_began(watched, now);
        }
    }

    /// Whether some job outside its slot is looked at for its budget (loose, or outsider).
    fn budgeted(&self) -> bool {
        self.outsiders.iter().any(|&job| !self.applier.is_held(job))
            || self.applier.loose().next().is_some()
    }

    /// When the clock thread must next look for a blocked gang (`Micros::MAX`: no need).
    fn next_look(&self) -> Micros {
        match (&self.blocked, self.switching()) {
            (Some(watch), true) => watch.next_look(self.budgeted()),
            _ => Micros::MAX,
        }
    }

    /// If a look is due (before `until`, the end of the work between boundaries): each
    /// watched job whose usage stood still for the window and none of whose tasks is runnable
    /// gives its processors away for the rest of the slot. A job's tasks are read once per
    /// slot at most, within a look's period: the clock thread is real-time, and a job of
    /// thousands of sleeping threads must not make it spin or hold the boundary back.
    fn give_away_blocked(&mut self, now: Micros, until: Micros) {
        let (Some(rotation), true) = (self.rotation, self.switching()) else {
            return;
        };
        let budgeted = self.budgeted();
        let Some(watch) = self.blocked.as_mut() else {
            return;
        };
        if !watch.due(now, budgeted) {
            return;
        }
        let watched: Vec<JobId> = watch.watched().collect();
        let scan_by = until.min(now + watch.period());
        let window = watch.after();
        self.hold_over_budget(rotation.slot_at(now), window, now);
        let mut blocked = BTreeSet::new();
        for job in watched {
            let Some(usage) = self.usage(job) else {
                continue;
            };
            let watch = self.blocked.as_mut().expect("checked");
            if watch.still(job, usage, now) {
                watch.drop_job(job);
                if lend::asleep(&self.applier, job, scan_by) {
                    blocked.insert(job);
                }
            }
        }
        if blocked.is_empty() || !self.lending {
            return;
        }
        let slot = rotation.slot_at(now);
        match self.applier.lend(slot, &blocked) {
            Ok(record) => self.log_boundary(record, Vec::new(), now, None),
            Err(error) => LOG.warn(format_args!("slot {slot}: giving processors away: {error}")),
        }
    }

    /// Freezes each job outside its slot that used, in the slot under way, more CPU than the
    /// window per processor it has here: a loose job (a lender kept thawed past its slot)
    /// computes again, and waits for its own slot as any gang; an outsider (an unswitched job
    /// beside a switched one) waits for the next boundary.
    fn hold_over_budget(&mut self, slot: i64, window: Micros, now: Micros) {
        let over: Vec<JobId> = (self.applier.loose())
            .filter(|&job| {
                self.used_in_slot(job)
                    .is_some_and(|used| used > self.budget(job, window))
            })
            .collect();
        for job in over {
            match self.applier.hold_loose(slot, job) {
                Ok(record) => self.log_boundary(record, Vec::new(), now, None),
                Err(error) => LOG.warn(format_args!("slot {slot}: holding a loose job: {error}")),
            }
        }
        let spent: Vec<Spent> = (self.outsiders.iter().copied())
            .filter_map(|job| {
                let used = self.used_in_slot(job)?;
                let budget = self.budget(job, window);
                Some(Spent { job, used, budget })
            })
            .collect();
        let processors = self.settings.cpus.size();
        let shared = Duration::from_micros(window as u64) * processors;
        for job in lend::over_budget(&spent, shared) {
            if self.applier.is_held(job) {
                continue;
            }
            let mode = self.applier.mode_of(job);
            match self.applier.hold_outsider(job) {
                Ok(_) => LOG.info(format_args!(
                    "slot {slot}: job {job} ({mode}) used its budget of a switched job's slot ({window} µs a processor, this node's {processors} shared by every unswitched job): held until the boundary"
                )),
                Err(error) => LOG.warn(format_args!("slot {slot}: holding job {job}: {error}")),
            }
        }
    }

    /// The CPU `job` used in the slot under way (none: unknown, or not watched in it).
    fn used_in_slot(&self, job: JobId) -> Option<Duration> {
        let began = *self.slot_usage.get(&job)?;
        Some(self.usage(job)?.saturating_sub(began))
    }

    /// As a slot ends: each running gang that hardly used it stays thawed through the
    /// boundary (see `lend.rs`): one that used no more CPU in it than the window per processor
    /// (the most it may use in each slot that is not its own), or a lender of it none of whose
    /// tasks is runnable, as read by `until` (true clock).
    fn keep_blocked_loose(&mut self, until: Micros) {
        let (Some(watch), true, true) = (&self.blocked, self.switching(), self.lending) else {
            return;
        };
        let window = watch.after();
        let lenders: BTreeSet<JobId> = self.applier.lenders().collect();
        let gangs: Vec<JobId> = self
            .applier
            .running()
            .filter(|&job| self.applier.mode_of(job) == Mode::Gang)
            .collect();
        for job in gangs {
            let Some(usage) = self.usage(job) else {
                continue;
            };
            let used = self
                .slot_usage
                .get(&job)
                .map(|&began| usage.saturating_sub(began));
            let little = used.is_some_and(|used| used <= self.budget(job, window));
            if little || (lenders.contains(&job) && lend::asleep(&self.applier, job, until)) {
                if let Err(error) = self.applier.keep_loose(job) {
                    LOG.warn(format_args!("keeping job {job} loose: {error}"));
                }
            }
        }
    }

    /// The CPU a loose job or an outsider may use in one slot that is not its own: the window
    /// per processor it has here.
    fn budget(&self, job: JobId, window: Micros) -> Duration {
        let processors = self.sizes.get(&job).copied().unwrap_or(1).max(1) as u32;
        Duration::from_micros(window as u64) * processors
    }

    /// Judges idleness and stalls over own slots: `before` ran in the slot that ended at
    /// `now`, the applier's running jobs in the one that began. CPU usage is read once for both.
    fn track_slots(&mut self, before: &[JobId], now: Micros) {
        if self.idle.is_none() && self.stalls.is_none() {
            return;
        }
        let usages: BTreeMap<JobId, Duration> = before
            .iter()
            .copied()
            .chain(self.applier.running())
            .filter_map(|job| Some((job, self.usage(job)?)))
            .collect();
        self.track_stalls(before, &usages, now);
        let Some(tracker) = self.idle.as_mut() else {
            return;
        };
        for job in before {
            if let Some(&usage) = usages.get(job) {
                if tracker.slot_ended(*job, usage, now) {
                    tracker.forget(*job);
                    self.events.report(Event::Idle { job: *job });
                }
            }
        }
        for job in self.applier.running().collect::<Vec<_>>() {
            if let Some(&usage) = usages.get(&job) {
                tracker.slot_started(job, usage, now);
            }
        }
    }

    fn track_stalls(&mut self, before: &[JobId], usages: &BTreeMap<JobId, Duration>, now: Micros) {
        if self.stalls.is_none() {
            return;
        }
        let running: Vec<JobId> = self.applier.running().collect();
        let realtime = self.stats.realtime;
        let reader = self
            .stall_io
            .get_or_insert_with(|| IoReader::start(realtime));
        // A job that ran on is read once, for the end of one slot and the start of the next.
        let jobs: BTreeSet<JobId> = before.iter().chain(&running).copied().collect();
        let readings: BTreeMap<JobId, Option<Activity>> = jobs
            .into_iter()
            .map(|job| {
                let pids = self.applier.actuator().pids(&job_group(job)).ok();
                let cpu = usages.get(&job).copied();
                (
                    job,
                    cpu.zip(pids)
                        .and_then(|(cpu, pids)| Activity::read(cpu, &pids, reader)),
                )
            })
            .collect();
        let tracker = self.stalls.as_mut().expect("checked");
        let mut changes = Vec::new();
        for &job in before {
            match tracker.slot_ended(job, readings[&job].clone(), now) {
                Verdict::Same => {}
                Verdict::Stalled { since } => changes.push((job, Some(since))),
                Verdict::Moving => changes.push((job, None)),
            }
        }
        for job in running {
            if let Some(reading) = readings[&job].clone() {
                tracker.slot_started(job, reading, now);
            }
        }
        for (job, since_us) in changes {
            self.events.report(Event::Stalled {
                job,
                node: self.settings.node.clone(),
                since_us,
            });
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
                self.events.report(Event::Woke { job });
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
            if let Err(error) = self.applier.actuator_mut().kill(&job_group(job)) {
                LOG.error(format_args!("job {job}: {error}"));
            }
        }
    }

    /// Run times of the entrants of `next_slot` (the next, or this one for a generation applied
    /// within it) while they are frozen; `deferred` only: those of the entrants put off. A
    /// baseline is taken only once the job's freeze is confirmed: a task still on its way
    /// to the freezer (one preempted as the freeze was asked) runs after it, and the measure
    /// took that run for its start after the thaw, with the wait before it for its skew (1.6
    /// and 6.4 ms in a churn, where the ranks' ftrace showed each began within 30 µs), and
    /// kicked no processor for a rank that did wait. An entrant whose freeze was confirmed
    /// too late for the boundary's capture is taken at the next boundary's lead.
    fn capture_baselines(&mut self, next_slot: i64, deferred: bool) {
        let put_off = std::mem::take(&mut self.baselines_put_off);
        let entrants: Vec<JobId> = (self.applier.entrants(next_slot).into_iter())
            .filter(|&job| self.applier.mode_of(job) == Mode::Gang)
            .filter(|job| !deferred || put_off.contains(job))
            .collect();
        for job in entrants {
            if self.applier.freeze_pending(job) {
                self.baselines.remove(&job);
                self.baselines_put_off.insert(job);
                continue;
            }
            let Ok(pids) = self.applier.actuator().pids(&job_group(job)) else {
                continue;
            };
            let size = self.sizes.get(&job).copied().unwrap_or(0);
            let Some(mut baseline) = Baseline::capture(&pids, size * MOST_TASKS_PER_CPU) else {
                // Too many tasks to read at a boundary: its skew is not measured.
                self.last_captures.remove(&job);
                continue;
            };
            if let Some(previous) = self.last_captures.insert(job, baseline.clone()) {
                baseline = baseline.busy_since(&previous);
            }
            if baseline.task_count() > 0 && baseline.task_count() <= size {
                self.baselines.insert(job, baseline);
            }
        }
    }

    /// Lets every job loose (or kills them all) and stops switching.
    fn stop(&mut self, cancel: bool) -> Result<(), String> {
        let mut first_error = None;
        if let Err(error) = self.applier.release_all() {
            first_error.get_or_insert(error.to_string());
        }
        let suspended = std::mem::take(&mut self.suspended);
        for &job in &suspended {
            if let Err(error) = self.applier.actuator_mut().thaw(&job_group(job)) {
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
                if let Err(error) = self.applier.actuator_mut().kill(&job_group(job)) {
                    first_error.get_or_insert(error.to_string());
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Job cgroups holding processes of jobs not in `known` (the store's unfinished jobs), with
/// their process counts: another daemon's jobs, or jobs a stop left running. A new job would
/// share its cgroup with them (ids start at 1 in a new state directory) and freeze them.
pub fn strangers(
    cgroups: &Cgroups,
    known: &BTreeSet<JobId>,
) -> Result<Vec<(String, usize)>, CgroupError> {
    let known: BTreeSet<String> = known
        .iter()
        .map(|&job| job_group(job).to_string())
        .collect();
    Ok(cgroups
        .existing_jobs()?
        .into_iter()
        .filter(|(name, procs)| *procs > 0 && !known.contains(name))
        .collect())
}

/// Starts a process added to a job under a supervisor of its own, and watches it on a thread
/// of its own until it ends.
fn start_process(
    exe: &Path,
    spec: LaunchSpec,
    stdio: [OwnedFd; 3],
    process: &ProcessRef,
    events: &Arc<dyn EventSink>,
) -> Result<(), String> {
    let job = spec.job;
    let (child, stream) = spawn_supervisor(exe, &spec, stdio, None)?;
    let reader = stream
        .try_clone()
        .map_err(|e| format!("watching the supervisor: {e}"))?;
    let events = Arc::clone(events);
    let process = process.clone();
    std::thread::Builder::new()
        .name(format!("cosched-watch-{job}-{process}"))
        .spawn(move || {
            let ending = supervisor::read_report(&reader, REPORT_LIMIT)
                .or_else(|| supervisor::kept_exit(&spec.exit_file))
                .unwrap_or_else(|| Ending::refused("its supervisor died"));
            // Nothing keeps a process's status across a restart: its asker waits on a
            // connection that a restart breaks anyway.
            let _ = (&stream).write_all(b"ok\n");
            events.report(Event::ProcessEnded {
                job,
                process,
                ending,
            });
            let mut child = child;
            let _ = child.wait();
            for file in [&spec.exit_file, &spec.started_file, &spec.socket] {
                let _ = std::fs::remove_file(file);
            }
        })
        .map_err(|e| format!("watching the supervisor: {e}"))?;
    Ok(())
}

/// Starts a job's supervisor with a fresh listening socket.
fn spawn_supervisor(
    exe: &Path,
    spec: &LaunchSpec,
    stdio: [OwnedFd; 3],
    affinity: Option<libc::cpu_set_t>,
) -> Result<(Child, UnixStream), String> {
    let _ = std::fs::remove_file(&spec.socket);
    let listener =
        UnixListener::bind(&spec.socket).map_err(|e| format!("{}: {e}", spec.socket.display()))?;
    supervisor::spawn(exe, spec, listener, stdio, affinity)
        .map_err(|e| format!("starting the supervisor {}: {e}", exe.display()))
}

/// The supervisors watched, each on a thread of its own, and the connections to them, on
/// which a stored end is confirmed: the clock adopts supervisors, the orders' thread starts
/// them.
#[derive(Clone)]
struct Watchers {
    events: Arc<dyn EventSink>,
    supervisors: Arc<Mutex<BTreeMap<JobId, UnixStream>>>,
}

impl Watchers {
    fn connected(&self) -> MutexGuard<'_, BTreeMap<JobId, UnixStream>> {
        self.supervisors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the connection to a supervisor and waits, on a thread of its own, for its report
    /// of the end (or for its death: then its kept exit status, if any, tells the end).
    fn watch(&self, job: JobId, stream: UnixStream, child: Option<Child>, exit_file: PathBuf) {
        let trouble = |error: std::io::Error| {
            self.events.report(Event::Trouble {
                job,
                what: format!("watching its supervisor: {error}"),
            })
        };
        let reader = match stream.try_clone() {
            Ok(reader) => reader,
            Err(error) => return trouble(error),
        };
        self.connected().insert(job, stream);
        let events = Arc::clone(&self.events);
        let watcher = std::thread::Builder::new()
            .name(format!("cosched-watch-{job}"))
            .spawn(move || {
                let report = supervisor::read_report(&reader, REPORT_LIMIT);
                let event = match report.or_else(|| supervisor::kept_exit(&exit_file)) {
                    Some(ending) => Event::Ended { job, ending },
                    None => Event::Lost {
                        job,
                        why: "its supervisor died".into(),
                    },
                };
                events.report(event);
                if let Some(mut child) = child {
                    let _ = child.wait();
                }
            });
        if let Err(error) = watcher {
            trouble(error);
        }
    }
}

/// The slot clock `generation` sets on an agent whose clock is `clock_shift_us` ahead: slot
/// k begins at epoch + k * quantum on the agent's clock, and on the true clock a shifted
/// clock is a shifted epoch.
pub(crate) fn slot_clock(generation: &Generation, clock_shift_us: Micros) -> Rotation {
    let shared = generation.rotation();
    Rotation::new(shared.epoch - clock_shift_us, shared.quantum)
}

/// How far into a slot node `node` sends its periodic status: from an eighth to half of the
/// slot, by its name. Every node's boundaries are the same moment: reports sent at them
/// reached etcd together (at 1,000 nodes, 64 % of the agents' writes came in a slot's first
/// 50 ms), just as the controller wrote the records and generations those boundaries brought.
fn status_offset(node: &str, quantum: Micros) -> Micros {
    // FNV-1a: the same for a name in every build and process.
    let hash = node.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    let window = (quantum * 3 / 8).max(1);
    quantum / 8 + (hash % window as u64) as Micros
}

/// The first moment at or after `due` that is `offset` into a slot of `rotation`: `offset`
/// after the first boundary at or after `due - offset`.
fn at_offset(due: Micros, offset: Micros, rotation: Rotation) -> Micros {
    rotation.slot_start(rotation.next_boundary(due - offset)) + offset
}

/// The agent on its clock, with its source of orders.
struct OnClock<'a, A: Actuator> {
    agent: &'a mut NodeAgent<A>,
    source: &'a mut Relayed,
    /// The clock this loop keeps: a generation with another one ends the loop.
    rotation: Rotation,
}

impl<A: Actuator> OnClock<'_, A> {
    /// Carries out what the source gave; false when this clock's loop must end (closed, or
    /// a generation with another slot clock).
    fn take(&mut self, received: Received) -> bool {
        match received {
            Received::Order(order) => {
                let began = now_micros();
                self.agent.handle(*order, self.source.arrived());
                self.source.carried_out();
                self.agent.order_times.record(now_micros() - began);
                if self.agent.rotation != Some(self.rotation) {
                    return false;
                }
                if self.agent.switching() {
                    self.agent.apply_early();
                }
            }
            // Woken to look for a blocked gang, or at `until`: the loop's top sees which.
            Received::Timeout => {}
            Received::Closed => {
                self.agent.close();
                return false;
            }
            Received::Adrift => self.agent.go_adrift(),
            Received::Back => self.agent.come_back(),
        }
        true
    }
}

impl<A: Actuator> SlotWork for OnClock<'_, A> {
    fn between(&mut self, until: Micros) -> bool {
        // An order taken too close to `until` ran past it, and past the boundary: a job's
        // start (its cgroups, its supervisor) takes milliseconds. Orders that come later wait
        // for the boundary, at most as long as the slowest recent one took (a quarter of the
        // slot at most).
        let quiet = self
            .agent
            .order_times
            .slowest()
            .unwrap_or(0)
            .min(self.rotation.quantum / 4);
        let until = until - quiet;
        loop {
            let now = now_micros();
            if now >= until {
                // The generations for a later slot, which did not wake the clock (the next
                // may be one of them): before the lead, which frees their processors.
                while let Some(generation) = self.source.queued_generation() {
                    if !self.take(generation) {
                        return false;
                    }
                }
                // Before the lead is asked: a lender kept loose does not leave.
                let scan_by = now + self.rotation.quantum / 50;
                self.agent.keep_blocked_loose(scan_by);
                return true;
            }
            self.agent.give_away_blocked(now, until);
            self.agent.start_due(false);
            if now >= self.agent.next_status() {
                self.agent.report_status(now);
            }
            let wake = until
                .min(self.agent.next_look())
                .min(self.agent.next_start())
                .min(self.agent.next_status());
            let received = self.source.next_order(wake);
            if !self.take(received) {
                return false;
            }
        }
    }

    fn boundary(&mut self, tick: Tick) -> bool {
        // A generation that came after the clock's last look (in the quiet before the
        // boundary) is in force at it: taken after the switch, it thawed the old plan's job
        // there for the moments until `apply_early` froze it again. Only its publication
        // here (no start of a supervisor): the switch is due.
        while let Some(Received::Order(order)) = self.source.queued_generation() {
            self.agent.carry_out(*order, self.source.arrived());
            self.source.carried_out();
            if self.agent.rotation != Some(self.rotation) {
                return false;
            }
        }
        if self.agent.switching() {
            self.agent.tick(tick);
        } else {
            self.agent.quiet_tick(tick.woke);
        }
        true
    }

    fn lead(&self, slot: i64) -> Micros {
        if self.agent.switching() {
            self.agent.applier.lead(slot)
        } else {
            0
        }
    }

    fn ahead_of(&mut self, slot: i64, boundary: Micros) {
        if !self.agent.switching() {
            return;
        }
        if let Err(error) = self.agent.applier.leave_slot(slot, boundary) {
            LOG.warn(format_args!("ahead of slot {slot}: {error}"));
        }
        self.agent.capture_baselines(slot, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reports_spread_over_a_slot_away_from_its_boundary() {
        let rotation = Rotation::new(0, 1_000_000);
        let due = 7_250_000;
        let moments: Vec<Micros> = (0..1_000)
            .map(|i| {
                let offset = status_offset(&format!("node-{i:04}"), rotation.quantum);
                at_offset(due, offset, rotation)
            })
            .collect();
        let mut per_50ms = [0; 20];
        for &moment in &moments {
            assert!((due..due + rotation.quantum).contains(&moment), "{moment}");
            let into = moment - rotation.slot_start(rotation.slot_at(moment));
            assert!(
                (125_000..500_000).contains(&into),
                "{into} µs into the slot"
            );
            per_50ms[(into / 50_000) as usize] += 1;
        }
        // 1,000 reports over 375 ms: no 50 ms holds twice its share.
        assert!(per_50ms.iter().all(|&n| n <= 266), "{per_50ms:?}");
    }
}
