//! The scheduler: an Ousterhout matrix driven by events, returning decisions and plans.
//!
//! Rows (slices) hold their *own* jobs on disjoint processors. After every change each slice is
//! filled, in this order: its own jobs, then alternates (jobs of other slices whose processors
//! are free here, in placement order), then standby jobs. Preempting jobs (express jobs, and
//! interactive jobs for their first stretch) hold their processors in every slice: own jobs there
//! wait. A slice left with no job of its own is dropped.
//!
//! Memory: every placed job (own, preempting or standby, running or frozen) holds its memory
//! on each of its nodes, since a frozen job keeps its pages; a node's placed jobs must fit in
//! its memory together. Alternates add nothing (the job is already resident), so only
//! placements are checked: a search leaves the job no more processors of a node than the
//! node's free memory allows it ([`Room`]).

use crate::job::{Class, JobId, JobRequest, Memory, Micros};
use crate::machine::{Machine, MachineError};
use crate::partition::{NodeShare, Partition, Shape, Span};
use crate::partitioner::{lowest_free, NeverFits, PartitionerKind, ReleaseSearch, RunRule};
use crate::plan::{Plan, PlanEntry, PlanSlice, Role};
use crate::procset::{ProcSet, Released};
use crate::queue::{QueueKey, WaitQueue};
use std::cell::OnceCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

/// How the wait queue is served when its head does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backfill {
    /// Strict order: nothing passes a job that does not fit.
    None,
    /// EASY: later jobs may start if they do not delay the head's reservation. With several
    /// slices, estimates are stretched by the MPL and the head reserves its earliest slice.
    Easy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub partitioner: PartitionerKind,
    /// Most slices (multiprogramming level); 1 is pure space sharing.
    pub mpl: u32,
    /// Run jobs in other slices where their processors are free (multiple tasks).
    pub alternates: bool,
    pub backfill: Backfill,
    /// After a job leaves, move jobs up into earlier slices where their processors are free.
    pub repack: bool,
    /// Interactive jobs preempt batch jobs (run in every slice) until [`Scheduler::settle`]
    /// moves them into a slice of their own: quick answers without starving batch for long.
    pub interactive_preempts: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            partitioner: PartitionerKind::FirstFit,
            mpl: 4,
            alternates: true,
            backfill: Backfill::None,
            repack: false,
            interactive_preempts: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("the multiprogramming level (--mpl) must be at least 1")]
    ZeroMpl,
    #[error("the {partitioner} partitioner needs a mesh machine, not {machine}")]
    PartitionerNeedsMesh {
        partitioner: PartitionerKind,
        machine: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("job {0} is already known")]
    Duplicate(JobId),
    #[error("job {job} can never run: {reason}")]
    NeverFits { job: JobId, reason: NeverFits },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("no job {0}")]
    Unknown(JobId),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no node {node} (the machine has {nodes})")]
pub struct UnknownNode {
    pub node: u32,
    pub nodes: u32,
}

/// Why a queued job waits ([`Scheduler::pending_reason`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pending {
    /// No slice (nor a new one) has the processors it asks for.
    Resources,
    /// Some slice has the processors, but every such place is on nodes short of its memory.
    Memory,
    /// It would fit, but waits its turn: behind the head in strict order, or EASY
    /// backfilling refused it because it could delay the head's reservation.
    Priority,
    /// It needs processors of a node that left (held aside until the node returns).
    Node,
}

impl Pending {
    pub fn name(self) -> &'static str {
        match self {
            Pending::Resources => "resources",
            Pending::Memory => "memory",
            Pending::Priority => "priority",
            Pending::Node => "node",
        }
    }
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a placed job lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Home {
    /// Its own slice, by stable id (slice positions shift when slices are dropped).
    Slice(SliceId),
    /// In every slice, ahead of own jobs on the same processors (express, or interactive for
    /// its first stretch).
    Preempting,
    Standby,
}

pub type SliceId = u64;

/// What a call decided, in order; the caller acts on these (the core never does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Queued {
        job: JobId,
    },
    Placed {
        job: JobId,
        partition: Partition,
        home: Home,
    },
    Removed {
        job: JobId,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    Queued,
    Placed {
        partition: Partition,
        home: Home,
        placed_at: Micros,
    },
}

#[derive(Clone, Debug)]
struct Job {
    request: JobRequest,
    /// Submission order: the queue's tie-break within a class.
    seq: u64,
    state: JobState,
    /// Placement order: the order in which jobs claim alternate cells.
    placed_seq: u64,
    /// An interactive job that has had its preempting stretch and now takes a slice.
    settled: bool,
}

impl Job {
    fn is_preempting(&self) -> bool {
        matches!(
            self.state,
            JobState::Placed {
                home: Home::Preempting,
                ..
            }
        )
    }
}

/// How the plan's rows changed since the caller last asked ([`Scheduler::take_changes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanChanges {
    /// The rows themselves changed (a slice opened or was dropped, a preempting job came or
    /// went, repacking moved own jobs): every row is to be read again.
    All,
    /// Jobs entered or left rows, in this order. Taken as set changes (an entry for a job
    /// already there, or a leave for one not there, changes nothing), they turn the last
    /// plan's rows into this one's.
    Moves(Vec<RowMove>),
}

/// Job `job` entered (`entered`) or left row `row` of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowMove {
    pub job: JobId,
    pub row: usize,
    pub entered: bool,
}

/// The row moves since [`Scheduler::take_changes`], `None` for "every row changed": a caller
/// that never asks (the daemon) stays at `None`, which costs nothing.
#[derive(Clone, Debug, Default)]
struct Journal(Option<Vec<RowMove>>);

impl Journal {
    fn moved(&mut self, job: JobId, row: usize, entered: bool) {
        if let Some(moves) = &mut self.0 {
            moves.push(RowMove { job, row, entered });
        }
    }

    fn all(&mut self) {
        self.0 = None;
    }

    fn take(&mut self) -> PlanChanges {
        self.0
            .replace(Vec::new())
            .map_or(PlanChanges::All, PlanChanges::Moves)
    }
}

#[derive(Clone, Debug)]
struct Slice {
    id: SliceId,
    /// By placement order (the plan's order), so that one leaves without a scan.
    own: BTreeMap<u64, JobId>,
    /// Own jobs by planned end (see [`Scheduler::planned_end`]), with their sizes: EASY's
    /// reservation reads them in this order at every event, so they are kept sorted rather
    /// than sorted each time, and counted without a job lookup each.
    ends: BTreeMap<(Micros, JobId), u32>,
    /// Own jobs' processors plus every preempting job's: where nothing new may be placed.
    taken: ProcSet,
    /// By placement order, the order of the greedy fill.
    alternates: BTreeMap<u64, JobId>,
    /// The alternates' processors (none in `taken`): with `taken`, where no further alternate
    /// may go. Kept apart so that refilling unmarks the old alternates instead of copying
    /// `taken` (a copy of the whole machine, at every event).
    lent: ProcSet,
    standby: Vec<JobId>,
}

impl Slice {
    /// Whether `partition` lies wholly outside `taken` and the alternates.
    fn has_room_for(&self, partition: &Partition) -> bool {
        fits_between(partition, &self.taken, &self.lent)
    }

    /// Makes a placed job one of the slice's own (`seq`: its placement order, `end`: its
    /// planned end).
    fn add_own(&mut self, id: JobId, seq: u64, partition: &Partition, end: Micros) {
        self.own.insert(seq, id);
        self.ends.insert((end, id), partition.size());
        partition.mark(&mut self.taken);
    }

    /// Takes an own job out, all but its processors in `taken` (which a preempting job may
    /// cover too: the caller knows).
    fn remove_own(&mut self, id: JobId, seq: u64, end: Micros) {
        self.own.remove(&seq);
        self.ends.remove(&(end, id));
    }

    /// Takes the standby jobs over `partition` out of the slice, row `row` of the plan (a new
    /// job there outranks them).
    fn drop_standby_over(
        &mut self,
        row: usize,
        partition: &Partition,
        jobs: &BTreeMap<JobId, Job>,
        journal: &mut Journal,
    ) {
        self.standby.retain(|&s| {
            let over = job_partition(jobs, s).overlaps(partition);
            if over {
                journal.moved(s, row, false);
            }
            !over
        });
    }
}

/// A partition word by word (see [`Partition::word_masks`]), computed once when its job is
/// placed: a refill tests and marks scattered partitions a word at a time, not a run at a time.
type Words = Arc<[(usize, u64)]>;

/// Whether none of `words` is in `set`.
fn words_clear_in(words: &[(usize, u64)], set: &ProcSet) -> bool {
    words.iter().all(|&(word, bits)| set.word(word) & bits == 0)
}

/// A job with a slice of its own, as the alternate fill reads it.
#[derive(Clone, Debug)]
struct PlacedJob {
    id: JobId,
    partition: Partition,
    words: Words,
}

/// The placed jobs of slices (by placement order) with processors in each word of 64
/// processors, with their bits there: a refill finds the jobs over the processors that changed
/// without walking every placed job.
#[derive(Clone, Debug, Default)]
struct Coverage(Vec<Vec<(u64, u64)>>);

impl Coverage {
    fn add(&mut self, seq: u64, words: &[(usize, u64)]) {
        for &(word, bits) in words {
            if word >= self.0.len() {
                self.0.resize_with(word + 1, Vec::new);
            }
            self.0[word].push((seq, bits));
        }
    }

    fn remove(&mut self, seq: u64, words: &[(usize, u64)]) {
        for &(word, _) in words {
            let jobs = &mut self.0[word];
            let at = jobs.iter().position(|&(j, _)| j == seq);
            jobs.swap_remove(at.expect("a placed job is listed in every word it touches"));
        }
    }

    /// The jobs with a processor in `region` and in `within` (`None`: anywhere), once per
    /// word they share with both.
    fn over<'a>(
        &'a self,
        region: &'a [(usize, u64)],
        within: Option<&'a ProcSet>,
    ) -> impl Iterator<Item = u64> + 'a {
        region.iter().flat_map(move |&(word, bits)| {
            let mask = bits & within.map_or(u64::MAX, |w| w.word(word));
            let jobs = if mask == 0 {
                &[][..]
            } else {
                self.0.get(word).map_or(&[][..], Vec::as_slice)
            };
            jobs.iter()
                .filter(move |&&(_, bits)| bits & mask != 0)
                .map(|&(seq, _)| seq)
        })
    }
}

/// Whether `partition` misses both `taken` and `lent` (disjoint sets).
fn fits_between(partition: &Partition, taken: &ProcSet, lent: &ProcSet) -> bool {
    partition.size() <= taken.free() - lent.count()
        && partition.is_clear_in(taken)
        && partition.is_clear_in(lent)
}

