//! `cosched-bench churn`: the slot clock while jobs start and end. Two 2-process compute jobs
//! take turns (gang mode); in the churn case a short 1-process job (`sh -c 'exit 7'`, as a
//! user's quick command) is submitted every `--every-ms` beside them; in the clients case a
//! `cosched ps` is run as often instead (a client's own start and request, no job); in the crowd case the
//! second job is a crowd of sleeping processes instead (as many as its task cap lets it fork,
//! as an audit's `nobody` did with 3,000), slow to freeze. The steady case, the two compute
//! jobs alone, runs in the same invocation: the figures are compared side by side, with the
//! first compute job's share of its processors (half of them, ideally).

use crate::bystander::{Bystanders, Stalls};
use crate::daemon::{Daemon, DaemonSpec};
use crate::figures::{command_line, summary, Provenance};
use crate::steal::StealSince;
use crate::workloads;
use anyhow::{bail, Context, Result};
use cosched_agent::boundaries::{read_log, start_delays};
use cosched_proto::api::{NodeView, StatsView};
use cosched_proto::{BoundaryRecord, Histogram, Summary, HISTOGRAM_BOUNDS_US};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct ChurnArgs {
    /// Slot lengths to measure, in milliseconds
    #[arg(long, value_delimiter = ',', default_value = "100,20")]
    quantum_ms: Vec<u64>,
    /// How long each case runs, in seconds
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// A short job is submitted this often in the churn case, on average (ms; each gap is
    /// drawn between half and one and a half times this, so that submissions fall at every
    /// phase of the slot)
    #[arg(long, default_value_t = 500)]
    every_ms: u64,
    /// The cases to run, in order: steady, churn, clients, crowd, implicit
    #[arg(long, value_delimiter = ',', default_value = "steady,churn,crowd")]
    cases: Vec<Case>,
    /// Rounds of each case (the figures of every round are printed; compare medians)
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// The jobs' time slices to measure, in microseconds (the daemon's `--time-slice-us`; 0:
    /// the kernel's own). Each round runs every case at each, side by side
    #[arg(long, value_delimiter = ',', default_value = "100")]
    time_slice_us: Vec<u64>,
    /// The jobs' weights to measure (the daemon's `--jobs-weight`: on each processor, the
    /// jobs weigh this many processes outside cosched; 0: the kernel's default). Each round
    /// runs every case at each slice and weight, side by side
    #[arg(long, value_delimiter = ',', default_value = "5")]
    jobs_weight: Vec<u32>,
    /// Also write the figures as JSON here
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Run a bystander beside cosched on each processor (a real-time thread waking every 2 ms)
    /// and say which of the clock's late wakeups one of them was late over too: the
    /// machine's. Off by default: their wakeups are preemption points too, which may let a
    /// thawed rank take its processor back sooner (compare runs with and without)
    #[arg(long)]
    bystanders: bool,
    /// Keep each run's boundary log, job list (`ps --all --json`) and daemon log in a folder
    /// of its own under this one (CASE-MSms-SLICEus-rROUND), to find what a late boundary met
    #[arg(long)]
    keep_logs: Option<std::path::PathBuf>,
}

/// The lateness bucket bound past which a boundary counts as "late" (µs).
const LATE_US: u64 = 1_000;
/// The skew bucket bound nearest the target (200 µs) from above (µs).
const SKEW_US: u64 = 250;
/// The churn's gaps between submissions are drawn from this seed (the same on every run).
const CHURN_SEED: u64 = 0x00c0_5c4e_d000_0001;

/// How long a case waits after its long jobs are submitted before it measures.
const SETTLE: Duration = Duration::from_secs(2);
/// A little more than the agent's period between status reports on one machine (1 s).
const STATUS_PERIOD: Duration = Duration::from_millis(1_200);

