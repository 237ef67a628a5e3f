//! The daemon with real processes in real cgroups (needs root, as CI runs): gang mode never
//! runs two jobs at once, moderate mode favours the running slice, a kill -9 of the daemon loses
//! no job and leaves none frozen, bad requests are refused, idle jobs leave the rotation.

mod common;

use common::*;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn gang_jobs_never_run_at_the_same_moment_and_keep_their_exit_codes() {
    let d = Daemon::start(&["--quantum-ms", "100"]);
    let spin = spin_py();
    let a = d.submit(&["-n", "2", "--", "python3", &spin, "2", "2.5", "5"]);
    let b = d.submit(&["-n", "2", "--", "python3", &spin, "2", "2.5", "6"]);
    let slots = per_slot_cpu(&d, a, b, 16);
    // The chart of what ran (anyone may draw it): the two jobs take turns, never together.
    let svg = d.gantt_as(NOBODY, "1.2");
    let stretches = |job: u64| -> Vec<(f64, f64)> {
        let head = format!("<title>job {job} in node local, ");
        svg.split(&head)
            .skip(1)
            .map(|rest| {
                let times: Vec<f64> = rest
                    .split(" s")
                    .take(2)
                    .map(|t| t.trim_start_matches(" to ").trim().parse().unwrap())
                    .collect();
                (times[0], times[1])
            })
            .collect()
    };
    let (of_a, of_b) = (stretches(a), stretches(b));
    assert!(
        of_a.len() >= 3 && of_b.len() >= 3,
        "{of_a:?} {of_b:?}\n{svg}"
    );
    for &(from, to) in &of_a {
        assert!(
            of_b.iter().all(|&(f, t)| t <= from || f >= to),
            "job {a} ran {from}-{to} s while job {b} ran: {of_b:?}"
        );
    }
    // `wait` blocks until both ended and reports the first failure in the order given.
    let waited = d.cosched(&["wait", &b.to_string(), &a.to_string()]);
    assert_eq!(waited.status.code(), Some(6), "{waited:?}");
    assert_gang(&slots, 3, "gang");
    assert_eq!(d.wait_end(a, Duration::from_secs(60))["exit"]["code"], 5);
    assert_eq!(d.wait_end(b, Duration::from_secs(60))["exit"]["code"], 6);
    let stats = d.json(&["stats", "--json"]);
    for key in ["lateness_us", "switch_us", "skew_us"] {
        for field in ["p50", "p99", "max", "count"] {
            assert!(
                stats[key][field].is_u64(),
                "stats lack {key}.{field}: {stats}"
            );
        }
    }
    assert!(
        stats["switch_us"]["count"].as_u64().unwrap() >= 10,
        "{stats}"
    );
    // Each skew measured is in the boundary log beside the start it measured, so that a
    // skewed start can be laid beside what else happened then.
    let log = std::fs::read_to_string(d.state_dir().join("boundaries.jsonl")).unwrap();
    let mut skews = 0;
    for line in log.lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        for skew in record["skews"].as_array().into_iter().flatten() {
            let started = record["started"].as_array().unwrap();
            assert!(
                started.iter().any(|s| s["job"] == skew["job"]),
                "a skew of a job not started there: {line}"
            );
            assert!(skew["skew_us"].is_u64(), "{line}");
            skews += 1;
        }
    }
    assert!(skews >= 6, "{skews} skews logged:\n{log}");
    // The one node of a single machine, as its agent last reported.
    let nodes = d.json(&["nodes", "--json"]);
    assert_eq!(nodes.as_array().map(Vec::len), Some(1), "{nodes}");
    assert_eq!(nodes[0]["name"], "local", "{nodes}");
    assert_eq!(nodes[0]["status"]["scheduling"], true, "{nodes}");
    assert!(
        nodes[0]["status"]["generation"].as_u64() >= Some(1),
        "{nodes}"
    );
    assert!(nodes[0]["heard_ms_ago"].as_u64() < Some(60_000), "{nodes}");
    assert!(!d.cgroup(a).exists(), "an ended job's cgroup is removed");
}

#[test]
fn moderate_mode_gives_the_running_slice_most_of_the_cpu() {
    let d = Daemon::start(&["--quantum-ms", "100", "--mode", "moderate"]);
    let spin = spin_py();
    let a = d.submit(&["-n", "2", "--", "python3", &spin, "2", "2.5", "0"]);
    let b = d.submit(&["-n", "2", "--", "python3", &spin, "2", "2.5", "0"]);
    let slots = per_slot_cpu(&d, a, b, 16);
    // The favoured job changes every slot and gets nearly all of both CPUs (weights alone
    // gave ~50/50 slots: its two threads stacked on one CPU; `Actuator::spread` pins them).
    let favoured: Vec<bool> = slots.iter().map(|(x, y)| x > y).collect();
    let alternations = favoured.windows(2).filter(|w| w[0] != w[1]).count();
    let (high, low) = slots
        .iter()
        .fold((0, 0), |(h, l), (x, y)| (h + x.max(y), l + x.min(y)));
    assert!(
        alternations * 4 >= (slots.len() - 1) * 3,
        "the favoured job alternates with the slots: {slots:?}"
    );
    assert!(
        high as f64 / (high + low).max(1) as f64 > 0.75,
        "the favoured job gets most of the CPU: {slots:?}"
    );
    // Nothing is frozen in moderate mode.
    assert!(!d.frozen(a) && !d.frozen(b));
    d.wait_end(a, Duration::from_secs(60));
    d.wait_end(b, Duration::from_secs(60));
}

