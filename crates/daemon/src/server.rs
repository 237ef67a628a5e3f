//! The daemon's process: startup (state directory, store, cgroups, recovery), the socket API
//! and the clean stop on SIGTERM or SIGINT.

use crate::agent_loop::{AgentLoop, Stats};
use crate::daemon::{log, ApiError, Inner, OnStop, Settings, Shared};
use crate::protocol::{Reply, Request, MAX_REQUEST_BYTES};
use crate::store::{JobRecord, SqliteStore, Store};
use crate::unix::{self, Credentials};
use cosched_agent::clock::now_micros;
use cosched_agent::{job_name, Applier, Mode};
use cosched_cgroups::{Actuator, Cgroups, Freezer, Layout};
use cosched_core::{Config, Machine, Micros, Rotation, Scheduler};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most clients served at once; more are refused with a message, not queued without end.
const MAX_CLIENTS: usize = 256;
/// A client must send its request within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    pub quantum: Micros,
    pub mode: Mode,
    pub mpl: u32,
    /// Processors to schedule (default: what this process may use).
    pub procs: Option<u32>,
    /// Leave the rotation after this long without CPU use in one's own slots.
    pub idle_after: Option<Micros>,
    /// An interactive job runs in every slot (preempting batch) for this long, then takes a
    /// slice of its own; `None`: interactive jobs take a slice at once.
    pub interactive_preempt: Option<Micros>,
    pub on_stop: OnStop,
    /// The cosched parent cgroup's name (one per daemon on a machine).
    pub cgroup_parent: String,
    pub freezer: Option<Freezer>,
    pub supervisor_exe: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("cgroups: {0}")]
    Cgroups(#[from] cosched_cgroups::CgroupError),
    #[error("{0}")]
    Config(String),
    #[error("another daemon is serving {0} (stop it first)")]
    Running(PathBuf),
}

