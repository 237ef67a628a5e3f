//! The daemon under systemd, without systemd: its readiness notifications arrive on a datagram
//! socket of the test's own (`NOTIFY_SOCKET`), READY=1 only once the API socket accepts; its
//! log has a level on every line (journald's `<N>` when `JOURNAL_STREAM` names its stderr) and
//! a line per job lifecycle event an administrator looks for. In a cgroup systemd delegated,
//! the jobs' cgroups go inside it and outlive a restart.

mod common;

use common::{output_within, wait_until, Daemon, COSCHED, NOBODY};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
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
    common::remove_cgroups(&format!("cosched-notify-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_notify_socket_is_a_warning_not_a_failure() {
    let mut d = Daemon::start_with(
        &["--procs", "2"],
        &[("NOTIFY_SOCKET", "relative/path")],
        None,
    );
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
    // perl fills 256 MiB in a job held to 64.
    let fill = "$x = 'x' x (256 << 20)";
    let memory = d.submit(&["-n", "1", "--mem", "64M", "--", "perl", "-e", fill]);
    d.wait_end(timed, Duration::from_secs(60));
    d.wait_end(memory, Duration::from_secs(60));

    // nobody's job, suspended, resumed and cancelled by nobody.
    let run: Vec<&str> = "run --detach --output /dev/null -n 1 -- sleep 100"
        .split(' ')
        .collect();
    let out = d.cosched_as(NOBODY, &run);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = common::job_id(out);
    assert!(wait_until(Duration::from_secs(60), || d.job(theirs)
        ["state"]
        == "running"));
    for verb in ["suspend", "resume", "cancel"] {
        let out = d.cosched_as(NOBODY, &[verb, &theirs.to_string()]);
        assert!(
            out.status.success(),
            "{verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
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
        format!("info: job {ok} ended: completed, exit code 0"),
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
        assert!(
            log.contains(wanted.as_str()),
            "no '{wanted}' in the log:\n{log}"
        );
    }
    // The end state of a failure is the controller's to name; the line says how it ended.
    let ended = |job: u64| {
        log.lines()
            .find(|l| l.contains(&format!("info: job {job} ended: ")))
            .unwrap_or_else(|| panic!("no end of job {job}:\n{log}"))
    };
    assert!(ended(three).ends_with(", exit code 3"), "{}", ended(three));
    assert!(
        ended(killed).ends_with(", killed by SIGSEGV"),
        "{}",
        ended(killed)
    );
    assert!(
        ended(memory).ends_with("(out of memory)"),
        "{}",
        ended(memory)
    );

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
        journal.contains(&format!(
            "<6>cosched daemon: job {job} ended: completed, exit code 0"
        )),
        "{journal}"
    );
    assert!(
        journal.lines().all(|l| l.starts_with('<')),
        "a line without a priority: {journal}"
    );
}

/// A cgroup standing for a systemd unit with `Delegate=yes` in the v2 tree, and daemons
/// started in it as systemd would start them; removed (with what the daemon made) at the end.
struct Unit {
    dir: PathBuf,
    cgroup: PathBuf,
    parent: String,
}

impl Unit {
    fn new(name: &str, marked: bool) -> Unit {
        let tag = format!("cosched-{name}-it-{}", std::process::id());
        let dir = std::env::temp_dir().join(&tag);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cgroup = common::v2_root().join(format!("{tag}.service"));
        std::fs::create_dir(&cgroup).unwrap();
        if marked {
            // What systemd sets on a delegated unit's cgroup.
            let path = std::ffi::CString::new(cgroup.to_str().unwrap()).unwrap();
            // SAFETY: NUL-terminated strings and a one-byte value.
            let set = unsafe {
                libc::setxattr(
                    path.as_ptr(),
                    c"trusted.delegate".as_ptr(),
                    c"1".as_ptr().cast(),
                    1,
                    0,
                )
            };
            assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
        }
        Unit {
            dir,
            cgroup,
            parent: tag,
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("cosched.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// A daemon started in the unit's cgroup; returns once its socket accepts.
    fn start(&self, delegation: &str) -> Running {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.log"))
            .unwrap();
        let procs =
            std::ffi::CString::new(self.cgroup.join("cgroup.procs").to_str().unwrap()).unwrap();
        let mut command = Command::new(COSCHED);
        command
            .args([
                "daemon",
                "--procs",
                "2",
                "--cgroup-delegation",
                delegation,
                "--cgroup-parent",
            ])
            .arg(&self.parent)
            .arg("--state-dir")
            .arg(self.dir.join("state"))
            .arg("--socket")
            .arg(self.socket())
            .stderr(log);
        // SAFETY: open, write and close are async-signal-safe; the path was built before fork.
        unsafe {
            command.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                let moved = fd >= 0 && libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                if fd >= 0 {
                    libc::close(fd);
                }
                match moved {
                    true => Ok(()),
                    false => Err(std::io::Error::last_os_error()),
                }
            });
        }
        let mut child = command.spawn().unwrap();
        assert!(
            wait_until(Duration::from_secs(30), || {
                UnixStream::connect(self.socket()).is_ok() || child.try_wait().unwrap().is_some()
            }),
            "the daemon did not open its socket: {}",
            self.log()
        );
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the daemon exited ({status}): {}", self.log());
        }
        Running(Some(child))
    }

    /// Waits until the daemon is in the unit's leaf (it moves there as its agent starts,
    /// which may be just after its socket accepts).
    fn holds_in_its_leaf(&self, daemon: &Running) {
        let leaf = format!(
            "/{}/daemon",
            self.cgroup.file_name().unwrap().to_str().unwrap()
        );
        let moved = wait_until(Duration::from_secs(30), || {
            v2_cgroup_of(daemon.id()) == leaf
        });
        assert!(moved, "the daemon is not in {leaf}: {}", self.log());
    }

    /// Waits until the daemon's log holds `text`.
    fn logs(&self, text: &str) {
        let logged = wait_until(Duration::from_secs(30), || self.log().contains(text));
        assert!(logged, "no '{text}' in the log: {}", self.log());
    }

    fn cosched(&self, args: &[&str]) -> std::process::Output {
        Command::new(COSCHED)
            .args(args)
            .env("COSCHED_SOCKET", self.socket())
            .output()
            .unwrap()
    }

    fn state(&self, job: u64) -> String {
        let out = self.cosched(&["ps", "--all", "--json"]);
        let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        jobs.as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == job)
            .map(|j| j["state"].as_str().unwrap().to_string())
            .unwrap_or_default()
    }
}

