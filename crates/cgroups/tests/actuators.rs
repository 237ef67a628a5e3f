//! One suite, run against every actuator: the cgroup v2 freezer, the v1 freezer, signals (each
//! on real processes in real cgroups; needs root) and the fake. "Frozen" is checked by what the
//! processes do, not by what the actuator says: their CPU time must not move.

use cosched_cgroups::procfs;
use cosched_cgroups::*;
use cosched_core::Partition;
use std::io::Write;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A shell that spins, and once it reads a line from stdin forks a second spinning process:
/// so a child made after `add` can be seen to land in the job too.
fn spinner() -> Child {
    cosched_cgroups::die_with_parent(&mut Command::new("sh"))
        .args(["-c", "read go; (while :; do :; done) & while :; do :; done"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh runs")
}

/// Waits at most 5 s for the child to end (a test must not hang on a process that survived).
fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    wait_bounded_for(child, Duration::from_secs(5))
}

fn wait_bounded_for(child: &mut Child, most: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    while start.elapsed() < most {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    panic!("pid {} outlived its job's kill", child.id());
}

fn cpu_ticks(pids: &[Pid]) -> u64 {
    pids.iter()
        .filter_map(|&p| procfs::stat(p).ok())
        .map(|s| s.cpu_ticks)
        .sum()
}

/// Whether the processes use CPU: their CPU time moves within `patience`. A stopped group never
/// moves; a running one moves within a tick or two, unless the host stalls this VM, which is
/// why a thawed group is given seconds and a frozen one is watched for 150 ms.
fn burns_within(pids: &[Pid], patience: Duration) -> bool {
    let before = cpu_ticks(pids);
    let start = std::time::Instant::now();
    while start.elapsed() < patience {
        std::thread::sleep(Duration::from_millis(20));
        if cpu_ticks(pids) > before {
            return true;
        }
    }
    false
}

/// The processors a process may run on, as `/proc/PID/status` lists them.
fn allowed_cpus(pid: Pid) -> Partition {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    Partition::from_kernel_list(list).unwrap()
}

/// Two spinners stacked on processor 0, then given every processor: `spread` pins them one
/// per processor (on distinct ones when there are two), `unpin` and the release steps' unpin
/// give them all back.
fn spread_and_unpin<A: Actuator>(act: &mut A, job: &JobGroup, pids: &[Pid]) {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let every = Partition::from_kernel_list(&online).unwrap();
    act.set_cpus(job, &every).unwrap();
    assert!(
        act.spread(job).unwrap().pinned,
        "spinners are working threads"
    );
    let pinned: Vec<Partition> = pids.iter().map(|&p| allowed_cpus(p)).collect();
    assert!(pinned.iter().all(|c| c.size() == 1), "{pinned:?}");
    if every.size() >= 2 {
        assert_ne!(pinned[0], pinned[1], "both spinners on one processor");
        // Someone stacks them again; a cpuset change makes the next spread look afresh (a
        // spread right after another may rely on its pins). The job is frozen meanwhile, as
        // gang mode spreads it: pinned before its thaw, by the CPU time its threads used.
        let taskset = Command::new("taskset")
            .args(["-p", "-c", &pinned[0].to_string(), &pids[1].to_string()])
            .output()
            .unwrap();
        assert!(taskset.status.success(), "{taskset:?}");
        act.freeze(job).unwrap();
        act.set_cpus(job, &every).unwrap();
        act.spread(job).unwrap();
        let again: Vec<Partition> = pids.iter().map(|&p| allowed_cpus(p)).collect();
        act.thaw(job).unwrap();
        assert_ne!(
            again[0], again[1],
            "spread of a frozen job after a cpuset change left them stacked"
        );
    }
    act.unpin(job).unwrap();
    assert!(pids.iter().all(|&p| allowed_cpus(p) == every));
    act.spread(job).unwrap();
    release(&[ReleaseStep::Unpin {
        procs: act.join_files(job).unwrap()[0].clone(),
    }])
    .unwrap();
    assert!(pids.iter().all(|&p| allowed_cpus(p) == every));
    act.set_cpus(job, &Partition::block(0, 1)).unwrap();
}

/// `flag` reads the fake's own idea of frozen; real actuators are judged by CPU time alone.
fn suite<A: Actuator>(act: &mut A, job: &JobGroup, real: bool, flag: impl Fn(&A) -> bool) {
    // The fake touches no process: it gets a made-up pid.
    let mut child = real.then(spinner);
    let pid = child.as_ref().map_or(4242, |c| c.id() as Pid);
    assert!(!act.knows(job));
    act.create(job).unwrap();
    assert!(act.knows(job));
    act.add(job, pid).unwrap();
    if let Some(child) = child.as_mut() {
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    if real {
        // The forked spinner joined the job by itself.
        for _ in 0..200 {
            if act.pids(job).unwrap().len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(act.pids(job).unwrap().len(), 2, "{:?}", act.pids(job));
    } else {
        assert_eq!(act.pids(job).unwrap(), vec![pid]);
    }
    let pids = act.pids(job).unwrap();
    let frozen = |act: &A| {
        if real {
            !burns_within(&pids, Duration::from_millis(150))
        } else {
            flag(act)
        }
    };
    let running = |act: &A| {
        if real {
            burns_within(&pids, Duration::from_secs(5))
        } else {
            !flag(act)
        }
    };

    act.set_cpus(job, &Partition::block(0, 1)).unwrap();
    act.set_weight(job, 50).unwrap();
    for round in 0..3 {
        if round == 1 {
            // Asked, then confirmed later: a wait until a moment already past only looks.
            act.ask_freeze(job).unwrap();
            act.frozen_by(job, Some(Instant::now())).unwrap();
            assert!(act.frozen_by(job, None).unwrap());
        } else {
            act.freeze(job).unwrap();
        }
        assert!(frozen(act), "frozen but using CPU ({})", act.describe());
        act.thaw(job).unwrap();
        assert!(running(act), "thawed but not running ({})", act.describe());
    }
    // The release steps, taken by another process (here: this one, without the actuator),
    // continue a frozen job and reset its weight. (The fake has no state outside itself.)
    if real {
        act.freeze(job).unwrap();
        release(&act.release_steps(job).unwrap()).unwrap();
        assert!(
            running(act),
            "released but not running ({})",
            act.describe()
        );
        let used = act.cpu_usage(job).unwrap();
        assert!(
            burns_within(&pids, Duration::from_secs(5)) && act.cpu_usage(job).unwrap() > used,
            "a spinning job's CPU usage does not grow ({})",
            act.describe()
        );
        assert!(act.join_files(job).unwrap().iter().all(|f| f.exists()));
        spread_and_unpin(act, job, &pids);
    }
    // Killing a frozen job works: the actuator continues it so it can die.
    act.freeze(job).unwrap();
    act.kill(job).unwrap();
    if let Some(child) = child.as_mut() {
        assert!(!wait_bounded(child).success());
    }
    assert!(!flag(act));
    if real {
        for _ in 0..200 {
            if act.pids(job).unwrap().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    act.remove(job).unwrap();
    assert!(!act.knows(job));
    assert!(matches!(act.pids(job), Err(CgroupError::UnknownJob(_))));
    assert!(matches!(act.freeze(job), Err(CgroupError::UnknownJob(_))));
    assert!(matches!(
        JobGroup::named("../escape"),
        Err(CgroupError::BadJobName(_))
    ));
}

fn real(freezer: Freezer) {
    cosched_os::require_root("the tests of real cgroups");
    let layout = Layout::detect().unwrap();
    let parent = format!("cosched-test-{}-{freezer:?}", std::process::id());
    // What the mounts promise; a v2 tree on a kernel before 5.2 has no freezer and fails here.
    let available = match freezer {
        Freezer::V2 => layout.v2.is_some(),
        Freezer::V1 => layout.v1_freezer.is_some(),
        Freezer::Signals => true,
    };
    let act = match Cgroups::open(&layout, &parent, Some(freezer)) {
        Ok(act) => act,
        Err(CgroupError::Unsupported(why)) if !available => {
            eprintln!("{freezer}: not on this machine ({why}), as the layout says: {layout}");
            return;
        }
        Err(e) => panic!("{freezer} on {layout}: {e}"),
    };
    assert_eq!(act.freezer(), freezer);
    let job = &JobGroup::of(1);
    cleaned_up(act, job, |act| {
        suite(act, job, true, |_| false);
        // A process joins the freezing hierarchy last: joined first, it would stop there,
        // frozen, and join the others only once thawed.
        let freezing = match freezer {
            Freezer::V2 => layout.v2.clone(),
            Freezer::V1 => layout.v1_freezer.clone(),
            Freezer::Signals => None,
        };
        if let Some(root) = freezing {
            let other = &JobGroup::of(2);
            act.create(other).unwrap();
            let files = act.join_files(other).unwrap();
            act.remove(other).unwrap();
            let procs = root.join(&parent).join(other).join("cgroup.procs");
            assert_eq!(files.last(), Some(&procs), "{files:?}");
        }
        // Made ahead on another thread (the agent's orders' thread), a job's groups are there
        // before `create`, a v1 cpuset one with processors, and `create` takes them as made.
        let ahead = &JobGroup::of(3);
        let maker = act.maker().expect("real cgroups make groups ahead");
        std::thread::scope(|s| s.spawn(|| maker.make(ahead)).join().unwrap()).unwrap();
        let made = |root: &Option<std::path::PathBuf>| {
            root.as_ref().map(|root| root.join(&parent).join(ahead))
        };
        for dir in [
            &layout.v2,
            &layout.v1_freezer,
            &layout.v1_cpuset,
            &layout.v1_cpu,
        ]
        .into_iter()
        .filter_map(made)
        .filter(|dir| dir.parent().is_some_and(|p| p.exists()))
        {
            assert!(dir.is_dir(), "{} not made ahead", dir.display());
        }
        if let Some(cpuset) = made(&layout.v1_cpuset).filter(|d| d.is_dir()) {
            let cpus = std::fs::read_to_string(cpuset.join("cpuset.cpus")).unwrap();
            assert!(
                !cpus.trim().is_empty(),
                "{}: no processors",
                cpuset.display()
            );
        }
        act.create(ahead).unwrap();
        assert!(act.pids(ahead).unwrap().is_empty());
        act.remove(ahead).unwrap();
    });
}

/// Runs `test`, then, whatever happened, leaves nothing frozen or running behind: kills and
/// removes `job` and closes `act`.
/// This machine's layout, and cosched's groups opened under a test parent of its own
/// (`cosched-test-PID-NAME`) with the best freezer here; as root only.
fn opened(name: &str) -> (Layout, String, Cgroups) {
    cosched_os::require_root("the tests of real cgroups");
    let layout = Layout::detect().unwrap();
    let parent = format!("cosched-test-{}-{name}", std::process::id());
    let act = Cgroups::open(&layout, &parent, None).unwrap();
    (layout, parent, act)
}

fn cleaned_up(mut act: Cgroups, job: &JobGroup, test: impl FnOnce(&mut Cgroups)) {
    let outcome = catch_unwind(AssertUnwindSafe(|| test(&mut act)));
    let _ = act.kill(job);
    std::thread::sleep(Duration::from_millis(50));
    let _ = act.remove(job);
    let closed = act.close();
    if let Err(panic) = outcome {
        resume_unwind(panic);
    }
    closed.unwrap();
}

/// Starts `script` (sh) in `job`: it waits for a line, so that it runs only once inside.
fn start_in(act: &mut Cgroups, job: &JobGroup, script: &str) -> Child {
    let mut child = cosched_cgroups::die_with_parent(&mut Command::new("sh"))
        .args(["-c", &format!("read go; {script}")])
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh runs");
    act.add(job, child.id() as Pid).unwrap();
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    child
}

fn has_memory_controller(layout: &Layout) -> bool {
    layout.v1_memory.is_some() || layout.v2_controllers().iter().any(|c| c == "memory")
}

#[test]
fn cgroup_v2_freezer() {
    real(Freezer::V2);
}

#[test]
fn cgroup_v1_freezer() {
    real(Freezer::V1);
}

#[test]
fn signals() {
    real(Freezer::Signals);
}

#[test]
fn fake() {
    let mut fake = Fake::default();
    suite(&mut fake, &JobGroup::of(1), false, |f| {
        !f.frozen().is_empty()
    });
    assert_eq!(fake.calls.first(), Some(&FakeCall::Create("job-1".into())));
    assert!(fake
        .calls
        .contains(&FakeCall::SetCpus("job-1".into(), Partition::block(0, 1))));
}

#[test]
fn the_best_freezer_is_chosen_and_described() {
    let (layout, _, act) = opened("best");
    // The v1 freezer where it is mounted: its writes wait for no lock a joining process holds.
    let expected = if layout.v1_freezer.is_some() {
        Freezer::V1
    } else if layout.v2.is_some() {
        Freezer::V2
    } else {
        Freezer::Signals
    };
    assert_eq!(act.freezer(), expected);
    assert!(act.describe().starts_with("stop: "), "{}", act.describe());
    act.close().unwrap();
}

/// The jobs' weight against processes outside cosched is their parent's, by processor, and
/// within the kernel's bound; 0 gives back the kernel's default.
#[test]
fn the_jobs_weigh_what_they_are_given_a_processor_within_the_kernels_bound() {
    let (layout, parent, act) = opened("weight");
    let v2_file = (layout.v2.as_ref())
        .map(|root| root.join(&parent).join("cpu.weight"))
        .filter(|file| file.exists());
    let v1_file = (layout.v1_cpu.as_ref()).map(|root| root.join(&parent).join("cpu.shares"));
    // What the file holds for a weight on cgroup v2's scale (v1: 1024 shares are 100).
    let (file, in_file): (_, fn(u64) -> u64) = match (v2_file, v1_file) {
        (Some(file), _) => (file, |weight| weight),
        (None, Some(file)) => (file, |weight| weight * 1024 / 100),
        (None, None) => {
            assert!(matches!(
                act.weigh_jobs(5, 2),
                Err(CgroupError::Unsupported(_))
            ));
            eprintln!("no cpu controller here: nothing to weigh");
            return act.close().unwrap();
        }
    };
    let read = || -> u64 {
        std::fs::read_to_string(&file)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    for (per_processor, processors, weight) in [(5, 2, 1_000), (0, 2, 100), (100, 64, 10_000)] {
        assert_eq!(act.weigh_jobs(per_processor, processors).unwrap(), weight);
        assert_eq!(read(), in_file(u64::from(weight)), "{}", file.display());
    }
    act.close().unwrap();
}

/// A job held to 64 MiB that fills 256 MiB is killed by the kernel's OOM killer in its group,
/// and the group's figures say so: an OOM kill, a peak near the limit, CPU time spent.
#[test]
fn a_job_over_its_memory_limit_is_killed_and_counted() {
    let (layout, _, act) = opened("memory");
    let job = &JobGroup::of(1);
    let limit: u64 = 64 << 20;
    cleaned_up(act, job, |act| {
        act.create(job).unwrap();
        match act.limit_memory(job, limit) {
            Err(CgroupError::Unsupported(why)) => {
                assert!(
                    !has_memory_controller(&layout),
                    "{why}, but the layout has a memory controller: {layout}"
                );
                eprintln!("no memory controller here ({why}): nothing to enforce");
                return;
            }
            other => other.unwrap(),
        }
        let mut child = start_in(act, job, "exec perl -e '$x = \"x\" x (256 << 20); exit 0'");
        let status = wait_bounded_for(&mut child, Duration::from_secs(60));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        let (usage, error) = cosched_cgroups::usage(&act.usage_files(job).unwrap());
        assert!(error.is_none(), "{error:?}");
        assert!(usage.oom_kills.unwrap() >= 1, "{usage:?}");
        assert!(usage.cpu_us.unwrap() > 0, "{usage:?}");
        if let Some(peak) = usage.peak_memory_bytes {
            assert!(peak > limit / 2 && peak <= limit, "{usage:?}");
        }
    });
}

/// Without a limit, the same figures are read, and no OOM kill is counted.
#[test]
fn a_jobs_figures_are_read_at_its_end() {
    let (layout, _, act) = opened("usage");
    let job = &JobGroup::of(1);
    cleaned_up(act, job, |act| {
        act.create(job).unwrap();
        let script = "exec perl -e '$x = \"x\" x (32 << 20); $i = 0; $i++ while $i < 3e6'";
        let mut child = start_in(act, job, script);
        assert!(wait_bounded_for(&mut child, Duration::from_secs(60)).success());
        let (usage, error) = cosched_cgroups::usage(&act.usage_files(job).unwrap());
        assert!(error.is_none(), "{error:?}");
        assert!(usage.cpu_us.unwrap() > 10_000, "{usage:?}");
        let memory = has_memory_controller(&layout);
        assert_eq!(usage.oom_kills, memory.then_some(0), "{usage:?}");
        if let Some(peak) = usage.peak_memory_bytes {
            assert!(peak >= 32 << 20, "{usage:?}");
        }
    });
}

/// With no cgroup v2 tree, a job's CPU time is its cpuacct group's, which keeps the time of
/// processes that already exited: summing the live ones let a job do its work in short-lived
/// children and look idle (its cells given to others while it ran on).
#[test]
fn without_a_v2_tree_the_time_of_exited_processes_counts() {
    cosched_os::require_root("the tests of real cgroups");
    let detected = Layout::detect().unwrap();
    if detected.v1_cpuacct.is_none() || detected.v1_freezer.is_none() {
        eprintln!("no v1 cpuacct or freezer on this machine: {detected}");
        return;
    }
    let layout = Layout {
        v2: None,
        ..detected
    };
    let parent = format!("cosched-test-{}-v1-only", std::process::id());
    let act = Cgroups::open(&layout, &parent, Some(Freezer::V1)).unwrap();
    let job = &JobGroup::of(1);
    cleaned_up(act, job, |act| {
        act.create(job).unwrap();
        // A child burns about 200 ms of CPU and exits; the shell left in the job waits.
        let ended = std::env::temp_dir().join(format!("{parent}-burnt"));
        let burn = "sh -c 'end=$(($(date +%s%N) + 200000000)); \
                    while [ $(date +%s%N) -lt $end ]; do :; done'";
        let mut shell = start_in(
            act,
            job,
            &format!("{burn}; touch {}; read end", ended.display()),
        );
        let began = Instant::now();
        while !ended.exists() {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "the burner never ended"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&ended);
        let used = act.cpu_usage(job).unwrap();
        let _ = writeln!(shell.stdin.as_mut().unwrap(), "end");
        let _ = shell.wait();
        assert!(
            used >= Duration::from_millis(100),
            "the job's CPU time is {used:?} once its burner ended: the exited process's time was lost"
        );
    });
}

/// A process that takes the pid `pid` (free now): the kernel is told the last pid it gave
/// was the one before (`ns_last_pid`, root), and another process may fork first, so retried.
fn take_pid(pid: Pid) -> Child {
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let mut child = sleeper();
        if child.id() as Pid == pid {
            return child;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("no process took pid {pid} in 200 tries");
}

fn sleeper() -> Child {
    cosched_cgroups::die_with_parent(&mut Command::new("sleep"))
        .arg("60")
        .spawn()
        .expect("sleep runs")
}

/// A job's listing of `listed`'s pid that, read again once that process is held, finds it
/// exited and its pid taken by another process (put in `taker`), and names the pid still, as
/// if that one were the job's too.
fn relisted_after_reuse<'a>(
    listed: &'a mut Child,
    taker: &'a mut Option<Child>,
) -> impl FnMut() -> cosched_cgroups::Result<Vec<Pid>> + 'a {
    let pid = listed.id() as Pid;
    move || {
        if taker.is_none() {
            listed.kill().unwrap();
            listed.wait().unwrap();
            *taker = Some(take_pid(pid));
        }
        Ok(vec![pid])
    }
}

/// Between the listing of a job's processes and their signal, one exits and another process
/// of the machine takes its pid: it is not signalled. A kill(2) of the pid read, as the
/// daemon did, killed it.
#[test]
fn a_pid_taken_by_another_process_is_not_signalled() {
    cosched_os::require_root("pid reuse (ns_last_pid)");
    let mut listed = sleeper();
    let pid = listed.id() as Pid;
    let mut taker = None;
    let mut signalled = 0;
    let acted = members::each_held(
        &[pid],
        relisted_after_reuse(&mut listed, &mut taker),
        |held| {
            signalled = members::signal(held, libc::SIGTERM)?;
            Ok(())
        },
    );
    let _ = listed.wait();
    let mut taker = taker.expect("the list was read again");
    std::thread::sleep(Duration::from_millis(100));
    let survived = taker.try_wait().unwrap().is_none();
    let _ = taker.kill();
    let _ = taker.wait();
    acted.unwrap();
    assert_eq!(signalled, 0);
    assert!(survived, "pid {pid}'s new process was signalled");
}

/// A job's process exits and another process takes its pid (pinned to one processor) while
/// the job's threads are unpinned: that process keeps its pin. (By pid, it was unpinned.)
#[test]
fn a_pid_taken_by_another_process_keeps_its_pins() {
    cosched_os::require_root("pid reuse (ns_last_pid)");
    let online = Partition::from_kernel_list(
        &std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap(),
    )
    .unwrap();
    assert!(online.size() > 1, "needs two processors: {online}");
    let first = online.processors().next().unwrap();
    let one = affinity::mask_of(&Partition::from_processors([first]));
    let mut listed = sleeper();
    let pid = listed.id() as Pid;
    let mut taker = None;
    let mut list = relisted_after_reuse(&mut listed, &mut taker);
    let unpinned = affinity::unpin(&[pid], || {
        let names = list();
        // SAFETY: the pointer and size describe `one`; `pid` is the new process's now.
        assert_eq!(
            unsafe { libc::sched_setaffinity(pid, std::mem::size_of_val(&one), &one) },
            0
        );
        names
    });
    drop(list);
    let _ = listed.wait();
    let mut taker = taker.expect("the list was read again");
    let kept = allowed_cpus(pid);
    let _ = taker.kill();
    let _ = taker.wait();
    unpinned.unwrap();
    assert_eq!(
        kept.size(),
        1,
        "pid {pid}'s new process was unpinned: {kept}"
    );
}

/// A job forking without pause (a shell running `true` in a loop) is frozen every time by the
/// v1 freezer: a freeze that missed a task forked as it was asked read FREEZING for good (2
/// of 30 here), and its confirmation waited the whole timeout, holding the slot clock. Where
/// there is no v1 freezer, nothing to test: the v2 freezer had no such miss.
#[test]
fn a_job_that_forks_without_pause_is_frozen_every_time() {
    cosched_os::require_root("the tests of real cgroups");
    let layout = Layout::detect().unwrap();
    if layout.v1_freezer.is_none() {
        eprintln!("no v1 freezer here: nothing to test ({layout})");
        return;
    }
    let parent = format!("cosched-test-{}-forking", std::process::id());
    let act = Cgroups::open(&layout, &parent, Some(Freezer::V1)).unwrap();
    let job = &JobGroup::of(1);
    cleaned_up(act, job, |act| {
        act.create(job).unwrap();
        let mut child = start_in(act, job, "while :; do /bin/true; done");
        for round in 0..60 {
            if let Err(error) = act.freeze(job) {
                panic!("freeze {round}: {error}");
            }
            act.thaw(job).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        act.kill(job).unwrap();
        wait_bounded(&mut child);
    });
}
