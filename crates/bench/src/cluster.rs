//! `cosched-bench cluster`: the cluster lab (`scripts/cluster-lab`: two one-CPU nodes that are
//! network namespaces, a real etcd and the controller in a hub namespace) measured.
//!
//! - Cross-node skew: per boundary, the spread between the two nodes of the moment a job was
//!   started (thawed) and stopped (freeze confirmed), from each agent's boundary log on the
//!   true clock, with node b's clock shifted by each `--offsets-us`.
//! - Fine-grain MPI across nodes: two 2-rank ping-pong jobs, each with a rank on both nodes,
//!   under plain sharing (`local` mode: placed, never switched), gang at each quantum and
//!   Slurm's gang scheduling across the same kind of lab (`bench/slurm/slurm-lab`); makespan
//!   over the ideal (the two jobs alone, back to back).
//! - What the cluster costs: generation publish-to-receipt latency (from the agents'
//!   reports), agent CPU time per switch (every thread of the agent), etcd traffic per second.

use crate::daemon::{cosched_binary, succeeded};
use crate::figures::{command_line, median, summary, Provenance};
use crate::workloads;
use anyhow::{bail, Context, Result};
use cosched_agent::boundaries::{read_log, spreads, start_delays};
use cosched_proto::api::NodeView;
use cosched_proto::{BoundaryRecord, Summary};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct ClusterArgs {
    /// Node b's clock offsets for the skew figures, in µs (node a keeps the true clock)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,100,1000",
        allow_negative_numbers = true
    )]
    offsets_us: Vec<i64>,
    /// Slot length of the skew runs (short slots give many boundaries)
    #[arg(long, default_value_t = 20)]
    skew_quantum_ms: u64,
    /// How long each skew run switches, in seconds
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Gang quanta for the MPI makespans, in ms
    #[arg(long, value_delimiter = ',', default_value = "20,50,100")]
    quanta_ms: Vec<u64>,
    /// Round trips of each ping-pong job, each after 20 work units (300,000: some 8 s alone
    /// here, plus about 2.7 s to start mpirun and its remote daemon)
    #[arg(long, default_value_t = 300_000)]
    round_trips: u64,
    /// Repetitions of every makespan (the median is reported)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    repeat: u16,
    /// Leave out Slurm's row (bench/slurm/slurm-lab installs and runs Slurm otherwise)
    #[arg(long)]
    no_slurm: bool,
    /// Also write the figures as JSON here
    #[arg(long, default_value = "target/bench/cluster.json")]
    json: PathBuf,
}

