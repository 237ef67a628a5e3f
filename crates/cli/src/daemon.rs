//! `cosched daemon` (and `--check`), and the hidden `cosched supervise` the daemon starts per job.

use anyhow::{bail, Context, Result};
use clap::Args;
use cosched_agent::NodeConfig;
use cosched_cgroups::{Delegation, Freezer};
use cosched_core::Partition;
use cosched_daemon::{check, ClusterConfig, DaemonConfig, OnStop, PolicyFile};
use cosched_policy::Policy;
use cosched_proto::Mode;
use std::path::{Path, PathBuf};

pub const DEFAULT_SOCKET: &str = "/run/cosched/cosched.sock";

/// Run the scheduler daemon (API server, job store, scheduler and agent in one process).
#[derive(Args)]
#[command(after_help = "Examples:\n  \
  cosched daemon --check                      what this machine offers, which actuator\n  \
  cosched daemon                              the policy in /etc/cosched/cosched.toml, else\n                                              \
  the defaults (gang, MPL 4, EASY backfilling,\n                                              \
  100 ms slots); state in /var/lib/cosched\n  \
  cosched daemon --config site.toml --mpl 2   the file's policy, but at most 2 slices\n  \
  cosched daemon --mode moderate --quantum-ms 50\n  \
  cosched daemon --state-dir /var/lib/cosched-test --socket /run/cosched-test.sock\n\n\
The scheduling policy (mode, quantum, MPL, partitioner, backfilling, interactive \
preemption, idle time, each class's time limits, per-user limits, memory) comes from the \
policy file (`cosched config --help`); --mode, --quantum-ms, --mpl, --idle-after and \
--interactive-preempt, when given, override the file's values. SIGHUP re-reads the file: the \
time and per-user limits change at once; the log names each other key that changed, which \
takes effect at the next start; an invalid file is refused and the running policy stays. \
The state directory holds the job store and what supervisors keep; it must be owned by root \
and writable by nobody else, nor may any directory above it be (a sticky /tmp is fine as a \
parent, a directory another user made there is not): the daemon refuses one that is not. \
Modes: gang freezes the jobs outside the running slice; moderate gives the running slice all \
the CPU weight and the others almost none; implicit only places jobs (space sharing) and tells \
their MPI and OpenMP libraries to spin briefly and then block; auto measures each job in its \
first seconds and moves it to gang, moderate or implicit; local does nothing (plain Linux, \
the baseline). The mode is every job's default: a job may ask for its own (`run --mode`), \
and one rotation mixes them (not in local mode). SIGTERM or SIGINT stops the daemon cleanly: every job is thawed and left \
running (or cancelled, with --on-stop cancel); a restarted daemon takes them back. Must run as \
root (cgroups, real-time priority, running jobs as their submitters).")]
pub struct DaemonArgs {
    /// Report what the machine offers (freezers, cpuset, cpu weight, real-time priority) and
    /// which actuator would be used, then exit (non-zero if none can be used)
    #[arg(long)]
    pub check: bool,
    /// With --check: print the report as one JSON object: usable (true or false), actuator
    /// (what would stop and start jobs, or null), unusable_because (why none can, or null),
    /// cpus, and features (each {name, available, detail})
    #[arg(long, requires = "check")]
    json: bool,
    /// Where the job store (jobs.sqlite; in etcd with --etcd) and the supervisors' files live
    #[arg(long, default_value = "/var/lib/cosched", value_name = "DIR")]
    state_dir: PathBuf,
    /// The API socket
    #[arg(long, env = "COSCHED_SOCKET", default_value = DEFAULT_SOCKET, value_name = "PATH")]
    socket: PathBuf,
    /// The policy file [default: /etc/cosched/cosched.toml if it exists, else the built-in
    /// defaults]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Slot length: from 10 ms to 10 minutes [default: the policy's, 100]
    #[arg(long, value_name = "MS",
          value_parser = clap::value_parser!(u32).range(10..=600_000))]
    quantum_ms: Option<u32>,
    /// gang, moderate, implicit, auto or local: every job's unless it asks for its own
    /// [default: the policy's, gang]
    #[arg(long)]
    mode: Option<Mode>,
    /// Most time slices (multiprogramming level) in gang and moderate modes [default: the
    /// policy's, 4]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    mpl: Option<u32>,
    /// Processors to schedule, on one machine (in a cluster, each agent's --cpus) [default:
    /// every CPU this process may use]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    procs: Option<u32>,
    /// A job that uses no CPU in its own slots for this long leaves the rotation until it
    /// computes again (0: never) [default: the policy's, 600]
    #[arg(long, value_name = "SECONDS")]
    idle_after: Option<f64>,
    /// Gang mode: a job whose processes have all been off the CPU this long within its slot
    /// lends its processors to the next slices' jobs until the boundary (0: never); also what
    /// an implicit job may use of another job's slot, per processor (0: 5 ms) [default: the
    /// policy's, 0]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(0..=600_000))]
    give_away_after_ms: Option<u32>,
    #[command(flatten)]
    processes: JobProcessArgs,
    /// An interactive job runs in every slot, ahead of batch jobs on its processors, for its
    /// first SECONDS (a quick answer), then time-shares in a slice of its own (0: at once).
    /// Each user (root aside) has one such stretch at a time and one in any six stretches'
    /// time; past it, an interactive job time-shares from its start [default: the policy's,
    /// 10]
    #[arg(long, value_name = "SECONDS")]
    interactive_preempt: Option<f64>,
    /// What a clean stop does to the jobs: leave them running unscheduled, or cancel them
    #[arg(long, default_value = "leave", value_parser = ["leave", "cancel"])]
    on_stop: String,
    /// Name of the cgroup (in each hierarchy) under which the jobs' cgroups are made
    #[arg(long, default_value = "cosched", value_name = "NAME")]
    cgroup_parent: String,
    #[command(flatten)]
    delegation: DelegationArgs,
    /// Force a freezer instead of the best available (the v1 freezer where it is mounted, whose
    /// writes wait for no lock a starting job holds; else v2; else signals): v2, v1 or signals
    /// (on one machine; in a cluster, each agent's). Signals (SIGSTOP/SIGCONT) are the
    /// fallback where no freezer cgroup exists: a job's owner can undo them from outside the
    /// job (SIGCONT, a tracer) and run through other jobs' slots
    #[arg(long, value_parser = ["v2", "v1", "signals"])]
    freezer: Option<String>,
    /// Ended jobs kept in memory for `ps --all` (every record stays in the store)
    #[arg(long, default_value_t = 1000, value_name = "N")]
    keep_ended: usize,
    /// Serve the web console at http://ADDR/ and Prometheus metrics at http://ADDR/metrics: a
    /// port alone is on loopback (127.0.0.1:PORT; 0: any free port, logged); give an address
    /// (0.0.0.0:9464) to be reached from elsewhere. Anyone who can connect may look (the
    /// metrics hold no job id, user or command); the console acts only with a token from
    /// `cosched console-token`
    #[arg(long, value_name = "[HOST:]PORT", value_parser = parse_http)]
    http: Option<std::net::SocketAddr>,
    /// Let users register processes started elsewhere into jobs (the registration API, the C
    /// and MPI libraries; one machine only). A registered process leaves its cgroup for the
    /// job's: limits set on users' cgroups (memory, pids, CPU quota) stop applying to it
    #[arg(long)]
    allow_registration: bool,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// With --etcd: nodes to wait for before scheduling; nodes that join later (same CPU count
    /// and mode) are added to the machine as they come
    #[arg(long, default_value_t = 1, value_name = "N", requires = "etcd")]
    wait_nodes: usize,
    /// With --etcd: seconds the leader key outlives a controller that died (a standby takes
    /// over after this)
    #[arg(long, default_value_t = 3, value_name = "SECONDS", requires = "etcd",
          value_parser = clap::value_parser!(i64).range(1..=60))]
    leader_ttl: i64,
    /// With --etcd: push each write for the agents (orders, generations) to them over TCP
    /// from HOST:PORT (an address of this host every node reaches; port 0: any) the moment
    /// etcd has it; agents still follow etcd, which stays the record. At 1,000 nodes etcd's
    /// own delivery of a generation to every agent took hundreds of milliseconds. Frames are
    /// authenticated, not encrypted (a job's command line and environment cross in the
    /// clear): only on a network no untrusted party can read
    #[arg(long, value_name = "HOST:PORT", requires = "etcd")]
    push_listen: Option<std::net::SocketAddr>,
}

