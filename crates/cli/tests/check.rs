//! `cosched daemon --check --json`: the documented object (docs/clients.md), as root on this
//! machine (usable) and as nobody (who can make no cgroup: not usable, and says why).

mod common;

use common::{COSCHED, NOBODY};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::process::Command;

fn check(uid: u32) -> (bool, Value) {
    let out = Command::new(COSCHED)
        .args(["daemon", "--check", "--json"])
        .uid(uid)
        .gid(uid)
        .current_dir("/")
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), report)
}

/// The shape every report has, whatever the machine offers.
fn assert_shape(report: &Value) {
    let fields: Vec<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        ["actuator", "cpus", "features", "unusable_because", "usable"],
        "{report}"
    );
    assert!(report["cpus"].as_u64() > Some(0), "{report}");
    let usable = report["usable"].as_bool().unwrap();
    assert_eq!(report["actuator"].is_string(), usable, "{report}");
    assert_eq!(report["unusable_because"].is_string(), !usable, "{report}");
    let features = report["features"].as_array().unwrap();
    assert!(features.len() >= 7, "{report}");
    for feature in features {
        assert!(feature["name"].is_string() && feature["detail"].is_string());
        assert!(feature["available"].is_boolean(), "{feature}");
    }
}

#[test]
fn the_json_check_is_one_object_saying_whether_the_daemon_can_run_and_why_not() {
    cosched_os::require_root("daemon --check as root and as nobody");
    let (ok, report) = check(0);
    assert_shape(&report);
    assert!(ok && report["usable"] == true, "{report}");
    let (ok, report) = check(NOBODY);
    assert_shape(&report);
    assert!(!ok && report["usable"] == false, "{report}");
    // Nobody may make the scratch cgroup: the reason is the kernel's refusal.
    let why = report["unusable_because"].as_str().unwrap();
    assert!(why.contains("Permission denied"), "{report}");
    // Nor the probe that looks for the v2 freezer: it says so, rather than blame the kernel.
    let v2 = report["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "cgroup v2 freezer")
        .unwrap();
    if v2["detail"] != "no cgroup2 mount" {
        assert!(
            v2["detail"]
                .as_str()
                .unwrap()
                .contains("cannot make a cgroup"),
            "{v2}"
        );
    }
}
