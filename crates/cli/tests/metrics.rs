//! `/metrics` of a real daemon with jobs run, in both formats: the Prometheus text format
//! (asked for by no `Accept`, or by one that prefers it) is clean for `promtool check metrics`;
//! OpenMetrics (asked for by Prometheus' own `Accept`) passes the strict OpenMetrics parser of
//! Debian's python3-prometheus-client, and both carry the same samples. Every page answers
//! `HEAD` with the head of its `GET`, and no body.

mod common;

use common::*;
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// What Prometheus 2.42 sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// The scrape answered with `accept` (none: no header): its head and body.
fn scrape(port: u16, method: &str, accept: Option<&str>) -> (String, String) {
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    http(
        port,
        &format!("{method} /metrics HTTP/1.1\r\nHost: localhost\r\n{accept}"),
    )
}

/// The value of header `name` in an answer's head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then_some(value.trim())
    })
}

/// `promtool check metrics` on `text`: whether it passed, and what it said.
fn promtool(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (scripts/deps installs Debian's prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

/// Both scrapes read by python3-prometheus-client: OpenMetrics by its strict OpenMetrics
/// parser (it refuses a counter sample without `_total`, a missing `# EOF`, histogram buckets
/// out of order...), the text format by its text parser. Each family's type and number of
/// samples (OpenMetrics), and the sample names and labels of each format.
const READ_BOTH: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
from prometheus_client.parser import text_string_to_metric_families as text
om = list(openmetrics(open(sys.argv[1]).read()))
tx = list(text(open(sys.argv[2]).read()))
names = lambda families: sorted(
    s.name + json.dumps(sorted(s.labels.items())) for f in families for s in f.samples)
print(json.dumps({
    "families": {f.name: [f.type, len(f.samples)] for f in om},
    "openmetrics": names(om),
    "text": names(tx),
}))
"#;

fn read_both(dir: &std::path::Path, openmetrics: &str, text: &str) -> Value {
    let (om, tx) = (dir.join("scrape.om"), dir.join("scrape.txt"));
    std::fs::write(&om, openmetrics).unwrap();
    std::fs::write(&tx, text).unwrap();
    // Debian's own python3, where python3-prometheus-client is installed.
    let out = Command::new("/usr/bin/python3")
        .args(["-c", READ_BOTH])
        .arg(&om)
        .arg(&tx)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the scrapes do not parse: {}\n{openmetrics}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn both_formats_of_a_real_scrape_pass_promtool_and_the_openmetrics_parser() {
    let port = cosched_etcd::testing::free_port();
    let d = Daemon::start(&["--quantum-ms", "50", "--http", &port.to_string()]);
    // A job running (the gauge of unfinished jobs), ones ended well and badly, a refusal.
    let running = d.submit(&["-n", "1", "--", "sleep", "60"]);
    for command in ["true", "false"] {
        let job = d.submit(&["-n", "1", "--", command]);
        d.wait_end(job, Duration::from_secs(20));
    }
    assert!(!d
        .cosched(&["run", "-n", "99", "--", "true"])
        .status
        .success());
    // The agent reports about once a second: its node's families show within a few.
    let switches = r#"cosched_switch_duration_seconds_count{node="local"}"#;
    assert!(
        wait_until(Duration::from_secs(15), || {
            sample(&scrape(port, "GET", None).1, switches) > Some(0.0)
        }),
        "the node never reported: {}",
        d.log()
    );

    let (head, text) = scrape(port, "GET", None);
    assert_eq!(
        header(&head, "Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert_eq!(header(&head, "Vary"), Some("Accept"));
    assert!(!text.contains("# EOF"), "{text}");
    let (clean, said) = promtool(&text);
    assert!(clean && said.trim().is_empty(), "promtool: {said}\n{text}");
    // Each end counted by its name: `true` completed, `false` failed.
    for result in ["completed", "failed"] {
        let ended = format!(r#"cosched_jobs_ended_total{{result="{result}"}}"#);
        assert_eq!(sample(&text, &ended), Some(1.0), "{text}");
    }
    // A scraper preferring the text format gets it.
    let prefers_text = "application/openmetrics-text;q=0.3, text/plain;version=0.0.4";
    let (head, _) = scrape(port, "GET", Some(prefers_text));
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );

    let (head, openmetrics) = scrape(port, "GET", Some(PROMETHEUS_ACCEPT));
    assert_eq!(
        header(&head, "Content-Type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
    let read = read_both(&d.dir, &openmetrics, &text);
    let families = read["families"].as_object().unwrap();
    assert!(families.len() >= 15, "{families:?}");
    for (name, kind_and_samples) in families {
        assert!(
            kind_and_samples[1].as_u64() > Some(0),
            "{name} has no sample"
        );
    }
    assert_eq!(
        read["openmetrics"], read["text"],
        "the formats' samples differ"
    );
    // promtool reads the text format only: of OpenMetrics it misses the counters' HELP (their
    // families are named without `_total`), and says nothing else.
    let counters: Vec<&String> = families
        .iter()
        .filter(|(_, kind)| kind[0] == "counter")
        .map(|(name, _)| name)
        .collect();
    assert_eq!(counters.len(), 5, "{families:?}");
    let (_, said) = promtool(&openmetrics);
    for line in said.lines() {
        let family = line.strip_suffix("_total no help text");
        assert!(
            family.is_some_and(|f| counters.iter().any(|c| *c == f)),
            "promtool on OpenMetrics: {said}"
        );
    }
    assert!(d
        .cosched(&["cancel", &running.to_string()])
        .status
        .success());
}

#[test]
fn every_page_answers_head_with_the_head_of_its_get_and_no_body() {
    let port = cosched_etcd::testing::free_port();
    let _d = Daemon::start(&["--http", &port.to_string()]);
    let ask = |method: &str, path: &str| {
        http(
            port,
            &format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n"),
        )
    };
    for path in [
        "/console.js",
        "/console.css",
        "/favicon.ico",
        "/nowhere",
        "/",
    ] {
        let (get, body) = ask("GET", path);
        let (head, nothing) = ask("HEAD", path);
        assert_eq!(nothing, "", "HEAD {path}");
        assert_eq!(head.lines().next(), get.lines().next(), "HEAD {path}");
        assert_eq!(header(&head, "Content-Type"), header(&get, "Content-Type"));
        if path != "/" {
            // The console's page shows the time: its length may change between the two.
            assert_eq!(
                header(&head, "Content-Length"),
                Some(&*body.len().to_string())
            );
        }
    }
    for accept in [None, Some(PROMETHEUS_ACCEPT)] {
        let (get, _) = scrape(port, "GET", accept);
        let (head, nothing) = scrape(port, "HEAD", accept);
        assert_eq!(nothing, "");
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert_eq!(header(&head, "Content-Type"), header(&get, "Content-Type"));
        assert!(
            header(&head, "Content-Length").is_some_and(|n| n != "0"),
            "{head}"
        );
    }
    // The live stream's head, and the connection closes (a viewer would be kept).
    let (head, nothing) = ask("HEAD", "/events");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert_eq!(header(&head, "Content-Type"), Some("text/event-stream"));
    assert_eq!(nothing, "");
    // Other methods are refused, naming those a path takes.
    let (head, body) = ask("PUT", "/metrics");
    assert!(head.starts_with("HTTP/1.1 405"), "{head}");
    assert_eq!(header(&head, "Allow"), Some("GET, HEAD"));
    assert!(body.contains("GET and HEAD"), "{body}");
    let (head, _) = ask("GET", "/jobs/1/cancel");
    assert!(head.starts_with("HTTP/1.1 405"), "{head}");
    assert_eq!(header(&head, "Allow"), Some("POST"));
    let (head, nothing) = ask("HEAD", "/metrics/../etc");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    assert_eq!(nothing, "");
}
