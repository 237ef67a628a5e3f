//! Moving a process started elsewhere into a registered job's cgroup (`Command::Join`), by
//! pid: the only way cgroups take a process, and a pid names another task once the first has
//! exited and been reaped. Checking before and after the move cannot close that: a process
//! born with the reused pid in between is moved, and one forked from it meanwhile is born in
//! the job (an audit kept root's tasks in nobody's job that way). So the process is held
//! with ptrace for the move ([`move_held`]): a traced process that exits stays a zombie that
//! only its tracer sees, so nobody can reap it and its pid names it until it is let go.

use cosched_cgroups::procfs;
use cosched_os::unix;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// The process's start time (clock ticks since boot, `/proc/PID/stat` field 22): with the pid,
/// it names one process for good.
pub fn start_time(pid: libc::pid_t) -> Result<u64, String> {
    procfs::stat(pid)
        .map(|stat| stat.started)
        .map_err(|e| e.to_string())
}

/// Whether process `pid` is a whole process (not a thread) whose every uid (real,
/// effective, saved, filesystem) is `uid`; root's jobs take anyone's.
pub fn check_owner(pid: libc::pid_t, uid: u32) -> Result<(), String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "No such process".to_string(),
            _ => e.to_string(),
        })?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|rest| {
                rest.split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    if field("Tgid:") != [pid.to_string()] {
        return Err("it is a thread, not a process (give its process id)".into());
    }
    let uids = field("Uid:");
    if uid != 0 && (uids.len() != 4 || uids.iter().any(|u| *u != uid.to_string())) {
        return Err(format!(
            "it is not uid {uid}'s (its uids: {})",
            uids.join(" ")
        ));
    }
    Ok(())
}

/// Every cgroup a process is in (`/proc/PID/cgroup`, one line per hierarchy).
fn cgroups_of(pid: libc::pid_t) -> Result<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map_err(|e| e.to_string())
}

/// A process joins only from the cgroups of the process that asks, in every hierarchy: no
/// one moves a process out of a cgroup its user did not choose (one root froze or limited,
/// or another job).
pub fn check_same_cgroup(pid: libc::pid_t, asker: libc::pid_t) -> Result<(), String> {
    let (theirs, mine) = (cgroups_of(pid)?, cgroups_of(asker)?);
    if theirs != mine {
        let first = |text: &str| text.lines().next().unwrap_or("").to_string();
        return Err(format!(
            "it is not in its adder's cgroups (it: {}, adder: {}, ...): a process joins from \
             the cgroups of the process that adds it",
            first(&theirs),
            first(&mine)
        ));
    }
    Ok(())
}

/// How long the clock thread waits for a hold: PTRACE_SEIZE waits for an exec of the process
/// to finish, and its user can keep an exec from finishing for good (an audit did, with a
/// thread of it traced by its own tracer): the clock must not wait with it.
const HOLD_PATIENCE: std::time::Duration = std::time::Duration::from_millis(100);

/// Holds given up on that are still waiting to seize their process, at most this many at once
/// (each is a thread): past it joins are refused until some finish.
const MOST_STUCK_HOLDS: usize = 16;
static STUCK_HOLDS: AtomicUsize = AtomicUsize::new(0);

/// Where a hold is: the clock thread and the holding thread agree once, by compare-and-swap,
/// whether the move happens (the holder starts writing) or not (the clock gave up waiting).
const HOLDING: u8 = 0;
const MOVING: u8 = 1;
const GIVEN_UP: u8 = 2;

