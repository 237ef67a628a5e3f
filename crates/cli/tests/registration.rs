//! The registration API (`register`, `proc_add`, `job_end`) through its clients: the C
//! library (clients/c) registering processes it forked, and an unmodified MPI program started
//! by plain `mpirun` with `libcosched-mpi.so` preloaded. Each pair of jobs must take turns,
//! never running at once (from the agent's boundary log), and end on their own.

mod common;

use common::*;
use cosched_agent::boundaries::read_log;
use cosched_proto::BoundaryRecord;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// [start, stop) of each time `job` ran.
fn ran(records: &[BoundaryRecord], job: u64) -> Vec<(i64, i64)> {
    let (mut out, mut running) = (Vec::new(), None);
    for record in records {
        for stop in record.stopped.iter().filter(|m| m.job == job) {
            if let Some(start) = running.take() {
                out.push((start, stop.at_us));
            }
        }
        if record.started.iter().any(|m| m.job == job) && running.is_none() {
            running = record
                .started
                .iter()
                .find(|m| m.job == job)
                .map(|m| m.at_us);
        }
    }
    out
}

/// The stretches a registered job was scheduled: [`ran`]'s, and a last one that `job_end` cut
/// short within its slot. That one has no stop in the log (the job was let loose, not
/// stopped); it lasted until the next boundary at the latest.
fn turns(records: &[BoundaryRecord], job: u64) -> Vec<(i64, i64)> {
    let mut out = ran(records, job);
    let last_start = records
        .iter()
        .rposition(|r| r.started.iter().any(|m| m.job == job));
    if let Some(at) = last_start {
        let stopped = records[at + 1..]
            .iter()
            .any(|r| r.stopped.iter().any(|m| m.job == job));
        let start = records[at].started.iter().find(|m| m.job == job);
        if let (false, Some(start), Some(next)) = (stopped, start, records.get(at + 1)) {
            out.push((start.at_us, next.woke_us));
        }
    }
    out
}

/// Both jobs ran several times, and never at the same moment.
fn assert_took_turns(d: &Daemon, a: u64, b: u64) {
    let records = read_log(&d.state_dir());
    let (of_a, of_b) = (ran(&records, a), ran(&records, b));
    assert!(
        of_a.len() >= 3 && of_b.len() >= 3,
        "each job ran in several slots: {of_a:?} {of_b:?}\n{}",
        d.log()
    );
    for &(from, to) in &of_a {
        assert!(
            of_b.iter().all(|&(f, t)| t <= from || f >= to),
            "job {a} ran {from}-{to} while job {b} ran: {of_b:?}"
        );
    }
}

/// The ids of the jobs named `name`, in order.
fn jobs_named(d: &Daemon, name: &str) -> Vec<u64> {
    let jobs = d.json(&["ps", "--all", "--json"]);
    jobs.as_array()
        .unwrap()
        .iter()
        .filter(|j| j["name"] == name)
        .map(|j| j["id"].as_u64().unwrap())
        .collect()
}

fn spawn(command: &mut Command) -> Child {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn c_clients_register_the_processes_they_fork_and_the_jobs_take_turns() {
    let d = Daemon::start(&["--quantum-ms", "50", "--allow-registration"]);
    let example = made("clients/c", "build/register");
    let run = |name: &str| {
        spawn(
            Command::new(&example)
                .args(["-n", "2", "-s", "2", "-N", name])
                .env("COSCHED_SOCKET", d.socket()),
        )
    };
    let (one, two) = (run("c-one"), run("c-two"));
    for child in [one, two] {
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}\n{}", d.log());
        // Two workers spinning 2 s each, given half of the time: about 1 s of CPU each.
        let cpu: Vec<f64> = said
            .lines()
            .filter_map(|l| l.split("cpu ").nth(1)?.split(' ').next()?.parse().ok())
            .collect();
        assert_eq!(cpu.len(), 2, "{said}");
        assert!(cpu.iter().all(|&c| c < 1.6), "workers took turns: {said}");
    }
    let (a, b) = (jobs_named(&d, "c-one")[0], jobs_named(&d, "c-two")[0]);
    for job in [a, b] {
        let end = d.wait_end(job, Duration::from_secs(20));
        assert_eq!(
            (end["state"].as_str(), end["exit"]["code"].as_i64()),
            (Some("completed"), Some(0)),
            "{end}"
        );
    }
    assert_took_turns(&d, a, b);
    assert!(!d.cgroup(a).exists(), "an ended job's cgroup is removed");
}

