//! The quantum clock: slot `k` starts at `epoch + k * quantum` on CLOCK_REALTIME (the clock
//! NTP keeps in step across nodes). The thread sleeps to absolute deadlines, so a late wakeup
//! is recorded as lateness and never shifts the slots after it.

use cosched_core::{Micros, Rotation};
use cosched_os::now_micros;
use std::time::Duration;

/// Sleeps until the absolute CLOCK_REALTIME time `deadline` (µs); retries when interrupted.
pub fn sleep_until(deadline: Micros) {
    let ts = libc::timespec {
        tv_sec: deadline.div_euclid(1_000_000),
        tv_nsec: deadline.rem_euclid(1_000_000) * 1_000,
    };
    loop {
        // SAFETY: `ts` is a valid timespec; the remainder pointer may be null with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_REALTIME,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// One tick of the clock: which slot begins, when it was due, and when the thread woke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tick {
    pub slot: i64,
    pub deadline: Micros,
    pub woke: Micros,
    /// Boundaries slept through since the last tick (skipped, not replayed).
    pub missed: u64,
}

impl Tick {
    pub fn lateness(&self) -> Duration {
        Duration::from_micros((self.woke - self.deadline).max(0) as u64)
    }
}

/// What runs on the clock: work between boundaries, and the boundaries themselves.
pub trait SlotWork {
    /// Until `until` (a margin before the next boundary): take orders, do what waits. Returns
    /// false to stop the clock.
    fn between(&mut self, until: Micros) -> bool;
    /// The boundary into `tick.slot`; returns false to stop the clock.
    fn boundary(&mut self, tick: Tick) -> bool;
    /// How long before the boundary into `slot` `ahead_of` wants to be called (at most a
    /// tenth of the quantum).
    fn lead(&self, _slot: i64) -> Micros {
        0
    }
    /// `lead` before the boundary into `slot` (due at `boundary`): what must be done by it.
    fn ahead_of(&mut self, _slot: i64, _boundary: Micros) {}
}

/// The clock loop (the only one): from the next boundary on, `between` until `margin` (or the
/// `lead`, if longer) before each boundary, `ahead_of` it by its `lead`, then sleep to the
/// boundary and call `boundary`, until either says stop.
pub fn drive(rotation: Rotation, margin: Micros, work: &mut impl SlotWork) {
    // A job leaving gives up at most this much of its slot to be stopped by the boundary.
    let most_lead = rotation.quantum / 10;
    let mut slot = rotation.next_boundary(now_micros());
    let mut missed = 0;
    loop {
        let deadline = rotation.slot_start(slot);
        let expected_lead = work.lead(slot).min(most_lead);
        if !work.between(deadline - margin.max(expected_lead)) {
            return;
        }
        // Orders taken since may have changed who leaves.
        let lead = work.lead(slot).min(most_lead);
        if lead > 0 {
            sleep_until(deadline - lead);
            work.ahead_of(slot, deadline);
        }
        sleep_until(deadline);
        let woke = now_micros();
        let tick = Tick {
            slot,
            deadline,
            woke,
            missed,
        };
        if !work.boundary(tick) {
            return;
        }
        let next = (slot + 1).max(rotation.slot_at(now_micros()) + 1);
        missed = (next - slot - 1) as u64;
        slot = next;
    }
}

/// Calls `on_tick` at every slot boundary from the next one on, until it returns false.
pub fn run(rotation: Rotation, on_tick: impl FnMut(Tick) -> bool) {
    struct OnTick<F>(F);
    impl<F: FnMut(Tick) -> bool> SlotWork for OnTick<F> {
        fn between(&mut self, _until: Micros) -> bool {
            true
        }
        fn boundary(&mut self, tick: Tick) -> bool {
            (self.0)(tick)
        }
    }
    drive(rotation, 0, &mut OnTick(on_tick));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_land_on_the_grid_and_never_drift() {
        let quantum = 10_000;
        let rotation = Rotation::new(now_micros() / quantum * quantum, quantum);
        let mut ticks = Vec::new();
        run(rotation, |tick| {
            ticks.push(tick);
            ticks.len() < 20
        });
        for pair in ticks.windows(2) {
            assert!(pair[1].slot > pair[0].slot);
        }
        for tick in &ticks {
            assert_eq!(tick.deadline, rotation.slot_start(tick.slot));
            assert!(
                tick.woke >= tick.deadline,
                "woke before its deadline: {tick:?}"
            );
        }
    }

    /// Records what the clock asks of it; sleeps through two boundaries once.
    struct Recorder {
        rotation: Rotation,
        untils: Vec<Micros>,
        ticks: Vec<Tick>,
    }

    impl SlotWork for Recorder {
        fn between(&mut self, until: Micros) -> bool {
            self.untils.push(until);
            true
        }
        fn boundary(&mut self, tick: Tick) -> bool {
            self.ticks.push(tick);
            if self.ticks.len() == 3 {
                sleep_until(tick.deadline + 2 * self.rotation.quantum + self.rotation.quantum / 2);
            }
            self.ticks.len() < 6
        }
    }

    /// Wants a lead of `lead` before each boundary; records when it was called.
    struct Leader {
        lead: Micros,
        untils: Vec<Micros>,
        aheads: Vec<(i64, Micros)>,
    }

    impl SlotWork for Leader {
        fn between(&mut self, until: Micros) -> bool {
            self.untils.push(until);
            true
        }
        fn boundary(&mut self, _tick: Tick) -> bool {
            self.aheads.len() < 4
        }
        fn lead(&self, _slot: i64) -> Micros {
            self.lead
        }
        fn ahead_of(&mut self, slot: i64, _boundary: Micros) {
            self.aheads.push((slot, now_micros()));
        }
    }

    #[test]
    fn a_lead_longer_than_the_margin_ends_the_work_before_it_and_is_capped() {
        let quantum = 50_000;
        for (lead, expected) in [(3_000, 3_000), (9_000, 5_000)] {
            let rotation = Rotation::new(now_micros() / quantum * quantum, quantum);
            let mut leader = Leader {
                lead,
                untils: Vec::new(),
                aheads: Vec::new(),
            };
            drive(rotation, 500, &mut leader);
            for (until, (slot, at)) in leader.untils.iter().zip(&leader.aheads) {
                let deadline = rotation.slot_start(*slot);
                assert_eq!(*until, deadline - expected, "lead {lead}");
                assert!(*at >= deadline - expected, "lead {lead}: called early");
            }
        }
    }

    #[test]
    fn work_runs_before_each_margin_and_slept_through_boundaries_are_counted() {
        let quantum = 10_000;
        let rotation = Rotation::new(now_micros() / quantum * quantum, quantum);
        let mut recorder = Recorder {
            rotation,
            untils: Vec::new(),
            ticks: Vec::new(),
        };
        drive(rotation, 1_000, &mut recorder);
        let ticks = &recorder.ticks;
        for (until, tick) in recorder.untils.iter().zip(ticks) {
            assert_eq!(*until, tick.deadline - 1_000);
        }
        for pair in ticks.windows(2) {
            assert_eq!(
                pair[1].slot,
                pair[0].slot + 1 + pair[1].missed as i64,
                "{ticks:?}"
            );
        }
        assert!(ticks[3].missed >= 2, "{ticks:?}");
    }
}
