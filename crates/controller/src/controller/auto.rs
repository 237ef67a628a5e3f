//! `auto` jobs: each node's agent measures the job's processes there in their first seconds
//! (`Event::Behaviour`); once every node of the job reported, the controller chooses its mode
//! ([`choose`]), keeps it in the record (a restarted daemon starts the job in it) and tells
//! the nodes. Every node switches the job the same way, so its processes stay in step.

use super::{Controller, LOG};
use cosched_core::JobId;
use cosched_proto::{Behaviour, Command, JobState, Mode};

/// An unswitched job stalled on storage at least this share of the time is I/O-bound.
pub const IO_BOUND: f64 = 0.2;
/// Working processes that ran less than this share of their time hardly use their processors.
pub const MOSTLY_ASLEEP_RUN: f64 = 0.1;
/// Out of step, a job whose working processes ran no longer than this (µs) each time they
/// were switched in waits between every few microseconds of work: it wants its peers
/// coscheduled. On the 2-vCPU VM, unswitched beside each other (`bench/compare --case
/// modes`), the last rounds of three runs measured the fine ping-pong's ranks at 9, 12 and
/// 52 µs a switch-in (the last one taken for coarse) and the coarse job's at 78, 79 and
/// 102 µs (docs/performance.md, "Each job its mode").
pub const FINE_GRAINED_RUN_US: f64 = 40.0;

/// The mode a job runs best in, from how its processes behaved unswitched on each of its
/// nodes (the worst node speaks for the job: one node's ranks waiting slow every rank), and
/// why, in a few words.
pub fn choose(seen: &[Behaviour]) -> (Mode, String) {
    let most = |of: fn(&Behaviour) -> f64| seen.iter().map(of).fold(0.0, f64::max);
    let io = most(|b| b.io.unwrap_or(0.0));
    let run = most(|b| b.run);
    let finest = seen
        .iter()
        .map(|b| b.run_per_switch_in_us)
        .fold(f64::INFINITY, f64::min);
    let percent = |share: f64| (share * 100.0).round();
    if io >= IO_BOUND {
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
    }
}

impl Controller {
    /// Node `node` measured auto job `job`: once every node of it did, its mode is chosen.
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
        reports.insert(node, behaviour);
        let Some(seen) = self.reported_by_every_node(job, &self.behaviours[&job]) else {
            return;
        };
        self.behaviours.remove(&job);
        let (mode, why) = choose(&seen);
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
        assert_eq!(
            choose(&[seen(0.3, 0.1, 500.0, Some(0.45))]).0,
            Mode::Implicit
        );
        let (mode, why) = choose(&[seen(0.02, 0.0, 5.0, Some(0.0))]);
        assert_eq!(mode, Mode::Implicit);
        assert!(why.contains("mostly asleep: ran 2 %"), "{why}");
        let (mode, why) = choose(&[seen(0.11, 0.89, 5.6, None)]);
        assert_eq!(mode, Mode::Gang);
        assert!(why.contains("ran 6 µs between waits"), "{why}");
        let (mode, why) = choose(&[seen(0.76, 0.2, 150.0, Some(0.01))]);
        assert_eq!(mode, Mode::Moderate, "{why}");
        // Two nodes: one's ranks wait between every few µs of work, so every rank does.
        assert_eq!(
            choose(&[seen(0.76, 0.2, 150.0, None), seen(0.4, 0.3, 8.0, None)]).0,
            Mode::Gang
        );
    }
}
