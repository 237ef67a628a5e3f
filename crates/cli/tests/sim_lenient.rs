//! Archive logs hold values the SWF text does not allow (Sandia-Ross-2001: status -4 in three
//! records). `cosched sim` replays them, keeps the values, and says so once on stderr and in
//! `--json`; what the replay reads (times, processors) is still refused when out of range.

use std::path::PathBuf;
use std::process::{Command, Output};

fn cosched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cosched"))
        .args(args)
        .output()
        .expect("the cosched binary runs")
}

/// A file in the temporary folder, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str, text: &str) -> Temp {
        let path =
            std::env::temp_dir().join(format!("cosched-lenient-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        Temp(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Six jobs on 8 processors; lines 4, 6 and 7 hold what archive logs hold.
const ARCHIVE_SHAPED: &str = "; Version: 2.2\n\
    ; MaxProcs: 8\n\
    1 0 -1 10 2 -1 -1 2 20 -1 1 5 1 -1 1 -1 -1 -1\n\
    2 5 -1 10 4 -1 -1 4 20 -1 -4 -2 -2 -1 1 -1 -1 -1\n\
    3 6 -1 10 2 -1 -1 2 20 -1 1 5 1 -1 1 -1 -1 -1\n\
    4 7 -1 10 2 -1 -1 2 20 -1 -4 5 1 -1 1 -1 -1 -1\n\
    98765432101234 8 -1 10 2 -1 -1 2 20 -1 -4 -2 1 -1 1 -1 -1 -1\n\
    6 9 -1 10 8 -1 -1 8 20 -1 1 5 1 -1 1 -1 -1 -1\n";

const NOTE: &str = "3 records hold values outside the SWF range in fields the replay does not use, kept as read: \
    field 11 (status) in 3 records, first at line 4; field 12 (user id) in 2 records, first at line 4; \
    field 13 (group id) in 1 record, first at line 4";

#[test]
fn an_archive_shaped_log_replays_with_one_note() {
    let log = Temp::new("archive.swf", ARCHIVE_SHAPED);
    let out_swf = Temp::new("archive-out.swf", "");
    for policy in ["fcfs", "easy", "gang"] {
        let out = cosched(&[
            "sim",
            "--trace",
            log.path(),
            "--policy",
            policy,
            "--out",
            out_swf.path(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{policy}: {err}");
        assert_eq!(err, format!("{}: {NOTE}\n", log.path()), "{policy}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("jobs replayed            6"));
        // Kept as read: the results give the odd values back (fields 3 and 4 are simulated).
        let written = std::fs::read_to_string(&out_swf.0).unwrap();
        let line = written
            .lines()
            .find(|l| l.starts_with("98765432101234 8 "))
            .unwrap_or_else(|| panic!("{written}"));
        assert!(
            line.ends_with(" 2 -1 -1 2 20 -1 -4 -2 1 -1 1 -1 -1 -1"),
            "{line}"
        );
    }

    let out = cosched(&["sim", "--trace", log.path(), "--json"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).matches(NOTE).count(),
        1
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["jobs"], 6);
    assert_eq!(v["out_of_range"]["records"], 3);
    let fields = v["out_of_range"]["fields"].as_array().unwrap();
    assert_eq!(fields.len(), 3);
    assert_eq!(
        fields[0],
        serde_json::json!({"field": 11, "name": "status", "records": 3, "first_line": 4})
    );
}

#[test]
fn a_clean_log_gets_no_note() {
    let clean: String = ARCHIVE_SHAPED
        .lines()
        .filter(|l| !l.contains("-4"))
        .map(|l| format!("{l}\n"))
        .collect();
    let log = Temp::new("clean.swf", &clean);
    let out = cosched(&["sim", "--trace", log.path(), "--json"]);
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("out_of_range").is_none(), "{v}");
}

#[test]
fn times_and_processors_out_of_range_still_refuse_the_log() {
    // Field 2 submit, 4 run time, 5 allocated, 8 requested processors, 9 requested time.
    let cases = [
        (2, "-4", "field 2 (submit time): -4 is out of range"),
        (4, "-2", "field 4 (run time): -2 is out of range"),
        (4, "5e9", "field 4 (run time): 5e9 is out of range"),
        (
            5,
            "-3",
            "field 5 (allocated processors): -3 is out of range",
        ),
        (
            8,
            "16777217",
            "field 8 (requested processors): 16777217 is out of range",
        ),
        (9, "-4", "field 9 (requested time): -4 is out of range"),
    ];
    for (field, value, says) in cases {
        let mut words = vec!["1", "0", "-1", "10", "2", "-1", "-1", "2", "20"];
        words.extend(["-1", "-4", "-2", "-2", "-1", "1", "-1", "-1", "-1"]);
        words[field - 1] = value;
        let log = Temp::new(
            "strict.swf",
            &format!("; MaxProcs: 8\n{}\n", words.join(" ")),
        );
        let out = cosched(&["sim", "--trace", log.path()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{field}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("strict.swf:2: {says}")), "{err}");
    }
}
