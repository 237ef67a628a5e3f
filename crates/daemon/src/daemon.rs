//! The daemon's shared state: the controller behind one lock, the clients it answers, the
//! boundary log's one reader and the console's tokens.

use crate::clients::SocketClients;
use cosched_cluster::{PushStats, Pusher};
use cosched_controller::{ApiError, Controller, LOG};
use cosched_core::Micros;
use cosched_os::now_micros;
use cosched_os::unix::Credentials;
use cosched_proto::api::{Reply, Request};
use cosched_proto::{BoundaryRecord, Command, Event};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnStop {
    /// Jobs keep running, unscheduled; a restarted daemon adopts them again.
    Leave,
    Cancel,
}

/// The daemon's shared state.
pub struct Shared {
    inner: Mutex<Controller>,
    /// The streams behind the controller's client ids (the controller holds a clone).
    clients: SocketClients,
    /// The state directory where this machine's agent logs its boundaries (one machine; a
    /// cluster's agents keep theirs on their nodes).
    boundary_log: Option<PathBuf>,
    /// One reading of the boundary log at a time: each costs some 8 MiB of parsing, and
    /// anyone may ask, so many at once would take every CPU from the other requests.
    boundary_reads: Mutex<()>,
    /// Who the web console's tokens speak for.
    tokens: crate::console::Tokens,
    /// The leader's push to its agents (`--push-listen`), for the metrics.
    pusher: Option<Arc<Pusher>>,
}

/// Most boundary records one answer carries (some 16 MB of JSON): the latest are kept.
const MOST_BOUNDARIES: usize = 100_000;

