//! Blocked gangs give their slot away (`--give-away-after-ms`), on real processes: two 1-CPU
//! jobs on one processor at MPL 2, one that sleeps most of the time and one that computes.
//! Needs root. Bounds are generous (the machine is shared): with the option on the computing
//! job gets clearly more than half the processor, off it gets about half; a job that computes
//! never gives its slot away; nothing is left frozen after the daemon stops.

mod common;
use common::*;
use cosched_agent::boundaries::read_log;
use cosched_proto::BoundaryRecord;
use std::time::{Duration, Instant};

const SLEEPER: [&str; 5] = ["-n", "1", "--", "sh", "-c"];
const SLEEP_LOOP: &str = "while :; do sleep 0.05; done";

/// A daemon scheduling one processor at MPL 2 with 100 ms slots, giving blocked slots away
/// after `give_away_ms` (0: never).
fn daemon(give_away_ms: &str) -> Daemon {
    daemon_on(1, give_away_ms)
}

/// The same on `procs` processors.
fn daemon_on(procs: u32, give_away_ms: &str) -> Daemon {
    Daemon::start(&[
        "--procs",
        &procs.to_string(),
        "--mpl",
        "2",
        "--quantum-ms",
        "100",
        "--give-away-after-ms",
        give_away_ms,
    ])
}

fn spinner(d: &Daemon) -> u64 {
    d.submit(&["-n", "1", "--", "python3", &spin_py(), "1", "1000", "0"])
}

fn sleeper(d: &Daemon) -> u64 {
    let mut args = SLEEPER.to_vec();
    args.push(SLEEP_LOOP);
    d.submit(&args)
}

/// Waits until every job runs (each thawed at least once), then the share of one processor
/// each used over two seconds, from its cgroup's CPU time.
fn shares(d: &Daemon, jobs: &[u64]) -> Vec<f64> {
    let started = wait_until(Duration::from_secs(30), || {
        jobs.iter()
            .all(|&j| d.job(j)["state"] == "running" && d.cpu_us(j) > 0)
    });
    assert!(started, "every job runs: {}", d.log());
    let used: Vec<i64> = jobs.iter().map(|&j| d.cpu_us(j)).collect();
    let began = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let wall = began.elapsed().as_micros() as f64;
    let shares: Vec<f64> = jobs
        .iter()
        .zip(used)
        .map(|(&j, used)| (d.cpu_us(j) - used) as f64 / wall)
        .collect();
    // For the record (`--nocapture`): what the bounds the tests assert are generous around.
    eprintln!("jobs {jobs:?} used {shares:.2?} of a processor each");
    shares
}

/// Waits until each of the computing `jobs` is in its spin loop (300 ms of CPU: past the
/// interpreter's start, about 30 ms reading its files, when it may be all blocked for a
/// moment and rightly give its slot away); returns the moment, for [`handovers`].
fn computing_from(d: &Daemon, jobs: &[u64]) -> i64 {
    let spinning = wait_until(Duration::from_secs(60), || {
        jobs.iter().all(|&j| d.cpu_us(j) > 300_000)
    });
    assert!(spinning, "the computing jobs {jobs:?} run: {}", d.log());
    now_us()
}

/// Records of the boundary log from `from` on in which some job's processors were given away.
fn handovers(d: &Daemon, from: i64) -> Vec<BoundaryRecord> {
    read_log(&d.state_dir())
        .into_iter()
        .filter(|r| !r.blocked.is_empty() && r.woke_us >= from)
        .collect()
}

/// Stops the daemon cleanly: no job may be left frozen (invariant 13).
fn stop(mut d: Daemon, jobs: &[u64]) {
    d.signal(libc::SIGTERM);
    d.wait_exit();
    for &job in jobs {
        assert!(!d.frozen(job), "job {job} left frozen after the stop");
    }
}

