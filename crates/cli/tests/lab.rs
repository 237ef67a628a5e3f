//! The cluster lab end to end (`scripts/cluster-lab`): nodes are network namespaces behind a
//! bridge, etcd and the controller run in the hub namespace, each node has its agent, CPU and
//! cgroups, and real Open MPI jobs cross the bridge: `mpirun` runs in the job on its first
//! node and starts its remote daemon through `cosched launch-remote`. Needs root, as CI runs.
//! Clients talk to the controller over its Unix socket only (no traffic from the root
//! namespace to a lab address, which would be routed off the machine).

mod common;

use common::*;
use cosched_agent::boundaries::{read_log, spreads};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

/// One lab at a time: both would share the two CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

struct Lab {
    _serial: std::sync::MutexGuard<'static, ()>,
    name: String,
    dir: PathBuf,
}

impl Lab {
    /// Two one-CPU nodes (a: CPU 0, b: CPU 1), 100 ms slots.
    fn up(tag: &str) -> Lab {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        cosched_os::require_root("the cluster lab's tests");
        let name = format!("{tag}{}", std::process::id() % 100_000);
        let lab = Lab {
            _serial: serial,
            dir: PathBuf::from(format!("/run/cosched-lab-{name}")),
            name,
        };
        let out = lab.script(&["up", "--nodes", "2", "--quantum-ms", "100"]);
        assert!(
            out.status.success(),
            "cluster-lab up: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        lab
    }

    fn script(&self, args: &[&str]) -> Output {
        Command::new(repo().join("scripts/cluster-lab"))
            .args(args)
            .args(["--name", &self.name])
            .env("COSCHED", COSCHED)
            .output()
            .unwrap()
    }

    fn cosched(&self, args: &[&str]) -> Output {
        Command::new(COSCHED)
            .args(args)
            .env("COSCHED_SOCKET", self.dir.join("cosched.sock"))
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.cosched(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Submits `sh -c SCRIPT` on two processors (one per node), detached; returns its id.
    /// Its processes write `cosched-JOBID.out` in `submitted/`, on every node (one file
    /// system here, as on a cluster with a shared one).
    fn submit(&self, script: &str) -> u64 {
        self.submit_with(&[], script)
    }

    /// [`Lab::submit`] with more `run` options.
    fn submit_with(&self, options: &[&str], script: &str) -> u64 {
        let here = self.dir.join("submitted");
        std::fs::create_dir_all(&here).unwrap();
        let out = Command::new(COSCHED)
            .args(["run", "-N", "2", "-n", "2", "--detach"])
            .args(options)
            .args(["--", "sh", "-c", script])
            .current_dir(here)
            .env("COSCHED_SOCKET", self.dir.join("cosched.sock"))
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("PMIX_MCA_psec", "native")
            .output()
            .unwrap();
        assert!(out.status.success(), "submit: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    fn job(&self, id: u64) -> Value {
        let all = self.json(&["ps", "--all", "--json"]);
        all.as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["id"] == id).cloned())
            .unwrap_or(Value::Null)
    }

    fn wait_state(&self, id: u64, state: &str, patience: Duration) -> Value {
        let mut job = Value::Null;
        let reached = wait_until(patience, || {
            job = self.job(id);
            job["state"] == state
        });
        assert!(
            reached,
            "job {id} is not {state} after {patience:?}: {job}\n{}",
            self.logs()
        );
        job
    }

    fn cgroup(&self, node: &str, job: u64) -> PathBuf {
        v2_root()
            .join(format!("cosched-{}-{node}", self.name))
            .join(format!("job-{job}"))
    }

    /// Waits until the job has a process in its cgroup on `node`.
    fn wait_processes(&self, node: &str, job: u64, patience: Duration) {
        let procs = self.cgroup(node, job).join("cgroup.procs");
        let listed = wait_until(patience, || {
            std::fs::read_to_string(&procs).is_ok_and(|p| !p.trim().is_empty())
        });
        assert!(
            listed,
            "job {job} has no process on node {node} after {patience:?}\n{}",
            self.logs()
        );
    }

    /// Two 2-rank ping-pong jobs of `rounds` round trips that exit 5 and 6, once both have a
    /// rank working on node b (the remote daemon starts through the agent).
    fn two_mpi_jobs(&self, rounds: u32) -> (u64, u64) {
        let program = pingpong();
        let first = self.submit(&mpi_job(&program, rounds, 5));
        let second = self.submit(&mpi_job(&program, rounds, 6));
        let ranks_ran = wait_until(Duration::from_secs(30), || {
            [first, second]
                .iter()
                .all(|job| cgroup_cpu_us(&self.cgroup("b", *job)) >= 20_000)
        });
        assert!(ranks_ran, "no rank ran on node b\n{}", self.logs());
        (first, second)
    }

    /// Over `slots` slots, on each node: never both jobs in a slot, each alone in `alone`.
    fn assert_gang_on_both_nodes(
        &self,
        (first, second): (u64, u64),
        slots: usize,
        alone: usize,
        what: &str,
    ) {
        let matrix = self.json(&["matrix", "--json"]);
        for node in ["a", "b"] {
            let seen = per_slot_cpu_of(
                &matrix,
                |job| cgroup_cpu_us(&self.cgroup(node, job)),
                first,
                second,
                slots,
            );
            assert_gang(&seen, alone, &format!("{what}, node {node}"));
        }
    }

    fn frozen(&self, node: &str, job: u64) -> bool {
        frozen_in(&format!("cosched-{}-{node}", self.name), job)
    }

    /// Sends `signal` to the lab's process `what` (etcd, agent-a, controller...).
    fn signal(&self, what: &str, signal: i32) {
        let pids = std::fs::read_to_string(self.dir.join("pids")).unwrap();
        let pid: i32 = pids
            .lines()
            .find_map(|l| l.strip_suffix(&format!(" {what}")))
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("no {what} in the lab's pids: {pids}"));
        // SAFETY: kill(2) on a process the lab started.
        unsafe { libc::kill(pid, signal) };
    }

    fn log(&self, what: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{what}.log"))).unwrap_or_default()
    }

    /// What job's processes wrote, on every node.
    fn output(&self, job: u64) -> String {
        std::fs::read_to_string(self.dir.join(format!("submitted/cosched-{job}.out")))
            .unwrap_or_default()
    }

    fn logs(&self) -> String {
        ["controller", "agent-a", "agent-b"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.join(format!("{f}.log")));
                format!("--- {f}.log\n{}", text.unwrap_or_default())
            })
            .collect()
    }

    /// Takes the lab down and checks that nothing of it is left: its processes (etcd, the
    /// controller, the agents, every job's), cgroups in every hierarchy, namespaces and files.
    fn down_leaving_nothing(&self) {
        let pids: Vec<i32> = std::fs::read_to_string(self.dir.join("pids"))
            .unwrap()
            .lines()
            .filter_map(|line| line.split_whitespace().next()?.parse().ok())
            .collect();
        let out = self.script(&["down"]);
        assert!(out.status.success(), "cluster-lab down: {out:?}");
        let prefix = format!("cosched-{}-", self.name);
        let mut left = Vec::new();
        for hierarchy in [
            "", "unified", "cpuset", "cpu", "cpuacct", "freezer", "pids", "memory",
        ] {
            let root = Path::new("/sys/fs/cgroup").join(hierarchy);
            for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    left.push(entry.path().display().to_string());
                }
            }
        }
        for netns in std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
        {
            if netns
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("cl-{}-", self.name))
            {
                left.push(netns.path().display().to_string());
            }
        }
        // SAFETY: signal 0 only asks whether the process exists.
        for pid in pids
            .into_iter()
            .filter(|&pid| unsafe { libc::kill(pid, 0) } == 0)
        {
            left.push(format!("process {pid}"));
        }
        if self.dir.exists() {
            left.push(self.dir.display().to_string());
        }
        assert!(left.is_empty(), "left behind by the lab: {left:?}");
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        let out = self.script(&["down"]);
        if !out.status.success() {
            eprintln!("cluster-lab down: {out:?}");
        }
    }
}

