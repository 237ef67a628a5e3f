//! Time limits (counted in time let run), class times, per-user limits and backfilling with
//! limits, through the harness.

use super::{Harness, INTERACTIVE_STRETCH};
use crate::ApiError;
use cosched_core::{Class, ClassTimes, JobId, Micros, TimeLimits, UserLimits, MICROS_PER_SEC};
use cosched_proto::api::JobView;
use cosched_proto::{Command, Ending, Event, ExitInfo, JobState, Pending, Role};
use std::collections::BTreeMap;

const UID: u32 = 1000;
const S: Micros = MICROS_PER_SEC;

/// `uid` submits a job of `procs` processors with a limit of `seconds`.
fn run_for(h: &mut Harness, uid: u32, procs: u32, seconds: Option<u64>) -> JobId {
    let mut run = Harness::request(procs, &["sleep", "1000"]);
    run.time_limit_s = seconds;
    h.controller
        .submit(&Harness::user(uid), run, None, h.now)
        .expect("taken")
}

fn view(h: &Harness, job: JobId) -> JobView {
    h.controller.jobs(false, Some(job), h.now).remove(0)
}

fn cancels(orders: &[(String, Command)]) -> Vec<JobId> {
    orders
        .iter()
        .filter_map(|(_, c)| match c {
            Command::Cancel { job } => Some(*job),
            _ => None,
        })
        .collect()
}

fn killed(job: JobId, signal: i32) -> Event {
    Event::Ended {
        job,
        ending: Ending {
            exit: ExitInfo {
                code: None,
                signal: Some(signal),
            },
            ..Ending::default()
        },
    }
}

/// Moves the clock on by `us` and lets the controller check limits.
fn tick(h: &mut Harness, us: Micros) -> Vec<JobId> {
    h.advance(us);
    h.controller.enforce_time_limits(h.now);
    cancels(&h.orders())
}

#[test]
fn a_job_alone_is_stopped_at_its_limit_and_ends_timeout() {
    let mut h = Harness::machine(2);
    let job = run_for(&mut h, UID, 2, Some(10));
    h.orders();
    assert!(tick(&mut h, 9_900_000).is_empty());
    assert_eq!(view(&h, job).time_left_us(), Some(100_000));
    assert_eq!(tick(&mut h, 200_000), [job]);
    assert!(h.stored(job).unwrap().timed_out);
    // It keeps its place until it ends (its grace runs on its processors), told only once.
    assert_eq!(view(&h, job).slices, [0]);
    assert!(tick(&mut h, S).is_empty());
    h.event(killed(job, 15));
    assert!(view(&h, job).slices.is_empty());
    let record = h.stored(job).unwrap();
    assert_eq!(record.status, JobState::Timeout);
    assert_eq!(record.run_us, 10_100_000);
    h.controller.audit().unwrap();
}

/// A job being stopped keeps its processors until it ends: a queued job starts then, not at
/// the cancel. Freed at the cancel, they let one user cancelling job after job have many in
/// their grace at once, each let loose (a helper's loop as nobody: 22 at once, root's gangs
/// left 24 % of the processors).
#[test]
fn a_cancelled_job_keeps_its_processors_until_it_ends() {
    let mut h = Harness::machine(2);
    let first = run_for(&mut h, UID, 2, None);
    run_for(&mut h, UID, 2, None);
    let queued = run_for(&mut h, UID, 2, None);
    assert_eq!(view(&h, queued).reason, Some(Pending::Resources));
    h.orders();
    h.controller
        .cancel(&Harness::user(UID), first, h.now)
        .unwrap();
    assert_eq!(Harness::starts(&h.orders()), [], "nothing in its place yet");
    h.advance(S);
    h.event(killed(first, 15));
    assert_eq!(Harness::starts(&h.orders()), [(queued, true)]);
    h.controller.audit().unwrap();
}

