//! A benchmark stopped by a signal (Ctrl-C, `kill`) leaves nothing behind. What it started
//! cleans up when dropped, which a signal's default action skips: a root daemon, etcd and
//! Slurm's daemons ran on after it, with their directories (the control-plane benchmark's are
//! tens of MB in /dev/shm) and cgroups. So the stop signals are taken by a thread of their
//! own, which stops this process's children, removes the cgroups and the paths named after
//! its pid, and exits.

use cosched_cgroups::procfs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A stop signal came: the stop thread ends the process once it has cleaned up.
static STOPPING: AtomicBool = AtomicBool::new(false);

const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
/// How long the children have to stop after SIGTERM (a daemon cancels its jobs first).
const CHILDREN_PATIENCE: Duration = Duration::from_secs(30);
/// Where the benchmarks and the etcd they start keep their files.
const SCRATCH: [&str; 2] = ["/tmp", "/dev/shm"];

/// Takes the stop signals from here on. Called first in `main`: the threads started later
/// inherit the blocked signals, so that only the stop thread receives them (children do not:
/// `std::process::Command` clears the mask before it executes a program).
pub fn clean_up_on_stop() -> std::io::Result<()> {
    let set = cosched_os::unix::signal_set(&STOP_SIGNALS);
    // SAFETY: a valid set and no old one; the mask change only blocks.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    std::thread::Builder::new()
        .name("stop".into())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: `set` is initialised and `signal` writable.
            unsafe { libc::sigwait(&set, &mut signal) };
            STOPPING.store(true, Ordering::SeqCst);
            eprintln!("cosched-bench: stopped by signal {signal}: stopping what it started");
            stop_children();
            crate::daemon::remove_groups(&crate::daemon::group_parent());
            remove_own_paths();
            std::process::exit(128 + signal);
        })?;
    Ok(())
}

/// Called as `main` ends: with a stop under way, waits for the stop thread to end the
/// process (the main thread's own end, an error once etcd was stopped, would cut the
/// cleanup short).
pub fn unless_stopping() {
    while STOPPING.load(Ordering::SeqCst) {
        std::thread::park();
    }
}

/// Each child in turn, the last started first (a daemon needs the etcd started before it to
/// stop cleanly): SIGTERM, then SIGKILL if it still runs after [`CHILDREN_PATIENCE`].
fn stop_children() {
    let mut children = children_of(std::process::id());
    children.sort_by_key(|&(_, started)| std::cmp::Reverse(started));
    for (pid, _) in children {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let began = Instant::now();
        // Reaped here: nothing else will wait for it now.
        // SAFETY: waitpid with a null status pointer is allowed.
        while unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) } == 0 {
            if began.elapsed() > CHILDREN_PATIENCE {
                eprintln!(
                    "cosched-bench: child {pid} still running {CHILDREN_PATIENCE:?} after SIGTERM: killed"
                );
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The processes whose parent is `parent`, with when each started (clock ticks since boot),
/// from /proc.
fn children_of(parent: u32) -> Vec<(i32, u64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = procfs::stat(pid).ok()?;
            (stat.parent as u32 == parent).then_some((pid, stat.started))
        })
        .collect()
}

/// The files and directories of [`SCRATCH`] whose name begins with `cosched` and holds this
/// process's pid between dashes (or at the end, or before a dot).
fn remove_own_paths() {
    let pid = std::process::id().to_string();
    for dir in SCRATCH {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if name.starts_with("cosched") && names_pid(name, &pid) {
                remove(&entry.path());
            }
        }
    }
}

fn names_pid(name: &str, pid: &str) -> bool {
    name.split(['-', '.']).any(|part| part == pid)
}

fn remove(path: &Path) {
    let removed = match path.is_dir() {
        true => std::fs::remove_dir_all(path),
        false => std::fs::remove_file(path),
    };
    if let Err(error) = removed {
        eprintln!("cosched-bench: removing {}: {error}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_ours_only_when_our_pid_is_one_of_its_parts() {
        assert!(names_pid("cosched-cp-4242", "4242"));
        assert!(names_pid("cosched-etcd-control-plane-4242-m0", "4242"));
        assert!(names_pid(
            "cosched-etcd-control-plane-4242-m0.password",
            "4242"
        ));
        assert!(!names_pid("cosched-cp-42421", "4242"));
        assert!(!names_pid("cosched-bench-14242-gang", "4242"));
    }

    #[test]
    fn a_child_is_found_with_when_it_started() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let started = procfs::stat(pid).unwrap().started;
        assert!(started > 0);
        assert!(children_of(std::process::id()).contains(&(pid, started)));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
