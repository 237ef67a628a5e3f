//! Clients waiting for jobs to end (`run` without `--detach`, `wait`) or to start (`register`),
//! parked on one thread
//! instead of holding a thread each. A waiter whose client hangs up is dropped at once, and one
//! user may park only so many: nobody can fill the daemon with waiters that never go away.

use cosched_controller::clients::Until;
use cosched_controller::ApiError;
use cosched_core::JobId;
use cosched_proto::api::Reply;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Most clients one user (root aside) may have waiting at once.
pub const MAX_WAITING_PER_UID: usize = 1024;

enum Message {
    Park {
        job: JobId,
        stream: UnixStream,
        uid: u32,
        until: Until,
    },
    Answer {
        job: JobId,
        line: Vec<u8>,
        ended: bool,
    },
    Flush(Sender<()>),
}

/// The handle the daemon's state holds; messages are handled in the order they were sent, so a
/// waiter parked before its job's end (both under the state's lock) always hears of it.
#[derive(Clone)]
pub struct Waiters {
    messages: Sender<Message>,
    wake: Arc<OwnedFd>,
    per_uid: Arc<Mutex<BTreeMap<u32, usize>>>,
}

impl Waiters {
    /// Starts the thread that holds the parked clients.
    pub fn start() -> io::Result<Waiters> {
        let (read, write) = cosched_os::unix::pipe(libc::O_NONBLOCK)?;
        let (messages, inbox) = channel();
        let per_uid = Arc::new(Mutex::new(BTreeMap::new()));
        let counts = Arc::clone(&per_uid);
        std::thread::Builder::new()
            .name("cosched-waiters".into())
            .spawn(move || hold(read, inbox, counts))?;
        Ok(Waiters {
            messages,
            wake: Arc::new(write),
            per_uid,
        })
    }

    fn send(&self, message: Message) {
        if self.messages.send(message).is_ok() {
            // A full pipe already holds a wake-up.
            // SAFETY: writing one byte from a valid buffer.
            unsafe { libc::write(self.wake.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        }
    }

    /// Parks `stream` until `job` ends, or starts (`until`), or its client hangs up.
    pub fn park(
        &self,
        job: JobId,
        stream: UnixStream,
        uid: u32,
        until: Until,
    ) -> Result<(), ApiError> {
        {
            let mut counts = self.per_uid.lock().unwrap_or_else(|p| p.into_inner());
            let count = counts.entry(uid).or_default();
            if uid != 0 && *count >= MAX_WAITING_PER_UID {
                return Err(ApiError::Forbidden(format!(
                    "uid {uid} has {MAX_WAITING_PER_UID} clients waiting for jobs already; \
                     wait for several jobs with one `cosched wait`"
                )));
            }
            *count += 1;
        }
        self.send(Message::Park {
            job,
            stream,
            uid,
            until,
        });
        Ok(())
    }

    /// Answers every client waiting for `job`.
    pub fn ended(&self, job: JobId, reply: &Reply) {
        self.answer(job, reply, true);
    }

    /// Answers the clients waiting for `job` to start.
    pub fn started(&self, job: JobId, reply: &Reply) {
        self.answer(job, reply, false);
    }

    fn answer(&self, job: JobId, reply: &Reply, ended: bool) {
        let mut line = serde_json::to_vec(reply).expect("replies serialize");
        line.push(b'\n');
        self.send(Message::Answer { job, line, ended });
    }

    /// Returns once every message sent before it has been handled (every answer written).
    pub fn flush(&self) {
        let (done, wait) = channel();
        self.send(Message::Flush(done));
        let _ = wait.recv();
    }

    /// Clients waiting now.
    pub fn count(&self) -> usize {
        self.per_uid
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .sum()
    }
}

struct Parked {
    job: JobId,
    stream: UnixStream,
    uid: u32,
    until: Until,
}

fn hold(wake: OwnedFd, inbox: Receiver<Message>, per_uid: Arc<Mutex<BTreeMap<u32, usize>>>) {
    let mut parked: Vec<Parked> = Vec::new();
    let release = |uid: u32| {
        let mut counts = per_uid.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&uid) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&uid);
            }
        }
    };
    loop {
        let mut fds: Vec<libc::pollfd> = std::iter::once(wake.as_raw_fd())
            .chain(parked.iter().map(|p| p.stream.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a valid array of pollfd.
        if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) } < 0 {
            continue;
        }
        // A client never speaks after its request: anything but silence means it left.
        for index in (0..parked.len()).rev() {
            if fds[index + 1].revents != 0 {
                release(parked.swap_remove(index).uid);
            }
        }
        if fds[0].revents == 0 {
            continue;
        }
        let mut sink = [0u8; 256];
        // SAFETY: reading into a valid buffer; the pipe is non-blocking.
        while unsafe { libc::read(wake.as_raw_fd(), sink.as_mut_ptr().cast(), sink.len()) } > 0 {}
        loop {
            match inbox.try_recv() {
                Ok(Message::Park {
                    job,
                    stream,
                    uid,
                    until,
                }) => parked.push(Parked {
                    job,
                    stream,
                    uid,
                    until,
                }),
                Ok(Message::Answer { job, line, ended }) => {
                    for index in (0..parked.len()).rev() {
                        let waiter = &parked[index];
                        if waiter.job == job && (ended || waiter.until == Until::Start) {
                            let waiter = parked.swap_remove(index);
                            // One short line into an empty buffer: never blocks for long.
                            let _ = waiter
                                .stream
                                .set_write_timeout(Some(std::time::Duration::from_millis(100)));
                            let _ = (&waiter.stream).write_all(&line);
                            release(waiter.uid);
                        }
                    }
                }
                Ok(Message::Flush(done)) => {
                    let _ = done.send(());
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
            }
        }
    }
}
