//! Stalled jobs (SCore-D's global state): a job whose processes all waited through its own
//! slots for a while, using no CPU (beyond what the freezer's wake-ups cost) and moving no
//! byte in or out, is reported, so that a deadlock shows instead of holding its cells unseen.
//! A stricter cousin of idleness (`idle.rs`): I/O counts as work too, and so does a process
//! starting or ending. Only time in the job's own slots counts: frozen in others' slots, or
//! suspended, a job is stopped by cosched, not stalled. The tracker is pure bookkeeping: the
//! caller reads the counters ([`Activity::read`]) and the time.

use crate::idle::BUSY_SHARE;
use cosched_cgroups::procfs::read_kernel_file;
use cosched_core::{JobId, Micros};
use cosched_os::realtime::{make_realtime, IO_READS_PRIORITY};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const LOG: cosched_os::Log = cosched_os::Log::new("agent");

/// What a job's processes had done when looked at: CPU time, and each process's bytes read
/// and written (through any file, pipe or socket). A process started or ended changes the
/// list, so it counts as activity too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activity {
    pub cpu: Duration,
    pub io: Vec<(libc::pid_t, u64)>,
}

impl Activity {
    /// The counters of processes `pids` (the job's cgroup's) with `cpu` used: `None` when one
    /// cannot be read (it just ended, say) or not within the reader's patience, which counts
    /// as activity: a job is called stalled only on what was seen.
    pub fn read(cpu: Duration, pids: &[libc::pid_t], reader: &mut IoReader) -> Option<Activity> {
        Some(Activity {
            cpu,
            io: reader.read(pids)?,
        })
    }
}

/// How long the clock thread waits for a job's I/O counters at a boundary.
const IO_PATIENCE: Duration = Duration::from_millis(2);

/// Reads processes' `/proc/PID/io` on a thread of its own. The kernel answers that file only
/// under the process's exec lock, which a process stuck in `execve` holds for as long as it
/// is stuck (closing a descriptor on a file system its owner serves, FUSE, can take forever):
/// read on the clock thread, a job's process could stop the node's rotation. Read here, the
/// clock waits at most `IO_PATIENCE`; while a read is still unanswered no other is asked, so a
/// stuck read holds this one thread and nothing else (while it is stuck, no job of the node
/// is called stalled: every reading counts as activity).
pub struct IoReader {
    asks: std::sync::mpsc::Sender<Vec<libc::pid_t>>,
    answers: std::sync::mpsc::Receiver<Option<Vec<(libc::pid_t, u64)>>>,
    /// A read asked and not answered yet.
    unanswered: bool,
}

impl IoReader {
    /// Starts the reading thread, at real-time priority (below the clock's) when `realtime`:
    /// the clock's own priority is not inherited (it is set to reset on fork).
    pub fn start(realtime: bool) -> IoReader {
        IoReader::reading_with(realtime, moved_bytes)
    }

    fn reading_with(
        realtime: bool,
        moved_bytes: impl Fn(libc::pid_t) -> Option<u64> + Send + 'static,
    ) -> IoReader {
        let (asks, asked) = std::sync::mpsc::channel::<Vec<libc::pid_t>>();
        let (answer, answers) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("agent-io".into())
            .spawn(move || {
                if realtime {
                    if let Err(error) = make_realtime(IO_READS_PRIORITY) {
                        LOG.warn(format_args!(
                            "jobs' I/O counters read at ordinary priority ({error}): stalls \
                             may go unseen on a busy node"
                        ));
                    }
                }
                for pids in asked {
                    let counters = pids
                        .iter()
                        .map(|&pid| Some((pid, moved_bytes(pid)?)))
                        .collect::<Option<Vec<_>>>();
                    if answer.send(counters).is_err() {
                        return;
                    }
                }
            });
        // Without the thread every read goes unanswered: no job is ever called stalled.
        if let Err(error) = &spawned {
            LOG.warn(format_args!(
                "no thread to read jobs' I/O counters ({error}): no job will be called stalled"
            ));
        }
        let unanswered = spawned.is_err();
        IoReader {
            asks,
            answers,
            unanswered,
        }
    }