/// How long the crowd case waits for the crowd to fork before it measures.
const CROWD_WARMUP: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Case {
    Steady,
    Churn,
    /// A `cosched ps` instead of each short job: what a client alone costs the clock.
    Clients,
    Crowd,
    /// The second job computes as `implicit`: held past its budget of the gang's slots.
    Implicit,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Steady => "steady",
            Case::Churn => "churn",
            Case::Clients => "clients",
            Case::Crowd => "crowd",
            Case::Implicit => "implicit",
        }
    }
}

pub fn run(args: ChurnArgs) -> Result<()> {
    workloads::build()?;
    println!(
        "churn: two 2-process `burn` jobs gang-scheduled; churn adds `cosched run -n 1 -- sh -c 'exit 7'` every {} ms on average, clients a `cosched ps` as often; crowd makes the second a 2-processor job of sleeping processes; implicit makes it `--mode implicit` (its budget of the gang's slots: a quarter of the slot, 5 ms at most, per processor); {} s a case",
        args.every_ms, args.seconds
    );
    println!(
        "{:<6} {:>4} {:>6} {:>6} {:>5} {:>7} {:>6} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>6} {:>10} {:>10}",
        "case",
        "ms",
        "slice",
        "weight",
        "round",
        "added",
        "share",
        "steal",
        "late@bys",
        "short p50",
        "short max",
        "late p50",
        "late p99",
        "late max",
        ">1ms",
        "start p99",
        "start max",
        ">1ms",
        "1st>1ms",
        "swtch p50",
        "swtch p99",
        "skew p50",
        "skew p99",
        ">250µs",
        ">1ms",
        "missed",
        "client p50",
        "client p99"
    );
    let mut rows = Vec::new();
    let mut pools: Vec<Pool> = Vec::new();
    for round in 1..=args.rounds {
        for &quantum_ms in &args.quantum_ms {
            for (case, variant) in args.cases.iter().flat_map(|&case| {
                Variant::all(&args)
                    .into_iter()
                    .map(move |variant| (case, variant))
            }) {
                let Variant {
                    slice_us,
                    jobs_weight,
                } = variant;
                let run = format!(
                    "{}-{quantum_ms}ms-{slice_us}us-w{jobs_weight}-r{round}",
                    case.name()
                );
                let row = measure(&args, quantum_ms, variant, case, &run)?;
                let stats = &row.stats;
                println!(
                    "{:<6} {:>4} {:>4}µs {:>6} {:>5} {:>7} {:>6.3} {:>5}ms {:>10} {:>7.1}ms {:>7.1}ms {:>7}µs {:>7}µs {:>7}µs {:>7} {:>7}µs {:>7}µs {:>7} {:>7} {:>7}µs {:>7}µs {:>6}µs {:>6}µs {:>9} {:>9} {:>6} {:>8.1}ms {:>8.1}ms",
                    case.name(),
                    quantum_ms,
                    slice_us,
                    jobs_weight,
                    round,
                    row.crowd.unwrap_or(row.short_jobs as u64),
                    row.share,
                    row.machine.steal_us / 1000,
                    format!(
                        "{}/{}",
                        row.machine.late_with_bystander, row.machine.late_wakeups
                    ),
                    row.short_slot_p50 as f64 / 1000.0,
                    row.short_slot_max as f64 / 1000.0,
                    stats.lateness_us.p50,
                    stats.lateness_us.p99,
                    stats.lateness_us.max,
                    row.tallies.late_boundaries,
                    row.start_p99,
                    row.start_max,
                    row.late_starts,
                    row.first_late_starts,
                    stats.switch_us.p50,
                    stats.switch_us.p99,
                    stats.skew_us.p50,
                    stats.skew_us.p99,
                    format!("{}/{}", row.tallies.skew_over_target, row.tallies.skew_samples),
                    row.tallies.skew_over_1ms,
                    stats.missed_slots,
                    row.clients.p50 as f64 / 1000.0,
                    row.clients.p99 as f64 / 1000.0,
                );
                pool_into(&mut pools, (case, quantum_ms, variant), &row);
                rows.push(serde_json::json!({
                    "case": case.name(),
                    "quantum_ms": quantum_ms,
                    "time_slice_us": slice_us,
                    "jobs_weight": jobs_weight,
                    "round": round,
                    "seconds": args.seconds,
                    "every_ms": args.every_ms,
                    "short_jobs": row.short_jobs,
                    "crowd": row.crowd,
                    "first_job_share": row.share,
                    "boundaries": stats.lateness_us.count,
                    "late_over_1ms": row.tallies.late_boundaries,
                    "starts": row.starts,
                    "start_delay_p99_us": row.start_p99,
                    "start_delay_max_us": row.start_max,
                    "starts_over_1ms": row.late_starts,
                    "first_job_starts_over_1ms": row.first_late_starts,
                    "host_steal_us": row.machine.steal_us,
                    "late_wakeups_logged": row.machine.late_wakeups,
                    "late_wakeups_with_a_bystander_stalled": row.machine.late_with_bystander,
                    "bystanders": args.bystanders,
                    "bystander_wakeups": row.machine.bystander_wakeups,
                    "bystander_stalls": row.machine.bystander_stalls,
                    "bystanders_stalled_share": row.machine.stalled_share(),
                    "short_slot_p50_us": row.short_slot_p50,
                    "short_slot_max_us": row.short_slot_max,
                    "clients": row.clients.count,
                    "client_p50_us": row.clients.p50,
                    "client_p99_us": row.clients.p99,
                    "skew_samples": row.tallies.skew_samples,
                    "skew_over_250us": row.tallies.skew_over_target,
                    "skew_over_1ms": row.tallies.skew_over_1ms,
                    "stats": stats,
                    "lateness_p99_under_100us": stats.lateness_us.p99 < 100,
                    "no_boundary_over_1ms": row.tallies.late_boundaries == 0 && row.late_starts == 0,
                    "skew_p99_under_200us": stats.skew_us.p99 < 200,
                }));
            }
        }
    }
    println!(
        "added: short jobs submitted (churn) or sleeping processes forked (crowd); share: the first compute job's CPU time over its 2 processors' wall time (ideal 0.5; in the implicit case 0.5 less the implicit job's budget, 0.25 if it shared the gang's slots); short: how long each short job held the processors, from its thaw to the next thaw of a compute job (both wait meanwhile); late: the clock's wakeup after each boundary; start: each job's thaw after its boundary (boundary log); 1st: the first compute job's starts alone; slice: the jobs' time slice (the daemon's --time-slice-us, 0 the kernel's own); weight: the processes outside cosched the jobs weigh as much as on each processor (the daemon's --jobs-weight, 0 the kernel's default: one process in all); client: how long each of the case's clients took, start to exit (a detached submission, or a `cosched ps`); steal: the host's steal while measured (/proc/stat, 10 ms ticks); late@bys: the clock's wakeups past 1 ms (boundary log) over which a bystander (a real-time thread per processor outside cosched, waking every 2 ms) was late by 500 µs or more too, of all such (the machine's, then; bys stalls: the bystanders' wakeups that late, of all theirs; stalled: the share of the run some bystander was, how often a moment meets a stall by chance); skew >250µs: starts whose skew passed 250 µs (the histogram bucket above the target) of those measured while the case ran (from the agent's status reported 2 s after the long jobs' submission to one reported after the last short job; >1ms in the late columns likewise), and >1ms those past 1 ms (add them up across runs: a short run's p99 is its second-worst start or so)"
    );
    if args.rounds > 1 {
        print_pools(&pools);
    }
    println!(
        "targets: lateness p99 < 100 µs and no boundary (wakeup or start) later than 1 ms under churn; skew p99 < 200 µs"
    );
    if let Some(path) = args.json {
        let taken = Provenance::now(command_line("bench/slot-lateness --churn"));
        let report = serde_json::json!({ "provenance": taken, "rows": rows });
        std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

struct Row {
    stats: StatsView,
    short_jobs: usize,
    /// How long the case's clients took (a submission, or a `cosched ps`), start to exit.
    clients: Summary,
    /// The crowd's size (its `crowd of N` line), in the crowd case.
    crowd: Option<u64>,
    share: f64,
    tallies: Tallies,
    /// Jobs started on boundaries, and how late after them (µs).
    starts: usize,
    start_p99: u64,
    start_max: u64,
    late_starts: usize,
    first_late_starts: usize,
    /// How long short jobs held the processors (µs; 0 without short jobs).
    short_slot_p50: u64,
    short_slot_max: u64,
    machine: Machine,
}

/// What a daemon of a run is given besides its slots: its jobs' time slice and weight.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Variant {
    slice_us: u64,
    jobs_weight: u32,
}

impl Variant {
    /// Every slice with every weight, in the order asked.
    fn all(args: &ChurnArgs) -> Vec<Variant> {
        let slices = args.time_slice_us.iter();
        slices
            .flat_map(|&slice_us| {
                (args.jobs_weight.iter()).map(move |&jobs_weight| Variant {
                    slice_us,
                    jobs_weight,
                })
            })
            .collect()
    }
}

fn measure(
    args: &ChurnArgs,
    quantum_ms: u64,
    variant: Variant,
    case: Case,
    run: &str,
) -> Result<Row> {
    let daemon = Daemon::start(&DaemonSpec {
        mode: "gang".into(),
        quantum_ms,
        freezer: None,
        extra: vec![
            "--time-slice-us".into(),
            variant.slice_us.to_string(),
            "--jobs-weight".into(),
            variant.jobs_weight.to_string(),
        ],
    })?;
    let output = daemon.dir().join("jobs.out");
    let first = workloads::submit_endless_gang(&daemon, &output)?;
    let second = if case == Case::Crowd {
        let program = workloads::dir().join("crowd.py");
        let crowd = vec![
            "python3".into(),
            program.display().to_string(),
            "4000".into(),
        ];
        let crowd = daemon.submit(2, &daemon.dir().join("crowd.out"), &crowd)?;
        std::thread::sleep(CROWD_WARMUP);
        crowd
    } else if case == Case::Implicit {
        let argv = workloads::endless_burn();
        daemon.submit_with(2, &output, &argv, &["--mode", "implicit"], &[])?
    } else {
        workloads::submit_endless_gang(&daemon, &output)?
    };
    // The jobs' own start (their first thaws meet their processes' exec) is not what a case
    // measures: the tallies count from a status reported after it.
    std::thread::sleep(SETTLE);
    let tallied_before = tallies(&daemon)?;
    let since = cosched_os::now_micros();
    let steal = StealSince::now()?;
    let cpus: Vec<usize> = (0..cosched_os::usable_cpus() as usize).collect();
    let bystanders = args.bystanders.then(|| Bystanders::start(&cpus));
    let used_before = daemon.cpu_usage_us(first)?;
    let short: Vec<String> = ["sh", "-c", "exit 7"].map(String::from).into();
    let every = Duration::from_millis(args.every_ms.max(1));
    // Gaps of half to one and a half times `every`, from a fixed seed: at a fixed period every
    // submission fell at one phase of the slot (500 ms is a whole number of slots), the
    // run's start decided which, and with it whether its clients' own start (1.5 ms of a
    // processor here) met the gangs' thaws at every boundary or at none. Users' do not.
    let mut gaps = cosched_sim::rng::Rng::new(CHURN_SEED);
    let began = Instant::now();
    let (mut next, mut short_jobs) = (began, 0);
    // How long each client took, from its start to its exit (µs): what the gangs beside it
    // cost a user (the jobs' weight above all).
    let mut client_times = Vec::new();
    while began.elapsed() < Duration::from_secs(args.seconds) {
        next += every.mul_f64(gaps.between(0.5, 1.5));
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let client = Instant::now();
        match case {
            Case::Churn => {
                daemon.submit(1, &output, &short)?;
                short_jobs += 1;
            }
            Case::Clients => {
                daemon.jobs()?;
            }
            _ => continue,
        }
        client_times.push(client.elapsed().as_micros() as u64);
    }
    let used = daemon.cpu_usage_us(first)? - used_before;
    let share = used as f64 / (began.elapsed().as_micros() as f64 * 2.0);
    let stats = daemon.stats()?;
    // The agent reports its histograms once a second: the last one reported takes in the
    // last short job's end.
    std::thread::sleep(STATUS_PERIOD);
    let tallies = tallies(&daemon)?.since(&tallied_before);
    let mut records = read_log(&daemon.dir().join("state"));
    // Watched until every boundary the records hold.
    let steal_us = steal.elapsed_us()?;
    let stalls = bystanders.map(Bystanders::finish).transpose()?;
    records.retain(|r| r.woke_us >= since);
    let delays = start_delays(&records);
    let machine = Machine::of(&records, steal_us, stalls.as_ref());
    let short_slots = summary(&short_slots(&records, [first, second]));
    let first_late_starts = start_delays(&records_of(&records, first))
        .into_iter()
        .filter(|&d| d > LATE_US)
        .count();
    let crowd = match case {
        Case::Crowd => Some(crowd_size(&daemon.dir().join("crowd.out"))?),
        _ => None,
    };
    if let Some(keep) = &args.keep_logs {
        keep_logs(&daemon, &keep.join(run), &records)?;
    }
    daemon.stop()?;
    let starts = summary(&delays);
    Ok(Row {
        stats,
        short_jobs,
        clients: summary(&client_times),
        crowd,
        share,
        tallies,
        starts: delays.len(),
        start_p99: starts.p99,
        start_max: starts.max,
        late_starts: delays.iter().filter(|&&d| d > LATE_US).count(),
        first_late_starts,
        short_slot_p50: short_slots.p50,
        short_slot_max: short_slots.max,
        machine,
    })
}

/// What the machine did beside cosched: the host's steal, the bystanders' stalls, and which
/// of the clock's late wakeups a bystander was stalled over too.
#[derive(Clone, Copy, Default)]
struct Machine {
    steal_us: u64,
    /// Boundaries logged whose wakeup was later than [`LATE_US`].
    late_wakeups: usize,
    late_with_bystander: usize,
    bystander_wakeups: u64,
    bystander_stalls: usize,
    /// Time some bystander was stalled, and how long they watched (µs).
    stalled_us: i64,
    watched_us: i64,
}

impl Machine {
    fn of(records: &[BoundaryRecord], steal_us: u64, stalls: Option<&Stalls>) -> Machine {
        let late: Vec<(i64, i64)> = records
            .iter()
            .filter_map(|r| Some((r.woke_us - r.lateness_us?, r.woke_us)))
            .filter(|(due, woke)| woke - due > LATE_US as i64)
            .collect();
        let mut machine = Machine {
            steal_us,
            late_wakeups: late.len(),
            ..Machine::default()
        };
        if let Some(stalls) = stalls {
            machine.late_with_bystander = late
                .iter()
                .filter(|&&(due, woke)| stalls.overlap(due, woke))
                .count();
            machine.bystander_wakeups = stalls.wakeups;
            machine.bystander_stalls = stalls.stalls.len();
            machine.stalled_us = stalls.stalled_us();
            machine.watched_us = stalls.span_us;
        }
        machine
    }

    fn add(&mut self, other: &Machine) {
        self.steal_us += other.steal_us;
        self.late_wakeups += other.late_wakeups;
        self.late_with_bystander += other.late_with_bystander;
        self.bystander_wakeups += other.bystander_wakeups;
        self.bystander_stalls += other.bystander_stalls;
        self.stalled_us += other.stalled_us;
        self.watched_us += other.watched_us;
    }

    /// The share of the time some bystander was stalled: how often a late wakeup would meet
    /// one by chance.
    fn stalled_share(&self) -> f64 {
        self.stalled_us as f64 / self.watched_us.max(1) as f64
    }
}

/// Writes the run's boundary records (those measured), its jobs and the daemon's log into `to`.
fn keep_logs(daemon: &Daemon, to: &std::path::Path, records: &[BoundaryRecord]) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    let mut lines = String::new();
    for record in records {
        lines += &serde_json::to_string(record)?;
        lines.push('\n');
    }
    std::fs::write(to.join("boundaries.jsonl"), lines)?;
    std::fs::write(
        to.join("jobs.json"),
        serde_json::to_string_pretty(&daemon.jobs()?)? + "\n",
    )?;
    std::fs::copy(daemon.dir().join("daemon.log"), to.join("daemon.log"))
        .with_context(|| format!("copying the daemon's log into {}", to.display()))?;
    Ok(())
}

