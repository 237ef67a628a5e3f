//! The agent's door: a socket any local user may connect to, through which a process inside
//! one of the node's jobs asks for a process of the same job on another node (`cosched
//! launch-remote`, run by Open MPI's `plm_rsh_agent` or MPICH Hydra's launcher in place of
//! ssh). The caller must be a process of the job it names, on this node (its pid is listed in
//! the job's cgroup); its uid goes to the controller, which checks it against the job's owner
//! and which node the job holds. The connection is held until that process ends, and then
//! gets its [`Ending`] as one JSON line.
//!
//! Like the daemon's socket, it is a shared resource a user could try to exhaust: a request
//! has a whole-request deadline, each uid may have a few requests being read and a bounded
//! number of processes waited for, and the accepting thread never waits on a caller.

use cosched_core::JobId;
use cosched_os::unix::peer_credentials;
use cosched_proto::EventSink;
use cosched_proto::{Ending, Event, ProcessRef, ProcessRequest};
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A whole request must arrive within this.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// The longest request (a remote daemon's command line is a few hundred bytes).
const REQUEST_LIMIT: usize = 64 << 10;
/// Requests one uid may have being read at once. Open MPI starts up to 128 remote daemons at
/// once (`plm_rsh_num_concurrent`): their requests arrive together, each holding a place (and
/// a thread) only until its line is in, at most REQUEST_DEADLINE. At 8, 25 of 50 parallel
/// launches were refused.
const READING_PER_UID: usize = 64;
/// Processes one uid may be waiting for at once (an MPI launcher asks once per remote node).
pub const WAITING_PER_UID: usize = 1024;

/// The environment variable that tells a job's processes where their node's door is.
pub const DOOR_ENV: &str = "COSCHED_AGENT";

/// The name under which the cosched binary acts as `cosched launch-remote`: MPICH's Hydra
/// takes one executable as its launcher, with no arguments of its own.
pub const LAUNCH_REMOTE_NAME: &str = "cosched-launch-remote";

/// Where the launcher link to the cosched binary `exe` is: beside it.
pub fn launch_remote_link(exe: &Path) -> PathBuf {
    exe.with_file_name(LAUNCH_REMOTE_NAME)
}

/// Makes (or mends) the launcher link beside `exe`, pointing to it by name. Agents sharing a
/// machine may race here: a link that another made right is as good.
pub fn ensure_launch_remote_link(exe: &Path) -> io::Result<PathBuf> {
    let link = launch_remote_link(exe);
    let target = exe
        .file_name()
        .map(PathBuf::from)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let points_right = || std::fs::read_link(&link).is_ok_and(|t| t == target);
    if points_right() {
        return Ok(link);
    }
    match std::fs::remove_file(&link) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    match std::os::unix::fs::symlink(&target, &link) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && points_right() => Ok(link),
        made => made.map(|()| link),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} exists and is not a socket: refusing to replace it")]
    NotASocket { path: PathBuf },
}

pub struct Door {
    node: String,
    path: PathBuf,
    events: Arc<dyn EventSink>,
    state: Mutex<DoorState>,
}

#[derive(Default)]
struct DoorState {
    /// The jobs placed on this node, with a file listing their processes (`cgroup.procs`).
    jobs: BTreeMap<JobId, PathBuf>,
    /// Callers waiting for their process, by request number.
    waiting: BTreeMap<u64, Waiting>,
    /// Requests being read, per uid.
    reading: BTreeMap<u32, usize>,
    last_request: u64,
}

struct Waiting {
    job: JobId,
    uid: u32,
    stream: UnixStream,
}

impl Door {
    /// Opens the door at `path` (a stale socket there is replaced, anything else refused)
    /// and serves it on a thread of its own.
    pub fn open(
        path: &Path,
        node: &str,
        events: Arc<dyn EventSink>,
    ) -> Result<Arc<Door>, DoorError> {
        let fail = |source| DoorError::Io {
            path: path.to_path_buf(),
            source,
        };
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path).map_err(fail)?,
            Ok(_) => {
                return Err(DoorError::NotASocket {
                    path: path.to_path_buf(),
                })
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(fail(error)),
        }
        let listener = UnixListener::bind(path).map_err(fail)?;
        // Every local user's job may knock; who may do what is checked per request.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(fail)?;
        let door = Arc::new(Door {
            node: node.to_string(),
            path: path.to_path_buf(),
            events,
            state: Mutex::new(DoorState {
                // Request numbers name processes' files: they must not repeat after a restart.
                last_request: cosched_os::now_micros().max(0) as u64,
                ..DoorState::default()
            }),
        });
        let serving = Arc::clone(&door);
        std::thread::Builder::new()
            .name("cosched-door".into())
            .spawn(move || serving.accept_loop(listener))
            .map_err(fail)?;
        Ok(door)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, DoorState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The job is placed here: its processes may ask.
    pub fn admit(&self, job: JobId, procs: PathBuf) {
        self.lock().jobs.insert(job, procs);
    }

