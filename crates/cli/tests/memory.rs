//! Memory limits on real processes (needs root): a node agent with real cgroups starts a job
//! under its supervisor (this binary) held to 64 MiB; the job, as nobody, cannot raise its
//! limit, fills 256 MiB, is killed by the kernel's OOM killer, and its ending says so with its
//! figures. Through the daemon, such a job ends `failed`, out of memory.

mod common;

use common::*;
use cosched_agent::{Mode, NodeAgent, NodeSettings, STATE_SUBDIRS};
use cosched_cgroups::{Cgroups, Layout};
use cosched_proto::{Command, Ending, Event, Launch, Order};
use std::num::NonZeroU64;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration;

const LIMIT: u64 = 64 << 20;

#[test]
fn a_job_over_its_memory_ends_with_the_oom_kill_its_cgroup_counted() {
    cosched_os::require_root("the memory tests");
    let layout = Layout::detect().unwrap();
    let parent = format!("cosched-mem-{}", std::process::id());
    let Some(limit_file) = memory_limit_file(&layout, &parent, 1) else {
        eprintln!("no memory controller on this machine ({layout}): nothing to enforce");
        return;
    };
    let state = PathBuf::from(format!("/tmp/cosched-mem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    for dir in STATE_SUBDIRS {
        std::fs::create_dir_all(state.join(dir)).unwrap();
    }
    std::fs::set_permissions(&state, PermissionsExt::from_mode(0o700)).unwrap();
    let output = format!("/tmp/cosched-mem-{}.out", std::process::id());
    let settings = NodeSettings {
        node: "local".into(),
        cpus: "0".parse().unwrap(),
        mode: Mode::Local,
        idle_after: None,
        give_away_after: None,
        state_dir: state.clone(),
        supervisor_exe: COSCHED.into(),
        clock_shift_us: 0,
        tasks_per_cpu: None,
        time_slice_us: None,
        status_every: cosched_proto::STATUS_PERIOD_US,
        realtime: false,
    };
    let cgroups = Cgroups::open(&layout, &parent, None).unwrap();
    let (orders, source) = channel::<Order>();
    let (sink, events) = channel::<Event>();
    let agent = NodeAgent::new(settings, cgroups, Arc::new(sink));
    let clock = std::thread::spawn(move || agent.run(source));
    // As nobody, it tries to lift its own limit first (exit 42 if it could).
    let script = format!(
        "echo max > {0} 2>/dev/null && exit 42; echo -1 > {0} 2>/dev/null && exit 42; \
         exec perl -e '$x = \"x\" x (256 << 20); exit 0'",
        limit_file.display()
    );
    let launch = Launch {
        argv: vec!["sh".into(), "-c".into(), script],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/tmp".into(),
        uid: NOBODY,
        gid: NOBODY,
        groups: Vec::new(),
        output: Some(output.clone()),
        error: None,
        holder: false,
        hosts: Vec::new(),
        limits: Vec::new(),
    };
    let start = Command::Start {
        job: 1,
        cpus: "0".parse().unwrap(),
        memory: NonZeroU64::new(LIMIT),
        mode: None,
        launch: Some(launch),
    };
    orders.send(start.into()).unwrap();
    // A bound on a hang, not a measure: the job ends within moments.
    let ending = loop {
        match events.recv_timeout(Duration::from_secs(120)) {
            Ok(Event::Ended { job: 1, ending }) => break Some(ending),
            Ok(Event::Lost { why, .. }) => panic!("job lost: {why}"),
            Ok(_) => continue,
            Err(_) => break None,
        }
    };
    let limit_seen = std::fs::read_to_string(&limit_file).unwrap_or_default();
    orders
        .send(
            Command::Ended {
                job: 1,
                stored: true,
            }
            .into(),
        )
        .unwrap();
    drop(orders);
    let (cgroups, stopped) = clock.join().unwrap();
    let closed = cgroups.close();
    let job_output = std::fs::read_to_string(&output).unwrap_or_default();
    let _ = std::fs::remove_file(&output);
    let _ = std::fs::remove_dir_all(&state);
    let Ending {
        exit,
        oom_kills,
        cpu_us,
        peak_memory_bytes,
        ..
    } = ending.expect("the job ended");
    assert_eq!(exit.signal, Some(libc::SIGKILL), "{exit:?}: {job_output}");
    assert!(oom_kills >= 1, "no OOM kill counted");
    assert!(cpu_us.is_some_and(|us| us > 0), "{cpu_us:?}");
    if let Some(peak) = peak_memory_bytes {
        assert!(peak <= LIMIT && peak > LIMIT / 2, "{peak}");
    }
    assert_eq!(limit_seen.trim(), LIMIT.to_string(), "the limit set");
    stopped.unwrap();
    closed.unwrap();
}

/// Through the daemon: `run --mem 64M` of a job that fills 256 MiB ends `failed`, out of
/// memory, and its history says so.
#[test]
fn a_job_run_with_mem_that_fills_more_ends_failed_out_of_memory() {
    let d = Daemon::start(&["--quantum-ms", "100"]);
    let job = d.submit(&[
        "-n",
        "1",
        "--mem",
        "64M",
        "--",
        "perl",
        "-e",
        "$x = 'x' x (256 << 20)",
    ]);
    let ended = d.wait_end(job, Duration::from_secs(60));
    assert_eq!(ended["state"], "failed", "{ended}");
    assert_eq!(ended["note"], "out of memory", "{ended}");
    let history = d.json(&["history", "--json", "-j", &job.to_string()]);
    assert_eq!(history[0]["state"], "failed", "{history}");
    assert!(history[0]["peak_memory_bytes"].as_u64().unwrap_or(0) <= 64 << 20);
    // A script that carries on after its child was killed for memory and exits 0 still
    // fails `run` and `wait`: cosched ended it failed.
    let script = "perl -e '$x = \"x\" x (256 << 20)'; exit 0";
    let out = d.cosched(&["run", "-n", "1", "--mem", "64M", "--", "sh", "-c", script]);
    assert_ne!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("out of memory"), "{stderr}");
}