/// How long each short job held the processors (µs): from its thaw to the next thaw of one
/// of the long jobs `long`. Both long jobs wait meanwhile, so it is what a short job costs
/// them (its own run, and whatever of its start fell in its slot).
fn short_slots(records: &[BoundaryRecord], long: [u64; 2]) -> Vec<u64> {
    let starts: Vec<(i64, bool)> = records
        .iter()
        .flat_map(|r| r.started.iter())
        .map(|moment| (moment.at_us, long.contains(&moment.job)))
        .collect();
    starts
        .iter()
        .enumerate()
        .filter(|(_, &(_, is_long))| !is_long)
        .filter_map(|(i, &(at, _))| {
            let next = starts[i + 1..].iter().find(|(_, is_long)| *is_long)?;
            u64::try_from(next.0 - at).ok()
        })
        .collect()
}

/// The records with only `job`'s starts in them.
fn records_of(records: &[BoundaryRecord], job: u64) -> Vec<BoundaryRecord> {
    records
        .iter()
        .map(|r| BoundaryRecord {
            started: r.started.iter().filter(|m| m.job == job).cloned().collect(),
            ..r.clone()
        })
        .collect()
}

/// How many sleeping processes the crowd forked, from its output.
fn crowd_size(output: &std::path::Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(output).with_context(|| format!("reading {}", output.display()))?;
    match text.lines().find_map(|l| l.strip_prefix("crowd of ")) {
        Some(n) => n.trim().parse().context("the crowd's count"),
        None => bail!(
            "the crowd did not finish forking within {:?} (its output: {text:?})",
            CROWD_WARMUP
        ),
    }
}

