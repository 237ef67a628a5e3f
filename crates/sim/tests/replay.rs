//! Replays small workloads whose schedules were worked out by hand, exactly.

use cosched_core::{PartitionerKind, MICROS_PER_SEC};
use cosched_sim::*;

const S: i64 = MICROS_PER_SEC;

/// (submit s, run s, procs, requested s)
fn jobs(spec: &[(i64, i64, u32, i64)]) -> Vec<SimJob> {
    spec.iter()
        .enumerate()
        .map(|(i, &(submit, run, procs, req))| SimJob {
            id: i as u64,
            record: i,
            submit: submit * S,
            run: run * S,
            procs,
            estimate: req * S,
            memory_kb_per_proc: None,
        })
        .collect()
}

/// (start, end) per job in input order, in seconds (as f64 to show fractions).
fn replay(jobs: &[SimJob], config: &SimConfig) -> Vec<(f64, f64)> {
    let outcome = simulate(jobs, Dropped::default(), config, &mut |_, _| {}).unwrap();
    let mut results = outcome.results.clone();
    results.sort_by_key(|r| r.id);
    assert_eq!(results.len(), jobs.len());
    results
        .iter()
        .map(|r| (r.start as f64 / S as f64, r.end as f64 / S as f64))
        .collect()
}

#[test]
fn fcfs_serves_in_order() {
    let w = jobs(&[(0, 100, 4, 100), (10, 50, 2, 50), (20, 10, 2, 10)]);
    let r = replay(&w, &SimConfig::new(4, Policy::Fcfs));
    assert_eq!(r, [(0.0, 100.0), (100.0, 150.0), (100.0, 110.0)]);
}

#[test]
fn easy_backfills_what_ends_before_the_reservation() {
    let w = jobs(&[
        (0, 100, 2, 100),
        (0, 10, 4, 10),
        (5, 50, 2, 50),
        (5, 200, 2, 200),
    ]);
    let easy = replay(&w, &SimConfig::new(4, Policy::Easy));
    assert_eq!(
        easy,
        [(0.0, 100.0), (100.0, 110.0), (5.0, 55.0), (110.0, 310.0)]
    );
    let fcfs = replay(&w, &SimConfig::new(4, Policy::Fcfs));
    assert_eq!(
        fcfs,
        [(0.0, 100.0), (100.0, 110.0), (110.0, 160.0), (110.0, 310.0)]
    );
}

fn gang(procs: u32, mpl: u32) -> SimConfig {
    SimConfig {
        mpl,
        quantum: S,
        ..SimConfig::new(procs, Policy::Gang)
    }
}

#[test]
fn gang_slices_alternate_each_quantum() {
    let w = jobs(&[(0, 10, 2, 10), (0, 5, 2, 5)]);
    // A runs in even slots, B in odd ones: B's 5 s end in slot 9; A finishes alone after.
    assert_eq!(replay(&w, &gang(2, 2)), [(0.0, 15.0), (1.0, 10.0)]);
    // With 0.1 s lost per switch, B needs 6 slots (its last work ends at 11.6 s): its slot
    // is vacant then and goes to A at once, which has 5.4 s done and runs its last 4.6 s
    // alone, without switches.
    let overhead = SimConfig {
        switch_overhead: S / 10,
        ..gang(2, 2)
    };
    assert_eq!(replay(&w, &overhead), [(0.0, 16.2), (1.0, 11.6)]);
}

#[test]
fn a_vacant_slot_gives_way_at_once_not_at_the_boundary() {
    // A (1.5 s) in slice 0, B (10 s) in slice 1: A's last half second ends mid-way through
    // slot 2, whose slice is then vacant, so B runs from 2.5 s, not from the boundary at 3 s.
    let mut w = jobs(&[(0, 2, 2, 2), (0, 10, 2, 10)]);
    w[0].run = 3 * S / 2;
    assert_eq!(replay(&w, &gang(2, 2)), [(0.0, 2.5), (1.0, 11.5)]);
    // A job arriving mid-slot on an empty machine starts then, as the daemon starts it.
    let mut late = jobs(&[(0, 1, 2, 1)]);
    late[0].submit = S / 2;
    assert_eq!(replay(&late, &gang(2, 2)), [(0.5, 1.5)]);
}

#[test]
fn changes_wait_for_the_next_slot_boundary() {
    // B arrives at 2.5 s into A's time alone: it opens slice 1 from the boundary at 3 s.
    let mut w = jobs(&[(0, 10, 2, 10), (0, 2, 2, 2)]);
    w[1].submit = 2 * S + S / 2;
    let r = replay(&w, &gang(2, 2));
    // Slots from 3 s: slice 1 (B) comes first? Rotation continues: slot 3 under the old
    // generation was slice 0, so A keeps slot 3, B gets slots 4 and 6.
    assert_eq!(r, [(0.0, 12.0), (4.0, 7.0)]);
}

#[test]
fn a_job_in_two_of_three_slices_gets_two_thirds_of_the_time() {
    // 4 cpus, MPL 3: J0 holds all 4 (slice 0); J1 and J2 share slice 1; J3 opens slice 2 on
    // J1's cpus, so J2 also runs in slice 2 as an alternate.
    let w = jobs(&[
        (0, 300, 4, 0),
        (0, 300, 2, 0),
        (0, 200, 2, 0),
        (0, 300, 2, 0),
    ]);
    let with = replay(&w, &gang(4, 3));
    assert_eq!(with[2], (1.0, 300.0), "200 s of work in 2 of 3 slots");
    let without = replay(
        &w,
        &SimConfig {
            alternates: false,
            ..gang(4, 3)
        },
    );
    assert_eq!(without[2], (1.0, 599.0), "200 s of work in 1 of 3 slots");
}

