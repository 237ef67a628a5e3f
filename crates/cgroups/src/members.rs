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

/// The processes `procs` (a job's `cgroup.procs`) lists, held. One born in the job meanwhile
/// is left for the caller's next round.
pub fn listed(procs: &Path) -> Result<Vec<Member>> {
    held(|| Ok(parse_pids(&read(procs)?)))
}

/// The processes `list` names, held: each by a pidfd opened after a first call, and kept if a
/// second call, once they are all held, names it too.
pub fn held(mut list: impl FnMut() -> Result<Vec<Pid>>) -> Result<Vec<Member>> {
    let held: Vec<Member> = list()?
        .into_iter()
        .filter_map(|pid| {
            Some(Member {
                pid,
                pidfd: unix::pidfd_open(pid).ok()?,
            })
        })
        .collect();
    if held.is_empty() {
        return Ok(held);
    }
    let still: BTreeSet<Pid> = list()?.into_iter().collect();
    Ok(held
        .into_iter()
        .filter(|member| still.contains(&member.pid))
        .collect())
}

/// Sends `sig` to each of `members`; returns how many were signalled (not those that exited).
pub fn signal(members: &[Member], sig: libc::c_int) -> Result<usize> {
    let mut signalled = 0;
    for member in members {
        signalled += usize::from(member.signal(sig)?);
    }
    Ok(signalled)
}

/// Sends `sig` to every process `procs` lists ([`listed`]); returns how many were signalled.
pub fn signal_listed(procs: &Path, sig: libc::c_int) -> Result<usize> {
    signal(&listed(procs)?, sig)
}
