//! `cosched history` (in the spirit of Slurm's `sacct`): ended jobs from the daemon's store
//! with what they used, as a table, JSON, or a Standard Workload Format log that
//! `cosched sim --trace` replays.

use crate::client::{ask, truncate, Socket};
use anyhow::{bail, Context, Result};
use clap::Args;
use cosched_core::Class;
use cosched_proto::api::{HistoryRequest, HistoryView, MatrixView, Reply, Request};
use cosched_proto::JobState;
use cosched_sim::swf::{self, Header, Record, Trace};
use std::collections::BTreeMap;
use std::io::Write;

/// Show ended jobs: times, state, exit, CPU time and peak memory (from each job's cgroup)
#[derive(Args)]
#[command(
    after_help = "WHEN is a local date and time, 2026-11-26T03:00 (seconds optional; \
a date alone is its midnight), or a time before now: -90s, -30m, -2h, -7d; or `now`. The \
window is on the jobs' end times: --since included, --until not.\n\n\
Examples:\n  \
  cosched history --since -1d                    # what ended in the last day\n  \
  cosched history -u ann --state failed,timeout\n  \
  cosched history -j 41,42 --json\n  \
  cosched history --since -7d --swf > week.swf   # then: cosched sim --trace week.swf\n\n\
WAIT is from submission to start; ELAPSED from start to end, frozen slots included; RUN the \
time it was let run (its share of the slots: what its limit spends); LIMIT its time limit; \
HELD the \
time its owner kept it suspended; CPU the processor time of all its processes; PEAK the most \
memory they held at once (- where the node cannot tell). Anyone may read every user's jobs, \
as with ps. At most --limit jobs come back, the latest ended; a reply carries at most 4 MiB \
(a note on standard error says when the oldest of them were left out)."
)]
pub struct HistoryArgs {
    /// Only this user's jobs
    #[arg(short, long, value_name = "NAME|UID")]
    user: Option<String>,
    /// Only these jobs
    #[arg(short, long = "job", value_name = "ID[,ID]", value_delimiter = ',')]
    jobs: Vec<u64>,
    /// Only jobs that ended so: completed (exit 0), failed, cancelled, timeout, lost
    #[arg(long, value_name = "S[,S]", value_delimiter = ',', value_parser = parse_state)]
    state: Vec<JobState>,
    /// Only jobs that ended at or after WHEN
    #[arg(long, value_name = "WHEN", allow_hyphen_values = true, value_parser = parse_when)]
    since: Option<i64>,
    /// Only jobs that ended before WHEN
    #[arg(long, value_name = "WHEN", allow_hyphen_values = true, value_parser = parse_when)]
    until: Option<i64>,
    /// At most this many jobs, the latest ended [default: 1000; at most 10000]
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// Print the jobs as JSON (times in µs, every figure a row has)
    #[arg(long, conflicts_with = "swf")]
    json: bool,
    /// Write the jobs as a Standard Workload Format log, oldest first
    #[arg(long)]
    swf: bool,
    #[command(flatten)]
    socket: Socket,
}

pub fn history(args: HistoryArgs) -> Result<()> {
    let query = HistoryRequest {
        uid: args.user.as_deref().map(uid_of).transpose()?,
        jobs: args.jobs,
        states: args.state,
        since_us: args.since,
        until_us: args.until,
        limit: args.limit,
    };
    let socket = args.socket.path();
    let Reply::History {
        history, truncated, ..
    } = ask(socket, &Request::History(query))?
    else {
        bail!("unexpected reply to history");
    };
    if truncated {
        note!(
            "cosched: the {} latest jobs are shown; older ones matched too (narrow the window \
             with --since and --until)",
            history.len()
        );
    }
    let mut out = std::io::stdout().lock();
    if args.swf {
        let Reply::Matrix { matrix, .. } = ask(socket, &Request::Matrix)? else {
            bail!("unexpected reply to matrix");
        };
        swf::write(&as_swf(&history, &matrix), &mut out).context("writing the log")?;
    } else if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&history)?)?;
    } else {
        out.write_all(render(&history).as_bytes())?;
    }
    Ok(())
}

