//! Small statistics for benchmark figures (medians of repeated rounds), and where they were
//! taken.

use serde::Serialize;

/// Where and when figures were taken, by which command on which commit: kept beside them in
/// `results/`, so a figure quoted in the docs can be traced to its run.
#[derive(Clone, Debug, Serialize)]
pub struct Provenance {
    pub machine: String,
    pub commit: String,
    pub date: String,
    pub command: String,
}

impl Provenance {
    pub fn now(command: String) -> Provenance {
        Provenance {
            machine: machine(),
            commit: commit(),
            date: output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            command,
        }
    }
}

/// The command that ran: `script` (the bench/ script that calls this binary) and the options
/// after the subcommand.
pub fn command_line(script: &str) -> String {
    std::env::args()
        .skip(2)
        .fold(script.to_string(), |line, arg| line + " " + &arg)
}

/// CPUs, model and kernel, as a reader compares machines.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{} CPUs, {model}, Linux {}",
        cosched_os::usable_cpus(),
        kernel.trim()
    )
}

/// The checkout's commit, `-dirty` when it has changes ("unknown" outside a git checkout).
fn commit() -> String {
    let head = output("git", &["rev-parse", "--short=12", "HEAD"]);
    if head.is_empty() {
        return "unknown".into();
    }
    let dirty = !output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    if dirty {
        format!("{head}-dirty")
    } else {
        head
    }
}

fn output(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The median (mean of the two middle values for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// Percentiles of values in µs, as the agents summarise their own samples.
pub fn summary(values: &[u64]) -> cosched_proto::Summary {
    let mut samples = cosched_agent::Samples::new(values.len());
    for &value in values {
        samples.record(std::time::Duration::from_micros(value));
    }
    samples.summary()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_deviations() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