/// The MPI ping-pong built with Open MPI.
fn pingpong() -> PathBuf {
    workload("pingpong")
}

fn workload(name: &str) -> PathBuf {
    made("bench/workloads", &format!("build/{name}"))
}

/// A 2-rank ping-pong, one rank per node, then `exit CODE`.
fn mpi_job(program: &Path, rounds: u32, code: i32) -> String {
    format!(
        "mpirun -np 2 --map-by node --mca btl tcp,self {} -n {rounds} -w 20 && exit {code}",
        program.display()
    )
}

#[test]
fn two_mpi_jobs_across_two_nodes_take_turns_and_keep_their_exit_codes() {
    let lab = Lab::up("mpi");
    let (first, second) = lab.two_mpi_jobs(150_000);
    for job in [first, second] {
        lab.wait_state(job, "running", Duration::from_secs(20));
    }
    lab.assert_gang_on_both_nodes((first, second), 8, 2, "scheduled");
    let nodes = lab.json(&["nodes", "--json"]);
    assert_eq!(nodes.as_array().map(Vec::len), Some(2), "{nodes}");
    for (job, code) in [(first, 5), (second, 6)] {
        let ended = lab.wait_state(job, "failed", Duration::from_secs(60));
        assert_eq!(ended["exit"]["code"], code, "{ended}");
        let out = lab.output(job);
        assert!(
            out.contains(r#""workload":"pingpong","ranks":2"#),
            "job {job}'s output: {out}"
        );
    }
    // The remote daemons ended with their jobs, and nothing is left of the jobs on any node.
    let gone = wait_until(Duration::from_secs(10), || {
        ["a", "b"]
            .iter()
            .all(|node| !lab.cgroup(node, first).exists() && !lab.cgroup(node, second).exists())
    });
    assert!(gone, "job cgroups left behind");
    let controller = std::fs::read_to_string(lab.dir.join("controller.log")).unwrap();
    assert!(
        controller.contains(&format!("job {first}: node a adds a process on node b")),
        "{controller}"
    );
    // Both nodes logged the same boundaries (slot, job) on the true clock, close together:
    // the shared slot clock, with no per-slot message.
    let at_boundaries = |node: &str| -> Vec<_> {
        read_log(&lab.dir.join(format!("node-{node}")))
            .into_iter()
            .filter(|r| r.lateness_us.is_some())
            .collect()
    };
    let mut spreads = spreads(&at_boundaries("a"), &at_boundaries("b"), |r| &r.started);
    assert!(spreads.len() >= 10, "boundaries in common: {spreads:?}");
    spreads.sort_unstable();
    // Half a 100 ms slot apart would be no coscheduling at all; expected: well under 1 ms.
    assert!(spreads[spreads.len() / 2] < 25_000, "{spreads:?}");
}

#[test]
fn only_a_jobs_own_processes_may_add_processes_and_only_on_its_nodes() {
    let lab = Lab::up("door");
    let door = lab.dir.join("agent-a.sock");
    // A long job on both nodes, whose processes try things.
    let job = lab.submit("sleep 60");
    lab.wait_state(job, "running", Duration::from_secs(20));
    // "running" is the controller's word once it has ordered the start; node a's agent may not
    // have taken the job yet (CI once saw "job 1 has no processes on node a" here).
    lab.wait_processes("a", job, Duration::from_secs(20));
    let launch_remote = |uid: u32, env: &[(&str, &str)], args: &[&str]| {
        let mut command = Command::new(COSCHED);
        command.arg("launch-remote").args(args).env_clear();
        command.envs(env.iter().copied());
        if uid != 0 {
            command.uid(uid).gid(uid);
        }
        command.output().unwrap()
    };
    // Outside any job: no door named.
    let out = launch_remote(0, &[], &["b", "true"]);
    refused(&out, "COSCHED_AGENT is not set");
    // Root's process outside the job, naming it: not one of the job's processes.
    let env = [
        ("COSCHED_AGENT", door.to_str().unwrap()),
        ("COSCHED_JOB_ID", &job.to_string()),
    ];
    let out = launch_remote(0, &env, &["10.77.0.12", "true"]);
    assert_eq!(out.status.code(), Some(255), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not part of job"), "{err}");
    // Inside the job: an unknown host, then a command on node b that fails with its code.
    let inside = |script: &str| {
        let id = lab.submit(&format!(
            "try() {{ {COSCHED} launch-remote \"$@\"; echo \"rc=$?\"; }}; {script}"
        ));
        lab.wait_state(id, "completed", Duration::from_secs(30));
        (id, lab.output(id))
    };
    let (_, out) = inside("try nowhere true");
    assert!(
        out.contains("no node of this cluster is known as 'nowhere'") && out.contains("rc=255"),
        "{out}"
    );
    let (id, out) = inside("try 10.77.0.12 'echo remote on $COSCHED_NODE; exit 3'");
    assert!(out.contains("rc=3"), "{out}");
    let remote = lab.output(id);
    assert!(
        remote.contains("remote on b"),
        "job {id}'s output, with what ran on node b: {remote}"
    );
    // As nobody (the lab's directory and the door are open to all), naming root's job:
    // refused by the agent, before anything reaches the controller.
    let out = launch_remote(NOBODY, &env, &["10.77.0.12", "true"]);
    assert_eq!(out.status.code(), Some(255), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not part of job"), "{err}");
    let _ = lab.cosched(&["cancel", &job.to_string()]);
}

/// Asks etcd at `url` (from node a, as `uid`) with `body`, over TLS with the lab's CA and
/// `identity`'s certificate and key when given, else with no certificate and no check of
/// etcd's (what a job without the files could try); says `answered ...` or `not reached: ...`.
fn ask_etcd(lab: &Lab, uid: u32, url: &str, body: &str, identity: Option<&str>) -> String {
    const SCRIPT: &str = "import ssl, sys, urllib.request, urllib.error
url, body = sys.argv[1], sys.argv[2].encode()
if len(sys.argv) > 3:
    context = ssl.create_default_context(cafile=sys.argv[3])
    context.load_cert_chain(sys.argv[4], sys.argv[5])
else:
    context = ssl._create_unverified_context()
try:
    print('answered', urllib.request.urlopen(url, body, timeout=5, context=context).read().decode())
except urllib.error.HTTPError as error:
    print('answered', error.code, error.read().decode())
except Exception as error:
    print('not reached:', error)
";
    let mut command = Command::new("nsenter");
    command.arg(format!("--net=/run/netns/cl-{}-a", lab.name));
    let uid = uid.to_string();
    if uid != "0" {
        command.args([
            "setpriv",
            "--reuid",
            &uid,
            "--regid",
            &uid,
            "--clear-groups",
        ]);
    }
    // Debian's python3: a nobody cannot reach one under /root.
    command.args(["/usr/bin/python3", "-c", SCRIPT, url, body]);
    if let Some(who) = identity {
        let tls = lab.dir.join("tls");
        command
            .arg(tls.join("ca.pem"))
            .arg(tls.join(format!("{who}.pem")))
            .arg(tls.join(format!("{who}.key")));
    }
    let out = command.output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn on_a_lab_node_a_job_without_a_key_the_labs_ca_signed_cannot_reach_etcd() {
    let lab = Lab::up("tls");
    let leases = "https://10.77.0.1:2379/v3/lease/leases";
    // Root's, with the controller's certificate: etcd answers (lease calls need no password:
    // a job once kept any node's lease alive through them).
    let listed = ask_etcd(&lab, 0, leases, "{}", Some("controller"));
    assert!(listed.starts_with("answered {"), "{listed}");
    let answer: Value =
        serde_json::from_str(listed.trim_start_matches("answered ").trim()).unwrap();
    let lease = answer["leases"][0]["ID"]
        .as_str()
        .expect("a node's lease")
        .to_string();
    // The keys are root's alone, in a directory only root may enter.
    let tls = lab.dir.join("tls");
    let mode = std::fs::metadata(&tls).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let key = tls.join("agent-a.key").display().to_string();
    let read = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "cat",
            &key,
        ])
        .output()
        .unwrap();
    assert!(
        !read.status.success()
            && String::from_utf8_lossy(&read.stderr).contains("Permission denied"),
        "{read:?}"
    );
    // As nobody on the node: the first wall (nft) resets the connection.
    let nobodys = ask_etcd(&lab, NOBODY, leases, "{}", None);
    assert!(
        nobodys.contains("not reached") && nobodys.contains("refused"),
        "{nobodys}"
    );
    // Without it, etcd itself refuses the TLS handshake of a client with no certificate: no
    // lease listed, none renewed; and plain HTTP gets no further.
    let nft = Command::new("nsenter")
        .arg(format!("--net=/run/netns/cl-{}-a", lab.name))
        .args(["nft", "delete", "table", "inet", "cosched_lab"])
        .output()
        .unwrap();
    assert!(nft.status.success(), "{nft:?}");
    let keep_alive = format!("{{\"ID\": \"{lease}\"}}");
    for (path, body) in [("leases", "{}"), ("keepalive", keep_alive.as_str())] {
        let url = format!("https://10.77.0.1:2379/v3/lease/{path}");
        let out = ask_etcd(&lab, NOBODY, &url, body, None);
        // etcd's alert, or its close when the alert crossed the request.
        assert!(
            out.starts_with("not reached")
                && (out.contains("alert") || out.contains("EOF occurred in violation of protocol")),
            "{path}: {out}"
        );
    }
    let plain = ask_etcd(
        &lab,
        NOBODY,
        "http://10.77.0.1:2379/v3/lease/leases",
        "{}",
        None,
    );
    assert!(plain.starts_with("not reached"), "{plain}");
    // With a certificate but no password, auth still refuses writes.
    let put = r#"{"key": "L2Nvc2NoZWQveA==", "value": "eA=="}"#;
    let out = ask_etcd(
        &lab,
        0,
        "https://10.77.0.1:2379/v3/kv/put",
        put,
        Some("agent-a"),
    );
    assert!(out.starts_with("answered 403"), "{out}");
}

#[test]
fn on_lab_nodes_losing_etcd_or_an_agent_never_leaves_an_mpi_job_frozen() {
    let lab = Lab::up("cut");
    // Long enough (about a minute each under gang) to outlast every fault below.
    let (first, second) = lab.two_mpi_jobs(1_000_000);
    lab.assert_gang_on_both_nodes((first, second), 6, 1, "scheduled");
    let none_frozen = || {
        ["a", "b"]
            .iter()
            .all(|node| !lab.frozen(node, first) && !lab.frozen(node, second))
    };

    // etcd stopped (a silent cut): every agent lets both jobs loose by its deadline (5 s).
    lab.signal("etcd", libc::SIGSTOP);
    let loose = wait_until(Duration::from_millis(5_000 + 2_000), none_frozen);
    std::thread::sleep(Duration::from_millis(300));
    let stayed_loose = none_frozen();
    lab.signal("etcd", libc::SIGCONT);
    assert!(
        loose && stayed_loose,
        "a job stayed frozen with etcd stopped\n{}",
        lab.logs()
    );
    let resumed_after = now_us();
    // Back: both nodes switch again from their last generation (once seen ~0.8 s after the
    // agents said so, with the controller's leader lease lapsed meanwhile).
    let switching_again = wait_until(Duration::from_secs(10), || {
        ["a", "b"].iter().all(|node| {
            read_log(&lab.dir.join(format!("node-{node}")))
                .iter()
                .any(|r| r.woke_us > resumed_after && !r.stopped.is_empty())
        })
    });
    assert!(
        switching_again,
        "the agents never switched again\n{}",
        lab.logs()
    );
    assert!(
        ["agent-a", "agent-b"]
            .iter()
            .all(|agent| lab.log(agent).contains("is back")),
        "{}",
        lab.logs()
    );
    lab.assert_gang_on_both_nodes((first, second), 6, 1, "after etcd came back");

    // Node b's agent killed: its jobs' supervisors let them loose at once, and when its lease
    // expires (10 s) the controller marks both jobs lost, saying why.
    lab.signal("agent-b", libc::SIGKILL);
    let thawed = wait_until(Duration::from_secs(1), || {
        !lab.frozen("b", first) && !lab.frozen("b", second)
    });
    assert!(thawed, "a job stayed frozen on node b after its agent died");
    for job in [first, second] {
        let lost = lab.wait_state(job, "lost", Duration::from_secs(30));
        let note = lost["note"].as_str().unwrap_or_default();
        assert!(note.contains("node b left"), "{lost}");
    }
    // Their processes live on (mpirun on node a, a killed agent's jobs on node b): the lab's
    // teardown kills them and leaves nothing behind.
    lab.down_leaving_nothing();
}

#[test]
fn an_mpich_job_spans_two_nodes_through_hydra_with_no_launcher_option() {
    let program = workload("pingpong-mpich");
    let lab = Lab::up("mpich");
    // The agent set HYDRA_LAUNCHER and HYDRA_LAUNCHER_EXEC: only the hosts are given.
    let job = lab.submit(&format!(
        "mpiexec.hydra -hosts $COSCHED_HOSTS -n 2 {} -n 20000 -w 20 && exit 7",
        program.display()
    ));
    let ended = lab.wait_state(job, "failed", Duration::from_secs(60));
    assert_eq!(ended["exit"]["code"], 7, "{ended}\n{}", lab.output(job));
    let out = lab.output(job);
    assert!(
        out.contains(r#""workload":"pingpong","ranks":2"#),
        "job {job}'s output on node a: {out}"
    );
    let controller = lab.log("controller");
    assert!(
        controller.contains(&format!("job {job}: node a adds a process on node b")),
        "Hydra's proxy on node b came through the agent: {controller}"
    );
}

/// A job's CPU time counts its part on every node: a loop started on node b through the agent
/// (the job's own process on node a only waits for it) shows in the job's history once the
/// job's end has removed its cgroup on node b (`Event::Used`).
#[test]
fn a_jobs_history_adds_up_the_cpu_time_of_its_parts_on_every_node() {
    let lab = Lab::up("used");
    let busy = "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done";
    let job = lab.submit(&format!("{COSCHED} launch-remote 10.77.0.12 '{busy}'"));
    lab.wait_state(job, "completed", Duration::from_secs(60));
    let cpu_us = || {
        let history = lab.json(&["history", "--json", "-j", &job.to_string()]);
        history[0]["cpu_us"].as_u64().unwrap_or(0)
    };
    // Node a's figure comes with the end; node b's follows it.
    let counted = wait_until(Duration::from_secs(20), || cpu_us() >= 150_000);
    assert!(
        counted,
        "job {job}'s CPU time is {} µs: node b's loop is not in it\n{}",
        cpu_us(),
        lab.logs()
    );
}

#[test]
fn an_auto_mpi_job_across_two_nodes_is_measured_on_both_and_switched_alike() {
    let lab = Lab::up("auto");
    let program = pingpong();
    // Long enough to be cancelled; beside it an implicit one, never switched at boundaries,
    // so that both share each node's processor out of step while the auto job is measured.
    let auto = lab.submit_with(&["--mode", "auto"], &mpi_job(&program, 1_000_000_000, 0));
    let implicit = lab.submit_with(
        &["--mode", "implicit"],
        &mpi_job(&program, 1_000_000_000, 0),
    );
    let mut shown = Value::Null;
    let chosen = wait_until(Duration::from_secs(120), || {
        shown = lab.job(auto);
        !shown["runs_as"].is_null()
    });
    assert!(chosen, "{shown}\n{}", lab.logs());
    assert_eq!(shown["runs_as"], "gang", "{shown}\n{}", lab.logs());
    let controller = lab.log("controller");
    for node in ["a", "b"] {
        assert!(
            controller.contains(&format!("job {auto}: measured on node {node} over")),
            "{controller}"
        );
    }
    // From then on a gang on both nodes; the implicit job, computing too, runs in its own
    // slots and is held past its budget of the gang's (invariant 57), on each node.
    for node in ["a", "b"] {
        let frozen = wait_until(Duration::from_secs(10), || lab.frozen(node, auto));
        assert!(
            frozen,
            "job {auto} never frozen on node {node}\n{}",
            lab.logs()
        );
    }
    let mut seen = [(0, 0); 2];
    let began = std::time::Instant::now();
    while began.elapsed() < Duration::from_secs(3) {
        for (node, (held, ran)) in ["a", "b"].into_iter().zip(&mut seen) {
            match lab.frozen(node, implicit) {
                true => *held += 1,
                false => *ran += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        seen.iter().all(|&(held, ran)| held > 0 && ran > 0),
        "(held, ran) on nodes a and b: {seen:?}\n{}",
        lab.logs()
    );
    assert_eq!(lab.job(implicit)["mode"], "implicit");
    for job in [auto, implicit] {
        let out = lab.cosched(&["cancel", &job.to_string()]);
        assert!(out.status.success(), "{out:?}");
        lab.wait_state(job, "cancelled", Duration::from_secs(60));
    }
}
