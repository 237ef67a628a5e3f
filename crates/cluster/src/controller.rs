//! The controller's link to etcd: the leader key, orders into each node's queue, and the
//! agents' events, statuses and comings and goings.

use crate::follow::{follow, Change};
use crate::{decode, encode, whoami, ClusterError, Keys, LeaderInfo, Outbox, PushOffer, Pusher};
use cosched_etcd::{Client, Compare};
use cosched_os::now_micros;
use cosched_proto::{
    Command, Event, Generation, NodeChange, NodeInfo, NodeStatus, Order, OrderSink, Role, Slice,
    WriteWatch,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LOG: cosched_os::Log = cosched_os::Log::new("daemon");

/// This controller holds the leader key (under a lease renewed by a thread of its own).
pub struct Leadership {
    client: Arc<Client>,
    lease: Arc<AtomicI64>,
    key: String,
    /// Distinguishes this leader's orders from an earlier one's.
    pub session: String,
}

/// Waits until this controller holds the leader key (naming `push`, where it pushes its
/// writes to the agents from, if it does). If the lease lapses (etcd was out of
/// reach longer than `ttl`), the key is taken again when no other controller took it
/// meanwhile; otherwise `lost` is called (from the renewing thread): another controller leads,
/// so the caller must stop acting at once.
///
/// While it leads, the leader thread also compacts etcd's history every [`HISTORY_KEPT`]:
/// every order and event stays in etcd's history until compacted, and a job asking for
/// remote processes in a loop filled it at 13 MB/s (an audit, with a large environment).
pub fn become_leader(
    client: Arc<Client>,
    keys: &Keys,
    ttl: i64,
    push: Option<PushOffer>,
    lost: impl FnOnce(String) + Send + 'static,
) -> Result<Leadership, ClusterError> {
    let me = LeaderInfo {
        controller: whoami(),
        since_us: now_micros(),
        push,
    };
    let session = format!("{:x}", me.since_us);
    let mut told = false;
    let mut leader_writes = WriteWatch::default();
    let lease = loop {
        let lease = client.grant(ttl)?;
        if client.create(&keys.leader(), &encode(&me), Some(lease.id))? {
            break lease;
        }
        let _ = client.revoke(lease.id);
        let held = client.get(&keys.leader())?;
        // The leader rewrites its key every renewal: a key unchanged for a whole lease,
        // while etcd answers, is held alive by something that is not a controller.
        if let Some(kv) = &held {
            let unchanged =
                leader_writes.unchanged_for(kv.mod_revision, ttl * 1_000_000, now_micros());
            if let Some(silent) = unchanged {
                LOG.warn(format_args!(
                    "the leader wrote nothing for {:.1} s though its key lives: revoking its lease",
                    silent as f64 / 1e6
                ));
                let _ = client.revoke(kv.lease);
                continue;
            }
        }
        if !told {
            let holder = held
                .and_then(|kv| decode::<LeaderInfo>(&kv.key, &kv.value).ok())
                .map_or_else(|| "another controller".into(), |l| l.controller);
            LOG.info(format_args!(
                "standing by: {holder} leads cluster '{}'",
                keys.cluster()
            ));
            told = true;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let lease = Arc::new(AtomicI64::new(lease.id));
    let (renewer, held, leader_key) = (Arc::clone(&client), Arc::clone(&lease), keys.leader());
    std::thread::Builder::new()
        .name("cosched-leader".into())
        .spawn(move || {
            let period = Duration::from_millis((ttl * 1000 / 3) as u64);
            let mut last_renewal = now_micros();
            let mut history = History::default();
            loop {
                std::thread::sleep(period);
                history.compact(&renewer, &leader_key);
                let lapsed = match renewer.keep_alive(held.load(Ordering::Relaxed)) {
                    Ok(renewed) if renewed.ttl > 0 => {
                        last_renewal = now_micros();
                        // Rewritten while ours: what tells a standby this controller lives
                        // (a lease alone anyone can keep alive).
                        let id = held.load(Ordering::Relaxed);
                        let _ = renewer.txn(
                            &[Compare::Leased(&leader_key, id)],
                            &[(&leader_key, &encode(&me), Some(id))],
                        );
                        continue;
                    }
                    Ok(_) => "the leader lease lapsed".to_string(),
                    Err(error) if now_micros() - last_renewal >= ttl * 1_000_000 => {
                        format!("the leader lease could not be renewed: {error}")
                    }
                    Err(_) => continue,
                };
                // etcd extends every lease when it elects a leader: a renewal that failed
                // through an election may have left the key ours.
                let regained = renewer.get(&leader_key).and_then(|key| match key {
                    Some(kv) if kv.lease == held.load(Ordering::Relaxed) => Ok(Some(kv.lease)),
                    Some(_) => Ok(None),
                    None => renewer.grant(ttl).and_then(|lease| {
                        let taken = renewer.create(&leader_key, &encode(&me), Some(lease.id))?;
                        Ok(taken.then_some(lease.id))
                    }),
                });
                match regained {
                    Ok(Some(id)) => {
                        held.store(id, Ordering::Relaxed);
                        last_renewal = now_micros();
                        LOG.warn(format_args!(
                            "{lapsed}; no other controller took over: leading on"
                        ));
                    }
                    Ok(None) => return lost(format!("{lapsed} and another controller leads now")),
                    Err(error) => LOG.warn(format_args!("{lapsed}; taking it again: {error}")),
                }
            }
        })
        .map_err(|e| ClusterError::Invalid(format!("starting the leader thread: {e}")))?;
    Ok(Leadership {
        client,
        lease,
        key: keys.leader(),
        session,
    })
}

/// How long etcd keeps the history of the cluster's keys: a watcher further behind (an agent
/// cut off longer) reads the state again, which `follow` does.
pub const HISTORY_KEPT: Duration = Duration::from_secs(10);

/// The revision seen at the last compaction tick, compacted to at the next one: the history
/// kept is between one and two periods long.
#[derive(Default)]
struct History {
    last_tick: Option<(i64, i64)>,
}

impl History {
    fn compact(&mut self, client: &Client, any_key: &str) {
        let now = now_micros();
        if self
            .last_tick
            .is_some_and(|(at, _)| now - at < HISTORY_KEPT.as_micros() as i64)
        {
            return;
        }
        let Ok((_, revision)) = client.get_prefix(any_key) else {
            return;
        };
        if let Some((_, earlier)) = self.last_tick {
            // Another controller, or etcd itself, may have compacted further: no harm.
            let _ = client.compact(earlier);
        }
        self.last_tick = Some((now, revision));
    }
}

/// What a leader's writes are conditioned on: its key, still under its lease (fencing: a
/// deposed controller's late write is refused by etcd itself).
#[derive(Clone, Debug)]
pub struct LeaderGuard {
    key: String,
    lease: Arc<AtomicI64>,
}

impl LeaderGuard {
    /// The comparison that holds only while this controller leads.
    pub fn compare(&self) -> Compare<'_> {
        Compare::Leased(&self.key, self.lease.load(Ordering::Relaxed))
    }
}

impl Leadership {
    pub fn guard(&self) -> LeaderGuard {
        LeaderGuard {
            key: self.key.clone(),
            lease: Arc::clone(&self.lease),
        }
    }

    /// Gives the leader key up (a clean stop): a standby takes over at once.
    pub fn resign(&self) {
        let _ = self.client.revoke(self.lease.load(Ordering::Relaxed));
    }
}

/// Orders into each node's queue in etcd, and pushed to the node's agent once etcd has them
/// (with a [`Pusher`]). Descriptors cannot cross machines: a job started here writes to a
/// file on its node.
pub struct EtcdOrders {
    outbox: Arc<Outbox>,
    pusher: Option<Arc<Pusher>>,
    keys: Keys,
    session: String,
    sequence: AtomicU64,
    /// Each node's entries as last written (trailing empty slices left out).
    parts: Mutex<HashMap<String, Vec<Slice>>>,
}

impl EtcdOrders {
    pub fn new(
        outbox: Arc<Outbox>,
        keys: Keys,
        leadership: &Leadership,
        pusher: Option<Arc<Pusher>>,
    ) -> EtcdOrders {
        EtcdOrders {
            outbox,
            pusher,
            keys,
            session: leadership.session.clone(),
            sequence: AtomicU64::new(0),
            parts: Mutex::new(HashMap::new()),
        }
    }
}

impl OrderSink for EtcdOrders {
    fn deliver(&self, node: &str, order: Order) {
        let n = self.sequence.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}{}-{n:012}", self.keys.orders(node), self.session);
        self.queue(node, key, order.command);
    }

    /// The parts that changed (all of them `again`), then the header: an agent that sees the
    /// header first applies it to the part it has, which is the part in force unless a new
    /// one is on its way, and that one comes with its own header. A part that only gains
    /// alternates goes after the header: a new slice filled with alternates changed every
    /// node's part (1,000 writes at the bench's churn start, its slowest generation in six runs
    /// of six), and no node needs those to take the generation.
    fn publish(&self, parts: Vec<(String, Generation)>, again: bool) {
        let mut written = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        let Some(header) = parts.first().map(|(_, g)| Generation {
            slices: vec![Slice::default(); g.slices.len()],
            ..*g
        }) else {
            return;
        };
        let mut after_header = Vec::new();
        for (node, part) in parts {
            let entries = without_trailing_empties(&part.slices);
            let before = written.get(&node).map(Vec::as_slice);
            if again || before != Some(entries) {
                let alternates_only =
                    !again && before.is_some_and(|old| only_adds_alternates(old, entries));
                written.insert(node.clone(), entries.to_vec());
                let order = Command::Publish { generation: part };
                match alternates_only {
                    true => after_header.push((node, order)),
                    false => self.queue(&node, self.keys.generation(&node), order),
                }
            }
        }
        self.write_header(header);
        for (node, order) in after_header {
            self.queue(&node, self.keys.generation(&node), order);
        }
    }

    fn carries_stdio(&self) -> bool {
        false
    }

    fn forget(&self, node: &str) {
        self.parts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(node);
        self.outbox.delete_prefix(self.keys.orders(node));
    }
}

impl EtcdOrders {
    /// The generation's header, for every node, pushed once etcd has it.
    fn write_header(&self, header: Generation) {
        let value = encode(&header);
        match &self.pusher {
            Some(pusher) => {
                let pusher = Arc::clone(pusher);
                let then = Box::new(move |revision| pusher.header(header, revision));
                self.outbox
                    .put_then(self.keys.generation_header(), value, then);
            }
            None => self.outbox.put(self.keys.generation_header(), value),
        }
    }

    /// A write to `node`'s order queue, pushed to its agent once etcd has it.
    fn queue(&self, node: &str, key: String, command: Command) {
        let value = encode(&command);
        match &self.pusher {
            Some(pusher) => {
                let (pusher, node, pushed_key) =
                    (Arc::clone(pusher), node.to_string(), key.clone());
                let then = Box::new(move |revision| {
                    pusher.order(&node, pushed_key, command, revision);
                });
                self.outbox.put_then(key, value, then);
            }
            None => self.outbox.put(key, value),
        }
    }
}

/// Whether `new` is `old` with alternates added and nothing else: the old part under the new
/// header then runs a subset of the new plan (no processor taken twice), its alternates
/// missing until the new part comes.
fn only_adds_alternates(old: &[Slice], new: &[Slice]) -> bool {
    let empty = Slice::default();
    old.len() <= new.len()
        && new.iter().enumerate().all(|(i, slice)| {
            let before = old.get(i).unwrap_or(&empty);
            before.entries.iter().all(|e| slice.entries.contains(e))
                && slice
                    .entries
                    .iter()
                    .all(|e| e.role == Role::Alternate || before.entries.contains(e))
        })
}

/// A node's entries slice by slice, without the empty slices at the end: a part that only
/// gained or lost empty slices is told by the header alone.
fn without_trailing_empties(slices: &[Slice]) -> &[Slice] {
    let used = slices
        .iter()
        .rposition(|s| !s.entries.is_empty())
        .map_or(0, |last| last + 1);
    &slices[..used]
}

/// What the agents say, for the controller to handle.
pub struct EventFeed {
    pub client: Arc<Client>,
    pub keys: Keys,
    pub outbox: Arc<Outbox>,
}

impl EventFeed {
    /// Hands each queued job event to `handle`, in the order written, and deletes it once
    /// handled; returns only if `handle` returns false.
    pub fn job_events(&self, mut handle: impl FnMut(Event) -> bool) {
        follow(
            &self.client,
            &self.keys.events(),
            None,
            &|| false,
            |change| {
                let Change::Put(kv) = change else {
                    return true;
                };
                let keep_on = match decode::<Event>(&kv.key, &kv.value) {
                    Ok(event) => handle(event),
                    Err(error) => {
                        LOG.warn(format_args!("{error}: event dropped"));
                        true
                    }
                };
                self.outbox.delete(kv.key);
                keep_on
            },
        );
    }

    /// Hands each node status written to `handle`.
    pub fn statuses(&self, mut handle: impl FnMut(NodeStatus) -> bool) {
        follow(
            &self.client,
            &self.keys.statuses(),
            None,
            &|| false,
            |change| match change {
                Change::Put(kv) => match decode::<NodeStatus>(&kv.key, &kv.value) {
                    Ok(status) => handle(status),
                    Err(error) => {
                        LOG.warn(error);
                        true
                    }
                },
                Change::Delete(_) => true,
            },
        );
    }

    /// The revision at which each node last wrote its status, as etcd answers now; `None` when
    /// etcd does not answer (then nobody's silence can be told from etcd's).
    pub fn status_revisions(&self) -> Option<BTreeMap<String, i64>> {
        let prefix = self.keys.statuses();
        let (statuses, _) = self.client.get_prefix_keys(&prefix).ok()?;
        Some(
            statuses
                .into_iter()
                .filter_map(|kv| Some((kv.key.strip_prefix(&prefix)?.to_string(), kv.mod_revision)))
                .collect(),
        )
    }

    /// Hands each node joining or leaving to `handle` (the nodes present first).
    pub fn nodes(&self, mut handle: impl FnMut(NodeChange) -> bool) {
        let prefix = self.keys.nodes();
        follow(
            &self.client,
            &prefix,
            None,
            &|| false,
            |change| match change {
                Change::Put(kv) => match decode::<NodeInfo>(&kv.key, &kv.value) {
                    Ok(info) => handle(NodeChange::Joined(info)),
                    Err(error) => {
                        LOG.warn(error);
                        true
                    }
                },
                Change::Delete(key) => match key.strip_prefix(&prefix) {
                    Some(node) => handle(NodeChange::Left(node.to_string())),
                    None => true,
                },
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosched_proto::{Entry, NodeCpus};

    fn entry(job: u64, role: Role) -> Entry {
        Entry {
            job,
            role,
            cpus: vec![NodeCpus {
                node: "a".into(),
                cpus: "0".parse().unwrap(),
            }],
        }
    }

    fn slice(entries: &[Entry]) -> Slice {
        Slice {
            entries: entries.to_vec(),
        }
    }

    #[test]
    fn only_a_part_that_gains_alternates_and_nothing_else_may_wait_for_the_header() {
        let own = |job| entry(job, Role::Own);
        let alternate = |job| entry(job, Role::Alternate);
        let old = [slice(&[own(1)]), slice(&[own(2)])];
        let gains = [slice(&[own(1)]), slice(&[own(2)]), slice(&[alternate(1)])];
        assert!(
            only_adds_alternates(&old, &gains),
            "a new slice of alternates"
        );
        let beside = [slice(&[own(1), alternate(3)]), slice(&[own(2)])];
        assert!(only_adds_alternates(&old, &beside));
        let own_added = [slice(&[own(1)]), slice(&[own(2)]), slice(&[own(3)])];
        assert!(!only_adds_alternates(&old, &own_added), "a job of its own");
        let lost = [slice(&[own(1)]), slice(&[alternate(2)])];
        assert!(!only_adds_alternates(&old, &lost), "an entry gone");
        let shorter = [slice(&[own(1)])];
        assert!(!only_adds_alternates(&old, &shorter), "a slice gone");
        let dropped = [slice(&[own(1)]), slice(&[own(2)])];
        let with_alternate = [slice(&[own(1), alternate(3)]), slice(&[own(2)])];
        assert!(
            !only_adds_alternates(&with_alternate, &dropped),
            "an alternate gone"
        );
    }
}