fn parse_http(text: &str) -> Result<std::net::SocketAddr, String> {
    match text.parse::<u16>() {
        Ok(port) => Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port))),
        Err(_) => text
            .parse()
            .map_err(|_| format!("'{text}' is neither a port nor HOST:PORT (127.0.0.1:9464)")),
    }
}

/// Where a cluster's control state lives.
#[derive(Args)]
pub struct ClusterArgs {
    /// Run as a cluster's controller (or agent): etcd members, comma-separated
    /// (https://HOST:PORT,... with --etcd-ca, else http://HOST:PORT,...); without it the
    /// daemon is one machine with its own agent
    #[arg(long, value_delimiter = ',', value_name = "URL,...")]
    etcd: Vec<String>,
    /// TLS to etcd: the CA certificate (PEM) that signed etcd's; with it every --etcd URL must
    /// be https:// (a plain one is refused)
    #[arg(long, value_name = "FILE")]
    etcd_ca: Option<PathBuf>,
    /// This process's client certificate (PEM) for an etcd that requires one
    /// (--client-cert-auth), signed by a CA etcd trusts and without a common name
    #[arg(long, value_name = "FILE", requires_all = ["etcd_ca", "etcd_key"])]
    etcd_cert: Option<PathBuf>,
    /// The key of --etcd-cert (PEM): a file of root's that no one else may read or write. With
    /// it, a process talks to etcd as this node: a job must never be able to read it
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// The cluster's name: its keys live under /cosched/NAME/ in etcd
    #[arg(long = "cluster", default_value = "default", value_name = "NAME")]
    name: String,
    /// etcd's auth: a file holding --etcd-user's password, that only root may read. Without
    /// auth, any process that reaches etcd (a job on a node included) could order the agents
    /// to run anything as anyone
    #[arg(long, value_name = "FILE")]
    etcd_password_file: Option<PathBuf>,
    /// The etcd user to authenticate as
    #[arg(long, default_value = "root", value_name = "NAME")]
    etcd_user: String,
    /// Talk to etcd without auth: only for an etcd no job can reach
    #[arg(long, conflicts_with = "etcd_password_file")]
    etcd_insecure: bool,
}

