//! The end of a job the OOM killer killed in, the figures an ending carries into the record,
//! and `history`: filters, order, bounds, and that it reads the store.

use super::{lock, Harness};
use crate::ApiError;
use cosched_core::JobId;
use cosched_proto::api::{HistoryRequest, HISTORY_REPLY_BYTES, LISTED_COMMAND_BYTES};
use cosched_proto::{Ending, Event, ExitInfo, JobState, OUT_OF_MEMORY};

const ANN: u32 = 1000;
const BOB: u32 = 1001;

pub(super) fn ended(job: JobId, exit: ExitInfo, oom_kills: u64) -> Event {
    Event::Ended {
        job,
        ending: Ending {
            exit,
            cpu_us: Some(job * 1_000),
            peak_memory_bytes: Some(job << 20),
            oom_kills,
            ..Ending::default()
        },
    }
}

pub(super) fn code(code: i32) -> ExitInfo {
    ExitInfo {
        code: Some(code),
        signal: None,
    }
}

const KILLED: ExitInfo = ExitInfo {
    code: None,
    signal: Some(9),
};

#[test]
fn a_job_the_oom_killer_killed_in_ends_failed_out_of_memory_with_its_figures() {
    let mut h = Harness::machine(4);
    let [oom, fine, cancelled] = [0; 3].map(|_| h.run(ANN, 1).unwrap());
    h.event(ended(oom, KILLED, 1));
    let record = h.stored(oom).unwrap();
    assert_eq!(record.status, JobState::Failed);
    assert_eq!(record.note.as_deref(), Some(OUT_OF_MEMORY));
    assert_eq!(record.exit, Some(KILLED));
    assert_eq!(
        (record.cpu_us, record.peak_memory_bytes),
        (Some(oom * 1000), Some(oom << 20))
    );
    h.event(ended(fine, code(0), 0));
    let record = h.stored(fine).unwrap();
    assert_eq!((record.status, record.note), (JobState::Completed, None));
    assert_eq!(record.cpu_us, Some(fine * 1000));
    // Its owner's cancel came first: the job ends cancelled, whatever else killed in it.
    h.controller
        .cancel(&Harness::user(ANN), cancelled, h.now)
        .unwrap();
    h.event(ended(cancelled, KILLED, 2));
    assert_eq!(h.stored(cancelled).unwrap().status, JobState::Cancelled);
    h.controller.audit().unwrap();
}

fn ids(h: &Harness, query: HistoryRequest) -> Vec<JobId> {
    let (views, truncated) = h.controller.history(&query).unwrap();
    assert!(!truncated);
    views.into_iter().map(|v| v.id).collect()
}

#[test]
fn history_filters_ended_jobs_the_latest_ended_first() {
    let mut h = Harness::machine(8);
    let a = h.run(ANN, 1).unwrap();
    let b = h.run(BOB, 1).unwrap();
    let c = h.run(ANN, 1).unwrap();
    let running = h.run(BOB, 1).unwrap();
    let started = h.now;
    h.advance(1_000_000);
    h.event(ended(b, code(3), 0));
    let first_end = h.now;
    h.advance(1_000_000);
    h.event(ended(a, code(0), 0));
    h.advance(1_000_000);
    h.event(ended(c, KILLED, 1));
    let all = HistoryRequest::default();
    assert_eq!(ids(&h, all.clone()), [c, a, b], "job {running} runs");
    let (views, _) = h.controller.history(&all).unwrap();
    let b_view = views.iter().find(|v| v.id == b).unwrap();
    assert_eq!(
        (b_view.uid, b_view.state, b_view.exit, b_view.ended_us),
        (BOB, JobState::Failed, Some(code(3)), first_end)
    );
    assert_eq!(b_view.elapsed_us, Some(first_end - started));
    assert_eq!(b_view.cpu_us, Some(b * 1000));
    assert_eq!(b_view.argv, ["sleep", "60"]);
    let only = |query: HistoryRequest| ids(&h, query);
    assert_eq!(
        only(HistoryRequest {
            uid: Some(ANN),
            ..all.clone()
        }),
        [c, a]
    );
    assert_eq!(
        only(HistoryRequest {
            states: vec![JobState::Failed, JobState::Cancelled],
            ..all.clone()
        }),
        [c, b]
    );
    assert_eq!(
        only(HistoryRequest {
            since_us: Some(first_end + 1),
            until_us: Some(h.now),
            ..all.clone()
        }),
        [a]
    );
    assert_eq!(
        only(HistoryRequest {
            jobs: vec![b, running, 99],
            ..all.clone()
        }),
        [b]
    );
    assert_eq!(
        only(HistoryRequest {
            limit: Some(1),
            ..all.clone()
        }),
        [c]
    );
}

#[test]
fn history_reads_the_store_not_memory() {
    let mut h = Harness::machine(2);
    let job = h.run(ANN, 1).unwrap();
    h.event(ended(job, code(0), 0));
    // An ended job memory no longer holds (past `keep_ended`), as only the store has it.
    let mut old = h.stored(job).unwrap();
    old.id = 500;
    lock(&h.store.0).records.insert(old.id, old);
    assert_eq!(ids(&h, HistoryRequest::default()), [500, job]);
}

