//! Writes to etcd in the order given, from a thread of their own, retried until etcd takes
//! them: whoever writes (the agent's clock thread, the controller under its lock) never waits
//! for etcd, and nothing written is lost while the process lives.
//!
//! Writes queued together go as one transaction (up to etcd's limit of operations): a
//! generation fanned out to 1,000 nodes is 8 requests and 8 revisions, not 1,000. A put
//! queued behind an unwritten put of the same key replaces it: only a key's last value
//! matters (a node's generation, its status), and without it 500 submissions in a burst
//! queued 500 generations for each of 1,000 nodes, written for minutes after the last.

use crate::backoff::Backoff;
use cosched_etcd::{Client, Write, MAX_TXN_OPS};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to do once etcd has committed a write, given its revision.
pub type Committed = Box<dyn FnOnce(i64) + Send>;

enum Op {
    Put {
        key: String,
        value: Vec<u8>,
        /// The lease to attach, read when written (a node's lease changes when it joins again).
        lease: Option<Arc<AtomicI64>>,
        /// Called with the write's revision once etcd has it (the leader's push).
        then: Option<Committed>,
    },
    Delete {
        key: String,
    },
    DeletePrefix {
        prefix: String,
    },
}

pub struct Outbox {
    /// `None` once finished.
    ops: Mutex<Option<Sender<Op>>>,
    done: Mutex<Receiver<()>>,
}

/// Longest pause between two attempts at a write etcd refused or could not take.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl Outbox {
    /// Starts the writer thread; `who` names it in messages.
    pub fn start(client: Arc<Client>, who: &'static str) -> std::io::Result<Outbox> {
        let (ops, queue) = channel::<Op>();
        let (finished, done) = channel();
        std::thread::Builder::new()
            .name(format!("{who}-outbox"))
            .spawn(move || {
                let mut pending = Pending::default();
                loop {
                    if pending.is_empty() {
                        match queue.recv() {
                            Ok(op) => pending.push(op),
                            Err(_) => break,
                        }
                    }
                    while let Ok(op) = queue.try_recv() {
                        pending.push(op);
                    }
                    let batch = pending.take_batch();
                    if !batch.is_empty() {
                        let revision = write(&client, &batch, who);
                        for op in batch {
                            if let Op::Put {
                                then: Some(then), ..
                            } = op
                            {
                                then(revision);
                            }
                        }
                    }
                }
                let _ = finished.send(());
            })?;
        Ok(Outbox {
            ops: Mutex::new(Some(ops)),
            done: Mutex::new(done),
        })
    }

    fn send(&self, op: Op) {
        if let Some(ops) = &*self.ops.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = ops.send(op);
        }
    }

    pub fn put(&self, key: String, value: Vec<u8>) {
        self.send(Op::Put {
            key,
            value,
            lease: None,
            then: None,
        });
    }

    /// A put, and `then` called with its revision on the writer thread once etcd has it (not
    /// at all if a later put of the key replaces it before it is written).
    pub fn put_then(&self, key: String, value: Vec<u8>, then: Committed) {
        self.send(Op::Put {
            key,
            value,
            lease: None,
            then: Some(then),
        });
    }

    /// A key that goes when the lease does.
    pub fn put_leased(&self, key: String, value: Vec<u8>, lease: &Arc<AtomicI64>) {
        self.send(Op::Put {
            key,
            value,
            lease: Some(Arc::clone(lease)),
            then: None,
        });
    }

    pub fn delete(&self, key: String) {
        self.send(Op::Delete { key });
    }

    /// Every key under `prefix`, as etcd has them when this write's turn comes.
    pub fn delete_prefix(&self, prefix: String) {
        self.send(Op::DeletePrefix { prefix });
    }

    /// Writes what is queued (later writes are dropped), for `within` at most; says whether
    /// all of it went.
    pub fn finish(&self, within: Duration) -> bool {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).take();
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        done.recv_timeout(within).is_ok()
    }
}

impl Op {
    /// The write as part of a transaction; `None` for what goes alone: a leased put (a lapsed
    /// lease would fail every write of the batch) and a prefix deletion.
    fn batched(&self) -> Option<Write<'_>> {
        match self {
            Op::Put {
                key,
                value,
                lease: None,
                ..
            } => Some(Write::Put(key, value)),
            Op::Delete { key } => Some(Write::Delete(key)),
            Op::Put { .. } | Op::DeletePrefix { .. } => None,
        }
    }
}

/// The writes not made yet, in order, with a put replaced by a later put of its key.
#[derive(Default)]
struct Pending {
    /// `None`: replaced by a later put.
    ops: VecDeque<Option<Op>>,
    /// The sequence number of `ops[0]`.
    first: u64,
    /// Each key's queued put, by sequence number.
    puts: HashMap<String, u64>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn push(&mut self, op: Op) {
        let seq = self.first + self.ops.len() as u64;
        if let Op::Put { key, .. } = &op {
            if let Some(earlier) = self.puts.insert(key.clone(), seq) {
                self.ops[(earlier - self.first) as usize] = None;
            }
        }
        self.ops.push_back(Some(op));
    }

    /// The next write, past those replaced.
    fn front(&mut self) -> Option<&Op> {
        while matches!(self.ops.front(), Some(None)) {
            self.ops.pop_front();
            self.first += 1;
        }
        self.ops.front()?.as_ref()
    }