fn io_error(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StartError + '_ {
    move |source| StartError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What this process may run on: the number of CPUs in its affinity mask.
pub fn usable_cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread and every thread it starts afterwards,
/// so that [`wait_for_stop`] receives them.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: plain signal-set manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_stop(set: &libc::sigset_t) -> i32 {
    let mut signal = 0;
    // SAFETY: `set` is initialised and `signal` writable.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

/// Refuses to start over processes in job groups that the store does not hold as unfinished:
/// a new job would share its group with them (job ids start again at 1 in a new state
/// directory), and they would be frozen with it.
fn refuse_strangers(
    actuator: &Cgroups,
    records: &[JobRecord],
    config: &DaemonConfig,
) -> Result<(), StartError> {
    let unfinished: Vec<String> = records
        .iter()
        .filter(|r| !r.status.ended())
        .map(|r| job_name(r.id))
        .collect();
    let existing = actuator.existing_jobs()?;
    let strangers = existing
        .iter()
        .filter(|(name, procs)| *procs > 0 && !unfinished.contains(name));
    if let Some((name, procs)) = strangers.clone().next() {
        return Err(StartError::Config(format!(
            "cgroup {}/{name} holds {procs} process(es) of a job that {} does not know \
             ({} such group(s)): another daemon's jobs, or jobs left running by a stop; end \
             them or use another --cgroup-parent",
            config.cgroup_parent,
            config.state_dir.display(),
            strangers.count()
        )));
    }
    Ok(())
}

/// Runs the daemon until SIGTERM or SIGINT. `ready` is called once the socket accepts.
pub fn serve(config: DaemonConfig, ready: impl FnOnce(&str)) -> Result<(), StartError> {
    if config.quantum < 1_000 {
        return Err(StartError::Config(
            "the quantum must be at least 1 ms (10 ms or more is sensible)".into(),
        ));
    }
    let signals = block_stop_signals();
    for sub in ["", "jobs", "run", "output"] {
        let dir = config.state_dir.join(sub);
        std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    }
    std::fs::set_permissions(&config.state_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io_error(&config.state_dir))?;
    let listener = bind(&config.socket)?;

    let store_path = config.state_dir.join("jobs.sqlite");
    let store = SqliteStore::open(&store_path)?;
    let records = store.load()?;

    let layout =
        Layout::detect().map_err(io_error(std::path::Path::new("/proc/self/mountinfo")))?;
    let actuator = Cgroups::open(&layout, &config.cgroup_parent, config.freezer)?;
    refuse_strangers(&actuator, &records, &config)?;
    let stats = Arc::new(Mutex::new(Stats::new(actuator.describe())));
    let procs = config.procs.unwrap_or_else(usable_cpus);
    let machine = Machine::line(procs).map_err(|e| StartError::Config(e.to_string()))?;
    // Local mode runs every job at once (plain Linux); implicit shares space only.
    let mpl = match config.mode {
        Mode::Local => 4096,
        Mode::Implicit => 1,
        Mode::Gang | Mode::Moderate => config.mpl,
    };
    let scheduler = Scheduler::new(
        machine,
        Config {
            mpl,
            interactive_preempts: config.interactive_preempt.is_some(),
            ..Config::default()
        },
    )
    .map_err(|e| StartError::Config(e.to_string()))?;
    let now = now_micros();
    let rotation = Rotation::new(now - now.rem_euclid(config.quantum), config.quantum);

    let (agent_tx, agent_rx) = channel();
    let (event_tx, event_rx) = channel();
    let agent = AgentLoop::new(
        Applier::new(actuator, config.mode),
        rotation,
        config.idle_after,
        Arc::clone(&stats),
        event_tx,
    );
    let agent_thread = std::thread::Builder::new()
        .name("cosched-clock".into())
        .spawn(move || agent.run(agent_rx))
        .map_err(io_error(std::path::Path::new("clock thread")))?;

    let settings = Settings {
        state_dir: config.state_dir.clone(),
        mode: config.mode,
        rotation,
        supervisor_exe: config.supervisor_exe.clone(),
    };
    let shared = Shared::new(
        Inner::new(
            settings,
            scheduler,
            Box::new(store) as Box<dyn Store>,
            agent_tx,
        ),
        stats,
    );
    let recovering = records.iter().filter(|r| !r.status.ended()).count();
    shared.with(|inner, now| inner.recover(records, now));
    if recovering > 0 {
        log(format_args!(
            "took back {recovering} unfinished job(s) from {}",
            store_path.display()
        ));
    }
    {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || shared.listen_to_agent(event_rx));
    }
    {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || accept_loop(listener, shared));
    }
    if let Some(stretch) = config.interactive_preempt {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || shared.settle_interactive(stretch));
    }
    ready(&format!(
        "cosched daemon: {} mode, quantum {} ms, {} processors, {}; socket {}",
        config.mode,
        config.quantum as f64 / 1000.0,
        procs,
        shared.stats.lock().expect("stats").actuator,
        config.socket.display()
    ));
    let signal = wait_for_stop(&signals);
    log(format_args!(
        "signal {signal}: stopping; jobs are {}",
        match config.on_stop {
            OnStop::Leave => "thawed and left running unscheduled",
            OnStop::Cancel => "cancelled",
        }
    ));
    let stopped = shared.stop(config.on_stop);
    let _ = std::fs::remove_file(&config.socket);
    if let Ok(actuator) = agent_thread.join() {
        drop(actuator);
    }
    stopped.map_err(|e| StartError::Config(format!("stopping: {e}")))
}