#[test]
fn a_sleeping_gang_gives_its_slot_to_the_computing_one() {
    let d = daemon("5");
    let (sleeps, computes) = (sleeper(&d), spinner(&d));
    let from = computing_from(&d, &[computes]);
    let share = shares(&d, &[computes, sleeps])[0];
    assert!(
        share > 0.6,
        "the computing job got {:.0} % of the processor; log: {}",
        share * 100.0,
        d.log()
    );
    // The log shows the handover: the computing job let run within the sleeper's slot,
    // at least the window after its boundary.
    let records = handovers(&d, from);
    assert!(!records.is_empty(), "no handover logged: {}", d.log());
    let m = d.json(&["matrix", "--json"]);
    let (epoch, quantum) = (
        m["epoch_us"].as_i64().unwrap(),
        m["quantum_us"].as_i64().unwrap(),
    );
    for record in &records {
        assert_eq!(record.blocked, vec![sleeps], "{record:?}");
        assert_eq!(record.lateness_us, None, "{record:?}");
        let started: Vec<u64> = record.started.iter().map(|m| m.job).collect();
        assert_eq!(started, vec![computes], "{record:?}");
        let into_slot = (record.started[0].at_us - epoch).rem_euclid(quantum);
        assert!(
            into_slot >= 5_000,
            "{record:?}: {into_slot} µs into its slot"
        );
    }
    stop(d, &[sleeps, computes]);
}

#[test]
fn each_job_of_a_slice_lends_only_its_own_processor() {
    // First fit, in submission order: slice 1 holds the sleeper (CPU 0) and a computing job
    // (CPU 1), slice 2 a computing job on each CPU.
    let d = daemon_on(2, "5");
    let sleeps = sleeper(&d);
    let beside = spinner(&d);
    let (after_sleeper, after_beside) = (spinner(&d), spinner(&d));
    let from = computing_from(&d, &[beside, after_sleeper, after_beside]);
    let got = shares(&d, &[after_sleeper, after_beside, beside, sleeps]);
    assert!(
        got[0] > 0.6 && got[1] < 0.6 && got[2] < 0.6,
        "only the job on the sleeper's processor gets more than its slots: {got:?}"
    );
    let records = handovers(&d, from);
    assert!(!records.is_empty(), "no handover logged: {}", d.log());
    for record in &records {
        let started: Vec<u64> = record.started.iter().map(|m| m.job).collect();
        assert_eq!(
            (&record.blocked, started),
            (&vec![sleeps], vec![after_sleeper])
        );
    }
    stop(d, &[sleeps, beside, after_sleeper, after_beside]);
}

/// On a daemon giving slots away after `give_away_ms`, a computing job beside the job
/// `beside` starts (itself computing: `beside_computes`) keeps to its own slots (about half
/// the processor), and nothing is handed over once they compute.
fn keeps_to_its_slots(give_away_ms: &str, beside: fn(&Daemon) -> u64, beside_computes: bool) {
    let d = daemon(give_away_ms);
    let (other, computes) = (beside(&d), spinner(&d));
    let computing = if beside_computes {
        vec![other, computes]
    } else {
        vec![computes]
    };
    let from = computing_from(&d, &computing);
    let share = shares(&d, &[computes, other])[0];
    assert!(
        share < 0.6,
        "job {computes} got {:.0} % of the processor in its own slots alone",
        share * 100.0
    );
    // Without the option, never: not even while a job starts.
    let from = if give_away_ms == "0" { 0 } else { from };
    let records = handovers(&d, from);
    assert!(records.is_empty(), "{records:?}");
    stop(d, &[other, computes]);
}

#[test]
fn without_the_option_the_computing_job_keeps_to_its_own_slots() {
    keeps_to_its_slots("0", sleeper, false);
}

#[test]
fn a_job_that_computes_never_gives_its_slot_away() {
    keeps_to_its_slots("5", spinner, true);
}

/// A 1-CPU job that appends the time (ns) to `file` every 20 ms, asleep in between.
fn ticker(d: &Daemon, file: &std::path::Path) -> u64 {
    let program = format!(
        "import time\nf = open({:?}, 'a')\nwhile True:\n    f.write(f'{{time.time_ns()}}\\n')\n    f.flush()\n    time.sleep(0.02)\n",
        file.display().to_string()
    );
    d.submit(&["-n", "1", "--", "python3", "-c", &program])
}

