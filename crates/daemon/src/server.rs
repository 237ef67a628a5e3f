//! The daemon's process: startup (state directory, store, cgroups, recovery), the socket API,
//! the policy reload on SIGHUP and the clean stop on SIGTERM or SIGINT.

use crate::clients::{send, SocketClients, REQUEST_DEADLINE};
use crate::daemon::{OnStop, Shared};
use crate::etcd_store::EtcdStore;
use crate::store::SqliteStore;
use crate::waiters::Waiters;
use cosched_agent::start::{
    close_cgroups, io_error, open_cgroups, take_charge, trusted_socket_path, wait_for_stop,
    weigh_jobs, StartError,
};
use cosched_agent::{NodeAgent, NodeSettings};
use cosched_cgroups::{Actuator, Cgroups, Delegation, Freezer};
use cosched_cluster::{
    become_leader, etcd_client, ClusterError, EtcdOrders, EventFeed, Keys, Leadership, Outbox,
    Pusher,
};
use cosched_controller::clients::ClientId;
use cosched_controller::store::{JobRecord, Store};
use cosched_controller::{ApiError, Controller, Settings, LOG};
use cosched_core::{Micros, Rotation, Scheduler};
use cosched_os::notify::notify_or_log as notify;
use cosched_os::unix::{self, Credentials};
use cosched_os::{now_micros, usable_cpus};
use cosched_policy::{MemoryPolicy, Policy};
use cosched_proto::api::{Reply, Request, MAX_REQUEST_BYTES};
use cosched_proto::{Mode, NodeInfo, NodeMap, Order, OrderSink};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most clients whose requests are read and handled at once (a thread each; clients waiting
/// for a job's end are parked apart, see `waiters`). More are refused with a message.
const MAX_CLIENTS: usize = 256;
/// Of those, most for one user (root is never refused): one user cannot take the rest.
const MAX_CLIENTS_PER_UID: usize = 16;

#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    /// The policy in force: the file's, with what the command line set.
    pub policy: Policy,
    /// The policy file, re-read on SIGHUP.
    pub policy_file: PolicyFile,
    /// Processors to schedule (default: what this process may use).
    pub procs: Option<u32>,
    /// A job's tasks (processes and threads) per processor it has (none: uncapped).
    pub tasks_per_cpu: Option<u64>,
    /// The time slice of the jobs' processes (µs; none: the kernel's own).
    pub time_slice_us: Option<u32>,
    /// On each processor, the jobs weigh this many processes outside cosched (0: the
    /// kernel's default): `--jobs-weight`.
    pub jobs_weight: u32,
    pub on_stop: OnStop,
    /// The cosched parent cgroup's name (one per daemon on a machine).
    pub cgroup_parent: String,
    /// Whether the jobs' cgroups go inside this process's systemd unit (cgroup v2).
    pub cgroup_delegation: Delegation,
    pub freezer: Option<Freezer>,
    pub supervisor_exe: PathBuf,
    /// Ended records kept in memory for `ps --all` (all stay in the store).
    pub keep_ended: usize,
    /// A cluster's controller (agents on their nodes, through etcd); `None`: one machine.
    pub cluster: Option<ClusterConfig>,
    /// Serve the web console and `/metrics` over HTTP here (`--http`).
    pub http: Option<std::net::SocketAddr>,
    /// Let users register processes started elsewhere (`--allow-registration`).
    pub allow_registration: bool,
}

/// The policy file as the daemon read it: what a reload compares with.
#[derive(Clone, Debug)]
pub struct PolicyFile {
    pub path: PathBuf,
    /// The file was there at start (else `read` is the built-in defaults, and a SIGHUP reads
    /// the file once it is there).
    pub found: bool,
    pub read: Policy,
    /// Keys the command line set, over the file's: a change to them in the file does nothing.
    pub overridden: Vec<&'static str>,
}

/// Refuses to start over processes in job groups that the store does not hold as unfinished.
fn refuse_strangers(
    actuator: &Cgroups,
    records: &[JobRecord],
    config: &DaemonConfig,
) -> Result<(), StartError> {
    let unfinished = records
        .iter()
        .filter(|r| !r.status.ended())
        .map(|r| r.id)
        .collect();
    let strangers = cosched_agent::node::strangers(actuator, &unfinished)?;
    if let Some((name, procs)) = strangers.first() {
        return Err(StartError::Config(format!(
            "cgroup {}/{name} holds {procs} process(es) of a job that {} does not know \
             ({} such group(s)): another daemon's jobs, or jobs left running by a stop; end \
             them or use another --cgroup-parent",
            config.cgroup_parent,
            config.state_dir.display(),
            strangers.len()
        )));
    }
    Ok(())
}