    /// The job ended here: its callers still waiting are told so.
    pub fn forget(&self, job: JobId) {
        let orphans: Vec<Waiting> = {
            let mut state = self.lock();
            state.jobs.remove(&job);
            let requests: Vec<u64> = state
                .waiting
                .iter()
                .filter(|(_, w)| w.job == job)
                .map(|(r, _)| *r)
                .collect();
            requests
                .into_iter()
                .filter_map(|r| state.waiting.remove(&r))
                .collect()
        };
        for waiting in orphans {
            answer(
                &waiting.stream,
                &Ending::refused(format!("job {job} ended before the process did")),
            );
        }
    }

    /// The process asked for by `request` ended (or was refused).
    pub fn answer(&self, request: u64, ending: &Ending) {
        let waiting = self.lock().waiting.remove(&request);
        if let Some(waiting) = waiting {
            answer(&waiting.stream, ending);
        }
    }

    fn accept_loop(self: Arc<Self>, listener: UnixListener) {
        loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors: wait for some to be released rather than spin.
                    cosched_os::Log::new("agent")
                        .warn(format_args!("door {}: {error}", self.path.display()));
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let door = Arc::clone(&self);
            let spawned = std::thread::Builder::new()
                .name("cosched-door-caller".into())
                .spawn(move || door.serve(stream));
            if let Err(error) = spawned {
                cosched_os::Log::new("agent")
                    .error(format_args!("door: no thread for a caller: {error}"));
            }
        }
    }

    fn serve(&self, stream: UnixStream) {
        let Ok(who) = peer_credentials(&stream) else {
            return;
        };
        // Taken now: by the time the request is read, the caller may have exited and its pid
        // be another process's, one of someone else's job (kernels before 6.5 have none).
        let peer = cosched_os::unix::peer_pidfd(&stream).ok();
        {
            let mut state = self.lock();
            let reading = state.reading.entry(who.uid).or_default();
            if *reading >= READING_PER_UID {
                drop(state);
                answer(
                    &stream,
                    &Ending::refused(format!(
                        "uid {} has {READING_PER_UID} requests being read already",
                        who.uid
                    )),
                );
                return;
            }
            *reading += 1;
        }
        let request = read_request(&stream);
        {
            let mut state = self.lock();
            if let Some(reading) = state.reading.get_mut(&who.uid) {
                *reading -= 1;
                if *reading == 0 {
                    state.reading.remove(&who.uid);
                }
            }
        }
        let outcome = request.and_then(|request| self.register(&stream, who, request, &peer));
        if let Err(why) = outcome {
            answer(&stream, &Ending::refused(why));
        }
    }

    /// Checks a request and passes it to the controller; the connection waits for the answer.
    fn register(
        &self,
        stream: &UnixStream,
        who: cosched_os::unix::Credentials,
        request: ProcessRequest,
        peer: &Option<std::os::fd::OwnedFd>,
    ) -> Result<(), String> {
        let ProcessRequest { job, host, command } = request;
        if host.is_empty() || command.trim().is_empty() {
            return Err("the request names no host or no command".into());
        }
        let mut state = self.lock();
        let procs = state
            .jobs
            .get(&job)
            .ok_or_else(|| format!("job {job} has no processes on node {}", self.node))?;
        if !listed(procs, who.pid) {
            return Err(format!(
                "process {} is not part of job {job} on node {}: only the job's own processes \
                 may add processes to it",
                who.pid, self.node
            ));
        }
        // Still alive after the check: its pid named it, not a successor, during the check.
        if peer.as_ref().is_some_and(cosched_os::unix::has_exited) {
            return Err(format!(
                "process {} exited before its request was read: only a live process of job \
                 {job} may add processes to it",
                who.pid
            ));
        }
        let waiting = state.waiting.values().filter(|w| w.uid == who.uid).count();
        if waiting >= WAITING_PER_UID {
            return Err(format!(
                "uid {} already waits for {WAITING_PER_UID} remote processes on node {}",
                who.uid, self.node
            ));
        }
        let stream = stream.try_clone().map_err(|e| e.to_string())?;
        state.last_request = state
            .last_request
            .saturating_add(1)
            .max(cosched_os::now_micros().max(0) as u64);
        let number = state.last_request;
        state.waiting.insert(
            number,
            Waiting {
                job,
                uid: who.uid,
                stream,
            },
        );
        drop(state);
        self.events.report(Event::ProcessWanted {
            job,
            process: ProcessRef {
                node: self.node.clone(),
                request: number,
            },
            host,
            command,
            uid: who.uid,
        });
        Ok(())
    }
}

