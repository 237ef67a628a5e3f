//! What the node's time daemon says of its clock. cosched never disciplines clocks; it reads
//! chrony's tracking (`chronyc -c tracking`) on a thread of its own, so that the slot clock
//! never waits for a child process, and reports the offset in the agent's status.

use cosched_core::Micros;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// chrony's own default polling is 64 s or more: a fresher figure would tell nothing new.
const ASK_EVERY: Duration = Duration::from_secs(16);
/// No figure (chrony absent, or not answering).
const UNKNOWN: i64 = i64::MIN;

/// The latest offset of the clock from true time (positive: ahead), if chrony told one.
#[derive(Clone)]
pub struct ClockOffset(Arc<AtomicI64>);

impl ClockOffset {
    /// Starts asking chrony in the background; when `chronyc` is not installed it never asks.
    pub fn watch() -> ClockOffset {
        let latest = ClockOffset(Arc::new(AtomicI64::new(UNKNOWN)));
        let writer = latest.clone();
        let _ = std::thread::Builder::new()
            .name("cosched-chrony".into())
            .spawn(move || loop {
                let output = Command::new("chronyc")
                    .args(["-c", "tracking"])
                    .stdin(Stdio::null())
                    .stderr(Stdio::null())
                    .output();
                let offset = match output {
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
                    Ok(out) if out.status.success() => {
                        parse_tracking(&String::from_utf8_lossy(&out.stdout))
                    }
                    _ => None,
                };
                writer.0.store(offset.unwrap_or(UNKNOWN), Ordering::Relaxed);
                std::thread::sleep(ASK_EVERY);
            });
        latest
    }

    pub fn get(&self) -> Option<Micros> {
        Some(self.0.load(Ordering::Relaxed)).filter(|&v| v != UNKNOWN)
    }
}

/// The offset in `chronyc -c tracking`'s line: its fifth field, "System time", is the
/// correction chrony is applying in seconds, positive when the clock is slow; the offset
/// from true time is its opposite.
pub fn parse_tracking(csv: &str) -> Option<Micros> {
    let correction: f64 = csv.lines().next()?.split(',').nth(4)?.trim().parse().ok()?;
    correction
        .is_finite()
        .then(|| (-correction * 1e6).round() as Micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_time_field_gives_the_offset_with_its_sign() {
        let slow = "C0A80001,192.168.0.1,3,1700000000.123456789,0.000123456,-0.000001,\
                    0.000002,-1.234,0.001,0.050,0.000410,0.000020,64.5,Normal\n";
        assert_eq!(parse_tracking(slow), Some(-123));
        let fast = slow.replace(",0.000123456,", ",-0.002000000,");
        assert_eq!(parse_tracking(&fast), Some(2_000));
        assert_eq!(parse_tracking("506 Cannot talk to daemon\n"), None);
        assert_eq!(parse_tracking(""), None);
    }
}
