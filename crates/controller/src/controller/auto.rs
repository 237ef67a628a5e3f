//! `auto` jobs: each node's agent measures the job's processes there in their first seconds,
//! a report a window (`Event::Behaviour`, [`BEHAVIOUR_WINDOWS`] at most); once every node of
//! the job reported and the reports are clear (or were the last), the controller chooses its
//! mode ([`choose`]), keeps it in the record (a restarted daemon starts the job in it) and
//! tells the nodes. Every node switches the job the same way, so its processes stay in step.

use super::{Controller, LOG};
use cosched_core::JobId;
use cosched_proto::{Behaviour, Command, JobState, Mode, BEHAVIOUR_WINDOWS};

/// An unswitched job stalled on storage at least this share of the time is I/O-bound.
pub const IO_BOUND: f64 = 0.2;
/// Working processes that ran less than this share of their time hardly use their processors.
pub const MOSTLY_ASLEEP_RUN: f64 = 0.1;
/// Out of step, a job whose working processes ran no longer than this (µs) each time they
/// were switched in, over a window, waits between every few microseconds of work: it wants
/// its peers coscheduled. On the 2-vCPU VM, unswitched beside each other (`bench/compare
/// --case modes`), the last rounds of three runs measured the fine ping-pong's ranks at 9, 12
/// and 52 µs a switch-in over their first second (the last one taken for coarse) and the
/// coarse job's at 78, 79 and 102 µs (docs/performance.md, "Each job its mode").
pub const FINE_GRAINED_RUN_US: f64 = 40.0;
/// A job that ran at least this long a switch-in is coarse-grained at its first window; one
/// between the two lines is watched for more windows, and fine-grained if it was in any:
/// the ping-pong's 52 µs second had its two ranks each beside a coarse rank, and such
/// placements last about a second here before the kernel moves them. Not higher: the coarse
/// job's first seconds measured 74-106 µs (ten runs' last rounds), and while it is watched
/// it takes its budget of the gangs' slots (a line at 100 µs kept it watched three seconds in
/// the last rounds of four of five runs).
pub const COARSE_GRAINED_RUN_US: f64 = 70.0;

/// A job's mode, why in a few words, and whether the reports so far settle it.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub mode: Mode,
    pub why: String,
    pub sure: bool,
}

/// The mode a job runs best in, from how its processes behaved unswitched in each window on
/// each of its nodes (the worst speaks for the job: one node's ranks waiting slow every
/// rank, and a fine-grained job out of step looks coarser while its ranks sit apart).
pub fn choose(seen: &[Behaviour]) -> Choice {
    let most = |of: fn(&Behaviour) -> f64| seen.iter().map(of).fold(0.0, f64::max);
    let io = most(|b| b.io.unwrap_or(0.0));
    let run = most(|b| b.run);
    let finest = seen
        .iter()
        .map(|b| b.run_per_switch_in_us)
        .fold(f64::INFINITY, f64::min);
    let percent = |share: f64| (share * 100.0).round();
    let (mode, why) = if io >= IO_BOUND {
        let why = format!(
            "I/O-bound: stalled on storage {} % of the time",
            percent(io)
        );
        (Mode::Implicit, why)
    } else if run < MOSTLY_ASLEEP_RUN {
        let why = format!("mostly asleep: ran {} % of the time", percent(run));
        (Mode::Implicit, why)
    } else if finest <= FINE_GRAINED_RUN_US {
        let why = format!("fine-grained: out of step, it ran {finest:.0} µs between waits");
        (Mode::Gang, why)
    } else {
        let why = format!("coarse-grained: out of step, it ran {finest:.0} µs between switches");
        (Mode::Moderate, why)
    };
    let sure = mode != Mode::Moderate || finest >= COARSE_GRAINED_RUN_US;
    Choice { mode, why, sure }
}

