//! Where the cgroup hierarchies are mounted, read from `/proc/self/mountinfo`.
//!
//! A machine may be pure cgroup v2, pure v1, or hybrid (v1 controllers such as cpu and cpuset,
//! plus a v2 tree, often at /sys/fs/cgroup/unified, whose `cgroup.freeze` works even with no
//! controller enabled). The parser is pure, so every layout is testable from text.

use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The cgroup2 mount, if any.
    pub v2: Option<PathBuf>,
    /// Whether it is mounted with `favordynmods`: without it, a process joining a cgroup
    /// holds the kernel's cgroup mutex (which every `cgroup.freeze` write takes) for an RCU
    /// grace period.
    pub v2_favordynmods: bool,
    /// v1 hierarchies by controller, if mounted.
    pub v1_freezer: Option<PathBuf>,
    pub v1_cpuset: Option<PathBuf>,
    pub v1_cpu: Option<PathBuf>,
    pub v1_pids: Option<PathBuf>,
    /// Memory limits and peaks where the v2 tree has no memory controller (hybrid machines).
    pub v1_memory: Option<PathBuf>,
    /// CPU time where there is no v2 tree at all (every v2 group keeps `cpu.stat`).
    pub v1_cpuacct: Option<PathBuf>,
}

impl Layout {
    /// Parses mountinfo text (`man 5 proc`): the mount point is field 5, the filesystem type
    /// follows the ` - ` separator, and v1 controllers are in the super options.
    pub fn parse_mountinfo(text: &str) -> Layout {
        let mut layout = Layout::default();
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let Some(mount_point) = left.split_whitespace().nth(4) else {
                continue;
            };
            let mut right = right.split_whitespace();
            let (fs_type, super_options) = (right.next(), right.nth(1).unwrap_or(""));
            let path = PathBuf::from(unescape(mount_point));
            match fs_type {
                Some("cgroup2") if layout.v2.is_none() => {
                    layout.v2 = Some(path);
                    layout.v2_favordynmods = super_options
                        .split(',')
                        .any(|option| option == "favordynmods");
                }
                Some("cgroup") => {
                    for option in super_options.split(',') {
                        let slot = match option {
                            "freezer" => &mut layout.v1_freezer,
                            "cpuset" => &mut layout.v1_cpuset,
                            "cpu" => &mut layout.v1_cpu,
                            "pids" => &mut layout.v1_pids,
                            "memory" => &mut layout.v1_memory,
                            "cpuacct" => &mut layout.v1_cpuacct,
                            _ => continue,
                        };
                        slot.get_or_insert_with(|| path.clone());
                    }
                }
                _ => {}
            }
        }
        layout
    }

    pub fn detect() -> std::io::Result<Layout> {
        Ok(Layout::parse_mountinfo(&std::fs::read_to_string(
            "/proc/self/mountinfo",
        )?))
    }

    /// Each hierarchy cosched uses that is mounted, with the controller that names it in
    /// `/proc/PID/cgroup` ("" for the unified one).
    pub fn hierarchies(&self) -> impl Iterator<Item = (&Path, &'static str)> {
        [
            (self.v2.as_deref(), ""),
            (self.v1_freezer.as_deref(), "freezer"),
            (self.v1_cpuset.as_deref(), "cpuset"),
            (self.v1_cpu.as_deref(), "cpu"),
            (self.v1_pids.as_deref(), "pids"),
            (self.v1_memory.as_deref(), "memory"),
            (self.v1_cpuacct.as_deref(), "cpuacct"),
        ]
        .into_iter()
        .filter_map(|(mount, controller)| Some((mount?, controller)))
    }

    /// The controllers the v2 root offers (`cgroup.controllers`), empty without v2.
    pub fn v2_controllers(&self) -> Vec<String> {
        self.v2
            .as_deref()
            .and_then(|root| std::fs::read_to_string(root.join("cgroup.controllers")).ok())
            .map(|text| text.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    }
}

/// Mount points escape space, tab, newline and backslash as octal (`\040`).
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |p: &Option<PathBuf>| {
            p.as_deref()
                .map_or("-".to_string(), |p| Path::display(p).to_string())
        };
        write!(
            f,
            "cgroup2 {}, v1 freezer {}, v1 cpuset {}, v1 cpu {}, v1 pids {}, v1 memory {}, \
             v1 cpuacct {}",
            show(&self.v2),
            show(&self.v1_freezer),
            show(&self.v1_cpuset),
            show(&self.v1_cpu),
            show(&self.v1_pids),
            show(&self.v1_memory),
            show(&self.v1_cpuacct)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 31 0:36 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn hybrid_machines_have_both() {
        let layout = Layout::parse_mountinfo(HYBRID);
        assert_eq!(
            layout.v2.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            layout.v1_freezer.as_deref(),
            Some(Path::new("/sys/fs/cgroup/freezer"))
        );
        assert_eq!(
            layout.v1_cpuset.as_deref(),
            Some(Path::new("/sys/fs/cgroup/cpuset"))
        );
        assert_eq!(
            layout.v1_cpu.as_deref(),
            Some(Path::new("/sys/fs/cgroup/cpu"))
        );
        assert_eq!(
            layout.v1_pids.as_deref(),
            Some(Path::new("/sys/fs/cgroup/pids"))
        );
        assert_eq!(
            layout.v1_memory.as_deref(),
            Some(Path::new("/sys/fs/cgroup/memory"))
        );
        assert_eq!(
            layout.v1_cpuacct.as_deref(),
            Some(Path::new("/sys/fs/cgroup/cpuacct"))
        );
    }

    #[test]
    fn pure_v2_and_combined_v1_mounts() {
        let v2 = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        let layout = Layout::parse_mountinfo(v2);
        assert_eq!(layout.v2.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert_eq!(layout.v1_freezer, None);
        assert!(!layout.v2_favordynmods);
        let favoured = v2.replace("nsdelegate", "nsdelegate,favordynmods");
        assert!(Layout::parse_mountinfo(&favoured).v2_favordynmods);
        let combined =
            "35 25 0:31 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        let layout = Layout::parse_mountinfo(combined);
        assert_eq!(
            layout.v1_cpu.as_deref(),
            Some(Path::new("/sys/fs/cgroup/cpu,cpuacct"))
        );
        assert_eq!(Layout::parse_mountinfo("garbage\n\n"), Layout::default());
    }

    #[test]
    fn escaped_mount_points() {
        let text = "41 31 0:38 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n";
        let layout = Layout::parse_mountinfo(text);
        assert_eq!(layout.v2.as_deref(), Some(Path::new("/mnt/my cgroups")));
    }
}
