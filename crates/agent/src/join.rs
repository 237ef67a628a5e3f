//! Moving a process started elsewhere into a registered job's cgroup (`Command::Join`), by
//! pid: the only way cgroups take a process, and a pid (or a thread id: the write moves the
//! thread's whole process) names another task once the first has exited and been reaped. So
//! the process is checked before the move (its owner, its cgroups, its start time) and again
//! after it: if by then the pid may name another task, every process in the job that is not
//! the job user's goes to the root cgroups, never staying within the user's reach.

use cosched_cgroups::Layout;
use std::path::{Path, PathBuf};

/// The process's start time (clock ticks since boot, `/proc/PID/stat` field 22): with the pid,
/// it names one process for good.
pub fn start_time(pid: libc::pid_t) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // The command name (field 2) may hold spaces and parentheses: count after its last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19)?.parse().ok())
        .ok_or_else(|| format!("/proc/{pid}/stat: no start time"))
}

/// Whether process `pid` is a whole process (not a thread) whose every uid (real,
/// effective, saved, filesystem) is `uid`; root's jobs take anyone's.
pub fn check_owner(pid: libc::pid_t, uid: u32) -> Result<(), String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
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

/// After a move that may have taken another process than the one checked (its pid, or a
/// thread id, reused in the meantime): every process in the job's cgroups (`join_files`, one
/// per hierarchy) that is not all `uid`'s goes to the root cgroup of that hierarchy, out of
/// the user's reach. (Where it came from cannot be known for sure: a thread's whole process
/// moves, and a new one was born where its parent was.) Returns the processes moved out.
pub fn evict_strangers(uid: u32, join_files: &[PathBuf]) -> Result<Vec<libc::pid_t>, String> {
    let layout = Layout::detect().map_err(|e| e.to_string())?;
    let mut evicted = Vec::new();
    for file in join_files {
        let listed = std::fs::read_to_string(file).unwrap_or_default();
        let root = root_of(file, &layout)
            .ok_or_else(|| format!("no cgroup hierarchy holds {}", file.display()))?;
        for pid in listed
            .lines()
            .filter_map(|p| p.trim().parse::<libc::pid_t>().ok())
        {
            if check_owner(pid, uid).is_ok() {
                continue;
            }
            std::fs::write(root.join("cgroup.procs"), pid.to_string())
                .map_err(|e| format!("moving process {pid} out of {}: {e}", file.display()))?;
            evicted.push(pid);
        }
    }
    Ok(evicted)
}

/// The root cgroup of the hierarchy `join_file` is in.
fn root_of(join_file: &Path, layout: &Layout) -> Option<PathBuf> {
    layout
        .hierarchies()
        .map(|(mount, _)| mount)
        .filter(|mount| join_file.starts_with(mount))
        .max_by_key(|mount| mount.components().count())
        .map(Path::to_path_buf)
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

    #[test]
    fn a_join_files_hierarchy_root_is_its_deepest_mount() {
        let layout = Layout {
            v2: Some("/sys/fs/cgroup/unified".into()),
            v1_freezer: None,
            v1_cpuset: Some("/sys/fs/cgroup/cpuset".into()),
            v1_cpu: Some("/sys/fs/cgroup/cpu,cpuacct".into()),
            v1_pids: None,
        };
        let root = |file: &str| root_of(Path::new(file), &layout);
        assert_eq!(
            root("/sys/fs/cgroup/unified/cosched/job-4/cgroup.procs"),
            Some("/sys/fs/cgroup/unified".into())
        );
        assert_eq!(
            root("/sys/fs/cgroup/cpu,cpuacct/cosched/job-4/cgroup.procs"),
            Some("/sys/fs/cgroup/cpu,cpuacct".into())
        );
        assert_eq!(root("/elsewhere/cgroup.procs"), None);
        let pure_v2 = Layout {
            v2: Some("/sys/fs/cgroup".into()),
            ..Layout::default()
        };
        assert_eq!(
            root_of(
                Path::new("/sys/fs/cgroup/cosched/job-1/cgroup.procs"),
                &pure_v2
            ),
            Some("/sys/fs/cgroup".into())
        );
    }
}
