//! Invariant 26 (ARCHITECTURE.md): no reply channel crosses the seam. The controller reaches
//! agents only through `OrderSink` (one way) and never a process: it links neither the agent,
//! nor the cgroups, nor a transport, and its code calls no process-touching system call.

use std::path::Path;

const MANIFEST: &str = include_str!("../Cargo.toml");

/// The crates named in the manifest's `[dependencies]` table.
fn dependencies() -> Vec<String> {
    let section = MANIFEST
        .split("[dependencies]")
        .nth(1)
        .expect("a [dependencies] table");
    let section = section.split("\n[").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.split(['.', '=', ' ']).next())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(String::from)
        .collect()
}

#[test]
fn the_controller_links_no_agent_actuator_or_transport() {
    let deps = dependencies();
    assert!(deps.iter().any(|d| d == "cosched-proto"), "{deps:?}");
    for forbidden in [
        "cosched-agent",
        "cosched-cgroups",
        "cosched-daemon",
        "cosched-cluster",
        "cosched-etcd",
        "rusqlite",
        "libc",
    ] {
        assert!(
            !deps.iter().any(|d| d == forbidden),
            "the controller depends on {forbidden}: {deps:?}"
        );
    }
}

#[test]
fn the_controllers_code_touches_no_process() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for call in ["kill(", "process::Command", "UnixStream", "waitpid"] {
            assert!(
                !text.contains(call),
                "{} uses {call}: the controller orders, agents act",
                path.display()
            );
        }
    }
}
