//! Gantt charts of a replay: processors against time, one panel per slice of the matrix, each
//! job a bar over the processors it holds for as long as it is in that slice (alternates and
//! backfilled jobs included). At a trace's scale the slot-by-slot rotation is far below a
//! pixel: the panels show what takes turns, the rotation itself is the daemon's chart.

use cosched_core::{Micros, Span, MICROS_PER_SEC};
use std::fmt::Write;

/// One job in one slice over one stretch of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bar {
    /// The job: its `SimJob::id` from the replay (the CLI puts the SWF job number here).
    pub job: u64,
    pub slice: usize,
    pub spans: Vec<Span>,
    pub from: Micros,
    pub to: Micros,
}

/// Collects the bars that reach into a window of time, as the replay opens and closes them.
#[derive(Debug)]
pub struct Recorder {
    from: Micros,
    to: Micros,
    /// Per job (by input position): the slices it is in now and since when.
    open: Vec<Vec<(usize, Micros)>>,
    bars: Vec<Bar>,
}

impl Recorder {
    /// Records what reaches into `[from, to)` for `jobs` jobs.
    pub fn new(from: Micros, to: Micros, jobs: usize) -> Recorder {
        Recorder {
            from,
            to,
            open: vec![Vec::new(); jobs],
            bars: Vec::new(),
        }
    }

    /// From `at` on, job `index` (trace id `job`, on `spans`) is in `slices` (none: ended).
    /// A slice it stays in keeps its bar going.
    pub fn set(&mut self, index: usize, job: u64, spans: &[Span], slices: &[usize], at: Micros) {
        let (from, to) = (self.from, self.to);
        let bars = &mut self.bars;
        self.open[index].retain(|&(slice, since)| {
            let stays = slices.contains(&slice);
            if !stays && since < to && at > from && at > since {
                bars.push(Bar {
                    job,
                    slice,
                    spans: spans.to_vec(),
                    from: since.max(from),
                    to: at.min(to),
                });
            }
            stays
        });
        for &slice in slices {
            if !self.open[index].iter().any(|&(s, _)| s == slice) {
                self.open[index].push((slice, at));
            }
        }
    }

    /// The bars, in the order they closed.
    pub fn finish(self) -> Vec<Bar> {
        self.bars
    }
}

/// One panel of a chart: a slice of the matrix (rows: processors) or a node (rows: its jobs).
#[derive(Clone, Debug)]
pub struct Panel {
    pub name: String,
    pub rows: u32,
    /// Each row's name (a job's), or none: rows are numbered, first and last shown.
    pub row_names: Vec<String>,
}

/// What the chart is of, for its title and axes.
pub struct Frame<'a> {
    pub title: &'a str,
    pub panels: Vec<Panel>,
    pub from: Micros,
    pub to: Micros,
    /// Tick labels count time from here (the log's start, or the window's).
    pub origin: Micros,
    /// Under the time axis.
    pub axis: &'a str,
}

const WIDTH: f64 = 1200.0;
// Room for a daemon chart's row names: "12 a-long-… auto:moderate".
const LEFT: f64 = 130.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 40.0;
const PANEL_GAP: f64 = 14.0;