#[test]
fn bad_history_requests_are_refused_with_what_is_wrong() {
    let h = Harness::machine(2);
    let refused = |query: HistoryRequest, expected: &str| match h.controller.history(&query) {
        Err(ApiError::Invalid(why)) => assert!(why.contains(expected), "{why}"),
        other => panic!("{query:?}: {other:?}"),
    };
    refused(
        HistoryRequest {
            limit: Some(0),
            ..HistoryRequest::default()
        },
        "limit is 1 to 10000",
    );
    refused(
        HistoryRequest {
            limit: Some(10_001),
            ..HistoryRequest::default()
        },
        "asked 10001",
    );
    refused(
        HistoryRequest {
            states: vec![JobState::Running],
            ..HistoryRequest::default()
        },
        "'running' is not a way of ending",
    );
    refused(
        HistoryRequest {
            jobs: (0..1001).collect(),
            ..HistoryRequest::default()
        },
        "at most 1000 jobs",
    );
    refused(
        HistoryRequest {
            since_us: Some(5),
            until_us: Some(5),
            ..HistoryRequest::default()
        },
        "window is empty",
    );
}

/// Whatever users submitted, a reply stays within its bytes: the oldest jobs are left out.
#[test]
fn a_history_reply_is_bounded_in_bytes() {
    let mut h = Harness::machine(2);
    let job = h.run(ANN, 1).unwrap();
    h.event(ended(job, code(0), 0));
    let mut record = h.stored(job).unwrap();
    record.argv = vec!["x".repeat(4000)];
    let rows = 2 * HISTORY_REPLY_BYTES / LISTED_COMMAND_BYTES;
    for id in 1000..1000 + rows as JobId {
        record.id = id;
        record.ended_us = Some(h.now + id as i64);
        lock(&h.store.0).records.insert(id, record.clone());
    }
    let query = HistoryRequest {
        limit: Some(rows as u32),
        ..HistoryRequest::default()
    };
    let (views, truncated) = h.controller.history(&query).unwrap();
    assert!(truncated && views.len() < rows, "{}", views.len());
    let bytes = serde_json::to_vec(&views).unwrap().len();
    assert!(bytes <= HISTORY_REPLY_BYTES, "{bytes}");
    assert!(views
        .iter()
        .all(|v| v.argv[0].len() == LISTED_COMMAND_BYTES && v.argv_cut));
    // The latest ended are the ones kept.
    assert_eq!(views[0].id, 1000 + rows as JobId - 1);
}

fn used(job: JobId, node: &str, cpu_us: u64, peak: u64, oom_kills: u64) -> Event {
    Event::Used {
        job,
        node: node.into(),
        cpu_us: Some(cpu_us),
        peak_memory_bytes: Some(peak),
        oom_kills,
    }
}

/// A job on two nodes: its CPU time is both nodes' together, its peak the larger node's,
/// and an OOM kill on its second node fails it.
#[test]
fn a_jobs_parts_on_other_nodes_add_their_figures_to_its_record() {
    let mut h = Harness::cluster(&[("a", 2), ("b", 2)]);
    let spread = h.run(ANN, 4).unwrap();
    let orders = h.orders();
    let ended_on = |orders: &[(String, cosched_proto::Command)]| -> Vec<String> {
        orders
            .iter()
            .filter(
                |(_, c)| matches!(c, cosched_proto::Command::Ended { job, .. } if *job == spread),
            )
            .map(|(node, _)| node.clone())
            .collect()
    };
    assert!(ended_on(&orders).is_empty());
    h.event(ended(spread, code(0), 0));
    assert_eq!(
        ended_on(&h.orders()),
        ["a", "b"],
        "every node hears of the end"
    );
    h.event(used(spread, "b", 500, 3 << 20, 0));
    // Its first node's figures came with its ending: a word from it again counts nothing.
    h.event(used(spread, "a", 9_000, 9 << 20, 0));
    let record = h.stored(spread).unwrap();
    assert_eq!(record.cpu_us, Some(spread * 1000 + 500));
    assert_eq!(
        record.peak_memory_bytes,
        Some(spread << 20).max(Some(3 << 20))
    );
    assert_eq!(record.status, JobState::Completed);
    h.event(used(spread, "b", 0, 0, 1));
    let record = h.stored(spread).unwrap();
    assert_eq!(
        (record.status, record.note.as_deref()),
        (JobState::Failed, Some(OUT_OF_MEMORY))
    );
    // A word about a job that has not ended (or does not exist) changes nothing.
    let running = h.run(ANN, 2).unwrap();
    h.event(used(running, "b", 7, 7, 1));
    h.event(used(99, "b", 7, 7, 1));
    let record = h.stored(running).unwrap();
    assert_eq!((record.status, record.cpu_us), (JobState::Running, None));
    h.controller.audit().unwrap();
}

/// An end the store could not take yet takes the other nodes' figures with it.
#[test]
fn figures_for_an_unsaved_end_are_saved_with_it() {
    let mut h = Harness::cluster(&[("a", 2), ("b", 2)]);
    let spread = h.run(ANN, 4).unwrap();
    h.refuse_writes(true);
    h.event(ended(spread, code(0), 0));
    h.event(used(spread, "b", 500, 1, 0));
    h.refuse_writes(false);
    h.controller.retry_unsaved();
    let record = h.stored(spread).unwrap();
    assert_eq!(record.status, JobState::Completed);
    assert_eq!(record.cpu_us, Some(spread * 1000 + 500));
}