impl ClusterArgs {
    /// etcd's credentials: from the password file, or none with --etcd-insecure; refused
    /// without either.
    fn credentials(&self) -> Result<Option<cosched_daemon::EtcdCredentials>> {
        if self.etcd.is_empty() {
            return Ok(None);
        }
        let Some(path) = &self.etcd_password_file else {
            if !self.etcd_insecure {
                bail!(
                    "--etcd needs --etcd-password-file (etcd's auth): without it any process \
                     that reaches etcd, a job on a node included, could order the agents to run \
                     anything as root (--etcd-insecure: an etcd no job can reach)"
                );
            }
            return Ok(None);
        };
        Ok(Some(cosched_daemon::EtcdCredentials {
            user: self.etcd_user.clone(),
            password: read_secret(path)?,
        }))
    }

    /// TLS to etcd: the CA, and the client's certificate and key, loaded and checked now.
    fn tls(&self) -> Result<Option<cosched_daemon::EtcdTls>> {
        let Some(ca) = &self.etcd_ca else {
            return Ok(None);
        };
        let identity = self
            .etcd_cert
            .as_ref()
            .zip(self.etcd_key.as_ref())
            .map(|(cert, key)| cosched_daemon::EtcdIdentity {
                cert: cert.clone(),
                key: key.clone(),
            });
        Ok(Some(cosched_daemon::EtcdTls::load(ca, identity.as_ref())?))
    }
}