/// The node name of the agent inside a single-machine daemon.
pub const LOCAL_NODE: &str = "local";

/// The control plane of a cluster: etcd's members and the cluster's name there.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub etcd: Vec<String>,
    /// etcd's auth (none: an etcd no job can reach, `--etcd-insecure`).
    pub etcd_credentials: Option<cosched_etcd::Credentials>,
    /// TLS to etcd (none: plain HTTP).
    pub etcd_tls: Option<cosched_etcd::Tls>,
    pub cluster: String,
    /// Nodes to wait for before scheduling (the machine is the nodes present then).
    pub wait_nodes: usize,
    /// Seconds the leader key outlives a controller that stopped renewing it.
    pub leader_ttl: i64,
    /// Where the leader pushes its writes to the agents from (none: agents follow etcd alone).
    pub push: Option<std::net::SocketAddr>,
}

/// Where the controller's agents' events come from.
enum Agents {
    /// One machine: the agent runs on a thread of this process.
    Local {
        thread: std::thread::JoinHandle<(Cgroups, Result<(), String>)>,
        events: std::sync::mpsc::Receiver<cosched_proto::Event>,
        actuator: String,
    },
    /// A cluster: agents on their nodes, through etcd.
    Cluster {
        client: Arc<cosched_etcd::Client>,
        keys: Keys,
        leadership: Leadership,
        outbox: Arc<Outbox>,
    },
}