#[test]
fn results_are_reproducible_and_never_fit_jobs_are_counted() {
    let trace = cosched_sim::generate::generate(500, 64, 42, 1.0);
    let (mut w, dropped) = jobs_from_trace(&trace);
    w[3].procs = 65;
    let config = SimConfig {
        partitioner: PartitionerKind::BestFit,
        ..gang(64, 3)
    };
    let a = simulate(&w, dropped, &config, &mut |_, _| {}).unwrap();
    let b = simulate(&w, dropped, &config, &mut |_, _| {}).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.dropped.never_fits, 1);
    assert_eq!(a.results.len(), 499);
    for r in &a.results {
        assert!(r.submit <= r.start && r.start < r.end, "{r:?}");
        // No job runs faster than on dedicated processors.
        assert!(r.end - r.start >= r.run, "{r:?}");
    }
}

#[test]
fn bad_configurations_are_refused() {
    let w = jobs(&[(0, 1, 1, 1)]);
    let run = |c: SimConfig| simulate(&w, Dropped::default(), &c, &mut |_, _| {}).unwrap_err();
    assert_eq!(
        run(SimConfig {
            quantum: 0,
            ..gang(2, 2)
        })
        .to_string(),
        "the quantum must be positive (got 0 µs)"
    );
    assert!(run(SimConfig {
        switch_overhead: S,
        ..gang(2, 2)
    })
    .to_string()
    .contains("shorter than the quantum"));
    assert!(run(SimConfig::new(0, Policy::Fcfs))
        .to_string()
        .contains("at least one processor"));
    assert!(run(gang(2, 0)).to_string().contains("--mpl"));
}

#[test]
fn gang_backfilling_lets_short_jobs_pass_a_blocked_head() {
    // 4 cpus, MPL 2: A (2 cpus) in slice 0, B (4) in slice 1; C (4) must wait: its earliest
    // slice is 0, at 0 + 100 s x MPL 2 = 200 s by the estimates. D (2 cpus, 40 s) arrives at
    // 1 s: 1 + 40 x 2 = 81 <= 200, so it backfills beside A and shares A's slots (every other
    // second from 2 s: done at 81 s). A then ends at 199 s, C runs 199-218 s, B ends last.
    let w = jobs(&[
        (0, 100, 2, 100),
        (0, 500, 4, 500),
        (0, 10, 4, 10),
        (1, 40, 2, 40),
    ]);
    let backfill = SimConfig {
        backfill: true,
        ..gang(4, 2)
    };
    assert_eq!(
        replay(&w, &backfill),
        [(0.0, 199.0), (1.0, 610.0), (199.0, 218.0), (2.0, 81.0)]
    );
    let strict = replay(&w, &gang(4, 2));
    assert!(
        strict[3].0 >= strict[2].0,
        "without backfilling D waits for C: {strict:?}"
    );
}

#[test]
fn memory_fit_keeps_jobs_that_do_not_fit_together_off_a_shared_node() {
    let mut w = jobs(&[(0, 10, 2, 10), (0, 10, 2, 10)]);
    w.iter_mut().for_each(|j| j.memory_kb_per_proc = Some(30));
    let nodes = |fit| SimConfig {
        node_memory: Some(NodeMemory {
            procs_per_node: 2,
            bytes: 100 << 10,
            fit,
        }),
        ..gang(2, 2)
    };
    let memory = |config: &SimConfig| {
        let outcome = simulate(&w, Dropped::default(), config, &mut |_, _| {}).unwrap();
        outcome.memory.unwrap()
    };
    // Each needs 60 KB of the node's 100: with the rule B waits until A is gone.
    assert_eq!(replay(&w, &nodes(true)), [(0.0, 10.0), (10.0, 20.0)]);
    let with = memory(&nodes(true));
    assert_eq!((with.memory_waited, with.overcommits), (1, 0));
    assert_eq!(with.peak_node_memory, 0.6);
    // Without it they take turns on the node, holding 120 KB until A ends at 19 s.
    assert_eq!(replay(&w, &nodes(false)), [(0.0, 19.0), (1.0, 20.0)]);
    let without = memory(&nodes(false));
    assert_eq!((without.memory_waited, without.overcommits), (0, 1));
    assert_eq!(without.peak_node_memory, 1.2);
    assert_eq!(without.overcommitted_node_time, 0.95);
    // A job that needs more than a node has is refused either way, and one with no request
    // counts at the others' median.
    let mut w = jobs(&[(0, 10, 2, 10); 4]);
    for (job, kb) in w.iter_mut().zip([Some(10), Some(51), Some(10), None]) {
        job.memory_kb_per_proc = kb;
    }
    let refused = simulate(&w, Dropped::default(), &nodes(false), &mut |_, _| {}).unwrap();
    assert_eq!(refused.dropped.never_fits, 1);
    let figures = refused.memory.unwrap();
    assert_eq!(
        (
            figures.memory_never_fits,
            figures.memory_unknown,
            figures.memory_default_kb_per_proc
        ),
        (1, 1, 10)
    );
}
