//! Lateness of the slot clock (wakeup minus deadline) at several quanta with both CPUs busy,
//! at SCHED_FIFO and, for comparison in the same run, at SCHED_OTHER. Run it through
//! `bench/slot-lateness`.
//!
//!   slot_lateness [SLOTS] [QUANTUM_MS...]      (default 300 slots at 10, 50 and 100 ms)

use cosched_agent::clock;
use cosched_agent::Samples;
use cosched_core::Rotation;
use cosched_os::now_micros;
use std::process::{Child, Command};

fn measure(quantum_ms: i64, slots: usize, realtime: bool) -> String {
    let handle = std::thread::spawn(move || {
        if realtime {
            cosched_os::realtime::make_realtime(cosched_os::realtime::CLOCK_PRIORITY)
                .expect("SCHED_FIFO (run as root)");
        }
        let quantum = quantum_ms * 1000;
        let rotation = Rotation::new(now_micros() / quantum * quantum, quantum);
        let mut samples = Samples::new(slots);
        let mut seen = 0;
        clock::run(rotation, |tick| {
            samples.record(tick.lateness());
            seen += 1;
            seen < slots
        });
        samples.summary()
    });
    let s = handle.join().unwrap();
    let policy = if realtime {
        "SCHED_FIFO"
    } else {
        "SCHED_OTHER"
    };
    format!(
        "| {quantum_ms} | {policy} | {} | {} | {} | {} |",
        s.p50, s.p99, s.max, s.count
    )
}

/// A positive whole number from the command line, or a one-line error and exit 2.
fn positive(arg: &str, name: &str) -> usize {
    match arg.parse() {
        Ok(n) if n > 0 => n,
        _ => {
            eprintln!("slot_lateness: {name} must be a positive whole number (got '{arg}'; see bench/slot-lateness --help)");
            std::process::exit(2);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let slots = args.first().map_or(300, |s| positive(s, "SLOTS"));
    let quanta: Vec<i64> = if args.len() > 1 {
        args[1..]
            .iter()
            .map(|s| positive(s, "QUANTUM_MS") as i64)
            .collect()
    } else {
        vec![10, 50, 100]
    };
    // Both CPUs busy, as during gang scheduling.
    let mut load: Vec<Child> = (0..2)
        .map(|_| {
            cosched_cgroups::die_with_parent(&mut Command::new("sh"))
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("sh runs")
        })
        .collect();
    println!("| quantum ms | clock thread | p50 µs | p99 µs | max µs | slots |");
    println!("|---|---|---|---|---|---|");
    for quantum in quanta {
        for realtime in [true, false] {
            println!("{}", measure(quantum, slots, realtime));
        }
    }
    for child in &mut load {
        let _ = child.kill();
        let _ = child.wait();
    }
}