/// Runs the daemon until SIGTERM or SIGINT. `ready` is called once the socket accepts.
pub fn serve(config: DaemonConfig, ready: impl FnOnce(&str)) -> Result<(), StartError> {
    let quantum = config.policy.quantum();
    if quantum < 1_000 {
        return Err(StartError::Config(
            "the quantum must be at least 1 ms (10 ms or more is sensible)".into(),
        ));
    }
    let mode = config.policy.scheduler.mode;
    if let Ok(fault) = std::env::var("COSCHED_FAULT") {
        let point = fault.split(':').next().unwrap_or_default();
        if !cosched_os::fault::POINTS.contains(&point) {
            return Err(StartError::Config(format!(
                "COSCHED_FAULT={fault}: no such point (one of {:?}, optionally :JOB)",
                cosched_os::fault::POINTS
            )));
        }
    }
    let mut config = config;
    let (signals, max_files, state_dir) = take_charge(&config.state_dir)?;
    config.state_dir = state_dir;
    // A standby controller waits here for the leader key, before it takes the socket.
    let cluster = match &config.cluster {
        Some(cluster) => Some(lead_cluster(cluster)?),
        None => None,
    };
    let listener = bind(&config.socket)?;
    let http = match config.http {
        Some(address) => Some(
            std::net::TcpListener::bind(address)
                .map_err(|e| StartError::Config(format!("--http {address}: {e}")))?,
        ),
        None => None,
    };

    // A cluster's records live in etcd, where a standby that takes over finds them.
    let (store, store_name): (Box<dyn Store>, String) = match &cluster {
        None => {
            let path = config.state_dir.join("jobs.sqlite");
            let store = SqliteStore::open(&path).map_err(|e| StartError::Store(Box::new(e)))?;
            (Box::new(store), path.display().to_string())
        }
        Some((client, keys, leadership, _)) => {
            let store = EtcdStore::open(Arc::clone(client), keys.clone(), leadership.guard())
                .map_err(|e| StartError::Store(Box::new(e)))?;
            (Box::new(store), format!("etcd ({})", keys.jobs()))
        }
    };
    let records = store
        .load(config.keep_ended)
        .map_err(|e| StartError::Store(e.into()))?;

    let now = now_micros();
    let pusher = cluster
        .as_ref()
        .and_then(|(_, _, _, pusher)| pusher.clone());
    let (nodes, memory, rotation, orders, agents): (_, _, _, Box<dyn OrderSink>, _) = match cluster
    {
        None => {
            let procs = config.procs.unwrap_or_else(usable_cpus);
            // One machine is a one-node cluster whose agent runs in this process.
            let nodes = NodeMap::single(LOCAL_NODE, procs)
                .map_err(|e| StartError::Config(e.to_string()))?;
            let rotation = Rotation::new(now - now.rem_euclid(quantum), quantum);
            let (orders, agents) = local_agent(&config, &records, procs)?;
            let memory = cosched_os::memory_total();
            (nodes, memory, rotation, Box::new(orders), agents)
        }
        Some((client, keys, leadership, pusher)) => {
            let wanted = config.cluster.as_ref().map_or(1, |c| c.wait_nodes);
            let (nodes, memory) = wait_for_nodes(&client, &keys, wanted, mode)?;
            let rotation = cluster_rotation(&client, &keys, quantum)?;
            let outbox = Arc::new(
                Outbox::start(Arc::clone(&client), "daemon")
                    .map_err(io_error(Path::new("outbox thread")))?,
            );
            let orders = EtcdOrders::new(Arc::clone(&outbox), keys.clone(), &leadership, pusher);
            let agents = Agents::Cluster {
                client,
                keys,
                leadership,
                outbox,
            };
            (nodes, memory, rotation, Box::new(orders), agents)
        }
    };
    let machine = nodes
        .machine()
        .map_err(|e| StartError::Config(e.to_string()))?;
    let machine = match node_memory(&config.policy.memory, memory) {
        Some(bytes) => machine.with_node_memory(bytes),
        None => machine,
    };
    let procs = machine.procs();
    // The simulator builds its scheduler from the same `core_config` (ARCHITECTURE.md).
    let scheduler = Scheduler::new(machine, config.policy.core_config())
        .map_err(|e| StartError::Config(e.to_string()))?;
    let node_names: Vec<String> = nodes.nodes().iter().map(|n| n.name.clone()).collect();
    let settings = Settings {
        mode,
        rotation,
        nodes,
        keep_ended: config.keep_ended,
        max_files,
        registration: config
            .allow_registration
            .then(|| config.supervisor_exe.clone()),
        time_limits: config.policy.time_limits(),
        user_limits: config.policy.user_limits(),
        default_mem_per_cpu: config.policy.memory.default_mem_per_cpu,
        stall_action: config.policy.stall.action,
        interactive_stretch: config.policy.scheduler.interactive_preempt,
    };
    let waiters = Waiters::start().map_err(io_error(Path::new("waiters thread")))?;
    let clients = SocketClients::new(waiters);
    // One machine: the agent below runs in this process and logs into the state directory.
    let boundary_log = config.cluster.is_none().then(|| config.state_dir.clone());
    let controller = Controller::new(
        settings,
        scheduler,
        store,
        orders,
        Box::new(clients.clone()),
    );
    let shared = Shared::new(controller, clients, boundary_log, pusher);
    if let Some(http) = http {
        if let Ok(address) = http.local_addr() {
            LOG.info(format_args!(
                "web console at http://{address}/, Prometheus metrics at http://{address}/metrics"
            ));
        }
        crate::http::serve(http, Arc::clone(&shared))
            .map_err(io_error(Path::new("http threads")))?;
    }
    let recovering = records.iter().filter(|r| !r.status.ended()).count();
    shared.with(|inner, now| inner.recover(records, now));
    if recovering > 0 {
        LOG.info(format_args!(
            "took back {recovering} unfinished job(s) from {store_name}"
        ));
    }
    let described = listen_to_agents(&shared, agents)?;
    {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || accept_loop(listener, shared));
    }
    {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || shared.enforce_time_limits());
    }
    if let Some(stretch) = config.policy.scheduler.interactive_preempt {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || shared.settle_interactive(stretch));
    }
    ready(&format!(
        "{mode} mode, quantum {} ms, {} processors on {} ({}); socket {}; policy {}",
        quantum as f64 / 1000.0,
        procs,
        node_names.join(", "),
        described.actuator,
        config.socket.display(),
        match config.policy_file.found {
            true => config.policy_file.path.display().to_string(),
            false => format!(
                "built-in defaults (no {})",
                config.policy_file.path.display()
            ),
        },
    ));
    notify(
        LOG,
        &format!(
            "READY=1\nSTATUS=scheduling {procs} processors; socket {}",
            config.socket.display()
        ),
    );
    let mut policy_file = config.policy_file.clone();
    let signal = loop {
        match wait_for_stop(&signals) {
            libc::SIGHUP => {
                notify(
                    LOG,
                    &format!(
                        "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the policy",
                        cosched_os::monotonic_micros()
                    ),
                );
                reload(&shared, &mut policy_file);
                notify(LOG, "READY=1\nSTATUS=policy reloaded");
            }
            signal => break signal,
        }
    };
    notify(LOG, "STOPPING=1\nSTATUS=stopping");
    LOG.info(format_args!(
        "signal {signal}: stopping; jobs are {}",
        match (config.on_stop, &described.local_thread) {
            (OnStop::Cancel, _) => "cancelled",
            (OnStop::Leave, Some(_)) => "thawed and left running unscheduled",
            (OnStop::Leave, None) =>
                "left to their agents (they run them unscheduled unless another controller takes over)",
        }
    ));
    shared.stop(config.on_stop, described.local_thread.is_none());
    let _ = std::fs::remove_file(&config.socket);
    if let Some((outbox, leadership)) = described.cluster {
        if !outbox.finish(Duration::from_secs(5)) {
            LOG.warn("etcd did not take every order before the stop");
        }
        leadership.resign();
    }
    let stopped = match described.local_thread.map(|t| t.join()) {
        None => Ok(()),
        Some(Ok((cgroups, stopped))) => {
            close_cgroups(cgroups, config.on_stop == OnStop::Leave, LOG);
            stopped
        }
        Some(Err(_)) => Err("the agent thread panicked".into()),
    };
    stopped.map_err(|e| StartError::Config(format!("stopping: {e}")))
}

