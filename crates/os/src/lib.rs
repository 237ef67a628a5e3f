//! cosched-os: what every cosched process needs from the operating system and the standard
//! library lacks: Unix-socket plumbing ([`unix`]), the crash tests' fault points ([`fault`]),
//! log lines with levels, systemd's readiness notification, a thread's time slice ([`slice`])
//! and real-time priority ([`realtime`]), a thread's wait on a socket and a channel at once
//! ([`doorbell`]), and the clock reading. Below the controller, the agent and the clients alike,
//! so none of them links another for these.

pub mod doorbell;
pub mod fault;
pub mod limits;
mod logline;
pub mod notify;
pub mod realtime;
pub mod slice;
pub mod unix;

pub use logline::{log_line, one_line, Level, Log};

use cosched_core::Micros;

/// Now on CLOCK_REALTIME (the clock NTP keeps in step across nodes), in microseconds since
/// the Unix epoch.
pub fn now_micros() -> Micros {
    clock_micros(libc::CLOCK_REALTIME)
}

/// Now on CLOCK_MONOTONIC in microseconds (what systemd's `MONOTONIC_USEC=` reads).
pub fn monotonic_micros() -> Micros {
    clock_micros(libc::CLOCK_MONOTONIC)
}

fn clock_micros(clock: libc::clockid_t) -> Micros {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000
}

/// The machine's host name (the kernel's, as `hostname` prints it).
pub fn host_name() -> std::io::Result<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|name| name.trim().to_string())
}

/// The machine's memory (`MemTotal` in /proc/meminfo), in bytes; `None` if unreadable.
pub fn memory_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// What this process may run on: the number of CPUs in its affinity mask.
pub fn usable_cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// For test binaries whose tests need root (real cgroups, real-time priority, network
/// namespaces, other users' processes): run as anyone else, says so in one line and ends the
/// binary (exit status 2), rather than letting each test fail on a permission error deep in
/// it. CI runs as root and runs them all.
pub fn require_root(what: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return;
    }
    // Tests run on several threads: one says it, the others wait for the exit.
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, std::sync::atomic::Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    let program = std::env::args().next().unwrap_or_default();
    let line = format!(
        "{program}: {what} need root (CI runs them as root); as another user, `cargo test --lib` \
         and the tests of cosched-controller, -core, -sim and -proto run\n"
    );
    // Straight to the descriptor: the test harness captures `eprintln!`, and would lose it
    // at the exit.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    std::process::exit(2);
}
