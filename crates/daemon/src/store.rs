//! The single machine's job store: an SQLite file in WAL mode with synchronous commits, so a
//! killed daemon loses no record (a cluster's records are in etcd: `etcd_store`).

use cosched_controller::store::{JobRecord, Store, StoreError};
use cosched_core::JobId;
use cosched_proto::api::HistoryRequest;
use cosched_proto::JobState;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
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
/// What `history` looks jobs up by, as indexes on the records' own fields: no new column, so
/// a store keeps its tables, any writer (an older daemon's too) keeps the indexes right, and
/// an older store gets them when opened.
const ENDED_AT: &str = "json_extract(record, '$.ended_us')";
const OWNER: &str = "json_extract(record, '$.owner.uid')";

/// Older daemons stored every job that exited as `done`, success or not: such a record
/// becomes `completed` if it exited 0 (or left no status), else `failed`, column and record
/// alike, so that history's queries by state find it.
const DONE_TOLD_APART: &str = "UPDATE jobs SET status = CASE
                 WHEN json_extract(record, '$.exit') IS NULL
                   OR json_extract(record, '$.exit.code') = 0 THEN 'completed'
                 ELSE 'failed' END
             WHERE status = 'done';
             UPDATE jobs SET record = json_set(record, '$.status', status)
             WHERE json_extract(record, '$.status') = 'done';";

pub struct SqliteStore {
    path: PathBuf,
    db: Connection,
}

impl SqliteStore {
    /// Opens the store at `path`, making a new one only where no file is: an empty or foreign
    /// file is refused (a store started afresh would hand out job ids again).
    pub fn open(path: &Path) -> Result<SqliteStore, SqliteError> {
        let fail = |source| SqliteError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let foreign = |why: &str| SqliteError::Foreign {
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
        db.execute_batch(&format!(
            "CREATE INDEX IF NOT EXISTS jobs_by_end ON jobs ({ENDED_AT});
             CREATE INDEX IF NOT EXISTS jobs_by_owner_end ON jobs ({OWNER}, {ENDED_AT});"
        ))
        .map_err(fail)?;
        db.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID};"))
            .map_err(fail)?;
        db.execute_batch(DONE_TOLD_APART).map_err(fail)?;
        Ok(SqliteStore {
            path: path.to_path_buf(),
            db,
        })
    }

