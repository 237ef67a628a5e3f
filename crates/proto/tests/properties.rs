//! A partition split by node and read back by each node names every processor exactly once.

use cosched_core::{Generation, Partition, Plan, PlanEntry, PlanSlice, Role, Rotation, Span};
use cosched_proto::{Node, NodeMap};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// Nodes of equal size with CPU numbers drawn from 0..64, and a set of the machine's processors.
fn machine_and_processors() -> impl Strategy<Value = (NodeMap, BTreeSet<u32>)> {
    (1usize..5, 1usize..9).prop_flat_map(|(nodes, per_node)| {
        let cpus = proptest::collection::btree_set(0u32..64, per_node);
        let total = (nodes * per_node) as u32;
        (
            proptest::collection::vec(cpus, nodes),
            proptest::collection::btree_set(0..total, 0..=total as usize),
        )
            .prop_map(|(cpu_sets, processors)| {
                let nodes = cpu_sets
                    .into_iter()
                    .enumerate()
                    .map(|(i, cpus)| Node {
                        name: format!("n{i}"),
                        cpus: Partition::from_processors(cpus),
                        address: None,
                    })
                    .collect();
                (NodeMap::new(nodes).expect("valid nodes"), processors)
            })
    })
}

proptest! {
    #[test]
    fn every_processor_lands_on_one_cpu_of_its_node((nodes, processors) in machine_and_processors()) {
        let machine = nodes.machine().unwrap();
        let partition = Partition::from_spans(processors.iter().map(|&p| Span::new(p, 1)).collect());
        let placed = nodes.place(&partition);
        let total: u32 = placed.iter().map(|p| p.cpus.size()).sum();
        prop_assert_eq!(total, partition.size());
        // Each node once, in the machine's order.
        let order: Vec<usize> = placed
            .iter()
            .map(|p| nodes.nodes().iter().position(|n| n.name == p.node).unwrap())
            .collect();
        prop_assert!(order.windows(2).all(|w| w[0] < w[1]));
        for (share, &node) in placed.iter().zip(&order) {
            let wanted = processors.iter().filter(|&&p| machine.node_of(p) as usize == node).count();
            prop_assert_eq!(share.cpus.size() as usize, wanted);
            let node_cpus: BTreeSet<u32> = nodes.nodes()[node].cpus.processors().collect();
            prop_assert!(share.cpus.processors().all(|cpu| node_cpus.contains(&cpu)));
        }
        // Each node reads back from a wire generation exactly its share.
        let plan = Plan {
            slices: vec![PlanSlice {
                entries: vec![PlanEntry { job: 1, partition, role: Role::Own }],
            }],
        };
        let core = Generation::follow(None, plan, 0);
        let wire = cosched_proto::Generation::new(&core, Rotation::new(0, 1_000), &nodes);
        for node in nodes.nodes() {
            let mine = wire.for_node(&node.name);
            let got = mine.plan.slices[0].entries.first().map(|e| &e.partition);
            let want = placed.iter().find(|p| p.node == node.name).map(|p| &p.cpus);
            prop_assert_eq!(got, want);
        }
    }
}