#[derive(Clone, Debug)]
pub struct Scheduler {
    machine: Machine,
    config: Config,
    jobs: BTreeMap<JobId, Job>,
    queue: WaitQueue,
    slices: Vec<Slice>,
    /// Placed jobs with a slice of their own, by placement order (candidates for alternates),
    /// with their partitions: refilling a slice from scratch reads every one, without a
    /// lookup each.
    placed: BTreeMap<u64, PlacedJob>,
    /// Where the jobs of `placed` are.
    coverage: Coverage,
    /// Jobs in every slice, by placement order.
    preempting: BTreeMap<u64, JobId>,
    preempting_procs: ProcSet,
    standby: BTreeMap<u64, JobId>,
    standby_procs: ProcSet,
    /// Processors of nodes that left: every search counts them busy, so nothing is placed
    /// there until they are restored.
    withheld: ProcSet,
    /// Bytes of memory the placed jobs hold on each node, whatever their home; kept with or
    /// without node memory declared, so a caller can see what sharing would cost.
    memory_used: Vec<u64>,
    /// Jobs out of the matrix whose processes keep their pages (suspended, idle, queued again,
    /// being stopped), with the bytes they hold on each node: counted in `memory_used` until
    /// they are placed again or leave, and free for their own placement.
    resident: BTreeMap<JobId, Vec<(u32, u64)>>,
    /// Waiting jobs that cannot run on the nodes present (they need withheld processors),
    /// kept out of the queue so that they hold up no one behind them; back in the queue when
    /// a node returns or joins.
    held: BTreeSet<QueueKey>,
    next_seq: u64,
    next_slice: SliceId,
    /// Counts changes to any slice's own jobs or occupancy: a reservation computed at one
    /// count holds while the count stays.
    matrix_changes: u64,
    /// The last EASY reservation, reused while nothing it depends on has changed (an arrival
    /// that starts nothing leaves it as it was: half the events of a loaded trace).
    reservation_memo: Option<ReservationMemo>,
    /// Whose rows changed, for a caller that follows the plan by its changes (the simulator).
    journal: Journal,
}

impl Scheduler {
    pub fn new(machine: Machine, config: Config) -> Result<Self, ConfigError> {
        if config.mpl == 0 {
            return Err(ConfigError::ZeroMpl);
        }
        let is_mesh = matches!(machine.topology(), crate::machine::Topology::Mesh { .. });
        if config.partitioner.is_2d() && !is_mesh {
            return Err(ConfigError::PartitionerNeedsMesh {
                partitioner: config.partitioner,
                machine: machine.to_string(),
            });
        }
        let procs = machine.procs();
        let nodes = machine.nodes() as usize;
        Ok(Scheduler {
            machine,
            config,
            jobs: BTreeMap::new(),
            queue: WaitQueue::default(),
            slices: Vec::new(),
            placed: BTreeMap::new(),
            coverage: Coverage::default(),
            preempting: BTreeMap::new(),
            preempting_procs: ProcSet::new(procs),
            standby: BTreeMap::new(),
            standby_procs: ProcSet::new(procs),
            withheld: ProcSet::new(procs),
            memory_used: vec![0; nodes],
            resident: BTreeMap::new(),
            held: BTreeSet::new(),
            next_seq: 0,
            next_slice: 0,
            matrix_changes: 0,
            reservation_memo: None,
            journal: Journal::default(),
        })
    }

    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn state(&self, job: JobId) -> Option<&JobState> {
        self.jobs.get(&job).map(|j| &j.state)
    }

