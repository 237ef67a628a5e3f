//! What `/proc/PID/stat` says of a process or thread: its state letter, the CPU time it has
//! used, the processor it last ran on, its parent and when it started.

use crate::{CgroupError, Pid, Result};
use std::path::PathBuf;

/// State letter, user + system CPU time in clock ticks, the processor last run on, the
/// parent, and the start time (clock ticks since boot: with the pid, it names one process
/// for good).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub state: char,
    pub cpu_ticks: u64,
    pub processor: usize,
    pub parent: Pid,
    pub started: u64,
}

/// Reads `/proc/PID/stat`: the whole process (CPU time of all its threads). The command
/// name (field 2) may hold spaces and parentheses, so the fields are counted from the last `)`.
pub fn stat(pid: Pid) -> Result<Stat> {
    read_stat(PathBuf::from(format!("/proc/{pid}/stat")))
}

/// Reads `/proc/PID/task/TID/stat`: one thread. (`/proc/TID/stat` would not do: it reports
/// the CPU time of the thread's whole process.)
pub fn thread_stat(pid: Pid, tid: Pid) -> Result<Stat> {
    read_stat(PathBuf::from(format!("/proc/{pid}/task/{tid}/stat")))
}

/// Reads a small kernel file (procfs, cgroupfs) whole. `fs::read_to_string` sizes its buffer
/// by the file's length, which these files report as 0: it stat()s, then reads in 32, 64, 128
/// ... byte steps, 8 system calls for a `stat` line where this makes 4 (open, read, read 0,
/// close). The clock thread reads dozens of these per slot at real-time priority, on the
/// running job's processors. Bytes that are not UTF-8 become U+FFFD: a process's name in
/// `/proc/PID/stat` is whatever its owner set (`prctl(PR_SET_NAME)`), and a name must not
/// make its process unreadable (uncounted, or taken for stopped).
pub fn read_kernel_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::with_capacity(4096);
    // Through `Take`: `File`'s own `read_to_end` would stat the file to size the buffer.
    file.take(u64::MAX).read_to_end(&mut bytes)?;
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|not_utf8| String::from_utf8_lossy(not_utf8.as_bytes()).into_owned()))
}

fn read_stat(path: PathBuf) -> Result<Stat> {
    let text = read_kernel_file(&path).map_err(|source| CgroupError::Io {
        path: path.clone(),
        source,
    })?;
    parse_stat(&text).ok_or_else(|| CgroupError::Io {
        path,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected format"),
    })
}

/// Converts clock ticks (as `/proc/PID/stat` counts CPU time) to a duration.
pub fn ticks_to_duration(ticks: u64) -> std::time::Duration {
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    std::time::Duration::from_micros(ticks * 1_000_000 / per_second)
}

/// A thread's `/proc/PID/task/TID/schedstat`: CPU time run, time spent waiting runnable on a
/// run queue (both in ns), and how many times it was switched in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// Updated at switches and ticks only: up to a tick (4 ms at HZ=250) stale for a thread
    /// running on another processor now.
    pub runtime_ns: u64,
    /// Updated the moment the thread is switched in, by the wait since it became runnable.
    pub run_delay_ns: u64,
    /// Incremented the moment the thread is switched in.
    pub timeslices: u64,
}

pub fn task_schedstat(pid: Pid, tid: Pid) -> Result<SchedStat> {
    let path = PathBuf::from(format!("/proc/{pid}/task/{tid}/schedstat"));
    let text = read_kernel_file(&path).map_err(|source| CgroupError::Io {
        path: path.clone(),
        source,
    })?;
    let fields: Vec<u64> = text
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    match fields[..] {
        [runtime_ns, run_delay_ns, timeslices] => Ok(SchedStat {
            runtime_ns,
            run_delay_ns,
            timeslices,
        }),
        _ => Err(CgroupError::Io {
            path,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected format"),
        }),
    }
}

/// The threads of a process (empty when it is gone).
pub fn tasks(pid: Pid) -> Vec<Pid> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, parent 4, utime 14, stime 15, start
    // time 22, processor 39.
    let state = fields.first()?.chars().next()?;
    let parent = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let started = fields.get(19)?.parse().ok()?;
    let processor = fields.get(36)?.parse().ok()?;
    Some(Stat {
        state,
        cpu_ticks: utime + stime,
        processor,
        parent,
        started,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_spaces_and_parentheses() {
        let line = "1234 (a b) c)) R 1 1234 1234 0 -1 4194304 100 0 0 0 57 3 0 0 20 0 1 0 1000 \
            1000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'R',
                cpu_ticks: 60,
                processor: 1,
                parent: 1,
                started: 1000,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_thread_named_in_bytes_that_are_not_utf8_is_read() {
        let (named, read) = std::sync::mpsc::channel();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
            let rc = unsafe { libc::prctl(libc::PR_SET_NAME, c"\xff\xfe)".as_ptr()) };
            assert_eq!(rc, 0);
            // SAFETY: gettid has no preconditions.
            named.send(unsafe { libc::gettid() }).unwrap();
            let _ = wait.recv();
        });
        let tid = read.recv().unwrap();
        let stat = thread_stat(std::process::id() as Pid, tid);
        done.send(()).unwrap();
        thread.join().unwrap();
        let stat = stat.unwrap();
        assert!(matches!(stat.state, 'R' | 'S'), "{stat:?}");
        assert_eq!(stat.parent, std::os::unix::process::parent_id() as Pid);
    }

    #[test]
    fn reads_this_process_and_names_a_missing_one() {
        let me = stat(std::process::id() as Pid).unwrap();
        assert!(matches!(me.state, 'R' | 'S'), "{me:?}");
        let err = stat(i32::MAX).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("/proc/{}/stat: ", i32::MAX)),
            "{err}"
        );
    }
}