#[test]
fn time_frozen_in_another_slice_is_not_counted() {
    let mut h = Harness::machine(2);
    let limited = run_for(&mut h, UID, 2, Some(10));
    let other = run_for(&mut h, UID, 2, None);
    assert_eq!(view(&h, other).slices, [1], "two slices, one each");
    assert!(tick(&mut h, 10 * S).is_empty());
    let seen = view(&h, limited);
    assert_eq!((seen.run_us, seen.time_left_us()), (5 * S, Some(5 * S)));
    // Alone again, it runs in every slot.
    h.event(killed(other, 9));
    assert!(tick(&mut h, 4 * S).is_empty());
    assert_eq!(tick(&mut h, S), [limited]);
}

#[test]
fn a_suspended_job_spends_none_of_its_limit() {
    let mut h = Harness::machine(2);
    let job = run_for(&mut h, UID, 2, Some(10));
    let who = Harness::user(UID);
    assert!(tick(&mut h, 4 * S).is_empty());
    h.controller.suspend(&who, job, h.now).unwrap();
    assert!(tick(&mut h, 100 * S).is_empty());
    h.controller.resume(&who, job, h.now).unwrap();
    assert!(tick(&mut h, 5 * S).is_empty());
    assert_eq!(view(&h, job).run_us, 9 * S);
    assert_eq!(tick(&mut h, S), [job]);
}

#[test]
fn a_cancel_before_the_limit_ends_cancelled_not_timeout() {
    let mut h = Harness::machine(2);
    let job = run_for(&mut h, UID, 2, Some(10));
    h.controller
        .cancel(&Harness::user(UID), job, h.now)
        .unwrap();
    h.orders();
    assert!(tick(&mut h, 20 * S).is_empty(), "out of the rotation");
    h.event(killed(job, 15));
    assert_eq!(h.stored(job).unwrap().status, JobState::Cancelled);
}

#[test]
fn a_restarted_controller_counts_the_time_it_did_not_see_in_full() {
    let mut h = Harness::machine(2);
    let job = run_for(&mut h, UID, 2, Some(100));
    run_for(&mut h, UID, 2, None);
    // Half the slots for 20 s: 10 s, saved at the first check.
    assert!(tick(&mut h, 20 * S).is_empty());
    assert_eq!(h.stored(job).unwrap().run_us, 10 * S);
    // Jobs run unscheduled while no controller runs: 10 s more of run time.
    h.advance(10 * S);
    h.restart();
    assert_eq!(view(&h, job).run_us, 20 * S);
    h.controller.audit().unwrap();
}

#[test]
fn a_class_gives_its_default_and_refuses_more_than_its_most() {
    let mut h = Harness::machine(2);
    let batch = ClassTimes {
        default: Some(60 * S),
        max: Some(3600 * S),
    };
    h.set_limits(
        TimeLimits(BTreeMap::from([(Class::Batch, batch)])),
        UserLimits::default(),
    );
    let defaulted = run_for(&mut h, UID, 1, None);
    assert_eq!(h.stored(defaulted).unwrap().time_limit_us, Some(60 * S));
    let asked = run_for(&mut h, UID, 1, Some(600));
    assert_eq!(h.stored(asked).unwrap().time_limit_us, Some(600 * S));
    let mut run = Harness::request(1, &["true"]);
    run.time_limit_s = Some(7200);
    let refused = h.controller.submit(&Harness::user(UID), run, None, h.now);
    let Err(ApiError::Invalid(message)) = refused else {
        panic!("{refused:?}");
    };
    assert!(
        message.contains("batch job may run at most 01:00:00"),
        "{message}"
    );
}

