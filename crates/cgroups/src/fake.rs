//! An in-memory actuator for tests of logic: it records every call and keeps the state a real
//! one would (members, processors, weight, frozen), and refuses what a real one refuses.

use crate::{Actuator, CgroupError, JobGroup, Pid, ReleaseStep, Result, Spread, UsageFiles};
use cosched_core::Partition;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FakeCall {
    Create(String),
    Add(String, Pid),
    SetCpus(String, Partition),
    SetWeight(String, u32),
    LimitTasks(String, u64),
    LimitMemory(String, u64),
    Freeze(String),
    Thaw(String),
    Terminate(String),
    Kill(String),
    Remove(String),
    Spread(String),
    Unpin(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakeJob {
    pub pids: Vec<Pid>,
    pub cpus: Option<Partition>,
    pub weight: u32,
    pub frozen: bool,
    /// What `cpu_usage` reports; tests set it.
    pub cpu: Duration,
    /// Whether the threads are pinned one per processor (`spread`, until `unpin`).
    pub spread: bool,
    /// Whether it was ever thawed: a real job's threads then have CPU time to tell its
    /// workers by, even while frozen.
    pub ran: bool,
    /// How long a freeze takes to be confirmed (a real one waits for every task to stop).
    pub freeze_takes: Duration,
    /// When the last freeze was asked.
    pub freeze_asked: Option<Instant>,
    /// How long a look at its threads takes (a real one reads every task's `/proc` files).
    pub spread_takes: Duration,
    pub most_tasks: Option<u64>,
    pub most_memory: Option<u64>,
}

#[derive(Debug, Default)]
pub struct Fake {
    pub calls: Vec<FakeCall>,
    pub jobs: BTreeMap<String, FakeJob>,
    /// Stops as the signals freezer does: a process joining a stopped job is not stopped.
    pub signals: bool,
}

impl Fake {
    fn job(&mut self, job: &JobGroup) -> Result<&mut FakeJob> {
        self.jobs
            .get_mut(&**job)
            .ok_or_else(|| CgroupError::UnknownJob(job.to_string()))
    }

    /// Jobs currently frozen, in name order.
    pub fn frozen(&self) -> Vec<&str> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.frozen)
            .map(|(name, _)| name.as_str())
            .collect()
    }
}

impl Actuator for Fake {
    fn describe(&self) -> String {
        "fake (in memory)".to_string()
    }

    fn create(&mut self, job: &JobGroup) -> Result<()> {
        self.calls.push(FakeCall::Create(job.to_string()));
        self.jobs.entry(job.to_string()).or_insert(FakeJob {
            weight: 100,
            ..FakeJob::default()
        });
        Ok(())
    }

    fn knows(&self, job: &JobGroup) -> bool {
        self.jobs.contains_key(&**job)
    }

    fn stops_joiners(&self) -> bool {
        !self.signals
    }

    fn add(&mut self, job: &JobGroup, pid: Pid) -> Result<()> {
        self.job(job)?.pids.push(pid);
        self.calls.push(FakeCall::Add(job.to_string(), pid));
        Ok(())
    }

    fn pids(&self, job: &JobGroup) -> Result<Vec<Pid>> {
        self.jobs
            .get(&**job)
            .map(|j| j.pids.clone())
            .ok_or_else(|| CgroupError::UnknownJob(job.to_string()))
    }

    fn set_cpus(&mut self, job: &JobGroup, cpus: &Partition) -> Result<()> {
        self.job(job)?.cpus = Some(cpus.clone());
        self.calls
            .push(FakeCall::SetCpus(job.to_string(), cpus.clone()));
        Ok(())
    }

    fn set_weight(&mut self, job: &JobGroup, weight: u32) -> Result<()> {
        self.job(job)?.weight = weight.clamp(1, 10_000);
        self.calls
            .push(FakeCall::SetWeight(job.to_string(), weight));
        Ok(())
    }

    fn limit_tasks(&mut self, job: &JobGroup, most: u64) -> Result<()> {
        self.job(job)?.most_tasks = Some(most);
        self.calls.push(FakeCall::LimitTasks(job.to_string(), most));
        Ok(())
    }