#[test]
fn an_unmodified_mpi_program_started_by_plain_mpirun_with_the_pmpi_library_is_gang_scheduled() {
    let d = Daemon::start(&["--quantum-ms", "50", "--allow-registration"]);
    let preload = made("clients/c", "build/libcosched-mpi.so");
    let pingpong = made("bench/workloads", "build/pingpong");
    let mpirun = |name: &str| {
        spawn(
            launch_2_ranks("openmpi", &preload, &pingpong)
                .args(["-n", "150000", "-w", "20"])
                .env("COSCHED_SOCKET", d.socket())
                .env("COSCHED_MPI_NAME", name),
        )
    };
    let (one, two) = (mpirun("mpi-one"), mpirun("mpi-two"));
    for child in [one, two] {
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains(r#""workload":"pingpong","ranks":2"#),
            "{out:?}\n{}",
            d.log()
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("cosched-mpi"), "{stderr}");
    }
    let (a, b) = (jobs_named(&d, "mpi-one"), jobs_named(&d, "mpi-two"));
    assert_eq!((a.len(), b.len()), (1, 1), "one job per mpirun");
    for job in [a[0], b[0]] {
        let end = d.wait_end(job, Duration::from_secs(20));
        assert_eq!(end["state"], "completed", "{end}");
        assert_eq!(end["procs"], 2, "as many processors as ranks: {end}");
    }
    assert_took_turns(&d, a[0], b[0]);
    // Under `cosched run` the library stays out of the way: one job, not two.
    let preload_var = format!("LD_PRELOAD={}", preload.display());
    let mut args = vec!["run", "-n", "2", "--", "env", &preload_var];
    args.extend(MPIRUN_TWO_RANKS);
    args.extend([pingpong.to_str().unwrap(), "-n", "1000"]);
    let inside = d.cosched(&args);
    assert!(inside.status.success(), "{inside:?}");
    assert!(!String::from_utf8_lossy(&inside.stderr).contains("cosched-mpi"));
}

