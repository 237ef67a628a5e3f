//! Random sequences of requests, agents' events, store failures and restarts through the
//! controller, its invariants checked after every step: nothing acknowledged before it is
//! stored, no processor double-booked, every job queued or running held by the core (placed
//! or queued) with its record stored (`Controller::audit`).

use super::Harness;
use crate::{ApiError, Controller};
use cosched_core::{JobId, Micros, TimeLimits, UserLimits};
use cosched_os::unix::Credentials;
use cosched_proto::{Ending, Event, ExitInfo, NodeChange};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    /// A user (0 is root) submits a job of `procs` in a class, with a time limit or not.
    Run {
        user: u32,
        procs: u32,
        class: usize,
        limit_s: Option<u64>,
        /// GiB per node it asks for.
        mem_gib: Option<u64>,
    },
    /// The policy's per-user limits change (a reload).
    Limits {
        running_jobs: Option<u32>,
        procs: Option<u32>,
    },
    Cancel(usize),
    Suspend(usize),
    Resume(usize),
    Class(usize, usize),
    Exit(usize),
    Idle(usize),
    Woke(usize),
    NotStarted(usize),
    /// Node `b` leaves or comes back.
    Node(bool),
    /// The store refuses writes from now on (or takes them again).
    Refuse(bool),
    Advance(Micros),
    Restart,
}

const CLASSES: [&str; 4] = ["express", "interactive", "batch", "standby"];

fn step() -> impl Strategy<Value = Step> {
    let job = 0usize..16;
    prop_oneof![
        4 => (0u32..3, 1u32..=4, 1usize..4, prop::option::of(1u64..5), prop::option::of(1u64..4))
            .prop_map(|(user, procs, class, limit_s, mem_gib)| Step::Run { user, procs, class, limit_s, mem_gib }),
        1 => (prop::option::of(1u32..3), prop::option::of(1u32..5))
            .prop_map(|(running_jobs, procs)| Step::Limits { running_jobs, procs }),
        1 => job.clone().prop_map(Step::Cancel),
        1 => job.clone().prop_map(Step::Suspend),
        1 => job.clone().prop_map(Step::Resume),
        1 => (job.clone(), 0usize..4).prop_map(|(j, c)| Step::Class(j, c)),
        3 => job.clone().prop_map(Step::Exit),
        1 => job.clone().prop_map(Step::Idle),
        1 => job.clone().prop_map(Step::Woke),
        1 => job.prop_map(Step::NotStarted),
        1 => any::<bool>().prop_map(Step::Node),
        1 => prop::bool::weighted(0.3).prop_map(Step::Refuse),
        1 => (0i64..3_000_000).prop_map(Step::Advance),
        1 => Just(Step::Restart),
    ]
}

fn user(index: u32) -> u32 {
    if index == 0 {
        0
    } else {
        1000 + index
    }
}

/// Carries out one step; `jobs` are the ids handed out, picked from by index.
fn take(h: &mut Harness, jobs: &mut Vec<JobId>, step: &Step) -> Result<(), TestCaseError> {
    let pick = |i: usize| jobs.get(i % jobs.len().max(1)).copied();
    let now = h.now;
    // As the daemon does before every request.
    if h.controller.has_unsaved() {
        h.controller.retry_unsaved();
    }
    match *step {
        Step::Run {
            user: u,
            procs,
            class,
            limit_s,
            mem_gib,
        } => {
            let mut run = Harness::request(procs, &["sleep", "1"]);
            run.class = Some(CLASSES[class].into());
            run.time_limit_s = limit_s;
            run.mem_bytes = mem_gib.map(|g| g << 30);
            let who = Harness::user(user(u));
            if let Ok(job) = h.controller.submit(&who, run, None, now) {
                prop_assert!(
                    h.stored(job).is_some(),
                    "job {job} acknowledged, not stored"
                );
                jobs.push(job);
            }
        }
        Step::Cancel(i) => act(h, pick(i), |c, who, job| c.cancel(who, job, now)),
        Step::Suspend(i) => act(h, pick(i), |c, who, job| c.suspend(who, job, now)),
        Step::Resume(i) => act(h, pick(i), |c, who, job| c.resume(who, job, now)),
        Step::Class(i, class) => act(h, pick(i), |c, who, job| {
            c.set_class(who, job, CLASSES[class], now)
        }),
        Step::Exit(i) | Step::Idle(i) | Step::Woke(i) | Step::NotStarted(i) => {
            let Some(job) = pick(i) else { return Ok(()) };
            h.event(match *step {
                Step::Exit(_) => Event::Ended {
                    job,
                    ending: Ending {
                        exit: ExitInfo {
                            code: Some(0),
                            signal: None,
                        },
                        ..Ending::default()
                    },
                },
                Step::Idle(_) => Event::Idle { job },
                Step::Woke(_) => Event::Woke { job },
                _ => Event::NotStarted { job },
            });
        }
        Step::Node(leaves) => {
            let change = match leaves {
                true => NodeChange::Left("b".into()),
                false => NodeChange::Joined(Harness::node_info("b", 2, now)),
            };
            h.controller.node_changed(change, now);
        }
        Step::Limits {
            running_jobs,
            procs,
        } => {
            let limits = UserLimits {
                running_jobs,
                procs,
                queued_jobs: None,
            };
            h.set_limits(TimeLimits::default(), limits);
        }
        Step::Refuse(refuse) => h.refuse_writes(refuse),
        Step::Advance(us) => {
            // As the daemon's limits thread does.
            h.advance(us);
            h.controller.enforce_time_limits(h.now);
        }
        Step::Restart => {
            // A controller starts only over a store it can read and write.
            h.refuse_writes(false);
            h.restart();
        }
    }
    h.controller.audit().map_err(TestCaseError::fail)
}

/// A request on `job` by its owner; refusals are the controller's to make.
fn act(
    h: &mut Harness,
    job: Option<JobId>,
    request: impl FnOnce(&mut Controller, &Credentials, JobId) -> Result<String, ApiError>,
) {
    if let Some(job) = job {
        let who = Harness::user(h.stored(job).map_or(0, |r| r.owner.uid));
        let _ = request(&mut h.controller, &who, job);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_step_keeps_the_controllers_invariants(steps in prop::collection::vec(step(), 1..60)) {
        let mut h = Harness::cluster(&[("a", 2), ("b", 2)]);
        let mut jobs = Vec::new();
        for step in &steps {
            take(&mut h, &mut jobs, step)?;
        }
    }

    #[test]
    fn with_node_memory(steps in prop::collection::vec(step(), 1..60)) {
        let mut h = Harness::with_memory(4, 4 << 30);
        let mut jobs = Vec::new();
        for step in steps.iter().filter(|s| !matches!(s, Step::Node(_))) {
            take(&mut h, &mut jobs, step)?;
        }
    }

    #[test]
    fn on_one_machine_too(steps in prop::collection::vec(step(), 1..60)) {
        let mut h = Harness::machine(4);
        let mut jobs = Vec::new();
        for step in steps.iter().filter(|s| !matches!(s, Step::Node(_))) {
            take(&mut h, &mut jobs, step)?;
        }
    }
}