    /// Every job the scheduler holds, queued or placed, by id.
    pub fn jobs(&self) -> impl Iterator<Item = (JobId, Class, &JobState)> + '_ {
        self.jobs
            .iter()
            .map(|(&id, job)| (id, job.request.class, &job.state))
    }

    pub fn shape(&self, job: JobId) -> Option<Shape> {
        self.jobs.get(&job).map(|j| j.request.shape.clone())
    }

    pub fn class(&self, job: JobId) -> Option<Class> {
        self.jobs.get(&job).map(|j| j.request.class)
    }

    /// Waiting jobs in the order they will be considered, then those held aside until a node
    /// returns (they need its processors).
    pub fn queued(&self) -> impl Iterator<Item = JobId> + '_ {
        let held = self.held.iter().copied();
        self.queue.iter().chain(held).map(|(_, _, id)| id)
    }

    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    pub fn slice_count(&self) -> usize {
        self.slices.len()
    }

    /// Bytes of memory the placed jobs hold on each node, by node number.
    pub fn memory_used(&self) -> &[u64] {
        &self.memory_used
    }

    /// Why a queued job waits (`None`: not queued). It costs a search per slice, as a
    /// submission does, not a scheduling pass: cheap enough to ask for every queued job.
    pub fn pending_reason(&self, job: JobId) -> Option<Pending> {
        let entry = self.jobs.get(&job)?;
        if !matches!(entry.state, JobState::Queued) {
            return None;
        }
        if self.held.contains(&(entry.request.class, entry.seq, job)) {
            return Some(Pending::Node);
        }
        let shape = &entry.request.shape;
        let fits = |room: Option<&Room>| match entry.request.class {
            Class::Express => self.find(&self.preempting_procs, shape, room).is_some(),
            Class::Interactive | Class::Batch => {
                let preempts = self.config.interactive_preempts
                    && entry.request.class == Class::Interactive
                    && !entry.settled;
                preempts && self.find(&self.preempting_procs, shape, room).is_some()
                    || self.find_own(shape, room).is_some()
            }
            Class::Standby => self.find_standby(shape, room).is_some(),
        };
        if !fits(None) {
            return Some(Pending::Resources);
        }
        match self.room_now(&entry.request) {
            Some(room) if !fits(Some(&room)) => Some(Pending::Memory),
            _ => Some(Pending::Priority),
        }
    }

    /// Checks a request without changing anything: `Err` if it can never run here.
    pub fn check(&self, request: &JobRequest) -> Result<(), SubmitError> {
        if self.jobs.contains_key(&request.id) {
            return Err(SubmitError::Duplicate(request.id));
        }
        let never = |reason| SubmitError::NeverFits {
            job: request.id,
            reason,
        };
        let partitioner = self.config.partitioner;
        partitioner
            .check(&self.machine, &request.shape)
            .map_err(never)?;
        // Where memory lets it go on the empty machine.
        let (Some(per_node), Some(memory)) = (self.machine.node_memory(), request.needs_memory())
        else {
            return Ok(());
        };
        let Some(room) = self.room(request, |_| per_node) else {
            return Ok(());
        };
        let mut usable = ProcSet::new(self.machine.procs());
        self.keep_room(&mut usable, &room);
        match partitioner.find(&self.machine, &usable, &request.shape) {
            Some(_) => Ok(()),
            None => Err(never(NeverFits::TooMuchMemory {
                shape: request.shape.clone(),
                memory,
                per_node,
            })),
        }
    }

    /// A new job arrives at `now`: it is placed at once if it fits, else queued.
    pub fn submit(
        &mut self,
        request: JobRequest,
        now: Micros,
    ) -> Result<Vec<Decision>, SubmitError> {
        self.check(&request)?;
        // A job whose processes hold memory out of the matrix (resumed, awake again) goes
        // ahead of its class: a job behind it waiting for that memory would otherwise wait
        // for ever, and it for that job.
        let seq = if self.resident.contains_key(&request.id) {
            0
        } else {
            self.next_seq += 1;
            self.next_seq - 1
        };
        self.wait((request.class, seq, request.id), &request.shape);
        let id = request.id;
        let request_settled = request.settled;
        self.jobs.insert(
            id,
            Job {
                request,
                seq,
                state: JobState::Queued,
                placed_seq: 0,
                settled: request_settled,
            },
        );
        let mut decisions = Vec::new();
        self.schedule(now, &mut decisions);
        if matches!(self.jobs[&id].state, JobState::Queued) {
            decisions.insert(0, Decision::Queued { job: id });
        }
        Ok(decisions)
    }

    /// A job ends (finished, cancelled or killed) at `now`; waiting jobs may take its place.
    pub fn remove(&mut self, job: JobId, now: Micros) -> Result<Vec<Decision>, JobError> {
        let removed = self.jobs.remove(&job).ok_or(JobError::Unknown(job))?;
        self.unplace(&removed);
        self.drop_hold(job);
        let mut decisions = vec![Decision::Removed { job }];
        self.schedule(now, &mut decisions);
        Ok(decisions)
    }

    /// A job leaves the matrix and the queue but its processes stay, keeping their pages
    /// (suspended, idle, being stopped): its memory stays held on its nodes until it is
    /// submitted and placed again, or [`Scheduler::release_memory`].
    pub fn remove_resident(&mut self, job: JobId, now: Micros) -> Result<Vec<Decision>, JobError> {
        let removed = self.jobs.remove(&job).ok_or(JobError::Unknown(job))?;
        self.unplace_resident(&removed);
        let mut decisions = vec![Decision::Removed { job }];
        self.schedule(now, &mut decisions);
        Ok(decisions)
    }

    /// Holds `memory` on the nodes of `shares` for a job out of the matrix whose processes
    /// exist (a restarted caller taking back a suspended job).
    pub fn hold_memory(&mut self, job: JobId, shares: &[NodeShare], memory: Memory) {
        let nodes = self.memory_used.len() as u32;
        let held = shares
            .iter()
            .filter(|share| share.node < nodes)
            .map(|share| (share.node, memory.on_node(share.procs)))
            .collect();
        self.add_hold(job, held);
        self.matrix_changes += 1;
    }

    /// The held memory of a job out of the matrix is free again (its processes are gone);
    /// waiting jobs may take it.
    pub fn release_memory(&mut self, job: JobId, now: Micros) -> Vec<Decision> {
        let mut decisions = Vec::new();
        if self.drop_hold(job) {
            self.matrix_changes += 1;
            self.schedule(now, &mut decisions);
        }
        decisions
    }

    fn add_hold(&mut self, job: JobId, held: Vec<(u32, u64)>) {
        self.drop_hold(job);
        for &(node, bytes) in &held {
            let used = &mut self.memory_used[node as usize];
            *used = used.saturating_add(bytes);
        }
        self.resident.insert(job, held);
    }

    /// Whether `job` held memory out of the matrix (now given back).
    fn drop_hold(&mut self, job: JobId) -> bool {
        let Some(held) = self.resident.remove(&job) else {
            return false;
        };
        for (node, bytes) in held {
            let used = &mut self.memory_used[node as usize];
            *used = used.saturating_sub(bytes);
        }
        true
    }

    /// What `job` holds on `node` out of the matrix: free for its own placement.
    fn own_hold(&self, job: JobId, node: u32) -> u64 {
        self.resident.get(&job).map_or(0, |held| {
            held.iter()
                .filter(|&&(n, _)| n == node)
                .map(|&(_, bytes)| bytes)
                .sum()
        })
    }

    /// [`Scheduler::unplace`], its memory kept as a hold where it was placed.
    fn unplace_resident(&mut self, job: &Job) {
        if let (JobState::Placed { partition, .. }, Some(memory)) =
            (&job.state, job.request.needs_memory())
        {
            let held = held_on_nodes(&self.machine, partition, memory).collect();
            self.add_hold(job.request.id, held);
        }
        self.unplace(job);
    }

    /// Changes a job's class. A queued job moves in the queue; a placed job that changes layer
    /// (into or out of the preempting layer, to or from standby) is placed again; a job in a
    /// slice that turns interactive or batch stays where it is.
    pub fn set_class(
        &mut self,
        job: JobId,
        class: Class,
        now: Micros,
    ) -> Result<Vec<Decision>, JobError> {
        let entry = self.jobs.get(&job).ok_or(JobError::Unknown(job))?;
        let old = entry.request.class;
        let layer = |c: Class| match c {
            Class::Express => 0,
            Class::Interactive | Class::Batch => 1,
            Class::Standby => 2,
        };
        let preempting = entry.is_preempting();
        let replace = matches!(entry.state, JobState::Queued)
            || layer(old) != layer(class)
            || (preempting && class != Class::Express);
        if !replace {
            self.jobs
                .get_mut(&job)
                .expect("looked up above")
                .request
                .class = class;
            return Ok(Vec::new());
        }
        Ok(self.requeue(job, now, |moved| {
            moved.request.class = class;
            // Lowered out of the preempting layer: it does not come straight back in.
            moved.settled |= preempting;
        }))
    }

    /// Takes a known job out of wherever it is, changes it, and serves the queue again. A job
    /// that was placed and now waits gets a `Queued` decision: its processes must stop.
    fn requeue(&mut self, job: JobId, now: Micros, change: impl FnOnce(&mut Job)) -> Vec<Decision> {
        let mut moved = self.jobs.remove(&job).expect("a known job");
        let was_placed = matches!(moved.state, JobState::Placed { .. });
        // Its processes stop but keep their pages: their memory stays held, and the job goes
        // ahead of its class, as a resident job does on submission (else a job ahead of it
        // could wait for that memory while it waits for its turn).
        self.unplace_resident(&moved);
        if self.resident.contains_key(&job) {
            moved.seq = 0;
        }
        change(&mut moved);
        self.back_in_line(moved);
        let mut decisions = Vec::new();
        self.schedule(now, &mut decisions);
        if was_placed && matches!(self.jobs[&job].state, JobState::Queued) {
            decisions.push(Decision::Queued { job });
        }
        decisions
    }

    /// Puts a job taken out of the matrix (and unplaced) back in the queue, by its class and
    /// submission order; returns its key.
    fn back_in_line(&mut self, mut job: Job) -> QueueKey {
        job.state = JobState::Queued;
        let key = (job.request.class, job.seq, job.request.id);
        self.wait(key, &job.request.shape);
        self.jobs.insert(job.request.id, job);
        key
    }

    /// The placed job `job` can no longer change nodes (its processes live there now):
    /// wherever it is placed again it keeps as many processors on each of its nodes as it
    /// holds now (`Shape::OnNodes`). A waiting job is left as it is.
    pub fn pin(&mut self, job: JobId) -> Result<(), JobError> {
        let entry = self.jobs.get_mut(&job).ok_or(JobError::Unknown(job))?;
        let JobState::Placed { partition, .. } = &entry.state else {
            return Ok(());
        };
        let mut shares: Vec<NodeShare> = Vec::new();
        for proc in partition.processors() {
            let node = self.machine.node_of(proc);
            match shares.last_mut() {
                Some(share) if share.node == node => share.procs += 1,
                _ => shares.push(NodeShare { node, procs: 1 }),
            }
        }
        entry.request.shape = Shape::OnNodes(shares.into());
        Ok(())
    }

    /// Node `node` left: its processors are withheld from every slice until
    /// [`Scheduler::restore_node`], and the jobs placed on any of them are taken out, with the
    /// known jobs of `lost` (jobs whose processes were there while they waited, which the
    /// core does not place): `Removed` each, their fate is the caller's. Then the waiting jobs
    /// are served on what is left: one step, so no job of the node is placed anywhere first.
    pub fn withhold_node(
        &mut self,
        node: u32,
        lost: &[JobId],
        now: Micros,
    ) -> Result<Vec<Decision>, UnknownNode> {
        let span = self.node_span(node)?;
        self.withheld.insert_span(span);
        self.matrix_changes += 1;
        let hit: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|&(id, job)| {
                lost.contains(id)
                    || matches!(&job.state, JobState::Placed { partition, .. } if partition.processors_in(span) > 0)
            })
            .map(|(&id, _)| id)
            .collect();
        let mut decisions = Vec::new();
        for job in hit {
            let removed = self.jobs.remove(&job).expect("listed above");
            self.unplace(&removed);
            decisions.push(Decision::Removed { job });
        }
        let waiting: Vec<QueueKey> = self.queue.iter().collect();
        for key in waiting {
            if !self.fits_present(&self.jobs[&key.2].request.shape) {
                self.queue.remove(&key);
                self.held.insert(key);
            }
        }
        self.schedule(now, &mut decisions);
        Ok(decisions)
    }

    /// Files a waiting job: in the queue, or held aside if it cannot run on the nodes present.
    fn wait(&mut self, key: QueueKey, shape: &Shape) {
        if self.fits_present(shape) {
            self.queue.insert(key, filed_size(shape));
        } else {
            self.held.insert(key);
        }
    }

    /// Whether `shape` could be placed on the nodes present were nothing running.
    fn fits_present(&self, shape: &Shape) -> bool {
        self.withheld.is_empty()
            || self
                .find(&ProcSet::new(self.machine.procs()), shape, None)
                .is_some()
    }

    /// After a node returned or joined: the held jobs are filed again, then served.
    fn release_held(&mut self, now: Micros) -> Vec<Decision> {
        for key in std::mem::take(&mut self.held) {
            let shape = self.jobs[&key.2].request.shape.clone();
            self.wait(key, &shape);
        }
        let mut decisions = Vec::new();
        self.schedule(now, &mut decisions);
        decisions
    }

    /// A node joined: the machine grows by one node of the same size (numbered after the
    /// others), and waiting jobs are served on it. Returns its number and the decisions.
    pub fn add_node(&mut self, now: Micros) -> Result<(u32, Vec<Decision>), MachineError> {
        self.machine = self.machine.with_another_node()?;
        let procs = self.machine.procs();
        for slice in &mut self.slices {
            slice.taken.grow(procs);
            slice.lent.grow(procs);
        }
        for set in [
            &mut self.preempting_procs,
            &mut self.standby_procs,
            &mut self.withheld,
        ] {
            set.grow(procs);
        }
        self.memory_used.push(0);
        self.matrix_changes += 1;
        Ok((self.machine.nodes() - 1, self.release_held(now)))
    }

    /// Node `node` is back: its processors serve waiting jobs again.
    pub fn restore_node(&mut self, node: u32, now: Micros) -> Result<Vec<Decision>, UnknownNode> {
        let span = self.node_span(node)?;
        self.withheld.remove_span(span);
        self.matrix_changes += 1;
        Ok(self.release_held(now))
    }

    fn node_span(&self, node: u32) -> Result<Span, UnknownNode> {
        let nodes = self.machine.nodes();
        if node >= nodes {
            return Err(UnknownNode { node, nodes });
        }
        Ok(self.machine.node_span(node))
    }

    /// Interactive jobs that have preempted since `before` or earlier: the caller's policy
    /// decides how long a stretch is and calls [`Scheduler::settle`] on these.
    pub fn preempting_since(&self, before: Micros) -> Vec<JobId> {
        self.preempting
            .values()
            .copied()
            .filter(|id| {
                let job = &self.jobs[id];
                job.request.class == Class::Interactive
                    && matches!(job.state, JobState::Placed { placed_at, .. } if placed_at <= before)
            })
            .collect()
    }

    /// Ends an interactive job's preempting stretch: it takes a slice of its own like a batch
    /// job (or waits in the line, stopped, if none has room). Other jobs do nothing.
    pub fn settle(&mut self, job: JobId, now: Micros) -> Result<Vec<Decision>, JobError> {
        let entry = self.jobs.get(&job).ok_or(JobError::Unknown(job))?;
        if !entry.is_preempting() || entry.request.class != Class::Interactive {
            return Ok(Vec::new());
        }
        Ok(self.requeue(job, now, |moved| moved.settled = true))
    }

    /// The matrix as it stands: every slice with the jobs that run in it.
    pub fn plan(&self) -> Plan {
        let slices = self
            .rows(|id, role| self.entry(id, role))
            .into_iter()
            .map(|entries| PlanSlice { entries })
            .collect();
        Plan { slices }
    }

    /// The jobs of each slice of [`Scheduler::plan`], in the same order, without partitions
    /// or roles: what the simulator needs at every event.
    pub fn plan_jobs(&self) -> Vec<Vec<JobId>> {
        self.rows(|id, _| id)
    }

    /// How many rows [`Scheduler::plan`] has.
    pub fn row_count(&self) -> usize {
        let lone_row = !self.preempting.is_empty() || !self.standby.is_empty();
        self.slices.len().max(usize::from(lone_row))
    }

    /// Which rows changed since the last call (the first call: all).
    pub fn take_changes(&mut self) -> PlanChanges {
        self.journal.take()
    }

    /// Every slice as a row of `entry(job, role)`: preempting jobs, then the slice's own jobs
    /// (those no preempting job covers), alternates and standby jobs. With no slice, the
    /// preempting and standby jobs make one row.
    fn rows<T: Clone>(&self, entry: impl Fn(JobId, Role) -> T) -> Vec<Vec<T>> {
        let preempting: Vec<T> = self
            .preempting
            .values()
            .map(|&id| entry(id, Role::Preempting))
            .collect();
        let nothing_preempts = self.preempting_procs.is_empty();
        let mut rows: Vec<Vec<T>> = self
            .slices
            .iter()
            .map(|slice| {
                let mut row = Vec::with_capacity(
                    preempting.len()
                        + slice.own.len()
                        + slice.alternates.len()
                        + slice.standby.len(),
                );
                row.extend_from_slice(&preempting);
                row.extend(
                    slice
                        .own
                        .values()
                        .filter(|&&id| {
                            nothing_preempts
                                || self.partition(id).is_clear_in(&self.preempting_procs)
                        })
                        .map(|&id| entry(id, Role::Own)),
                );
                row.extend(
                    slice
                        .alternates
                        .values()
                        .map(|&id| entry(id, Role::Alternate)),
                );
                row.extend(slice.standby.iter().map(|&id| entry(id, Role::Standby)));
                row
            })
            .collect();
        if rows.is_empty() && (!self.preempting.is_empty() || !self.standby.is_empty()) {
            let mut row = preempting;
            row.extend(
                self.standby
                    .values()
                    .filter(|&&id| self.partition(id).is_clear_in(&self.preempting_procs))
                    .map(|&id| entry(id, Role::Standby)),
            );
            rows.push(row);
        }
        rows
    }

    fn entry(&self, job: JobId, role: Role) -> PlanEntry {
        PlanEntry {
            job,
            partition: self.partition(job).clone(),
            role,
        }
    }

    fn partition(&self, job: JobId) -> &Partition {
        job_partition(&self.jobs, job)
    }

    fn slice_index(&self, id: SliceId) -> usize {
        self.slices
            .iter()
            .position(|s| s.id == id)
            .expect("a placed job's slice exists")
    }

    /// Serves the queue in order: express, interactive, batch (one strict line, or EASY), then
    /// standby. An interactive job that may preempt goes into the preempting layer when its
    /// processors are free of other preempting jobs, else into the line like batch. Each layer
    /// stops at its first job that does not fit, so a call costs the jobs it places plus one,
    /// not the length of the queue (EASY scans the line, as it must).
    fn schedule(&mut self, now: Micros, decisions: &mut Vec<Decision>) {
        loop {
            let holds = self.resident.len();
            self.place_express(now, decisions);
            while self.place_normal(now, decisions) && self.express_waits_on_memory() {
                // Memory caps the express head's share of a node, and the search keeps the
                // lowest free processors there: a job that just took some to preempt may
                // have left a run the head fits in.
                self.place_express(now, decisions);
            }
            self.place_standby(now, decisions);
            let moved = self.move_covered_standby(now, decisions);
            // A job placed away from the nodes it held memory on (requeued, resumed, a
            // standby job moved) freed that memory for the layers served before it.
            if !moved && self.resident.len() == holds {
                break;
            }
        }
    }

    /// A standby job whose processors jobs of every slice have taken runs in no slot at all:
    /// it moves to processors some slice leaves free, if any (a running job's processes are
    /// pinned again; in a cluster a started job keeps its nodes, `pin`).
    fn move_covered_standby(&mut self, now: Micros, decisions: &mut Vec<Decision>) -> bool {
        if self.slices.is_empty() {
            return false;
        }
        let covered: Vec<JobId> = (self.standby.values().copied())
            .filter(|id| !self.slices.iter().any(|slice| slice.standby.contains(id)))
            .collect();
        let mut moved_any = false;
        for id in covered {
            let job = &self.jobs[&id];
            let mut others = self.standby_procs.clone();
            job_partition(&self.jobs, id).unmark(&mut others);
            // Its own memory counts as taken here: a move within a node short of memory is
            // missed, never one that would overcommit.
            let room = self.room_now(&job.request);
            let Some(partition) =
                self.find_standby_beside(&others, &job.request.shape, room.as_ref())
            else {
                continue;
            };
            let moved = self.jobs.remove(&id).expect("standby jobs are known");
            self.unplace(&moved);
            let key = self.back_in_line(moved);
            self.commit(key, partition, Home::Standby, now, decisions);
            moved_any = true;
        }
        moved_any
    }

    fn place_standby(&mut self, now: Micros, decisions: &mut Vec<Decision>) {
        while let Some(key) = self.first_waiting(Class::Standby, None) {
            let request = &self.jobs[&key.2].request;
            let room = self.room_now(request);
            let Some(partition) = self.find_standby(&request.shape, room.as_ref()) else {
                break;
            };
            self.commit(key, partition, Home::Standby, now, decisions);
        }
    }

    fn express_waits_on_memory(&self) -> bool {
        self.first_waiting(Class::Express, Some(Class::Interactive))
            .is_some_and(|key| self.memory_may_refuse(&self.jobs[&key.2].request))
    }

    /// Places express jobs in order while the head fits beside the preempting jobs.
    fn place_express(&mut self, now: Micros, decisions: &mut Vec<Decision>) {
        while let Some(key) = self.first_waiting(Class::Express, Some(Class::Interactive)) {
            let request = &self.jobs[&key.2].request;
            let room = self.room_now(request);
            let found = self.find(&self.preempting_procs, &request.shape, room.as_ref());
            let Some(partition) = found else {
                break;
            };
            self.commit(key, partition, Home::Preempting, now, decisions);
        }
    }

    /// Places interactive and batch jobs in order, then backfills behind a head that does
    /// not fit; true if any job was placed to preempt.
    fn place_normal(&mut self, now: Micros, decisions: &mut Vec<Decision>) -> bool {
        let mut preempted = false;
        while let Some(key) = self.first_waiting(Class::Interactive, Some(Class::Standby)) {
            let job = &self.jobs[&key.2];
            let shape = &job.request.shape;
            let room = self.room_now(&job.request);
            let preempts = self.config.interactive_preempts
                && job.request.class == Class::Interactive
                && !job.settled;
            if let Some(partition) = preempts
                .then(|| self.find(&self.preempting_procs, shape, room.as_ref()))
                .flatten()
            {
                self.commit(key, partition, Home::Preempting, now, decisions);
                preempted = true;
                continue;
            }
            if let Some((partition, home)) = self.find_own(shape, room.as_ref()) {
                self.commit(key, partition, home, now, decisions);
                continue;
            }
            // No job behind the head small enough for any slice's free processors (or a new
            // slice's, where the MPL allows one the head cannot take: memory): nothing to
            // backfill, and no reservation to compute.
            let partitioner = self.config.partitioner;
            let room = self
                .slices
                .iter()
                .map(|s| partitioner.room(&s.taken))
                .chain(self.new_slice_room())
                .max();
            let candidate =
                room.and_then(|room| self.queue.next_smaller(key, Class::Standby, room));
            if candidate.is_none() {
                break;
            }
            if let Some(mut memo) = self.reservation(key.2, now) {
                self.backfill(key, &mut memo, now, decisions);
                if memo.matrix_changes == self.matrix_changes {
                    self.reservation_memo = Some(memo);
                } else if self.memory_may_refuse(&self.jobs[&key.2].request) {
                    // Jobs started, taking processors, which never lets the head in, but
                    // where memory caps its share of a node the search keeps the lowest free
                    // processors there, and a started job may have taken one: try again.
                    continue;
                }
            }
            break;
        }
        preempted
    }

    /// The room a new slice would offer, when the MPL allows one.
    fn new_slice_room(&self) -> Option<u64> {
        (self.slices.len() < self.config.mpl as usize)
            .then(|| self.config.partitioner.room(&self.preempting_procs))
    }

    /// The first waiting job of the classes from `from` up to (not including) `until`.
    fn first_waiting(&self, from: Class, until: Option<Class>) -> Option<QueueKey> {
        self.queue.first(from, until)
    }

    fn commit(
        &mut self,
        key: QueueKey,
        partition: Partition,
        home: Home,
        now: Micros,
        decisions: &mut Vec<Decision>,
    ) {
        self.queue.remove(&key);
        self.place(key.2, partition.clone(), home, now);
        decisions.push(Decision::Placed {
            job: key.2,
            partition,
            home,
        });
    }

    /// Where the partitioner puts `shape` with `busy` taken, skipping the withheld
    /// processors and what `room` keeps the job from (see [`Scheduler::room`]).
    fn find(&self, busy: &ProcSet, shape: &Shape, room: Option<&Room>) -> Option<Partition> {
        #[cfg(test)]
        tests::FINDS.with(|finds| finds.set(finds.get() + 1));
        if self.withheld.is_empty() && room.is_none() {
            return self.config.partitioner.find(&self.machine, busy, shape);
        }
        let mut usable = busy.clone();
        usable.union_with(&self.withheld);
        if let Some(room) = room {
            self.keep_room(&mut usable, room);
        }
        self.config.partitioner.find(&self.machine, &usable, shape)
    }

    /// The nodes where memory leaves `request` fewer processors than a node has, with how
    /// many it may take there, `free(node)` bytes being left on each (`None`: no such node,
    /// the job needs no memory, or the machine declares none).
    fn room(&self, request: &JobRequest, free: impl Fn(u32) -> u64) -> Option<Room> {
        self.machine.node_memory()?;
        let memory = request.needs_memory()?;
        let per_node = self.machine.cpus_per_node();
        let room: Room = (0..self.machine.nodes())
            .filter_map(|node| {
                // What it holds out of the matrix is its own to use.
                let free = free(node).saturating_add(self.own_hold(request.id, node));
                let procs = memory.procs_within(free);
                (procs < per_node).then_some((node, procs))
            })
            .collect();
        (!room.is_empty()).then_some(room)
    }

    /// [`Scheduler::room`] with the memory placed now.
    fn room_now(&self, request: &JobRequest) -> Option<Room> {
        self.room(request, |node| self.free_memory(&self.memory_used, node))
    }

    /// Bytes left on `node` with `used` placed on each node.
    fn free_memory(&self, used: &[u64], node: u32) -> u64 {
        let capacity = self.machine.node_memory().unwrap_or(u64::MAX);
        capacity.saturating_sub(used[node as usize])
    }

    /// Marks in `usable` (a search's busy processors) what `room` keeps the job from: on each
    /// node it names, the free processors beyond the number allowed there, keeping the
    /// lowest. Exact for scatter, which takes the lowest; a contiguous partitioner may miss a
    /// run that higher ones would make, the price of one search rather than one per choice.
    /// Spans are marked in one pass: block summaries are measured once, not once per node.
    fn keep_room(&self, usable: &mut ProcSet, room: &Room) {
        let mut spans: Vec<Span> = Vec::new();
        let mut bar = |span: Span| match spans.last_mut() {
            Some(last) if last.end() == span.start => last.len += span.len,
            _ => spans.push(span),
        };
        for &(node, procs) in room {
            let span = self.machine.node_span(node);
            if procs == 0 {
                bar(span);
                continue;
            }
            let mut keep = procs;
            for proc in span.start..span.end() {
                if usable.contains(proc) {
                    continue;
                }
                match keep {
                    0 => bar(Span::new(proc, 1)),
                    _ => keep -= 1,
                }
            }
        }
        if !spans.is_empty() {
            usable.insert_spans(&spans);
        }
    }

    /// Adds (`placed`) or takes back a placed job's memory on the nodes under `partition`.
    /// Sums saturate: only absurd requests on a machine without node memory reach 2^64.
    fn charge(&mut self, partition: &Partition, memory: Option<Memory>, placed: bool) {
        let Some(memory) = memory else {
            return;
        };
        for (node, bytes) in held_on_nodes(&self.machine, partition, memory) {
            let held = &mut self.memory_used[node as usize];
            *held = if placed {
                held.saturating_add(bytes)
            } else {
                held.saturating_sub(bytes)
            };
        }
    }

    /// The first slice where the job fits on its own, else a new slice if the MPL allows.
    /// `Home::Slice(next_slice)` stands for "a new slice".
    fn find_own(&self, shape: &Shape, room: Option<&Room>) -> Option<(Partition, Home)> {
        self.slices
            .iter()
            .find_map(|s| {
                self.find(&s.taken, shape, room)
                    .map(|p| (p, Home::Slice(s.id)))
            })
            .or_else(|| {
                (self.slices.len() < self.config.mpl as usize)
                    .then(|| self.find(&self.preempting_procs, shape, room))
                    .flatten()
                    .map(|p| (p, Home::Slice(self.next_slice)))
            })
    }

    fn find_standby(&self, shape: &Shape, room: Option<&Room>) -> Option<Partition> {
        self.find_standby_beside(&self.standby_procs, shape, room)
    }

    /// [`Scheduler::find_standby`] with `standby_procs` as the other standby jobs' processors.
    fn find_standby_beside(
        &self,
        standby_procs: &ProcSet,
        shape: &Shape,
        room: Option<&Room>,
    ) -> Option<Partition> {
        let free_of = |busy: &ProcSet, lent: Option<&ProcSet>| {
            let mut map = busy.clone();
            map.union_with(standby_procs);
            if let Some(lent) = lent {
                map.union_with(lent);
            }
            self.find(&map, shape, room)
        };
        if self.slices.is_empty() {
            return free_of(&self.preempting_procs, None);
        }
        self.slices
            .iter()
            .find_map(|s| free_of(&s.taken, Some(&s.lent)))
    }

    /// A job's estimated wall time in the matrix: a job gets at least one slot in `mpl`, so its
    /// estimate stretched by the MPL bounds its end (exact for space sharing, MPL 1).
    fn stretched(&self, estimate: Micros) -> Micros {
        estimate.saturating_mul(Micros::from(self.config.mpl))
    }

    /// When a placed job should be over by its stretched estimate (`Micros::MAX`: no estimate).
    fn planned_end(&self, job: &Job) -> Micros {
        let JobState::Placed { placed_at, .. } = job.state else {
            unreachable!("only placed jobs have an end")
        };
        job.request
            .estimate
            .map_or(Micros::MAX, |e| placed_at.saturating_add(self.stretched(e)))
    }

    /// The head's reservation (`None`: no backfilling, or no promise can be made), taken
    /// from the memo when the matrix has not changed and no planned end has passed since it
    /// was made.
    fn reservation(&mut self, head: JobId, now: Micros) -> Option<ReservationMemo> {
        if let Some(memo) = self.reservation_memo.take() {
            let unchanged = memo.head == head && memo.matrix_changes == self.matrix_changes;
            // Past a planned end, that job counts as ending "now": the shadow would move.
            let same_ends = now == memo.made_at || now < memo.first_end;
            if unchanged && same_ends {
                return Some(memo);
            }
        }
        let request = &self.jobs[&head].request;
        if self.memory_may_refuse(request) {
            return self.reserve_with_memory(head, now);
        }
        let (slice, shadow, reserved) = self.reserve(head, now)?;
        let memo = ReservationMemo {
            head,
            matrix_changes: self.matrix_changes,
            made_at: now,
            first_end: self
                .slices
                .iter()
                .filter_map(|s| s.ends.first_key_value().map(|(&(end, _), _)| end))
                .min()
                .unwrap_or(Micros::MAX),
            slice: Some(slice),
            shadow,
            reserved,
            memory_left: Vec::new(),
            by_rule: self.by_rule(&request.shape),
            outside: None,
        };
        Some(memo)
    }

    /// Whether memory may ever refuse `request` a place here.
    fn memory_may_refuse(&self, request: &JobRequest) -> bool {
        self.machine.node_memory().is_some() && request.needs_memory().is_some()
    }

    /// EASY's reservation for a head that needs memory. Every job that ends frees its memory,
    /// whatever its home, so the walk follows every placed job's planned end (not one
    /// slice's own jobs): it frees the job's memory and, for an own job, its processors in
    /// its slice, and after each instant tries every slice, then a new one if the MPL allows.
    /// A preempting job's processors stay taken (they may cover own jobs: a safe
    /// overestimate). The memo keeps what each reserved node has left at the shadow once the
    /// head is in: what later jobs that run past the shadow may take there.
    fn reserve_with_memory(&self, head: JobId, now: Micros) -> Option<ReservationMemo> {
        if self.config.backfill != Backfill::Easy {
            return None;
        }
        let request = &self.jobs[&head].request;
        let shape = &request.shape;
        let mut ends: Vec<(Micros, JobId)> = self
            .jobs
            .iter()
            .filter(|(_, job)| matches!(job.state, JobState::Placed { .. }))
            .map(|(&id, job)| (self.planned_end(job), id))
            .filter(|&(end, _)| end < Micros::MAX)
            .collect();
        ends.sort_unstable();
        let first_end = ends.first().map_or(Micros::MAX, |&(end, _)| end);
        let mut taken: Vec<ProcSet> = self.slices.iter().map(|s| s.taken.clone()).collect();
        let mut used = self.memory_used.clone();
        let may_open = self.slices.len() < self.config.mpl as usize;
        let mut ending = ends.into_iter().peekable();
        while let Some(&(end, _)) = ending.peek() {
            // Jobs past their planned end may end any moment: all count as ending now.
            let instant = end.max(now);
            while let Some((_, id)) = ending.next_if(|&(end, _)| end.max(now) == instant) {
                let job = &self.jobs[&id];
                let JobState::Placed {
                    partition, home, ..
                } = &job.state
                else {
                    unreachable!("only placed jobs end")
                };
                if let Some(memory) = job.request.needs_memory() {
                    for (node, bytes) in held_on_nodes(&self.machine, partition, memory) {
                        used[node as usize] -= bytes;
                    }
                }
                if let Home::Slice(slice) = home {
                    let slice = &mut taken[self.slice_index(*slice)];
                    partition.unmark(slice);
                    slice.union_with(&self.preempting_procs);
                }
            }
            let room = self.room(request, |node| self.free_memory(&used, node));
            let search = |busy: &ProcSet| {
                (u64::from(busy.free()) >= shape.procs())
                    .then(|| self.find(busy, shape, room.as_ref()))
                    .flatten()
            };
            let found = (taken.iter().enumerate())
                .find_map(|(index, busy)| search(busy).map(|p| (Some(self.slices[index].id), p)))
                .or_else(|| {
                    may_open
                        .then(|| search(&self.preempting_procs))
                        .flatten()
                        .map(|p| (None, p))
                });
            if let Some((slice, reserved)) = found {
                let memory = request.needs_memory()?;
                let memory_left = held_on_nodes(&self.machine, &reserved, memory)
                    .map(|(node, bytes)| {
                        let free = self.free_memory(&used, node) + self.own_hold(head, node);
                        (node, free - bytes)
                    })
                    .collect();
                return Some(ReservationMemo {
                    head,
                    matrix_changes: self.matrix_changes,
                    made_at: now,
                    first_end,
                    slice,
                    shadow: instant,
                    reserved,
                    memory_left,
                    by_rule: false,
                    outside: None,
                });
            }
        }
        None
    }

    /// EASY: when the head cannot start, the earliest time (by stretched estimates) it could,
    /// in which slice, and the processors it would get there. With
    /// several slices each is a virtual machine running at `1/mpl` speed (Zhang, Franke,
    /// Moreira & Sivasubramaniam 2000).
    fn reserve(&self, head: JobId, now: Micros) -> Option<(SliceId, Micros, Partition)> {
        self.reserve_by(head, now, self.config.partitioner.release_search())
    }

    /// Whether the partitioner's shortcuts (searching the runs ending jobs free, or around a
    /// block) may stand in for a search of `shape`: they read a slice as it is, not the
    /// withheld processors, and place nothing node by node.
    fn by_rule(&self, shape: &Shape) -> bool {
        !by_node(shape) && self.withheld.is_empty()
    }

    /// [`Scheduler::reserve`] by the partitioner's `search` (`None`: searching a copy of the
    /// slice, which any partitioner allows).
    fn reserve_by(
        &self,
        head: JobId,
        now: Micros,
        search: Option<ReleaseSearch>,
    ) -> Option<(SliceId, Micros, Partition)> {
        if self.config.backfill != Backfill::Easy {
            return None;
        }
        let shape = self.jobs[&head].request.shape.clone();
        let search = search.filter(|_| self.by_rule(&shape));
        // No partitioner finds `n` processors among fewer: per slice, the first end after
        // which enough could be free is the earliest its shadow can be. Slices are then tried
        // from the earliest bound, and a slice that cannot beat the best so far is not copied
        // or searched at all.
        let mut bounds: Vec<(Micros, usize)> = Vec::new();
        for (index, slice) in self.slices.iter().enumerate() {
            let mut free = u64::from(slice.taken.free());
            // In end order: the jobs past their end all count as ending now, in whichever
            // order, so the count reaches the size at the same time as in `ending_order`.
            let bound = slice
                .ends
                .iter()
                .take_while(|&(&(end, _), _)| end < Micros::MAX)
                .find_map(|(&(end, _), &size)| {
                    free += u64::from(size);
                    (free >= shape.procs()).then_some(end.max(now))
                });
            bounds.extend(bound.map(|end| (end, index)));
        }
        bounds.sort_unstable();
        // The earliest shadow wins; on a tie, the first slice in matrix order.
        let mut best: Option<(usize, Micros, Partition)> = None;
        for (bound, index) in bounds {
            let beats = |end: Micros| {
                best.as_ref().is_none_or(|&(best_index, shadow, _)| {
                    end < shadow || end == shadow && index < best_index
                })
            };
            if !beats(bound) {
                continue;
            }
            let slice = &self.slices[index];
            // The head does not fit in this slice now (else it would have been placed).
            debug_assert!(self.find(&slice.taken, &shape, None).is_none());
            let mut after = AfterEnds::new(&slice.taken, search);
            let mut free = u64::from(slice.taken.free());
            for (end, id) in self
                .ending_order(slice, now)
                .take_while(|&(end, _)| beats(end))
            {
                let partition = self.partition(id);
                after.release(partition);
                free += u64::from(partition.size());
                // Looked at only once the count allows a fit.
                if free < shape.procs() {
                    continue;
                }
                if let Some(reserved) = after.find(self, &shape) {
                    best = Some((index, end, reserved));
                    break;
                }
            }
        }
        best.map(|(index, shadow, reserved)| (self.slices[index].id, shadow, reserved))
    }

    /// A slice's own jobs in the order EASY expects them to end: those past their planned end
    /// may end any moment, so all count as ending now, in id order; the rest end as planned.
    /// Jobs without an estimate promise nothing and are left out.
    fn ending_order<'a>(
        &self,
        slice: &'a Slice,
        now: Micros,
    ) -> impl Iterator<Item = (Micros, JobId)> + 'a {
        let mut overdue: Vec<(Micros, JobId)> = slice
            .ends
            .range(..=(now, JobId::MAX))
            .map(|(&(_, id), _)| (now, id))
            .collect();
        overdue.sort_unstable();
        let upcoming = slice
            .ends
            .range((Bound::Excluded((now, JobId::MAX)), Bound::Unbounded))
            .map(|(&key, _)| key);
        overdue
            .into_iter()
            .chain(upcoming)
            .take_while(|&(end, _)| end < Micros::MAX)
    }

    /// EASY's pass over the jobs behind the head, in queue order: each starts in the first
    /// slice with room if it cannot delay the head. In the head's reserved slice a job must
    /// avoid the reserved processors or end (by its stretched estimate) before the shadow
    /// time; other slices are not the head's.
    ///
    /// The pass costs the jobs it tries, not the queue's length: a request at least as large
    /// as every slice's room (free processors, or the smallest request that already failed
    /// there, see [`PartitionerKind::fails_upward`]) cannot start, so the queue's index skips
    /// straight to the next smaller one.
    fn backfill(
        &mut self,
        head: QueueKey,
        reservation: &mut ReservationMemo,
        now: Micros,
        decisions: &mut Vec<Decision>,
    ) {
        let shadow = reservation.shadow;
        let reserved_index = reservation.slice.map(|id| self.slice_index(id));
        let upward = self.config.partitioner.fails_upward();
        let mut failed = vec![u64::MAX; self.slices.len()];
        let mut failed_outside = u64::MAX;
        let mut failed_new = u64::MAX;
        let partitioner = self.config.partitioner;
        let room = |busy: &ProcSet, failed: u64| partitioner.room(busy).min(failed);
        let mut cursor = head;
        loop {
            let below = self
                .slices
                .iter()
                .zip(&failed)
                .map(|(slice, &failed)| room(&slice.taken, failed))
                // Unbuilt, the reserved slice's room outside the reservation is bounded by
                // its whole room, which is in the fold already.
                .chain(self.new_slice_room().map(|room| room.min(failed_new)))
                .fold(
                    reservation.outside.as_ref().map_or(0, |outside| {
                        (u64::from(outside.free()) + 1).min(failed_outside)
                    }),
                    u64::max,
                );
            let Some(next) = self.queue.next_smaller(cursor, Class::Standby, below) else {
                break;
            };
            cursor = next;
            let request = &self.jobs[&next.2].request;
            let (shape, size) = (&request.shape, request.shape.procs());
            let ends_in_time = request
                .estimate
                .is_some_and(|e| now.saturating_add(self.stretched(e)) <= shadow);
            // The memory free now and, if it may run past the shadow, on the reserved nodes
            // what the head leaves there.
            let memory = request.needs_memory();
            let left = &reservation.memory_left;
            let room = self.room(request, |node| {
                let free = self.free_memory(&self.memory_used, node);
                match left.iter().find(|&&(n, _)| n == node) {
                    Some(&(_, left)) if !ends_in_time => free.min(left),
                    _ => free,
                }
            });
            let room = room.as_ref();
            // A failed count (no run, no set that large) bounds nothing about a by-node
            // request; a failure for want of memory bounds nothing about other jobs.
            let bounded = !by_node(shape);
            let learns = bounded && room.is_none();
            let attempt = |find: &dyn Fn() -> Option<Partition>, failed: &mut u64| {
                if bounded && size >= *failed {
                    return None;
                }
                let found = find();
                if found.is_none() && upward && learns {
                    *failed = size;
                }
                found
            };
            let mut placed = None;
            for (index, slice) in self.slices.iter().enumerate() {
                let in_slice = || self.find(&slice.taken, shape, room);
                let found = if Some(index) == reserved_index {
                    // Processors outside the reservation first: then the end time does not matter.
                    let outside = reservation.outside(&slice.taken, self.config.partitioner);
                    let in_outside = || outside.find(self, &slice.taken, shape, room);
                    attempt(&in_outside, &mut failed_outside).or_else(|| {
                        ends_in_time
                            .then(|| attempt(&in_slice, &mut failed[index]))
                            .flatten()
                    })
                } else {
                    attempt(&in_slice, &mut failed[index])
                };
                if let Some(partition) = found {
                    placed = Some((partition, index));
                    break;
                }
            }
            // A slice of its own takes no processor the head's reservation holds in a slice
            // that exists, and its memory is bounded as in any slice. Where the head is to
            // open a slice at the shadow, the job must leave one for it or end in time: else
            // the head finds the MPL reached and its reservation moves (a starved head).
            let leaves_the_head_a_slice = reserved_index.is_some()
                || ends_in_time
                || self.slices.len() + 1 < self.config.mpl as usize;
            if placed.is_none() && leaves_the_head_a_slice && self.new_slice_room().is_some() {
                let in_new = || self.find(&self.preempting_procs, shape, room);
                placed = attempt(&in_new, &mut failed_new).map(|p| (p, self.slices.len()));
            }
            if let Some((partition, index)) = placed {
                if index == self.slices.len() {
                    failed.push(u64::MAX);
                    failed_new = u64::MAX;
                }
                if Some(index) == reserved_index {
                    reservation
                        .outside(&self.slices[index].taken, self.config.partitioner)
                        .mark(&partition);
                }
                if let Some(memory) = memory.filter(|_| !ends_in_time) {
                    for (node, bytes) in held_on_nodes(&self.machine, &partition, memory) {
                        // What it held out of the matrix was counted as taken already.
                        let more = bytes.saturating_sub(self.own_hold(next.2, node));
                        let left = reservation.memory_left.iter_mut().find(|(n, _)| *n == node);
                        if let Some((_, left)) = left {
                            *left = left.saturating_sub(more);
                        }
                    }
                }
                let home = Home::Slice(self.slices.get(index).map_or(self.next_slice, |s| s.id));
                self.commit(next, partition, home, now, decisions);
            }
        }
    }

    /// Puts a job in the matrix and refreshes what depends on it.
    fn place(&mut self, id: JobId, partition: Partition, home: Home, now: Micros) {
        self.matrix_changes += 1;
        // Its placement holds its memory from here on.
        self.drop_hold(id);
        let mut opened = false;
        let seq = self.next_seq;
        self.next_seq += 1;
        match home {
            Home::Preempting => {
                partition.mark(&mut self.preempting_procs);
                self.preempting.insert(seq, id);
            }
            Home::Standby => {
                partition.mark(&mut self.standby_procs);
                self.standby.insert(seq, id);
            }
            Home::Slice(slice_id) => {
                opened = slice_id == self.next_slice;
                if opened {
                    self.next_slice += 1;
                    self.slices.push(Slice {
                        id: slice_id,
                        own: BTreeMap::new(),
                        ends: BTreeMap::new(),
                        taken: self.preempting_procs.clone(),
                        alternates: BTreeMap::new(),
                        lent: ProcSet::members_only(self.machine.procs()),
                        standby: Vec::new(),
                    });
                }
                let words: Words = partition.word_masks().into();
                self.coverage.add(seq, &words);
                let placed = PlacedJob {
                    id,
                    partition: partition.clone(),
                    words,
                };
                self.placed.insert(seq, placed);
            }
        }
        let job = self.jobs.get_mut(&id).expect("placing a known job");
        job.placed_seq = seq;
        job.state = JobState::Placed {
            partition: partition.clone(),
            home,
            placed_at: now,
        };
        let memory = job.request.needs_memory();
        self.charge(&partition, memory, true);
        let end = self.planned_end(&self.jobs[&id]);
        match home {
            Home::Preempting => self.refresh_all(),
            Home::Standby => {
                self.lone_row_changes();
                for (i, slice) in self.slices.iter_mut().enumerate() {
                    if slice.has_room_for(&partition) {
                        slice.standby.push(id);
                        self.journal.moved(id, i, true);
                    }
                }
            }
            Home::Slice(slice_id) => {
                let index = self.slice_index(slice_id);
                self.journal.moved(id, index, true);
                let slice = &mut self.slices[index];
                slice.add_own(id, seq, &partition, end);
                if opened {
                    self.journal.all();
                    self.refill(index);
                } else if partition.is_clear_in(&slice.lent) {
                    // Nothing of the slice's greedy fill stood there: every alternate stays
                    // (none overlaps the job) and none rejected before can fit now.
                    slice.drop_standby_over(index, &partition, &self.jobs, &mut self.journal);
                } else {
                    // Only the alternates it covers leave, and the jobs they kept out: no job
                    // over it can fit now, its processors are taken.
                    let words = self.placed[&seq].words.clone();
                    self.refill_over(index, &words, &OnceCell::from(Vec::new()), 0);
                }
                // The newest placement is last in alternate order: it only takes what is left.
                if self.config.alternates {
                    let words = &self.placed[&seq].words;
                    for (i, slice) in self.slices.iter_mut().enumerate() {
                        if i != index && slice.has_room_for(&partition) {
                            slice.alternates.insert(seq, id);
                            slice.lent.insert_words(words);
                            self.journal.moved(id, i, true);
                            slice.drop_standby_over(i, &partition, &self.jobs, &mut self.journal);
                        }
                    }
                }
            }
        }
    }

    /// A standby job comes or goes: with no slice, the lone row it shares with preempting
    /// jobs may come or go with it.
    fn lone_row_changes(&mut self) {
        if self.slices.is_empty() {
            self.journal.all();
        }
    }

    /// Takes a job out of the queue or the matrix, refreshing what depended on it.
    fn unplace(&mut self, job: &Job) {
        self.matrix_changes += 1;
        let id = job.request.id;
        let JobState::Placed {
            partition, home, ..
        } = &job.state
        else {
            let key = (job.request.class, job.seq, id);
            self.queue.remove(&key);
            self.held.remove(&key);
            return;
        };
        self.charge(partition, job.request.needs_memory(), false);
        match *home {
            Home::Preempting => {
                self.preempting.remove(&job.placed_seq);
                partition.unmark(&mut self.preempting_procs);
                self.refresh_all();
            }
            Home::Standby => {
                self.lone_row_changes();
                self.standby.remove(&job.placed_seq);
                partition.unmark(&mut self.standby_procs);
                for (i, slice) in self.slices.iter_mut().enumerate() {
                    if let Some(at) = slice.standby.iter().position(|&s| s == id) {
                        slice.standby.remove(at);
                        self.journal.moved(id, i, false);
                    }
                }
            }
            Home::Slice(slice_id) => {
                let placed = self.placed.remove(&job.placed_seq).expect("a placed job");
                self.coverage.remove(job.placed_seq, &placed.words);
                let index = self.slice_index(slice_id);
                self.journal.moved(id, index, false);
                let end = self.planned_end(job);
                self.slices[index].remove_own(id, job.placed_seq, end);
                // Out of the alternates now, while its partition is at hand (a refill reads
                // only placed jobs). In its own slice any job over its processors may fit now;
                // elsewhere only those after it in the greedy order (those before were decided
                // before it took its processors there).
                let mut stale = vec![(index, 0)];
                for (i, slice) in self.slices.iter_mut().enumerate() {
                    if slice.alternates.remove(&job.placed_seq).is_some() {
                        slice.lent.remove_words(&placed.words);
                        self.journal.moved(id, i, false);
                        stale.push((i, job.placed_seq));
                    }
                }
                if self.slices[index].own.is_empty() {
                    self.slices.remove(index);
                    self.journal.all();
                    stale.retain(|&(i, _)| i != index);
                    stale
                        .iter_mut()
                        .filter(|(i, _)| *i > index)
                        .for_each(|(i, _)| *i -= 1);
                } else {
                    // Own partitions are disjoint; preempting jobs may cover any of them.
                    let taken = &mut self.slices[index].taken;
                    partition.unmark(taken);
                    if !self.preempting_procs.is_empty() {
                        taken.union_with(&self.preempting_procs);
                    }
                }
                if self.config.repack && self.repack() {
                    self.refresh_all();
                } else {
                    // The jobs over it are the same for every slice: looked up once.
                    let over = OnceCell::new();
                    for (i, since) in stale {
                        self.refill_over(i, &placed.words, &over, since);
                    }
                }
            }
        }
    }

    /// Moves own jobs up into earlier slices where their processors are free, dropping slices
    /// left empty. Returns whether anything moved.
    fn repack(&mut self) -> bool {
        let mut moved = false;
        let mut from = self.slices.len();
        while from > 1 {
            from -= 1;
            for (seq, id) in self.slices[from].own.clone() {
                let partition = job_partition(&self.jobs, id).clone();
                let Some(to) = (0..from).find(|&to| partition.is_clear_in(&self.slices[to].taken))
                else {
                    continue;
                };
                moved = true;
                let end = self.planned_end(&self.jobs[&id]);
                // `from`'s `taken` is recomputed once repacking is over.
                self.slices[from].remove_own(id, seq, end);
                self.slices[to].add_own(id, seq, &partition, end);
                let to_id = self.slices[to].id;
                if let JobState::Placed { home, .. } =
                    &mut self.jobs.get_mut(&id).expect("own jobs exist").state
                {
                    *home = Home::Slice(to_id);
                }
            }
            if self.slices[from].own.is_empty() {
                self.slices.remove(from);
            }
        }
        moved
    }

    /// Checks that the incrementally kept slices equal a recomputation from scratch.
    /// For tests and debug assertions; returns what differs.
    pub fn audit(&self) -> Result<(), String> {
        let mut fresh = self.clone();
        // From nothing, not from the alternates kept: those are what is checked.
        for slice in &mut fresh.slices {
            slice.alternates.clear();
            slice.lent = ProcSet::members_only(self.machine.procs());
        }
        fresh.refresh_all();
        for (kept, recomputed) in self.slices.iter().zip(&fresh.slices) {
            let differs = kept.taken != recomputed.taken
                || kept.lent != recomputed.lent
                || kept.alternates != recomputed.alternates
                || kept.standby != recomputed.standby;
            if differs {
                return Err(format!(
                    "slice {} drifted: kept alternates {:?} standby {:?}, recomputed {:?} {:?}",
                    kept.id,
                    kept.alternates,
                    kept.standby,
                    recomputed.alternates,
                    recomputed.standby
                ));
            }
        }
        for (id, job) in &self.jobs {
            let key = (job.request.class, job.seq, *id);
            match &job.state {
                JobState::Placed { partition, .. } if !partition.is_clear_in(&self.withheld) => {
                    return Err(format!("job {id} is placed on withheld processors"));
                }
                JobState::Queued if self.held.contains(&key) == self.queue.contains(&key) => {
                    return Err(format!("job {id} waits both held and queued, or neither"));
                }
                _ => {}
            }
        }
        for PlacedJob {
            id,
            partition,
            words,
        } in self.placed.values()
        {
            if job_partition(&self.jobs, *id) != partition {
                return Err(format!(
                    "job {id}: placed with {partition}, now on another partition"
                ));
            }
            if **words != *partition.word_masks() {
                return Err(format!("job {id}: its words are not its partition's"));
            }
        }
        let mut memory = vec![0u64; self.memory_used.len()];
        for job in self.jobs.values() {
            if let (JobState::Placed { partition, .. }, Some(need)) =
                (&job.state, job.request.needs_memory())
            {
                for (node, bytes) in held_on_nodes(&self.machine, partition, need) {
                    let held = &mut memory[node as usize];
                    *held = held.saturating_add(bytes);
                }
            }
        }
        for (job, held) in &self.resident {
            if self
                .jobs
                .get(job)
                .is_some_and(|j| matches!(j.state, JobState::Placed { .. }))
            {
                return Err(format!(
                    "job {job}: placed, and holding memory out of the matrix"
                ));
            }
            for &(node, bytes) in held {
                let used = &mut memory[node as usize];
                *used = used.saturating_add(bytes);
            }
        }
        if memory != self.memory_used {
            return Err(format!(
                "memory drifted: kept {:?}, placed and resident jobs hold {memory:?}",
                self.memory_used
            ));
        }
        let capacity = self.machine.node_memory().unwrap_or(u64::MAX);
        if let Some((node, held)) = memory.iter().enumerate().find(|&(_, &m)| m > capacity) {
            return Err(format!(
                "node {node}: its placed jobs hold {held} bytes, more than its {capacity}"
            ));
        }
        for slice in &self.slices {
            let ends: BTreeMap<(Micros, JobId), u32> = slice
                .own
                .values()
                .map(|id| {
                    let end = self.planned_end(&self.jobs[id]);
                    ((end, *id), self.partition(*id).size())
                })
                .collect();
            if ends != slice.ends {
                return Err(format!(
                    "slice {} drifted: kept ends {:?}, own jobs give {ends:?}",
                    slice.id, slice.ends
                ));
            }
        }
        Ok(())
    }

    /// Recomputes `taken` of every slice (preempting set changed) and refills all.
    fn refresh_all(&mut self) {
        self.journal.all();
        for i in 0..self.slices.len() {
            self.retake(i);
            self.refill(i);
        }
    }

    /// Recomputes a slice's `taken` from its own jobs and the preempting set.
    fn retake(&mut self, index: usize) {
        let mut taken = self.preempting_procs.clone();
        for &id in self.slices[index].own.values() {
            job_partition(&self.jobs, id).mark(&mut taken);
        }
        self.slices[index].taken = taken;
    }

    /// Recomputes a slice's alternates and standby jobs from scratch, greedily in placement
    /// order. Every alternate it holds must still be placed (see [`Scheduler::unplace`]).
    fn refill(&mut self, index: usize) {
        // With one slice every placed job is its own: there is no other slice to borrow from.
        let borrows = self.config.alternates && self.slices.len() > 1;
        let slice = &mut self.slices[index];
        let mut lent = std::mem::replace(&mut slice.lent, ProcSet::members_only(0));
        for &id in slice.alternates.values() {
            job_partition(&self.jobs, id).unmark(&mut lent);
        }
        debug_assert!(
            lent.is_empty(),
            "slice {} lent more than its alternates",
            slice.id
        );
        let taken = &slice.taken;
        let mut alternates = BTreeMap::new();
        if borrows {
            for (&seq, PlacedJob { id, partition, .. }) in &self.placed {
                // Own jobs never qualify: their processors are already in `taken`.
                if fits_between(partition, taken, &lent) {
                    partition.mark(&mut lent);
                    alternates.insert(seq, *id);
                }
            }
        }
        let slice = &mut self.slices[index];
        slice.lent = lent;
        let old = std::mem::replace(&mut slice.alternates, alternates);
        let new = &slice.alternates;
        for (seq, &id) in old.iter().chain(new) {
            if old.contains_key(seq) != new.contains_key(seq) {
                self.journal.moved(id, index, new.contains_key(seq));
            }
        }
        self.refill_standby(index);
    }

    /// What [`Scheduler::refill`] gives, after `region` changed in slice `index`: its
    /// processors were freed (an own job left, or an alternate placed at `since`) or taken
    /// (a new own job). The greedy pass can decide a job differently only if its processors
    /// meet ones whose state changed before its turn, so only these are decided again: the
    /// jobs over `region` placed at `since` or later (`over`, once looked up), the alternates
    /// a new own job covers, and, whenever a decision changes, the later jobs over that job's
    /// processors.
    fn refill_over(
        &mut self,
        index: usize,
        region: &[(usize, u64)],
        over: &OnceCell<Vec<u64>>,
        since: u64,
    ) {
        // Around more words than there are placed jobs (a wide job left or came), a refill
        // from scratch costs less: a job over thousands of processors meets every other one
        // once per word. Both give the same.
        if region.len() > self.placed.len() {
            self.refill(index);
            return;
        }
        if self.config.alternates && self.slices.len() > 1 {
            // Jobs to decide again, smallest placement first; a job over several changed
            // words comes up once per word (cheaper than a set), so repeats are skipped.
            let mut pending = BinaryHeap::new();
            let mut last = None;
            if !words_clear_in(region, &self.slices[index].lent) {
                let covered = self.alternates_over(index, region, 0);
                for seq in covered.expect("no alternate is placed before 0") {
                    self.evict(index, seq, &mut pending);
                }
            }
            let over = over.get_or_init(|| {
                let mut over: Vec<u64> = self.coverage.over(region, None).collect();
                over.sort_unstable();
                over.dedup();
                over
            });
            pending.extend(
                over.iter()
                    .filter(|&&seq| seq >= since)
                    .map(|&seq| Reverse(seq)),
            );
            while let Some(Reverse(seq)) = pending.pop() {
                if last.replace(seq) == Some(seq) {
                    continue;
                }
                let slice = &self.slices[index];
                let job = &self.placed[&seq];
                if slice.alternates.contains_key(&seq) || !job.partition.is_clear_in(&slice.taken) {
                    continue;
                }
                // `lent` still holds later alternates the pass has not reached: those in
                // the way come after this job in the greedy order, so they yield to it.
                let blockers = if words_clear_in(&job.words, &slice.lent) {
                    BTreeSet::new()
                } else {
                    match self.alternates_over(index, &job.words, seq) {
                        Some(later) => later,
                        None => continue,
                    }
                };
                let (id, words) = (job.id, job.words.clone());
                for blocker in blockers {
                    self.evict(index, blocker, &mut pending);
                }
                self.journal.moved(id, index, true);
                let slice = &mut self.slices[index];
                slice.alternates.insert(seq, id);
                slice.lent.insert_words(&words);
            }
        }
        self.refill_standby(index);
    }

    /// Adds to `out` the placed jobs over `region` placed at `since` or later.
    fn placed_over(&self, region: &[(usize, u64)], since: u64, out: &mut BinaryHeap<Reverse<u64>>) {
        out.extend(
            self.coverage
                .over(region, None)
                .filter(|&seq| seq >= since)
                .map(Reverse),
        );
    }

    /// Slice `index`'s alternates over `region`, or `None` if one of them was placed before
    /// `before` (it keeps its place).
    fn alternates_over(
        &self,
        index: usize,
        region: &[(usize, u64)],
        before: u64,
    ) -> Option<BTreeSet<u64>> {
        let slice = &self.slices[index];
        let mut over = BTreeSet::new();
        // Only where `region` meets `lent` (the alternates' processors).
        for seq in self.coverage.over(region, Some(&slice.lent)) {
            if slice.alternates.contains_key(&seq) {
                if seq < before {
                    return None;
                }
                over.insert(seq);
            }
        }
        Some(over)
    }

    /// Takes the alternate placed at `seq` out of slice `index`; the jobs after it over its
    /// processors are to be decided again.
    fn evict(&mut self, index: usize, seq: u64, pending: &mut BinaryHeap<Reverse<u64>>) {
        let slice = &mut self.slices[index];
        slice.alternates.remove(&seq);
        let job = &self.placed[&seq];
        self.journal.moved(job.id, index, false);
        slice.lent.remove_words(&job.words);
        self.placed_over(&job.words, seq + 1, pending);
    }

    /// Recomputes a slice's standby jobs: those clear of its own jobs and alternates.
    fn refill_standby(&mut self, index: usize) {
        let slice = &self.slices[index];
        let standby: Vec<JobId> = self
            .standby
            .values()
            .copied()
            .filter(|&id| fits_between(job_partition(&self.jobs, id), &slice.taken, &slice.lent))
            .collect();
        let old = std::mem::replace(&mut self.slices[index].standby, standby);
        let new = &self.slices[index].standby;
        // Both in placement order, seldom long: those in one and not the other changed rows.
        for &id in old.iter().filter(|id| !new.contains(id)) {
            self.journal.moved(id, index, false);
        }
        for &id in new.iter().filter(|id| !old.contains(id)) {
            self.journal.moved(id, index, true);
        }
    }
}

