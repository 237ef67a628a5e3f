//! Waits between tries of what etcd failed: doubled after each failure up to a ceiling, each
//! spread over 75-125 % so that nodes that failed together (a thousand agents behind one slow
//! etcd) do not all try again at the same moment.

use cosched_os::now_micros;
use std::time::Duration;

pub(crate) struct Backoff {
    first: Duration,
    most: Duration,
    failures: u32,
}

impl Backoff {
    pub(crate) const fn new(first: Duration, most: Duration) -> Backoff {
        Backoff {
            first,
            most,
            failures: 0,
        }
    }

    /// Failures in a row since the last success.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    pub(crate) fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
    }

    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// The wait before the next try: `first` after one failure, doubled for each further one
    /// up to `most`, give or take a quarter.
    pub(crate) fn wait(&self) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1 << self.failures.saturating_sub(1).min(10));
        // 75 % to 125 %, from the clock's microseconds: enough to spread nodes apart.
        let spread = 750 + now_micros().rem_euclid(500) as u32;
        doubled.min(self.most) * spread / 1_000
    }

    /// Counts a failure and sleeps the wait before the next try.
    pub(crate) fn pause_after_failure(&mut self) {
        self.failed();
        std::thread::sleep(self.wait());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_ceiling_each_spread_by_a_quarter() {
        let ms = Duration::from_millis;
        let bounds = |failures: u32| {
            let mut backoff = Backoff::new(ms(100), ms(1_000));
            (0..failures).for_each(|_| backoff.failed());
            let waits: Vec<Duration> = (0..200)
                .map(|_| {
                    std::thread::sleep(Duration::from_micros(7));
                    backoff.wait()
                })
                .collect();
            (*waits.iter().min().unwrap(), *waits.iter().max().unwrap())
        };
        for (failures, low, high) in [(1, 75, 125), (3, 300, 500), (40, 750, 1_250)] {
            let (shortest, longest) = bounds(failures);
            assert!(
                shortest >= ms(low) && longest < ms(high),
                "{failures} failures: {shortest:?}..{longest:?}"
            );
            assert!(shortest < longest, "{failures} failures: not spread");
        }
        let mut backoff = Backoff::new(ms(100), ms(1_000));
        backoff.failed();
        backoff.failed();
        backoff.succeeded();
        assert_eq!(backoff.failures(), 0);
    }
}
