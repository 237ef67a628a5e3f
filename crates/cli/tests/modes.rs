//! Each job its mode, on real processes: one rotation mixes a gang, a moderate and an
//! implicit job, each switched as its own mode says; an `auto` job is measured in its first
//! seconds and moved to the mode it runs best in (a computing job to moderate, an MPI
//! ping-pong whose waits sleep to gang, one that writes to storage to implicit), shown in
//! `ps`. Needs root, as CI runs.

mod common;

use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A job of 2 processes that spin for 600 s of CPU, in `mode`.
fn spinner(d: &Daemon, mode: &str) -> u64 {
    let spin = spin_py();
    d.submit(&[
        "-n", "2", "--mode", mode, "--", "python3", &spin, "2", "600", "0",
    ])
}

#[test]
fn one_rotation_switches_each_job_as_its_own_mode_says() {
    let port = cosched_etcd::testing::free_port();
    let d = Daemon::start(&[
        "--procs",
        "2",
        "--quantum-ms",
        "50",
        "--http",
        &port.to_string(),
    ]);
    let gang = spinner(&d, "gang");
    let moderate = spinner(&d, "moderate");
    let implicit = spinner(&d, "implicit");
    for (job, mode) in [
        (gang, "gang"),
        (moderate, "moderate"),
        (implicit, "implicit"),
    ] {
        let shown = d.job(job);
        assert_eq!(shown["mode"], mode, "{shown}");
        assert!(shown["runs_as"].is_null(), "{shown}");
    }
    let running = wait_until(Duration::from_secs(30), || {
        [gang, moderate, implicit]
            .iter()
            .all(|&job| d.job(job)["state"] == "running" && d.cpu_us(job) > 0)
    });
    assert!(running, "{}", d.log());
    // Sampled through many rotations: the gang job is frozen outside its slot and runs in
    // it; the moderate one is never frozen; the implicit one, a spinner, only once it used its
    // budget of another's slot, never in its own.
    let (mut gang_frozen, mut gang_thawed, mut implicit_frozen) = (0, 0, 0);
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(2) {
        match d.frozen(gang) {
            true => gang_frozen += 1,
            false => gang_thawed += 1,
        }
        implicit_frozen += usize::from(d.frozen(implicit));
        assert!(!d.frozen(moderate), "a moderate job is never frozen");
        std::thread::sleep(Duration::from_millis(7));
    }
    assert!(
        gang_frozen > 10 && gang_thawed > 10,
        "{gang_frozen} {gang_thawed}"
    );
    assert!(implicit_frozen > 10, "{implicit_frozen}\n{}", d.log());
    let (_, scrape) = http_get(port, "/metrics");
    for (mode, running) in [
        ("gang", 1.0),
        ("moderate", 1.0),
        ("implicit", 1.0),
        ("auto", 0.0),
    ] {
        let name = format!("cosched_jobs_running_mode{{mode=\"{mode}\"}}");
        assert_eq!(sample(&scrape, &name), Some(running), "{scrape}");
    }
    let ps = String::from_utf8(d.cosched(&["ps", "--format", "id,mode"]).stdout).unwrap();
    for (job, mode) in [
        (gang, "gang"),
        (moderate, "moderate"),
        (implicit, "implicit"),
    ] {
        assert!(ps.contains(&format!("{job} {mode}")), "{ps}");
    }
    // The chart draws the implicit job, which no boundary switches, as one bar across it.
    let svg = d.gantt_as(0, "1");
    let bars = |job: u64| {
        svg.matches(&format!("<title>job {job} in node local, "))
            .count()
    };
    assert_eq!(bars(implicit), 1, "{svg}");
    assert!(bars(gang) >= 3, "{svg}");
    assert!(
        svg.contains(&format!("{implicit} python3 implicit")),
        "{svg}"
    );
    for job in [gang, moderate, implicit] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
        d.wait_end(job, Duration::from_secs(60));
    }
    // A whole machine's mode is not a job's (refused by the command line's parser).
    for (mode, expected) in [
        ("local", "local is a whole machine's mode"),
        ("fast", "unknown mode 'fast'"),
    ] {
        let out = d.cosched(&["run", "--mode", mode, "--", "true"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
}

/// The median of `values` (none: 0).
fn median(mut values: Vec<i64>) -> i64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// A user (nobody) runs a computing job as `implicit` beside root's gang: never switched, it
/// would take half of the gang's slots. Within them it is held once it used its budget (5 ms
/// a processor), until the boundary: the gang keeps its slot, the implicit job has its own
/// whole, and nothing stays frozen once it ends.
#[test]
fn an_implicit_job_takes_only_its_budget_of_a_gangs_slot() {
    let d = Daemon::start(&["--procs", "2", "--quantum-ms", "100"]);
    let gang = spinner(&d, "gang");
    let busy = "while :; do :; done & while :; do :; done";
    let implicit = d.submit_as(
        NOBODY,
        &["-n", "2", "--mode", "implicit", "--", "sh", "-c", busy],
    );
    let running = wait_until(Duration::from_secs(30), || {
        [gang, implicit]
            .iter()
            .all(|&job| d.job(job)["state"] == "running" && d.cpu_us(job) > 0)
    });
    assert!(running, "{}", d.log());
    let slots = per_slot_cpu(&d, gang, implicit, 16);
    // The gang's slots: where it ran (its own whole 70 ms middle is up to 140 ms of CPU).
    let in_gangs: Vec<(i64, i64)> = slots.iter().copied().filter(|s| s.0 > 40_000).collect();
    assert!(in_gangs.len() >= 4, "{slots:?}");
    let gang_cpu = median(in_gangs.iter().map(|s| s.0).collect());
    let implicit_cpu = median(in_gangs.iter().map(|s| s.1).collect());
    assert!(
        implicit_cpu * 3 < gang_cpu,
        "in the gang's slots, gang {gang_cpu} µs and implicit {implicit_cpu} µs (median): {slots:?}\n{}",
        d.log()
    );
    assert!(
        d.log().contains("(implicit) used its budget"),
        "{}",
        d.log()
    );
    // Its own slots it has whole (the gang frozen).
    assert!(slots.iter().any(|s| s.0 == 0 && s.1 > 40_000), "{slots:?}");
    for job in [gang, implicit] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
        d.wait_end(job, Duration::from_secs(60));
    }
}

/// One user's many implicit jobs share one budget of a gang's slot: eight computing jobs of
/// nobody's, each within a budget of its own (5 ms of its processor), would take 40 ms of
/// CPU of each of root's 100 ms slots; together they may take the node's budget (5 ms a
/// processor). The gang, thawed, is ahead of them on the processors at first, so they spend
/// it over the slot's first 20-25 ms, and the middle (from 15 ms on) sees some of it.
#[test]
fn one_users_many_implicit_jobs_share_one_budget_of_a_gangs_slot() {
    let d = Daemon::start(&["--procs", "2", "--quantum-ms", "100", "--mpl", "8"]);
    let gang = spinner(&d, "gang");
    let busy = [
        "-n",
        "1",
        "--mode",
        "implicit",
        "--",
        "sh",
        "-c",
        "while :; do :; done",
    ];
    let implicit: Vec<u64> = (0..8).map(|_| d.submit_as(NOBODY, &busy)).collect();
    let running = wait_until(Duration::from_secs(30), || {
        implicit
            .iter()
            .chain([&gang])
            .all(|&job| d.job(job)["state"] == "running" && d.cpu_us(job) > 0)
    });
    assert!(running, "{}", d.log());
    // The implicit jobs' CPU summed, as if one job's (its id: 0).
    let cpu_us = |job: u64| match job {
        0 => implicit.iter().map(|&j| d.cpu_us(j)).sum(),
        job => d.cpu_us(job),
    };
    let slots = per_slot_cpu_of(&d.json(&["matrix", "--json"]), cpu_us, gang, 0, 40);
    let in_gangs: Vec<(i64, i64)> = slots.iter().copied().filter(|s| s.0 > 40_000).collect();
    assert!(in_gangs.len() >= 4, "{slots:?}");
    let implicit_cpu = median(in_gangs.iter().map(|s| s.1).collect());
    assert!(
        implicit_cpu < 20_000,
        "nobody's implicit jobs took {implicit_cpu} µs (median) of the gang's slot middles: \
         {slots:?}\n{}",
        d.log()
    );
    for job in implicit.into_iter().chain([gang]) {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
        d.wait_end(job, Duration::from_secs(60));
    }
}

#[test]
fn a_daemon_in_local_mode_refuses_a_jobs_mode() {
    let d = Daemon::start(&["--procs", "2", "--mode", "local"]);
    let out = d.cosched(&["run", "--mode", "gang", "--", "true"]);
    refused(&out, "runs in local mode");
}

/// What `ps --json` says of `job` once its mode was chosen (at most `patience`).
fn chosen(d: &Daemon, job: u64, patience: Duration) -> Value {
    let mut shown = Value::Null;
    let done = wait_until(patience, || {
        shown = d.job(job);
        !shown["runs_as"].is_null()
    });
    assert!(done, "no mode chosen for job {job}: {shown}\n{}", d.log());
    shown
}

#[test]
fn auto_jobs_are_measured_and_moved_to_the_mode_they_run_best_in() {
    let d = Daemon::start(&["--procs", "2", "--quantum-ms", "50", "--mode", "auto"]);
    let computing = spinner(&d, "auto");
    // Its ranks wait for each other's messages spin-then-block (the environment an auto job
    // gets), out of step beside the computing job.
    let program = made("bench/workloads", "build/pingpong");
    let mut args = vec!["-n", "2", "--", "env"];
    args.extend(MPIRUN_TWO_RANKS);
    args.extend([program.to_str().unwrap(), "-n", "100000000", "-w", "10"]);
    let pingpong = d.submit(&args);
    let file = d.dir.join("written");
    let script = format!(
        "while :; do dd if=/dev/zero of={} bs=64k count=16 oflag=dsync status=none; done",
        file.display()
    );
    let writer = d.submit(&["-n", "1", "--", "sh", "-c", &script]);
    let patience = Duration::from_secs(120);
    for (job, expected) in [
        (computing, "moderate"),
        (pingpong, "gang"),
        (writer, "implicit"),
    ] {
        let shown = chosen(&d, job, patience);
        assert_eq!(shown["mode"], "auto", "{shown}");
        assert_eq!(shown["runs_as"], expected, "{shown}\n{}", d.log());
        assert!(shown["mode_why"]
            .as_str()
            .is_some_and(|why| !why.is_empty()));
        assert!(
            d.log()
                .contains(&format!("job {job}: measured on node local over")),
            "{}",
            d.log()
        );
    }
    // Switched as chosen from then on: the gang ping-pong is frozen outside its slots, the
    // moderate job never; the implicit writer is never switched, but is held for the rest of
    // a switched job's slot once it used its budget there (invariant 57): it runs on.
    let frozen_once = wait_until(Duration::from_secs(10), || d.frozen(pingpong));
    assert!(frozen_once, "{}", d.log());
    let writer_cpu = d.cpu_us(writer);
    let samples: Vec<bool> = (0..20)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(35));
            d.frozen(computing)
        })
        .collect();
    assert!(
        samples.iter().all(|&frozen| !frozen),
        "the moderate job was frozen: {samples:?}\n{}",
        d.log()
    );
    assert!(
        d.cpu_us(writer) > writer_cpu,
        "the implicit writer did not run in 0.7 s\n{}",
        d.log()
    );
    let ps = String::from_utf8(d.cosched(&["ps", "--format", "id,mode"]).stdout).unwrap();
    assert!(ps.contains(&format!("{pingpong} auto:gang")), "{ps}");
    for job in [computing, pingpong, writer] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
        d.wait_end(job, Duration::from_secs(60));
    }
    let _ = std::fs::remove_file(file);
}
