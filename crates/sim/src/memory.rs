//! Memory-fit time sharing in the replay: each job's memory from the log's request (SWF field
//! 10, KB per processor: so much on a node for each of its processors there), and what the
//! figures need on both sides of the rule: the jobs it made wait for memory, and, without it,
//! how often and how far the jobs placed on a node would have needed more memory than the node
//! has (the paging the rule prevents).

use crate::workload::SimJob;
use cosched_core::{Config, JobRequest, Machine, Memory, Micros, Pending, Scheduler};
use serde::Serialize;

/// Nodes with memory (`SimConfig::node_memory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeMemory {
    pub procs_per_node: u32,
    /// Bytes on each node.
    pub bytes: u64,
    /// Admission keeps each node's placed jobs within its memory (the core's rule); off, the
    /// replay only watches what sharing without the rule would need.
    pub fit: bool,
}

/// Memory figures of a replay on nodes with memory (`Outcome::memory`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryStats {
    pub node_memory_bytes: u64,
    pub procs_per_node: u32,
    pub memory_fit: bool,
    /// Jobs whose record gives no requested memory (field 10 unknown, 0 or negative),
    /// counted at `memory_default_kb_per_proc`: the median of the others' requests.
    pub memory_unknown: u64,
    pub memory_default_kb_per_proc: u64,
    /// Jobs the memory of the nodes can never hold: refused with the rule or without (so both
    /// replay the same jobs), and counted in `dropped_by_reason.never_fits`.
    pub memory_never_fits: u64,
    /// Jobs that waited for memory at some event: processors were free for them in some
    /// slice but every such place was on a node short of their memory.
    pub memory_waited: u64,
    /// Times a node's placed jobs came to need more than its memory (0 with the rule).
    pub overcommits: u64,
    /// The share of node time (nodes x makespan) spent with more memory placed than the node
    /// has.
    pub overcommitted_node_time: f64,
    /// The most memory a node's placed jobs needed at once, as a multiple of its memory
    /// (above 1: overcommitted).
    pub peak_node_memory: f64,
}

/// The median of the jobs' known requests per processor (KB; 0 when none is known): what a
/// job without one is counted at: the request most users made.
pub fn median_kb(jobs: &[SimJob]) -> u64 {
    let mut known: Vec<u64> = jobs.iter().filter_map(|j| j.memory_kb_per_proc).collect();
    if known.is_empty() {
        return 0;
    }
    let middle = known.len() / 2;
    *known.select_nth_unstable(middle).1
}

/// Follows a replay event by event.
pub(crate) struct Watch {
    stats: MemoryStats,
    /// An empty scheduler on the nodes with their memory: whether a job could ever run is
    /// the core's answer there, whether or not the replay applies the rule.
    judge: Scheduler,
    /// Which nodes are overcommitted now.
    over: Vec<bool>,
    overcommitted: u64,
    /// Node-microseconds spent overcommitted, up to `since`.
    over_time: i128,
    first: Option<Micros>,
    since: Micros,
    /// Jobs already counted in `memory_waited`.
    waited: Vec<bool>,
}

impl Watch {
    /// `machine`: the replay's, in nodes; `default_kb`: what a job with no request counts
    /// per processor.
    pub(crate) fn new(
        memory: &NodeMemory,
        machine: &Machine,
        config: Config,
        jobs: usize,
        default_kb: u64,
    ) -> Watch {
        let judge = Machine::with_node_memory(machine.clone(), memory.bytes);
        Watch {
            judge: Scheduler::new(judge, config).expect("the replay's own configuration"),
            stats: MemoryStats {
                node_memory_bytes: memory.bytes,
                procs_per_node: memory.procs_per_node,
                memory_fit: memory.fit,
                memory_unknown: 0,
                memory_default_kb_per_proc: default_kb,
                memory_never_fits: 0,
                memory_waited: 0,
                overcommits: 0,
                overcommitted_node_time: 0.0,
                peak_node_memory: 0.0,
            },
            over: vec![false; machine.nodes() as usize],
            overcommitted: 0,
            over_time: 0,
            first: None,
            since: 0,
            waited: vec![false; jobs],
        }
    }

    /// `request` with job `job`'s memory, or `None` if the nodes' memory can never hold it.
    pub(crate) fn with_memory(&mut self, job: &SimJob, request: JobRequest) -> Option<JobRequest> {
        let kb = job.memory_kb_per_proc.unwrap_or_else(|| {
            self.stats.memory_unknown += 1;
            self.stats.memory_default_kb_per_proc
        });
        let request = request.memory(Memory::PerCpu(kb.saturating_mul(1024)));
        if self.judge.check(&request).is_err() {
            self.stats.memory_never_fits += 1;
            return None;
        }
        Some(request)
    }

    /// The matrix as it stands after everything that happened at `now`.
    pub(crate) fn observe(&mut self, sched: &Scheduler, now: Micros) {
        self.first.get_or_insert(now);
        self.over_time += i128::from(now - self.since) * i128::from(self.overcommitted);
        self.since = now;
        let capacity = self.stats.node_memory_bytes;
        self.overcommitted = 0;
        for (over, &used) in self.over.iter_mut().zip(sched.memory_used()) {
            let now_over = used > capacity;
            self.stats.overcommits += u64::from(now_over && !*over);
            self.overcommitted += u64::from(now_over);
            *over = now_over;
            let ratio = used as f64 / capacity as f64;
            self.stats.peak_node_memory = self.stats.peak_node_memory.max(ratio);
        }
        if self.stats.memory_fit {
            for id in sched.queued() {
                let seen = &mut self.waited[id as usize];
                if !*seen && sched.pending_reason(id) == Some(Pending::Memory) {
                    *seen = true;
                    self.stats.memory_waited += 1;
                }
            }
        }
    }

    pub(crate) fn finish(self) -> MemoryStats {
        let span = i128::from(self.since - self.first.unwrap_or(self.since));
        let node_time = span * self.over.len() as i128;
        MemoryStats {
            overcommitted_node_time: if node_time > 0 {
                self.over_time as f64 / node_time as f64
            } else {
                0.0
            },
            ..self.stats
        }
    }
}
