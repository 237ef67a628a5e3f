//! The daemon's HTTP side (`--http`): `/metrics` for Prometheus and the web console
//! ([`crate::console`]: `/`, its live part as server-sent events at `/events`, and actions
//! posted with a token). Off unless asked for, on loopback unless told another address.
//! `/metrics` is the same for whoever connects (no job id, user or command is in it), in
//! OpenMetrics when `Accept` asks for it, else in the Prometheus text format
//! ([`crate::metrics::Format`]). Every page answers `HEAD` with the head its `GET` would get.
//!
//! One thread, polling: it reads request heads from at most [`MOST_PENDING`] connections at
//! once, each within [`DEADLINE`], and answers a whole head at once (a scrape takes the state's
//! lock for a moment). A new connection is read at once; past the limit it pushes out the
//! oldest connection that has sent nothing (else the oldest): idle connections cannot keep a
//! scrape out. (A fixed pool of threads with a queue let 40 idle connections time a scrape
//! out; pushing out the oldest whatever it had sent let a burst of empty connects close 41 of
//! 100 scrapes unanswered.) Console viewers are held by the same thread: every [`TICK`] the
//! live part is made once and written to each without blocking; a viewer that does not take
//! it is dropped (its browser reconnects), and past [`MOST_VIEWERS`] a new one pushes out the
//! oldest.
//!
//! On loopback, a request must name a loopback host (`Host:`): a page elsewhere whose name
//! was made to point at 127.0.0.1 (DNS rebinding) cannot read the console.

use crate::console::{self, Snapshot};
use crate::daemon::Shared;
use cosched_controller::ApiError;
use cosched_proto::api::{JobView, Reply, Request};
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
/// An answer the client has not taken whole within this is dropped.
const SEND_DEADLINE: Duration = Duration::from_secs(5);
/// Answers being written at once (past it, the oldest is dropped): a few MB at most held.
const MOST_SENDING: usize = 64;

/// How often console viewers get the live part.
const TICK: Duration = Duration::from_millis(250);
/// Console viewers held at once.
const MOST_VIEWERS: usize = 64;
/// Unfinished and ended jobs the console lists (the latest of each).
const UNFINISHED_SHOWN: usize = 200;
const ENDED_SHOWN: usize = 20;
/// What every page says about where its parts may come from: nothing but this server.
const PAGE_POLICY: &str = "default-src 'self'; frame-ancestors 'none'";

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
    let address = listener.local_addr()?;
    let site = Site {
        loopback: address.ip().is_loopback(),
        port: address.port(),
    };
    std::thread::Builder::new()
        .name("cosched-http".into())
        .spawn(move || run(&listener, &shared, site))?;
    Ok(())
}

/// Where the side listens: what a request's `Host:` must name.
#[derive(Clone, Copy)]
struct Site {
    loopback: bool,
    port: u16,
}

impl Site {
    fn allows(&self, host: Option<&str>) -> bool {
        if !self.loopback {
            return true;
        }
        let Some(host) = host else {
            return false;
        };
        // The name is what a rebinding page cannot choose; a port, if given, must be ours.
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port)) if !port.contains(']') => (name, Some(port)),
            _ => (host, None),
        };
        ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .any(|loopback| name.eq_ignore_ascii_case(loopback))
            && port.is_none_or(|port| port == self.port.to_string())
    }
}

