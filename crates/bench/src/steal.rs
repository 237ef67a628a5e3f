//! The hypervisor's steal: time a virtual machine's processors were held by its host, when
//! nothing in the guest ran (`/proc/stat`, the `cpu` line's eighth field, in clock ticks,
//! 10 ms here: too coarse to place a stall of a few milliseconds, which the bystanders do).

use anyhow::{bail, Context, Result};

/// The steal counter when a measure began.
pub struct StealSince {
    ticks: u64,
}

impl StealSince {
    pub fn now() -> Result<StealSince> {
        Ok(StealSince {
            ticks: steal_ticks()?,
        })
    }

    /// The steal since then (µs; a clock tick's precision).
    pub fn elapsed_us(&self) -> Result<u64> {
        // SAFETY: sysconf has no memory-safety preconditions.
        let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Ok(self.us_until(steal_ticks()?, 1_000_000 / ticks_per_second))
    }

    fn us_until(&self, ticks: u64, tick_us: u64) -> u64 {
        ticks.saturating_sub(self.ticks) * tick_us
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
        let since = StealSince { ticks: 5 };
        assert_eq!(since.us_until(7, 10_000), 20_000);
    }
}
