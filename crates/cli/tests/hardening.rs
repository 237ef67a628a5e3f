//! A hostile local user (`nobody`) against root's daemon, and faults (kill -9 at every point of
//! a launch, a full disk, too few descriptors, a stop that cancels): nobody gains anything,
//! locks anyone out, or makes a job run twice, stay frozen or lose its record. Needs root.

mod common;

use common::*;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
}

/// A scratch directory for one test, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = PathBuf::from(format!("/tmp/cosched-hard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.0.join("state"))
            .output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts a daemon that is expected to refuse; returns its stderr.
fn daemon_refuses(args: &[&str]) -> String {
    let out = output_within(
        Command::new(COSCHED).arg("daemon").args(args),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the daemon should refuse: {stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    stderr
}

#[test]
fn a_state_directory_another_user_could_write_is_refused() {
    let scratch = Scratch::new("statedir");
    let root_file = scratch.0.join("root-file");
    std::fs::write(&root_file, "root's").unwrap();
    // The attack: nobody prepares the state directory before root starts the daemon.
    let planted = scratch.0.join("planted");
    for sub in ["", "jobs", "output"] {
        std::fs::create_dir_all(planted.join(sub)).unwrap();
        std::fs::set_permissions(planted.join(sub), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        chown(&planted.join(sub), NOBODY);
    }
    std::os::unix::fs::symlink(&root_file, planted.join("output/job-1.out")).unwrap();
    let socket = scratch.0.join("s.sock");
    let socket = socket.to_str().unwrap();
    let error = daemon_refuses(&["--state-dir", planted.to_str().unwrap(), "--socket", socket]);
    assert!(error.contains("owned by uid 65534, not root"), "{error}");
    // Root's own directory under one that nobody owns: nobody could rename it away.
    let under = scratch.0.join("nobodys");
    std::fs::create_dir(&under).unwrap();
    chown(&under, NOBODY);
    let inner = under.join("state");
    std::fs::create_dir(&inner).unwrap();
    let error = daemon_refuses(&["--state-dir", inner.to_str().unwrap(), "--socket", socket]);
    assert!(error.contains("a parent of the state directory"), "{error}");
    // nobody's link to a directory of root's: following it, the daemon would make that
    // directory its own (chmod 0700, files in it) wherever nobody pointed.
    let target = scratch.0.join("roots-dir");
    std::fs::create_dir(&target).unwrap();
    let link = under.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(NOBODY), Some(NOBODY)).unwrap();
    let error = daemon_refuses(&["--state-dir", link.to_str().unwrap(), "--socket", socket]);
    assert!(
        error.contains("a parent of the state directory is owned by uid 65534"),
        "{error}"
    );
    // The same link in root's own directory, but nobody's link: also refused.
    let roots_link = scratch.0.join("nobodys-link");
    std::os::unix::fs::symlink(&target, &roots_link).unwrap();
    std::os::unix::fs::lchown(&roots_link, Some(NOBODY), Some(NOBODY)).unwrap();
    let error = daemon_refuses(&[
        "--state-dir",
        roots_link.to_str().unwrap(),
        "--socket",
        socket,
    ]);
    assert!(
        error.contains("a symbolic link on the way to the state directory is owned by uid 65534"),
        "{error}"
    );
    let target_meta = std::fs::metadata(&target).unwrap();
    assert_eq!(
        target_meta.mode() & 0o777,
        0o755,
        "the link's target was left alone"
    );
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    // A socket in a directory nobody may write: they could take its name, or swap the file
    // the daemon then makes world-writable.
    let nobodys_socket = under.join("s.sock");
    let error = daemon_refuses(&[
        "--state-dir",
        scratch.0.join("fine").to_str().unwrap(),
        "--socket",
        nobodys_socket.to_str().unwrap(),
    ]);
    assert!(
        error.contains("the socket's directory is owned by uid 65534"),
        "{error}"
    );
    // Root's directory with a subdirectory others may write.
    let open = scratch.0.join("open");
    std::fs::create_dir_all(open.join("jobs")).unwrap();
    std::fs::set_permissions(open.join("jobs"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = daemon_refuses(&["--state-dir", open.to_str().unwrap(), "--socket", socket]);
    assert!(error.contains("writable by others"), "{error}");
    let meta = std::fs::metadata(&root_file).unwrap();
    assert_eq!(meta.uid(), 0, "the planted link was never followed");
    assert_eq!(std::fs::read_to_string(&root_file).unwrap(), "root's");
    // A socket path that is a regular file is refused, not deleted.
    let file = scratch.0.join("not-a-socket");
    std::fs::write(&file, "keep").unwrap();
    let state = scratch.0.join("good");
    let error = daemon_refuses(&[
        "--state-dir",
        state.to_str().unwrap(),
        "--socket",
        file.to_str().unwrap(),
    ]);
    assert!(error.contains("is not a socket"), "{error}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    // An empty store is not a new store: job ids would start again at 1.
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(state.join("jobs.sqlite"), "").unwrap();
    let error = daemon_refuses(&["--state-dir", state.to_str().unwrap(), "--socket", socket]);
    assert!(error.contains("is empty"), "{error}");
}

/// The processes in a job's cgroup.
fn job_pids(d: &Daemon, job: u64) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let pids: Vec<i32> = std::fs::read_to_string(d.cgroup(job).join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect();
        if !pids.is_empty() {
            return pids;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "job {job} has no process"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_job_inherits_its_stdio_and_nothing_else() {
    let d = Daemon::start(&["--quantum-ms", "100"]);
    // nobody's command line carries an escape sequence for root's terminal.
    let out = d.cosched_as(
        NOBODY,
        &[
            "run",
            "--detach",
            "--output",
            "/dev/null",
            "-n",
            "1",
            "--",
            "sh",
            "-c",
            "exec sleep 30",
            "\x1b]0;owned\x07",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ps = d.cosched(&["ps"]);
    assert!(
        !ps.stdout.contains(&0x1b),
        "ps printed another user's escape sequence"
    );
    let job: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let pid = job_pids(&d, job)[0];
    // The program must have been executed (not the supervisor's fork before exec).
    let start = Instant::now();
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default() != "sleep\n" {
        assert!(start.elapsed() < Duration::from_secs(20), "sleep never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    fds.sort();
    assert_eq!(
        fds,
        ["0", "1", "2"],
        "the job holds descriptors not meant for it (the daemon's stray {STRAY_FD} included?)"
    );
    assert!(d.cosched(&["cancel", &job.to_string()]).status.success());

    // A program is looked for as the job's user: whether a file exists in a directory
    // nobody may not search must not show in the exit status (126 against 127).
    let scratch = Scratch::new("path");
    let hidden = scratch.0.join("private");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(hidden.join("hidden-file"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        hidden.join("hidden-file"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let status_of = |program: &str| {
        Command::new(COSCHED)
            .args(["run", "-n", "1", "--", program])
            .env("COSCHED_SOCKET", d.socket())
            .env("PATH", &hidden)
            .current_dir("/")
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap()
            .status
            .code()
    };
    // (Both are "Permission denied" to nobody, as a shell would say.)
    assert_eq!(status_of("hidden-file"), Some(126));
    assert_eq!(status_of("no-such-file"), Some(126));
}

#[test]
fn the_client_sends_nothing_to_a_socket_another_user_serves() {
    let scratch = Scratch::new("fake-socket");
    let dir = scratch.0.join("nobodys");
    std::fs::create_dir(&dir).unwrap();
    chown(&dir, NOBODY);
    let socket = dir.join("cosched.sock");
    let heard = dir.join("heard");
    // nobody's listener keeps whatever it is sent.
    let script = "import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); s.listen(4)
open(sys.argv[1] + '.ready', 'w').close()
c, _ = s.accept()
c.settimeout(3)
data = b''
try:
    while True:
        chunk = c.recv(65536)
        if not chunk: break
        data += chunk
except OSError:
    pass
open(sys.argv[2], 'wb').write(data)";
    let mut listener = Command::new("python3")
        .args(["-c", script])
        .arg(&socket)
        .arg(&heard)
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .unwrap();
    let ready = PathBuf::from(format!("{}.ready", socket.display()));
    let start = Instant::now();
    while !ready.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "listener never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new(COSCHED)
        .args(["run", "-n", "1", "--", "true"])
        .env("COSCHED_SOCKET", &socket)
        .env("ROOTS_SECRET", "hunter2")
        .output()
        .unwrap();
    refused(&out, "served by uid 65534 (neither root nor you)");
    listener.wait().unwrap();
    let heard = std::fs::read(&heard).unwrap_or_default();
    assert!(
        heard.is_empty(),
        "the fake daemon heard {}",
        String::from_utf8_lossy(&heard)
    );
}

/// nobody opens `count` connections running `script_body` on each (`s` is the socket) and
/// keeps them `hold` seconds; returns once all are open.
fn nobody_connections(
    socket: &Path,
    count: usize,
    script_body: &str,
    hold: f64,
) -> std::process::Child {
    let script = format!(
        "import socket, sys, time
conns = []
for _ in range({count}):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    # The daemon may refuse and close before the request is written: that is its right.
    try:
    {script_body}
    except OSError:
        pass
    conns.append(s)
print('open', flush=True)
time.sleep({hold})"
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .arg(socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(
        line.trim(),
        "open",
        "the attacker could not open its connections"
    );
    child
}

/// nobody keeps `count` connections open, each having sent one byte of a request, and
/// opens a new one for each the daemon closes; runs until killed.
fn slow_writers(socket: &Path, count: usize) -> std::process::Child {
    let script = format!(
        "import socket, sys, time
def slow():
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    # A connection refused over the cap may be closed before this byte is written.
    try:
        s.sendall(b'{{')
    except OSError:
        pass
    s.setblocking(False)
    return s
conns = [slow() for _ in range({count})]
print('open', flush=True)
while True:
    time.sleep(0.2)
    for i, s in enumerate(conns):
        try:
            if s.recv(4096) == b'':
                raise OSError
        except BlockingIOError:
            continue
        except OSError:
            pass
        s.close()
        conns[i] = slow()"
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .arg(socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(
        line.trim(),
        "open",
        "the attacker could not open its connections"
    );
    child
}

/// nobody keeps 16 connections sending one-byte messages with twelve descriptors each (never
/// a newline), reopening those the daemon closes; runs until killed.
fn descriptor_flood(socket: &Path) -> std::process::Child {
    let script = "import array, os, socket, sys, time
null = os.open('/dev/null', os.O_RDONLY)
rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [null] * 12))]
conns = []
while True:
    while len(conns) < 16:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(sys.argv[1])
        except OSError:
            s.close()
            break
        s.setblocking(False)
        conns.append(s)
    for s in list(conns):
        try:
            s.sendmsg([b' '], rights)
        except BlockingIOError:
            pass
        except OSError:
            conns.remove(s)
            s.close()
    time.sleep(0.001)";
    Command::new("python3")
        .args(["-c", script])
        .arg(socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .unwrap()
}

/// Root's `ps` and `cancel` get through; returns how long `ps` took.
fn root_gets_through(d: &Daemon, job: u64) -> Duration {
    let start = Instant::now();
    let ps = d.cosched(&["ps"]);
    let took = start.elapsed();
    assert!(
        ps.status.success(),
        "{}",
        String::from_utf8_lossy(&ps.stderr)
    );
    let cancel = d.cosched(&["suspend", &job.to_string()]);
    assert!(
        cancel.status.success(),
        "{}",
        String::from_utf8_lossy(&cancel.stderr)
    );
    assert!(d.cosched(&["resume", &job.to_string()]).status.success());
    took
}

#[test]
fn one_user_cannot_lock_the_daemon_out() {
    let d = Daemon::start(&["--quantum-ms", "100"]);
    let forever = d.submit(&["-n", "1", "--", "sleep", "3600"]);
    // 260 waiters for a job that never ends, whose client then leaves.
    let waiters = nobody_connections(
        &d.socket(),
        260,
        &format!("    s.sendall(b'{{\"op\":\"wait\",\"job\":{forever}}}\\n')"),
        1.0,
    );
    let during = root_gets_through(&d, forever);
    let waiting = d.json(&["stats", "--json"])["clients_waiting"]
        .as_u64()
        .unwrap();
    assert!(waiting > 0, "the waiters were parked");
    let mut waiters = waiters;
    waiters.kill().unwrap();
    waiters.wait().unwrap();
    let start = Instant::now();
    loop {
        let waiting = d.json(&["stats", "--json"])["clients_waiting"]
            .as_u64()
            .unwrap();
        if waiting == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{waiting} waiters outlived their clients"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // 300 slow writers (a byte each, then silence), replaced as the daemon drops them.
    let slow = slow_writers(&d.socket(), 300);
    // nobody itself is told why, in one line, not "Broken pipe".
    refused(
        &d.cosched_as(NOBODY, &["ps"]),
        "uid 65534 has 16 requests in progress already",
    );
    let slow_ps = root_gets_through(&d, forever);
    let mut slow = slow;
    slow.kill().unwrap();
    slow.wait().unwrap();
    // Descriptors sent along byte by byte (twelve a message, never a newline) on every
    // connection nobody may open: the daemon holds at most three a connection.
    let flood = descriptor_flood(&d.socket());
    let daemon = d.child.as_ref().unwrap().id();
    let held = || {
        std::fs::read_dir(format!("/proc/{daemon}/fd"))
            .unwrap()
            .count()
    };
    let mut most_held = 0;
    let flooded = Instant::now();
    while flooded.elapsed() < Duration::from_secs(2) {
        most_held = most_held.max(held());
        std::thread::sleep(Duration::from_millis(20));
    }
    let flood_ps = root_gets_through(&d, forever);
    let run = d.cosched(&["run", "-n", "1", "--", "true"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut flood = flood;
    flood.kill().unwrap();
    flood.wait().unwrap();
    assert!(
        most_held < 200,
        "the daemon held {most_held} descriptors under the flood"
    );
    eprintln!(
        "root's ps under 260 hung-up waiters: {during:?}; under 300 slow writers: {slow_ps:?}; \
         under a descriptor flood: {flood_ps:?} (the daemon held at most {most_held})"
    );
    // A silent client is told why it is dropped.
    let mut stream = UnixStream::connect(d.socket()).unwrap();
    stream.write_all(b"{\"op\"").unwrap();
    let mut reply = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(&stream), &mut reply).unwrap();
    assert!(
        reply.contains("no complete request within 5s; closing"),
        "{reply}"
    );
    assert!(d
        .cosched(&["cancel", &forever.to_string()])
        .status
        .success());
}

/// A job that leaves one line in `log` each time it starts.
fn counting_job(d: &Daemon, log: &Path) -> Vec<String> {
    let script = format!("echo ran >> {}; sleep 1", log.display());
    let out_file = d.dir.join("count.out");
    vec![
        "run".into(),
        "--detach".into(),
        "--output".into(),
        out_file.to_str().unwrap().into(),
        "-n".into(),
        "1".into(),
        "--".into(),
        "sh".into(),
        "-c".into(),
        script,
    ]
}

#[test]
fn a_daemon_killed_anywhere_in_a_launch_runs_the_job_once_and_never_leaves_it_frozen() {
    for point in cosched_os::fault::POINTS {
        let job = if point == "accepted" { 0 } else { 1 };
        let fault = format!("{point}:{job}");
        let mut d = Daemon::start_with(
            &["--quantum-ms", "100"],
            &[("COSCHED_FAULT", fault.as_str())],
            None,
        );
        let log = d.dir.join("ran");
        let args = counting_job(&d, &log);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // The daemon dies before or after answering: either way job 1 must run exactly once.
        let _ = d.cosched(&args);
        d.wait_exit();
        if point == "spawned" {
            // Its supervisor lives on and must let the (gang-mode, frozen) job run at once.
            let start = Instant::now();
            while !log.exists() {
                assert!(
                    start.elapsed() < Duration::from_secs(1),
                    "job 1 stayed frozen after the daemon died at '{point}'"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        d.env.clear();
        d.launch();
        if point == "accepted" {
            // Killed before anything was stored: no job, nothing ran.
            assert_eq!(d.json(&["ps", "--all", "--json"]), serde_json::json!([]));
            assert!(!log.exists(), "a job that was never recorded ran");
            continue;
        }
        let job = d.wait_end(1, Duration::from_secs(30));
        assert_eq!(job["exit"]["code"], 0, "{point}: {job}");
        let runs = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            runs.lines().count(),
            1,
            "killed at '{point}', the job ran {runs:?}"
        );
        assert!(!d.frozen(1));
    }
}

#[test]
fn a_full_disk_loses_no_exit_status_and_leaves_no_phantom_job() {
    let scratch = Scratch::new("full");
    let state = scratch.0.join("state");
    std::fs::create_dir(&state).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs"])
        .arg(&state)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount a tmpfs");
    let mut d = Daemon::start(&[
        "--quantum-ms",
        "100",
        "--mpl",
        "1",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    let job = d.submit(&["-n", "1", "--", "sh", "-c", "sleep 3; exit 5"]);
    let filler = state.join("filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=4k"])
        .arg(format!("of={}", filler.display()))
        .output();
    // Submissions that cannot start (two processors, one taken, one slice) until the store
    // takes no more: that one is refused and leaves no trace.
    let mut accepted = 0;
    let refusal = loop {
        let out = d.cosched(&[
            "run",
            "--detach",
            "--output",
            "/dev/null",
            "-n",
            "2",
            "--",
            "true",
        ]);
        if !out.status.success() {
            break out;
        }
        accepted += 1;
        assert!(accepted < 500, "the store never filled up");
    };
    refused(&refusal, "cannot be recorded");
    assert_eq!(
        d.json(&["ps", "--all", "--json"]).as_array().unwrap().len(),
        accepted + 1,
        "a refused job shows"
    );
    // The job ends while nothing can be saved: waiters still hear of it...
    let waited = d.cosched(&["wait", &job.to_string()]);
    assert_eq!(waited.status.code(), Some(5));
    // ...and a daemon killed now, then restarted with room again, still knows how it ended.
    d.signal(libc::SIGKILL);
    d.wait_exit();
    std::fs::remove_file(&filler).unwrap();
    // Down a while: the end is recorded when it happened, not when the daemon learns of it.
    std::thread::sleep(Duration::from_secs(4));
    d.launch();
    let record = d.wait_end(job, Duration::from_secs(30));
    assert_eq!(record["exit"]["code"], 5, "{record}");
    assert_eq!(record["state"], "failed");
    let ran = record["ended_us"].as_i64().unwrap() - record["started_us"].as_i64().unwrap();
    assert!(
        (3_000_000..5_500_000).contains(&ran),
        "a 3 s job recorded as running {ran} µs: {record}"
    );
}

/// CPU time (user + system, in clock ticks) a process has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn running_out_of_descriptors_refuses_jobs_clearly_and_never_spins() {
    let d = Daemon::start_with(&["--quantum-ms", "100", "--mpl", "1"], &[], Some(256));
    let pid = d.child.as_ref().unwrap().id();
    let busy = d.submit(&["-n", "2", "--", "sleep", "60"]);
    // Queued jobs hold their client's three descriptors until they start.
    let mut accepted = Vec::new();
    let mut refusal = None;
    for _ in 0..120 {
        let out = d.cosched(&[
            "run",
            "--detach",
            "--output",
            "/dev/null",
            "-n",
            "2",
            "--",
            "true",
        ]);
        if out.status.success() {
            accepted.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
        } else {
            refusal = Some(String::from_utf8_lossy(&out.stderr).to_string());
            break;
        }
    }
    let refusal = refusal.expect("a limit of 256 descriptors must refuse some of 120 jobs");
    assert!(refusal.contains("too many queued jobs"), "{refusal}");
    // Root's connections past the limit: the daemon waits for descriptors, it does not spin.
    let mut held = Vec::new();
    for _ in 0..200 {
        match UnixStream::connect(d.socket()) {
            Ok(stream) => held.push(stream),
            Err(_) => break,
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - before;
    assert!(
        used < 100,
        "the daemon used {used} ticks in 2 s while out of descriptors"
    );
    drop(held);
    assert!(d.cosched(&["cancel", &busy.to_string()]).status.success());
    for job in &accepted {
        let id: u64 = job.parse().unwrap();
        let end = d.wait_end(id, Duration::from_secs(60));
        assert_eq!(end["state"], "completed", "job {id} lost: {end}");
    }
}

#[test]
fn a_stop_that_cancels_ends_every_job_as_cancelled_and_tells_its_client() {
    let mut d = Daemon::start(&["--quantum-ms", "100", "--mpl", "1", "--on-stop", "cancel"]);
    // Job 1: a blocking client's.
    let client = Command::new(COSCHED)
        .args(["run", "-n", "1", "--", "sleep", "60"])
        .env("COSCHED_SOCKET", d.socket())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let running = 1;
    job_pids(&d, running);
    let suspended = d.submit(&["-n", "1", "--", "sleep", "60"]);
    let suspended_pid = job_pids(&d, suspended)[0];
    assert!(d
        .cosched(&["suspend", &suspended.to_string()])
        .status
        .success());
    let queued = d.submit(&["-n", "2", "--", "true"]);
    d.signal(libc::SIGTERM);
    d.wait_exit();
    // Nothing of the jobs is left, nor the parent they were under.
    let left = cgroups_named(&d.parent);
    assert!(left.is_empty(), "cgroups left by the stop: {left:?}");
    let out = client.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("cancelled") && !said.contains("keeps running"),
        "{said}"
    );
    assert!(
        !Path::new(&format!("/proc/{suspended_pid}")).exists(),
        "the suspended job still runs"
    );
    d.launch();
    for job in [running, suspended, queued] {
        assert_eq!(
            d.job(job)["state"],
            "cancelled",
            "job {job}: {}",
            d.job(job)
        );
    }
}

/// A job cancelled while it starts: its command, forked but not yet in the job's cgroups
/// (its joins wait for RCU grace periods), missed the SIGTERM sent to the cgroup and ran
/// until the SIGKILL after the grace (seen as `nobody`). Now its supervisor kills it before it
/// runs; a command already running gets the SIGTERM. Either way no job's end is the grace's
/// SIGKILL.
#[test]
fn a_job_cancelled_as_it_starts_is_stopped_before_its_command_runs_or_by_sigterm() {
    let d = Daemon::start(&["--quantum-ms", "100"]);
    let mut ends = Vec::new();
    for _ in 0..10 {
        let job = d.submit(&["-n", "1", "--", "sleep", "60"]);
        assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
        let end = d.wait_end(job, Duration::from_secs(30));
        assert_eq!(end["state"], "cancelled", "job {job}: {end}");
        ends.push(end);
    }
    for end in &ends {
        let by_sigterm = end["exit"]["signal"] == libc::SIGTERM;
        // Killed by its supervisor, or its start was still held back (its supervisor never
        // started).
        let unran = [
            "cancelled before its command ran",
            "cancelled before it started",
        ]
        .iter()
        .any(|note| end["note"] == *note);
        assert!(
            by_sigterm || unran,
            "a cancel's SIGTERM missed the command: {end}"
        );
    }
}

#[test]
fn ended_jobs_leave_memory_but_stay_answerable() {
    let d = Daemon::start(&["--quantum-ms", "100", "--keep-ended", "2"]);
    // Each ends before the next is submitted (submitted together, they would end in whatever
    // order their slices came round); the first ones leave memory as later ones end, and
    // are still waited for.
    let jobs: Vec<u64> = (0..4)
        .map(|code| {
            let job = d.submit(&["-n", "1", "--", "sh", "-c", &format!("exit {code}")]);
            let waited = d.cosched(&["wait", &job.to_string()]);
            assert_eq!(waited.status.code(), Some(code));
            job
        })
        .collect();
    let listed = d.json(&["ps", "--all", "--json"]);
    let listed: Vec<u64> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        listed,
        jobs[2..],
        "only the latest ended jobs stay in memory"
    );
    let first = jobs[0].to_string();
    assert_eq!(d.cosched(&["wait", &first]).status.code(), Some(0));
    refused(&d.cosched(&["cancel", &first]), "already ended");
}

#[test]
fn detached_jobs_in_scripts_return_at_once_with_their_output_in_a_file() {
    let d = Daemon::start(&["--quantum-ms", "100"]);
    let scratch = Scratch::new("detach");
    let start = Instant::now();
    // As `id=$(cosched run --detach ...)`: standard output is a pipe.
    let out = Command::new(COSCHED)
        .args([
            "run",
            "--detach",
            "-n",
            "1",
            "--",
            "sh",
            "-c",
            "echo hello; sleep 30",
        ])
        .env("COSCHED_SOCKET", d.socket())
        .current_dir(&scratch.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "--detach waited for the job"
    );
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let id_number: u64 = id.parse().expect("only the id is printed");
    let file = scratch.0.join(format!("cosched-{id}.out"));
    let start = Instant::now();
    while std::fs::read_to_string(&file).unwrap_or_default() != "hello\n" {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no output in {}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.cosched(&["cancel", &id]).status.success());
    d.wait_end(id_number, Duration::from_secs(20));
    // --output without --detach: blocks, and writes there.
    let log = scratch.0.join("blocking.log");
    let out = d.cosched(&[
        "run",
        "--output",
        log.to_str().unwrap(),
        "-n",
        "1",
        "--",
        "sh",
        "-c",
        "echo there; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "there\n");
    // A job whose directory is gone says why, to its client and in ps.
    let request = "{\"op\":\"run\",\"argv\":[\"true\"],\"env\":[],\"cwd\":\"/nonexistent-cosched\",\"procs\":1}\n";
    let reply = raw_all(&d.socket(), request.as_bytes());
    assert!(
        reply.contains("cannot enter the working directory (/nonexistent-cosched)"),
        "{reply}"
    );
    // In a shared sticky directory another user holds the next job's file name: the id is
    // printed all the same (a script that retried would run the job twice), and where the
    // output went is said.
    let shared = scratch.0.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let jobs = d.json(&["ps", "--all", "--json"]);
    let next = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .max()
        .unwrap()
        + 1;
    let taken = shared.join(format!("cosched-{next}.out"));
    std::fs::write(&taken, "someone else's").unwrap();
    chown(&taken, 4321);
    let out = Command::new(COSCHED)
        .args(["run", "--detach", "-n", "1", "--", "echo", "mine"])
        .env("COSCHED_SOCKET", d.socket())
        .current_dir(&shared)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        next.to_string()
    );
    assert!(
        stderr.contains(&format!("job {next} writes its output to .cosched-")),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&taken).unwrap(), "someone else's");
    d.wait_end(next, Duration::from_secs(20));
}

/// Sends bytes, returns every reply line until the daemon closes.
fn raw_all(socket: &Path, bytes: &[u8]) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.write_all(bytes).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stream, &mut text).unwrap();
    text
}

#[test]
fn one_users_long_commands_neither_deny_ps_nor_fill_the_daemon() {
    let d = Daemon::start(&["--quantum-ms", "100", "--keep-ended", "1000"]);
    // The longest argument the kernel execs, seven times: 896 KiB of command a job, as the
    // attack used (about 70 such jobs pushed root's `ps` past the client's 64 MiB).
    let long = "a".repeat(131_071);
    let submit = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--detach",
            "--output",
            "/dev/null",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "sleep 600",
        ];
        args.extend_from_slice(extra);
        d.cosched_as(NOBODY, &args)
    };
    // One the kernel would refuse (no client could even be started with it: sent raw).
    let request = serde_json::json!({
        "op": "run", "argv": ["sh", "-c", "sleep 600", "b".repeat(131_072)],
        "env": [], "cwd": "/", "procs": 1, "detach": true, "output": "/dev/null",
    });
    let reply = raw(&d.socket(), format!("{request}\n").as_bytes());
    assert!(reply.contains("argument 3 is 131072 bytes"), "{reply}");
    let mut jobs = Vec::new();
    let refusal = loop {
        let out = submit(&[long.as_str(); 7]);
        if !out.status.success() {
            break String::from_utf8_lossy(&out.stderr).into_owned();
        }
        jobs.push(String::from_utf8(out.stdout).unwrap().trim().to_string());
        assert!(jobs.len() <= 80, "nobody's jobs were never refused");
    };
    assert!(refusal.contains("too many queued bytes"), "{refusal}");
    assert!(refusal.contains("64 MiB"), "{refusal}");
    assert!(
        jobs.len() >= 60,
        "refused after {} jobs: {refusal}",
        jobs.len()
    );

    // Root's listings carry the start of each command; one job's carries it whole.
    let listed_bytes = |listing: &serde_json::Value| {
        for job in listing.as_array().unwrap() {
            let argv = job["argv"].as_array().unwrap();
            let bytes: usize = argv.iter().map(|a| a.as_str().unwrap().len()).sum();
            if job["uid"] == NOBODY {
                assert!(bytes <= 1024, "{bytes} bytes listed");
                assert_eq!(job["argv_cut"], true);
            }
        }
        serde_json::to_string(listing).unwrap().len()
    };
    let size = listed_bytes(&d.json(&["ps", "--json"]));
    assert!(size < 200 << 10, "ps is {size} bytes");
    let one = d.json(&["ps", &jobs[0], "--json"]);
    let argv = one[0]["argv"].as_array().unwrap();
    assert_eq!(argv.len(), 10);
    assert!(argv[3..].iter().all(|a| a.as_str() == Some(long.as_str())));
    assert!(one[0].get("argv_cut").is_none());
    let table = d.cosched(&["ps"]);
    assert!(table.status.success());

    // Ended, they free the user's budget and keep a bounded start of their command.
    for job in &jobs {
        assert!(d.cosched_as(NOBODY, &["cancel", job]).status.success());
    }
    for job in &jobs {
        d.wait_end(job.parse().unwrap(), Duration::from_secs(30));
    }
    let size = listed_bytes(&d.json(&["ps", "--all", "--json"]));
    assert!(size < 200 << 10, "ps --all is {size} bytes");
    let ended = d.json(&["ps", &jobs[0], "--json"]);
    let kept: usize = ended[0]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().len())
        .sum();
    assert!(kept <= 4096, "an ended job keeps {kept} bytes of command");
    assert_eq!(ended[0]["argv_cut"], true);
    let again = submit(&[long.as_str(); 7]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let again = String::from_utf8(again.stdout).unwrap();
    assert!(d
        .cosched_as(NOBODY, &["cancel", again.trim()])
        .status
        .success());
}

#[test]
fn a_jobs_tasks_are_capped_per_processor() {
    let d = Daemon::start(&["--quantum-ms", "100", "--tasks-per-cpu", "8"]);
    let scratch = Scratch::new("tasks");
    chown(&scratch.0, NOBODY);
    let log = scratch.0.join("forks.out");
    // nobody's job tries to hold 40 sleeping processes on its one processor.
    let crowd = format!(
        "{}/../../bench/workloads/crowd.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = d.cosched_as(
        NOBODY,
        &[
            "run",
            "--detach",
            "--output",
            log.to_str().unwrap(),
            "-n",
            "1",
            "--",
            "python3",
            &crowd,
            "40",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("fork refused after"))
    }));
    let tasks = job_pids(&d, job).len();
    assert!((1..=8).contains(&tasks), "{tasks} tasks in job {job}");
    assert!(d.cosched(&["cancel", &job.to_string()]).status.success());
    d.wait_end(job, Duration::from_secs(30));
}

/// A user who holds the job's stderr full and never reads it (a pipe they filled) cannot keep
/// root's supervisor from reporting the job's end: its note there ("no such file") is written
/// by a thread of its own. Before, the supervisor waited in that write for good and the job
/// stayed running, past cancels and time limits, holding its processors.
#[test]
fn a_job_ends_though_its_stderr_is_held_full() {
    let d = Daemon::start(&["--procs", "2", "--quantum-ms", "50"]);
    let (read_end, write_end) = cosched_os::unix::pipe(0).expect("a pipe");
    {
        use std::os::fd::AsRawFd;
        let fd = write_end.as_raw_fd();
        // Filled without blocking, then handed over blocking, as a shell's pipe is.
        // SAFETY: fcntl and write on a descriptor owned here, from a live buffer.
        unsafe {
            libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
            let page = [b'x'; 4096];
            while libc::write(fd, page.as_ptr().cast(), page.len()) > 0 {}
            libc::fcntl(fd, libc::F_SETFL, 0);
        }
    }
    let mut client = Command::new(COSCHED)
        .args(["run", "-n", "1", "--", "/no/such/program"])
        .env("COSCHED_SOCKET", d.socket())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(write_end))
        .spawn()
        .unwrap();
    let submitted = wait_until(Duration::from_secs(30), || {
        !d.json(&["ps", "--all", "--json"])
            .as_array()
            .unwrap()
            .is_empty()
    });
    assert!(submitted, "the client never submitted: {}", d.log());
    let job = d.wait_end(1, Duration::from_secs(60));
    // Now read the pipe, so that the client can say its own piece and leave.
    drop(read_end);
    let _ = client.wait();
    assert_eq!(job["state"], "failed", "{job}");
    assert!(
        job["note"]
            .as_str()
            .unwrap_or("")
            .contains("/no/such/program"),
        "the note still travels in the job's end: {job}"
    );
}

/// The freezer cgroups this machine has mounted, as `--freezer` names them.
fn freezer_cgroups() -> Vec<&'static str> {
    let layout = cosched_cgroups::Layout::detect().unwrap();
    let mounted = [
        ("v1", layout.v1_freezer.is_some()),
        ("v2", layout.v2.is_some()),
    ];
    mounted
        .into_iter()
        .filter_map(|(name, there)| there.then_some(name))
        .collect()
}

/// A daemon stopping jobs with `freezer`, 100 ms slots on 2 processors, running two of root's
/// 2-process computing gangs (their ids).
fn two_gangs_with(freezer: &str) -> (Daemon, u64, u64) {
    let d = Daemon::start(&["--procs", "2", "--quantum-ms", "100", "--freezer", freezer]);
    let spin = spin_py();
    let gang = ["-n", "2", "--", "python3", &spin, "2", "600", "0"];
    let (a, b) = (d.submit(&gang), d.submit(&gang));
    (d, a, b)
}

/// Any user can make a process no freezer stops (`bench/workloads/unfreezable.c`: an exec
/// waiting for good in the kernel for a traced thread nobody reaps). The slot clock waited
/// for its freeze the whole confirmation timeout (2 s) at every boundary it left, so every
/// job of the node switched every 2.1 s instead of every 100 ms. Now root's two gangs keep
/// their slots beside it, with either freezer, the log says once what holds the freeze up,
/// and its owner's cancel ends it.
#[test]
fn a_job_no_freezer_can_stop_holds_no_other_jobs_slot() {
    let program = made("bench/workloads", "build/unfreezable");
    for freezer in freezer_cgroups() {
        let (d, a, b) = two_gangs_with(freezer);
        let stuck = d.submit_as(NOBODY, &["-n", "1", "--", program.to_str().unwrap()]);
        let stuck_exec = |pid: &i32| {
            std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.contains("exec"))
        };
        let running = wait_until(Duration::from_secs(30), || {
            d.cpu_us(a) > 0 && d.cpu_us(b) > 0 && job_pids(&d, stuck).iter().any(stuck_exec)
        });
        assert!(running, "{freezer}: {}", d.log());
        let slots = per_slot_cpu(&d, a, b, 12);
        assert_gang(
            &slots,
            3,
            &format!("{freezer}: beside a job no freezer stops"),
        );
        assert!(
            wait_until(Duration::from_secs(10), || d
                .log()
                .contains("no freeze of it confirmed")),
            "{freezer}: {}",
            d.log()
        );
        assert_eq!(
            d.log().matches("no freeze of it confirmed").count(),
            1,
            "{}",
            d.log()
        );
        let cancel = d.cosched_as(NOBODY, &["cancel", &stuck.to_string()]);
        assert!(cancel.status.success(), "{cancel:?}");
        let end = d.wait_end(stuck, Duration::from_secs(30));
        assert_eq!(end["state"], "cancelled", "{end}");
    }
}

/// The state letter of each process of `job` (`/proc/PID/stat`).
fn job_states(d: &Daemon, job: u64) -> Vec<char> {
    job_pids(d, job)
        .iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            stat.rsplit_once(") ")?.1.chars().next()
        })
        .collect()
}

/// A job that resists signals (`bench/workloads/stop_resistant.c`, as any user can write it):
/// a child its parent holds in ptrace-stop, and processes that continue each other without
/// pause. With the signals freezer (where no freezer cgroup exists), each thaw waited the
/// whole confirmation timeout (2 s) for the held child, since SIGCONT does not end a tracer's
/// stop: beside root's two gangs, with three slices, root's jobs got 0 µs of CPU in 6 s; and
/// a job whose freeze was not confirmed in time was only looked at again, never stopped
/// again, so the continuing processes ran through root's slots (62 % of a processor against a
/// fair 33 %). Now, with every freezer, root's gangs keep their slots, the resisting job runs
/// in none of them, and its owner's cancel ends it. (The first sampled slots also show a
/// gang job started out of its slot with the signals freezer, which joining stops nothing
/// for: it ran in the slots before its own, until it started only in its own.)
#[test]
fn a_job_that_resists_signals_keeps_no_one_from_their_slots() {
    let program = made("bench/workloads", "build/stop_resistant");
    let program = program.to_str().unwrap();
    for freezer in freezer_cgroups().into_iter().chain(["signals"]) {
        let (d, a, b) = two_gangs_with(freezer);
        for way in ["traced", "continues"] {
            let job = d.submit_as(NOBODY, &["-n", "2", "--", program, way]);
            let under_way = wait_until(Duration::from_secs(30), || {
                d.cpu_us(a) > 0
                    && d.cpu_us(b) > 0
                    && match way {
                        "traced" => job_states(&d, job).contains(&'t'),
                        _ => job_pids(&d, job).len() == 4 && d.cpu_us(job) > 0,
                    }
            });
            assert!(under_way, "{freezer} {way}: {}", d.log());
            // The held job computes nothing, so root's two gangs are sampled; the continuing
            // one is sampled against root's first.
            let other = if way == "traced" { b } else { job };
            let slots = per_slot_cpu(&d, a, other, 12);
            assert_gang(&slots, 3, &format!("{freezer}: {way}"));
            let cancel = d.cosched_as(NOBODY, &["cancel", &job.to_string()]);
            assert!(cancel.status.success(), "{freezer} {way}: {cancel:?}");
            let record = d.wait_end(job, Duration::from_secs(30));
            assert_eq!(record["state"], "cancelled", "{freezer} {way}: {record}");
        }
    }
}

/// Any user may submit interactive jobs, each ahead of the batch jobs on its processors for
/// its first stretch. A chain of them as nobody, each cancelled just before its stretch
/// ended, held root's gangs off for good (root's two gangs got 63 ms of CPU in 19 s). Now a
/// user's interactive jobs preempt one at a time and for at most one stretch a window: the
/// chain's third job time-shares with root's gang from its start, and the log says why.
#[test]
fn a_chain_of_one_users_interactive_jobs_gets_one_stretch_and_then_time_shares() {
    let d = Daemon::start(&[
        "--procs",
        "2",
        "--quantum-ms",
        "100",
        "--interactive-preempt",
        "3",
    ]);
    let spin = spin_py();
    let root = d.submit(&["-n", "2", "--", "python3", &spin, "2", "600", "0"]);
    let interactive = ["-n", "2", "--class", "interactive", "--"];
    let busy = [&interactive[..], &["python3", &spin, "2", "600", "0"]].concat();
    for _ in 0..2 {
        let job = d.submit_as(NOBODY, &busy);
        assert!(wait_until(Duration::from_secs(30), || d.cpu_us(job) > 0));
        std::thread::sleep(Duration::from_millis(2_500));
        let cancel = d.cosched_as(NOBODY, &["cancel", &job.to_string()]);
        assert!(cancel.status.success(), "{cancel:?}");
        d.wait_end(job, Duration::from_secs(30));
    }
    let run = [&["run", "--detach", "--output", "/dev/null"][..], &busy].concat();
    let submitted = d.cosched_as(NOBODY, &run);
    let told = String::from_utf8_lossy(&submitted.stderr).into_owned();
    let third = job_id(submitted);
    assert!(told.contains("time-shares from its start"), "{told}");
    assert!(wait_until(Duration::from_secs(30), || d.cpu_us(third) > 0));
    // Within what would have been its stretch (3 s).
    let slots = per_slot_cpu(&d, root, third, 12);
    assert_gang(
        &slots,
        4,
        "root's gang beside nobody's third interactive job",
    );
    let said = format!("job {third}: interactive, but uid {NOBODY}'s interactive jobs");
    assert!(d.log().contains(&said), "{}", d.log());
}

/// A cancelled job is let loose for its grace (SIGTERM, then SIGKILL 3 s on) so that it can
/// end cleanly. Its processors went to others at the cancel and it kept full weight: nobody's
/// job ignoring SIGTERM computed beside root's gangs in every slot (1.89 s of CPU against
/// their 2.07 s over 2 s, where its third would be half of theirs), and a user cancelling
/// job after job kept many loose at once. Now it keeps its place until it ends and its grace
/// runs at the least weight: about its third (on its own processors in its own slots), and
/// it still ends by SIGKILL.
#[test]
fn a_cancelled_jobs_grace_takes_nothing_from_the_gangs_running() {
    let (d, a, b) = two_gangs_with(freezer_cgroups()[0]);
    let ignores = "trap '' TERM; while :; do :; done & while :; do :; done";
    let job = d.submit_as(NOBODY, &["-n", "2", "--", "sh", "-c", ignores]);
    // Its command computing (its supervisor's setup is in its cgroup too).
    let started = wait_until(Duration::from_secs(30), || {
        d.cpu_us(a) > 0 && d.cpu_us(b) > 0 && d.cpu_us(job) > 100_000
    });
    assert!(started, "{}", d.log());
    let cancel = d.cosched_as(NOBODY, &["cancel", &job.to_string()]);
    assert!(cancel.status.success(), "{cancel:?}");
    // Over two seconds of its grace.
    std::thread::sleep(Duration::from_millis(300));
    let used = |jobs: [u64; 3]| jobs.map(|j| d.cpu_us(j));
    let before = used([a, b, job]);
    std::thread::sleep(Duration::from_secs(2));
    let after = used([a, b, job]);
    let [gangs, loose] = [
        after[0] + after[1] - before[0] - before[1],
        after[2] - before[2],
    ];
    // Its third is half of the gangs' two thirds.
    assert!(
        loose * 10 < gangs * 6,
        "in its grace, the cancelled job used {loose} µs of CPU, root's gangs {gangs} µs"
    );
    let record = d.wait_end(job, Duration::from_secs(30));
    assert_eq!(record["state"], "cancelled", "{record}");
}