/// SIGHUP: re-reads the policy file and applies what can change while jobs run (the limits);
/// names what waits for a restart. An invalid file changes nothing.
fn reload(shared: &Shared, file: &mut PolicyFile) {
    let policy = match Policy::read_trusted(&file.path) {
        Ok(policy) => policy,
        Err(e) => {
            LOG.warn(format_args!(
                "policy not reloaded, the running one stays: {e}"
            ));
            return;
        }
    };
    shared.with(|inner, now| inner.set_limits(policy.time_limits(), policy.user_limits(), now));
    let changes = policy.changes(&file.read);
    let live: Vec<String> = changes
        .iter()
        .filter(|c| c.live)
        .map(|c| c.to_string())
        .collect();
    LOG.info(format_args!(
        "policy reloaded from {}: {}",
        file.path.display(),
        if live.is_empty() {
            "no limit changed".into()
        } else {
            live.join(", ")
        }
    ));
    for key in policy.restart_needed(&file.read) {
        if file.overridden.contains(&key) {
            LOG.warn(format_args!(
                "{key} changed in the file, but the command line sets it"
            ));
        } else {
            LOG.info(format_args!("{key} changed: takes effect at restart"));
        }
    }
    file.read = policy;
}

/// What `listen_to_agents` leaves for the stop.
struct Listening {
    actuator: String,
    local_thread: Option<std::thread::JoinHandle<(Cgroups, Result<(), String>)>>,
    cluster: Option<(Arc<Outbox>, Leadership)>,
}

/// Hands the agents' events to the controller, from threads of their own.
fn listen_to_agents(shared: &Arc<Shared>, agents: Agents) -> Result<Listening, StartError> {
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map(drop)
            .map_err(io_error(Path::new("listener thread")))
    };
    match agents {
        Agents::Local {
            thread,
            events,
            actuator,
        } => {
            let shared = Arc::clone(shared);
            spawn(
                "cosched-events",
                Box::new(move || {
                    for event in events {
                        shared.handle_event(event);
                    }
                }),
            )?;
            Ok(Listening {
                actuator,
                local_thread: Some(thread),
                cluster: None,
            })
        }
        Agents::Cluster {
            client,
            keys,
            leadership,
            outbox,
        } => {
            let feed = Arc::new(EventFeed {
                client,
                keys,
                outbox: Arc::clone(&outbox),
            });
            let (f, s) = (Arc::clone(&feed), Arc::clone(shared));
            spawn(
                "cosched-events",
                Box::new(move || {
                    f.job_events(|event| {
                        s.handle_event(event);
                        true
                    })
                }),
            )?;
            let (f, s) = (Arc::clone(&feed), Arc::clone(shared));
            spawn(
                "cosched-status",
                Box::new(move || {
                    f.statuses(|status| {
                        s.handle_event(cosched_proto::Event::Status {
                            status: Box::new(status),
                        });
                        true
                    })
                }),
            )?;
            let (f, s) = (Arc::clone(&feed), Arc::clone(shared));
            spawn(
                "cosched-nodes",
                Box::new(move || {
                    f.nodes(|change| {
                        s.with(|inner, now| inner.node_changed(change, now));
                        true
                    })
                }),
            )?;
            let (f, s) = (Arc::clone(&feed), Arc::clone(shared));
            spawn(
                "cosched-silence",
                Box::new(move || loop {
                    let period = cosched_proto::STATUS_PERIOD_US as u64;
                    std::thread::sleep(std::time::Duration::from_micros(period));
                    // Asked outside the lock: etcd may take its timeout to answer.
                    let revisions = f.status_revisions();
                    s.with(|inner, now| inner.check_silence(revisions.as_ref(), now));
                }),
            )?;
            Ok(Listening {
                actuator: "each node's agent through etcd".into(),
                local_thread: None,
                cluster: Some((outbox, leadership)),
            })
        }
    }
}

