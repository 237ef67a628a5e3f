//! cosched-controller: the controller's rules, apart from any transport. [`Controller`] takes
//! requests and agents' events with the time they happen, keeps job records through the
//! [`store::Store`] trait, orders agents through `cosched_proto::OrderSink` and answers
//! clients, known by id, through [`clients::Clients`]. The daemon gives it SQLite or etcd and
//! sockets; the harness (tests) gives it memory and recorders.

pub mod clients;
mod controller;
pub mod counts;
#[cfg(test)]
mod harness;
pub mod store;

pub use controller::{ApiError, Controller, Settings, LOG};
