//! The virtual-clock replay: arrivals and completions drive the core; every change becomes a
//! plan generation where the daemon's rule puts it (the core's `Rotation::first_slot`: the
//! next slot boundary, or at once in a vacant slot), exactly as the daemon applies it.
//!
//! Quanta are never stepped one by one. Between two generations the matrix is fixed, so a job
//! in `k` of `R` slices runs in known slot positions of every cycle, and its completion time
//! is computed directly from its remaining work.

use crate::gantt::{Bar, Recorder};
use crate::memory::{median_kb, MemoryStats, NodeMemory, Watch};
use crate::workload::{Dropped, SimJob};
use cosched_core::{
    Backfill, Config, ConfigError, Cycle, Decision, JobId, JobRequest, JobState, Machine,
    MachineError, Micros, PartitionerKind, PlanChanges, Rotation, RowMove, Scheduler, Shape, Span,
    SubmitError, MICROS_PER_SEC,
};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Space sharing, strict first come first served.
    Fcfs,
    /// Space sharing with EASY backfilling on the requested times.
    Easy,
    /// The Ousterhout matrix: up to `mpl` slices taking turns each quantum.
    Gang,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fcfs => "fcfs",
            Policy::Easy => "easy",
            Policy::Gang => "gang",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy '{0}' (known: fcfs, easy, gang)")]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Policy::Fcfs, Policy::Easy, Policy::Gang]
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    pub procs: u32,
    pub policy: Policy,
    /// Gang only: most slices.
    pub mpl: u32,
    /// Gang only: slot length.
    pub quantum: Micros,
    pub partitioner: PartitionerKind,
    /// Gang only: jobs also run in other slices where their processors are free.
    pub alternates: bool,
    pub repack: bool,
    /// Gang only: EASY backfilling into slices (estimates stretched by the MPL).
    pub backfill: bool,
    /// Gang only: time lost at every slot boundary while more than one slice exists.
    pub switch_overhead: Micros,
    /// Keep a Gantt chart's bars for this window of time (`Outcome::bars`).
    pub chart: Option<(Micros, Micros)>,
    /// Nodes with memory: jobs carry their requests, and with `fit` a node's jobs must fit
    /// in its memory together (`None`: one node, memory not modelled).
    pub node_memory: Option<NodeMemory>,
}

impl SimConfig {
    pub fn new(procs: u32, policy: Policy) -> SimConfig {
        SimConfig {
            procs,
            policy,
            mpl: 4,
            quantum: 100_000,
            partitioner: PartitionerKind::FirstFit,
            alternates: true,
            repack: false,
            backfill: false,
            switch_overhead: 0,
            chart: None,
            node_memory: None,
        }
    }