/// A secret from a file that must be root's and unreadable by anyone else.
fn read_secret(path: &Path) -> Result<String> {
    let bytes = cosched_daemon::read_private(path, "etcd's password")?;
    let secret = String::from_utf8(bytes).with_context(|| {
        format!(
            "{} is not text (it should hold etcd's password)",
            path.display()
        )
    })?;
    let secret = secret.trim_end_matches(['\n', '\r']).to_string();
    if secret.is_empty() {
        bail!(
            "{} is empty (it should hold etcd's password)",
            path.display()
        );
    }
    Ok(secret)
}

/// Sets the policy's values the command line gives; returns their keys.
fn apply_flags(args: &DaemonArgs, policy: &mut Policy) -> Result<Vec<&'static str>> {
    let mut given = Vec::new();
    let s = &mut policy.scheduler;
    if let Some(mode) = args.mode {
        s.mode = mode;
        given.push("scheduler.mode");
    }
    if let Some(quantum_ms) = args.quantum_ms {
        s.quantum_ms = quantum_ms;
        given.push("scheduler.quantum_ms");
    }
    if let Some(mpl) = args.mpl {
        s.mpl = mpl;
        given.push("scheduler.mpl");
    }
    if let Some(ms) = args.give_away_after_ms {
        s.give_away_after_ms = ms;
        given.push("scheduler.give_away_after_ms");
    }
    for (flag, key, value, field) in [
        (
            "--idle-after",
            "scheduler.idle_after",
            args.idle_after,
            &mut s.idle_after,
        ),
        (
            "--interactive-preempt",
            "scheduler.interactive_preempt",
            args.interactive_preempt,
            &mut s.interactive_preempt,
        ),
    ] {
        let Some(value) = value else { continue };
        if !(value.is_finite() && (0.0..=1e9).contains(&value)) {
            bail!("{flag} must be a number of seconds, 0 or more (got {value})");
        }
        *field = (value > 0.0).then_some((value * 1e6) as i64);
        given.push(key);
    }
    Ok(given)
}

pub fn run(args: DaemonArgs) -> Result<()> {
    if args.check {
        return report(args.json);
    }
    let (path, mut policy) = crate::config::load(args.config.as_deref(), Policy::read_trusted)?;
    let overridden = apply_flags(&args, &mut policy)?;
    if !args.cluster.etcd.is_empty() {
        // A controller never touches a process: these belong to the agents.
        if args.procs.is_some() {
            bail!("--procs is for one machine: in a cluster each agent's --cpus says what is scheduled");
        }
        if args.freezer.is_some() {
            bail!("--freezer is for one machine: in a cluster give it to the agents (cosched agent --freezer)");
        }
    }
    let usable = cosched_os::usable_cpus();
    if let Some(procs) = args.procs.filter(|&procs| procs > usable) {
        bail!(
            "--procs {procs} is more than the {usable} CPUs this process may use: jobs' cpusets could name CPUs that do not exist"
        );
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the daemon must run as root (it makes cgroups and runs jobs as their submitters)");
    }
    let config = DaemonConfig {
        state_dir: args.state_dir,
        socket: args.socket,
        policy_file: PolicyFile {
            found: path.is_some(),
            path: path.unwrap_or_else(|| PathBuf::from(cosched_policy::DEFAULT_PATH)),
            read: policy.clone(),
            overridden,
        },
        policy,
        procs: args.procs,
        tasks_per_cpu: args.processes.tasks_per_cpu(),
        time_slice_us: args.processes.time_slice_us(),
        jobs_weight: args.processes.jobs_weight,
        on_stop: if args.on_stop == "cancel" {
            OnStop::Cancel
        } else {
            OnStop::Leave
        },
        cgroup_parent: args.cgroup_parent,
        cgroup_delegation: args.delegation.cgroup_delegation,
        freezer: args.freezer.as_deref().map(freezer),
        supervisor_exe: std::env::current_exe().context("finding this program for supervisors")?,
        keep_ended: args.keep_ended,
        http: args.http,
        allow_registration: args.allow_registration,
        cluster: (!args.cluster.etcd.is_empty()).then_some(ClusterConfig {
            etcd_credentials: args.cluster.credentials()?,
            etcd_tls: args.cluster.tls()?,
            etcd: args.cluster.etcd,
            cluster: args.cluster.name,
            wait_nodes: args.wait_nodes,
            leader_ttl: args.leader_ttl,
            push: args.push_listen,
        }),
    };
    cosched_daemon::serve(config, |banner| cosched_os::Log::new("daemon").info(banner))?;
    Ok(())
}