fn run(listener: &TcpListener, shared: &Shared, site: Site) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut viewers: VecDeque<TcpStream> = VecDeque::new();
    let mut sending: VecDeque<Sending> = VecDeque::new();
    let mut next_tick = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_tick {
            if !viewers.is_empty() {
                send_live(&mut viewers, shared);
            }
            next_tick = now + TICK;
        }
        pending.retain(|p| now.duration_since(p.since) < DEADLINE);
        sending.retain(|s| now.duration_since(s.since) < SEND_DEADLINE);
        let mut wait = pending.front().map_or(DEADLINE, |p| {
            DEADLINE.saturating_sub(now.duration_since(p.since))
        });
        if let Some(s) = sending.front() {
            wait = wait.min(SEND_DEADLINE.saturating_sub(now.duration_since(s.since)));
        }
        if !viewers.is_empty() {
            wait = wait.min(next_tick.saturating_duration_since(now));
        }
        let watch = |fd: &dyn AsRawFd, events| libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        };
        let mut polled: Vec<libc::pollfd> = std::iter::once(watch(listener, libc::POLLIN))
            .chain(pending.iter().map(|p| watch(&p.stream, libc::POLLIN)))
            .chain(viewers.iter().map(|v| watch(v, libc::POLLIN)))
            .chain(sending.iter().map(|s| watch(&s.stream, libc::POLLOUT)))
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
        let viewers_at = 1 + pending.len();
        let sending_at = viewers_at + viewers.len();
        // Answers on their way: as much as each socket takes now; done or broken ones go.
        for index in (0..sending.len()).rev() {
            if polled[sending_at + index].revents != 0 && !sending[index].more() {
                sending.remove(index);
            }
        }
        // A viewer never speaks after its request: anything but silence means it left.
        for index in (0..viewers.len()).rev() {
            if polled[viewers_at + index].revents != 0 {
                viewers.remove(index);
            }
        }
        // Heads next (indices shift once connections are added or removed).
        let mut done = Vec::new();
        for (index, entry) in polled[..viewers_at].iter().enumerate().skip(1) {
            if entry.revents == 0 {
                continue;
            }
            let slot = index - 1;
            if let Some(finished) = read_more(&mut pending[slot]) {
                done.push((slot, finished));
            }
        }
        let mut out = Outbox {
            viewers: &mut viewers,
            sending: &mut sending,
        };
        for (slot, finished) in done.into_iter().rev() {
            if let Some(p) = pending.remove(slot) {
                finish(p.stream, finished, shared, site, &mut out);
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
                    finish(p.stream, finished, shared, site, &mut out);
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

/// An answer being written without blocking: the one thread never waits on a client.
struct Sending {
    stream: TcpStream,
    bytes: Vec<u8>,
    sent: usize,
    since: Instant,
}

impl Sending {
    /// Writes what the socket takes now; whether more is to come.
    fn more(&mut self) -> bool {
        loop {
            match (&self.stream).write(&self.bytes[self.sent..]) {
                Ok(0) => return false,
                Ok(n) => {
                    self.sent += n;
                    if self.sent == self.bytes.len() {
                        return false;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
            }
        }
    }
}

/// Where finished heads' connections go: console viewers, or answers to write.
struct Outbox<'a> {
    viewers: &'a mut VecDeque<TcpStream>,
    sending: &'a mut VecDeque<Sending>,
}

impl Outbox<'_> {
    fn send(&mut self, stream: TcpStream, bytes: Vec<u8>) {
        let mut answer = Sending {
            stream,
            bytes,
            sent: 0,
            since: Instant::now(),
        };
        if answer.more() {
            if self.sending.len() >= MOST_SENDING {
                self.sending.pop_front();
            }
            self.sending.push_back(answer);
        }
    }

    fn view(&mut self, stream: TcpStream) {
        let start = format!("{EVENTS_HEAD}retry: 1000\n\n");
        if !matches!((&stream).write(start.as_bytes()), Ok(n) if n == start.len()) {
            return;
        }
        if self.viewers.len() >= MOST_VIEWERS {
            self.viewers.pop_front();
        }
        self.viewers.push_back(stream);
    }
}

fn finish(
    stream: TcpStream,
    finished: Result<String, Option<String>>,
    shared: &Shared,
    site: Site,
    out: &mut Outbox,
) {
    match finished {
        Ok(head) => match answer(&head, shared, site) {
            Answer::Bytes(bytes) => out.send(stream, bytes),
            Answer::Events => out.view(stream),
        },
        Err(Some(why)) => out.send(
            stream,
            Page::new(400, "text/plain", format!("{why}\n")).bytes(false),
        ),
        Err(None) => {}
    }
}

/// Reads what has come; the head once it is whole, an error to answer, or `Err(None)` when
/// the client left. `None`: more is to come.
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
    if let Some(end) = p.head[fresh..].windows(4).position(|w| w == b"\r\n\r\n") {
        let head = &p.head[..fresh + end];
        return Some(
            String::from_utf8(head.to_vec())
                .map_err(|_| Some("the request head is not text".to_string())),
        );
    }
    (p.head.len() > MOST_HEAD_BYTES).then(|| {
        Err(Some(format!(
            "a request head is at most {MOST_HEAD_BYTES} bytes"
        )))
    })
}

/// The value of header `name` in `head`, if present.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })
}

/// What a request gets: bytes to write, or the live stream of the console.
enum Answer {
    Bytes(Vec<u8>),
    Events,
}

