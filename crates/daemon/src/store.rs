//! The job store: every job record, kept durably so a killed daemon loses none. One trait
//! ([`Store`]) so the cluster version can keep records in etcd; [`SqliteStore`] is the
//! single-machine default (an SQLite file in WAL mode, synchronous commits).

use cosched_core::JobId;
use cosched_os::unix::Credentials;
use cosched_proto::ExitInfo;
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
    /// The distinct nodes `procs` are spread over evenly, when the job asked for a spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<u32>,
    pub argv: Vec<String>,
    /// `argv` was cut to [`KEPT_COMMAND_BYTES`] when the job ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argv_cut: bool,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// Where its output goes when no client's descriptors reach it (`Launch::output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Its processes are started elsewhere and join it (`register`); its own is a holder.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub registered: bool,
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
    /// How long it was suspended (µs), stretches that ended; and since when it is, if it is.
    #[serde(default)]
    pub suspended_us: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_since_us: Option<i64>,
    /// The nodes it was started on, the one running its launcher first.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// How many of its processors are on each of `nodes`, in the same order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus_on_nodes: Vec<u32>,
}

/// Bytes of its command an ended job keeps, in memory and in the store: what a job was is
/// history, and a user's arguments and environment count against them only while it can run.
pub const KEPT_COMMAND_BYTES: usize = 4096;

/// Bytes a job's submission holds: arguments, environment, working directory.
pub fn submitted_bytes(argv: &[String], env: &[(String, String)], cwd: &str) -> usize {
    let argv: usize = argv.iter().map(String::len).sum();
    let env: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    argv + env + cwd.len()
}

impl JobRecord {
    /// Bytes of its own that the daemon holds for the job: arguments, environment, directory.
    pub fn submitted_bytes(&self) -> usize {
        submitted_bytes(&self.argv, &self.env, &self.cwd)
    }

    /// An ended job sheds what only a run needs: its environment, and its command past
    /// [`KEPT_COMMAND_BYTES`].
    pub fn shed_for_history(&mut self) {
        self.env = Vec::new();
        let (kept, cut) = cosched_proto::api::command_prefix(&self.argv, KEPT_COMMAND_BYTES);
        if cut {
            self.argv = kept;
            self.argv_cut = true;
        }
    }
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
    #[error("job store {path}: {why}; refusing to use it (move it away to start a new store)")]
    Foreign { path: PathBuf, why: String },
    #[error("job store in etcd: {0}")]
    Etcd(#[from] cosched_etcd::EtcdError),
    #[error("job store in etcd: {key}: {why}")]
    EtcdRecord { key: String, why: String },
    #[error("job store in etcd: this controller no longer leads cluster '{cluster}'; job {job} is not written (the new leader has the records)")]
    Deposed { cluster: String, job: JobId },
}

pub trait Store: Send {
    /// Every unfinished record and the `ended` latest ended ones, by id.
    fn load(&self, ended: usize) -> Result<Vec<JobRecord>, StoreError>;
    /// One record.
    fn get(&self, job: JobId) -> Result<Option<JobRecord>, StoreError>;
    /// Adds a new job's record; fails (never overwrites) if the id is taken. Durable when it
    /// returns.
    fn insert(&mut self, record: &JobRecord) -> Result<(), StoreError>;
    /// Replaces a job's record; durable when it returns.
    fn put(&mut self, record: &JobRecord) -> Result<(), StoreError>;
    /// A job id never handed out before (above every id in the store), durable when it returns.
    fn next_id(&mut self) -> Result<JobId, StoreError>;
}

/// Marks an SQLite file as a cosched job store ("CSCH").
const APPLICATION_ID: i64 = 0x4353_4348;
const SCHEMA: &str = "CREATE TABLE jobs (
                 id INTEGER PRIMARY KEY,
                 status TEXT NOT NULL,
                 record TEXT NOT NULL
             );
             CREATE TABLE counters (
                 name TEXT PRIMARY KEY,
                 value INTEGER NOT NULL
             );";

pub struct SqliteStore {
    path: PathBuf,
    db: Connection,
}

