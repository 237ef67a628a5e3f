//! A cosched daemon of the benchmark's own (state directory, socket and cgroup parent in a
//! temporary place), driven through the `cosched` command as a user would.

use anyhow::{bail, Context, Result};
use cosched_proto::api::{JobView, StatsView};
use cosched_proto::{signal_name, ExitInfo};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `cosched` binary: beside this one (cargo builds both into one directory).
pub fn cosched_binary() -> Result<PathBuf> {
    let me = std::env::current_exe().context("where is this binary")?;
    let path = me.with_file_name("cosched");
    if !path.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p cosched-cli`",
            path.display()
        );
    }
    Ok(path)
}

/// Runs a `cosched ARGS` command; an error naming it, with its stderr, unless it succeeds.
pub fn succeeded(command: &mut Command, args: &[&str]) -> Result<Output> {
    let out = command.output()?;
    if !out.status.success() {
        bail!(
            "cosched {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

pub struct Daemon {
    cosched: PathBuf,
    dir: PathBuf,
    /// The daemon's cgroup parent: it keeps it by design; the benchmark removes it.
    parent: String,
    child: Child,
}

/// How a benchmark's daemon runs.
#[derive(Clone, Debug)]
pub struct DaemonSpec {
    pub mode: String,
    pub quantum_ms: u64,
    pub freezer: Option<String>,
    /// More `cosched daemon` options (a cluster's `--etcd ...`).
    pub extra: Vec<String>,
}

impl Daemon {
    pub fn start(spec: &DaemonSpec) -> Result<Daemon> {
        let cosched = cosched_binary()?;
        let dir = PathBuf::from(format!(
            "/tmp/cosched-bench-{}-{}",
            std::process::id(),
            spec.mode
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // Whatever the umask: the daemon refuses a state directory under one others may write.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let log = std::fs::File::create(dir.join("daemon.log"))?;
        let parent = group_parent();
        let mut command = Command::new(&cosched);
        command
            .arg("daemon")
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--socket")
            .arg(dir.join("cosched.sock"))
            .args(["--cgroup-parent", &parent])
            .args(["--mode", &spec.mode])
            .args(["--quantum-ms", &spec.quantum_ms.to_string()])
            .args(["--on-stop", "cancel"])
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(freezer) = &spec.freezer {
            command.args(["--freezer", freezer]);
        }
        command.args(&spec.extra);
        let child = command.spawn().context("starting cosched daemon")?;
        let mut daemon = Daemon {
            cosched,
            dir,
            parent,
            child,
        };
        let start = Instant::now();
        while UnixStream::connect(daemon.socket()).is_err() {
            if let Some(status) = daemon.child.try_wait()? {
                let log = daemon.log();
                // Dropping a daemon that has exited leaves its directory (its log tells why).
                let _ = std::fs::remove_dir_all(&daemon.dir);
                bail!("the daemon exited ({status}): {log}");
            }
            if start.elapsed() > Duration::from_secs(20) {
                bail!(
                    "the daemon did not open its socket in 20 s: {}",
                    daemon.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(daemon)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("cosched.sock")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// A `cosched` command aimed at this daemon.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.cosched);
        command.args(args).env("COSCHED_SOCKET", self.socket());
        command
    }

    /// Runs `cosched ARGS` with more environment variables; an error unless it succeeds.
    fn output(&self, args: &[&str], env: &[(String, String)]) -> Result<Output> {
        succeeded(self.command(args).envs(env.iter().cloned()), args)
    }

    /// Submits a detached job (output to `output`) and returns its id.
    pub fn submit(&self, procs: u32, output: &Path, argv: &[String]) -> Result<u64> {
        self.submit_with(procs, output, argv, &[], &[])
    }

    /// Submits a detached job with more `cosched run` options and environment variables.
    pub fn submit_with(
        &self,
        procs: u32,
        output: &Path,
        argv: &[String],
        options: &[&str],
        env: &[(String, String)],
    ) -> Result<u64> {
        let procs = procs.to_string();
        let output = output.to_string_lossy();
        // Jobs of a run share a file: each adds to it.
        let mut args = vec!["run", "-n", &procs, "--detach", "--open-mode", "append"];
        args.extend(["--output", &output]);
        args.extend_from_slice(options);
        args.push("--");
        args.extend(argv.iter().map(String::as_str));
        let out = self.output(&args, env)?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .context("cosched run --detach printed no job id")
    }

    /// CPU time (µs) used so far by job `id`'s processes, from its cgroup v2 `cpu.stat`.
    pub fn cpu_usage_us(&self, id: u64) -> Result<u64> {
        let layout = cosched_cgroups::Layout::detect()?;
        let root = layout
            .v2
            .context("no cgroup v2 tree to read a job's CPU time from")?;
        let group = root
            .join(&self.parent)
            .join(cosched_cgroups::JobGroup::of(id));
        Ok(cosched_cgroups::cpu_usage_of(&group)?.as_micros() as u64)
    }

    pub fn jobs(&self) -> Result<Vec<JobView>> {
        let out = self.output(&["ps", "--all", "--json"], &[])?;
        serde_json::from_slice(&out.stdout).context("cosched ps --json")
    }

    pub fn stats(&self) -> Result<StatsView> {
        let out = self.output(&["stats", "--json"], &[])?;
        serde_json::from_slice(&out.stdout).context("cosched stats --json")
    }

    /// Waits until every job in `ids` ended; returns their records. One `cosched wait` blocks
    /// on the daemon: asking `ps` every few milliseconds instead forked a client 50 times a
    /// second beside the jobs measured, and slowed a gang of two ping-pongs by 5-30 %.
    pub fn wait_all(&self, ids: &[u64], patience: Duration) -> Result<Vec<JobView>> {
        let start = Instant::now();
        let mut waiter = self
            .command(&["wait"])
            .args(ids.iter().map(u64::to_string))
            .stdout(Stdio::null())
            .spawn()
            .context("starting cosched wait")?;
        while waiter.try_wait()?.is_none() {
            if start.elapsed() > patience {
                let _ = waiter.kill();
                let _ = waiter.wait();
                bail!("jobs {ids:?} still running after {patience:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let jobs: Vec<JobView> = self
            .jobs()?
            .into_iter()
            .filter(|j| ids.contains(&j.id))
            .collect();
        for job in &jobs {
            let ended = match job.exit {
                Some(exit) if exit.success() => continue,
                Some(ExitInfo {
                    code: Some(code), ..
                }) => format!("exited with code {code}"),
                Some(ExitInfo {
                    signal: Some(signal),
                    ..
                }) => format!("was killed by {}", signal_name(signal)),
                _ => "ended with no exit status".to_string(),
            };
            let note = job
                .note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            bail!("job {} ({}) {ended}{note}", job.id, job.name);
        }
        if jobs.len() != ids.len() {
            bail!("the daemon lost some of jobs {ids:?}");
        }
        Ok(jobs)
    }

    /// Stops the daemon (its jobs are cancelled) and removes its directory.
    pub fn stop(mut self) -> Result<()> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<()> {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        let mut late = false;
        while self.child.try_wait()?.is_none() {
            if start.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                late = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        remove_groups(&self.parent);
        if late {
            bail!("the daemon did not stop within 30 s of SIGTERM (killed)");
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.shut_down();
        }
    }
}

/// The cgroup parent of this process's daemons, in each hierarchy.
pub fn group_parent() -> String {
    format!("cosched-bench-{}", std::process::id())
}

/// Removes the job groups under `parent` and `parent` itself, in each hierarchy. The jobs
/// were cancelled on stop, but a job of a thousand processes is still dying when the daemon
/// has gone, and its group with it: the next daemon of this benchmark would find them. Waits
/// for every job group to empty (30 s at most).
pub fn remove_groups(parent: &str) {
    let Ok(layout) = cosched_cgroups::Layout::detect() else {
        return;
    };
    let until = Instant::now() + Duration::from_secs(30);
    for (root, _) in layout.hierarchies() {
        let parent = root.join(parent);
        let groups = std::fs::read_dir(&parent)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.is_dir());
        for group in groups {
            while std::fs::remove_dir(&group).is_err() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = std::fs::remove_dir(&parent);
    }
}
