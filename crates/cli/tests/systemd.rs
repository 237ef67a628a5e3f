//! The daemon under systemd, without systemd: its readiness notifications arrive on a datagram
//! socket of the test's own (`NOTIFY_SOCKET`), READY=1 only once the API socket accepts; its
//! log has a level on every line (journald's `<N>` when `JOURNAL_STREAM` names its stderr) and
//! a line per job lifecycle event an administrator looks for.

mod common;

use common::{wait_until, Daemon, COSCHED, NOBODY};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// The next notification, waited for at most `patience`.
fn next(socket: &UnixDatagram, patience: Duration) -> Option<String> {
    socket.set_read_timeout(Some(patience)).unwrap();
    let mut buffer = [0u8; 4096];
    let n = socket.recv(&mut buffer).ok()?;
    Some(String::from_utf8_lossy(&buffer[..n]).into_owned())
}

#[test]
fn the_daemon_tells_systemd_ready_after_its_socket_accepts_then_reloading_and_stopping() {
    cosched_os::require_root("the daemon's tests");
    let dir = std::env::temp_dir().join(format!("cosched-notify-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let notifications = UnixDatagram::bind(dir.join("notify")).unwrap();
    let api = dir.join("cosched.sock");
    let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
    let mut daemon = Command::new(COSCHED)
        .args(["daemon", "--procs", "2", "--cgroup-parent"])
        .arg(format!("cosched-notify-it-{}", std::process::id()))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--socket")
        .arg(&api)
        .env("NOTIFY_SOCKET", dir.join("notify"))
        .stderr(log)
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();

    // Every notification before READY=1 is looked at as it comes; at READY=1 a client must
    // connect at once.
    let start = Instant::now();
    let ready = loop {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no READY=1 within 30 s: {}",
            log()
        );
        if let Some(status) = daemon.try_wait().unwrap() {
            panic!("the daemon exited ({status}): {}", log());
        }
        match next(&notifications, Duration::from_millis(100)) {
            Some(message) if message.lines().any(|l| l == "READY=1") => break message,
            _ => {}
        }
    };
    assert!(
        UnixStream::connect(&api).is_ok(),
        "READY=1 came before the socket accepted: {}",
        log()
    );
    assert!(ready.contains("STATUS=scheduling 2 processors"), "{ready}");

    // A reload is bracketed: RELOADING=1 (with the monotonic time systemd wants), READY=1.
    // SAFETY: kill has no memory effects; the pid is our child's.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGHUP) };
    let reloading = next(&notifications, Duration::from_secs(30)).expect("RELOADING=1");
    assert!(reloading.lines().any(|l| l == "RELOADING=1"), "{reloading}");
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading}");
    let again = next(&notifications, Duration::from_secs(30)).expect("READY=1 again");
    assert!(again.lines().any(|l| l == "READY=1"), "{again}");

    // SAFETY: as above.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let stopping = next(&notifications, Duration::from_secs(30)).expect("STOPPING=1");
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping}");
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status}: {}", log());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_notify_socket_is_a_warning_not_a_failure() {
    let mut d = Daemon::start_with(&["--procs", "2"], &[("NOTIFY_SOCKET", "relative/path")], None);
    let job = d.submit(&["-n", "1", "--", "true"]);
    d.wait_end(job, Duration::from_secs(60));
    let log = d.log();
    assert!(
        log.contains("warning: NOTIFY_SOCKET=relative/path: neither an absolute path"),
        "{log}"
    );
    d.signal(libc::SIGTERM);
    d.wait_exit();
}

