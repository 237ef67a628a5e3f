//! Which processors a job's threads may use inside its cpuset (`sched_setaffinity`).
//!
//! Moderate mode needs this: when weights flip at a slot boundary, the favoured job's busy
//! threads are often stacked on one processor, and the kernel's balancer leaves a hot running
//! thread where it is for tens of milliseconds; measured here, whole 100 ms slots split 50/50
//! between the favoured job and the other. Gang mode too: thawed threads wake where they last
//! ran. Pinning a job's working threads one per processor when its slot begins removes that.

use crate::members::{self, Member};
use crate::{procfs, CgroupError, Pid, Result};
use cosched_core::Partition;
use std::collections::{BTreeMap, HashMap};

/// Which processor each thread gets. `threads` holds each thread and the processor it last ran
/// on, busiest first. The busiest threads, as many as there are processors, get one processor
/// each; the others share as evenly as they allow (at most ceil(threads / processors) each). A
/// thread stays where it is when it may, so that spreading moves as few threads as possible.
/// (With one even rule for all, two ranks stacked on one processor stayed stacked beside a
/// launcher that still counted as a worker: three threads, room for two on each.)
pub fn spread_plan(threads: &[(Pid, usize)], cpus: &[usize]) -> Vec<(Pid, usize)> {
    if cpus.is_empty() {
        return Vec::new();
    }
    let (leaders, rest) = threads.split_at(threads.len().min(cpus.len()));
    let mut load = vec![0usize; cpus.len()];
    let mut plan = Vec::with_capacity(threads.len());
    let mut movers = Vec::new();
    for (group, room) in [(leaders, 1), (rest, threads.len().div_ceil(cpus.len()))] {
        for &(tid, last) in group {
            match cpus.iter().position(|&c| c == last) {
                Some(i) if load[i] < room => {
                    load[i] += 1;
                    plan.push((tid, last));
                }
                _ => movers.push(tid),
            }
        }
        // Leaders that must move take the processors no leader kept, before the rest choose.
        for tid in movers.drain(..) {
            let (i, _) = load
                .iter()
                .enumerate()
                .min_by_key(|&(_, n)| *n)
                .expect("cpus is not empty");
            load[i] += 1;
            plan.push((tid, cpus[i]));
        }
    }
    plan
}

/// The affinity mask of a partition's processors (for `sched_setaffinity`).
pub fn mask_of(cpus: &Partition) -> libc::cpu_set_t {
    mask(cpus.processors().map(|cpu| cpu as usize))
}

/// Keeps the calling thread on processor `cpu` alone.
pub fn pin_this_thread(cpu: usize) -> std::io::Result<()> {
    let set = mask([cpu]);
    // SAFETY: the pointer and size describe `set`, which outlives the call; 0 is this thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The affinity mask of `cpus`.
fn mask(cpus: impl IntoIterator<Item = usize>) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; zeroed is its empty value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus {
        // SAFETY: CPU_SET bounds-checks against the set's size.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    set
}

/// Sets a thread's allowed processors to `set` (`cpus` names them in an error). The kernel
/// intersects the mask with the thread's cpuset, so "every processor" means "all of its
/// cpuset". A thread that exited is no error, and neither is one that is no longer the one
/// meant: `tid` is checked first to be a thread of `member` (its `/proc` entry, read while
/// the process held has not exited) started when the look saw it (`started`, if it looked),
/// so that a tid freed and taken by another process's thread since is left be.
fn apply(
    member: &Member,
    tid: Pid,
    started: Option<u64>,
    set: &libc::cpu_set_t,
    cpus: impl FnOnce() -> String,
) -> Result<()> {
    let same = procfs::thread_stat(member.pid, tid)
        .is_ok_and(|now| started.is_none_or(|then| then == now.started));
    if !same || !member.alive() {
        return Ok(());
    }
    // SAFETY: the pointer and size describe `set`, which outlives the call.
    let done = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(set), set) };
    let error = std::io::Error::last_os_error();
    match (done, error.raw_os_error()) {
        (0, _) | (_, Some(libc::ESRCH)) => Ok(()),
        _ => Err(CgroupError::Affinity {
            tid,
            cpus: cpus(),
            source: error,
        }),
    }
}

/// Every thread of the given processes, with its process.
fn threads_of(pids: &[Pid]) -> impl Iterator<Item = (Pid, Pid)> + '_ {
    pids.iter()
        .flat_map(|&pid| procfs::tasks(pid).into_iter().map(move |tid| (pid, tid)))
}

/// The threads worth a processor of their own, busiest first: those that used at least a tenth
/// of the CPU time of the busiest (the ranks, not the launcher or progress threads that sleep),
/// or the runnable ones while none has used any. Judged by CPU time over the threads' lives, not by
/// their state now: a rank caught between two polls looked asleep, was left out, and two
/// ranks ended up pinned to one processor (each kept where it was at the time).
fn workers(threads: &[(Pid, procfs::Stat)]) -> Vec<(Pid, usize)> {
    let busiest = threads.iter().map(|(_, s)| s.cpu_ticks).max().unwrap_or(0);
    let mut workers: Vec<&(Pid, procfs::Stat)> = threads
        .iter()
        .filter(|(_, s)| match busiest {
            0 => s.state == 'R',
            _ => s.cpu_ticks * 10 >= busiest,
        })
        .collect();
    workers.sort_by_key(|(_, s)| std::cmp::Reverse(s.cpu_ticks));
    workers.iter().map(|(tid, s)| (*tid, s.processor)).collect()
}