/// The agent of a single machine, on a thread of this process, and the channel of its orders.
fn local_agent(
    config: &DaemonConfig,
    records: &[JobRecord],
    procs: u32,
) -> Result<(Sender<Order>, Agents), StartError> {
    let actuator = open_cgroups(
        &config.cgroup_parent,
        config.freezer,
        config.cgroup_delegation,
        LOG,
    )?;
    refuse_strangers(&actuator, records, config)?;
    let weighed = weigh_jobs(&actuator, config.jobs_weight, procs, LOG);
    let described = format!("{}; {weighed}", actuator.describe());
    let (orders, agent_orders) = channel();
    let (event_tx, events) = channel();
    let agent = NodeAgent::new(
        NodeSettings {
            node: LOCAL_NODE.to_string(),
            cpus: cosched_core::Partition::block(0, procs),
            mode: config.policy.scheduler.mode,
            idle_after: config.policy.scheduler.idle_after,
            give_away_after: cosched_agent::give_away_after(
                config.policy.scheduler.give_away_after_ms,
            ),
            state_dir: config.state_dir.clone(),
            supervisor_exe: config.supervisor_exe.clone(),
            clock_shift_us: 0,
            tasks_per_cpu: config.tasks_per_cpu,
            time_slice_us: config.time_slice_us,
            status_every: cosched_proto::STATUS_PERIOD_US,
            realtime: true,
        },
        actuator,
        Arc::new(event_tx),
    )
    .with_stall_after(config.policy.stall.after);
    let thread = std::thread::Builder::new()
        .name("cosched-clock".into())
        .spawn(move || agent.run(agent_orders))
        .map_err(io_error(std::path::Path::new("clock thread")))?;
    Ok((
        orders,
        Agents::Local {
            thread,
            events,
            actuator: described,
        },
    ))
}

/// A cluster's controller once it leads: its etcd client, the cluster's keys, its leadership
/// and its push to the agents (if asked for).
type Led = (
    Arc<cosched_etcd::Client>,
    Keys,
    Leadership,
    Option<Arc<Pusher>>,
);

/// Waits for the leader key of the cluster (standing by while another controller holds it),
/// with the push to the agents listening first when asked for (its address goes in the key).
fn lead_cluster(cluster: &ClusterConfig) -> Result<Led, StartError> {
    let client = Arc::new(etcd_client(
        &cluster.etcd,
        &cluster.etcd_credentials,
        cluster.etcd_tls.as_ref(),
    )?);
    let keys = Keys::new(&cluster.cluster)?;
    let pusher = match cluster.push {
        Some(address) => Some(Arc::new(
            Pusher::start(address).map_err(io_error(Path::new("--push-listen")))?,
        )),
        None => None,
    };
    let offer = pusher.as_ref().map(|p| p.offer());
    let leadership = become_leader(
        Arc::clone(&client),
        &keys,
        cluster.leader_ttl,
        offer,
        |why| {
            // Another controller may lead already: acting on would mean two of them ordering.
            LOG.warn(format_args!(
                "{why}: stopping at once (a standby takes over)"
            ));
            std::process::exit(3);
        },
    )?;
    match &pusher {
        Some(pusher) => LOG.info(format_args!(
            "leading cluster '{}', pushing to the agents from {}",
            keys.cluster(),
            pusher.offer().address
        )),
        None => LOG.info(format_args!("leading cluster '{}'", keys.cluster())),
    }
    Ok((client, keys, leadership, pusher))
}