    /// The bytes each of `pids` moved; `None` when one is unreadable or the answer is late.
    pub fn read(&mut self, pids: &[libc::pid_t]) -> Option<Vec<(libc::pid_t, u64)>> {
        use std::sync::mpsc::RecvTimeoutError;
        if self.unanswered {
            // The late answer is stale; until it comes, asking again would only queue.
            self.answers.try_recv().ok()?;
            self.unanswered = false;
        }
        self.asks.send(pids.to_vec()).ok()?;
        match self.answers.recv_timeout(IO_PATIENCE) {
            Ok(counters) => counters,
            Err(RecvTimeoutError::Timeout) => {
                self.unanswered = true;
                None
            }
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }
}

/// Bytes a process (all its threads) read and wrote: `rchar` and `wchar` count what system
/// calls moved, storage or not. Not the call counts: a read restarted by each freeze and
/// thaw is counted again, and would make every waiting reader look busy.
fn moved_bytes(pid: libc::pid_t) -> Option<u64> {
    let text = read_kernel_file(&PathBuf::from(format!("/proc/{pid}/io"))).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse::<u64>().ok())
    };
    Some(field("rchar:")?.wrapping_add(field("wchar:")?))
}

/// What a slot's end says of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing new.
    Same,
    /// It has now waited in its own slots for the stall time, since `since` (the start of
    /// the first of those slots); said again after each further stall time, so that a
    /// controller that took over (and knew nothing of it) hears it too.
    Stalled { since: Micros },
    /// A job reported stalled did something again.
    Moving,
}

#[derive(Clone, Debug, Default)]
struct Track {
    /// Its counters and the time when its current slot began, if it is in one.
    slot_start: Option<(Activity, Micros)>,
    /// Own-slot time without activity since it last did something.
    quiet_us: Micros,
    /// When the first of those quiet slots began.
    since: Option<Micros>,
    /// `quiet_us` when it was last reported stalled.
    reported_at: Option<Micros>,
}

#[derive(Clone, Debug)]
pub struct StallTracker {
    after: Micros,
    jobs: BTreeMap<JobId, Track>,
}

impl StallTracker {
    /// A job is stalled once it did nothing in `after` microseconds of its own slots.
    pub fn new(after: Micros) -> Self {
        StallTracker {
            after,
            jobs: BTreeMap::new(),
        }
    }

    /// `job` enters its slot at `now` with `activity` so far.
    pub fn slot_started(&mut self, job: JobId, activity: Activity, now: Micros) {
        self.jobs.entry(job).or_default().slot_start = Some((activity, now));
    }

    /// `job` leaves its slot at `now` with `activity` (`None`: unreadable, counted as work).
    pub fn slot_ended(&mut self, job: JobId, activity: Option<Activity>, now: Micros) -> Verdict {
        let Some(track) = self.jobs.get_mut(&job) else {
            return Verdict::Same;
        };
        let Some((start, began)) = track.slot_start.take() else {
            return Verdict::Same;
        };
        let slot = (now - began).max(0);
        let quiet = activity.is_some_and(|end| {
            let used = end.cpu.saturating_sub(start.cpu);
            end.io == start.io && used < Duration::from_micros(slot as u64) / BUSY_SHARE
        });
        if !quiet {
            let was = track.reported_at.take();
            track.quiet_us = 0;
            track.since = None;
            return match was {
                Some(_) => Verdict::Moving,
                None => Verdict::Same,
            };
        }
        let since = *track.since.get_or_insert(began);
        track.quiet_us += slot;
        if track.quiet_us - track.reported_at.unwrap_or(0) >= self.after {
            track.reported_at = Some(track.quiet_us);
            return Verdict::Stalled { since };
        }
        Verdict::Same
    }

