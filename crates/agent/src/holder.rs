//! The holder of a registered job (`cosched hold`): the job's one process of its own, run as
//! the registrant under a supervisor like any job's process, so that placement, restarts and
//! the end work as for any job. The job's real processes are started elsewhere and join its
//! cgroup; the holder exits 0 once every one that joined has left (after SIGTERM, the
//! registrant's `job_end` or a cancel, once every one left, joined or not), and
//! [`NONE_JOINED`] when none joined in time.

use crate::job_group;
use cosched_cgroups::Layout;
use cosched_core::JobId;
use std::io::{self, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The holder's exit code when no process joined its job in time.
pub const NONE_JOINED: i32 = 3;

/// How often the holder looks at its job's processes (a job's end comes this much later).
const LOOK_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error("COSCHED_JOB_ID is not set: `cosched hold` runs as a registered job's holder only")]
    NotInJob,
    #[error("finding this process's cgroup: {0}")]
    Cgroup(io::Error),
    #[error("this process is not in job {0}'s cgroup")]
    NotInCgroup(JobId),
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
}

/// Holds the job until its processes have come and gone (or none came within `join_within`,
/// or none is left after SIGTERM). Returns the exit code.
pub fn hold(join_within: Duration) -> Result<i32, HoldError> {
    let job: JobId = std::env::var("COSCHED_JOB_ID")
        .ok()
        .and_then(|id| id.parse().ok())
        .ok_or(HoldError::NotInJob)?;
    let files = own_procs_files(job)?;
    let me = std::process::id().to_string();
    let terminate = block_sigterm();
    let started = Instant::now();
    let mut joined = false;
    let mut ending = false;
    loop {
        let mut others = false;
        for file in &files {
            let pids = std::fs::read_to_string(file).map_err(|source| HoldError::Read {
                path: file.clone(),
                source,
            })?;
            others |= pids.lines().any(|pid| pid.trim() != me);
        }
        if others {
            joined = true;
        } else if joined || ending {
            return Ok(0);
        } else if started.elapsed() >= join_within {
            // Not `eprintln!`: a closed stderr must not turn this answer into a panic.
            let _ = writeln!(
                std::io::stderr(),
                "cosched hold: no process joined job {job} within {} s",
                join_within.as_secs()
            );
            return Ok(NONE_JOINED);
        }
        ending |= sigterm_within(&terminate, LOOK_EVERY);
    }
}

/// The `cgroup.procs` of the job's cgroup this process is in, in every hierarchy that has it:
/// a process joins them one at a time (the v2 one first, whose list the agent reads to kill
/// what an ended job leaves), so a holder that watched one could end the job between two of
/// those moves and have the newcomer killed.
fn own_procs_files(job: JobId) -> Result<Vec<PathBuf>, HoldError> {
    let layout = Layout::detect().map_err(HoldError::Cgroup)?;
    let mine = std::fs::read_to_string("/proc/self/cgroup").map_err(HoldError::Cgroup)?;
    let suffix = format!("/{}", job_group(job));
    let files: Vec<PathBuf> = mine
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            if !path.ends_with(&suffix) {
                return None;
            }
            let (mount, _) = layout.hierarchies().find(|(_, name)| match *name {
                "" => controllers.is_empty(),
                name => controllers.split(',').any(|c| c == name),
            })?;
            let file = mount
                .join(path.trim_start_matches('/'))
                .join("cgroup.procs");
            file.exists().then_some(file)
        })
        .collect();
    if files.is_empty() {
        return Err(HoldError::NotInCgroup(job));
    }
    Ok(files)
}

/// SIGTERM blocked, to be taken by [`sigterm_within`] (no handler runs in this process). The
/// supervisor starts the holder with it blocked already (`Launch::holder`): a registrant
/// that ends its job at once would otherwise kill a holder that has not reached this line.
fn block_sigterm() -> libc::sigset_t {
    let set = cosched_os::unix::signal_set(&[libc::SIGTERM]);
    // SAFETY: sigprocmask takes a valid set and no old one.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    set
}

/// Waits up to `wait` for SIGTERM; whether it came.
fn sigterm_within(set: &libc::sigset_t, wait: Duration) -> bool {
    let timeout = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid pointers to a sigset and a timespec; no siginfo wanted.
    unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &timeout) == libc::SIGTERM }
}