/// A user's uid: a number as it is, else the name looked up here (the daemon's machine).
pub(crate) fn uid_of(user: &str) -> Result<u32> {
    if let Ok(uid) = user.parse() {
        return Ok(uid);
    }
    let name = std::ffi::CString::new(user).context("a user name holds no NUL byte")?;
    let mut buffer = vec![0 as libc::c_char; 4096];
    // SAFETY: a zeroed passwd is valid; getpwnam_r writes within `buffer`.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut found = std::ptr::null_mut();
        let rc = libc::getpwnam_r(
            name.as_ptr(),
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        );
        if rc == 0 && !found.is_null() {
            return Ok(entry.pw_uid);
        }
    }
    bail!("no user named '{user}' here (give a name this machine knows, or a uid)")
}

fn parse_state(text: &str) -> Result<JobState, String> {
    JobState::ENDED
        .into_iter()
        .find(|state| state.name() == text)
        .ok_or_else(|| {
            format!(
                "'{text}' is not a way of ending: one of {}",
                JobState::ENDED.map(JobState::name).join(", ")
            )
        })
}

/// A time as µs since the epoch: `now`, `-N` with s, m, h or d (before now), or a local
/// `YYYY-MM-DD[THH:MM[:SS]]`.
fn parse_when(text: &str) -> Result<i64, String> {
    when(text, cosched_os::now_micros()).ok_or_else(|| {
        format!(
            "'{text}' is not a time: write 2026-11-26T03:00, 2026-11-26, -2h (s, m, h, d) or now"
        )
    })
}

fn when(text: &str, now_us: i64) -> Option<i64> {
    if text == "now" {
        return Some(now_us);
    }
    if let Some(ago) = text.strip_prefix('-') {
        let unit = match ago.chars().last()? {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return None,
        };
        let count: i64 = ago[..ago.len() - 1].parse().ok()?;
        return now_us.checked_sub(count.checked_mul(unit * 1_000_000)?);
    }
    let (date, time) = text.split_once('T').unwrap_or((text, "00:00"));
    let numbers = |part: &str, sep: char| -> Option<Vec<i32>> {
        part.split(sep).map(|n| n.parse().ok()).collect()
    };
    let (date, time) = (numbers(date, '-')?, numbers(time, ':')?);
    let ([year, month, day], [hour, minute, second]) = (
        <[i32; 3]>::try_from(date).ok()?,
        match time[..] {
            [hour, minute] => [hour, minute, 0],
            [hour, minute, second] => [hour, minute, second],
            _ => return None,
        },
    );
    let in_range = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..60).contains(&second);
    if !in_range || year < 1970 {
        return None;
    }
    // SAFETY: a zeroed tm is valid; mktime reads and normalises it.
    let seconds = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        tm.tm_year = year - 1900;
        tm.tm_mon = month - 1;
        tm.tm_mday = day;
        tm.tm_hour = hour;
        tm.tm_min = minute;
        tm.tm_sec = second;
        tm.tm_isdst = -1;
        let seconds = libc::mktime(&mut tm);
        // mktime moves 31 February to March: a day that does not exist is refused.
        if tm.tm_mday != day || seconds == -1 {
            return None;
        }
        seconds
    };
    Some(seconds * 1_000_000)
}

/// A time as local `YYYY-MM-DDTHH:MM:SS`.
fn local_time(us: i64) -> String {
    let seconds = us.div_euclid(1_000_000) as libc::time_t;
    // SAFETY: a zeroed tm is valid; localtime_r writes it.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&seconds, &mut tm);
        tm
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// `H:MM:SS`, with milliseconds when asked (CPU time, as sacct's TotalCPU).
fn duration(us: i64, millis: bool) -> String {
    let us = us.max(0);
    let seconds = us / 1_000_000;
    let whole = format!(
        "{}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    match millis {
        true => format!("{whole}.{:03}", us / 1000 % 1000),
        false => whole,
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n}"),
        _ => format!("{value:.1}{}", UNITS[unit]),
    }
}

