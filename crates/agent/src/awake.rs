//! Processors kept out of idle states while jobs are scheduled. A processor that idles
//! between boundaries (every job of its slice frozen ahead of the boundary, or blocked) halts,
//! and on a VM its wakeup for the boundary can come milliseconds late (the clock's timer
//! fires late from idle, with nothing else running: docs/performance.md).
//! A CPU latency request of 0 µs (PM QoS, `/dev/cpu_dma_latency`) makes the kernel's idle
//! loop poll instead, as real-time setups do; the request lasts while the file is open, so a
//! killed agent leaves none behind, and it is made only while the agent has jobs to switch:
//! an idle node halts as usual.

use std::fs::File;
use std::io::Write;

/// Where the request is made (`daemon --check` says whether it can be).
pub const DEVICE: &str = "/dev/cpu_dma_latency";
/// The kernel's "no constraint" (`PM_QOS_CPU_LATENCY_DEFAULT_VALUE`, 2,000 s in µs).
const NO_CONSTRAINT: i32 = 2_000_000_000;

pub struct Awake {
    file: Option<File>,
    held: bool,
}

impl Awake {
    /// The request, if this machine takes one (root, PM QoS): otherwise `hold` does nothing.
    /// Opened, it asks for nothing until `hold(true)`.
    pub fn open() -> Awake {
        Awake {
            file: File::options().write(true).open(DEVICE).ok(),
            held: false,
        }
    }

    /// Nothing to ask.
    pub fn none() -> Awake {
        Awake {
            file: None,
            held: false,
        }
    }

    /// Keeps the processors polling when idle (`true`) or lets them halt; writes only changes.
    /// A failed write gives the request up, once, with a warning.
    pub fn hold(&mut self, awake: bool) {
        if awake == self.held {
            return;
        }
        self.held = awake;
        let Some(file) = &mut self.file else {
            return;
        };
        let value = if awake { 0 } else { NO_CONSTRAINT };
        if let Err(error) = file.write_all(&value.to_ne_bytes()) {
            cosched_os::Log::new("agent").warn(format_args!(
                "{DEVICE}: {error}; processors may halt between boundaries"
            ));
            self.file = None;
        }
    }
}
