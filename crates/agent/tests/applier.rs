//! The applier's decisions on a fake actuator, then gang scheduling of real processes in real
//! cgroups on the real-time slot clock (needs root).

use cosched_agent::clock;
use cosched_agent::*;
use cosched_cgroups::{Actuator, Cgroups, Fake, FakeCall, Layout, Pid};
use cosched_core::{
    Config, Generation, JobId, JobRequest, Machine, Micros, Rotation, Scheduler, Shape,
};
use cosched_os::now_micros;
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
    mixed(mode, [None, None])
}

/// `applier` with jobs 1 and 2 in their own modes (none: the machine's).
fn mixed(machine: Mode, modes: [Option<Mode>; 2]) -> Applier<Fake> {
    let mut fake = Fake::default();
    for job in [1, 2] {
        fake.create(&job_group(job)).unwrap();
    }
    let mut a = Applier::new(fake, machine);
    a.admit(1, None, modes[0]).unwrap();
    a.admit(2, None, modes[1]).unwrap();
    a.publish(Generation::follow(None, two_slices().plan(), 10));
    a
}

fn jobs(moments: &[cosched_proto::JobMoment]) -> Vec<u64> {
    moments.iter().map(|m| m.job).collect()
}

/// How long before the boundary these tests call `leave_slot`: room for any fake look whatever
/// else the machine runs, but not for a slow one (`spread_takes`).
const LEAD: Micros = 20_000;

/// Leaves the slot before `slot`, `LEAD` ahead of its boundary: the actuator calls it made.
fn leave(a: &mut Applier<Fake>, slot: i64) -> Vec<FakeCall> {
    let before = a.actuator().calls.len();
    a.leave_slot(slot, now_micros() + LEAD).unwrap();
    a.actuator().calls[before..].to_vec()
}

/// Leaves the slot before `slot` ahead of its boundary and enters `slot`, as the clock does.
fn pass(a: &mut Applier<Fake>, slot: i64) {
    leave(a, slot);
    a.enter_slot(slot, now_micros()).unwrap();
}

/// Enters `slot`: the jobs it stopped and started, and the actuator calls it made. Every stop
/// took effect before any start.
fn enter(a: &mut Applier<Fake>, slot: i64) -> ((Vec<u64>, Vec<u64>), Vec<FakeCall>) {
    let before = a.actuator().calls.len();
    let r = a.enter_slot(slot, now_micros()).unwrap();
    let last_stop = r.stopped.iter().map(|m| m.at_us).max();
    let first_start = r.started.iter().map(|m| m.at_us).min();
    assert!(
        last_stop.zip(first_start).is_none_or(|(s, t)| s <= t),
        "{r:?}"
    );
    let calls = a.actuator().calls[before..].to_vec();
    ((jobs(&r.stopped), jobs(&r.started)), calls)
}

#[test]
fn gang_freezes_the_leavers_before_thawing_the_entrants() {
    let mut a = applier(Mode::Gang);
    assert_eq!(a.actuator().frozen(), vec!["job-1", "job-2"]);
    // Before its first slot the generation is not in force: nothing runs.
    let r = a.enter_slot(9, now_micros()).unwrap();
    assert!(r.started.is_empty() && r.stopped.is_empty());
    let r = a.enter_slot(10, now_micros()).unwrap();
    assert_eq!((jobs(&r.stopped), jobs(&r.started)), (vec![], vec![1]));
    assert_eq!(a.actuator().frozen(), vec!["job-2"]);
    let (switched, calls) = enter(&mut a, 11);
    assert_eq!(switched, (vec![1], vec![2]));
    assert_eq!(
        calls,
        [
            FakeCall::Freeze("job-1".into()),
            // Never ran: nothing to tell its workers by until it runs, so it is looked at
            // only then.
            FakeCall::Thaw("job-2".into()),
            FakeCall::Spread("job-2".into())
        ]
    );
    let (_, calls) = enter(&mut a, 12);
    assert_eq!(
        calls,
        [
            FakeCall::Freeze("job-2".into()),
            // Pinned while frozen: nothing is left to do on its processors once it runs.
            FakeCall::Spread("job-1".into()),
            FakeCall::Thaw("job-1".into())
        ]
    );
    // Processors were set once, from the plan.
    let cpus = a.actuator().jobs["job-1"].cpus.clone();
    assert_eq!(cpus, Some(cosched_core::Partition::block(0, 2)));
    a.release_all().unwrap();
    assert!(a.actuator().frozen().is_empty());
}