/// From the node's histograms (every boundary and start since the agent started, not only the
/// samples kept): boundaries later than [`LATE_US`], and starts measured for skew with those
/// over [`SKEW_US`] and over [`LATE_US`]. Counts pool across runs, where a short run's p99
/// is its second-worst start or so.
fn tallies(daemon: &Daemon) -> Result<Tallies> {
    let out = crate::daemon::succeeded(
        &mut daemon.command(&["nodes", "--json"]),
        &["nodes", "--json"],
    )?;
    let nodes: Vec<NodeView> =
        serde_json::from_slice(&out.stdout).context("cosched nodes --json")?;
    let bucket = |bound: u64| {
        HISTOGRAM_BOUNDS_US
            .iter()
            .position(|&b| b == bound)
            .with_context(|| format!("{bound} µs is a bucket bound"))
    };
    let (late, skewed) = (bucket(LATE_US)?, bucket(SKEW_US)?);
    let sum = |count: &dyn Fn(&NodeView) -> u64| nodes.iter().map(count).sum();
    Ok(Tallies {
        late_boundaries: sum(&|n| over(&n.status.histograms.lateness, late)),
        skew_samples: sum(&|n| n.status.histograms.skew.buckets.iter().sum()),
        skew_over_target: sum(&|n| over(&n.status.histograms.skew, skewed)),
        skew_over_1ms: sum(&|n| over(&n.status.histograms.skew, late)),
    })
}

