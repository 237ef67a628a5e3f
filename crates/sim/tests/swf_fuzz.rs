//! Fuzzing the SWF reader and the replay behind it with proptest (CI runs the default 256
//! cases a property; `PROPTEST_CASES=200000 cargo test --release -p cosched-sim --test swf_fuzz`
//! for a long run): whatever a trace holds, reading it gives a trace or one error line naming
//! the file, and a trace that reads replays to the end or to one error, never a panic.

use cosched_sim::swf::{self, read_bytes, FIELDS};
use cosched_sim::*;
use proptest::prelude::*;

const NAME: &str = "fuzz.swf";

/// A trace that reads is replayed under every policy on a machine from its header (capped,
/// so a case stays small) and must finish or refuse in one line.
fn replay_everywhere(trace: &swf::Trace) {
    let (jobs, dropped) = jobs_from_trace(trace);
    let procs = trace
        .header
        .max_procs()
        .filter(|&n| n > 0)
        .unwrap_or(8)
        .min(4096) as u32;
    for policy in [Policy::Fcfs, Policy::Easy, Policy::Gang] {
        let mut config = SimConfig::new(procs, policy);
        config.backfill = policy == Policy::Gang;
        match simulate(&jobs, dropped, &config, &mut |_, _| {}) {
            Ok(outcome) => assert_eq!(
                outcome.results.len() as u64 + outcome.dropped.total(),
                trace.records.len() as u64
            ),
            Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
        }
    }
}

fn read_or_one_line(bytes: &[u8]) -> Option<swf::Trace> {
    match read_bytes(bytes, NAME) {
        Ok(trace) => Some(trace),
        Err(e) => {
            let text = e.to_string();
            assert!(text.starts_with(NAME) && !text.contains('\n'), "{text}");
            None
        }
    }
}

/// A job line whose fields are drawn from the values that break things: unknowns, zeros,
/// limits and just past them, huge, negative and fractional numbers.
fn hostile_field() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("4294967296".to_string()),
        Just("4294967297".to_string()),
        Just("16777216".to_string()),
        Just("9.22e12".to_string()),
        Just("1e308".to_string()),
        Just("-2".to_string()),
        Just("0.5".to_string()),
        Just("nan".to_string()),
        (0u32..100_000).prop_map(|n| n.to_string()),
        (1u32..64).prop_map(|n| n.to_string()),
    ]
}

fn hostile_trace() -> impl Strategy<Value = String> {
    let header = prop_oneof![
        Just("; MaxProcs: 64\n".to_string()),
        Just("; MaxProcs: 4294967295\n".to_string()),
        Just("; MaxNodes: 0\n".to_string()),
        Just(String::new()),
    ];
    let line = proptest::collection::vec(hostile_field(), FIELDS).prop_map(|f| f.join(" "));
    (header, proptest::collection::vec(line, 1..40))
        .prop_map(|(header, lines)| header + &lines.join("\n") + "\n")
}

proptest! {
    #[test]
    fn arbitrary_bytes_read_or_fail_in_one_line(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Some(trace) = read_or_one_line(&bytes) {
            replay_everywhere(&trace);
        }
    }

    #[test]
    fn hostile_numbers_read_or_fail_in_one_line(text in hostile_trace()) {
        if let Some(trace) = read_or_one_line(text.as_bytes()) {
            replay_everywhere(&trace);
        }
    }
}
