//! A generation through etcd, as the controller writes it and an agent takes it: the header for
//! every node, and a node's part only when its entries change (real etcd, scripts/deps).

use cosched_cluster::{become_leader, join, EtcdOrders, Keys, Outbox, PushOffer, Pusher};
use cosched_core::{Partition, Plan, PlanEntry, PlanSlice, Role, Rotation};
use cosched_etcd::testing::Etcd;
use cosched_os::now_micros;
use cosched_proto::{
    Command, Generation, Mode, Node, NodeInfo, NodeMap, OrderSink, PlanSource, Received,
};
use std::sync::Arc;
use std::time::Duration;

fn nodes() -> NodeMap {
    let node = |name: &str| Node {
        name: name.into(),
        cpus: "0".parse().unwrap(),
        address: None,
    };
    NodeMap::new(vec![node("a"), node("b")]).unwrap()
}

/// Jobs given as (job, first processor, processors), one slice each.
fn generation(
    previous: Option<&cosched_core::Generation>,
    slices: &[(u64, u32, u32)],
) -> cosched_core::Generation {
    let plan = Plan {
        slices: slices
            .iter()
            .map(|&(job, first, size)| PlanSlice {
                entries: vec![PlanEntry {
                    job,
                    partition: Partition::block(first, size),
                    role: Role::Own,
                }],
            })
            .collect(),
    };
    cosched_core::Generation::follow(previous, plan, 10)
}

fn publish(orders: &EtcdOrders, core: &cosched_core::Generation) {
    let wire = Generation::new(core, Rotation::new(0, 100_000), &nodes());
    let parts = wire.parts(&["a", "b"]);
    orders.publish(
        vec![
            ("a".into(), parts[0].clone()),
            ("b".into(), parts[1].clone()),
        ],
        false,
    );
}

/// The next generation node `name`'s source hands out (10 s at most).
fn next_generation(source: &mut impl PlanSource) -> Generation {
    let until = now_micros() + 10_000_000;
    loop {
        match source.next_order(until) {
            Received::Order(order) => {
                if let Command::Publish { generation } = order.command {
                    return generation;
                }
            }
            Received::Timeout => panic!("no generation within 10 s"),
            _ => {}
        }
    }
}

/// The generation the source settles on: the header comes on a watch of its own and may come
/// before the node's new part, so the node may first run its last part under the new header
/// (for the milliseconds until the part comes); `wanted` tells the settled one.
fn settled(source: &mut impl PlanSource, wanted: impl Fn(&Generation) -> bool) -> Generation {
    for _ in 0..3 {
        let got = next_generation(source);
        if wanted(&got) {
            return got;
        }
    }
    panic!("no generation as wanted after three");
}

/// How the leader reaches the agent besides etcd.
#[derive(Clone, Copy, Debug)]
enum Push {
    /// Not at all: the agent follows etcd alone.
    Off,
    /// Pushed as etcd commits: the agent's header watch rests while connected.
    On,
    /// Offered at an address where nothing listens: the agent follows etcd meanwhile.
    Dead,
}

#[test]
fn a_node_runs_its_latest_part_under_the_newest_header() {
    runs_its_latest_part_under_the_newest_header(Push::Off);
}

#[test]
fn pushed_a_node_runs_its_latest_part_under_the_newest_header() {
    runs_its_latest_part_under_the_newest_header(Push::On);
}

#[test]
fn with_the_push_out_of_reach_a_node_follows_etcd() {
    runs_its_latest_part_under_the_newest_header(Push::Dead);
}

