//! The per-job supervisor (as containerd-shim or slurmstepd): a small process, started by the
//! node's agent as `cosched supervise`, that starts the job, waits for it, and keeps its exit
//! status in a file even when the agent is dead. When its connection to the agent breaks (the
//! agent, or the daemon it runs in, died or stopped), it lets the job loose at once, so no job
//! stays frozen. Below, "the daemon" is the process holding the agent.
//!
//! Everything it trusts is inherited, never read from a path a user could reach: the launch
//! spec (a sealed memfd), its connection to the daemon (one end of a socket pair, connected
//! before the supervisor exists, so a daemon that dies at any moment is noticed at once) and
//! the listening socket a restarted daemon connects to.
//!
//! The job's process joins its cgroup itself before it executes the command (nothing it forks
//! can escape), takes the submitter's uid, gid and groups, and enters the submitter's working
//! directory. No shell is involved, and no descriptor but its stdio reaches it.

use cosched_cgroups::{ReleaseStep, UsageFiles};
use cosched_core::JobId;
use cosched_proto::{Ending, ExitInfo, Launch};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What a supervisor needs; it reaches the supervisor as an inherited, sealed memfd.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    pub job: JobId,
    /// The command, its environment (with what the node adds), directory and identity.
    pub launch: Launch,
    pub join_files: Vec<PathBuf>,
    pub release: Vec<ReleaseStep>,
    pub exit_file: PathBuf,
    /// Made (exclusively) just before the job is forked: a restarted daemon that finds neither
    /// a supervisor nor an exit status knows from it whether the job may have run.
    pub started_file: PathBuf,
    pub socket: PathBuf,
    /// The job opens this for its stdout and stderr (appending, as its user, in its working
    /// directory) when no client's descriptors reach it.
    #[serde(default)]
    pub output_file: Option<String>,
    /// The job opens this for its stderr instead, the same way, when given.
    #[serde(default)]
    pub error_file: Option<String>,
    /// Where the job's CPU time, peak memory and OOM kills are read once its process ends,
    /// for its [`Ending`] (and so kept with the exit status across a daemon's restart).
    #[serde(default)]
    pub usage: UsageFiles,
    /// The job's processes' time slice (µs; `cosched_os::slice`), set before the command
    /// runs; `None`: the kernel's own.
    #[serde(default)]
    pub time_slice_us: Option<u32>,
}

/// The listening socket (`run/job-N.sock`) for a restarted daemon.
const LISTENER_FD: RawFd = 3;
/// The connection to the daemon that started the supervisor.
const DAEMON_FD: RawFd = 4;
/// The launch spec, a sealed memfd.
const SPEC_FD: RawFd = 5;

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("launch spec (descriptor {SPEC_FD}): {0}")]
    Spec(io::Error),
    #[error("launch spec (descriptor {SPEC_FD}): {0}")]
    BadSpec(serde_json::Error),
    #[error("job {job}: {path} exists: the job was started before; refusing to start it twice")]
    StartedBefore { job: JobId, path: PathBuf },
    #[error("job {job}: {what}: {source}")]
    Os {
        job: JobId,
        what: &'static str,
        source: io::Error,
    },
}

