//! The `cosched sim` and `cosched generate` commands as a user runs them.

use std::path::PathBuf;
use std::process::{Command, Output};

fn cosched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cosched"))
        .args(args)
        .output()
        .expect("the cosched binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A file path in the temporary folder, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn to_str(&self) -> Option<&str> {
        self.0.to_str()
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp(name: &str) -> Temp {
    Temp(std::env::temp_dir().join(format!("cosched-cli-test-{}-{name}", std::process::id())))
}

#[test]
fn json_has_the_documented_keys() {
    let out = cosched(&["sim", "--generate", "300", "--seed", "3", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "jobs",
        "dropped",
        "procs",
        "policy",
        "utilization",
        "mean_response_s",
        "mean_wait_s",
        "mean_slowdown",
        "mean_bounded_slowdown",
        "p95_bounded_slowdown",
        "makespan_s",
        "wall_seconds",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["jobs"], 300);
    assert_eq!(v["procs"], 128);
    assert_eq!(v["policy"], "gang");
    assert_eq!(v["mpl"], 4);
}

#[test]
fn the_same_arguments_give_the_same_figures() {
    let strip = |out: Output| {
        let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_object_mut().unwrap().remove("wall_seconds");
        v
    };
    let args = [
        "sim",
        "--generate",
        "500",
        "--seed",
        "9",
        "--policy",
        "easy",
        "--json",
    ];
    assert_eq!(strip(cosched(&args)), strip(cosched(&args)));
}

#[test]
fn generated_traces_replay_and_results_come_back_as_swf() {
    let trace = temp("gen.swf");
    let out = cosched(&[
        "generate",
        "--jobs",
        "50",
        "--procs",
        "32",
        "--seed",
        "4",
        "--out",
        trace.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let results = temp("out.swf");
    let out = cosched(&[
        "sim",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "gang",
        "--mpl",
        "2",
        "--out",
        results.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["procs"], 32, "the machine size comes from the header");
    let text = std::fs::read_to_string(&results.0).unwrap();
    let records: Vec<&str> = text.lines().filter(|l| !l.starts_with(';')).collect();
    assert_eq!(records.len(), 50);
    assert!(text.contains("; Note: replayed by cosched sim"));
    // Every job got a real wait (field 3) instead of the generator's -1.
    assert!(records
        .iter()
        .all(|r| r.split_whitespace().nth(2).unwrap() != "-1"));
}

#[test]
fn jobs_larger_than_the_machine_are_counted_not_fatal() {
    let out = cosched(&["sim", "--generate", "200", "--procs", "128", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let trace = temp("big.swf");
    cosched(&[
        "generate",
        "--jobs",
        "200",
        "--procs",
        "128",
        "--out",
        trace.to_str().unwrap(),
    ]);
    let out = cosched(&[
        "sim",
        "--trace",
        trace.to_str().unwrap(),
        "--procs",
        "8",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let never = v["dropped_by_reason"]["never_fits"].as_u64().unwrap();
    assert!(never > 0);
    assert_eq!(
        v["jobs"].as_u64().unwrap() + never,
        all["jobs"].as_u64().unwrap()
    );
}

#[test]
fn a_malformed_trace_names_file_line_and_field() {
    let trace = temp("bad.swf");
    std::fs::write(
        &trace.0,
        "; MaxProcs: 8\n1 0 -1 10 2 -1 -1 2 -1 -1 1 -1 -1 -1 -1 -1 -1 -1\n2 5 -1 10 x -1 -1 2 -1 -1 1 -1 -1 -1 -1 -1 -1 -1\n",
    )
    .unwrap();
    let out = cosched(&["sim", "--trace", trace.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.swf:3: field 5 (allocated processors): 'x' is not a number"),
        "{err}"
    );
}

#[test]
fn bad_options_get_one_clear_line_and_a_non_zero_exit() {
    for (args, code, needle) in [
        (
            vec!["sim", "--trace", "/nonexistent.swf"],
            1,
            "/nonexistent.swf: No such file",
        ),
        (
            vec!["sim", "--generate", "10", "--policy", "fcfs", "--mpl", "2"],
            1,
            "--mpl applies to --policy gang only",
        ),
        (
            vec!["sim", "--generate", "10", "--quantum", "0"],
            1,
            "--quantum must be a positive number",
        ),
        (
            vec![
                "sim",
                "--generate",
                "10",
                "--quantum",
                "0.1",
                "--switch-overhead",
                "0.2",
            ],
            1,
            "shorter than the quantum",
        ),
        (vec!["sim", "--generate", "10", "--mpl", "0"], 1, "--mpl"),
        (
            vec!["sim", "--generate", "0"],
            1,
            "--generate must be between 1 and 10000000 jobs (got 0)",
        ),
        // Once a capacity-overflow panic, and a 1e-7 load scale took seconds per job.
        (
            vec!["sim", "--generate", "18446744073709551615"],
            1,
            "--generate must be between 1 and 10000000 jobs",
        ),
        (
            vec!["sim", "--generate", "10", "--load-scale", "1e-7"],
            1,
            "--load-scale must be a factor between 0.001 and 1000",
        ),
        (
            vec!["generate", "--jobs", "100000000"],
            1,
            "--jobs must be between 1 and 10000000 jobs",
        ),
        (
            vec!["sim", "--generate", "10", "--procs", "0"],
            1,
            "--procs must be at least 1",
        ),
        (
            vec!["sim", "--generate", "10", "--partitioner", "worst-fit"],
            2,
            "unknown partitioner 'worst-fit'",
        ),
        (
            vec!["sim", "--generate", "10", "--partitioner", "adaptive-scan"],
            2,
            "places submeshes",
        ),
        (
            vec!["sim", "--generate", "10", "--policy", "lottery"],
            2,
            "unknown policy 'lottery'",
        ),
        (vec!["sim"], 2, "--trace"),
    ] {
        let out = cosched(&args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
}

/// One line on stderr, a failure exit, and the words that say what was wrong.
fn refused(args: &[&str], says: &str) {
    let out = cosched(args);
    let text = stderr(&out);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
    assert!(text.contains(says), "{args:?}: {text}");
}

#[test]
fn hostile_numbers_and_bytes_are_refused_in_one_line() {
    let job = |run: &str| format!("1 0 -1 {run} 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1\n");
    let huge_run = temp("huge-run.swf");
    std::fs::write(&huge_run.0, format!("; MaxProcs: 4\n{}", job("9.3e12"))).unwrap();
    refused(
        &["sim", "--trace", huge_run.to_str().unwrap()],
        "huge-run.swf:2: field 4 (run time): 9.3e12 is out of range",
    );
    // Each run time is allowed; together they overflow the clock: refused, not wrapped.
    let long_sum = temp("long-sum.swf");
    let lines: String = (0..2_200).map(|_| job("4294967296")).collect();
    std::fs::write(&long_sum.0, format!("; MaxProcs: 4\n{lines}")).unwrap();
    refused(
        &["sim", "--trace", long_sum.to_str().unwrap()],
        "more than the simulator's clock holds",
    );
    let wide = temp("wide.swf");
    std::fs::write(&wide.0, format!("; MaxProcs: 4294967295\n{}", job("10"))).unwrap();
    refused(
        &["sim", "--trace", wide.to_str().unwrap()],
        "the header declares 4294967295 processors (MaxProcs, else MaxNodes), more than cosched models (at most 16777216): give --procs",
    );
    refused(
        &["sim", "--generate", "10", "--procs", "4000000000"],
        "4000000000 processors is more than cosched models",
    );
    let binary = temp("binary.swf");
    std::fs::write(&binary.0, b"; MaxProcs: 4\n\xff\xfe\n").unwrap();
    refused(
        &["sim", "--trace", binary.to_str().unwrap()],
        "binary.swf:2: not UTF-8 text",
    );
    let cut = temp("cut.swf.gz");
    let whole = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/traces/KTH-SP2-1996-2.1-cln.swf.gz"),
    )
    .expect("../shared/traces beside the checkout");
    std::fs::write(&cut.0, &whole[..3000]).unwrap();
    refused(
        &["sim", "--trace", cut.to_str().unwrap()],
        "cannot read: incomplete deflate stream",
    );
}

#[test]
fn a_gantt_chart_shows_each_job_in_its_slices_over_its_processors() {
    let log = temp("gantt.swf");
    let job = |n: u32, submit: u32, run: u32, procs: u32| {
        format!("{n} {submit} -1 {run} {procs} -1 -1 {procs} -1 -1 1 1 1 -1 1 -1 -1 -1\n")
    };
    let text = format!(
        "; MaxProcs: 4\n{}{}{}",
        job(11, 0, 100, 4),
        job(12, 0, 100, 4),
        job(13, 10, 50, 2)
    );
    std::fs::write(&log.0, text).unwrap();
    let chart = temp("gantt.svg");
    let titles = |policy: &str| {
        let out = cosched(&[
            "sim",
            "--trace",
            log.to_str().unwrap(),
            "--policy",
            policy,
            "--gantt",
            chart.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let svg = std::fs::read_to_string(&chart.0).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        svg.split("<title>")
            .skip(1)
            .map(|t| t.split('<').next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    // Space sharing: one after the other on the whole machine, the log's job numbers.
    assert_eq!(
        titles("fcfs"),
        [
            "job 11 in slice 0: processors 0-3, 0 s to 100 s",
            "job 12 in slice 0: processors 0-3, 100 s to 200 s",
            "job 13 in slice 0: processors 0-1, 200 s to 250 s",
        ]
    );
    // Gang: three slices take turns, so the two whole-machine jobs end together.
    let gang = titles("gang");
    for expected in [
        "job 11 in slice 0: processors 0-3, 0 s to 250 s",
        "job 12 in slice 1: processors 0-3, 0 s to 250 s",
        "job 13 in slice 2: processors 0-1, 10 s to 160 s",
    ] {
        assert!(
            gang.iter().any(|t| t == expected),
            "{expected} not in {gang:?}"
        );
    }
    // A window that cuts bars clips them; a bad one is refused in one line.
    let out = cosched(&[
        "sim",
        "--trace",
        log.to_str().unwrap(),
        "--policy",
        "fcfs",
        "--gantt",
        chart.to_str().unwrap(),
        "--gantt-window",
        "150:400",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&chart.0).unwrap();
    assert!(
        svg.contains("job 12 in slice 0: processors 0-3, 150 s to 200 s"),
        "{svg}"
    );
    assert!(!svg.contains("job 11 "), "job 11 ended before the window");
    // The same chart as a PNG, drawn from the SVG.
    let png = temp("gantt.png");
    let out = cosched(&[
        "sim",
        "--trace",
        log.to_str().unwrap(),
        "--gantt",
        png.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = std::fs::read(&png.0).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 1000);
    let out = cosched(&[
        "sim",
        "--trace",
        log.to_str().unwrap(),
        "--gantt",
        chart.to_str().unwrap(),
        "--gantt-window",
        "400:150",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the window ends (150 s) before it begins (400 s)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn generate_curie_shape_prints_its_statistics() {
    let log = temp("curie.swf");
    let out = cosched(&[
        "generate",
        "--jobs",
        "3000",
        "--procs",
        "93312",
        "--seed",
        "3",
        "--shape",
        "curie",
        "--stats",
        "--out",
        log.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with("3000 jobs, median 32 processors, ") && err.contains("offered load"),
        "{err}"
    );
    let text = std::fs::read_to_string(&log.0).unwrap();
    assert!(
        text.contains("sizes as for 14000 processors"),
        "header: {text:.600}"
    );
    let published = cosched(&["generate", "--jobs", "10", "--stats"]);
    assert!(stderr(&published).starts_with("10 jobs, median "));
}

#[test]
fn node_memory_keeps_jobs_that_do_not_fit_together_apart() {
    // Two nodes of two processors; two 4-processor jobs asking 300 MB a processor: 600 MB on
    // each node apiece, 1.2 GB together, more than a 1 GiB node has.
    let trace = temp("memory.swf");
    let job = |id| format!("{id} 0 -1 100 4 -1 -1 4 100 307200 1 1 1 -1 -1 -1 -1 -1\n");
    let text = format!("; MaxNodes: 2\n; MaxProcs: 4\n{}{}", job(1), job(2));
    std::fs::write(&trace.0, text).unwrap();
    let path = trace.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["sim", "--trace", path, "--mpl", "2", "--json"];
        args.extend_from_slice(extra);
        let out = cosched(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let with = run(&["--node-memory", "1G"]);
    assert_eq!(with["procs_per_node"], 2, "from MaxProcs / MaxNodes");
    assert_eq!(with["memory_waited"], 1);
    assert_eq!(with["overcommits"], 0);
    assert_eq!(with["makespan_s"], 200.0, "one after the other");
    let without = run(&["--node-memory", "1G", "--no-memory-fit"]);
    assert_eq!(without["overcommits"], 2, "both nodes");
    assert_eq!(without["peak_node_memory"], 1.171875);
    // Without nodes to divide the machine into, or without --node-memory, it says so.
    std::fs::write(&trace.0, format!("; MaxProcs: 4\n{}", job(1))).unwrap();
    let out = cosched(&["sim", "--trace", path, "--node-memory", "1G"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("--procs-per-node"),
        "{}",
        stderr(&out)
    );
    let out = cosched(&["sim", "--generate", "10", "--no-memory-fit"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("give --node-memory (or a policy file"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn output_piped_into_head_ends_quietly() {
    // Far more than a pipe holds, so the writer meets the closed pipe.
    let script = format!(
        "'{}' generate --jobs 100000 | head -1; echo \"status ${{PIPESTATUS[0]}}\"",
        env!("CARGO_BIN_EXE_cosched")
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("status 141\n"), "{stdout}");
    assert_eq!(stderr(&out), "", "no panic, no message");
}