pub fn run(args: ClusterArgs) -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("the cluster lab needs root (namespaces, cgroups, agents)");
    }
    workloads::build()?;
    let mut report = Report {
        provenance: Provenance::now(command_line("bench/cluster")),
        skew: Vec::new(),
        mpi: Vec::new(),
    };
    println!(
        "cross-node skew: two 2-rank MPI ping-pong jobs across nodes a and b, gang at {} ms, {} s \
         per offset; spread of each job's start (thaw) and stop (freeze confirmed) between the \
         nodes at every boundary, true clock; start after b.: p50/p99 of how long after its \
         boundary a job started on a node",
        args.skew_quantum_ms, args.seconds
    );
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>16} {:>14} {:>12}",
        "offset",
        "boundaries",
        "start p50",
        "start p99",
        "start max",
        "stop p50",
        "stop p99",
        "lateness p99",
        "start after b.",
        "publish p50/p99",
        "agent CPU/sw"
    );
    for &offset in &args.offsets_us {
        let row = skew_run(&args, offset)?;
        println!(
            "{:>7} µs {:>10} {:>7} µs {:>7} µs {:>7} µs {:>7} µs {:>7} µs {:>9} µs {:>16} {:>14} {:>9} µs",
            row.offset_us,
            row.start.count,
            row.start.p50,
            row.start.p99,
            row.start.max,
            row.stop.p50,
            row.stop.p99,
            row.lateness_p99_us,
            format!("{}/{} µs", row.start_after_boundary.p50, row.start_after_boundary.p99),
            format!("{}/{} µs", row.publish.p50, row.publish.p99),
            row.agent_cpu_per_switch_us
        );
        report.skew.push(row);
    }

    println!(
        "\nfine-grain MPI across nodes: two 2-rank ping-pong jobs ({} round trips, 20 work units \
         each), one rank on each node; makespan over the ideal (the jobs alone, back to back), \
         median of {} rounds, each round running every scheduler once in turn",
        args.round_trips, args.repeat
    );
    let mut rows: Vec<MpiRow> = std::iter::once(("local".to_string(), 100))
        .chain(args.quanta_ms.iter().map(|&q| ("gang".to_string(), q)))
        .map(|(mode, quantum_ms)| MpiRow::new(&mode, quantum_ms))
        .collect();
    let mut slurm = (!args.no_slurm).then(|| MpiRow::new("slurm", 5_000));
    let mut alone = Vec::new();
    // Round by round rather than scheduler by scheduler: this VM's speed drifts over minutes
    // (a scheduler measured last ran 20 % slower in one run), and a drift then weighs on every
    // row alike.
    for round in 1..=args.repeat {
        eprintln!("round {round} of {}", args.repeat);
        alone.push(Lab::up("local", 100, 0)?.makespan(&["alone"], args.round_trips)?);
        for row in &mut rows {
            let lab = Lab::up(&row.mode, row.quantum_ms, 0)?;
            let before = lab.etcd_metrics()?;
            let started = Instant::now();
            row.makespans_s
                .push(lab.makespan(&["one", "two"], args.round_trips)?);
            let seconds = started.elapsed().as_secs_f64();
            row.etcd
                .get_or_insert_with(Vec::new)
                .push(lab.etcd_metrics()?.since(&before, seconds));
        }
        if let Some(row) = &mut slurm {
            match slurm_makespans(args.round_trips, 1)?.as_slice() {
                [Some(seconds)] => row.makespans_s.push(*seconds),
                _ => row.failed_rounds += 1,
            }
        }
    }
    let ideal = 2.0 * median(&alone).expect("at least one round");
    println!(
        "one job alone: {:.2} s (rounds: {}); ideal for two: {ideal:.2} s",
        ideal / 2.0,
        seconds_list(&alone)
    );
    println!(
        "{:<14} {:>12} {:>9} {:>14} {:>14}  rounds",
        "scheduler", "makespan", "/ ideal", "etcd puts/s", "etcd KB/s in"
    );
    for mut row in rows.into_iter().chain(slurm) {
        row.ideal_s = ideal;
        let Some(makespan) = median(&row.makespans_s) else {
            println!("{:<14} every round lost a job", row.scheduler);
            report.mpi.push(row);
            continue;
        };
        row.makespan_s = makespan;
        let etcd = |of: fn(&EtcdTraffic) -> f64| match &row.etcd {
            Some(rounds) => format!(
                "{:.1}",
                median(&rounds.iter().map(of).collect::<Vec<_>>()).unwrap_or(0.0)
            ),
            None => "-".into(),
        };
        let lost = match row.failed_rounds {
            0 => String::new(),
            n => format!(" ({n} lost a job: left out)"),
        };
        println!(
            "{:<14} {makespan:>10.2} s {:>8.3}x {:>14} {:>14}  {}{lost}",
            row.scheduler,
            makespan / ideal,
            etcd(|t| t.puts_per_s),
            etcd(|t| t.kb_in_per_s),
            seconds_list(&row.makespans_s)
        );
        report.mpi.push(row);
    }
    if let Some(parent) = args.json.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.json, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", args.json.display()))?;
    println!("\nfigures also in {}", args.json.display());
    Ok(())
}

#[derive(Serialize)]
struct Report {
    provenance: Provenance,
    skew: Vec<SkewRow>,
    mpi: Vec<MpiRow>,
}

#[derive(Serialize)]
struct SkewRow {
    offset_us: i64,
    quantum_ms: u64,
    /// Spread between the nodes of a job's start at one boundary.
    start: Summary,
    stop: Summary,
    lateness_p99_us: u64,
    /// How long after its boundary a job started, both nodes.
    start_after_boundary: Summary,
    publish: Summary,
    agent_cpu_per_switch_us: u64,
}

