//! cosched-daemon: the controller. It holds the job store, serves the API on a Unix socket
//! (peer credentials decide who may act), runs the core's scheduler, and orders the node
//! agent (`cosched_agent::NodeAgent`, in this process on one machine), which alone touches
//! processes and cgroups. Each job has a supervisor process that outlives the daemon: jobs
//! keep running, keep their exit status and are never left frozen.

pub mod check;
pub mod console;
pub mod daemon;
pub mod etcd_store;
mod http;
pub mod metrics;
pub mod server;
pub mod store;
pub mod waiters;

pub use cosched_etcd::Credentials as EtcdCredentials;
pub use daemon::OnStop;
pub use server::{serve, ClusterConfig, DaemonConfig};
