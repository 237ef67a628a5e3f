//! The controller's state: the core's scheduler, every job record (mirrored in the store),
//! the current generation, and what waits on jobs. Its owner serializes every call (the
//! daemon, one lock). The node agents are told what to do by order and report by event;
//! clients are answered through [`Clients`]; nothing here waits for an agent, touches a
//! process or a socket, or reads the clock.

use crate::clients::{ClientId, Clients, Until};
use crate::counts::{Counts, Scrape, StartSpreads};
use crate::store::{core_memory, submitted_bytes, JobRecord, Store, StoreError};
use cosched_core::{
    Class, Decision, Generation, Home, JobId, JobRequest, Micros, NodeShare, Partition, Rotation,
    Scheduler, Shape, TimeLimits, UserLimits,
};
use cosched_os::fault;
use cosched_os::unix::{user_name, Credentials};
use cosched_proto::api::{
    command_prefix, job_shape, validate_run, JobView, MatrixEntryView, MatrixView, NodeView, Reply,
    RunRequest, StatsView, LISTED_COMMAND_BYTES,
};
use cosched_proto::{
    Command, Ending, Event, ExitInfo, JobHost, JobState, Launch, Mode, NodeChange, NodeCpus,
    NodeInfo, NodeMap, NodeStatus, Order, OrderSink, ProcessRef, StallAction, Summary, WriteWatch,
    CANCEL_GRACE, STATUS_PERIOD_US,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

mod accounting;
mod auto;
mod history;
mod limits;
mod preempting;
mod registration;
mod stall;

use stall::STALLED_NOTE;

/// What a client did wrong or may not do; the message goes back to it as is.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Invalid(String),
    #[error("no job {0}")]
    NoSuchJob(JobId),
    #[error("job {job} belongs to uid {owner}; only its owner or root may {action} it")]
    NotOwner {
        job: JobId,
        owner: u32,
        action: &'static str,
    },
    #[error("{0}")]
    Forbidden(String),
    #[error("job {job} has {state}; cannot {action} it")]
    WrongState {
        job: JobId,
        state: &'static str,
        action: &'static str,
    },
    #[error("{0}")]
    Busy(String),
    #[error("internal error: {0}")]
    Internal(String),
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub mode: Mode,
    pub rotation: Rotation,
    /// The nodes behind the core's processors (one on a single machine).
    pub nodes: NodeMap,
    /// Ended records kept in memory (the rest stay in the store).
    pub keep_ended: usize,
    /// Open files this process may have (its soft limit).
    pub max_files: u64,
    /// With registration allowed (`--allow-registration`), the program a registered job runs
    /// as its holder (this very binary's `hold`); `None`: `register` is refused.
    pub registration: Option<PathBuf>,
    /// Each class's default and longest time limit (the policy file's `[classes]`).
    pub time_limits: TimeLimits,
    /// What one user (root aside) may hold at once (the policy file's `[limits]`).
    pub user_limits: UserLimits,
    /// Memory per processor of a job that names none (bytes; the policy's
    /// `default_mem_per_cpu`): it is held to it and admitted by it.
    pub default_mem_per_cpu: Option<u64>,
    /// What is done with a job every node of which reports stalled.
    pub stall_action: StallAction,
    /// How long an interactive job preempts the batch jobs on its processors (the policy's
    /// `interactive_preempt`; `None`: it never does): what each user's share is counted in.
    pub interactive_stretch: Option<Micros>,
}

/// Queued jobs one user (root aside) may have holding their client's stdio descriptors.
pub const MAX_HELD_STDIO_PER_UID: usize = 1000;
/// Unfinished jobs one user (root aside) may have: each is a record in memory.
pub const MAX_UNFINISHED_PER_UID: usize = 10_000;
/// Bytes of arguments, environment and working directory one user's (root aside) unfinished
/// jobs may hold in all, in memory and in the store: 10,000 jobs of a usual 5 KiB
/// environment fit, 64 jobs of a megabyte of arguments do. Without it the count above let
/// one user take about 11 GB of the daemon's memory.
pub const MAX_SUBMITTED_BYTES_PER_UID: usize = 64 << 20;
/// Descriptors kept free for clients, supervisors and the store (a quarter of a low limit).
const SPARE_FILES: u64 = 512;

pub struct Controller {
    settings: Settings,
    scheduler: Scheduler,
    /// Unfinished jobs and the latest `keep_ended` ended ones.
    records: BTreeMap<JobId, JobRecord>,
    /// Ended jobs in memory, oldest first.
    ended: VecDeque<JobId>,
    /// Ends the store could not take yet (a full disk), as they ended: memory keeps the
    /// stored record until the store has the end, and their supervisors keep the exit status.
    unsaved: BTreeMap<JobId, JobRecord>,
    store: Box<dyn Store>,
    /// Descriptors of jobs not started yet.
    stdio: BTreeMap<JobId, [OwnedFd; 3]>,
    /// Each user's unfinished jobs and the bytes their submissions hold, for the caps (kept
    /// as jobs come and end: counting them at each submission cost a pass over every record).
    held: BTreeMap<u32, (usize, usize)>,
    /// Whoever waits on jobs, and hears the answers to requests it is parked for.
    clients: Box<dyn Clients>,
    generation: Option<Generation>,
    /// Orders to the nodes' agents; `None` once the controller let go of them (a clean stop).
    agents: Option<Box<dyn OrderSink>>,
    /// Nodes of the machine whose agent left (their lease expired, or their reports stopped).
    absent: BTreeSet<String>,
    /// Of those, the ones given up for silence while their lease lived: back when they report.
    silent: BTreeSet<String>,
    /// Each node as it registered.
    members: BTreeMap<String, NodeInfo>,
    /// How long each node's status revision in etcd has not changed while etcd answered.
    quiet: BTreeMap<String, WriteWatch>,
    /// Jobs that left the rotation for idleness.
    idle_departures: u64,
    /// Each node's latest report, when it came, and when the node was first heard of.
    nodes: BTreeMap<String, HeardFrom>,
    /// What `/metrics` counts.
    counts: Counts,
    /// The nodes' boundary starts not yet compared (`counts.start_spread`).
    start_spreads: StartSpreads,
    /// Clients (and their uid) whose process is joining a job, by join request, until the
    /// agent answers.
    joining: BTreeMap<u64, (u32, ClientId)>,
    next_join: u64,
    /// Each started, unended job's run time, counted as it goes (time limits).
    clocks: BTreeMap<JobId, limits::RunClock>,
    /// Jobs kept out of the core's queue while their owner is at a per-user limit.
    limited: BTreeSet<JobId>,
    /// Running jobs some node reported stalled: since when, by node.
    stalls: BTreeMap<JobId, BTreeMap<String, Micros>>,
    /// Auto jobs some node measured, by node, until every node of the job did.
    behaviours: BTreeMap<JobId, BTreeMap<String, Vec<cosched_proto::Behaviour>>>,
    /// Each user's recent interactive preemption, to hold them to their share.
    preempted: preempting::Preempted,
}

/// A node's latest report as the controller received it.
struct HeardFrom {
    status: NodeStatus,
    received_us: Micros,
    joined_us: Micros,
}

fn internal(error: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(error.to_string())
}

/// An ended job cannot be `action`ed.
fn unended(record: &JobRecord, action: &'static str) -> Result<(), ApiError> {
    if record.status.ended() {
        return Err(ApiError::WrongState {
            job: record.id,
            state: "already ended",
            action,
        });
    }
    Ok(())
}

impl Controller {
    pub fn new(
        settings: Settings,
        scheduler: Scheduler,
        store: Box<dyn Store>,
        agents: Box<dyn OrderSink>,
        clients: Box<dyn Clients>,
    ) -> Controller {
        Controller {
            settings,
            scheduler,
            records: BTreeMap::new(),
            ended: VecDeque::new(),
            unsaved: BTreeMap::new(),
            store,
            stdio: BTreeMap::new(),
            held: BTreeMap::new(),
            clients,
            generation: None,
            agents: Some(agents),
            absent: BTreeSet::new(),
            silent: BTreeSet::new(),
            members: BTreeMap::new(),
            quiet: BTreeMap::new(),
            idle_departures: 0,
            nodes: BTreeMap::new(),
            counts: Default::default(),
            start_spreads: Default::default(),
            joining: BTreeMap::new(),
            next_join: 0,
            clocks: BTreeMap::new(),
            limited: BTreeSet::new(),
            stalls: BTreeMap::new(),
            behaviours: BTreeMap::new(),
            preempted: Default::default(),
        }
    }

    /// The limits a policy reload (SIGHUP) may change while jobs run: they bind what is
    /// submitted or started from now on.
    pub fn set_limits(&mut self, time_limits: TimeLimits, user_limits: UserLimits, now: Micros) {
        self.settings.time_limits = time_limits;
        self.settings.user_limits = user_limits;
        self.release_limited(None, now);
    }