/// Run a node's agent in a cluster: it joins through etcd, starts and switches the jobs the
/// controller places on this node, on the cluster's slot clock.
#[derive(Args)]
#[command(
    after_help = "Example (two nodes and a controller, one etcd with TLS, client certificates and \
its auth on; docs/cluster-tls.md makes the certificates; TLS below stands for --etcd-ca \
/etc/cosched/tls/ca.pem --etcd-cert /etc/cosched/tls/client.pem --etcd-key \
/etc/cosched/tls/client.key):\n  \
  cosched agent --etcd https://10.0.0.1:2379 TLS --etcd-password-file /etc/cosched/etcd.password \\\n      \
  --node a --cpus 0-7 --address 10.0.0.11\n  \
  cosched agent --etcd https://10.0.0.1:2379 TLS --etcd-password-file /etc/cosched/etcd.password \\\n      \
  --node b --cpus 0-7 --address 10.0.0.12\n  \
  cosched daemon --etcd https://10.0.0.1:2379 TLS --etcd-password-file /etc/cosched/etcd.password \\\n      \
  --wait-nodes 2\n\n\
The agent registers the node under a lease: if it dies, its key goes after --lease-ttl and \
the controller marks the node's jobs lost. If it loses etcd, or no controller holds the \
leader key, for longer than --deadline-ms, it lets its jobs run unscheduled until the control \
plane is back; its jobs' supervisors let them loose at once if the agent itself dies. SIGTERM \
stops it cleanly: its jobs are thawed and left running. Jobs' processes start processes of the \
same job on other nodes through its --door (`cosched launch-remote`, set up for Open MPI's \
mpirun in every job). Must run as root. scripts/cluster-lab runs a whole cluster on one machine."
)]
pub struct AgentArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// This node's name in the cluster (letters, digits, '-', '_', '.')
    #[arg(long, value_name = "NAME")]
    node: String,
    /// The CPUs cosched schedules here, e.g. 0-7 or 2,3 [default: every CPU this process may use]
    #[arg(long, value_name = "LIST")]
    cpus: Option<Partition>,
    /// gang, moderate, implicit, auto or local (the controller's --mode must be the same)
    #[arg(long, default_value = "gang")]
    mode: Mode,
    /// Where the supervisors' files and detached jobs' output live [default:
    /// /var/lib/cosched/node-NAME]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Name of the cgroup under which this node's job cgroups are made [default: cosched-NAME]
    #[arg(long, value_name = "NAME")]
    cgroup_parent: Option<String>,
    #[command(flatten)]
    delegation: DelegationArgs,
    /// Force a freezer instead of the best available (the v1 freezer where it is mounted, else
    /// v2, else signals): v2, v1 or signals. Signals (SIGSTOP/SIGCONT) are the fallback where
    /// no freezer cgroup exists: a job's owner can undo them from outside the job (SIGCONT, a
    /// tracer) and run through other jobs' slots
    #[arg(long, value_parser = ["v2", "v1", "signals"])]
    freezer: Option<String>,
    /// A job using no CPU in its own slots this long leaves the rotation (0: never)
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    idle_after: f64,
    /// Gang mode: a job whose processes have all been off the CPU this long within its slot
    /// lends this node's processors to the next slices' jobs until the boundary (0: never);
    /// also what an implicit job may use of another job's slot, per processor (0: 5 ms)
    #[arg(long, default_value_t = 0, value_name = "MS",
          value_parser = clap::value_parser!(u32).range(0..=600_000))]
    give_away_after_ms: u32,
    /// Report a job whose processes here did nothing (no CPU, no I/O) in this long of its own
    /// slots as stalled (0: never); the controller's policy (`[stall]`) says what is done
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    stall_after: f64,
    #[command(flatten)]
    processes: JobProcessArgs,
    /// Let every job loose after losing etcd or the controller for this long. Longer than an
    /// etcd leader election (writes were back 2.1 s after a three-member etcd lost its leader
    /// here; 3 s was not always enough under load), so that one does not let jobs loose
    #[arg(long, default_value_t = 5000, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(50..=600_000))]
    deadline_ms: u64,
    /// Seconds the node's key outlives an agent that died or lost etcd (longer than
    /// --deadline-ms: jobs are let loose while the node is still a member); then the controller
    /// marks its jobs lost
    #[arg(long, default_value_t = 10, value_name = "SECONDS",
          value_parser = clap::value_parser!(i64).range(1..=60))]
    lease_ttl: i64,
    /// Where other nodes reach this one for MPI (a host name or IPv4 address, as it appears
    /// in the hostfiles cosched writes for jobs) [default: the node name]
    #[arg(long, value_name = "ADDR")]
    address: Option<String>,
    /// The socket through which a job's processes (`cosched launch-remote`, run by mpirun)
    /// ask for processes on other nodes [default: /run/cosched-agent-NAME.sock]
    #[arg(long, value_name = "PATH")]
    door: Option<PathBuf>,
    /// For tests and demonstrations only: the agent's clock reads true time plus this many µs
    /// (negative: behind), so that what clock error does to a cluster shows on one machine
    /// (network namespaces share one clock). Its boundary log stays on the true clock.
    #[arg(long, default_value_t = 0, value_name = "US", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i64).range(-10_000_000..=10_000_000))]
    clock_offset_us: i64,
}

