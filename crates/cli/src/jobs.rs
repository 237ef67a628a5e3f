//! `cosched ps` and the commands that act on jobs (`cancel`, `suspend`, `resume`): which jobs
//! (ids, `-u`, `-n`, a state, as squeue and scancel choose them) and how a listing is laid out.

use crate::client::{ask, truncate, Socket};
use crate::history::uid_of;
use anyhow::{bail, Result};
use clap::Args;
use cosched_proto::api::{JobView, Reply, Request};
use cosched_proto::JobState;
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Which jobs: each filter given must hold.
#[derive(Args)]
pub struct Selection {
    /// Only jobs of this user
    #[arg(short, long, value_name = "NAME|UID")]
    user: Option<String>,
    /// Only jobs of this name
    #[arg(short, long, value_name = "NAME")]
    name: Option<String>,
    /// Only jobs in these states (queued, waiting, running, suspended, idle, completed,
    /// failed, cancelled, timeout, lost)
    #[arg(short = 't', long, value_name = "STATE[,STATE]", value_delimiter = ',')]
    state: Vec<JobState>,
}

impl Selection {
    fn any(&self) -> bool {
        self.user.is_some() || self.name.is_some() || !self.state.is_empty()
    }

    /// The jobs the filters pick among the daemon's jobs (the ended ones it keeps too, when
    /// `all` or an ended state is asked for), or among `ids` when given.
    fn pick(&self, socket: &Path, ids: &[u64], all: bool) -> Result<Vec<JobView>> {
        let uid = self.user.as_deref().map(uid_of).transpose()?;
        let mut jobs = Vec::new();
        if ids.is_empty() {
            let all = all || self.state.iter().any(|s| s.ended());
            jobs = list(socket, Request::Ps { all, job: None })?;
        }
        for &id in ids {
            let found = list(
                socket,
                Request::Ps {
                    all: true,
                    job: Some(id),
                },
            )?;
            if found.is_empty() {
                bail!("no job {id}");
            }
            jobs.extend(found);
        }
        jobs.retain(|job| {
            uid.is_none_or(|uid| job.uid == uid)
                && self.name.as_ref().is_none_or(|name| &job.name == name)
                && (self.state.is_empty() || self.state.contains(&job.state))
        });
        Ok(jobs)
    }
}

fn list(socket: &Path, request: Request) -> Result<Vec<JobView>> {
    match ask(socket, &request)? {
        Reply::Jobs { jobs, .. } => Ok(jobs),
        _ => bail!("unexpected reply to ps"),
    }
}

/// List jobs (as squeue; with --all, the ended jobs the daemon keeps, as sacct)
#[derive(Args)]
#[command(after_help = "Examples:\n  \
  cosched ps -u ann -t running,queued\n  \
  cosched ps 41 42                           # or -j 41,42\n  \
  cosched ps --all -t failed --format id,name,exit,command\n  \
  cosched ps --noheader --format id -n sim   # ids, one a line, for a script\n\n\
N is the job's processors, or NODESxPER-NODE for a job spread with -N. CPUS \
are the scheduler's processor numbers, not a node's own CPU numbers (in a cluster, each node's \
agent reports what it runs: `cosched nodes`). STATE is where the job is; an ended job is \
completed (exit 0), failed (a non-zero exit, a signal, or ended by cosched: EXIT shows the code \
or the signal), cancelled, timeout or lost. TIME_LEFT is what remains of its time limit, \
counted in time it is let run (its share of the slots), not wall time. REASON says why a \
waiting job waits: resources (no slice has its processors free), memory (processors are free \
but not the memory beside the jobs resident there), priority (it would fit, but an earlier \
job comes first), limit (its owner is at a per-user limit), node (pinned to a node whose \
agent left), held (suspended by its owner); for a running job, stalled(TIME) says every \
process of it has waited that long in its own slots (no CPU, no I/O: a deadlock, say; \
stalled_since_us in --json). MODE is how the job is switched (gang, moderate, implicit); an \
auto job shows auto until its mode is chosen in its first seconds, then auto:CHOSEN (runs_as \
and mode_why in --json). Columns are cut to fit (`~`) only on a terminal.")]
pub struct PsArgs {
    /// Only these jobs, with their whole commands (a listing shows the start of each)
    #[arg(value_name = "JOB", value_delimiter = ',')]
    jobs: Vec<u64>,
    /// Only these jobs (as the JOB arguments)
    #[arg(
        short = 'j',
        long = "jobs",
        value_name = "ID[,ID]",
        value_delimiter = ','
    )]
    more_jobs: Vec<u64>,
    #[command(flatten)]
    select: Selection,
    /// Include jobs that ended
    #[arg(short, long)]
    all: bool,
    /// The columns, in order: id, name, user, class, mode, n, cpus, state, reason, slices,
    /// elapsed, time_left, exit, command
    #[arg(short = 'o', long, value_name = "FIELD[,FIELD]", value_delimiter = ',',
          value_parser = parse_field, conflicts_with = "json")]
    format: Vec<Field>,
    /// Leave the header line out
    #[arg(long, conflicts_with = "json")]
    noheader: bool,
    /// Print the jobs as JSON (run_us, time_limit_us, reason, mem_bytes... per job)
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    socket: Socket,
}