#[test]
fn gang_freezes_the_leavers_ahead_of_the_boundary_and_thaws_the_entrants_on_it() {
    let mut a = applier(Mode::Gang);
    assert_eq!(a.lead(10), 0, "nothing runs, so nothing leaves");
    a.enter_slot(10, now_micros()).unwrap();
    assert_eq!(a.lead(11), 1_000, "before any freeze was measured");
    leave(&mut a, 11);
    // Job 1 is frozen and no longer runs; job 2 waits for the boundary.
    assert_eq!(a.actuator().frozen(), vec!["job-1", "job-2"]);
    assert_eq!(a.leaving().collect::<Vec<_>>(), vec![1]);
    assert_eq!(a.running().count(), 0);
    // The boundary's record holds both, the stop first. Job 2, never run, could not be
    // spread ahead (looked at, nothing to pin): the boundary thaws it and spreads it as it
    // runs.
    let (switched, calls) = enter(&mut a, 11);
    assert_eq!(switched, (vec![1], vec![2]));
    assert_eq!(
        calls,
        [
            FakeCall::Thaw("job-2".into()),
            FakeCall::Spread("job-2".into())
        ]
    );
    assert_eq!(a.leaving().count(), 0);
    // The lead follows the freezes measured (the fake's are instant): slack alone.
    assert!(a.lead(12) < 1_000, "{}", a.lead(12));
    // Ahead of the boundary, as the leaver's freeze takes effect, the entrant (which ran) is
    // pinned while still frozen.
    assert_eq!(
        leave(&mut a, 12),
        [
            FakeCall::Freeze("job-2".into()),
            FakeCall::Spread("job-1".into())
        ]
    );
    // A job let loose after it was held back is stopped again on the boundary, and reported
    // once.
    a.release_all().unwrap();
    let r = a.enter_slot(12, now_micros()).unwrap();
    assert_eq!((jobs(&r.stopped), jobs(&r.started)), (vec![2], vec![]));
    assert_eq!(a.actuator().frozen(), vec!["job-2"]);
}

#[test]
fn an_entrant_pinned_ahead_of_its_boundary_is_only_thawed_on_it() {
    let mut a = applier(Mode::Gang);
    a.enter_slot(10, now_micros()).unwrap();
    pass(&mut a, 11);
    // Job 1 ran: pinned ahead, while job 2's freeze takes effect.
    leave(&mut a, 12);
    let (switched, calls) = enter(&mut a, 12);
    assert_eq!(switched, (vec![2], vec![1]));
    assert_eq!(calls, [FakeCall::Thaw("job-1".into())]);
    // A plan that changes on the boundary brings another entrant: it is looked at there.
    leave(&mut a, 13);
    a.publish(Generation::follow(None, two_slices().plan(), 13));
    let (_, calls) = enter(&mut a, 13);
    assert_eq!(
        calls,
        [
            FakeCall::Spread("job-1".into()),
            FakeCall::Thaw("job-1".into())
        ]
    );
}

#[test]
fn a_job_slow_to_look_at_is_pinned_in_its_own_slot_not_ahead() {
    let mut a = applier(Mode::Gang);
    // Job 1's looks take 50 ms (a crowd of processes to read): more than is left before its
    // boundary, and more than a quick look.
    a.actuator_mut().jobs.get_mut("job-1").unwrap().spread_takes = Duration::from_millis(50);
    a.enter_slot(10, now_micros()).unwrap();
    pass(&mut a, 11);
    // Ahead of job 1's boundary only job 2's freeze is asked: job 1 is not looked at there.
    assert_eq!(leave(&mut a, 12), [FakeCall::Freeze("job-2".into())]);
    // On the boundary it is thawed first and looked at in its slot.
    let (switched, calls) = enter(&mut a, 12);
    assert_eq!(switched, (vec![2], vec![1]));
    assert_eq!(
        calls,
        [
            FakeCall::Thaw("job-1".into()),
            FakeCall::Spread("job-1".into())
        ]
    );
    // Job 2's looks stay quick: it is still pinned ahead of its own boundary.
    assert_eq!(
        leave(&mut a, 13),
        [
            FakeCall::Freeze("job-1".into()),
            FakeCall::Spread("job-2".into())
        ]
    );
}

