//! The test workloads in `bench/workloads` (C programs built by its Makefile), and the one
//! JSON line each prints.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
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

/// The path of a workload program: built ones in `build/`, scripts (`*.sh`) beside the sources.
pub fn program(name: &str) -> String {
    let path = if name.ends_with(".sh") {
        dir().join(name)
    } else {
        dir().join("build").join(name)
    };
    path.to_string_lossy().into_owned()
}
