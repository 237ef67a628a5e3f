//! Orders reach the slot clock through a thread of their own, which first does what in an
//! order may wait on other processes: a starting job's cgroups are made there. A directory
//! made in a cgroup tree takes the kernel's cgroup lock, which a process joining any cgroup
//! (a job's own processes, as they start) holds through an RCU grace period: on a kernel
//! without preemption that is milliseconds, and the clock, making the next job's groups while
//! the last one's processes joined theirs, woke that late at the boundary.
//!
//! One order at a time: the relay asks its source for the next only once the clock has
//! carried out the last (a cluster's source deletes an order from etcd then), so an order is
//! never taken from the control plane before the clock is done with the one before. What the
//! clock's part of an order left to do ([`Errand`]: a job's supervisor to start, whose fork
//! waits for the exec, and the new process for a processor that busy jobs may hold for
//! milliseconds) the relay does then, before it takes the next order: what follows a start
//! (a cancel, a finish) finds its supervisor started, or, a gang job's that waits for its
//! slot (`NodeAgent::start_due`), not started.
//!
//! A generation is the exception: the relay queues it and goes back to its source at once,
//! and the clock says nothing when done with it. A generation deletes nothing from the
//! control plane, and the clock leaves no errand for it (a supervisor it lets start goes to
//! the starter's thread, as at a boundary). Nor is the clock woken for one whose first slot
//! is still to come: it takes it when it next looks, and at the latest as it stops taking
//! orders before the next boundary's lead. On the control-plane bench (1,000 agents on
//! 2 CPUs) those two wakes per generation, the relay's when the clock was done and the
//! clock's own, were two thirds of the agents' wakes in a churn, and they ran while the last
//! agents still waited for the leader's push.

use crate::{job_group, RecentTimes};
use cosched_cgroups::GroupMaker;
use cosched_core::{Micros, Rotation};
use cosched_os::realtime::{make_realtime, ORDERS_PRIORITY};
use cosched_os::{now_micros, Log};
use cosched_proto::{receive_by, Command, Order, PlanSource, Received};
use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};

/// Work an order left for after the clock's part, done on the relay's thread.
pub type Errand = Box<dyn FnOnce() + Send>;

/// How long the relay waits on its source at a time: it notices the clock gone within this.
/// The clock ends after the relay forwarded `Closed` (which ends the relay too), so this is
/// only for a clock that panicked; at 250 ms, 1,000 idle agents' relays woke 4,000 times a
/// second on the control-plane bench's 2 CPUs for nothing.
const SOURCE_WAIT_US: Micros = 5_000_000;

/// How long after a boundary the relay leaves the processors to the ranks thawed there. Its
/// own work (a starting job's groups, the errands) is real-time: begun then, it took a thawed
/// rank's processor before the rank first ran, and the whole gang waited for that rank (the
/// unlinks of an ended job's files, held back by the quiet window before the boundary, came
/// in the first millisecond of the slot half the time, 360 µs of a processor at once;
/// ftrace of `cosched-bench churn`). Ranks have started well within this.
pub const THAW_CLEAR_US: Micros = 1_000;

/// Whether the relay waits until the clock is done with `order` (and its errands) before it
/// takes the next: every order but a generation.
pub fn awaited(order: &Order) -> bool {
    !matches!(order.command, Command::Publish { .. })
}

/// What the relay took, in the order taken, each with the moment it came.
type Queue = Arc<Mutex<VecDeque<(Received, Micros)>>>;

fn lock(queue: &Queue) -> std::sync::MutexGuard<'_, VecDeque<(Received, Micros)>> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

/// The clock's end: a [`PlanSource`] that says, on each call, that the order before is done.
pub struct Relayed {
    queue: Queue,
    /// One for each thing queued that the clock must take at once.
    nudges: Receiver<()>,
    done: Sender<()>,
    /// An awaited order was handed out and its end not yet told.
    owed: bool,
    /// When what was handed out last came to the relay.
    arrived: Micros,
}

