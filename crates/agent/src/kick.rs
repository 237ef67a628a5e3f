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
//! One kicker per processor, started at its first kick, pinned there at
//! [`KICK_PRIORITY`]; each waits on a pipe, and ends when the [`Kickers`] are dropped.

use cosched_cgroups::affinity::pin_this_thread;
use cosched_os::realtime::{make_realtime, KICK_PRIORITY};
use cosched_os::Log;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

#[derive(Default)]
pub struct Kickers {
    /// The write end of each processor's kicker's pipe; `None` once it could not start.
    doors: BTreeMap<usize, Option<File>>,
}

impl Kickers {
    /// Makes the kernel choose again on processor `cpu` (its kicker started if need be). A
    /// kicker that cannot start (no real-time priority, no thread) is reported once, and
    /// that processor is not kicked again.
    pub fn kick(&mut self, cpu: usize) {
        let door = self.doors.entry(cpu).or_insert_with(|| match start(cpu) {
            Ok(door) => Some(door),
            Err(error) => {
                Log::new("agent").warn(format_args!(
                    "no kicker on processor {cpu} ({error}): a rank thawed beside a busy process there waits for the kernel's next choice"
                ));
                None
            }
        });
        if let Some(door) = door {
            // Full (the kicker has not read the kicks before): it is woken anyway.
            let _ = door.write(&[1]);
        }
    }
}

/// Starts processor `cpu`'s kicker; the pipe's write end kicks it.
fn start(cpu: usize) -> std::io::Result<File> {
    let (mut from, to) = pipe()?;
    let (ready, started) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("cosched-kick-{cpu}"))
        .spawn(move || {
            let set = pin_this_thread(cpu).and_then(|()| make_realtime(KICK_PRIORITY));
            let failed = set.is_err();
            let _ = ready.send(set);
            if failed {
                return;
            }
            // Each read wakes this thread on its processor; its sleep again is the kick.
            let mut kicks = [0u8; 64];
            while from.read(&mut kicks).is_ok_and(|n| n > 0) {}
        })?;
    started
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("the kicker's thread ended")))?;
    Ok(to)
}

/// A pipe whose write end never blocks (a kick never waits for its kicker).
fn pipe() -> std::io::Result<(File, File)> {
    let mut ends = [0; 2];
    // SAFETY: `ends` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two open descriptors, owned from here on.
    let [from, to] = ends.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
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

    /// A kick wakes a thread on the processor kicked (as root: real-time priority), and
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
        let mut kickers = Kickers::default();
        kickers.kick(0);
        let before = kicker_switches(0);
        for _ in 0..10 {
            kickers.kick(0);
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            kicker_switches(0) >= before + 5,
            "the kicker slept {} times for 10 kicks",
            kicker_switches(0) - before
        );
        drop(kickers);
        let deadline = Instant::now() + Duration::from_secs(10);
        while kicker_switches(0) != 0 {
            assert!(Instant::now() < deadline, "the kicker outlived its kickers");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
