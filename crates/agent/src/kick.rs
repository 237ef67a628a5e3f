//! Kicks: a rank thawed onto a processor where an ordinary process runs (a user's command
//! starting, a client, a daemon's thread) waits until the kernel next chooses there, and
//! nothing makes it choose before the running process's slice is over or the next tick
//! (1.4 ms and 4 ms on the 2-vCPU VMs; the rank's wakeup does not preempt it): its whole gang
//! waits for that rank. A kick is a real-time thread on that processor woken and at once
//! asleep again: the kernel chooses anew as it leaves, by its own fairness, and the rank
//! owed the processor gets it. Measured with a kick every 50 µs on each processor beside
//! `cosched-bench churn` at 20 ms slots: starts skewed past 250 µs fell from 1.0 % to 0.4 %;
//! kicked only while a thawed rank waits, the kicks cost nothing otherwise.
//!
//! One kicker per processor, started with the clock, pinned there at [`KICK_PRIORITY`];
//! each waits on a pipe, and ends when the [`Kickers`] are dropped.

use cosched_cgroups::affinity::pin_this_thread;
use cosched_os::realtime::{make_realtime, KICK_PRIORITY};
use cosched_os::Log;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};

#[derive(Default)]
pub struct Kickers {
    /// The write end of each processor's kicker's pipe.
    doors: BTreeMap<usize, File>,
}

impl Kickers {
    /// One kicker on each of `cpus` (the node's), started now: a thread started
    /// at the first kick, on the clock thread while it measured a skew, kept the clock
    /// waiting for the new thread to be given a processor beside busy jobs (the skew measure
    /// gave up at its 5 ms patience, twice in six quickstart runs). A kicker that cannot pin
    /// itself or take its priority says so and ends; kicks to it then do nothing.
    pub fn start(cpus: impl IntoIterator<Item = usize>) -> Kickers {
        let mut doors = BTreeMap::new();
        for cpu in cpus {
            match start(cpu) {
                Ok(door) => {
                    doors.insert(cpu, door);
                }
                Err(error) => no_kicker(cpu, &error),
            }
        }
        Kickers { doors }
    }

    /// Makes the kernel choose again on processor `cpu` (none started there: nothing).
    pub fn kick(&mut self, cpu: usize) {
        if let Some(door) = self.doors.get_mut(&cpu) {
            // Full (the kicker has not read the kicks before): it is woken anyway. Gone (it
            // could not start): nothing to do.
            let _ = door.write(&[1]);
        }
    }
}

/// Starts processor `cpu`'s kicker, without waiting for it; the pipe's write end kicks it.
fn start(cpu: usize) -> std::io::Result<File> {
    let (mut from, to) = pipe()?;
    std::thread::Builder::new()
        .name(format!("cosched-kick-{cpu}"))
        .spawn(move || {
            if let Err(error) = pin_this_thread(cpu).and_then(|()| make_realtime(KICK_PRIORITY)) {
                no_kicker(cpu, &error);
                return;
            }
            // Each read wakes this thread on its processor; its sleep again is the kick.
            let mut kicks = [0u8; 64];
            while from.read(&mut kicks).is_ok_and(|n| n > 0) {}
        })?;
    Ok(to)
}

fn no_kicker(cpu: usize, error: &std::io::Error) {
    Log::new("agent").warn(format_args!(
        "no kicker on processor {cpu} ({error}): a rank thawed beside a busy process there waits for the kernel's next choice"
    ));
}

/// A pipe whose write end never blocks (a kick never waits for its kicker).
fn pipe() -> std::io::Result<(File, File)> {
    let (from, to) = cosched_os::unix::pipe(0)?;
    // SAFETY: `to` is an open descriptor.
    if unsafe {
        libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&to),
            libc::F_SETFL,
            libc::O_NONBLOCK,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok((File::from(from), File::from(to)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A kick wakes the kicker on the processor kicked (as root: real-time priority), and
    /// dropping the kickers ends their threads.
    #[test]
    fn a_kick_runs_the_kicker_on_its_processor_and_a_drop_ends_it() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: real-time priority needs root");
            return;
        }
        let kicker_switches = |cpu: usize| -> u64 {
            let task = std::fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .find(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|name| name.trim() == format!("cosched-kick-{cpu}"))
                });
            let Some(task) = task else { return 0 };
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            status
                .lines()
                .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
                .map_or(0, |n| n.trim().parse().unwrap())
        };
        let cpu = 0;
        let mut kickers = Kickers::start([cpu]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while kicker_switches(cpu) == 0 {
            assert!(Instant::now() < deadline, "the kicker never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        let before = kicker_switches(cpu);
        for _ in 0..10 {
            kickers.kick(cpu);
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            kicker_switches(cpu) >= before + 5,
            "the kicker slept {} times for 10 kicks",
            kicker_switches(cpu) - before
        );
        drop(kickers);
        let deadline = Instant::now() + Duration::from_secs(10);
        while kicker_switches(cpu) != 0 {
            assert!(Instant::now() < deadline, "the kicker outlived its kickers");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