impl Drop for Unit {
    fn drop(&mut self) {
        // Children first: the jobs' groups (a failed test's jobs killed) and their parent,
        // inside the unit and in the v1 trees (or at the top, undelegated), then the leaf and
        // the unit.
        let unit = self.cgroup.file_name().unwrap().to_str().unwrap();
        common::remove_cgroups(&format!("{unit}/{}", self.parent));
        common::remove_cgroups(&self.parent);
        for dir in [self.cgroup.join("daemon"), self.cgroup.clone()] {
            wait_until(Duration::from_secs(10), || {
                std::fs::remove_dir(&dir).is_ok() || !dir.exists()
            });
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A daemon of a [`Unit`]: stopped with SIGTERM when dropped (a failed test's too).
struct Running(Option<Child>);

impl Running {
    fn id(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut daemon) = self.0.take() {
            // SAFETY: kill has no memory effects; the pid is our child's.
            unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
            wait_until(Duration::from_secs(30), || {
                daemon.try_wait().unwrap().is_some()
            });
        }
    }
}

fn stop(daemon: Running) {
    drop(daemon);
}

/// The v2 line of a process's /proc/PID/cgroup.
fn v2_cgroup_of(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap()
        .to_string()
}

#[test]
fn in_a_delegated_unit_jobs_go_inside_it_and_outlive_a_restart() {
    cosched_os::require_root("the daemon's tests");
    let unit = Unit::new("delegated", true);
    let unit_path = format!("/{}", unit.cgroup.file_name().unwrap().to_str().unwrap());
    let daemon = unit.start("auto");
    unit.holds_in_its_leaf(&daemon);
    unit.logs("jobs' cgroups under the delegated");

    let pid_file = unit.dir.join("job.pid");
    let script = format!("echo $$ > {}; exec sleep 300", pid_file.display());
    let mut run: Vec<&str> = "run --detach --output /dev/null -n 1 -- sh -c"
        .split(' ')
        .collect();
    run.push(&script);
    let out = unit.cosched(&run);
    let job = common::job_id(out);
    assert!(wait_until(Duration::from_secs(30), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    }));
    let job_pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        v2_cgroup_of(job_pid),
        format!("{unit_path}/{}/job-{job}", unit.parent),
        "{}",
        unit.log()
    );

    // KillMode=process: systemd stops the daemon alone; the job runs on, and the daemon
    // systemd starts again (in the unit's cgroup) moves to its leaf and takes the job back.
    stop(daemon);
    assert!(std::path::Path::new(&format!("/proc/{job_pid}")).exists());
    let daemon = unit.start("auto");
    unit.holds_in_its_leaf(&daemon);
    // The socket takes connections from its bind; the records are taken back after that.
    unit.logs("took back 1 unfinished job(s)");
    assert_eq!(unit.state(job), "running", "{}", unit.log());
    assert!(unit.cosched(&["cancel", &job.to_string()]).status.success());
    assert!(
        wait_until(Duration::from_secs(60), || unit.state(job) == "cancelled"),
        "{}",
        unit.log()
    );
    stop(daemon);
}

#[test]
fn unmarked_cgroups_keep_jobs_at_the_top_unless_told() {
    cosched_os::require_root("the daemon's tests");
    let unit = Unit::new("undelegated", false);
    let daemon = unit.start("auto");
    let unit_path = format!("/{}", unit.cgroup.file_name().unwrap().to_str().unwrap());
    assert!(
        wait_until(Duration::from_secs(30), || common::v2_root()
            .join(&unit.parent)
            .exists()),
        "{}",
        unit.log()
    );
    assert_eq!(v2_cgroup_of(daemon.id()), unit_path, "{}", unit.log());
    stop(daemon);
    common::remove_cgroups(&unit.parent);

    // Told, it delegates all the same.
    let daemon = unit.start("yes");
    unit.holds_in_its_leaf(&daemon);
    assert!(unit.cgroup.join(&unit.parent).exists());
    stop(daemon);

    // Nothing to delegate from the root cgroup, and a bad word: one line each, refused.
    for (value, says) in [
        ("yes", "in the root cgroup"),
        ("perhaps", "'perhaps' is not auto, yes or no"),
    ] {
        let out = output_within(
            Command::new(COSCHED)
                .args(["daemon", "--procs", "2", "--cgroup-delegation", value])
                .args(["--socket", "/nonexistent/cosched.sock", "--state-dir"])
                .arg(unit.dir.join("root-state")),
            Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{value}: {stderr}"
        );
    }
}
