//! Time limits on real processes (needs root, as CI runs): a job is stopped when the time it
//! was let run reaches its limit, not its wall time, and ends `timeout`; bad limits are
//! refused with what was wrong.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn a_time_sharing_job_is_stopped_after_its_limit_of_run_time_and_ends_timeout() {
    let d = Daemon::start(&["--procs", "1", "--quantum-ms", "50", "--mpl", "2"]);
    let limited = d.submit(&["-n", "1", "--time", "0:2", "--", "sleep", "100"]);
    let other = d.submit(&["-n", "1", "--", "sleep", "100"]);
    let seen = d.job(limited);
    assert_eq!(seen["time_limit_us"], 2_000_000, "{seen}");
    let ended = d.wait_end(limited, Duration::from_secs(60));
    assert_eq!(ended["state"], "timeout", "{ended}");
    assert_eq!(ended["exit"]["signal"], libc::SIGTERM, "{ended}");
    let run_us = ended["run_us"].as_i64().unwrap();
    assert!(run_us >= 2_000_000, "stopped before its limit: {ended}");
    // Half the slots were the other job's: the wall time is about twice the limit.
    let wall = ended["ended_us"].as_i64().unwrap() - ended["started_us"].as_i64().unwrap();
    assert!(
        wall >= 3_500_000,
        "frozen time counted against it: {wall} µs, {ended}"
    );
    assert!(
        d.log()
            .contains(&format!("job {limited}: time limit reached")),
        "{}",
        d.log()
    );
    assert_eq!(d.job(other)["state"], "running");
    assert!(d.cosched(&["cancel", &other.to_string()]).status.success());
}