#[derive(Default)]
struct Tallies {
    late_boundaries: u64,
    skew_samples: u64,
    skew_over_target: u64,
    skew_over_1ms: u64,
}

impl Tallies {
    /// What was counted after `before` was.
    fn since(&self, before: &Tallies) -> Tallies {
        Tallies {
            late_boundaries: self.late_boundaries - before.late_boundaries,
            skew_samples: self.skew_samples - before.skew_samples,
            skew_over_target: self.skew_over_target - before.skew_over_target,
            skew_over_1ms: self.skew_over_1ms - before.skew_over_1ms,
        }
    }

    fn add(&mut self, other: &Tallies) {
        self.late_boundaries += other.late_boundaries;
        self.skew_samples += other.skew_samples;
        self.skew_over_target += other.skew_over_target;
        self.skew_over_1ms += other.skew_over_1ms;
    }
}

/// One case's figures added up over the rounds (at one slot length and one variant).
struct Pool {
    key: (Case, u64, Variant),
    runs: usize,
    tallies: Tallies,
    late_starts: u64,
    /// Runs with a boundary's wakeup or a start later than [`LATE_US`].
    runs_late: usize,
    skew_p99s: Vec<u64>,
    machine: Machine,
}

fn pool_into(pools: &mut Vec<Pool>, key: (Case, u64, Variant), row: &Row) {
    let index = match pools.iter().position(|p| p.key == key) {
        Some(index) => index,
        None => {
            pools.push(Pool {
                key,
                runs: 0,
                tallies: Tallies::default(),
                late_starts: 0,
                runs_late: 0,
                skew_p99s: Vec::new(),
                machine: Machine::default(),
            });
            pools.len() - 1
        }
    };
    let pool = &mut pools[index];
    pool.runs += 1;
    pool.tallies.add(&row.tallies);
    pool.late_starts += row.late_starts as u64;
    if row.tallies.late_boundaries > 0 || row.late_starts > 0 {
        pool.runs_late += 1;
    }
    pool.skew_p99s.push(row.stats.skew_us.p99);
    pool.machine.add(&row.machine);
}