    /// Changes a job's record: in memory only once the store has it.
    fn update(&mut self, job: JobId, change: impl FnOnce(&mut JobRecord)) -> Result<(), ApiError> {
        let mut record = self.records[&job].clone();
        change(&mut record);
        self.store.put(&record).map_err(|e| {
            ApiError::Internal(format!(
                "job {job}: its record cannot be saved, so nothing changed ({e})"
            ))
        })?;
        self.records.insert(job, record);
        Ok(())
    }

    /// A job as it is now: its end if the store has not taken it yet, else its record.
    fn latest(&self, job: JobId) -> Option<&JobRecord> {
        self.unsaved.get(&job).or_else(|| self.records.get(&job))
    }

    /// Every job in memory as it is now (`latest`), by id.
    fn current(&self) -> impl Iterator<Item = &JobRecord> {
        self.records
            .values()
            .map(|r| self.unsaved.get(&r.id).unwrap_or(r))
    }

    fn record(&self, job: JobId) -> Result<&JobRecord, ApiError> {
        match self.latest(job) {
            Some(record) => Ok(record),
            None => Err(match self.store.get(job) {
                Ok(Some(_)) => ApiError::WrongState {
                    job,
                    state: "already ended",
                    action: "act on",
                },
                _ => ApiError::NoSuchJob(job),
            }),
        }
    }

    fn owned(
        &self,
        job: JobId,
        who: &Credentials,
        action: &'static str,
    ) -> Result<&JobRecord, ApiError> {
        let record = self.record(job)?;
        if who.is_root() || who.uid == record.owner.uid {
            Ok(record)
        } else {
            Err(ApiError::NotOwner {
                job,
                owner: record.owner.uid,
                action,
            })
        }
    }

    /// Sends an order to the nodes it concerns: a stop to every node, an
    /// adoption or a registered job's end to the job's first node (where its supervisor is),
    /// the rest to the job's nodes.
    pub fn tell(&self, command: Command) {
        let nodes: Vec<String> = match (&command, command.job()) {
            (_, None) => self
                .settings
                .nodes
                .nodes()
                .iter()
                .map(|n| n.name.clone())
                .collect(),
            (Command::Adopt { .. } | Command::Finish { .. }, Some(job)) => {
                self.nodes_of(job).into_iter().take(1).collect()
            }
            (_, Some(job)) => self.nodes_of(job),
        };
        for node in nodes {
            self.send(&node, command.clone().into());
        }
    }

    /// The nodes a job was started on, its first node first (the only node of one machine
    /// for records from before nodes were kept).
    fn nodes_of(&self, job: JobId) -> Vec<String> {
        match self.records.get(&job) {
            Some(record) if !record.nodes.is_empty() => record.nodes.clone(),
            _ => vec![self.settings.nodes.nodes()[0].name.clone()],
        }
    }

    /// What every node of `job` reported, in its nodes' order; none while one has not.
    fn reported_by_every_node<T: Clone>(
        &self,
        job: JobId,
        reports: &BTreeMap<String, T>,
    ) -> Option<Vec<T>> {
        self.nodes_of(job)
            .iter()
            .map(|node| reports.get(node).cloned())
            .collect()
    }

    /// The job left the rotation: what its nodes reported of it (stalls, an auto job's
    /// measure) goes; they forget it too, and report afresh if it comes back.
    fn forget_reports(&mut self, job: JobId) {
        self.stalls.remove(&job);
        self.behaviours.remove(&job);
    }

    fn send(&self, node: &str, order: Order) {
        // Agents in this process stop only once the controller let go of them, at the end.
        if let Some(agents) = &self.agents {
            agents.deliver(node, order);
        }
    }

    /// Lets go of the agents: one in this process finishes the orders sent and ends.
    pub fn let_go_of_agents(&mut self) {
        self.agents = None;
    }

    /// A new job from `who`.
    pub fn submit(
        &mut self,
        who: &Credentials,
        run: RunRequest,
        stdio: Option<[OwnedFd; 3]>,
        now: Micros,
    ) -> Result<JobId, ApiError> {
        self.submit_job(who, run, stdio, false, now)
    }

    /// A new job, `registered` or not (the API's and `/metrics`' one way in).
    fn submit_job(
        &mut self,
        who: &Credentials,
        run: RunRequest,
        stdio: Option<[OwnedFd; 3]>,
        registered: bool,
        now: Micros,
    ) -> Result<JobId, ApiError> {
        let taken = self.take(who, run, stdio, registered, now);
        match taken {
            Ok(_) => self.counts.submitted += 1,
            Err(_) => self.counts.refused += 1,
        }
        taken
    }

    /// Records and queues a job, or says why not.
    fn take(
        &mut self,
        who: &Credentials,
        run: RunRequest,
        stdio: Option<[OwnedFd; 3]>,
        registered: bool,
        now: Micros,
    ) -> Result<JobId, ApiError> {
        validate_run(&run).map_err(ApiError::Invalid)?;
        if let (Some(mode), Mode::Local) = (run.mode, self.settings.mode) {
            return Err(ApiError::Invalid(format!(
                "this daemon runs in local mode (plain Linux, nothing switched): a job cannot ask for mode {mode}"
            )));
        }
        let class = match &run.class {
            Some(name) => name
                .parse::<Class>()
                .map_err(|e| ApiError::Invalid(e.to_string()))?,
            None => Class::Batch,
        };
        if class == Class::Express && !who.is_root() {
            return Err(ApiError::Forbidden(
                "only root may submit to the express class".into(),
            ));
        }
        let time_limit_us = self
            .settings
            .time_limits
            .limit_for(class, run.time_limit())
            .map_err(|e| ApiError::Invalid(e.to_string()))?;
        self.check_procs_limit(run.procs, who.is_root())?;
        self.check_queued_limit(who.uid, who.is_root())?;
        self.check_descriptors(who)?;
        let (unfinished, held_bytes) = self.held.get(&who.uid).copied().unwrap_or_default();
        if !who.is_root() && unfinished >= MAX_UNFINISHED_PER_UID {
            return Err(ApiError::Busy(format!(
                "too many queued jobs: uid {} has {MAX_UNFINISHED_PER_UID} unfinished",
                who.uid
            )));
        }
        let bytes = submitted_bytes(&run.argv, &run.env, &run.cwd);
        if !who.is_root() && held_bytes + bytes > MAX_SUBMITTED_BYTES_PER_UID {
            return Err(ApiError::Busy(format!(
                "too many queued bytes: uid {}'s unfinished jobs hold {} KiB of arguments, environment and directories, and this job's {} KiB would pass the {} MiB a user may hold; wait for some to end",
                who.uid,
                held_bytes >> 10,
                bytes >> 10,
                MAX_SUBMITTED_BYTES_PER_UID >> 20
            )));
        }
        let mem_per_cpu_bytes = run.mem_per_cpu_bytes.or(self
            .settings
            .default_mem_per_cpu
            .filter(|_| run.mem_bytes.is_none()));
        let mut probe = JobRequest::new(JobId::MAX, job_shape(run.procs, run.node_count));
        probe.memory = core_memory(run.mem_bytes, mem_per_cpu_bytes);
        self.scheduler.check(&probe).map_err(|e| {
            ApiError::Invalid(
                e.to_string()
                    .replace(&format!("job {} ", JobId::MAX), "the job "),
            )
        })?;
        let unrecorded = |e: StoreError| {
            ApiError::Internal(format!(
                "the job cannot be recorded, so it was not taken ({e})"
            ))
        };
        let id = self.store.next_id().map_err(unrecorded)?;
        let record = JobRecord {
            id,
            name: run
                .name
                .clone()
                .unwrap_or_else(|| program_name(&run.argv[0])),
            owner: who.clone(),
            class,
            procs: run.procs,
            node_count: run.node_count,
            argv: run.argv,
            argv_cut: false,
            env: run.env,
            cwd: run.cwd,
            output: run.output,
            error: run.error,
            registered,
            status: JobState::Queued,
            launched: false,
            cancel_requested: false,
            submitted_us: now,
            started_us: None,
            ended_us: None,
            exit: None,
            note: None,
            suspended_us: 0,
            suspended_since_us: None,
            suspended_by_root: false,
            nodes: Vec::new(),
            cpus_on_nodes: Vec::new(),
            time_limit_us,
            run_us: 0,
            run_saved_us: None,
            timed_out: false,
            stalled: false,
            mem_bytes: run.mem_bytes,
            mem_per_cpu_bytes,
            cpu_us: None,
            peak_memory_bytes: None,
            mode: run.mode,
            runs_as: None,
            mode_why: None,
        };
        self.store.insert(&record).map_err(unrecorded)?;
        fault::point("recorded", id);
        LOG.info(format_args!(
            "job {id} submitted by {} (uid {}): '{}', {} processor(s), {}",
            user_name(record.owner.uid),
            record.owner.uid,
            record.name,
            record.procs,
            record.class.name()
        ));
        self.tally(&record, true);
        self.records.insert(id, record);
        // Held only where they can reach the job: a cluster's agents never see them.
        if let (Some(stdio), true) = (stdio, self.stdio_reaches_jobs()) {
            self.stdio.insert(id, stdio);
        }
        self.enqueue_within_limits(id, now)?;
        Ok(id)
    }

