//! A job's processes as the daemon acts on them: each held by a pidfd, so that a signal or a
//! pin meant for one never reaches another process.
//!
//! The daemon is root and lists a job's processes from its `cgroup.procs`; a pid read there
//! may be freed and taken by any other process of the machine before it is used (pids come
//! round within seconds where `pid_max` is 32,768), and a kill(2) or sched_setaffinity(2) of
//! it would reach that process. Each listed process is held by a pidfd opened first, and kept
//! only if the file lists its pid again after: the process held is then the one listed, or it
//! has exited, which the pidfd tells.

use crate::cgroup::{parse_pids, read};
use crate::{CgroupError, Pid, Result};
use cosched_os::unix;
use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// One process of a job, held.
#[derive(Debug)]
pub struct Member {
    pub pid: Pid,
    pidfd: OwnedFd,
}

impl Member {
    /// Whether it has not exited: while it has not, `/proc/PID` is its own.
    pub fn alive(&self) -> bool {
        !unix::has_exited(&self.pidfd)
    }

    /// Signals it; a process that has exited (and any that took its pid since) is left be.
    fn signal(&self, sig: libc::c_int) -> Result<bool> {
        match unix::pidfd_send_signal(&self.pidfd, sig) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Err(source) => Err(CgroupError::Io {
                path: PathBuf::from(format!("/proc/{}", self.pid)),
                source,
            }),
        }
    }
}

/// Most processes held at once. Each holds one of the daemon's descriptors, and a job may
/// have thousands of processes (512 tasks per processor by default): all held together, one
/// user's job would take as many of the descriptors the daemon serves everyone with.
const MOST_HELD: usize = 256;

/// Acts on the processes among `pids` that `list` names once they are held, at most
/// [`MOST_HELD`] at a time: a chunk's pidfds are opened, `list` is read again, and `act` gets
/// those it still names.
pub fn each_held(
    pids: &[Pid],
    mut list: impl FnMut() -> Result<Vec<Pid>>,
    mut act: impl FnMut(&[Member]) -> Result<()>,
) -> Result<()> {
    for chunk in pids.chunks(MOST_HELD) {
        let held: Vec<Member> = chunk
            .iter()
            .filter_map(|&pid| {
                Some(Member {
                    pid,
                    pidfd: unix::pidfd_open(pid).ok()?,
                })
            })
            .collect();
        if held.is_empty() {
            continue;
        }
        let still: BTreeSet<Pid> = list()?.into_iter().collect();
        let held: Vec<Member> = held
            .into_iter()
            .filter(|member| still.contains(&member.pid))
            .collect();
        act(&held)?;
    }
    Ok(())
}

/// Reads the pids a job's `cgroup.procs` lists, each time it is called.
pub fn listing(procs: &Path) -> impl FnMut() -> Result<Vec<Pid>> + '_ {
    move || Ok(parse_pids(&read(procs)?))
}

/// [`each_held`] over every process `procs` lists. One born in the job meanwhile is left for
/// the caller's next round.
pub fn each_listed(procs: &Path, act: impl FnMut(&[Member]) -> Result<()>) -> Result<()> {
    let mut list = listing(procs);
    let pids = list()?;
    each_held(&pids, list, act)
}

/// Sends `sig` to each of `members`; returns how many were signalled (not those that exited).
pub fn signal(members: &[Member], sig: libc::c_int) -> Result<usize> {
    let mut signalled = 0;
    for member in members {
        signalled += usize::from(member.signal(sig)?);
    }
    Ok(signalled)
}

/// Sends `sig` to every process `procs` lists ([`each_listed`]); returns how many were
/// signalled.
pub fn signal_listed(procs: &Path, sig: libc::c_int) -> Result<usize> {
    let mut signalled = 0;
    each_listed(procs, |members| {
        signalled += signal(members, sig)?;
        Ok(())
    })?;
    Ok(signalled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_held_a_bounded_number_at_a_time_and_relisted_per_chunk() {
        let me = std::process::id() as Pid;
        let pids = vec![me; 2 * MOST_HELD + 10];
        let (mut lists, mut chunks, mut acted) = (0, 0, 0);
        each_held(
            &pids,
            || {
                lists += 1;
                Ok(vec![me])
            },
            |held| {
                assert!(held.len() <= MOST_HELD);
                chunks += 1;
                acted += held.len();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((lists, chunks, acted), (3, 3, pids.len()));
        // A process the second listing no longer names is not acted on.
        let mut named = 0;
        each_held(
            &[me],
            || Ok(vec![]),
            |held| {
                named += held.len();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(named, 0);
    }
}
