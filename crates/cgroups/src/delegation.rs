//! A cgroup subtree delegated to cosched (systemd's `Delegate=yes`): the jobs' cgroups go
//! inside the unit's own cgroup, which systemd then leaves alone, rather than beside it at the
//! root of the v2 tree, which systemd owns. cgroup v2 lets no cgroup with children's
//! controllers enabled hold processes, so the process first moves itself into a leaf of the
//! unit ([`LEAF`]), as systemd's documentation of delegation asks.

use crate::{CgroupError, Layout, Result};
use std::path::{Path, PathBuf};

/// The leaf of the delegated unit where the cosched process itself lives (systemd 254's
/// `DelegateSubgroup=daemon` puts it there at start).
pub const LEAF: &str = "daemon";

/// Whether to make the jobs' cgroups inside the v2 cgroup this process was started in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delegation {
    /// When systemd marked this process's cgroup (or, in its leaf, the unit's) delegated
    /// (the `trusted.delegate` attribute systemd 251 and later set with `Delegate=yes`).
    #[default]
    Auto,
    /// Always: this process's cgroup (the unit's, when this process is in its leaf).
    Yes,
    /// Never: the jobs' cgroups at the top of each tree, as without systemd.
    No,
}

impl std::str::FromStr for Delegation {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "auto" => Ok(Delegation::Auto),
            "yes" => Ok(Delegation::Yes),
            "no" => Ok(Delegation::No),
            _ => Err(format!("'{text}' is not auto, yes or no")),
        }
    }
}

/// This process's cgroup in the v2 tree, from `/proc/self/cgroup` text: the `0::PATH` line.
pub fn own_v2_cgroup(proc_self_cgroup: &str) -> Option<&str> {
    proc_self_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
}

/// The delegated unit's cgroup (a directory under the v2 mount), if jobs go there. `own` is
/// this process's cgroup directory; `delegated` says whether systemd marked a directory.
fn unit_of(
    own: &Path,
    delegation: Delegation,
    delegated: impl Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let in_leaf = own.file_name().is_some_and(|name| name == LEAF);
    let parent = own.parent().filter(|_| in_leaf);
    match delegation {
        Delegation::No => None,
        Delegation::Yes => Some(parent.unwrap_or(own).to_path_buf()),
        Delegation::Auto if delegated(own) => Some(own.to_path_buf()),
        Delegation::Auto => parent.filter(|p| delegated(p)).map(Path::to_path_buf),
    }
}

/// Whether systemd delegated the cgroup directory `dir` (its `trusted.delegate` is "1").
fn marked_delegated(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut value = [0u8; 8];
    // SAFETY: both strings are NUL-terminated and `value` is writable for its length.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            c"trusted.delegate".as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    n > 0 && value[..n as usize] == *b"1"
}

/// Applies `delegation` to `layout`: when jobs go inside this process's unit, moves this
/// process into the unit's [`LEAF`] and makes the unit the v2 root the actuator builds under
/// ([`crate::Cgroups::open`]). Returns the unit's directory then. Other hierarchies (a hybrid
/// machine's v1 controllers) are not systemd's to delegate and stay as they are.
pub fn delegate(layout: &mut Layout, delegation: Delegation) -> Result<Option<PathBuf>> {
    if delegation == Delegation::No {
        return Ok(None);
    }
    let Some(v2) = layout.v2.clone() else {
        return match delegation {
            Delegation::Yes => Err(CgroupError::Unsupported(
                "cgroup delegation needs a cgroup v2 tree, and none is mounted".into(),
            )),
            _ => Ok(None),
        };
    };
    let proc_file = Path::new("/proc/self/cgroup");
    let text = std::fs::read_to_string(proc_file).map_err(|source| CgroupError::Io {
        path: proc_file.to_path_buf(),
        source,
    })?;
    let own = own_v2_cgroup(&text).ok_or_else(|| {
        CgroupError::Unsupported("/proc/self/cgroup has no cgroup v2 line ('0::')".into())
    })?;
    let own = v2.join(own.trim_start_matches('/'));
    let Some(unit) = unit_of(&own, delegation, marked_delegated) else {
        return Ok(None);
    };
    if unit == v2 {
        return Err(CgroupError::Unsupported(format!(
            "this process is in the root cgroup of {}: nothing is delegated to it",
            v2.display()
        )));
    }
    let leaf = unit.join(LEAF);
    if own != leaf {
        match std::fs::create_dir(&leaf) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(CgroupError::Io {
                    path: leaf,
                    source: e,
                })
            }
            _ => {}
        }
        let procs = leaf.join("cgroup.procs");
        // "0" moves the writing process, every thread of it.
        std::fs::write(&procs, "0").map_err(|source| CgroupError::Io {
            path: procs,
            source,
        })?;
    }
    layout.v2 = Some(unit.clone());
    Ok(Some(unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v2_line_is_found_among_v1_ones() {
        let hybrid = "12:cpuset:/\n4:freezer:/\n0::/system.slice/cosched.service\n";
        assert_eq!(own_v2_cgroup(hybrid), Some("/system.slice/cosched.service"));
        assert_eq!(own_v2_cgroup("3:cpu:/x\n"), None);
    }

    #[test]
    fn the_unit_is_the_marked_cgroup_or_the_parent_of_its_leaf() {
        let unit = Path::new("/sys/fs/cgroup/system.slice/cosched.service");
        let leaf = unit.join(LEAF);
        let marked = |dir: &Path| dir == unit;
        let nothing = |_: &Path| false;
        assert_eq!(unit_of(unit, Delegation::Auto, marked), Some(unit.into()));
        assert_eq!(unit_of(&leaf, Delegation::Auto, marked), Some(unit.into()));
        assert_eq!(unit_of(unit, Delegation::Auto, nothing), None);
        assert_eq!(unit_of(unit, Delegation::No, marked), None);
        assert_eq!(unit_of(unit, Delegation::Yes, nothing), Some(unit.into()));
        assert_eq!(unit_of(&leaf, Delegation::Yes, nothing), Some(unit.into()));
        // A cgroup that merely ends in "daemon" is not taken for a leaf unless marked above.
        let other = Path::new("/sys/fs/cgroup/user.slice/daemon");
        assert_eq!(unit_of(other, Delegation::Auto, nothing), None);
    }

    #[test]
    fn words_parse_and_others_are_refused() {
        assert_eq!("yes".parse::<Delegation>(), Ok(Delegation::Yes));
        assert_eq!("auto".parse::<Delegation>(), Ok(Delegation::Auto));
        assert!("maybe"
            .parse::<Delegation>()
            .unwrap_err()
            .contains("'maybe'"));
    }
}