/// The chart as an SVG document; `bar.slice` is the index of its panel in `frame.panels`.
pub fn svg(bars: &[Bar], frame: &Frame) -> String {
    let panels = frame.panels.len().max(1);
    let panel_height = (480.0 / panels as f64).clamp(90.0, 240.0);
    let height = TOP + BOTTOM + panels as f64 * (panel_height + PANEL_GAP);
    let plot_width = WIDTH - LEFT - RIGHT;
    let span = (frame.to - frame.from).max(1) as f64;
    let x = |t: Micros| LEFT + (t - frame.from) as f64 / span * plot_width;
    let panel_top = |panel: usize| TOP + panel as f64 * (panel_height + PANEL_GAP);
    // Short windows (a daemon's seconds) need milliseconds; a log's days do not.
    let decimals = if frame.to - frame.from < 100 * MICROS_PER_SEC {
        3
    } else {
        0
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="22" font-size="15">{}</text>"#,
        escape(frame.title)
    );
    for (index, panel) in frame.panels.iter().enumerate() {
        let top = panel_top(index);
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{top}" width="{plot_width}" height="{panel_height}" fill="#f4f4f4" stroke="#999"/><text x="6" y="{}">{}</text>"##,
            top - 3.0,
            escape(&panel.name)
        );
        let row_height = panel_height / f64::from(panel.rows.max(1));
        let label = |row: u32, text: &str| {
            format!(
                r##"<text x="{}" y="{:.1}" text-anchor="end" fill="#444" font-size="10">{}</text>"##,
                LEFT - 4.0,
                top + (f64::from(row) + 0.5) * row_height + 3.5,
                escape(text)
            )
        };
        if panel.row_names.is_empty() {
            let _ = writeln!(out, "{}", label(0, "0"));
            let _ = writeln!(
                out,
                "{}",
                label(panel.rows.max(1) - 1, &(panel.rows.max(1) - 1).to_string())
            );
        } else {
            for (row, name) in panel.row_names.iter().enumerate() {
                let _ = writeln!(out, "{}", label(row as u32, name));
            }
        }
    }
    for bar in bars {
        let Some(panel) = frame.panels.get(bar.slice) else {
            continue;
        };
        let top = panel_top(bar.slice);
        let rows = f64::from(panel.rows.max(1));
        let (left, right) = (x(bar.from), x(bar.to));
        let width = (right - left).max(0.5);
        let fill = colour(bar.job);
        let whereabouts = if panel.row_names.is_empty() {
            format!(": processors {}", spans_text(&bar.spans))
        } else {
            String::new()
        };
        let label = format!(
            "job {} in {}{whereabouts}, {:.decimals$} s to {:.decimals$} s",
            bar.job,
            panel.name,
            seconds(bar.from - frame.origin),
            seconds(bar.to - frame.origin)
        );
        for span in &bar.spans {
            let y = top + f64::from(span.start) / rows * panel_height;
            let h = (f64::from(span.len) / rows * panel_height).max(0.5);
            let _ = writeln!(
                out,
                r#"<rect x="{left:.2}" y="{y:.2}" width="{width:.2}" height="{h:.2}" fill="{fill}" stroke="white" stroke-width="0.3"><title>{label}</title></rect>"#
            );
        }
    }
    let axis = TOP + panels as f64 * (panel_height + PANEL_GAP) - PANEL_GAP;
    let (marks, step) = ticks(frame.from - frame.origin, frame.to - frame.origin);
    for tick in marks {
        let at = x(tick + frame.origin);
        let _ = writeln!(
            out,
            r##"<line x1="{at:.1}" y1="{axis}" x2="{at:.1}" y2="{}" stroke="#333"/><text x="{at:.1}" y="{}" text-anchor="middle">{}</text>"##,
            axis + 5.0,
            axis + 18.0,
            clock(tick, step)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text></svg>"#,
        LEFT + plot_width / 2.0,
        axis + 34.0,
        escape(frame.axis)
    );
    out
}

fn seconds(t: Micros) -> f64 {
    t as f64 / MICROS_PER_SEC as f64
}

/// A tick's label: seconds while ticks are under a minute apart, else h:mm:ss within the first
/// day, then days and hh:mm.
fn clock(t: Micros, step: Micros) -> String {
    if step < 60 * MICROS_PER_SEC {
        let decimals = match step {
            s if s < 100_000 => 2,
            s if s < MICROS_PER_SEC => 1,
            _ => 0,
        };
        return format!("{:.decimals$} s", seconds(t));
    }
    let s = t.div_euclid(MICROS_PER_SEC);
    if s < 86_400 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}d {:02}:{:02}", s / 86_400, s / 3600 % 24, s / 60 % 60)
    }
}

/// About eight round tick times across `[from, to)`, and their step.
fn ticks(from: Micros, to: Micros) -> (Vec<Micros>, Micros) {
    const STEPS_MS: [i64; 19] = [
        10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000,
        600_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000,
    ];
    let wanted = (to - from) / 8;
    let step = STEPS_MS
        .iter()
        .map(|ms| ms * 1_000)
        .find(|&s| s >= wanted)
        .unwrap_or(43_200 * MICROS_PER_SEC);
    let first = from.div_euclid(step) * step + if from.rem_euclid(step) > 0 { step } else { 0 };
    let ticks = (0..)
        .map(|k| first + k * step)
        .take_while(|&t| t <= to)
        .collect();
    (ticks, step)
}