#[test]
fn a_vacant_slot_gives_way_at_once_not_at_the_boundary() {
    // One-minute slots: jobs that had to wait for a boundary would take up to a minute each.
    let d = Daemon::start(&["--quantum-ms", "60000"]);
    let start = Instant::now();
    for code in [3, 4] {
        let out = d.cosched(&["run", "-n", "2", "--", "sh", "-c", &format!("exit {code}")]);
        assert_eq!(out.status.code(), Some(code), "{out:?}");
    }
    // The second job found the slot of the first, which ended, vacant.
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "two short jobs took {:?} with one-minute slots",
        start.elapsed()
    );
}

#[test]
fn an_interactive_job_preempts_batch_for_its_stretch_then_time_shares() {
    let d = Daemon::start(&["--quantum-ms", "100", "--interactive-preempt", "1.5"]);
    let spin = spin_py();
    let a = d.submit(&["-n", "2", "--", "python3", &spin, "2", "4", "0"]);
    let b = d.submit(&["-n", "2", "--", "python3", &spin, "2", "4", "0"]);
    std::thread::sleep(Duration::from_millis(500));
    let submitted = Instant::now();
    let i = d.submit(&[
        "-n",
        "1",
        "--class",
        "interactive",
        "--",
        "python3",
        &spin,
        "1",
        "6",
        "0",
    ]);
    // Within its stretch (after a boundary has passed) no batch job runs: both need the
    // interactive job's processor, whichever slice is current.
    let mut samples = 0;
    while submitted.elapsed() < Duration::from_millis(1_200) {
        if submitted.elapsed() > Duration::from_millis(400) {
            let both = d.frozen(a) && d.frozen(b);
            // A sample read late (a slow machine) may fall after the stretch: not counted.
            if submitted.elapsed() < Duration::from_millis(1_200) {
                assert!(both, "a batch job runs during the interactive stretch");
                samples += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(samples > 0);
    assert!(!d.frozen(i), "the interactive job runs in every slot");
    // After the stretch the interactive job has a slice of its own and batch runs again.
    let start = Instant::now();
    while d.frozen(a) && d.frozen(b) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "batch never ran again after the stretch; log: {}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        d.log()
            .contains(&format!("job {i}: interactive stretch over")),
        "{}",
        d.log()
    );
    for job in [a, b, i] {
        assert_eq!(d.wait_end(job, Duration::from_secs(90))["exit"]["code"], 0);
    }
}

/// The processors a process may use, from `/proc/PID/status`.
fn allowed_cpus(pid: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|list| list.trim().to_string())
}

#[test]
fn workers_a_busy_launcher_starts_late_still_get_a_processor_each() {
    // Alone in its slice, the job is thawed once. Its launcher computes first (so it is
    // the one worker spread pins), then starts two spinners, which inherit its pin: they
    // must still end up on processors of their own.
    let d = Daemon::start(&["--quantum-ms", "50"]);
    let launcher = format!(
        "import os, time\nwhile time.process_time() < 0.4: pass\nos.execvp('python3', ['python3', '{}', '2', '4', '0'])",
        spin_py()
    );
    let job = d.submit(&["-n", "2", "--", "python3", "-c", &launcher]);
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        let pids = std::fs::read_to_string(d.cgroup(job).join("cgroup.procs")).unwrap_or_default();
        let cpus: Vec<Option<String>> = pids.split_whitespace().map(allowed_cpus).collect();
        if cpus.len() == 2 && cpus[0] != cpus[1] {
            break;
        }
        if !cpus.is_empty() {
            seen = cpus;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the spinners never got processors of their own (last seen allowed: {seen:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(d.wait_end(job, Duration::from_secs(60))["exit"]["code"], 0);
}

#[test]
fn a_standby_job_left_with_no_slot_moves_to_an_idle_processor_and_runs_there() {
    let d = Daemon::start(&["--quantum-ms", "50"]);
    let spin = ["sh", "-c", "while :; do :; done"];
    let mut args = vec!["-n", "1", "--class", "standby", "--"];
    args.extend(spin);
    let standby = d.submit(&args);
    let on = |job: u64| d.job(job)["cpus"].as_str().map(str::to_string);
    assert!(wait_until(Duration::from_secs(20), || on(standby)
        .as_deref()
        == Some("0")));
    // A batch job takes processor 0 (placement ignores standby jobs): in no slot there, the
    // standby job moves to the idle processor 1.
    let mut args = vec!["-n", "1", "--"];
    args.extend(spin);
    let batch = d.submit(&args);
    assert!(
        wait_until(Duration::from_secs(20), || on(standby).as_deref()
            == Some("1")),
        "{}\n{}",
        d.job(standby),
        d.log()
    );
    assert_eq!(on(batch).as_deref(), Some("0"));
    // Its processes are pinned there and run.
    let pinned = wait_until(Duration::from_secs(20), || {
        let pids =
            std::fs::read_to_string(d.cgroup(standby).join("cgroup.procs")).unwrap_or_default();
        let cpus: Vec<Option<String>> = pids.split_whitespace().map(allowed_cpus).collect();
        !cpus.is_empty() && cpus.iter().all(|c| c.as_deref() == Some("1"))
    });
    assert!(
        pinned,
        "the standby job's processes were not pinned to processor 1"
    );
    let before = cgroup_cpu_us(&d.cgroup(standby));
    assert!(wait_until(Duration::from_secs(20), || {
        cgroup_cpu_us(&d.cgroup(standby)) > before + 200_000
    }));
    for job in [standby, batch] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
    }
}

#[test]
fn kill_9_of_the_daemon_loses_no_job_and_leaves_none_frozen() {
    let mut d = Daemon::start(&["--quantum-ms", "100"]);
    let spin = spin_py();
    let a = d.submit(&["-n", "2", "--", "python3", &spin, "2", "2", "7"]);
    let b = d.submit(&["-n", "2", "--", "python3", &spin, "2", "2", "8"]);
    // Ends while the daemon is dead: its supervisor keeps the status.
    let c = d.submit(&["-n", "1", "--", "sh", "-c", "sleep 1.5; exit 9"]);
    // A blocking `cosched run` outlives the restart and exits with its job's code.
    let mut client = Command::new(COSCHED)
        .args(["run", "-n", "1", "--", "sh", "-c", "sleep 3; exit 4"])
        .env("COSCHED_SOCKET", d.socket())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        d.frozen(a) || d.frozen(b),
        "one gang is frozen before the kill"
    );
    d.signal(libc::SIGKILL);
    d.wait_exit();
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        !d.frozen(a) && !d.frozen(b),
        "a job stayed frozen 1 s after the daemon died"
    );
    std::thread::sleep(Duration::from_millis(1500));
    d.launch();
    assert_eq!(d.wait_end(a, Duration::from_secs(60))["exit"]["code"], 7);
    assert_eq!(d.wait_end(b, Duration::from_secs(60))["exit"]["code"], 8);
    assert_eq!(d.wait_end(c, Duration::from_secs(30))["exit"]["code"], 9);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = client.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "cosched run hangs"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        status.code(),
        Some(4),
        "cosched run exits with its job's code"
    );
    assert!(d.log().contains("took back"), "{}", d.log());
}

