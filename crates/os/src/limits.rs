//! A job's resource limits (`setrlimit(2)`): those of the process that submitted it, as a
//! login's would be (`limits.conf` through PAM, then whatever the user's shell lowered), and
//! not the daemon's. The daemon runs as root with its own (an open-file limit of a million
//! under `dist/cosched.service`), and every job inherited them. Slurm does the same by
//! default (`PropagateResourceLimits=ALL`). They are read by the daemon from the submitting
//! process itself, never taken from what a client says: a user cannot raise their own hard
//! limits, so nothing read this way is more than the user already had.

use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::OwnedFd;

/// The resources a process has limits on, by the names `prlimit(1)` and `/proc/PID/limits`
/// use (stable across architectures, unlike their numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    As,
    Core,
    Cpu,
    Data,
    Fsize,
    Locks,
    Memlock,
    Msgqueue,
    Nice,
    Nofile,
    Nproc,
    Rss,
    Rtprio,
    Rttime,
    Sigpending,
    Stack,
}

impl Resource {
    pub const ALL: [Resource; 16] = [
        Resource::As,
        Resource::Core,
        Resource::Cpu,
        Resource::Data,
        Resource::Fsize,
        Resource::Locks,
        Resource::Memlock,
        Resource::Msgqueue,
        Resource::Nice,
        Resource::Nofile,
        Resource::Nproc,
        Resource::Rss,
        Resource::Rtprio,
        Resource::Rttime,
        Resource::Sigpending,
        Resource::Stack,
    ];

    fn number(self) -> libc::__rlimit_resource_t {
        (match self {
            Resource::As => libc::RLIMIT_AS,
            Resource::Core => libc::RLIMIT_CORE,
            Resource::Cpu => libc::RLIMIT_CPU,
            Resource::Data => libc::RLIMIT_DATA,
            Resource::Fsize => libc::RLIMIT_FSIZE,
            Resource::Locks => libc::RLIMIT_LOCKS,
            Resource::Memlock => libc::RLIMIT_MEMLOCK,
            Resource::Msgqueue => libc::RLIMIT_MSGQUEUE,
            Resource::Nice => libc::RLIMIT_NICE,
            Resource::Nofile => libc::RLIMIT_NOFILE,
            Resource::Nproc => libc::RLIMIT_NPROC,
            Resource::Rss => libc::RLIMIT_RSS,
            Resource::Rtprio => libc::RLIMIT_RTPRIO,
            Resource::Rttime => libc::RLIMIT_RTTIME,
            Resource::Sigpending => libc::RLIMIT_SIGPENDING,
            Resource::Stack => libc::RLIMIT_STACK,
        }) as libc::__rlimit_resource_t
    }
}

/// One limit: the soft value a process may raise itself to the hard one. `None`: unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimit {
    pub resource: Resource,
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

fn to_kernel(value: Option<u64>) -> libc::rlim_t {
    value.unwrap_or(libc::RLIM_INFINITY)
}

/// Every limit of process `pid`, which `pidfd` holds, from `/proc/PID/limits` (which anyone
/// may read; `prlimit(2)` of another user's process needs CAP_SYS_RESOURCE, which a root in a
/// container may lack), then the pidfd checked, so that a pid freed and taken by another
/// process meanwhile is never read as this one's (`ESRCH` then).
pub fn of_process(pid: libc::pid_t, pidfd: &OwnedFd) -> io::Result<Vec<ResourceLimit>> {
    let gone = || io::Error::from_raw_os_error(libc::ESRCH);
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/limits")).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => gone(),
            _ => e,
        })?;
    let limits = parse_proc_limits(&text)?;
    if crate::unix::has_exited(pidfd) {
        return Err(gone());
    }
    Ok(limits)
}

/// The kernel's names for the limits in `/proc/PID/limits` (fs/proc/base.c).
const PROC_NAMES: [(&str, Resource); 16] = [
    ("Max cpu time", Resource::Cpu),
    ("Max file size", Resource::Fsize),
    ("Max data size", Resource::Data),
    ("Max stack size", Resource::Stack),
    ("Max core file size", Resource::Core),
    ("Max resident set", Resource::Rss),
    ("Max processes", Resource::Nproc),
    ("Max open files", Resource::Nofile),
    ("Max locked memory", Resource::Memlock),
    ("Max address space", Resource::As),
    ("Max file locks", Resource::Locks),
    ("Max pending signals", Resource::Sigpending),
    ("Max msgqueue size", Resource::Msgqueue),
    ("Max nice priority", Resource::Nice),
    ("Max realtime priority", Resource::Rtprio),
    ("Max realtime timeout", Resource::Rttime),
];

