//! Placement and rotation on large matrices: 128, 4,096 and 65,536 processors, MPL 1 to 16.
//!
//! The matrix is filled so the new job fits only in the last slice (the worst case for
//! first fit: every slice is searched), with 64 jobs per slice and alternates on.
//! Target (issue 2): one placement on 65,536 processors × 16 slices under 100 µs median.

use cosched_core::*;
use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, BenchmarkId, Criterion,
};
use std::hint::black_box;
use std::time::Duration;

const SIZES: [u32; 3] = [128, 4_096, 65_536];
const MPLS: [u32; 5] = [1, 2, 4, 8, 16];

/// A matrix of `mpl` slices: all full but the last, which has one job's worth of room.
fn filled(procs: u32, mpl: u32) -> (Scheduler, JobId) {
    let config = Config {
        mpl,
        ..Config::default()
    };
    let mut s = Scheduler::new(Machine::line(procs).unwrap(), config).unwrap();
    let job = procs / 64;
    let mut id = 0;
    for slice in 0..mpl {
        let per_slice = if slice + 1 == mpl { 63 } else { 64 };
        for _ in 0..per_slice {
            s.submit(JobRequest::new(id, Shape::Count(job)), 0).unwrap();
            id += 1;
        }
    }
    assert_eq!(s.slice_count(), mpl as usize);
    (s, id)
}

/// Short runs: each case takes microseconds, and there are 35 of them on a 2-core machine.
fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    group
}

fn placement(c: &mut Criterion) {
    let mut group = group(c, "place");
    for procs in SIZES {
        for mpl in MPLS {
            let (sched, next) = filled(procs, mpl);
            let request = JobRequest::new(next, Shape::Count(procs / 64));
            group.bench_with_input(
                BenchmarkId::new(format!("{procs}procs"), format!("mpl{mpl}")),
                &(),
                |b, _| {
                    b.iter_batched_ref(
                        || sched.clone(),
                        |s| black_box(s.submit(request.clone(), 1).unwrap()),
                        BatchSize::LargeInput,
                    )
                },
            );
        }
    }
    group.finish();
}

/// One cycle of rotation as the agent sees it: the plan, then the stop/start sets at every
/// slot boundary of the cycle.
fn rotation(c: &mut Criterion) {
    let mut group = group(c, "rotate");
    for procs in SIZES {
        for mpl in MPLS {
            let (sched, _) = filled(procs, mpl);
            group.bench_with_input(
                BenchmarkId::new(format!("{procs}procs"), format!("mpl{mpl}")),
                &(),
                |b, _| {
                    b.iter(|| {
                        let generation = Generation::follow(None, sched.plan(), 0);
                        let slices = generation.plan.slices.len() as i64;
                        for slot in 0..slices {
                            let from = generation.slice_for_slot(slot).unwrap();
                            let to = generation.slice_for_slot(slot + 1).unwrap();
                            black_box(generation.plan.switch(from, to));
                        }
                    })
                },
            );
        }
    }
    group.finish();
}

/// Removing a job: its slice's alternates are recomputed, queued jobs are tried.
fn removal(c: &mut Criterion) {
    let mut group = group(c, "remove");
    for procs in SIZES {
        let mpl = 16;
        let (sched, _) = filled(procs, mpl);
        group.bench_with_input(
            BenchmarkId::new(format!("{procs}procs"), format!("mpl{mpl}")),
            &(),
            |b, _| {
                b.iter_batched_ref(
                    || sched.clone(),
                    |s| black_box(s.remove(64, 1).unwrap()),
                    BatchSize::LargeInput,
                )
            },
        );
    }
    group.finish();
}

/// `cosched ps` on a long queue: why each of 5,000 queued jobs waits, on 4,096 processors in
/// nodes of 64 with memory, MPL 4: three full slices and one with a node free, every node
/// holding 150 to 200 of its 256 GiB. A wide head holds up the rest, which ask 1-128
/// processors and 0-199 GiB: some wait for processors, some for memory, some their turn.
fn pending(c: &mut Criterion) {
    let mut group = group(c, "pending_reason");
    let config = Config {
        mpl: 4,
        ..Config::default()
    };
    let machine = Machine::line(4_096)
        .unwrap()
        .with_nodes(64)
        .unwrap()
        .with_node_memory(256 << 30);
    let mut s = Scheduler::new(machine, config).unwrap();
    let mut id = 0;
    for _ in 0..4 * 64 - 1 {
        s.submit(
            JobRequest::new(id, Shape::Count(64)).memory(Memory::PerNode(50 << 30)),
            0,
        )
        .unwrap();
        id += 1;
    }
    for i in 0..5_000u64 {
        let procs = if i == 0 {
            4_096
        } else {
            1 + (i * 37 % 128) as u32
        };
        let request =
            JobRequest::new(id, Shape::Count(procs)).memory(Memory::PerNode((i * 13 % 200) << 30));
        s.submit(request, 0).unwrap();
        id += 1;
    }
    let queued: Vec<JobId> = s.queued().collect();
    group.bench_function("5000queued/4096procs/mpl4", |b| {
        b.iter(|| {
            queued
                .iter()
                .filter_map(|&job| s.pending_reason(job))
                .count()
        })
    });
    group.finish();
}

criterion_group!(benches, placement, rotation, removal, pending);
criterion_main!(benches);
