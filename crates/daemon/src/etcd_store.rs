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

/// Inserts tried while another writer keeps moving the job counter.
const COUNTER_TRIES: usize = 8;

pub struct EtcdStore {
    client: Arc<Client>,
    keys: Keys,
    guard: LeaderGuard,
    /// The highest id among the records (only the leader adds records).
    highest: JobId,
    /// The job counter as this controller last read or wrote it: its value and `mod_revision`
    /// (0: absent). Read once; each insert then writes it with the record, conditioned on that
    /// revision, so that a submission is one round trip to etcd (it was three: the counter
    /// read and written, then the record, each waiting behind the generations being fanned
    /// out to every node).
    counter: Option<(JobId, i64)>,
    /// The last id `next_id` handed out (its record may not be written yet).
    handed: JobId,
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
            counter: None,
            handed: 0,
        })
    }

    /// The job counter now: its value and `mod_revision` (0 and 0 when absent).
    fn read_counter(&self) -> Result<(JobId, i64), EtcdStoreError> {
        let key = self.keys.job_counter();
        let Some(kv) = self.client.get(&key)? else {
            return Ok((0, 0));
        };
        let value = std::str::from_utf8(&kv.value)
            .ok()
            .and_then(|v| v.trim().parse::<JobId>().ok())
            .ok_or_else(|| EtcdStoreError::Record {
                key,
                why: "not a number".into(),
            })?;
        Ok((value, kv.mod_revision))
    }

    fn counter(&mut self) -> Result<(JobId, i64), EtcdStoreError> {
        match self.counter {
            Some(counter) => Ok(counter),
            None => {
                let counter = self.read_counter()?;
                self.counter = Some(counter);
                Ok(counter)
            }
        }
    }

    fn decode(&self, key: &str, value: &[u8]) -> Result<JobRecord, EtcdStoreError> {
        serde_json::from_slice(value)
            .map(JobRecord::told_apart)
            .map_err(|e| EtcdStoreError::Record {
                key: key.to_string(),
                why: format!("unreadable: {e}"),
            })
    }

    /// Replaces a record under the leader's guard, the one comparison that can fail.
    fn write(&self, record: &JobRecord) -> Result<(), EtcdStoreError> {
        let key = self.keys.job(record.id);
        let value = serde_json::to_vec(record).expect("records serialize");
        if self
            .client
            .txn(&[self.guard.compare()], &[(&key, &value, None)])?
        {
            return Ok(());
        }
        Err(self.deposed(record.id))
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

    /// The record and the counter at its id in one transaction, under the leader's guard and
    /// on the counter's revision as last seen: a counter moved by another writer is read
    /// again, and the record refused if its id is not above it.
    fn insert(&mut self, record: &JobRecord) -> Result<(), StoreError> {
        let key = self.keys.job(record.id);
        let counter_key = self.keys.job_counter();
        let value = serde_json::to_vec(record).expect("records serialize");
        let id = record.id.to_string();
        let puts = [
            (counter_key.as_str(), id.as_bytes(), None),
            (key.as_str(), value.as_slice(), None),
        ];
        // Another writer moving the counter between our reads is a fault, not a race to win.
        for _ in 0..COUNTER_TRIES {
            let (counted, revision) = self.counter()?;
            if counted >= record.id {
                return Err(EtcdStoreError::Record {
                    key: counter_key,
                    why: format!(
                        "job {} is not above the counter ({counted}): its id was handed out already, so it is not recorded",
                        record.id
                    ),
                }
                .into());
            }
            let compares = [
                self.guard.compare(),
                Compare::Absent(&key),
                Compare::Modified(&counter_key, revision),
            ];
            if let Some(at) = self
                .client
                .txn_at(&compares, &puts)
                .map_err(EtcdStoreError::from)?
            {
                self.counter = Some((record.id, at));
                self.highest = self.highest.max(record.id);
                return Ok(());
            }
            // A new leader moves the counter too: say that first.
            if !self.leading()? {
                return Err(self.deposed(record.id).into());
            }
            let now = self.read_counter()?;
            if now.1 == revision {
                // The counter and the leader key held: the record's absence did not.
                return Err(EtcdStoreError::Record {
                    key,
                    why: format!("job {} exists already: ids are never reused", record.id),
                }
                .into());
            }
            self.counter = Some(now);
        }
        Err(EtcdStoreError::Record {
            key: counter_key,
            why: format!(
                "moved by another writer at each of {COUNTER_TRIES} tries: job {} is not recorded",
                record.id
            ),
        }
        .into())
    }

    fn put(&mut self, record: &JobRecord) -> Result<(), StoreError> {
        Ok(self.write(record)?)
    }

    /// Above the counter, every record and every id handed out, with no round trip once the
    /// counter was read: the id is made durable with its record (`insert`). An id whose record
    /// never came was given to no one, and may be handed out again by another leader.
    fn next_id(&mut self) -> Result<JobId, StoreError> {
        let (counted, _) = self.counter()?;
        self.handed = counted.max(self.highest).max(self.handed) + 1;
        Ok(self.handed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::record;
    use cosched_cluster::become_leader;
    use cosched_etcd::testing::Etcd;

    /// A controller leading a cluster on `etcd`.
    struct Leader {
        client: Arc<Client>,
        keys: Keys,
        leadership: cosched_cluster::Leadership,
    }

    impl Leader {
        fn new(etcd: &Etcd) -> Leader {
            let client = Arc::new(etcd.client());
            let keys = Keys::new("store").unwrap();
            let leadership = become_leader(Arc::clone(&client), &keys, 10, None, |_| {}).unwrap();
            Leader {
                client,
                keys,
                leadership,
            }
        }

        /// Its job store, as it opens one when it takes the lead.
        fn store(&self) -> EtcdStore {
            let guard = self.leadership.guard();
            EtcdStore::open(Arc::clone(&self.client), self.keys.clone(), guard).unwrap()
        }
    }

    fn counter(client: &Client, keys: &Keys) -> String {
        let kv = client.get(&keys.job_counter()).unwrap().unwrap();
        String::from_utf8(kv.value).unwrap()
    }

    #[test]
    fn a_submission_writes_its_record_and_the_counter_at_once() {
        let etcd = Etcd::start_plain("store-ids");
        let leader = Leader::new(&etcd);
        let (client, keys) = (&leader.client, &leader.keys);
        let mut store = leader.store();
        for want in 1..=3 {
            let id = store.next_id().unwrap();
            assert_eq!(id, want);
            store.insert(&record(id)).unwrap();
            assert_eq!(counter(client, keys), id.to_string());
        }
        assert!(store.get(2).unwrap().is_some());
        // A controller taking over goes on above them.
        let mut next = leader.store();
        assert_eq!(next.next_id().unwrap(), 4);
        // The same record twice is refused, and the counter is not moved by it.
        let again = store.insert(&record(3)).unwrap_err().to_string();
        assert!(again.contains("handed out already"), "{again}");
        assert_eq!(counter(client, keys), "3");
    }

    #[test]
    fn a_counter_moved_by_another_writer_is_read_again() {
        let etcd = Etcd::start_plain("store-moved");
        let leader = Leader::new(&etcd);
        let (client, keys) = (&leader.client, &leader.keys);
        let mut store = leader.store();
        let first = store.next_id().unwrap();
        store.insert(&record(first)).unwrap();
        // Moved below the id about to be written: the record goes in on the counter as it is.
        let id = store.next_id().unwrap();
        client.put(&keys.job_counter(), b"1", None).unwrap();
        store.insert(&record(id)).unwrap();
        assert_eq!(counter(client, keys), id.to_string());
        // Moved past it: the id was handed out elsewhere, so the record is refused (the
        // submission fails, nothing is acknowledged), and the next id is above the counter.
        let id = store.next_id().unwrap();
        client.put(&keys.job_counter(), b"10", None).unwrap();
        let refused = store.insert(&record(id)).unwrap_err().to_string();
        assert!(refused.contains("handed out already"), "{refused}");
        assert!(store.get(id).unwrap().is_none());
        assert_eq!(store.next_id().unwrap(), 11);
    }

    #[test]
    fn a_deposed_leader_writes_nothing() {
        let etcd = Etcd::start_plain("store-deposed");
        let leader = Leader::new(&etcd);
        let (client, keys) = (&leader.client, &leader.keys);
        let mut store = leader.store();
        let id = store.next_id().unwrap();
        leader.leadership.resign();
        let refused = store.insert(&record(id)).unwrap_err().to_string();
        assert!(refused.contains("no longer leads"), "{refused}");
        assert!(client.get(&keys.job_counter()).unwrap().is_none());
        assert!(store.get(id).unwrap().is_none());
    }
}