/// Starts the supervisor of a job: a new session (no terminal signal reaches it), the job's
/// stdio as its own, `listener`, its end of a fresh socket pair and the spec as descriptors 3, 4
/// and 5, and nothing else. Returns the daemon's end of the pair: the supervisor is connected
/// from its first instruction.
pub fn spawn(
    exe: &Path,
    spec: &LaunchSpec,
    listener: UnixListener,
    stdio: [OwnedFd; 3],
    affinity: Option<libc::cpu_set_t>,
) -> io::Result<(Child, UnixStream)> {
    use std::os::unix::process::CommandExt;
    let (daemon_end, supervisor_end) = UnixStream::pair()?;
    let spec_fd = sealed_memfd(&serde_json::to_vec(spec).expect("specs serialize"))?;
    // Above the target numbers, so that no dup2 below overwrites a source.
    let sources = [
        dup_above(listener.as_fd())?,
        dup_above(supervisor_end.as_fd())?,
        dup_above(spec_fd.as_fd())?,
    ];
    let raw = sources.each_ref().map(|fd| fd.as_raw_fd());
    let [stdin, stdout, stderr] = stdio;
    let mut command = Command::new(exe);
    command
        .arg("supervise")
        .env_clear()
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    // SAFETY: setsid, sched_setaffinity, dup2 and close_range are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            libc::setsid();
            // On its job's processors, the supervisor's own start (exec, setup: a millisecond
            // or two here) takes no processor from another job. Refused (processors outside
            // the daemon's cpuset), it runs where the daemon may.
            if let Some(set) = &affinity {
                libc::sched_setaffinity(0, std::mem::size_of_val(set), set);
            }
            for (source, target) in raw.into_iter().zip([LISTENER_FD, DAEMON_FD, SPEC_FD]) {
                if libc::dup2(source, target) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Whatever else this process holds (descriptors the daemon inherited included)
            // stays behind.
            cosched_os::unix::close_on_exec_from(SPEC_FD + 1)
        });
    }
    let child = command.spawn()?;
    Ok((child, daemon_end))
}