#[test]
fn a_user_at_the_running_limit_waits_for_the_limit_and_others_do_not() {
    let mut h = Harness::machine(4);
    h.set_limits(
        TimeLimits::default(),
        UserLimits {
            running_jobs: Some(1),
            ..UserLimits::default()
        },
    );
    let first = run_for(&mut h, UID, 1, None);
    let second = run_for(&mut h, UID, 1, None);
    let stranger = run_for(&mut h, 2000, 1, None);
    let root = (0..2)
        .map(|_| run_for(&mut h, 0, 1, None))
        .collect::<Vec<_>>();
    let started: Vec<JobId> = Harness::starts(&h.orders())
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(started, [first, stranger, root[0], root[1]]);
    let waiting = view(&h, second);
    assert_eq!(
        (waiting.state, waiting.reason),
        (JobState::Queued, Some(Pending::Limit))
    );
    assert_eq!(view(&h, first).reason, None);
    h.controller.audit().unwrap();
    h.event(killed(first, 9));
    assert_eq!(Harness::starts(&h.orders()), [(second, true)]);
    assert_eq!(view(&h, second).reason, None);
}

#[test]
fn a_user_at_the_processor_limit_waits_and_a_raised_limit_lets_the_job_go() {
    let mut h = Harness::machine(4);
    let procs = |most| UserLimits {
        procs: Some(most),
        ..UserLimits::default()
    };
    h.set_limits(TimeLimits::default(), procs(2));
    // More than a user may ever hold: refused, not left waiting for ever.
    let refused = h.controller.submit(
        &Harness::user(UID),
        Harness::request(3, &["true"]),
        None,
        h.now,
    );
    let Err(ApiError::Invalid(message)) = refused else {
        panic!("{refused:?}");
    };
    assert!(message.contains("at most 2 (limits.procs)"), "{message}");
    run_for(&mut h, UID, 2, None);
    let over = run_for(&mut h, UID, 1, None);
    h.orders();
    assert_eq!(view(&h, over).reason, Some(Pending::Limit));
    // A reload that raises the limit releases it.
    h.set_limits(TimeLimits::default(), procs(3));
    assert_eq!(Harness::starts(&h.orders()), [(over, true)]);
}

#[test]
fn a_user_past_the_queued_limit_is_refused_with_the_limit_named() {
    let mut h = Harness::machine(4);
    h.set_limits(
        TimeLimits::default(),
        UserLimits {
            running_jobs: Some(1),
            queued_jobs: Some(1),
            procs: None,
        },
    );
    run_for(&mut h, UID, 1, None);
    run_for(&mut h, UID, 1, None);
    let refused = h.controller.submit(
        &Harness::user(UID),
        Harness::request(1, &["true"]),
        None,
        h.now,
    );
    let Err(ApiError::Busy(message)) = refused else {
        panic!("{refused:?}");
    };
    assert!(message.contains("limits.queued_jobs = 1"), "{message}");
    // Others, and root, are not bound by this user's count.
    run_for(&mut h, 2000, 1, None);
    run_for(&mut h, 0, 1, None);
}

#[test]
fn a_short_job_with_a_limit_backfills_ahead_of_a_wide_one_without_delaying_it() {
    for backfilling in [false, true] {
        let mut h = if backfilling {
            Harness::backfilling(4)
        } else {
            Harness::machine(4)
        };
        // Both slices hold a 3-processor job: the wide head waits for one to end.
        let first = run_for(&mut h, UID, 3, Some(100));
        run_for(&mut h, UID, 3, Some(100));
        let wide = run_for(&mut h, UID, 4, Some(100));
        let short = run_for(&mut h, UID, 1, Some(10));
        let started: Vec<JobId> = Harness::starts(&h.orders())
            .into_iter()
            .map(|s| s.0)
            .collect();
        assert!(!started.contains(&wide), "{started:?}");
        assert_eq!(started.contains(&short), backfilling, "{started:?}");
        let reason = view(&h, short).reason;
        assert_eq!(reason, (!backfilling).then_some(Pending::Priority));
        assert_eq!(view(&h, wide).reason, Some(Pending::Resources));
        h.controller.audit().unwrap();
        // The short job is done by the time the head's reservation comes: it starts then.
        tick(&mut h, 20 * S);
        h.event(killed(short, 9));
        h.event(killed(first, 9));
        let started: Vec<JobId> = Harness::starts(&h.orders())
            .into_iter()
            .map(|s| s.0)
            .collect();
        assert!(started.contains(&wide), "{started:?}");
    }
}

