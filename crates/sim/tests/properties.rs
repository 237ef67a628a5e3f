//! Replay invariants over random small workloads and configurations (proptest shrinks a
//! failure to a minimal workload and prints it; PROPTEST_CASES runs more).

use cosched_core::{PartitionerKind, MICROS_PER_SEC};
use cosched_sim::*;
use proptest::prelude::*;

mod common;

fn config(procs: u32) -> impl Strategy<Value = SimConfig> {
    (
        prop_oneof![Just(Policy::Fcfs), Just(Policy::Easy), Just(Policy::Gang)],
        1u32..6,
        prop_oneof![
            Just(PartitionerKind::FirstFit),
            Just(PartitionerKind::BestFit),
            Just(PartitionerKind::Buddy),
            Just(PartitionerKind::Scatter),
        ],
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0i64), Just(MICROS_PER_SEC / 10)],
    )
        .prop_map(
            move |(policy, mpl, partitioner, alternates, backfill, repack, overhead)| SimConfig {
                procs,
                policy,
                mpl,
                quantum: MICROS_PER_SEC,
                partitioner,
                alternates,
                backfill,
                repack,
                switch_overhead: overhead,
                chart: None,
                node_memory: None,
            },
        )
}

/// Nodes of one processor with 100 KB, the rule on or off, or no memory modelled.
fn node_memory() -> impl Strategy<Value = Option<NodeMemory>> {
    let nodes = any::<bool>().prop_map(|fit| {
        Some(NodeMemory {
            procs_per_node: 1,
            bytes: 100 << 10,
            fit,
        })
    });
    prop_oneof![Just(None), nodes]
}

fn scenario() -> impl Strategy<Value = (Vec<SimJob>, SimConfig)> {
    (1u32..24).prop_flat_map(|procs| {
        let jobs = common::workload(procs, 40, 0..400, 1..300, MICROS_PER_SEC);
        // Requests per processor: unknown, or up to a little more than a node has.
        let memory = proptest::collection::vec(proptest::option::of(1u64..=110), 40);
        (jobs, config(procs), node_memory(), memory).prop_map(
            |(mut jobs, config, node_memory, memory)| {
                for (job, kb) in jobs.iter_mut().zip(memory) {
                    job.memory_kb_per_proc = kb;
                }
                (
                    jobs,
                    SimConfig {
                        node_memory,
                        ..config
                    },
                )
            },
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_job_runs_to_completion_never_faster_than_alone((jobs, config) in scenario()) {
        let outcome = simulate(&jobs, Dropped::default(), &config, &mut |_, _| {}).unwrap();
        let ran = outcome.results.len() as u64 + outcome.dropped.never_fits;
        prop_assert_eq!(ran, jobs.len() as u64);
        for r in &outcome.results {
            prop_assert!(r.submit <= r.start && r.start < r.end, "{:?}", r);
            prop_assert!(r.end - r.start >= r.run, "faster than dedicated: {:?}", r);
            if config.policy != Policy::Gang {
                // Space sharing: a job runs without interruption once started.
                prop_assert_eq!(r.end - r.start, r.run);
            }
        }
        let m = metrics(&outcome.results, config.procs);
        prop_assert!(m.utilization <= 1.0 + 1e-9, "utilization {}", m.utilization);
        // With the rule no node ever holds more than its memory.
        match (&config.node_memory, &outcome.memory) {
            (Some(nodes), Some(memory)) => prop_assert!(
                !nodes.fit || memory.overcommits == 0 && memory.peak_node_memory <= 1.0,
                "{:?}",
                memory
            ),
            (None, None) => {}
            (asked, memory) => prop_assert!(false, "nodes {:?} gave memory figures {:?}", asked, memory),
        }
        let again = simulate(&jobs, Dropped::default(), &config, &mut |_, _| {}).unwrap();
        prop_assert_eq!(outcome, again);
    }
}