/// A column of `ps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Id,
    Name,
    User,
    Class,
    Mode,
    N,
    Cpus,
    State,
    Reason,
    Slices,
    Elapsed,
    TimeLeft,
    Exit,
    Command,
}

impl Field {
    const ALL: [Field; 14] = [
        Field::Id,
        Field::Name,
        Field::User,
        Field::Class,
        Field::Mode,
        Field::N,
        Field::Cpus,
        Field::State,
        Field::Reason,
        Field::Slices,
        Field::Elapsed,
        Field::TimeLeft,
        Field::Exit,
        Field::Command,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::Id => "id",
            Field::Name => "name",
            Field::User => "user",
            Field::Class => "class",
            Field::Mode => "mode",
            Field::N => "n",
            Field::Cpus => "cpus",
            Field::State => "state",
            Field::Reason => "reason",
            Field::Slices => "slices",
            Field::Elapsed => "elapsed",
            Field::TimeLeft => "time_left",
            Field::Exit => "exit",
            Field::Command => "command",
        }
    }

    /// The most characters it shows on a terminal (a command is cut shorter in a listing).
    fn width(self) -> usize {
        match self {
            Field::Name => 12,
            Field::User => 8,
            Field::Cpus => 8,
            Field::Command => 40,
            _ => usize::MAX,
        }
    }

    fn right_aligned(self) -> bool {
        matches!(
            self,
            Field::Id | Field::N | Field::Elapsed | Field::TimeLeft | Field::Exit
        )
    }

    fn cell(self, job: &JobView, now: i64) -> String {
        let or_dash = |text: String| if text.is_empty() { "-".into() } else { text };
        match self {
            Field::Id => job.id.to_string(),
            Field::Name => job.name.clone(),
            Field::User => job.user.clone(),
            Field::Class => job.class.to_string(),
            Field::Mode => job.mode_shown(),
            Field::N => match job.node_count {
                Some(nodes) => format!("{nodes}x{}", job.procs / nodes.max(1)),
                None => job.procs.to_string(),
            },
            Field::Cpus => job.cpus.clone().unwrap_or_else(|| "-".into()),
            Field::State => job.state.to_string(),
            Field::Reason => match (job.reason, job.stalled_since_us) {
                (Some(reason), _) => reason.name().into(),
                (None, Some(since)) => {
                    format!("stalled({})", cosched_core::Clock((now - since).max(0)))
                }
                (None, None) => "-".into(),
            },
            Field::Slices => or_dash(
                job.slices
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            Field::Elapsed => elapsed(job, now),
            Field::TimeLeft => match job.time_left_us() {
                Some(left) if !job.state.ended() => cosched_core::Clock(left).to_string(),
                _ => "-".into(),
            },
            Field::Exit => job.exit.map_or("-".into(), |exit| exit.to_string()),
            Field::Command => job.argv.join(" "),
        }
    }
}

fn parse_field(text: &str) -> Result<Field, String> {
    let wanted = text.trim().to_ascii_lowercase();
    Field::ALL
        .into_iter()
        .find(|field| field.name() == wanted)
        .ok_or_else(|| {
            format!(
                "'{text}' is not a ps column: one of {}",
                Field::ALL.map(Field::name).join(", ")
            )
        })
}

fn elapsed(job: &JobView, now: i64) -> String {
    match job.started_us {
        Some(start) => {
            let seconds = (job.ended_us.unwrap_or(now) - start) / 1_000_000;
            format!(
                "{}:{:02}:{:02}",
                seconds / 3600,
                seconds / 60 % 60,
                seconds % 60
            )
        }
        None => "-".into(),
    }
}