/// Waits until `wanted` nodes have joined; the machine is the nodes present then, by name.
/// What jobs may hold on a node in all, for memory-fit admission: the policy's size, or with
/// `auto` the node's own (`found`: the smallest node's in a cluster); none with the rule off
/// or the size unknown (logged: jobs are then admitted by processors alone).
fn node_memory(policy: &MemoryPolicy, found: Option<u64>) -> Option<u64> {
    let bytes = policy.node_size(found);
    if policy.fit && bytes.is_none() {
        LOG.warn("memory.node_memory is auto and a node's memory is unknown: jobs are admitted by processors alone");
    }
    bytes
}

/// The nodes present once `wanted` have joined, and the smallest one's memory when every
/// node reports it.
fn wait_for_nodes(
    client: &cosched_etcd::Client,
    keys: &Keys,
    wanted: usize,
    mode: Mode,
) -> Result<(NodeMap, Option<u64>), StartError> {
    let mut told = 0;
    loop {
        let (present, _) = client
            .get_prefix(&keys.nodes())
            .map_err(ClusterError::from)?;
        let infos: Vec<NodeInfo> = present
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect();
        if infos.len() >= wanted.max(1) {
            if let Some(other) = infos.iter().find(|n| n.mode != mode) {
                return Err(StartError::Config(format!(
                    "node {} runs its agent in {} mode and this controller is in {mode} mode: \
                     start both with the same --mode",
                    other.node, other.mode
                )));
            }
            let smallest = infos
                .iter()
                .map(|n| n.memory_bytes)
                .collect::<Option<Vec<u64>>>()
                .and_then(|sizes| sizes.into_iter().min());
            let nodes = NodeMap::new(infos.iter().map(NodeInfo::to_node).collect())
                .map_err(|e| StartError::Config(e.to_string()))?;
            return Ok((nodes, smallest));
        }
        if infos.len() != told || told == 0 {
            let names: Vec<&str> = infos.iter().map(|n| n.node.as_str()).collect();
            LOG.info(format_args!(
                "waiting for {wanted} node(s) to join cluster '{}' (have {}: {})",
                keys.cluster(),
                infos.len(),
                names.join(", ")
            ));
            told = infos.len().max(1);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The cluster's slot clock: kept from an earlier controller when the quantum is the same
/// (agents go on without a jump), else a new one stored for the next.
fn cluster_rotation(
    client: &cosched_etcd::Client,
    keys: &Keys,
    quantum: Micros,
) -> Result<Rotation, StartError> {
    let key = keys.rotation();
    let kept = client
        .get(&key)
        .map_err(ClusterError::from)?
        .and_then(|kv| serde_json::from_slice::<(Micros, Micros)>(&kv.value).ok());
    if let Some((epoch, kept_quantum)) = kept {
        if kept_quantum == quantum {
            return Ok(Rotation::new(epoch, quantum));
        }
    }
    let now = now_micros();
    let rotation = Rotation::new(now - now.rem_euclid(quantum), quantum);
    let value = serde_json::to_vec(&(rotation.epoch, rotation.quantum)).expect("numbers");
    client.put(&key, &value, None).map_err(ClusterError::from)?;
    Ok(rotation)
}

/// Binds the socket, refusing to take it from a live daemon or to replace anything but a
/// stale socket; anyone may connect (looking is open to all; acting is checked per request).
fn bind(path: &Path) -> Result<UnixListener, StartError> {
    let path = &trusted_socket_path(path, "the socket")?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(StartError::Unsafe {
                path: path.to_path_buf(),
                why: "exists and is not a socket; refusing to replace it (remove it, or choose \
                      another --socket)"
                    .into(),
            })
        }
        Ok(_) => {
            if UnixStream::connect(path).is_ok() {
                return Err(StartError::Running(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(io_error(path))?;
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(path).map_err(io_error(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(io_error(path))?;
    Ok(listener)
}

/// Who is being served now: one count for all, one per user.
#[derive(Default)]
struct Clients {
    total: usize,
    per_uid: BTreeMap<u32, usize>,
}

impl Clients {
    /// Takes a place for `uid`, or says why there is none. Root always gets one.
    fn admit(&mut self, uid: u32) -> Result<(), String> {
        let mine = self.per_uid.get(&uid).copied().unwrap_or(0);
        if uid != 0 && mine >= MAX_CLIENTS_PER_UID {
            return Err(format!(
                "uid {uid} has {MAX_CLIENTS_PER_UID} requests in progress already; try again"
            ));
        }
        if uid != 0 && self.total >= MAX_CLIENTS {
            return Err("the daemon is serving too many clients; try again".into());
        }
        self.total += 1;
        *self.per_uid.entry(uid).or_default() += 1;
        Ok(())
    }

    fn leave(&mut self, uid: u32) {
        self.total -= 1;
        if let Some(mine) = self.per_uid.get_mut(&uid) {
            *mine -= 1;
            if *mine == 0 {
                self.per_uid.remove(&uid);
            }
        }
    }
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let clients = Arc::new(Mutex::new(Clients::default()));
    let mut out_of_files = false;
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors: accepting again at once would spin; wait for some to close.
                if matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    if !out_of_files {
                        LOG.warn(format_args!(
                            "accepting clients: {error}; retrying every 100 ms"
                        ));
                    }
                    out_of_files = true;
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
        };
        out_of_files = false;
        let Ok(who) = unix::peer_credentials(&stream) else {
            continue;
        };
        let admitted = clients.lock().expect("clients").admit(who.uid);
        if let Err(why) = admitted {
            let _ = send(&stream, &Reply::error(why));
            continue;
        }
        let shared = Arc::clone(&shared);
        let clients = Arc::clone(&clients);
        let spawned = std::thread::Builder::new().spawn(move || {
            serve_client(stream, &who, &shared);
            clients.lock().expect("clients").leave(who.uid);
        });
        if spawned.is_err() {
            LOG.error("cannot start a client thread; the client was dropped");
        }
    }
}

fn serve_client(stream: UnixStream, who: &Credentials, shared: &Arc<Shared>) {
    let (line, fds) =
        match unix::read_line_with_fds(&stream, MAX_REQUEST_BYTES, Some(REQUEST_DEADLINE)) {
            Ok(Some(message)) => message,
            Ok(None) => return,
            Err(error) => {
                unix::drain(&stream);
                let _ = send(&stream, &Reply::error(format!("bad request: {error}")));
                return;
            }
        };
    let request = match cosched_proto::api::parse_request(&line) {
        Ok(request) => request,
        Err(error) => {
            shared.with(|inner, _| inner.count_request("invalid", false));
            let _ = send(&stream, &Reply::error(error));
            return;
        }
    };
    let op = request.op();
    let handled = handle(stream, shared, who, request, fds);
    shared.with(|inner, _| inner.count_request(op, handled.is_ok()));
    if let Err((stream, error)) = handled {
        let _ = send(&stream, &Reply::error(error.to_string()));
    }
}

/// `who` with the resource limits of the process it is, which its job gets
/// ([`cosched_os::limits`]): the connecting process, by the pidfd the kernel took as it
/// connected (Linux 6.5), else (a kernel without it) by a pidfd of its pid whose owner is
/// checked after the read, so that a process of another user that took the pid is never
/// read as the submitter. Refused when they cannot be read: the job would run with the
/// daemon's, root's (a peer outside this daemon's pid namespace has pid 0 here, and no
/// `/proc` entry to read).
fn with_limits(stream: &UnixStream, who: &Credentials) -> Result<Credentials, ApiError> {
    let refused = |why: String| {
        ApiError::Forbidden(format!(
            "cannot read the resource limits of the submitting process (pid {}), which its \
             job would run with: {why}",
            who.pid
        ))
    };
    if who.pid == 0 {
        return Err(refused(
            "it is outside the daemon's pid namespace (submit from a process the daemon can see)"
                .into(),
        ));
    }
    let pidfd = match unix::peer_pidfd(stream) {
        Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => unix::pidfd_open(who.pid),
        taken => taken,
    }
    .map_err(|e| refused(e.to_string()))?;
    let limits =
        cosched_os::limits::of_process(who.pid, &pidfd).map_err(|e| refused(e.to_string()))?;
    cosched_agent::check_owner(who.pid, who.uid).map_err(refused)?;
    if unix::has_exited(&pidfd) {
        return Err(refused("it has exited".into()));
    }
    Ok(Credentials {
        limits,
        ..who.clone()
    })
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

/// Hands `stream` to the controller as a client for `f`; a refusal hands it back for its
/// answer (the controller never answers a client it refuses).
fn with_client(
    shared: &Shared,
    stream: UnixStream,
    f: impl FnOnce(&mut Controller, ClientId) -> Result<(), ApiError>,
) -> Result<(), (UnixStream, ApiError)> {
    shared.with(|inner, _| {
        let client = shared.clients().hold(stream);
        let Err(error) = f(inner, client) else {
            return Ok(());
        };
        match shared.clients().take(client) {
            Some(stream) => Err((stream, error)),
            None => {
                LOG.warn(format_args!("a client answered and then refused: {error}"));
                Ok(())
            }
        }
    })
}

/// Answers one request. A client that waits for a job's end is handed to the waiters (its
/// stream with it); an error comes back with the stream, for the reply.
fn handle(
    stream: UnixStream,
    shared: &Arc<Shared>,
    who: &Credentials,
    request: Request,
    fds: Vec<OwnedFd>,
) -> Result<(), (UnixStream, ApiError)> {
    let reply = match request {
        Request::Run(run) => {
            let stdio = match stdio_of(run.stdio, fds) {
                Ok(stdio) => stdio,
                Err(error) => return Err((stream, error)),
            };
            let who = &match with_limits(&stream, who) {
                Ok(who) => who,
                Err(error) => return Err((stream, error)),
            };
            let detach = run.detach;
            cosched_os::fault::point("accepted", 0);
            // Submitting, answering and parking under one lock: the job cannot end unheard.
            return shared.with(|inner, now| match inner.submit(who, run, stdio, now) {
                Ok(job) => {
                    let output = inner.output_elsewhere(job);
                    let _ = send(
                        &stream,
                        &Reply::Submitted {
                            ok: true,
                            job,
                            output,
                            reason: inner.reason_of(job),
                            note: inner.submission_note(job),
                        },
                    );
                    if !detach {
                        let client = shared.clients().hold(stream);
                        if let Err(error) = inner.wait(who, job, None, client) {
                            shared.clients().take(client);
                            LOG.error(format_args!("job {job}: {error}"));
                        }
                    }
                    Ok(())
                }
                Err(error) => Err((stream, error)),
            });
        }
        Request::Wait { job, stdio } => {
            let stdio = match stdio_of(stdio, fds) {
                Ok(stdio) => stdio,
                Err(error) => return Err((stream, error)),
            };
            return with_client(shared, stream, |inner, client| {
                inner.wait(who, job, stdio, client)
            });
        }
        Request::Boundaries { since_us } => {
            // Sent while the log's one reader is held: one such reply in memory at a time.
            let sent = shared.boundaries(since_us, |boundaries| {
                let _ = send(
                    &stream,
                    &Reply::Boundaries {
                        ok: true,
                        boundaries,
                    },
                );
            });
            return sent.map_err(|error| (stream, error));
        }
        Request::Register(register) => {
            // Its holder runs as the user too: with the user's limits, not the daemon's.
            let who = &match with_limits(&stream, who) {
                Ok(who) => who,
                Err(error) => return Err((stream, error)),
            };
            // Recording, answering and parking under one lock: the job cannot start unheard.
            return shared.with(|inner, now| match inner.register(who, register, now) {
                Ok(job) => {
                    let submitted = Reply::Submitted {
                        ok: true,
                        job,
                        output: None,
                        reason: inner.reason_of(job),
                        note: inner.submission_note(job),
                    };
                    let _ = send(&stream, &submitted);
                    let client = shared.clients().hold(stream);
                    if let Err(error) = inner.wait_start(who, job, client) {
                        shared.clients().take(client);
                        LOG.error(format_args!("job {job}: {error}"));
                    }
                    Ok(())
                }
                Err(error) => Err((stream, error)),
            });
        }
        Request::ProcAdd { job, pid } => {
            return with_client(shared, stream, |inner, client| {
                inner.proc_add(who, job, pid, client)
            });
        }
        request => shared.act(who, request),
    };
    match reply {
        Ok(reply) => {
            let _ = send(&stream, &reply);
            Ok(())
        }
        Err(error) => Err((stream, error)),
    }
}
