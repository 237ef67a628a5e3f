//! The seam between the controller and the node agents: orders go down through an
//! [`OrderSink`] (the controller's side) and come out of a [`PlanSource`] (the agent's), events
//! come back through an [`EventSink`]. Nothing is answered, so one machine puts channels
//! here and a cluster puts etcd queues (`cosched-cluster`), and neither side links the other.

use crate::{Command, Event, Generation};
use cosched_core::Micros;
use cosched_os::now_micros;
use std::os::fd::OwnedFd;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// An order as it reaches the agent. `stdio` rides along only inside one process: a job
/// started by a waiting client gets that client's descriptors; descriptors never cross
/// machines, so elsewhere the job writes to a file in the node's state directory.
#[derive(Debug)]
pub struct Order {
    pub command: Command,
    pub stdio: Option<[OwnedFd; 3]>,
}

impl From<Command> for Order {
    fn from(command: Command) -> Self {
        Order {
            command,
            stdio: None,
        }
    }
}

/// What a wait for the next order gave.
#[derive(Debug)]
pub enum Received {
    /// Boxed: an order carries a job's whole launch, the other answers nothing.
    Order(Box<Order>),
    /// Nothing came before the time given.
    Timeout,
    /// The controller let go: the agent lets every job loose and ends.
    Closed,
    /// The control plane has been out of reach past the agent's deadline: every scheduled job
    /// runs unscheduled until it is back.
    Adrift,
    /// The control plane is back: the last generation applies again from the next boundary.
    Back,
}

/// Where orders come from: a channel from the daemon on one machine, etcd in a cluster.
pub trait PlanSource {
    /// Waits until `until` (CLOCK_REALTIME µs) at most for the next order.
    fn next_order(&mut self, until: Micros) -> Received;
}

impl<S: PlanSource + ?Sized> PlanSource for &mut S {
    fn next_order(&mut self, until: Micros) -> Received {
        (**self).next_order(until)
    }
}

impl PlanSource for Receiver<Order> {
    fn next_order(&mut self, until: Micros) -> Received {
        receive_by(self, until)
            .map_or_else(|nothing| nothing, |order| Received::Order(Box::new(order)))
    }
}

/// What comes on `receiver` until `until` (CLOCK_REALTIME µs), or what came instead:
/// `Timeout`, or `Closed` once every sender is gone.
pub fn receive_by<T>(receiver: &Receiver<T>, until: Micros) -> Result<T, Received> {
    let wait = Duration::from_micros((until - now_micros()).max(0) as u64);
    receiver.recv_timeout(wait).map_err(|error| match error {
        RecvTimeoutError::Timeout => Received::Timeout,
        RecvTimeoutError::Disconnected => Received::Closed,
    })
}

/// Where the controller's orders go: to one node's agent each.
pub trait OrderSink: Send {
    fn deliver(&self, node: &str, order: Order);
    /// A generation: each node's part (`Generation::parts`), for every node when it is new,
    /// for the nodes listed when they (re)joined (`again`: they have nothing to compare
    /// with). One order per node, unless the sink can do better (etcd: one shared write and
    /// only the parts that changed).
    fn publish(&self, parts: Vec<(String, Generation)>, again: bool) {
        let _ = again;
        for (node, generation) in parts {
            self.deliver(&node, Command::Publish { generation }.into());
        }
    }
    /// Whether a job's client descriptors reach its processes (only inside one process;
    /// elsewhere a job writes to its output file, `Launch::output_path`).
    fn carries_stdio(&self) -> bool;
    /// Drops what a node that left has not carried out: were it to come back, a start or a
    /// generation decided before it left must not be replayed.
    fn forget(&self, node: &str);
}

/// One machine: its one agent in this process.
impl OrderSink for Sender<Order> {
    fn deliver(&self, _node: &str, order: Order) {
        // The agent ends only after the controller let go of it.
        let _ = self.send(order);
    }

    fn carries_stdio(&self) -> bool {
        true
    }

    /// The one node never leaves.
    fn forget(&self, _node: &str) {}
}

/// Where job events go. Supervisors' watchers report from their own threads.
pub trait EventSink: Send + Sync {
    fn report(&self, event: Event);
}

impl EventSink for Sender<Event> {
    fn report(&self, event: Event) {
        // A controller that stopped listening has stopped altogether.
        let _ = self.send(event);
    }
}
