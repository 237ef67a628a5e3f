//! The daemon's policy file (needs root, as every daemon test): read at start, re-read on
//! SIGHUP (the limits applied, the rest named as waiting for a restart, an invalid file
//! refused with the running policy kept), and SIGTERM still stops it.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// Writes a policy file as root keeps one: root's, writable by no one else (whatever the
/// umask).
fn write_policy(file: &Path, text: &str) {
    std::fs::write(file, text).unwrap();
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// Waits until the daemon's log holds `line`; panics with the log if it never does.
fn logged(d: &Daemon, line: &str) {
    assert!(
        wait_until(Duration::from_secs(10), || d.log().contains(line)),
        "the daemon never logged {line:?}; its log:\n{}",
        d.log()
    );
}

#[test]
fn sighup_reloads_the_limits_names_what_needs_a_restart_and_refuses_a_bad_file() {
    cosched_os::require_root("the daemon's tests");
    let dir = std::env::temp_dir().join(format!("cosched-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cosched.toml");
    let write = |text: &str| write_policy(&file, text);
    write("[scheduler]\nquantum_ms = 100\nmpl = 4\n\n[limits]\nrunning_jobs = 4\n");
    let path = file.to_str().unwrap();
    // The command line's quantum overrides the file's.
    let mut d = Daemon::start(&["--config", path, "--quantum-ms", "50"]);
    logged(&d, "quantum 50 ms, ");
    logged(&d, &format!("; policy {path}"));

    write(
        "[scheduler]\nquantum_ms = 200\nmpl = 2\n\n[limits]\nrunning_jobs = 2\nqueued_jobs = 10\n",
    );
    d.signal(libc::SIGHUP);
    logged(
        &d,
        &format!(
            "policy reloaded from {path}: limits.queued_jobs \"none\" -> 10, limits.running_jobs 4 -> 2"
        ),
    );
    logged(&d, "scheduler.mpl changed: takes effect at restart");
    logged(
        &d,
        "scheduler.quantum_ms changed in the file, but the command line sets it",
    );
    assert!(!d.log().contains("scheduler.mode changed"), "{}", d.log());

    // A bad file changes nothing: one line says why, and the daemon keeps serving.
    write("[scheduler]\nmpl = 0\n");
    d.signal(libc::SIGHUP);
    logged(
        &d,
        &format!("policy not reloaded, the running one stays: {path}:2: scheduler.mpl = 0: must be from 1 to 64"),
    );
    write("[limits]\nrunnin_jobs = 1\n");
    d.signal(libc::SIGHUP);
    logged(&d, &format!("{path}:2: unknown key `runnin_jobs`"));
    // Nor is a file others may write: it sets every user's limits.
    write("[limits]\nrunning_jobs = 1\n");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    d.signal(libc::SIGHUP);
    logged(&d, &format!("{path}: mode 666 lets others write it"));
    let ps = d.cosched(&["ps"]);
    assert!(
        ps.status.success(),
        "{}",
        String::from_utf8_lossy(&ps.stderr)
    );

    // The next good file is compared with the last one applied, not the refused ones.
    write(
        "[scheduler]\nquantum_ms = 200\nmpl = 2\n\n[limits]\nrunning_jobs = 3\nqueued_jobs = 10\n",
    );
    d.signal(libc::SIGHUP);
    logged(&d, "limits.running_jobs 2 -> 3");

    d.signal(libc::SIGTERM);
    d.wait_exit();
    logged(&d, "stopping");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_daemon_refuses_to_start_on_a_bad_policy_file() {
    cosched_os::require_root("the daemon's tests");
    let file = std::env::temp_dir().join(format!("cosched-bad-{}.toml", std::process::id()));
    write_policy(&file, "[classes.gold]\nmax_time = \"1:00:00\"\n");
    let out = output_within(
        std::process::Command::new(COSCHED).args(["daemon", "--config", file.to_str().unwrap()]),
        Duration::from_secs(60),
    );
    std::fs::remove_file(&file).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(
        error.contains(":1: unknown key `gold`") && error.lines().count() == 1,
        "{error}"
    );
}

#[test]
fn a_policy_file_another_user_could_replace_is_refused_by_config_check_and_the_daemon() {
    cosched_os::require_root("the daemon's tests");
    let dir = std::env::temp_dir().join(format!("cosched-policy-trust-{}", std::process::id()));
    let open = dir.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let check = |file: &Path| {
        std::process::Command::new(COSCHED)
            .args(["config", "--check"])
            .arg(file)
            .output()
            .unwrap()
    };
    let good = dir.join("good.toml");
    write_policy(&good, "[limits]\nprocs = 1\n");
    assert!(check(&good).status.success());
    // Writable by others: the daemon refuses it, so --check (as root) does too.
    let loose = dir.join("loose.toml");
    write_policy(&loose, "[limits]\nprocs = 1\n");
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o666)).unwrap();
    refused(&check(&loose), "mode 666 lets others write it");
    // In a directory nobody may write, root's file could be swapped for a link.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let planted = open.join("site.toml");
    write_policy(&planted, "[limits]\nprocs = 1\n");
    refused(&check(&planted), "is not root's alone");
    // A link to a good file is not followed.
    let link = dir.join("link.toml");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let out = check(&link);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let daemon = output_within(
        std::process::Command::new(COSCHED)
            .args(["daemon", "--socket", "/nonexistent/s.sock", "--config"])
            .arg(&planted),
        Duration::from_secs(60),
    );
    refused(&daemon, "is not root's alone");
    let _ = std::fs::remove_dir_all(&dir);
}
