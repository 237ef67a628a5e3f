//! TLS to a real etcd that requires client certificates (`--client-cert-auth`), with a CA of
//! the test's own: what gets in, what is refused and how it says so.

use cosched_etcd::testing::{Etcd, Pki};
use cosched_etcd::{Client, Identity, Tls};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn client(etcd: &Etcd, tls: &Tls) -> Client {
    Client::new(
        std::slice::from_ref(&etcd.url),
        Duration::from_secs(5),
        Some(tls),
    )
    .unwrap()
}

#[test]
fn only_a_client_with_a_key_the_ca_signed_gets_in() {
    let etcd = Etcd::start("tls-in");
    let pki = etcd.pki().unwrap();
    let c = etcd.client();
    c.put("/t/k", b"v", None).unwrap();
    let lease = c.grant(30).unwrap();
    assert!(c.keep_alive(lease.id).unwrap().ttl > 0);
    let mut watch = c.watch("/t/", 1).unwrap();
    assert_eq!(watch.next_batch().unwrap().len(), 1);
    // What a job could do with the CA's certificate (public) but no key: etcd refuses the
    // handshake, so no lease is renewed and none listed.
    let no_key = client(&etcd, &Tls::load(&pki.ca(), None).unwrap());
    let refused = no_key.keep_alive(lease.id).unwrap_err().to_string();
    assert!(
        refused.contains("no etcd member answers")
            && refused.contains("received fatal alert: BadCertificate"),
        "{refused}"
    );
    assert!(no_key.get("/t/k").is_err());
    // A key and certificate of another CA's: refused as well.
    let elsewhere =
        Pki::new(&std::env::temp_dir().join(format!("cosched-tls-other-{}", std::process::id())));
    let intruder = elsewhere.issue("intruder");
    let foreign = client(&etcd, &Tls::load(&pki.ca(), Some(&intruder)).unwrap());
    let refused = foreign.keep_alive(lease.id).unwrap_err().to_string();
    assert!(refused.contains("no etcd member answers"), "{refused}");
    assert!(c.keep_alive(lease.id).unwrap().ttl > 0);
}

#[test]
fn an_etcd_whose_certificate_another_ca_signed_is_refused() {
    let etcd = Etcd::start("tls-ca");
    let other =
        Pki::new(&std::env::temp_dir().join(format!("cosched-tls-ca-{}", std::process::id())));
    // The client's own key is good; the CA it trusts did not sign etcd's certificate.
    let mine = etcd.pki().unwrap().issue("client");
    let c = client(&etcd, &Tls::load(&other.ca(), Some(&mine)).unwrap());
    let refused = c.get("/t").unwrap_err().to_string();
    assert!(
        refused.contains(&format!(
            "{}: TLS handshake: invalid peer certificate: UnknownIssuer",
            etcd.url
        )),
        "{refused}"
    );
}

#[test]
fn with_tls_a_plain_endpoint_a_loose_key_and_a_bad_file_are_refused() {
    let pki =
        Pki::new(&std::env::temp_dir().join(format!("cosched-tls-files-{}", std::process::id())));
    let id = pki.issue("client");
    let tls = Tls::load(&pki.ca(), Some(&id)).unwrap();
    let plain = Client::new(
        &["http://10.0.0.1:2379".into()],
        Duration::from_secs(1),
        Some(&tls),
    );
    assert_eq!(
        plain.err().map(|e| e.to_string()).as_deref(),
        Some("etcd endpoint http://10.0.0.1:2379 is plain HTTP while TLS is configured: give https://10.0.0.1:2379")
    );
    let mixed = [
        "https://10.0.0.1:2379".into(),
        "http://10.0.0.2:2379".into(),
    ];
    assert!(Client::new(&mixed, Duration::from_secs(1), Some(&tls)).is_err());
    // A key others may read: a job could then talk to etcd as the agent.
    std::fs::set_permissions(&id.key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let loose = Tls::load(&pki.ca(), Some(&id)).unwrap_err().to_string();
    assert_eq!(
        loose,
        format!(
            "{} must be a file of root's that no one else may read or write (chown root, chmod 600): it holds this client's TLS key",
            id.key.display()
        )
    );
    std::fs::set_permissions(&id.key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Not the caller's (root's) own.
    std::os::unix::fs::chown(&id.key, Some(65534), None).unwrap();
    let theirs = Tls::load(&pki.ca(), Some(&id)).unwrap_err().to_string();
    assert!(theirs.contains("must be a file of root's"), "{theirs}");
    std::os::unix::fs::chown(&id.key, Some(0), None).unwrap();
    // A link to the key is not followed.
    let link = id.key.with_extension("link");
    std::os::unix::fs::symlink(&id.key, &link).unwrap();
    let linked = Identity {
        cert: id.cert.clone(),
        key: link.clone(),
    };
    let followed = Tls::load(&pki.ca(), Some(&linked)).unwrap_err().to_string();
    assert!(
        followed.starts_with(&format!("cannot read {}", link.display())),
        "{followed}"
    );
    // A certificate where the CA should be, a key where a certificate should be.
    let wrong = Identity {
        cert: id.key.clone(),
        key: id.key.clone(),
    };
    let error = Tls::load(&pki.ca(), Some(&wrong)).unwrap_err().to_string();
    assert!(error.contains("holds no PEM certificate"), "{error}");
    // A CA others may write: they could put theirs in its place and pass for etcd.
    std::fs::set_permissions(pki.ca(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let writable = Tls::load(&pki.ca(), Some(&id)).unwrap_err().to_string();
    assert_eq!(
        writable,
        format!(
            "{} must be a file of root's that no one else may write (chmod go-w): it holds the CA certificate that signed etcd's",
            pki.ca().display()
        )
    );
    std::fs::set_permissions(pki.ca(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let missing = pki.ca().with_extension("missing");
    let error = Tls::load(&missing, None).unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("cannot read {}", missing.display())),
        "{error}"
    );
    // The key of another certificate.
    let other = pki.issue("other");
    let crossed = Identity {
        cert: id.cert.clone(),
        key: other.key.clone(),
    };
    let error = Tls::load(&pki.ca(), Some(&crossed))
        .unwrap_err()
        .to_string();
    assert!(error.contains("do not go together"), "{error}");
}
