//! `cosched history`: ended jobs with their accounting, read from the store and never from
//! memory (which keeps only the latest `keep_ended`), bounded in rows and in bytes whatever
//! users submitted. Anyone may read every job's, as with `ps`: no environment, the command's
//! start only.

use super::{ApiError, Controller};
use crate::store::JobRecord;
use cosched_os::unix::user_name;
use cosched_proto::api::{
    command_prefix, HistoryRequest, HistoryView, HISTORY_REPLY_BYTES, LISTED_COMMAND_BYTES,
};
use std::collections::BTreeMap;

impl Controller {
    /// The ended jobs `query` asks for, the latest ended first, and whether the reply's
    /// bound left out some that matched.
    pub fn history(&self, query: &HistoryRequest) -> Result<(Vec<HistoryView>, bool), ApiError> {
        query.validate().map_err(ApiError::Invalid)?;
        let records = self
            .store
            .history(query)
            .map_err(|e| ApiError::Internal(format!("the job store cannot be read: {e}")))?;
        let mut views = Vec::with_capacity(records.len());
        let mut bytes = 0;
        // One look-up per user, not per row (each may ask NSS).
        let mut users = BTreeMap::new();
        for record in &records {
            let uid = record.owner.uid;
            let user = users.entry(uid).or_insert_with(|| user_name(uid)).clone();
            let view = history_view(record, user);
            bytes += view.size();
            if bytes > HISTORY_REPLY_BYTES {
                return Ok((views, true));
            }
            views.push(view);
        }
        Ok((views, false))
    }
}

fn history_view(r: &JobRecord, user: String) -> HistoryView {
    let (argv, cut) = command_prefix(&r.argv, LISTED_COMMAND_BYTES);
    // Stored ends always have a time; a record from before that rule ends at its start.
    let ended_us = r.ended_us.or(r.started_us).unwrap_or(r.submitted_us);
    HistoryView {
        id: r.id,
        name: r.name.clone(),
        uid: r.owner.uid,
        user,
        gid: r.owner.gid,
        class: r.class,
        procs: r.procs,
        state: r.status,
        exit: r.exit,
        note: r.note.clone(),
        submitted_us: r.submitted_us,
        started_us: r.started_us,
        ended_us,
        wait_us: r.started_us.unwrap_or(ended_us) - r.submitted_us,
        elapsed_us: r.started_us.map(|started| ended_us - started),
        suspended_us: r.suspended_us,
        run_us: r.run_us,
        time_limit_us: r.time_limit_us,
        mem_bytes: r.memory_per_node(),
        cpu_us: r.cpu_us,
        peak_memory_bytes: r.peak_memory_bytes,
        nodes: r.nodes.clone(),
        cpus_on_nodes: r.cpus_on_nodes.clone(),
        argv,
        argv_cut: cut || r.argv_cut,
    }
}