#[test]
fn a_blocked_gang_stays_loose_past_its_slot_and_is_held_once_it_computes() {
    let d = Daemon::start(&[
        "--procs",
        "1",
        "--mpl",
        "3",
        "--quantum-ms",
        "100",
        "--give-away-after-ms",
        "5",
    ]);
    let file = d.dir.join("ticks");
    let (ticks, computes) = (ticker(&d, &file), spinner(&d));
    // One that sleeps 150 ms and then computes 50 ms: found blocked, kept loose, and frozen
    // in another job's slot once it computes past the window.
    let bursts = d.submit(&[
        "-n", "1", "--", "python3", "-c",
        "import time\nwhile True:\n    time.sleep(0.15)\n    t = time.process_time()\n    while time.process_time() < t + 0.05: pass\n",
    ]);
    let share = shares(&d, &[computes, ticks, bursts])[0];
    // Its own third, and most of the sleepers' slots.
    assert!(
        share > 0.45,
        "the computing job got {share:.2} of the processor"
    );
    let m = d.json(&["matrix", "--json"]);
    let (epoch, quantum) = (
        m["epoch_us"].as_i64().unwrap(),
        m["quantum_us"].as_i64().unwrap(),
    );
    let slices = m["slices"].as_array().unwrap().len() as i64;
    // The ticker wrote in every slice's slots, not only its own: it was never frozen for
    // sleeping.
    let mut per_slice = vec![0usize; slices as usize];
    for line in std::fs::read_to_string(&file).unwrap().lines() {
        let us = line.parse::<i64>().unwrap() / 1_000;
        per_slice[((us - epoch).div_euclid(quantum)).rem_euclid(slices) as usize] += 1;
    }
    let total: usize = per_slice.iter().sum();
    assert!(
        total > 0 && per_slice.iter().all(|&n| n * 4 * slices as usize >= total),
        "ticks by slice {per_slice:?}: {}",
        d.log()
    );
    // The burster was stopped within another job's slot (a stop not on a boundary).
    let held = wait_until(Duration::from_secs(20), || {
        read_log(&d.state_dir())
            .into_iter()
            .any(|r| r.lateness_us.is_none() && r.stopped.iter().any(|m| m.job == bursts))
    });
    assert!(held, "never held within a slot: {}", d.log());
    stop(d, &[ticks, computes, bursts]);
}

#[test]
fn a_bad_window_is_refused_in_one_line() {
    let out = std::process::Command::new(COSCHED)
        .args(["daemon", "--give-away-after-ms", "700000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--give-away-after-ms"), "{err}");
}

/// What detection costs, per read and per slot (`cargo test -p cosched-cli --test give_away
/// -- --ignored --nocapture`): a job of four sleeping processes, each way of reading its
/// state timed over 2,000 reads. Figures only: nothing asserted on them.
#[test]
#[ignore]
fn measure_detection_costs() {
    let d = daemon("0");
    let mut args = SLEEPER.to_vec();
    args.push("sleep 100 & sleep 100 & sleep 100 & wait");
    let job = d.submit(&args);
    let ready = wait_until(Duration::from_secs(30), || {
        cosched_cgroups::procfs::read_kernel_file(&d.cgroup(job).join("cgroup.procs"))
            .is_ok_and(|pids| pids.lines().count() == 4)
    });
    assert!(ready, "the job's four processes started: {}", d.log());
    let dir = d.cgroup(job);
    let pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let time = |what: &str, read: &dyn Fn() -> bool| -> Option<f64> {
        if !read() {
            println!("{what}: not available here");
            return None;
        }
        let began = Instant::now();
        for _ in 0..2_000 {
            std::hint::black_box(read());
        }
        let us = began.elapsed().as_secs_f64() * 1e6 / 2_000.0;
        println!("{what}: {us:.1} µs a read");
        Some(us)
    };
    let usage = time("cpu.stat usage_usec (v2)", &|| {
        cosched_cgroups::cpu_usage_of(&dir).is_ok()
    });
    let psi = time("cpu.pressure (PSI, v2)", &|| {
        cosched_cgroups::procfs::read_kernel_file(&dir.join("cpu.pressure")).is_ok()
    });
    let states = time("/proc/PID/task/TID/stat of 4 processes", &|| {
        cosched_agent::asleep_by(&pids, i64::MAX)
    });
    // A look every half window of 5 ms: 4 looks in a 10 ms slot, 40 in a 100 ms one.
    for quantum_ms in [10.0, 100.0] {
        let looks = quantum_ms / 2.5;
        for (what, per_read) in [("cpu.stat", usage), ("PSI", psi), ("/proc", states)] {
            if let Some(us) = per_read {
                let slot_us = looks * us;
                println!(
                    "{quantum_ms} ms slot, polling {what}: {slot_us:.0} µs a slot a job ({:.2} % of a processor)",
                    slot_us / (quantum_ms * 10.0)
                );
            }
        }
    }
    stop(d, &[job]);
}
