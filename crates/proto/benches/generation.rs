//! What the controller does with every generation before etcd sees it, at 1,000 nodes of 2
//! CPUs shaped as `cosched-bench control-plane` fills them: jobs of 4 nodes, two full slices,
//! and a third slice with one job and every job of the first whose processors are free there
//! as alternates. Made into the wire form (each entry's processors placed on their nodes) and
//! cut into the 1,000 nodes' parts. `cargo bench -p cosched-proto --bench generation`.

use cosched_core::{Generation, Partition, Plan, PlanEntry, PlanSlice, Role, Rotation};
use cosched_proto::{Node, NodeMap};
use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;

const NODES: u32 = 1_000;
const CPUS_PER_NODE: u32 = 2;
const JOB_PROCESSORS: u32 = 4 * CPUS_PER_NODE;

fn nodes() -> NodeMap {
    NodeMap::new(
        (0..NODES)
            .map(|i| Node {
                name: format!("node-{i:04}"),
                cpus: Partition::block(0, CPUS_PER_NODE),
                address: None,
            })
            .collect(),
    )
    .expect("valid nodes")
}

fn entry(job: u64, block: u32, role: Role) -> PlanEntry {
    PlanEntry {
        job,
        partition: Partition::block(block * JOB_PROCESSORS, JOB_PROCESSORS),
        role,
    }
}

fn full_machine() -> Generation {
    let blocks = NODES * CPUS_PER_NODE / JOB_PROCESSORS;
    let slice = |first_job: u64| PlanSlice {
        entries: (0..blocks)
            .map(|b| entry(first_job + u64::from(b), b, Role::Own))
            .collect(),
    };
    let mut third = vec![entry(2 * u64::from(blocks) + 1, 0, Role::Own)];
    third.extend((1..blocks).map(|b| entry(1 + u64::from(b), b, Role::Alternate)));
    let plan = Plan {
        slices: vec![
            slice(1),
            slice(1 + u64::from(blocks)),
            PlanSlice { entries: third },
        ],
    };
    Generation::follow(None, plan, 0)
}

fn generation(c: &mut Criterion) {
    let nodes = nodes();
    let names: Vec<&str> = nodes.nodes().iter().map(|n| n.name.as_str()).collect();
    let core = full_machine();
    let rotation = Rotation::new(0, 1_000_000);
    let mut group = c.benchmark_group("generation-1000-nodes");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.bench_function("wire", |b| {
        b.iter(|| cosched_proto::Generation::new(&core, rotation, &nodes))
    });
    let wire = cosched_proto::Generation::new(&core, rotation, &nodes);
    group.bench_function("parts", |b| b.iter(|| wire.parts(&names)));
    group.finish();
}

criterion_group!(benches, generation);
criterion_main!(benches);