#[test]
fn memory_that_does_not_fit_beside_a_nodes_jobs_waits_and_more_than_a_node_is_refused() {
    const G: u64 = 1 << 30;
    let mut h = Harness::with_memory(2, 4 * G);
    let with_memory = |h: &mut Harness, procs, bytes| {
        let mut run = Harness::request(procs, &["sleep", "100"]);
        run.mem_bytes = Some(bytes);
        h.controller.submit(&Harness::user(UID), run, None, h.now)
    };
    let first = with_memory(&mut h, 2, 3 * G).unwrap();
    let second = with_memory(&mut h, 2, 2 * G).unwrap();
    let third = with_memory(&mut h, 2, G).unwrap();
    let started: Vec<JobId> = Harness::starts(&h.orders())
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(started, [first], "the second would page: it waits");
    assert_eq!(view(&h, second).reason, Some(Pending::Memory));
    // Strict order: the third would fit, but comes after the second.
    assert_eq!(view(&h, third).reason, Some(Pending::Priority));
    let refused = with_memory(&mut h, 1, 5 * G);
    let Err(ApiError::Invalid(message)) = refused else {
        panic!("{refused:?}");
    };
    assert!(message.starts_with("the job can never run"), "{message}");
    assert!(message.contains("memory"), "{message}");
    h.controller.audit().unwrap();
    h.event(killed(first, 9));
    let started = Harness::starts(&h.orders());
    assert_eq!(started, [(second, true), (third, true)], "3 GiB together");
}

/// `uid` submits a 1-processor interactive job.
fn interactive(h: &mut Harness, uid: u32) -> JobId {
    let mut run = Harness::request(1, &["sh"]);
    run.class = Some("interactive".into());
    h.controller
        .submit(&Harness::user(uid), run, None, h.now)
        .expect("taken")
}

/// Where the job is in the matrix: preempting (in every slice), or in a slice of its own.
fn roles(h: &Harness, job: JobId) -> Vec<Role> {
    let matrix = h.controller.matrix(h.now);
    let entries = matrix.slices.iter().flatten();
    let mut roles: Vec<Role> = entries.filter(|e| e.job == job).map(|e| e.role).collect();
    roles.dedup();
    roles
}

#[test]
fn a_suspend_and_resume_gives_an_interactive_job_no_second_preempting_stretch() {
    let mut h = Harness::configured(2, |c| c.interactive_preempts = true);
    let batch = run_for(&mut h, 0, 2, None);
    let interactive = interactive(&mut h, UID);
    let who = Harness::user(UID);
    assert_eq!(roles(&h, interactive), [Role::Preempting]);
    h.advance(INTERACTIVE_STRETCH);
    h.controller
        .settle_overdue(h.now - INTERACTIVE_STRETCH, h.now);
    assert_eq!(
        roles(&h, interactive),
        [Role::Own],
        "its stretch is over: a slice of its own"
    );
    h.controller.suspend(&who, interactive, h.now).unwrap();
    h.controller.resume(&who, interactive, h.now).unwrap();
    assert_eq!(
        roles(&h, interactive),
        [Role::Own],
        "the batch job is not frozen again"
    );
    assert_eq!(view(&h, batch).slices.len(), 1);
}

