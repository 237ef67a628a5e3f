//! Skew: after a thaw, the time from the first to the last task of a job starting to run.
//!
//! Read from `/proc/PID/task/TID/schedstat`, whose run time includes the current stretch: a
//! task seen at time `t` with `r` ns more run time than before the thaw began running at about
//! `t - r` (exact for a task that has run since, as a spinning rank does). So the poll interval
//! does not limit the resolution. The baseline is taken while the job is still frozen.

use cosched_cgroups::{procfs, Pid};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Baseline {
    /// (process, thread, run time in ns) of every task.
    tasks: Vec<(Pid, Pid, u64)>,
}

impl Baseline {
    /// Run times of every thread of `pids`, taken while they are stopped.
    pub fn capture(pids: &[Pid]) -> Baseline {
        let tasks = pids
            .iter()
            .flat_map(|&pid| procfs::tasks(pid).into_iter().map(move |tid| (pid, tid)))
            .filter_map(|(pid, tid)| Some((pid, tid, procfs::task_runtime_ns(pid, tid).ok()?)))
            .collect();
        Baseline { tasks }
    }

    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// Polls until every task has run (or `patience` passes, or a task vanished: `None`) and
    /// returns the spread of their start times.
    pub fn measure(&self, patience: Duration) -> Option<Duration> {
        if self.tasks.is_empty() {
            return None;
        }
        let begin = Instant::now();
        let mut starts: Vec<Option<Instant>> = vec![None; self.tasks.len()];
        while starts.iter().any(Option::is_none) {
            for (start, &(pid, tid, base)) in starts.iter_mut().zip(&self.tasks) {
                if start.is_some() {
                    continue;
                }
                let now = Instant::now();
                let ran = procfs::task_runtime_ns(pid, tid).ok()?.saturating_sub(base);
                if ran > 0 {
                    *start = Some(now - Duration::from_nanos(ran));
                }
            }
            if begin.elapsed() > patience {
                return None;
            }
            // Sleep, never spin: this runs at real-time priority beside the tasks it watches.
            std::thread::sleep(Duration::from_micros(20));
        }
        let starts: Vec<Instant> = starts.into_iter().flatten().collect();
        let first = starts.iter().min()?;
        let last = starts.iter().max()?;
        Some(last.duration_since(*first))
    }
}
