//! cosched-os: what every cosched process needs from the operating system and the standard
//! library lacks: Unix-socket plumbing ([`unix`]), the crash tests' fault points ([`fault`]),
//! log lines, and the clock reading. Below the controller, the agent and the clients alike,
//! so none of them links another for these.

pub mod fault;
mod logline;
pub mod unix;

pub use logline::{log_line, one_line};

use cosched_core::Micros;

/// Now on CLOCK_REALTIME (the clock NTP keeps in step across nodes), in microseconds since
/// the Unix epoch.
pub fn now_micros() -> Micros {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000
}

/// What this process may run on: the number of CPUs in its affinity mask.
pub fn usable_cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}
