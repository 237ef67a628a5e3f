//! The hypervisor's steal: time a virtual machine's processors were held by its host, when
//! nothing in the guest ran (`/proc/stat`, the `cpu` line's eighth field, in clock ticks,
//! 10 ms here: too coarse to place a stall of a few milliseconds, which the bystanders do).

use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the counter is read: a tenth of a second costs nothing measurable, and a tick
/// (10 ms) of steal is as fine as `/proc/stat` tells it anyway.
const EVERY: Duration = Duration::from_millis(100);

/// Reads the steal counter in a thread of its own until [`StealSampler::finish`].
pub struct StealSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Vec<Sample>>>,
}

/// (when, µs since the Unix epoch; steal so far, in clock ticks)
type Sample = (i64, u64);

/// What the host took while the sampler ran.
pub struct Steal {
    samples: Vec<Sample>,
    tick_us: u64,
}

impl StealSampler {
    pub fn start() -> StealSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = vec![(cosched_os::now_micros(), steal_ticks()?)];
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(EVERY);
                samples.push((cosched_os::now_micros(), steal_ticks()?));
            }
            Ok(samples)
        });
        StealSampler { stop, thread }
    }

    pub fn finish(self) -> Result<Steal> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = match self.thread.join() {
            Ok(samples) => samples?,
            Err(_) => bail!("the steal sampler's thread panicked"),
        };
        // SAFETY: sysconf has no memory-safety preconditions.
        let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Ok(Steal {
            samples,
            tick_us: 1_000_000 / ticks_per_second,
        })
    }
}

impl Steal {
    /// All the steal while sampled (µs; a clock tick's precision).
    pub fn total_us(&self) -> u64 {
        let first = self.samples.first().map_or(0, |s| s.1);
        let last = self.samples.last().map_or(0, |s| s.1);
        (last - first) * self.tick_us
    }
}

/// The steal of all processors so far, in clock ticks.
fn steal_ticks() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    parse_steal(&text)
}

fn parse_steal(text: &str) -> Result<u64> {
    let line = text
        .lines()
        .find(|line| line.starts_with("cpu "))
        .context("/proc/stat has no `cpu` line")?;
    match line.split_whitespace().nth(8).map(str::parse) {
        Some(Ok(ticks)) => Ok(ticks),
        _ => bail!("/proc/stat's `cpu` line has no steal field: {line:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eighth_field_of_the_cpu_line_is_steal() {
        let text = "cpu  7928221 5199 1449320 6740938 112453 0 45853 3346 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse_steal(text).unwrap(), 3346);
        assert!(parse_steal("cpu0 1 2 3\n").is_err());
        assert!(parse_steal("cpu  1 2 3\n").is_err());
    }

    #[test]
    fn steal_is_the_counters_rise_in_microseconds() {
        let steal = Steal {
            samples: vec![(0, 5), (100_000, 5), (200_000, 7)],
            tick_us: 10_000,
        };
        assert_eq!(steal.total_us(), 20_000);
    }
}