/// For one job, the nodes where memory lets it take fewer processors than the node has, with
/// how many, by node ([`Scheduler::room`]).
type Room = Vec<(u32, u32)>;

/// The bytes a job needing `memory` holds on each node under `partition`.
fn held_on_nodes<'a>(
    machine: &'a Machine,
    partition: &'a Partition,
    memory: Memory,
) -> impl Iterator<Item = (u32, u64)> + 'a {
    machine.nodes_under(partition.spans()).map(move |node| {
        let procs = partition.processors_in(machine.node_span(node));
        (node, memory.on_node(procs))
    })
}

/// Whether `shape` is placed node by node (a spread, or so many on given nodes), which no
/// partitioner's own rule does (see `PartitionerKind::find`).
fn by_node(shape: &Shape) -> bool {
    matches!(shape, Shape::Nodes { .. } | Shape::OnNodes(_))
}

/// The size the queue's index files a request under, so a pass can skip requests too large
/// for every slice's room. A request placed by node is filed as 0, never skipped: a slice's
/// room is bounded by its longest free run for one-run partitioners, which says nothing
/// about processors taken node by node.
fn filed_size(shape: &Shape) -> u64 {
    if by_node(shape) {
        0
    } else {
        shape.procs()
    }
}

fn job_partition(jobs: &BTreeMap<JobId, Job>, id: JobId) -> &Partition {
    match &jobs[&id].state {
        JobState::Placed { partition, .. } => partition,
        JobState::Queued => unreachable!("job {id} is in the matrix but not placed"),
    }
}

