//! The controller's rules, each tested through the harness (before, only as root, end to end
//! through the binary: crates/cli/tests).

use super::Harness;
use crate::clients::ClientId;
use crate::store::submitted_bytes;
use crate::ApiError;
use cosched_core::{Class, JobId};
use cosched_proto::api::{RegisterRequest, Reply};
use cosched_proto::JobState;
use cosched_proto::{Command, Ending, Event, ExitInfo, NodeChange};

const UID: u32 = 1000;

fn exited(job: JobId, code: i32) -> Event {
    Event::Ended {
        job,
        ending: Ending {
            exit: ExitInfo {
                code: Some(code),
                signal: None,
            },
            ..Ending::default()
        },
    }
}

fn status(h: &Harness, job: JobId) -> JobState {
    h.stored(job).expect("stored").status
}

/// The nodes each start order for `job` went to.
fn started_on(orders: &[(String, Command)], job: JobId) -> Vec<String> {
    orders
        .iter()
        .filter(|(_, c)| matches!(c, Command::Start { job: j, .. } if *j == job))
        .map(|(node, _)| node.clone())
        .collect()
}

#[test]
fn a_restarted_controller_takes_jobs_back_from_the_store_and_launches_none_twice() {
    let mut h = Harness::machine(4);
    let a = h.run(UID, 4).unwrap();
    let b = h.run(UID, 4).unwrap();
    let c = h.run(UID, 4).unwrap();
    let who = Harness::user(UID);
    h.controller.suspend(&who, b, h.now).unwrap();
    let orders = h.orders();
    assert_eq!(Harness::starts(&orders), [(a, true), (b, true), (c, true)]);
    let d = h.run(UID, 4).unwrap();
    assert_eq!(status(&h, d), JobState::Queued);

    h.advance(5_000_000);
    h.restart();
    h.controller.audit().unwrap();
    let orders = h.orders();
    let adopted =
        |job, suspended| orders.contains(&("local".into(), Command::Adopt { job, suspended }));
    assert!(
        adopted(a, false) && adopted(b, true) && adopted(c, false),
        "{orders:?}"
    );
    // Launched ones go back into the rotation without a launch; the one never launched is.
    let mut starts = Harness::starts(&orders);
    starts.sort();
    assert_eq!(starts, [(a, false), (c, false)]);
    assert_eq!(status(&h, b), JobState::Suspended);
    assert_eq!(status(&h, d), JobState::Queued);
    h.event(exited(a, 0));
    assert_eq!(Harness::starts(&h.orders()), [(d, true)]);
    // Ended jobs stay ended; the one launched since is adopted.
    h.restart();
    assert_eq!(status(&h, a), JobState::Completed);
    let orders = h.orders();
    assert!(orders.contains(&(
        "local".into(),
        Command::Adopt {
            job: d,
            suspended: false
        }
    )));
    assert!(
        !orders.iter().any(|(_, c)| c.job() == Some(a)),
        "{orders:?}"
    );
    h.controller.audit().unwrap();
}

#[test]
fn a_job_cancelled_before_a_restart_is_cancelled_again_and_stays_out_of_the_rotation() {
    let mut h = Harness::machine(2);
    let job = h.run(UID, 2).unwrap();
    let who = Harness::user(UID);
    h.controller.cancel(&who, job, h.now).unwrap();
    assert!(h
        .orders()
        .contains(&("local".into(), Command::Cancel { job })));
    // The job ignored SIGTERM, and the daemon died before its SIGKILL.
    h.restart();
    let orders = h.orders();
    let cancel = ("local".to_string(), Command::Cancel { job });
    assert!(orders.contains(&cancel), "{orders:?}");
    assert!(Harness::starts(&orders).is_empty(), "{orders:?}");
    h.controller.audit().unwrap();
    h.event(exited(job, 143));
    assert_eq!(status(&h, job), JobState::Cancelled);
}