/// A 2-rank run of `program` with `preload` (built for the same MPI), by that MPI's launcher.
fn launch_2_ranks(mpi: &str, preload: &Path, program: &Path) -> Command {
    let mut command;
    if mpi == "openmpi" {
        command = Command::new("mpirun.openmpi");
        command
            .args([
                "-np",
                "2",
                "--bind-to",
                "none",
                "--mca",
                "btl",
                "self,vader",
            ])
            .args(["-x", &format!("LD_PRELOAD={}", preload.display())])
            .args(["-x", "COSCHED_SOCKET", "-x", "COSCHED_MPI_NAME"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("PMIX_MCA_psec", "native");
    } else {
        // Hydra passes its environment on; -genv keeps the library out of Hydra itself.
        command = Command::new("mpiexec.mpich");
        command
            .args(["-n", "2", "-launcher", "fork", "-genv", "LD_PRELOAD"])
            .arg(preload);
    }
    command.arg(program);
    command
}

/// Programs that end their job milliseconds after it starts, every MPI entry point the
/// library wraps: each must exit 0 (no signal for finalizing), register one job (Fortran
/// too) that ends with exit 0, and run only in slots of its own beside a job that wants the
/// whole machine.
#[test]
fn short_mpi_programs_in_c_and_fortran_end_cleanly_and_take_turns_with_another_job() {
    let d = Daemon::start(&["--quantum-ms", "50", "--allow-registration"]);
    let sources = repo().join("crates/cli/tests/workloads");
    let mut programs = Vec::new();
    for (mpi, library) in [
        ("openmpi", "build/libcosched-mpi.so"),
        ("mpich", "build/libcosched-mpi-mpich.so"),
    ] {
        let preload = made("clients/c", library);
        for (source, compiler) in [
            ("hello.c", "mpicc"),
            ("hello.f90", "mpif90"),
            ("hello_f08.f90", "mpif90"),
        ] {
            let program = d.dir.join(format!("{}-{mpi}", source.replace('.', "-")));
            let out = Command::new(format!("{compiler}.{mpi}"))
                .arg("-o")
                .arg(&program)
                .arg(sources.join(source))
                .output()
                .unwrap();
            assert!(out.status.success(), "{compiler}.{mpi} {source}: {out:?}");
            programs.push((mpi, preload.clone(), program));
        }
    }
    // Both processors, in a slice of its own: each short program's job runs in another.
    let spin = spin_py();
    let other = d.submit(&["-n", "2", "--", "python3", &spin, "2", "1000", "0"]);
    const RUNS: usize = 50;
    let mut failures = std::collections::BTreeMap::<String, Vec<String>>::new();
    for run in 0..RUNS {
        let (mpi, preload, program) = &programs[run % programs.len()];
        let name = format!("short-{run}");
        let out = launch_2_ranks(mpi, preload, program)
            .env("COSCHED_SOCKET", d.socket())
            .env("COSCHED_MPI_NAME", &name)
            .output()
            .unwrap();
        let (said, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        if !out.status.success() || said.matches("hello from rank").count() != 2 {
            let tail: String = stderr.lines().rev().take(4).collect::<Vec<_>>().join(" | ");
            failures.entry(name.clone()).or_default().push(format!(
                "{} exited {}: {tail}",
                program.display(),
                out.status
            ));
        } else if stderr.contains("cosched-mpi") {
            failures
                .entry(name.clone())
                .or_default()
                .push(stderr.into());
        }
    }
    let mut ended = Vec::new();
    for run in 0..RUNS {
        let name = format!("short-{run}");
        let jobs = jobs_named(&d, &name);
        let [job] = jobs[..] else {
            failures
                .entry(name)
                .or_default()
                .push(format!("one job per program, not {jobs:?}"));
            continue;
        };
        let end = d.wait_end(job, Duration::from_secs(20));
        if (end["state"].as_str(), end["exit"]["code"].as_i64()) != (Some("completed"), Some(0)) {
            failures
                .entry(name.clone())
                .or_default()
                .push(format!("job {job} ended {end}"));
        }
        ended.push((name, job));
    }
    // The boundary that closes the last job's stretch may come after the job's end.
    let mut records = Vec::new();
    wait_until(Duration::from_secs(10), || {
        records = read_log(&d.state_dir());
        ended
            .iter()
            .all(|&(_, job)| !turns(&records, job).is_empty())
    });
    let others_turns = ran(&records, other);
    for (name, job) in ended {
        let turns = turns(&records, job);
        if turns.is_empty() {
            failures
                .entry(name.clone())
                .or_default()
                .push(format!("job {job} never ran in a slot of its own"));
        }
        for (from, to) in turns {
            if others_turns.iter().any(|&(f, t)| t > from && f < to) {
                failures
                    .entry(name.clone())
                    .or_default()
                    .push(format!("job {job} ran {from}-{to} with job {other}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {RUNS} short programs failed:\n{failures:#?}\n{}",
        failures.len(),
        d.log()
    );
    // The library built for the other MPI steps aside, saying so, rather than crash: hello.c
    // under Open MPI with MPICH's build, and back.
    for (ours, theirs) in [(0, 3), (3, 0)] {
        let (mpi, _, program) = &programs[ours];
        let out = launch_2_ranks(mpi, &programs[theirs].1, program)
            .env("COSCHED_SOCKET", d.socket())
            .env("COSCHED_MPI_NAME", "mismatched")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.contains("the program runs another MPI"),
            "{out:?}"
        );
    }
    assert_eq!(jobs_named(&d, "mismatched"), Vec::<u64>::new());
    d.cosched(&["cancel", &other.to_string()]);
}

#[test]
fn a_join_may_not_take_a_job_past_its_task_cap() {
    let d = Daemon::start(&[
        "--quantum-ms",
        "50",
        "--allow-registration",
        "--tasks-per-cpu",
        "4",
    ]);
    let socket = d.socket();
    let replies = ask_as(&socket, NOBODY, json!({"op": "register", "procs": 1}), 2);
    let job = replies[0]["job"].as_u64().unwrap();
    let add = |pid: u32| {
        ask_as(
            &socket,
            NOBODY,
            json!({"op": "proc_add", "job": job, "pid": pid}),
            1,
        )
        .remove(0)
    };
    let nobodys = |program: &str| {
        Command::new("/usr/bin/python3")
            .args(["-c", program])
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // One processor at four tasks, one of them the job's holder; a process of four threads is
    // refused, and nothing moved.
    let mut threads = nobodys(
        "import threading,time,sys\n\
         for _ in range(3): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n\
         print('up', flush=True); time.sleep(60)",
    );
    let mut up = String::new();
    BufReader::new(threads.stdout.as_mut().unwrap())
        .read_line(&mut up)
        .unwrap();
    let error = error_of(add(threads.id()));
    assert!(
        error.contains("it has 4 tasks") && error.contains("room for 3 more"),
        "{error}"
    );
    let procs = std::fs::read_to_string(d.cgroup(job).join("cgroup.procs")).unwrap();
    assert!(
        !procs.lines().any(|p| p == threads.id().to_string()),
        "{procs}"
    );
    // One of its threads, named by its thread id, is not a process.
    let thread = std::fs::read_dir(format!("/proc/{}/task", threads.id()))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|tid| *tid != threads.id().to_string())
        .unwrap();
    let error = error_of(add(thread.parse().unwrap()));
    assert!(error.contains("it is a thread, not a process"), "{error}");
    // A process of one task fits.
    let mut single = nobodys("import time; time.sleep(60)");
    assert_eq!(add(single.id())["ok"], true);
    for child in [&mut threads, &mut single] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

/// Sends one request as `uid`; returns the reply lines (`lines` of them).
fn ask_as(socket: &Path, uid: u32, request: Value, lines: usize) -> Vec<Value> {
    let send = "import socket,sys\n\
        s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n\
        s.sendall(sys.argv[2].encode()+b'\\n'); f=s.makefile()\n\
        for _ in range(int(sys.argv[3])): print(f.readline().strip())";
    let mut python = Command::new("/usr/bin/python3");
    python.args(["-c", send, socket.to_str().unwrap(), &request.to_string()]);
    python.arg(lines.to_string());
    if uid != 0 {
        python.uid(uid).gid(uid);
    }
    let out = python.output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("{out:?}")))
        .collect()
}

fn error_of(reply: Value) -> String {
    assert_eq!(reply["ok"], false, "{reply}");
    reply["error"].as_str().unwrap().to_string()
}

#[test]
fn registration_is_off_unless_the_daemon_allows_it() {
    let d = Daemon::start(&["--quantum-ms", "50"]);
    let reply = ask_as(
        &d.socket(),
        NOBODY,
        json!({"op": "register", "procs": 1}),
        1,
    )
    .remove(0);
    assert!(error_of(reply).contains("--allow-registration"));
}

#[test]
fn registration_takes_only_the_callers_own_processes_and_jobs() {
    let d = Daemon::start(&["--quantum-ms", "50", "--allow-registration"]);
    let socket = d.socket();
    let register =
        |uid: u32, procs: u32| ask_as(&socket, uid, json!({"op": "register", "procs": procs}), 2);
    let add = |uid: u32, job: u64, pid: u32| {
        ask_as(
            &socket,
            uid,
            json!({"op": "proc_add", "job": job, "pid": pid}),
            1,
        )
        .remove(0)
    };
    // nobody's registered job, running (the second reply: its processors).
    let replies = register(NOBODY, 1);
    let job = replies[0]["job"].as_u64().unwrap();
    assert_eq!(
        replies[1]["cpus"].as_str().map(str::is_empty),
        Some(false),
        "{replies:?}"
    );
    let mut roots = Command::new("sleep").arg("60").spawn().unwrap();
    let mut nobodys = Command::new("sleep")
        .arg("60")
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .unwrap();
    // Root's process into nobody's job: it would be frozen at nobody's will.
    let error = error_of(add(NOBODY, job, roots.id()));
    assert!(error.contains("is not uid 65534's"), "{error}");
    // nobody's own process joins; root may add to anyone's job; a second job may not take it.
    assert_eq!(add(NOBODY, job, nobodys.id())["ok"], true);
    let procs = std::fs::read_to_string(d.cgroup(job).join("cgroup.procs")).unwrap();
    assert!(
        procs.lines().any(|p| p == nobodys.id().to_string()),
        "{procs}"
    );
    let other = register(NOBODY, 1)[0]["job"].as_u64().unwrap();
    let error = error_of(add(NOBODY, other, nobodys.id()));
    assert!(
        error.contains(&format!("it belongs to job {job}")),
        "{error}"
    );
    // A process of nobody's that root confined to a cgroup of its own stays there: a process
    // joins only from its adder's cgroup.
    let jail = v2_root().join(format!("cosched-jail-{}", std::process::id()));
    std::fs::create_dir_all(&jail).unwrap();
    let mut jailed = Command::new("sleep")
        .arg("60")
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .unwrap();
    std::fs::write(jail.join("cgroup.procs"), jailed.id().to_string()).unwrap();
    let error = error_of(add(NOBODY, job, jailed.id()));
    assert!(error.contains("not in its adder's cgroups"), "{error}");
    jailed.kill().unwrap();
    jailed.wait().unwrap();
    std::fs::remove_dir(&jail).unwrap();
    // Another user's job, a job that is not registered, init, a process that is no more.
    let roots_job = register(0, 1)[0]["job"].as_u64().unwrap();
    let error = error_of(add(NOBODY, roots_job, nobodys.id()));
    assert!(
        error.contains("only its owner or root may add processes to it"),
        "{error}"
    );
    let plain = d.submit(&["-n", "1", "--", "sleep", "30"]);
    let error = error_of(add(0, plain, roots.id()));
    assert!(error.contains("was not registered"), "{error}");
    assert!(error_of(add(0, roots_job, 1)).contains("init and the agent itself"));
    assert!(error_of(add(0, roots_job, 999_999_999)).contains("No such process"));
    // Bad input: more processors than the machine has, a bad class, a waiting time of zero.
    let error = error_of(register(NOBODY, 1000).remove(0));
    assert!(error.contains("1000 processors requested"), "{error}");
    let bad = json!({"op": "register", "procs": 1, "class": "urgent"});
    assert!(error_of(ask_as(&socket, NOBODY, bad, 1).remove(0)).contains("urgent"));
    let bad = json!({"op": "register", "procs": 1, "join_within_s": 0});
    assert!(error_of(ask_as(&socket, NOBODY, bad, 1).remove(0)).contains("join_within_s 0"));
    // Ending: not another's job; nobody's ends once its process has gone, which is not killed.
    let end = |uid: u32, job: u64| ask_as(&socket, uid, json!({"op": "job_end", "job": job}), 1);
    assert!(error_of(end(NOBODY, roots_job).remove(0)).contains("only its owner or root"));
    assert_eq!(end(NOBODY, job)[0]["ok"], true);
    assert_eq!(
        d.job(job)["state"],
        "idle",
        "unscheduled until its process exits"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(nobodys.try_wait().unwrap(), None, "job_end kills nothing");
    nobodys.kill().unwrap();
    nobodys.wait().unwrap();
    let ended = d.wait_end(job, Duration::from_secs(10));
    assert_eq!(
        (ended["state"].as_str(), ended["exit"]["code"].as_i64()),
        (Some("completed"), Some(0))
    );
    roots.kill().unwrap();
    roots.wait().unwrap();
    // A registered job no process joins ends by itself (exit 3) after its waiting time.
    let lonely = json!({"op": "register", "procs": 1, "join_within_s": 1, "name": "lonely"});
    let lonely = ask_as(&socket, NOBODY, lonely, 2)[0]["job"]
        .as_u64()
        .unwrap();
    let ended = d.wait_end(lonely, Duration::from_secs(20));
    assert_eq!(ended["exit"]["code"], 3, "{ended}");
    d.cosched(&["cancel", &plain.to_string()]);
}

/// A registered job's holder runs as the user with the limits of the process that registered
/// it, not the root daemon's (as `run`'s jobs: `a_job_gets_its_submitters_resource_limits`).
#[test]
fn a_registered_jobs_holder_has_the_registrants_resource_limits() {
    let d = Daemon::start_with(
        &["--quantum-ms", "50", "--allow-registration"],
        &[],
        Some(4096),
    );
    // Registers with its open files lowered, says the job, and keeps the job while it waits
    // for a line on stdin.
    let register = "import os,resource,socket,sys\n\
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 100))\n\
        s=socket.socket(socket.AF_UNIX); s.connect(os.environ['COSCHED_SOCKET'])\n\
        s.sendall(b'{\"op\":\"register\",\"procs\":1}\\n'); f=s.makefile()\n\
        print(f.readline().strip(), flush=True); f.readline(); sys.stdin.readline()";
    let (mut client, mut lines) = nobody_python(&d, register);
    let first = lines.next().unwrap().unwrap();
    let reply: Value = serde_json::from_str(first.trim()).unwrap();
    let job = reply["job"].as_u64().unwrap_or_else(|| panic!("{reply}"));
    let procs = d.cgroup(job).join("cgroup.procs");
    let mut holder = None;
    wait_until(Duration::from_secs(20), || {
        holder = std::fs::read_to_string(&procs)
            .ok()
            .and_then(|pids| pids.lines().next().map(str::to_string));
        holder.is_some()
    });
    let holder = holder.expect("the registered job's holder runs");
    let limits = std::fs::read_to_string(format!("/proc/{holder}/limits")).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .map(|l| l.split_whitespace().skip(3).take(2).collect())
        .unwrap();
    drop(client.stdin.take());
    client.wait().unwrap();
    assert_eq!(open_files, ["64", "100"], "{limits}");
}