impl PlanSource for Relayed {
    fn next_order(&mut self, until: Micros) -> Received {
        self.carried_out();
        loop {
            if let Some(received) = self.take(|_| true) {
                return received;
            }
            // Nudged for what another call took first, or for nothing: wait on.
            if let Err(nothing) = receive_by(&self.nudges, until) {
                return nothing;
            }
        }
    }
}

impl Relayed {
    /// Tells the relay the order last handed out is carried out (its errands queued): it
    /// does them and takes the next. The next call for an order tells it otherwise. Nothing
    /// to tell after a generation ([`awaited`]).
    pub fn carried_out(&mut self) {
        if std::mem::take(&mut self.owed) {
            // Gone only if the relay ended, which the next receive then says.
            let _ = self.done.send(());
        }
    }

    /// The generation queued first, if nothing else is ahead of it: the clock takes the
    /// generations for later slots, which did not wake it, before a boundary's lead (an
    /// order of another kind waits for the clock's next call, past the boundary).
    pub fn queued_generation(&mut self) -> Option<Received> {
        self.take(|received| matches!(received, Received::Order(order) if !awaited(order)))
    }

    /// When what was handed out last came to the relay.
    pub fn arrived(&self) -> Micros {
        self.arrived
    }

    fn take(&mut self, wanted: impl FnOnce(&Received) -> bool) -> Option<Received> {
        let mut queue = lock(&self.queue);
        let (received, arrived) = queue.pop_front_if(|(received, _)| wanted(received))?;
        self.arrived = arrived;
        self.owed = matches!(&received, Received::Order(order) if awaited(order));
        Some(received)
    }
}

/// Starts the relay from `source`; `maker` makes a starting job's groups (none: the clock's
/// actuator makes them, as for a fake one); `errands` come from the clock; `clock_shift_us`
/// is the clock's (see `Relay::due_now`). With a real-time clock the relay is real-time too,
/// below it ([`ORDERS_PRIORITY`]): the two share the queue's lock, and a relay preempted by
/// busy jobs while it held one kept the clock waiting for it past a boundary. If no thread
/// can be started, the clock is told the source closed: it lets every job loose and ends.
pub fn relay(
    source: impl PlanSource + Send + 'static,
    maker: Option<GroupMaker>,
    errands: Receiver<Errand>,
    realtime: bool,
    clock_shift_us: Micros,
) -> Relayed {
    let queue = Queue::default();
    let (nudge, nudges) = mpsc::channel();
    let (done, done_here) = mpsc::channel();
    let relay = Relay {
        queue: Arc::clone(&queue),
        nudge,
        done: done_here,
        clock: None,
        clock_shift_us,
        makes: RecentTimes::default(),
    };
    let spawned = std::thread::Builder::new()
        .name("cosched-orders".into())
        .spawn(move || {
            // Processes and threads started here do not inherit it (SCHED_RESET_ON_FORK).
            if realtime {
                if let Err(error) = make_realtime(ORDERS_PRIORITY) {
                    Log::new("agent").warn(format_args!(
                        "no real-time priority for the orders' thread ({error})"
                    ));
                }
            }
            relay.forward(source, maker.as_ref(), &errands)
        });
    if let Err(error) = spawned {
        Log::new("agent").error(format_args!("starting the orders' thread: {error}"));
    }
    Relayed {
        queue,
        nudges,
        done,
        owed: false,
        arrived: 0,
    }
}

/// The relay's thread's side.
struct Relay {
    queue: Queue,
    nudge: Sender<()>,
    done: Receiver<()>,
    /// The slot clock of the last generation queued: the clock's, once it took that.
    clock: Option<Rotation>,
    clock_shift_us: Micros,
    /// How long the latest starting jobs' groups took to make.
    makes: RecentTimes,
}

