//! What the comparison runs: job mixes of the test workloads, and what came out of a run.

use crate::workloads;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a job's parallel runtime waits for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Busy-polling (Open MPI's and the workloads' default).
    Spin,
    /// Spin briefly, then block: the implicit-coscheduling variant.
    SpinBlock,
}

/// One job of a mix.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub name: String,
    pub procs: u32,
    /// The program and its arguments (without mpirun: [`JobSpec::command`] adds it).
    pub program: Vec<String>,
    pub mpi: bool,
    /// Submitted this long after the mix starts.
    pub delay: Duration,
    /// A short job whose response time is measured (cosched's interactive class).
    pub interactive: bool,
}

impl JobSpec {
    pub fn new(name: &str, procs: u32, mpi: bool, program: &[&str]) -> JobSpec {
        let mut argv = vec![workloads::program(program[0])];
        argv.extend(program[1..].iter().map(|s| s.to_string()));
        JobSpec {
            name: name.to_string(),
            procs,
            program: argv,
            mpi,
            delay: Duration::ZERO,
            interactive: false,
        }
    }

    pub fn after(mut self, delay: Duration) -> JobSpec {
        self.delay = delay;
        self
    }

    pub fn interactive(mut self) -> JobSpec {
        self.interactive = true;
        self
    }

    /// The command line that runs the job (mpirun for MPI programs).
    pub fn command(&self) -> Vec<String> {
        if !self.mpi {
            return self.program.clone();
        }
        let mut argv: Vec<String> = [
            "mpirun",
            "-np",
            &self.procs.to_string(),
            "--bind-to",
            "none",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        argv.extend(self.program.iter().cloned());
        argv
    }

    /// The environment the job needs on top of the caller's.
    pub fn env(&self, waiting: Waiting) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
            ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
            // With munge installed (for Slurm) but munged not answering, PMIx's munge
            // security plugin retried for about 2.3 s at every mpirun: 2.6 s start-up, 0.37 s
            // without it.
            ("PMIX_MCA_psec", "native"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (wait, yield_when_idle) = match waiting {
            Waiting::Spin => ("spin", "0"),
            Waiting::SpinBlock => ("spinblock", "1"),
        };
        env.push(("COSCHED_WAIT".into(), wait.into()));
        env.push((
            "OMPI_MCA_mpi_yield_when_idle".into(),
            yield_when_idle.into(),
        ));
        env
    }
}

/// A named set of jobs started together (the interactive one later).
#[derive(Clone, Debug)]
pub struct Mix {
    pub workload: String,
    pub jobs: Vec<JobSpec>,
}

/// What one job did in one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobOutcome {
    pub name: String,
    pub interactive: bool,
    /// Seconds from the mix's start.
    pub submitted_s: f64,
    pub ended_s: f64,
    /// The workload's own CPU time (all its processes), from its result line.
    pub cpu_s: Option<f64>,
    /// Under cosched: its mode as `ps` shows it (`auto:gang`), and why an auto job's was chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_why: Option<String>,
}

impl JobOutcome {
    pub fn turnaround_s(&self) -> f64 {
        self.ended_s - self.submitted_s
    }
}

/// The last JSON result line in a job's output: its CPU time.
pub fn reported_cpu_s(output: &str) -> Option<f64> {
    output.lines().rev().find_map(|line| {
        serde_json::from_str::<serde_json::Value>(line.trim())
            .ok()?
            .get("cpu_s")?
            .as_f64()
    })
}
