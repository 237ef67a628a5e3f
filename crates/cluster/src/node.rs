//! A node agent's link to etcd: it joins under a lease, takes its orders from a queue it
//! follows by watch, reports events through the outbox, and knows when it has lost the
//! control plane (etcd unreachable, or no controller holding the leader key) for longer than
//! its deadline: then the agent lets its jobs run unscheduled until it is back.

use crate::backoff::Backoff;
use crate::follow::{follow, Change};
use crate::push::{PushLink, Pushed};
use crate::{decode, encode, ClusterError, Keys, LeaderInfo, Outbox, PushOffer};
use cosched_core::Micros;
use cosched_etcd::{Client, EtcdError, WatchStopper};
use cosched_os::doorbell::Doorbell;
use cosched_os::now_micros;
use cosched_proto::{Command, Event, EventSink, Generation, NodeInfo, Order, PlanSource, Received};
use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const LOG: cosched_os::Log = cosched_os::Log::new("agent");

/// What the agent knows of its link to the control plane.
struct Health {
    /// When etcd last answered and a controller held the leader key (µs).
    last_ok: AtomicI64,
    /// Cuts the order watch, which a silent network cut would leave hanging for good.
    stopper: Mutex<Option<WatchStopper>>,
    /// Cuts the generation header's watch (the node's leave).
    header_stopper: Mutex<Option<WatchStopper>>,
    /// Whether a controller holds the leader key, as the watch on it says.
    leader: AtomicBool,
    /// Cuts the leader key's watch (a silent cut; the node's leave).
    leader_stopper: Mutex<Option<WatchStopper>>,
    /// The node left: its threads end rather than join again.
    left: AtomicBool,
    /// The leader's push, as its key offers it, and the connection to it while there is one.
    push: Mutex<Push>,
    /// Told when `push` changes or the node leaves.
    push_changed: Condvar,
    /// Wakes the order source when a look at etcd succeeded after its deadline (the source's,
    /// here beside it) had passed since the one before, so that one adrift sees it is back
    /// without polling (1,000 adrift agents polling every 20 ms took the bench's CPU from the
    /// etcd they waited for). A source not adrift is left asleep: waking each at every look
    /// was 400 wakeups a second on the bench at 1,000 nodes, for nothing.
    looked: Mutex<Option<(Inbox, Micros)>>,
}

#[derive(Default)]
struct Push {
    offer: Option<PushOffer>,
    /// Ends the connection from another thread; `Some` while connected: the generation
    /// header's watch in etcd rests meanwhile.
    live: Option<TcpStream>,
}

impl Health {
    /// No watch yet, no leader seen; etcd last answered at `last_ok`.
    fn answered_at(last_ok: Micros) -> Health {
        Health {
            last_ok: AtomicI64::new(last_ok),
            stopper: Mutex::new(None),
            header_stopper: Mutex::new(None),
            leader: AtomicBool::new(false),
            leader_stopper: Mutex::new(None),
            left: AtomicBool::new(false),
            push: Mutex::new(Push::default()),
            push_changed: Condvar::new(),
            looked: Mutex::new(None),
        }
    }

    /// Cuts the watches and the push: a connection silently cut never ends by itself.
    fn cut_watches(&self) {
        for slot in [&self.stopper, &self.leader_stopper, &self.header_stopper] {
            if let Some(stopper) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
                stopper.stop();
            }
        }
        self.cut_push();
    }

    fn push(&self) -> std::sync::MutexGuard<'_, Push> {
        self.push.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cut_push(&self) {
        if let Some(live) = &self.push().live {
            let _ = live.shutdown(std::net::Shutdown::Both);
        }
    }

    /// A new offer (none: no leader, or one that does not push): the connection to the former
    /// one ends.
    fn offered(&self, offer: Option<PushOffer>) {
        let mut push = self.push();
        if push.offer != offer {
            if let Some(live) = &push.live {
                let _ = live.shutdown(std::net::Shutdown::Both);
            }
            push.offer = offer;
            self.push_changed.notify_all();
        }
    }

    /// Waits until `ready` holds of the push, or the node leaves (`None`).
    fn wait_push(&self, ready: impl Fn(&Push) -> bool) -> Option<std::sync::MutexGuard<'_, Push>> {
        let push = self
            .push_changed
            .wait_while(self.push(), |push| !ready(push) && !self.leaving())
            .unwrap_or_else(|p| p.into_inner());
        (!self.leaving()).then_some(push)
    }

    fn pushed(&self) -> bool {
        self.push().live.is_some()
    }

    fn leaving(&self) -> bool {
        self.left.load(Ordering::Relaxed)
    }

    /// etcd answered and a controller holds the leader key: `last_ok` is `now`.
    fn answered(&self, now: Micros) {
        let before = self.last_ok.swap(now, Ordering::Relaxed);
        if let Some((source, deadline)) = &*self.looked.lock().unwrap_or_else(|p| p.into_inner()) {
            if now - before > *deadline {
                source.send(Incoming::Looked);
            }
        }
    }
}

/// A node's place in the cluster: its lease (renewed by a thread of its own) and the health of
/// its link.
pub struct Membership {
    client: Arc<Client>,
    keys: Keys,
    info: NodeInfo,
    lease: Arc<AtomicI64>,
    health: Arc<Health>,
    outbox: Arc<Outbox>,
}