fn dup_above(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor that nothing else owns.
    let new = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// An anonymous file holding `bytes`, sealed so that nobody can change it afterwards.
fn sealed_memfd(bytes: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create takes a NUL-terminated name; the descriptor returned is ours.
    let fd = unsafe {
        OwnedFd::from_raw_fd(check(libc::memfd_create(
            c"cosched-spec".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        ))?)
    };
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: adding seals to our own memfd.
    check(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
    io::Seek::seek(&mut file, io::SeekFrom::Start(0))?;
    Ok(file.into())
}

/// Where the job's program may be, in the order they are tried: a name with a slash as it
/// is, else that name in each directory of the job's PATH. The child tries them after it has
/// become the job's user: root looking first would tell, by the exit status, whether a file
/// exists in a directory the user may not search.
fn candidates(argv0: &str, env: &[(String, String)]) -> Vec<CString> {
    if argv0.contains('/') {
        return vec![cstring(argv0)];
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| cstring(&format!("{}/{argv0}", dir.trim_end_matches('/'))))
        .collect()
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("validated: no NUL bytes")
}

/// Steps of the child's start, reported through the error pipe when one fails.
const STEPS: [&str; 10] = [
    "",
    "cannot join its cgroup",
    "cannot take the submitter's uid, gid and groups",
    "cannot enter the working directory",
    "cannot run the command",
    "cannot close the supervisor's descriptors",
    "cannot open its output file",
    "its output file is neither a regular file of its user's nor a device",
    "cannot open its error file",
    "its error file is neither a regular file of its user's nor a device",
];

struct Prepared {
    programs: Vec<CString>,
    argv: Vec<CString>,
    env: Vec<CString>,
    cwd: CString,
    join_files: Vec<CString>,
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    output: Option<CString>,
    error: Option<CString>,
    /// The job's signal mask: SIGTERM for a holder (see `Launch::holder`), else none.
    mask: libc::sigset_t,
    time_slice_us: Option<u32>,
    limits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
}

/// In the forked child, as the job's user: opens `file` for appending onto the descriptors
/// `targets`; on failure the step that failed (`step`: the open, `step + 1`: the file's kind).
/// Only async-signal-safe calls.
unsafe fn open_output(
    file: &CString,
    uid: libc::uid_t,
    targets: [i32; 2],
    step: u8,
) -> Result<(), u8> {
    // Not a link, and not a file or FIFO someone else left in a shared directory (their
    // file would get the job's output; their FIFO would hold the job at its open).
    let fd = libc::open(
        file.as_ptr(),
        libc::O_WRONLY
            | libc::O_CREAT
            | libc::O_APPEND
            | libc::O_NOFOLLOW
            | libc::O_NONBLOCK
            | libc::O_CLOEXEC,
        0o600,
    );
    if fd < 0 {
        return Err(step);
    }
    // A device (/dev/null) cannot be left by a user; a file must be the job user's own.
    let mut stat: libc::stat = std::mem::zeroed();
    if libc::fstat(fd, &mut stat) != 0
        || !((stat.st_mode & libc::S_IFMT == libc::S_IFREG && stat.st_uid == uid)
            || stat.st_mode & libc::S_IFMT == libc::S_IFCHR)
    {
        *libc::__errno_location() = libc::EPERM;
        return Err(step + 1);
    }
    let flags = libc::fcntl(fd, libc::F_GETFL);
    if flags < 0
        || libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0
        || libc::dup2(fd, targets[0]) < 0
        || libc::dup2(fd, targets[1]) < 0
    {
        return Err(step);
    }
    libc::close(fd);
    Ok(())
}

/// In the forked child: join, drop privileges, chdir, exec. Only async-signal-safe calls.
unsafe fn exec_child(p: &Prepared, report: RawFd) -> ! {
    let fail = |step: u8| -> ! {
        let errno = *libc::__errno_location();
        let mut message = [0u8; 5];
        message[0] = step;
        message[1..].copy_from_slice(&errno.to_ne_bytes());
        libc::write(report, message.as_ptr().cast(), message.len());
        libc::_exit(if errno == libc::ENOENT { 127 } else { 126 });
    };
    libc::setpgid(0, 0);
    for file in &p.join_files {
        let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
            fail(1);
        }
        libc::close(fd);
    }
    // Inherited by all it forks. A kernel that refuses it leaves the job its own slice: it
    // runs as well, only holds its processor longer against what wakes there.
    if let Some(micros) = p.time_slice_us {
        let _ = cosched_os::slice::set_time_slice(micros);
    }
    // Its submitter's limits, not the root supervisor's; set while root may still raise them.
    cosched_os::limits::apply(&p.limits);
    // A job must not inherit what the supervisor ignores or blocks (Rust ignores SIGPIPE).
    for signal in 1..libc::SIGRTMAX() {
        libc::signal(signal, libc::SIG_DFL);
    }
    libc::sigprocmask(libc::SIG_SETMASK, &p.mask, std::ptr::null_mut());
    if libc::setgroups(p.groups.len(), p.groups.as_ptr()) != 0
        || libc::setgid(p.gid) != 0
        || libc::setuid(p.uid) != 0
    {
        fail(2);
    }
    if libc::chdir(p.cwd.as_ptr()) != 0 {
        fail(3);
    }
    // Stdout and stderr to the output file, then stderr to the error file if it has one.
    let files = [(&p.output, [1, 2], 6), (&p.error, [2, 2], 8)];
    for (file, targets, step) in files {
        if let Some(file) = file {
            if let Err(step) = open_output(file, p.uid, targets, step) {
                fail(step);
            }
        }
    }
    // The job gets its stdio and nothing else (the report pipe closes at exec as it should).
    if cosched_os::unix::close_on_exec_from(3).is_err() {
        fail(5);
    }
    let argv: Vec<*const libc::c_char> = p
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let env: Vec<*const libc::c_char> = p
        .env
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // As execvp: a missing file or directory sends on to the next candidate; a refusal is
    // remembered (and reported if nothing runs); any other failure is final.
    let mut refused = false;
    for program in &p.programs {
        libc::execve(program.as_ptr(), argv.as_ptr(), env.as_ptr());
        match *libc::__errno_location() {
            libc::ENOENT | libc::ENOTDIR => {}
            libc::EACCES => refused = true,
            _ => fail(4),
        }
    }
    *libc::__errno_location() = if refused { libc::EACCES } else { libc::ENOENT };
    fail(4);
}

fn os_error(job: JobId, what: &'static str) -> impl FnOnce(io::Error) -> SupervisorError {
    move |source| SupervisorError::Os { job, what, source }
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Writes the exit status where a restarted daemon finds it: whole or not at all.
fn keep_exit(file: &Path, exit: &Ending) -> io::Result<()> {
    let partial = file.with_extension("partial");
    let mut out = std::fs::File::create(&partial)?;
    out.write_all(serde_json::to_string(exit).expect("serializes").as_bytes())?;
    out.sync_all()?;
    std::fs::rename(&partial, file)
}

/// Reads the ending a supervisor kept.
pub fn kept_exit(file: &Path) -> Option<Ending> {
    serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()
}

/// The supervisor's report of the end, read by whoever holds its connection; `None` when it
/// closed (died) without one.
pub fn read_report(stream: &UnixStream, limit: usize) -> Option<Ending> {
    let line = cosched_os::unix::read_line(stream, limit).ok()??;
    serde_json::from_slice(&line).ok()
}

/// Makes the started marker; it must not exist yet (a job is started once).
fn mark_started(job: JobId, path: &Path) -> Result<(), SupervisorError> {
    use std::os::unix::fs::OpenOptionsExt;
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|file| file.sync_all());
    match made {
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            Err(SupervisorError::StartedBefore {
                job,
                path: path.to_path_buf(),
            })
        }
        other => other.map_err(os_error(job, "making the started marker")),
    }
}