    /// Why a job waits, if it does (for the reply to its submission).
    pub fn reason_of(&self, job: JobId) -> Option<cosched_proto::Pending> {
        self.records.get(&job).and_then(|r| self.pending_reason(r))
    }

    /// What the submitter of `job` should know of how it will run (for the reply to its
    /// submission, as it was just submitted): an interactive job in the core without a grant
    /// was past its owner's share of preemption ([`preempting`]).
    pub fn submission_note(&self, job: JobId) -> Option<String> {
        let stretch = self.share_stretch(self.records.get(&job)?)?;
        let refused = self.scheduler.state(job).is_some() && !self.preempted.holds(job);
        refused.then(|| {
            format!(
                "time-shares from its start: your interactive jobs have had their share of \
                 running ahead of batch jobs ({} s in any {} s)",
                stretch as f64 / 1e6,
                (preempting::WINDOW_STRETCHES * stretch) as f64 / 1e6
            )
        })
    }

    /// Whether a client's descriptors reach its job's processes (one machine, not a cluster).
    fn stdio_reaches_jobs(&self) -> bool {
        self.agents.as_ref().is_none_or(|a| a.carries_stdio())
    }

    /// Where a job's output goes when not to its client's descriptors (a cluster's jobs).
    pub fn output_elsewhere(&self, job: JobId) -> Option<String> {
        (!self.stdio_reaches_jobs()).then(|| {
            format!(
                "{} on its nodes",
                self.launch_of(job).output_path(job, None)
            )
        })
    }

