//! The applier's decisions on a fake actuator, then gang scheduling of real processes in real
//! cgroups on the real-time slot clock (needs root).

use cosched_agent::clock::{self, now_micros};
use cosched_agent::*;
use cosched_cgroups::{Actuator, Cgroups, Fake, FakeCall, Layout, Pid};
use cosched_core::{Config, Generation, JobId, JobRequest, Machine, Rotation, Scheduler, Shape};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Two jobs of 2 processors each on a 2-processor machine: two slices, one job each.
fn two_slices() -> Scheduler {
    let config = Config {
        mpl: 2,
        alternates: false,
        ..Config::default()
    };
    let mut s = Scheduler::new(Machine::line(2).unwrap(), config).unwrap();
    for id in [1, 2] {
        s.submit(JobRequest::new(id, Shape::Count(2)), 0).unwrap();
    }
    s
}

fn applier(mode: Mode) -> Applier<Fake> {
    let mut fake = Fake::default();
    for job in [1, 2] {
        fake.create(&job_name(job)).unwrap();
    }
    let mut a = Applier::new(fake, mode);
    a.adopt(1).unwrap();
    a.adopt(2).unwrap();
    a.publish(Generation::follow(None, two_slices().plan(), 10));
    a
}

#[test]
fn gang_freezes_the_leavers_before_thawing_the_entrants() {
    let mut a = applier(Mode::Gang);
    assert_eq!(a.actuator().frozen(), vec!["job-1", "job-2"]);
    // Before its first slot the generation is not in force: nothing runs.
    let r = a.enter_slot(9).unwrap();
    assert!(r.started.is_empty() && r.stopped.is_empty());
    let r = a.enter_slot(10).unwrap();
    assert_eq!((r.stopped, r.started), (vec![], vec![1]));
    assert_eq!(a.actuator().frozen(), vec!["job-2"]);
    let calls_before = a.actuator().calls.len();
    let r = a.enter_slot(11).unwrap();
    assert_eq!((r.stopped, r.started), (vec![1], vec![2]));
    assert_eq!(
        a.actuator().calls[calls_before..],
        [
            FakeCall::Freeze("job-1".into()),
            FakeCall::Thaw("job-2".into())
        ]
    );
    // Processors were set once, from the plan.
    let cpus = a.actuator().jobs["job-1"].cpus.clone();
    assert_eq!(cpus.as_deref(), Some("0-1"));
    a.release_all().unwrap();
    assert!(a.actuator().frozen().is_empty());
}

#[test]
fn moderate_moves_weight_and_freezes_nothing() {
    let mut a = applier(Mode::Moderate);
    a.enter_slot(10).unwrap();
    let weight = |a: &Applier<Fake>, job: &str| a.actuator().jobs[job].weight;
    assert_eq!(
        (weight(&a, "job-1"), weight(&a, "job-2")),
        (FAVOURED_WEIGHT, DISFAVOURED_WEIGHT)
    );
    a.enter_slot(11).unwrap();
    assert_eq!(
        (weight(&a, "job-1"), weight(&a, "job-2")),
        (DISFAVOURED_WEIGHT, FAVOURED_WEIGHT)
    );
    assert!(a.actuator().frozen().is_empty());
    a.release_all().unwrap();
    assert_eq!(
        (weight(&a, "job-1"), weight(&a, "job-2")),
        (NORMAL_WEIGHT, NORMAL_WEIGHT)
    );
}

#[test]
fn local_touches_nothing_and_released_jobs_are_thawed() {
    let mut a = applier(Mode::Local);
    let calls = a.actuator().calls.len();
    a.enter_slot(10).unwrap();
    a.enter_slot(11).unwrap();
    assert_eq!(a.actuator().calls.len(), calls);
    let mut g = applier(Mode::Gang);
    g.enter_slot(10).unwrap();
    g.release(2).unwrap();
    assert_eq!(g.actuator().frozen(), Vec::<&str>::new());
    assert_eq!("implicit".parse::<Mode>().unwrap(), Mode::Implicit);
    assert!("lottery"
        .parse::<Mode>()
        .unwrap_err()
        .to_string()
        .contains("unknown mode"));
}

/// A job of two processes that spin through a fixed amount of work, then exit with `code`.
/// It waits for a line on stdin before forking, so its second process is born in the cgroup.
fn job_process(code: i32) -> Child {
    let work = "i=0; while [ $i -lt 1200000 ]; do i=$((i+1)); done";
    let script = format!("read go; ({work}) & {work}; wait $!; exit {code}");
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh runs")
}

fn state(pid: Pid) -> Option<char> {
    cosched_cgroups::procfs::stat(pid).ok().map(|s| s.state)
}