    /// The scheduling core's configuration (for a policy file's replay: the daemon's own,
    /// interactive preemption aside, since trace jobs are all batch).
    pub fn core_config(&self) -> Config {
        let gang = self.policy == Policy::Gang;
        Config {
            partitioner: self.partitioner,
            mpl: if gang { self.mpl } else { 1 },
            alternates: gang && self.alternates,
            backfill: if self.policy == Policy::Easy || gang && self.backfill {
                Backfill::Easy
            } else {
                Backfill::None
            },
            repack: gang && self.repack,
            // Trace jobs carry no class: all are batch.
            interactive_preempts: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the quantum must be positive (got {0} µs)")]
    Quantum(Micros),
    #[error("the switch overhead ({overhead} µs) must be shorter than the quantum ({quantum} µs)")]
    Overhead { overhead: Micros, quantum: Micros },
    #[error("the simulation stalled with {0} jobs unfinished (a scheduler bug: please report it with the command line)")]
    Stalled(usize),
    #[error("the workload could run for up to {seconds} s (last submission plus all work, stretched by the switch overhead): more than the simulator's clock holds ({limit} s)", limit = HORIZON / MICROS_PER_SEC)]
    TooLong { seconds: i128 },
}

/// What happened to one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobResult {
    pub id: u64,
    pub record: usize,
    pub submit: Micros,
    /// When it first ran.
    pub start: Micros,
    pub end: Micros,
    /// Its run time alone on its processors (the work).
    pub run: Micros,
    pub procs: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// In completion order.
    pub results: Vec<JobResult>,
    pub dropped: Dropped,
    /// Plan generations applied (each a change of the matrix).
    pub generations: u64,
    /// The Gantt chart's bars, when `SimConfig::chart` asked for them.
    pub bars: Vec<Bar>,
    /// Memory figures, when `SimConfig::node_memory` gave nodes memory.
    pub memory: Option<MemoryStats>,
}

/// Per-job replay state, indexed by the job's position in the input (its core job id).
#[derive(Clone, Default)]
struct Running {
    /// Work left at `base`.
    remaining: Micros,
    /// The slot boundary from which `positions` count: the generation that last changed the
    /// job's slices. Generations with as many slices keep every slot's slice, so a job whose
    /// slices stay the same keeps its base, its positions and its completion.
    base: Micros,
    /// The slices it runs in, in increasing order.
    slices: Vec<usize>,
    /// Its positions in the cycle that began at `base` (0 = that boundary's slot), sorted.
    positions: Vec<usize>,
    /// The slices it runs in under the generation being applied, valid when `gathered` is
    /// that generation's number.
    incoming: Vec<usize>,
    gathered: u64,
    /// When it first ran: set from the plan when placed, and cleared again if the next
    /// generation comes before that slot does.
    start: Option<Micros>,
    completion: Micros,
    /// Where the job sits in `Replay::active`, while it is there.
    slot_in_active: Option<usize>,
}

impl Running {
    /// Whether a completion entry for `time` is this job's current one.
    fn completes_at(&self, time: Micros) -> bool {
        self.slot_in_active.is_some() && self.completion == time
    }
}

struct Replay<'a> {
    config: &'a SimConfig,
    jobs: &'a [SimJob],
    sched: Scheduler,
    rotation: Rotation,
    cycle: Option<Cycle>,
    /// How many unfinished jobs each slice of `cycle` holds: a slice with none is vacant
    /// (the core's `Rotation::first_slot`), found without building the plan.
    members: Vec<usize>,
    /// Generations applied so far.
    generations: u64,
    state: Vec<Running>,
    /// Jobs that have been in a plan and have not finished.
    active: Vec<usize>,
    completions: BinaryHeap<Reverse<(Micros, usize)>>,
    results: Vec<JobResult>,
    /// Jobs the core placed since the last generation (what space sharing needs to know).
    placed: Vec<usize>,
    chart: Option<Recorder>,
}

