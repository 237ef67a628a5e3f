//! The node agent behind its seam: orders in, events out, on the real slot clock with an
//! in-memory actuator. Nothing waits for an answer, and a controller that lets go leaves
//! nothing frozen.

use cosched_agent::clock::now_micros;
use cosched_agent::*;
use cosched_cgroups::{Fake, FakeCall};
use cosched_core::{Generation, Partition, Plan, PlanEntry, PlanSlice, Role, Rotation};
use cosched_proto::{Command, Event, NodeMap};
use std::collections::BTreeSet;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const QUANTUM: i64 = 20_000;

fn settings(rotation: Rotation) -> NodeSettings {
    NodeSettings {
        node: "n".into(),
        mode: Mode::Gang,
        rotation,
        idle_after: None,
        state_dir: std::env::temp_dir(),
        supervisor_exe: "/nonexistent".into(),
    }
}

/// Jobs 1 and 2 on the same processor, each in a slice of its own.
fn two_slices(first_slot: i64, rotation: Rotation) -> Command {
    let slice = |job| PlanSlice {
        entries: vec![PlanEntry {
            job,
            partition: Partition::block(0, 1),
            role: Role::Own,
        }],
    };
    let plan = Plan {
        slices: vec![slice(1), slice(2)],
    };
    let core = Generation::follow(None, plan, first_slot);
    let nodes = NodeMap::single("n", 1).unwrap();
    Command::Publish {
        generation: cosched_proto::Generation::new(&core, rotation, &nodes),
    }
}

/// A gang agent on a fake actuator, on its own thread, with jobs 1 and 2 started on CPU 0.
fn agent_with_two_jobs() -> Running {
    let rotation = Rotation::new(now_micros() / QUANTUM * QUANTUM, QUANTUM);
    let (orders, source) = channel::<Order>();
    let (sink, events) = channel::<Event>();
    let stats = Arc::new(Mutex::new(Stats::new("fake".into())));
    let agent = NodeAgent::new(
        settings(rotation),
        Fake::default(),
        stats.clone(),
        Arc::new(sink),
    );
    let clock = std::thread::spawn(move || agent.run(source));
    for job in [1, 2] {
        let start = Command::Start {
            job,
            cpus: "0".parse().unwrap(),
            launch: None,
        };
        orders.send(start.into()).unwrap();
    }
    Running {
        rotation,
        orders,
        events,
        stats,
        clock,
    }
}

struct Running {
    rotation: Rotation,
    orders: Sender<Order>,
    events: Receiver<Event>,
    stats: Arc<Mutex<Stats>>,
    clock: JoinHandle<(Fake, Result<(), String>)>,
}

/// Replays the actuator's calls up to the final release (the first unpin): the most jobs
/// thawed at once, and the jobs ever thawed.
fn replay(calls: &[FakeCall]) -> (usize, BTreeSet<String>) {
    let (mut thawed, mut ever, mut most) = (BTreeSet::new(), BTreeSet::new(), 0);
    let scheduled = calls
        .iter()
        .take_while(|c| !matches!(c, FakeCall::Unpin(_)));
    for call in scheduled {
        match call {
            FakeCall::Thaw(job) => {
                thawed.insert(job.clone());
                ever.insert(job.clone());
            }
            FakeCall::Freeze(job) | FakeCall::Remove(job) => {
                thawed.remove(job);
            }
            _ => {}
        }
        most = most.max(thawed.len());
    }
    (most, ever)
}

#[test]
fn orders_switch_gangs_and_a_controller_that_lets_go_leaves_nothing_frozen() {
    let Running {
        rotation,
        orders,
        events,
        stats,
        clock,
    } = agent_with_two_jobs();
    orders
        .send(two_slices(rotation.next_boundary(now_micros()), rotation).into())
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    // Not the agent's job: refused as an event, never an answer to wait for.
    orders.send(Command::Suspend { job: 99 }.into()).unwrap();
    orders.send(Command::Suspend { job: 2 }.into()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    drop(orders);
    let (fake, stopped) = clock.join().unwrap();
    stopped.unwrap();

    let (most, ever) = replay(&fake.calls);
    assert_eq!(most, 1, "both gangs ran at once: {:?}", fake.calls);
    assert!(ever.contains("job-1") && ever.contains("job-2"), "{ever:?}");
    assert!(fake.frozen().is_empty(), "left frozen: {:?}", fake.frozen());
    let events: Vec<Event> = events.try_iter().collect();
    assert!(
        matches!(events.as_slice(), [Event::Trouble { job: 99, .. }]),
        "{events:?}"
    );
    assert!(stats.lock().unwrap().lateness.summary().count > 0);
}

#[test]
fn an_ended_job_loses_its_cgroup_and_stop_with_cancel_kills_the_rest() {
    let Running { orders, clock, .. } = agent_with_two_jobs();
    orders
        .send(
            Command::Ended {
                job: 1,
                stored: true,
            }
            .into(),
        )
        .unwrap();
    orders.send(Command::Stop { cancel: true }.into()).unwrap();
    // Orders after a stop are still carried out until the controller lets go.
    orders
        .send(
            Command::Ended {
                job: 2,
                stored: true,
            }
            .into(),
        )
        .unwrap();
    drop(orders);
    let (fake, stopped) = clock.join().unwrap();
    stopped.unwrap();
    let position = |call: FakeCall| fake.calls.iter().position(|c| *c == call);
    assert!(
        position(FakeCall::Remove("job-1".into())).is_some(),
        "{:?}",
        fake.calls
    );
    let killed = position(FakeCall::Kill("job-2".into())).expect("job 2 killed at stop");
    let removed = position(FakeCall::Remove("job-2".into())).expect("job 2 removed after");
    assert!(killed < removed);
    assert!(fake.jobs.is_empty(), "{:?}", fake.jobs);
}