#[test]
fn a_clean_stop_thaws_every_job_and_a_restart_takes_them_back() {
    let mut d = Daemon::start(&["--quantum-ms", "100"]);
    let a = d.submit(&["-n", "2", "--", "sh", "-c", "sleep 4; exit 3"]);
    let b = d.submit(&["-n", "2", "--", "sh", "-c", "sleep 4; exit 2"]);
    std::thread::sleep(Duration::from_millis(400));
    d.signal(libc::SIGTERM);
    d.wait_exit();
    assert!(
        !d.frozen(a) && !d.frozen(b),
        "a clean stop leaves nothing frozen"
    );
    d.launch();
    assert_eq!(d.wait_end(a, Duration::from_secs(30))["exit"]["code"], 3);
    assert_eq!(d.wait_end(b, Duration::from_secs(30))["exit"]["code"], 2);
}

/// A `wait` request carrying this process's stdin, stdout and stderr (argv: socket, job).
const HAND_OVER_STDIO: &str = "import array, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
line = b'{\"op\":\"wait\",\"job\":' + sys.argv[2].encode() + b',\"stdio\":true}\\n'
s.sendmsg([line], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [0, 1, 2]))])
print(s.makefile().readline())";

/// A `cosched run` named `name` that waits for its job (`sleep 100`), started now.
fn waiting_run(d: &Daemon, name: &str) -> std::process::Child {
    Command::new(COSCHED)
        .args(["run", "-n", "1", "--name", name, "--", "sleep", "100"])
        .env("COSCHED_SOCKET", d.socket())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_blocking_run_killed_by_term_or_hup_cancels_its_job() {
    let d = Daemon::start(&["--quantum-ms", "50"]);
    for signal in [libc::SIGTERM, libc::SIGHUP] {
        let mut run = waiting_run(&d, "orphan");
        let mut job = None;
        assert!(wait_until(Duration::from_secs(10), || {
            let jobs = d.json(&["ps", "--json"]);
            job = jobs
                .as_array()
                .unwrap()
                .iter()
                .find(|j| j["name"] == "orphan")
                .cloned();
            job.is_some()
        }));
        let id = job.unwrap()["id"].as_u64().unwrap();
        unsafe { libc::kill(run.id() as i32, signal) };
        let ended = d.wait_end(id, Duration::from_secs(20));
        assert_eq!(ended["state"], "cancelled", "signal {signal}: {ended}");
        let status = run.wait().unwrap();
        assert_eq!(status.code(), Some(128 + libc::SIGTERM), "signal {signal}");
    }
}

/// However soon after its start a waiting `cosched run` is stopped, its job does not run on
/// without it: a TERM that came after the job was made but before the client caught
/// interrupts killed the client and left the job running (6 and 8 jobs of 100 tries). The
/// client now holds the interrupts back while it submits.
#[test]
fn a_blocking_run_stopped_at_any_moment_of_its_submission_leaves_no_job_behind() {
    let d = Daemon::start(&["--quantum-ms", "50"]);
    for attempt in 0..60u64 {
        let mut run = waiting_run(&d, "midway");
        // From at once to 30 ms, by half milliseconds: every moment of a submission.
        std::thread::sleep(Duration::from_micros(attempt * 500));
        unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
        run.wait().unwrap();
    }
    let left = || -> Vec<Value> {
        let jobs = d.json(&["ps", "--json"]);
        let jobs = jobs.as_array().unwrap().iter();
        jobs.filter(|j| j["name"] == "midway").cloned().collect()
    };
    let none = wait_until(Duration::from_secs(20), || left().is_empty());
    assert!(none, "still running: {:?}\n{}", left(), d.log());
}

#[test]
fn a_running_job_whose_class_changes_runs_on_and_ends() {
    let d = Daemon::start(&["--quantum-ms", "100"]);
    let x = d.submit(&["-n", "1", "--", "sh", "-c", "sleep 2; exit 3"]);
    let y = d.submit(&["-n", "1", "--", "sh", "-c", "sleep 2; exit 4"]);
    let running = wait_until(Duration::from_secs(10), || {
        d.job(y)["state"] == "running" && !d.frozen(y)
    });
    assert!(running, "{}", d.log());
    // Placed again twice while it runs: it must not be left frozen.
    for class in ["standby", "batch"] {
        let out = d.cosched(&["class", &y.to_string(), class]);
        assert!(out.status.success(), "{out:?}");
    }
    assert_eq!(d.wait_end(x, Duration::from_secs(20))["exit"]["code"], 3);
    assert_eq!(d.wait_end(y, Duration::from_secs(20))["exit"]["code"], 4);
}

#[test]
fn bad_requests_are_refused_with_clear_messages() {
    let d = Daemon::start(&["--quantum-ms", "100"]);
    let socket = d.socket();
    for (bytes, expected) in [
        (b"not json\n".to_vec(), "bad request"),
        (b"{\"op\":\"launch\"}\n".to_vec(), "unknown variant"),
        (b"{\"op\":\"cancel\"}\n".to_vec(), "missing field `job`"),
        (vec![b'x'; 2 << 20], "longer than"),
    ] {
        let reply: Value = serde_json::from_str(&raw(&socket, &bytes)).unwrap();
        assert_eq!(reply["ok"], false);
        assert!(
            reply["error"].as_str().unwrap().contains(expected),
            "{reply}"
        );
    }
    refused(
        &d.cosched(&["run", "-n", "3", "--", "true"]),
        "can never run",
    );
    // One machine is one node.
    for (nodes, procs, why) in [
        (
            "2",
            "2",
            "the job can never run: 2 nodes requested but the machine has 1",
        ),
        ("2", "3", "3 processors do not split evenly over 2 nodes"),
        ("0", "2", "a job needs at least one node"),
    ] {
        refused(
            &d.cosched(&["run", "-N", nodes, "-n", procs, "--", "true"]),
            why,
        );
    }
    let out = d.cosched(&[
        "run",
        "-N",
        "1",
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "echo $COSCHED_CPUS",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0-1",
        "{out:?}"
    );
    refused(
        &d.cosched(&["run", "-n", "1", "--class", "urgent", "--", "true"]),
        "unknown class",
    );
    refused(&d.cosched(&["cancel", "999"]), "no job 999");
    // Somebody else's job, and the limits of an ordinary user.
    let root_job = d.submit(&["-n", "1", "--", "sleep", "30"]);
    refused(
        &d.cosched_as(NOBODY, &["cancel", &root_job.to_string()]),
        "only its owner or root",
    );
    refused(&d.cosched(&["wait", "999"]), "no job 999");
    // Anyone may wait for a job, but handing it descriptors (its output) is the owner's.
    let handover = output_within(
        Command::new("python3")
            .args(["-c", HAND_OVER_STDIO])
            .arg(&socket)
            .arg(root_job.to_string())
            .uid(NOBODY)
            .gid(NOBODY),
        Duration::from_secs(60),
    );
    assert!(
        String::from_utf8_lossy(&handover.stdout)
            .contains("only its owner or root may hand descriptors to it"),
        "{handover:?}"
    );
    refused(
        &d.cosched_as(
            NOBODY,
            &["run", "-n", "1", "--class", "express", "--", "true"],
        ),
        "only root may submit to the express class",
    );
    let out = d.cosched_as(NOBODY, &["run", "-n", "1", "--", "id", "-u"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        NOBODY.to_string(),
        "jobs run as their submitter"
    );
    let own = d
        .submit_as(NOBODY, &["-n", "1", "--", "sleep", "30"])
        .to_string();
    refused(
        &d.cosched_as(NOBODY, &["class", &own, "interactive"]),
        "only root may raise",
    );
    assert!(d
        .cosched_as(NOBODY, &["class", &own, "standby"])
        .status
        .success());
    assert!(d.cosched_as(NOBODY, &["cancel", &own]).status.success());
    assert!(d
        .cosched(&["cancel", &root_job.to_string()])
        .status
        .success());
    // Looking is open to all, and the daemon is still serving.
    assert!(d.cosched_as(NOBODY, &["ps", "--all"]).status.success());
    assert_eq!(
        d.wait_end(root_job, Duration::from_secs(20))["state"],
        "cancelled"
    );
}

#[test]
fn idle_jobs_leave_the_rotation_and_come_back_when_they_compute() {
    let d = Daemon::start(&["--quantum-ms", "50", "--idle-after", "0.5"]);
    let spin = spin_py();
    let busy = d.submit(&["-n", "2", "--", "python3", &spin, "2", "4", "0"]);
    // Sleeps 2 s (idle), then computes 0.5 s of CPU.
    let script = format!("sleep 2; exec python3 {spin} 1 0.5 0");
    let sleeper = d.submit(&["-n", "2", "--", "sh", "-c", &script]);
    let start = Instant::now();
    while d.job(sleeper)["state"] != "idle" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never idle: {}",
            d.job(sleeper)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = d.json(&["stats", "--json"]);
    assert!(stats["idle_departures"].as_u64().unwrap() >= 1, "{stats}");
    while d.job(sleeper)["state"] == "idle" {
        assert!(start.elapsed() < Duration::from_secs(20), "never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        d.wait_end(sleeper, Duration::from_secs(60))["exit"]["code"],
        0
    );
    d.wait_end(busy, Duration::from_secs(60));
}

#[test]
fn prometheus_reads_the_rotations_figures_even_past_a_flood_of_idle_connections() {
    let port = cosched_etcd::testing::free_port();
    let d = Daemon::start(&["--quantum-ms", "50", "--http", &port.to_string()]);
    let (status, before) = http_get(port, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{before}");
    // No `Accept`: the Prometheus text format (tests/metrics.rs has both formats).
    assert!(
        before.contains("# TYPE cosched_jobs_submitted_total counter"),
        "{before}"
    );
    let accepted = r#"cosched_jobs_submitted_total{result="accepted"}"#;
    assert_eq!(sample(&before, accepted), Some(0.0), "{before}");
    let spin = spin_py();
    let a = d.submit(&["-n", "2", "--", "python3", &spin, "2", "1", "0"]);
    let b = d.submit(&["-n", "2", "--", "python3", &spin, "2", "1", "0"]);
    // Past the limit of pending connections, nobody's idle ones give way to a scrape.
    let idle = Command::new("python3")
        .args([
            "-c",
            "import socket, sys, time\n\
             s = [socket.create_connection(('127.0.0.1', int(sys.argv[1]))) for _ in range(300)]\n\
             print('open', flush=True)\n\
             time.sleep(30)",
        ])
        .arg(port.to_string())
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut idle = idle;
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(idle.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "open");
    std::thread::sleep(Duration::from_millis(600));
    let (status, after) = http_get(port, "/metrics");
    idle.kill().unwrap();
    idle.wait().unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(sample(&after, accepted), Some(2.0), "{after}");
    assert_eq!(
        sample(&after, r#"cosched_jobs{state="running",class="batch"}"#),
        Some(2.0),
        "{after}"
    );
    // The agent reports about once a second: the switches show within a few.
    let switches = r#"cosched_switch_duration_seconds_count{node="local"}"#;
    assert!(
        wait_until(Duration::from_secs(15), || {
            sample(&http_get(port, "/metrics").1, switches) > Some(3.0)
        }),
        "the rotation's switches never showed: {after}"
    );
    for name in [
        "cosched_queue_wait_seconds_bucket{le=\"+Inf\"}",
        r#"cosched_slot_lateness_seconds_bucket{le="+Inf",node="local"}"#,
        r#"cosched_api_requests_total{op="run",result="ok"}"#,
        "cosched_build_info{version=",
    ] {
        assert!(after.contains(name), "{name} missing: {after}");
    }
    assert!(!after.contains(&format!("job=\"{a}\"")) && !after.contains("user="));
    assert_eq!(http_get(port, "/nowhere").0, "HTTP/1.1 404 Not Found");
    for job in [a, b] {
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
    }
}

#[test]
fn time_suspended_adds_up_over_suspensions_and_stops_at_resume() {
    let d = Daemon::start(&["--quantum-ms", "50"]);
    let job = d.submit(&["-n", "1", "--", "sleep", "30"]);
    let suspended = |job: u64| d.job(job)["suspended_us"].as_i64().unwrap();
    assert_eq!(suspended(job), 0);
    for _ in 0..2 {
        assert!(d.cosched(&["suspend", &job.to_string()]).status.success());
        std::thread::sleep(Duration::from_millis(300));
        assert!(d.cosched(&["resume", &job.to_string()]).status.success());
    }
    let total = suspended(job);
    assert!(total >= 600_000, "two suspensions of 0.3 s: {total} µs");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(suspended(job), total, "not counted while it runs");
    assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
}

#[test]
fn a_daemon_refuses_a_cgroup_parent_holding_jobs_its_store_does_not_know() {
    let mut d = Daemon::start(&["--quantum-ms", "100"]);
    let job = d.submit(&["-n", "1", "--", "sleep", "60"]);
    assert!(wait_until(Duration::from_secs(10), || d.job(job)["state"] == "running"));
    // Running is said once the launch is ordered: the group holds the process a little later
    // (a daemon started before it joined found the group empty and took the parent, and this
    // test then waited on that daemon for good).
    let procs = d.cgroup(job).join("cgroup.procs");
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&procs).is_ok_and(|p| !p.trim().is_empty())
    }));
    // The daemon dies; its job runs on in its group.
    d.signal(libc::SIGKILL);
    d.wait_exit();
    // A daemon with a store of its own on the same parent would give its own job 1 that group,
    // and freeze the stranger with it.
    let group = d.cgroup(job);
    let parent = group
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let other = std::env::temp_dir().join(format!("cosched-it-other-{}", std::process::id()));
    std::fs::create_dir_all(&other).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut second = Command::new(COSCHED);
    second
        .arg("daemon")
        .arg("--state-dir")
        .arg(other.join("state"))
        .arg("--socket")
        .arg(other.join("cosched.sock"))
        .args(["--cgroup-parent", parent, "--quantum-ms", "100"]);
    let out = output_within(&mut second, Duration::from_secs(60));
    std::fs::remove_dir_all(&other).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains(&format!("{parent}/job-{job} holds"))
            && stderr.contains("does not know"),
        "{out:?}"
    );
    // Its own daemon takes it back, and may end it.
    d.launch();
    assert!(wait_until(Duration::from_secs(10), || d.job(job)["state"] == "running"));
    assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
    d.wait_end(job, Duration::from_secs(30));
}

/// The slice (ns) in a `/proc/PID/sched` text; `None` where the kernel shows none.
fn slice_shown(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("se.slice")?.split(':').nth(1))
        .and_then(|value| value.trim().parse().ok())
}