/// The head of the console's live stream (its body follows as long as the viewer stays).
const EVENTS_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                           Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\r\n";

/// Answers a whole head. `HEAD` gets what `GET` would get, but the body (the live stream's
/// head alone, without becoming a viewer).
fn answer(head: &str, shared: &Shared, site: Site) -> Answer {
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let head_only = method == "HEAD";
    let page = if !site.allows(header(head, "Host")) {
        Page::new(
            421,
            "text/plain",
            "this server answers to 127.0.0.1, localhost or [::1] (with its port) only\n",
        )
    } else {
        match (if head_only { "GET" } else { method }, path) {
            ("GET", "/metrics") => {
                let format = crate::metrics::Format::negotiate(header(head, "Accept"));
                let scrape = shared.with(|inner, now| inner.scrape(now));
                let body = crate::metrics::encode(scrape, shared.push_stats(), format);
                // Caches must keep each format apart.
                Page::new(200, format.content_type(), body).with("Vary: Accept\r\n")
            }
            ("GET", "/") => Page::new(
                200,
                "text/html; charset=utf-8",
                console::page(&snapshot(shared)),
            ),
            ("GET", "/console.js") => {
                Page::new(200, "text/javascript; charset=utf-8", console::PAGE_SCRIPT)
            }
            ("GET", "/console.css") => {
                Page::new(200, "text/css; charset=utf-8", console::PAGE_STYLE)
            }
            ("GET", "/events") if head_only => {
                return Answer::Bytes(EVENTS_HEAD.as_bytes().to_vec())
            }
            ("GET", "/events") => return Answer::Events,
            ("GET", "/favicon.ico") => Page::new(204, "image/x-icon", ""),
            ("POST", path) if path.starts_with("/jobs/") => {
                let (status, reply) = act(path, header(head, "Authorization"), shared);
                let body = serde_json::to_string(&reply).expect("replies serialize") + "\n";
                Page::new(status, "application/json", body)
            }
            (_, path) if path.starts_with("/jobs/") => not_allowed(true),
            ("GET", _) => Page::new(
                404,
                "text/plain",
                "no such page: the console is at /, the figures at /metrics\n",
            ),
            _ => not_allowed(false),
        }
    };
    Answer::Bytes(page.bytes(head_only))
}

/// 405, naming the methods the path takes: an action is posted, every page is read.
fn not_allowed(action: bool) -> Page {
    let (allow, why) = if action {
        (
            "Allow: POST\r\n",
            "an action is POST /jobs/ID/ACTION with a token\n",
        )
    } else {
        (
            "Allow: GET, HEAD\r\n",
            "only GET and HEAD are served here (and POST /jobs/ID/ACTION with a token)\n",
        )
    };
    Page::new(405, "text/plain", why).with(allow)
}

/// What the console shows now: unfinished jobs and the latest ended ones.
fn snapshot(shared: &Shared) -> Snapshot {
    shared.with(|inner, now| {
        // The latest of each, newest first: a page stays small whatever the queue holds.
        let (ended, unfinished): (Vec<JobView>, Vec<JobView>) = inner
            .jobs(true, None, now)
            .into_iter()
            .rev()
            .partition(|j| j.state.ended());
        let hidden = unfinished.len().saturating_sub(UNFINISHED_SHOWN);
        let jobs = unfinished
            .into_iter()
            .take(UNFINISHED_SHOWN)
            .chain(ended.into_iter().take(ENDED_SHOWN))
            .collect();
        Snapshot {
            now_us: now,
            jobs,
            hidden,
            matrix: inner.matrix(now),
            nodes: inner.nodes(now),
            stats: inner.stats(),
        }
    })
}

/// Makes the live part once and writes it to every viewer without waiting: one that cannot
/// take it whole now is dropped.
fn send_live(viewers: &mut VecDeque<TcpStream>, shared: &Shared) {
    let live = console::live(&snapshot(shared));
    let mut event = String::with_capacity(live.len() + 64);
    for line in live.lines() {
        event.push_str("data: ");
        event.push_str(line);
        event.push('\n');
    }
    event.push('\n');
    viewers
        .retain(|viewer| matches!((&*viewer).write(event.as_bytes()), Ok(n) if n == event.len()));
}

