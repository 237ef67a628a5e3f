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

use crate::node::EventSink;
use crate::unix::peer_credentials;
use cosched_core::JobId;
use cosched_proto::{Ending, Event, ProcessRef, ProcessRequest};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A whole request must arrive within this.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// The longest request (a remote daemon's command line is a few hundred bytes).
const REQUEST_LIMIT: usize = 64 << 10;
/// Requests one uid may have being read at once.
const READING_PER_UID: usize = 8;
/// Processes one uid may be waiting for at once (an MPI launcher asks once per remote node).
pub const WAITING_PER_UID: usize = 1024;

/// The environment variable that tells a job's processes where their node's door is.
pub const DOOR_ENV: &str = "COSCHED_AGENT";

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
                last_request: crate::clock::now_micros().max(0) as u64,
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
                    eprintln!("cosched agent: door {}: {error}", self.path.display());
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let door = Arc::clone(&self);
            let spawned = std::thread::Builder::new()
                .name("cosched-door-caller".into())
                .spawn(move || door.serve(stream));
            if let Err(error) = spawned {
                eprintln!("cosched agent: door: no thread for a caller: {error}");
            }
        }
    }

    fn serve(&self, stream: UnixStream) {
        let Ok(who) = peer_credentials(&stream) else {
            return;
        };
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
        let outcome = request.and_then(|request| self.register(&stream, who, request));
        if let Err(why) = outcome {
            answer(&stream, &Ending::refused(why));
        }
    }

    /// Checks a request and passes it to the controller; the connection waits for the answer.
    fn register(
        &self,
        stream: &UnixStream,
        who: crate::unix::Credentials,
        request: ProcessRequest,
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
            .max(crate::clock::now_micros().max(0) as u64);
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
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    while !bytes.contains(&b'\n') {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "the request did not arrive within {} s",
                REQUEST_DEADLINE.as_secs()
            ));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match (&*stream).read(&mut chunk) {
            Ok(0) => return Err("the request ended before its newline".into()),
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(format!("reading the request: {error}")),
        }
        if bytes.len() > REQUEST_LIMIT {
            return Err(format!("the request is longer than {REQUEST_LIMIT} bytes"));
        }
    }
    let line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    serde_json::from_slice(line).map_err(|e| format!("a malformed request: {e}"))
}

/// Tells a caller how its process ended; a caller that left is not waited for.
fn answer(stream: &UnixStream, ending: &Ending) {
    let line = serde_json::to_string(ending).expect("endings serialize") + "\n";
    let _ = stream.set_write_timeout(Some(REQUEST_DEADLINE));
    let _ = (&*stream).write_all(line.as_bytes());
}