#[test]
fn a_job_slow_to_freeze_leaves_early_by_its_own_history_only() {
    let mut a = applier(Mode::Gang);
    a.actuator_mut().jobs.get_mut("job-1").unwrap().freeze_takes = Duration::from_millis(3);
    a.enter_slot(10, now_micros()).unwrap();
    pass(&mut a, 11);
    // Job 2 was never frozen: it goes by the slowest freeze of any job.
    assert!(a.lead(12) >= 3_000, "{}", a.lead(12));
    pass(&mut a, 12);
    assert!(a.lead(13) >= 3_000, "job 1 by its own: {}", a.lead(13));
    pass(&mut a, 13);
    // Job 2's own freezes were quick: its leaving does not pay for job 1's.
    assert!(a.lead(14) < 1_000, "job 2 by its own: {}", a.lead(14));
}

#[test]
fn a_leaver_slower_than_its_history_does_not_hold_the_entrants_back() {
    let mut a = applier(Mode::Gang);
    for slot in 10..=12 {
        pass(&mut a, slot);
    }
    // Both jobs froze at once so far; now job 1's next freeze is confirmed only after half a
    // second (a task of it waiting for a processor another process took).
    a.actuator_mut().jobs.get_mut("job-1").unwrap().freeze_takes = Duration::from_millis(500);
    let boundary = now_micros() + a.lead(13);
    a.leave_slot(13, boundary).unwrap();
    assert_eq!(a.leaving().collect::<Vec<_>>(), vec![1]);
    let r = a.enter_slot(13, boundary).unwrap();
    assert_eq!((jobs(&r.stopped), jobs(&r.started)), (vec![1], vec![2]));
    let (stopped, started) = (r.stopped[0].at_us, r.started[0].at_us);
    // Job 2 was thawed on the boundary, not after job 1's late confirmation; the record has
    // job 1 stopped when job 2 was let start (it runs none of its own code after). The clock
    // waited a little for the confirmation, not for it: the freeze holds, asked.
    assert!(stopped == boundary && started >= boundary, "{r:?}");
    assert!(
        now_micros() - boundary < 400_000,
        "the boundary waited for the confirmation"
    );
    assert_eq!(a.actuator().frozen(), vec!["job-1"]);
    // Its next lead follows its slow freeze, as far as it was watched.
    pass(&mut a, 14);
    assert!(a.lead(15) >= FREEZE_PATIENCE, "{}", a.lead(15));
}

/// A freeze not confirmed by its boundary is pending until it is: the node takes a job's
/// baseline for its skew only then (a task on its way to the freezer runs after the capture).
#[test]
fn a_freeze_confirmed_late_is_pending_until_it_is() {
    let mut a = applier(Mode::Gang);
    for slot in 10..=12 {
        pass(&mut a, slot);
    }
    assert!(!a.freeze_pending(1) && !a.freeze_pending(2));
    let takes = Duration::from_millis(300);
    a.actuator_mut().jobs.get_mut("job-1").unwrap().freeze_takes = takes;
    let boundary = now_micros() + a.lead(13);
    a.leave_slot(13, boundary).unwrap();
    a.enter_slot(13, boundary).unwrap();
    assert!(a.freeze_pending(1), "pending before its freeze took effect");
    assert!(!a.freeze_pending(2), "job 2 runs");
    std::thread::sleep(takes);
    assert!(!a.freeze_pending(1), "still pending after it took effect");
}

/// A job that no freezer can stop (`bench/workloads/unfreezable.c`: an exec waiting for good
/// in the kernel) leaves and enters its slots on time and holds no boundary, nor a freeze
/// asked on its own (a suspension).
#[test]
fn a_job_that_never_freezes_holds_no_boundary() {
    let mut a = applier(Mode::Gang);
    let never = Duration::from_secs(3);
    a.actuator_mut().jobs.get_mut("job-1").unwrap().freeze_takes = never;
    for slot in 10..=16 {
        let boundary = now_micros() + a.lead(slot);
        a.leave_slot(slot, boundary).unwrap();
        let r = a.enter_slot(slot, boundary).unwrap();
        let held = Duration::from_micros((now_micros() - boundary).max(0) as u64);
        assert!(held < never / 3, "slot {slot}: held {held:?}");
        let (runs, rests) = if slot % 2 == 0 { (1, 2) } else { (2, 1) };
        assert_eq!(jobs(&r.started), vec![runs], "slot {slot}");
        if slot > 10 {
            assert_eq!(jobs(&r.stopped), vec![rests], "slot {slot}");
        }
        assert_eq!(a.running().collect::<Vec<_>>(), vec![runs]);
        assert_eq!(a.actuator().frozen(), vec![format!("job-{rests}")]);
    }
    let asked = Instant::now();
    a.suspend(1).unwrap();
    assert!(asked.elapsed() < never / 3, "a suspension waited");
    assert_eq!(a.actuator().frozen(), vec!["job-1", "job-2"]);
}