impl Shared {
    pub fn new(
        inner: Controller,
        clients: SocketClients,
        boundary_log: Option<PathBuf>,
        pusher: Option<Arc<Pusher>>,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            inner: Mutex::new(inner),
            clients,
            boundary_log,
            boundary_reads: Mutex::new(()),
            tokens: Default::default(),
            pusher,
        })
    }

    /// What the leader's push has done, if it pushes.
    pub fn push_stats(&self) -> Option<PushStats> {
        self.pusher.as_ref().map(|pusher| pusher.stats())
    }

    pub fn tokens(&self) -> &crate::console::Tokens {
        &self.tokens
    }

    pub fn clients(&self) -> &SocketClients {
        &self.clients
    }

    /// Hands `answer` the boundaries logged from `since_us` on, read outside the state's lock
    /// (the log is up to 8 MiB) and one reader at a time, `answer` included: anyone may look,
    /// as at `ps`, but not take every CPU or hold a reply each.
    pub fn boundaries(
        &self,
        since_us: i64,
        answer: impl FnOnce(Vec<BoundaryRecord>),
    ) -> Result<(), ApiError> {
        let dir = self.boundary_log.as_ref().ok_or_else(|| {
            ApiError::Invalid(
                "a cluster's agents keep their boundary logs on their nodes: run `cosched gantt \
                 --state-dir DIR` there (as root)"
                    .into(),
            )
        })?;
        let _one_at_a_time = self
            .boundary_reads
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut records: Vec<BoundaryRecord> = cosched_agent::boundaries::read_log(dir)
            .into_iter()
            .filter(|r| r.woke_us >= since_us)
            .collect();
        let surplus = records.len().saturating_sub(MOST_BOUNDARIES);
        records.drain(..surplus);
        answer(records);
        Ok(())
    }

    /// Runs `f` on the state.
    pub fn with<T>(&self, f: impl FnOnce(&mut Controller, Micros) -> T) -> T {
        let mut inner = self.lock();
        if inner.has_unsaved() {
            inner.retry_unsaved();
        }
        f(&mut inner, now_micros())
    }

    fn lock(&self) -> MutexGuard<'_, Controller> {
        // A panic while holding the lock is a bug; the state is still the best we have.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends interactive jobs' preempting stretches as they run out (checked a few times a
    /// stretch, at most every 100 ms: a stretch is seconds, a late check costs batch little).
    pub fn settle_interactive(self: Arc<Self>, stretch: Micros) {
        let period = std::time::Duration::from_micros((stretch / 4).clamp(1_000, 100_000) as u64);
        loop {
            std::thread::sleep(period);
            self.with(|inner, now| inner.settle_overdue(now - stretch, now));
        }
    }

    /// Stops jobs at their time limits (a job overruns by at most this period) and saves run
    /// times now and then.
    pub fn enforce_time_limits(self: Arc<Self>) {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
            self.with(|inner, now| inner.enforce_time_limits(now));
        }
    }

    /// Answers a request that one reply answers, from the socket or the web console alike;
    /// the others (`run`, `wait`, `boundaries`, `register`, `proc_add`) need the client's
    /// stream and are the socket's.
    pub fn act(&self, who: &Credentials, request: Request) -> Result<Reply, ApiError> {
        match request {
            Request::Ps { all, job } => Ok(Reply::Jobs {
                ok: true,
                jobs: self.with(|inner, now| inner.jobs(all, job, now)),
            }),
            Request::Matrix => Ok(Reply::Matrix {
                ok: true,
                matrix: self.with(|inner, now| inner.matrix(now)),
            }),
            Request::Stats => Ok(Reply::Stats {
                ok: true,
                stats: self.with(|inner, _| inner.stats()),
            }),
            Request::Nodes => Ok(Reply::Nodes {
                ok: true,
                nodes: self.with(|inner, now| inner.nodes(now)),
            }),
            Request::ConsoleToken => self
                .tokens()
                .issue(who)
                .map(|token| Reply::Token { ok: true, token })
                .map_err(|e| ApiError::Internal(format!("no randomness for a token: {e}"))),
            Request::History(query) => {
                self.with(|inner, _| inner.history(&query))
                    .map(|(history, truncated)| Reply::History {
                        ok: true,
                        history,
                        truncated,
                    })
            }
            Request::JobEnd { job } => self
                .with(|inner, now| inner.job_end(who, job, now))
                .map(Reply::done),
            Request::Cancel { job } => self
                .with(|inner, now| inner.cancel(who, job, now))
                .map(Reply::done),
            Request::Suspend { job } => self
                .with(|inner, now| inner.suspend(who, job, now))
                .map(Reply::done),
            Request::Resume { job } => self
                .with(|inner, now| inner.resume(who, job, now))
                .map(Reply::done),
            Request::Class { job, class } => self
                .with(|inner, now| inner.set_class(who, job, &class, now))
                .map(Reply::done),
            Request::Run(_)
            | Request::Wait { .. }
            | Request::Boundaries { .. }
            | Request::Register(_)
            | Request::ProcAdd { .. } => Err(ApiError::Invalid(format!(
                "{} is answered on the socket only",
                request.op()
            ))),
        }
    }

    /// Handles an agent's report.
    pub fn handle_event(&self, event: Event) {
        self.with(|inner, now| inner.handle_event(event, now));
    }

    /// Clean stop: an agent in this process lets every job loose (or kills them) and stops
    /// switching; then the controller lets go of it and it ends. Agents on their own nodes
    /// (`agents_stay`) are only told to cancel, with `cancel`: left without a controller they
    /// let their jobs loose by their deadline, and follow the next controller. Cancelled
    /// jobs' ends are recorded (and their waiting clients told) before this returns.
    pub fn stop(&self, on_stop: OnStop, agents_stay: bool) {
        let cancel = on_stop == OnStop::Cancel;
        if cancel {
            let running = self.with(|inner, now| inner.cancel_all(now));
            LOG.info(format_args!("cancelling {running} running job(s)"));
        }
        if !agents_stay {
            self.lock().tell(Command::Stop { cancel });
        } else if cancel {
            self.lock().cancel_launched();
        }
        if cancel {
            // Killed jobs' supervisors report within moments; a bound keeps a stuck one from
            // holding the stop (its exit file tells the next daemon).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while self.lock().launched_unfinished() > 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        self.lock().let_go_of_agents();
        self.clients.flush();
    }
}
