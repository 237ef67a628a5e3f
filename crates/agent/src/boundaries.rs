//! The agent's log of the boundaries at which it stopped or started jobs: one JSON line
//! ([`BoundaryRecord`]) each, on the true clock, in `boundaries.jsonl` of its state directory.
//! Cross-node skew is measured from these (`bench cluster`), and a chart of what ran when can
//! be drawn from them. Bounded: past `limit` bytes the file becomes `boundaries.jsonl.old`
//! (replacing the one before) and a new one starts, so at most twice the limit is kept.
//!
//! A log that cannot be written is reported once and then left alone: it must never stop the
//! clock.

use cosched_proto::{BoundaryRecord, JobMoment};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const BOUNDARY_LOG: &str = "boundaries.jsonl";
/// 4 MiB: some 25,000 switches (a line is about 160 bytes), minutes at 20 ms slots.
pub const BOUNDARY_LOG_LIMIT: u64 = 4 << 20;

pub struct BoundaryLog {
    path: PathBuf,
    limit: u64,
    file: Option<File>,
    written: u64,
    failed: bool,
}

impl BoundaryLog {
    pub fn new(state_dir: &Path, limit: u64) -> BoundaryLog {
        BoundaryLog {
            path: state_dir.join(BOUNDARY_LOG),
            limit,
            file: None,
            written: 0,
            failed: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the lines before the last rotation are.
    pub fn old_path(&self) -> PathBuf {
        self.path.with_extension("jsonl.old")
    }

    pub fn record(&mut self, record: &BoundaryRecord) {
        if self.failed {
            return;
        }
        let mut line = serde_json::to_vec(record).expect("records serialize");
        line.push(b'\n');
        if let Err(error) = self.append(&line) {
            cosched_os::Log::new("agent").warn(format_args!(
                "{}: {error}; boundaries are no longer logged",
                self.path.display()
            ));
            self.failed = true;
        }
    }

    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.file.is_some() && self.written + line.len() as u64 > self.limit {
            self.file = None;
            std::fs::rename(&self.path, self.old_path())?;
        }
        let file = match &mut self.file {
            Some(file) => file,
            None => {
                // The state directory is root's alone; never follow a link planted there.
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o644)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&self.path)?;
                self.written = file.metadata()?.len();
                self.file.insert(file)
            }
        };
        // One write per line, so a reader never sees half of one.
        file.write_all(line)?;
        self.written += line.len() as u64;
        Ok(())
    }
}

/// Every record in a node's log (the older file first); lines that do not parse are skipped.
pub fn read_log(state_dir: &Path) -> Vec<BoundaryRecord> {
    let log = BoundaryLog::new(state_dir, 0);
    [log.old_path(), log.path().to_path_buf()]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// For every (slot, job) that two nodes' records both have, how far apart (µs) its moments
/// were (`moments`: the starts or the stops): that boundary's cross-node skew for the job.
pub fn spreads(
    a: &[BoundaryRecord],
    b: &[BoundaryRecord],
    moments: impl Fn(&BoundaryRecord) -> &Vec<JobMoment>,
) -> Vec<u64> {
    let index = |records: &[BoundaryRecord]| -> BTreeMap<(i64, u64), i64> {
        records
            .iter()
            .flat_map(|r| moments(r).iter().map(move |m| ((r.slot, m.job), m.at_us)))
            .collect()
    };
    let b = index(b);
    index(a)
        .into_iter()
        .filter_map(|(key, at)| b.get(&key).map(|other| (at - other).unsigned_abs()))
        .collect()
}

/// How long (µs) after its boundary each job started, for the boundaries slept to (true
/// clock: the boundary was `woke_us - lateness_us`): wake lateness plus the work before the
/// thaw.
pub fn start_delays(records: &[BoundaryRecord]) -> Vec<u64> {
    records
        .iter()
        .filter_map(|r| Some((r.woke_us - r.lateness_us?, &r.started)))
        .flat_map(|(boundary, started)| {
            started
                .iter()
                .map(move |m| (m.at_us - boundary).max(0) as u64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(slot: i64) -> BoundaryRecord {
        BoundaryRecord {
            node: "a".into(),
            slot,
            generation: Some(1),
            woke_us: 1_000 + slot,
            lateness_us: Some(80),
            stopped: vec![JobMoment {
                job: 1,
                at_us: 2_000,
            }],
            started: vec![JobMoment {
                job: 2,
                at_us: 2_100,
            }],
            blocked: vec![],
            skews: vec![],
        }
    }

    #[test]
    fn the_log_keeps_at_most_two_files_of_its_limit_and_reads_back_in_order() {
        let dir = std::env::temp_dir().join(format!("cosched-boundaries-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Slots of two digits: every line has the same length.
        let line = serde_json::to_vec(&record(10)).unwrap().len() as u64 + 1;
        let mut log = BoundaryLog::new(&dir, line * 10);
        for slot in 10..45 {
            log.record(&record(slot));
        }
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        assert!(size(log.path()) <= line * 10 && size(&log.old_path()) <= line * 10);
        let slots: Vec<i64> = read_log(&dir).iter().map(|r| r.slot).collect();
        assert_eq!(slots, (30..45).collect::<Vec<_>>());
        assert_eq!(read_log(&dir)[0], record(30));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_planted_where_the_log_goes_is_not_followed() {
        let dir = std::env::temp_dir().join(format!("cosched-boundlink-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, dir.join(BOUNDARY_LOG)).unwrap();
        let mut log = BoundaryLog::new(&dir, 1 << 20);
        log.record(&record(1));
        log.record(&record(2));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn spreads_pair_the_same_job_at_the_same_boundary_only() {
        let started = |slot: i64, job: u64, at_us: i64| BoundaryRecord {
            started: vec![JobMoment { job, at_us }],
            stopped: vec![],
            ..record(slot)
        };
        let a = [started(1, 1, 1_000), started(2, 2, 2_000)];
        let b = [started(1, 1, 1_250), started(3, 1, 3_000)];
        assert_eq!(spreads(&a, &b, |r| &r.started), vec![250]);
        assert_eq!(spreads(&a, &b, |r| &r.stopped), Vec::<u64>::new());
    }

    #[test]
    fn starts_are_timed_from_the_boundary_slept_to() {
        let mut slept = record(7);
        slept.woke_us = 1_000_050;
        slept.lateness_us = Some(50);
        slept.started = vec![JobMoment {
            job: 3,
            at_us: 1_000_120,
        }];
        let mut within = slept.clone();
        within.lateness_us = None;
        assert_eq!(start_delays(&[slept, within]), vec![120]);
    }
}