#[test]
fn a_running_job_placed_again_runs_again_at_its_next_slot() {
    for mode in [Mode::Gang, Mode::Moderate] {
        let mut a = applier(mode);
        a.enter_slot(10, now_micros()).unwrap();
        assert_eq!(a.running().collect::<Vec<_>>(), vec![1], "{mode:?}");
        // Placed again by the controller (a class change) while it runs.
        a.admit(1, Some(&cosched_core::Partition::block(0, 2)), None)
            .unwrap();
        let r = a.enter_slot(12, now_micros()).unwrap();
        assert_eq!(jobs(&r.started), vec![1], "{mode:?}");
        if mode == Mode::Gang {
            assert_eq!(a.actuator().frozen(), vec!["job-2"]);
        }
    }
}

#[test]
fn other_modes_hold_nothing_ahead() {
    for mode in [Mode::Moderate, Mode::Implicit, Mode::Local] {
        let mut a = applier(mode);
        a.enter_slot(10, now_micros()).unwrap();
        assert_eq!(a.lead(11), 0, "{mode:?}");
        let calls_before = a.actuator().calls.len();
        leave(&mut a, 11);
        assert_eq!(a.actuator().calls.len(), calls_before, "{mode:?}");
    }
}

#[test]
fn moderate_moves_weight_and_pins_and_freezes_nothing() {
    let mut a = applier(Mode::Moderate);
    a.enter_slot(10, now_micros()).unwrap();
    let weight = |a: &Applier<Fake>, job: &str| a.actuator().jobs[job].weight;
    let spread = |a: &Applier<Fake>, job: &str| a.actuator().jobs[job].spread;
    assert_eq!(
        (weight(&a, "job-1"), weight(&a, "job-2")),
        (FAVOURED_WEIGHT, DISFAVOURED_WEIGHT)
    );
    assert!(spread(&a, "job-1") && !spread(&a, "job-2"));
    a.enter_slot(11, now_micros()).unwrap();
    assert_eq!(
        (weight(&a, "job-1"), weight(&a, "job-2")),
        (DISFAVOURED_WEIGHT, FAVOURED_WEIGHT)
    );
    assert!(!spread(&a, "job-1") && spread(&a, "job-2"));
    assert!(a.actuator().frozen().is_empty());
    a.release_all().unwrap();
    assert_eq!(
        (weight(&a, "job-1"), weight(&a, "job-2")),
        (NORMAL_WEIGHT, NORMAL_WEIGHT)
    );
    assert!(!spread(&a, "job-1") && !spread(&a, "job-2"));
    // A job that ends is let loose too.
    a.enter_slot(12, now_micros()).unwrap();
    assert_eq!(weight(&a, "job-2"), DISFAVOURED_WEIGHT);
    a.release(2).unwrap();
    assert_eq!(weight(&a, "job-2"), NORMAL_WEIGHT);
}