/// A slice as it will be once some of its jobs end, for EASY's "when and where could the
/// head start?". One-run partitioners look only at the runs the ended jobs' processors join
/// (no other run can newly hold the head); scatter takes the lowest of the slice's free
/// processors and the released ones; the others search a copy with the jobs unmarked.
enum AfterEnds<'a> {
    Runs {
        rule: RunRule,
        released: Released<'a>,
        /// Spans released since the last look.
        fresh: Vec<Span>,
    },
    LowestFree {
        taken: &'a ProcSet,
        released: Vec<Span>,
    },
    Copy {
        taken: &'a ProcSet,
        map: Option<ProcSet>,
        ending: Vec<&'a Partition>,
    },
}

impl<'a> AfterEnds<'a> {
    fn new(taken: &'a ProcSet, search: Option<ReleaseSearch>) -> Self {
        match search {
            Some(ReleaseSearch::Run(rule)) => AfterEnds::Runs {
                rule,
                released: Released::new(taken),
                fresh: Vec::new(),
            },
            Some(ReleaseSearch::LowestFree) => AfterEnds::LowestFree {
                taken,
                released: Vec::new(),
            },
            None => AfterEnds::Copy {
                taken,
                map: None,
                ending: Vec::new(),
            },
        }
    }

    fn release(&mut self, partition: &'a Partition) {
        match self {
            AfterEnds::Runs {
                released, fresh, ..
            } => {
                for &span in partition.spans() {
                    released.release(span);
                    fresh.push(span);
                }
            }
            AfterEnds::LowestFree { released, .. } => released.extend_from_slice(partition.spans()),
            AfterEnds::Copy { ending, .. } => ending.push(partition),
        }
    }

