//! `cosched gantt`: what actually ran, drawn from the agents' logs of slot boundaries (each
//! stop and start of a job, on the true clock).

use crate::client::{ask, Socket};
use anyhow::{bail, Context, Result};
use clap::Args;
use cosched_core::{Micros, Span, MICROS_PER_SEC};
use cosched_proto::api::{JobView, Reply, Request};
use cosched_proto::{BoundaryRecord, Mode};
use cosched_sim::gantt::{self, Bar, Frame, Panel};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Draw what ran when: a Gantt chart (SVG) of the last seconds, a panel per node, a row per
/// job, a bar for each stretch a job was let run
#[derive(Args)]
#[command(after_help = "Examples:\n  \
  cosched gantt --out ran.svg                 # the last 10 seconds\n  \
  cosched gantt --since 2 --out ran.svg       # 2 seconds: every slot shows\n  \
  cosched gantt --state-dir /var/lib/cosched-agent --out ran.svg   # on a cluster's node, as root\n\n\
Bars begin when a job was thawed (or favoured) and end when its stop was confirmed (or when \
the next job was let start, for a process that had no processor to stop on), as the agent \
logged them, so the rotation, the alternates and an interactive job's preemption all \
show. On one machine a job never switched (implicit, or auto before its mode was chosen) has \
one bar from its start to its end or its first switch: no boundary stops it, though it may \
be held for the rest of a gang's slot once past its budget (holds are not drawn). One \
machine: the daemon answers (anyone may look). A cluster's agents keep their logs \
on their nodes: read them there with --state-dir. Open the SVG in a browser (hover a bar for \
its times); --out ran.png draws a PNG instead (with rsvg-convert: apt-get install librsvg2-bin).")]
pub struct GanttArgs {
    /// How many seconds back the chart begins (at most a day)
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    since: f64,
    /// Where to write the chart: SVG, or PNG if the name ends in .png
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    out: PathBuf,
    /// Read the log in these agents' state directories instead of asking the daemon
    #[arg(long = "state-dir", value_name = "DIR")]
    state_dirs: Vec<PathBuf>,
    #[command(flatten)]
    socket: Socket,
}

/// A job running when the window opens has started before it: its start is looked for this
/// far back.
const LOOK_BACK: Micros = 60 * MICROS_PER_SEC;

pub fn gantt(args: GanttArgs) -> Result<()> {
    if !(args.since > 0.0 && args.since <= 86_400.0) {
        bail!(
            "--since must be between 0 and 86400 seconds (got {})",
            args.since
        );
    }
    let to = cosched_os::now_micros();
    let from = to - (args.since * MICROS_PER_SEC as f64).round() as Micros;
    let records = if args.state_dirs.is_empty() {
        let Reply::Boundaries { boundaries, .. } = ask(
            args.socket.path(),
            &Request::Boundaries {
                since_us: from - LOOK_BACK,
            },
        )?
        else {
            bail!("unexpected reply to boundaries");
        };
        boundaries
    } else {
        let mut records = Vec::new();
        for dir in &args.state_dirs {
            let path = dir.join(cosched_agent::boundaries::BOUNDARY_LOG);
            if !path.exists() {
                bail!(
                    "{}: no boundary log (is this an agent's --state-dir?)",
                    path.display()
                );
            }
            records.extend(cosched_agent::boundaries::read_log(dir));
        }
        records
    };
    // Names, and where a job ended (no boundary logs an end), from the daemon when it answers
    // (on a cluster's node it may not be reachable: then rows are numbered, ends open).
    let jobs: BTreeMap<u64, Known> = match ask(
        args.socket.path(),
        &Request::Ps {
            all: true,
            job: None,
        },
    ) {
        Ok(Reply::Jobs { jobs, .. }) => jobs.into_iter().map(|j| (j.id, Known::from(j))).collect(),
        _ => BTreeMap::new(),
    };
    let (panels, bars) = chart(&records, &jobs, from, to);
    if bars.is_empty() {
        note!(
            "cosched: nothing was stopped or started in the last {} s (no gang rotation, or no job)",
            args.since
        );
    }
    let title = format!(
        "what ran from {} to {} UTC ({} node(s))",
        time_of_day(from),
        time_of_day(to),
        panels.len()
    );
    let frame = Frame {
        title: &title,
        panels,
        from,
        to,
        origin: from,
        axis: "seconds since the chart's start; a row per job",
    };
    write_chart(&args.out, &gantt::svg(&bars, &frame))
}

