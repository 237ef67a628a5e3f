//! Skew: after a thaw, the time from the first to the last task of a job starting to run.
//!
//! Read from `/proc/PID/task/TID/schedstat`. Its run time is no use here: for a thread running
//! on another processor it is updated only at ticks (4 ms here), so a thread that started at
//! once looked idle for milliseconds. The switch-in count and the run-queue wait are updated
//! the moment a thread is switched in: a thaw makes every task runnable at once (within the
//! µs the thaw takes), and each task's start is that moment plus its added run-queue wait.
//! So the skew is the spread of the waits, whatever the poll interval. The baseline is taken
//! while the job is still frozen.

use cosched_cgroups::procfs::{self, SchedStat};
use cosched_cgroups::Pid;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The most tasks a capture reads per processor of the job. A gang's working tasks fit its
/// processors (only then is its skew measured), and a job of thousands of threads must not
/// make the clock thread read them all at every boundary, ahead of every job's processes.
pub const MOST_TASKS_PER_CPU: usize = 16;

/// How long a thawed task may wait before its processor is kicked: most start within it
/// (skew p50 10-20 µs), and a kick just before a task's own start would delay it.
const KICK_AFTER: Duration = Duration::from_micros(50);

#[derive(Clone, Debug)]
pub struct Baseline {
    /// (process, thread, its counters) for every task.
    tasks: Vec<(Pid, Pid, SchedStat)>,
}

impl Baseline {
    /// The counters of every thread of `pids`, taken while they are stopped; `None` (nothing
    /// read past that) when they are more than `most`.
    pub fn capture(pids: &[Pid], most: usize) -> Option<Baseline> {
        if pids.len() > most {
            return None;
        }
        let mut tasks = Vec::new();
        for &pid in pids {
            for tid in procfs::tasks(pid) {
                if tasks.len() == most {
                    return None;
                }
                if let Ok(counters) = procfs::task_schedstat(pid, tid) {
                    tasks.push((pid, tid, counters));
                }
            }
        }
        Some(Baseline { tasks })
    }