impl Replay<'_> {
    /// Tells the chart, if one is kept, that job `index` is in `slices` from `at` on.
    fn chart(&mut self, index: usize, slices: &[usize], at: Micros) {
        if let Some(chart) = &mut self.chart {
            let spans: &[Span] = match self.sched.state(index as JobId) {
                Some(JobState::Placed { partition, .. }) => partition.spans(),
                _ => &[],
            };
            chart.set(index, self.jobs[index].id, spans, slices, at);
        }
    }

    fn slices(&self) -> usize {
        self.cycle.map_or(0, |c| c.slices)
    }

    fn useful_per_slot(&self) -> Micros {
        self.config.quantum - self.config.switch_overhead
    }

    /// Work a job did from its base to `to` (a slot boundary), under the current cycle.
    fn work_done(&self, job: &Running, to: Micros) -> Micros {
        let slices = self.slices();
        if job.positions.is_empty() {
            0
        } else if slices == 1 {
            to - job.base
        } else {
            let slots = (to - job.base) / self.config.quantum;
            let cycles = slots / slices as i64;
            let partial = slots % slices as i64;
            let in_partial = job
                .positions
                .iter()
                .filter(|&&p| (p as i64) < partial)
                .count();
            (cycles * job.positions.len() as i64 + in_partial as i64) * self.useful_per_slot()
        }
    }

    /// When a job with `job.remaining` work finishes under the current generation.
    fn completion(&self, job: &Running) -> Micros {
        let slices = self.slices();
        if job.positions.is_empty() {
            return Micros::MAX;
        }
        if slices == 1 {
            return job.base + job.remaining;
        }
        let useful = self.useful_per_slot();
        let k = job.positions.len() as i64;
        let last = (job.remaining + useful - 1) / useful - 1; // index of the last slot it needs
        let cycle = last / k;
        let position = job.positions[(last % k) as usize] as i64;
        let slot_start = job.base + (cycle * slices as i64 + position) * self.config.quantum;
        slot_start + self.config.switch_overhead + (job.remaining - last * useful)
    }

    /// Makes the core's decisions since the last generation take effect at `at`.
    fn apply(&mut self, at: Micros) {
        match self.config.policy {
            Policy::Gang => self.apply_plan(at),
            Policy::Fcfs | Policy::Easy => self.start_placed(at),
        }
        self.placed.clear();
    }

    /// Space sharing: one slice, so a running job's end never moves and only the jobs just
    /// placed need a start and an end. (Rebuilding the whole plan at every event cost the
    /// running jobs' count each time: thousands on a 93,312-processor machine.)
    fn start_placed(&mut self, at: Micros) {
        for &index in &self.placed {
            let job = &mut self.state[index];
            job.slot_in_active = Some(self.active.len());
            job.positions.push(0);
            job.start = Some(at);
            job.completion = at + job.remaining;
            self.completions.push(Reverse((job.completion, index)));
            self.active.push(index);
        }
        if self.chart.is_some() {
            for index in std::mem::take(&mut self.placed) {
                self.chart(index, &[0], at);
            }
        }
    }

    /// Time sharing: makes the matrix as it stands now the plan in force from `at`: a slot
    /// boundary, or inside a vacant slot, which the new plan's slice then runs from `at` to
    /// its end. A job whose slices changed (or every job, when the number of slices did) is
    /// re-based at the slot's start with its ends recomputed; the others keep theirs. While
    /// the rows stay, only the jobs the core's journal moved can have changed slices, as it says:
    /// reading every row and comparing every running job's slices at every generation cost
    /// more than the scheduling itself with thousands of jobs running.
    fn apply_plan(&mut self, at: Micros) {
        self.generations += 1;
        let number = self.generations;
        let rows = self.sched.row_count();
        let slot = self.rotation.slot_at(at);
        // Work up to the slot's start is work up to `at`: a slot that gives way mid-way was
        // vacant, so no job that is still here ran in it.
        let slot_start = self.rotation.slot_start(slot);
        let cycle = Cycle::follow(self.cycle.as_ref(), rows, slot);
        let same_turns = self.cycle.is_some_and(|old| old.slices == cycle.slices);
        let mut looked_at = match self.sched.take_changes() {
            PlanChanges::Moves(moves) if same_turns => {
                let mut moved = Vec::new();
                for RowMove { job, row, entered } in moves {
                    let index = job as usize;
                    let Running {
                        slices,
                        incoming,
                        gathered,
                        ..
                    } = &mut self.state[index];
                    if *gathered != number {
                        *gathered = number;
                        incoming.clone_from(slices);
                        moved.push(index);
                    }
                    match (incoming.binary_search(&row), entered) {
                        (Err(at), true) => incoming.insert(at, row),
                        (Ok(at), false) => _ = incoming.remove(at),
                        _ => {}
                    }
                }
                moved.iter().for_each(|&index| self.activate(index));
                moved
            }
            PlanChanges::Moves(_) | PlanChanges::All => {
                for (slice, row) in self.sched.plan_jobs().iter().enumerate() {
                    for &id in row {
                        self.gather(id as usize, number, slice);
                    }
                }
                self.active.clone()
            }
        };
        // Job order, whichever way they were found: the chart's bars close in this order.
        looked_at.sort_unstable();
        let mut changed = Vec::new();
        for index in looked_at {
            let job = &self.state[index];
            if job.slot_in_active.is_none() {
                continue; // finished, or named by the journal without having run
            }
            let incoming: &[usize] = if job.gathered == number {
                &job.incoming
            } else {
                &[]
            };
            if !same_turns || incoming != job.slices.as_slice() {
                // Work done under the old cycle, up to the switch.
                changed.push((index, self.work_done(job, slot_start)));
            }
        }
        self.cycle = Some(cycle);
        if !same_turns {
            // Every job is re-based below, and counted again.
            self.members = vec![0; rows];
        }
        let (slices, quantum) = (cycle.slices, self.config.quantum);
        // What the slice under way lost before `at` (with several slices, at most the slot's
        // useful time: its switch overhead is counted anyway), owed by its jobs as extra work,
        // so that their completions stay in closed form from the slot's start.
        let lost = match slices {
            1 => at - slot_start,
            _ => (at - slot_start).min(self.useful_per_slot()),
        };
        for (index, work) in changed {
            let job = &mut self.state[index];
            job.remaining -= work;
            debug_assert!(
                job.remaining > 0,
                "job {index} finished before {at} unnoticed"
            );
            job.base = slot_start;
            if same_turns {
                job.slices.iter().for_each(|&s| self.members[s] -= 1);
            }
            if job.gathered == number {
                std::mem::swap(&mut job.slices, &mut job.incoming);
            } else {
                job.slices.clear();
            }
            job.slices.iter().for_each(|&s| self.members[s] += 1);
            job.positions.clear();
            job.positions
                .extend(job.slices.iter().map(|&s| cycle.position_of(s)));
            if job.positions.contains(&0) {
                job.remaining += lost;
            }
            if self.chart.is_some() {
                let slices = self.state[index].slices.clone();
                self.chart(index, &slices, at);
            }
            let job = &mut self.state[index];
            job.positions.sort_unstable();
            // A start promised by the last generation for a slot it never reached is void.
            if job.start.is_some_and(|start| start >= at) {
                job.start = None;
            }
            if let (None, Some(&first)) = (job.start, job.positions.first()) {
                let offset = if slices > 1 { first as i64 } else { 0 };
                job.start = Some((slot_start + offset * quantum).max(at));
            }
            let completion = self.completion(&self.state[index]);
            // An unchanged completion is already in the heap: pushing it again would only
            // grow the heap with entries to skip later.
            if completion != self.state[index].completion {
                self.state[index].completion = completion;
                if completion != Micros::MAX {
                    self.completions.push(Reverse((completion, index)));
                }
            }
        }
        // A changed completion leaves its old entry behind until it surfaces; with jobs
        // re-based at every generation a heap of mostly dead entries made every pop slower.
        if self.completions.len() > 2 * self.active.len() + 64 {
            let state = &self.state;
            self.completions
                .retain(|&Reverse((time, index))| state[index].completes_at(time));
        }
        debug_assert_eq!(
            self.rows_in_force(),
            sorted_rows(self.sched.plan_jobs()),
            "generation {number} at {at}: the jobs' slices are not the plan's"
        );
        debug_assert_eq!(
            self.members,
            self.rows_in_force()
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>(),
            "generation {number} at {at}: the slices' counts are not their jobs'"
        );
    }

    /// The plan's rows as the jobs' slices say, each sorted: the journal's shortcut must give
    /// what reading every row gives (checked in debug builds, so by every replay test).
    fn rows_in_force(&self) -> Vec<Vec<JobId>> {
        let mut rows = vec![Vec::new(); self.slices()];
        for &index in &self.active {
            for &slice in &self.state[index].slices {
                rows[slice].push(index as JobId);
            }
        }
        sorted_rows(rows)
    }

    /// Adds `slice` to job `index`'s slices under generation `number`.
    fn gather(&mut self, index: usize, number: u64, slice: usize) {
        let job = &mut self.state[index];
        if job.gathered != number {
            job.gathered = number;
            job.incoming.clear();
        }
        job.incoming.push(slice);
        self.activate(index);
    }

    /// A job in a plan for the first time becomes active.
    fn activate(&mut self, index: usize) {
        let job = &mut self.state[index];
        if job.slot_in_active.is_none() && !job.incoming.is_empty() {
            job.slot_in_active = Some(self.active.len());
            self.active.push(index);
        }
    }

    /// The earliest pending completion, skipping stale heap entries.
    fn next_completion(&mut self) -> Option<Micros> {
        while let Some(&Reverse((time, index))) = self.completions.peek() {
            if self.state[index].completes_at(time) {
                return Some(time);
            }
            self.completions.pop();
        }
        None
    }

    fn finish_due(&mut self, now: Micros) {
        while self.next_completion() == Some(now) {
            let Reverse((_, index)) = self.completions.pop().expect("peeked");
            let job = std::mem::take(&mut self.state[index]);
            job.slices.iter().for_each(|&s| self.members[s] -= 1);
            let at = job.slot_in_active.expect("validated");
            self.active.swap_remove(at);
            if let Some(&moved) = self.active.get(at) {
                self.state[moved].slot_in_active = Some(at);
            }
            self.chart(index, &[], now);
            let sim_job = &self.jobs[index];
            self.results.push(JobResult {
                id: sim_job.id,
                record: sim_job.record,
                submit: sim_job.submit,
                start: job.start.expect("a finished job ran"),
                end: now,
                run: sim_job.run,
                procs: sim_job.procs,
            });
            let decisions = self
                .sched
                .remove(index as JobId, now)
                .expect("a running job is known to the scheduler");
            self.note_placed(&decisions);
        }
    }

    fn note_placed(&mut self, decisions: &[Decision]) {
        self.placed.extend(decisions.iter().filter_map(|d| match d {
            Decision::Placed { job, .. } => Some(*job as usize),
            Decision::Queued { .. } | Decision::Removed { .. } => None,
        }));
    }

    /// When a change made at `now` takes effect: by the daemon's rule under gang scheduling
    /// (the next boundary, or at once in a vacant slot), at once when sharing space.
    fn takes_effect(&self, now: Micros) -> Micros {
        match self.config.policy {
            Policy::Gang => {
                let slot = self
                    .rotation
                    .first_slot(self.cycle.as_ref(), now, |s| self.members[s] == 0);
                self.rotation.slot_start(slot).max(now)
            }
            Policy::Fcfs | Policy::Easy => now,
        }
    }
}