#[test]
fn a_jobs_processes_get_the_daemons_time_slice_whoever_submits_it() {
    let own = slice_shown(&std::fs::read_to_string("/proc/thread-self/sched").unwrap_or_default());
    if cosched_os::slice::honoured(cosched_os::slice::SHORTEST_US).is_err() || own.is_none() {
        eprintln!("skipped: this kernel keeps no time slice per task, or does not show it");
        return;
    }
    // A child of the job's first process reads its own: inherited (`; true`: forked, not
    // executed in the shell's place).
    let print = [
        "run",
        "-n",
        "1",
        "--",
        "sh",
        "-c",
        "cat /proc/self/sched; true",
    ];
    let d = Daemon::start(&[]);
    for uid in [0, NOBODY] {
        let out = d.cosched_as(uid, &print);
        assert!(out.status.success(), "{out:?}");
        let shown = slice_shown(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(shown, Some(100_000), "uid {uid}: {out:?}");
    }
    drop(d);
    // 0: the kernel's own, as this test's thread has.
    let d = Daemon::start(&["--time-slice-us", "0"]);
    let out = d.cosched(&print);
    assert_eq!(
        slice_shown(&String::from_utf8_lossy(&out.stdout)),
        own,
        "{out:?}"
    );
}

/// `cosched daemon --check FLAG VALUE`'s stderr, once it is seen refused as a usage error.
fn refused_flag(flag: &str, value: &str) -> String {
    let out = Command::new(COSCHED)
        .args(["daemon", "--check", flag, value])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{flag} {value}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_time_slice_outside_the_kernels_bounds_is_refused_by_name() {
    for bad in ["50", "100001", "fast"] {
        let stderr = refused_flag("--time-slice-us", bad);
        assert!(
            stderr.contains("--time-slice-us")
                && stderr.contains("must be 0 (the kernel's own) or from 100 to 100000 µs"),
            "{bad}: {stderr}"
        );
    }
}

/// The jobs' parent cgroup's weight, on cgroup v2's scale (v1 `cpu.shares` / 10.24), where
/// the daemon keeps its jobs' weight; `None` without a cpu controller.
fn jobs_weight(d: &Daemon) -> Option<u64> {
    let layout = cosched_cgroups::Layout::detect().unwrap();
    let read = |file: std::path::PathBuf| -> Option<u64> {
        std::fs::read_to_string(file).ok()?.trim().parse().ok()
    };
    let v2 = (layout.v2.as_ref()).and_then(|root| read(root.join(&d.parent).join("cpu.weight")));
    let v1 = || read(layout.v1_cpu.as_ref()?.join(&d.parent).join("cpu.shares"));
    v2.or_else(|| v1().map(|shares| shares * 100 / 1024))
}

#[test]
fn the_jobs_weigh_five_processes_a_processor_unless_told_otherwise() {
    let d = Daemon::start(&[]);
    let Some(weight) = jobs_weight(&d) else {
        eprintln!("skipped: no cpu controller here");
        return;
    };
    let processors = cosched_os::usable_cpus() as u64;
    assert_eq!(weight, (5 * processors * 100).min(10_000), "{}", d.log());
    // Past 20 processors the kernel's bound holds it lower, and the log says so.
    let said = match processors <= 20 {
        true => "jobs weigh 5.0 processes a processor",
        false => "--jobs-weight 5: the jobs weigh",
    };
    assert!(d.log().contains(said), "{}", d.log());
    drop(d);
    let d = Daemon::start(&["--jobs-weight", "0"]);
    assert_eq!(jobs_weight(&d), Some(100), "{}", d.log());
    for bad in ["101", "1.5", "much"] {
        let stderr = refused_flag("--jobs-weight", bad);
        assert!(stderr.contains("--jobs-weight"), "{bad}: {stderr}");
    }
}

/// The `cosched` binary (daemon, agent, supervisor) allocates with mimalloc, whose threads
/// share no lock: with glibc's malloc the slot clock slept on an arena's lock held by a
/// daemon thread that a job's process had preempted (ARCHITECTURE.md, invariant 70).
#[test]
fn the_binary_allocates_with_mimalloc() {
    let out = Command::new(COSCHED)
        .arg("--version")
        .env("MIMALLOC_VERBOSE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("mimalloc: process init"), "{said}");
}

/// A pipe whose reader has gone: writes to its other end fail with EPIPE.
fn pipe_without_reader() -> std::os::fd::OwnedFd {
    let (_read_end, write_end) = cosched_os::unix::pipe(0).expect("a pipe");
    write_end
}

/// A daemon whose log reader went away (`2>&1 | tee` ended, the journal's stream closed) goes
/// on: it died at its first line after (exit 101, a panic), whichever thread wrote it.
#[test]
fn a_daemon_whose_log_reader_went_away_goes_on() {
    let mut d = Daemon::start_writing_to(
        &["--procs", "2", "--quantum-ms", "50"],
        &[],
        None,
        Some(pipe_without_reader()),
    );
    for _ in 0..2 {
        let ran = d.cosched(&["run", "-n", "2", "--", "sh", "-c", "exit 3"]);
        assert_eq!(ran.status.code(), Some(3), "{ran:?}");
    }
    d.signal(libc::SIGTERM);
    let child = d.child.as_mut().unwrap();
    let stopped = wait_until(Duration::from_secs(10), || {
        child.try_wait().unwrap().is_some()
    });
    assert!(stopped, "the daemon did not stop");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// `cosched run` whose stderr nobody reads any more (`2>&1 | head -1` that ended) still ends
/// with its job's status, though its note of how the job ended cannot be written: it
/// panicked there (exit 101). `--detach` with stdout gone fails as such (1), not by a panic.
#[test]
fn a_client_whose_reader_went_away_ends_with_its_jobs_status() {
    let d = Daemon::start(&["--procs", "2", "--quantum-ms", "50"]);
    let ran = Command::new(COSCHED)
        .args(["run", "-n", "1", "--", "sh", "-c", "kill -9 $$"])
        .env("COSCHED_SOCKET", d.socket())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(pipe_without_reader()))
        .status()
        .unwrap();
    assert_eq!(ran.code(), Some(128 + libc::SIGKILL), "{ran}");
    let detached = Command::new(COSCHED)
        .args(["run", "--detach", "-n", "1", "--", "true"])
        .env("COSCHED_SOCKET", d.socket())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::from(pipe_without_reader()))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&detached.stderr);
    assert_eq!(detached.status.code(), Some(1), "{said}");
    assert!(said.contains("saying the job's id on stdout"), "{said}");
}

/// A job's processes have the resource limits of the process that submitted it, as a login's
/// would, not the root daemon's: every job inherited the daemon's (4,096 open files here,
/// 1,048,576 under the systemd unit) whatever its user had. Read from the submitter itself, so
/// nobody gets more than they had.
#[test]
fn a_job_gets_its_submitters_resource_limits() {
    let d = Daemon::start_with(&["--procs", "2", "--quantum-ms", "50"], &[], Some(4096));
    for (uid, soft, hard) in [(NOBODY, 64, 100), (0, 80, 90)] {
        let mut client = Command::new(COSCHED);
        client
            .args(["run", "-n", "1", "--", "sh", "-c", "ulimit -Sn; ulimit -Hn"])
            .env("COSCHED_SOCKET", d.socket())
            .current_dir("/")
            .uid(uid)
            .gid(uid);
        // SAFETY: setrlimit only, in the child before exec.
        unsafe {
            client.pre_exec(move || {
                let lower = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lower) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = output_within(&mut client, Duration::from_secs(60));
        assert!(out.status.success(), "uid {uid}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{soft}\n{hard}\n"),
            "uid {uid}"
        );
    }
}

/// A client the daemon cannot see (outside its pid namespace: pid 0 in its credentials) is
/// refused a job: its limits cannot be read, and the job would have run with root's.
#[test]
fn a_submitter_outside_the_daemons_pid_namespace_is_refused() {
    cosched_os::require_root("a daemon in a pid namespace of its own");
    let dir = std::path::PathBuf::from(format!("/tmp/cosched-it-pidns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let parent = format!("cosched-it-pidns-{}", std::process::id());
    let socket = dir.join("s.sock");
    let mut unshare = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--",
            COSCHED,
            "daemon",
            "--procs",
            "2",
        ])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--socket")
        .arg(&socket)
        .args(["--cgroup-parent", &parent])
        .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let up = wait_until(Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    let ran = up.then(|| {
        Command::new(COSCHED)
            .args(["run", "-n", "1", "--", "true"])
            .env("COSCHED_SOCKET", &socket)
            .output()
            .unwrap()
    });
    // The daemon is the only child of `unshare`, and the first process of its namespace.
    let daemon = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", unshare.id()))
        .unwrap_or_default();
    for pid in daemon
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: kill(2) of this test's own daemon.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let stopped = wait_until(Duration::from_secs(10), || {
        unshare.try_wait().unwrap().is_some()
    });
    if !stopped {
        let _ = unshare.kill();
    }
    let _ = unshare.wait();
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
    remove_cgroups(&parent);
    let _ = std::fs::remove_dir_all(&dir);
    let ran = ran.unwrap_or_else(|| panic!("the daemon did not start: {log}"));
    let said = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(1), "{said}");
    assert!(
        said.contains("outside the daemon's pid namespace"),
        "{said}"
    );
}