/// Samples the processes' states for `window`; counts the moments when a process of each job
/// was runnable at once. A job counts as running through a sample only if one of its processes
/// is runnable both before and after the other job's are read, and a sample counts only if it
/// took under 2 ms (a gang switch happens once a quantum, 50 ms here, so nothing is frozen and
/// thawed within one counted sample even when this thread is preempted between reads).
fn overlaps(a: &[Pid], b: &[Pid], window: Duration) -> (usize, usize) {
    let runnable = |pids: &[Pid]| pids.iter().filter(|&&p| state(p) == Some('R')).count();
    let (mut samples, mut overlaps) = (0, 0);
    let end = Instant::now() + window;
    while Instant::now() < end {
        let began = Instant::now();
        let first = runnable(a);
        let second = runnable(b);
        let again = runnable(a);
        if began.elapsed() < Duration::from_millis(2) {
            samples += 1;
            if first > 0 && second > 0 && again > 0 {
                overlaps += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    (samples, overlaps)
}

/// The control: without gang scheduling the same sampler sees both jobs running, so the test
/// below can fail. Four spinners, no applier.
fn control_overlaps() -> (usize, usize) {
    let mut spinners: Vec<Child> = (0..4)
        .map(|_| {
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap()
        })
        .collect();
    let pids: Vec<Pid> = spinners.iter().map(|c| c.id() as Pid).collect();
    let counts = overlaps(&pids[..2], &pids[2..], Duration::from_millis(500));
    for child in &mut spinners {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    counts
}

#[test]
fn two_gangs_never_run_at_the_same_moment_and_both_finish() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "needs root (CI runs as root)"
    );
    let (control_samples, control_seen) = control_overlaps();
    assert!(
        control_seen > control_samples / 10,
        "the sampler failed to see plain Linux run both jobs: {control_seen} of {control_samples}"
    );
    let layout = Layout::detect().unwrap();
    let parent = format!("cosched-test-agent-{}", std::process::id());
    let mut cgroups = Cgroups::open(&layout, &parent, None).unwrap();
    let jobs: [(JobId, i32); 2] = [(1, 7), (2, 9)];
    let mut children = Vec::new();
    for (job, code) in jobs {
        cgroups.create(&job_name(job)).unwrap();
        let child = job_process(code);
        cgroups.add(&job_name(job), child.id() as Pid).unwrap();
        children.push(child);
    }
    let applier = Arc::new(Mutex::new(Applier::new(cgroups, Mode::Gang)));
    for (job, _) in jobs {
        applier.lock().unwrap().adopt(job).unwrap();
    }
    for child in &mut children {
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    let quantum = 50_000;
    let rotation = Rotation::new(now_micros() / quantum * quantum, quantum);
    let first = rotation.next_boundary(now_micros()) + 1;
    let generation = Generation::follow(None, two_slices().plan(), first);
    applier.lock().unwrap().publish(generation);

    // The clock runs on a real-time thread; this thread samples the processes meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let clock = {
        let (applier, stop) = (applier.clone(), stop.clone());
        std::thread::spawn(move || {
            let realtime = clock::make_realtime(50);
            let (mut lateness, mut switch_us) = (Samples::new(10_000), Samples::new(10_000));
            let mut outcome = Ok(());
            clock::run(rotation, |tick| {
                lateness.record(tick.lateness());
                match applier.lock().unwrap().enter_slot(tick.slot) {
                    Ok(record) => switch_us.record(record.duration),
                    Err(e) => outcome = Err(e.to_string()),
                }
                outcome.is_ok() && !stop.load(Ordering::Relaxed)
            });
            (realtime, lateness.summary(), switch_us.summary(), outcome)
        })
    };
    let pids = |job| {
        applier
            .lock()
            .unwrap()
            .actuator()
            .pids(&job_name(job))
            .unwrap()
    };
    // Each job forks its second process in its first slot.
    let deadline = Instant::now() + Duration::from_secs(5);
    while (pids(1).len(), pids(2).len()) != (2, 2) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (a, b) = (pids(1), pids(2));
    // Sample while both jobs are still working: an exiting process is not frozen by the
    // kernel and may show as runnable after its group is confirmed frozen.
    let (samples, seen) = overlaps(&a, &b, Duration::from_millis(800));
    let statuses: Vec<_> = children.iter_mut().map(|c| c.wait().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let (realtime, lateness, switch_us, outcome) = clock.join().unwrap();
    let mut applier = Arc::try_unwrap(applier).ok().unwrap().into_inner().unwrap();
    applier.release_all().unwrap();
    let mut cgroups = applier.into_actuator();
    for (job, _) in jobs {
        cgroups.remove(&job_name(job)).unwrap();
    }
    cgroups.close().unwrap();

    assert_eq!((a.len(), b.len()), (2, 2), "each job has its two processes");
    assert_eq!(outcome, Ok(()));
    assert!(
        realtime.is_ok(),
        "the clock thread could not get SCHED_FIFO: {realtime:?}"
    );
    assert!(samples > 100, "only {samples} samples");
    assert_eq!(
        seen, 0,
        "both jobs runnable at once in {seen} of {samples} samples"
    );
    assert_eq!(
        statuses.iter().map(|s| s.code()).collect::<Vec<_>>(),
        vec![Some(7), Some(9)]
    );
    assert!(switch_us.count >= 20, "{switch_us:?}");
    eprintln!("slot lateness µs {lateness:?}; switch µs {switch_us:?}");
}
