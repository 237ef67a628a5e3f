//! cosched-daemon: the single-machine daemon. It holds the job store, serves the API on a Unix
//! socket (peer credentials decide who may act), runs the core's scheduler, and hands plans to
//! the agent thread, the only code that touches cgroups. Each job has a supervisor process that
//! outlives the daemon: jobs keep running, keep their exit status and are never left frozen.

pub mod agent_loop;
pub mod check;
pub mod daemon;
pub mod fault;
pub mod protocol;
pub mod server;
pub mod store;
pub mod supervisor;
pub mod unix;
pub mod waiters;

pub use daemon::OnStop;
pub use server::{serve, usable_cpus, DaemonConfig, StartError};