/// Writes `pid` into each of `files` (`cgroup.procs`, one per hierarchy) while holding it:
/// a thread of its own seizes it with ptrace (which neither stops nor signals it), checks it
/// is still the process `pidfd` names and `born` dates and still all `uid`'s (an exec may
/// have made it another's), runs `before_move` (tests widen the window there), writes, and
/// lets it go. Waits [`HOLD_PATIENCE`] at most for the seize: past it the join is refused, and
/// the holding thread, whenever its seize returns, lets the process go without moving it.
pub fn move_held(
    pid: libc::pid_t,
    pidfd: &OwnedFd,
    born: u64,
    uid: u32,
    files: &[PathBuf],
    before_move: impl FnOnce() + Send + 'static,
) -> Result<(), String> {
    if STUCK_HOLDS.load(Ordering::SeqCst) >= MOST_STUCK_HOLDS {
        return Err(format!(
            "{MOST_STUCK_HOLDS} earlier joins are still stuck waiting for their processes' \
             execs; try again later"
        ));
    }
    let pidfd = pidfd
        .try_clone()
        .map_err(|e| format!("holding it for the move: {e}"))?;
    let files = files.to_vec();
    let state = Arc::new(AtomicU8::new(HOLDING));
    let (told, outcome) = std::sync::mpsc::channel();
    let holder_state = Arc::clone(&state);
    std::thread::Builder::new()
        .name("cosched-join".into())
        .spawn(move || {
            let result = hold_and_move(pid, &pidfd, born, uid, &files, before_move, &holder_state);
            if holder_state.load(Ordering::SeqCst) == GIVEN_UP {
                STUCK_HOLDS.fetch_sub(1, Ordering::SeqCst);
            }
            let _ = told.send(result);
        })
        .map_err(|e| format!("holding it for the move: {e}"))?;
    match outcome.recv_timeout(HOLD_PATIENCE) {
        Ok(result) => result,
        Err(_) => {
            // Counted before the holder can see GIVEN_UP, so its decrement never comes first.
            STUCK_HOLDS.fetch_add(1, Ordering::SeqCst);
            let given_up = state
                .compare_exchange(HOLDING, GIVEN_UP, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
            if given_up {
                return Err(format!(
                    "it could not be held for the move within {} ms (an exec of it that does \
                     not finish?)",
                    HOLD_PATIENCE.as_millis()
                ));
            }
            STUCK_HOLDS.fetch_sub(1, Ordering::SeqCst);
            // The holder was already moving it: the writes do not wait on the process.
            outcome
                .recv()
                .unwrap_or_else(|_| Err("the move failed (a panic)".into()))
        }
    }
}

/// The holding thread's part of [`move_held`]; its exit lets the process go in any case (a
/// tracer's exit detaches its tracees, and hands a zombie to its parent).
fn hold_and_move(
    pid: libc::pid_t,
    pidfd: &OwnedFd,
    born: u64,
    uid: u32,
    files: &[PathBuf],
    before_move: impl FnOnce(),
    state: &AtomicU8,
) -> Result<(), String> {
    let exited = || "it exited while joining".to_string();
    let none = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: PTRACE_SEIZE takes a pid, and null address and options.
    let seized = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, none, none) };
    if seized != 0 {
        let error = std::io::Error::last_os_error();
        return Err(match error.raw_os_error() {
            Some(libc::ESRCH) => exited(),
            Some(libc::EPERM) => "it cannot be held for the move (ptrace refused: a debugger \
                                  traces it, or this system forbids ptrace)"
                .into(),
            _ => format!("holding it for the move: {error}"),
        });
    }
    // Held. Alive now, it is the process checked, and stays that pid's until let go; an exec
    // finished meanwhile may have changed its uids.
    let moved = if unix::has_exited(pidfd) || start_time(pid).ok() != Some(born) {
        Err(exited())
    } else if let Err(why) = check_owner(pid, uid) {
        Err(why)
    } else if state
        .compare_exchange(HOLDING, MOVING, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        Err("the join was given up".into())
    } else {
        before_move();
        files.iter().try_for_each(|file| {
            std::fs::write(file, pid.to_string())
                .map_err(|e| format!("moving it into {}: {e}", file.display()))
        })
    };
    let gone = unix::has_exited(pidfd);
    release(pid);
    // A zombie's pid is taken but not moved: say so rather than "joined".
    match moved {
        Ok(()) if gone => Err(exited()),
        other => other,
    }
}

/// Lets a held process go at once: stops it (PTRACE_INTERRUPT), then detaches, handing back
/// a signal that stopped it meanwhile (a tracer's exit alone may lose that signal). Bounded
/// by 2 ms, since the clock thread may be waiting: a process that cannot stop now (its
/// thread-group leader exited first, or it sleeps in the kernel unkillably, which its user may
/// arrange) is let go by the holding thread's exit instead.
fn release(pid: libc::pid_t) {
    let none = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: PTRACE_INTERRUPT takes a pid, and null address and data.
    unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, pid, none, none) };
    let until = std::time::Instant::now() + std::time::Duration::from_millis(2);
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes one int.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::__WALL | libc::WNOHANG) };
        if got == pid {
            if libc::WIFSTOPPED(status) {
                // A signal-delivery stop (no event) carries a signal to deliver after all.
                let signal = if status >> 16 == 0 {
                    libc::WSTOPSIG(status)
                } else {
                    0
                };
                // SAFETY: PTRACE_DETACH takes a pid, a null address and the signal as data.
                unsafe {
                    libc::ptrace(
                        libc::PTRACE_DETACH,
                        pid,
                        none,
                        signal as usize as *mut libc::c_void,
                    )
                };
            }
            return;
        }
        if got < 0 || std::time::Instant::now() > until {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_start_time_and_passes_its_own_checks() {
        let me = std::process::id() as libc::pid_t;
        assert!(start_time(me).unwrap() > 0);
        let uid = unsafe { libc::geteuid() };
        assert_eq!(check_owner(me, uid), Ok(()));
        assert_eq!(check_same_cgroup(me, me), Ok(()));
    }
}