/// A flag's number of seconds in µs; 0: never.
fn seconds_or_never(flag: &str, seconds: f64) -> Result<Option<i64>> {
    if !(seconds.is_finite() && seconds >= 0.0) {
        bail!("{flag} must be a number of seconds, 0 or more (got {seconds})");
    }
    Ok((seconds > 0.0).then_some((seconds * 1e6) as i64))
}

/// How the jobs' processes are held on a node (the daemon's and the agent's flags).
#[derive(clap::Args)]
pub struct JobProcessArgs {
    /// Each job may have this many tasks (processes and threads) per processor it has, through
    /// the pids controller: a job of thousands of tasks makes its every freeze and thaw long,
    /// and one beyond it cannot fork (0: no cap)
    #[arg(long, default_value_t = 512, value_name = "N")]
    tasks_per_cpu: u64,
    /// Each job process's time slice under the kernel's fair scheduler, in µs, from 100 to
    /// 100000 (Linux 6.12 on; 0: the kernel's own, 0.7 ms x (1 + log2 CPUs)): how long it keeps
    /// its processor against a task waking there, such as the kernel threads completing a
    /// job's disk writes, which otherwise wait behind a gang's process for milliseconds
    #[arg(long, default_value_t = 100, value_name = "US", value_parser = time_slice)]
    time_slice_us: u32,
    /// On each processor they run on, the jobs together weigh as much as this many processes
    /// outside cosched (a client, a system daemon): a rank thawed where such a process ran
    /// meanwhile gets its processor back sooner. It is the jobs' cgroup parent's weight, N x
    /// processors x 100 on cgroup v2's scale (cpu.weight; on v1, cpu.shares 10.24 times
    /// that), at most 10,000; 0: the kernel's default, the jobs together weigh one process
    #[arg(long, default_value_t = 5, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=100))]
    jobs_weight: u32,
}

impl JobProcessArgs {
    fn tasks_per_cpu(&self) -> Option<u64> {
        (self.tasks_per_cpu > 0).then_some(self.tasks_per_cpu)
    }

    fn time_slice_us(&self) -> Option<u32> {
        (self.time_slice_us > 0).then_some(self.time_slice_us)
    }
}