/// Pins the working threads of `pids` one per processor of `cpus` ([`spread_plan`]), each
/// only as a thread of a process that `list` (the job's listing) names once it is held
/// ([`members::each_held`]); returns whether there were any.
pub fn spread(
    pids: &[Pid],
    list: impl FnMut() -> Result<Vec<Pid>>,
    cpus: &Partition,
) -> Result<bool> {
    // Indexed by position in the plan, and compared with `/proc`'s processor numbers.
    let cpus: Vec<usize> = cpus.processors().map(|cpu| cpu as usize).collect();
    let threads: Vec<(Pid, Pid, procfs::Stat)> = threads_of(pids)
        .filter_map(|(pid, tid)| Some((pid, tid, procfs::thread_stat(pid, tid).ok()?)))
        .collect();
    let seen: Vec<(Pid, procfs::Stat)> = threads.iter().map(|(_, tid, s)| (*tid, *s)).collect();
    let workers = workers(&seen);
    let whose: HashMap<Pid, (Pid, u64)> = threads
        .iter()
        .map(|(pid, tid, stat)| (*tid, (*pid, stat.started)))
        .collect();
    // By process, so that each is held once: (thread, its start, its processor).
    let mut pins: BTreeMap<Pid, Vec<(Pid, u64, usize)>> = BTreeMap::new();
    for (tid, cpu) in spread_plan(&workers, &cpus) {
        let (pid, started) = whose[&tid];
        pins.entry(pid).or_default().push((tid, started, cpu));
    }
    let owners: Vec<Pid> = pins.keys().copied().collect();
    members::each_held(&owners, list, |members| {
        for member in members {
            for &(tid, started, cpu) in &pins[&member.pid] {
                apply(member, tid, Some(started), &mask([cpu]), || cpu.to_string())?;
            }
        }
        Ok(())
    })?;
    Ok(!workers.is_empty())
}

/// Lets every thread of `pids` use every processor of its cpuset again, each only as a
/// thread of a process that `list` names once it is held ([`members::each_held`]).
pub fn unpin(pids: &[Pid], list: impl FnMut() -> Result<Vec<Pid>>) -> Result<()> {
    // Built once: unpinning runs at every slot boundary, for every thread of the job.
    let every = mask(0..libc::CPU_SETSIZE as usize);
    members::each_held(pids, list, |members| {
        members.iter().try_for_each(|member| {
            procfs::tasks(member.pid)
                .into_iter()
                .try_for_each(|tid| apply(member, tid, None, &every, || "every processor".into()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_the_threads_that_used_cpu() {
        let stat = |state, cpu_ticks, processor| procfs::Stat {
            state,
            cpu_ticks,
            processor,
            parent: 1,
            started: 0,
        };
        // A launcher (2 ticks) and a progress thread (0) beside two ranks, one asleep now.
        let threads = [
            (1, stat('S', 2, 0)),
            (2, stat('R', 400, 1)),
            (3, stat('S', 380, 1)),
            (4, stat('S', 0, 0)),
        ];
        assert_eq!(workers(&threads), vec![(2, 1), (3, 1)]);
        // Busiest first: the order spreading gives processors in.
        let launcher_busy = [
            (1, stat('S', 30, 0)),
            (2, stat('R', 40, 0)),
            (3, stat('R', 90, 0)),
        ];
        assert_eq!(workers(&launcher_busy), vec![(3, 0), (2, 0), (1, 0)]);
        // A new job: the runnable threads.
        let fresh = [(1, stat('S', 0, 0)), (2, stat('R', 0, 1))];
        assert_eq!(workers(&fresh), vec![(2, 1)]);
    }

    #[test]
    fn stacked_threads_are_spread_and_settled_ones_stay() {
        // Two threads stacked on 0 of {0, 1}: the first stays, the second moves to 1.
        assert_eq!(
            spread_plan(&[(10, 0), (11, 0)], &[0, 1]),
            vec![(10, 0), (11, 1)]
        );
        // Already one per processor: nobody moves.
        assert_eq!(
            spread_plan(&[(10, 1), (11, 0)], &[0, 1]),
            vec![(10, 1), (11, 0)]
        );
        // A thread last seen outside the processors given goes to the least loaded.
        assert_eq!(
            spread_plan(&[(10, 7), (11, 2)], &[2, 3]),
            vec![(11, 2), (10, 3)]
        );
        // Two ranks stacked on 0 beside a launcher that still counts: the ranks (busiest
        // first) get a processor each; the launcher shares.
        assert_eq!(
            spread_plan(&[(10, 0), (11, 0), (12, 0)], &[0, 1]),
            vec![(10, 0), (11, 1), (12, 0)]
        );
        // More threads than processors: at most ceil(5 / 2) = 3 on one.
        let plan = spread_plan(&[(1, 0), (2, 0), (3, 0), (4, 0), (5, 0)], &[0, 1]);
        let on_0 = plan.iter().filter(|(_, c)| *c == 0).count();
        assert_eq!((on_0, plan.len()), (3, 5));
        assert!(spread_plan(&[(1, 0)], &[]).is_empty());
    }
}
