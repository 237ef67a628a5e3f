//! Fault injection for the crash tests: `COSCHED_FAULT=POINT` (or `POINT:JOB`) in the daemon's
//! environment kills the daemon with SIGKILL when it reaches that point (for that job), exactly
//! as a `kill -9` landing there would. The points are the controller's and the agent's (the
//! last, `spawned`, is the agent's), so they live here, below both. Only root sets the
//! daemon's environment; unset, each point costs one comparison.

use cosched_core::JobId;
use std::sync::OnceLock;

/// The named points, in the order a job passes them: its request is read (`accepted`, job 0:
/// no id yet), its record is saved (`recorded`), its launch intent is saved (`intent`), its
/// supervisor is started (`spawned`).
pub const POINTS: [&str; 4] = ["accepted", "recorded", "intent", "spawned"];

fn armed() -> &'static Option<(String, Option<JobId>)> {
    static ARMED: OnceLock<Option<(String, Option<JobId>)>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let value = std::env::var("COSCHED_FAULT").ok()?;
        let (point, job) = match value.split_once(':') {
            Some((point, job)) => (point.to_string(), job.parse().ok()),
            None => (value, None),
        };
        Some((point, job))
    })
}

/// Dies here if the environment says so.
pub fn point(name: &str, job: JobId) {
    if let Some((point, only)) = armed() {
        if point == name && only.is_none_or(|only| only == job) {
            eprintln!("cosched daemon: COSCHED_FAULT: killed at '{name}' (job {job})");
            // SAFETY: kill(2) on ourselves.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }
}

/// Waits here if the environment says so: `COSCHED_DELAY=POINT:MS` (tests widen a race's
/// window with it, as a loaded machine might).
pub fn delay(name: &str, job: JobId) {
    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        let value = std::env::var("COSCHED_DELAY").ok()?;
        let (point, ms) = value.split_once(':')?;
        Some((point.to_string(), ms.parse().ok()?))
    });
    if let Some((point, ms)) = armed {
        if point == name {
            eprintln!("cosched daemon: COSCHED_DELAY: {ms} ms at '{name}' (job {job})");
            std::thread::sleep(std::time::Duration::from_millis(*ms));
        }
    }
}