    fn fail(&self) -> impl FnOnce(rusqlite::Error) -> SqliteError + '_ {
        move |source| SqliteError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn query(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<JobRecord>, SqliteError> {
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
                serde_json::from_str(&text).map_err(|source| SqliteError::Corrupt {
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
        // One placeholder per way of ending, so a new one needs no change here.
        let names = JobState::ENDED.map(JobState::name);
        let marks = vec!["?"; names.len()].join(", ");
        let mut records = self.query(
            &format!("SELECT id, record FROM jobs WHERE status NOT IN ({marks})"),
            rusqlite::params_from_iter(names),
        )?;
        records.extend(self.query(
            &format!(
                "SELECT id, record FROM jobs WHERE status IN ({marks}) ORDER BY id DESC LIMIT {ended}"
            ),
            rusqlite::params_from_iter(names),
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

    fn history(&self, query: &HistoryRequest) -> Result<Vec<JobRecord>, StoreError> {
        use rusqlite::types::Value;
        // Only the filters given, so that SQLite picks the index they fit.
        let states: Vec<JobState> = match query.states.is_empty() {
            true => JobState::ENDED.to_vec(),
            false => query.states.clone(),
        };
        let mut values: Vec<Value> = states
            .iter()
            .map(|s| Value::Text(s.name().to_string()))
            .collect();
        let mut sql = format!(
            "SELECT id, record FROM jobs WHERE status IN ({})",
            vec!["?"; states.len()].join(", ")
        );
        if let Some(uid) = query.uid {
            sql += &format!(" AND {OWNER} = ?");
            values.push(Value::Integer(uid.into()));
        }
        if !query.jobs.is_empty() {
            sql += &format!(" AND id IN ({})", vec!["?"; query.jobs.len()].join(", "));
            values.extend(query.jobs.iter().map(|&id| Value::Integer(id as i64)));
        }
        if let Some(since) = query.since_us {
            sql += &format!(" AND {ENDED_AT} >= ?");
            values.push(Value::Integer(since));
        }
        if let Some(until) = query.until_us {
            sql += &format!(" AND {ENDED_AT} < ?");
            values.push(Value::Integer(until));
        }
        sql += &format!(" ORDER BY {ENDED_AT} DESC, id DESC LIMIT ?");
        values.push(Value::Integer(query.rows() as i64));
        Ok(self.query(&sql, rusqlite::params_from_iter(values))?)
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
    use cosched_os::unix::Credentials;
    use cosched_proto::ExitInfo;

    /// A queued job's record, as a submission makes it (the etcd store's tests use it too).
    pub(crate) fn record(id: JobId) -> JobRecord {
        JobRecord {
            id,
            name: format!("job{id}"),
            owner: Credentials {
                pid: 1,
                uid: 1000,
                gid: 1000,
                groups: vec![1000, 27],
                limits: vec![],
            },
            class: cosched_core::Class::Batch,
            procs: 2,
            node_count: None,
            argv: vec!["sleep".into(), "1".into()],
            argv_cut: false,
            env: vec![("PATH".into(), "/usr/bin".into())],
            cwd: "/tmp".into(),
            output: None,
            error: None,
            registered: false,
            status: JobState::Queued,
            launched: false,
            cancel_requested: false,
            submitted_us: 5,
            started_us: None,
            ended_us: None,
            exit: None,
            note: None,
            suspended_us: 0,
            suspended_since_us: None,
            suspended_by_root: false,
            nodes: Vec::new(),
            cpus_on_nodes: Vec::new(),
            time_limit_us: None,
            run_us: 0,
            run_saved_us: None,
            timed_out: false,
            stalled: false,
            mem_bytes: None,
            mem_per_cpu_bytes: None,
            cpu_us: None,
            peak_memory_bytes: None,
            mode: None,
            runs_as: None,
            mode_why: None,
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
            r.status = JobState::Failed;
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
        assert_eq!(records[1].status, JobState::Failed);
        assert_eq!(records[1].exit.unwrap().code, Some(3));
        assert_eq!(store.next_id().unwrap(), 3, "ids are never reused");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn ended(id: JobId, uid: u32, status: JobState, ended_us: i64) -> JobRecord {
        let mut r = record(id);
        r.owner.uid = uid;
        r.status = status;
        r.ended_us = Some(ended_us);
        r.cpu_us = Some(id * 1000);
        r
    }

    fn ids(records: Vec<JobRecord>) -> Vec<JobId> {
        records.into_iter().map(|r| r.id).collect()
    }

    #[test]
    fn history_filters_in_sql_the_latest_ended_first() {
        let dir = scratch("history");
        let path = dir.join("jobs.sqlite");
        let mut store = SqliteStore::open(&path).unwrap();
        store
            .insert(&ended(1, 1000, JobState::Completed, 300))
            .unwrap();
        store
            .insert(&ended(2, 1001, JobState::Failed, 100))
            .unwrap();
        store
            .insert(&ended(3, 1000, JobState::Cancelled, 200))
            .unwrap();
        store
            .insert(&ended(4, 1000, JobState::Completed, 200))
            .unwrap();
        store.insert(&record(5)).unwrap();
        let all = HistoryRequest::default();
        assert_eq!(ids(store.history(&all).unwrap()), [1, 4, 3, 2]);
        assert_eq!(store.history(&all).unwrap()[0].cpu_us, Some(1000));
        let mine = HistoryRequest {
            uid: Some(1000),
            ..all.clone()
        };
        assert_eq!(ids(store.history(&mine).unwrap()), [1, 4, 3]);
        let window = HistoryRequest {
            since_us: Some(150),
            until_us: Some(300),
            ..all.clone()
        };
        assert_eq!(ids(store.history(&window).unwrap()), [4, 3]);
        let some = HistoryRequest {
            jobs: vec![2, 3, 5],
            states: vec![JobState::Failed, JobState::Completed],
            ..all.clone()
        };
        assert_eq!(ids(store.history(&some).unwrap()), [2]);
        let two = HistoryRequest {
            limit: Some(2),
            ..all.clone()
        };
        assert_eq!(ids(store.history(&two).unwrap()), [1, 4]);
        // The window and the owner are looked up by index, not by reading every record.
        let plan: Vec<String> = store
            .db
            .prepare(&format!(
                "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE {OWNER} = 1000 AND {ENDED_AT} >= 5 \
                 ORDER BY {ENDED_AT} DESC"
            ))
            .unwrap()
            .query_map([], |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|p| p.contains("jobs_by_owner_end")),
            "{plan:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_store_from_before_history_gets_its_indexes_and_reads() {
        let dir = scratch("older");
        let path = dir.join("jobs.sqlite");
        {
            let db = Connection::open(&path).unwrap();
            db.execute_batch(SCHEMA).unwrap();
            // Records as an older daemon wrote them: no accounting fields, and `done` for
            // every exit, 0 or not.
            for (id, code) in [(7, 0), (8, 3)] {
                let mut old =
                    serde_json::to_value(ended(id, 1000, JobState::Completed, 50)).unwrap();
                old.as_object_mut().unwrap().remove("cpu_us");
                old["status"] = "done".into();
                old["exit"] = serde_json::json!({"code": code, "signal": null});
                // As etcd's store reads such a record: the same end.
                let read: JobRecord = serde_json::from_value(old.clone()).unwrap();
                let told = if code == 0 {
                    JobState::Completed
                } else {
                    JobState::Failed
                };
                assert_eq!(read.told_apart().status, told);
                db.execute(
                    "INSERT INTO jobs (id, status, record) VALUES (?1, 'done', ?2)",
                    params![id as i64, old.to_string()],
                )
                .unwrap();
            }
        }
        let store = SqliteStore::open(&path).unwrap();
        let found = store.history(&HistoryRequest::default()).unwrap();
        let seen: Vec<_> = found.iter().map(|r| (r.id, r.status, r.cpu_us)).collect();
        assert_eq!(
            seen,
            [(8, JobState::Failed, None), (7, JobState::Completed, None)]
        );
        let failed = HistoryRequest {
            states: vec![JobState::Failed],
            ..HistoryRequest::default()
        };
        assert_eq!(store.history(&failed).unwrap()[0].id, 8);
        let indexes: Vec<String> = store
            .db
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'jobs_by%'")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(indexes.len(), 2, "{indexes:?}");
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
    fn a_record_of_an_unknown_class_is_named_not_read_as_batch() {
        let dir = scratch("class");
        let mut store = SqliteStore::open(&dir.join("jobs.sqlite")).unwrap();
        store.insert(&record(1)).unwrap();
        let text = serde_json::to_string(&record(1))
            .unwrap()
            .replace("\"batch\"", "\"urgent\"");
        store
            .db
            .execute("UPDATE jobs SET record = ?1 WHERE id = 1", [text])
            .unwrap();
        let error = store.get(1).expect_err("no such class").to_string();
        assert!(
            error.contains("job 1 is unreadable") && error.contains("urgent"),
            "{error}"
        );
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
                r.status = JobState::Completed;
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
