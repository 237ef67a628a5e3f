//! Stalled jobs on real processes: an Open MPI program whose ranks both receive first
//! (bench/workloads/deadlock.c, waiting asleep) is reported stalled in `ps`, the console and
//! the metrics, and with `action = "cancel"` ends failed, noted "stalled"; a job that computes
//! and one that sleeps a second between writes to a file, alongside it, never are.

mod common;

use common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// The `[stall]` section (2 s of a job's own slots), in a policy file the daemon trusts.
fn policy(action: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let file = std::env::temp_dir().join(format!(
        "cosched-stall-{}-{action}.toml",
        std::process::id()
    ));
    let text = format!("[stall]\nafter = \"0:02\"\naction = \"{action}\"\n");
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    file
}

fn start(action: &str, more: &[&str]) -> Daemon {
    let file = policy(action);
    let mut args = vec!["--config", file.to_str().unwrap(), "--procs", "2"];
    args.extend_from_slice(&["--quantum-ms", "50"]);
    args.extend_from_slice(more);
    let d = Daemon::start(&args);
    let _ = std::fs::remove_file(file);
    d
}

/// Submits the deadlocking MPI program on 2 processors.
fn deadlock(d: &Daemon) -> u64 {
    let program = made("bench/workloads", "build/deadlock");
    let mut args = vec!["-n", "2", "--", "env"];
    args.extend(MPIRUN_TWO_RANKS);
    args.push(program.to_str().unwrap());
    d.submit(&args)
}

fn stalled_since(job: &Value) -> Option<i64> {
    job["stalled_since_us"].as_i64()
}

#[test]
fn a_deadlocked_mpi_job_is_reported_stalled_and_busy_or_writing_jobs_are_not() {
    let port = cosched_etcd::testing::free_port();
    let d = start("report", &["--http", &port.to_string()]);
    let stuck = deadlock(&d);
    let busy = d.submit(&["-n", "2", "--", "python3", &spin_py(), "2", "600", "0"]);
    let written = d.dir.join("written");
    let script = format!(
        "for i in $(seq 600); do sleep 1; echo $i >> {}; done",
        written.display()
    );
    let writer = d.submit(&["-n", "2", "--", "sh", "-c", &script]);
    let mut last = Value::Null;
    let reported = wait_until(Duration::from_secs(120), || {
        last = d.job(stuck);
        stalled_since(&last).is_some()
    });
    assert!(reported, "never stalled: {last}\n{}", d.log());
    assert_eq!(last["state"], "running", "the state stays: {last}");
    let since = stalled_since(&last).unwrap();
    let started = last["started_us"].as_i64().unwrap();
    assert!(since >= started && since <= now_us(), "{last}");
    let (_, scrape) = http_get(port, "/metrics");
    assert_eq!(
        sample(&scrape, "cosched_jobs_stalled"),
        Some(1.0),
        "{scrape}"
    );
    let (_, console) = http_get(port, "/");
    let row = console
        .split("<tr ")
        .find(|row| row.starts_with(&format!("data-job=\"{stuck}\"")))
        .unwrap_or_else(|| panic!("no row of job {stuck}: {console}"));
    assert!(row.contains("<td>stalled for "), "{row}");
    let ps = String::from_utf8(d.cosched(&["ps", "--format", "id,reason"]).stdout).unwrap();
    let shown = ps.lines().any(|line| {
        let cells: Vec<&str> = line.split_whitespace().collect();
        cells.len() == 2 && cells[0] == stuck.to_string() && cells[1].starts_with("stalled(")
    });
    assert!(shown, "{ps}");
    // The others have each been let run three times the stall time (in their own slots), and
    // are never stalled on the way.
    let mut others = (Value::Null, Value::Null);
    let long_enough = wait_until(Duration::from_secs(120), || {
        others = (d.job(busy), d.job(writer));
        for job in [&others.0, &others.1] {
            assert_eq!(stalled_since(job), None, "{job}\n{}", d.log());
        }
        [&others.0, &others.1]
            .iter()
            .all(|job| job["run_us"].as_i64().unwrap() >= 6_000_000)
    });
    assert!(long_enough, "{others:?}");
    assert!(std::fs::read_to_string(&written).unwrap().lines().count() >= 2);
    // Stalled still, or again within a stall time: its launcher wakes now and then (a byte
    // read or written is activity), which rightly clears the stall until the next 2 s (a CI
    // run caught one such moment).
    let still = wait_until(Duration::from_secs(10), || {
        stalled_since(&d.job(stuck)).is_some()
    });
    assert!(still, "still stalled: {}", d.log());
    // Suspended, it is stopped by cosched, not stalled; resumed, it starts afresh.
    assert!(d.cosched(&["suspend", &stuck.to_string()]).status.success());
    assert_eq!(stalled_since(&d.job(stuck)), None);
    assert!(d.cosched(&["resume", &stuck.to_string()]).status.success());
    assert_eq!(stalled_since(&d.job(stuck)), None);
    for job in [stuck, busy, writer] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
        d.wait_end(job, Duration::from_secs(60));
    }
}

#[test]
fn with_the_cancel_action_a_deadlocked_job_ends_failed_noted_stalled() {
    let d = start("cancel", &[]);
    let stuck = deadlock(&d);
    let ended = d.wait_end(stuck, Duration::from_secs(120));
    assert_eq!(ended["state"], "failed", "{ended}\n{}", d.log());
    assert_eq!(ended["note"], "stalled", "{ended}");
}