/// The spec from its inherited memfd.
fn read_spec() -> Result<LaunchSpec, SupervisorError> {
    // SAFETY: descriptor 5 was set up by `spawn` and is owned by nobody else here.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(SPEC_FD) });
    let mut text = Vec::new();
    io::Read::read_to_end(&mut file, &mut text).map_err(SupervisorError::Spec)?;
    serde_json::from_slice(&text).map_err(SupervisorError::BadSpec)
}

/// The supervisor's life. Returns when the job has ended and its status is kept.
pub fn supervise() -> Result<(), SupervisorError> {
    let spec = read_spec()?;
    let job = spec.job;
    // SAFETY: descriptors 3 and 4 were set up by `spawn` and are owned by nobody else here.
    let (listener, daemon) = unsafe {
        (
            UnixListener::from_raw_fd(LISTENER_FD),
            UnixStream::from_raw_fd(DAEMON_FD),
        )
    };
    listener
        .set_nonblocking(true)
        .map_err(os_error(job, "listening socket"))?;
    let prepared = Prepared {
        programs: candidates(&spec.launch.argv[0], &spec.launch.env),
        argv: spec.launch.argv.iter().map(|a| cstring(a)).collect(),
        env: spec
            .launch
            .env
            .iter()
            .map(|(k, v)| cstring(&format!("{k}={v}")))
            .collect(),
        cwd: cstring(&spec.launch.cwd),
        join_files: spec
            .join_files
            .iter()
            .map(|f| cstring(&f.to_string_lossy()))
            .collect(),
        uid: spec.launch.uid,
        gid: spec.launch.gid,
        groups: spec.launch.groups.clone(),
        output: spec.output_file.as_deref().map(cstring),
        error: spec.error_file.as_deref().map(cstring),
        mask: cosched_os::unix::signal_set(if spec.launch.holder {
            &[libc::SIGTERM]
        } else {
            &[]
        }),
        time_slice_us: spec.time_slice_us,
        limits: cosched_os::limits::to_raw(&spec.launch.limits),
    };
    mark_started(job, &spec.started_file)?;
    let (report, exec_failure) = cosched_os::unix::pipe(0).map_err(os_error(job, "pipe"))?;
    // The child is born with SIGTERM blocked, until it sets its own mask: a FINISH read
    // right after the fork must not kill a holder that has not taken its mask yet.
    let mut before = cosched_os::unix::signal_set(&[]);
    // SAFETY: valid sigset pointers; this process has one thread, so the child may run any
    // code until exec (it only makes async-signal-safe calls anyway).
    let child = unsafe {
        let sigterm = cosched_os::unix::signal_set(&[libc::SIGTERM]);
        libc::sigprocmask(libc::SIG_BLOCK, &sigterm, &mut before);
        let child = libc::fork();
        if child == 0 {
            exec_child(&prepared, exec_failure.as_raw_fd())
        }
        libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        check(child).map_err(os_error(job, "fork"))?
    };
    // Closed here, so that the report's end of file means the exec succeeded.
    drop(exec_failure);
    let pidfd = cosched_os::unix::pidfd_open(child)
        .map_err(os_error(job, "pidfd_open (Linux 5.3 or later)"))?;
    let mut state = Watch {
        spec: &spec,
        child,
        daemon: Some(daemon),
        released: false,
        ran: false,
        killed_unran: false,
        notes: Notes::default(),
    };
    let mut report = Some(report);
    let mut failed_step = None;
    loop {
        let mut fds = vec![poll_fd(pidfd.as_raw_fd()), poll_fd(listener.as_raw_fd())];
        fds.extend(report.as_ref().map(|r| poll_fd(r.as_raw_fd())));
        let daemon_at = fds.len();
        fds.extend(state.daemon.as_ref().map(|d| poll_fd(d.as_raw_fd())));
        // SAFETY: `fds` is a valid array of pollfd.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(os_error(job, "poll")(error));
        }
        if fds.len() > 2 && report.is_some() && fds[2].revents != 0 {
            let mut message = [0u8; 5];
            let reader = report.take().expect("checked");
            // SAFETY: `message` is writable for its length.
            let n = unsafe { libc::read(reader.as_raw_fd(), message.as_mut_ptr().cast(), 5) };
            if n == 5 {
                let errno = i32::from_ne_bytes(message[1..].try_into().expect("4 bytes"));
                failed_step = Some((message[0], io::Error::from_raw_os_error(errno)));
            } else if n == 0 {
                state.ran = true;
            }
        }
        if fds[1].revents != 0 {
            if let Ok((stream, _)) = listener.accept() {
                let _ = stream.set_nonblocking(false);
                state.daemon = Some(stream);
                state.released = false;
            }
        }
        if fds.len() > daemon_at && fds[daemon_at].revents != 0 {
            state.daemon_spoke();
        }
        if fds[0].revents != 0 {
            let exit = reap(child).map_err(os_error(job, "waitpid"))?;
            let unran = state.killed_unran.then(|| UNRAN_NOTE.to_string());
            let note = failed_step.map(|(step, error)| {
                let what = STEPS.get(usize::from(step)).copied().unwrap_or("failed");
                let subject = match (step, &spec.output_file, &spec.error_file) {
                    (3, _, _) => &spec.launch.cwd,
                    (6 | 7, Some(output), _) => output,
                    (8 | 9, _, Some(error)) => error,
                    _ => &spec.launch.argv[0],
                };
                let subject: String = subject.chars().take(200).collect();
                format!("{what} ({subject}): {error}")
            });
            let note = note.or(unran);
            if let Some(note) = &note {
                state.notes.say(format!("cosched: job {job}: {note}"));
            }
            let at_us = Some(cosched_os::now_micros());
            // Read before the end is told: the cgroup goes once the controller records it.
            let (usage, error) = cosched_cgroups::usage(&spec.usage);
            if let Some(error) = error {
                state
                    .notes
                    .say(format!("cosched: job {job}: its cgroup's figures: {error}"));
            }
            let ending = Ending {
                exit,
                note,
                at_us,
                cpu_us: usage.cpu_us,
                peak_memory_bytes: usage.peak_memory_bytes,
                oom_kills: usage.oom_kills.unwrap_or(0),
            };
            return state.finish(ending, &listener);
        }
    }
}