fn sorted_rows(mut rows: Vec<Vec<JobId>>) -> Vec<Vec<JobId>> {
    rows.iter_mut().for_each(|row| row.sort_unstable());
    rows
}

/// The latest time the replay may reach: a quarter of the `i64` microsecond range (73,000
/// years), so no sum of times on the way can overflow.
const HORIZON: Micros = Micros::MAX / 4;

/// Refuses a workload whose worst case (every job one after the other, after the last
/// submission, each slot losing its switch overhead, each job waiting a slot to start) does
/// not fit the clock. Archive logs are ten orders of magnitude below it.
fn check_horizon(jobs: &[SimJob], config: &SimConfig) -> Result<(), SimError> {
    let quantum = i128::from(config.quantum);
    let useful = quantum - i128::from(config.switch_overhead);
    let last_submit = jobs.iter().map(|j| i128::from(j.submit)).max().unwrap_or(0);
    let work: i128 = jobs
        .iter()
        .map(|j| i128::from(j.run) * quantum / useful + 2 * quantum)
        .sum();
    let worst = last_submit + work;
    if worst > i128::from(HORIZON) {
        return Err(SimError::TooLong {
            seconds: worst / i128::from(MICROS_PER_SEC),
        });
    }
    Ok(())
}

/// Replays `jobs` (sorted by submit time) under `config`. `progress(done, total)` is called
/// now and then with the number of finished jobs.
pub fn simulate(
    jobs: &[SimJob],
    mut dropped: Dropped,
    config: &SimConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, SimError> {
    if config.quantum <= 0 {
        return Err(SimError::Quantum(config.quantum));
    }
    if config.switch_overhead < 0 || config.switch_overhead >= config.quantum {
        return Err(SimError::Overhead {
            overhead: config.switch_overhead,
            quantum: config.quantum,
        });
    }
    check_horizon(jobs, config)?;
    let mut machine = Machine::line(config.procs)?;
    let mut watch = None;
    if let Some(memory) = &config.node_memory {
        machine = machine.with_nodes(memory.procs_per_node)?;
        if memory.fit {
            machine = machine.with_node_memory(memory.bytes);
        }
        let default_kb = median_kb(jobs);
        let core = config.core_config();
        watch = Some(Watch::new(memory, &machine, core, jobs.len(), default_kb));
    }
    let mut replay = Replay {
        config,
        jobs,
        sched: Scheduler::new(machine, config.core_config())?,
        rotation: Rotation::new(0, config.quantum),
        cycle: None,
        members: Vec::new(),
        generations: 0,
        state: jobs
            .iter()
            .map(|j| Running {
                remaining: j.run,
                completion: Micros::MAX,
                ..Running::default()
            })
            .collect(),
        active: Vec::new(),
        completions: BinaryHeap::new(),
        results: Vec::with_capacity(jobs.len()),
        placed: Vec::new(),
        chart: config
            .chart
            .map(|(from, to)| Recorder::new(from, to, jobs.len())),
    };
    let mut generations = 0;
    let mut next_arrival = 0;
    let mut pending: Option<Micros> = None;
    let mut reported = 0;
    loop {
        let arrival = jobs.get(next_arrival).map(|j| j.submit);
        let completion = replay.next_completion();
        // At equal times: completions free processors first, then arrivals join, then the
        // switch applies everything decided at that instant.
        let now = [completion, arrival, pending].into_iter().flatten().min();
        let Some(now) = now else { break };
        let mut changed = false;
        if completion == Some(now) {
            replay.finish_due(now);
            changed = true;
        }
        while jobs.get(next_arrival).is_some_and(|j| j.submit == now) {
            let job = &jobs[next_arrival];
            // The core knows each job by its position in the input.
            let mut request = JobRequest::new(next_arrival as JobId, Shape::Count(job.procs))
                .estimate(job.estimate);
            next_arrival += 1;
            if let Some(watch) = &mut watch {
                // Refused here with the rule or without, so both replay the same jobs.
                let Some(with_memory) = watch.with_memory(job, request) else {
                    dropped.never_fits += 1;
                    continue;
                };
                request = with_memory;
            }
            match replay.sched.submit(request, now) {
                Ok(decisions) => {
                    changed |= decisions
                        .iter()
                        .any(|d| matches!(d, Decision::Placed { .. }));
                    replay.note_placed(&decisions);
                }
                Err(SubmitError::NeverFits { .. }) => dropped.never_fits += 1,
                Err(e @ SubmitError::Duplicate(_)) => {
                    unreachable!("positions are unique: {e}")
                }
            }
        }
        if changed && pending.is_none() {
            pending = Some(replay.takes_effect(now));
        }
        if pending == Some(now) {
            replay.apply(now);
            generations += 1;
            pending = None;
        }
        if let Some(watch) = &mut watch {
            watch.observe(&replay.sched, now);
        }
        if replay.results.len() >= reported + 1024 {
            reported = replay.results.len();
            progress(reported, jobs.len());
        }
    }
    let unfinished = replay.sched.job_count() + replay.active.len();
    if unfinished > 0 {
        return Err(SimError::Stalled(unfinished));
    }
    progress(replay.results.len(), jobs.len());
    Ok(Outcome {
        results: replay.results,
        dropped,
        generations,
        bars: replay.chart.map_or_else(Vec::new, Recorder::finish),
        memory: watch.map(Watch::finish),
    })
}