/// Writes a chart as SVG, or as PNG when `path` ends in `.png` (drawn by `rsvg-convert`,
/// whose fonts are the system's). Never through a link: someone else's link in /tmp would
/// have root overwrite its target.
pub fn write_chart(path: &Path, svg: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let bytes = if png {
        to_png(svg)?
    } else {
        svg.as_bytes().to_vec()
    };
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut file| file.write_all(&bytes))
        .with_context(|| {
            format!(
                "cannot write {} (a symbolic link is not followed)",
                path.display()
            )
        })
}

fn to_png(svg: &str) -> Result<Vec<u8>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut convert = Command::new("rsvg-convert")
        .args(["--format", "png", "--background-color", "white"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(
            "a PNG chart is drawn by rsvg-convert, which is not here (Debian: apt-get install \
             librsvg2-bin); or write FILE.svg",
        )?;
    let mut input = convert.stdin.take().expect("piped");
    let svg = svg.to_string();
    // Fed from a thread: the PNG comes out while the SVG goes in.
    let feeder = std::thread::spawn(move || input.write_all(svg.as_bytes()));
    let out = convert.wait_with_output().context("rsvg-convert")?;
    let fed = feeder.join().expect("the feeder does not panic");
    if !out.status.success() || fed.is_err() {
        bail!(
            "rsvg-convert could not draw the chart: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// What the daemon says of a job.
struct Known {
    name: String,
    /// Its mode as `ps` shows it (`auto:gang`).
    mode: String,
    started_us: Option<Micros>,
    ended_us: Option<Micros>,
    unswitched: Unswitched,
}

/// Whether the rotation left a job alone, which no boundary log shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unswitched {
    /// Switched from its start (gang, moderate).
    Never,
    /// Implicit, local, or auto still measuring or found I/O-bound.
    Always,
    /// Auto, switched once its mode was chosen: left alone until its first boundary.
    UntilChosen,
}

impl From<JobView> for Known {
    fn from(job: JobView) -> Known {
        let unswitched = match (job.mode, job.runs_as) {
            (Mode::Implicit | Mode::Local, _) | (Mode::Auto, None | Some(Mode::Implicit)) => {
                Unswitched::Always
            }
            (Mode::Auto, Some(_)) => Unswitched::UntilChosen,
            (Mode::Gang | Mode::Moderate, _) => Unswitched::Never,
        };
        Known {
            mode: job.mode_shown(),
            name: job.name,
            started_us: job.started_us,
            ended_us: job.ended_us,
            unswitched,
        }
    }
}

/// The stretches of jobs the rotation left alone, on one machine: from each one's start to
/// its end (or the chart's), or, for one switched once chosen, to its first start or stop
/// in `records`.
fn unswitched_stretches(
    records: &[BoundaryRecord],
    jobs: &BTreeMap<u64, Known>,
    to: Micros,
) -> Vec<(u64, Micros, Micros)> {
    let mut first_switched: BTreeMap<u64, Micros> = BTreeMap::new();
    for moment in records
        .iter()
        .flat_map(|r| r.stopped.iter().chain(&r.started))
    {
        let first = first_switched.entry(moment.job).or_insert(moment.at_us);
        *first = (*first).min(moment.at_us);
    }
    jobs.iter()
        .filter_map(|(&job, known)| {
            let start = known.started_us?;
            let end = match known.unswitched {
                Unswitched::Never => return None,
                Unswitched::Always => known.ended_us.unwrap_or(to),
                // Chosen before the logs begin: when is not known, so nothing is drawn.
                Unswitched::UntilChosen => *first_switched.get(&job)?,
            };
            Some((job, start, end))
        })
        .collect()
}

/// Panels (a node each, a row per job seen there) and the stretches each job ran within
/// `[from, to)`: from a start to the next stop, a stop with no start before it running from
/// the window's start, a start with no stop after it running until the job ended (or on).
/// On one machine (logs of one node, or none) jobs never switched have their stretches too;
/// a cluster's controller does not say which nodes those ran on.
fn chart(
    records: &[BoundaryRecord],
    jobs: &BTreeMap<u64, Known>,
    from: Micros,
    to: Micros,
) -> (Vec<Panel>, Vec<Bar>) {
    let mut by_node: BTreeMap<&str, Vec<&BoundaryRecord>> = BTreeMap::new();
    for record in records {
        by_node.entry(&record.node).or_default().push(record);
    }
    let mut stretches_by_node: BTreeMap<String, Vec<(u64, Micros, Micros)>> = by_node
        .into_iter()
        .map(|(node, records)| {
            (
                format!("node {node}"),
                switched_stretches(records, jobs, from, to),
            )
        })
        .collect();
    if stretches_by_node.len() <= 1 {
        let unswitched = unswitched_stretches(records, jobs, to);
        if !unswitched.is_empty() {
            if stretches_by_node.is_empty() {
                stretches_by_node.insert("this machine".into(), Vec::new());
            }
            let stretches = stretches_by_node.values_mut().next().expect("one panel");
            stretches.extend(unswitched);
        }
    }
    let mut panels = Vec::new();
    let mut bars = Vec::new();
    for (name, mut stretches) in stretches_by_node {
        stretches.retain(|&(_, start, end)| start < to && end > from && start < end);
        let rows: Vec<u64> = stretches
            .iter()
            .map(|&(job, ..)| job)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if rows.is_empty() {
            continue;
        }
        let row_of = |job: u64| rows.iter().position(|&j| j == job).expect("listed") as u32;
        bars.extend(stretches.iter().map(|&(job, start, end)| Bar {
            job,
            slice: panels.len(),
            spans: vec![Span {
                start: row_of(job),
                len: 1,
            }],
            from: start.max(from),
            to: end.min(to),
        }));
        panels.push(Panel {
            name,
            rows: rows.len() as u32,
            row_names: rows
                .iter()
                .map(|job| match jobs.get(job) {
                    Some(known) => format!("{job} {} {}", shorten(&known.name), known.mode),
                    None => format!("job {job}"),
                })
                .collect(),
        });
    }
    (panels, bars)
}

/// One node's stretches from its boundary log.
fn switched_stretches(
    mut records: Vec<&BoundaryRecord>,
    jobs: &BTreeMap<u64, Known>,
    from: Micros,
    to: Micros,
) -> Vec<(u64, Micros, Micros)> {
    records.sort_by_key(|r| r.woke_us);
    let mut stretches: Vec<(u64, Micros, Micros)> = Vec::new();
    let mut running: BTreeMap<u64, Micros> = BTreeMap::new();
    for record in records {
        // A boundary stops before it starts (freeze confirmed, then thaw).
        for stop in &record.stopped {
            let start = running.remove(&stop.job).unwrap_or(from);
            stretches.push((stop.job, start, stop.at_us));
        }
        for start in &record.started {
            running.entry(start.job).or_insert(start.at_us);
        }
    }
    stretches.extend(running.into_iter().map(|(job, start)| {
        let end = jobs.get(&job).and_then(|k| k.ended_us).unwrap_or(to);
        (job, start, end)
    }));
    stretches
}

/// A job's name short enough for the chart's margin.
fn shorten(name: &str) -> String {
    let short: String = name.chars().take(7).collect();
    if short.len() < name.len() {
        format!("{short}…")
    } else {
        short
    }
}

fn time_of_day(at: Micros) -> String {
    let s = at.div_euclid(MICROS_PER_SEC).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosched_proto::JobMoment;

    fn boundary(node: &str, at: Micros, stopped: &[u64], started: &[u64]) -> BoundaryRecord {
        let moments =
            |jobs: &[u64], at_us| jobs.iter().map(|&job| JobMoment { job, at_us }).collect();
        BoundaryRecord {
            node: node.into(),
            slot: at / 100,
            generation: Some(1),
            woke_us: at,
            lateness_us: Some(0),
            stopped: moments(stopped, at + 1),
            started: moments(started, at + 2),
            blocked: vec![],
            skews: vec![],
        }
    }

    #[test]
    fn stretches_run_from_a_start_to_the_next_stop_within_the_window() {
        let records = [
            boundary("b", 1_000, &[], &[7]),
            boundary("a", 1_000, &[], &[1]),
            boundary("a", 1_100, &[1], &[2]),
            boundary("a", 1_200, &[2], &[1]),
            boundary("a", 1_300, &[1], &[2]),
        ];
        let jobs = BTreeMap::from([
            (
                1,
                Known {
                    name: "a-long-job-name".into(),
                    mode: "auto:gang".into(),
                    started_us: None,
                    ended_us: None,
                    unswitched: Unswitched::UntilChosen,
                },
            ),
            (
                7,
                Known {
                    name: "short".into(),
                    mode: "gang".into(),
                    started_us: Some(900),
                    ended_us: Some(1_250),
                    unswitched: Unswitched::Never,
                },
            ),
        ]);
        let (panels, bars) = chart(&records, &jobs, 1_050, 1_400);
        assert_eq!(panels.len(), 2);
        assert_eq!(panels[0].name, "node a");
        assert_eq!(panels[0].row_names, ["1 a-long-… auto:gang", "job 2"]);
        let summary: Vec<(usize, u64, Micros, Micros)> = bars
            .iter()
            .map(|b| (b.slice, b.job, b.from, b.to))
            .collect();
        assert_eq!(
            summary,
            [
                (0, 1, 1_050, 1_101),
                (0, 2, 1_102, 1_201),
                (0, 1, 1_202, 1_301),
                (0, 2, 1_302, 1_400),
                (1, 7, 1_050, 1_250),
            ]
        );
        assert_eq!(bars[1].spans[0].start, 1, "job 2 has the second row");
    }

    #[test]
    fn a_slot_given_away_shows_the_borrower_from_the_handover() {
        // Job 1 blocks 30 µs into its slot and lends it to job 2, whose own slot follows.
        let handover = BoundaryRecord {
            lateness_us: None,
            blocked: vec![1],
            ..boundary("a", 1_030, &[], &[2])
        };
        let records = [
            boundary("a", 1_000, &[], &[1]),
            handover,
            boundary("a", 1_100, &[1], &[]),
            boundary("a", 1_200, &[2], &[1]),
        ];
        let (_, bars) = chart(&records, &BTreeMap::new(), 1_000, 1_300);
        let summary: Vec<(u64, Micros, Micros)> =
            bars.iter().map(|b| (b.job, b.from, b.to)).collect();
        assert_eq!(
            summary,
            [(1, 1_002, 1_101), (2, 1_032, 1_201), (1, 1_202, 1_300)]
        );
    }

    fn known(mode: &str, started_us: Micros, unswitched: Unswitched) -> Known {
        Known {
            name: "job".into(),
            mode: mode.into(),
            started_us: Some(started_us),
            ended_us: None,
            unswitched,
        }
    }

    #[test]
    fn on_one_machine_a_job_never_switched_runs_from_its_start_and_an_auto_one_until_chosen() {
        // Job 1 gang from the start; 3 implicit; 4 auto, switched from 1_200 on.
        let records = [
            boundary("a", 1_000, &[], &[1]),
            boundary("a", 1_100, &[1], &[]),
            boundary("a", 1_200, &[], &[4]),
            boundary("a", 1_300, &[4], &[1]),
        ];
        let jobs = BTreeMap::from([
            (1, known("gang", 900, Unswitched::Never)),
            (3, known("implicit", 1_050, Unswitched::Always)),
            (4, known("auto:gang", 1_020, Unswitched::UntilChosen)),
        ]);
        let (panels, bars) = chart(&records, &jobs, 1_000, 1_400);
        assert_eq!(panels.len(), 1);
        assert_eq!(panels[0].name, "node a");
        assert_eq!(
            panels[0].row_names,
            ["1 job gang", "3 job implicit", "4 job auto:gang"]
        );
        let mut summary: Vec<(u64, Micros, Micros)> =
            bars.iter().map(|b| (b.job, b.from, b.to)).collect();
        summary.sort();
        assert_eq!(
            summary,
            [
                (1, 1_002, 1_101),
                (1, 1_302, 1_400),
                (3, 1_050, 1_400),
                (4, 1_020, 1_202),
                (4, 1_202, 1_301),
            ]
        );

        // No boundary at all (every job implicit): one panel for the machine.
        let (panels, bars) = chart(&[], &jobs, 1_000, 1_400);
        assert_eq!(panels[0].name, "this machine");
        assert_eq!(
            bars.len(),
            1,
            "only job 3: job 4's choice is not in the logs"
        );

        // A cluster's logs: which nodes an implicit job ran on is not known here.
        let two_nodes = [
            boundary("a", 1_000, &[], &[1]),
            boundary("b", 1_000, &[], &[1]),
        ];
        let (_, bars) = chart(&two_nodes, &jobs, 1_000, 1_400);
        assert!(bars.iter().all(|b| b.job == 1));
    }
}
