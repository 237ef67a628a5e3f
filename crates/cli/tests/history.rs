//! `cosched history` on a real daemon (needs root): three jobs (one fine, one exit 3, one
//! cancelled) come back from the store (memory keeps one ended job) with their figures,
//! filtered, as anyone sees them, and as an SWF log that `cosched sim --trace` replays.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

fn ids(jobs: &Value) -> Vec<u64> {
    jobs.as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect()
}

#[test]
fn history_shows_ended_jobs_with_their_figures_and_replays_as_swf() {
    let d = Daemon::start(&["--quantum-ms", "100", "--keep-ended", "1"]);
    let busy = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done";
    let fine = d.submit(&[
        "-n", "1", "--time", "5", "--mem", "1G", "--", "sh", "-c", busy,
    ]);
    let three = d.submit(&["-n", "1", "--", "sh", "-c", "exit 3"]);
    let cancelled = d.submit(&["-n", "1", "--", "sleep", "60"]);
    let running = wait_until(Duration::from_secs(20), || {
        d.job(cancelled)["state"] == "running"
    });
    assert!(running, "{}", d.job(cancelled));
    assert!(d
        .cosched(&["cancel", &cancelled.to_string()])
        .status
        .success());
    let ids_of = |jobs: &[u64]| jobs.iter().map(u64::to_string).collect::<Vec<_>>();
    let mut wait = vec!["wait".to_string()];
    wait.extend(ids_of(&[fine, three, cancelled]));
    let waited = d.cosched(&wait.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ne!(waited.status.code(), Some(0), "job {three} exits 3");
    let in_memory = d.json(&["ps", "--all", "--json"]);
    assert_eq!(ids(&in_memory).len(), 1, "--keep-ended 1: {in_memory}");
    let all = d.json(&["history", "--json"]);
    let mut seen = ids(&all);
    seen.sort();
    assert_eq!(seen, [fine, three, cancelled], "{all}");
    let of = |job: u64| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == job)
            .cloned()
            .unwrap()
    };
    let (f, t, c) = (of(fine), of(three), of(cancelled));
    assert_eq!(
        (&f["state"], &f["exit"]["code"]),
        (&"completed".into(), &0.into()),
        "{f}"
    );
    assert_eq!(
        (&t["state"], &t["exit"]["code"]),
        (&"failed".into(), &3.into()),
        "{t}"
    );
    assert_eq!(c["state"], "cancelled", "{c}");
    assert!(
        f["cpu_us"].as_u64().unwrap() > 10_000,
        "the loop's CPU time: {f}"
    );
    assert!(f["elapsed_us"].as_i64().unwrap() > 0 && f["wait_us"].as_i64().is_some());
    assert_eq!(f["nodes"], serde_json::json!(["local"]));
    // Its limit (5 minutes) and the time it was let run, and the memory it asked for.
    assert_eq!(f["time_limit_us"], 300_000_000, "{f}");
    assert!(f["run_us"].as_i64().unwrap() > 0, "{f}");
    assert_eq!(f["mem_bytes"], 1u64 << 30, "{f}");
    assert!(f.get("env").is_none());
    // Filters: a state, a job list, a window that holds none of them.
    let only = |args: &[&str]| {
        let mut all = vec!["history", "--json"];
        all.extend_from_slice(args);
        ids(&d.json(&all))
    };
    assert_eq!(only(&["--state", "cancelled"]), [cancelled]);
    assert_eq!(
        only(&["-j", &format!("{three},{cancelled}"), "--state", "failed"]),
        [three]
    );
    assert_eq!(
        only(&["-u", "root", "--since", "-1h", "--until", "now"]).len(),
        3
    );
    assert!(only(&["--until", "-1h"]).is_empty());
    assert!(only(&["-u", "nobody"]).is_empty());
    // Anyone reads every job's, as with ps.
    let out = d.cosched_as(NOBODY, &["history", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&theirs).len(), 3);
    // Bad input: one line naming it, exit 1.
    for (args, expected) in [
        (
            vec!["history", "--state", "running"],
            "'running' is not a way of ending",
        ),
        (vec!["history", "--since", "soon"], "'soon' is not a time"),
        (
            vec!["history", "--limit", "0"],
            "a history limit is 1 to 10000",
        ),
        (vec!["history", "-u", "no-such-user-here"], "no user named"),
    ] {
        let out = d.cosched(&args);
        let error = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && error.contains(expected),
            "{args:?}: {error}"
        );
    }
    // The table names each job.
    let table = d.cosched(&["history"]);
    let table = String::from_utf8(table.stdout).unwrap();
    assert_eq!(table.lines().count(), 4, "{table}");
    // The SWF log replays in the simulator.
    let swf = d.cosched(&["history", "--swf"]);
    assert!(
        swf.status.success(),
        "{}",
        String::from_utf8_lossy(&swf.stderr)
    );
    let log = d.dir.join("history.swf");
    std::fs::write(&log, &swf.stdout).unwrap();
    let text = String::from_utf8(swf.stdout).unwrap();
    assert!(text.contains("; MaxProcs: "), "{text}");
    let records: Vec<&str> = text.lines().filter(|l| !l.starts_with(';')).collect();
    assert_eq!(records.len(), 3, "{text}");
    let field = |job: u64, index: usize| {
        let line = records
            .iter()
            .find(|l| l.split_whitespace().next() == Some(&job.to_string()));
        line.unwrap()
            .split_whitespace()
            .nth(index)
            .unwrap()
            .to_string()
    };
    assert_eq!(
        [field(fine, 10), field(three, 10), field(cancelled, 10)],
        ["1", "0", "5"]
    );
    // Requested time: the limit in seconds; requested memory: KB per processor.
    assert_eq!([field(fine, 8), field(fine, 9)], ["300", "1048576"]);
    assert_eq!([field(three, 8), field(three, 9)], ["-1", "-1"]);
    let sim = d.cosched(&["sim", "--trace", log.to_str().unwrap(), "--json"]);
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    let replayed: Value = serde_json::from_slice(&sim.stdout).unwrap();
    assert_eq!(replayed["jobs"], 3, "{replayed}");
    // And piped: `cosched history --swf | cosched sim --trace -`.
    let mut piped = std::process::Command::new(COSCHED)
        .args(["sim", "--trace", "-", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut piped.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let piped = piped.wait_with_output().unwrap();
    assert!(piped.status.success(), "{piped:?}");
    let replayed: Value = serde_json::from_slice(&piped.stdout).unwrap();
    assert_eq!(replayed["jobs"], 3, "{replayed}");
    // The loop it is for: the site's own jobs under another policy beside the current one.
    let (other, current) = (d.dir.join("other.toml"), d.dir.join("current.toml"));
    std::fs::write(&other, "[scheduler]\nmpl = 1\n").unwrap();
    std::fs::write(&current, "[scheduler]\nmpl = 4\nbackfill = \"none\"\n").unwrap();
    let mut compared = std::process::Command::new(COSCHED)
        .args(["sim", "--trace", "-", "--json", "--config"])
        .arg(&other)
        .arg("--compare")
        .arg(&current)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut compared.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let compared = compared.wait_with_output().unwrap();
    assert!(compared.status.success(), "{compared:?}");
    let compared: Value = serde_json::from_slice(&compared.stdout).unwrap();
    let reports = compared["reports"].as_array().expect("two reports");
    assert_eq!(
        reports
            .iter()
            .map(|r| (r["jobs"].as_u64(), r["mpl"].as_u64()))
            .collect::<Vec<_>>(),
        [(Some(3), Some(1)), (Some(3), Some(4))],
        "{compared}"
    );
    assert!(
        compared["difference"]["mean_wait_s"].is_number(),
        "{compared}"
    );
}