    /// Refuses a job whose client descriptors the daemon could not hold: past the open-file
    /// limit everything fails (accepting clients, launching, switching).
    fn check_descriptors(&self, who: &Credentials) -> Result<(), ApiError> {
        let held = |uid: Option<u32>| {
            self.stdio
                .keys()
                .filter(|job| uid.is_none_or(|uid| self.records[job].owner.uid == uid))
                .count()
        };
        if !who.is_root() && held(Some(who.uid)) >= MAX_HELD_STDIO_PER_UID {
            return Err(ApiError::Busy(format!(
                "too many queued jobs: uid {} has {MAX_HELD_STDIO_PER_UID} waiting to start \
                 with their client's terminal or files; submit with --detach --output FILE, \
                 or wait",
                who.uid
            )));
        }
        let open = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count()) as u64;
        let spare = SPARE_FILES.min(self.settings.max_files / 4);
        if open + 3 + spare > self.settings.max_files {
            return Err(ApiError::Busy(format!(
                "too many queued jobs: {} hold their clients' descriptors and the daemon has {open} \
                 of its {} open files in use; try again when some have started",
                held(None),
                self.settings.max_files
            )));
        }
        Ok(())
    }

    /// Hands a job to the scheduler and acts on what it decides.
    fn enqueue(&mut self, job: JobId, now: Micros) -> Result<(), ApiError> {
        let record = &self.records[&job];
        let mut request = JobRequest::new(job, self.shape_of(record)?).class(record.class);
        request.memory = record.core_memory();
        // Backfilling plans with what is left of its limit (what it may still run).
        if let Some(limit) = record.time_limit_us {
            request = request.estimate((limit - self.run_time(record, now)).max(1));
        }
        // A job that ran has had its preempting stretch (interactive): a resume is no new one.
        request.settled = record.launched || !self.may_preempt(job, now);
        let decisions = self.scheduler.submit(request, now).map_err(|error| {
            self.preempted.left(job, now);
            internal(error)
        })?;
        self.apply(decisions, now);
        Ok(())
    }

    /// Whether a job not started yet may preempt the batch jobs for its first stretch, if it
    /// is interactive: so long as its owner (root aside) is within their share
    /// ([`preempting`]), for what is left of it, counted from now.
    fn may_preempt(&mut self, job: JobId, now: Micros) -> bool {
        let record = &self.records[&job];
        let Some(stretch) = self.share_stretch(record) else {
            return true;
        };
        let uid = record.owner.uid;
        let spent = self.preempted.spent(uid, stretch, now);
        if spent >= stretch {
            let seconds = |us: Micros| us as f64 / 1e6;
            LOG.info(format_args!(
                "job {job}: interactive, but uid {uid}'s interactive jobs have preempted (or may \
                 yet) for {:.1} s of the last {:.0} s, a share of {:.0} s: it time-shares at once",
                seconds(spent),
                seconds(preempting::WINDOW_STRETCHES * stretch),
                seconds(stretch)
            ));
            return false;
        }
        self.preempted.grant(uid, job, stretch - spent);
        true
    }

    /// The stretch a job's owner's share of preemption is counted in, if the job is held to
    /// one: interactive, not root's, and the policy lets interactive jobs preempt.
    fn share_stretch(&self, record: &JobRecord) -> Option<Micros> {
        let held = record.class == Class::Interactive && !record.owner.is_root();
        self.settings.interactive_stretch.filter(|_| held)
    }

    /// What the core is asked to place: what the job asked for, or, once its processes live on
    /// several nodes, as many processors as it has on each of those nodes (they cannot move
    /// to other nodes; on one node the cpuset simply changes).
    fn shape_of(&self, record: &JobRecord) -> Result<Shape, ApiError> {
        let pinned = record.launched
            && self.pins_jobs()
            && !record.nodes.is_empty()
            && record.cpus_on_nodes.len() == record.nodes.len();
        if !pinned {
            return Ok(job_shape(record.procs, record.node_count));
        }
        let shares = record.nodes.iter().zip(&record.cpus_on_nodes);
        let shares: Result<Vec<NodeShare>, ApiError> = shares
            .map(|(name, &procs)| {
                let node = self.node_number(name).ok_or_else(|| {
                    ApiError::Internal(format!(
                        "its processes are on node {name}, which is not one of this controller's nodes"
                    ))
                })?;
                Ok(NodeShare { node, procs })
            })
            .collect();
        Ok(Shape::OnNodes(shares?.into()))
    }

    /// Whether a started job is pinned to its nodes: on a machine of several nodes (on one,
    /// a job placed again may take other CPUs of it, as the partitioner chooses).
    fn pins_jobs(&self) -> bool {
        self.settings.nodes.nodes().len() > 1
    }

    /// The job is gone from the core, and whatever memory it held there with it.
    fn unschedule(&mut self, job: JobId, now: Micros) {
        self.forget_reports(job);
        let decisions = match self.scheduler.state(job) {
            Some(_) => self.scheduler.remove(job, now).expect("present"),
            None => self.scheduler.release_memory(job, now),
        };
        self.apply(decisions, now);
    }

    /// Stops a started job as a cancel does: SIGTERM, SIGKILL after the grace, let loose
    /// meanwhile at the least weight. It keeps its place in the matrix until it ends: its
    /// processors go to no other job meanwhile, so its grace runs on them in its own slots
    /// (barely in others'), and one user cancelling job after job cannot pile up jobs in
    /// grace beside everyone's (a helper's loop as nobody had 22 at once, and root's gangs
    /// 24 % of the processors).
    ///
    /// Its record already says why (`JobRecord::being_stopped`): its run time stops here.
    fn stop_in_grace(&mut self, job: JobId, now: Micros) {
        self.forget_reports(job);
        self.reshare_clocks(now);
        self.tell(Command::Cancel { job });
    }

    /// The job leaves the rotation while its processes stay (suspended, idle): their pages
    /// stay, so its memory stays held on its nodes.
    fn unschedule_resident(&mut self, job: JobId, now: Micros) {
        self.forget_reports(job);
        if self.scheduler.state(job).is_some() {
            let decisions = self.scheduler.remove_resident(job, now).expect("present");
            self.apply(decisions, now);
        }
    }

    /// Acts on the scheduler's decisions, then publishes the new matrix if it changed.
    fn apply(&mut self, decisions: Vec<Decision>, now: Micros) {
        for decision in decisions {
            match decision {
                Decision::Placed {
                    job,
                    home: Home::Preempting,
                    ..
                } => self.preempted.began(job, now),
                Decision::Placed { job, .. }
                | Decision::Queued { job }
                | Decision::Removed { job } => self.preempted.left(job, now),
            }
            match decision {
                Decision::Placed { job, partition, .. } => {
                    if let Err(error) = self.start(job, partition, now) {
                        self.fail(job, &error.to_string(), now);
                    }
                }
                Decision::Queued { job } => {
                    let launched = self.records.get(&job).is_some_and(|r| r.launched);
                    if launched {
                        // Its processes exist: they wait stopped.
                        self.tell(Command::Suspend { job });
                    }
                }
                Decision::Removed { .. } => {}
            }
        }
        self.publish(now);
    }

    fn publish(&mut self, now: Micros) {
        let plan = self.scheduler.plan();
        if self.generation.as_ref().is_some_and(|g| g.plan == plan) {
            // Jobs may have gone idle or come back without the plan changing.
            self.reshare_clocks(now);
            return;
        }
        // A slot whose jobs all left (ended, idle, suspended) gives way at once.
        let first_slot =
            Generation::first_slot(self.generation.as_ref(), &plan, self.settings.rotation, now);
        let generation = Generation::follow(self.generation.as_ref(), plan, first_slot);
        self.generation = Some(generation);
        let nodes: Vec<&str> = self
            .settings
            .nodes
            .nodes()
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        self.send_generation_in_force(&nodes, now, false);
        self.reshare_clocks(now);
    }

    /// A generation as agents take it, stamped with when it was sent.
    fn on_the_wire(&self, generation: &Generation, now: Micros) -> cosched_proto::Generation {
        let mut wire = cosched_proto::Generation::new(
            generation,
            self.settings.rotation,
            &self.settings.nodes,
        );
        wire.published_us = now;
        wire
    }

    /// A placed job: launched now, or (launched earlier) taken back into the rotation.
    fn start(&mut self, job: JobId, cpus: Partition, now: Micros) -> Result<(), ApiError> {
        let first_launch = !self.records[&job].launched;
        let placed = self.settings.nodes.place(&cpus);
        if let Some(gone) = placed.iter().find(|p| self.absent.contains(&p.node)) {
            return Err(ApiError::Internal(format!(
                "its processors include node {}, whose agent left the cluster",
                gone.node
            )));
        }
        let nodes: Vec<String> = placed.iter().map(|p| p.node.clone()).collect();
        let cpus_on_nodes: Vec<u32> = placed.iter().map(|p| p.cpus.size()).collect();
        if self.pins_jobs() {
            // Placed again from here on (a class change), it stays where its processes are.
            self.scheduler.pin(job).map_err(internal)?;
        }
        // The intent is durable before the agent hears of it: a restarted daemon then asks
        // the agent for the supervisor, its exit status or its started marker, and launches
        // again only when none is there.
        self.update(job, |record| {
            record.status = JobState::Running;
            record.launched = true;
            record.nodes = nodes;
            record.cpus_on_nodes = cpus_on_nodes;
            if first_launch {
                record.started_us = Some(now);
            }
        })?;
        if first_launch {
            LOG.info(format_args!(
                "job {job} started on {}",
                placed
                    .iter()
                    .map(|p| format!("node {} CPUs {}", p.node, p.cpus))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            self.clock_on(job, now);
            let submitted = self.records[&job].submitted_us;
            self.counts
                .queue_wait
                .record((now - submitted).max(0) as f64 / 1e6);
        }
        let mut launch = first_launch.then(|| {
            fault::point("intent", job);
            let mut launch = self.launch_of(job);
            launch.hosts = self.job_hosts(&placed);
            tell_mpi_hosts(&launch.hosts, &mut launch.env);
            launch
        });
        let mut stdio = if first_launch {
            self.stdio.remove(&job)
        } else {
            None
        };
        // The launcher runs on the job's first node; the other nodes only place it.
        let memory = self.records[&job].core_memory();
        let mode = self.start_mode(job);
        for placed in placed {
            let here = memory.map(|memory| memory.on_node(placed.cpus.size()));
            self.send(
                &placed.node,
                Order {
                    command: Command::Start {
                        job,
                        memory: here.and_then(std::num::NonZeroU64::new),
                        cpus: placed.cpus,
                        launch: launch.take(),
                        mode,
                    },
                    stdio: stdio.take(),
                },
            );
        }
        // Ordered after the start: the agent has the job placed before any process joins.
        if first_launch && self.records[&job].registered {
            if let Some(reply) = self.started_reply(job) {
                self.clients.started(job, &reply);
            }
        }
        Ok(())
    }

    /// The job's nodes as its launch names them (COSCHED_NODELIST, COSCHED_HOSTFILE).
    fn job_hosts(&self, placed: &[NodeCpus]) -> Vec<JobHost> {
        placed
            .iter()
            .map(|p| JobHost {
                node: p.node.clone(),
                address: self
                    .settings
                    .nodes
                    .nodes()
                    .iter()
                    .find(|n| n.name == p.node)
                    .and_then(|n| n.address.clone()),
                slots: p.cpus.size(),
            })
            .collect()
    }

    /// What the job runs and as whom, from its record.
    fn launch_of(&self, job: JobId) -> Launch {
        let record = &self.records[&job];
        Launch {
            argv: record.argv.clone(),
            env: record.env.clone(),
            cwd: record.cwd.clone(),
            uid: record.owner.uid,
            gid: record.owner.gid,
            groups: record.owner.groups.clone(),
            output: record.output.clone(),
            error: record.error.clone(),
            holder: record.registered,
            hosts: Vec::new(),
            limits: record.owner.limits.clone(),
        }
    }

    /// A job that could not be started ends here, with the reason kept.
    fn fail(&mut self, job: JobId, why: &str, now: Micros) {
        LOG.error(format_args!("job {job}: {why}"));
        self.end(
            job,
            JobState::Lost,
            Ending {
                note: Some(why.to_string()),
                ..Ending::default()
            },
            now,
        );
    }

    /// Records how a job ended, frees its cells and answers whoever waits for it. The agent
    /// is told whether the end is stored (its supervisor keeps the exit status until it is).
    pub fn end(&mut self, job: JobId, status: JobState, ending: Ending, now: Micros) {
        let ended_before = match self.latest(job) {
            // Ended and out of memory already: stored.
            None => match self.store.get(job) {
                Ok(Some(r)) if r.status.ended() => Some((r.launched, true)),
                _ => None,
            },
            Some(r) if r.status.ended() => Some((r.launched, !self.unsaved.contains_key(&job))),
            Some(_) => None,
        };
        if let Some((launched, stored)) = ended_before {
            // A second word on an ended job (its supervisor reporting after it was declared
            // lost, say): its status files may go once the end is stored.
            if launched && stored {
                self.tell(Command::Stored { job });
            }
            return;
        }
        let Some(mut record) = self.records.get(&job).cloned() else {
            return;
        };
        self.tally(&record, false);
        let launched = record.launched;
        let owner = record.owner.uid;
        record.exit = (ending.exit != ExitInfo::default()).then_some(ending.exit);
        // A cancel or limit explains whatever status the command left; else its own
        // status says whether it succeeded.
        record.status = match status {
            JobState::Completed if record.cancel_requested => JobState::Cancelled,
            JobState::Completed if record.timed_out => JobState::Timeout,
            JobState::Completed if record.stalled => JobState::Failed,
            JobState::Completed if record.exit.is_some_and(|e| !e.success()) => JobState::Failed,
            status => status,
        };
        self.stamp_run_time(&mut record, now);
        accounting::account(&mut record, accounting::NodeUsage::of(&ending));
        record.note = match record.stalled {
            true => Some(STALLED_NOTE.into()),
            false => ending.note.or(record.note.take()),
        };
        let started = record.started_us.unwrap_or(record.submitted_us);
        record.ended_us = Some(ending.at_us.map_or(now, |at| at.clamp(started, now)));
        record.suspended_us += suspended_for(&record, record.ended_us.unwrap_or(now));
        record.suspended_since_us = None;
        record.shed_for_history();
        *self.counts.ended.entry(record.status.name()).or_default() += 1;
        // A lost job is the system's trouble, not the job's: a warning.
        let ended = format!("job {job} ended: {}", ended_line(&record));
        match record.status {
            JobState::Lost => LOG.warn(ended),
            _ => LOG.info(ended),
        }
        let reply = ended_reply(&record);
        // Acted on even unsaved (its processes are gone, its supervisor keeps the exit
        // status), but memory changes only once the store has it.
        let saved = match self.store.put(&record) {
            Ok(()) => {
                self.records.insert(job, record);
                true
            }
            Err(error) => {
                LOG.warn(format_args!(
                    "job {job}: its end cannot be saved yet ({error}); its supervisor keeps the exit status"
                ));
                self.unsaved.insert(job, record);
                false
            }
        };
        self.stdio.remove(&job);
        if launched {
            self.tell(Command::Ended { job, stored: saved });
        }
        self.clocks.remove(&job);
        self.limited.remove(&job);
        self.unschedule(job, now);
        self.release_limited(Some(owner), now);
        self.clients.ended(job, &reply);
        self.ended.push_back(job);
        self.evict_ended();
    }

    /// Counts an unfinished job among its owner's (`held`), or, once it ends, no longer.
    fn tally(&mut self, record: &JobRecord, unfinished: bool) {
        let uid = record.owner.uid;
        let (jobs, bytes) = self.held.entry(uid).or_default();
        if unfinished {
            *jobs += 1;
            *bytes += record.submitted_bytes();
        } else {
            *jobs -= 1;
            *bytes -= record.submitted_bytes();
            if *jobs == 0 {
                self.held.remove(&uid);
            }
        }
    }

    /// Ended records beyond `keep_ended` leave memory (the store keeps them).
    fn evict_ended(&mut self) {
        while self.ended.len() > self.settings.keep_ended {
            let Some(&oldest) = self.ended.front() else {
                break;
            };
            if self.unsaved.contains_key(&oldest) {
                break;
            }
            self.ended.pop_front();
            self.records.remove(&oldest);
        }
    }

    /// Saves the ends that a full disk refused; the supervisors' exit files go once they are in.
    pub fn retry_unsaved(&mut self) {
        for (job, record) in std::mem::take(&mut self.unsaved) {
            match self.store.put(&record) {
                Ok(()) => {
                    self.records.insert(job, record);
                    self.tell(Command::Stored { job });
                }
                Err(_) => {
                    self.unsaved.insert(job, record);
                }
            }
        }
        self.evict_ended();
    }

    pub fn has_unsaved(&self) -> bool {
        !self.unsaved.is_empty()
    }

    /// Registers interest in a job's end; an ended job answers at once. Descriptors sent
    /// along serve a job that has not started (its first client left with the old daemon).
    /// Anyone may wait for a job (`ps` shows every job anyway); only its owner may hand it
    /// descriptors, which would otherwise let one user read another's output.
    pub fn wait(
        &mut self,
        who: &Credentials,
        job: JobId,
        stdio: Option<[OwnedFd; 3]>,
        client: ClientId,
    ) -> Result<(), ApiError> {
        let evicted = match self.latest(job) {
            Some(_) => None,
            None => self.store.get(job).map_err(internal)?,
        };
        let record = match (&evicted, &stdio) {
            (Some(record), _) => record,
            (None, Some(_)) => self.owned(job, who, "hand descriptors to")?,
            (None, None) => self.record(job)?,
        };
        if record.status.ended() {
            let reply = ended_reply(record);
            self.clients.reply(client, &reply);
            return Ok(());
        }
        if let (Some(stdio), false) = (stdio, record.launched) {
            self.stdio.entry(job).or_insert(stdio);
        }
        self.clients.park(client, job, who.uid, Until::End)
    }

    pub fn cancel(
        &mut self,
        who: &Credentials,
        job: JobId,
        now: Micros,
    ) -> Result<String, ApiError> {
        let record = self.owned(job, who, "cancel")?;
        unended(record, "cancel")?;
        let launched = record.launched;
        self.update(job, |record| record.cancel_requested = true)?;
        LOG.info(format_args!("job {job}: cancelled by uid {}", who.uid));
        if !launched {
            self.end(job, JobState::Cancelled, Ending::default(), now);
            return Ok(format!("job {job} cancelled before it started"));
        }
        self.stop_in_grace(job, now);
        Ok(format!(
            "job {job}: SIGTERM sent (SIGKILL in {} s if it is still there)",
            CANCEL_GRACE / 1_000_000
        ))
    }

    pub fn suspend(
        &mut self,
        who: &Credentials,
        job: JobId,
        now: Micros,
    ) -> Result<String, ApiError> {
        let record = self.owned(job, who, "suspend")?;
        if record.cancel_requested {
            // Being killed: it ends within the grace, and a suspend would stop it holding its
            // processors and memory.
            return Err(ApiError::Invalid(format!(
                "job {job} is being cancelled: it cannot be suspended"
            )));
        }
        match record.status.shown(record.launched) {
            JobState::Running | JobState::Idle | JobState::Waiting => {}
            state => {
                return Err(ApiError::WrongState {
                    job,
                    state: state.name(),
                    action: "suspend",
                })
            }
        }
        let by_root = who.is_root();
        self.update(job, |record| {
            record.status = JobState::Suspended;
            record.suspended_since_us = Some(now);
            record.suspended_by_root = by_root;
        })?;
        self.unschedule_resident(job, now);
        self.tell(Command::Suspend { job });
        LOG.info(format_args!("job {job}: suspended by uid {}", who.uid));
        Ok(format!("job {job} suspended"))
    }

    pub fn resume(
        &mut self,
        who: &Credentials,
        job: JobId,
        now: Micros,
    ) -> Result<String, ApiError> {
        let record = self.owned(job, who, "resume")?;
        if record.status != JobState::Suspended {
            return Err(ApiError::WrongState {
                job,
                state: record.status.shown(record.launched).name(),
                action: "resume",
            });
        }
        if record.suspended_by_root && !who.is_root() {
            return Err(ApiError::Forbidden(format!(
                "job {job} was suspended by root: only root may resume it"
            )));
        }
        self.update(job, |record| {
            record.status = JobState::Queued;
            record.suspended_us += suspended_for(record, now);
            record.suspended_since_us = None;
            record.suspended_by_root = false;
        })?;
        if let Err(error) = self.enqueue(job, now) {
            // Not left "queued" with nothing to run it.
            self.fail(job, &error.to_string(), now);
            return Err(error);
        }
        LOG.info(format_args!("job {job}: resumed by uid {}", who.uid));
        Ok(format!(
            "job {job} resumed ({})",
            self.records[&job].status.name()
        ))
    }

    pub fn set_class(
        &mut self,
        who: &Credentials,
        job: JobId,
        class: &str,
        now: Micros,
    ) -> Result<String, ApiError> {
        let class: Class = class
            .parse()
            .map_err(|e: cosched_core::UnknownClass| ApiError::Invalid(e.to_string()))?;
        let record = self.owned(job, who, "change the class of")?;
        unended(record, "change the class of")?;
        let old = record.class;
        // Classes are ordered from most to least urgent: a smaller one is a raise.
        if class < old && !who.is_root() {
            return Err(ApiError::Forbidden(format!(
                "only root may raise a job's class ({old} to {class}); owners may lower it"
            )));
        }
        self.update(job, |record| record.class = class)?;
        if self.scheduler.state(job).is_some() {
            let decisions = self.scheduler.set_class(job, class, now).expect("present");
            self.apply(decisions, now);
        }
        Ok(format!("job {job}: class {old} -> {class}"))
    }

    /// Interactive jobs preempting since `since` or earlier, or past what was left of their
    /// owner's share when they came, take a slice of their own.
    pub fn settle_overdue(&mut self, since: Micros, now: Micros) {
        let mut overdue = self.scheduler.preempting_since(since);
        overdue.extend(self.preempted.spent_allowances(now));
        overdue.sort_unstable();
        overdue.dedup();
        for job in overdue {
            let decisions = self.scheduler.settle(job, now).expect("a scheduled job");
            LOG.info(format_args!(
                "job {job}: interactive stretch over; time-shares now"
            ));
            self.apply(decisions, now);
        }
    }

    /// The agent found a running job idle: its cells go to others; it runs unscheduled.
    pub fn went_idle(&mut self, job: JobId, now: Micros) {
        if self.latest(job).map(|r| r.status) != Some(JobState::Running) {
            return;
        }
        if let Err(error) = self.update(job, |record| record.status = JobState::Idle) {
            LOG.error(error);
            return;
        }
        self.idle_departures += 1;
        self.unschedule_resident(job, now);
        self.tell(Command::LetLoose { job });
    }

    /// An idle job computes again: back into the rotation (or the queue).
    pub fn woke(&mut self, job: JobId, now: Micros) {
        if self.latest(job).map(|r| r.status) != Some(JobState::Idle) {
            return;
        }
        if let Err(error) = self.update(job, |record| record.status = JobState::Queued) {
            LOG.error(error);
            return;
        }
        if let Err(error) = self.enqueue(job, now) {
            self.fail(job, &error.to_string(), now);
        }
    }

    /// Jobs as `ps` shows them: a listing with a bounded start of each command, or one job
    /// whole (from the store if it ended long ago).
    pub fn jobs(&self, all: bool, job: Option<JobId>, now: Micros) -> Vec<JobView> {
        if let Some(job) = job {
            let stored;
            let record = match self.latest(job) {
                Some(record) => record,
                None => match self.store.get(job) {
                    Ok(Some(record)) => {
                        stored = record;
                        &stored
                    }
                    _ => return Vec::new(),
                },
            };
            return vec![self.job_view(record, record.argv.clone(), record.argv_cut, now)];
        }
        self.current()
            .filter(|r| all || !r.status.ended())
            .map(|r| {
                let (argv, cut) = command_prefix(&r.argv, LISTED_COMMAND_BYTES);
                self.job_view(r, argv, cut || r.argv_cut, now)
            })
            .collect()
    }

    fn job_view(&self, r: &JobRecord, argv: Vec<String>, argv_cut: bool, now: Micros) -> JobView {
        let plan = self.generation.as_ref().map(|g| &g.plan);
        JobView {
            id: r.id,
            name: r.name.clone(),
            uid: r.owner.uid,
            user: user_name(r.owner.uid),
            class: r.class,
            procs: r.procs,
            node_count: r.node_count,
            state: r.status.shown(r.launched),
            cpus: match self.scheduler.state(r.id) {
                Some(cosched_core::JobState::Placed { partition, .. }) => {
                    Some(partition.to_string())
                }
                _ => None,
            },
            slices: plan.map(|p| p.slices_of(r.id)).unwrap_or_default(),
            submitted_us: r.submitted_us,
            started_us: r.started_us,
            ended_us: r.ended_us,
            exit: r.exit,
            argv,
            argv_cut,
            note: r.note.clone(),
            suspended_us: r.suspended_us + suspended_for(r, now),
            reason: self.pending_reason(r),
            time_limit_us: r.time_limit_us,
            run_us: self.run_time(r, now),
            mem_bytes: r.memory_per_node(),
            stalled_since_us: match r.status {
                JobState::Running => self.stalled_since(r.id),
                _ => None,
            },
            mode: r.mode.unwrap_or(self.settings.mode),
            runs_as: r.runs_as,
            mode_why: r.mode_why.clone(),
        }
    }

    pub fn matrix(&self, now: Micros) -> MatrixView {
        let rotation = self.settings.rotation;
        let slot = rotation.slot_at(now);
        let (slices, running_slice, number) = match &self.generation {
            Some(g) => (
                g.plan
                    .slices
                    .iter()
                    .map(|s| {
                        s.entries
                            .iter()
                            .map(|e| MatrixEntryView {
                                job: e.job,
                                cpus: e.partition.to_string(),
                                role: e.role.into(),
                            })
                            .collect()
                    })
                    .collect(),
                g.slice_for_slot(slot),
                g.number,
            ),
            None => (Vec::new(), None, 0),
        };
        let nodes = &self.settings.nodes;
        MatrixView {
            procs: self.scheduler.machine().procs(),
            processors: if nodes.nodes().len() > 1 {
                nodes.processor_names()
            } else {
                Vec::new()
            },
            mode: self.settings.mode,
            epoch_us: rotation.epoch,
            quantum_us: rotation.quantum,
            slot,
            running_slice,
            generation: number,
            slices,
            queued: self.scheduler.queued().collect(),
        }
    }

    /// A node's report: the latest is kept.
    pub fn heard_from(&mut self, mut status: NodeStatus, now: Micros) {
        let starts = std::mem::take(&mut status.starts);
        // Nodes report a period apart at most: a boundary waits for every report of it.
        let patience = 2 * self.longest_status_period();
        self.start_spreads
            .heard(&starts, now, patience, &mut self.counts.start_spread);
        let joined_us = self.nodes.get(&status.node).map_or(now, |n| n.joined_us);
        let node = status.node.clone();
        self.nodes.insert(
            node.clone(),
            HeardFrom {
                status,
                received_us: now,
                joined_us,
            },
        );
        if self.silent.remove(&node) {
            if let Some(info) = self.members.get(&node).cloned() {
                LOG.info(format_args!("node {node} reports again"));
                self.node_changed(NodeChange::Joined(info), now);
            }
        }
    }

    /// The longest time any node may go without a report (one machine's agent: a second).
    fn longest_status_period(&self) -> Micros {
        self.members
            .values()
            .map(NodeInfo::status_period_us)
            .fold(STATUS_PERIOD_US, Micros::max)
    }

    /// Gives up as gone every node whose status etcd has not seen change for longer than its
    /// lease (three report periods at least) although its key lives on: its agent stopped,
    /// and whatever renews its lease (a job on the node can reach etcd) is not the agent. Its
    /// processors are withheld and its jobs lost, as when the lease expires; it is back when
    /// it reports. `revisions`: each node's status, as etcd answered just now; `None`, etcd
    /// did not answer: silence while etcd is out is etcd's, not the nodes', so it counts for
    /// nobody.
    pub fn check_silence(&mut self, revisions: Option<&BTreeMap<String, i64>>, now: Micros) {
        let Some(revisions) = revisions else {
            self.quiet.clear();
            return;
        };
        let mut gone = Vec::new();
        for (name, info) in &self.members {
            if self.absent.contains(name) {
                continue;
            }
            let revision = revisions.get(name).copied().unwrap_or(0);
            let limit = 3 * info.status_period_us();
            let watch = self.quiet.entry(name.clone()).or_default();
            if let Some(silent_for) = watch.unchanged_for(revision, limit, now) {
                gone.push((name.clone(), silent_for));
            }
        }
        for (node, silent_for) in gone {
            LOG.warn(format_args!(
                "node {node} sent no status for {:.1} s though its key lives: its agent stopped; treated as gone until it reports again",
                silent_for as f64 / 1e6
            ));
            self.quiet.remove(&node);
            self.node_changed(NodeChange::Left(node.clone()), now);
            self.silent.insert(node);
        }
    }

    pub fn nodes(&self, now: Micros) -> Vec<NodeView> {
        self.nodes
            .iter()
            .map(|(name, heard)| NodeView {
                name: name.clone(),
                joined_us: heard.joined_us,
                heard_ms_ago: ((now - heard.received_us).max(0) / 1000) as u64,
                status: heard.status.clone(),
                left: self.absent.contains(name),
            })
            .collect()
    }

    /// A request on the socket was answered (`ok`) or refused.
    pub fn count_request(&mut self, op: &'static str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        *self.counts.requests.entry((op, result)).or_default() += 1;
    }

    /// What `/metrics` shows now.
    pub fn scrape(&self, now: Micros) -> Scrape {
        Scrape {
            jobs: self.jobs(false, None, now),
            stats: self.stats(),
            nodes: self.nodes(now),
            counts: self.counts.clone(),
        }
    }

    pub fn stats(&self) -> StatsView {
        let count = |f: fn(&JobRecord) -> bool| self.current().filter(|r| f(r)).count();
        // A node that left reports nothing current.
        let statuses: Vec<&NodeStatus> = self
            .nodes
            .iter()
            .filter(|(name, _)| !self.absent.contains(*name))
            .map(|(_, n)| &n.status)
            .collect();
        let worst =
            |of: fn(&NodeStatus) -> &Summary| Summary::worst(statuses.iter().map(|s| of(s)));
        let mut actuators: Vec<&str> = statuses.iter().map(|s| s.actuator.as_str()).collect();
        actuators.sort_unstable();
        actuators.dedup();
        StatsView {
            mode: self.settings.mode,
            quantum_ms: self.settings.rotation.quantum as f64 / 1000.0,
            actuator: actuators.join("; "),
            realtime: !statuses.is_empty() && statuses.iter().all(|s| s.realtime),
            lateness_us: worst(|s| &s.lateness_us),
            switch_us: worst(|s| &s.switch_us),
            skew_us: worst(|s| &s.skew_us),
            missed_slots: statuses.iter().map(|s| s.missed_slots).sum(),
            jobs_running: count(|r| r.status == JobState::Running),
            jobs_queued: count(|r| r.status == JobState::Queued),
            jobs_ended: count(|r| r.status.ended()),
            idle_departures: self.idle_departures,
            clients_waiting: self.clients.waiting(),
        }
    }

    /// After a restart: every unfinished job is taken back, in submission order.
    pub fn recover(&mut self, records: Vec<JobRecord>, now: Micros) {
        let mut unfinished = Vec::new();
        for mut record in records {
            let job = record.id;
            if record.status.ended() {
                // A store written before ended jobs shed their environment.
                record.shed_for_history();
                self.ended.push_back(job);
            } else {
                self.tally(&record, true);
                unfinished.push(job);
            }
            self.records.insert(job, record);
        }
        // Launched jobs' pages are there before anything is placed, the suspended ones' and
        // those of jobs queued to be placed again alike: their memory first, held until a
        // placement of theirs takes it back. Held for the suspended ones only, a job placed
        // first could take the memory of one whose frozen processes still held it.
        for &job in &unfinished {
            if self.records[&job].launched {
                self.hold_resident_memory(job);
            }
        }
        for job in unfinished {
            self.readopt(job, now);
        }
        self.evict_ended();
    }

    /// Takes back a job the store holds as unfinished: a job never launched is queued; a
    /// launched one is handed to the agent to find (its supervisor, else its kept exit status,
    /// else a sign it started) and, unless suspended, queued to go back into the rotation.
    /// What the agent finds comes back as an event: never a second launch.
    fn readopt(&mut self, job: JobId, now: Micros) {
        let record = &self.records[&job];
        let suspended = record.status == JobState::Suspended;
        if !record.launched {
            if let Err(error) = self.enqueue_within_limits(job, now) {
                self.fail(job, &error.to_string(), now);
            }
            return;
        }
        // Past its time limit or stalled, it was being stopped as a cancel is.
        let cancelling = record.being_stopped();
        self.clock_on(job, now);
        self.tell(Command::Adopt { job, suspended });
        if cancelling {
            // The cancel's SIGKILL timer died with the process that sent its SIGTERM: a job
            // that ignores SIGTERM would run on, out of the rotation. Cancel it again.
            self.tell(Command::Cancel { job });
            return;
        }
        if suspended {
            // Its memory is held (`recover`): its processes keep their pages.
            return;
        }
        let queued = self
            .update(job, |record| {
                record.status = JobState::Queued;
                // Records from before launch times were stored with the intent.
                record.started_us.get_or_insert(now);
            })
            .and_then(|()| self.enqueue(job, now));
        if let Err(error) = queued {
            self.fail(job, &error.to_string(), now);
        }
    }

    /// A launched job out of the rotation keeps its memory held on the nodes it runs on.
    fn hold_resident_memory(&mut self, job: JobId) {
        let record = &self.records[&job];
        let Some(memory) = record.core_memory() else {
            return;
        };
        let shares: Vec<NodeShare> = record
            .nodes
            .iter()
            .zip(&record.cpus_on_nodes)
            .filter_map(|(name, &procs)| {
                let node = self.node_number(name)?;
                Some(NodeShare { node, procs })
            })
            .collect();
        self.scheduler.hold_memory(job, &shares, memory);
    }

    /// The agent found no sign that a launched job ever started (the daemon stopped between
    /// storing the intent and the supervisor's start): it is launched when next placed.
    pub fn not_started(&mut self, job: JobId, now: Micros) {
        let Some(record) = self.latest(job).filter(|r| !r.status.ended() && r.launched) else {
            return;
        };
        if record.cancel_requested || record.timed_out {
            // Its cancel (or time limit) came while its start waited for its slot: it ends
            // without ever running, as a cancel before launch does.
            let (status, note) = match record.cancel_requested {
                true => (JobState::Cancelled, "cancelled before it started"),
                false => (JobState::Timeout, "its time limit passed before it started"),
            };
            let ending = Ending {
                note: Some(note.into()),
                ..Ending::default()
            };
            self.end(job, status, ending, now);
            return;
        }
        LOG.warn(format_args!(
            "job {job}: the daemon stopped before its supervisor started; starting it now"
        ));
        self.unschedule(job, now);
        // It never ran: its limit starts when it does.
        self.clocks.remove(&job);
        let relaunched = self
            .update(job, |record| {
                record.launched = false;
                record.status = JobState::Queued;
                record.run_us = 0;
                record.run_saved_us = None;
            })
            .and_then(|()| self.enqueue(job, now));
        if let Err(error) = relaunched {
            self.fail(job, &error.to_string(), now);
        }
    }

    /// The job's supervisor reported its end (or left it in its exit file).
    pub fn exited(&mut self, job: JobId, ending: Ending, now: Micros) {
        self.end(job, JobState::Completed, ending, now);
    }

    /// The agent cannot run or find the job.
    pub fn lost(&mut self, job: JobId, why: &str, now: Micros) {
        if self.latest(job).is_some_and(|r| !r.status.ended()) {
            self.fail(job, why, now);
        }
    }

    /// A clean stop with `--on-stop cancel`: jobs not started end now; started ones are
    /// marked so that their end (the agent kills them) is recorded as a cancel.
    pub fn cancel_all(&mut self, now: Micros) -> usize {
        let unfinished: Vec<JobId> = self
            .current()
            .filter(|r| !r.status.ended())
            .map(|r| r.id)
            .collect();
        let mut running = 0;
        for job in unfinished {
            if let Err(error) = self.update(job, |record| record.cancel_requested = true) {
                LOG.error(error);
            }
            if self.records[&job].launched {
                running += 1;
            } else {
                self.end(job, JobState::Cancelled, Ending::default(), now);
            }
        }
        running
    }

    /// Kills every launched job still running (a cluster controller's stop with cancel).
    pub fn cancel_launched(&self) {
        for record in self.current() {
            if record.launched && !record.status.ended() {
                self.tell(Command::Cancel { job: record.id });
            }
        }
    }

    /// A node's agent joined or left the cluster.
    pub fn node_changed(&mut self, change: NodeChange, now: Micros) {
        self.forget_node_stalls(match &change {
            NodeChange::Joined(info) => &info.node,
            NodeChange::Left(node) => node,
        });
        let known = |name: &str| self.settings.nodes.nodes().iter().any(|n| n.name == name);
        match &change {
            NodeChange::Joined(info) => {
                self.members.insert(info.node.clone(), info.clone());
            }
            // Gone already (for silence, its lease now ended too): nothing more to give up.
            NodeChange::Left(node) if self.absent.contains(node) => {
                self.silent.remove(node);
                return;
            }
            NodeChange::Left(_) => {}
        }
        match change {
            NodeChange::Joined(info) if known(&info.node) => {
                let number = self.node_number(&info.node).expect("known");
                let cpus = &self.settings.nodes.nodes()[number as usize].cpus;
                if info.cpus != *cpus {
                    // The plans would give it its old CPUs: it counts as gone until its agent
                    // runs with them again.
                    LOG.warn(format_args!(
                        "node {} joined ({}) with CPUs {} instead of {cpus}: treated as gone; \
                         restart its agent with --cpus {cpus}",
                        info.node, info.agent, info.cpus
                    ));
                    if !self.absent.contains(&info.node) {
                        self.node_changed(NodeChange::Left(info.node.clone()), now);
                    }
                    return;
                }
                if self.absent.remove(&info.node) {
                    LOG.info(format_args!("node {} is back ({})", info.node, info.agent));
                    // Its queue was dropped when it left: the plan in force, again.
                    self.send_generation_in_force(&[&info.node], now, true);
                    let decisions = self
                        .scheduler
                        .restore_node(self.node_number(&info.node).expect("known"), now)
                        .expect("a node of the machine");
                    self.apply(decisions, now);
                }
            }
            NodeChange::Joined(info) => self.add_node(&info, now),
            NodeChange::Left(node) if known(&node) => {
                LOG.warn(format_args!("node {node} left the cluster"));
                self.absent.insert(node.clone());
                // Before the cancels below, which stay queued: if it comes back, what is left
                // of its lost jobs there is killed, and nothing is started again.
                if let Some(agents) = &self.agents {
                    agents.forget(&node);
                }
                // Jobs with processes there, running or stopped while they wait.
                let stranded: Vec<JobId> = self
                    .current()
                    .filter(|r| !r.status.ended() && r.launched && r.nodes.contains(&node))
                    .map(|r| r.id)
                    .collect();
                // Nothing is placed on its processors until it is back, and none of its
                // jobs is placed elsewhere first.
                let decisions = self
                    .scheduler
                    .withhold_node(self.node_number(&node).expect("known"), &stranded, now)
                    .expect("a node of the machine");
                let taken_out = decisions.iter().filter_map(|d| match d {
                    Decision::Removed { job } => Some(*job),
                    _ => None,
                });
                let lost: BTreeSet<JobId> = stranded.iter().copied().chain(taken_out).collect();
                for job in lost {
                    self.fail(
                        job,
                        &format!("node {node} left the cluster (its agent stopped or lost etcd for longer than its lease)"),
                        now,
                    );
                }
                self.apply(decisions, now);
            }
            NodeChange::Left(_) => {}
        }
    }

    /// A node the machine did not have joined: it becomes the last node of the machine (same
    /// CPU count and mode as the others, else it is refused and left idle) and serves the
    /// waiting jobs at once.
    fn add_node(&mut self, info: &NodeInfo, now: Micros) {
        let refuse = |why: String| {
            LOG.warn(format_args!(
                "node {} joined ({}) but is not used: {why}",
                info.node, info.agent
            ))
        };
        if info.mode != self.settings.mode {
            return refuse(format!(
                "its agent runs in {} mode and this controller in {} mode",
                info.mode, self.settings.mode
            ));
        }
        // Memory fit sizes every node alike (the smallest at start, or the policy's): a
        // smaller one would hold jobs together that do not fit in it.
        if let (Some(size), Some(has)) = (self.scheduler.machine().node_memory(), info.memory_bytes)
        {
            if has < size {
                return refuse(format!(
                    "it has {has} bytes of memory and memory fit takes every node to have \
                     {size}: restart the controller to size the nodes by it"
                ));
            }
        }
        let mut nodes = self.settings.nodes.clone();
        if let Err(error) = nodes.add(info.to_node()) {
            return refuse(error.to_string());
        }
        // Jobs placed while the machine was one node were not pinned to it: they are now,
        // before anything can place them again.
        let placed: Vec<JobId> = self
            .scheduler
            .jobs()
            .filter(|(_, _, state)| matches!(state, cosched_core::JobState::Placed { .. }))
            .map(|(job, _, _)| job)
            .collect();
        for job in placed {
            self.scheduler.pin(job).expect("a placed job");
        }
        let (number, decisions) = match self.scheduler.add_node(now) {
            Ok(added) => added,
            Err(error) => return refuse(error.to_string()),
        };
        self.settings.nodes = nodes;
        LOG.info(format_args!(
            "node {} joined ({}): node {number} of the machine, {} processors now",
            info.node,
            info.agent,
            self.scheduler.machine().procs()
        ));
        self.send_generation_in_force(&[&info.node], now, true);
        self.apply(decisions, now);
    }

    /// Tells `nodes` the generation in force, each its own part: a new one, or `again` to
    /// nodes that had none or lost their orders.
    fn send_generation_in_force(&self, nodes: &[&str], now: Micros, again: bool) {
        if let (Some(generation), Some(agents)) = (&self.generation, &self.agents) {
            let parts = self.on_the_wire(generation, now).parts(nodes);
            let named = nodes.iter().map(|n| n.to_string()).zip(parts).collect();
            agents.publish(named, again);
        }
    }

    /// Node `name`'s number in the core's machine, if it is one of its nodes.
    fn node_number(&self, name: &str) -> Option<u32> {
        let nodes = self.settings.nodes.nodes();
        nodes.iter().position(|n| n.name == name).map(|i| i as u32)
    }

    /// A process of `job` (as uid `uid`) asks for a process of the job on node `host` (an MPI
    /// launcher's remote daemon): the node must be one the job holds, and the asker its owner
    /// (or root). The process is started there with the job's identity and environment; a
    /// refusal reaches the asker as the process's end.
    pub fn process_wanted(
        &mut self,
        job: JobId,
        process: ProcessRef,
        host: &str,
        command: String,
        uid: u32,
    ) {
        let target = self
            .settings
            .nodes
            .nodes()
            .iter()
            .find(|n| n.name == host || n.address.as_deref() == Some(host))
            .map(|n| n.name.clone());
        let checked = (|| {
            let record = self
                .latest(job)
                .filter(|r| r.launched && !r.status.ended())
                .ok_or_else(|| format!("job {job} is not running"))?;
            if uid != 0 && uid != record.owner.uid {
                return Err(format!(
                    "uid {uid} may not add processes to job {job} (owned by uid {})",
                    record.owner.uid
                ));
            }
            let target =
                target.ok_or_else(|| format!("no node of this cluster is known as '{host}'"))?;
            if !record.nodes.contains(&target) {
                return Err(format!(
                    "job {job} holds no processors on node {target} (it has {})",
                    record.nodes.join(", ")
                ));
            }
            if self.absent.contains(&target) {
                return Err(format!("node {target}'s agent left the cluster"));
            }
            let mut launch = self.launch_of(job);
            launch.argv = vec!["/bin/sh".into(), "-c".into(), command];
            Ok((target, launch))
        })();
        match checked {
            Ok((target, launch)) => {
                LOG.info(format_args!(
                    "job {job}: node {} adds a process on node {target} (request {})",
                    process.node, process.request
                ));
                let add = Command::AddProcess {
                    job,
                    process,
                    launch,
                };
                self.send(&target, add.into());
            }
            Err(why) => {
                LOG.warn(format_args!(
                    "job {job}: refused node {}'s request {}: {why}",
                    process.node, process.request
                ));
                self.process_ended(job, process, Ending::refused(why));
            }
        }
    }

    /// Tells the node that asked for a process how it ended (or why it never started).
    pub fn process_ended(&mut self, job: JobId, process: ProcessRef, ending: Ending) {
        let asker = process.node.clone();
        let ended = Command::ProcessEnded {
            job,
            process,
            ending,
        };
        self.send(&asker, ended.into());
    }

    /// Handles an agent's report.
    pub fn handle_event(&mut self, event: Event, now: Micros) {
        match event {
            Event::Ended { job, ending } => self.exited(job, ending, now),
            Event::Lost { job, why } => self.lost(job, &why, now),
            Event::NotStarted { job } => self.not_started(job, now),
            Event::Idle { job } => self.went_idle(job, now),
            Event::Woke { job } => self.woke(job, now),
            Event::Stalled {
                job,
                node,
                since_us,
            } => self.stall_reported(job, node, since_us, now),
            Event::Behaviour {
                job,
                node,
                behaviour,
            } => self.behaviour_reported(job, node, behaviour),
            Event::Trouble { job, what } => LOG.warn(format_args!("job {job}: agent: {what}")),
            Event::Status { status } => self.heard_from(*status, now),
            Event::ProcessWanted {
                job,
                process,
                host,
                command,
                uid,
            } => self.process_wanted(job, process, &host, command, uid),
            Event::ProcessEnded {
                job,
                process,
                ending,
            } => self.process_ended(job, process, ending),
            Event::Joined {
                job,
                pid,
                request,
                refusal,
            } => self.joined(job, pid, request, refusal),
            Event::Used {
                job,
                node,
                cpu_us,
                peak_memory_bytes,
                oom_kills,
            } => self.used(
                job,
                &node,
                accounting::NodeUsage {
                    cpu_us,
                    peak_memory_bytes,
                    oom_kills,
                },
            ),
        }
    }

    /// Launched jobs whose end is not recorded yet.
    pub fn launched_unfinished(&self) -> usize {
        self.current()
            .filter(|r| r.launched && !r.status.ended())
            .count()
    }
}

/// What the harness checks after every step.
#[cfg(test)]
impl Controller {
    /// The controller's own invariants: every record in memory is the store's (memory changes
    /// only once the store has it), the core's matrix is sound (no processor double-booked),
    /// and the jobs waiting for or holding processors are exactly the core's.
    pub(crate) fn audit(&self) -> Result<(), String> {
        for (job, record) in &self.records {
            match self.store.get(*job) {
                Ok(Some(stored)) if stored == *record => {}
                stored => {
                    return Err(format!(
                        "job {job}: memory has {record:?}, the store {stored:?}"
                    ))
                }
            }
        }
        let mut held: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
        for r in self.current().filter(|r| !r.status.ended()) {
            let (jobs, bytes) = held.entry(r.owner.uid).or_default();
            *jobs += 1;
            *bytes += r.submitted_bytes();
        }
        if held != self.held {
            return Err(format!(
                "users hold {held:?}, the tally says {:?}",
                self.held
            ));
        }
        self.scheduler.audit()?;
        let scheduled: BTreeSet<JobId> = self.scheduler.jobs().map(|(job, _, _)| job).collect();
        let waiting: Vec<&JobRecord> = self
            .current()
            .filter(|r| matches!(r.status, JobState::Queued | JobState::Running))
            .collect();
        let strays: Vec<&JobId> = scheduled
            .iter()
            .filter(|job| !waiting.iter().any(|r| r.id == **job))
            .collect();
        // A job being stopped keeps its place until its end is heard, but is outside the core
        // if it was out of the rotation when told (suspended, idle) or the controller
        // restarted since (it cancels it again); a job held for its owner's limits waits
        // outside the core.
        let outside =
            |r: &JobRecord| r.being_stopped() && r.launched || self.limited.contains(&r.id);
        let missing: Vec<JobId> = waiting
            .iter()
            .filter(|r| !outside(r) && !scheduled.contains(&r.id))
            .map(|r| r.id)
            .collect();
        if let Some(job) = self.limited.iter().find(|job| {
            scheduled.contains(job)
                || self
                    .records
                    .get(job)
                    .is_none_or(|r| r.status != JobState::Queued || r.launched)
        }) {
            return Err(format!(
                "job {job} is held for its owner's limits but is not a queued job outside the core"
            ));
        }
        if !strays.is_empty() || !missing.is_empty() {
            return Err(format!(
                "the core holds jobs {strays:?} not queued or running, and not {missing:?}"
            ));
        }
        Ok(())
    }

    pub(crate) fn record_of(&self, job: JobId) -> Option<&JobRecord> {
        self.records.get(&job)
    }
}

/// The second reply of `run` and `wait`.
/// How long the job's current suspension has lasted by `now` (0 if it is not suspended).
fn suspended_for(record: &JobRecord, now: Micros) -> i64 {
    record
        .suspended_since_us
        .map_or(0, |since| (now - since).max(0))
}

fn ended_reply(record: &JobRecord) -> Reply {
    Reply::Ended {
        ok: true,
        job: record.id,
        state: record.status.shown(record.launched),
        exit: record.exit,
        note: record.note.clone(),
    }
}

/// Where an MPI launcher in a job across a cluster's nodes starts its ranks:
/// `COSCHED_HOSTS` (`address:slots,...`, the job's nodes, its launcher's first) and, unless
/// the user set one, Open MPI's default `-host` (so a plain `mpirun -np N prog` spans the
/// job's nodes). Nothing on one machine.
fn tell_mpi_hosts(hosts: &[JobHost], env: &mut Vec<(String, String)>) {
    let addresses: Option<Vec<String>> = hosts
        .iter()
        .map(|h| Some(format!("{}:{}", h.address.as_ref()?, h.slots)))
        .collect();
    let Some(hosts) = addresses.map(|a| a.join(",")) else {
        return;
    };
    env.retain(|(k, _)| k != "COSCHED_HOSTS");
    if !env
        .iter()
        .any(|(k, _)| k == "OMPI_MCA_orte_default_dash_host")
    {
        env.push(("OMPI_MCA_orte_default_dash_host".into(), hosts.clone()));
    }
    env.push(("COSCHED_HOSTS".into(), hosts));
}

/// A job's default name: its program's file name, printable (as a `--name` must be: a control
/// character in a file name broke root's Gantt chart).
fn program_name(argv0: &str) -> String {
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    base.chars()
        .take(cosched_proto::api::MAX_NAME_CHARS)
        .map(|c| {
            if cosched_proto::api::unprintable(c) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// An ended job's line in the log: its end state, then how its process ended and why.
fn ended_line(record: &JobRecord) -> String {
    let mut line = record.status.name().to_string();
    if let Some(exit) = record.exit {
        match (exit.code, exit.signal) {
            (Some(code), _) => line += &format!(", exit code {code}"),
            (None, Some(signal)) => {
                line += &format!(", killed by {}", cosched_proto::signal_name(signal))
            }
            (None, None) => {}
        }
    }
    if let Some(note) = &record.note {
        line += &format!(" ({note})");
    }
    line
}

pub const LOG: cosched_os::Log = cosched_os::Log::new("daemon");

#[cfg(test)]
mod name_tests {
    use super::program_name;

    #[test]
    fn a_default_name_is_printable() {
        assert_eq!(program_name("/tmp/x/\u{1}<\"\u{1b}[31m"), "?<\"?[31m");
        assert_eq!(program_name("/usr/bin/python3"), "python3");
    }
}
