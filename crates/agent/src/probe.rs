//! `auto` jobs measured in their first seconds (flexible coscheduling's classification,
//! Frachtenberg et al.): while a job runs unswitched, as an implicit job does, with its waits
//! spin-then-block, how its working processes share their time between running, waiting for
//! a processor, and sleeping (for a peer's message, a timer or I/O), how long they run each
//! time they are switched in, and how much of the time its cgroup stalled on storage I/O.
//! The controller chooses its mode from that (`Event::Behaviour`). Unswitched, a
//! fine-grained job's ranks fall out of step and wait between every few microseconds of work
//! (each wait a yield or a nap: a switch); a coarse one's compute for milliseconds between
//! switches; an I/O-bound one stalls on its storage.
//!
//! Each look reads every task's `/proc/PID/task/TID/schedstat` and the cgroup's
//! `io.pressure`, every [`PROBE_PERIOD`], for auto jobs only; each [`PROBE_WINDOW`] of their
//! working time seen is reported, [`BEHAVIOUR_WINDOWS`] at most (the controller may choose
//! after the first). The working processes of a look are the tasks that ran most since
//! the last one, as many as the job has processors here: a launcher asleep beside its ranks
//! (mpirun) does not count as sleep. Looks before the job got going (its busiest tasks
//! running under [`GOING_SHARE`] of their time: a launcher still starting its ranks) are
//! not counted either, unless its cgroup stalled on storage then.

use cosched_cgroups::procfs::{self, read_kernel_file};
use cosched_cgroups::Pid;
use cosched_core::Micros;
use cosched_os::now_micros;
use cosched_proto::{Behaviour, BEHAVIOUR_WINDOWS};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How often an auto job is looked at.
pub const PROBE_PERIOD: Micros = 100_000;
/// How much of its working time one report covers: while it is watched, the job runs out of
/// step, which costs a fine-grained one (about 5 % of the modes mix's ping-pong's run); in
/// runs of 5 rounds here, half a second took the ping-pong for a coarse job in one round (its
/// launch still in the window), a second in 1 of 15.
pub const PROBE_WINDOW: Micros = 1_000_000;
/// A look where the busiest tasks ran less than this share of it is before the job got going.
const GOING_SHARE: f64 = 0.05;

/// One task's counters (ns) when last looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskTimes {
    pub run_ns: u64,
    pub queued_ns: u64,
    /// Times it was switched in.
    pub switch_ins: u64,
}

/// What one look read of a job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Look {
    pub at: Micros,
    pub tasks: BTreeMap<Pid, TaskTimes>,
    /// The cgroup's `io.pressure` "some" total (µs); none without pressure accounting.
    pub io_stalled_us: Option<u64>,
}

impl Look {
    /// Reads the tasks of `pids` and, if given, the cgroup's `io.pressure` file, by `until`
    /// (true clock, µs): a read cut short gives nothing, so that a job of thousands of
    /// threads cannot hold the clock thread past its boundary.
    pub fn read(
        pids: &[Pid],
        io_pressure: Option<&Path>,
        at: Micros,
        until: Micros,
    ) -> Option<Look> {
        let mut tasks = BTreeMap::new();
        for &pid in pids {
            for tid in procfs::tasks(pid) {
                if now_micros() >= until {
                    return None;
                }
                if let Ok(stat) = procfs::task_schedstat(pid, tid) {
                    let times = TaskTimes {
                        run_ns: stat.runtime_ns,
                        queued_ns: stat.run_delay_ns,
                        switch_ins: stat.timeslices,
                    };
                    tasks.insert(tid, times);
                }
            }
        }
        Some(Look {
            at,
            tasks,
            io_stalled_us: io_pressure.and_then(io_some_total),
        })
    }
}

/// The "some" line's `total=` (µs) of a pressure file.
fn io_some_total(path: &Path) -> Option<u64> {
    let text = read_kernel_file(path).ok()?;
    let some = text.lines().find(|line| line.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|field| field.strip_prefix("total=")?.parse().ok())
}

/// A v2 group's `io.pressure` file.
pub fn io_pressure_of(group: &Path) -> PathBuf {
    group.join("io.pressure")
}

/// One auto job's watch: pure bookkeeping over the looks the caller reads.
#[derive(Clone, Debug)]
pub struct Probe {
    /// Processors the job has here: how many tasks count as its working ones.
    width: usize,
    last: Option<Look>,
    going: bool,
    /// Windows reported.
    reported: usize,
    /// In this window: working time seen, and of it: running, queued (task-µs), and I/O-stalled (µs).
    watched_us: Micros,
    task_us: f64,
    run_us: f64,
    queued_us: f64,
    switch_ins: u64,
    io_us: Option<f64>,
}