#[test]
fn the_log_has_levels_and_a_line_per_job_lifecycle_event() {
    let mut d = Daemon::start(&["--procs", "2", "--quantum-ms", "50"]);
    let ok = d.submit(&["-n", "1", "--name", "fine", "--", "true"]);
    let three = d.submit(&["-n", "2", "--", "sh", "-c", "exit 3"]);
    let killed = d.submit(&["-n", "1", "--", "sh", "-c", "kill -SEGV $$"]);
    d.wait_end(ok, Duration::from_secs(60));
    d.wait_end(three, Duration::from_secs(60));
    d.wait_end(killed, Duration::from_secs(60));
    let timed = d.submit(&["-n", "1", "--time", "0:1", "--", "sleep", "100"]);
    let memory = d.submit(&[
        "-n", "1", "--mem", "64M", "--", "perl", "-e", "$x = 'x' x (256 << 20)",
    ]);
    d.wait_end(timed, Duration::from_secs(60));
    d.wait_end(memory, Duration::from_secs(60));

    // nobody's job, suspended, resumed and cancelled by nobody.
    let out = d.cosched_as(
        NOBODY,
        &["run", "--detach", "--output", "/dev/null", "-n", "1", "--", "sleep", "100"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs = common::job_id(out);
    assert!(wait_until(Duration::from_secs(60), || d.job(theirs)["state"] == "running"));
    for verb in ["suspend", "resume", "cancel"] {
        let out = d.cosched_as(NOBODY, &[verb, &theirs.to_string()]);
        assert!(out.status.success(), "{verb}: {}", String::from_utf8_lossy(&out.stderr));
    }
    d.wait_end(theirs, Duration::from_secs(60));

    let log = d.log();
    for line in log.lines() {
        let level = line
            .split(": ")
            .nth(1)
            .unwrap_or_else(|| panic!("no level: {line}"));
        assert!(
            ["error", "warning", "info", "debug"].contains(&level),
            "no level word in '{line}'"
        );
    }
    let expected = [
        format!("info: job {ok} submitted by root (uid 0): 'fine', 1 processor(s), batch"),
        format!("info: job {ok} started on node local CPUs "),
        format!("info: job {ok} ended: done, exit code 0"),
        format!("job {timed}: time limit reached"),
        format!("info: job {timed} ended: timeout"),
        format!("info: job {memory} ended: failed"),
        format!("job {theirs} submitted by nobody (uid {NOBODY})"),
        format!("info: job {theirs}: suspended by uid {NOBODY}"),
        format!("info: job {theirs}: resumed by uid {NOBODY}"),
        format!("info: job {theirs}: cancelled by uid {NOBODY}"),
        format!("info: job {theirs} ended: cancelled"),
    ];
    for wanted in &expected {
        assert!(log.contains(wanted.as_str()), "no '{wanted}' in the log:\n{log}");
    }
    // The end state of a failure is the controller's to name; the line says how it ended.
    let ended = |job: u64| {
        log.lines()
            .find(|l| l.contains(&format!("info: job {job} ended: ")))
            .unwrap_or_else(|| panic!("no end of job {job}:\n{log}"))
    };
    assert!(ended(three).ends_with(", exit code 3"), "{}", ended(three));
    assert!(ended(killed).ends_with(", killed by signal 11"), "{}", ended(killed));
    assert!(ended(memory).ends_with("(out of memory)"), "{}", ended(memory));

    // Under systemd the same lines carry journald's priorities: JOURNAL_STREAM names the
    // stderr the daemon writes (its log file, kept across the restart).
    d.signal(libc::SIGTERM);
    d.wait_exit();
    let stat = std::fs::metadata(d.dir.join("daemon.log")).unwrap();
    let stream = format!(
        "{}:{}",
        std::os::unix::fs::MetadataExt::dev(&stat),
        std::os::unix::fs::MetadataExt::ino(&stat)
    );
    let before = d.log().len();
    d.env.push(("JOURNAL_STREAM".into(), stream));
    d.launch();
    let job = d.submit(&["-n", "1", "--", "true"]);
    d.wait_end(job, Duration::from_secs(60));
    d.signal(libc::SIGTERM);
    d.wait_exit();
    let journal = d.log()[before..].to_string();
    assert!(
        journal.contains(&format!("<6>cosched daemon: job {job} ended: done, exit code 0")),
        "{journal}"
    );
    assert!(
        journal.lines().all(|l| l.starts_with('<')),
        "a line without a priority: {journal}"
    );
}