    /// Where the head would go with every job released so far ended, given that it did not
    /// fit before the first of them.
    fn find(&mut self, scheduler: &Scheduler, shape: &Shape) -> Option<Partition> {
        match self {
            AfterEnds::Runs {
                rule,
                released,
                fresh,
            } => {
                let runs = fresh
                    .drain(..)
                    .filter_map(|span| released.free_run_at(span.start));
                rule.pick(runs, shape.procs() as u32)
            }
            AfterEnds::LowestFree { taken, released } => {
                released.sort_unstable();
                lowest_free(taken.runs(false), released, shape.procs() as u32)
            }
            AfterEnds::Copy { taken, map, ending } => {
                // Copied only at the first look: most reservations need none.
                let map = map.get_or_insert_with(|| (*taken).clone());
                ending.drain(..).for_each(|p| p.unmark(map));
                scheduler.find(map, shape, None)
            }
        }
    }
}

/// What the head of the queue is owed while later jobs are considered, with what it was
/// computed from.
#[derive(Clone, Debug)]
struct ReservationMemo {
    head: JobId,
    matrix_changes: u64,
    made_at: Micros,
    /// The earliest planned end of any own job when it was made.
    first_end: Micros,
    /// The head's earliest slice (`None`: a slice not yet opened) and time (by stretched
    /// estimates).
    slice: Option<SliceId>,
    shadow: Micros,
    /// The processors the head would get in that slice.
    reserved: Partition,
    /// For a head that needs memory: each reserved node with the bytes left there at the
    /// shadow once the head is in, which jobs running past the shadow may take.
    memory_left: Vec<(u32, u64)>,
    /// The partitioner's rule chose `reserved` on the slice as it is (see
    /// [`Scheduler::by_rule`]), so a search outside it may take the rule's shortcuts.
    by_rule: bool,
    /// The reserved slice outside the reserved processors, made when first needed: most
    /// passes never look there.
    outside: Option<Outside>,
}

