//! `cosched-bench control-plane`: the cluster's control plane alone, at 10, 100 and 1,000
//! nodes: a real etcd (auth on, data on tmpfs), the real controller (`cosched daemon --etcd`)
//! and N node agents in this process, each the real agent (its lease, its order watch, its
//! outbox, its clock thread) on the fake actuator, so no job has processes. Jobs run
//! `sleep S`: the agent of a job's first node reports it ended S seconds after its start.
//!
//! - Fan-out: for each generation, from the controller's stamp (`published_us`) to the last
//!   node taking it or a later one (every node is sent every generation's header; an agent
//!   behind takes the newest of those queued).
//! - etcd: writes (raft proposals committed), puts, deletes, transactions, reads and client
//!   bytes per second, from etcd's own `/metrics`; its CPU and memory.
//! - The controller: CPU (a share of one CPU) and resident memory, from `/proc`.
//! - etcd's own floor, before any agent starts: one put to a key N watchers follow; and the
//!   leader's push alone: one header pushed to N connections.
//! - `--push on,off`: the controller with `--push-listen` (its writes also pushed to the
//!   agents as etcd commits them) and without, each size measured both ways.
//!
//! Two phases per size: steady (the machine full, nothing submitted or ending) and churn (a
//! job submitted every `1/rate` s, each ending 5 s later). Then etcd is stopped for a few
//! seconds (`--stall-etcd-s`, shorter than the agents' deadline) and let go: how many agents
//! let their jobs loose, and how long until every one has the control plane again (at 1,000
//! nodes one build's agents took 96 s: each retried every 100 ms on a new connection).
//!
//! `--pool REPORT...` reads earlier runs' reports and pools their churn generations
//! (`pool.rs`).

mod pool;

