//! TLS to etcd: the CA that signed etcd's certificate, and this client's certificate and key
//! (etcd's `--client-cert-auth` refuses the handshake of a client without one its CA signed).
//!
//! The key is what lets a process in: when the caller is root, the file must be root's and
//! no one else's to read or write, or a job on the node could read it and talk to etcd as the
//! agent. There are no system roots to fall back on (none offline, and etcd's CA is a
//! cluster's own): an `https` endpoint needs the CA.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A key, password or certificate file that cannot be used: unreadable, or open to others.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} must be a file of {owner}'s that no one else may read or write (chown {owner}, chmod 600): it holds {holds}", path.display())]
    Exposed {
        path: PathBuf,
        owner: String,
        holds: &'static str,
    },
    #[error("{} must be a file of {owners}'s that no one else may write (chmod go-w): it holds {holds}", path.display())]
    Writable {
        path: PathBuf,
        owners: String,
        holds: &'static str,
    },
    #[error("{} is larger than {limit} bytes: it cannot be {holds}", path.display())]
    TooLarge {
        path: PathBuf,
        limit: u64,
        holds: &'static str,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{} holds no PEM {what} ({why})", path.display())]
    Pem {
        path: PathBuf,
        what: &'static str,
        why: String,
    },
    #[error("{}: {why}", path.display())]
    BadCa { path: PathBuf, why: String },
    #[error("the certificate {} and the key {} do not go together: {why}", cert.display(), key.display())]
    Identity {
        cert: PathBuf,
        key: PathBuf,
        why: String,
    },
}

/// The most a certificate, key or password file may hold: past this it is not one.
const MOST: u64 = 1 << 20;

/// The bytes of `path`, a file that must be the caller's own (root's, for root) and closed to
/// everyone else: it holds `holds` (a key, a password). Links are not followed (a link in a
/// directory others can write would name any file).
pub fn read_private(path: &Path, holds: &'static str) -> Result<Vec<u8>, FileError> {
    read_checked(path, holds, true)
}

/// The bytes of `path`, which anyone may read but only the caller (or root) may write: a CA
/// certificate another user could replace would make their server pass for etcd.
fn read_public(path: &Path, holds: &'static str) -> Result<Vec<u8>, FileError> {
    read_checked(path, holds, false)
}

fn read_checked(path: &Path, holds: &'static str, private: bool) -> Result<Vec<u8>, FileError> {
    let read = |source| FileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(read)?;
    let meta = file.metadata().map_err(read)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let owner = if me == 0 {
        "root".into()
    } else {
        format!("uid {me}")
    };
    let path = path.to_path_buf();
    if private && (!meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0) {
        return Err(FileError::Exposed { path, owner, holds });
    }
    if !private && (!meta.is_file() || ![me, 0].contains(&meta.uid()) || meta.mode() & 0o022 != 0) {
        let owners = if me == 0 {
            owner
        } else {
            format!("{owner} or root")
        };
        return Err(FileError::Writable {
            path,
            owners,
            holds,
        });
    }
    if meta.len() > MOST {
        return Err(FileError::TooLarge {
            path,
            limit: MOST,
            holds,
        });
    }
    let mut bytes = Vec::new();
    file.take(MOST)
        .read_to_end(&mut bytes)
        .map_err(|source| FileError::Read { path, source })?;
    Ok(bytes)
}

/// A client's TLS settings for etcd, loaded and checked once, shared by every connection.
#[derive(Clone)]
pub struct Tls(pub(crate) Arc<ClientConfig>);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls { .. }")
    }
}

/// Where a client's certificate and its key are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Tls {
    /// Trusts only the certificates in `ca` (PEM) for etcd's; presents `identity` when given
    /// (an etcd with `--client-cert-auth` refuses a client without one).
    pub fn load(ca: &Path, identity: Option<&Identity>) -> Result<Tls, TlsError> {
        let mut roots = RootCertStore::empty();
        for cert in certificates(ca, "the CA certificate that signed etcd's")? {
            roots.add(cert).map_err(|e| TlsError::BadCa {
                path: ca.to_path_buf(),
                why: e.to_string(),
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring serves TLS 1.2 and 1.3")
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some(Identity { cert, key }) => {
                let chain = certificates(cert, "this client's certificate")?;
                let pem = read_private(key, "this client's TLS key")?;
                let private = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
                    path: key.clone(),
                    what: "private key",
                    why: e.to_string(),
                })?;
                builder
                    .with_client_auth_cert(chain, private)
                    .map_err(|e| TlsError::Identity {
                        cert: cert.clone(),
                        key: key.clone(),
                        why: e.to_string(),
                    })?
            }
        };
        Ok(Tls(Arc::new(config)))
    }
}

/// Every certificate in the PEM file `path` (at least one), which holds `holds`.
fn certificates(
    path: &Path,
    holds: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_public(path, holds)?;
    let pem_error = |why: String| TlsError::Pem {
        path: path.to_path_buf(),
        what: "certificate",
        why,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_error("no CERTIFICATE section".into()));
    }
    Ok(certs)
}