fn spans_text(spans: &[Span]) -> String {
    spans
        .iter()
        .map(|s| match s.len {
            1 => s.start.to_string(),
            _ => format!("{}-{}", s.start, s.start + s.len - 1),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A colour of its own for each job, told apart from its neighbours' (golden-angle hues).
fn colour(job: u64) -> String {
    let hue = (job.wrapping_mul(137_508) / 1000) % 360;
    let light = 45 + (job % 3) * 8;
    format!("hsl({hue},65%,{light}%)")
}

/// Text for XML: markup escaped, and control characters (which XML forbids: one in a job's
/// name made a whole chart unreadable) replaced.
fn escape(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect::<String>()
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: u32, len: u32) -> Vec<Span> {
        vec![Span { start, len }]
    }

    #[test]
    fn bars_cover_the_window_only_and_a_kept_slice_is_one_bar() {
        let mut recorder = Recorder::new(100, 200, 3);
        recorder.set(0, 10, &span(0, 4), &[0], 50);
        recorder.set(0, 10, &span(0, 4), &[0, 1], 120);
        recorder.set(0, 10, &span(0, 4), &[], 250);
        recorder.set(1, 11, &span(4, 2), &[1], 10);
        recorder.set(1, 11, &span(4, 2), &[], 90);
        recorder.set(2, 12, &span(6, 1), &[0], 150);
        recorder.set(2, 12, &span(6, 1), &[], 150);
        let bars = recorder.finish();
        let summary: Vec<(u64, usize, Micros, Micros)> = bars
            .iter()
            .map(|b| (b.job, b.slice, b.from, b.to))
            .collect();
        // Job 11 ended before the window and job 12 lasted no time: neither shows.
        assert_eq!(summary, [(10, 0, 100, 200), (10, 1, 120, 200)]);
    }

    #[test]
    fn the_picture_has_a_panel_per_slice_and_a_rectangle_per_span() {
        let bars = [
            Bar {
                job: 1,
                slice: 0,
                spans: vec![Span { start: 0, len: 2 }, Span { start: 4, len: 2 }],
                from: 0,
                to: 60 * MICROS_PER_SEC,
            },
            Bar {
                job: 2,
                slice: 1,
                spans: span(0, 8),
                from: 30 * MICROS_PER_SEC,
                to: 90 * MICROS_PER_SEC,
            },
        ];
        let frame = Frame {
            title: "a <test>",
            panels: (0..2)
                .map(|slice| Panel {
                    name: format!("slice {slice}"),
                    rows: 8,
                    row_names: Vec::new(),
                })
                .collect(),
            from: 0,
            to: 120 * MICROS_PER_SEC,
            origin: 0,
            axis: "time",
        };
        let text = svg(&bars, &frame);
        assert!(text.contains(">slice 0<") && text.contains(">slice 1<"));
        assert!(!text.contains(">slice 2<"));
        assert!(text.contains(">7<"), "the last processor's number");
        assert_eq!(text.matches("<title>job 1 ").count(), 2);
        assert!(text.contains("job 2 in slice 1: processors 0-7, 30 s to 90 s"));
        assert!(text.contains("a &lt;test&gt;"));
        assert_eq!(escape("a\u{1}b\u{1b}[31m"), "a\u{fffd}b\u{fffd}[31m");
        assert!(text.contains(">60 s<"), "a tick a minute in");
    }

    #[test]
    fn ticks_are_round_and_inside_the_window() {
        let (marks, step) = ticks(90 * MICROS_PER_SEC, 3 * 3600 * MICROS_PER_SEC);
        assert!(marks.len() >= 4 && marks.len() <= 10, "{marks:?}");
        assert_eq!(step, 1800 * MICROS_PER_SEC);
        assert!(marks.iter().all(|t| t % step == 0) && marks[0] >= 90 * MICROS_PER_SEC);
        assert_eq!(clock(90 * MICROS_PER_SEC, step), "0:01:30");
        assert_eq!(
            clock((2 * 86_400 + 3_660) * MICROS_PER_SEC, step),
            "2d 01:01"
        );
        // A daemon's few seconds: ticks a fraction of a second apart, labelled in seconds.
        let (marks, step) = ticks(0, 2 * MICROS_PER_SEC);
        assert_eq!(step, 500_000);
        assert_eq!(marks.len(), 5);
        assert_eq!(clock(1_500_000, step), "1.5 s");
    }
}