#[test]
fn a_blocking_run_past_its_limit_says_so_and_exits_as_killed() {
    let d = Daemon::start(&["--quantum-ms", "50"]);
    let out = d.cosched(&["run", "-n", "1", "--time", "0:1", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stopped at its time limit"), "{stderr}");
}

#[test]
fn ps_and_metrics_show_the_time_left_and_the_reason_a_job_waits() {
    let port = cosched_etcd::testing::free_port().to_string();
    let d = Daemon::start(&[
        "--procs",
        "1",
        "--quantum-ms",
        "50",
        "--mpl",
        "1",
        "--http",
        &port,
    ]);
    let running = d.submit(&["-n", "1", "--time", "10", "--", "sleep", "100"]);
    let waiting = d.submit(&["-n", "1", "--", "sleep", "100"]);
    let out = d.cosched(&["ps"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let row = |job: u64| {
        table
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{job} ")))
            .unwrap_or_else(|| panic!("no row for {job}: {table}"))
            .to_string()
    };
    assert!(
        table.contains("TIME_LEFT") && table.contains("REASON"),
        "{table}"
    );
    assert!(row(running).contains("00:09:5"), "{table}");
    assert!(row(waiting).contains("resources"), "{table}");
    assert_eq!(d.job(waiting)["reason"], "resources");
    let metrics = http_get(port.parse().unwrap(), "/metrics").1;
    let waiting_for = |reason: &str| {
        sample(
            &metrics,
            &format!(r#"cosched_jobs_waiting{{reason="{reason}"}}"#),
        )
    };
    assert_eq!(waiting_for("resources"), Some(1.0), "{metrics}");
    assert_eq!(waiting_for("limit"), Some(0.0), "{metrics}");
    for job in [running, waiting] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
    }
}

#[test]
fn bad_limits_and_memory_sizes_are_refused_with_what_was_wrong() {
    let d = Daemon::start(&["--quantum-ms", "100"]);
    for (args, expected) in [
        (vec!["--time", "1:2:3:4"], "not a time limit"),
        (vec!["--time", "0"], "at least one second"),
        (vec!["--time", "400-0"], "longer than a year"),
        (vec!["--mem", "0"], "not a memory size"),
        (vec!["--mem", "12Q"], "not a memory size"),
        (vec!["--time", "00:60"], "seconds must be below 60"),
        (vec!["--time", "1-24:00"], "hours must be below 24"),
        (vec!["--mem", "1K"], "less than 1M"),
        (vec!["--mem-per-cpu", "512K"], "less than 1M"),
        (
            vec!["--mem", "1G", "--mem-per-cpu", "1G"],
            "cannot be used with",
        ),
    ] {
        let mut all = vec!["run", "-n", "1"];
        all.extend(args.iter().copied());
        all.extend(["--", "true"]);
        let out = d.cosched(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.contains(expected), "{args:?}: {stderr}");
    }
    // The request itself, past the CLI: the daemon says what is wrong.
    let answer = raw(
        &d.socket(),
        br#"{"op":"run","argv":["true"],"env":[],"cwd":"/","procs":1,"time_limit_s":0}
"#,
    );
    assert!(answer.contains("time limit 0 s is not between"), "{answer}");
}

/// A policy file as root keeps one (root's, writable by no one else); removed when dropped
/// (with its directory once no other test's file is in it).
struct Policy(std::path::PathBuf);

impl Policy {
    fn write(text: &str) -> Policy {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("cosched-limits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("policy-{}.toml", text.len()));
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        Policy(file)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[test]
fn a_user_at_a_limit_waits_with_the_reason_and_past_the_queued_limit_is_refused() {
    let file = Policy::write("[limits]\nrunning_jobs = 1\nqueued_jobs = 1\n");
    let d = Daemon::start(&[
        "--config",
        file.path(),
        "--procs",
        "2",
        "--quantum-ms",
        "50",
    ]);
    let as_nobody = |args: &[&str]| d.cosched_as(65534, args);
    let submit = |args: &[&str]| {
        let mut all = vec!["run", "--detach", "--output", "/dev/null", "-n", "1", "--"];
        all.extend_from_slice(args);
        as_nobody(&all)
    };
    let first = job_id(submit(&["sleep", "100"]));
    let second = job_id(submit(&["sleep", "100"]));
    let refused = submit(&["sleep", "100"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("limits.queued_jobs = 1"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    // A free processor, and nobody's second job waits for its owner's limit; root's runs.
    let waiting = d.job(second);
    assert_eq!(
        (waiting["state"].as_str(), waiting["reason"].as_str()),
        (Some("queued"), Some("limit"))
    );
    let root = d.submit(&["-n", "1", "--", "sleep", "100"]);
    assert!(wait_until(Duration::from_secs(10), || d.job(root)["state"]
        == "running"));
    assert!(as_nobody(&["cancel", &first.to_string()]).status.success());
    assert!(
        wait_until(Duration::from_secs(20), || d.job(second)["state"]
            == "running"),
        "{}",
        d.job(second)
    );
    for job in [second, root] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
    }
}

#[test]
fn a_short_job_with_a_limit_backfills_ahead_of_a_wide_one_on_real_processes() {
    // The default policy backfills (EASY); one slice, so the reservation is plain EASY's.
    let d = Daemon::start(&["--procs", "2", "--mpl", "1", "--quantum-ms", "50"]);
    let running = d.submit(&["-n", "1", "--time", "10:00", "--", "sleep", "100"]);
    let wide = d.submit(&["-n", "2", "--time", "10:00", "--", "sleep", "100"]);
    assert_eq!(d.job(wide)["reason"], "resources");
    // Its end could come after the wide job's reservation (the running job's limit): it
    // waits behind it, on a free processor.
    let long = d.submit(&["-n", "1", "--time", "30:00", "--", "sleep", "100"]);
    assert_eq!(d.job(long)["reason"], "priority");
    // This one's end comes before the reservation: it starts at once.
    let short = d.submit(&["-n", "1", "--time", "5:00", "--", "sleep", "100"]);
    assert!(wait_until(Duration::from_secs(10), || d.job(short)
        ["state"]
        == "running"));
    // The reservation holds: the wide job starts when its processors are free.
    for job in [running, short] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
    }
    assert!(
        wait_until(Duration::from_secs(20), || d.job(wide)["state"]
            == "running"),
        "{}",
        d.job(wide)
    );
    assert_eq!(d.job(long)["state"], "queued");
    for job in [wide, long] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
    }
}

#[test]
fn the_daemon_refuses_more_processors_than_it_may_use() {
    let out = std::process::Command::new(COSCHED)
        .args([
            "daemon",
            "--procs",
            "100000",
            "--socket",
            "/nonexistent/cosched.sock",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--procs 100000 is more than the"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

#[test]
fn two_jobs_whose_memory_does_not_fit_together_never_share_the_processors() {
    let file = Policy::write("[memory]\nfit = true\nnode_memory = \"1G\"\n");
    let d = Daemon::start(&[
        "--config",
        file.path(),
        "--procs",
        "2",
        "--mpl",
        "2",
        "--quantum-ms",
        "50",
    ]);
    let job = |procs: &str, mem: &str, time: &str| {
        d.submit(&[
            "-n", procs, "--mem", mem, "--time", time, "--", "sleep", "100",
        ])
    };
    let first = job("1", "700M", "10:00");
    // A processor is free in the first's slice and both are in a new one, but not the memory.
    let second = job("2", "700M", "10:00");
    // Behind the second, it starts by backfilling: it ends (by its limit) before the second
    // could start, and fits beside the first.
    let small = job("1", "200M", "1:00");
    assert!(wait_until(Duration::from_secs(10), || d.job(small)
        ["state"]
        == "running"));
    // The small one time-shares with the first; the second would page one of them out.
    let waiting = d.job(second);
    assert_eq!(
        (waiting["state"].as_str(), waiting["reason"].as_str()),
        (Some("queued"), Some("memory")),
        "{waiting}"
    );
    assert_eq!(d.job(first)["mem_bytes"], 700u64 << 20);
    // Suspended, the first keeps its pages: the second still may not start.
    assert!(d.cosched(&["suspend", &first.to_string()]).status.success());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(d.job(second)["reason"], "memory", "{}", d.job(second));
    assert!(d.cosched(&["resume", &first.to_string()]).status.success());
    assert!(wait_until(Duration::from_secs(10), || d.job(first)
        ["state"]
        == "running"));
    let out = d.cosched(&["run", "-n", "1", "--mem", "2G", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("memory"),
        "a job larger than a node is refused: {stderr}"
    );
    assert!(d.cosched(&["cancel", &first.to_string()]).status.success());
    assert!(
        wait_until(Duration::from_secs(20), || d.job(second)["state"]
            == "running"),
        "{}",
        d.job(second)
    );
    for job in [second, small] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
    }
}