impl SqliteStore {
    /// Opens the store at `path`, making a new one only where no file is: an empty or foreign
    /// file is refused (a store started afresh would hand out job ids again).
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let fail = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let foreign = |why: &str| StoreError::Foreign {
            path: path.to_path_buf(),
            why: why.to_string(),
        };
        let existing = match std::fs::symlink_metadata(path) {
            Ok(meta) if !meta.is_file() => return Err(foreign("not a regular file")),
            Ok(meta) if meta.len() == 0 => {
                return Err(foreign("the file is empty, not a cosched job store"))
            }
            Ok(_) => true,
            Err(_) => false,
        };
        let db = Connection::open(path).map_err(fail)?;
        db.execute_batch("PRAGMA busy_timeout = 5000;")
            .map_err(fail)?;
        // Looked at before anything is written: a refused file is left as it was (WAL mode
        // alone rewrites its header).
        if existing {
            let id: i64 = db
                .query_row("PRAGMA application_id", [], |row| row.get(0))
                .map_err(fail)?;
            let tables: Vec<String> = db
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .and_then(|mut s| s.query_map([], |row| row.get(0))?.collect())
                .map_err(fail)?;
            if tables != ["counters", "jobs"] {
                return Err(foreign(&format!(
                    "its tables are {tables:?}, not a cosched job store's"
                )));
            }
            // Stores made before the mark are adopted; another program's mark is refused.
            if id != APPLICATION_ID && id != 0 {
                return Err(foreign(&format!(
                    "it belongs to another program (application id {id:#x})"
                )));
            }
        }
        db.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;",
        )
        .map_err(fail)?;
        if !existing {
            db.execute_batch(SCHEMA).map_err(fail)?;
        }
        db.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID};"))
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

    fn query(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let mut statement = self.db.prepare_cached(sql).map_err(self.fail())?;
        let rows = statement
            .query_map(params, |row| {
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
}

impl Store for SqliteStore {
    fn load(&self, ended: usize) -> Result<Vec<JobRecord>, StoreError> {
        let ended_names =
            [JobStatus::Done, JobStatus::Cancelled, JobStatus::Lost].map(|s| s.name());
        let mut records = self.query(
            "SELECT id, record FROM jobs WHERE status NOT IN (?1, ?2, ?3)",
            params![ended_names[0], ended_names[1], ended_names[2]],
        )?;
        records.extend(self.query(
            "SELECT id, record FROM jobs WHERE status IN (?1, ?2, ?3) ORDER BY id DESC LIMIT ?4",
            params![ended_names[0], ended_names[1], ended_names[2], ended as i64],
        )?);
        records.sort_by_key(|r| r.id);
        Ok(records)
    }

    fn get(&self, job: JobId) -> Result<Option<JobRecord>, StoreError> {
        let mut found = self.query(
            "SELECT id, record FROM jobs WHERE id = ?1",
            params![job as i64],
        )?;
        Ok(found.pop())
    }

    fn insert(&mut self, record: &JobRecord) -> Result<(), StoreError> {
        let text = serde_json::to_string(record).expect("records serialize");
        self.db
            .execute(
                "INSERT INTO jobs (id, status, record) VALUES (?1, ?2, ?3)",
                params![record.id as i64, record.status.name(), text],
            )
            .map_err(self.fail())?;
        Ok(())
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
        let counted: Option<i64> = self
            .db
            .query_row("SELECT value FROM counters WHERE name = 'job'", [], |row| {
                row.get(0)
            })
            .optional()
            .map_err(self.fail())?;
        // A damaged or reset counter must not hand out an id a record already has.
        let highest: Option<i64> = self
            .db
            .query_row("SELECT MAX(id) FROM jobs", [], |row| row.get(0))
            .map_err(self.fail())?;
        let next = counted.unwrap_or(0).max(highest.unwrap_or(0)) + 1;
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
            node_count: None,
            argv: vec!["sleep".into(), "1".into()],
            argv_cut: false,
            env: vec![("PATH".into(), "/usr/bin".into())],
            cwd: "/tmp".into(),
            output: None,
            registered: false,
            status: JobStatus::Queued,
            launched: false,
            cancel_requested: false,
            submitted_us: 5,
            started_us: None,
            ended_us: None,
            exit: None,
            note: None,
            suspended_us: 0,
            suspended_since_us: None,
            nodes: Vec::new(),
            cpus_on_nodes: Vec::new(),
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
        let records = store.load(10).unwrap();
        assert_eq!(records.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(records[1].status, JobStatus::Done);
        assert_eq!(records[1].exit.unwrap().code, Some(3));
        assert_eq!(store.next_id().unwrap(), 3, "ids are never reused");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cosched-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_damaged_counter_never_hands_out_a_taken_id() {
        let dir = scratch("counter");
        let path = dir.join("jobs.sqlite");
        {
            let mut store = SqliteStore::open(&path).unwrap();
            for _ in 0..3 {
                let id = store.next_id().unwrap();
                store.insert(&record(id)).unwrap();
            }
            store.db.execute("DELETE FROM counters", []).unwrap();
        }
        let mut store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.next_id().unwrap(), 4);
        store
            .db
            .execute("UPDATE counters SET value = 0", [])
            .unwrap();
        assert_eq!(store.next_id().unwrap(), 4, "taken ids stay taken");
        let error = store.insert(&record(1)).expect_err("job 1 exists");
        assert!(error.to_string().contains("UNIQUE"), "{error}");
        assert_eq!(store.get(1).unwrap().unwrap().name, "job1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_or_foreign_file_is_refused() {
        let dir = scratch("foreign");
        let path = dir.join("jobs.sqlite");
        std::fs::write(&path, b"").unwrap();
        let error = SqliteStore::open(&path).err().expect("empty").to_string();
        assert!(
            error.contains("is empty") && error.contains("move it away"),
            "{error}"
        );
        std::fs::remove_file(&path).unwrap();
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE accounts (id INTEGER);")
            .unwrap();
        let before = std::fs::read(&path).unwrap();
        let error = SqliteStore::open(&path).err().expect("foreign").to_string();
        assert!(error.contains("not a cosched job store"), "{error}");
        assert!(
            std::fs::read(&path).unwrap() == before,
            "the refused file was changed"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn loading_keeps_every_unfinished_job_and_the_latest_ended_ones() {
        let dir = scratch("load");
        let mut store = SqliteStore::open(&dir.join("jobs.sqlite")).unwrap();
        for id in 1..=6 {
            let mut r = record(id);
            if id != 2 {
                r.status = JobStatus::Done;
            }
            store.insert(&r).unwrap();
        }
        let ids: Vec<JobId> = store.load(2).unwrap().iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![2, 5, 6]);
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
