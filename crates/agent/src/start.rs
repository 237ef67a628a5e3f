//! What a root process of cosched does first, whether it is the controller (`cosched
//! daemon`, which runs this machine's agent too) or a node's agent on its own (`cosched
//! agent`): stop signals, inherited descriptors, the open-file limit, a state directory and
//! socket paths only root controls, the node's cgroups; and why a start failed.

use crate::{HOSTS_DIR, STATE_SUBDIRS};
use cosched_cgroups::{delegation, Cgroups, Delegation, Freezer, Layout};
use cosched_cluster::ClusterError;
use cosched_os::unix;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a root process of cosched did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The controller's job store (its error type is the daemon's, which converts into this).
    #[error(transparent)]
    Store(Box<dyn std::error::Error + Send + Sync>),
    #[error("cgroups: {0}")]
    Cgroups(#[from] cosched_cgroups::CgroupError),
    #[error("{0}")]
    Config(String),
    #[error("another daemon is serving {0} (stop it first)")]
    Running(PathBuf),
    #[error("{path}: {why}")]
    Unsafe { path: PathBuf, why: String },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

pub fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StartError + '_ {
    move |source| StartError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread and every thread it starts afterwards,
/// so that [`wait_for_stop`] receives them.
fn block_stop_signals() -> libc::sigset_t {
    let set = unix::signal_set(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP]);
    // SAFETY: a valid set and no old one.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    set
}

/// Waits for one of the stop signals [`take_charge`] blocked; returns its number.
pub fn wait_for_stop(set: &libc::sigset_t) -> i32 {
    let mut signal = 0;
    // SAFETY: `set` is initialised and `signal` writable.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

/// What a root process of cosched (controller or node agent) does first: stop signals
/// blocked for `wait_for_stop`, inherited descriptors kept from supervisors and jobs, the
/// open-file limit raised, the state directory made private. Returns the signal set, the
/// open-file limit and the state directory's resolved path.
pub fn take_charge(state_dir: &Path) -> Result<(libc::sigset_t, u64, PathBuf), StartError> {
    let signals = block_stop_signals();
    // Descriptors this process inherited reach no supervisor and no job.
    unix::close_on_exec_from(3).map_err(io_error(Path::new("close_range")))?;
    let max_files = raise_open_file_limit();
    Ok((signals, max_files, private_state_dir(state_dir)?))
}

/// The actuator over this machine's cgroups, under `parent` in each hierarchy; in the v2
/// tree inside this process's systemd unit when it is delegated (`delegation`), which `log`
/// says.
pub fn open_cgroups(
    parent: &str,
    freezer: Option<Freezer>,
    delegation: Delegation,
    log: cosched_os::Log,
) -> Result<Cgroups, StartError> {
    let mut layout = Layout::detect().map_err(io_error(Path::new("/proc/self/mountinfo")))?;
    if let Some(unit) = delegation::delegate(&mut layout, delegation)? {
        log.info(format_args!(
            "cgroup v2: jobs' cgroups under the delegated {}/{parent}, this process in {}/{}",
            unit.display(),
            unit.display(),
            delegation::LEAF
        ));
    }
    Ok(Cgroups::open(&layout, parent, freezer)?)
}

/// Gives the jobs together the weight of `per_processor` processes outside cosched on each
/// of `processors` (`--jobs-weight`; 0: the kernel's default). Returns what it set, for the
/// ready line; says in the log when the kernel's bound held it lower, or when it could not
/// (the jobs run all the same).
pub fn weigh_jobs(
    cgroups: &Cgroups,
    per_processor: u32,
    processors: u32,
    log: cosched_os::Log,
) -> String {
    match cgroups.weigh_jobs(per_processor, processors) {
        Ok(weight) => {
            let each = f64::from(weight)
                / f64::from(cosched_cgroups::DEFAULT_WEIGHT)
                / f64::from(processors.max(1));
            if per_processor > 0 && each < f64::from(per_processor) {
                log.warn(format_args!(
                    "--jobs-weight {per_processor}: the jobs weigh {each:.1} processes a \
                     processor, not {per_processor}: their cgroup's weight is at the \
                     kernel's most ({weight} on cgroup v2's scale)"
                ));
            }
            format!("jobs weigh {each:.1} processes a processor (cgroup weight {weight})")
        }
        Err(error) => {
            log.warn(format_args!(
                "the jobs' weight is the kernel's default ({error}): a thawed rank whose \
                 processor another process took waits longer for it"
            ));
            "jobs weigh the kernel's default".to_string()
        }
    }
}

/// At a clean stop, removes the parent cgroups the agent made, which only jobs left running
/// (`jobs_may_stay`: a stop that lets jobs loose) keep; says which stayed and why.
pub fn close_cgroups(cgroups: Cgroups, jobs_may_stay: bool, log: cosched_os::Log) {
    match cgroups.close() {
        Ok(()) => {}
        Err(error) if jobs_may_stay => log.info(format_args!(
            "the jobs' cgroup parent stays for the jobs left running ({error})"
        )),
        Err(error) => log.warn(format_args!("the jobs' cgroup parent stays: {error}")),
    }
}

/// Raises the soft open-file limit to the hard one (each queued job holds its client's three
/// descriptors, each waiting client one); returns the limit in force.
fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: get/setrlimit read and write `limit` only.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        }
    }
    limit.rlim_cur
}