impl Relay {
    fn forward(
        mut self,
        mut source: impl PlanSource,
        maker: Option<&GroupMaker>,
        errands: &Receiver<Errand>,
    ) {
        loop {
            let received = source.next_order(now_micros() + SOURCE_WAIT_US);
            let (awaits, nudge) = match &received {
                Received::Timeout => {
                    if self.done.try_recv() == Err(TryRecvError::Disconnected) {
                        return;
                    }
                    continue;
                }
                Received::Order(order) => {
                    if let (Command::Start { job, .. }, Some(maker)) = (&order.command, maker) {
                        self.clear_of_thaw(self.makes.slowest().unwrap_or(0));
                        let began = now_micros();
                        // Whatever failed here fails again in the clock's own `create`, which
                        // reports it as the job's start.
                        let _ = maker.make(&job_group(*job));
                        self.makes.record(now_micros() - began);
                    }
                    let nudge = match &order.command {
                        Command::Publish { generation } => self.due_now(generation),
                        _ => true,
                    };
                    (awaited(order), nudge)
                }
                Received::Closed | Received::Adrift | Received::Back => (false, true),
            };
            let closed = matches!(received, Received::Closed);
            lock(&self.queue).push_back((received, now_micros()));
            let gone = nudge && self.nudge.send(()).is_err();
            if gone || closed || (awaits && self.done.recv().is_err()) {
                return;
            }
            let errands: Vec<Errand> = errands.try_iter().collect();
            if !errands.is_empty() {
                // They wait on other processes more than they compute.
                self.clear_of_thaw(0);
            }
            errands.into_iter().for_each(|errand| errand());
        }
    }

    /// Before work expected to take `takes` µs of a processor: waits until [`THAW_CLEAR_US`]
    /// after the boundary last passed on the slot clock known (none known: no wait), or after
    /// the next one when that is nearer than twice `takes` (at most a quarter of the slot, at
    /// least [`THAW_CLEAR_US`]): a starting job's groups (~400 µs here) begun just before a
    /// boundary took a processor through the leavers' freeze and the entrants' thaw (9 of 85
    /// makes in a churn's ftrace; 5 of its 18 starts skewed past 200 µs). Slots under four
    /// times [`THAW_CLEAR_US`] wait for nothing: the wait would be a large part of a slot,
    /// and of a job's start.
    fn clear_of_thaw(&self, takes: Micros) {
        let Some(clock) = self.clock.filter(|c| c.quantum >= 4 * THAW_CLEAR_US) else {
            return;
        };
        let now = now_micros();
        let clear = clear_of_thaw_at(clock, now, takes);
        if now < clear {
            std::thread::sleep(std::time::Duration::from_micros((clear - now) as u64));
        }
    }

    /// Whether the clock must take `generation` at once: it brings another slot clock (or
    /// the first), or its first slot has begun on the clock's time (the agent's clock shift
    /// applied, as the clock applies it). One for a later slot waits until the clock looks.
    fn due_now(&mut self, generation: &cosched_proto::Generation) -> bool {
        // One the clock refuses sets no clock there: the clock says why at once.
        if generation.check().is_err() {
            return true;
        }
        let clock = crate::node::slot_clock(generation, self.clock_shift_us);
        let new_clock = self.clock.replace(clock) != Some(clock);
        new_clock || generation.first_slot <= clock.slot_at(now_micros())
    }
}