/// Binds the socket, refusing to take it from a live daemon; anyone may connect (looking is
/// open to all; acting is checked per request).
fn bind(path: &std::path::Path) -> Result<UnixListener, StartError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    }
    if UnixStream::connect(path).is_ok() {
        return Err(StartError::Running(path.to_path_buf()));
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(io_error(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(io_error(path))?;
    Ok(listener)
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let clients = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
            clients.fetch_sub(1, Ordering::SeqCst);
            let _ = send(
                &stream,
                &Reply::error("the daemon is serving too many clients; try again"),
            );
            continue;
        }
        let shared = Arc::clone(&shared);
        let clients = Arc::clone(&clients);
        std::thread::spawn(move || {
            serve_client(&stream, &shared);
            clients.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

fn send(stream: &UnixStream, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).expect("replies serialize");
    line.push(b'\n');
    (&*stream).write_all(&line)
}

fn serve_client(stream: &UnixStream, shared: &Arc<Shared>) {
    let Ok(who) = unix::peer_credentials(stream) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let (line, fds) = match unix::read_line_with_fds(stream, MAX_REQUEST_BYTES) {
        Ok(Some(message)) => message,
        Ok(None) => return,
        Err(error) => {
            unix::drain(stream);
            let _ = send(stream, &Reply::error(format!("bad request: {error}")));
            return;
        }
    };
    let request: Request = match serde_json::from_slice(&line) {
        Ok(request) => request,
        Err(error) => {
            let _ = send(stream, &Reply::error(format!("bad request: {error}")));
            return;
        }
    };
    if let Err(error) = handle(stream, shared, &who, request, fds) {
        let _ = send(stream, &Reply::error(error.to_string()));
    }
}

fn stdio_of(wanted: bool, fds: Vec<OwnedFd>) -> Result<Option<[OwnedFd; 3]>, ApiError> {
    match (wanted, fds.len()) {
        (false, 0) => Ok(None),
        (true, 3) => Ok(Some(fds.try_into().expect("three"))),
        (wanted, n) => Err(ApiError::Invalid(format!(
            "the request says stdio: {wanted} but carries {n} descriptors (3 or none)"
        ))),
    }
}

fn handle(
    stream: &UnixStream,
    shared: &Arc<Shared>,
    who: &Credentials,
    request: Request,
    fds: Vec<OwnedFd>,
) -> Result<(), ApiError> {
    let acted = |message: Result<String, ApiError>| -> Result<(), ApiError> {
        let _ = send(stream, &Reply::done(message?));
        Ok(())
    };
    match request {
        Request::Run(run) => {
            let stdio = stdio_of(run.stdio, fds)?;
            let detach = run.detach;
            let job = shared.with(|inner, now| inner.submit(who, run, stdio, now))?;
            let _ = send(stream, &Reply::Submitted { ok: true, job });
            if !detach {
                wait_and_reply(stream, shared, who, job, None)?;
            }
            Ok(())
        }
        Request::Wait { job, stdio } => {
            let stdio = stdio_of(stdio, fds)?;
            wait_and_reply(stream, shared, who, job, stdio)
        }
        Request::Ps { all } => {
            let jobs = shared.with(|inner, _| inner.jobs(all));
            let _ = send(stream, &Reply::Jobs { ok: true, jobs });
            Ok(())
        }
        Request::Matrix => {
            let matrix = shared.with(|inner, now| inner.matrix(now));
            let _ = send(stream, &Reply::Matrix { ok: true, matrix });
            Ok(())
        }
        Request::Stats => {
            let stats = shared.stats.lock().expect("stats").clone();
            let stats = shared.with(|inner, _| inner.stats(&stats));
            let _ = send(stream, &Reply::Stats { ok: true, stats });
            Ok(())
        }
        Request::Cancel { job } => acted(shared.with(|inner, now| inner.cancel(who, job, now))),
        Request::Suspend { job } => acted(shared.with(|inner, now| inner.suspend(who, job, now))),
        Request::Resume { job } => acted(shared.with(|inner, now| inner.resume(who, job, now))),
        Request::Class { job, class } => {
            acted(shared.with(|inner, now| inner.set_class(who, job, &class, now)))
        }
    }
}

fn wait_and_reply(
    stream: &UnixStream,
    shared: &Arc<Shared>,
    who: &Credentials,
    job: JobId,
    stdio: Option<[OwnedFd; 3]>,
) -> Result<(), ApiError> {
    let ended = shared.with(|inner, _| inner.wait(who, job, stdio))?;
    if let Ok(record) = ended.recv() {
        let _ = send(
            stream,
            &Reply::Ended {
                ok: true,
                job,
                state: record.status.name().to_string(),
                exit: record.exit,
            },
        );
    }
    Ok(())
}

use cosched_core::JobId;