/// Each user's (root aside) interactive jobs preempt the batch jobs one at a time, and for
/// at most one stretch in any window of six: a chain of them, each cancelled before its
/// stretch ended, held root's gangs off for good (a helper's loop as nobody: root's two
/// gangs got 63 ms of CPU in 19 s). Past the share a job time-shares at once; another
/// user's and root's are not held to it.
#[test]
fn a_users_interactive_jobs_preempt_one_at_a_time_and_for_one_stretch_a_window() {
    let mut h = Harness::configured(4, |c| c.interactive_preempts = true);
    run_for(&mut h, 0, 4, None);
    // Two at once: the first preempts, the second time-shares.
    let first = interactive(&mut h, UID);
    let second = interactive(&mut h, UID);
    assert_eq!(roles(&h, first), [Role::Preempting]);
    assert_eq!(roles(&h, second), [Role::Own], "one preempting job a user");
    let others = interactive(&mut h, UID + 1);
    assert_eq!(roles(&h, others), [Role::Preempting]);
    let root = [interactive(&mut h, 0), interactive(&mut h, 0)];
    assert!(root.iter().all(|&job| roles(&h, job) == [Role::Preempting]));
    let preempts = |h: &Harness, job| roles(h, job).contains(&Role::Preempting);
    // The chain: the first cancelled after 9 s of its 10, the next submitted: it preempts
    // for the 1 s left of the share.
    h.advance(9 * S);
    h.event(killed(first, 15));
    let next = interactive(&mut h, UID);
    assert_eq!(roles(&h, next), [Role::Preempting], "9 s of 10 spent");
    h.advance(S - 1);
    h.controller
        .settle_overdue(h.now - INTERACTIVE_STRETCH, h.now);
    assert_eq!(roles(&h, next), [Role::Preempting], "within its 1 s");
    h.advance(1);
    h.controller
        .settle_overdue(h.now - INTERACTIVE_STRETCH, h.now);
    // Settled: in a slice of its own, or waiting for one (others preempt here).
    assert!(!preempts(&h, next), "its 1 s is over");
    let over = interactive(&mut h, UID);
    assert!(!preempts(&h, over), "10 s spent in the last 60 s");
    h.event(killed(next, 15));
    h.event(killed(over, 15));
    // Spent: [0, 10 s]; under 10 s in the window once it starts past 0.
    h.advance(50 * S);
    let still = interactive(&mut h, UID);
    assert!(!preempts(&h, still), "10 s spent in [0, 60 s]");
    h.event(killed(still, 15));
    h.advance(S);
    let again = interactive(&mut h, UID);
    assert_eq!(
        roles(&h, again),
        [Role::Preempting],
        "9 s spent in [1 s, 61 s]"
    );
    h.controller.audit().unwrap();
}

#[test]
fn a_suspended_or_idle_job_keeps_its_memory_until_it_ends() {
    const G: u64 = 1 << 30;
    let mut h = Harness::with_memory(2, 4 * G);
    let who = Harness::user(UID);
    let with_memory = |h: &mut Harness, bytes| {
        let mut run = Harness::request(1, &["sleep", "100"]);
        run.mem_bytes = Some(bytes);
        h.controller
            .submit(&Harness::user(UID), run, None, h.now)
            .unwrap()
    };
    let first = with_memory(&mut h, 3 * G);
    h.controller.suspend(&who, first, h.now).unwrap();
    // Its pages stay: a second 3 GiB job would page, so it waits, suspended or not.
    let second = with_memory(&mut h, 3 * G);
    assert_eq!(view(&h, second).reason, Some(Pending::Memory));
    h.controller.audit().unwrap();
    // Resumed, it takes its own memory back (nothing else could).
    h.controller.resume(&who, first, h.now).unwrap();
    assert_eq!(view(&h, first).state, JobState::Running);
    // Idle, the same; a restart holds it again for a suspended job.
    h.event(Event::Idle { job: first });
    assert_eq!(view(&h, second).reason, Some(Pending::Memory));
    h.event(Event::Woke { job: first });
    h.controller.suspend(&who, first, h.now).unwrap();
    h.restart();
    assert_eq!(view(&h, second).reason, Some(Pending::Memory));
    h.controller.audit().unwrap();
    // Its end frees it.
    h.orders();
    h.event(killed(first, 9));
    assert_eq!(Harness::starts(&h.orders()), [(second, true)]);
}