fn render(jobs: &[HistoryView]) -> String {
    let mut text = format!(
        "{:>5} {:<12} {:<8} {:<11} {:>4} {:<9} {:>7} {:<19} {:<19} {:<19} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12} {:>7}  {:<12} NOTE\n",
        "ID", "NAME", "USER", "CLASS", "N", "STATE", "EXIT", "SUBMITTED", "STARTED", "ENDED",
        "WAIT", "ELAPSED", "RUN", "LIMIT", "HELD", "CPU", "PEAK", "NODES"
    );
    for job in jobs {
        let nodes = job.nodes.join(",");
        let line = format!(
            "{:>5} {:<12} {:<8} {:<11} {:>4} {:<9} {:>7} {:<19} {:<19} {:<19} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12} {:>7}  {:<12} {}",
            job.id,
            truncate(&job.name, 12),
            truncate(&job.user, 8),
            job.class.name(),
            job.procs,
            job.state,
            job.exit.map_or("-".into(), |exit| exit.to_string()),
            local_time(job.submitted_us),
            job.started_us.map_or("-".into(), local_time),
            local_time(job.ended_us),
            duration(job.wait_us, false),
            job.elapsed_us.map_or("-".into(), |us| duration(us, false)),
            duration(job.run_us, false),
            job.time_limit_us.map_or("-".into(), |us| duration(us, false)),
            duration(job.suspended_us, false),
            job.cpu_us.map_or("-".into(), |us| duration(us as i64, true)),
            job.peak_memory_bytes.map_or("-".into(), bytes),
            truncate(if nodes.is_empty() { "-" } else { &nodes }, 12),
            truncate(job.note.as_deref().unwrap_or(""), 60),
        );
        text += line.trim_end();
        text.push('\n');
    }
    text
}

/// SWF's status: 1 completed, 0 failed (a non-zero exit or a signal, killed by cosched,
/// lost, out of time), 5 cancelled.
fn swf_status(job: &HistoryView) -> f64 {
    match job.state {
        JobState::Completed => 1.0,
        JobState::Cancelled => 5.0,
        _ => 0.0,
    }
}

/// SWF numbers users, groups and programs 1, 2, ... in order of first appearance.
#[derive(Default)]
struct Numbering<K: Ord>(BTreeMap<K, usize>);

impl<K: Ord> Numbering<K> {
    fn of(&mut self, key: K) -> f64 {
        let next = self.0.len() + 1;
        *self.0.entry(key).or_insert(next) as f64
    }
}

/// The jobs as a Standard Workload Format log (version 2.2), oldest submission first: times
/// in seconds from the first submission (run time rounded up: a job that ran counts at least
/// a second, as a replay drops jobs of none), queue = the class's number.
/// The machine's nodes: as many as its processors' `node/cpu` names name (one machine: one).
fn node_count(machine: &MatrixView) -> usize {
    let nodes: std::collections::BTreeSet<&str> = machine
        .processors
        .iter()
        .filter_map(|p| p.split_once('/').map(|(node, _)| node))
        .collect();
    nodes.len().max(1)
}