pub fn ps(args: PsArgs) -> Result<()> {
    let ids: Vec<u64> = args.jobs.iter().chain(&args.more_jobs).copied().collect();
    let jobs = args.select.pick(args.socket.path(), &ids, args.all)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(());
    }
    let fields = match args.format.is_empty() {
        true => Field::ALL.to_vec(),
        false => args.format,
    };
    // Whole commands for jobs asked for by id, as for anything read by a program.
    let cut = std::io::stdout().is_terminal();
    let width = |field: Field| match field {
        Field::Command if !ids.is_empty() => usize::MAX,
        _ if cut => field.width(),
        _ => usize::MAX,
    };
    let now = cosched_os::now_micros();
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            fields
                .iter()
                .map(|&field| truncate(&field.cell(job, now), width(field)))
                .collect()
        })
        .collect();
    let header = (!args.noheader).then(|| {
        fields
            .iter()
            .map(|f| f.name().to_ascii_uppercase())
            .collect()
    });
    let aligned: Vec<bool> = fields.iter().map(|f| f.right_aligned()).collect();
    std::io::stdout()
        .lock()
        .write_all(table(header, &rows, &aligned).as_bytes())?;
    Ok(())
}

/// Columns as wide as their widest cell, one space apart, the last one unpadded.
fn table(header: Option<Vec<String>>, rows: &[Vec<String>], right: &[bool]) -> String {
    let lines: Vec<&Vec<String>> = header.iter().chain(rows).collect();
    let mut widths = vec![0; right.len()];
    for line in &lines {
        for (width, cell) in widths.iter_mut().zip(line.iter()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for line in lines {
        let last = line.len().saturating_sub(1);
        for (i, cell) in line.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            let cell = match (right[i], i == last) {
                (true, _) => format!("{}{cell}", " ".repeat(pad)),
                (false, false) => format!("{cell}{}", " ".repeat(pad)),
                (false, true) => cell.clone(),
            };
            text += &cell;
            text.push(if i == last { '\n' } else { ' ' });
        }
    }
    text
}

/// Act on jobs: by id, or every job of a user, a name, a state
#[derive(Args)]
#[command(after_help = "Examples:\n  \
  cosched cancel 25 26\n  \
  cosched cancel -u ann -t queued      # ann's jobs that have not started\n  \
  cosched cancel -n sweep              # every unfinished job named sweep\n\n\
With ids and filters, the ids the filters keep. A user may act on their own jobs only, root \
on any. Each job that cannot be acted on is named on standard error, and the command then \
exits 1; the others are acted on all the same.")]
pub struct JobArgs {
    /// The jobs' ids (from `cosched ps`)
    #[arg(value_name = "JOB", value_delimiter = ',')]
    jobs: Vec<u64>,
    #[command(flatten)]
    select: Selection,
    #[command(flatten)]
    socket: Socket,
}

/// Sends `make(job)` for each job chosen; every refusal is told, and fails the command.
pub fn act(args: JobArgs, make: fn(u64) -> Request) -> Result<()> {
    if args.jobs.is_empty() && !args.select.any() {
        bail!("name the jobs: their ids, or --user, --name or --state");
    }
    let socket = args.socket.path();
    let chosen: Vec<u64> = match args.select.any() {
        true => args
            .select
            .pick(socket, &args.jobs, false)?
            .iter()
            .map(|job| job.id)
            .collect(),
        false => args.jobs,
    };
    // As scancel: none left to act on is no failure (a script cancelling whatever remains).
    if chosen.is_empty() {
        note!("cosched: no job matches");
        return Ok(());
    }
    let one = |job: u64| -> Result<()> {
        if let Reply::Done { message, .. } = ask(socket, &make(job))? {
            println!("{message}");
        }
        Ok(())
    };
    // One job: its refusal is the command's one-line error.
    if let [job] = chosen[..] {
        return one(job);
    }
    let mut failed = 0;
    for &job in &chosen {
        if let Err(error) = one(job) {
            failed += 1;
            note!("cosched: job {job}: {error:#}");
        }
    }
    if failed > 0 {
        bail!("{failed} of {} jobs were not acted on", chosen.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_widest_cell() {
        let rows = vec![
            vec!["7".into(), "a".into(), "x y".into()],
            vec!["12".into(), "longer".into(), "z".into()],
        ];
        let text = table(
            Some(vec!["ID".into(), "NAME".into(), "COMMAND".into()]),
            &rows,
            &[true, false, false],
        );
        assert_eq!(text, "ID NAME   COMMAND\n 7 a      x y\n12 longer z\n");
        assert_eq!(table(None, &rows[..1], &[true, false, false]), "7 a x y\n");
    }

    #[test]
    fn fields_are_named_as_the_header_spells_them() {
        assert_eq!(parse_field("TIME_LEFT"), Ok(Field::TimeLeft));
        let error = parse_field("jobid").unwrap_err();
        assert!(error.contains("'jobid' is not a ps column"), "{error}");
    }
}