#[derive(Serialize)]
struct MpiRow {
    scheduler: String,
    #[serde(skip)]
    mode: String,
    #[serde(skip)]
    quantum_ms: u64,
    makespans_s: Vec<f64>,
    makespan_s: f64,
    ideal_s: f64,
    /// Rounds in which a job died (Slurm), left out of `makespans_s`.
    failed_rounds: usize,
    /// etcd's load in each round; None for Slurm, which does not use etcd.
    etcd: Option<Vec<EtcdTraffic>>,
}

impl MpiRow {
    fn new(mode: &str, quantum_ms: u64) -> MpiRow {
        let scheduler = match mode {
            "local" => "plain (local)".to_string(),
            "slurm" => format!("slurm gang {} s", quantum_ms / 1_000),
            _ => format!("gang {quantum_ms} ms"),
        };
        MpiRow {
            scheduler,
            mode: mode.to_string(),
            quantum_ms,
            makespans_s: Vec::new(),
            makespan_s: 0.0,
            ideal_s: 0.0,
            failed_rounds: 0,
            etcd: None,
        }
    }
}

/// Seconds, as `14.6, 17.2, 17.5`.
fn seconds_list(values: &[f64]) -> String {
    let shown: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
    shown.join(", ")
}

/// The same two jobs under Slurm across a lab of its own (`bench/slurm/slurm-lab makespan`,
/// which prints `round K: makespan X s` or `round K: failed...` per repetition): each
/// round's makespan in seconds, `None` where a job died.
fn slurm_makespans(round_trips: u64, repeat: u16) -> Result<Vec<Option<f64>>> {
    eprintln!("running Slurm across a lab (bench/slurm/slurm-lab; installs Slurm if needed)");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/slurm/slurm-lab");
    let out = Command::new(script)
        .args(["makespan", "--round-trips", &round_trips.to_string()])
        .args(["--repeat", &repeat.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .context("running bench/slurm/slurm-lab")?;
    let text = String::from_utf8_lossy(&out.stdout);
    // It exits non-zero when every round failed, having said so round by round.
    let rounds = slurm_rounds(&text);
    if rounds.len() != usize::from(repeat) {
        bail!(
            "bench/slurm/slurm-lab ({}) printed {} rounds, not {repeat}: {}",
            out.status,
            rounds.len(),
            text.trim()
        );
    }
    Ok(rounds)
}

/// slurm-lab's rounds: `round K: makespan X s` (seconds) or `round K: failed...` (`None`).
fn slurm_rounds(text: &str) -> Vec<Option<f64>> {
    text.lines()
        .filter_map(|line| {
            let (_, outcome) = line.trim().strip_prefix("round ")?.split_once(": ")?;
            if outcome.starts_with("failed") {
                return Some(None);
            }
            let seconds = outcome.strip_prefix("makespan ")?.strip_suffix(" s")?;
            Some(Some(seconds.parse().ok()?))
        })
        .collect()
}

fn skew_run(args: &ClusterArgs, offset_us: i64) -> Result<SkewRow> {
    let lab = Lab::up("gang", args.skew_quantum_ms, offset_us)?;
    // Long enough never to end first: cancelled when the run is over.
    let jobs = ["one", "two"]
        .iter()
        .map(|name| lab.submit(name, 100_000_000))
        .collect::<Result<Vec<_>>>()?;
    // Both jobs under way on both nodes (their launchers started the remote ranks).
    std::thread::sleep(Duration::from_secs(2));
    let cpu_before = lab.agent_cpu()?;
    let since = cosched_os::now_micros();
    std::thread::sleep(Duration::from_secs(args.seconds));
    let until = cosched_os::now_micros();
    let cpu_after = lab.agent_cpu()?;
    let nodes = lab.nodes()?;
    for job in &jobs {
        lab.cosched(&["cancel", &job.to_string()])?;
    }
    let window = |records: Vec<BoundaryRecord>| -> Vec<BoundaryRecord> {
        records
            .into_iter()
            .filter(|r| r.woke_us >= since && r.woke_us < until && r.lateness_us.is_some())
            .collect()
    };
    let a = window(read_log(&lab.dir.join("node-a")));
    let b = window(read_log(&lab.dir.join("node-b")));
    let start = spreads(&a, &b, |r| &r.started);
    let stop = spreads(&a, &b, |r| &r.stopped);
    let switches = (a.len() + b.len()).max(1) as u64;
    let cpu_us: u64 = cpu_after
        .iter()
        .map(|(node, after)| after.saturating_sub(cpu_before.get(node).copied().unwrap_or(0)))
        .sum();
    Ok(SkewRow {
        offset_us,
        quantum_ms: args.skew_quantum_ms,
        start: summary(&start),
        stop: summary(&stop),
        start_after_boundary: summary(&[start_delays(&a), start_delays(&b)].concat()),
        lateness_p99_us: nodes
            .iter()
            .map(|n| n.status.lateness_us.p99)
            .max()
            .unwrap_or(0),
        publish: Summary::worst(nodes.iter().map(|n| &n.status.publish_us)),
        agent_cpu_per_switch_us: cpu_us / switches,
    })
}

/// One lab, up for as long as this lives.
struct Lab {
    name: String,
    dir: PathBuf,
    cosched: PathBuf,
}

impl Lab {
    fn up(mode: &str, quantum_ms: u64, offset_us: i64) -> Result<Lab> {
        let name = format!("bc{}", std::process::id() % 100_000);
        let lab = Lab {
            dir: PathBuf::from(format!("/run/cosched-lab-{name}")),
            name,
            cosched: cosched_binary()?,
        };
        let out = lab.script(&[
            "up",
            "--nodes",
            "2",
            "--mode",
            mode,
            "--quantum-ms",
            &quantum_ms.to_string(),
            "--clock-offset-us",
            &offset_us.to_string(),
        ])?;
        if !out.status.success() {
            bail!(
                "cluster-lab up: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(lab)
    }

    fn script(&self, args: &[&str]) -> Result<Output> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster-lab");
        Command::new(&script)
            .args(args)
            .args(["--name", &self.name])
            .env("COSCHED", &self.cosched)
            .output()
            .with_context(|| format!("running {}", script.display()))
    }

    fn client(&self) -> Command {
        let mut command = Command::new(&self.cosched);
        command.env("COSCHED_SOCKET", self.dir.join("cosched.sock"));
        command
    }

    fn cosched(&self, args: &[&str]) -> Result<Output> {
        succeeded(self.client().args(args), args)
    }

    /// `cosched run -N 2 -n 2 --name NAME [--detach] -- mpirun` of a ping-pong, one rank per
    /// node.
    fn mpi_job(&self, name: &str, round_trips: u64, detach: bool) -> Command {
        let mut command = self.client();
        command.args(["run", "-N", "2", "-n", "2", "--name", name]);
        if detach {
            // Its output is on the nodes: no client-side file in this directory.
            command.args(["--detach", "--output", "/dev/null"]);
        }
        command
            .args(["--", "mpirun", "-np", "2", "--map-by", "node"])
            .args(["--mca", "btl", "tcp,self"])
            .arg(workloads::program("pingpong"))
            .args(["-n", &round_trips.to_string(), "-w", "20"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("PMIX_MCA_psec", "native");
        command
    }

    fn submit(&self, name: &str, round_trips: u64) -> Result<u64> {
        let out = self.mpi_job(name, round_trips, true).output()?;
        if !out.status.success() {
            bail!(
                "submitting {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .context("the id of a submitted job")
    }

    /// Seconds from submitting the jobs (at once) to the last one's end; each must succeed.
    fn makespan(&self, names: &[&str], round_trips: u64) -> Result<f64> {
        let start = Instant::now();
        let children = names
            .iter()
            .map(|name| {
                self.mpi_job(name, round_trips, false)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(anyhow::Error::from)
            })
            .collect::<Result<Vec<Child>>>()?;
        for child in children {
            let out = child.wait_with_output()?;
            if !out.status.success() {
                bail!(
                    "an MPI job failed ({}): {} (logs in {})",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim(),
                    self.dir.display()
                );
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }

    fn nodes(&self) -> Result<Vec<NodeView>> {
        let out = self.cosched(&["nodes", "--json"])?;
        serde_json::from_slice(&out.stdout).context("cosched nodes --json")
    }

    /// CPU time (µs) of each agent so far, every thread of it (/proc/PID/task/*/schedstat).
    fn agent_cpu(&self) -> Result<BTreeMap<String, u64>> {
        let pids = std::fs::read_to_string(self.dir.join("pids"))?;
        Ok(pids
            .lines()
            .filter_map(|line| line.split_once(' '))
            .filter(|(_, what)| what.starts_with("agent-"))
            .map(|(pid, what)| (what.to_string(), task_cpu_us(pid)))
            .collect())
    }

    /// etcd's own counters, read from inside the hub namespace (never from the root one), on
    /// its plain metrics listener on the hub's loopback (its clients' port wants a client
    /// certificate).
    fn etcd_metrics(&self) -> Result<EtcdCounters> {
        let out = Command::new("nsenter")
            .arg(format!("--net=/run/netns/cl-{}-hub", self.name))
            .args(["curl", "-sf", "http://127.0.0.1:2381/metrics"])
            .output()
            .context("reading etcd's metrics")?;
        if !out.status.success() {
            bail!("etcd's metrics: curl {}", out.status);
        }
        Ok(EtcdCounters::parse(&String::from_utf8_lossy(&out.stdout)))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Ok(out) = self.script(&["down"]) {
            if !out.status.success() {
                eprintln!(
                    "cluster-lab down: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
    }
}

fn task_cpu_us(pid: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .sum::<u64>()
        / 1_000
}

/// The etcd counters that say how much work the cluster gives it.
#[derive(Default)]
struct EtcdCounters {
    puts: f64,
    received_bytes: f64,
    sent_bytes: f64,
}

#[derive(Serialize)]
struct EtcdTraffic {
    puts_per_s: f64,
    kb_in_per_s: f64,
    kb_out_per_s: f64,
}

impl EtcdCounters {
    fn parse(text: &str) -> EtcdCounters {
        let value = |name: &str| -> f64 {
            text.lines()
                .filter(|line| line.starts_with(name))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        EtcdCounters {
            puts: value("etcd_mvcc_put_total") + value("etcd_mvcc_txn_total"),
            received_bytes: value("etcd_network_client_grpc_received_bytes_total"),
            sent_bytes: value("etcd_network_client_grpc_sent_bytes_total"),
        }
    }

    fn since(&self, before: &EtcdCounters, seconds: f64) -> EtcdTraffic {
        let rate = |now: f64, then: f64| (now - then).max(0.0) / seconds.max(1e-9);
        EtcdTraffic {
            puts_per_s: rate(self.puts, before.puts),
            kb_in_per_s: rate(self.received_bytes, before.received_bytes) / 1e3,
            kb_out_per_s: rate(self.sent_bytes, before.sent_bytes) / 1e3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_counters_add_up_their_labelled_series() {
        let text = "# HELP etcd_mvcc_put_total x\netcd_mvcc_put_total 10\n\
                    etcd_mvcc_txn_total 5\n\
                    etcd_network_client_grpc_received_bytes_total{type=\"unary\"} 1000\n\
                    etcd_network_client_grpc_received_bytes_total{type=\"stream\"} 500\n";
        let c = EtcdCounters::parse(text);
        assert_eq!(
            (c.puts, c.received_bytes, c.sent_bytes),
            (15.0, 1500.0, 0.0)
        );
        let t = c.since(&EtcdCounters::default(), 3.0);
        assert_eq!(t.puts_per_s, 5.0);
    }

    #[test]
    fn slurm_lab_rounds_are_read_from_its_output() {
        let text = "  round 1: makespan 23.20 s\n  round 2: failed: 1 of 2 jobs printed\n\
                    \x20 round 3: makespan 20.41 s\nmedian makespan 21.80 s\n";
        assert_eq!(slurm_rounds(text), vec![Some(23.2), None, Some(20.41)]);
    }
}
