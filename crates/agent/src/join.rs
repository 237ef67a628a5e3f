//! Moving a process started elsewhere into a registered job's cgroup (`Command::Join`), by
//! pid: the only way cgroups take a process, and a pid names another process once the first
//! has exited and been reaped. So the process is checked before the move (its owner, its
//! cgroup, its start time) and again after it: if by then the pid names another process, that
//! one was moved by mistake and goes back to its parent's cgroups (where it was born, a
//! moment before), never staying in the job.

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

/// The cgroup a process is in, as the unified (v2) hierarchy says, else the v1 freezer's.
fn cgroup_of(pid: libc::pid_t) -> Result<String, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map_err(|e| e.to_string())?;
    let line = |wanted: &dyn Fn(&str) -> bool| {
        text.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            wanted(controllers).then(|| path.to_string())
        })
    };
    line(&|c| c.is_empty())
        .or_else(|| line(&|c| c.split(',').any(|c| c == "freezer")))
        .ok_or_else(|| format!("process {pid} is in no cgroup hierarchy this agent knows"))
}

/// A process joins only from the cgroup of the process that asks: no one moves a process out
/// of a cgroup its user did not choose (one root froze or limited, or another job).
pub fn check_same_cgroup(pid: libc::pid_t, asker: libc::pid_t) -> Result<(), String> {
    let (theirs, mine) = (cgroup_of(pid)?, cgroup_of(asker)?);
    if theirs != mine {
        return Err(format!(
            "it is in cgroup {theirs}, not in its adder's ({mine}): a process joins from the \
             cgroup of the process that adds it"
        ));
    }
    Ok(())
}

/// After a move that may have taken another process than the one checked (the pid reused):
/// whatever process now has `pid`, if it is in one of `join_files`' cgroups, goes back to its
/// parent's cgroup in that hierarchy. Returns what could not be undone, if anything.
pub fn put_back(pid: libc::pid_t, join_files: &[PathBuf]) -> Result<(), String> {
    let layout = Layout::detect().map_err(|e| e.to_string())?;
    let parent = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))
                .and_then(|p| p.trim().parse::<libc::pid_t>().ok())
        });
    let Some(parent) = parent else {
        // Gone as well: nothing is left in the job.
        return Ok(());
    };
    let lines = std::fs::read_to_string(format!("/proc/{parent}/cgroup")).unwrap_or_default();
    for file in join_files {
        let listed = std::fs::read_to_string(file).unwrap_or_default();
        if !listed.lines().any(|p| p.trim() == pid.to_string()) {
            continue;
        }
        let home = home_of(file, &layout, &lines)
            .ok_or_else(|| format!("no cgroup of process {parent} for {}", file.display()))?;
        std::fs::write(&home, pid.to_string())
            .map_err(|e| format!("moving process {pid} back to {}: {e}", home.display()))?;
    }
    Ok(())
}

/// The `cgroup.procs` of the parent's cgroup (`lines`: its `/proc/PID/cgroup`) in the
/// hierarchy `join_file` is in.
fn home_of(join_file: &Path, layout: &Layout, lines: &str) -> Option<PathBuf> {
    let hierarchies = [
        (layout.v2.as_ref(), ""),
        (layout.v1_freezer.as_ref(), "freezer"),
        (layout.v1_cpuset.as_ref(), "cpuset"),
        (layout.v1_cpu.as_ref(), "cpu"),
    ];
    let (mount, controller) = hierarchies
        .into_iter()
        .filter_map(|(mount, controller)| Some((mount?, controller)))
        .find(|(mount, _)| join_file.starts_with(mount))?;
    let path = lines.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let matches = match controller {
            "" => controllers.is_empty(),
            wanted => controllers.split(',').any(|c| c == wanted),
        };
        matches.then_some(path)
    })?;
    Some(
        mount
            .join(path.trim_start_matches('/'))
            .join("cgroup.procs"),
    )
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
    fn a_parents_cgroup_is_found_in_the_hierarchy_of_the_join_file() {
        let layout = Layout {
            v2: Some("/sys/fs/cgroup/unified".into()),
            v1_freezer: None,
            v1_cpuset: Some("/sys/fs/cgroup/cpuset".into()),
            v1_cpu: Some("/sys/fs/cgroup/cpu,cpuacct".into()),
        };
        let lines = "3:cpuset:/system.slice/svc\n1:cpu,cpuacct:/system.slice\n0::/system.slice/svc.service\n";
        let home = |file: &str| home_of(Path::new(file), &layout, lines);
        assert_eq!(
            home("/sys/fs/cgroup/unified/cosched/job-4/cgroup.procs"),
            Some("/sys/fs/cgroup/unified/system.slice/svc.service/cgroup.procs".into())
        );
        assert_eq!(
            home("/sys/fs/cgroup/cpuset/cosched/job-4/cgroup.procs"),
            Some("/sys/fs/cgroup/cpuset/system.slice/svc/cgroup.procs".into())
        );
        assert_eq!(
            home("/sys/fs/cgroup/cpu,cpuacct/cosched/job-4/cgroup.procs"),
            Some("/sys/fs/cgroup/cpu,cpuacct/system.slice/cgroup.procs".into())
        );
        assert_eq!(home("/elsewhere/cgroup.procs"), None);
    }
}