/// Why a directory is unsafe for root to keep files in, if it is: another user owns it or may
/// write to it (and so plant, rename or swap what root later opens).
fn unsafe_directory(meta: &std::fs::Metadata, sticky_ok: bool) -> Option<String> {
    let mode = meta.mode();
    if !meta.is_dir() {
        Some("not a directory".into())
    } else if meta.uid() != 0 {
        Some(format!("owned by uid {}, not root", meta.uid()))
    } else if mode & 0o022 != 0 && !(sticky_ok && mode & libc::S_ISVTX != 0) {
        Some(format!("writable by others (mode {:o})", mode & 0o7777))
    } else {
        None
    }
}

/// Resolves `path` one component at a time, as the kernel would, refusing any directory on
/// the way that another user owns or may write to (a sticky one, as /tmp, will do) and any
/// symbolic link not root's: either would let them send what root creates there anywhere
/// they like. (Canonicalizing first and checking the result's parents misses a link that
/// sits in their directory.) With `create`, missing directories are made as it goes (0o755).
/// `what` names the path in the refusal. Returns the resolved path.
fn trusted_path(path: &Path, what: &str, create: bool) -> Result<PathBuf, StartError> {
    use std::ffi::OsString;
    use std::path::Component;
    const MOST_LINKS: usize = 40;
    let refuse = |path: &Path, why: String| StartError::Unsafe {
        path: path.to_path_buf(),
        why: format!(
            "{why}: another user could plant or swap the files the daemon trusts under it; \
             use a path under directories only root can write to"
        ),
    };
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_err(io_error(path))?.join(path)
    };
    // Components still to walk, the next one last.
    let mut pending: Vec<OsString> = Vec::new();
    let push = |pending: &mut Vec<OsString>, path: &Path| {
        for part in path.components().rev() {
            match part {
                Component::Normal(name) => pending.push(name.to_os_string()),
                Component::ParentDir => pending.push("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    };
    push(&mut pending, &absolute);
    let root = PathBuf::from("/");
    let root_meta = std::fs::metadata(&root).map_err(io_error(&root))?;
    if let Some(why) = unsafe_directory(&root_meta, true) {
        return Err(refuse(&root, format!("a parent of {what} is {why}")));
    }
    let mut resolved = root;
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            // `resolved` has no links left in it: its parent is the real parent, checked.
            resolved.pop();
            continue;
        }
        let next = resolved.join(&part);
        let meta = match std::fs::symlink_metadata(&next) {
            Err(error) if create && error.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::DirBuilder::new().mode(0o755).create(&next) {
                    Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(io_error(&next)(error))
                    }
                    _ => std::fs::symlink_metadata(&next).map_err(io_error(&next))?,
                }
            }
            other => other.map_err(io_error(&next))?,
        };
        if meta.file_type().is_symlink() {
            if meta.uid() != 0 {
                return Err(refuse(
                    &next,
                    format!(
                        "a symbolic link on the way to {what} is owned by uid {}, not root",
                        meta.uid()
                    ),
                ));
            }
            links += 1;
            if links > MOST_LINKS {
                return Err(refuse(
                    &next,
                    format!("more than {MOST_LINKS} symbolic links on the way to {what}"),
                ));
            }
            let target = std::fs::read_link(&next).map_err(io_error(&next))?;
            if target.is_absolute() {
                resolved = PathBuf::from("/");
            }
            push(&mut pending, &target);
            continue;
        }
        if let Some(why) = unsafe_directory(&meta, true) {
            let whose = if pending.is_empty() {
                ""
            } else {
                "a parent of "
            };
            return Err(refuse(&next, format!("{whose}{what} is {why}")));
        }
        resolved = next;
    }
    Ok(resolved)
}

/// Makes (or checks) the state directory and its subdirectories, private to root; refuses one
/// that another user owns or can write to, or that lies under such a directory or link.
/// Returns its resolved path, used from then on (no symbolic link is followed again).
fn private_state_dir(dir: &Path) -> Result<PathBuf, StartError> {
    let refuse = |path: &Path, why: String| StartError::Unsafe {
        path: path.to_path_buf(),
        why: format!(
            "{why}: another user could plant or swap the files the daemon trusts; use a \
             state directory that only root can write to, under directories only root can \
             write to (the default /var/lib/cosched)"
        ),
    };
    let resolved = trusted_path(dir, "the state directory", true)?;
    let meta = std::fs::metadata(&resolved).map_err(io_error(&resolved))?;
    if let Some(why) = unsafe_directory(&meta, false) {
        return Err(refuse(&resolved, format!("the state directory is {why}")));
    }
    // Passable (not readable) by all: a job reads its host file by name in `hosts/`; the
    // other subdirectories stay root's alone.
    std::fs::set_permissions(&resolved, std::fs::Permissions::from_mode(0o711))
        .map_err(io_error(&resolved))?;
    for sub in STATE_SUBDIRS {
        let path = resolved.join(sub);
        let mode = if sub == HOSTS_DIR { 0o711 } else { 0o700 };
        match std::fs::DirBuilder::new().mode(mode).create(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(io_error(&path)(error))
            }
            _ => {}
        }
        let meta = std::fs::symlink_metadata(&path).map_err(io_error(&path))?;
        if let Some(why) = unsafe_directory(&meta, false) {
            return Err(refuse(&path, format!("is {why}")));
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(io_error(&path))?;
    }
    Ok(resolved)
}

/// A socket's path with its directory resolved and trusted (see [`trusted_path`]): in a
/// directory another user controls, they could take the name or swap what root then chmods.
pub fn trusted_socket_path(path: &Path, what: &str) -> Result<PathBuf, StartError> {
    let name = path
        .file_name()
        .ok_or_else(|| StartError::Config(format!("{what} {} names no file", path.display())))?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok(trusted_path(dir, &format!("{what}'s directory"), true)?.join(name))
}