impl Probe {
    pub fn new(width: usize) -> Probe {
        Probe {
            width: width.max(1),
            last: None,
            going: false,
            reported: 0,
            watched_us: 0,
            task_us: 0.0,
            run_us: 0.0,
            queued_us: 0.0,
            switch_ins: 0,
            io_us: Some(0.0),
        }
    }

    /// When it was last looked at (`Micros::MIN`: never).
    pub fn last_look(&self) -> Micros {
        self.last.as_ref().map_or(Micros::MIN, |last| last.at)
    }

    /// Whether a look is due at `now`.
    pub fn due(&self, now: Micros) -> bool {
        self.last
            .as_ref()
            .is_none_or(|last| now - last.at >= PROBE_PERIOD)
    }

    /// Whether every window it may report was.
    pub fn finished(&self) -> bool {
        self.reported >= BEHAVIOUR_WINDOWS
    }

    /// Takes a look in; once a window is full, the behaviour it saw (the next one starts).
    pub fn add(&mut self, look: Look) -> Option<Behaviour> {
        let last = self.last.replace(look)?;
        let look = self.last.as_ref().expect("just set");
        let span = look.at - last.at;
        if span <= 0 {
            return None;
        }
        // The busiest tasks since the last look (a task new since then counts from 0).
        let mut deltas: Vec<(f64, f64, u64)> = look
            .tasks
            .iter()
            .map(|(tid, now)| {
                let before = last.tasks.get(tid).copied().unwrap_or_default();
                let run = now.run_ns.saturating_sub(before.run_ns) as f64 / 1e3;
                let queued = now.queued_ns.saturating_sub(before.queued_ns) as f64 / 1e3;
                (
                    run,
                    queued,
                    now.switch_ins.saturating_sub(before.switch_ins),
                )
            })
            .collect();
        deltas.sort_by(|a, b| b.0.total_cmp(&a.0));
        deltas.truncate(self.width);
        let span_f = span as f64;
        let run: f64 = deltas.iter().map(|d| d.0.min(span_f)).sum();
        let queued: f64 = deltas.iter().map(|d| d.1.min(span_f)).sum();
        let switch_ins: u64 = deltas.iter().map(|d| d.2).sum();
        let io_stalled = match (last.io_stalled_us, look.io_stalled_us) {
            (Some(before), Some(now)) => Some((now.saturating_sub(before) as f64).min(span_f)),
            _ => None,
        };
        if !self.going {
            // Working, or stalled on storage (an I/O-bound job hardly runs at all).
            self.going = run >= GOING_SHARE * span_f * self.width as f64
                || io_stalled.is_some_and(|us| us >= GOING_SHARE * span_f);
            if !self.going {
                return None;
            }
        }
        self.watched_us += span;
        // A task missing (not started yet, or gone) was not working: it counts as asleep.
        self.task_us += span_f * self.width as f64;
        self.run_us += run;
        self.queued_us += queued;
        self.switch_ins += switch_ins;
        self.io_us = self.io_us.zip(io_stalled).map(|(sum, us)| sum + us);
        if self.watched_us < PROBE_WINDOW {
            return None;
        }
        let seen = self.behaviour();
        self.reported += 1;
        self.watched_us = 0;
        self.task_us = 0.0;
        self.run_us = 0.0;
        self.queued_us = 0.0;
        self.switch_ins = 0;
        self.io_us = seen.io.map(|_| 0.0);
        Some(seen)
    }