fn print_pools(pools: &[Pool]) {
    println!(
        "added up over the rounds (wake: the clock's wakeups; start: jobs' starts; runs late: runs with either past 1 ms):"
    );
    println!(
        "{:<6} {:>4} {:>6} {:>6} {:>5} {:>12} {:>7} {:>9} {:>10} {:>10} {:>9} {:>14} {:>8} {:>10} {:>10} {:>11}",
        "case",
        "ms",
        "slice",
        "weight",
        "runs",
        "skew >250µs",
        "%",
        "skew >1ms",
        "wake >1ms",
        "start >1ms",
        "runs late",
        "skew p99 p50",
        "steal",
        "late@bys",
        "bys stalls",
        "stalled"
    );
    for pool in pools {
        let (case, quantum_ms, variant) = pool.key;
        let t = &pool.tallies;
        println!(
            "{:<6} {:>4} {:>4}µs {:>6} {:>5} {:>12} {:>6.2}% {:>9} {:>10} {:>10} {:>9} {:>12}µs {:>6}ms {:>10} {:>10} {:>10.3}%",
            case.name(),
            quantum_ms,
            variant.slice_us,
            variant.jobs_weight,
            pool.runs,
            format!("{}/{}", t.skew_over_target, t.skew_samples),
            100.0 * t.skew_over_target as f64 / t.skew_samples.max(1) as f64,
            t.skew_over_1ms,
            t.late_boundaries,
            pool.late_starts,
            format!("{}/{}", pool.runs_late, pool.runs),
            summary(&pool.skew_p99s).p50,
            pool.machine.steal_us / 1000,
            format!(
                "{}/{}",
                pool.machine.late_with_bystander, pool.machine.late_wakeups
            ),
            format!(
                "{}/{}",
                pool.machine.bystander_stalls, pool.machine.bystander_wakeups
            ),
            100.0 * pool.machine.stalled_share(),
        );
    }
}

/// Samples in the buckets after bucket `within` (bounds are upper bounds).
fn over(histogram: &Histogram, within: usize) -> u64 {
    histogram.buckets.iter().skip(within + 1).sum()
}