/// Whether `pid` is listed in a `cgroup.procs` file.
fn listed(procs: &Path, pid: i32) -> bool {
    std::fs::read_to_string(procs)
        .map(|text| text.lines().any(|line| line.trim().parse() == Ok(pid)))
        .unwrap_or(false)
}

/// One JSON line, whole within the deadline.
fn read_request(stream: &UnixStream) -> Result<ProcessRequest, String> {
    // Descriptors a caller sends along are not wanted: dropping them closes them.
    let line = cosched_os::unix::read_line_with_fds(stream, REQUEST_LIMIT, Some(REQUEST_DEADLINE))
        .map_err(|e| e.to_string())?
        .ok_or("the connection closed before a request arrived")?
        .0;
    serde_json::from_slice(&line)
        .map_err(|e| cosched_os::one_line(&format!("a malformed request: {e}")))
}

/// Tells a caller how its process ended; a caller that left is not waited for.
fn answer(stream: &UnixStream, ending: &Ending) {
    let line = serde_json::to_string(ending).expect("endings serialize") + "\n";
    let _ = stream.set_write_timeout(Some(REQUEST_DEADLINE));
    let _ = (&*stream).write_all(line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc::{channel, Receiver};

    /// A door in a directory of its own, with job 7 whose process list names this test.
    struct Fixture {
        dir: PathBuf,
        door: Arc<Door>,
        events: Receiver<Event>,
    }

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            let dir =
                std::env::temp_dir().join(format!("cosched-door-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let procs = dir.join("procs");
            std::fs::write(&procs, format!("1\n{}\n", std::process::id())).unwrap();
            let (sender, events) = channel();
            let door = Door::open(&dir.join("door.sock"), "n1", Arc::new(sender)).unwrap();
            door.admit(7, procs);
            Fixture { dir, door, events }
        }

        fn connect(&self) -> UnixStream {
            UnixStream::connect(self.door.path()).unwrap()
        }

        fn ask(&self, line: &str) -> UnixStream {
            let stream = self.connect();
            // A door that refuses at once (its places taken) may have answered and closed
            // before this is written (EPIPE, seen under load): its answer is still there to
            // read, as `launch-remote` reads it.
            let _ = (&stream).write_all(line.as_bytes());
            stream
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn ending(stream: &UnixStream) -> Ending {
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }

    fn refusal(stream: &UnixStream) -> String {
        let ending = ending(stream);
        assert_eq!(ending.exit.code, Some(255), "{ending:?}");
        ending.note.unwrap_or_default()
    }

    const REQUEST: &str = "{\"job\":7,\"host\":\"n2\",\"command\":\"orted -x\"}\n";

    #[test]
    fn a_jobs_process_is_passed_on_and_hears_how_its_remote_process_ended() {
        let fixture = Fixture::new("pass");
        let caller = fixture.ask(REQUEST);
        let wanted = fixture
            .events
            .recv_timeout(Duration::from_secs(10))
            .unwrap();
        let Event::ProcessWanted {
            job,
            process,
            host,
            command,
            uid,
        } = wanted
        else {
            panic!("{wanted:?}");
        };
        assert_eq!(
            (job, host.as_str(), command.as_str()),
            (7, "n2", "orted -x")
        );
        assert_eq!(
            (process.node.as_str(), uid),
            ("n1", unsafe { libc::geteuid() })
        );
        let ended = Ending {
            exit: cosched_proto::ExitInfo {
                code: Some(3),
                signal: None,
            },
            ..Ending::default()
        };
        fixture.door.answer(process.request, &ended);
        assert_eq!(ending(&caller), ended);
    }

    #[test]
    fn strangers_unknown_jobs_and_malformed_requests_are_refused_with_a_reason() {
        let fixture = Fixture::new("refuse");
        std::fs::write(fixture.dir.join("procs"), "1\n").unwrap();
        let note = refusal(&fixture.ask(REQUEST));
        assert!(note.contains("is not part of job 7 on node n1"), "{note}");
        let note = refusal(&fixture.ask("{\"job\":8,\"host\":\"n2\",\"command\":\"x\"}\n"));
        assert!(note.contains("job 8 has no processes on node n1"), "{note}");
        let note = refusal(&fixture.ask("{\"job\":7}\n"));
        assert!(note.contains("a malformed request"), "{note}");
        let note = refusal(&fixture.ask("{\"job\":7,\"host\":\"\",\"command\":\"x\"}\n"));
        assert!(note.contains("names no host"), "{note}");
        let note = refusal(&fixture.ask(&format!("{}\n", "x".repeat(REQUEST_LIMIT + 10))));
        assert!(note.contains("longer than"), "{note}");
        assert!(
            fixture.events.try_recv().is_err(),
            "nothing reached the controller"
        );
    }

    #[test]
    fn a_caller_that_exited_cannot_be_stood_in_for() {
        use std::os::fd::{AsRawFd, IntoRawFd};
        use std::os::unix::process::CommandExt;
        // The attack: a process of the job connects, hands the connection over and exits;
        // once its pid names a process of another job, the holder asks in that job's name.
        // Here the pid is listed (as a reused pid would be) but the process is gone.
        let fixture = Fixture::new("gone");
        let (ours, theirs) = UnixStream::pair().unwrap();
        let theirs = theirs.into_raw_fd();
        let mut command = std::process::Command::new("python3");
        command
            .args([
                "-c",
                "import socket, sys\n\
                 door = socket.socket(socket.AF_UNIX); door.connect(sys.argv[1])\n\
                 socket.send_fds(socket.socket(fileno=3), [b'x\\n'], [door.fileno()])",
            ])
            .arg(fixture.door.path());
        // SAFETY: dup2 is async-signal-safe; `theirs` stays open until after the spawn.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(theirs, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().unwrap();
        // SAFETY: ours to close, the child has its copy.
        unsafe { libc::close(theirs) };
        let pid = child.id();
        let (_, mut fds) = cosched_os::unix::read_line_with_fds(&ours, 10, None)
            .unwrap()
            .expect("the handed connection");
        assert!(child.wait().unwrap().success());
        std::fs::write(fixture.dir.join("procs"), format!("{pid}\n")).unwrap();
        let handed = UnixStream::from(fds.pop().expect("the door's connection"));
        assert!(handed.as_raw_fd() > 2);
        (&handed).write_all(REQUEST.as_bytes()).unwrap();
        // Passed on, it would wait for the controller: a time-out fails the test instead.
        handed
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let note = refusal(&handed);
        assert!(
            note.contains("exited before its request was read"),
            "{note}"
        );
        assert!(
            fixture.events.try_recv().is_err(),
            "nothing reached the controller"
        );
    }

    #[test]
    fn slow_callers_are_cut_off_and_cannot_hold_the_door() {
        let fixture = Fixture::new("slow");
        // Each sends half a request and waits: they take every reading place of the uid.
        let slow: Vec<UnixStream> = (0..READING_PER_UID)
            .map(|_| fixture.ask("{\"job\":7,"))
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let note = refusal(&fixture.ask(REQUEST));
        assert!(note.contains("requests being read already"), "{note}");
        for stream in &slow {
            let note = refusal(stream);
            assert!(note.contains("no complete request within"), "{note}");
        }
        // Their places are free again.
        let _caller = fixture.ask(REQUEST);
        let wanted = fixture
            .events
            .recv_timeout(Duration::from_secs(10))
            .unwrap();
        assert!(
            matches!(wanted, Event::ProcessWanted { job: 7, .. }),
            "{wanted:?}"
        );
    }

    #[test]
    fn a_caller_whose_job_ends_is_told_so() {
        let fixture = Fixture::new("ends");
        let caller = fixture.ask(REQUEST);
        fixture
            .events
            .recv_timeout(Duration::from_secs(10))
            .unwrap();
        fixture.door.forget(7);
        let note = refusal(&caller);
        assert!(
            note.contains("job 7 ended before the process did"),
            "{note}"
        );
        let note = refusal(&fixture.ask(REQUEST));
        assert!(note.contains("job 7 has no processes"), "{note}");
    }
}