#[test]
fn a_job_the_agent_finds_never_started_is_launched_when_next_placed() {
    let mut h = Harness::machine(2);
    let job = h.run(UID, 2).unwrap();
    h.restart();
    h.orders();
    h.event(Event::NotStarted { job });
    assert_eq!(Harness::starts(&h.orders()), [(job, true)]);
    // A word on a job it does not know changes nothing.
    h.event(Event::NotStarted { job: 99 });
    assert!(h.orders().is_empty());
    h.controller.audit().unwrap();
}

#[test]
fn a_job_cancelled_before_its_supervisor_started_ends_cancelled_when_the_agent_finds_it_never_started(
) {
    let mut h = Harness::machine(2);
    let job = h.run(UID, 2).unwrap();
    h.controller
        .cancel(&Harness::user(UID), job, h.now)
        .unwrap();
    // The agent held its start for the job's slot and was stopped before: after the restart it
    // knows nothing of it.
    h.restart();
    h.orders();
    h.event(Event::NotStarted { job });
    assert!(Harness::starts(&h.orders()).is_empty(), "started again");
    assert_eq!(status(&h, job), JobState::Cancelled);
    let record = h.stored(job).unwrap();
    assert_eq!(record.note.as_deref(), Some("cancelled before it started"));
    h.controller.audit().unwrap();
}

#[test]
fn nothing_is_acknowledged_before_the_store_has_it() {
    let mut h = Harness::machine(4);
    h.refuse_writes(true);
    let refused = h.run(UID, 2).unwrap_err();
    assert!(
        matches!(&refused, ApiError::Internal(m) if m.contains("cannot be recorded")),
        "{refused}"
    );
    assert!(h.orders().is_empty(), "no order for a job not recorded");
    assert!(
        h.controller.jobs(true, None, h.now).is_empty(),
        "no phantom job"
    );

    h.refuse_writes(false);
    let job = h.run(UID, 2).unwrap();
    h.orders();
    h.refuse_writes(true);
    let who = Harness::user(UID);
    let now = h.now;
    assert!(h.controller.cancel(&who, job, now).is_err());
    assert!(h.controller.suspend(&who, job, now).is_err());
    assert!(h.controller.set_class(&who, job, "standby", now).is_err());
    assert!(h.orders().is_empty(), "no order for a change not recorded");
    let record = h.controller.record_of(job).unwrap();
    assert_eq!(record.status, JobState::Running);
    assert_eq!(
        (record.cancel_requested, record.class.name()),
        (false, "batch")
    );
    h.controller.audit().unwrap();
}

#[test]
fn a_node_that_leaves_loses_its_jobs_and_lends_nothing_until_it_is_back() {
    let mut h = Harness::cluster(&[("a", 2), ("b", 2)]);
    let spread = h.run(UID, 4).unwrap();
    let on_a = h.run(UID, 2).unwrap();
    assert_eq!(started_on(&h.orders(), on_a), ["a"]);
    let now = h.now;
    h.controller.node_changed(NodeChange::Left("b".into()), now);
    assert_eq!(h.forgotten(), ["b"]);
    let lost = h.stored(spread).unwrap();
    assert_eq!(lost.status, JobState::Lost);
    assert!(lost.note.unwrap().contains("node b left the cluster"));
    assert_eq!(status(&h, on_a), JobState::Running);
    let waiting = h.run(UID, 4).unwrap();
    assert!(
        started_on(&h.orders(), waiting).is_empty(),
        "b's processors withheld"
    );
    h.controller.audit().unwrap();

    let back = Harness::node_info("b", 2, now);
    h.controller.node_changed(NodeChange::Joined(back), now);
    let orders = h.orders();
    assert!(orders
        .iter()
        .any(|(node, c)| node == "b" && matches!(c, Command::Publish { .. })));
    assert_eq!(started_on(&orders, waiting), ["a", "b"]);
    h.controller.audit().unwrap();
}

