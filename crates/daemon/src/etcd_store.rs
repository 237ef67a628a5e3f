//! The job store of a cluster: each record a key in etcd (`jobs/<id>`), so a standby
//! controller that takes over finds every job. Every write is a transaction conditioned on the
//! leader key still being this controller's (its lease): a deposed leader's late write is
//! refused by etcd, never applied over the new leader's records.

use cosched_cluster::{Keys, LeaderGuard};
use cosched_controller::store::{history_of, JobRecord, Store, StoreError};
use cosched_core::JobId;
use cosched_etcd::{Client, Compare};
use cosched_proto::api::HistoryRequest;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum EtcdStoreError {
    #[error("job store in etcd: {0}")]
    Etcd(#[from] cosched_etcd::EtcdError),
    #[error("job store in etcd: {key}: {why}")]
    Record { key: String, why: String },
    #[error("job store in etcd: this controller no longer leads cluster '{cluster}'; job {job} is not written (the new leader has the records)")]
    Deposed { cluster: String, job: JobId },
}

pub struct EtcdStore {
    client: Arc<Client>,
    keys: Keys,
    guard: LeaderGuard,
    /// The highest id among the records (only the leader adds records).
    highest: JobId,
}

impl EtcdStore {
    pub fn open(
        client: Arc<Client>,
        keys: Keys,
        guard: LeaderGuard,
    ) -> Result<EtcdStore, EtcdStoreError> {
        let (records, _) = client.get_prefix(&keys.jobs())?;
        // Key order is id order.
        let highest = records
            .last()
            .map(|kv| {
                kv.key
                    .rsplit('/')
                    .next()
                    .and_then(|id| id.parse::<JobId>().ok())
                    .ok_or_else(|| EtcdStoreError::Record {
                        key: kv.key.clone(),
                        why: "not a job id".into(),
                    })
            })
            .transpose()?
            .unwrap_or(0);
        Ok(EtcdStore {
            client,
            keys,
            guard,
            highest,
        })
    }

    fn decode(&self, key: &str, value: &[u8]) -> Result<JobRecord, EtcdStoreError> {
        serde_json::from_slice(value)
            .map(JobRecord::told_apart)
            .map_err(|e| EtcdStoreError::Record {
                key: key.to_string(),
                why: format!("unreadable: {e}"),
            })
    }

    /// Writes a record under the leader's guard (and `also`); a failed comparison says why.
    fn write(&self, record: &JobRecord, also: Option<Compare<'_>>) -> Result<(), EtcdStoreError> {
        let key = self.keys.job(record.id);
        let value = serde_json::to_vec(record).expect("records serialize");
        let mut compares = vec![self.guard.compare()];
        compares.extend(also);
        if self.client.txn(&compares, &[(&key, &value, None)])? {
            return Ok(());
        }
        Err(self.refusal(record.id, &key)?)
    }

    /// Why a guarded write was refused: the leader key is not ours any more, or the record
    /// exists already.
    fn refusal(&self, job: JobId, key: &str) -> Result<EtcdStoreError, EtcdStoreError> {
        if self.leading()? {
            Ok(EtcdStoreError::Record {
                key: key.to_string(),
                why: format!("job {job} exists already: ids are never reused"),
            })
        } else {
            Ok(self.deposed(job))
        }
    }

    /// Whether the leader key is still this controller's (an empty guarded transaction).
    fn leading(&self) -> Result<bool, EtcdStoreError> {
        Ok(self.client.txn(&[self.guard.compare()], &[])?)
    }

    fn deposed(&self, job: JobId) -> EtcdStoreError {
        EtcdStoreError::Deposed {
            cluster: self.keys.cluster().to_string(),
            job,
        }
    }

    /// Every record, in id order (key order is id order).
    fn every_record(&self) -> Result<Vec<JobRecord>, EtcdStoreError> {
        let (kvs, _) = self.client.get_prefix(&self.keys.jobs())?;
        kvs.iter()
            .map(|kv| self.decode(&kv.key, &kv.value))
            .collect()
    }
}

impl Store for EtcdStore {
    fn load(&self, ended: usize) -> Result<Vec<JobRecord>, StoreError> {
        let records = self.every_record()?;
        let (finished, mut kept): (Vec<_>, Vec<_>) =
            records.into_iter().partition(|r| r.status.ended());
        // Key order is id order: the latest ended ones are the last.
        kept.extend(finished.into_iter().rev().take(ended));
        kept.sort_by_key(|r| r.id);
        Ok(kept)
    }

    /// etcd has no index but the key (the id): every record is read, as `load` does, and
    /// only the rows asked for are kept.
    fn history(&self, query: &HistoryRequest) -> Result<Vec<JobRecord>, StoreError> {
        Ok(history_of(query, self.every_record()?))
    }

    fn get(&self, job: JobId) -> Result<Option<JobRecord>, StoreError> {
        let key = self.keys.job(job);
        let found = self.client.get(&key).map_err(EtcdStoreError::from)?;
        Ok(found.map(|kv| self.decode(&key, &kv.value)).transpose()?)
    }

    fn insert(&mut self, record: &JobRecord) -> Result<(), StoreError> {
        let key = self.keys.job(record.id);
        Ok(self.write(record, Some(Compare::Absent(&key)))?)
    }

    fn put(&mut self, record: &JobRecord) -> Result<(), StoreError> {
        Ok(self.write(record, None)?)
    }

    fn next_id(&mut self) -> Result<JobId, StoreError> {
        let counter = self.keys.job_counter();
        loop {
            let current = self.client.get(&counter).map_err(EtcdStoreError::from)?;
            let (counted, revision) = match &current {
                Some(kv) => (
                    std::str::from_utf8(&kv.value)
                        .ok()
                        .and_then(|v| v.trim().parse::<JobId>().ok())
                        .ok_or_else(|| EtcdStoreError::Record {
                            key: counter.clone(),
                            why: "not a number".into(),
                        })?,
                    kv.mod_revision,
                ),
                None => (0, 0),
            };
            // A counter reset or lost must not hand out an id a record already has.
            let next = counted.max(self.highest) + 1;
            let unchanged = Compare::Modified(&counter, revision);
            let written = self
                .client
                .txn(
                    &[self.guard.compare(), unchanged],
                    &[(&counter, next.to_string().as_bytes(), None)],
                )
                .map_err(EtcdStoreError::from)?;
            if written {
                self.highest = next;
                return Ok(next);
            }
            if !self.leading()? {
                return Err(self.deposed(next).into());
            }
            // Another writer moved the counter between the read and the write: read again.
        }
    }
}
