//! Writes to etcd in the order given, from a thread of their own, retried until etcd takes
//! them: whoever writes (the agent's clock thread, the controller under its lock) never waits
//! for etcd, and nothing written is lost while the process lives.

use cosched_etcd::Client;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

enum Op {
    Put {
        key: String,
        value: Vec<u8>,
        /// The lease to attach, read when written (a node's lease changes when it joins again).
        lease: Option<Arc<AtomicI64>>,
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
                for op in queue {
                    write(&client, &op, who);
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
        });
    }

    /// A key that goes when the lease does.
    pub fn put_leased(&self, key: String, value: Vec<u8>, lease: &Arc<AtomicI64>) {
        self.send(Op::Put {
            key,
            value,
            lease: Some(Arc::clone(lease)),
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

fn write(client: &Client, op: &Op, who: &str) {
    let mut backoff = Duration::from_millis(20);
    let mut complained = false;
    loop {
        let outcome = match op {
            Op::Put { key, value, lease } => {
                let lease = lease.as_ref().map(|l| l.load(Ordering::Relaxed));
                client.put(key, value, lease.filter(|&l| l != 0)).map(drop)
            }
            Op::Delete { key } => client.delete(key).map(drop),
            Op::DeletePrefix { prefix } => client.delete_prefix(prefix).map(drop),
        };
        match outcome {
            Ok(()) => {
                if complained {
                    eprintln!("cosched {who}: etcd takes writes again");
                }
                return;
            }
            Err(error) => {
                if !complained {
                    eprintln!("cosched {who}: {error}; retrying until etcd takes it");
                    complained = true;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
