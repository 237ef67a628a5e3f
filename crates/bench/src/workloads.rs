//! The test workloads in `bench/workloads` (C programs built by its Makefile), and the one
//! JSON line each prints.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `bench/workloads` of this checkout.
pub fn dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/workloads"
    ))
}

/// Builds the workloads (make is quick when they are current).
pub fn build() -> Result<()> {
    let status = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(dir())
        .status()
        .context("running make in bench/workloads")?;
    if !status.success() {
        bail!("building bench/workloads failed ({status}); Open MPI needs `apt-get install openmpi-bin libopenmpi-dev`");
    }
    Ok(())
}

/// The host's cache-line round trip between the first two CPUs now (median of 10 short
/// samples, ~0.2 s): on a VM it says whether the host has put the vCPUs on cores sharing a
/// cache, which decides a fine-grain job's speed more than any scheduler (`cacheline.c`).
pub fn host_round_trip_ns() -> Option<f64> {
    #[derive(Deserialize)]
    struct Probe {
        median_ns: f64,
    }
    let out = Command::new(program("cacheline"))
        .args(["-n", "10", "-w", "20000"])
        .output()
        .ok()?;
    let probe: Probe = serde_json::from_slice(&out.stdout).ok()?;
    Some(probe.median_ns)
}

/// The path of a workload program: built ones in `build/`, scripts (`*.sh`) beside the sources.
pub fn program(name: &str) -> String {
    let path = if name.ends_with(".sh") {
        dir().join(name)
    } else {
        dir().join("build").join(name)
    };
    path.to_string_lossy().into_owned()
}

/// Submits a 2-process `burn` job that computes far longer than any measurement (the daemon
/// cancels it when it stops); returns its id.
pub fn submit_endless_gang(daemon: &crate::daemon::Daemon, output: &Path) -> Result<u64> {
    daemon.submit(2, output, &endless_burn())
}

/// Two threads that compute for longer than any run (cancelled at the end).
pub fn endless_burn() -> Vec<String> {
    [&program("burn"), "-t", "2", "-n", "100000000"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Two of [`submit_endless_gang`]: two gangs taking turns.
pub fn submit_two_endless_gangs(daemon: &crate::daemon::Daemon, output: &Path) -> Result<()> {
    for _ in 0..2 {
        submit_endless_gang(daemon, output)?;
    }
    Ok(())
}
