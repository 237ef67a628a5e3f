//! The policy file from the command line (no root): `cosched config`, and `cosched sim
//! --config`, `--compare` and `--trace -`, as a user runs them.

use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const COSCHED: &str = env!("CARGO_BIN_EXE_cosched");

fn cosched(args: &[&str]) -> Output {
    Command::new(COSCHED).args(args).output().unwrap()
}

/// Runs cosched with `input` on its standard input.
fn cosched_fed(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(COSCHED)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The one-line refusal of a command, with exit code 1.
fn refusal(out: Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let error = text(&out.stderr);
    assert_eq!(error.lines().count(), 1, "{error}");
    error
}

/// A folder of this test's files, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("cosched-policy-cli-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path.to_str().unwrap().to_string()
    }

    /// A generated workload as SWF.
    fn workload(&self, jobs: &str) -> String {
        let path = self.0.join(format!("jobs-{jobs}.swf"));
        let path = path.to_str().unwrap();
        ok(cosched(&[
            "generate", "--jobs", jobs, "--procs", "64", "--seed", "5", "--out", path,
        ]));
        path.to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A replay's JSON without its wall time.
fn figures(out: Output) -> Value {
    let mut v: Value = serde_json::from_str(&ok(out)).unwrap();
    v.as_object_mut().unwrap().remove("wall_seconds");
    v
}

#[test]
fn config_show_prints_every_key_and_reads_back_as_the_same_policy() {
    let dir = Dir::new("show");
    let site = dir.file(
        "site.toml",
        "[scheduler]\nmpl = 2\n\n[classes.batch]\nmax_time = \"2-0\"\n\n[limits]\nprocs = 16\n",
    );
    let shown = ok(cosched(&["config", "--show", "--config", &site]));
    for line in [
        "mpl = 2\n",
        "backfill = \"easy\"\n",
        "max_time = \"2-00:00:00\"\n",
        "procs = 16\n",
        "[memory]\n",
    ] {
        assert!(shown.contains(line), "{line:?} not in\n{shown}");
    }
    let again = dir.file("again.toml", &shown);
    assert_eq!(
        ok(cosched(&["config", "--show", "--config", &again])),
        shown
    );
    assert!(ok(cosched(&["config", "--check", &again])).contains("a valid policy"));
    let json: Value = serde_json::from_str(&ok(cosched(&[
        "config", "--show", "--config", &site, "--json",
    ])))
    .unwrap();
    assert_eq!(json["scheduler"]["mpl"], 2);
    assert_eq!(json["limits"]["procs"], 16);
    assert_eq!(json["limits"]["running_jobs"], "none");
}

#[test]
fn config_check_refuses_a_bad_file_in_one_line() {
    let dir = Dir::new("check");
    let bad = dir.file("bad.toml", "[scheduler]\nmode = \"gang\"\nmpll = 4\n");
    let error = refusal(cosched(&["config", "--check", &bad]));
    assert!(
        error.contains(&format!("{bad}:3: unknown key `mpll`")),
        "{error}"
    );
    let bad = dir.file("mpl.toml", "[scheduler]\nmpl = 0\n");
    let error = refusal(cosched(&["config", "--check", &bad]));
    assert!(
        error.contains(&format!("{bad}:2: scheduler.mpl = 0: must be from 1 to 64")),
        "{error}"
    );
    let error = refusal(cosched(&["config", "--check", "/nonexistent.toml"]));
    assert!(error.contains("/nonexistent.toml: "), "{error}");
}

#[test]
fn sim_config_replays_what_the_equivalent_flags_replay_and_flags_override_it() {
    let dir = Dir::new("sim");
    let jobs = dir.workload("400");
    let policy = dir.file(
        "site.toml",
        "[scheduler]\nmpl = 3\nbackfill = \"easy\"\npartitioner = \"scatter\"\nquantum_ms = 200\n",
    );
    let by_file = figures(cosched(&[
        "sim", "--trace", &jobs, "--config", &policy, "--json",
    ]));
    let by_flags = figures(cosched(&[
        "sim",
        "--trace",
        &jobs,
        "--policy",
        "gang",
        "--mpl",
        "3",
        "--backfill",
        "--partitioner",
        "scatter",
        "--quantum",
        "0.2",
        "--json",
    ]));
    assert_eq!(by_file, by_flags);
    assert_eq!(by_file["mpl"], 3);
    let overridden = figures(cosched(&[
        "sim", "--trace", &jobs, "--config", &policy, "--mpl", "5", "--json",
    ]));
    assert_eq!(overridden["mpl"], 5);
    assert_eq!(overridden["backfill"], true);
    let easy = figures(cosched(&[
        "sim", "--trace", &jobs, "--config", &policy, "--policy", "easy", "--json",
    ]));
    assert_eq!(easy["policy"], "easy");
    // Without a file the flags keep their own defaults: gang MPL 4, no backfilling.
    let plain = figures(cosched(&["sim", "--trace", &jobs, "--json"]));
    assert_eq!(
        (plain["mpl"].clone(), plain["backfill"].clone()),
        (4.into(), false.into())
    );
}

#[test]
fn sim_refuses_an_unknown_key_a_local_mode_and_scheduling_flags_with_compare() {
    let dir = Dir::new("refuse");
    let jobs = dir.workload("50");
    let typo = dir.file("typo.toml", "[scheduler]\nbackfil = \"easy\"\n");
    let error = refusal(cosched(&["sim", "--trace", &jobs, "--config", &typo]));
    assert!(
        error.contains(&format!("{typo}:2: unknown key `backfil`")),
        "{error}"
    );
    let error = refusal(cosched(&["sim", "--trace", &jobs, "--compare", &typo]));
    assert!(error.contains("`backfil`"), "{error}");
    let local = dir.file("local.toml", "[scheduler]\nmode = \"local\"\n");
    let error = refusal(cosched(&["sim", "--trace", &jobs, "--config", &local]));
    assert!(error.contains("scheduler.mode = \"local\""), "{error}");
    let fine = dir.file("fine.toml", "");
    let error = refusal(cosched(&[
        "sim",
        "--trace",
        &jobs,
        "--compare",
        &fine,
        "--mpl",
        "2",
    ]));
    assert!(error.contains("--mpl with --compare"), "{error}");
}

#[test]
fn sim_reads_a_trace_from_standard_input_plain_or_gzip() {
    let dir = Dir::new("stdin");
    let jobs = dir.workload("300");
    let from_file = figures(cosched(&["sim", "--trace", &jobs, "--json"]));
    let plain = std::fs::read(&jobs).unwrap();
    let zipped = Command::new("gzip").arg("-c").arg(&jobs).output().unwrap();
    assert!(zipped.status.success() && zipped.stdout.starts_with(&[0x1f, 0x8b]));
    for input in [&plain, &zipped.stdout] {
        let mut piped = figures(cosched_fed(&["sim", "--trace", "-", "--json"], input));
        assert_eq!(piped["workload"], "stdin");
        piped["workload"] = from_file["workload"].clone();
        assert_eq!(piped, from_file);
    }
    let error = refusal(cosched_fed(&["sim", "--trace", "-"], b"not a trace\n"));
    assert!(error.contains("stdin"), "{error}");
}

#[test]
fn sim_compare_replays_both_policies_side_by_side_with_the_difference() {
    let dir = Dir::new("compare");
    let jobs = dir.workload("400");
    let other = dir.file("other.toml", "[scheduler]\nmpl = 4\nbackfill = \"easy\"\n");
    let current = dir.file(
        "current.toml",
        "[scheduler]\nmpl = 2\nbackfill = \"none\"\n",
    );
    let compare = [
        "sim",
        "--trace",
        &jobs,
        "--config",
        &other,
        "--compare",
        &current,
    ];
    let json: Value =
        serde_json::from_str(&ok(cosched(&[&compare[..], &["--json"]].concat()))).unwrap();
    let [first, second] = [&json["reports"][0], &json["reports"][1]];
    assert_eq!(
        (first["mpl"].clone(), first["backfill"].clone()),
        (4.into(), true.into())
    );
    assert_eq!(
        (second["mpl"].clone(), second["backfill"].clone()),
        (2.into(), false.into())
    );
    for key in [
        "mean_wait_s",
        "median_wait_s",
        "mean_bounded_slowdown",
        "utilization",
        "makespan_s",
    ] {
        // JSON's decimals read back within a rounding of the figures.
        let expected = first[key].as_f64().unwrap() - second[key].as_f64().unwrap();
        let given = json["difference"][key].as_f64().unwrap();
        assert!(
            (given - expected).abs() <= 1e-9 * expected.abs().max(1.0),
            "{key}: {given} is not {expected}"
        );
    }
    // Each side is the replay `--config` alone gives.
    let mut alone = figures(cosched(&[
        "sim", "--trace", &jobs, "--config", &current, "--json",
    ]));
    let mut side = second.clone();
    side.as_object_mut().unwrap().remove("wall_seconds");
    alone.as_object_mut().unwrap().remove("wall_seconds");
    assert_eq!(side, alone);
    let table = ok(cosched(&compare));
    for words in [
        "other.toml",
        "current.toml",
        "difference",
        "mean wait (s)",
        "median wait (s)",
        "mean bounded slowdown",
        "utilization",
        "makespan (s)",
    ] {
        assert!(table.contains(words), "{words:?} not in\n{table}");
    }
}

/// A real log piped in gzipped, as `history --swf | gzip` would be: each side of the
/// comparison is what `--trace FILE --config` gives for that side's file.
#[test]
fn a_real_log_on_standard_input_compares_as_each_file_replays_it() {
    let traces = std::env::var_os("COSCHED_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
        });
    let log = traces.join("KTH-SP2-1996-2.1-cln.swf.gz");
    let zipped = std::fs::read(&log).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (set COSCHED_TRACES to the traces folder)",
            log.display()
        )
    });
    let dir = Dir::new("real");
    let other = dir.file(
        "other.toml",
        "[scheduler]\nmpl = 8\npartitioner = \"scatter\"\n",
    );
    let current = dir.file("current.toml", "[scheduler]\nbackfill = \"none\"\n");
    let json: Value = serde_json::from_str(&ok(cosched_fed(
        &[
            "sim",
            "--trace",
            "-",
            "--config",
            &other,
            "--compare",
            &current,
            "--json",
        ],
        &zipped,
    )))
    .unwrap();
    for (side, file) in [(0, &other), (1, &current)] {
        let mut piped = json["reports"][side].clone();
        let alone = figures(cosched(&[
            "sim",
            "--trace",
            log.to_str().unwrap(),
            "--config",
            file,
            "--json",
        ]));
        piped.as_object_mut().unwrap().remove("wall_seconds");
        assert_eq!(piped["workload"], "stdin");
        piped["workload"] = alone["workload"].clone();
        assert_eq!(piped, alone, "{file}");
    }
}
