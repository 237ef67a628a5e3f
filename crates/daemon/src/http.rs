//! The daemon's HTTP side (`--http`): `/metrics` for Prometheus. Off unless asked for, on
//! loopback unless told another address; read-only and the same for whoever connects (no job
//! id, user or command is in it).
//!
//! One thread, polling: it reads request heads from at most [`MOST_PENDING`] connections at
//! once, each within [`DEADLINE`], and answers a whole head at once (a scrape takes the state's
//! lock for a moment). A new connection is read at once; past the limit it pushes out the
//! oldest connection that has sent nothing (else the oldest): idle connections cannot keep a
//! scrape out. (A fixed pool of threads with a queue let 40 idle connections time a scrape
//! out; pushing out the oldest whatever it had sent let a burst of empty connects close 41 of
//! 100 scrapes unanswered.)

use crate::daemon::Shared;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections whose request head is still coming.
const MOST_PENDING: usize = 1024;
/// Connections taken per round: the heads of those taken before are read between rounds, so
/// a burst of empty connects cannot push out a scrape whose head is on its way.
const ACCEPTS_PER_ROUND: usize = 64;
/// The kernel's queue of connections not yet taken (std's default is 128: a burst filled it
/// and a scrape's connect waited for a SYN retry, a second).
const BACKLOG: libc::c_int = 4096;
/// A head must arrive whole within this, and be no longer than this.
const DEADLINE: Duration = Duration::from_secs(2);
const MOST_HEAD_BYTES: usize = 8 << 10;
/// An answer the client does not take within this is dropped.
const WRITE_DEADLINE: Duration = Duration::from_millis(500);

const METRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

struct Pending {
    stream: TcpStream,
    since: Instant,
    head: Vec<u8>,
}

/// Serves `listener` on a thread of its own for the daemon's life.
pub fn serve(listener: TcpListener, shared: Arc<Shared>) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    // SAFETY: listen(2) on our own listening socket only changes its backlog.
    if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    std::thread::Builder::new()
        .name("cosched-http".into())
        .spawn(move || run(&listener, &shared))?;
    Ok(())
}

fn run(listener: &TcpListener, shared: &Shared) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    loop {
        let now = Instant::now();
        pending.retain(|p| now.duration_since(p.since) < DEADLINE);
        let wait = pending.front().map_or(DEADLINE, |p| {
            DEADLINE.saturating_sub(now.duration_since(p.since))
        });
        let mut polled: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(pending.iter().map(|p| p.stream.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `polled` is a valid array of pollfd for the call.
        let ready = unsafe {
            libc::poll(
                polled.as_mut_ptr(),
                polled.len() as libc::nfds_t,
                wait.as_millis().clamp(1, i32::MAX as u128) as i32,
            )
        };
        if ready < 0 {
            // Interrupted (or out of resources): try again shortly, never spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        // Heads first (indices shift once connections are added or removed).
        let mut done = Vec::new();
        for (index, entry) in polled.iter().enumerate().skip(1) {
            if entry.revents == 0 {
                continue;
            }
            let slot = index - 1;
            if let Some(finished) = read_more(&mut pending[slot]) {
                done.push((slot, finished));
            }
        }
        for (slot, finished) in done.into_iter().rev() {
            if let Some(p) = pending.remove(slot) {
                finish(&p, finished, shared);
            }
        }
        if polled[0].revents != 0 {
            for _ in 0..ACCEPTS_PER_ROUND {
                let Ok((stream, _)) = listener.accept() else {
                    break;
                };
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let mut p = Pending {
                    stream,
                    since: Instant::now(),
                    head: Vec::new(),
                };
                // A client that sent its request with its connect is answered now.
                if let Some(finished) = read_more(&mut p) {
                    finish(&p, finished, shared);
                    continue;
                }
                if pending.len() >= MOST_PENDING {
                    let silent = pending.iter().position(|q| q.head.is_empty()).unwrap_or(0);
                    pending.remove(silent);
                }
                pending.push_back(p);
            }
        }
    }
}

fn finish(p: &Pending, finished: Result<String, Option<String>>, shared: &Shared) {
    match finished {
        Ok(line) => answer(&p.stream, &line, shared),
        Err(Some(why)) => respond(&p.stream, 400, "text/plain", &format!("{why}\n")),
        Err(None) => {}
    }
}

/// Reads what has come; the request line once the head is whole, an error to answer, or
/// `Err(None)` when the client left. `None`: more is to come.
fn read_more(p: &mut Pending) -> Option<Result<String, Option<String>>> {
    let mut chunk = [0u8; 2048];
    let n = match (&p.stream).read(&mut chunk) {
        Ok(0) => return Some(Err(None)),
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return None,
        Err(_) => return Some(Err(None)),
    };
    // Only what came now (and the three bytes before) can complete the head: a head
    // trickled a byte at a time is not rescanned whole at every byte.
    let fresh = p.head.len().saturating_sub(3);
    p.head.extend_from_slice(&chunk[..n]);
    if p.head[fresh..].windows(4).any(|w| w == b"\r\n\r\n") {
        let line = p.head.split(|&b| b == b'\n').next().unwrap_or_default();
        return Some(
            String::from_utf8(line.to_vec())
                .map_err(|_| Some("the request line is not text".to_string())),
        );
    }
    (p.head.len() > MOST_HEAD_BYTES).then(|| {
        Err(Some(format!(
            "a request head is at most {MOST_HEAD_BYTES} bytes"
        )))
    })
}

fn answer(stream: &TcpStream, line: &str, shared: &Shared) {
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    match (method, path) {
        ("GET", "/metrics") => {
            let scrape = shared.with(|inner, now| inner.scrape(now));
            respond(stream, 200, METRICS_TYPE, &crate::metrics::encode(scrape));
        }
        ("GET", "/") => respond(
            stream,
            200,
            "text/plain",
            "cosched: the figures are at /metrics\n",
        ),
        ("GET", _) => respond(stream, 404, "text/plain", "no such page: try /metrics\n"),
        _ => respond(stream, 405, "text/plain", "only GET is served\n"),
    }
}

fn respond(mut stream: &TcpStream, status: u16, kind: &str, body: &str) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(WRITE_DEADLINE));
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Method Not Allowed",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    // A client that left is its own loss (and not worth a log line an attacker could flood).
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()));
}
