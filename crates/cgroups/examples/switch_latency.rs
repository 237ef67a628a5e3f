//! Switch latency of the cgroup v2 actuator against the raw kernel mechanism, side by side:
//! two groups of N spinning processes; a switch freezes one (until the kernel confirms) and
//! then thaws the other. The raw side is `bench/raw/raw_switch` (a minimal C program); both run
//! on the same groups in alternating rounds, at SCHED_FIFO. Run it through `bench/switch-latency`.
//!
//!   switch_latency RAW_SWITCH_BINARY [SWITCHES] [N...]

use cosched_cgroups::{Actuator, Cgroups, Freezer, JobGroup, Layout, Pid};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

fn spinners(n: usize) -> Vec<Child> {
    (0..n)
        .map(|_| {
            cosched_cgroups::die_with_parent(&mut Command::new("sh"))
                .args(["-c", "while :; do :; done"])
                .stdout(Stdio::null())
                .spawn()
                .expect("sh runs")
        })
        .collect()
}

/// The two groups the comparison switches between.
fn pair() -> [JobGroup; 2] {
    ["job-a", "job-b"].map(|name| JobGroup::named(name).expect("a valid group name"))
}

/// (p50, p99) in µs of `switches` actuator switches, alternating direction.
fn actuator_round(act: &mut Cgroups, switches: usize) -> (f64, f64) {
    let jobs = pair();
    let mut times: Vec<f64> = (0..switches)
        .map(|i| {
            let (leave, enter) = (&jobs[i % 2], &jobs[(i + 1) % 2]);
            let start = std::time::Instant::now();
            act.freeze(leave).expect("freeze");
            act.thaw(enter).expect("thaw");
            let took = start.elapsed().as_secs_f64() * 1e6;
            std::thread::sleep(Duration::from_millis(2));
            took
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

/// Kills both groups' processes, reaps them, and removes the groups.
fn cleanup(act: &mut Cgroups, children: &mut Vec<Child>) {
    for job in &pair() {
        let _ = act.kill(job);
    }
    for mut child in children.drain(..) {
        let _ = child.kill();
        let _ = child.wait();
    }
    for job in &pair() {
        for _ in 0..400 {
            if act.pids(job).map_or(true, |p| p.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = act.remove(job);
    }
}

fn raw_round(raw: &str, a: &str, b: &str, switches: usize) -> (f64, f64) {
    let out = Command::new(raw)
        .args([a, b, &switches.to_string()])
        .output()
        .expect("raw_switch runs");
    assert!(
        out.status.success(),
        "raw_switch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |key: &str| -> f64 {
        let at = text.find(key).expect("field") + key.len() + 2;
        text[at..]
            .split([',', '}'])
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (field("\"p50_us"), field("\"p99_us"))
}

/// A positive whole number from the command line, or a one-line error and exit 2.
fn positive(arg: &str, name: &str) -> usize {
    match arg.parse() {
        Ok(n) if n > 0 => n,
        _ => {
            eprintln!("switch_latency: {name} must be a positive whole number (got '{arg}'; see bench/switch-latency --help)");
            std::process::exit(2);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(raw) = args.first().cloned() else {
        eprintln!("usage: switch_latency RAW_SWITCH_BINARY [SWITCHES] [N...]");
        std::process::exit(2);
    };
    let switches = args.get(1).map_or(400, |s| positive(s, "SWITCHES"));
    let sizes: Vec<usize> = if args.len() > 2 {
        args[2..].iter().map(|s| positive(s, "N")).collect()
    } else {
        vec![1, 4, 16, 64, 256]
    };
    if cosched_os::realtime::make_realtime(cosched_os::realtime::CLOCK_PRIORITY).is_err() {
        eprintln!("switch_latency: cannot get SCHED_FIFO (run as root)");
        std::process::exit(1);
    }
    let layout = Layout::detect().expect("mountinfo");
    let parent = format!("cosched-bench-{}", std::process::id());
    let mut act = Cgroups::open(&layout, &parent, Some(Freezer::V2))
        .unwrap_or_else(|e| panic!("the raw comparison needs the cgroup v2 freezer: {e}"));
    let dir = |job: &str| {
        layout
            .v2
            .as_ref()
            .unwrap()
            .join(&parent)
            .join(job)
            .display()
            .to_string()
    };
    println!("| processes per job | raw p50 µs | raw p99 µs | cosched p50 µs | cosched p99 µs | p50 ratio |");
    println!("|---|---|---|---|---|---|");
    for n in sizes {
        let mut children = Vec::new();
        for job in &pair() {
            act.create(job).unwrap();
            for child in spinners(n) {
                let added = act.add(job, child.id() as Pid);
                children.push(child);
                if let Err(e) = added {
                    cleanup(&mut act, &mut children);
                    panic!("{e}");
                }
            }
        }
        let measured = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            act.freeze(&pair()[1]).unwrap();
            let (mut raw_p50, mut raw_p99, mut ours_p50, mut ours_p99) =
                (vec![], vec![], vec![], vec![]);
            for _ in 0..3 {
                let (p50, p99) = raw_round(&raw, &dir("job-a"), &dir("job-b"), switches);
                raw_p50.push(p50);
                raw_p99.push(p99);
                let (p50, p99) = actuator_round(&mut act, switches);
                ours_p50.push(p50);
                ours_p99.push(p99);
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (r50, r99) = (median(&mut raw_p50), median(&mut raw_p99));
            let (o50, o99) = (median(&mut ours_p50), median(&mut ours_p99));
            format!(
                "| {n} | {r50:.0} | {r99:.0} | {o50:.0} | {o99:.0} | {:.2} |",
                o50 / r50
            )
        }));
        // Whatever happened, no spinner is left running or frozen.
        cleanup(&mut act, &mut children);
        match measured {
            Ok(row) => println!("{row}"),
            Err(panic) => {
                let _ = act.close();
                std::panic::resume_unwind(panic);
            }
        }
    }
    act.close().unwrap();
}
