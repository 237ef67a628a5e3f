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

use crate::job_group;
use cosched_cgroups::GroupMaker;
use cosched_core::Micros;
use cosched_os::realtime::{make_realtime, ORDERS_PRIORITY};
use cosched_os::{now_micros, Log};
use cosched_proto::{receive_by, Command, PlanSource, Received};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};

/// Work an order left for after the clock's part, done on the relay's thread.
pub type Errand = Box<dyn FnOnce() + Send>;

/// How long the relay waits on its source at a time: it notices the clock gone within this.
/// The clock ends after the relay forwarded `Closed` (which ends the relay too), so this is
/// only for a clock that panicked; at 250 ms, 1,000 idle agents' relays woke 4,000 times a
/// second on the control-plane bench's 2 CPUs for nothing.
const SOURCE_WAIT_US: Micros = 5_000_000;

/// The clock's end: a [`PlanSource`] that says, on each call, that the order before is done.
pub struct Relayed {
    received: Receiver<Received>,
    done: Sender<()>,
    /// An order was handed out and its end not yet told.
    owed: bool,
}

impl PlanSource for Relayed {
    fn next_order(&mut self, until: Micros) -> Received {
        self.carried_out();
        let received = receive_by(&self.received, until).unwrap_or_else(|nothing| nothing);
        self.owed = matches!(received, Received::Order(_));
        received
    }
}

impl Relayed {
    /// Tells the relay the order last handed out is carried out (its errands queued): it
    /// does them and takes the next. The next call for an order tells it otherwise.
    pub fn carried_out(&mut self) {
        if std::mem::take(&mut self.owed) {
            // Gone only if the relay ended, which the next receive then says.
            let _ = self.done.send(());
        }
    }
}

/// Starts the relay from `source`; `maker` makes a starting job's groups (none: the clock's
/// actuator makes them, as for a fake one); `errands` come from the clock. With a real-time
/// clock the relay is real-time too, below it ([`ORDERS_PRIORITY`]): the two share the
/// channels' locks, and a relay preempted by busy jobs while it held one kept the clock
/// waiting for it past a boundary. If no thread can be started, the clock is told the source
/// closed: it lets every job loose and ends.
pub fn relay(
    source: impl PlanSource + Send + 'static,
    maker: Option<GroupMaker>,
    errands: Receiver<Errand>,
    realtime: bool,
) -> Relayed {
    let (sender, received) = mpsc::channel();
    let (done, done_here) = mpsc::channel();
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
            forward(source, maker.as_ref(), &sender, &done_here, &errands)
        });
    if let Err(error) = spawned {
        Log::new("agent").error(format_args!("starting the orders' thread: {error}"));
    }
    Relayed {
        received,
        done,
        owed: false,
    }
}

fn forward(
    mut source: impl PlanSource,
    maker: Option<&GroupMaker>,
    sender: &Sender<Received>,
    done: &Receiver<()>,
    errands: &Receiver<Errand>,
) {
    loop {
        let received = source.next_order(now_micros() + SOURCE_WAIT_US);
        match &received {
            Received::Timeout => {
                if done.try_recv() == Err(TryRecvError::Disconnected) {
                    return;
                }
                continue;
            }
            Received::Order(order) => {
                if let (Command::Start { job, .. }, Some(maker)) = (&order.command, maker) {
                    // Whatever failed here fails again in the clock's own `create`, which
                    // reports it as the job's start.
                    let _ = maker.make(&job_group(*job));
                }
            }
            Received::Closed | Received::Adrift | Received::Back => {}
        }
        let order = matches!(received, Received::Order(_));
        let closed = matches!(received, Received::Closed);
        if sender.send(received).is_err() || closed || (order && done.recv().is_err()) {
            return;
        }
        for errand in errands.try_iter() {
            errand();
        }
    }
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
        let _relayed = relay(Asked(Arc::clone(&asked)), None, errands_queued, false);
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
        let [taken, errands_done, errands_seen] = [(); 3].map(|()| Arc::new(AtomicUsize::new(0)));
        let counting = Counting {
            orders: source,
            taken: Arc::clone(&taken),
            errands_done: Arc::clone(&errands_done),
            errands_seen: Arc::clone(&errands_seen),
        };
        let mut relayed = relay(counting, None, errands_queued, false);
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
}