#[test]
fn a_node_joining_with_less_memory_than_memory_fit_assumes_is_not_used() {
    let mut h = Harness::with_memory(2, 1 << 30);
    let now = h.now;
    let mut small = Harness::node_info("small", 2, now);
    small.memory_bytes = Some(512 << 20);
    h.controller.node_changed(NodeChange::Joined(small), now);
    assert_eq!(h.controller.matrix(now).procs, 2, "refused");
    let mut big = Harness::node_info("big", 2, now);
    big.memory_bytes = Some(2 << 30);
    h.controller.node_changed(NodeChange::Joined(big), now);
    assert_eq!(h.controller.matrix(now).procs, 4);
    h.controller.audit().unwrap();
}

#[test]
fn a_started_job_stays_on_its_nodes_through_a_takeover_and_a_class_change() {
    let mut h = Harness::cluster(&[("a", 2), ("b", 2)]);
    let first = h.run(UID, 2).unwrap();
    let pinned = h.run(UID, 2).unwrap();
    assert_eq!(started_on(&h.orders(), pinned), ["b"]);
    h.event(exited(first, 0));
    assert_eq!(h.stored(pinned).unwrap().cpus_on_nodes, [2]);
    // Node a is free and first: a job placed afresh would go there, its processes are on b.
    h.restart();
    assert_eq!(started_on(&h.orders(), pinned), ["b"]);
    let who = Harness::user(UID);
    let now = h.now;
    h.controller
        .set_class(&who, pinned, "standby", now)
        .unwrap();
    assert!(started_on(&h.orders(), pinned).iter().all(|n| n == "b"));
    h.controller.audit().unwrap();
}

#[test]
fn a_job_root_suspended_is_resumed_by_root_only() {
    let mut h = Harness::machine(4);
    let job = h.run(UID, 2).unwrap();
    let (owner, root) = (Harness::user(UID), Harness::user(0));
    let now = h.now;
    h.controller.suspend(&root, job, now).unwrap();
    let refused = h.controller.resume(&owner, job, now);
    assert!(
        matches!(&refused, Err(ApiError::Forbidden(m)) if m.contains("suspended by root")),
        "{refused:?}"
    );
    // Survives a restart: the hold is in the record.
    h.restart();
    assert!(h.controller.resume(&owner, job, h.now).is_err());
    h.controller.resume(&root, job, h.now).unwrap();
    // The owner's own suspension is the owner's to lift.
    h.controller.suspend(&owner, job, h.now).unwrap();
    h.controller.resume(&owner, job, h.now).unwrap();
}

#[test]
fn owners_may_lower_a_class_and_only_root_raise_it() {
    let mut h = Harness::machine(4);
    let job = h.run(UID, 2).unwrap();
    let (owner, other, root) = (Harness::user(UID), Harness::user(UID + 1), Harness::user(0));
    let now = h.now;
    let c = &mut h.controller;
    assert_eq!(
        c.set_class(&owner, job, "standby", now).unwrap(),
        format!("job {job}: class batch -> standby")
    );
    assert!(matches!(
        c.set_class(&owner, job, "batch", now),
        Err(ApiError::Forbidden(_))
    ));
    assert!(matches!(
        c.set_class(&other, job, "standby", now),
        Err(ApiError::NotOwner { .. })
    ));
    assert!(matches!(
        c.set_class(&owner, job, "urgent", now),
        Err(ApiError::Invalid(_))
    ));
    c.set_class(&root, job, "interactive", now).unwrap();
    assert_eq!(h.stored(job).unwrap().class, Class::Interactive);
    let mut express = Harness::request(1, &["true"]);
    express.class = Some("express".into());
    let refused = h.controller.submit(&owner, express.clone(), None, now);
    assert!(matches!(refused, Err(ApiError::Forbidden(_))));
    h.controller.submit(&root, express, None, now).unwrap();
    h.event(exited(job, 0));
    let ended = h.controller.set_class(&owner, job, "standby", now);
    assert!(matches!(ended, Err(ApiError::WrongState { .. })));
    h.controller.audit().unwrap();
}

fn register(procs: u32) -> RegisterRequest {
    RegisterRequest {
        procs,
        node_count: None,
        class: None,
        name: None,
        join_within_s: None,
    }
}

