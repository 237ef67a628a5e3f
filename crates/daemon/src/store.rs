//! The job store: every job record, kept durably so a killed daemon loses none. One trait
//! ([`Store`]) so the cluster version can keep records in etcd; [`SqliteStore`] is the
//! single-machine default (an SQLite file in WAL mode, synchronous commits).

use crate::protocol::ExitInfo;
use crate::unix::Credentials;
use cosched_core::JobId;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting for processors; `launched` says whether its processes exist (held frozen).
    Queued,
    /// In the matrix.
    Running,
    /// Stopped by its owner, out of the rotation.
    Suspended,
    /// Out of the rotation because it used no CPU in its slots; runs unscheduled.
    Idle,
    /// Ended by itself.
    Done,
    /// Ended by `cancel` (or the daemon's `--on-stop cancel`).
    Cancelled,
    /// Its supervisor and exit status were gone when the daemon came back.
    Lost,
}

impl JobStatus {
    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Suspended => "suspended",
            JobStatus::Idle => "idle",
            JobStatus::Done => "done",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Lost => "lost",
        }
    }

    pub fn ended(self) -> bool {
        matches!(
            self,
            JobStatus::Done | JobStatus::Cancelled | JobStatus::Lost
        )
    }
}

/// Everything known of a job: enough to launch it again after a restart, and its outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: JobId,
    pub name: String,
    pub owner: Credentials,
    pub class: String,
    pub procs: u32,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub status: JobStatus,
    /// Its supervisor (and so its processes) exists.
    pub launched: bool,
    pub cancel_requested: bool,
    pub submitted_us: i64,
    pub started_us: Option<i64>,
    pub ended_us: Option<i64>,
    pub exit: Option<ExitInfo>,
    /// Why it ended without an exit status, if it did.
    #[serde(default)]
    pub note: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("job store {path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("job store {path}: job {job} is unreadable: {source}")]
    Corrupt {
        path: PathBuf,
        job: i64,
        source: serde_json::Error,
    },
}

pub trait Store: Send {
    /// Every record, by id.
    fn load(&self) -> Result<Vec<JobRecord>, StoreError>;
    /// Inserts or replaces a record; durable when it returns.
    fn put(&mut self, record: &JobRecord) -> Result<(), StoreError>;
    /// A job id never handed out before, durable when it returns.
    fn next_id(&mut self) -> Result<JobId, StoreError>;
}

pub struct SqliteStore {
    path: PathBuf,
    db: Connection,
}

impl SqliteStore {
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let fail = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let db = Connection::open(path).map_err(fail)?;
        db.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             PRAGMA busy_timeout = 5000;
             CREATE TABLE IF NOT EXISTS jobs (
                 id INTEGER PRIMARY KEY,
                 status TEXT NOT NULL,
                 record TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS counters (
                 name TEXT PRIMARY KEY,
                 value INTEGER NOT NULL
             );",
        )
        .map_err(fail)?;
        Ok(SqliteStore {
            path: path.to_path_buf(),
            db,
        })
    }

    fn fail(&self) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }
}

impl Store for SqliteStore {
    fn load(&self) -> Result<Vec<JobRecord>, StoreError> {
        let mut statement = self
            .db
            .prepare("SELECT id, record FROM jobs ORDER BY id")
            .map_err(self.fail())?;
        let rows = statement
            .query_map([], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
            })
            .map_err(self.fail())?;
        let mut records = Vec::new();
        for row in rows {
            let (id, text) = row.map_err(self.fail())?;
            records.push(
                serde_json::from_str(&text).map_err(|source| StoreError::Corrupt {
                    path: self.path.clone(),
                    job: id,
                    source,
                })?,
            );
        }
        Ok(records)
    }

    fn put(&mut self, record: &JobRecord) -> Result<(), StoreError> {
        let text = serde_json::to_string(record).expect("records serialize");
        self.db
            .execute(
                "INSERT INTO jobs (id, status, record) VALUES (?1, ?2, ?3)
                 ON CONFLICT(id) DO UPDATE SET status = ?2, record = ?3",
                params![record.id as i64, record.status.name(), text],
            )
            .map_err(self.fail())?;
        Ok(())
    }

    fn next_id(&mut self) -> Result<JobId, StoreError> {
        let last: Option<i64> = self
            .db
            .query_row("SELECT value FROM counters WHERE name = 'job'", [], |row| {
                row.get(0)
            })
            .optional()
            .map_err(self.fail())?;
        let next = last.unwrap_or(0) + 1;
        self.db
            .execute(
                "INSERT INTO counters (name, value) VALUES ('job', ?1)
                 ON CONFLICT(name) DO UPDATE SET value = ?1",
                params![next],
            )
            .map_err(self.fail())?;
        Ok(next as JobId)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn record(id: JobId) -> JobRecord {
        JobRecord {
            id,
            name: format!("job{id}"),
            owner: Credentials {
                pid: 1,
                uid: 1000,
                gid: 1000,
                groups: vec![1000, 27],
            },
            class: "batch".into(),
            procs: 2,
            argv: vec!["sleep".into(), "1".into()],
            env: vec![("PATH".into(), "/usr/bin".into())],
            cwd: "/tmp".into(),
            status: JobStatus::Queued,
            launched: false,
            cancel_requested: false,
            submitted_us: 5,
            started_us: None,
            ended_us: None,
            exit: None,
            note: None,
        }
    }

    #[test]
    fn records_and_ids_survive_reopening() {
        let dir = std::env::temp_dir().join(format!("cosched-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jobs.sqlite");
        let _ = std::fs::remove_file(&path);
        {
            let mut store = SqliteStore::open(&path).unwrap();
            assert_eq!(store.next_id().unwrap(), 1);
            assert_eq!(store.next_id().unwrap(), 2);
            let mut r = record(2);
            store.put(&r).unwrap();
            r.status = JobStatus::Done;
            r.exit = Some(ExitInfo {
                code: Some(3),
                signal: None,
            });
            store.put(&r).unwrap();
            store.put(&record(1)).unwrap();
        }
        let mut store = SqliteStore::open(&path).unwrap();
        let records = store.load().unwrap();
        assert_eq!(records.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(records[1].status, JobStatus::Done);
        assert_eq!(records[1].exit.unwrap().code, Some(3));
        assert_eq!(store.next_id().unwrap(), 3, "ids are never reused");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_file_is_named() {
        let path = std::env::temp_dir().join(format!("cosched-notdb-{}", std::process::id()));
        std::fs::write(&path, vec![b'x'; 4096]).unwrap();
        let error = SqliteStore::open(&path).err().expect("not a database");
        assert!(error
            .to_string()
            .starts_with(&format!("job store {}", path.display())));
        std::fs::remove_file(&path).unwrap();
    }
}
