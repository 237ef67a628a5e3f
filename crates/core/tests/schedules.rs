//! Small schedules computed by hand, checked exactly.

use cosched_core::*;

fn sched(procs: u32, config: Config) -> Scheduler {
    Scheduler::new(Machine::line(procs).unwrap(), config).unwrap()
}

/// `nodes` nodes of `per_node` processors, numbered node by node.
fn sched_on_nodes(nodes: u32, per_node: u32, config: Config) -> Scheduler {
    let machine = Machine::line(nodes * per_node)
        .unwrap()
        .with_nodes(per_node)
        .unwrap();
    Scheduler::new(machine, config).unwrap()
}

fn gang(mpl: u32) -> Config {
    Config {
        mpl,
        ..Config::default()
    }
}

fn submit(s: &mut Scheduler, id: JobId, n: u32, class: Class, now: Micros) -> Vec<Decision> {
    let decisions = s
        .submit(JobRequest::new(id, Shape::Count(n)).class(class), now)
        .unwrap();
    s.audit().unwrap();
    decisions
}

fn batch(s: &mut Scheduler, id: JobId, n: u32) -> Vec<Decision> {
    submit(s, id, n, Class::Batch, 0)
}

fn remove(s: &mut Scheduler, id: JobId) -> Vec<Decision> {
    let decisions = s.remove(id, 0).unwrap();
    s.audit().unwrap();
    decisions
}