#[test]
fn one_rotation_switches_each_job_as_its_own_mode_says() {
    // Job 1 (slice 0) moderate, job 2 (slice 1) gang, in a machine whose mode is implicit.
    let mut a = mixed(Mode::Implicit, [Some(Mode::Moderate), Some(Mode::Gang)]);
    assert_eq!((a.mode_of(1), a.mode_of(2)), (Mode::Moderate, Mode::Gang));
    let weight = |a: &Applier<Fake>, job: &str| a.actuator().jobs[job].weight;
    a.enter_slot(10, now_micros()).unwrap();
    assert_eq!(weight(&a, "job-1"), FAVOURED_WEIGHT);
    assert_eq!(a.actuator().frozen(), vec!["job-2"]);
    // Only the gang job is held ahead of the boundary.
    assert_eq!(a.lead(11), 0, "job 1 leaves slot 11 by weight");
    a.enter_slot(11, now_micros()).unwrap();
    assert_eq!(weight(&a, "job-1"), DISFAVOURED_WEIGHT);
    assert!(a.actuator().frozen().is_empty());
    assert!(a.lead(12) > 0, "job 2, a gang, leaves at slot 12");
    // An auto job runs unswitched until its mode is chosen, then as that mode says.
    let mut a = applier(Mode::Auto);
    a.enter_slot(10, now_micros()).unwrap();
    assert_eq!(a.running().count(), 0);
    assert!(a.actuator().frozen().is_empty());
    a.set_mode(2, Mode::Gang).unwrap();
    assert_eq!(a.actuator().frozen(), vec!["job-2"], "not its slot");
    a.set_mode(1, Mode::Moderate).unwrap();
    a.enter_slot(12, now_micros()).unwrap();
    assert_eq!(a.running().collect::<Vec<_>>(), vec![1]);
    assert_eq!(weight(&a, "job-1"), FAVOURED_WEIGHT);
    a.enter_slot(13, now_micros()).unwrap();
    assert_eq!(a.running().collect::<Vec<_>>(), vec![2]);
    assert!(a.actuator().frozen().is_empty());
    assert_eq!(weight(&a, "job-1"), DISFAVOURED_WEIGHT);
    // Back to implicit (or released): what its mode did is undone.
    a.set_mode(1, Mode::Implicit).unwrap();
    assert_eq!(weight(&a, "job-1"), NORMAL_WEIGHT);
    a.release(2).unwrap();
    assert!(a.actuator().frozen().is_empty());
}

#[test]
fn an_implicit_job_beside_a_switched_one_is_held_in_its_slot_until_the_boundary() {
    // Job 1 (slice 0) gang, job 2 (slice 1) implicit.
    let mut a = mixed(Mode::Gang, [None, Some(Mode::Implicit)]);
    a.enter_slot(10, now_micros()).unwrap();
    assert_eq!(a.outsiders(10).into_iter().collect::<Vec<_>>(), vec![2]);
    assert!(a.outsiders(11).is_empty(), "its own slot");
    a.hold_outsider(2).unwrap();
    assert_eq!(a.actuator().frozen(), vec!["job-2"]);
    assert!(a.is_held(2) && !a.is_held(1), "only the outsider is held");
    // The boundary thaws it (its own slot, or another one's budget afresh).
    a.enter_slot(11, now_micros()).unwrap();
    assert_eq!(a.actuator().frozen(), vec!["job-1"]);
    a.enter_slot(12, now_micros()).unwrap();
    a.hold_outsider(2).unwrap();
    a.enter_slot(14, now_micros()).unwrap();
    assert_eq!(
        a.actuator().frozen(),
        Vec::<&str>::new(),
        "a later slot of job 1's thaws it too"
    );
    // Released, changing mode, or every job let go: a held job is never left frozen.
    a.hold_outsider(2).unwrap();
    a.release(2).unwrap();
    assert_eq!(a.actuator().frozen(), Vec::<&str>::new());
    a.admit(2, None, Some(Mode::Implicit)).unwrap();
    a.hold_outsider(2).unwrap();
    a.set_mode(2, Mode::Moderate).unwrap();
    assert_eq!(a.actuator().frozen(), Vec::<&str>::new());
    a.set_mode(2, Mode::Implicit).unwrap();
    a.hold_outsider(2).unwrap();
    a.release_all().unwrap();
    assert_eq!(a.actuator().frozen(), Vec::<&str>::new());
    assert!(!a.is_held(1) && !a.is_held(2));
    // Among implicit jobs alone nobody is an outsider: nothing to protect.
    let mut i = applier(Mode::Implicit);
    i.enter_slot(10, now_micros()).unwrap();
    assert!(i.outsiders(10).is_empty() && i.outsiders(11).is_empty());
    // An auto job being measured is unswitched, and an outsider in a gang's slot too.
    let mut m = mixed(Mode::Gang, [Some(Mode::Auto), None]);
    m.enter_slot(11, now_micros()).unwrap();
    assert_eq!(m.outsiders(11).into_iter().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn local_touches_nothing_and_released_jobs_are_thawed() {
    let mut a = applier(Mode::Local);
    let calls = a.actuator().calls.len();
    a.enter_slot(10, now_micros()).unwrap();
    a.enter_slot(11, now_micros()).unwrap();
    assert_eq!(a.actuator().calls.len(), calls);
    let mut g = applier(Mode::Gang);
    g.enter_slot(10, now_micros()).unwrap();
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
    cosched_cgroups::die_with_parent(&mut Command::new("sh"))
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh runs")
}

/// Nanoseconds a process has run on a CPU (`/proc/PID/schedstat`, first field); 0 once gone.
fn runtime_ns(pid: Pid) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// One look at both jobs: over [from, to] (CLOCK_REALTIME µs), how much CPU each job got.
struct Sample {
    from: i64,
    to: i64,
    a_ns: u64,
    b_ns: u64,
}

/// Samples for `window`, in 10 ms looks, how much CPU each job's processes get. (A running
/// task's runtime is brought up to date at each scheduler tick, every 4 ms at HZ=250: a look
/// must span a few.)
fn sample(a: &[Pid], b: &[Pid], window: Duration) -> Vec<Sample> {
    let total = |pids: &[Pid]| pids.iter().map(|&p| runtime_ns(p)).sum::<u64>();
    let mut samples = Vec::new();
    let end = Instant::now() + window;
    while Instant::now() < end {
        let (from, a0, b0) = (now_micros(), total(a), total(b));
        std::thread::sleep(Duration::from_millis(10));
        let (a1, b1, to) = (total(a), total(b), now_micros());
        samples.push(Sample {
            from,
            to,
            a_ns: a1.saturating_sub(a0),
            b_ns: b1.saturating_sub(b0),
        });
    }
    samples
}

/// Looks in which both jobs ran at least 2 ms, leaving out any look that overlaps a switch
/// (while one job is stopped and the other started, both legitimately run within one look).
/// CPU time, not the R state: a frozen task woken by a thaw shows R until it runs, though it
/// goes straight back to the freezer without running any of its own code.
fn overlapping(samples: &[Sample], switches: &[(i64, i64)]) -> (usize, usize) {
    let clear: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            !switches
                .iter()
                .any(|&(from, to)| s.from <= to && from <= s.to)
        })
        .collect();
    let both = clear
        .iter()
        .filter(|s| s.a_ns > 2_000_000 && s.b_ns > 2_000_000)
        .count();
    (clear.len(), both)
}