#[test]
fn registration_is_refused_when_off_on_a_cluster_or_with_a_bad_join_time() {
    let who = Harness::user(UID);
    let mut cluster = Harness::cluster(&[("a", 2), ("b", 2)]);
    let refused = cluster.controller.register(&who, register(1), 0);
    assert!(matches!(refused, Err(ApiError::Invalid(m)) if m.contains("one machine only")));
    let mut h = Harness::machine(2);
    let mut late = register(1);
    late.join_within_s = Some(0);
    assert!(matches!(
        h.controller.register(&who, late, 0),
        Err(ApiError::Invalid(_))
    ));
    h.settings.registration = None;
    h.restart();
    let off = h.controller.register(&who, register(1), 0);
    assert!(matches!(off, Err(ApiError::Forbidden(m)) if m.contains("--allow-registration")));
}

#[test]
fn a_registrant_hears_when_its_job_runs_and_processes_join_only_its_owners_running_job() {
    let mut h = Harness::machine(2);
    let who = Harness::user(UID);
    let now = h.now;
    let plain = h.run(UID, 2).unwrap();
    h.run(UID, 2).unwrap();
    let job = h.controller.register(&who, register(2), now).unwrap();
    let registrant: ClientId = h.client();
    h.controller.wait_start(&who, job, registrant).unwrap();
    assert!(h.heard(registrant).is_empty(), "queued: parked");
    let asker = h.client();
    let early = h.controller.proc_add(&who, job, 77, asker);
    assert!(matches!(early, Err(ApiError::Invalid(m)) if m.contains("not running yet")));
    h.event(exited(plain, 0));
    assert!(matches!(h.heard(registrant)[..], [Reply::Started { job: j, .. }] if j == job));
    let holder = h.orders().into_iter().find_map(|(_, c)| match c {
        Command::Start {
            job: j,
            launch: Some(launch),
            ..
        } if j == job => Some(launch),
        _ => None,
    });
    assert!(
        holder.unwrap().holder,
        "a registered job's process is a holder"
    );

    let plain = h.controller.proc_add(&who, plain, 77, asker);
    assert!(matches!(
        plain,
        Err(ApiError::Invalid(_)) | Err(ApiError::WrongState { .. })
    ));
    let other = h
        .controller
        .proc_add(&Harness::user(UID + 1), job, 77, asker);
    assert!(matches!(other, Err(ApiError::NotOwner { .. })));
    h.controller.proc_add(&who, job, 77, asker).unwrap();
    let request = h.orders().into_iter().find_map(|(_, c)| match c {
        Command::Join {
            job: j,
            pid: 77,
            request,
            ..
        } if j == job => Some(request),
        _ => None,
    });
    h.event(Event::Joined {
        job,
        pid: 77,
        request: request.unwrap(),
        refusal: None,
    });
    assert_eq!(
        h.heard(asker),
        [Reply::done(format!("process 77 joined job {job}"))]
    );
    // One user's joins in flight are bounded: each holds its client.
    for _ in 0..64 {
        let client = h.client();
        h.controller.proc_add(&who, job, 78, client).unwrap();
    }
    let client = h.client();
    let busy = h.controller.proc_add(&who, job, 78, client);
    assert!(matches!(busy, Err(ApiError::Busy(_))));
    h.controller
        .proc_add(&Harness::user(0), job, 78, client)
        .unwrap();

    h.controller.job_end(&who, job, now).unwrap();
    assert!(h
        .orders()
        .contains(&("local".into(), Command::Finish { job })));
    assert_eq!(status(&h, job), JobState::Idle);
    h.controller.audit().unwrap();
}

#[test]
fn one_user_may_have_at_most_so_many_unfinished_jobs() {
    let mut h = Harness::machine(1);
    for _ in 0..crate::controller::MAX_UNFINISHED_PER_UID {
        h.run(UID, 1).unwrap();
    }
    let busy = h.run(UID, 1).unwrap_err();
    assert!(busy.to_string().contains("too many queued jobs"), "{busy}");
    h.run(UID + 1, 1).unwrap();
    h.run(0, 1).unwrap();
    h.controller.audit().unwrap();
}

