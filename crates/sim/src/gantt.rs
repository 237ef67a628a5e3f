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

/// What the chart is of, for its title and axes.
pub struct Frame<'a> {
    pub title: &'a str,
    pub procs: u32,
    pub from: Micros,
    pub to: Micros,
}

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 40.0;
const PANEL_GAP: f64 = 14.0;

/// The chart as an SVG document: one panel per slice that has a bar (at least one).
pub fn svg(bars: &[Bar], frame: &Frame) -> String {
    let panels = bars.iter().map(|b| b.slice + 1).max().unwrap_or(1);
    let panel_height = (480.0 / panels as f64).clamp(90.0, 240.0);
    let height = TOP + BOTTOM + panels as f64 * (panel_height + PANEL_GAP);
    let plot_width = WIDTH - LEFT - RIGHT;
    let span = (frame.to - frame.from).max(1) as f64;
    let x = |t: Micros| LEFT + (t - frame.from) as f64 / span * plot_width;
    let procs = f64::from(frame.procs.max(1));
    let panel_top = |slice: usize| TOP + slice as f64 * (panel_height + PANEL_GAP);
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
    for slice in 0..panels {
        let top = panel_top(slice);
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{top}" width="{plot_width}" height="{panel_height}" fill="#f4f4f4" stroke="#999"/><text x="6" y="{}" >slice {slice}</text><text x="{}" y="{}" text-anchor="end" fill="#666">0</text><text x="{}" y="{}" text-anchor="end" fill="#666">{}</text>"##,
            top + 14.0,
            LEFT - 4.0,
            top + 12.0,
            LEFT - 4.0,
            top + panel_height - 2.0,
            frame.procs - 1
        );
    }
    for bar in bars {
        let top = panel_top(bar.slice);
        let (left, right) = (x(bar.from), x(bar.to));
        let width = (right - left).max(0.5);
        let fill = colour(bar.job);
        let label = format!(
            "job {} in slice {}: processors {}, {:.0} s to {:.0} s",
            bar.job,
            bar.slice,
            spans_text(&bar.spans),
            seconds(bar.from),
            seconds(bar.to)
        );
        for span in &bar.spans {
            let y = top + f64::from(span.start) / procs * panel_height;
            let h = (f64::from(span.len) / procs * panel_height).max(0.5);
            let _ = writeln!(
                out,
                r#"<rect x="{left:.2}" y="{y:.2}" width="{width:.2}" height="{h:.2}" fill="{fill}" stroke="white" stroke-width="0.3"><title>{label}</title></rect>"#
            );
        }
    }
    let axis = TOP + panels as f64 * (panel_height + PANEL_GAP) - PANEL_GAP;
    for tick in ticks(frame.from, frame.to) {
        let at = x(tick);
        let _ = writeln!(
            out,
            r##"<line x1="{at:.1}" y1="{axis}" x2="{at:.1}" y2="{}" stroke="#333"/><text x="{at:.1}" y="{}" text-anchor="middle">{}</text>"##,
            axis + 5.0,
            axis + 18.0,
            clock(tick)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">time since the start of the log; processors top to bottom</text></svg>"#,
        LEFT + plot_width / 2.0,
        axis + 34.0
    );
    out
}

fn seconds(t: Micros) -> f64 {
    t as f64 / MICROS_PER_SEC as f64
}

/// A tick's label: h:mm:ss within the first day, then days and hh:mm.
fn clock(t: Micros) -> String {
    let s = t.div_euclid(MICROS_PER_SEC);
    if s < 86_400 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}d {:02}:{:02}", s / 86_400, s / 3600 % 24, s / 60 % 60)
    }
}

/// About eight round tick times across `[from, to)`.
fn ticks(from: Micros, to: Micros) -> Vec<Micros> {
    const STEPS: [i64; 13] = [1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600];
    let wanted = (to - from) / 8;
    let step = STEPS
        .iter()
        .map(|s| s * MICROS_PER_SEC)
        .find(|&s| s >= wanted)
        .unwrap_or(43_200 * MICROS_PER_SEC);
    let first = from.div_euclid(step) * step + if from.rem_euclid(step) > 0 { step } else { 0 };
    (0..)
        .map(|k| first + k * step)
        .take_while(|&t| t <= to)
        .collect()
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

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
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
            procs: 8,
            from: 0,
            to: 120 * MICROS_PER_SEC,
        };
        let text = svg(&bars, &frame);
        assert!(text.contains(">slice 0<") && text.contains(">slice 1<"));
        assert!(!text.contains(">slice 2<"));
        assert_eq!(text.matches("<title>job 1 ").count(), 2);
        assert!(text.contains("job 2 in slice 1: processors 0-7, 30 s to 90 s"));
        assert!(text.contains("a &lt;test&gt;"));
        assert!(text.contains(">0:01:00<"), "a tick a minute in");
    }

    #[test]
    fn ticks_are_round_and_inside_the_window() {
        let ticks = ticks(90 * MICROS_PER_SEC, 3 * 3600 * MICROS_PER_SEC);
        assert!(ticks.len() >= 4 && ticks.len() <= 10, "{ticks:?}");
        assert!(ticks.iter().all(|t| t % (1800 * MICROS_PER_SEC) == 0));
        assert!(ticks[0] >= 90 * MICROS_PER_SEC);
        assert_eq!(clock(90 * MICROS_PER_SEC), "0:01:30");
        assert_eq!(clock((2 * 86_400 + 3_660) * MICROS_PER_SEC), "2d 01:01");
    }
}
