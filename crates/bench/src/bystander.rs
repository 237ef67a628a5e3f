//! Bystanders: one real-time thread per processor, outside cosched, that sleeps to an absolute
//! deadline every 2 ms and notes how late it woke. A slot clock's boundary woken late while a
//! bystander's timer was late too, over the same moments, was the machine's (a virtual
//! machine's timer interrupt delivered late by its host: ftrace shows the clock thread asleep
//! until then, with a job's process running in user space), not cosched's.
//!
//! Below the slot clock's priority, so that they never delay it; each costs its processor a
//! few microseconds every 2 ms.

use anyhow::{bail, Context, Result};
use cosched_agent::clock::sleep_until;
use cosched_cgroups::affinity::pin_this_thread;
use cosched_core::Micros;
use cosched_os::realtime::make_realtime;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How often each bystander wakes (µs).
const PERIOD_US: Micros = 2_000;
/// Lateness a bystander keeps a note of (µs): below it, a wakeup is as the machine always is.
const NOTED_US: Micros = 500;
/// Real-time priority 1: the lowest, under the slot clock's.
const PRIORITY: i32 = 1;

/// A bystander's wakeup later than [`NOTED_US`]: when it was due, and when it woke (µs since
/// the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    pub due: Micros,
    pub woke: Micros,
}

/// One bystander's wakeups and its stalls among them.
type Watched = (u64, Vec<Stall>);

pub struct Bystanders {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<Watched>>>,
    started: Micros,
}

/// What the bystanders saw.
pub struct Stalls {
    pub wakeups: u64,
    pub stalls: Vec<Stall>,
    /// How long they ran (µs).
    pub span_us: Micros,
}

impl Bystanders {
    /// One bystander on each of `cpus`.
    pub fn start(cpus: &[usize]) -> Bystanders {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = cpus
            .iter()
            .map(|&cpu| {
                let stop = stop.clone();
                std::thread::spawn(move || watch(cpu, &stop))
            })
            .collect();
        Bystanders {
            stop,
            threads,
            started: cosched_os::now_micros(),
        }
    }

    pub fn finish(self) -> Result<Stalls> {
        self.stop.store(true, Ordering::Relaxed);
        let mut seen = Stalls {
            wakeups: 0,
            stalls: Vec::new(),
            span_us: cosched_os::now_micros() - self.started,
        };
        for thread in self.threads {
            let (wakeups, stalls) = match thread.join() {
                Ok(result) => result?,
                Err(_) => bail!("a bystander's thread panicked"),
            };
            seen.wakeups += wakeups;
            seen.stalls.extend(stalls);
        }
        Ok(seen)
    }
}

fn watch(cpu: usize, stop: &AtomicBool) -> Result<Watched> {
    pin_this_thread(cpu).with_context(|| format!("pinning a bystander to processor {cpu}"))?;
    make_realtime(PRIORITY).context("making a bystander real-time (run as root)")?;
    let (mut wakeups, mut stalls) = (0, Vec::new());
    let mut due = cosched_os::now_micros();
    while !stop.load(Ordering::Relaxed) {
        due += PERIOD_US;
        sleep_until(due);
        let woke = cosched_os::now_micros();
        wakeups += 1;
        if woke - due > NOTED_US {
            stalls.push(Stall { due, woke });
            // Deadlines slept through are skipped, not replayed at once.
            due = woke;
        }
    }
    Ok((wakeups, stalls))
}

impl Stalls {
    /// Whether a bystander was stalled over some of `from..to` (µs since the Unix epoch).
    pub fn overlap(&self, from: Micros, to: Micros) -> bool {
        self.stalls.iter().any(|s| s.due < to && s.woke > from)
    }

    /// How long some bystander was stalled (µs; an upper bound: stalls on two processors at
    /// once are counted twice).
    pub fn stalled_us(&self) -> Micros {
        self.stalls.iter().map(|s| s.woke - s.due).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_boundary_overlaps_a_stall_that_covers_some_of_it() {
        let seen = Stalls {
            wakeups: 1_000,
            stalls: vec![Stall {
                due: 10_000,
                woke: 14_000,
            }],
            span_us: 2_000_000,
        };
        assert!(seen.overlap(12_000, 13_000));
        assert!(seen.overlap(9_000, 10_500));
        assert!(seen.overlap(13_500, 20_000));
        assert!(!seen.overlap(14_000, 15_000));
        assert!(!seen.overlap(5_000, 10_000));
        assert_eq!(seen.stalled_us(), 4_000);
    }
}