    /// The job ended or left the rotation (suspended, idle): it starts afresh if it comes
    /// back (the controller forgets its stall on its side).
    pub fn forget(&mut self, job: JobId) {
        self.jobs.remove(&job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_counters_are_read_and_an_ended_process_reads_as_none() {
        let mut reader = IoReader::start(false);
        let me = std::process::id() as libc::pid_t;
        // A read answered later than the clock's patience (a loaded machine: the fresh-clone
        // CI beside a build) is `None`; the next one asks again.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let counters = loop {
            if let Some(counters) = reader.read(&[me]) {
                break counters;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "this process's counters"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(counters.len(), 1);
        assert_eq!(reader.read(&[me, libc::pid_t::MAX]), None);
    }

    #[test]
    fn a_read_stuck_in_the_kernel_holds_its_thread_not_the_clock() {
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let stuck = std::sync::Mutex::new(stuck);
        let mut reader = IoReader::reading_with(false, move |pid| {
            if pid == 13 {
                let _ = stuck.lock().unwrap().recv();
            }
            Some(pid as u64)
        });
        assert_eq!(reader.read(&[13]), None, "late: counted as activity");
        // While it is stuck, nothing more is asked: were [1] queued behind it, its answer
        // would come before the one asked below.
        assert_eq!(reader.read(&[1]), None);
        release.send(()).unwrap();
        let mut answered = None;
        for _ in 0..500 {
            answered = reader.read(&[1, 2]);
            if answered.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(answered, Some(vec![(1, 1), (2, 2)]));
    }

    const MS: Micros = 1_000;

    fn at(cpu_us: u64, io: &[(libc::pid_t, u64)]) -> Activity {
        Activity {
            cpu: Duration::from_micros(cpu_us),
            io: io.to_vec(),
        }
    }

    /// One 100 ms slot from `start`, the job doing `end` by its end.
    fn slot(t: &mut StallTracker, start: Micros, begin: Activity, end: Activity) -> Verdict {
        t.slot_started(1, begin, start);
        t.slot_ended(1, Some(end), start + 100 * MS)
    }

    #[test]
    fn stalled_once_its_own_quiet_slots_add_up_and_only_then() {
        let mut t = StallTracker::new(300 * MS);
        let io = [(10, 5), (11, 7)];
        // Slots every 400 ms (frozen in between: that time never counts).
        let verdicts: Vec<Verdict> = (0..7)
            .map(|k| slot(&mut t, k * 400 * MS, at(50, &io), at(80, &io)))
            .collect();
        let stalled = Verdict::Stalled { since: 0 };
        assert_eq!(
            verdicts,
            vec![
                Verdict::Same,
                Verdict::Same,
                stalled,
                Verdict::Same,
                Verdict::Same,
                stalled,
                Verdict::Same
            ],
            "300 ms of its own slots: the third one; said again 300 ms later"
        );
        assert_eq!(
            slot(&mut t, 2_800 * MS, at(80, &io), at(5_080, &io)),
            Verdict::Moving,
            "5 ms of CPU in a 100 ms slot is work"
        );
        assert_eq!(
            slot(&mut t, 3_200 * MS, at(0, &io), at(0, &io)),
            Verdict::Same
        );
    }

    #[test]
    fn bytes_moved_a_process_come_or_gone_and_unreadable_counters_are_work() {
        let mut t = StallTracker::new(200 * MS);
        let io = [(10, 5)];
        assert_eq!(slot(&mut t, 0, at(0, &io), at(0, &io)), Verdict::Same);
        assert_eq!(
            slot(&mut t, 100 * MS, at(0, &io), at(0, &[(10, 6)])),
            Verdict::Same
        );
        assert_eq!(
            slot(&mut t, 200 * MS, at(0, &io), at(0, &io)),
            Verdict::Same
        );
        assert_eq!(
            slot(&mut t, 300 * MS, at(0, &io), at(0, &[(10, 5), (12, 0)])),
            Verdict::Same
        );
        assert_eq!(
            slot(&mut t, 400 * MS, at(0, &io), at(0, &io)),
            Verdict::Same
        );
        assert_eq!(
            slot(&mut t, 500 * MS, at(0, &io), at(0, &io)),
            Verdict::Stalled { since: 400 * MS }
        );
        t.slot_started(1, at(0, &io), 600 * MS);
        assert_eq!(t.slot_ended(1, None, 700 * MS), Verdict::Moving);
    }

    #[test]
    fn a_forgotten_job_starts_afresh_and_a_slot_never_begun_says_nothing() {
        let mut t = StallTracker::new(100 * MS);
        assert_eq!(
            slot(&mut t, 0, at(0, &[]), at(0, &[])),
            Verdict::Stalled { since: 0 }
        );
        t.forget(1);
        assert_eq!(t.slot_ended(1, Some(at(0, &[])), 200 * MS), Verdict::Same);
        assert_eq!(
            slot(&mut t, 300 * MS, at(0, &[]), at(0, &[])),
            Verdict::Stalled { since: 300 * MS }
        );
    }
}