impl Controller {
    /// Node `node` measured a window of auto job `job`: once every node of it did, its mode is
    /// chosen if the reports settle it or were the last.
    pub fn behaviour_reported(&mut self, job: JobId, node: String, behaviour: Behaviour) {
        let Some(record) = self.latest(job) else {
            return;
        };
        // A late word on a job that ended, or one whose mode was chosen already, is dropped.
        if record.status.ended() || record.runs_as.is_some() {
            return;
        }
        LOG.info(format_args!(
            "job {job}: measured on node {node} {behaviour}"
        ));
        let reports = self.behaviours.entry(job).or_default();
        reports.entry(node).or_default().push(behaviour);
        let Some(seen) = self.reported_by_every_node(job, &self.behaviours[&job]) else {
            return;
        };
        let last = seen
            .iter()
            .all(|windows| windows.len() >= BEHAVIOUR_WINDOWS);
        let Choice { mode, why, sure } = choose(&seen.concat());
        if !sure && !last {
            return;
        }
        self.behaviours.remove(&job);
        if let Err(error) = self.update(job, |record| {
            record.runs_as = Some(mode);
            record.mode_why = Some(why.clone());
        }) {
            LOG.error(error);
            return;
        }
        LOG.info(format_args!("job {job}: auto mode chose {mode} ({why})"));
        if self.records[&job].status == JobState::Running {
            self.tell(Command::SetMode { job, mode });
        }
    }

    /// The mode a job is started in on its nodes: the one chosen for it, the one it asked
    /// for, or (none) the machine's. A machine in local mode switches no job.
    pub(super) fn start_mode(&self, job: JobId) -> Option<Mode> {
        let record = &self.records[&job];
        record
            .runs_as
            .or(record.mode)
            .filter(|_| self.settings.mode != Mode::Local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(run: f64, queued: f64, per_switch_us: f64, io: Option<f64>) -> Behaviour {
        Behaviour {
            window_us: 1_000_000,
            run,
            queued,
            asleep: 1.0 - run - queued,
            run_per_switch_in_us: per_switch_us,
            io,
        }
    }

    #[test]
    fn each_kind_of_job_gets_its_mode_and_the_worst_node_speaks() {
        let choice = choose(&[seen(0.3, 0.1, 500.0, Some(0.45))]);
        assert_eq!((choice.mode, choice.sure), (Mode::Implicit, true));
        let choice = choose(&[seen(0.02, 0.0, 5.0, Some(0.0))]);
        assert_eq!((choice.mode, choice.sure), (Mode::Implicit, true));
        assert!(choice.why.contains("mostly asleep: ran 2 %"), "{choice:?}");
        let choice = choose(&[seen(0.11, 0.89, 5.6, None)]);
        assert_eq!((choice.mode, choice.sure), (Mode::Gang, true));
        assert!(choice.why.contains("ran 6 µs between waits"), "{choice:?}");
        let choice = choose(&[seen(0.76, 0.2, 150.0, Some(0.01))]);
        assert_eq!((choice.mode, choice.sure), (Mode::Moderate, true));
        // Two nodes: one's ranks wait between every few µs of work, so every rank does.
        let choice = choose(&[seen(0.76, 0.2, 150.0, None), seen(0.4, 0.3, 8.0, None)]);
        assert_eq!(choice.mode, Mode::Gang);
    }

    #[test]
    fn between_the_lines_it_is_coarse_only_for_now_and_one_fine_window_makes_it_fine() {
        let between = seen(0.35, 0.3, 52.0, Some(0.0));
        let choice = choose(&[between]);
        assert_eq!((choice.mode, choice.sure), (Mode::Moderate, false));
        assert!(
            choice.why.contains("ran 52 µs between switches"),
            "{choice:?}"
        );
        let choice = choose(&[between, seen(0.4, 0.3, 6.0, Some(0.0))]);
        assert_eq!((choice.mode, choice.sure), (Mode::Gang, true));
        let at_the_line = seen(0.5, 0.3, COARSE_GRAINED_RUN_US, None);
        assert!(choose(&[between, at_the_line]).mode == Mode::Moderate);
        assert!(choose(&[at_the_line]).sure);
    }
}