/// `--time-slice-us`: 0, or within the kernel's bounds (it would clamp a value outside them
/// without a word).
fn time_slice(text: &str) -> Result<u32, String> {
    use cosched_os::slice::{LONGEST_US, SHORTEST_US};
    match text.parse::<u32>() {
        Ok(us) if us == 0 || (SHORTEST_US..=LONGEST_US).contains(&us) => Ok(us),
        _ => Err(format!(
            "must be 0 (the kernel's own) or from {SHORTEST_US} to {LONGEST_US} µs (the kernel's bounds)"
        )),
    }
}

/// Where the jobs' cgroups go under systemd (the daemon's and the agent's flag).
#[derive(clap::Args)]
pub struct DelegationArgs {
    /// Make the jobs' cgroups inside this process's own cgroup v2 group, after moving this
    /// process into its leaf 'daemon' (a systemd unit with Delegate=yes): auto when systemd
    /// marked that group delegated, yes always, no never (the top of each cgroup tree)
    #[arg(long, default_value = "auto", value_name = "auto|yes|no")]
    cgroup_delegation: Delegation,
}

pub fn agent(args: AgentArgs) -> Result<()> {
    if args.cluster.etcd.is_empty() {
        bail!("--etcd is required: the agent takes its orders from the cluster's etcd");
    }
    let idle_after = seconds_or_never("--idle-after", args.idle_after)?;
    let stall_after = seconds_or_never("--stall-after", args.stall_after)?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the agent must run as root (it makes cgroups and runs jobs as their submitters)");
    }
    let cpus = args
        .cpus
        .unwrap_or_else(|| Partition::block(0, cosched_os::usable_cpus()));
    let config = NodeConfig {
        etcd_credentials: args.cluster.credentials()?,
        etcd_tls: args.cluster.tls()?,
        etcd: args.cluster.etcd,
        cluster: args.cluster.name,
        state_dir: args
            .state_dir
            .unwrap_or_else(|| PathBuf::from(format!("/var/lib/cosched/node-{}", args.node))),
        cgroup_delegation: args.delegation.cgroup_delegation,
        cgroup_parent: args
            .cgroup_parent
            .unwrap_or_else(|| format!("cosched-{}", args.node)),
        door: args
            .door
            .unwrap_or_else(|| PathBuf::from(format!("/run/cosched-agent-{}.sock", args.node))),
        node: args.node,
        cpus,
        mode: args.mode,
        freezer: args.freezer.as_deref().map(freezer),
        supervisor_exe: std::env::current_exe().context("finding this program for supervisors")?,
        idle_after,
        stall_after,
        give_away_after: cosched_agent::give_away_after(args.give_away_after_ms),
        tasks_per_cpu: args.processes.tasks_per_cpu(),
        time_slice_us: args.processes.time_slice_us(),
        jobs_weight: args.processes.jobs_weight,
        deadline: args.deadline_ms as i64 * 1_000,
        lease_ttl: args.lease_ttl,
        address: args.address,
        clock_shift_us: args.clock_offset_us,
    };
    cosched_agent::serve_node(config, |banner| cosched_os::Log::new("agent").info(banner))?;
    Ok(())
}

fn freezer(name: &str) -> Freezer {
    match name {
        "v2" => Freezer::V2,
        "v1" => Freezer::V1,
        _ => Freezer::Signals,
    }
}

fn report(json: bool) -> Result<()> {
    let report = check::check();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for f in &report.features {
            println!(
                "{:<20} {:<4} {}",
                f.name,
                if f.available { "yes" } else { "no" },
                f.detail
            );
        }
        println!("{:<20}      {}", "processors", report.cpus);
        match &report.actuator {
            Ok(description) => println!("{:<20}      {description}", "actuator"),
            Err(why) => println!("{:<20}      none: {why}", "actuator"),
        }
    }
    if !report.usable() {
        bail!("this machine cannot run the daemon (see above)");
    }
    Ok(())
}

/// Internal: the per-job supervisor, started by the daemon (its spec and connections are
/// inherited descriptors).
pub fn supervise() -> Result<()> {
    cosched_agent::supervisor::supervise()?;
    Ok(())
}