use crate::daemon::{Daemon, DaemonSpec};
use crate::figures::{command_line, summary, Provenance};
use anyhow::{bail, Context, Result};
use cosched_agent::{renewal_period, NodeAgent, NodeSettings};
use cosched_cgroups::Fake;
use cosched_cluster::{etcd_client, join, whoami, Closer, EtcdSink, Keys, Membership};
use cosched_core::{JobId, Micros, Partition};
use cosched_etcd::testing::Etcd;
use cosched_etcd::{Credentials, Tls};
use cosched_os::now_micros;
use cosched_proto::{
    Command, Ending, Event, EventSink, ExitInfo, Mode, NodeInfo, PlanSource, Received, Summary,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct ControlPlaneArgs {
    /// Cluster sizes to measure, in nodes
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    nodes: Vec<usize>,
    /// CPUs each (fake) node offers
    #[arg(long, default_value_t = 2)]
    cpus_per_node: u32,
    /// Nodes each job spans
    #[arg(long, default_value_t = 4)]
    job_nodes: u32,
    /// Slot length of the rotation
    #[arg(long, default_value_t = 100)]
    quantum_ms: u64,
    /// Seconds measured with the machine full and nothing changing
    #[arg(long, default_value_t = 60)]
    steady_s: u64,
    /// Seconds measured while jobs start and end
    #[arg(long, default_value_t = 60)]
    churn_s: u64,
    /// Jobs submitted per second while churning (each ends 5 s after it starts)
    #[arg(long, default_value_t = 1.0)]
    churn_rate: f64,
    /// etcd over TLS with client certificates required (--client-cert-auth), as a real
    /// cluster's should be; without it plain HTTP, as the recorded figures were measured
    #[arg(long)]
    etcd_tls: bool,
    /// After the churn, etcd is stopped (SIGSTOP) this long, then let go: how long until
    /// every agent has the control plane again (0: not measured)
    #[arg(long, default_value_t = 3)]
    stall_etcd_s: u64,
    /// How the controller reaches the agents besides etcd, each measured in turn per size:
    /// `on` (`cosched daemon --push-listen`: its writes pushed to the agents over TCP as etcd
    /// commits them), `off` (the agents follow etcd alone); `on,off` compares them
    #[arg(long, value_delimiter = ',', default_value = "on")]
    push: Vec<Push>,
    /// Only etcd's delivery of one put to N watchers beside the push of one header to N
    /// connections, each alone, at every size: no controller, no agents
    #[arg(long)]
    floors_only: bool,
    /// Instead of measuring: read the reports earlier runs wrote (their --json files) and
    /// pool their churn generations by size, for a tail that is not one run's slowest (a
    /// 40 s run at 1 s slots has about 80 generations, so its p99 is its worst); no root
    #[arg(long, num_args = 1.., value_name = "REPORT")]
    pool: Vec<PathBuf>,
    /// Also write the figures as JSON here (the controller's log of each size goes to
    /// target/bench/control-plane-N.log) [default when measuring:
    /// target/bench/control-plane.json; when pooling, only if given]
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Push {
    On,
    Off,
}

/// How long the agents may lose the control plane before letting jobs loose, and their
/// lease: the product's defaults (`cosched agent --deadline-ms 5000 --lease-ttl 10`).
const DEADLINE_US: Micros = 5_000_000;
const LEASE_TTL_S: i64 = 10;
/// How long a churn job runs.
const CHURN_JOB_S: u64 = 5;
/// The churn's gaps between submissions are drawn from this seed (the same on every run).
const CHURN_SEED: u64 = 0x00c0_5c4e_d000_0002;
/// How long the agents have to come back after etcd's stall; past it the stall is reported
/// as not recovered.
const STALL_PATIENCE: Duration = Duration::from_secs(120);
const CLUSTER: &str = "bench";

pub fn run(args: ControlPlaneArgs) -> Result<()> {
    if !args.pool.is_empty() {
        return pool::run(&args.pool, args.json.as_deref());
    }
    if unsafe { libc::geteuid() } != 0 {
        bail!("the control-plane benchmark needs root (the controller's state, etcd's auth file)");
    }
    raise_descriptor_limit()?;
    if args.floors_only {
        return floors(&args);
    }
    let mut rows = Vec::new();
    println!(
        "control plane: N agents on the fake actuator in this process, the real controller and \
         a real etcd; {} CPUs per node, jobs of {} nodes, {} ms slots; steady {} s, churn {} s at \
         {} jobs/s",
        args.cpus_per_node,
        args.job_nodes,
        args.quantum_ms,
        args.steady_s,
        args.churn_s,
        args.churn_rate
    );
    for &nodes in &args.nodes {
        for &push in &args.push {
            let row = measure(&args, nodes, push).with_context(|| format!("{nodes} nodes"))?;
            print_row(&row);
            rows.push(row);
        }
    }
    let report = Report {
        provenance: Provenance::now(command_line("bench/control-plane")),
        rows,
    };
    write_report(&report_path(&args), &report)
}

fn report_path(args: &ControlPlaneArgs) -> PathBuf {
    args.json
        .clone()
        .unwrap_or_else(|| PathBuf::from("target/bench/control-plane.json"))
}

fn write_report(path: &std::path::Path, report: &impl Serialize) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("figures in {}", path.display());
    Ok(())
}

/// One line of a floor: a write alone to `nodes` readers, `how`.
fn print_floor(nodes: usize, how: &str, figures: &Summary) {
    println!(
        "{nodes:>6} nodes {how:<40} p50/p99/max {:.1}/{:.1}/{:.1} ms",
        figures.p50 as f64 / 1e3,
        figures.p99 as f64 / 1e3,
        figures.max as f64 / 1e3
    );
}

/// etcd's delivery and the push, each alone, at each size.
fn floors(args: &ControlPlaneArgs) -> Result<()> {
    #[derive(Serialize)]
    struct Floor {
        nodes: usize,
        watch_floor_us: Summary,
        push_floor_us: Summary,
    }
    #[derive(Serialize)]
    struct Floors {
        provenance: Provenance,
        floors: Vec<Floor>,
    }
    let mut floors = Vec::new();
    for &nodes in &args.nodes {
        let mut etcd = Etcd::start_with("control-plane", 1, 300, args.etcd_tls);
        etcd.enable_auth();
        let floor = Floor {
            nodes,
            watch_floor_us: watch_floor(&etcd, nodes)?,
            push_floor_us: push_floor(nodes)?,
        };
        drop(etcd);
        print_floor(
            nodes,
            "etcd alone: one put to N watchers",
            &floor.watch_floor_us,
        );
        print_floor(
            nodes,
            "push alone: one header to N agents",
            &floor.push_floor_us,
        );
        floors.push(floor);
    }
    let report = Floors {
        provenance: Provenance::now(command_line("bench/control-plane")),
        floors,
    };
    write_report(&report_path(args), &report)
}

#[derive(Serialize)]
struct Report {
    provenance: Provenance,
    rows: Vec<Row>,
}

#[derive(Serialize)]
struct Row {
    nodes: usize,
    /// Whether the controller pushed its writes to the agents (else they followed etcd alone).
    push: Push,
    /// etcd alone, before any agent: one put to a key `nodes` watchers follow (threads of this
    /// process, nothing else running), from the put to the last watcher having it (µs).
    watch_floor_us: Summary,
    /// The leader's push alone, before any agent starts: one header pushed to `nodes`
    /// connections (threads of this process, nothing else running), from the push to the
    /// last having it (µs).
    push_floor_us: Summary,
    /// Seconds from the first agent's start to the controller seeing them all.
    join_s: f64,
    jobs_running: usize,
    /// Submissions the controller refused because etcd did not take the job's record within
    /// its timeout (each tried again a second later).
    submissions_refused: u32,
    steady: Phase,
    churn: Phase,
    etcd_stall: Option<Stall>,
}

/// etcd stopped for a while, shorter than the agents' deadline, then let go.
#[derive(Serialize)]
struct Stall {
    stopped_s: f64,
    /// Times an agent let its jobs loose (the control plane lost past its deadline); one agent
    /// may count twice.
    agents_adrift: usize,
    /// From etcd let go to no agent adrift; none if some still were after `STALL_PATIENCE`.
    recovered_s: Option<f64>,
}

#[derive(Serialize)]
struct Phase {
    seconds: f64,
    /// Generations every node took in the phase.
    generations: usize,
    /// From the controller's stamp to the last node taking it (µs).
    fan_out_us: Summary,
    /// From the stamp to the first node taking it (µs): the controller's own path (its
    /// store write, then the generation's) plus etcd's commit; the rest of the fan-out is
    /// etcd's delivery to every watcher and the agents' CPU.
    first_node_us: Summary,
    /// From the stamp to each node taking it (µs).
    delivery_us: Summary,
    /// Each generation, in the order stamped: where the tail comes from.
    each: Vec<Spread>,
    etcd: EtcdRates,
    controller: ProcessLoad,
    etcd_process: ProcessLoad,
    /// This process: the N agents.
    agents: ProcessLoad,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct EtcdRates {
    /// Raft proposals committed per second: every write, lease grants and revocations.
    writes_per_s: f64,
    writes_per_node_per_s: f64,
    puts_per_s: f64,
    deletes_per_s: f64,
    txns_per_s: f64,
    reads_per_s: f64,
    lease_renewals_per_s: f64,
    received_bytes_per_s: f64,
    sent_bytes_per_s: f64,
}

#[derive(Serialize, Deserialize)]
struct ProcessLoad {
    /// CPU time over wall time (1.0: one CPU busy).
    cpu: f64,
    rss_mb: f64,
}

fn print_row(row: &Row) {
    print_floor(
        row.nodes,
        "etcd alone: one put to N watchers",
        &row.watch_floor_us,
    );
    print_floor(
        row.nodes,
        "push alone: one header to N agents",
        &row.push_floor_us,
    );
    let push = match row.push {
        Push::On => "pushed",
        Push::Off => "etcd",
    };
    for (name, phase) in [("steady", &row.steady), ("churn", &row.churn)] {
        println!(
            "{:>6} nodes {push:<6} {:<6} gens {:>4}  fan-out p50/p99/max {:>6.1}/{:>6.1}/{:>6.1} ms  \
             first node p50/p99 {:>6.1}/{:>6.1} ms  etcd writes/s {:>7.1} ({:.3}/node)  bytes in/out/s {:>9.0}/{:>10.0}  \
             controller {:.3} CPU {:>5.1} MB  etcd {:.3} CPU  agents {:.3} CPU",
            row.nodes,
            name,
            phase.generations,
            phase.fan_out_us.p50 as f64 / 1e3,
            phase.fan_out_us.p99 as f64 / 1e3,
            phase.fan_out_us.max as f64 / 1e3,
            phase.first_node_us.p50 as f64 / 1e3,
            phase.first_node_us.p99 as f64 / 1e3,
            phase.etcd.writes_per_s,
            phase.etcd.writes_per_node_per_s,
            phase.etcd.received_bytes_per_s,
            phase.etcd.sent_bytes_per_s,
            phase.controller.cpu,
            phase.controller.rss_mb,
            phase.etcd_process.cpu,
            phase.agents.cpu,
        );
    }
}

fn measure(args: &ControlPlaneArgs, nodes: usize, push: Push) -> Result<Row> {
    // etcd's own token lifetime: a second's (the tests') would make re-authentication, a
    // write, most of what is measured.
    let mut etcd = Etcd::start_with("control-plane", 1, 300, args.etcd_tls);
    let credentials = etcd.enable_auth();
    let watch_floor_us = watch_floor(&etcd, nodes)?;
    let push_floor_us = push_floor(nodes)?;
    let urls: Vec<String> = etcd.url.split(',').map(String::from).collect();
    let keys = Keys::new(CLUSTER)?;
    let state = RemovedAtEnd(PathBuf::from(format!(
        "/dev/shm/cosched-cp-{}",
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&state.0);
    let arrivals = Arc::new(Arrivals::default());
    let health = Arc::new(Health::default());
    let fleet = Fleet {
        urls,
        credentials,
        tls: etcd.tls().cloned(),
        keys,
        cpus: args.cpus_per_node,
        state: state.0.clone(),
        arrivals: Arc::clone(&arrivals),
        health: Arc::clone(&health),
    };
    let joining = Instant::now();
    // One node first: the controller waits for one before it serves.
    let mut agents = vec![fleet.start(0)?];
    let mut extra = etcd.flags();
    extra.extend(["--cluster", CLUSTER, "--wait-nodes", "1", "--mpl", "4"].map(String::from));
    if push == Push::On {
        extra.extend(["--push-listen", "127.0.0.1:0"].map(String::from));
    }
    let daemon = Daemon::start(&DaemonSpec {
        mode: "gang".into(),
        quantum_ms: args.quantum_ms,
        freezer: None,
        extra,
    })?;
    for i in 1..nodes {
        agents.push(fleet.start_patiently(i)?);
        if (i + 1) % 250 == 0 {
            eprintln!("  {} agents joined", i + 1);
        }
    }
    wait_for_nodes(&daemon, nodes)?;
    let join_s = joining.elapsed().as_secs_f64();

    // Two slices' worth of long jobs: every node busy, nothing changing.
    let width = args.job_nodes * args.cpus_per_node;
    let fill = (2 * nodes as u32 * args.cpus_per_node).div_ceil(width);
    let output = daemon.dir().join("jobs.out");
    let long = ["sleep".to_string(), "1000000".to_string()];
    let refused = std::cell::Cell::new(0);
    let submit = |argv: &[String]| submit_patiently(&daemon, width, &output, argv, &refused);
    for _ in 0..fill {
        submit(&long)?;
    }
    let jobs_running = settle(&daemon, fill as usize)?;
    eprintln!("  {jobs_running} of {fill} jobs running; measuring");
    let steady = phase(&etcd, &daemon, nodes, &arrivals, args.steady_s, || Ok(()))?;

    let short = ["sleep".to_string(), CHURN_JOB_S.to_string()];
    let every = Duration::from_secs_f64(1.0 / args.churn_rate);
    // Gaps of half to one and a half times `every`, from a fixed seed: at a fixed period (a
    // whole number of slots) every generation of a run was decided at one moment of the slot,
    // set by when the run began, and a run whose moment fell beside the boundaries, where
    // every agent's clock works, measured another fan-out than one whose moment did not.
    let mut gaps = cosched_sim::rng::Rng::new(CHURN_SEED);
    let mut next = Instant::now();
    let churn = phase(&etcd, &daemon, nodes, &arrivals, args.churn_s, || {
        if Instant::now() >= next {
            submit(&short)?;
            next += every.mul_f64(gaps.between(0.5, 1.5));
        }
        Ok(())
    })?;

    let etcd_stall = match args.stall_etcd_s {
        0 => None,
        seconds => Some(stall(&etcd, &health, Duration::from_secs(seconds))?),
    };

    // The controller's log, beside the figures: what it said of the nodes and jobs.
    let log = report_path(args).with_file_name(format!("control-plane-{nodes}.log"));
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::copy(daemon.dir().join("daemon.log"), &log)
        .with_context(|| format!("keeping the controller's log in {}", log.display()))?;
    // The agents first, all told at once: with the controller gone first, every agent still
    // running warned that the control plane was lost (hundreds of lines at 1,000 nodes).
    for agent in &agents {
        agent.closer.close();
    }
    for agent in agents {
        agent.stop();
    }
    daemon.stop()?;
    drop(etcd);
    Ok(Row {
        nodes,
        push,
        watch_floor_us,
        push_floor_us,
        join_s,
        jobs_running,
        submissions_refused: refused.get(),
        steady,
        churn,
        etcd_stall,
    })
}

/// Stops etcd for `stopped`, lets it go, and waits until no agent is adrift.
fn stall(etcd: &Etcd, health: &Health, stopped: Duration) -> Result<Stall> {
    let pids = etcd.pids();
    let signal = |signal| {
        for &pid in &pids {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(pid as i32, signal) };
        }
    };
    let before = health.ever.load(Ordering::SeqCst);
    signal(libc::SIGSTOP);
    std::thread::sleep(stopped);
    signal(libc::SIGCONT);
    let let_go = Instant::now();
    // An agent notices its deadline passed only when it looks: give it that look.
    std::thread::sleep(Duration::from_millis(500));
    let recovered_s = loop {
        if health.adrift.load(Ordering::SeqCst) == 0 {
            break Some(let_go.elapsed().as_secs_f64());
        }
        if let_go.elapsed() > STALL_PATIENCE {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stall = Stall {
        stopped_s: stopped.as_secs_f64(),
        agents_adrift: health.ever.load(Ordering::SeqCst) - before,
        recovered_s,
    };
    eprintln!(
        "  etcd stopped {:.0} s: {} agents adrift, {}",
        stall.stopped_s,
        stall.agents_adrift,
        recovered_s.map_or_else(
            || format!("some still adrift {} s on", STALL_PATIENCE.as_secs()),
            |s| format!("all back {s:.1} s after")
        )
    );
    Ok(stall)
}

/// How many agents are adrift now, and how many times one went adrift.
#[derive(Default)]
struct Health {
    adrift: AtomicUsize,
    ever: AtomicUsize,
}

/// A directory removed when the measure ends, however it ends (a failed run left the
/// agents' state, tens of MB, in /dev/shm).
struct RemovedAtEnd(PathBuf);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How many puts the watch floor times.
const FLOOR_PUTS: usize = 20;

/// etcd's fan-out alone: `watchers` threads each follow one key on a watch of its own (one
/// client, so one authentication), and 20 puts 200 ms apart carry their own time; for each
/// put, how long until the last watcher had it.
/// For each write of a floor measurement, by its stamp: when the last reader had it.
#[derive(Default)]
struct LastArrivals(Mutex<BTreeMap<Micros, Micros>>);

impl LastArrivals {
    fn note(&self, stamp: Micros, now: Micros) {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let latest = last.entry(stamp).or_insert(now);
        *latest = (*latest).max(now);
    }

    /// From each stamp to its last reader (µs).
    fn fan_out(&self) -> Summary {
        let last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let fan_out: Vec<u64> = last
            .iter()
            .map(|(stamp, latest)| (latest - stamp).max(0) as u64)
            .collect();
        summary(&fan_out)
    }
}

/// The leader's push alone: `agents` threads each keep a push connection (as an agent does);
/// [`FLOOR_PUTS`] headers are pushed, each stamped with its moment.
fn push_floor(agents: usize) -> Result<Summary> {
    let pusher = cosched_cluster::Pusher::start("127.0.0.1:0".parse()?)?;
    let arrivals = Arc::new(LastArrivals::default());
    let threads: Vec<JoinHandle<()>> = (0..agents)
        .map(|i| {
            let (offer, arrivals) = (pusher.offer(), Arc::clone(&arrivals));
            std::thread::spawn(move || {
                let Ok(mut link) = cosched_cluster::PushLink::connect(&offer, &format!("n{i}"))
                else {
                    return;
                };
                let mut seen = 0;
                while seen < FLOOR_PUTS {
                    let generation = match link.receive() {
                        Ok(cosched_cluster::Pushed::Header { generation, .. }) => generation,
                        Ok(_) => continue,
                        Err(_) => return,
                    };
                    seen += 1;
                    arrivals.note(generation.published_us, now_micros());
                }
            })
        })
        .collect();
    let joined = Instant::now();
    while pusher.connected() < agents {
        if joined.elapsed() > Duration::from_secs(60) {
            bail!(
                "{} of {agents} push connections after 60 s",
                pusher.connected()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for number in 1..=FLOOR_PUTS as u64 {
        std::thread::sleep(Duration::from_millis(200));
        let header = cosched_proto::Generation {
            protocol: cosched_proto::PROTOCOL_VERSION,
            number,
            published_us: now_micros(),
            epoch_us: 0,
            quantum_us: 100_000,
            first_slot: 0,
            first_slice: 0,
            slices: vec![Default::default(); 2],
        };
        pusher.header(header, number as i64);
    }
    for thread in threads {
        let _ = thread.join();
    }
    Ok(arrivals.fan_out())
}

fn watch_floor(etcd: &Etcd, watchers: usize) -> Result<Summary> {
    const KEY: &str = "/floor/key";
    let client = Arc::new(etcd.client());
    let from = client.put(KEY, b"0", None)? + 1;
    let arrivals = Arc::new(LastArrivals::default());
    let ready = Arc::new(std::sync::Barrier::new(watchers + 1));
    let threads: Vec<JoinHandle<()>> = (0..watchers)
        .map(|_| {
            let (client, arrivals, ready) = (
                Arc::clone(&client),
                Arc::clone(&arrivals),
                Arc::clone(&ready),
            );
            std::thread::spawn(move || {
                let watch = client.watch(KEY, from);
                ready.wait();
                let Ok(mut watch) = watch else { return };
                let mut seen = 0;
                while seen < FLOOR_PUTS {
                    let Ok(batch) = watch.next_batch() else {
                        return;
                    };
                    let now = now_micros();
                    for event in batch {
                        if let cosched_etcd::WatchEvent::Put(kv) = event {
                            let stamp: Micros =
                                String::from_utf8_lossy(&kv.value).parse().unwrap_or(0);
                            arrivals.note(stamp, now);
                            seen += 1;
                        }
                    }
                }
            })
        })
        .collect();
    ready.wait();
    for _ in 0..FLOOR_PUTS {
        std::thread::sleep(Duration::from_millis(200));
        client.put(KEY, now_micros().to_string().as_bytes(), None)?;
    }
    for thread in threads {
        let _ = thread.join();
    }
    Ok(arrivals.fan_out())
}

/// Waits (a minute at most) until the controller lists `wanted` nodes, none of them gone.
fn wait_for_nodes(daemon: &Daemon, wanted: usize) -> Result<()> {
    let start = Instant::now();
    loop {
        let out = daemon.command(&["nodes", "--json"]).output()?;
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let present = listed.as_array().map_or(0, |nodes| {
            nodes.iter().filter(|n| n["left"] != true).count()
        });
        if present == wanted {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("the controller lists {present} of {wanted} nodes after a minute");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until `submitted` jobs are placed (or two minutes); returns how many run.
fn settle(daemon: &Daemon, submitted: usize) -> Result<usize> {
    let start = Instant::now();
    loop {
        let running = daemon
            .jobs()?
            .iter()
            .filter(|j| j.state.to_string() == "running")
            .count();
        if running == submitted || start.elapsed() > Duration::from_secs(120) {
            // Every node has had time to take the last generation.
            std::thread::sleep(Duration::from_secs(3));
            return Ok(running);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// etcd's counters and the CPU seconds of the controller, etcd and this process (the agents).
struct Snapshot {
    etcd: Metrics,
    controller_s: f64,
    etcd_s: f64,
    agents_s: f64,
}

impl Snapshot {
    fn take(etcd: &Etcd, daemon: &Daemon, etcd_pid: u32) -> Result<Snapshot> {
        Ok(Snapshot {
            etcd: etcd_metrics(&etcd.metrics_url)?,
            controller_s: cpu_seconds(daemon.pid())?,
            etcd_s: cpu_seconds(etcd_pid)?,
            agents_s: cpu_seconds(std::process::id())?,
        })
    }
}

/// Measures `seconds` of the control plane while `act` is called every 50 ms.
fn phase(
    etcd: &Etcd,
    daemon: &Daemon,
    nodes: usize,
    arrivals: &Arrivals,
    seconds: u64,
    mut act: impl FnMut() -> Result<()>,
) -> Result<Phase> {
    let etcd_pid = etcd.pids()[0];
    let before = Snapshot::take(etcd, daemon, etcd_pid)?;
    let start_us = now_micros();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(seconds) {
        act()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let wall = start.elapsed().as_secs_f64();
    let after = Snapshot::take(etcd, daemon, etcd_pid)?;
    let end_us = now_micros();
    let rate = |name: &str| (after.etcd.get(name) - before.etcd.get(name)) / wall;
    let writes = rate("etcd_server_proposals_committed_total");
    let taken = arrivals.between(start_us, end_us, nodes);
    Ok(Phase {
        seconds: wall,
        generations: taken.fan_out.len(),
        fan_out_us: summary(&taken.fan_out),
        first_node_us: summary(&taken.first_node),
        delivery_us: summary(&taken.delivery),
        each: taken.each,
        etcd: EtcdRates {
            writes_per_s: writes,
            writes_per_node_per_s: writes / nodes as f64,
            puts_per_s: rate("etcd_mvcc_put_total"),
            deletes_per_s: rate("etcd_mvcc_delete_total"),
            txns_per_s: rate("etcd_mvcc_txn_total"),
            reads_per_s: rate("etcd_mvcc_range_total"),
            lease_renewals_per_s: rate("etcd_debugging_lease_renewed_total"),
            received_bytes_per_s: rate("etcd_network_client_grpc_received_bytes_total"),
            sent_bytes_per_s: rate("etcd_network_client_grpc_sent_bytes_total"),
        },
        controller: ProcessLoad {
            cpu: (after.controller_s - before.controller_s) / wall,
            rss_mb: rss_mb(daemon.pid()),
        },
        etcd_process: ProcessLoad {
            cpu: (after.etcd_s - before.etcd_s) / wall,
            rss_mb: rss_mb(etcd_pid),
        },
        agents: ProcessLoad {
            cpu: (after.agents_s - before.agents_s) / wall,
            rss_mb: rss_mb(std::process::id()),
        },
    })
}

/// What the node agents need to join the bench's cluster.
struct Fleet {
    urls: Vec<String>,
    credentials: Credentials,
    tls: Option<Tls>,
    keys: Keys,
    cpus: u32,
    state: PathBuf,
    arrivals: Arc<Arrivals>,
    health: Arc<Health>,
}

/// One agent of the fleet, running.
struct FakeNode {
    membership: Membership,
    closer: Closer,
    clock: JoinHandle<(Fake, Result<(), String>)>,
}

/// Tries at a submission: the controller refuses one whose record etcd did not take within
/// its timeout (1 s), which the bench's etcd, beside 1,000 agents on 2 CPUs, sometimes does.
const SUBMIT_TRIES: u32 = 10;

fn submit_patiently(
    daemon: &Daemon,
    width: u32,
    output: &std::path::Path,
    argv: &[String],
    refused: &std::cell::Cell<u32>,
) -> Result<u64> {
    let mut tries = 1;
    loop {
        match daemon.submit(width, output, argv) {
            Err(error) if tries < SUBMIT_TRIES => {
                if refused.get() == 0 {
                    eprintln!("  a submission was refused ({error:#}): trying again in a second");
                }
                refused.set(refused.get() + 1);
                std::thread::sleep(Duration::from_secs(1));
                tries += 1;
            }
            submitted => return submitted,
        }
    }
}

/// Tries at joining an agent: the bench's etcd, beside hundreds of agents on 2 CPUs, may not
/// answer one within its timeout (a real node's agent is restarted by its service manager).
const JOIN_TRIES: u32 = 3;

impl Fleet {
    fn start_patiently(&self, i: usize) -> Result<FakeNode> {
        let mut tries = 1;
        loop {
            match self.start(i) {
                Err(error) if tries < JOIN_TRIES => {
                    eprintln!("  agent {i} did not join ({error:#}): trying again in a second");
                    std::thread::sleep(Duration::from_secs(1));
                    tries += 1;
                }
                joined => return joined,
            }
        }
    }

    fn start(&self, i: usize) -> Result<FakeNode> {
        let node = format!("n{i:04}");
        let client = Arc::new(etcd_client(
            &self.urls,
            &Some(self.credentials.clone()),
            self.tls.as_ref(),
        )?);
        let info = NodeInfo {
            memory_bytes: None,
            protocol: cosched_proto::PROTOCOL_VERSION,
            node: node.clone(),
            cpus: Partition::block(0, self.cpus),
            mode: Mode::Gang,
            agent: whoami(),
            joined_us: now_micros(),
            address: None,
            lease_ttl_s: LEASE_TTL_S,
        };
        let status_every = info.status_period_us();
        let membership = join(
            client,
            &self.keys,
            info,
            LEASE_TTL_S,
            renewal_period(DEADLINE_US, LEASE_TTL_S),
        )?;
        let (orders, closer) = membership.orders(DEADLINE_US)?;
        let events = Arc::new(membership.events());
        let state_dir = self.state.join(&node);
        for sub in cosched_agent::STATE_SUBDIRS {
            std::fs::create_dir_all(state_dir.join(sub))?;
        }
        let agent = NodeAgent::new(
            NodeSettings {
                node: node.clone(),
                cpus: Partition::block(0, self.cpus),
                mode: Mode::Gang,
                idle_after: None,
                give_away_after: None,
                state_dir,
                supervisor_exe: "/nonexistent".into(),
                clock_shift_us: 0,
                tasks_per_cpu: None,
                time_slice_us: None,
                status_every,
                realtime: false,
            },
            Fake::default(),
            Arc::clone(&events) as Arc<dyn EventSink>,
        );
        let source = Simulated {
            orders,
            events,
            ends: BTreeSet::new(),
            arrivals: Arc::clone(&self.arrivals),
            node: i,
            health: Arc::clone(&self.health),
        };
        let clock = std::thread::Builder::new()
            .name(format!("clock-{node}"))
            .spawn(move || agent.run(source))?;
        Ok(FakeNode {
            membership,
            closer,
            clock,
        })
    }
}

impl FakeNode {
    fn stop(self) {
        self.closer.close();
        let _ = self.clock.join();
        self.membership.leave(Duration::from_secs(1));
    }
}

/// The node's orders as the agent takes them, with what the fake actuator cannot do done
/// here: a job's launch is dropped (no processes), and `sleep S` is reported ended S seconds
/// after its start; each generation's arrival is noted, and the agent going adrift or back.
struct Simulated {
    orders: cosched_cluster::EtcdSource,
    events: Arc<EtcdSink>,
    ends: BTreeSet<(Micros, JobId)>,
    arrivals: Arc<Arrivals>,
    /// This node's number, for `arrivals`.
    node: usize,
    health: Arc<Health>,
}

impl PlanSource for Simulated {
    fn next_order(&mut self, until: Micros) -> Received {
        loop {
            let now = now_micros();
            if let Some(&(at, job)) = self.ends.first().filter(|(at, _)| *at <= now) {
                self.ends.remove(&(at, job));
                let ending = Ending {
                    exit: ExitInfo {
                        code: Some(0),
                        signal: None,
                    },
                    at_us: Some(now),
                    ..Ending::default()
                };
                self.events.report(Event::Ended { job, ending });
                continue;
            }
            let wake = self.ends.first().map_or(until, |&(at, _)| at.min(until));
            match self.orders.next_order(wake) {
                Received::Timeout if wake < until => continue,
                Received::Order(mut order) => {
                    match &mut order.command {
                        Command::Publish { generation } => {
                            self.arrivals.note(self.node, generation, now_micros())
                        }
                        Command::Start { job, launch, .. } => {
                            let seconds = launch.take().and_then(|l| sleep_seconds(&l.argv));
                            if let Some(seconds) = seconds {
                                self.ends.insert((now + seconds * 1_000_000, *job));
                            }
                        }
                        _ => {}
                    }
                    return Received::Order(order);
                }
                Received::Adrift => {
                    self.health.adrift.fetch_add(1, Ordering::SeqCst);
                    self.health.ever.fetch_add(1, Ordering::SeqCst);
                    return Received::Adrift;
                }
                Received::Back => {
                    self.health.adrift.fetch_sub(1, Ordering::SeqCst);
                    return Received::Back;
                }
                other => return other,
            }
        }
    }
}

/// `S` of `sleep S`.
fn sleep_seconds(argv: &[String]) -> Option<i64> {
    match argv {
        [sleep, seconds] if sleep == "sleep" => seconds.parse().ok(),
        _ => None,
    }
}

/// A generation a node took: its number, its stamp, and the moment.
type Took = (u64, Micros, Micros);

/// Which generation each node took when: node by node, in the order taken; and the slot
/// clock the generations carry (epoch, quantum), to place each stamp in its slot.
#[derive(Default)]
struct Arrivals(Mutex<Taking>);

#[derive(Default)]
struct Taking {
    by_node: HashMap<usize, Vec<Took>>,
    clock: Option<(Micros, Micros)>,
}

impl Arrivals {
    fn note(&self, node: usize, generation: &cosched_proto::Generation, now: Micros) {
        let mut taking = self.0.lock().unwrap_or_else(|p| p.into_inner());
        taking.by_node.entry(node).or_default().push((
            generation.number,
            generation.published_us,
            now,
        ));
        taking.clock = Some((generation.epoch_us, generation.quantum_us));
    }

    /// The generations stamped between `from` and `to` that all `nodes` took, each node's
    /// moment the one it took that generation or a later one: an agent behind takes the
    /// newest of the headers queued, not those before it.
    fn between(&self, from: Micros, to: Micros, nodes: usize) -> Taken {
        let taking = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (taken_by, clock) = (&taking.by_node, taking.clock);
        let into_slot = |stamp: Micros| match clock {
            Some((epoch, quantum)) if quantum > 0 => (stamp - epoch).rem_euclid(quantum),
            _ => 0,
        };
        let stamped: BTreeSet<(u64, Micros)> = taken_by
            .values()
            .flatten()
            .filter(|(_, stamp, _)| (from..=to).contains(stamp))
            .map(|&(number, stamp, _)| (number, stamp))
            .collect();
        let mut taken = Taken::default();
        for (number, stamp) in stamped {
            let mut took: Vec<u64> = taken_by
                .values()
                .filter_map(|history| history.iter().find(|&&(n, _, _)| n >= number))
                .map(|&(_, _, at)| (at - stamp).max(0) as u64)
                .collect();
            if took.len() < nodes {
                continue;
            }
            took.sort_unstable();
            let (first, last) = (took[0], took[took.len() - 1]);
            taken.fan_out.push(last);
            taken.first_node.push(first);
            taken.each.push(Spread {
                number,
                at_s: (stamp - from) as f64 / 1e6,
                into_slot_ms: into_slot(stamp) as f64 / 1e3,
                first_ms: first as f64 / 1e3,
                median_ms: took[took.len() / 2] as f64 / 1e3,
                last_ms: last as f64 / 1e3,
            });
            taken.delivery.extend(took);
        }
        taken
    }
}

/// Per generation, from its stamp: to the last node and to the first; and to every node.
#[derive(Default)]
struct Taken {
    fan_out: Vec<u64>,
    first_node: Vec<u64>,
    delivery: Vec<u64>,
    each: Vec<Spread>,
}

/// One generation's delivery: stamped `at_s` into the phase (`into_slot_ms` after its slot's
/// boundary, where every node's clock works), then taken by the first node, half of them and
/// the last so many ms later.
#[derive(Serialize, Deserialize)]
struct Spread {
    number: u64,
    at_s: f64,
    into_slot_ms: f64,
    first_ms: f64,
    median_ms: f64,
    last_ms: f64,
}

/// etcd's counters by name (labels summed), from its `/metrics`.
struct Metrics(BTreeMap<String, f64>);

impl Metrics {
    fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0.0)
    }
}

/// `url`: etcd's plain metrics listener (`http://HOST:PORT/metrics`), which needs no client
/// certificate when its clients' port serves TLS.
fn etcd_metrics(url: &str) -> Result<Metrics> {
    let address = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/metrics"))
        .context("etcd's metrics URL")?;
    let mut stream = std::net::TcpStream::connect(address)?;
    write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let mut counters = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = name.split('{').next().unwrap_or(name);
        if let Ok(value) = value.parse::<f64>() {
            *counters.entry(name.to_string()).or_insert(0.0) += value;
        }
    }
    Ok(Metrics(counters))
}

/// User plus system CPU time of process `pid`, in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = cosched_cgroups::procfs::stat(pid as i32)?;
    Ok(cosched_cgroups::procfs::ticks_to_duration(stat.cpu_ticks).as_secs_f64())
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A thousand agents hold a few thousand sockets and files; etcd, started from here, as many.
fn raise_descriptor_limit() -> Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit write and read the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            bail!("getrlimit: {}", std::io::Error::last_os_error());
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            bail!("setrlimit: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}