fn as_swf(jobs: &[HistoryView], machine: &MatrixView) -> Trace {
    let mut jobs: Vec<&HistoryView> = jobs.iter().collect();
    jobs.sort_by_key(|job| (job.submitted_us, job.id));
    let start_s = jobs
        .first()
        .map_or(0, |job| job.submitted_us.div_euclid(1_000_000));
    let (mut users, mut groups, mut programs) = (
        Numbering::default(),
        Numbering::default(),
        Numbering::default(),
    );
    let seconds = |us: i64| (us.max(0) / 1_000_000) as f64;
    let records = jobs
        .iter()
        .map(|job| {
            let mut record = Record::unknown();
            let procs = f64::from(job.procs.max(1));
            // Memory is counted on the job's first node: per processor there.
            let first_node_procs = job
                .cpus_on_nodes
                .first()
                .map_or(procs, |&n| f64::from(n.max(1)));
            let values = [
                (0, job.id as f64),
                (1, (job.submitted_us.div_euclid(1_000_000) - start_s) as f64),
                (2, seconds(job.wait_us)),
                // The time it was let run, not its elapsed time: what it took of its slots is
                // its work, so a replay does not count time frozen in others' slots as work.
                (3, (job.run_us.max(0) as f64 / 1e6).ceil()),
                (4, procs),
                (7, procs),
                (10, swf_status(job)),
                (11, users.of(job.uid)),
                (12, groups.of(job.gid)),
                (13, programs.of(job.name.clone())),
                (
                    14,
                    (Class::ALL.iter().position(|c| *c == job.class).unwrap_or(0) + 1) as f64,
                ),
                (15, 1.0),
            ];
            for (field, value) in values {
                record.fields[field] = value;
            }
            if let Some(cpu) = job.cpu_us {
                record.fields[5] = (cpu as f64 / 1e6 / procs * 100.0).round() / 100.0;
            }
            if let Some(peak) = job.peak_memory_bytes {
                record.fields[6] = (peak as f64 / 1024.0 / first_node_procs).round();
            }
            if let Some(limit) = job.time_limit_us {
                record.fields[8] = (limit as f64 / 1e6).ceil();
            }
            if let Some(asked) = job.mem_bytes {
                record.fields[9] = (asked as f64 / 1024.0 / first_node_procs).round();
            }
            record
        })
        .collect();
    let queues = Class::ALL
        .iter()
        .enumerate()
        .map(|(i, class)| format!("{} {class}", i + 1))
        .collect::<Vec<_>>()
        .join(", ");
    let host = cosched_os::host_name().unwrap_or_default();
    let lines = [
        "; Version: 2.2".to_string(),
        format!(
            "; Computer: {} (cosched, {} mode)",
            host,
            machine.mode
        ),
        "; Installation: cosched history --swf".to_string(),
        format!("; UnixStartTime: {start_s}"),
        format!("; MaxJobs: {}", jobs.len()),
        format!("; MaxRecords: {}", jobs.len()),
        format!("; MaxNodes: {}", node_count(machine)),
        format!("; MaxProcs: {}", machine.procs),
        format!("; MaxQueues: {}", Class::ALL.len()),
        format!("; Queues: {queues} (cosched's classes)"),
        "; Partitions: 1 the whole machine".to_string(),
        "; Note: field 1 is the cosched job id; run time is the time the job was let run (its \
         share of the slots: end minus start only when it had every slot); CPU time and used \
         memory are from each job's cgroup on its first node; requested time is the job's time limit (time let run, -1 \
         without one), requested memory its --mem per processor (-1 without)"
            .to_string(),
    ];
    Trace {
        header: Header {
            lines: lines.into(),
        },
        records,
        out_of_range: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosched_proto::ExitInfo;

    #[test]
    fn times_are_dates_relative_times_or_now() {
        let now = 1_800_000_000_000_000;
        assert_eq!(when("now", now), Some(now));
        assert_eq!(when("-2h", now), Some(now - 7_200_000_000));
        assert_eq!(when("-90s", now), Some(now - 90_000_000));
        assert_eq!(when("-7d", now), Some(now - 7 * 86_400_000_000));
        let minute = when("2026-11-26T03:00", now).unwrap();
        assert_eq!(when("2026-11-26T03:00:30", now), Some(minute + 30_000_000));
        assert_eq!(when("2026-11-26T03:01", now), Some(minute + 60_000_000));
        assert_eq!(
            when("2026-11-26", now),
            Some(minute - 3 * 3_600_000_000),
            "a date is its midnight (no daylight-saving change that night)"
        );
        assert_eq!(local_time(minute), "2026-11-26T03:00:00");
        for bad in [
            "",
            "-",
            "-2",
            "-2x",
            "-h",
            "2026-11",
            "2026-02-31",
            "2026-11-26T25:00",
            "2026-11-26T03",
            "yesterday",
            "2026-13-01",
            "-99999999999999d",
        ] {
            assert_eq!(when(bad, now), None, "{bad}");
        }
        assert!(parse_when("soon")
            .unwrap_err()
            .contains("'soon' is not a time"));
    }

    #[test]
    fn states_are_ways_of_ending() {
        assert_eq!(parse_state("completed"), Ok(JobState::Completed));
        assert_eq!(parse_state("timeout"), Ok(JobState::Timeout));
        let refused = parse_state("running").unwrap_err();
        assert!(
            refused.contains("'running' is not a way of ending"),
            "{refused}"
        );
    }

    fn view(id: u64, uid: u32, state: JobState, exit: ExitInfo) -> HistoryView {
        HistoryView {
            id,
            name: format!("prog{}", id % 2),
            uid,
            user: uid.to_string(),
            gid: uid,
            class: Class::Batch,
            procs: 2,
            state,
            exit: Some(exit),
            note: None,
            submitted_us: 1_000_000_000 + id as i64 * 1_500_000,
            started_us: Some(1_000_000_000 + id as i64 * 2_000_000),
            ended_us: 1_000_000_000 + id as i64 * 4_000_000,
            wait_us: id as i64 * 500_000,
            elapsed_us: Some(id as i64 * 2_000_000 - 300_000),
            suspended_us: 0,
            run_us: id as i64 * 2_000_000 - 300_000,
            time_limit_us: (id == 1).then_some(60_000_000),
            mem_bytes: (id == 1).then_some(128 << 20),
            cpu_us: Some(3_000_000),
            peak_memory_bytes: Some(64 << 20),
            nodes: vec!["local".into()],
            cpus_on_nodes: vec![2],
            argv: vec!["prog".into()],
            argv_cut: false,
        }
    }

    #[test]
    fn the_swf_log_numbers_users_and_reads_back() {
        let code = |c| ExitInfo {
            code: Some(c),
            signal: None,
        };
        let jobs = [
            view(3, 1000, JobState::Cancelled, code(143)),
            view(2, 0, JobState::Failed, code(3)),
            view(1, 1000, JobState::Completed, code(0)),
        ];
        let machine = MatrixView {
            procs: 8,
            processors: Vec::new(),
            mode: cosched_proto::Mode::Gang,
            epoch_us: 0,
            quantum_us: 100_000,
            slot: 0,
            running_slice: None,
            generation: 0,
            slices: Vec::new(),
            queued: Vec::new(),
        };
        let mut text = Vec::new();
        swf::write(&as_swf(&jobs, &machine), &mut text).unwrap();
        let read = swf::read_bytes(&text[..], "history").unwrap();
        assert_eq!(read.header.max_procs(), Some(8));
        assert_eq!(
            read.header.get_int("MaxNodes"),
            Some(1),
            "one machine: one node"
        );
        let fields: Vec<Vec<f64>> = read
            .records
            .iter()
            .map(|r| r.fields[..16].to_vec())
            .collect();
        assert_eq!(
            fields,
            [
                // id, submit, wait, run (rounded up), procs, CPU/proc, KB/proc, req procs,
                // req time, req memory, status, user, group, program, queue, partition
                [
                    1.0, 0.0, 0.0, 2.0, 2.0, 1.5, 32768.0, 2.0, 60.0, 65536.0, 1.0, 1.0, 1.0, 1.0,
                    3.0, 1.0
                ],
                [
                    2.0, 2.0, 1.0, 4.0, 2.0, 1.5, 32768.0, 2.0, -1.0, -1.0, 0.0, 2.0, 2.0, 2.0,
                    3.0, 1.0
                ],
                [
                    3.0, 3.0, 1.0, 6.0, 2.0, 1.5, 32768.0, 2.0, -1.0, -1.0, 5.0, 1.0, 1.0, 1.0,
                    3.0, 1.0
                ],
            ]
        );
    }
}