/// An action from the console: `POST /jobs/ID/suspend|resume|cancel` or `/jobs/ID/class/C`,
/// as the token's holder, with the socket's authorization. The status and the socket's reply.
fn act(path: &str, authorization: Option<&str>, shared: &Shared) -> (u16, Reply) {
    let Some(who) = authorization
        .and_then(|a| a.strip_prefix("Bearer "))
        .and_then(|token| shared.tokens().holder(token.trim()))
    else {
        return (
            401,
            Reply::error(
                "acting needs a token: run `cosched console-token` and paste what it prints",
            ),
        );
    };
    let mut parts = path.trim_start_matches("/jobs/").split('/');
    let job = parts.next().and_then(|id| id.parse().ok());
    let (action, class, extra) = (parts.next(), parts.next(), parts.next());
    let no_such = || (404, Reply::error(format!("no such action: {path}")));
    let Some(job) = job.filter(|_| extra.is_none()) else {
        return no_such();
    };
    let request = match (action, class) {
        (Some("suspend"), None) => Request::Suspend { job },
        (Some("resume"), None) => Request::Resume { job },
        (Some("cancel"), None) => Request::Cancel { job },
        (Some("class"), Some(class)) => Request::Class {
            job,
            class: class.to_string(),
        },
        _ => return no_such(),
    };
    let op = request.op();
    let done = shared.act(&who, request);
    shared.with(|inner, _| inner.count_request(op, done.is_ok()));
    match done {
        Ok(reply) => (200, reply),
        Err(error) => {
            let status = match error {
                ApiError::NotOwner { .. } | ApiError::Forbidden(_) => 403,
                ApiError::NoSuchJob(_) => 404,
                ApiError::WrongState { .. } => 409,
                ApiError::Busy(_) => 503,
                ApiError::Internal(_) => 500,
                ApiError::Invalid(_) => 400,
            };
            (status, Reply::error(error.to_string()))
        }
    }
}

/// An answer: its status, type, body and headers of its own (each ending in CRLF).
struct Page {
    status: u16,
    kind: &'static str,
    body: std::borrow::Cow<'static, str>,
    extra: &'static str,
}

impl Page {
    fn new(
        status: u16,
        kind: &'static str,
        body: impl Into<std::borrow::Cow<'static, str>>,
    ) -> Page {
        Page {
            status,
            kind,
            body: body.into(),
            extra: "",
        }
    }

    /// The page with `header` (ending in CRLF) among its headers.
    fn with(self, header: &'static str) -> Page {
        Page {
            extra: header,
            ..self
        }
    }

    /// The answer to write: head and body, or the head alone (to `HEAD`, with the length the
    /// body has); the connection closes after it.
    fn bytes(&self, head_only: bool) -> Vec<u8> {
        let Page {
            status,
            kind,
            body,
            extra,
        } = self;
        let reason = match status {
            200 => "OK",
            204 => "No Content",
            400 => "Bad Request",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "Not Found",
            409 => "Conflict",
            421 => "Misdirected Request",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "Method Not Allowed",
        };
        let mut bytes = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
             {extra}Content-Security-Policy: {PAGE_POLICY}\r\nX-Content-Type-Options: nosniff\r\n\
             Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        if !head_only {
            bytes.extend_from_slice(body.as_bytes());
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_loopback_only_loopback_names_with_the_port_are_answered() {
        let site = Site {
            loopback: true,
            port: 9464,
        };
        for host in [
            "127.0.0.1:9464",
            "localhost:9464",
            "LOCALHOST:9464",
            "[::1]:9464",
            "localhost",
            "[::1]",
        ] {
            assert!(site.allows(Some(host)), "{host}");
        }
        for host in [
            "evil.example:9464",
            "evil.example",
            "127.0.0.1:80",
            "[::1]:80",
            "",
        ] {
            assert!(!site.allows(Some(host)), "{host}");
        }
        assert!(!site.allows(None));
        let anywhere = Site {
            loopback: false,
            port: 9464,
        };
        assert!(anywhere.allows(Some("node7.cluster:9464")));
    }

    #[test]
    fn headers_are_found_by_name_in_any_case() {
        let head = "POST /jobs/3/suspend HTTP/1.1\r\nHost: localhost:1\r\nauthorization: Bearer ab";
        assert_eq!(header(head, "Authorization"), Some("Bearer ab"));
        assert_eq!(header(head, "host"), Some("localhost:1"));
        assert_eq!(header(head, "Cookie"), None);
    }
}