/// The plan as text: one line per slice, `job@cpus` with a role mark (`+` alternate,
/// `!` preempting, `~` standby).
fn show(s: &Scheduler) -> Vec<String> {
    s.plan()
        .slices
        .iter()
        .map(|slice| {
            slice
                .entries
                .iter()
                .map(|e| {
                    let mark = match e.role {
                        Role::Own => "",
                        Role::Alternate => "+",
                        Role::Preempting => "!",
                        Role::Standby => "~",
                    };
                    format!("{}{mark}@{}", e.job, e.partition)
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn a_job_in_two_of_three_slices_gets_two_thirds() {
    let mut s = sched(4, gang(3));
    batch(&mut s, 1, 4);
    batch(&mut s, 2, 2);
    batch(&mut s, 3, 2);
    batch(&mut s, 4, 2);
    assert_eq!(show(&s), ["1@0-3", "2@0-1 3@2-3", "4@0-1 3+@2-3"]);
    let plan = s.plan();
    assert_eq!(plan.slices_of(3), vec![1, 2]);
    assert_eq!(plan.slices_of(2), vec![1]);

    // The slice left with no job of its own is dropped; its alternate goes with it.
    remove(&mut s, 4);
    assert_eq!(show(&s), ["1@0-3", "2@0-1 3@2-3"]);
    remove(&mut s, 1);
    assert_eq!(show(&s), ["2@0-1 3@2-3"]);
    remove(&mut s, 2);
    remove(&mut s, 3);
    assert!(s.plan().slices.is_empty());
    assert_eq!(s.slice_count(), 0);
}

#[test]
fn alternates_off_leaves_idle_cells_idle() {
    let mut s = sched(
        4,
        Config {
            alternates: false,
            ..gang(3)
        },
    );
    for (id, n) in [(1, 4), (2, 2), (3, 2), (4, 2)] {
        batch(&mut s, id, n);
    }
    assert_eq!(show(&s), ["1@0-3", "2@0-1 3@2-3", "4@0-1"]);
}

#[test]
fn a_new_own_job_displaces_alternates_not_the_reverse() {
    let mut s = sched(4, gang(2));
    batch(&mut s, 1, 2);
    batch(&mut s, 2, 4);
    remove(&mut s, 2);
    batch(&mut s, 3, 4);
    batch(&mut s, 4, 2);
    assert_eq!(show(&s), ["1@0-1 4@2-3", "3@0-3"]);
    remove(&mut s, 3);
    batch(&mut s, 5, 1);
    // Job 5 opens slice 1 at cpu 0; job 1 (0-1) cannot join it there, job 4 (2-3) can.
    assert_eq!(show(&s), ["1@0-1 4@2-3", "5@0 4+@2-3"]);
    batch(&mut s, 6, 1);
    assert_eq!(show(&s), ["1@0-1 4@2-3", "5@0 6@1 4+@2-3"]);
    // Job 7 is placed on cpus 2-3 of slice 1 as if job 4's alternate were not there.
    batch(&mut s, 7, 2);
    assert_eq!(show(&s), ["1@0-1 4@2-3", "5@0 6@1 7@2-3"]);
}

#[test]
fn the_queue_waits_for_the_mpl_and_classes_jump_it() {
    let mut s = sched(4, gang(2));
    batch(&mut s, 1, 4);
    batch(&mut s, 2, 4);
    assert_eq!(batch(&mut s, 3, 1), vec![Decision::Queued { job: 3 }]);
    assert_eq!(
        submit(&mut s, 4, 1, Class::Interactive, 0),
        vec![Decision::Queued { job: 4 }]
    );
    assert_eq!(s.queued().collect::<Vec<_>>(), vec![4, 3]);
    let decisions = remove(&mut s, 1);
    assert_eq!(
        decisions,
        vec![
            Decision::Removed { job: 1 },
            Decision::Placed {
                job: 4,
                partition: Partition::block(0, 1),
                home: Home::Slice(2),
            },
            Decision::Placed {
                job: 3,
                partition: Partition::block(1, 1),
                home: Home::Slice(2),
            },
        ]
    );
    assert_eq!(show(&s), ["2@0-3", "4@0 3@1"]);
}

#[test]
fn strict_order_blocks_small_jobs_behind_a_big_head() {
    let mut s = sched(4, gang(1));
    batch(&mut s, 1, 2);
    batch(&mut s, 2, 4);
    assert_eq!(batch(&mut s, 3, 1), vec![Decision::Queued { job: 3 }]);
    assert_eq!(show(&s), ["1@0-1"]);
}

#[test]
fn easy_backfills_only_what_does_not_delay_the_head() {
    let easy = Config {
        mpl: 1,
        alternates: false,
        backfill: Backfill::Easy,
        ..Config::default()
    };
    let mut s = sched(4, easy);
    let job = |id, n, est| JobRequest::new(id, Shape::Count(n)).estimate(est);
    s.submit(job(1, 2, 100), 0).unwrap();
    // The head (4 cpus) can start at 100 when job 1 ends, on 0-3.
    assert_eq!(
        s.submit(job(2, 4, 10), 0).unwrap(),
        vec![Decision::Queued { job: 2 }]
    );
    // Would run past 100 on reserved cpus: waits.
    assert_eq!(
        s.submit(job(3, 2, 200), 10).unwrap(),
        vec![Decision::Queued { job: 3 }]
    );
    // Ends by 100: may use the head's cpus now.
    let placed = s.submit(job(4, 2, 90), 10).unwrap();
    assert!(matches!(placed[0], Decision::Placed { job: 4, .. }));
    assert_eq!(show(&s), ["1@0-1 4@2-3"]);
    // When both end, the head starts before job 3.
    s.remove(1, 100).unwrap();
    let decisions = s.remove(4, 100).unwrap();
    assert!(matches!(decisions[1], Decision::Placed { job: 2, .. }));
    assert_eq!(s.queued().collect::<Vec<_>>(), vec![3]);
}

#[test]
fn express_preempts_everything_it_overlaps_in_every_slice() {
    let mut s = sched(4, gang(2));
    batch(&mut s, 1, 4);
    batch(&mut s, 2, 2);
    submit(&mut s, 9, 2, Class::Express, 0);
    assert_eq!(show(&s), ["9!@0-1", "9!@0-1"]);
    // New work avoids express cpus; job 3 goes beside job 2 in slice 1 (2-3).
    batch(&mut s, 3, 2);
    assert_eq!(show(&s), ["9!@0-1", "9!@0-1 3@2-3"]);
    remove(&mut s, 9);
    assert_eq!(show(&s), ["1@0-3", "2@0-1 3@2-3"]);
}

#[test]
fn an_interactive_job_preempts_batch_until_it_settles() {
    let config = Config {
        interactive_preempts: true,
        ..gang(4)
    };
    let mut s = sched(2, config);
    batch(&mut s, 1, 2);
    batch(&mut s, 2, 2);
    submit(&mut s, 5, 1, Class::Interactive, 100);
    // In every slice at once: the batch jobs on its processor wait, whichever slice runs.
    assert_eq!(show(&s), ["5!@0", "5!@0"]);
    assert_eq!(s.preempting_since(99), Vec::<JobId>::new());
    assert_eq!(s.preempting_since(100), vec![5]);
    // A second interactive job takes the processor left in the preempting layer.
    submit(&mut s, 6, 1, Class::Interactive, 100);
    assert_eq!(show(&s), ["5!@0 6!@1", "5!@0 6!@1"]);
    // Its stretch over, the job takes a slice of its own and the batch jobs run again.
    let decisions = s.settle(5, 200).unwrap();
    s.audit().unwrap();
    assert!(matches!(
        decisions[..],
        [Decision::Placed {
            job: 5,
            home: Home::Slice(_),
            ..
        }]
    ));
    assert_eq!(show(&s), ["6!@1", "6!@1", "6!@1 5@0"]);
    s.settle(6, 200).unwrap();
    assert_eq!(show(&s), ["1@0-1", "2@0-1", "5@0 6@1"]);
    // Settling is once: a settled job does not come back as a preempting one.
    assert_eq!(s.settle(5, 300).unwrap(), Vec::new());
    assert_eq!(s.preempting_since(300), Vec::<JobId>::new());
}

#[test]
fn without_preemption_an_interactive_job_takes_a_slice() {
    let mut s = sched(2, gang(4));
    batch(&mut s, 1, 2);
    submit(&mut s, 5, 1, Class::Interactive, 0);
    assert_eq!(show(&s), ["1@0-1", "5@0"]);
    assert_eq!(s.settle(5, 10).unwrap(), Vec::new());
}

#[test]
fn standby_soaks_up_idle_cells_and_yields_them() {
    let mut s = sched(4, gang(1));
    submit(&mut s, 7, 2, Class::Standby, 0);
    // Alone on the machine, a standby job runs in a slice of its own making.
    assert_eq!(show(&s), ["7~@0-1"]);
    batch(&mut s, 1, 2);
    // The batch job ignores standby when placing: it takes 0-1, and the standby job, left
    // with no slot, moves to the idle 2-3.
    assert_eq!(show(&s), ["1@0-1 7~@2-3"]);
    remove(&mut s, 1);
    assert_eq!(show(&s), ["7~@2-3"]);
    batch(&mut s, 2, 2);
    assert_eq!(show(&s), ["2@0-1 7~@2-3"]);
    // Job 3 takes 2: no two processors are idle together, so the standby job waits placed.
    batch(&mut s, 3, 1);
    assert_eq!(show(&s), ["2@0-1 3@2"]);
    remove(&mut s, 2);
    // Cpus 0-1 are idle again: the standby job moves there and runs beside job 3.
    assert_eq!(show(&s), ["3@2 7~@0-1"]);
}

#[test]
fn class_changes_move_jobs_between_layers() {
    let mut s = sched(4, gang(1));
    batch(&mut s, 1, 4);
    batch(&mut s, 2, 2);
    assert_eq!(s.queued().collect::<Vec<_>>(), vec![2]);
    let decisions = s.set_class(2, Class::Express, 5).unwrap();
    assert!(matches!(
        decisions[0],
        Decision::Placed {
            job: 2,
            home: Home::Preempting,
            ..
        }
    ));
    assert_eq!(show(&s), ["2!@0-1"]);
    s.set_class(2, Class::Standby, 6).unwrap();
    s.audit().unwrap();
    assert_eq!(show(&s), ["1@0-3"]);
    assert_eq!(s.class(2), Some(Class::Standby));
}

#[test]
fn repacking_folds_slices_back_together() {
    let config = |repack| Config { repack, ..gang(3) };
    for (repack, expected) in [
        (false, vec!["3@3 2+@0-2", "2@0-2 3+@3", "4@0-1 3+@3"]),
        (true, vec!["3@3 4@0-1", "2@0-2 3+@3"]),
    ] {
        let mut s = sched(4, config(repack));
        batch(&mut s, 1, 3);
        batch(&mut s, 2, 3);
        batch(&mut s, 3, 1);
        batch(&mut s, 4, 2);
        assert_eq!(show(&s), ["1@0-2 3@3", "2@0-2 3+@3", "4@0-1 3+@3"]);
        remove(&mut s, 1);
        assert_eq!(show(&s), expected, "repack {repack}");
    }
}

#[test]
fn bad_requests_are_errors_not_waits() {
    let mut s = sched(8, gang(2));
    let err = s
        .submit(JobRequest::new(1, Shape::Count(9)), 0)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "job 1 can never run: 9 processors requested but the machine has 8"
    );
    assert!(s.submit(JobRequest::new(2, Shape::Count(0)), 0).is_err());
    s.submit(JobRequest::new(3, Shape::Count(1)), 0).unwrap();
    assert_eq!(
        s.submit(JobRequest::new(3, Shape::Count(1)), 0),
        Err(SubmitError::Duplicate(3))
    );
    assert_eq!(s.remove(42, 0), Err(JobError::Unknown(42)));
    assert_eq!(s.job_count(), 1);
    assert_eq!(
        Scheduler::new(Machine::line(4).unwrap(), gang(0)).unwrap_err(),
        ConfigError::ZeroMpl
    );
    let mesh_on_line = Config {
        partitioner: PartitionerKind::AdaptiveScan,
        ..gang(2)
    };
    assert!(Scheduler::new(Machine::line(4).unwrap(), mesh_on_line).is_err());
}

#[test]
fn submeshes_on_a_mesh_with_adaptive_scan() {
    let config = Config {
        partitioner: PartitionerKind::AdaptiveScan,
        ..gang(2)
    };
    let mut s = Scheduler::new(Machine::mesh(4, 4).unwrap(), config).unwrap();
    let mesh = |w, h| Shape::Mesh {
        width: w,
        height: h,
    };
    s.submit(JobRequest::new(1, mesh(4, 3)), 0).unwrap();
    // 2x4 fits in slice 0 in neither orientation: it opens slice 1.
    s.submit(JobRequest::new(2, mesh(2, 4)), 0).unwrap();
    // 1x4 does not fit upright in slice 0, but rotated it fills the last row.
    s.submit(JobRequest::new(3, mesh(1, 4)), 0).unwrap();
    s.audit().unwrap();
    assert_eq!(show(&s), ["1@0-11 3@12-15", "2@0-1,4-5,8-9,12-13"]);
}

#[test]
fn backfilling_into_slices_respects_the_heads_reserved_slice() {
    let config = Config {
        backfill: Backfill::Easy,
        alternates: false,
        ..gang(2)
    };
    let mut s = sched(4, config);
    let job = |id, n, est| JobRequest::new(id, Shape::Count(n)).estimate(est);
    // Slice 0: job 1 on 0-1 (ends by 100 x MPL 2 = 200). Slice 1: job 2 on 0-3 (ends by 1000).
    s.submit(job(1, 2, 100), 0).unwrap();
    s.submit(job(2, 4, 500), 0).unwrap();
    // The head needs 4 cpus: its earliest slice is 0, at 200, on 0-3.
    assert_eq!(
        s.submit(job(3, 4, 10), 0).unwrap(),
        vec![Decision::Queued { job: 3 }]
    );
    // Too long to end by 200 in slice 0, and slice 1 is full: waits.
    assert_eq!(
        s.submit(job(4, 2, 150), 0).unwrap(),
        vec![Decision::Queued { job: 4 }]
    );
    // 2 x 90 = 180 <= 200: backfills into slice 0 beside job 1.
    let placed = s.submit(job(5, 2, 90), 0).unwrap();
    assert!(
        matches!(placed[0], Decision::Placed { job: 5, .. }),
        "{placed:?}"
    );
    assert_eq!(show(&s), ["1@0-1 5@2-3", "2@0-3"]);
    s.audit().unwrap();
}

fn spread(nodes: u32, per_node: u32) -> Shape {
    Shape::Nodes { nodes, per_node }
}

#[test]
fn a_spread_takes_its_share_of_each_of_the_first_nodes_with_room() {
    // Four nodes of two processors: 0-1, 2-3, 4-5, 6-7.
    let mut s = sched_on_nodes(4, 2, gang(2));
    batch(&mut s, 1, 3);
    // One on each of two nodes: node 0 is full, then 3 and 4 are the lowest free.
    s.submit(JobRequest::new(2, spread(2, 1)), 0).unwrap();
    // Two on each of two nodes: only node 3 has two free in slice 0, so a new slice.
    s.submit(JobRequest::new(3, spread(2, 2)), 0).unwrap();
    s.audit().unwrap();
    assert_eq!(show(&s), ["1@0-2 2@3-4", "3@0-3"]);
    // Whatever the partitioner, even a 1-D one that wants a single run.
    let first_fit = Config {
        partitioner: PartitionerKind::FirstFit,
        ..gang(1)
    };
    let mut s = sched_on_nodes(4, 2, first_fit);
    s.submit(JobRequest::new(1, spread(4, 1)), 0).unwrap();
    assert_eq!(show(&s), ["1@0,2,4,6"]);
}

#[test]
fn a_spread_the_nodes_cannot_hold_is_refused_with_the_reason() {
    let mut s = sched_on_nodes(4, 2, gang(2));
    let refusal = |s: &mut Scheduler, shape| {
        s.submit(JobRequest::new(1, shape), 0)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refusal(&mut s, spread(5, 1)),
        "job 1 can never run: 5 nodes requested but the machine has 4"
    );
    assert_eq!(
        refusal(&mut s, spread(1, 3)),
        "job 1 can never run: 3 processors per node requested but a node has 2"
    );
    assert_eq!(
        refusal(&mut s, spread(0, 1)),
        "job 1 can never run: a job needs at least one processor"
    );
}

/// Space sharing (one slice), EASY backfilling, first fit, on four nodes of two processors:
/// 0-1, 2-3, 4-5, 6-7.
fn easy_first_fit_on_four_nodes_of_two() -> Scheduler {
    let easy = Config {
        mpl: 1,
        alternates: false,
        backfill: Backfill::Easy,
        partitioner: PartitionerKind::FirstFit,
        ..Config::default()
    };
    sched_on_nodes(4, 2, easy)
}

#[test]
fn a_failed_count_does_not_keep_a_spread_from_backfilling() {
    let mut s = easy_first_fit_on_four_nodes_of_two();
    let job = |id, shape, est| JobRequest::new(id, shape).estimate(est);
    for id in 0..8 {
        s.submit(job(id, Shape::Count(1), 1_000), 0).unwrap();
    }
    for id in [1, 3, 5, 7] {
        s.remove(id, 0).unwrap();
    }
    // Free: 1, 3, 5, 7, no run of two. The head waits for everything.
    s.submit(job(10, Shape::Count(8), 10), 0).unwrap();
    // No run of two: fails, and a pass that counted it would skip every request of two.
    s.submit(job(11, Shape::Count(2), 10), 0).unwrap();
    let decisions = s.submit(job(12, spread(2, 1), 10), 0).unwrap();
    s.audit().unwrap();
    assert_eq!(
        decisions,
        vec![Decision::Placed {
            job: 12,
            partition: Partition::from_spans(vec![Span::new(1, 1), Span::new(3, 1)]),
            home: Home::Slice(0),
        }]
    );
    assert_eq!(s.queued().collect::<Vec<_>>(), vec![10, 11]);
}

#[test]
fn a_node_that_left_takes_its_jobs_and_nothing_goes_there_until_it_is_back() {
    let mut s = easy_first_fit_on_four_nodes_of_two();
    let job = |id, n, est| JobRequest::new(id, Shape::Count(n)).estimate(est);
    s.submit(job(1, 2, 1_000), 0).unwrap();
    s.submit(job(2, 6, 1_000), 0).unwrap();
    // Waiting, its processes stopped on the node that leaves: the caller says so.
    s.submit(job(5, 8, 1_000), 0).unwrap();
    assert_eq!(
        s.withhold_node(3, &[5], 5).unwrap(),
        vec![Decision::Removed { job: 2 }, Decision::Removed { job: 5 }]
    );
    assert!(s.state(2).is_none() && s.state(5).is_none());
    // The head waits for job 1 and reserves 0-5. A long job must avoid that: 6-7 is
    // outside the reservation but withheld, so it waits too.
    s.submit(job(3, 6, 10), 10).unwrap();
    s.submit(job(4, 2, 5_000), 10).unwrap();
    s.audit().unwrap();
    assert_eq!(show(&s), ["1@0-1"]);
    assert_eq!(s.queued().collect::<Vec<_>>(), vec![3, 4]);
    // Back: the head fits beside job 1.
    s.restore_node(3, 20).unwrap();
    s.audit().unwrap();
    assert_eq!(show(&s), ["1@0-1 3@2-7"]);
    assert_eq!(
        s.withhold_node(4, &[], 30).unwrap_err().to_string(),
        "no node 4 (the machine has 4)"
    );
}

#[test]
fn a_pinned_job_placed_again_keeps_its_share_of_each_node() {
    // Two nodes of three: 0-2, 3-5.
    let mut s = sched_on_nodes(2, 3, gang(3));
    batch(&mut s, 1, 2);
    batch(&mut s, 2, 3);
    assert_eq!(show(&s), ["1@0-1 2@2-4"]);
    s.pin(2).unwrap();
    assert_eq!(
        s.shape(2),
        Some(Shape::OnNodes(
            vec![
                NodeShare { node: 0, procs: 1 },
                NodeShare { node: 1, procs: 2 }
            ]
            .into()
        ))
    );
    // Out to standby and back: first fit would now take 0-2 for three processors.
    remove(&mut s, 1);
    s.set_class(2, Class::Standby, 0).unwrap();
    s.set_class(2, Class::Batch, 0).unwrap();
    s.audit().unwrap();
    assert_eq!(show(&s), ["2@0,3-4"]);
    assert_eq!(s.pin(9), Err(JobError::Unknown(9)));
}

#[test]
fn a_node_that_joins_serves_the_waiting_jobs_at_once() {
    let mut s = sched_on_nodes(1, 2, gang(1));
    batch(&mut s, 1, 2);
    assert_eq!(batch(&mut s, 2, 2), vec![Decision::Queued { job: 2 }]);
    // Asking two nodes of a one-node machine can never run: refused, not queued.
    assert!(s.submit(JobRequest::new(3, spread(2, 1)), 0).is_err());
    let (node, decisions) = s.add_node(5).unwrap();
    assert_eq!(node, 1);
    assert_eq!(
        decisions,
        vec![Decision::Placed {
            job: 2,
            partition: Partition::block(2, 2),
            home: Home::Slice(0),
        }]
    );
    s.submit(JobRequest::new(3, spread(2, 1)), 5).unwrap();
    s.audit().unwrap();
    assert_eq!(show(&s), ["1@0-1 2@2-3"]);
    assert_eq!(s.queued().collect::<Vec<_>>(), vec![3]);
    let mesh = Scheduler::new(Machine::mesh(2, 2).unwrap(), gang(1));
    assert!(mesh.unwrap().add_node(0).is_err());
}

#[test]
fn a_job_that_needs_a_node_that_left_holds_up_no_one_behind_it() {
    // Strict order: a head that does not fit stops the queue.
    let mut s = sched_on_nodes(2, 2, gang(1));
    batch(&mut s, 1, 4);
    // Waiting for job 1 when node 1 leaves: it can run nowhere now.
    assert_eq!(batch(&mut s, 2, 4), vec![Decision::Queued { job: 2 }]);
    s.withhold_node(1, &[], 0).unwrap();
    // Job 1 was on node 1 too: taken out. Job 2 still cannot run on node 0 alone, and so is
    // held aside: job 3 behind it starts.
    assert_eq!(s.state(1), None);
    let spread = Shape::Nodes {
        nodes: 2,
        per_node: 1,
    };
    s.submit(JobRequest::new(4, spread), 0).unwrap();
    let decisions = submit(&mut s, 3, 2, Class::Batch, 0);
    assert!(
        matches!(decisions[0], Decision::Placed { job: 3, .. }),
        "{decisions:?}"
    );
    assert_eq!(s.queued().collect::<Vec<_>>(), vec![2, 4]);
    // Back: the held jobs wait in the queue again, in their order.
    remove(&mut s, 3);
    s.restore_node(1, 0).unwrap();
    s.audit().unwrap();
    assert_eq!(show(&s), ["2@0-3"]);
    assert_eq!(s.queued().collect::<Vec<_>>(), vec![4]);
}

/// `nodes` nodes of `per_node` processors with `memory` bytes each.
fn sched_with_memory(nodes: u32, per_node: u32, memory: u64, config: Config) -> Scheduler {
    let machine = Machine::line(nodes * per_node)
        .unwrap()
        .with_nodes(per_node)
        .unwrap()
        .with_node_memory(memory);
    Scheduler::new(machine, config).unwrap()
}

fn with_memory(id: JobId, n: u32, memory: u64) -> JobRequest {
    JobRequest::new(id, Shape::Count(n)).memory(Memory::PerNode(memory))
}

fn submit_request(s: &mut Scheduler, request: JobRequest, now: Micros) -> Vec<Decision> {
    let decisions = s.submit(request, now).unwrap();
    s.audit().unwrap();
    decisions
}

#[test]
fn jobs_sharing_a_node_in_different_slices_fit_in_its_memory_together() {
    let mut s = sched_with_memory(2, 2, 100, gang(2));
    submit_request(&mut s, with_memory(1, 4, 60), 0);
    // 40 more fits beside job 1's 60, in the other slice.
    submit_request(&mut s, with_memory(3, 2, 40), 0);
    assert_eq!(show(&s), ["1@0-3", "3@0-1"]);
    assert_eq!(s.memory_used(), [100, 60]);
    // Slice 1 has processors 2-3 free, but node 1 has 40 of 100 left: job 2 waits.
    let queued = submit_request(&mut s, with_memory(2, 2, 60), 0);
    assert_eq!(queued, vec![Decision::Queued { job: 2 }]);
    assert_eq!(s.pending_reason(2), Some(Pending::Memory));
    // Job 1 leaves: job 2 takes node 1, job 3's node being full.
    let decisions = remove(&mut s, 1);
    assert!(matches!(decisions[1], Decision::Placed { job: 2, .. }));
    assert_eq!(show(&s), ["3@0-1 2@2-3"]);
    assert_eq!(s.pending_reason(2), None);
}

#[test]
fn a_job_that_needs_more_memory_than_a_node_has_is_refused() {
    let mut s = sched_with_memory(2, 2, 100, gang(2));
    let error = s.submit(with_memory(1, 1, 101), 0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "job 1 can never run: 1 processors with 101 bytes of memory per node requested but a node has 100 bytes"
    );
    // 40 per processor: at most 2 of a node's, so 4 processors need 2 nodes, 5 cannot run.
    let per_cpu = |id, n| JobRequest::new(id, Shape::Count(n)).memory(Memory::PerCpu(40));
    assert!(s.check(&per_cpu(2, 4)).is_ok());
    assert!(s.check(&per_cpu(3, 5)).is_err());
    // Without node memory declared, memory never refuses.
    let mut s = sched_on_nodes(2, 2, gang(2));
    submit_request(&mut s, with_memory(1, 4, 1 << 40), 0);
    submit_request(&mut s, with_memory(2, 4, 1 << 40), 0);
    assert_eq!(s.slice_count(), 2);
    assert_eq!(s.memory_used(), [2 << 40, 2 << 40]);
}

#[test]
fn an_express_job_preempts_processors_not_memory() {
    let mut s = sched_with_memory(1, 4, 100, gang(2));
    submit_request(&mut s, with_memory(1, 2, 60), 0);
    // A frozen job keeps its pages: preempting job 1 would not free its 60.
    let express = with_memory(2, 2, 60).class(Class::Express);
    assert_eq!(
        submit_request(&mut s, express, 0),
        vec![Decision::Queued { job: 2 }]
    );
    assert_eq!(s.pending_reason(2), Some(Pending::Memory));
    // Standby (processors 2-3 are idle) and class changes are held to it too.
    let standby = with_memory(3, 1, 50).class(Class::Standby);
    submit_request(&mut s, standby, 0);
    assert_eq!(s.pending_reason(3), Some(Pending::Memory));
    s.set_class(3, Class::Batch, 0).unwrap();
    s.audit().unwrap();
    assert_eq!(s.pending_reason(3), Some(Pending::Memory));
    let decisions = remove(&mut s, 1);
    assert!(matches!(
        decisions[1],
        Decision::Placed {
            job: 2,
            home: Home::Preempting,
            ..
        }
    ));
    assert_eq!(s.memory_used(), [60]);
    assert_eq!(s.pending_reason(3), Some(Pending::Memory));
}

#[test]
fn pending_reasons_say_resources_memory_or_priority() {
    let mut s = sched_with_memory(2, 2, 100, gang(1));
    submit_request(&mut s, with_memory(1, 3, 50), 0);
    // One processor free (3, on node 1), in the only slice.
    submit_request(&mut s, with_memory(2, 2, 10), 0);
    assert_eq!(s.pending_reason(2), Some(Pending::Resources));
    // It would fit on processor 3 but waits behind job 2 (strict order).
    submit_request(&mut s, with_memory(3, 1, 10), 0);
    assert_eq!(s.pending_reason(3), Some(Pending::Priority));
    // Processor 3 is free, but node 1 has 50 of 100 left.
    submit_request(&mut s, with_memory(4, 1, 60), 0);
    assert_eq!(s.pending_reason(4), Some(Pending::Memory));
    assert_eq!(s.pending_reason(1), None);
    assert_eq!(s.pending_reason(99), None);
    // A job that needs a node that left says so.
    s.withhold_node(1, &[], 0).unwrap();
    let pinned = JobRequest::new(
        5,
        Shape::OnNodes(vec![NodeShare { node: 1, procs: 1 }].into()),
    );
    submit_request(&mut s, pinned, 0);
    assert_eq!(s.pending_reason(5), Some(Pending::Node));
}

#[test]
fn easy_backfilling_leaves_the_head_its_memory_at_the_shadow() {
    let easy = Config {
        mpl: 1,
        alternates: false,
        backfill: Backfill::Easy,
        ..Config::default()
    };
    let mut s = sched_with_memory(2, 2, 100, easy);
    let job = |id, memory, estimate| with_memory(id, 1, memory).estimate(estimate);
    submit_request(&mut s, job(1, 90, 100), 0);
    // Node 0 cannot take 90 more: job 2 goes to node 1.
    submit_request(&mut s, job(2, 90, 1_000), 0);
    assert_eq!(show(&s), ["1@0 2@2"]);
    // The head needs 95 on a node: none has it until job 1 ends at 100 (node 0).
    submit_request(&mut s, job(3, 95, 10), 0);
    assert_eq!(s.pending_reason(3), Some(Pending::Memory));
    // Job 4 runs past 100: on node 0 it would leave the head 90 of its 95, so it takes
    // processor 3 (node 1) though first fit would give it processor 1.
    submit_request(&mut s, job(4, 10, 500), 0);
    assert_eq!(show(&s), ["1@0 2@2 4@3"]);
    // Job 5 ends by then: node 0 is its to use.
    submit_request(&mut s, job(5, 10, 50), 0);
    assert_eq!(show(&s), ["1@0 2@2 4@3 5@1"]);
    remove(&mut s, 5);
    let decisions = s.remove(1, 100).unwrap();
    s.audit().unwrap();
    assert!(matches!(decisions[1], Decision::Placed { job: 3, .. }));
}

#[test]
fn behind_a_head_short_of_memory_a_job_that_cannot_delay_it_opens_a_slice() {
    let easy_gang = Config {
        mpl: 2,
        alternates: false,
        backfill: Backfill::Easy,
        ..Config::default()
    };
    let mut s = sched_with_memory(1, 2, 150, easy_gang);
    let job = |id, n, memory, estimate| with_memory(id, n, memory).estimate(estimate);
    submit_request(&mut s, job(1, 2, 70, 100), 0);
    // A second slice has the processors, the node not the memory (80 left): the head waits
    // for job 1's end.
    submit_request(&mut s, job(2, 2, 100, 100), 0);
    assert_eq!(s.pending_reason(2), Some(Pending::Memory));
    // Behind it, a job ending before the head's shadow (by its stretched estimate) takes a
    // slice of its own: it holds nothing the head's reservation needs.
    submit_request(&mut s, job(3, 2, 60, 10), 0);
    assert_eq!(show(&s), ["1@0-1", "3@0-1"]);
    // One that would still hold 60 then would leave the head 90 of its 100: it waits.
    remove(&mut s, 3);
    submit_request(&mut s, job(4, 2, 60, 1_000), 0);
    assert_eq!(s.pending_reason(4), Some(Pending::Priority));
    assert_eq!(show(&s), ["1@0-1"]);
    // Job 1 ends: the head starts.
    let decisions = s.remove(1, 100).unwrap();
    s.audit().unwrap();
    assert!(matches!(decisions[1], Decision::Placed { job: 2, .. }));
}

#[test]
fn a_long_job_leaves_the_slice_a_head_short_of_memory_is_to_open() {
    let easy_gang = Config {
        mpl: 3,
        alternates: false,
        backfill: Backfill::Easy,
        ..Config::default()
    };
    let mut s = sched_with_memory(1, 2, 150, easy_gang);
    let job = |id, n, memory, estimate| with_memory(id, n, memory).estimate(estimate);
    submit_request(&mut s, job(1, 2, 10, 1_000), 0);
    submit_request(&mut s, job(2, 1, 100, 10), 0);
    submit_request(&mut s, job(3, 1, 10, 1_000), 0);
    assert_eq!(show(&s), ["1@0-1", "2@0 3@1"]);
    // 30 left: the head waits for job 2's memory; then no slice has its processors free
    // (job 3 keeps one of slice 1's), so it is to open the third.
    submit_request(&mut s, job(4, 2, 100, 10), 0);
    assert_eq!(s.pending_reason(4), Some(Pending::Memory));
    // A long job would fit in memory beside it, but opening the last slice would leave
    // the head none at its shadow: it waits.
    submit_request(&mut s, job(5, 2, 10, 1_000), 0);
    assert_eq!(s.pending_reason(5), Some(Pending::Priority));
    assert_eq!(show(&s), ["1@0-1", "2@0 3@1"]);
    // A short one may: it ends before the head needs the slice.
    submit_request(&mut s, job(6, 2, 10, 5), 0);
    assert_eq!(show(&s), ["1@0-1", "2@0 3@1", "6@0-1"]);
    remove(&mut s, 6);
    let decisions = s.remove(2, 30).unwrap();
    s.audit().unwrap();
    assert!(
        decisions
            .iter()
            .any(|d| matches!(d, Decision::Placed { job: 4, .. })),
        "{decisions:?}"
    );
}
