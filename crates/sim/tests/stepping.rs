//! The simulator computes completions in closed form instead of stepping quanta. This test
//! replays random small workloads twice, once through `simulate` and once through a reference
//! written here that steps every slot of every slice, driving the same core and deciding when
//! a plan takes effect from whole plans (`Generation::first_slot`, as the daemon does), and
//! demands identical start and end times for every job.

use cosched_core::{
    Backfill, Config, Generation, JobId, JobRequest, Machine, Micros, PartitionerKind, Rotation,
    Scheduler, Shape,
};
use cosched_sim::*;
use proptest::prelude::*;

mod common;

const Q: Micros = 1_000_000;

/// (start, end) per job, by stepping slot after slot.
fn stepped(jobs: &[SimJob], config: &SimConfig) -> Vec<(Micros, Micros)> {
    let core = Config {
        partitioner: config.partitioner,
        mpl: config.mpl,
        alternates: config.alternates,
        backfill: if config.backfill {
            Backfill::Easy
        } else {
            Backfill::None
        },
        repack: config.repack,
        interactive_preempts: false,
    };
    let mut sched = Scheduler::new(Machine::line(config.procs).unwrap(), core).unwrap();
    let mut remaining: Vec<Micros> = jobs.iter().map(|j| j.run).collect();
    let mut start: Vec<Option<Micros>> = vec![None; jobs.len()];
    let mut end: Vec<Option<Micros>> = vec![None; jobs.len()];
    let mut generation: Option<Generation> = None;
    let mut next = 0;
    let mut changed = false;
    let mut waiting = false;
    let submit = |sched: &mut Scheduler, i: usize, now: Micros| {
        let job = &jobs[i];
        let request = JobRequest::new(i as JobId, Shape::Count(job.procs)).estimate(job.estimate);
        let placed = sched.submit(request, now).unwrap();
        placed
            .iter()
            .any(|d| matches!(d, cosched_core::Decision::Placed { .. }))
    };
    let rotation = Rotation::new(0, Q);
    let mut slot: i64 = 0;
    while end.iter().any(Option::is_none) {
        let (slot_start, slot_end) = (slot * Q, slot * Q + Q);
        // Arrivals at the boundary itself join before the switch.
        while next < jobs.len() && jobs[next].submit == slot_start {
            changed |= submit(&mut sched, next, slot_start);
            next += 1;
        }
        if changed {
            generation = Some(Generation::follow(generation.as_ref(), sched.plan(), slot));
            changed = false;
        }
        // The slot from `from`, event after event (completions of the running slice's jobs,
        // then arrivals, at each time); a change that finds the slot vacant switches in it.
        // Lost to a switch while more than one slice takes turns.
        let overhead = |g: &Option<Generation>| match g {
            Some(g) if g.plan.slices.len() > 1 => config.switch_overhead,
            _ => 0,
        };
        // The slice under way runs from `from`; its jobs' work is counted up to `useful`.
        let mut from = slot_start;
        let mut useful = (from + overhead(&generation)).min(slot_end);
        loop {
            let running: Vec<usize> = generation
                .as_ref()
                .and_then(|g| Some(g.plan.slices[g.slice_for_slot(slot)?].jobs()))
                .into_iter()
                .flatten()
                .map(|id| id as usize)
                .filter(|&i| end[i].is_none())
                .collect();
            for &i in &running {
                start[i].get_or_insert(from);
            }
            let finish = running.iter().map(|&i| useful + remaining[i]).min();
            let arrival = jobs.get(next).map(|j| j.submit);
            let time = [finish, arrival, Some(slot_end)]
                .into_iter()
                .flatten()
                .min()
                .expect("the slot's end");
            for &i in &running {
                remaining[i] -= (time - useful).max(0);
            }
            useful = useful.max(time);
            let mut ended: Vec<usize> =
                running.into_iter().filter(|&i| remaining[i] == 0).collect();
            ended.sort_unstable();
            for &i in &ended {
                end[i] = Some(time);
                sched.remove(i as JobId, time).unwrap();
                changed = true;
            }
            if time == slot_end {
                break;
            }
            while next < jobs.len() && jobs[next].submit == time {
                changed |= submit(&mut sched, next, time);
                next += 1;
            }
            // A change waiting for the boundary already: later ones in the slot wait with it.
            if changed && !waiting {
                let plan = sched.plan();
                if Generation::first_slot(generation.as_ref(), &plan, rotation, time) == slot {
                    generation = Some(Generation::follow(generation.as_ref(), plan, slot));
                    changed = false;
                    from = time;
                    useful = (from + overhead(&generation)).min(slot_end);
                } else {
                    waiting = true;
                }
            }
        }
        waiting = false;
        slot += 1;
        assert!(slot < 1_000_000, "the reference did not finish");
    }
    start
        .into_iter()
        .zip(end)
        .map(|(s, e)| (s.unwrap(), e.unwrap()))
        .collect()
}

fn scenario() -> impl Strategy<Value = (Vec<SimJob>, SimConfig)> {
    (1u32..10).prop_flat_map(|procs| {
        // Half-quantum units: arrivals land inside slots as well as on their boundaries.
        let jobs = common::workload(procs, 16, 0..80, 1..60, Q / 2);
        let config = (
            1u32..5,
            prop_oneof![
                Just(PartitionerKind::FirstFit),
                Just(PartitionerKind::Scatter)
            ],
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            // Most of a slot lost to a switch: a slot given away after its useful part.
            prop_oneof![Just(0), Just(Q / 4), Just(3 * Q / 4)],
        )
            .prop_map(
                move |(mpl, partitioner, alternates, backfill, repack, overhead)| SimConfig {
                    procs,
                    policy: Policy::Gang,
                    mpl,
                    quantum: Q,
                    partitioner,
                    alternates,
                    repack,
                    backfill,
                    switch_overhead: overhead,
                    // Keeping a chart must change nothing; what it keeps is checked below.
                    chart: Some((0, Micros::MAX / 8)),
                    node_memory: None,
                },
            );
        (jobs, config)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn closed_form_replay_equals_slot_by_slot_stepping((jobs, config) in scenario()) {
        let outcome = simulate(&jobs, Dropped::default(), &config, &mut |_, _| {}).unwrap();
        let mut computed: Vec<(Micros, Micros)> = vec![(0, 0); jobs.len()];
        for r in &outcome.results {
            computed[r.id as usize] = (r.start, r.end);
        }
        prop_assert_eq!(&computed, &stepped(&jobs, &config));
        // The chart: every job's bars lie within its life, and no two bars of one slice
        // hold a processor at the same time.
        for bar in &outcome.bars {
            let end = computed[bar.job as usize].1;
            prop_assert!(bar.from >= jobs[bar.job as usize].submit && bar.to <= end && bar.from < bar.to);
        }
        for (i, a) in outcome.bars.iter().enumerate() {
            for b in &outcome.bars[i + 1..] {
                let together = a.slice == b.slice && a.from < b.to && b.from < a.to;
                let shared = a.spans.iter().any(|x| b.spans.iter().any(|y| {
                    x.start < y.start + y.len && y.start < x.start + x.len
                }));
                prop_assert!(!(together && shared), "{:?} and {:?}", a, b);
            }
        }
    }
}
