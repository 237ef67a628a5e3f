//! docs/protocol.md against the wire types: every request shown is accepted, every reply shown
//! reads back to exactly the JSON written there (so no field is misspelt or missing), every
//! refusal shown is refused, and every request and reply the daemon knows is shown.

use cosched_proto::api::{parse_request, Reply};
use std::collections::BTreeSet;

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol.md");
    std::fs::read_to_string(path).expect("docs/protocol.md")
}

/// The lines of every fenced block whose info string is `kind`.
fn blocks(doc: &str, kind: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut inside = false;
    for line in doc.lines() {
        if inside {
            if line.starts_with("```") {
                inside = false;
            } else if !line.trim().is_empty() {
                lines.push(line.to_string());
            }
        } else if line.trim() == format!("```{kind}") {
            inside = true;
        }
    }
    lines
}

fn kind(reply: &Reply) -> &'static str {
    match reply {
        Reply::Error { .. } => "error",
        Reply::Started { .. } => "started",
        Reply::Token { .. } => "token",
        Reply::Ended { .. } => "ended",
        Reply::Jobs { .. } => "jobs",
        Reply::Matrix { .. } => "matrix",
        Reply::Stats { .. } => "stats",
        Reply::Nodes { .. } => "nodes",
        Reply::Boundaries { .. } => "boundaries",
        Reply::Submitted { .. } => "submitted",
        Reply::Done { .. } => "done",
        Reply::History { .. } => "history",
    }
}

#[test]
fn every_request_shown_is_accepted_and_every_one_the_daemon_knows_is_shown() {
    let doc = doc();
    let shown: BTreeSet<&str> = blocks(&doc, "request")
        .iter()
        .map(|line| {
            let request = parse_request(line.as_bytes())
                .unwrap_or_else(|e| panic!("docs/protocol.md: {line}: {e}"));
            request.op()
        })
        .collect();
    // The daemon's own list of requests, as it tells a client that sent an unknown one.
    let refusal = parse_request(br#"{"op":"?"}"#).unwrap_err();
    let known: BTreeSet<&str> = refusal.split('`').skip(3).step_by(2).collect();
    assert!(
        known.contains("run") && known.contains("boundaries"),
        "{refusal}"
    );
    assert_eq!(shown, known, "requests the document does not show");
}

#[test]
fn every_reply_shown_reads_back_exactly_and_every_kind_is_shown() {
    let doc = doc();
    let mut kinds = BTreeSet::new();
    for line in blocks(&doc, "reply") {
        let written: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("docs/protocol.md: not JSON: {line}: {e}"));
        let reply: Reply = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("docs/protocol.md: not a reply: {line}: {e}"));
        assert_eq!(
            serde_json::to_value(&reply).unwrap(),
            written,
            "docs/protocol.md: a reply that does not read back as written"
        );
        kinds.insert(kind(&reply));
    }
    let all: BTreeSet<&str> = [
        "error",
        "started",
        "token",
        "ended",
        "jobs",
        "matrix",
        "stats",
        "nodes",
        "boundaries",
        "submitted",
        "done",
        "history",
    ]
    .into();
    assert_eq!(kinds, all, "reply kinds the document does not show");
}

#[test]
fn every_refusal_shown_is_refused() {
    let bad = blocks(&doc(), "bad-request");
    assert!(bad.len() >= 3);
    for line in bad {
        assert!(
            parse_request(line.as_bytes()).is_err(),
            "docs/protocol.md: {line} was accepted"
        );
    }
}
