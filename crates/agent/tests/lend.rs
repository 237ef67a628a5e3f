//! Blocked gangs give their processors away (`Applier::lend`), on a fake actuator: only a
//! blocked job's processors go, each job's on its own, to the slices that follow, and the next
//! boundary takes them back as usual.

use cosched_agent::*;
use cosched_cgroups::{Actuator, Fake};
use cosched_core::{Config, Generation, JobRequest, Machine, Scheduler, Shape};
use cosched_os::now_micros;
use std::collections::BTreeSet;

/// `sizes[i]` processors for job `i + 1` on a 2-processor machine at MPL 2, no alternates:
/// first fit puts the jobs in submission order, a new slice when the first is full.
fn applier(mode: Mode, sizes: &[u32]) -> Applier<Fake> {
    let config = Config {
        mpl: 2,
        alternates: false,
        ..Config::default()
    };
    let mut s = Scheduler::new(Machine::line(2).unwrap(), config).unwrap();
    let mut fake = Fake::default();
    let jobs: Vec<u64> = (1..=sizes.len() as u64).collect();
    for (&job, &size) in jobs.iter().zip(sizes) {
        s.submit(JobRequest::new(job, Shape::Count(size)), 0)
            .unwrap();
        fake.create(&job_group(job)).unwrap();
    }
    let mut a = Applier::new(fake, mode);
    for &job in &jobs {
        a.admit(job, None, None).unwrap();
    }
    a.publish(Generation::follow(None, s.plan(), 10));
    a
}

fn lend(a: &mut Applier<Fake>, slot: i64, blocked: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let blocked: BTreeSet<u64> = blocked.iter().copied().collect();
    let r = a.lend(slot, &blocked).unwrap();
    let started = r.started.iter().map(|m| m.job).collect();
    (started, r.blocked)
}

fn running(a: &Applier<Fake>) -> Vec<u64> {
    a.running().collect()
}

#[test]
fn each_blocked_jobs_processors_go_on_their_own_and_come_back_at_the_boundary() {
    // Slice 0: jobs 1 (CPU 0) and 2 (CPU 1); slice 1: jobs 3 (CPU 0) and 4 (CPU 1).
    let mut a = applier(Mode::Gang, &[1, 1, 1, 1]);
    a.enter_slot(10, now_micros()).unwrap();
    assert_eq!(running(&a), vec![1, 2]);
    assert_eq!(lend(&mut a, 10, &[]), (vec![], vec![]));
    assert_eq!(lend(&mut a, 10, &[1]), (vec![3], vec![1]));
    assert_eq!(running(&a), vec![1, 2, 3], "the blocked job stays thawed");
    assert_eq!(a.actuator().frozen(), vec!["job-4"]);
    // Job 1's processor is taken: nothing more for it; job 2's goes to job 4.
    assert_eq!(lend(&mut a, 10, &[1]), (vec![], vec![]));
    assert_eq!(lend(&mut a, 10, &[2]), (vec![4], vec![2]));
    assert!(a.actuator().frozen().is_empty());
    // The next boundary is slice 1's: the borrowers run on, the lenders stop.
    let r = a.enter_slot(11, now_micros()).unwrap();
    let stopped: Vec<u64> = r.stopped.iter().map(|m| m.job).collect();
    assert_eq!((stopped, r.started.len()), (vec![1, 2], 0));
    assert_eq!(a.actuator().frozen(), vec!["job-1", "job-2"]);
    // Lent in slice 1's slot, job 1 runs until slice 0's boundary, where it belongs anyway.
    assert_eq!(lend(&mut a, 11, &[3]), (vec![1], vec![3]));
    let r = a.enter_slot(12, now_micros()).unwrap();
    let moved = |m: &[cosched_proto::JobMoment]| m.iter().map(|m| m.job).collect::<Vec<_>>();
    assert_eq!(
        (moved(&r.stopped), moved(&r.started)),
        (vec![3, 4], vec![2])
    );
    assert_eq!(running(&a), vec![1, 2]);
}

#[test]
fn a_borrower_needs_every_one_of_its_processors_blocked() {
    // Slice 0: jobs 1 (CPU 0) and 2 (CPU 1); slice 1: job 3 on both.
    let mut a = applier(Mode::Gang, &[1, 1, 2]);
    a.enter_slot(10, now_micros()).unwrap();
    assert_eq!(lend(&mut a, 10, &[1]), (vec![], vec![]));
    assert_eq!(lend(&mut a, 10, &[3]), (vec![], vec![]), "not running");
    assert_eq!(lend(&mut a, 10, &[1, 2]), (vec![3], vec![1, 2]));
    assert!(a.actuator().frozen().is_empty());
    // At slice 1's boundary the borrower runs on and the lenders stop.
    a.enter_slot(11, now_micros()).unwrap();
    assert_eq!(running(&a), vec![3]);
}