/// A job whose command cannot run says why once on `cosched run`'s stderr: its supervisor
/// writes it to the job's stderr, which is the client's, and the client printed the end's
/// note again. With the job's stderr a file the client says it (the file has it too).
#[test]
fn why_a_command_never_ran_is_said_once() {
    let d = Daemon::start(&["--procs", "2", "--quantum-ms", "50"]);
    let why = "cannot run the command (/no/such/program)";
    let ran = d.cosched(&["run", "-n", "1", "--", "/no/such/program"]);
    let said = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(127), "{said}");
    assert_eq!(said.matches(why).count(), 1, "{said}");
    let errors = d.dir.join("errors");
    let ran = d.cosched(&[
        "run",
        "-n",
        "1",
        "--error",
        errors.to_str().unwrap(),
        "--",
        "/no/such/program",
    ]);
    let said = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(said.matches(why).count(), 1, "{said}");
    let file = std::fs::read_to_string(&errors).unwrap();
    assert_eq!(file.matches(why).count(), 1, "{file}");
}

/// A job whose command exits and leaves a process running (a daemonized helper) ends
/// `completed`; what it left is killed and the job's cgroups go once that has exited, and
/// the log says so as information: it logged "Device or resource busy (will retry)" as a
/// warning for every such job, a fault to whoever reads the log.
#[test]
fn a_job_that_leaves_a_process_behind_ends_without_a_warning() {
    let d = Daemon::start(&["--procs", "2", "--quantum-ms", "50"]);
    let job = d.submit(&["-n", "1", "--", "sh", "-c", "setsid sleep 600 & exit 0"]);
    let end = d.wait_end(job, Duration::from_secs(30));
    assert_eq!(end["state"], "completed", "{end}");
    let gone = wait_until(Duration::from_secs(10), || !d.cgroup(job).exists());
    assert!(gone, "{}", d.log());
    let log = d.log();
    let warned = log
        .lines()
        .any(|line| line.contains("warning") && line.contains(&format!("job-{job}")));
    assert!(!warned, "{log}");
}
