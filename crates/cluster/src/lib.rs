//! cosched-cluster: the control state of a cluster in etcd, under one prefix
//! (`/cosched/<cluster>/`):
//!
//! | key                     | value           | written by | lease          |
//! |-------------------------|-----------------|------------|----------------|
//! | `nodes/<node>`          | [`NodeInfo`]    | its agent  | the node's     |
//! | `status/<node>`         | `NodeStatus`    | its agent  | the node's     |
//! | `orders/<node>/<id>`    | `Command`       | controller | none: the agent deletes it once carried out |
//! | `orders/<node>/generation` | `Command::Publish` | controller | none: the node's part, rewritten when it changes |
//! | `generation`            | `Generation`, no entries | controller | none: the generation in force, for every node |
//! | `events/<node>/<id>`    | `Event`         | its agent  | none: the controller deletes it once handled |
//! | `leader`                | [`LeaderInfo`]  | controller | the leader's   |
//! | `rotation`              | epoch, quantum  | controller | none           |
//! | `jobs/<id, 20 digits>`  | job record      | leader     | none: written only while its leader key holds |
//! | `job-counter`           | last id given   | leader     | none           |
//!
//! Orders and events are queues: each side reads what is left on (re)start, in the order
//! written, then follows a watch resumed by revision, so nothing is lost or carried out twice
//! by one reader.
//!
//! A generation is two keys deep: the `generation` key every agent watches (number, slot
//! clock, first slot, how many slices, no entries: one write however many nodes), and each
//! node's part, rewritten only when the node's entries change. At 1,000 nodes a part per node
//! per generation was 1,000 writes, 250 ms (p50) before the last node had it; most changes
//! touch a few nodes' entries, and a new or gone slice only the slice count. An agent applies
//! its latest part under the latest header when etcd wrote the header after the part
//! (whichever comes first; revisions, since a new leader numbers generations from 1 again).
//! The part keys sit among the node's orders, so a part keeps its place in their order (a
//! start before the first generation naming the job), and are rewritten in place: only the
//! latest matters.
//!
//! Writes go through an [`Outbox`] thread that retries until etcd takes them, so the agent's
//! clock thread never waits for etcd.
//!
//! [`NodeInfo`]: cosched_proto::NodeInfo

mod backoff;
mod controller;
mod follow;
mod node;
mod outbox;
mod push;

pub use controller::{become_leader, EtcdOrders, EventFeed, LeaderGuard, Leadership};
pub use node::{join, Closer, EtcdSink, EtcdSource, Membership};
pub use outbox::Outbox;
pub use push::{PushError, PushLink, PushOffer, PushStats, Pushed, Pusher};

use cosched_core::Micros;
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Etcd(#[from] cosched_etcd::EtcdError),
    #[error("node '{node}' is already in cluster '{cluster}' ({holder}); stop that agent or pick another --node")]
    NodeTaken {
        node: String,
        cluster: String,
        holder: String,
    },
    #[error("{key}: {why}")]
    Garbled { key: String, why: String },
    #[error("{0}")]
    Invalid(String),
}

/// The keys of one cluster.
#[derive(Clone, Debug)]
pub struct Keys {
    cluster: String,
    prefix: String,
}

impl Keys {
    /// Keys under `/cosched/<cluster>/`; the name follows the rules of node names.
    pub fn new(cluster: &str) -> Result<Keys, ClusterError> {
        if !cosched_proto::valid_node_name(cluster) {
            return Err(ClusterError::Invalid(format!(
                "cluster name '{cluster}' must be 1-63 letters, digits, '-', '_' or '.'"
            )));
        }
        Ok(Keys {
            cluster: cluster.to_string(),
            prefix: format!("/cosched/{cluster}/"),
        })
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    pub fn nodes(&self) -> String {
        format!("{}nodes/", self.prefix)
    }

    pub fn node(&self, node: &str) -> String {
        format!("{}{node}", self.nodes())
    }

    pub fn statuses(&self) -> String {
        format!("{}status/", self.prefix)
    }

    pub fn status(&self, node: &str) -> String {
        format!("{}{node}", self.statuses())
    }

    pub fn orders(&self, node: &str) -> String {
        format!("{}orders/{node}/", self.prefix)
    }

    /// The key of the node's part of the generation in force, in its queue of orders.
    pub fn generation(&self, node: &str) -> String {
        format!("{}generation", self.orders(node))
    }

    /// The generation in force, without entries: what every agent follows.
    pub fn generation_header(&self) -> String {
        format!("{}generation", self.prefix)
    }

    pub fn events(&self) -> String {
        format!("{}events/", self.prefix)
    }

    pub fn event(&self, node: &str, id: &str) -> String {
        format!("{}{node}/{id}", self.events())
    }

    pub fn leader(&self) -> String {
        format!("{}leader", self.prefix)
    }

    pub fn rotation(&self) -> String {
        format!("{}rotation", self.prefix)
    }

    pub fn jobs(&self) -> String {
        format!("{}jobs/", self.prefix)
    }

    /// Zero-padded, so that key order is id order.
    pub fn job(&self, id: u64) -> String {
        format!("{}{id:020}", self.jobs())
    }

    pub fn job_counter(&self) -> String {
        format!("{}job-counter", self.prefix)
    }
}

/// The controller holding the leader key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderInfo {
    pub controller: String,
    pub since_us: Micros,
    /// Where this leader pushes its writes to the agents from, and their key (none: the
    /// agents follow etcd alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushOffer>,
}

/// A client of the cluster's etcd, authenticating when credentials are given, over TLS when
/// `tls` is.
pub fn etcd_client(
    urls: &[String],
    credentials: &Option<cosched_etcd::Credentials>,
    tls: Option<&cosched_etcd::Tls>,
) -> Result<cosched_etcd::Client, ClusterError> {
    let client = cosched_etcd::Client::new(urls, cosched_etcd::REQUEST_TIMEOUT, tls)?;
    Ok(match credentials {
        Some(credentials) => client.with_credentials(credentials.clone()),
        None => client,
    })
}

/// Who this process is, for messages: host name and process id.
pub fn whoami() -> String {
    let host = cosched_os::host_name().unwrap_or_else(|_| "?".into());
    format!("{host} pid {}", std::process::id())
}

fn decode<T: serde::de::DeserializeOwned>(key: &str, value: &[u8]) -> Result<T, ClusterError> {
    serde_json::from_slice(value).map_err(|e| ClusterError::Garbled {
        key: key.to_string(),
        why: e.to_string(),
    })
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("wire types serialize")
}

/// A generation numbered `number` with `slices` empty slices, for the tests.
#[cfg(test)]
fn test_generation(number: u64, slices: usize) -> cosched_proto::Generation {
    cosched_proto::Generation {
        protocol: cosched_proto::PROTOCOL_VERSION,
        number,
        published_us: 0,
        epoch_us: 0,
        quantum_us: 100_000,
        first_slot: 0,
        first_slice: 0,
        slices: vec![Default::default(); slices],
    }
}
