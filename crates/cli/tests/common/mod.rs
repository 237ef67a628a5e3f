//! The harness the daemon tests share: a daemon of its own per test (state directory, socket,
//! cgroup parent), clients as root or as nobody, and what a test reads of jobs and cgroups.
#![allow(dead_code)] // each test file uses its own part

use serde_json::Value;
use std::io::{BufRead, BufReader, Lines, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const COSCHED: &str = env!("CARGO_BIN_EXE_cosched");
pub const NOBODY: u32 = 65534;
/// The descriptor every test daemon inherits (see `Daemon::launch`).
pub const STRAY_FD: i32 = 9;

pub fn spin_py() -> String {
    format!("{}/tests/workloads/spin.py", env!("CARGO_MANIFEST_DIR"))
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `make`s `target` in the repository's directory `dir`; returns the file's path.
pub fn made(dir: &str, target: &str) -> PathBuf {
    let dir = repo().join(dir);
    let status = Command::new("make")
        .args(["-s", "-C"])
        .arg(&dir)
        .arg(target)
        .status()
        .unwrap();
    assert!(status.success(), "building {target} in {}", dir.display());
    dir.join(target).canonicalize().unwrap()
}

pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// A daemon of its own: state directory, socket and cgroup parent named for this test.
pub struct Daemon {
    /// One daemon at a time: two would each run their jobs on the same two CPUs.
    _serial: std::sync::MutexGuard<'static, ()>,
    pub dir: PathBuf,
    pub parent: String,
    pub args: Vec<String>,
    /// Set in the daemon's environment (COSCHED_FAULT...), until cleared.
    pub env: Vec<(String, String)>,
    /// The daemon's open-file limit (soft and hard), when set.
    pub nofile: Option<u64>,
    /// Its stderr at the next launch instead of `daemon.log`.
    pub stderr: Option<std::os::fd::OwnedFd>,
    pub child: Option<Child>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Daemon {
    pub fn start(args: &[&str]) -> Daemon {
        Daemon::start_with(args, &[], None)
    }

    pub fn start_with(args: &[&str], env: &[(&str, &str)], nofile: Option<u64>) -> Daemon {
        Daemon::start_writing_to(args, env, nofile, None)
    }

    /// `start_with`, its stderr `stderr` (`daemon.log` when `None`).
    pub fn start_writing_to(
        args: &[&str],
        env: &[(&str, &str)],
        nofile: Option<u64>,
        stderr: Option<std::os::fd::OwnedFd>,
    ) -> Daemon {
        cosched_os::require_root("the daemon's tests");
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir = PathBuf::from(format!("/tmp/cosched-it-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Others must reach the socket (the tests act as nobody too).
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut daemon = Daemon {
            _serial: SERIAL.lock().unwrap_or_else(|p| p.into_inner()),
            parent: format!("cosched-it-{}-{n}", std::process::id()),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            nofile,
            stderr,
            dir,
            child: None,
        };
        daemon.launch();
        daemon
    }

    /// Where the daemon keeps its state: `--state-dir` if the test gave one.
    pub fn state_dir(&self) -> PathBuf {
        self.args
            .iter()
            .position(|a| a == "--state-dir")
            .and_then(|i| self.args.get(i + 1))
            .map_or_else(|| self.dir.join("state"), PathBuf::from)
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("cosched.sock")
    }

    pub fn launch(&mut self) {
        // The socket accepts connections before the daemon serves them (it is bound before
        // the jobs' cgroups are opened): a test that reads those at once waits for the ready
        // line, which names the socket, when the log is ours to read. Not a cluster's
        // controller: it is ready once its nodes join, which the test starts after this.
        let ready_line = format!("; socket {};", self.socket().display());
        let readies = |log: &str| log.matches(&ready_line).count();
        let controller = self.args.iter().any(|a| a == "--cluster");
        let ready_before = (self.stderr.is_none() && !controller).then(|| readies(&self.log()));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.log"))
            .unwrap();
        let mut command = Command::new(COSCHED);
        command.arg("daemon");
        if !self.args.iter().any(|a| a == "--state-dir") {
            command.arg("--state-dir").arg(self.state_dir());
        }
        command
            .arg("--socket")
            .arg(self.socket())
            .arg("--cgroup-parent")
            .arg(&self.parent)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stderr(self.stderr.take().map_or_else(|| log.into(), Stdio::from));
        let nofile = self.nofile;
        // Every test daemon inherits a stray descriptor (9), as one started from a careless
        // shell would: no job may see it.
        unsafe {
            command.pre_exec(move || {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                if null < 0 || libc::dup2(null, STRAY_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(n) = nofile {
                    let limit = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        self.child = Some(child);
        let start = Instant::now();
        let serving = |daemon: &Daemon| {
            UnixStream::connect(daemon.socket()).is_ok()
                && ready_before.is_none_or(|before| readies(&daemon.log()) > before)
        };
        while !serving(self) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the daemon did not become ready: {}",
                self.log()
            );
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("the daemon exited ({status}): {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    pub fn cosched(&self, args: &[&str]) -> Output {
        Command::new(COSCHED)
            .args(args)
            .env("COSCHED_SOCKET", self.socket())
            .output()
            .unwrap()
    }

    pub fn cosched_as(&self, uid: u32, args: &[&str]) -> Output {
        Command::new(COSCHED)
            .args(args)
            .env("COSCHED_SOCKET", self.socket())
            .current_dir("/")
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap()
    }

    /// The chart `cosched gantt --since SECONDS` draws, drawn as `uid` (anyone may).
    pub fn gantt_as(&self, uid: u32, since: &str) -> String {
        let chart =
            std::env::temp_dir().join(format!("cosched-gantt-{}-{uid}.svg", std::process::id()));
        let out = chart.to_str().unwrap();
        let drawn = self.cosched_as(uid, &["gantt", "--since", since, "--out", out]);
        assert!(
            drawn.status.success(),
            "{}",
            String::from_utf8_lossy(&drawn.stderr)
        );
        let svg = std::fs::read_to_string(&chart).unwrap();
        std::fs::remove_file(&chart).unwrap();
        svg
    }

    /// Submits a detached job and returns its id. (Its output goes to a file: a job that
    /// kept this test's pipe would hold `output()` until it ends.)
    pub fn submit(&self, args: &[&str]) -> u64 {
        self.submit_to(&self.dir.join("jobs.out"), args)
    }

    /// Submits a detached job whose output is appended to `output`; returns its id.
    pub fn submit_to(&self, output: &std::path::Path, args: &[&str]) -> u64 {
        let output = output.to_str().unwrap();
        let mut all = vec![
            "run",
            "--detach",
            "--open-mode",
            "append",
            "--output",
            output,
        ];
        all.extend_from_slice(args);
        job_id(self.cosched(&all))
    }

    /// Submits, as `uid`, a detached job whose output is discarded; returns its id.
    pub fn submit_as(&self, uid: u32, args: &[&str]) -> u64 {
        let mut all = vec!["run", "--detach", "--output", "/dev/null"];
        all.extend_from_slice(args);
        job_id(self.cosched_as(uid, &all))
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.cosched(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn job(&self, id: u64) -> Value {
        let jobs = self.json(&["ps", "--all", "--json"]);
        jobs.as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no job {id} in {jobs}"))
    }

    /// Waits (at most `patience`) until the job has ended; returns its record.
    pub fn wait_end(&self, id: u64, patience: Duration) -> Value {
        let mut job = Value::Null;
        let ended = wait_until(patience, || {
            job = self.job(id);
            ["completed", "cancelled", "timeout", "failed", "lost"]
                .contains(&job["state"].as_str().unwrap())
        });
        assert!(
            ended,
            "job {id} still {job} after {patience:?}; daemon log: {}",
            self.log()
        );
        job
    }

    pub fn cgroup(&self, job: u64) -> PathBuf {
        v2_root().join(&self.parent).join(format!("job-{job}"))
    }

    pub fn frozen(&self, job: u64) -> bool {
        frozen_in(&self.parent, job)
    }

    pub fn cpu_us(&self, job: u64) -> i64 {
        cgroup_cpu_us(&self.cgroup(job))
    }

    pub fn signal(&mut self, signal: i32) {
        if let Some(child) = &self.child {
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    pub fn wait_exit(&mut self) {
        if let Some(mut child) = self.child.take() {
            let start = Instant::now();
            while child.try_wait().unwrap().is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "daemon did not stop"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
        self.wait_exit();
        // Whatever a test left: kill its jobs, remove its cgroups, and end the supervisors,
        // which (by design) keep a job's exit status until a daemon takes it: none will.
        remove_cgroups(&self.parent);
        for pid in listening_under(&self.state_dir().join("run")) {
            // SAFETY: kill(2) on a supervisor of this test's daemon.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The processes holding a Unix socket bound under `dir` (a test daemon's supervisors listen
/// in its state directory's `run`): /proc/net/unix names each bound socket's inode and path.
pub fn listening_under(dir: &Path) -> Vec<i32> {
    let prefix = dir.to_string_lossy().to_string();
    let inodes: Vec<String> = std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let path = fields.get(7)?;
            path.starts_with(&prefix)
                .then(|| format!("socket:[{}]", fields[6]))
        })
        .collect();
    let own = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .any(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
        })
        .collect()
}

/// Runs `command` to its end and returns what `output()` would, but kills it and fails the
/// test past `patience`: a command expected to refuse and exit (a second daemon, say) must not
/// hang the suite if it runs on instead.
pub fn output_within(command: &mut Command, patience: Duration) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let (ended, end) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let output = child.wait_with_output();
        let _ = ended.send(());
        output
    });
    if end.recv_timeout(patience).is_err() {
        // SAFETY: kill(2) has no memory-safety preconditions; the child is not reaped yet.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let output = waiter.join().unwrap().unwrap();
        panic!("{command:?} still ran after {patience:?} (killed): {output:?}");
    }
    waiter.join().unwrap().unwrap()
}

/// Looks every 50 ms, for at most `patience`, until `done`; whether it came true in time.
/// Callers assert on it with their own message, built only when it fails.
pub fn wait_until(patience: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= patience {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// For every slot of `slots` after now: CPU time each job got in the middle of the slot
/// (15 ms clear of both boundaries: cgroup CPU time is brought up to date at scheduler ticks).
pub fn per_slot_cpu(d: &Daemon, a: u64, b: u64, slots: usize) -> Vec<(i64, i64)> {
    per_slot_cpu_of(
        &d.json(&["matrix", "--json"]),
        |job| d.cpu_us(job),
        a,
        b,
        slots,
    )
}

/// `per_slot_cpu` for the slot clock of `matrix` (`cosched matrix --json`), with each job's
/// CPU time (µs) as `cpu_us` reads it.
pub fn per_slot_cpu_of(
    m: &Value,
    cpu_us: impl Fn(u64) -> i64,
    a: u64,
    b: u64,
    slots: usize,
) -> Vec<(i64, i64)> {
    let (epoch, quantum) = (
        m["epoch_us"].as_i64().unwrap(),
        m["quantum_us"].as_i64().unwrap(),
    );
    let mut slot = (now_us() - epoch) / quantum + 1;
    let mut out = Vec::new();
    for _ in 0..slots {
        let start = epoch + slot * quantum;
        let sleep_to = |t: i64| {
            let wait = t - now_us();
            if wait > 0 {
                std::thread::sleep(Duration::from_micros(wait as u64));
            }
        };
        sleep_to(start + 15_000);
        let (a0, b0) = (cpu_us(a), cpu_us(b));
        sleep_to(start + quantum - 15_000);
        let (a1, b1) = (cpu_us(a), cpu_us(b));
        if now_us() < start + quantum {
            out.push((a1 - a0, b1 - b0));
        }
        slot = (now_us() - epoch) / quantum + 1;
    }
    out
}

/// Gang scheduling as `per_slot_cpu` saw it: never both jobs in one slot, and each alone in
/// `alone` slots at least. Ran means over 3 ms of the slot's middle: how much more is the
/// machine's to say, not the scheduler's (the lab's MPI jobs, whose ranks yield as they
/// wait, got 9-18 ms of 70 in their slots while a build ran beside the tests).
pub fn assert_gang(slots: &[(i64, i64)], alone: usize, what: &str) {
    const RAN: i64 = 3_000;
    let both = slots.iter().filter(|(x, y)| *x > RAN && *y > RAN).count();
    let a_only = slots.iter().filter(|(x, y)| *x > RAN && *y == 0).count();
    let b_only = slots.iter().filter(|(x, y)| *y > RAN && *x == 0).count();
    assert_eq!(both, 0, "{what}: both jobs ran within one slot: {slots:?}");
    assert!(
        a_only >= alone && b_only >= alone,
        "{what}: each job runs alone in its slots: {slots:?}"
    );
}

/// The cgroups named `name` (a parent of jobs) in every hierarchy of this machine.
pub fn cgroups_named(name: &str) -> Vec<PathBuf> {
    let layout = cosched_cgroups::Layout::detect().unwrap();
    layout
        .hierarchies()
        .map(|(root, _)| root.join(name))
        .filter(|group| group.exists())
        .collect()
}

/// Kills the jobs under cgroup `parent` (every hierarchy) and removes their cgroups and it.
pub fn remove_cgroups(name: &str) {
    for parent in cgroups_named(name) {
        if let Ok(entries) = std::fs::read_dir(&parent) {
            // Job cgroups only: retrying the parent's files would wait a second each.
            for entry in entries.flatten().filter(|e| e.path().is_dir()) {
                let _ = std::fs::write(entry.path().join("cgroup.freeze"), "0");
                let _ = std::fs::write(entry.path().join("freezer.state"), "THAWED");
                let _ = std::fs::write(entry.path().join("cgroup.kill"), "1");
                for _ in 0..100 {
                    if std::fs::remove_dir(entry.path()).is_ok() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        let _ = std::fs::remove_dir(&parent);
    }
}

/// CPU time (µs) of the processes in a cgroup v2 directory (0 when it is gone).
pub fn cgroup_cpu_us(cgroup: &Path) -> i64 {
    cosched_cgroups::cpu_usage_of(cgroup).map_or(0, |used| used.as_micros() as i64)
}

/// What follows `env` to run two MPI ranks as root, unbound (the daemon pins the job): Open
/// MPI's consent to root and PMIx's native security, then mpirun; the program comes next.
pub const MPIRUN_TWO_RANKS: [&str; 8] = [
    "OMPI_ALLOW_RUN_AS_ROOT=1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
    "PMIX_MCA_psec=native",
    "mpirun",
    "-np",
    "2",
    "--bind-to",
    "none",
];

/// The file holding a job's memory limit, in whichever tree has the memory controller.
pub fn memory_limit_file(
    layout: &cosched_cgroups::Layout,
    parent: &str,
    job: u64,
) -> Option<PathBuf> {
    if layout.v2_controllers().iter().any(|c| c == "memory") {
        let root = layout.v2.as_ref()?;
        return Some(root.join(parent).join(format!("job-{job}/memory.max")));
    }
    let root = layout.v1_memory.as_ref()?;
    Some(
        root.join(parent)
            .join(format!("job-{job}/memory.limit_in_bytes")),
    )
}

/// Whether job `job` under cgroup `parent` is frozen (or freezing) by either freezer: the
/// daemon uses v1 where it is mounted, v2 elsewhere.
pub fn frozen_in(parent: &str, job: u64) -> bool {
    let layout = cosched_cgroups::Layout::detect().unwrap();
    let group = |root: &std::path::Path| root.join(parent).join(format!("job-{job}"));
    let v2 = layout.v2.as_deref().is_some_and(|root| {
        std::fs::read_to_string(group(root).join("cgroup.events"))
            .is_ok_and(|t| t.lines().any(|l| l == "frozen 1"))
    });
    let v1 = layout.v1_freezer.as_deref().is_some_and(|root| {
        std::fs::read_to_string(group(root).join("freezer.state"))
            .is_ok_and(|state| matches!(state.trim(), "FROZEN" | "FREEZING"))
    });
    v2 || v1
}

pub fn v2_root() -> PathBuf {
    let layout = cosched_cgroups::Layout::detect().unwrap();
    layout
        .v2
        .expect("these tests read job CPU time from the cgroup v2 tree")
}

/// The id a successful `run --detach` printed.
pub fn job_id(out: Output) -> u64 {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Sends raw bytes, returns the reply line.
pub fn raw(socket: &Path, bytes: &[u8]) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    let _ = stream.write_all(bytes);
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    line
}

pub fn refused(out: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in {stderr:?}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr:?}");
}

/// GETs `path` from the daemon's HTTP side; returns the status line and the body.
pub fn http_get(port: u16, path: &str) -> (String, String) {
    let (head, body) = http(port, &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n"));
    (head.lines().next().unwrap_or("").to_string(), body)
}

/// Sends `head` (request line and headers, each ending in CRLF) on a new connection to the
/// daemon's HTTP side; the answer's head (status line and headers) and body.
pub fn http(port: u16, head: &str) -> (String, String) {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "{head}\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_string(), body.to_string())
}

/// The value of the sample `name` (with its labels, as printed) in a scrape.
pub fn sample(scrape: &str, name: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// `cosched agent` for node `a` (CPU 0) with `etcd`'s flags and no cluster to join: what it
/// refuses, or how it fails. Its cgroups and files go under names of its own, removed after;
/// asserts that it left no cgroup behind.
pub fn lone_agent(tag: &str, etcd: &[String]) -> Output {
    let tag = format!("{tag}-{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("cosched-it-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let parent = format!("cosched-test-{tag}");
    let out = Command::new(COSCHED)
        .args(["agent", "--node", "a", "--cpus", "0"])
        .args(etcd)
        .args(["--cgroup-parent", &parent, "--state-dir"])
        .arg(dir.join("state"))
        .arg("--door")
        .arg(dir.join("door.sock"))
        .output()
        .unwrap();
    let left = cgroups_named(&parent);
    remove_cgroups(&parent);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
    out
}

/// Runs `script` as nobody with the Python client, against `d`; its lines as they come. Its
/// standard input stays open until the child is dropped or waited for.
pub fn nobody_python(d: &Daemon, script: &str) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut nobody = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .env("PYTHONPATH", repo().join("clients/python"))
        .env("COSCHED_SOCKET", d.socket())
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(nobody.stdout.take().unwrap()).lines();
    (nobody, lines)
}
