//! Jobs made of processes started elsewhere (LLNL's registration API, for programs that an
//! unmodified `mpirun` starts). `register` records a job whose one process of its own is a
//! holder (`cosched hold`, as the registrant): placement, rotation, suspension, restarts and
//! the end are any job's. `proc_add` has the job's node agent move a process into the job's
//! cgroup; the holder exits when every process that joined has left, or on `job_end`.

use super::{unended, ApiError, Controller};
use crate::clients::{ClientId, Until};
use cosched_core::{JobId, Micros};
use cosched_os::unix::Credentials;
use cosched_proto::api::{RegisterRequest, Reply, RunRequest, JOIN_WITHIN_S, MAX_JOIN_WITHIN_S};
use cosched_proto::{Command, JobState};

/// Joins one user (root aside) may have in flight: each holds its client until the agent
/// answers.
const MAX_JOINING_PER_UID: usize = 64;

impl Controller {
    /// Records a registered job (queued like any other); returns its id.
    pub fn register(
        &mut self,
        who: &Credentials,
        request: RegisterRequest,
        now: Micros,
    ) -> Result<JobId, ApiError> {
        let Some(holder) = &self.settings.registration else {
            return Err(ApiError::Forbidden(
                "registering processes is off on this daemon (its administrator starts it with \
                 --allow-registration; a registered process leaves its cgroup, and the limits \
                 set there, for the job's)"
                    .into(),
            ));
        };
        let holder = holder.to_string_lossy().into_owned();
        if !self.stdio_reaches_jobs() {
            return Err(ApiError::Invalid(
                "registering processes works on one machine only for now: on a cluster, \
                 start a job's processes with `cosched run` (mpirun reaches the other nodes \
                 through `cosched launch-remote`)"
                    .into(),
            ));
        }
        let within = request.join_within_s.unwrap_or(JOIN_WITHIN_S);
        if !(1..=MAX_JOIN_WITHIN_S).contains(&within) {
            return Err(ApiError::Invalid(format!(
                "join_within_s {within} is not 1 to {MAX_JOIN_WITHIN_S} seconds"
            )));
        }
        let run = RunRequest {
            argv: vec![
                holder,
                "hold".into(),
                "--join-within-s".into(),
                within.to_string(),
            ],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: "/".into(),
            procs: request.procs,
            node_count: request.node_count,
            class: request.class,
            name: Some(request.name.unwrap_or_else(|| "registered".into())),
            detach: true,
            stdio: false,
            output: Some("/dev/null".into()),
            error: None,
            time_limit_s: None,
            mem_bytes: None,
            mem_per_cpu_bytes: None,
            mode: None,
        };
        self.submit_job(who, run, None, true, now)
    }

    /// Answers `client` once the registered job runs (at once if it does), or has ended.
    pub fn wait_start(
        &mut self,
        who: &Credentials,
        job: JobId,
        client: ClientId,
    ) -> Result<(), ApiError> {
        let record = self.record(job)?;
        if record.status.ended() {
            let reply = super::ended_reply(record);
            self.clients.reply(client, &reply);
            return Ok(());
        }
        if let Some(reply) = self.started_reply(job) {
            self.clients.reply(client, &reply);
            return Ok(());
        }
        self.clients.park(client, job, who.uid, Until::Start)
    }

    /// What a registrant hears once its job runs: where.
    pub(super) fn started_reply(&self, job: JobId) -> Option<Reply> {
        let record = self.records.get(&job)?;
        match self.scheduler.state(job) {
            Some(cosched_core::JobState::Placed { partition, .. }) if record.launched => {
                Some(Reply::Started {
                    ok: true,
                    job,
                    cpus: partition.to_string(),
                })
            }
            _ => None,
        }
    }

    /// Has the job's agent move process `pid` into the job; `client` hears how it went.
    pub fn proc_add(
        &mut self,
        who: &Credentials,
        job: JobId,
        pid: i32,
        client: ClientId,
    ) -> Result<(), ApiError> {
        let record = self.owned(job, who, "add processes to")?;
        if !record.registered {
            return Err(ApiError::Invalid(format!(
                "job {job} was not registered: processes join registered jobs only \
                 (a job started by `cosched run` has its own)"
            )));
        }
        unended(record, "add processes to")?;
        if !record.launched {
            return Err(ApiError::Invalid(format!(
                "job {job} is not running yet: processes join once it runs (its registrant \
                 hears when)"
            )));
        }
        let joining = self
            .joining
            .values()
            .filter(|(uid, _)| *uid == who.uid)
            .count();
        if !who.is_root() && joining >= MAX_JOINING_PER_UID {
            return Err(ApiError::Busy(format!(
                "uid {} has {MAX_JOINING_PER_UID} processes joining jobs already; wait for \
                 their answers",
                who.uid
            )));
        }
        let uid = record.owner.uid;
        self.next_join += 1;
        let request = self.next_join;
        self.joining.insert(request, (who.uid, client));
        self.tell(Command::Join {
            job,
            pid,
            uid,
            asker: (!who.is_root()).then_some(who.pid),
            request,
        });
        Ok(())
    }

    /// The agent's answer to a join: the waiting client hears it.
    pub fn joined(&mut self, job: JobId, pid: i32, request: u64, refusal: Option<String>) {
        let Some((_, client)) = self.joining.remove(&request) else {
            return;
        };
        // Not logged: the asker hears why, and anyone may ask thousands of times a second.
        let reply = match refusal {
            None => Reply::done(format!("process {pid} joined job {job}")),
            Some(why) => Reply::error(format!("process {pid} cannot join job {job}: {why}")),
        };
        self.clients.reply(client, &reply);
    }

    /// Ends a registered job: out of the rotation now (its processes run unscheduled), ended
    /// once they have exited (its holder then exits). One that never started is cancelled.
    pub fn job_end(
        &mut self,
        who: &Credentials,
        job: JobId,
        now: Micros,
    ) -> Result<String, ApiError> {
        let record = self.owned(job, who, "end")?;
        if !record.registered {
            return Err(ApiError::Invalid(format!(
                "job {job} was not registered: end it with cancel"
            )));
        }
        unended(record, "end")?;
        if !record.launched {
            self.cancel(who, job, now)?;
            return Ok(format!("job {job} ended before it started"));
        }
        // As an idle job: out of the rotation, its processors free for others.
        self.update(job, |record| record.status = JobState::Idle)?;
        self.unschedule_resident(job, now);
        self.tell(Command::Finish { job });
        Ok(format!(
            "job {job} is no longer scheduled; it ends once its processes have exited"
        ))
    }
}