    /// Keeps the tasks that ran since `previous` was captured, at least a tenth as long as the
    /// busiest: a launcher asleep in `wait()` never starts after a thaw, and would make every
    /// measurement give up. A job's skew is that of its working tasks.
    pub fn busy_since(mut self, previous: &Baseline) -> Baseline {
        let before: HashMap<(Pid, Pid), u64> = previous
            .tasks
            .iter()
            .map(|&(pid, tid, counters)| ((pid, tid), counters.runtime_ns))
            .collect();
        let ran = |&(pid, tid, now): &(Pid, Pid, SchedStat)| {
            before
                .get(&(pid, tid))
                .map_or(now.runtime_ns, |&runtime_ns| {
                    now.runtime_ns.saturating_sub(runtime_ns)
                })
        };
        let busiest = self.tasks.iter().map(ran).max().unwrap_or(0);
        self.tasks
            .retain(|task| busiest > 0 && ran(task) * 10 >= busiest);
        self
    }

    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// Polls until every task has been switched in since the baseline, then returns the
    /// spread of their run-queue waits. `patience` when a task has not run by then (the skew
    /// is at least that); `None` when a task vanished. From [`KICK_AFTER`] on, at each poll
    /// the processor of each task still waiting for one is kicked (`kick`, [`crate::kick`]),
    /// but this thread's own: its sleep is a kick there.
    pub fn measure(&self, patience: Duration, kick: &mut impl FnMut(usize)) -> Option<Duration> {
        if self.tasks.is_empty() {
            return None;
        }
        let begin = Instant::now();
        let mut waits: Vec<Option<u64>> = vec![None; self.tasks.len()];
        while waits.iter().any(Option::is_none) {
            // Sleep first, never spin: this runs at real-time priority, and a task thawed onto
            // this thread's processor starts only once it sleeps.
            std::thread::sleep(Duration::from_micros(20));
            // SAFETY: no arguments; -1 (no answer) matches no processor.
            let here = unsafe { libc::sched_getcpu() };
            for (wait, (pid, tid, base)) in waits.iter_mut().zip(&self.tasks) {
                if wait.is_none() {
                    let now = procfs::task_schedstat(*pid, *tid).ok()?;
                    if now.timeslices > base.timeslices {
                        *wait = Some(now.run_delay_ns.saturating_sub(base.run_delay_ns));
                    } else if let Ok(waiting) = procfs::thread_stat(*pid, *tid) {
                        // Runnable, not asleep: a task that sleeps waits for no processor.
                        let kicking = begin.elapsed() >= KICK_AFTER;
                        if kicking && waiting.state == 'R' && waiting.processor as i32 != here {
                            kick(waiting.processor);
                        }
                    }
                }
            }
            if begin.elapsed() > patience {
                return Some(patience);
            }
        }
        let waits: Vec<u64> = waits.into_iter().flatten().collect();
        let spread = waits.iter().max()? - waits.iter().min()?;
        Some(Duration::from_nanos(spread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(runtime_ns: u64) -> SchedStat {
        SchedStat {
            runtime_ns,
            ..SchedStat::default()
        }
    }

    #[test]
    fn only_the_tasks_that_worked_are_kept() {
        let before = Baseline {
            tasks: vec![(1, 1, ran(500)), (1, 2, ran(1_000)), (1, 3, ran(2_000))],
        };
        // Task 1 (a launcher) ran 5 ns, tasks 2 and 3 ran 90 and 100 ms; task 4 is new.
        let now = Baseline {
            tasks: vec![
                (1, 1, ran(505)),
                (1, 2, ran(90_001_000)),
                (1, 3, ran(100_002_000)),
                (1, 4, ran(50_000_000)),
            ],
        };
        let busy = now.busy_since(&before);
        let tids: Vec<Pid> = busy.tasks.iter().map(|t| t.1).collect();
        assert_eq!(tids, vec![2, 3, 4]);
        let idle = Baseline {
            tasks: vec![(1, 1, ran(500))],
        }
        .busy_since(&before);
        assert_eq!(idle.task_count(), 0);
    }

    #[test]
    fn a_capture_stops_at_its_bound() {
        let me = std::process::id() as Pid;
        // Four threads of this test's own, alive while it captures: more than 3 in all.
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let held = std::sync::Arc::new(std::sync::Mutex::new(held));
        let waiting: Vec<_> = (0..4)
            .map(|_| {
                let held = std::sync::Arc::clone(&held);
                std::thread::spawn(move || {
                    let _ = held
                        .lock()
                        .map(|rx| rx.recv_timeout(Duration::from_secs(10)));
                })
            })
            .collect();
        let bounded = Baseline::capture(&[me], 3);
        let roomy = Baseline::capture(&[me], 100_000);
        drop(hold);
        waiting.into_iter().for_each(|t| t.join().unwrap());
        assert!(bounded.is_none(), "read past its bound");
        assert!(roomy.is_some_and(|b| b.task_count() >= 5));
        assert!(
            Baseline::capture(&[me, me], 1).is_none(),
            "more processes than the bound"
        );
    }

    #[test]
    fn this_thread_is_measured_as_it_runs() {
        let me = std::process::id() as Pid;
        let baseline = Baseline::capture(&[me], 1_000).expect("this process's threads");
        assert!(baseline.task_count() >= 1);
        // Sleeping and waking switches this thread in again; other test threads may be
        // asleep for good, so only this one is kept.
        let mine = Baseline {
            tasks: baseline
                .tasks
                .into_iter()
                .filter(|t| t.1 == unsafe { libc::gettid() })
                .collect(),
        };
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(
            mine.measure(Duration::from_secs(1), &mut |_| {}),
            Some(Duration::ZERO)
        );
    }

    /// A task asleep waits for no processor: the measure gives up at its patience without
    /// kicking anyone.
    #[test]
    fn a_sleeping_task_is_never_kicked() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as Pid;
        // Asleep in nanosleep, not still starting.
        let asleep = || procfs::stat(pid).is_ok_and(|s| s.state == 'S');
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !asleep() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let baseline = Baseline::capture(&[pid], 16).expect("the child's thread");
        let mut kicks = 0;
        let skew = baseline.measure(Duration::from_millis(20), &mut |_| kicks += 1);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(skew, Some(Duration::from_millis(20)));
        assert_eq!(kicks, 0, "a sleeping task's processor was kicked");
    }
}