/// When work begun at `now` and expected to take `takes` µs is clear of the boundaries'
/// thaws (see `Relay::clear_of_thaw`): `now` itself, or later.
fn clear_of_thaw_at(clock: Rotation, now: Micros, takes: Micros) -> Micros {
    // At most a quarter of the slot, as the clock's quiet window: slow makes (a busy cgroup
    // lock) would otherwise keep most of every slot from them, and every start waiting.
    let room = (2 * takes).min(clock.quantum / 4).max(THAW_CLEAR_US);
    clock.clear_of_boundaries(now, THAW_CLEAR_US, room)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosched_proto::Order;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn cancel(job: u64) -> Order {
        Order::from(Command::Cancel { job })
    }

    /// A source that counts how often it is asked.
    struct Asked(Arc<AtomicUsize>);

    impl PlanSource for Asked {
        fn next_order(&mut self, until: Micros) -> Received {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros((until - now_micros()).max(0) as u64));
            Received::Timeout
        }
    }

    /// With nothing coming, the relay asks its source again only after seconds: an idle
    /// agent's relay does not wake four times a second.
    #[test]
    fn an_idle_relay_rests() {
        let asked = Arc::new(AtomicUsize::new(0));
        let (_errands, errands_queued) = mpsc::channel::<Errand>();
        let _relayed = relay(Asked(Arc::clone(&asked)), None, errands_queued, false, 0);
        std::thread::sleep(Duration::from_millis(1_100));
        let times = asked.load(Ordering::SeqCst);
        assert!(
            times <= 1,
            "asked {times} times in 1.1 s with nothing coming"
        );
    }

    /// A channel that counts the orders taken from it, and how many errands had run by then.
    struct Counting {
        orders: Receiver<Order>,
        taken: Arc<AtomicUsize>,
        errands_done: Arc<AtomicUsize>,
        errands_seen: Arc<AtomicUsize>,
    }

    impl Counting {
        /// Counting `orders`, with its counts: taken, errands done, errands seen done at the
        /// last take.
        fn new(orders: Receiver<Order>) -> (Counting, [Arc<AtomicUsize>; 3]) {
            let counts = [(); 3].map(|()| Arc::new(AtomicUsize::new(0)));
            let [taken, errands_done, errands_seen] = counts.each_ref().map(Arc::clone);
            let counting = Counting {
                orders,
                taken,
                errands_done,
                errands_seen,
            };
            (counting, counts)
        }
    }

    impl PlanSource for Counting {
        fn next_order(&mut self, until: Micros) -> Received {
            let received = self.orders.next_order(until);
            if matches!(received, Received::Order(_)) {
                self.taken.fetch_add(1, Ordering::SeqCst);
                let done = self.errands_done.load(Ordering::SeqCst);
                self.errands_seen.store(done, Ordering::SeqCst);
            }
            received
        }
    }

    #[test]
    fn the_next_order_is_taken_once_the_clock_is_done_with_the_last_and_its_errands_ran() {
        let (orders, source) = mpsc::channel::<Order>();
        let (errands, errands_queued) = mpsc::channel::<Errand>();
        let (counting, [taken, errands_done, errands_seen]) = Counting::new(source);
        let mut relayed = relay(counting, None, errands_queued, false, 0);
        orders.send(cancel(1)).unwrap();
        orders.send(cancel(2)).unwrap();
        let first = relayed.next_order(now_micros() + 5_000_000);
        assert!(matches!(first, Received::Order(_)));
        // The clock carries the first out, leaving an errand: the relay must not have taken
        // the second yet.
        let done = Arc::clone(&errands_done);
        errands
            .send(Box::new(move || {
                std::thread::sleep(Duration::from_millis(20));
                done.fetch_add(1, Ordering::SeqCst);
            }))
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(taken.load(Ordering::SeqCst), 1);
        assert_eq!(errands_done.load(Ordering::SeqCst), 0);
        relayed.carried_out();
        let second = relayed.next_order(now_micros() + 5_000_000);
        assert!(matches!(second, Received::Order(_)));
        assert_eq!(taken.load(Ordering::SeqCst), 2);
        assert_eq!(
            errands_seen.load(Ordering::SeqCst),
            1,
            "taken before its errand ran"
        );
        // Nothing more: the clock's wait ends at its own time.
        let began = Instant::now();
        let none = relayed.next_order(now_micros() + 20_000);
        assert!(matches!(none, Received::Timeout));
        assert!(began.elapsed() >= Duration::from_millis(15));
        drop(orders);
        let closed = relayed.next_order(now_micros() + 5_000_000);
        assert!(matches!(closed, Received::Closed));
    }

    /// A generation of slot clock `quantum_us` from epoch 0, first in force in `first_slot`.
    fn publish(number: u64, quantum_us: Micros, first_slot: i64) -> Order {
        let generation = cosched_proto::Generation {
            protocol: cosched_proto::PROTOCOL_VERSION,
            number,
            published_us: 0,
            epoch_us: 0,
            quantum_us,
            first_slot,
            first_slice: 0,
            slices: Vec::new(),
        };
        Order::from(Command::Publish { generation })
    }

    /// An errand the clock left just after a boundary runs only once the ranks thawed there
    /// have had their first moments, [`THAW_CLEAR_US`] after it.
    #[test]
    fn errands_wait_for_the_thawed_ranks_first_moments() {
        let (orders, source) = mpsc::channel::<Order>();
        let (errands, errands_queued) = mpsc::channel::<Errand>();
        let mut relayed = relay(source, None, errands_queued, false, 0);
        let quantum = 50_000;
        orders.send(publish(1, quantum, 0)).unwrap();
        assert!(matches!(
            relayed.next_order(now_micros() + 5_000_000),
            Received::Order(_)
        ));
        // Just after a boundary: the errand would run at once, in the thaw's first moments.
        while now_micros().rem_euclid(quantum) > 200 {
            std::hint::spin_loop();
        }
        orders.send(cancel(1)).unwrap();
        assert!(matches!(
            relayed.next_order(now_micros() + 5_000_000),
            Received::Order(_)
        ));
        let handed = now_micros();
        let ran = Arc::new(AtomicUsize::new(0));
        let noted = Arc::clone(&ran);
        errands
            .send(Box::new(move || {
                noted.store(now_micros() as usize, Ordering::SeqCst)
            }))
            .unwrap();
        relayed.carried_out();
        wait_until("the errand ran", || ran.load(Ordering::SeqCst) != 0);
        let boundary = handed - handed.rem_euclid(quantum);
        let after = ran.load(Ordering::SeqCst) as Micros - boundary;
        assert!(
            after >= THAW_CLEAR_US,
            "the errand ran {after} µs after the boundary"
        );
    }

    /// A starting job's groups are made clear of the thaws: not in a boundary's first
    /// moments, and not begun so near the next that making them (twice the slowest lately)
    /// would run into its freezes and thaws.
    #[test]
    fn groups_are_made_clear_of_the_thaws() {
        let clock = Rotation::new(0, 20_000);
        let boundary = 100 * 20_000;
        let clear = |now, takes| clear_of_thaw_at(clock, now, takes);
        // Mid-slot, with room before the next boundary: at once.
        assert_eq!(clear(boundary + 5_000, 400), boundary + 5_000);
        assert_eq!(clear(boundary + 18_900, 400), boundary + 18_900);
        // In a thaw's first moments: after them.
        assert_eq!(clear(boundary + 200, 400), boundary + THAW_CLEAR_US);
        // Too near the next boundary for 400 µs of work (twice that, or the clear time at
        // least): after that boundary's thaw.
        assert_eq!(
            clear(boundary + 19_300, 400),
            boundary + 20_000 + THAW_CLEAR_US
        );
        assert_eq!(
            clear(boundary + 19_500, 0),
            boundary + 20_000 + THAW_CLEAR_US
        );
        // Slow work needs more room: 2 ms made 3.5 ms before the boundary waits too.
        assert_eq!(
            clear(boundary + 16_500, 2_000),
            boundary + 20_000 + THAW_CLEAR_US
        );
        // But never more than a quarter of the slot: 8 ms of work 6 ms before a boundary
        // begins at once, 4 ms before it waits.
        assert_eq!(clear(boundary + 14_000, 8_000), boundary + 14_000);
        assert_eq!(
            clear(boundary + 16_000, 8_000),
            boundary + 20_000 + THAW_CLEAR_US
        );
    }

    fn queued(relayed: &Relayed) -> usize {
        lock(&relayed.queue).len()
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not within 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The clock is woken for a generation that brings a slot clock or whose first slot has
    /// begun, not for one of a later slot: that one waits for its look before the boundary's
    /// lead, which takes generations only.
    #[test]
    fn only_a_generation_due_now_wakes_the_clock() {
        let (orders, source) = mpsc::channel::<Order>();
        let (_errands, errands_queued) = mpsc::channel::<Errand>();
        let mut relayed = relay(source, None, errands_queued, false, 0);
        // Ten-second slots: the slot under way stays so through the test.
        let quantum = 10_000_000;
        let now = now_micros() / quantum;
        let nudged = |relayed: &Relayed| relayed.nudges.try_recv().is_ok();
        orders.send(publish(1, quantum, now + 1)).unwrap();
        wait_until("the first generation queued", || queued(&relayed) == 1);
        assert!(
            nudged(&relayed),
            "the first slot clock did not wake the clock"
        );
        assert!(relayed.queued_generation().is_some());
        orders.send(publish(2, quantum, now + 1)).unwrap();
        wait_until("a later slot's generation queued", || queued(&relayed) == 1);
        assert!(!nudged(&relayed), "woken for a later slot's generation");
        orders.send(publish(3, quantum, now)).unwrap();
        wait_until("the slot's own generation queued", || queued(&relayed) == 2);
        assert!(nudged(&relayed), "not woken for the slot under way");
        orders.send(publish(4, quantum / 2, now + 5)).unwrap();
        wait_until("a new clock's generation queued", || queued(&relayed) == 3);
        assert!(nudged(&relayed), "not woken for another slot clock");
        // In the order taken; the look before a lead stops at an order of another kind.
        orders.send(cancel(7)).unwrap();
        wait_until("the cancel queued", || queued(&relayed) == 4);
        assert!(nudged(&relayed), "not woken for a cancel");
        for number in [2, 3, 4] {
            let taken = relayed.queued_generation();
            assert!(
                matches!(&taken, Some(Received::Order(order)) if matches!(&order.command, Command::Publish { generation } if generation.number == number)),
                "expected generation {number}, took {taken:?}"
            );
        }
        assert!(relayed.queued_generation().is_none(), "took the cancel");
        let cancelled = relayed.next_order(now_micros() + 5_000_000);
        assert!(matches!(&cancelled, Received::Order(order) if awaited(order)));
    }

    /// A generation is handed on without waiting for the clock: the relay takes the next
    /// order meanwhile, and the clock is not asked to say it is done.
    #[test]
    fn a_generation_is_not_waited_for() {
        let (orders, source) = mpsc::channel::<Order>();
        let (_errands, errands_queued) = mpsc::channel::<Errand>();
        let (counting, [taken, ..]) = Counting::new(source);
        let mut relayed = relay(counting, None, errands_queued, false, 0);
        orders.send(publish(1, 100_000, 0)).unwrap();
        orders.send(cancel(1)).unwrap();
        orders.send(cancel(2)).unwrap();
        let first = relayed.next_order(now_micros() + 5_000_000);
        assert!(matches!(&first, Received::Order(o) if !awaited(o)));
        // The clock is still at the generation: the cancel is taken, and the second waits
        // for the clock to be done with the first.
        wait_until("the cancel taken", || taken.load(Ordering::SeqCst) >= 2);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(taken.load(Ordering::SeqCst), 2);
        assert!(!relayed.owed, "a generation left the clock owing its end");
        let second = relayed.next_order(now_micros() + 5_000_000);
        assert!(matches!(&second, Received::Order(o) if awaited(o)));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            taken.load(Ordering::SeqCst),
            2,
            "taken while the clock had the cancel"
        );
        let third = relayed.next_order(now_micros() + 5_000_000);
        assert!(matches!(third, Received::Order(_)));
        assert_eq!(taken.load(Ordering::SeqCst), 3);
    }
}
