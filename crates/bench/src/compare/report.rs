//! The comparison's outputs: one row per (scheduler, quantum, workload) as JSON, the same as
//! a Markdown table (plus the seed experiments' tables), and an SVG plot of the slowdowns.

use super::jobs::{JobOutcome, JobSpec};
use super::runners::Scheduler;
use crate::figures::{median, Provenance};
use anyhow::{Context as _, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub scheduler: String,
    /// The scheduler as the tables name it (`gang 50 ms`).
    #[serde(skip)]
    pub label: String,
    pub quantum_ms: Option<u64>,
    /// `--give-away-after-ms` (the modes case's rows that have it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub give_away_ms: Option<u32>,
    /// `--time-slice-us` where the row sets it (0: the kernel's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_slice_us: Option<u32>,
    pub workload: String,
    /// Median over the rounds.
    pub makespan_s: f64,
    pub makespan_runs_s: Vec<f64>,
    /// Every job's solo time added (the interactive one too: it needs the machine as well),
    /// divided by how many of the widest fit on the machine at once, never less than the
    /// longest solo time.
    pub ideal_s: f64,
    /// Every long job's turnaround in every round.
    pub turnaround_s: Vec<f64>,
    /// Each of those over the job's time alone.
    pub slowdown: Vec<f64>,
    /// Median turnaround of the interactive job, where the mix has one.
    pub interactive_response_s: Option<f64>,
    pub interactive_alone_s: Option<f64>,
    /// The long jobs' CPU time alone over their CPU time here (spinning while a partner is
    /// descheduled burns CPU for nothing).
    pub cpu_efficiency: Option<f64>,
    /// The host's cache-line round trip between the two CPUs just before each round's run
    /// (`cacheline`): ~120-290 ns or ~500-790 ns on this VM, flipping within seconds; a fine-grain
    /// job runs several times slower in the slow state whatever the scheduler.
    pub host_round_trip_ns: Vec<f64>,
    /// Runs of this scheduler that failed and were run once more (round and why): the
    /// figures are the second runs'.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_runs: Vec<String>,
}

impl Row {
    pub fn from_runs(
        scheduler: &Scheduler,
        workload: &str,
        jobs: &[JobSpec],
        rounds: &[Vec<JobOutcome>],
        solos: &[(String, f64, Option<f64>)],
        cpus: u32,
        host_round_trip_ns: Vec<f64>,
    ) -> Row {
        let solo = |name: &str| solos.iter().find(|(n, ..)| n == name);
        let makespans: Vec<f64> = rounds
            .iter()
            .map(|r| r.iter().map(|o| o.ended_s).fold(0.0, f64::max))
            .collect();
        let long: Vec<&JobOutcome> = rounds.iter().flatten().filter(|o| !o.interactive).collect();
        let widest = jobs.iter().map(|j| j.procs).max().unwrap_or(1).max(1);
        let fit = (cpus / widest).max(1) as f64;
        let alone: Vec<f64> = jobs
            .iter()
            .filter_map(|j| solo(&j.name).map(|s| s.1))
            .collect();
        // No mix beats its longest job alone (one job on two CPUs is not done in half).
        let longest = alone.iter().copied().fold(0.0, f64::max);
        let ideal = (alone.iter().sum::<f64>() / fit).max(longest);
        let interactive: Vec<f64> = rounds
            .iter()
            .flatten()
            .filter(|o| o.interactive)
            .map(JobOutcome::turnaround_s)
            .collect();
        let cpu_alone: Option<f64> = long.iter().map(|o| solo(&o.name).and_then(|s| s.2)).sum();
        let cpu_here: Option<f64> = long.iter().map(|o| o.cpu_s).sum();
        Row {
            scheduler: scheduler.name().to_string(),
            label: scheduler.label(),
            quantum_ms: scheduler.quantum_ms(),
            give_away_ms: scheduler.give_away_ms(),
            time_slice_us: scheduler.time_slice_us(),
            workload: workload.to_string(),
            makespan_s: median(&makespans).unwrap_or(f64::NAN),
            makespan_runs_s: makespans,
            ideal_s: ideal,
            turnaround_s: long.iter().map(|o| o.turnaround_s()).collect(),
            slowdown: long
                .iter()
                .map(|o| o.turnaround_s() / solo(&o.name).map_or(f64::NAN, |s| s.1))
                .collect(),
            interactive_response_s: median(&interactive),
            interactive_alone_s: jobs
                .iter()
                .find(|j| j.interactive)
                .and_then(|j| solo(&j.name))
                .map(|s| s.1),
            cpu_efficiency: cpu_alone.zip(cpu_here).map(|(a, h)| a / h),
            host_round_trip_ns,
            failed_runs: Vec::new(),
        }
    }
}