/// The control: without gang scheduling the same sampler sees both jobs running, so the test
/// below can fail. Four spinners, no applier.
fn control_overlaps() -> (usize, usize) {
    let mut spinners: Vec<Child> = (0..4)
        .map(|_| {
            cosched_cgroups::die_with_parent(&mut Command::new("sh"))
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap()
        })
        .collect();
    let pids: Vec<Pid> = spinners.iter().map(|c| c.id() as Pid).collect();
    let samples = sample(&pids[..2], &pids[2..], Duration::from_millis(500));
    for child in &mut spinners {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    overlapping(&samples, &[])
}

/// Two gangs on the clock: leavers frozen ahead of each boundary, entrants thawed on it.
struct Gangs {
    applier: Arc<Mutex<Applier<Cgroups>>>,
    stop: Arc<AtomicBool>,
    /// Each boundary's deadline and when its switch was done.
    switches: Arc<Mutex<Vec<(i64, i64)>>>,
    lateness: Samples,
    switch_us: Samples,
    outcome: Result<(), String>,
}

impl clock::SlotWork for Gangs {
    fn between(&mut self, _until: i64) -> bool {
        true
    }

    fn lead(&self, slot: i64) -> i64 {
        self.applier.lock().unwrap().lead(slot)
    }

    fn ahead_of(&mut self, slot: i64, boundary: i64) {
        if let Err(e) = self.applier.lock().unwrap().leave_slot(slot, boundary) {
            self.outcome = Err(e.to_string());
        }
    }

    fn boundary(&mut self, tick: clock::Tick) -> bool {
        self.lateness.record(tick.lateness());
        let result = self
            .applier
            .lock()
            .unwrap()
            .enter_slot(tick.slot, tick.deadline);
        self.switches
            .lock()
            .unwrap()
            .push((tick.deadline, now_micros()));
        match result {
            Ok(record) => self.switch_us.record(record.duration),
            Err(e) => self.outcome = Err(e.to_string()),
        }
        self.outcome.is_ok() && !self.stop.load(Ordering::Relaxed)
    }
}

#[test]
fn two_gangs_never_run_at_the_same_moment_and_both_finish() {
    cosched_os::require_root("the gang tests of real processes");
    let (control_looks, control_seen) = control_overlaps();
    assert!(
        control_seen > control_looks / 10,
        "the sampler failed to see plain Linux run both jobs: {control_seen} of {control_looks}"
    );
    let layout = Layout::detect().unwrap();
    let parent = format!("cosched-test-agent-{}", std::process::id());
    let mut cgroups = Cgroups::open(&layout, &parent, None).unwrap();
    let jobs: [(JobId, i32); 2] = [(1, 7), (2, 9)];
    let mut children = Vec::new();
    for (job, code) in jobs {
        cgroups.create(&job_group(job)).unwrap();
        let child = job_process(code);
        cgroups.add(&job_group(job), child.id() as Pid).unwrap();
        children.push(child);
    }
    let applier = Arc::new(Mutex::new(Applier::new(cgroups, Mode::Gang)));
    for (job, _) in jobs {
        applier.lock().unwrap().admit(job, None, None).unwrap();
    }
    for child in &mut children {
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    let quantum = 50_000;
    let rotation = Rotation::new(now_micros() / quantum * quantum, quantum);
    let first = rotation.next_boundary(now_micros()) + 1;
    let generation = Generation::follow(None, two_slices().plan(), first);
    applier.lock().unwrap().publish(generation);

    // The clock runs on a real-time thread, leavers frozen ahead of each boundary as the node
    // agent does it; this thread samples the processes meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let switches: Arc<Mutex<Vec<(i64, i64)>>> = Arc::default();
    let clock = {
        let mut gangs = Gangs {
            applier: applier.clone(),
            stop: stop.clone(),
            switches: switches.clone(),
            lateness: Samples::new(10_000),
            switch_us: Samples::new(10_000),
            outcome: Ok(()),
        };
        std::thread::spawn(move || {
            let realtime =
                cosched_os::realtime::make_realtime(cosched_os::realtime::CLOCK_PRIORITY);
            clock::drive(rotation, 1_000, &mut gangs);
            (
                realtime,
                gangs.lateness.summary(),
                gangs.switch_us.summary(),
                gangs.outcome,
            )
        })
    };
    let pids = |job| {
        applier
            .lock()
            .unwrap()
            .actuator()
            .pids(&job_group(job))
            .unwrap()
    };
    // Each job forks its second process in its first slot.
    let deadline = Instant::now() + Duration::from_secs(5);
    while (pids(1).len(), pids(2).len()) != (2, 2) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (a, b) = (pids(1), pids(2));
    // Sample while both jobs are still working.
    let samples = sample(&a, &b, Duration::from_millis(1200));
    let statuses: Vec<_> = children.iter_mut().map(|c| c.wait().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let (realtime, lateness, switch_us, outcome) = clock.join().unwrap();
    let (looks, seen) = overlapping(&samples, &switches.lock().unwrap());
    let mut applier = Arc::try_unwrap(applier).ok().unwrap().into_inner().unwrap();
    applier.release_all().unwrap();
    let mut cgroups = applier.into_actuator();
    for (job, _) in jobs {
        cgroups.remove(&job_group(job)).unwrap();
    }
    cgroups.close().unwrap();

    assert_eq!((a.len(), b.len()), (2, 2), "each job has its two processes");
    assert_eq!(outcome, Ok(()));
    assert!(
        realtime.is_ok(),
        "the clock thread could not get SCHED_FIFO: {realtime:?}"
    );
    assert!(looks > 20, "only {looks} looks clear of switches");
    assert_eq!(seen, 0, "both jobs ran at once in {seen} of {looks} looks");
    assert_eq!(
        statuses.iter().map(|s| s.code()).collect::<Vec<_>>(),
        vec![Some(7), Some(9)]
    );
    assert!(switch_us.count >= 20, "{switch_us:?}");
    eprintln!(
        "slot lateness µs {lateness:?}; switch µs {switch_us:?}; {looks} looks, control {control_seen} of {control_looks}"
    );
}