    fn behaviour(&self) -> Behaviour {
        let share = |us: f64| (us / self.task_us).clamp(0.0, 1.0);
        let run = share(self.run_us);
        let queued = share(self.queued_us);
        Behaviour {
            window_us: self.watched_us,
            run,
            queued,
            asleep: (1.0 - run - queued).max(0.0),
            run_per_switch_in_us: self.run_us / self.switch_ins.max(1) as f64,
            io: self
                .io_us
                .map(|us| (us / self.watched_us as f64).clamp(0.0, 1.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Micros = 1_000;

    /// Each task: (tid, run ms, queued ms), switched in once per ms it ran.
    fn look(at: Micros, tasks: &[(Pid, u64, u64)], io_us: u64) -> Look {
        Look {
            at,
            tasks: tasks
                .iter()
                .map(|&(tid, run_ms, queued_ms)| {
                    let times = TaskTimes {
                        run_ns: run_ms * 1_000_000,
                        queued_ns: queued_ms * 1_000_000,
                        switch_ins: run_ms,
                    };
                    (tid, times)
                })
                .collect(),
            io_stalled_us: Some(io_us),
        }
    }

    #[test]
    fn shares_count_the_busiest_tasks_from_when_the_job_got_going() {
        let mut p = Probe::new(2);
        assert!(p.due(0));
        // A launcher (task 1) alone, then its two ranks (2, 3) start.
        assert_eq!(p.add(look(0, &[(1, 0, 0)], 0)), None);
        assert_eq!(p.add(look(250 * MS, &[(1, 5, 0)], 0)), None);
        assert!(!p.due(250 * MS + PROBE_PERIOD - 1) && p.due(250 * MS + PROBE_PERIOD));
        assert!(!p.going, "a launcher at 1 % is not the job going");
        // From here on, each 250 ms: each rank runs 100 ms, waits 50 ms queued, sleeps 100;
        // the launcher runs 1 ms (not among the busiest two); 25 ms stalled on I/O.
        let mut at = 250 * MS;
        let mut counters = [(1, 5, 0), (2, 0, 0), (3, 0, 0)];
        let mut io = 0;
        let mut seen = None;
        while seen.is_none() {
            at += 250 * MS;
            counters[0].1 += 1;
            for rank in &mut counters[1..] {
                rank.1 += 100;
                rank.2 += 50;
            }
            io += 25 * MS as u64;
            seen = p.add(look(at, &counters, io));
        }
        let b = seen.expect("the window watched");
        assert_eq!(b.window_us, PROBE_WINDOW);
        assert!((b.run - 0.4).abs() < 1e-9, "{b:?}");
        assert!((b.queued - 0.2).abs() < 1e-9, "{b:?}");
        assert!((b.asleep - 0.4).abs() < 1e-9, "{b:?}");
        assert!((b.io.unwrap() - 0.1).abs() < 1e-9, "{b:?}");
        assert!((b.run_per_switch_in_us - 1_000.0).abs() < 1e-6, "{b:?}");
        assert!(!p.finished());
        // The next windows count afresh: no more I/O stalls.
        let mut windows = 1;
        while !p.finished() {
            at += 250 * MS;
            for rank in &mut counters[1..] {
                rank.1 += 100;
                rank.2 += 50;
            }
            if let Some(b) = p.add(look(at, &counters, io)) {
                windows += 1;
                assert_eq!(b.window_us, PROBE_WINDOW);
                assert_eq!(b.io, Some(0.0), "{b:?}");
                assert!((b.run - 0.4).abs() < 1e-9, "{b:?}");
            }
        }
        assert_eq!(windows, BEHAVIOUR_WINDOWS);
    }

    #[test]
    fn a_missing_task_counts_as_asleep_and_no_pressure_file_gives_no_io_share() {
        let mut p = Probe::new(2);
        let mut last = look(0, &[(1, 0, 0)], 0);
        last.io_stalled_us = None;
        p.add(last);
        let mut seen = None;
        for k in 1..=(PROBE_WINDOW / (250 * MS)) as u64 {
            let mut l = look(k as Micros * 250 * MS, &[(1, 250 * k, 0)], 0);
            l.io_stalled_us = None;
            seen = p.add(l);
        }
        let b = seen.expect("the window watched");
        assert!(
            (b.run - 0.5).abs() < 1e-9 && (b.asleep - 0.5).abs() < 1e-9,
            "{b:?}"
        );
        assert_eq!(b.io, None);
    }

    #[test]
    fn reads_the_some_total_of_a_pressure_file() {
        let dir = std::env::temp_dir().join(format!("cosched-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("io.pressure");
        std::fs::write(
            &file,
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=12345\n\
             full avg10=0.00 avg60=0.00 avg300=0.00 total=678\n",
        )
        .unwrap();
        assert_eq!(io_some_total(&file), Some(12345));
        assert_eq!(io_some_total(&dir.join("missing")), None);
        assert_eq!(
            io_pressure_of(Path::new("/sys/fs/cgroup/x")),
            Path::new("/sys/fs/cgroup/x/io.pressure")
        );
        let me = std::process::id() as Pid;
        let look = Look::read(&[me], None, 0, Micros::MAX).expect("in time");
        assert!(!look.tasks.is_empty(), "this process's threads are read");
        assert_eq!(
            Look::read(&[me], None, 0, 0),
            None,
            "a read out of time gives nothing"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
