//! The node agent behind its seam: orders in, events out, on the real slot clock with an
//! in-memory actuator. Nothing waits for an answer, and a controller that lets go leaves
//! nothing frozen.

use cosched_agent::*;
use cosched_cgroups::{Fake, FakeCall};
use cosched_core::{Generation, Partition, Plan, PlanEntry, PlanSlice, Role, Rotation};
use cosched_os::now_micros;
use cosched_proto::{Command, Event, NodeMap, Order};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const QUANTUM: i64 = 20_000;

/// A state directory of the test's own (the agent logs its boundaries there), removed after.
struct StateDir(PathBuf);

impl StateDir {
    fn new(test: &str) -> StateDir {
        let dir = std::env::temp_dir().join(format!("cosched-node-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        StateDir(dir)
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The agent takes its slot clock from the first generation, as a remote node does.
fn settings(state: &StateDir, clock_shift_us: i64) -> NodeSettings {
    NodeSettings {
        node: "n".into(),
        cpus: "0".parse().unwrap(),
        mode: Mode::Gang,
        idle_after: None,
        give_away_after: None,
        state_dir: state.0.clone(),
        supervisor_exe: "/nonexistent".into(),
        clock_shift_us,
        tasks_per_cpu: Some(64),
        time_slice_us: None,
        status_every: cosched_proto::STATUS_PERIOD_US,
        realtime: true,
    }
}

/// Jobs 1 and 2 on the same processor, each in a slice of its own.
fn two_slices(first_slot: i64, rotation: Rotation) -> Command {
    a_slice_each(&[1, 2], 1, first_slot, rotation)
}

/// Generation `number`: `jobs` on the same processor, each in a slice of its own, in that
/// order from `first_slot`.
fn a_slice_each(jobs: &[u64], number: u64, first_slot: i64, rotation: Rotation) -> Command {
    let slice = |job| PlanSlice {
        entries: vec![PlanEntry {
            job,
            partition: Partition::block(0, 1),
            role: Role::Own,
        }],
    };
    let plan = Plan {
        slices: jobs.iter().map(|&job| slice(job)).collect(),
    };
    let core = Generation::follow(None, plan, first_slot);
    let nodes = NodeMap::single("n", 1).unwrap();
    let mut generation = cosched_proto::Generation::new(&core, rotation, &nodes);
    generation.number = number;
    Command::Publish { generation }
}

/// A gang agent on a fake actuator, on its own thread, with jobs 1 and 2 started on CPU 0.
fn agent_with_two_jobs(settings: NodeSettings) -> Running {
    let rotation = Rotation::new(now_micros() / QUANTUM * QUANTUM, QUANTUM);
    let (orders, source) = channel::<Order>();
    let (sink, events) = channel::<Event>();
    let agent = NodeAgent::new(settings, Fake::default(), Arc::new(sink));
    let clock = std::thread::spawn(move || agent.run(source));
    for job in [1, 2] {
        let start = Command::Start {
            job,
            cpus: "0".parse().unwrap(),
            memory: None,
            launch: None,
            mode: None,
        };
        orders.send(start.into()).unwrap();
    }
    Running {
        rotation,
        orders,
        events,
        clock,
    }
}

/// The same, switching them from the next boundary on.
fn agent_switching_two_jobs(settings: NodeSettings) -> Running {
    let running = agent_with_two_jobs(settings);
    let rotation = running.rotation;
    let first = two_slices(rotation.next_boundary(now_micros()), rotation);
    running.orders.send(first.into()).unwrap();
    running
}

struct Running {
    rotation: Rotation,
    orders: Sender<Order>,
    events: Receiver<Event>,
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
    let state = StateDir::new("lets-go");
    let Running {
        orders,
        events,
        clock,
        ..
    } = agent_switching_two_jobs(settings(&state, 0));
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
    // One processor each: 64 tasks (`tasks_per_cpu`), set before anything could start.
    assert_eq!(fake.jobs["job-1"].most_tasks, Some(64));
    let limited = |job: &str| {
        fake.calls
            .iter()
            .position(|c| *c == FakeCall::LimitTasks(job.into(), 64))
    };
    assert!(limited("job-1").is_some() && limited("job-2").is_some());
    assert!(ever.contains("job-1") && ever.contains("job-2"), "{ever:?}");
    assert!(fake.frozen().is_empty(), "left frozen: {:?}", fake.frozen());
    let (statuses, events): (Vec<Event>, Vec<Event>) = events
        .try_iter()
        .partition(|e| matches!(e, Event::Status { .. }));
    assert!(
        matches!(events.as_slice(), [Event::Trouble { job: 99, .. }]),
        "{events:?}"
    );
    // One report at the start, about one a second, and a last one at the stop.
    let Some(Event::Status { status: last }) = statuses.last() else {
        panic!("no status: {statuses:?}");
    };
    assert!(statuses.len() >= 2, "{statuses:?}");
    assert!(
        last.lateness_us.count > 0 && last.switch_us.count > 0,
        "{last:?}"
    );
    assert_eq!(last.generation, Some(1), "{last:?}");
    assert!(!last.scheduling, "a stopped agent says so: {last:?}");
}

#[test]
fn an_ended_job_loses_its_cgroup_and_stop_with_cancel_kills_the_rest() {
    let state = StateDir::new("ended");
    let Running { orders, clock, .. } = agent_with_two_jobs(settings(&state, 0));
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

#[test]
fn a_generation_with_another_slot_clock_restarts_the_clock_on_it() {
    let state = StateDir::new("clock");
    let Running {
        orders,
        events,
        clock,
        ..
    } = agent_switching_two_jobs(settings(&state, 0));
    std::thread::sleep(Duration::from_millis(200));
    // A new controller with a longer quantum and another epoch: its slot numbers are far
    // beyond the old clock's, so its generation is entered only on a clock that counts them.
    let slower = Rotation::new(7_000, 2 * QUANTUM);
    let first = slower.next_boundary(now_micros());
    orders
        .send(a_slice_each(&[1, 2], 2, first, slower).into())
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    // Stopped before the end: the replay reads up to the release, which thaws everyone.
    orders.send(Command::Suspend { job: 2 }.into()).unwrap();
    drop(orders);
    let (fake, stopped) = clock.join().unwrap();
    stopped.unwrap();
    let (most, _) = replay(&fake.calls);
    assert_eq!(most, 1, "both gangs ran at once: {:?}", fake.calls);
    let last = events
        .try_iter()
        .filter_map(|e| match e {
            Event::Status { status } => Some(status),
            _ => None,
        })
        .last()
        .expect("a status");
    assert_eq!(
        last.generation,
        Some(2),
        "entered on the new clock: {last:?}"
    );
}

/// A generation that comes in the quiet just before the boundary of its first slot (after
/// the clock's last look for orders) is in force at that boundary: the job the old plan had
/// entering there is never thawed. Taken just after the switch, as it was, it thawed that
/// job and froze it again a moment later.
#[test]
fn a_generation_come_just_before_its_boundary_is_in_force_at_it() {
    let state = StateDir::new("quiet-generation");
    let Running {
        rotation,
        orders,
        clock,
        ..
    } = agent_with_two_jobs(settings(&state, 0));
    // Each attempt: jobs 1 and 2 take turns from `first`; job 1's next slot `slot` (an even
    // offset) goes to job 2 alone by a generation sent 400 µs before its boundary. One sent
    // too late (the test's thread slept past the mark) counts for nothing.
    let mut counted = Vec::new();
    let mut number = 1;
    for _attempt in 0..20 {
        let first = rotation.next_boundary(now_micros()) + 1;
        orders
            .send(a_slice_each(&[1, 2], number, first, rotation).into())
            .unwrap();
        let slot = first + 4;
        let boundary = rotation.slot_start(slot);
        std::thread::sleep(Duration::from_micros(
            (boundary - 400 - now_micros()).max(0) as u64,
        ));
        orders
            .send(a_slice_each(&[2], number + 1, slot, rotation).into())
            .unwrap();
        if now_micros() <= boundary - 200 {
            counted.push(slot);
        }
        number += 2;
        std::thread::sleep(Duration::from_micros((2 * QUANTUM) as u64));
        if counted.len() == 3 {
            break;
        }
    }
    drop(orders);
    clock.join().unwrap().1.unwrap();
    assert!(
        !counted.is_empty(),
        "no generation sent in time in 20 tries"
    );
    let records = cosched_agent::boundaries::read_log(&state.0);
    for slot in counted {
        let entering: Vec<_> = records.iter().filter(|r| r.slot == slot).collect();
        let thawed_one = entering
            .iter()
            .any(|r| r.started.iter().any(|moment| moment.job == 1));
        assert!(!thawed_one, "slot {slot}: {entering:?}");
    }
}

#[test]
fn a_shifted_clock_switches_that_much_earlier_and_logs_on_the_true_clock() {
    let shift = 7_000;
    let state = StateDir::new("shift");
    let Running {
        rotation,
        orders,
        clock,
        ..
    } = agent_switching_two_jobs(settings(&state, shift));
    std::thread::sleep(Duration::from_millis(300));
    drop(orders);
    clock.join().unwrap().1.unwrap();
    let records = cosched_agent::boundaries::read_log(&state.0);
    // The first generation may apply within the slot under way (on the agent's clock).
    let at_boundaries: Vec<_> = records.iter().filter(|r| r.lateness_us.is_some()).collect();
    assert!(at_boundaries.len() >= 5, "{records:?}");
    for record in at_boundaries {
        // Due at the slot's start on the agent's clock, which is `shift` early on the true one.
        let due = record.woke_us - record.lateness_us.unwrap();
        assert_eq!(due, rotation.slot_start(record.slot) - shift, "{record:?}");
        // One job leaves and the other enters at each boundary, the leaver stopped first.
        assert_eq!(record.started.len(), 1, "{record:?}");
        for stopped in &record.stopped {
            assert!(stopped.at_us <= record.started[0].at_us, "{record:?}");
        }
        assert!(record.started[0].at_us >= due, "{record:?}");
    }
    let slots: Vec<i64> = records.iter().map(|r| r.slot).collect();
    assert!(slots.windows(2).all(|w| w[0] < w[1]), "{slots:?}");
}

/// A state directory named for `test`, settings whose supervisor only notes when it started
/// (µs, the true clock, a line each in `started-at`) and exits, and a job's launch.
fn marking_supervisor(test: &str) -> (StateDir, NodeSettings, cosched_proto::Launch) {
    use std::os::unix::fs::PermissionsExt;
    let state = StateDir::new(test);
    for sub in STATE_SUBDIRS {
        std::fs::create_dir_all(state.0.join(sub)).unwrap();
    }
    let exe = state.0.join("supervisor.sh");
    let script = format!(
        "#!/bin/sh\nPATH=/usr/bin:/bin date +%s%6N >> {}\n",
        state.0.join("started-at").display()
    );
    std::fs::write(&exe, script).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let settings = NodeSettings {
        supervisor_exe: exe,
        ..settings(&state, 0)
    };
    let launch = cosched_proto::Launch {
        argv: vec!["true".into()],
        env: Vec::new(),
        cwd: state.0.display().to_string(),
        uid: 0,
        gid: 0,
        groups: Vec::new(),
        output: Some(state.0.join("out").display().to_string()),
        error: None,
        holder: false,
        hosts: Vec::new(),
        limits: Vec::new(),
    };
    (state, settings, launch)
}

/// Lets the agent go and waits for its end; returns when the supervisors of
/// `marking_supervisor` started (in order) and what the agent reported but its status.
fn let_go(
    orders: Sender<Order>,
    clock: JoinHandle<(Fake, Result<(), String>)>,
    events: &Receiver<Event>,
    state: &StateDir,
) -> (Vec<i64>, Vec<Event>) {
    drop(orders);
    clock.join().unwrap().1.unwrap();
    let mut started: Vec<i64> = std::fs::read_to_string(state.0.join("started-at"))
        .unwrap_or_default()
        .lines()
        .map(|line| line.parse().unwrap())
        .collect();
    started.sort_unstable();
    let events = events
        .try_iter()
        .filter(|e| !matches!(e, Event::Status { .. }))
        .collect();
    (started, events)
}

/// Checks that `events` report job `cancelled`'s and job `ended`'s ends, neither started.
fn ended_unstarted(events: &[Event], cancelled: u64, ended: u64) {
    let note = |of: u64| {
        events.iter().find_map(|event| match event {
            Event::Ended { job, ending } if *job == of => ending.note.clone(),
            _ => None,
        })
    };
    assert_eq!(
        note(cancelled).as_deref(),
        Some("cancelled before it started")
    );
    assert_eq!(note(ended).as_deref(), Some("ended before it started"));
}

/// In slots too short for a start between two thaws (20 ms here), a gang job's supervisor
/// starts once the job's slot lets it run, not when its start is ordered: its exec and setup
/// take no processor from a gang thawed beside it. A job cancelled (or, registered, ended)
/// before its first slot never starts, and its end is reported.
#[test]
fn in_short_slots_a_supervisor_starts_in_its_jobs_slot_and_one_cancelled_before_never_starts() {
    supervisor_starts_in_its_jobs_slot("launch-short", QUANTUM, Fake::default());
}

/// Where a process joining a stopped job is not stopped by it (the signals freezer), a gang
/// job's supervisor starts in its job's slot, however long the slots: started out of it, the
/// job ran beside the slot's job until its own turn.
#[test]
fn where_joining_stops_nothing_a_supervisor_starts_in_its_jobs_slot() {
    let signals = Fake {
        signals: true,
        ..Fake::default()
    };
    supervisor_starts_in_its_jobs_slot("launch-signals", 200_000, signals);
}

/// Two slices of `quantum` (jobs 1 and 2, 2 with a supervisor) and two jobs in none (3,
/// cancelled, and 4, ended): only job 2's supervisor starts, in job 2's slot.
fn supervisor_starts_in_its_jobs_slot(test: &str, quantum: i64, actuator: Fake) {
    let (state, settings, launch) = marking_supervisor(test);
    let rotation = Rotation::new(now_micros() / quantum * quantum, quantum);
    let (orders, source) = channel::<Order>();
    let (sink, events) = channel::<Event>();
    let agent = NodeAgent::new(settings, actuator, Arc::new(sink));
    let clock = std::thread::spawn(move || agent.run(source));
    // The slot clock first (before it, a supervisor starts at once: no thaw to meet). Jobs
    // 3 and 4 are in no slice: they wait; 3 is cancelled, 4 ended.
    let first = rotation.next_boundary(now_micros()) + 2;
    orders.send(two_slices(first, rotation).into()).unwrap();
    let waiting = [(3, Some(launch.clone())), (4, Some(launch.clone()))];
    for (job, launch) in [(1, None), (2, Some(launch))].into_iter().chain(waiting) {
        let start = Command::Start {
            job,
            cpus: "0".parse().unwrap(),
            memory: None,
            launch,
            mode: None,
        };
        orders.send(start.into()).unwrap();
    }
    orders.send(Command::Cancel { job: 3 }.into()).unwrap();
    orders.send(Command::Finish { job: 4 }.into()).unwrap();
    // Job 2's slot is the generation's first or second: its supervisor has started by half
    // a slot after that.
    let until = (rotation.slot_start(first + 2) + quantum / 2).max(now_micros() + 300_000);
    std::thread::sleep(Duration::from_micros((until - now_micros()).max(0) as u64));
    let (started, events) = let_go(orders, clock, &events, &state);
    assert_eq!(
        started.len(),
        1,
        "job 2's supervisor alone: {started:?} {events:?}"
    );
    let slot_of_2 = boundaries::read_log(&state.0)
        .into_iter()
        .flat_map(|record| record.started)
        .find(|moment| moment.job == 2)
        .expect("job 2 had a slot");
    assert!(
        started[0] >= slot_of_2.at_us,
        "job 2's supervisor started at {}, {} µs before its slot",
        started[0],
        slot_of_2.at_us - started[0]
    );
    ended_unstarted(&events, 3, 4);
}

/// A gang job's supervisor starts as its order comes, though the job has no slot yet (its
/// processes wait frozen: its slot is not spent on the start); one ordered just after a
/// boundary waits until the start window opens (the thawed ranks' first moments are not
/// shared with a start). A job cancelled (or, registered, ended) while its
/// start waited never starts, and its end is reported.
#[test]
fn a_supervisor_starts_as_ordered_but_never_beside_a_thaw_and_one_cancelled_first_never_starts() {
    // Slots long enough that the test's orders land where it means them to.
    const SLOT: i64 = 400_000;
    const CLEAR: i64 = SLOT / 4;
    let (state, settings, launch) = marking_supervisor("launch");
    let rotation = Rotation::new(now_micros() / SLOT * SLOT, SLOT);
    let (orders, source) = channel::<Order>();
    let (sink, events) = channel::<Event>();
    let agent = NodeAgent::new(settings, Fake::default(), Arc::new(sink)).with_start_clear(CLEAR);
    let clock = std::thread::spawn(move || agent.run(source));
    let start = |job, launch| -> Order {
        Command::Start {
            job,
            cpus: "0".parse().unwrap(),
            memory: None,
            launch,
            mode: None,
        }
        .into()
    };
    let sleep_until = |at: i64| {
        let wait = at - now_micros();
        if wait > 0 {
            std::thread::sleep(Duration::from_micros(wait as u64));
        }
    };
    // Jobs 1 and 2 (no supervisor) take the slots; jobs 3 to 6 are in no slice.
    orders.send(start(1, None)).unwrap();
    orders.send(start(2, None)).unwrap();
    let first = rotation.next_boundary(now_micros()) + 1;
    orders.send(two_slices(first, rotation).into()).unwrap();
    // Mid-slot: job 3's supervisor starts at once.
    let middle = rotation.slot_start(first) + SLOT / 2;
    sleep_until(middle);
    orders.send(start(3, Some(launch.clone()))).unwrap();
    // Just after the next boundary: job 4's waits for the window, 5 is cancelled and 6 ended
    // meanwhile.
    let boundary = rotation.slot_start(first + 1);
    sleep_until(boundary + 1_000);
    orders.send(start(4, Some(launch.clone()))).unwrap();
    orders.send(start(5, Some(launch.clone()))).unwrap();
    orders.send(Command::Cancel { job: 5 }.into()).unwrap();
    orders.send(start(6, Some(launch))).unwrap();
    orders.send(Command::Finish { job: 6 }.into()).unwrap();
    sleep_until(boundary + CLEAR + 300_000);
    let (started, events) = let_go(orders, clock, &events, &state);
    assert_eq!(
        started.len(),
        2,
        "jobs 3 and 4's supervisors alone: {started:?} {events:?}"
    );
    assert!(
        started[0] >= middle && started[1] >= boundary + CLEAR,
        "job 3's supervisor started at {} µs into its slot (ordered at {}), job 4's {} µs after \
         the boundary (its window ends at {CLEAR})",
        started[0] - rotation.slot_start(first),
        SLOT / 2,
        started[1] - boundary
    );
    ended_unstarted(&events, 5, 6);
}

#[test]
fn periodic_status_reports_come_between_boundaries_not_at_them() {
    let state = StateDir::new("status-moment");
    let quantum = 100_000;
    let settings = NodeSettings {
        status_every: 250_000,
        ..settings(&state, 0)
    };
    let rotation = Rotation::new(now_micros() / quantum * quantum, quantum);
    let (orders, source) = channel::<Order>();
    let (sink, events) = channel::<Event>();
    let agent = NodeAgent::new(settings, Fake::default(), Arc::new(sink));
    let clock = std::thread::spawn(move || agent.run(source));
    let first = two_slices(rotation.next_boundary(now_micros()), rotation);
    orders.send(first.into()).unwrap();
    std::thread::sleep(Duration::from_millis(1_300));
    drop(orders);
    clock.join().unwrap().1.unwrap();
    let sent: Vec<i64> = events
        .try_iter()
        .filter_map(|e| match e {
            Event::Status { status } => Some(status.sent_us),
            _ => None,
        })
        .collect();
    // The first report comes before the slot clock, the last at the stop.
    let periodic = &sent[1..sent.len().saturating_sub(1).max(1)];
    assert!(periodic.len() >= 2, "{sent:?}");
    for at in periodic {
        let into = at - rotation.slot_start(rotation.slot_at(*at));
        assert!(
            into >= quantum / 8,
            "a report {into} µs after a boundary: {sent:?}"
        );
    }
}
