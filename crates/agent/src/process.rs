//! `cosched agent`: a node's agent as a process of its own in a cluster. It joins through
//! etcd under a lease, follows its queue of orders, launches and switches its jobs on the
//! shared slot clock, and lets them loose when it loses the control plane past its deadline
//! or when it stops.

use crate::door::{self, Door};
use crate::start::{
    close_cgroups, io_error, open_cgroups, take_charge, trusted_socket_path, wait_for_stop,
    weigh_jobs, StartError,
};
use crate::{NodeAgent, NodeSettings};
use cosched_cgroups::{Actuator, Delegation, Freezer};
use cosched_cluster::{etcd_client, join, whoami, Keys};
use cosched_core::{Micros, Partition};
use cosched_os::now_micros;
use cosched_proto::{EventSink, Mode, NodeInfo};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub etcd: Vec<String>,
    /// etcd's auth (none: an etcd no job can reach, `--etcd-insecure`).
    pub etcd_credentials: Option<cosched_etcd::Credentials>,
    /// TLS to etcd (none: plain HTTP).
    pub etcd_tls: Option<cosched_etcd::Tls>,
    pub cluster: String,
    pub node: String,
    pub cpus: Partition,
    pub mode: Mode,
    pub state_dir: PathBuf,
    pub cgroup_parent: String,
    /// Whether the jobs' cgroups go inside this process's systemd unit (cgroup v2).
    pub cgroup_delegation: Delegation,
    pub freezer: Option<Freezer>,
    pub supervisor_exe: PathBuf,
    pub idle_after: Option<Micros>,
    /// See `NodeSettings::give_away_after`.
    pub give_away_after: Option<Micros>,
    /// Jobs doing nothing in this long of their own slots are reported stalled.
    pub stall_after: Option<Micros>,
    /// A job's tasks per processor on this node (none: uncapped).
    pub tasks_per_cpu: Option<u64>,
    /// See `NodeSettings::time_slice_us`.
    pub time_slice_us: Option<u32>,
    /// On each processor, the jobs weigh this many processes outside cosched (0: the
    /// kernel's default): `--jobs-weight`.
    pub jobs_weight: u32,
    /// How long the control plane may be out of reach before the jobs are let loose.
    pub deadline: Micros,
    /// Seconds the node's key outlives an agent that stopped renewing its lease.
    pub lease_ttl: i64,
    /// Where other nodes' MPI launchers reach this node (none: its name).
    pub address: Option<String>,
    /// The socket through which the jobs' processes ask for processes on other nodes.
    pub door: PathBuf,
    /// Test-only: the agent's clock reads true time plus this many µs.
    pub clock_shift_us: Micros,
}

const LOG: cosched_os::Log = cosched_os::Log::new("agent");

/// The node's cgroups until its agent takes them: removed again if the start fails (a parent
/// that still holds jobs of an earlier run stays).
struct Unclaimed(Option<cosched_cgroups::Cgroups>);

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if let Some(cgroups) = self.0.take() {
            let _ = cgroups.close();
        }
    }
}

/// How often an agent renews its lease (and so learns that etcd answers): a few times per
/// lease, and twice per deadline, so that a healthy link is never older than the deadline.
/// Each renewal is a request to etcd: 1,000 agents renewing every 1.25 s (a quarter of the
/// default deadline) kept etcd busy for most of a CPU here.
pub fn renewal_period(deadline: Micros, lease_ttl: i64) -> Duration {
    Duration::from_micros((deadline / 2).clamp(20_000, lease_ttl * 1_000_000 / 3) as u64)
}