    fn pop(&mut self) -> Option<Op> {
        self.front()?;
        let op = self.ops.pop_front()??;
        if let Op::Put { key, .. } = &op {
            if self.puts.get(key) == Some(&self.first) {
                self.puts.remove(key);
            }
        }
        self.first += 1;
        Some(op)
    }

    /// The next write, and what follows it that may share its transaction: up to etcd's
    /// limit, each key once (etcd refuses a transaction naming a key twice).
    fn take_batch(&mut self) -> Vec<Op> {
        let Some(first) = self.pop() else {
            return Vec::new();
        };
        let Some(key) = first.batched().map(|w| w.key().to_string()) else {
            return vec![first];
        };
        let mut keys = BTreeSet::from([key]);
        let mut batch = vec![first];
        while batch.len() < MAX_TXN_OPS {
            let next = self.front().and_then(Op::batched);
            match next.map(|w| w.key().to_string()) {
                Some(key) if !keys.contains(&key) => {
                    keys.insert(key);
                    batch.extend(self.pop());
                }
                _ => break,
            }
        }
        batch
    }
}

/// Writes `batch`, retrying until etcd takes it; returns the revision of the write.
fn write(client: &Client, batch: &[Op], who: &str) -> i64 {
    let mut backoff = Backoff::new(Duration::from_millis(20), MAX_BACKOFF);
    let mut complained = false;
    loop {
        let outcome = match batch {
            [Op::Put {
                key, value, lease, ..
            }] => {
                let lease = lease.as_ref().map(|l| l.load(Ordering::Relaxed));
                client.put(key, value, lease.filter(|&l| l != 0))
            }
            // Nothing waits on a deletion's revision.
            [Op::Delete { key }] => client.delete(key).map(|_| 0),
            [Op::DeletePrefix { prefix }] => client.delete_prefix(prefix).map(|_| 0),
            ops => {
                let writes: Vec<Write> = ops.iter().filter_map(Op::batched).collect();
                client.write_all(&writes)
            }
        };
        match outcome {
            Ok(revision) => {
                if complained {
                    cosched_os::log_line(who, cosched_os::Level::Info, "etcd takes writes again");
                }
                return revision;
            }
            Err(error) => {
                if !complained {
                    cosched_os::log_line(
                        who,
                        cosched_os::Level::Warning,
                        format_args!("{error}; retrying until etcd takes it"),
                    );
                    complained = true;
                }
                backoff.pause_after_failure();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
            lease: None,
            then: None,
        }
    }

    fn keys(batch: &[Op]) -> Vec<String> {
        batch
            .iter()
            .map(|op| match op {
                Op::Put { key, value, .. } => format!("{key}={}", String::from_utf8_lossy(value)),
                Op::Delete { key } => format!("-{key}"),
                Op::DeletePrefix { prefix } => format!("-{prefix}*"),
            })
            .collect()
    }

    #[test]
    fn a_later_put_replaces_a_queued_one_at_its_own_place() {
        let mut pending = Pending::default();
        for op in [
            put("g/a", "1"),
            put("o/1", "start"),
            Op::Delete { key: "g/b".into() },
            put("g/a", "2"),
            put("g/b", "2"),
        ] {
            pending.push(op);
        }
        // g/a=1 is never written; g/b's deletion keeps its place, its put comes after it.
        assert_eq!(keys(&pending.take_batch()), ["o/1=start", "-g/b", "g/a=2"]);
        assert_eq!(keys(&pending.take_batch()), ["g/b=2"]);
        assert!(pending.is_empty());
        // Once taken, a put is not replaced: the next one is written after it.
        pending.push(put("g/a", "3"));
        assert_eq!(keys(&pending.take_batch()), ["g/a=3"]);
    }

    #[test]
    fn batches_name_each_key_once_and_leased_puts_and_prefixes_go_alone() {
        let mut pending = Pending::default();
        pending.push(Op::Delete { key: "k".into() });
        pending.push(put("k", "1"));
        pending.push(put("j", "1"));
        pending.push(Op::DeletePrefix {
            prefix: "p/".into(),
        });
        pending.push(Op::Put {
            key: "s".into(),
            value: b"up".to_vec(),
            lease: Some(Arc::new(AtomicI64::new(7))),
            then: None,
        });
        pending.push(put("m", "1"));
        assert_eq!(keys(&pending.take_batch()), ["-k"]);
        assert_eq!(keys(&pending.take_batch()), ["k=1", "j=1"]);
        assert_eq!(keys(&pending.take_batch()), ["-p/*"]);
        assert_eq!(keys(&pending.take_batch()), ["s=up"]);
        assert_eq!(keys(&pending.take_batch()), ["m=1"]);
        assert!(pending.take_batch().is_empty());
    }

    #[test]
    fn a_batch_stops_at_etcds_limit() {
        let mut pending = Pending::default();
        for i in 0..MAX_TXN_OPS + 5 {
            pending.push(put(&format!("n/{i}"), "g"));
        }
        assert_eq!(pending.take_batch().len(), MAX_TXN_OPS);
        assert_eq!(pending.take_batch().len(), 5);
    }
}