fn runs_its_latest_part_under_the_newest_header(push: Push) {
    let etcd = Etcd::start(&format!("generations-{push:?}"));
    let client = Arc::new(etcd.client());
    let keys = Keys::new(&format!("gen-{push:?}-{}", std::process::id())).unwrap();
    let pusher = match push {
        Push::Off => None,
        Push::On | Push::Dead => Some(Arc::new(
            Pusher::start("127.0.0.1:0".parse().unwrap()).unwrap(),
        )),
    };
    let offer = pusher.as_ref().map(|p| match push {
        // A port that was free a moment ago: nothing answers there.
        Push::Dead => PushOffer {
            address: std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap(),
            ..p.offer()
        },
        _ => p.offer(),
    });
    let leadership = become_leader(Arc::clone(&client), &keys, 5, offer, |_| {}).unwrap();
    let outbox = Arc::new(Outbox::start(Arc::clone(&client), "test").unwrap());
    let orders = EtcdOrders::new(
        Arc::clone(&outbox),
        keys.clone(),
        &leadership,
        pusher.clone(),
    );
    let member = |node: &str| NodeInfo {
        protocol: cosched_proto::PROTOCOL_VERSION,
        node: node.into(),
        cpus: Partition::block(0, 1),
        mode: Mode::Gang,
        agent: "test".into(),
        joined_us: now_micros(),
        address: None,
        lease_ttl_s: 5,
        memory_bytes: None,
    };
    let b = join(
        Arc::clone(&client),
        &keys,
        member("b"),
        5,
        Duration::from_secs(1),
    )
    .unwrap();
    let (mut source, _closer) = b.orders(5_000_000).unwrap();
    if let (Push::On, Some(pusher)) = (push, &pusher) {
        // Connected before the first generation, so that it comes pushed.
        let since = std::time::Instant::now();
        while pusher.connected() == 0 {
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "b never connected"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    // Job 1 on both nodes.
    let first = generation(None, &[(1, 0, 2)]);
    publish(&orders, &first);
    let got = next_generation(&mut source);
    assert_eq!((got.number, got.slices.len()), (first.number, 1));
    assert_eq!(got.slices[0].entries[0].job, 1);

    // Job 2 in a new slice on node a alone: b's entries are unchanged, only the header
    // (slice count) reaches it, and b runs its part under it.
    let second = generation(Some(&first), &[(1, 0, 2), (2, 0, 1)]);
    publish(&orders, &second);
    let got = settled(&mut source, |g| g.number == second.number);
    assert_eq!(got.number, second.number);
    assert_eq!(got.slices.len(), 2, "the new slice, empty on b");
    assert_eq!(got.slices[0].entries[0].job, 1);
    assert!(got.slices[1].entries.is_empty());
    let parts = client.get_prefix(&keys.orders("b")).unwrap().0;
    assert_eq!(parts.len(), 1, "b's one part key");
    let part: Command = serde_json::from_slice(&parts[0].value).unwrap();
    assert!(
        matches!(part, Command::Publish { generation } if generation.number == first.number),
        "b's part was not rewritten"
    );

    // Job 3 on b: its part changes and comes with its own header.
    let third = generation(Some(&second), &[(1, 0, 2), (2, 0, 1), (3, 1, 1)]);
    publish(&orders, &third);
    let got = settled(&mut source, |g| {
        g.slices.get(2).is_some_and(|s| !s.entries.is_empty())
    });
    assert_eq!(got.number, third.number);
    assert_eq!(got.slices.len(), 3);
    assert_eq!(got.slices[2].entries[0].job, 3);
    let revision = |key: &str| client.get(key).unwrap().unwrap().mod_revision;
    let (part_b, header) = (keys.generation("b"), keys.generation_header());
    // The part alone brings the generation: wait for the header behind it.
    let header_is = |number: u64| {
        let since = std::time::Instant::now();
        loop {
            let value = client.get(&header).unwrap().unwrap().value;
            if serde_json::from_slice::<Generation>(&value).unwrap().number == number {
                return;
            }
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "no header {number}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    header_is(third.number);
    // Queued together, the two may go in one transaction (one revision), in queue order.
    assert!(
        revision(&part_b) <= revision(&header),
        "a part of its own goes first"
    );

    // Job 3 also an alternate in job 2's slice, where b is free: b's part only gains it, and
    // goes after the header (b may run its last part under it meanwhile: a subset).
    let mut fourth_plan = third.plan.clone();
    fourth_plan.slices[1].entries.push(PlanEntry {
        job: 3,
        partition: Partition::block(1, 1),
        role: Role::Alternate,
    });
    let fourth = cosched_core::Generation::follow(Some(&third), fourth_plan, 10);
    publish(&orders, &fourth);
    let got = settled(&mut source, |g| g.slices[1].entries.len() == 1);
    assert_eq!(got.number, fourth.number);
    assert_eq!(got.slices[1].entries[0].job, 3);
    header_is(fourth.number);
    assert!(
        revision(&part_b) >= revision(&header),
        "alternates alone go after"
    );

    // A new leader numbers its generations from 1 again, and writes every part (it has
    // nothing to compare with): the node runs what was written last, whatever its number.
    let successor = EtcdOrders::new(Arc::clone(&outbox), keys.clone(), &leadership, pusher);
    let fresh = generation(None, &[(4, 0, 2)]);
    assert!(fresh.number < third.number);
    publish(&successor, &fresh);
    let got = settled(&mut source, |g| g.slices[0].entries[0].job == 4);
    assert_eq!((got.number, got.slices.len()), (fresh.number, 1));
    assert_eq!(got.slices[0].entries[0].job, 4);
    b.leave(Duration::from_secs(1));
}