struct Watch<'a> {
    spec: &'a LaunchSpec,
    child: libc::pid_t,
    daemon: Option<UnixStream>,
    released: bool,
    /// The child exec'd the job's command (its report pipe closed without a failure).
    ran: bool,
    /// The child was killed on [`CANCEL`] before it ran the command.
    killed_unran: bool,
    notes: Notes,
}

/// What the daemon writes to end a registered job: its holder (the supervisor's child) gets
/// SIGTERM, which it keeps blocked from its fork on, and exits once the job's processes have.
/// Before the end, the daemon writes nothing else but [`CANCEL`].
pub const FINISH: u8 = b'F';

/// What the daemon writes when the job is cancelled: a child that has not exec'd the job's
/// command yet (still joining the job's groups, so perhaps in none, where the cancel's
/// SIGTERM to the job's cgroup missed it) is killed before it runs anything; one that has is
/// the daemon's to signal, through the job's cgroup, where it joined before its exec.
pub const CANCEL: u8 = b'C';

/// The end's note of a job whose command a cancel kept from running.
pub const UNRAN_NOTE: &str = "cancelled before its command ran";

/// Whether `note`, a job's end's, is one its supervisor also wrote to the job's stderr (why
/// its command never ran): a client whose stderr that is has shown it already.
pub fn written_to_the_jobs_stderr(note: &str) -> bool {
    note == UNRAN_NOTE || STEPS[1..].iter().any(|step| note.starts_with(step))
}

