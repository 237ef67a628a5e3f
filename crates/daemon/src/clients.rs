//! The controller's clients on the daemon's socket: each request's stream is held under an id
//! while the controller handles it (and after, for a join the agent answers later); parked
//! ones go to the waiters' thread.

use crate::waiters::Waiters;
use cosched_controller::clients::{ClientId, Clients, Until};
use cosched_controller::ApiError;
use cosched_core::JobId;
use cosched_proto::api::Reply;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A client must send its whole request within this time (one deadline, not one per read),
/// and take its reply whole within it too.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// The streams behind the controller's client ids, and the waiters' thread.
#[derive(Clone)]
pub struct SocketClients {
    held: Arc<Mutex<Held>>,
    waiters: Waiters,
}

#[derive(Default)]
struct Held {
    streams: BTreeMap<ClientId, UnixStream>,
    next: ClientId,
}

impl SocketClients {
    pub fn new(waiters: Waiters) -> SocketClients {
        SocketClients {
            held: Default::default(),
            waiters,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `stream` for the controller, under a new id.
    pub fn hold(&self, stream: UnixStream) -> ClientId {
        let mut held = self.held();
        held.next += 1;
        let client = held.next;
        held.streams.insert(client, stream);
        client
    }

    /// The stream behind `client`, if the controller neither answered nor parked it.
    pub fn take(&self, client: ClientId) -> Option<UnixStream> {
        self.held().streams.remove(&client)
    }

    /// Returns once every answer to a parked client has been written.
    pub fn flush(&self) {
        self.waiters.flush();
    }
}

impl Clients for SocketClients {
    fn reply(&mut self, client: ClientId, reply: &Reply) {
        if let Some(stream) = self.take(client) {
            // A short line into an empty socket buffer: never blocks for long.
            let _ = send(&stream, reply);
        }
    }

    fn park(
        &mut self,
        client: ClientId,
        job: JobId,
        uid: u32,
        until: Until,
    ) -> Result<(), ApiError> {
        // A clone is parked, so that a refusal leaves the stream held for its answer.
        let stream = match self.held().streams.get(&client) {
            Some(stream) => stream.try_clone(),
            None => return Ok(()),
        };
        let stream = stream.map_err(|e| ApiError::Internal(e.to_string()))?;
        self.waiters.park(job, stream, uid, until)?;
        self.take(client);
        Ok(())
    }

    fn ended(&mut self, job: JobId, reply: &Reply) {
        self.waiters.ended(job, reply);
    }

    fn started(&mut self, job: JobId, reply: &Reply) {
        self.waiters.started(job, reply);
    }

    fn waiting(&self) -> usize {
        self.waiters.count()
    }
}

/// Writes a reply whole within REQUEST_DEADLINE: a client that reads a large reply a
/// trickle at a time would otherwise keep its thread and the reply's memory for as long as it
/// liked (a per-write timeout restarts at every write).
pub fn send(stream: &UnixStream, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).expect("replies serialize");
    line.push(b'\n');
    let until = std::time::Instant::now() + REQUEST_DEADLINE;
    let mut rest = &line[..];
    while !rest.is_empty() {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match (&*stream).write(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_written_whole_within_the_deadline_or_given_up() {
        // A client that never reads a reply larger than the socket's buffer: given up after
        // the deadline (it once kept its thread and the reply for as long as it liked).
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let big = Reply::done("x".repeat(8 << 20));
        let start = std::time::Instant::now();
        let sent = send(&ours, &big);
        assert_eq!(
            sent.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::TimedOut)
        );
        assert!(start.elapsed() < REQUEST_DEADLINE + Duration::from_secs(2));
    }
}