/// The reserved slice's processors outside the head's reservation: a job started there
/// cannot delay the head, whatever its end time.
#[derive(Clone, Debug)]
enum Outside {
    /// The slice's `taken` with the reservation marked: a copy, and marking a wide
    /// reservation costs.
    Marked(ProcSet),
    /// A partitioner that fills from below, whose reservation leaves no free processor of
    /// the slice in `block` (first fit: the reservation itself; scatter: everything up to
    /// its last processor): `taken` is searched around the block, with no copy. `free`
    /// processors of the slice lie outside the block.
    AroundBlock { block: Span, free: u32 },
}

impl Outside {
    fn new(
        taken: &ProcSet,
        reserved: &Partition,
        partitioner: PartitionerKind,
        by_rule: bool,
    ) -> Outside {
        let block = match (partitioner, reserved.spans()) {
            _ if !by_rule => None,
            (PartitionerKind::FirstFit, &[block]) => Some(block),
            // Scatter took the lowest free processors: every one below its last.
            (PartitionerKind::Scatter, [.., last]) => Some(Span::new(0, last.end())),
            _ => None,
        };
        match block {
            Some(block) => Outside::AroundBlock {
                block,
                free: taken.free() - (block.len - taken.count_in(block)),
            },
            None => {
                let mut outside = taken.clone();
                reserved.mark(&mut outside);
                Outside::Marked(outside)
            }
        }
    }