/// Runs the node's agent until SIGTERM or SIGINT. `ready` is called once it has joined.
pub fn serve_node(config: NodeConfig, ready: impl FnOnce(&str)) -> Result<(), StartError> {
    if !cosched_proto::valid_node_name(&config.node) {
        return Err(StartError::Config(format!(
            "node name '{}' must be 1-63 letters, digits, '-', '_' or '.'",
            config.node
        )));
    }
    if config.cpus.is_empty() {
        return Err(StartError::Config("--cpus names no CPU".into()));
    }
    // etcd ends a lease not renewed for its TTL: a cut that long makes the node leave and the
    // controller give its jobs up, so letting them loose must come first.
    if config.lease_ttl * 1_000_000 <= config.deadline {
        return Err(StartError::Config(format!(
            "--lease-ttl ({} s) must be longer than --deadline-ms ({} ms): a cut long enough to \
             let the jobs loose would also end the node's membership and its jobs",
            config.lease_ttl,
            config.deadline / 1_000
        )));
    }
    if config.address.as_ref().is_some_and(|a| {
        a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == ',' || c == ':')
    }) {
        return Err(StartError::Config(
            "--address must be one host name or IPv4 address (no spaces, commas or colons)".into(),
        ));
    }
    // Its directory must be root's and not writable by others (sticky, as /tmp, will do:
    // nobody can then replace the socket).
    let mut config = config;
    config.door = trusted_socket_path(&config.door, "the --door socket")?;
    let (signals, _max_files, state_dir) = take_charge(&config.state_dir)?;
    let mut unclaimed = Unclaimed(Some(open_cgroups(
        &config.cgroup_parent,
        config.freezer,
        config.cgroup_delegation,
        LOG,
    )?));
    let actuator = unclaimed.0.as_ref().expect("just opened");
    actuator.confine(&config.cpus).map_err(|e| {
        StartError::Config(format!(
            "keeping the node's jobs on --cpus {} (cgroup {}): {e}",
            config.cpus, config.cgroup_parent
        ))
    })?;
    let weighed = weigh_jobs(actuator, config.jobs_weight, config.cpus.size(), LOG);
    let described = format!("{}; {weighed}", actuator.describe());
    let client = Arc::new(etcd_client(
        &config.etcd,
        &config.etcd_credentials,
        config.etcd_tls.as_ref(),
    )?);
    let keys = Keys::new(&config.cluster)?;
    let info = NodeInfo {
        protocol: cosched_proto::PROTOCOL_VERSION,
        node: config.node.clone(),
        cpus: config.cpus.clone(),
        mode: config.mode,
        agent: whoami(),
        joined_us: now_micros(),
        address: config.address.clone(),
        lease_ttl_s: config.lease_ttl,
        memory_bytes: cosched_os::memory_total(),
    };
    let check = renewal_period(config.deadline, config.lease_ttl);
    let status_every = info.status_period_us();
    let membership = join(client, &keys, info, config.lease_ttl, check)?;
    let (source, closer) = membership.orders(config.deadline)?;
    let events: Arc<dyn EventSink> = Arc::new(membership.events());
    let door = Door::open(&config.door, &config.node, Arc::clone(&events))
        .map_err(|e| StartError::Config(e.to_string()))?;
    let hydra = match door::ensure_launch_remote_link(&config.supervisor_exe) {
        Ok(link) => format!("; MPICH's Hydra launches through {}", link.display()),
        Err(error) => format!(
            "; no {} beside {} ({error}): MPICH jobs pass -launcher rsh -launcher-exec \
             themselves",
            door::LAUNCH_REMOTE_NAME,
            config.supervisor_exe.display()
        ),
    };
    let agent = NodeAgent::new(
        NodeSettings {
            node: config.node.clone(),
            cpus: config.cpus.clone(),
            mode: config.mode,
            idle_after: config.idle_after,
            give_away_after: config.give_away_after,
            state_dir,
            supervisor_exe: config.supervisor_exe.clone(),
            clock_shift_us: config.clock_shift_us,
            tasks_per_cpu: config.tasks_per_cpu,
            time_slice_us: config.time_slice_us,
            status_every,
            realtime: true,
        },
        unclaimed.0.take().expect("claimed once"),
        events,
    )
    .with_stall_after(config.stall_after)
    .with_door(door);
    let clock = std::thread::Builder::new()
        .name("cosched-clock".into())
        .spawn(move || agent.run(source))
        .map_err(io_error(Path::new("clock thread")))?;
    let shifted = match config.clock_shift_us {
        0 => String::new(),
        shift => format!("; its clock reads true time {shift:+} µs (--clock-offset-us)"),
    };
    ready(&format!(
        "node {} of cluster '{}', CPUs {}, {} mode, {described}; lets jobs loose \
         {} ms after losing the control plane; jobs add processes here through {}{hydra}{shifted}",
        config.node,
        keys.cluster(),
        config.cpus,
        config.mode,
        config.deadline / 1000,
        config.door.display()
    ));
    cosched_os::notify::notify_or_log(LOG, &format!("READY=1\nSTATUS=node {}", config.node));
    let signal = wait_for_stop(&signals);
    cosched_os::notify::notify_or_log(LOG, "STOPPING=1");
    LOG.info(format_args!(
        "signal {signal}: stopping; jobs are thawed and left running unscheduled"
    ));
    closer.close();
    let stopped = match clock.join() {
        Ok((cgroups, stopped)) => {
            close_cgroups(cgroups, true, LOG);
            stopped
        }
        Err(_) => Err("the clock thread panicked".into()),
    };
    membership.leave(Duration::from_secs(5));
    let _ = std::fs::remove_file(&config.door);
    stopped.map_err(|e| StartError::Config(format!("stopping: {e}")))
}