/// Joins the cluster as `info.node`: its key under a lease of `lease_ttl` seconds, kept alive
/// every `check` (which also checks that a controller holds the leader key). A name held by
/// another live agent is refused once its lease had time to expire (a restarted agent waits
/// for its former self's lease).
pub fn join(
    client: Arc<Client>,
    keys: &Keys,
    info: NodeInfo,
    lease_ttl: i64,
    check: Duration,
) -> Result<Membership, ClusterError> {
    let lease = Arc::new(AtomicI64::new(0));
    register(&client, keys, &info, lease_ttl, &lease)?;
    let health = Arc::new(Health::answered_at(now_micros()));
    let outbox = Arc::new(
        Outbox::start(Arc::clone(&client), "agent")
            .map_err(|e| ClusterError::Invalid(format!("starting the outbox thread: {e}")))?,
    );
    let membership = Membership {
        client,
        keys: keys.clone(),
        info,
        lease,
        health,
        outbox,
    };
    membership.keep(lease_ttl, check)?;
    Ok(membership)
}

/// Grants a lease and creates the node's key under it, waiting out a former holder's lease.
fn register(
    client: &Client,
    keys: &Keys,
    info: &NodeInfo,
    lease_ttl: i64,
    lease: &AtomicI64,
) -> Result<(), ClusterError> {
    let key = keys.node(&info.node);
    let granted = client.grant(lease_ttl)?;
    let give_up = now_micros() + (lease_ttl + 1) * 1_000_000;
    loop {
        if client.create(&key, &encode(info), Some(granted.id))? {
            lease.store(granted.id, Ordering::Relaxed);
            return Ok(());
        }
        if now_micros() > give_up {
            let _ = client.revoke(granted.id);
            let holder = client
                .get(&key)?
                .and_then(|kv| decode::<NodeInfo>(&key, &kv.value).ok())
                .map_or_else(|| "gone by now".to_string(), |held| held.agent);
            return Err(ClusterError::NodeTaken {
                node: info.node.clone(),
                cluster: keys.cluster().to_string(),
                holder,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How long one look at etcd's health may take: the first after a success, then twice as
/// long after each that failed, up to the last. Through an etcd election a member without a
/// leader holds a request until its timeout, so the first is short; an etcd that is only slow
/// (1,000 agents beside it on 2 CPUs, `bench/control-plane`) answered few of 1,000 agents'
/// looks within 300 ms, each abandoned look's connection was made anew, and etcd caught up
/// after minutes or not at all.
const HEALTH_TIMEOUTS: [Duration; 3] = [
    Duration::from_millis(300),
    Duration::from_millis(600),
    Duration::from_millis(1_200),
];
/// How soon a failed look is tried again: this, doubled at each further failure up to a
/// second, give or take a quarter so that agents that failed together do not retry together.
const HEALTH_RETRY: Duration = Duration::from_millis(100);
const HEALTH_RETRY_MAX: Duration = Duration::from_secs(1);
/// How long looks must have failed before the watches are cut (a silent network cut leaves
/// them hanging): not at the first, which a slow etcd gives too, and which made 1,000 agents
/// open 3,000 watches at once on an etcd already behind.
const CUT_WATCHES_AFTER: Micros = 1_000_000;

impl Membership {
    /// The thread that renews the lease and watches the link, and the one that watches the
    /// leader key. The lease's requests are bounded tighter than others, and a failed look is
    /// retried soon: through an etcd election a member without a leader holds a request until
    /// its timeout, and the agent's deadline counts from the last look that succeeded. Looks
    /// that keep failing wait and are waited for longer ([`HEALTH_TIMEOUTS`], [`HEALTH_RETRY`]),
    /// so that a thousand agents do not keep an etcd that is only slow from catching up.
    ///
    /// The leader key is watched, not read at each renewal: at 1,000 nodes those reads were
    /// about 720 requests a second (bench/control-plane), with as many renewals most of etcd's
    /// work in a steady cluster.
    fn keep(&self, lease_ttl: i64, check: Duration) -> Result<(), ClusterError> {
        let (watcher, leader_key, watched) = (
            Arc::clone(&self.client),
            self.keys.leader(),
            Arc::clone(&self.health),
        );
        std::thread::Builder::new()
            .name("cosched-leader".into())
            .spawn(move || watch_leader(&watcher, &leader_key, &watched, check))
            .map_err(|e| ClusterError::Invalid(format!("starting the leader thread: {e}")))?;
        let clients = HEALTH_TIMEOUTS.map(|timeout| self.client.with_timeout(timeout));
        let (keys, info) = (self.keys.clone(), self.info.clone());
        let (lease, health) = (Arc::clone(&self.lease), Arc::clone(&self.health));
        std::thread::Builder::new()
            .name("cosched-lease".into())
            .spawn(move || {
                // Looks failed in a row, since when, and whether the watches were cut for it.
                let mut looks = Backoff::new(HEALTH_RETRY, HEALTH_RETRY_MAX);
                let (mut failing_since, mut cut) = (0, false);
                loop {
                    std::thread::sleep(match looks.failures() {
                        0 => check,
                        _ => looks.wait(),
                    });
                    if health.left.load(Ordering::Relaxed) {
                        return;
                    }
                    let client = &clients[(looks.failures() as usize).min(clients.len() - 1)];
                    let id = lease.load(Ordering::Relaxed);
                    let renewed = client.keep_alive(id).and_then(|renewed| {
                        if renewed.ttl == 0 {
                            LOG.warn(format_args!(
                                "the node's lease expired: joining again (the controller may \
                                 have given up this node's jobs meanwhile)"
                            ));
                            register(client, &keys, &info, lease_ttl, &lease)
                                .map_err(|e| EtcdError::WatchEnded(e.to_string()))?;
                        }
                        Ok(health.leader.load(Ordering::Relaxed))
                    });
                    let now = now_micros();
                    match renewed {
                        Ok(true) => {
                            health.answered(now);
                            if looks.failures() > 0 {
                                LOG.info("etcd and a controller are back");
                            }
                            looks.succeeded();
                            cut = false;
                        }
                        failed => {
                            if looks.failures() == 0 {
                                failing_since = now;
                                match failed {
                                    Err(error) => LOG.warn(format_args!("{error}")),
                                    _ => LOG.warn("no controller holds the leader key"),
                                }
                            }
                            looks.failed();
                            if !cut && now - failing_since >= CUT_WATCHES_AFTER {
                                health.cut_watches();
                                cut = true;
                            }
                        }
                    }
                }
            })
            .map_err(|e| ClusterError::Invalid(format!("starting the lease thread: {e}")))?;
        Ok(())
    }

    /// The orders for this node, followed from etcd. `deadline`: how long the control plane
    /// may be lost before the agent lets its jobs loose. Also returns what ends the source.
    pub fn orders(&self, deadline: Micros) -> Result<(EtcdSource, Closer), ClusterError> {
        let (incoming, receive, doorbell) = Inbox::new()
            .map_err(|e| ClusterError::Invalid(format!("making the orders' doorbell: {e}")))?;
        let closer = Closer(incoming.clone());
        *self.health.looked.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((incoming.clone(), deadline));
        let (client, prefix) = (Arc::clone(&self.client), self.keys.orders(&self.info.node));
        let generation_key = self.keys.generation(&self.info.node);
        let (health, outbox) = (Arc::clone(&self.health), Arc::clone(&self.outbox));
        let handed = Arc::new(Mutex::new(Handed::default()));
        let (headers, pushes) = (incoming.clone(), incoming.clone());
        let (source_handed, pushed_handed) = (Arc::clone(&handed), Arc::clone(&handed));
        let own = incoming.quiet();
        let spawn = |name: &str, run: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(run)
                .map(drop)
                .map_err(|e| ClusterError::Invalid(format!("starting the {name} thread: {e}")))
        };
        spawn(
            "cosched-orders",
            Box::new(move || follow_orders(&client, &prefix, &incoming, &health, &outbox, &handed)),
        )?;
        let (client, key, health) = (
            Arc::clone(&self.client),
            self.keys.generation_header(),
            Arc::clone(&self.health),
        );
        spawn(
            "cosched-generation",
            Box::new(move || follow_headers(&client, &key, &headers, &health)),
        )?;
        let (node, health) = (self.info.node.clone(), Arc::clone(&self.health));
        let (client, keys) = (Arc::clone(&self.client), self.keys.clone());
        spawn(
            "cosched-pushed",
            Box::new(move || {
                let etcd = Etcd {
                    client: &client,
                    keys: &keys,
                    node: &node,
                };
                take_pushes(&etcd, &pushes, &health, &pushed_handed)
            }),
        )?;
        Ok((
            EtcdSource {
                incoming: receive,
                own,
                doorbell,
                handed: source_handed,
                linked: None,
                outbox: Arc::clone(&self.outbox),
                health: Arc::clone(&self.health),
                deadline,
                adrift: false,
                carried_out: None,
                generation_key,
                part: None,
                header: None,
                ahead: None,
            },
            closer,
        ))
    }

    /// Where the agent's events go.
    pub fn events(&self) -> EtcdSink {
        EtcdSink {
            outbox: Arc::clone(&self.outbox),
            keys: self.keys.clone(),
            node: self.info.node.clone(),
            session: format!("{:x}", self.info.joined_us),
            lease: Arc::clone(&self.lease),
            sequence: AtomicU64::new(0),
        }
    }

    /// A clean leave: what is queued is written (for `within` at most), then the lease goes
    /// and the node's keys with it.
    pub fn leave(&self, within: Duration) {
        {
            // Under the push's lock: a thread between its look at `left` and its wait would
            // miss the wakeup.
            let _push = self.health.push();
            self.health.left.store(true, Ordering::Relaxed);
            self.health.push_changed.notify_all();
        }
        self.health
            .looked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.health.cut_watches();
        if !self.outbox.finish(within) {
            LOG.warn("etcd did not take every event before the stop");
        }
        let _ = self.client.revoke(self.lease.load(Ordering::Relaxed));
    }
}

/// Keeps `health.leader` true while a controller holds the leader key: read, then only its
/// deletion watched (the leader rewrites it at every renewal, which no agent needs to hear);
/// read again after a deletion or a break, every `check` while nobody holds it. The key says
/// where the leader pushes from.
fn watch_leader(client: &Client, key: &str, health: &Health, check: Duration) {
    while !health.left.load(Ordering::Relaxed) {
        // The store's revision, not the key's: a key a stuck leader stopped rewriting may be
        // older than the history kept, and a watch from there would fail at once, again and
        // again.
        match client.get_prefix(key) {
            Ok((held, revision)) if held.iter().any(|kv| kv.key == key) => {
                health.leader.store(true, Ordering::Relaxed);
                let info = held.iter().find(|kv| kv.key == key);
                let offer = info
                    .and_then(|kv| decode::<LeaderInfo>(key, &kv.value).ok())
                    .and_then(|leader| leader.push);
                health.offered(offer);
                let Ok(mut watch) = client.watch_deletes(key, revision + 1) else {
                    std::thread::sleep(check);
                    continue;
                };
                *health
                    .leader_stopper
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = watch.stopper().ok();
                if watch.next_batch().is_ok() {
                    health.leader.store(false, Ordering::Relaxed);
                    health.offered(None);
                }
            }
            Ok(_) => {
                health.leader.store(false, Ordering::Relaxed);
                health.offered(None);
                std::thread::sleep(check);
            }
            Err(_) => std::thread::sleep(check),
        }
    }
}

enum Incoming {
    /// An order and etcd's revision of its write.
    Order {
        key: String,
        command: Command,
        revision: i64,
    },
    /// The generation in force, without entries, and the revision of its write.
    Header(Generation, i64),
    /// etcd answered a look: the source sees whether it is back.
    Looked,
    /// The leader's push, connected and caught up: the source reads it from now on.
    Link(Box<Linked>),
    Close,
}

/// The source's inputs from the other threads: a channel, and the source's doorbell rung
/// after each send, since the source waits on the push's connection and the channel at once.
#[derive(Clone)]
struct Inbox {
    sender: Sender<Incoming>,
    /// None for the source's own sends: it looks at the channel again before it waits.
    doorbell: Option<Arc<Doorbell>>,
}

impl Inbox {
    /// A channel with its doorbell: the senders' side, and the source's.
    fn new() -> std::io::Result<(Inbox, Receiver<Incoming>, Arc<Doorbell>)> {
        let (sender, receive) = channel();
        let doorbell = Arc::new(Doorbell::new()?);
        let inbox = Inbox {
            sender,
            doorbell: Some(Arc::clone(&doorbell)),
        };
        Ok((inbox, receive, doorbell))
    }

    /// False when the source is gone.
    fn send(&self, incoming: Incoming) -> bool {
        let sent = self.sender.send(incoming).is_ok();
        if let (true, Some(doorbell)) = (sent, &self.doorbell) {
            doorbell.ring();
        }
        sent
    }

    /// The same channel, without the ring.
    fn quiet(&self) -> Inbox {
        Inbox {
            sender: self.sender.clone(),
            doorbell: None,
        }
    }
}

/// The push's connection, held by the source: it reads the frames itself when they come, on
/// the thread that asks it for orders. A reader thread of its own was one more wakeup per
/// frame, which at 1,000 agents on the bench's 2 CPUs was a third of their work per header.
struct Linked {
    link: PushLink,
    frames: u64,
    /// The push thread waits on this to connect again (it hears of a source gone too).
    ended: Sender<LinkEnded>,
}

/// How a link ended: it carried `frames` before `error`.
struct LinkEnded {
    frames: u64,
    error: crate::PushError,
}

/// Ends an [`EtcdSource`] from another thread (a stop signal).
#[derive(Clone)]
pub struct Closer(Inbox);

impl Closer {
    pub fn close(&self) {
        self.0.send(Incoming::Close);
    }
}

/// The writes to the node's queue handed out, by key: each once, whichever way it came (etcd's
/// watch, or the leader's push), and never again once deleted (a push may come after the
/// order was carried out and its deletion seen).
#[derive(Default)]
struct Handed {
    keys: HashMap<String, (i64, Option<Micros>)>,
    pruned_at: Micros,
}

/// How long a deleted order's key is remembered: far longer than any push can lag its write.
const FORGET_DELETED_AFTER: Micros = 600_000_000;

impl Handed {
    /// Hands the write of `key` at `revision` on unless it was already; false when the
    /// source is gone. Noted and sent under one lock, so that writes keep their order
    /// whichever thread brings them first.
    fn hand(&mut self, incoming: &Inbox, key: String, command: Command, revision: i64) -> bool {
        if self
            .keys
            .get(&key)
            .is_some_and(|&(seen, _)| seen >= revision)
        {
            return true;
        }
        self.keys.insert(key.clone(), (revision, None));
        incoming.send(Incoming::Order {
            key,
            command,
            revision,
        })
    }

    fn deleted(&mut self, key: &str, now: Micros) {
        if let Some((_, deleted)) = self.keys.get_mut(key) {
            *deleted = Some(now);
        }
        if now - self.pruned_at >= FORGET_DELETED_AFTER / 10 {
            self.keys
                .retain(|_, (_, deleted)| deleted.is_none_or(|at| now - at < FORGET_DELETED_AFTER));
            self.pruned_at = now;
        }
    }
}

/// Hands each order queued for the node out once, in the order written.
fn follow_orders(
    client: &Client,
    prefix: &str,
    incoming: &Inbox,
    health: &Health,
    outbox: &Outbox,
    handed: &Mutex<Handed>,
) {
    let handed = || handed.lock().unwrap_or_else(|p| p.into_inner());
    follow(
        client,
        prefix,
        Some(&health.stopper),
        &|| health.leaving(),
        |change| {
            let kv = match change {
                Change::Put(kv) => kv,
                Change::Delete(key) => {
                    handed().deleted(&key, now_micros());
                    return true;
                }
            };
            match decode::<Command>(&kv.key, &kv.value) {
                Ok(command) => handed().hand(incoming, kv.key, command, kv.mod_revision),
                Err(error) => {
                    LOG.warn(format_args!("{error}: order dropped"));
                    outbox.delete(kv.key);
                    true
                }
            }
        },
    );
}

/// Hands each generation header written on to the source, from etcd while the leader's push
/// is not connected (with it, the header comes pushed and etcd's watch rests: at 1,000
/// nodes, etcd's delivery of each header to 1,000 watchers was most of the fan-out).
fn follow_headers(client: &Client, key: &str, incoming: &Inbox, health: &Health) {
    loop {
        if health.wait_push(|push| push.live.is_none()).is_none() {
            return;
        }
        let mut open = true;
        follow(
            client,
            key,
            Some(&health.header_stopper),
            &|| health.leaving() || health.pushed(),
            |change| {
                let Change::Put(kv) = change else {
                    return true;
                };
                match decode::<Generation>(&kv.key, &kv.value) {
                    Ok(header) => {
                        open = incoming.send(Incoming::Header(header, kv.mod_revision));
                        open
                    }
                    Err(error) => {
                        LOG.warn(format_args!("{error}: generation header dropped"));
                        true
                    }
                }
            },
        );
        if !open {
            return;
        }
    }
}

/// How soon a push connection that failed or ended is tried again: doubled up to the most.
const PUSH_RETRY: Duration = Duration::from_secs(1);
const PUSH_RETRY_MAX: Duration = Duration::from_secs(10);

/// Logs why the push is not connected, unless that was the last thing said: 1,000 agents
/// retrying every few seconds would fill their logs.
fn say_once(told: &mut Option<String>, error: &crate::PushError) {
    let error = error.to_string();
    if told.as_ref() != Some(&error) {
        LOG.warn(format_args!("{error}: following etcd alone meanwhile"));
        *told = Some(error);
    }
}

/// Where an agent's writes are in etcd, for the push to catch up from.
struct Etcd<'a> {
    client: &'a Client,
    keys: &'a Keys,
    node: &'a str,
}

impl Etcd<'_> {
    /// Hands on what the node's queue and the header hold now (each write once, in the order
    /// written): what was committed before the push joined is not pushed.
    fn catch_up(&self, incoming: &Inbox, handed: &Mutex<Handed>) -> bool {
        let prefix = self.keys.orders(self.node);
        let Ok((mut queued, _)) = self.client.get_prefix(&prefix) else {
            return false;
        };
        queued.sort_by_key(|kv| kv.mod_revision);
        for kv in queued {
            if let Ok(command) = decode::<Command>(&kv.key, &kv.value) {
                let mut handed = handed.lock().unwrap_or_else(|p| p.into_inner());
                if !handed.hand(incoming, kv.key, command, kv.mod_revision) {
                    return false;
                }
            }
        }
        let key = self.keys.generation_header();
        match self.client.get(&key) {
            Ok(Some(kv)) => match decode::<Generation>(&key, &kv.value) {
                Ok(header) => incoming.send(Incoming::Header(header, kv.mod_revision)),
                Err(_) => true,
            },
            Ok(None) => true,
            Err(_) => false,
        }
    }
}

/// Keeps a connection to the leader's push while its key offers one, and hands it to the
/// source, which reads it (orders once, with `handed`; headers as they come) until it ends.
/// Once the leader says the connection joined, what etcd holds is handed on first: the push carries only what was
/// committed after that, and an order pushed ahead of an earlier one the agent never had (a
/// start, then its cancel) would be carried out in the wrong order.
fn take_pushes(etcd: &Etcd<'_>, incoming: &Inbox, health: &Health, handed: &Mutex<Handed>) {
    let node = etcd.node;
    let mut retry = Backoff::new(PUSH_RETRY, PUSH_RETRY_MAX);
    let mut told: Option<String> = None;
    loop {
        let Some(offer) = health
            .wait_push(|push| push.offer.is_some())
            .and_then(|push| push.offer.clone())
        else {
            return;
        };
        let linked = PushLink::connect(&offer, node).and_then(|link| {
            let handle = link.handle().map_err(|source| crate::PushError::Io {
                address: offer.address,
                source,
            })?;
            Ok((link, handle))
        });
        let (link, handle) = match linked {
            Ok(linked) => linked,
            Err(error) => {
                say_once(&mut told, &error);
                retry.pause_after_failure();
                continue;
            }
        };
        if !etcd.catch_up(incoming, handed) {
            retry.pause_after_failure();
            continue;
        }
        {
            let mut push = health.push();
            if push.offer.as_ref() != Some(&offer) {
                continue;
            }
            if health.leaving() {
                return;
            }
            push.live = Some(handle);
        }
        // The header's watch rests while pushed.
        if let Some(stopper) = health
            .header_stopper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            stopper.stop();
        }
        let (ended, link_ended) = channel();
        let linked = Linked {
            link,
            frames: 0,
            ended,
        };
        // Until the link ends, or the source is gone.
        let outcome = match incoming.send(Incoming::Link(Box::new(linked))) {
            true => link_ended.recv().ok(),
            false => None,
        };
        health.push().live = None;
        health.push_changed.notify_all();
        let Some(LinkEnded { frames, error }) = outcome else {
            return;
        };
        if health.leaving() {
            return;
        }
        // A link that carried frames worked: its end (a new leader, a restart) is no failure.
        if frames > 0 {
            retry.succeeded();
            told = None;
        } else {
            say_once(&mut told, &error);
        }
        retry.pause_after_failure();
    }
}

/// The node's orders from etcd, as a [`PlanSource`]. An order handed out is deleted from the
/// queue when the agent asks for the next one (it has been carried out by then); the
/// generation key stays.
pub struct EtcdSource {
    incoming: Receiver<Incoming>,
    /// The same channel, for the writes the source reads from the push itself.
    own: Inbox,
    /// Rung by the other threads after each send.
    doorbell: Arc<Doorbell>,
    handed: Arc<Mutex<Handed>>,
    /// The push's connection, while there is one.
    linked: Option<Linked>,
    outbox: Arc<Outbox>,
    health: Arc<Health>,
    deadline: Micros,
    adrift: bool,
    carried_out: Option<String>,
    /// The node's generation key: rewritten by the controller, never deleted here.
    generation_key: String,
    /// The node's latest part and the latest header, with the revisions of their writes:
    /// what it runs is the part under the header when the header was written after it.
    /// Revisions, not generation numbers: a new leader numbers its generations from 1 again.
    part: Option<(Generation, i64)>,
    header: Option<(Generation, i64)>,
    /// What was taken from the channel ahead of its turn, looking past a header for a newer.
    ahead: Option<Incoming>,
}

/// The generation a node runs: its part, under the header if etcd wrote that after it.
fn in_force(part: &(Generation, i64), header: Option<&(Generation, i64)>) -> Received {
    let (part, written) = part;
    let generation = match header {
        Some((header, revision)) if revision > written => {
            let mut slices = part.slices.clone();
            // The controller sends a part whenever the node's entries change, so the slices
            // cut off here are empty ones.
            slices.resize(header.slices.len(), Default::default());
            Generation { slices, ..*header }
        }
        _ => part.clone(),
    };
    Received::Order(Box::new(Command::Publish { generation }.into()))
}

impl PlanSource for EtcdSource {
    fn next_order(&mut self, until: Micros) -> Received {
        if let Some(key) = self.carried_out.take() {
            self.outbox.delete(key);
        }
        loop {
            let now = now_micros();
            let stale_at = self.health.last_ok.load(Ordering::Relaxed) + self.deadline;
            let healthy = now <= stale_at;
            if self.adrift == healthy {
                self.adrift = !healthy;
                return if healthy {
                    Received::Back
                } else {
                    Received::Adrift
                };
            }
            if now >= until {
                return Received::Timeout;
            }
            // Healthy, it wakes when the link would go stale; adrift, the lease thread's
            // next answer wakes it (`Incoming::Looked`).
            let wait = match healthy {
                true => (until - now).min(stale_at + 1 - now),
                false => until - now,
            };
            let next = match self.ahead.take() {
                Some(incoming) => Ok(incoming),
                None => self.receive(wait),
            };
            match next {
                Ok(Incoming::Order {
                    key,
                    command,
                    revision,
                }) => {
                    if key == self.generation_key {
                        if let Command::Publish { generation } = command {
                            let part = self.part.insert((generation, revision));
                            return in_force(part, self.header.as_ref());
                        }
                        continue;
                    }
                    self.carried_out = Some(key);
                    return Received::Order(Box::new(Order::from(command)));
                }
                Ok(Incoming::Header(header, revision)) => {
                    let (header, revision) = self.newest_header(header, revision);
                    // Pushed, then seen again in etcd's watch (or the other way round).
                    if self
                        .header
                        .as_ref()
                        .is_some_and(|(_, held)| *held >= revision)
                    {
                        continue;
                    }
                    let header = self.header.insert((header, revision));
                    // Written after the part: it changes what the node runs.
                    if let Some(part) = self.part.as_ref().filter(|(_, p)| revision > *p) {
                        return in_force(part, Some(header));
                    }
                }
                Ok(Incoming::Close) | Err(RecvTimeoutError::Disconnected) => {
                    return Received::Closed
                }
                Ok(Incoming::Link(linked)) => self.linked = Some(*linked),
                Ok(Incoming::Looked) => {}
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

impl EtcdSource {
    /// The next input within `wait` µs: from the channel, or from the push's connection when
    /// frames come (passed through the channel, behind what other threads brought first).
    fn receive(&mut self, wait: Micros) -> Result<Incoming, RecvTimeoutError> {
        let until = now_micros() + wait;
        loop {
            match self.incoming.try_recv() {
                Ok(incoming) => return Ok(incoming),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            let left = until - now_micros();
            if left <= 0 {
                return Err(RecvTimeoutError::Timeout);
            }
            let left = Duration::from_micros(left as u64);
            let link = self.linked.as_ref().map(|linked| linked.link.descriptor());
            match self.doorbell.wait(link, left) {
                Ok(ready) if ready.other => self.read_push(),
                Ok(_) => {}
                // Not seen (ppoll fails only on bad arguments or no memory): the channel alone
                // for this wait, rather than a loop.
                Err(error) => {
                    LOG.warn(format_args!("waiting for orders: {error}"));
                    return self.incoming.recv_timeout(left);
                }
            }
        }
    }

    /// Passes on what the push's connection brought; a link that ends goes back to the push's
    /// thread, which connects again.
    fn read_push(&mut self) {
        let Some(linked) = self.linked.as_mut() else {
            return;
        };
        let error = match linked.link.receive_ready() {
            Ok(writes) => {
                for pushed in writes {
                    linked.frames += 1;
                    match pushed {
                        Pushed::Order {
                            key,
                            command,
                            revision,
                        } => {
                            let mut handed = self.handed.lock().unwrap_or_else(|p| p.into_inner());
                            handed.hand(&self.own, key, command, revision);
                        }
                        Pushed::Header {
                            generation,
                            revision,
                        } => {
                            self.own.send(Incoming::Header(generation, revision));
                        }
                        Pushed::Joined => {}
                    }
                }
                return;
            }
            Err(error) => error,
        };
        if let Some(Linked { frames, ended, .. }) = self.linked.take() {
            let _ = ended.send(LinkEnded { frames, error });
        }
    }

    /// The newest of the headers queued one behind the other from `header` on: an agent
    /// behind (a burst of generations, or on the bench 1,000 agents sharing 2 CPUs, where
    /// two generations a few milliseconds apart each went through every agent in turn) takes
    /// the last, not each. What follows them keeps its turn.
    fn newest_header(&mut self, mut header: Generation, mut revision: i64) -> (Generation, i64) {
        while let Ok(next) = self.incoming.try_recv() {
            match next {
                Incoming::Header(newer, written) => {
                    if written > revision {
                        (header, revision) = (newer, written);
                    }
                }
                other => {
                    self.ahead = Some(other);
                    break;
                }
            }
        }
        (header, revision)
    }
}

/// The agent's events into etcd: job events queued under `events/<node>/`, the status as the
/// node's `status/<node>` key under its lease.
pub struct EtcdSink {
    outbox: Arc<Outbox>,
    keys: Keys,
    node: String,
    /// Tells this agent's events from a former run's.
    session: String,
    lease: Arc<AtomicI64>,
    sequence: AtomicU64,
}

impl EventSink for EtcdSink {
    fn report(&self, event: Event) {
        match event {
            Event::Status { status } => {
                self.outbox
                    .put_leased(self.keys.status(&self.node), encode(&status), &self.lease)
            }
            event => {
                let n = self.sequence.fetch_add(1, Ordering::Relaxed);
                let key = self
                    .keys
                    .event(&self.node, &format!("{}-{n:012}", self.session));
                self.outbox.put(key, encode(&event));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// How many times the calling thread was woken while `source` had nothing for half a
    /// second.
    fn woken_while_idle(source: &mut EtcdSource) -> u64 {
        let before = wakeups();
        assert!(matches!(
            source.next_order(now_micros() + 500_000),
            Received::Timeout
        ));
        wakeups() - before
    }

    /// How many times the calling thread has slept and been woken.
    fn wakeups() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap();
        line.trim().parse().unwrap()
    }

    /// A source whose etcd last answered at `last_ok`, its node's generation key `/g`, woken
    /// by the lease thread's looks as `Membership::orders` has it, and its channel.
    fn source(last_ok: Micros, deadline: Micros) -> (EtcdSource, Inbox) {
        // Never reached: the source writes to etcd only to delete an order carried out.
        let client = Client::new(&["http://127.0.0.1:9".into()], Duration::from_secs(1), None);
        let outbox = Outbox::start(Arc::new(client.unwrap()), "test").unwrap();
        let (incoming, receive, doorbell) = Inbox::new().unwrap();
        let health = Health::answered_at(last_ok);
        *health.looked.lock().unwrap() = Some((incoming.clone(), deadline));
        let source = EtcdSource {
            incoming: receive,
            own: incoming.quiet(),
            doorbell,
            handed: Arc::default(),
            linked: None,
            outbox: Arc::new(outbox),
            health: Arc::new(health),
            deadline,
            adrift: false,
            carried_out: None,
            generation_key: "/g".into(),
            part: None,
            header: None,
            ahead: None,
        };
        (source, incoming)
    }

    fn generation(number: u64) -> Generation {
        crate::test_generation(number, 2)
    }

    /// What the source hands out next: a generation's number, or an order's job.
    fn next(source: &mut EtcdSource) -> String {
        match source.next_order(now_micros() + 1_000_000) {
            Received::Order(order) => match order.command {
                Command::Publish { generation } => format!("generation {}", generation.number),
                Command::Cancel { job } => format!("cancel {job}"),
                other => format!("{other:?}"),
            },
            other => format!("{other:?}"),
        }
    }

    /// Headers queued one behind the other: an agent behind takes the newest alone (on the
    /// bench, two generations a few milliseconds apart went through each of 1,000 agents in
    /// turn); an order between two headers keeps its turn.
    #[test]
    fn an_agent_behind_takes_the_newest_of_the_headers_queued() {
        let (mut source, incoming) = source(now_micros(), 60_000_000);
        let part = Command::Publish {
            generation: generation(1),
        };
        let send = |item| assert!(incoming.send(item));
        send(Incoming::Order {
            key: "/g".into(),
            command: part,
            revision: 5,
        });
        send(Incoming::Header(generation(2), 10));
        send(Incoming::Header(generation(3), 12));
        send(Incoming::Order {
            key: "/o/1".into(),
            command: Command::Cancel { job: 7 },
            revision: 13,
        });
        send(Incoming::Header(generation(4), 14));
        send(Incoming::Header(generation(5), 15));
        let handed: Vec<String> = (0..4).map(|_| next(&mut source)).collect();
        assert_eq!(
            handed,
            ["generation 1", "generation 3", "cancel 7", "generation 5"]
        );
    }

    /// The source reads the push's connection itself, on the thread that asks it for orders
    /// (no other thread reads it here): writes come in the order pushed, an order etcd's watch
    /// brought first is not handed twice, and the link's end goes back to the push's thread
    /// with what it carried.
    #[test]
    fn the_source_reads_the_push_itself_and_gives_the_link_back_when_it_ends() {
        let (mut source, incoming) = source(now_micros(), 60_000_000);
        let pusher = crate::Pusher::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let link = PushLink::connect(&pusher.offer(), "a").unwrap();
        let began = Instant::now();
        while pusher.connected() == 0 && began.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let cut = link.handle().unwrap();
        let (ended, link_ended) = channel();
        let linked = Linked {
            link,
            frames: 0,
            ended,
        };
        assert!(incoming.send(Incoming::Link(Box::new(linked))));
        let cancel = |job| Command::Cancel { job };
        let watched = source
            .handed
            .lock()
            .unwrap()
            .hand(&incoming, "/o/1".into(), cancel(1), 20);
        assert!(watched);
        pusher.order("a", "/o/1".into(), cancel(1), 20);
        pusher.order("a", "/o/2".into(), cancel(2), 21);
        let part = Command::Publish {
            generation: generation(1),
        };
        pusher.order("a", "/g".into(), part, 22);
        pusher.header(generation(2), 23);
        let handed: Vec<String> = (0..4).map(|_| next(&mut source)).collect();
        assert_eq!(
            handed,
            ["cancel 1", "cancel 2", "generation 1", "generation 2"]
        );
        cut.shutdown(std::net::Shutdown::Both).unwrap();
        assert!(matches!(
            source.next_order(now_micros() + 200_000),
            Received::Timeout
        ));
        let end = link_ended.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(end.frames, 4, "three orders and a header");
        assert!(source.linked.is_none());
    }

    /// A source in touch sleeps through the lease thread's looks at etcd.
    #[test]
    fn a_source_in_touch_is_not_woken_by_each_look() {
        let deadline = 60_000_000;
        let (mut source, _incoming) = source(now_micros(), deadline);
        let health = Arc::clone(&source.health);
        let looking = std::thread::spawn(move || {
            for _ in 0..50 {
                std::thread::sleep(Duration::from_millis(10));
                health.answered(now_micros());
            }
        });
        let woken = woken_while_idle(&mut source);
        assert!(woken <= 3, "woken {woken} times by 50 looks");
        looking.join().unwrap();
    }

    /// Adrift, the source sleeps until the lease thread hears from etcd (1,000 agents adrift
    /// that looked every 20 ms took the CPU an etcd behind them needed to catch up).
    #[test]
    fn a_source_adrift_sleeps_until_etcd_answers_again() {
        let deadline = 1_000_000;
        let (mut source, _incoming) = source(now_micros() - 2 * deadline, deadline);
        let health = Arc::clone(&source.health);
        assert!(matches!(
            source.next_order(now_micros() + deadline),
            Received::Adrift
        ));
        let woken = woken_while_idle(&mut source);
        assert!(woken <= 3, "woken {woken} times in half a second adrift");
        let answering = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            health.answered(now_micros());
        });
        let waiting = Instant::now();
        assert!(matches!(
            source.next_order(now_micros() + 60_000_000),
            Received::Back
        ));
        assert!(waiting.elapsed() < Duration::from_secs(30));
        answering.join().unwrap();
    }

    #[test]
    fn looks_that_keep_failing_are_waited_for_longer() {
        assert!(HEALTH_TIMEOUTS.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(HEALTH_RETRY < HEALTH_RETRY_MAX);
    }
}
