//! Stalled jobs: the nodes' reports, the job's view, and the stall action.

use super::history_tests::{code, ended};
use super::Harness;
use cosched_core::{JobId, Micros, MICROS_PER_SEC};
use cosched_proto::{Command, Event, JobState, NodeChange, StallAction};

const UID: u32 = 1000;
const S: Micros = MICROS_PER_SEC;

fn stalled(job: JobId, node: &str, since_us: Option<Micros>) -> Event {
    Event::Stalled {
        job,
        node: node.into(),
        since_us,
    }
}

fn since(h: &Harness, job: JobId) -> Option<Micros> {
    h.controller.jobs(false, Some(job), h.now)[0].stalled_since_us
}

#[test]
fn a_job_is_stalled_once_every_node_of_it_says_so() {
    let mut h = Harness::cluster(&[("a", 2), ("b", 2)]);
    let job = h.run(UID, 4).unwrap();
    h.advance(10 * S);
    h.event(stalled(job, "a", Some(2 * S)));
    assert_eq!(since(&h, job), None, "node b still sees work");
    // A node the job does not run on has no say.
    h.event(stalled(job, "c", Some(S)));
    assert_eq!(since(&h, job), None);
    h.event(stalled(job, "b", Some(3 * S)));
    assert_eq!(since(&h, job), Some(3 * S), "since the later of the two");
    let view = &h.controller.jobs(false, Some(job), h.now)[0];
    assert_eq!(
        view.state,
        JobState::Running,
        "the state stays: --json is stable"
    );
    h.event(stalled(job, "a", None));
    assert_eq!(since(&h, job), None, "node a sees work again");
    assert!(
        !h.orders()
            .iter()
            .any(|(_, c)| matches!(c, Command::Cancel { .. })),
        "reporting ends nothing"
    );
    h.controller.audit().unwrap();
}

#[test]
fn what_a_node_said_goes_when_its_agent_joins_again_and_is_said_again() {
    let mut h = Harness::cluster(&[("a", 2), ("b", 2)]);
    let job = h.run(UID, 4).unwrap();
    h.event(stalled(job, "a", Some(S)));
    h.event(stalled(job, "b", Some(S)));
    assert_eq!(since(&h, job), Some(S));
    let back = Harness::node_info("b", 2, h.now);
    h.controller.node_changed(NodeChange::Joined(back), h.now);
    assert_eq!(
        since(&h, job),
        None,
        "a restarted agent knows nothing of it, and would never say it moves again"
    );
    // Agents say it again after each stall time: a repeat changes nothing.
    h.event(stalled(job, "b", Some(2 * S)));
    h.event(stalled(job, "b", Some(2 * S)));
    assert_eq!(since(&h, job), Some(2 * S));
    h.controller.audit().unwrap();
}

#[test]
fn a_job_out_of_the_rotation_is_never_stalled() {
    let mut h = Harness::machine(2);
    let job = h.run(UID, 2).unwrap();
    h.event(stalled(job, "local", Some(0)));
    assert_eq!(since(&h, job), Some(0));
    let owner = Harness::user(UID);
    h.controller.suspend(&owner, job, h.now).unwrap();
    assert_eq!(since(&h, job), None, "suspended: stopped by cosched");
    // A report on its way as it was suspended is dropped.
    h.event(stalled(job, "local", Some(0)));
    assert_eq!(since(&h, job), None);
    h.controller.resume(&owner, job, h.now).unwrap();
    assert_eq!(since(&h, job), None, "it starts afresh");
    h.controller.audit().unwrap();
}

#[test]
fn with_the_cancel_action_a_stalled_job_ends_failed_noted_stalled() {
    let mut h = Harness::machine(2);
    h.set_stall_action(StallAction::Cancel);
    let job = h.run(UID, 2).unwrap();
    h.orders();
    h.event(stalled(job, "local", Some(0)));
    assert!(h
        .orders()
        .contains(&("local".into(), Command::Cancel { job })));
    // A controller restarted meanwhile stops it again (the SIGKILL timer may have died with
    // the agent), as it does a cancelled job: it was put back in the rotation instead.
    h.restart();
    assert!(
        h.orders()
            .contains(&("local".into(), Command::Cancel { job })),
        "stopped again after a restart"
    );
    // It ends on the SIGTERM (or exits 0 from its handler): failed either way.
    h.event(ended(job, code(0), 0));
    let record = h.stored(job).unwrap();
    assert_eq!(record.status, JobState::Failed);
    assert_eq!(record.note.as_deref(), Some("stalled"));
    h.controller.audit().unwrap();
}