    fn task_room(&self, job: &JobGroup) -> Result<Option<u64>> {
        let entry = self
            .jobs
            .get(&**job)
            .ok_or_else(|| CgroupError::UnknownJob(job.to_string()))?;
        Ok(entry
            .most_tasks
            .map(|most| most.saturating_sub(entry.pids.len() as u64)))
    }

    fn ask_freeze(&mut self, job: &JobGroup) -> Result<()> {
        let entry = self.job(job)?;
        entry.frozen = true;
        entry.freeze_asked = Some(Instant::now());
        self.calls.push(FakeCall::Freeze(job.to_string()));
        Ok(())
    }

    fn frozen_by(&mut self, job: &JobGroup, until: Option<Instant>) -> Result<bool> {
        let entry = self.job(job)?;
        let done = entry.freeze_asked.unwrap_or_else(Instant::now) + entry.freeze_takes;
        let waited_until = until.map_or(done, |until| until.min(done));
        std::thread::sleep(waited_until.saturating_duration_since(Instant::now()));
        Ok(waited_until == done)
    }

    fn thaw(&mut self, job: &JobGroup) -> Result<Duration> {
        let entry = self.job(job)?;
        entry.frozen = false;
        entry.ran = true;
        self.calls.push(FakeCall::Thaw(job.to_string()));
        Ok(Duration::ZERO)
    }

    fn terminate(&mut self, job: &JobGroup) -> Result<()> {
        self.job(job)?;
        self.calls.push(FakeCall::Terminate(job.to_string()));
        Ok(())
    }

    fn kill(&mut self, job: &JobGroup) -> Result<()> {
        let entry = self.job(job)?;
        entry.pids.clear();
        entry.frozen = false;
        self.calls.push(FakeCall::Kill(job.to_string()));
        Ok(())
    }

    fn remove(&mut self, job: &JobGroup) -> Result<()> {
        let entry = self.job(job)?;
        entry.frozen = false;
        if !entry.pids.is_empty() {
            return Err(CgroupError::Io {
                path: format!("fake/{job}").into(),
                source: std::io::Error::from_raw_os_error(libc::EBUSY),
            });
        }
        self.jobs.remove(&**job);
        self.calls.push(FakeCall::Remove(job.to_string()));
        Ok(())
    }

    fn join_files(&self, job: &JobGroup) -> Result<Vec<PathBuf>> {
        self.pids(job).map(|_| Vec::new())
    }

    fn release_steps(&self, job: &JobGroup) -> Result<Vec<ReleaseStep>> {
        self.pids(job).map(|_| Vec::new())
    }

    /// As a real job's threads: told apart by their CPU time, or by running now.
    fn spread(&mut self, job: &JobGroup) -> Result<Spread> {
        let fake = self.job(job)?;
        std::thread::sleep(fake.spread_takes);
        let found = !fake.frozen || fake.ran;
        fake.spread |= found;
        self.calls.push(FakeCall::Spread(job.to_string()));
        Ok(Spread {
            pinned: found,
            looked: true,
        })
    }

    fn unpin(&mut self, job: &JobGroup) -> Result<()> {
        self.job(job)?.spread = false;
        self.calls.push(FakeCall::Unpin(job.to_string()));
        Ok(())
    }

    fn cpu_usage(&self, job: &JobGroup) -> Result<Duration> {
        self.jobs
            .get(&**job)
            .map(|j| j.cpu)
            .ok_or_else(|| CgroupError::UnknownJob(job.to_string()))
    }

    fn limit_memory(&mut self, job: &JobGroup, bytes: u64) -> Result<()> {
        self.job(job)?.most_memory = Some(bytes);
        self.calls
            .push(FakeCall::LimitMemory(job.to_string(), bytes));
        Ok(())
    }

    /// None: a fake job has no files, so its ending carries no figures.
    fn usage_files(&self, job: &JobGroup) -> Result<UsageFiles> {
        self.jobs
            .get(&**job)
            .map(|_| UsageFiles::default())
            .ok_or_else(|| CgroupError::UnknownJob(job.to_string()))
    }
}