#[test]
fn moderate_jobs_lend_and_borrow_by_weight() {
    let mut a = applier(Mode::Moderate, &[1, 1, 1, 1]);
    a.enter_slot(10, now_micros()).unwrap();
    assert_eq!(lend(&mut a, 10, &[1, 2]), (vec![3, 4], vec![1, 2]));
    assert_eq!(running(&a), vec![1, 2, 3, 4]);
    let weight = |job: u64| a.actuator().jobs[&*job_group(job)].weight;
    assert_eq!(weight(3), FAVOURED_WEIGHT);
    assert!(a.actuator().frozen().is_empty());
}

#[test]
fn an_implicit_job_asleep_lends_its_slot_to_a_gang_and_is_never_frozen() {
    // Slice 0: job 1 (implicit, CPU 0) and job 2 (gang, CPU 1); slice 1: jobs 3 and 4 (gang).
    let mut a = applier(Mode::Gang, &[1, 1, 1, 1]);
    a.set_mode(1, Mode::Implicit).unwrap();
    assert_eq!(a.mode_of(1), Mode::Implicit);
    a.enter_slot(10, now_micros()).unwrap();
    assert_eq!(running(&a), vec![2], "an implicit job is not switched");
    assert_eq!(
        a.slot_holders(10).into_iter().collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(lend(&mut a, 10, &[1]), (vec![3], vec![1]));
    assert_eq!(a.actuator().frozen(), vec!["job-4"]);
    // Its own slot or another's: never frozen.
    a.enter_slot(11, now_micros()).unwrap();
    assert_eq!(a.actuator().frozen(), vec!["job-2"]);
    assert_eq!(lend(&mut a, 11, &[1]), (vec![], vec![]), "not its slot");
}

#[test]
fn a_lender_still_blocked_stays_loose_past_its_slot_until_held() {
    // Slice 0: jobs 1 (CPU 0) and 2 (CPU 1); slice 1: jobs 3 (CPU 0) and 4 (CPU 1).
    let mut a = applier(Mode::Gang, &[1, 1, 1, 1]);
    a.enter_slot(10, now_micros()).unwrap();
    assert_eq!(lend(&mut a, 10, &[1]), (vec![3], vec![1]));
    assert_eq!(a.lenders().collect::<Vec<_>>(), vec![1]);
    a.keep_loose(1).unwrap();
    let weight = |a: &Applier<Fake>| a.actuator().jobs["job-1"].weight;
    assert_eq!(weight(&a), FAVOURED_WEIGHT, "its wakeups served at once");
    assert_eq!(
        a.lead(11),
        1_000,
        "job 2 leaves ahead; job 1 does not leave"
    );
    let r = a.enter_slot(11, now_micros()).unwrap();
    let stopped: Vec<u64> = r.stopped.iter().map(|m| m.job).collect();
    assert_eq!(stopped, vec![2], "the loose lender is not stopped");
    assert_eq!(a.actuator().frozen(), vec!["job-2"]);
    assert_eq!(a.loose().collect::<Vec<_>>(), vec![1]);
    assert_eq!(a.lenders().count(), 0, "a new slot has no lenders yet");
    // Over its budget it is frozen until its own slot, which takes it back as usual.
    let r = a.hold_loose(11, 1).unwrap();
    assert_eq!(r.stopped.iter().map(|m| m.job).collect::<Vec<_>>(), vec![1]);
    assert_eq!(a.actuator().frozen(), vec!["job-1", "job-2"]);
    assert_eq!(a.loose().count(), 0);
    assert_eq!(weight(&a), NORMAL_WEIGHT);
    let r = a.enter_slot(12, now_micros()).unwrap();
    assert_eq!(
        r.started.iter().map(|m| m.job).collect::<Vec<_>>(),
        vec![1, 2]
    );
    // Kept loose again, its own slot coming round takes it back without a stop.
    assert_eq!(lend(&mut a, 12, &[1]), (vec![3], vec![1]));
    a.keep_loose(1).unwrap();
    a.enter_slot(13, now_micros()).unwrap();
    a.enter_slot(14, now_micros()).unwrap();
    assert_eq!(running(&a), vec![1, 2]);
    assert_eq!(a.loose().count(), 0);
    assert_eq!(
        weight(&a),
        NORMAL_WEIGHT,
        "back in its slot, at normal weight"
    );
    assert!(a.actuator().frozen().contains(&"job-3"));
}