#[test]
fn one_users_unfinished_jobs_hold_at_most_64_mib_of_commands() {
    let mut h = Harness::machine(1);
    let mut big = Harness::request(1, &["true"]);
    big.argv.extend((0..64).map(|_| "x".repeat(64 << 10)));
    let bytes = submitted_bytes(&big.argv, &big.env, &big.cwd);
    let fit = crate::controller::MAX_SUBMITTED_BYTES_PER_UID / bytes;
    let (who, root) = (Harness::user(UID), Harness::user(0));
    let mut jobs = Vec::new();
    for _ in 0..fit {
        jobs.push(h.controller.submit(&who, big.clone(), None, h.now).unwrap());
    }
    let busy = h
        .controller
        .submit(&who, big.clone(), None, h.now)
        .unwrap_err();
    assert!(busy.to_string().contains("too many queued bytes"), "{busy}");
    h.controller
        .submit(&root, big.clone(), None, h.now)
        .unwrap();
    // An ended job's command no longer counts: the user may submit again.
    h.event(exited(jobs[0], 0));
    assert!(h.stored(jobs[0]).unwrap().argv_cut);
    h.controller.submit(&who, big, None, h.now).unwrap();
}

#[test]
fn a_waiting_client_hears_the_end_and_a_late_one_at_once() {
    let mut h = Harness::machine(2);
    let who = Harness::user(UID);
    let job = h.run(UID, 2).unwrap();
    let early = h.client();
    h.controller.wait(&who, job, None, early).unwrap();
    assert!(h.heard(early).is_empty());
    h.event(exited(job, 5));
    let late = h.client();
    h.controller.wait(&who, job, None, late).unwrap();
    for client in [early, late] {
        let heard = h.heard(client);
        assert!(
            matches!(&heard[..], [Reply::Ended { exit: Some(e), .. }] if e.code == Some(5)),
            "{heard:?}"
        );
    }
}

#[test]
fn an_end_the_store_refuses_is_acted_on_but_changes_memory_only_once_stored() {
    let mut h = Harness::machine(2);
    let who = Harness::user(UID);
    let job = h.run(UID, 2).unwrap();
    let waiter = h.client();
    h.controller.wait(&who, job, None, waiter).unwrap();
    h.orders();
    h.refuse_writes(true);
    h.event(exited(job, 5));
    // Its processes are gone and its supervisor keeps the exit status: the processors are
    // free, the agent hears the end is not stored, the waiter hears how it ended.
    assert!(h
        .orders()
        .contains(&("local".into(), Command::Ended { job, stored: false })));
    assert!(
        matches!(&h.heard(waiter)[..], [Reply::Ended { exit: Some(e), .. }] if e.code == Some(5))
    );
    let next = h.client();
    let refused = h.controller.cancel(&who, job, h.now);
    assert!(
        matches!(refused, Err(ApiError::WrongState { .. })),
        "{refused:?}"
    );
    h.controller.wait(&who, job, None, next).unwrap();
    assert!(matches!(&h.heard(next)[..], [Reply::Ended { .. }]));
    // Memory still holds what the store has.
    assert_eq!(h.controller.record_of(job), h.stored(job).as_ref());
    assert_eq!(status(&h, job), JobState::Running);
    h.controller.audit().unwrap();
    h.controller.retry_unsaved();
    assert_eq!(status(&h, job), JobState::Running);

    h.refuse_writes(false);
    h.controller.retry_unsaved();
    assert!(h
        .orders()
        .contains(&("local".into(), Command::Stored { job })));
    let stored = h.stored(job).unwrap();
    assert_eq!(
        (stored.status, stored.exit.unwrap().code),
        (JobState::Failed, Some(5))
    );
    assert_eq!(h.controller.record_of(job), Some(&stored));
    assert!(!h.controller.has_unsaved());
    h.controller.audit().unwrap();
}