    fn free(&self) -> u32 {
        match self {
            Outside::Marked(set) => set.free(),
            Outside::AroundBlock { free, .. } => *free,
        }
    }

    /// Where the scheduler's partitioner would put `shape` outside the reservation, in the
    /// slice whose `taken` is given, within `room` (see [`Scheduler::find`]).
    fn find(
        &self,
        scheduler: &Scheduler,
        taken: &ProcSet,
        shape: &Shape,
        room: Option<&Room>,
    ) -> Option<Partition> {
        match *self {
            Outside::Marked(ref set) => scheduler.find(set, shape, room),
            Outside::AroundBlock { block, free } => {
                if shape.procs() > u64::from(free) {
                    return None;
                }
                // The answer in the whole slice if it misses the block; else the block leaves
                // nothing below its end that serves (first fit: the run there is cut short;
                // scatter: nothing there is free).
                let whole = scheduler.find(taken, shape, room)?;
                if whole.processors_in(block) == 0 {
                    return Some(whole);
                }
                if !scheduler.by_rule(shape) || room.is_some() {
                    // Processors below the block may serve: search around it.
                    let mut around = taken.clone();
                    around.insert_span(block);
                    return scheduler.find(&around, shape, room);
                }
                let partitioner = scheduler.config.partitioner;
                partitioner.find_from(taken, block.end(), shape)
            }
        }
    }

    /// Takes a job's processors (free in the slice) out of the room outside the reservation.
    fn mark(&mut self, partition: &Partition) {
        match self {
            Outside::Marked(set) => partition.mark(set),
            Outside::AroundBlock { block, free } => {
                *free -= partition.size() - partition.processors_in(*block);
            }
        }
    }
}

impl ReservationMemo {
    /// The reserved slice (whose `taken` is given) outside the reservation.
    fn outside(&mut self, taken: &ProcSet, partitioner: PartitionerKind) -> &mut Outside {
        self.outside
            .get_or_insert_with(|| Outside::new(taken, &self.reserved, partitioner, self.by_rule))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Placement attempts on this thread: the work a scheduling pass does.
        pub static FINDS: Cell<u64> = const { Cell::new(0) };
    }

    fn finds() -> u64 {
        FINDS.with(Cell::get)
    }

    #[test]
    fn backfilling_tries_the_jobs_that_could_start_not_the_whole_queue() {
        let config = Config {
            mpl: 1,
            alternates: false,
            backfill: Backfill::Easy,
            ..Config::default()
        };
        let mut s = Scheduler::new(Machine::line(1000).unwrap(), config).unwrap();
        let job = |id, procs, estimate| JobRequest::new(id, Shape::Count(procs)).estimate(estimate);
        s.submit(job(0, 500, 1_000), 0).unwrap();
        // The head waits for job 0; 5,000 jobs behind it can never start beside job 0.
        s.submit(job(1, 1000, 1_000), 0).unwrap();
        for id in 2..5_002 {
            s.submit(job(id, 600, 10), 0).unwrap();
        }
        let before = finds();
        let decisions = s.submit(job(9_999, 10, 5), 1).unwrap();
        assert!(matches!(decisions[0], Decision::Placed { job: 9_999, .. }));
        let tries = finds() - before;
        assert!(tries < 10, "{tries} placement attempts for one arrival");
        // Ending the small job starts nothing, and looks at no queued job either.
        let before = finds();
        assert_eq!(s.remove(9_999, 6).unwrap().len(), 1);
        assert!(finds() - before < 10);
    }

    #[test]
    fn reservation_shortcuts_agree_with_searching_a_copy() {
        for partitioner in [
            PartitionerKind::FirstFit,
            PartitionerKind::BestFit,
            PartitionerKind::Scatter,
        ] {
            let config = Config {
                mpl: 2,
                backfill: Backfill::Easy,
                partitioner,
                ..Config::default()
            };
            // Thirty nodes of ten, for the spreads among the counts.
            let machine = Machine::line(300).unwrap().with_nodes(10).unwrap();
            let mut s = Scheduler::new(machine, config).unwrap();
            let mut state = 0x853c_49e6_748f_ea9b_u64;
            let mut random = |below: u64| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % below
            };
            let (mut now, mut checked) = (0, 0);
            for id in 0..3_000 {
                now += random(40) as Micros;
                let placed: Vec<JobId> = s
                    .jobs()
                    .filter(|(_, _, state)| matches!(state, JobState::Placed { .. }))
                    .map(|(id, _, _)| id)
                    .collect();
                if !placed.is_empty() && random(2) == 0 {
                    let job = placed[random(placed.len() as u64) as usize];
                    s.remove(job, now).unwrap();
                } else {
                    let shape = match random(5) {
                        0 => Shape::Nodes {
                            nodes: 1 + random(20) as u32,
                            per_node: 1 + random(10) as u32,
                        },
                        _ => Shape::Count(1 + random(200) as u32),
                    };
                    let request = JobRequest::new(id, shape).estimate(1 + random(400) as Micros);
                    s.submit(request, now).unwrap();
                }
                let Some(head) = s.first_waiting(Class::Interactive, Some(Class::Standby)) else {
                    continue;
                };
                let context = format!("{partitioner} job {id}");
                let reserved = s.reserve(head.2, now);
                assert_eq!(reserved, s.reserve_by(head.2, now, None), "{context}");
                let Some((slice, _, reserved)) = reserved else {
                    continue;
                };
                checked += 1;
                // A spread head's room outside is always searched on a marked copy.
                if !partitioner.fills_from_below() || by_node(&s.jobs[&head.2].request.shape) {
                    continue;
                }
                // A copy, to start a job in as the backfilling pass would.
                let mut taken = s.slices[s.slice_index(slice)].taken.clone();
                let mut around = Outside::new(&taken, &reserved, partitioner, true);
                let mut marked = Outside::new(&taken, &reserved, PartitionerKind::Buddy, true);
                assert!(matches!(around, Outside::AroundBlock { .. }));
                let spread = |nodes, per_node| Shape::Nodes { nodes, per_node };
                let shapes = [1, 2, 17, 60, 150, 299].map(Shape::Count);
                for shape in shapes.into_iter().chain([spread(3, 2), spread(12, 4)]) {
                    let found = around.find(&s, &taken, &shape, None);
                    let expected = marked.find(&s, &taken, &shape, None);
                    assert_eq!(found, expected, "{context} {shape}");
                    if let Some(partition) = found.filter(|_| shape == Shape::Count(17)) {
                        around.mark(&partition);
                        marked.mark(&partition);
                        partition.mark(&mut taken);
                    }
                }
                assert_eq!(around.free(), marked.free(), "{context}");
            }
            assert!(
                checked > 300,
                "{partitioner}: {checked} reservations compared"
            );
        }
    }
}
