//! A real etcd for tests (Debian's etcd-server, installed by scripts/deps): loopback ports of
//! its own, data on tmpfs, killed by pid when dropped. Tests of this crate and of the cluster
//! use it; never a fake.

use crate::Client;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Child,
    dir: PathBuf,
    pub url: String,
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Etcd {
    /// Starts a one-member etcd and waits until it answers (panics after 30 s: a test helper).
    pub fn start(name: &str) -> Etcd {
        let (client, peer) = (free_port(), free_port());
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("cosched-etcd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut command = Command::new("etcd");
        command
            .args(["--name", "t", "--data-dir"])
            .arg(&dir)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // etcd reads every ETCD_* variable as a flag.
        for (key, _) in std::env::vars() {
            if key.starts_with("ETCD_") {
                command.env_remove(key);
            }
        }
        let child = command.spawn().unwrap_or_else(|e| {
            panic!("cannot start etcd ({e}): scripts/deps installs Debian's etcd-server")
        });
        let etcd = Etcd { child, dir, url };
        let client = etcd.client();
        let start = Instant::now();
        while client.get("/ready").is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not answer on {} within 30 s",
                etcd.url
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        etcd
    }

    pub fn client(&self) -> Client {
        Client::new(std::slice::from_ref(&self.url), Duration::from_secs(5)).expect("a URL")
    }

    /// Stops (SIGSTOP) or continues (SIGCONT) the member: a silent cut, as a hung machine.
    pub fn pause(&self, paused: bool) {
        let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
