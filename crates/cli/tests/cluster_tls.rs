//! TLS to etcd from the controller and the agent (`--etcd-ca`, `--etcd-cert`, `--etcd-key`):
//! what they refuse, in one line, before or at their first word to etcd. A whole cluster over
//! TLS runs in cluster.rs (its etcd serves TLS with client certificates required).

mod common;

use common::*;
use cosched_etcd::testing::{Etcd, Pki};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// `flags` (an `Etcd`'s) with `--etcd` and the value of `flag` replaced.
fn with(flags: &[String], flag: &str, value: &str) -> Vec<String> {
    let mut flags = flags.to_vec();
    let at = flags.iter().position(|f| f == flag).unwrap() + 1;
    flags[at] = value.to_string();
    flags
}

#[test]
fn with_tls_a_plain_etcd_is_refused_and_so_is_an_etcd_the_ca_did_not_sign() {
    let plain = Etcd::start_plain("tls-plain");
    let tls = Etcd::start("tls-cli");
    let flags = tls.flags();
    assert!(flags.contains(&"--etcd-key".to_string()), "{flags:?}");
    // The TLS etcd's flags, pointed at the plain one: refused before a byte is sent (the
    // password would cross the network in clear).
    let at_plain = with(&flags, "--etcd", &plain.url);
    let expected = format!(
        "etcd endpoint {} is plain HTTP while TLS is configured: give https://{}",
        plain.url,
        plain.url.strip_prefix("http://").unwrap()
    );
    refused(&lone_agent("tls-plain", &at_plain), &expected);
    let state = std::env::temp_dir().join(format!("cosched-it-tls-d-{}", std::process::id()));
    let out = Command::new(COSCHED)
        .args(["daemon", "--state-dir"])
        .arg(&state)
        .arg("--socket")
        .arg(state.join("cosched.sock"))
        .args(&at_plain)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&state);
    refused(&out, &expected);
    // An https endpoint without the CA.
    let no_ca = [
        "--etcd".to_string(),
        tls.url.clone(),
        "--etcd-insecure".into(),
    ];
    let out = lone_agent("tls-noca", &no_ca);
    refused(
        &out,
        "is https but no CA is given to check etcd's certificate (--etcd-ca)",
    );
    // A CA that did not sign etcd's certificate: the agent stops at the handshake.
    let other =
        Pki::new(&std::env::temp_dir().join(format!("cosched-it-tls-ca-{}", std::process::id())));
    let other_ca = other.ca().display().to_string();
    let out = lone_agent("tls-ca", &with(&flags, "--etcd-ca", &other_ca));
    refused(
        &out,
        &format!(
            "{}: TLS handshake: invalid peer certificate: UnknownIssuer",
            tls.url
        ),
    );
}

#[test]
fn a_key_others_may_read_is_refused_naming_the_file() {
    let pki =
        Pki::new(&std::env::temp_dir().join(format!("cosched-it-tls-key-{}", std::process::id())));
    let id = pki.issue("agent-a");
    std::fs::set_permissions(&id.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let files = [
        "--etcd-insecure".to_string(),
        "--etcd".into(),
        "https://127.0.0.1:9".into(),
        "--etcd-ca".into(),
        pki.ca().display().to_string(),
        "--etcd-cert".into(),
        id.cert.display().to_string(),
        "--etcd-key".into(),
        id.key.display().to_string(),
    ];
    refused(
        &lone_agent("tls-key", &files),
        &format!(
            "{} must be a file of root's that no one else may read or write (chown root, chmod 600): it holds this client's TLS key",
            id.key.display()
        ),
    );
}