/// A free-form table (the seed experiments).
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, headers: &[&str]) -> Table {
        Table {
            title: title.to_string(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn markdown(&self, out: &mut String) {
        let _ = writeln!(out, "\n**{}**\n", self.title);
        let _ = writeln!(out, "| {} |", self.headers.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(self.headers.len()));
        for row in &self.rows {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
    }
}

#[derive(Debug, Default)]
pub struct Results {
    pub rows: Vec<Row>,
    pub tables: Vec<Table>,
}

/// Where and how the figures were taken.
pub fn header(quick: bool, repeat: usize) -> Provenance {
    Provenance::now(format!(
        "bench/compare{} (repetitions: {repeat})",
        if quick { " --quick" } else { "" }
    ))
}

/// `120-510` (the least and most of the rounds' probes), or `-`.
fn host_range(samples: &[f64]) -> String {
    if samples.is_empty() {
        return "-".into();
    }
    let low = samples.iter().copied().fold(f64::INFINITY, f64::min);
    let high = samples.iter().copied().fold(0.0, f64::max);
    format!("{low:.0}-{high:.0}")
}

fn seconds(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.2}"))
}

/// The Markdown report: the rows per workload, ratios against the ideal and plain Linux.
pub fn markdown(results: &Results, header: &Provenance) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Machine: {}. Date: {}. Command: `{}`. Medians over the repetitions; spread is the \
         slowest over the fastest makespan; host round trip is the cache-line probe between \
         the two CPUs before each run (least-most: on a VM the host's core placement flips it \
         between ~120 and ~500+ ns, and fine-grain jobs follow it).\n",
        header.machine, header.date, header.command
    );
    let _ = writeln!(
        out,
        "| workload | scheduler | makespan (s) | ideal (s) | / ideal | / local | spread | \
         job slowdown | interactive (s) | CPU efficiency | host round trip (ns) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for row in &results.rows {
        let local = results
            .rows
            .iter()
            .find(|r| r.workload == row.workload && r.scheduler == "local")
            .map(|r| r.makespan_s);
        let fastest = row
            .makespan_runs_s
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let slowest = row.makespan_runs_s.iter().copied().fold(0.0, f64::max);
        let interactive = row
            .interactive_response_s
            .map(|r| format!("{r:.2} (alone {})", seconds(row.interactive_alone_s)));
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {} | {} | {} | {} |",
            row.workload,
            row.label,
            row.makespan_s,
            row.ideal_s,
            row.makespan_s / row.ideal_s,
            local.map_or("-".into(), |l| format!("{:.2}", row.makespan_s / l)),
            slowest / fastest,
            seconds(median(&row.slowdown)),
            interactive.unwrap_or_else(|| "-".into()),
            row.cpu_efficiency
                .map_or("-".into(), |e| format!("{:.0} %", e * 100.0)),
            host_range(&row.host_round_trip_ns),
        );
    }
    let failed: Vec<String> = results
        .rows
        .iter()
        .flat_map(|row| {
            row.failed_runs
                .iter()
                .map(move |why| format!("- {} {}: {why}", row.workload, row.label))
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(
            out,
            "\n**Runs that failed and were run once more** (the figures are the second runs')\n"
        );
        for line in failed {
            let _ = writeln!(out, "{line}");
        }
    }
    for table in &results.tables {
        table.markdown(&mut out);
    }
    out
}

/// An SVG strip plot: for each workload, one line per scheduler with every long job's slowdown
/// (turnaround over time alone) as a dot and the median as a bar.
pub fn svg(results: &Results) -> String {
    let rows: Vec<&Row> = results
        .rows
        .iter()
        .filter(|r| !r.slowdown.is_empty())
        .collect();
    let top = rows
        .iter()
        .flat_map(|r| r.slowdown.iter().copied())
        .filter(|v| v.is_finite())
        .fold(2.0_f64, f64::max)
        .ceil();
    let (left, width, line) = (260.0, 560.0, 18.0);
    let height = 60.0 + line * rows.len() as f64;
    let x = |v: f64| left + width * (v / top).clamp(0.0, 1.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"11\">",
        left + width + 30.0
    );
    let _ = writeln!(
        out,
        "<text x=\"{left}\" y=\"16\">job turnaround / time alone (dots: every job of every round; bar: median)</text>"
    );
    for tick in 0..=top as u32 {
        let tx = x(tick as f64);
        let _ = writeln!(
            out,
            "<line x1=\"{tx}\" y1=\"26\" x2=\"{tx}\" y2=\"{}\" stroke=\"#ddd\"/>\
             <text x=\"{tx}\" y=\"{}\" text-anchor=\"middle\">{tick}</text>",
            height - 20.0,
            height - 6.0
        );
    }
    for (i, row) in rows.iter().enumerate() {
        let y = 36.0 + line * i as f64;
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} · {}</text>",
            left - 8.0,
            y + 4.0,
            row.workload,
            row.label
        );
        for v in row.slowdown.iter().filter(|v| v.is_finite()) {
            let _ = writeln!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{y}\" r=\"3\" fill=\"#3366cc\" fill-opacity=\"0.5\"/>",
                x(*v)
            );
        }
        if let Some(m) = median(&row.slowdown) {
            let mx = x(m);
            let _ = writeln!(
                out,
                "<line x1=\"{mx:.1}\" y1=\"{}\" x2=\"{mx:.1}\" y2=\"{}\" stroke=\"#cc3333\" stroke-width=\"2\"/>",
                y - 6.0,
                y + 6.0
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

/// Prints the Markdown and writes the JSON rows, the Markdown and the SVG beside `json`.
pub fn write(results: &Results, json: &Path, header: &Provenance) -> Result<()> {
    if let Some(dir) = json.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = markdown(results, header);
    println!("{text}");
    std::fs::write(json, serde_json::to_string_pretty(&results.rows)? + "\n")
        .with_context(|| format!("writing {}", json.display()))?;
    let md = json.with_extension("md");
    std::fs::write(&md, &text).with_context(|| format!("writing {}", md.display()))?;
    let plot = json.with_extension("svg");
    std::fs::write(&plot, svg(results)).with_context(|| format!("writing {}", plot.display()))?;
    eprintln!(
        "wrote {}, {} and {}",
        json.display(),
        md.display(),
        plot.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_failed_and_ran_again_is_named_in_the_report() {
        let jobs = [JobSpec::new("a", 1, false, &["true"])];
        let outcome = JobOutcome {
            name: "a".into(),
            interactive: false,
            submitted_s: 0.0,
            ended_s: 2.0,
            cpu_s: None,
            mode: None,
            mode_why: None,
        };
        let solos = [("a".to_string(), 1.0, None)];
        let row = Row::from_runs(
            &Scheduler::Local,
            "mix",
            &jobs,
            &[vec![outcome]],
            &solos,
            2,
            Vec::new(),
        );
        let header = Provenance {
            machine: "m".into(),
            commit: "c".into(),
            date: "d".into(),
            command: "bench/compare".into(),
        };
        let clean = Results {
            rows: vec![row.clone()],
            tables: Vec::new(),
        };
        assert!(!markdown(&clean, &header).contains("failed"));
        let failed = Results {
            rows: vec![Row {
                failed_runs: vec!["round 3: job 2 (mpirun) exited with code 1".into()],
                ..row
            }],
            tables: Vec::new(),
        };
        let text = markdown(&failed, &header);
        assert!(
            text.contains("- mix local: round 3: job 2 (mpirun) exited with code 1"),
            "{text}"
        );
        let json = serde_json::to_string(&failed.rows).unwrap();
        assert!(json.contains("\"failed_runs\":[\"round 3"), "{json}");
    }
}
