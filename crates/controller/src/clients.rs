//! The controller's clients, known to it only by an id: the transport (the daemon's socket,
//! the harness's recorder) holds what an id stands for and writes what the controller says.

use crate::ApiError;
use cosched_core::JobId;
use cosched_proto::api::Reply;

/// A client whose request the controller is handling, or holds to answer later; the
/// transport gives each one its own.
pub type ClientId = u64;

/// What a parked client waits for: a job's end answers both kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    Start,
    End,
}

/// Where the controller's answers to clients go, in the order it gives them: a client parked
/// before its job's end always hears of it.
pub trait Clients: Send {
    /// Answers `client` now: its last word from the controller.
    fn reply(&mut self, client: ClientId, reply: &Reply);
    /// Keeps `client` (of user `uid`) until `job` ends or, with `Until::Start`, starts. A
    /// refusal (one user parking too many) leaves the client with the caller to answer.
    fn park(
        &mut self,
        client: ClientId,
        job: JobId,
        uid: u32,
        until: Until,
    ) -> Result<(), ApiError>;
    /// Answers every client parked on `job`.
    fn ended(&mut self, job: JobId, reply: &Reply);
    /// Answers the clients parked on `job` until it starts.
    fn started(&mut self, job: JobId, reply: &Reply);
    /// Clients parked now.
    fn waiting(&self) -> usize;
}