/// Each line is the name in 25 columns, then the soft and hard limits (`unlimited` or a
/// number), then units. A line it does not know (a later kernel's) is left out.
fn parse_proc_limits(text: &str) -> io::Result<Vec<ResourceLimit>> {
    let bad = |line: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected line in /proc/PID/limits: {line:?}"),
        )
    };
    let value = |word: Option<&str>, line: &str| match word {
        Some("unlimited") => Ok(None),
        Some(number) => number.parse().map(Some).map_err(|_| bad(line)),
        None => Err(bad(line)),
    };
    let mut limits = Vec::with_capacity(PROC_NAMES.len());
    for line in text.lines().skip(1) {
        let Some((name, values)) = line.split_at_checked(25) else {
            continue;
        };
        let Some(&(_, resource)) = PROC_NAMES.iter().find(|(n, _)| *n == name.trim_end()) else {
            continue;
        };
        let mut words = values.split_whitespace();
        let soft = value(words.next(), line)?;
        let hard = value(words.next(), line)?;
        limits.push(ResourceLimit {
            resource,
            soft,
            hard,
        });
    }
    Ok(limits)
}

/// Limits as the kernel takes them, made before a fork: [`apply`] runs in the child.
pub fn to_raw(limits: &[ResourceLimit]) -> Vec<(libc::__rlimit_resource_t, libc::rlimit)> {
    limits
        .iter()
        .map(|limit| {
            let raw = libc::rlimit {
                rlim_cur: to_kernel(limit.soft),
                rlim_max: to_kernel(limit.hard),
            };
            (limit.resource.number(), raw)
        })
        .collect()
}

/// Sets `limits` on the calling process. One the kernel refuses (a hard limit past what this
/// machine allows, such as `fs.nr_open` for open files, lower here than where the job was
/// submitted) is held to the process's own hard limit instead, which only lowers it. Only
/// system calls: async-signal-safe, for a forked child before exec.
pub fn apply(limits: &[(libc::__rlimit_resource_t, libc::rlimit)]) {
    for (resource, wanted) in limits {
        // SAFETY: `wanted` and `now` are valid rlimits for the reads and writes made.
        unsafe {
            if libc::setrlimit(*resource, wanted) == 0 {
                continue;
            }
            let mut now = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(*resource, &mut now) == 0 {
                let held = libc::rlimit {
                    rlim_cur: wanted.rlim_cur.min(now.rlim_max),
                    rlim_max: wanted.rlim_max.min(now.rlim_max),
                };
                libc::setrlimit(*resource, &held);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_processs_limits_are_read_and_given_to_another() {
        let me = std::process::id() as libc::pid_t;
        let pidfd = crate::unix::pidfd_open(me).unwrap();
        let mine = of_process(me, &pidfd).unwrap();
        assert_eq!(mine.len(), Resource::ALL.len());
        let nofile = mine
            .iter()
            .find(|l| l.resource == Resource::Nofile)
            .unwrap();
        assert!(nofile.soft.is_some() && nofile.soft <= nofile.hard.or(nofile.soft));
        // Named, not numbered, on the wire.
        let json = serde_json::to_string(nofile).unwrap();
        assert!(json.starts_with(r#"{"resource":"nofile","#), "{json}");
        // A child given a lower open-file limit has it.
        let lower = ResourceLimit {
            soft: Some(64),
            hard: Some(128),
            ..*nofile
        };
        let raw = to_raw(&[lower]);
        let mut child = std::process::Command::new("sh");
        child.args(["-c", "ulimit -Sn; ulimit -Hn"]);
        // SAFETY: `apply` makes only system calls.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut child, move || {
                apply(&raw);
                Ok(())
            });
        }
        let out = child.output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "64\n128\n");
    }

    #[test]
    fn the_kernels_table_is_read_by_name() {
        let text =
            "Limit                     Soft Limit           Hard Limit           Units     \n\
Max cpu time              unlimited            unlimited            seconds   \n\
Max open files            1024                 524288               files     \n\
Max nice priority         0                    0                    \n\
Max future thing          1                    2                    things    \n";
        let limits = parse_proc_limits(text).unwrap();
        assert_eq!(
            limits,
            [
                ResourceLimit {
                    resource: Resource::Cpu,
                    soft: None,
                    hard: None
                },
                ResourceLimit {
                    resource: Resource::Nofile,
                    soft: Some(1024),
                    hard: Some(524288)
                },
                ResourceLimit {
                    resource: Resource::Nice,
                    soft: Some(0),
                    hard: Some(0)
                },
            ]
        );
        let garbled =
            "Limit\nMax open files            lots                 524288               files\n";
        assert!(parse_proc_limits(garbled).is_err());
    }

    #[test]
    fn an_exited_process_is_not_read() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as libc::pid_t;
        let pidfd = crate::unix::pidfd_open(pid).unwrap();
        child.wait().unwrap();
        let read = of_process(pid, &pidfd);
        assert_eq!(
            read.map_err(|e| e.raw_os_error()),
            Err(Some(libc::ESRCH)),
            "a reaped process's pid may be another's"
        );
    }
}
