//! A real etcd for tests (Debian's etcd-server, installed by scripts/deps): one member or
//! several, on loopback ports of their own, data on tmpfs, killed by pid when dropped. Tests of
//! this crate and of the cluster use it; never a fake. It serves TLS with client certificates
//! required (`--client-cert-auth`), as a cluster's etcd should, unless started plain; the
//! certificates come from a CA of its own (openssl, installed by scripts/deps).

use crate::{Client, Credentials, Identity, Tls};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Member {
    /// None once killed.
    child: Option<Child>,
    dir: PathBuf,
    url: String,
}

pub struct Etcd {
    members: Vec<Member>,
    /// Every member's client URL, comma-separated: what `--etcd` takes.
    pub url: String,
    /// The first member's `/metrics`, plain HTTP on loopback (no client certificate needed).
    pub metrics_url: String,
    /// The CA, and the client's certificate and key, when etcd serves TLS.
    pki: Option<(Pki, Identity, Tls)>,
    /// Root's, once `enable_auth` has run: `client` then authenticates.
    credentials: Option<Credentials>,
    /// The password in a file of root's (0600), for `--etcd-password-file`.
    password_file: Option<PathBuf>,
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Etcd {
    /// Starts a one-member etcd serving TLS and waits until it answers (panics after 30 s: a
    /// test helper).
    pub fn start(name: &str) -> Etcd {
        Etcd::start_members(name, 1)
    }

    /// The same over plain HTTP.
    pub fn start_plain(name: &str) -> Etcd {
        Etcd::start_with(name, 1, 1, false)
    }

    /// Starts an etcd cluster of `count` members serving TLS and waits until every member
    /// answers.
    pub fn start_members(name: &str, count: usize) -> Etcd {
        // Tokens die after a second unused: clients' renewal runs in every test.
        Etcd::start_with(name, count, 1, true)
    }

    /// The same, with auth tokens that die after `token_ttl_s` unused (etcd's default is 300:
    /// each authentication is a write, which a benchmark of writes must not be made of), and
    /// TLS or not.
    pub fn start_with(name: &str, count: usize, token_ttl_s: u32, tls: bool) -> Etcd {
        // A port `free_port` found free may be taken before etcd binds it (tests start etcds
        // side by side): that member exits at once, and a fresh start takes other ports.
        let mut why = String::new();
        for _ in 0..3 {
            match Etcd::launch(name, count, token_ttl_s, tls) {
                Ok(etcd) => return etcd,
                Err(exited) => why = exited,
            }
        }
        panic!("{why}, three times");
    }

    /// One try of `start_with`: an error when a member exits before it answers.
    fn launch(name: &str, count: usize, token_ttl_s: u32, tls: bool) -> Result<Etcd, String> {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let pki = tls.then(|| {
            let pki =
                Pki::new(&base.join(format!("cosched-etcd-{name}-{}-tls", std::process::id())));
            let client = pki.issue("cosched-test-client");
            let loaded = Tls::load(&pki.ca(), Some(&client)).expect("the test CA's files load");
            (pki, client, loaded)
        });
        let server = pki
            .as_ref()
            .map(|(pki, _, _)| pki.issue("cosched-test-etcd"));
        let scheme = if tls { "https" } else { "http" };
        let metrics_port = free_port();
        let ports: Vec<(u16, u16)> = (0..count).map(|_| (free_port(), free_port())).collect();
        let initial_cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let members: Vec<Member> = ports
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| {
                let dir = base.join(format!("cosched-etcd-{name}-{}-m{i}", std::process::id()));
                let _ = std::fs::remove_dir_all(&dir);
                let url = format!("{scheme}://127.0.0.1:{client}");
                let peer_url = format!("http://127.0.0.1:{peer}");
                let mut command = Command::new("etcd");
                command
                    .args(["--name", &format!("m{i}"), "--data-dir"])
                    .arg(&dir)
                    .args([
                        "--listen-client-urls",
                        &url,
                        "--advertise-client-urls",
                        &url,
                    ])
                    .args(["--listen-peer-urls", &peer_url])
                    .args(["--initial-advertise-peer-urls", &peer_url])
                    .args(["--initial-cluster", &initial_cluster])
                    .args([
                        "--initial-cluster-token",
                        &format!("{name}-{}", std::process::id()),
                    ])
                    .args(["--log-level", "error"])
                    .args(["--auth-token-ttl", &token_ttl_s.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                if let (Some((pki, _, _)), Some(server)) = (&pki, &server) {
                    command
                        .arg("--trusted-ca-file")
                        .arg(pki.ca())
                        .arg("--cert-file")
                        .arg(&server.cert)
                        .arg("--key-file")
                        .arg(&server.key)
                        .arg("--client-cert-auth");
                }
                if i == 0 {
                    command.args([
                        "--listen-metrics-urls",
                        &format!("http://127.0.0.1:{metrics_port}"),
                    ]);
                }
                // etcd reads every ETCD_* variable as a flag.
                for (key, _) in std::env::vars() {
                    if key.starts_with("ETCD_") {
                        command.env_remove(key);
                    }
                }
                let child = command.spawn().unwrap_or_else(|e| {
                    panic!("cannot start etcd ({e}): scripts/deps installs Debian's etcd-server")
                });
                Member {
                    child: Some(child),
                    dir,
                    url,
                }
            })
            .collect();
        let mut etcd = Etcd {
            members,
            url: String::new(),
            metrics_url: format!("http://127.0.0.1:{metrics_port}/metrics"),
            pki,
            credentials: None,
            password_file: None,
        };
        let start = Instant::now();
        let clients: Vec<Client> = (etcd.members.iter())
            .map(|member| etcd.member_client(&member.url))
            .collect();
        for (member, client) in clients.iter().enumerate() {
            while client.get("/ready").is_err() {
                let member = &mut etcd.members[member];
                let exited = member
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = exited {
                    return Err(format!(
                        "etcd member {} exited before it answered ({status})",
                        member.url
                    ));
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "etcd member {} did not answer within 30 s",
                    member.url
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // The leader first: clients start on it, so killing it (`kill_leader`) takes away the
        // member they use, the hard case.
        let leader = etcd.members.iter().position(|m| etcd.leads(m)).unwrap_or(0);
        etcd.members.swap(0, leader);
        etcd.url = etcd
            .members
            .iter()
            .map(|m| m.url.as_str())
            .collect::<Vec<_>>()
            .join(",");
        Ok(etcd)
    }

    /// A client of every member (root's, once auth is on).
    pub fn client(&self) -> Client {
        let urls: Vec<String> = self.members.iter().map(|m| m.url.clone()).collect();
        let client = Client::new(&urls, crate::REQUEST_TIMEOUT, self.tls()).expect("a URL");
        match &self.credentials {
            Some(credentials) => client.with_credentials(credentials.clone()),
            None => client,
        }
    }

    /// The client's TLS settings (the CA, its certificate and key), when etcd serves TLS.
    pub fn tls(&self) -> Option<&Tls> {
        self.pki.as_ref().map(|(_, _, tls)| tls)
    }

    /// The CA that signed etcd's certificate and the client's, when etcd serves TLS.
    pub fn pki(&self) -> Option<&Pki> {
        self.pki.as_ref().map(|(pki, _, _)| pki)
    }

    /// Turns etcd's auth on with a root user of a fresh password, and returns it.
    pub fn enable_auth(&mut self) -> Credentials {
        let credentials = Credentials {
            user: "root".into(),
            password: format!("pw-{}-{}", std::process::id(), free_port()),
        };
        self.client()
            .enable_auth(&credentials)
            .expect("etcd enables auth");
        let file = self.members[0].dir.with_extension("password");
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&file)
                .expect("the password file");
            writeln!(out, "{}", credentials.password).expect("the password file");
        }
        self.password_file = Some(file);
        self.credentials = Some(credentials.clone());
        credentials
    }

    /// What a controller or an agent is given to reach this etcd: its members, the CA and
    /// the client's certificate and key with TLS, and the password file once auth is on
    /// (else `--etcd-insecure`).
    pub fn flags(&self) -> Vec<String> {
        let mut flags = vec!["--etcd".to_string(), self.url.clone()];
        if let Some((pki, client, _)) = &self.pki {
            for (flag, path) in [
                ("--etcd-ca", pki.ca()),
                ("--etcd-cert", client.cert.clone()),
                ("--etcd-key", client.key.clone()),
            ] {
                flags.push(flag.into());
                flags.push(path.display().to_string());
            }
        }
        match &self.password_file {
            Some(file) => {
                flags.push("--etcd-password-file".into());
                flags.push(file.display().to_string());
            }
            None => flags.push("--etcd-insecure".into()),
        }
        flags
    }

    /// The process ids of the members still running.
    pub fn pids(&self) -> Vec<u32> {
        self.members
            .iter()
            .filter_map(|m| m.child.as_ref().map(Child::id))
            .collect()
    }

    /// Stops (SIGSTOP) or continues (SIGCONT) every member: a silent cut, as a hung machine.
    pub fn pause(&self, paused: bool) {
        let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
        for child in self.members.iter().filter_map(|m| m.child.as_ref()) {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// Kills (SIGKILL) the member that leads the etcd cluster now; returns its URL.
    pub fn kill_leader(&mut self) -> String {
        let leader = self
            .members
            .iter()
            .position(|m| m.child.is_some() && self.leads(m))
            .expect("a member that leads");
        let leader = &mut self.members[leader];
        if let Some(mut child) = leader.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        leader.url.clone()
    }
}

impl Etcd {
    fn leads(&self, member: &Member) -> bool {
        self.member_client(&member.url)
            .answers_as_leader()
            .unwrap_or(false)
    }

    fn member_client(&self, url: &str) -> Client {
        Client::new(&[url.to_string()], Duration::from_secs(5), self.tls()).expect("a URL")
    }
}

/// A certificate authority of a test's own, in a directory only its owner may enter, and the
/// certificates it signs (ECDSA P-256, made by openssl, valid two days).
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// A new CA in `dir` (made afresh, mode 0700).
    pub fn new(dir: &Path) -> Pki {
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .expect("the test CA's directory");
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        // Named after its directory: two CAs of one name would be taken for one another.
        let name = format!(
            "ca-{}",
            dir.file_name().unwrap_or_default().to_string_lossy()
        );
        pki.openssl(
            "ca",
            &format!("/CN={name}"),
            &[
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        pki
    }

    /// The CA's certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A certificate and key for `name`, good for a server at 127.0.0.1 and for a client.
    /// No common name: with auth on, etcd's gateway refuses a client certificate that has one
    /// (it could not map it to an etcd user), so `name` is the organizational unit.
    pub fn issue(&self, name: &str) -> Identity {
        let ca = self.ca();
        let ca_key = self.dir.join("ca.key");
        self.openssl(
            name,
            &format!("/O=cosched/OU={name}"),
            &[
                "-CA",
                ca.to_str().expect("a UTF-8 path"),
                "-CAkey",
                ca_key.to_str().expect("a UTF-8 path"),
                "-addext",
                "basicConstraints=critical,CA:FALSE",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-addext",
                "extendedKeyUsage=serverAuth,clientAuth",
            ],
        );
        Identity {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
        }
    }

    /// `openssl req -x509`: a new key `FILE.key` (0600) and its certificate `FILE.pem`, for
    /// `subject`.
    fn openssl(&self, file: &str, subject: &str, extra: &[&str]) {
        let out = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args(["-config", "/dev/null", "-subj", subject])
            .arg("-keyout")
            .arg(self.dir.join(format!("{file}.key")))
            .arg("-out")
            .arg(self.dir.join(format!("{file}.pem")))
            .args(extra)
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl ({e}): scripts/deps installs it"));
        assert!(out.status.success(), "openssl for {file}: {out:?}");
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let _ = std::fs::remove_dir_all(&member.dir);
        }
        if let Some(file) = &self.password_file {
            let _ = std::fs::remove_file(file);
        }
    }
}