impl Watch<'_> {
    /// The daemon closed (it is gone), or asked for the job's end ([`FINISH`], [`CANCEL`]).
    fn daemon_spoke(&mut self) {
        let mut byte = [0u8; 1];
        let read = match self.daemon.as_ref() {
            Some(stream) => io::Read::read(&mut &*stream, &mut byte),
            None => return,
        };
        match read {
            Ok(1) if byte[0] == FINISH => {
                // SAFETY: kill(2) on our own child, not reaped yet (its pidfd is not ready).
                unsafe { libc::kill(self.child, libc::SIGTERM) };
            }
            Ok(1) if byte[0] == CANCEL && !self.ran => {
                self.killed_unran = true;
                // SAFETY: as above.
                unsafe { libc::kill(self.child, libc::SIGKILL) };
            }
            Ok(n) if n > 0 => {}
            _ => {
                self.daemon = None;
                self.let_loose();
            }
        }
    }

    fn let_loose(&mut self) {
        if !self.released {
            self.released = true;
            if let Err(error) = cosched_cgroups::release(&self.spec.release) {
                self.notes.say(format!(
                    "cosched: job {}: could not let the job loose: {error}",
                    self.spec.job
                ));
            }
        }
    }

    /// Keeps the status and tells the daemon. Returns once one of them holds it for good: the
    /// daemon confirmed it stored the end (the file goes), or the file is kept and no daemon
    /// confirms. While neither holds it (a full disk under both), the supervisor stays, retrying
    /// each second and answering a restarted daemon on its socket.
    fn finish(mut self, ending: Ending, listener: &UnixListener) -> Result<(), SupervisorError> {
        let job = self.spec.job;
        let line = serde_json::to_string(&ending).expect("serializes") + "\n";
        let mut kept = false;
        loop {
            if !kept {
                match keep_exit(&self.spec.exit_file, &ending) {
                    Ok(()) => kept = true,
                    // Its directory is gone (the state directory was removed): no daemon can
                    // ever read the status or reach this supervisor's socket there.
                    Err(error)
                        if error.kind() == io::ErrorKind::NotFound && self.daemon.is_none() =>
                    {
                        self.notes.say(format!(
                            "cosched: job {job}: its state directory is gone; the exit status is lost"
                        ));
                        break;
                    }
                    Err(error) => self.notes.say(format!(
                        "cosched: job {job}: keeping the exit status: {error} (retrying)"
                    )),
                }
            }
            if self.daemon.is_none() {
                if let Ok((stream, _)) = listener.accept() {
                    let _ = stream.set_nonblocking(false);
                    self.daemon = Some(stream);
                }
            }
            if let Some(stream) = self.daemon.take() {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let confirmed = (&stream).write_all(line.as_bytes()).is_ok()
                    && matches!(cosched_os::unix::read_line(&stream, 16), Ok(Some(ack)) if ack == b"ok");
                if confirmed {
                    let _ = std::fs::remove_file(&self.spec.exit_file);
                    break;
                }
            }
            if kept {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        let _ = std::fs::remove_file(&self.spec.socket);
        self.notes.flush(NOTES_PATIENCE);
        Ok(())
    }
}

/// How long a supervisor that is done waits for its last notes to reach the job's stderr.
const NOTES_PATIENCE: Duration = Duration::from_secs(1);
/// Notes waiting for the job's stderr past which more are dropped.
const NOTES_QUEUED: usize = 8;

/// The supervisor's notes to the job's stderr (its own: the user's terminal, pipe or output
/// file), written by a thread of their own. A user may hold that descriptor full and never
/// read it (a pipe they filled): written here, the supervisor would wait there forever and
/// never report the job's end, which would then hold its processors past any cancel or time
/// limit. Each note also travels in the job's end (`Ending.note`) or the daemon's log. The
/// thread starts at the first note, after the fork (until then the supervisor has one thread).
#[derive(Default)]
struct Notes {
    /// None before the first note, and if the thread could not be started.
    queue: Option<std::sync::mpsc::SyncSender<String>>,
    /// Some once the first note started (or tried to start) the thread.
    done: Option<std::sync::mpsc::Receiver<()>>,
}

impl Notes {
    /// Queues `line`; dropped when the stderr is not taking them.
    fn say(&mut self, line: String) {
        if self.done.is_none() {
            let (queue, lines) = std::sync::mpsc::sync_channel::<String>(NOTES_QUEUED);
            let (finished, done) = std::sync::mpsc::channel();
            let started = std::thread::Builder::new()
                .name("notes".into())
                .spawn(move || {
                    for line in lines {
                        let _ = io::Write::write_all(&mut io::stderr(), (line + "\n").as_bytes());
                    }
                    let _ = finished.send(());
                });
            if started.is_ok() {
                self.queue = Some(queue);
            }
            self.done = Some(done);
        }
        if let Some(queue) = &self.queue {
            let _ = queue.try_send(line);
        }
    }

    /// Waits up to `patience` for the notes queued to be written.
    fn flush(&mut self, patience: Duration) {
        self.queue = None;
        if let Some(done) = self.done.take() {
            let _ = done.recv_timeout(patience);
        }
    }
}

fn poll_fd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

fn reap(child: libc::pid_t) -> io::Result<ExitInfo> {
    let mut status = 0;
    // SAFETY: `status` is writable.
    check(unsafe { libc::waitpid(child, &mut status, 0) })?;
    Ok(if libc::WIFSIGNALED(status) {
        ExitInfo {
            code: None,
            signal: Some(libc::WTERMSIG(status)),
        }
    } else {
        ExitInfo {
            code: Some(libc::WEXITSTATUS(status)),
            signal: None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_looked_for_in_the_jobs_path_only_in_its_order() {
        let env = vec![(
            "PATH".to_string(),
            "/nonexistent:/bin/:relative:/usr/bin".to_string(),
        )];
        assert_eq!(
            candidates("sh", &env),
            [
                c"/nonexistent/sh",
                c"/bin/sh",
                c"relative/sh",
                c"/usr/bin/sh"
            ]
        );
        assert_eq!(candidates("./x", &env), [c"./x"]);
        let empty = vec![("PATH".to_string(), String::new())];
        assert!(candidates("sh", &empty).is_empty());
        assert_eq!(candidates("sh", &[]).len(), 3, "the default PATH");
    }
}
