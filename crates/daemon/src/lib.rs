//! cosched-daemon: the controller's process. It holds the job store (SQLite, or etcd for a
//! cluster), serves the API on a Unix socket (peer credentials decide who may act) and over
//! HTTP, and runs `cosched_controller::Controller`, which orders the node agent
//! (`cosched_agent::NodeAgent`, in this process on one machine), which alone touches
//! processes and cgroups. Each job has a supervisor process that outlives the daemon: jobs
//! keep running, keep their exit status and are never left frozen.

pub mod check;
mod clients;
pub mod console;
pub mod daemon;
pub mod etcd_store;
mod http;
pub mod metrics;
pub mod server;
pub mod store;
pub mod waiters;

pub use cosched_etcd::{
    read_private, Credentials as EtcdCredentials, Identity as EtcdIdentity, Tls as EtcdTls,
};
pub use daemon::OnStop;
pub use server::{serve, ClusterConfig, DaemonConfig, PolicyFile};
