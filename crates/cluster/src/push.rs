//! The leader's push: what the controller writes for an agent (its orders, its part of a
//! generation, the generation header) sent to it over a TCP connection the agent keeps to
//! the leader, the moment etcd has committed the write. etcd stays the record and the
//! fallback: an agent follows its orders in etcd all the time, and the header whenever it has
//! no connection; the push only brings the same writes, with their revisions, sooner.
//!
//! Why: at 1,000 nodes etcd's delivery of one header to 1,000 watchers took 41 ms (p50) and
//! 66-117 ms (p99) with nothing else running on the 2-vCPU VM, and under churn it delayed
//! the controller's own writes (`bench/control-plane`, docs/cluster.md).
//!
//! Trust: the connection is plain TCP, so every frame is authenticated. The leader draws a
//! fresh 32-byte key when it starts and publishes it, with its address, in its leader key
//! (readable only by etcd's clients: agents and controllers). The leader opens each
//! connection with a random nonce; the agent answers with its node name under an HMAC-SHA256
//! of the key, and every frame the leader sends carries an HMAC over the nonce, its sequence
//! number and its bytes. A process that is not an agent cannot get frames (no key), and one
//! that binds the leader's port cannot feed an agent anything (no key either); a frame
//! replayed from another connection or out of order fails its tag.

use cosched_os::realtime::{make_realtime, PUSH_PRIORITY};
use cosched_proto::{Command, Generation, Histogram};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LOG: cosched_os::Log = cosched_os::Log::new("push");

/// Where the leader pushes from, and the key that authenticates it: in the leader key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushOffer {
    pub address: SocketAddr,
    /// The key, hex.
    pub key: String,
}

/// One write of the controller's, as etcd committed it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pushed {
    /// The first frame: from here on, every write for this node is pushed; what was
    /// committed before, the agent reads from etcd (so that a push never hands a write ahead
    /// of an earlier one the agent has not had).
    Joined,
    /// A write to the node's order queue (an order, or its part of a generation).
    Order {
        key: String,
        command: Command,
        revision: i64,
    },
    Header {
        generation: Generation,
        revision: i64,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("push from the leader at {address}: {source}")]
    Io {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("push from the leader at {address}: {why}")]
    Refused { address: SocketAddr, why: String },
    #[error("the leader's push key is not 64 hex digits")]
    Key,
}

const NONCE: usize = 32;
const TAG: usize = 32;
/// The most a frame may hold: a part of a generation for a node is a few KB.
const MOST_FRAME: usize = 1 << 20;
/// The most a greeting may hold: a node's name.
const MOST_HELLO: usize = 256;
/// How long a connection may take to say who it is: past this it is closed.
const HELLO_WITHIN: Duration = Duration::from_millis(500);
/// Connections saying who they are at once; more wait in a queue of [`WAITING`] (past that,
/// closed: the agents fall back on etcd and try again).
const GREETERS: usize = 4;
const WAITING: usize = 1_024;
const HELLO: &[u8] = b"cosched-push hello\0";
const FRAME: &[u8] = b"cosched-push frame\0";

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("the kernel's random source");
    bytes
}

fn tag(key: &hmac::Key, parts: &[&[u8]]) -> hmac::Tag {
    let mut context = hmac::Context::with_key(key);
    for part in parts {
        context.update(part);
    }
    context.sign()
}

fn verify(key: &hmac::Key, parts: &[&[u8]], tag: &[u8]) -> bool {
    hmac::verify(key, &parts.concat(), tag).is_ok()
}

/// `[length: u32 BE][payload][tag]`.
fn frame(payload: &[u8], tag: hmac::Tag) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 + payload.len() + TAG);
    bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes.extend_from_slice(tag.as_ref());
    bytes
}

/// A frame's payload length from its first four bytes, if at most `most`.
fn frame_length(prefix: [u8; 4], most: usize) -> Result<usize, String> {
    let length = u32::from_be_bytes(prefix) as usize;
    match length <= most {
        true => Ok(length),
        false => Err(format!("a frame of {length} bytes (at most {most})")),
    }
}

/// A frame's payload (at most `most` bytes) and tag, read whole by `deadline` (a timeout per
/// read alone would let a client trickle a byte at a time and hold a greeter).
fn read_frame(
    stream: &mut TcpStream,
    most: usize,
    deadline: Instant,
) -> std::io::Result<(Vec<u8>, [u8; TAG])> {
    let mut length = [0; 4];
    read_by(stream, &mut length, deadline)?;
    let length = frame_length(length, most).map_err(std::io::Error::other)?;
    let mut payload = vec![0; length];
    read_by(stream, &mut payload, deadline)?;
    let mut tag = [0; TAG];
    read_by(stream, &mut tag, deadline)?;
    Ok((payload, tag))
}

fn read_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[filled..])? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => filled += n,
        }
    }
    Ok(())
}

/// A connection that dies silently (a cable, a node frozen) is found in seconds by the
/// kernel's probes, with no wakeup of ours.
fn keep_probing(stream: &TcpStream) {
    let fd = stream.as_raw_fd();
    for (level, option, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 5),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY, 1),
    ] {
        // SAFETY: a valid descriptor and an int option of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                option,
                (&value as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            );
        }
    }
}

/// The leader's side: a listener, the agents connected (one connection per node), and the
/// last header, sent to each agent as it connects. Frames are written by a thread of their
/// own at real-time priority when it can have it ([`PUSH_PRIORITY`]): at ordinary priority
/// each write woke an agent's thread that took the processor from the writer, so on a busy
/// node (jobs, or the bench's 1,000 agents on 2 CPUs) the last agent got its header only
/// after every other had run.
pub struct Pusher {
    offer: PushOffer,
    shared: Arc<Shared>,
    /// To the writer, in the order etcd committed them.
    outgoing: Sender<Outgoing>,
}

/// A frame's payload for the writer.
enum Outgoing {
    /// For one node's agent.
    Order { node: String, payload: Vec<u8> },
    /// For every agent, and each that connects later.
    Header(Vec<u8>),
}

struct Shared {
    key: hmac::Key,
    peers: Mutex<Peers>,
}

#[derive(Default)]
struct Peers {
    by_node: HashMap<String, Peer>,
    header: Option<Vec<u8>>,
    /// How long each header took to write to every agent connected.
    header_writes: Histogram,
}

/// What the push has done, for the metrics.
#[derive(Clone, Debug, Default)]
pub struct PushStats {
    /// Agents connected now.
    pub agents: usize,
    /// Per header: from the first agent's write to the last's (µs).
    pub header_writes: Histogram,
}

struct Peer {
    stream: TcpStream,
    nonce: [u8; NONCE],
    sequence: u64,
}

impl Peer {
    /// Sends one payload; false when the agent cannot take it now (its buffer full: it is
    /// stuck) or is gone: it is dropped then, and falls back on etcd.
    fn send(&mut self, key: &hmac::Key, payload: &[u8]) -> bool {
        let sequence = self.sequence.to_be_bytes();
        let tag = tag(key, &[FRAME, &self.nonce, &sequence, payload]);
        self.sequence += 1;
        self.stream.write_all(&frame(payload, tag)).is_ok()
    }
}

impl Pusher {
    /// Listens on `address`, which agents must be able to reach (a port of 0: one the kernel
    /// picks), with a fresh key.
    pub fn start(address: SocketAddr) -> std::io::Result<Pusher> {
        if address.ip().is_unspecified() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{address}: the push address is what agents connect to; name one of this host's addresses, not 0.0.0.0 or ::"),
            ));
        }
        let listener = TcpListener::bind(address)?;
        let address = listener.local_addr()?;
        let secret: [u8; 32] = random();
        let shared = Arc::new(Shared {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
            peers: Mutex::new(Peers::default()),
        });
        let (waiting, queue) = sync_channel::<TcpStream>(WAITING);
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..GREETERS {
            let (shared, queue) = (Arc::clone(&shared), Arc::clone(&queue));
            std::thread::Builder::new()
                .name(format!("cosched-greet-{i}"))
                .spawn(move || greet(&shared, &queue))?;
        }
        std::thread::Builder::new()
            .name("cosched-push".into())
            .spawn(move || accept(&listener, &waiting))?;
        let (outgoing, writes) = channel();
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("cosched-push-out".into())
            .spawn(move || write(&writer, &writes))?;
        Ok(Pusher {
            outgoing,
            offer: PushOffer {
                address,
                key: secret.iter().map(|b| format!("{b:02x}")).collect(),
            },
            shared,
        })
    }

    pub fn offer(&self) -> PushOffer {
        self.offer.clone()
    }

    /// A write to `node`'s order queue, committed at `revision`.
    pub fn order(&self, node: &str, key: String, command: Command, revision: i64) {
        let payload = crate::encode(&Pushed::Order {
            key,
            command,
            revision,
        });
        self.hand(Outgoing::Order {
            node: node.to_string(),
            payload,
        });
    }

    /// The header of a generation, committed at `revision`: to every agent connected, and to
    /// each that connects later.
    pub fn header(&self, generation: Generation, revision: i64) {
        self.hand(Outgoing::Header(crate::encode(&Pushed::Header {
            generation,
            revision,
        })));
    }

    fn hand(&self, frame: Outgoing) {
        // The writer ends only once this pusher is dropped.
        let _ = self.outgoing.send(frame);
    }

    /// How many agents are connected.
    pub fn connected(&self) -> usize {
        self.stats().agents
    }

    pub fn stats(&self) -> PushStats {
        let peers = self.shared.peers.lock().unwrap_or_else(|p| p.into_inner());
        PushStats {
            agents: peers.by_node.len(),
            header_writes: peers.header_writes.clone(),
        }
    }
}

/// The writer: each frame to its agents, in the order handed; those handed together under
/// one hold of the peers' lock.
fn write(shared: &Shared, writes: &Receiver<Outgoing>) {
    if let Err(error) = make_realtime(PUSH_PRIORITY) {
        LOG.warn(format_args!(
            "no real-time priority for the push writer ({error}): on a busy node the last agent may get a header milliseconds after the first"
        ));
    }
    while let Ok(first) = writes.recv() {
        let mut peers = shared.peers.lock().unwrap_or_else(|p| p.into_inner());
        for frame in std::iter::once(first).chain(writes.try_iter()) {
            match frame {
                Outgoing::Order { node, payload } => {
                    if let Some(peer) = peers.by_node.get_mut(&node) {
                        if !peer.send(&shared.key, &payload) {
                            drop_peer(&mut peers, &node);
                        }
                    }
                }
                Outgoing::Header(payload) => {
                    let began = Instant::now();
                    let stuck: Vec<String> = peers
                        .by_node
                        .iter_mut()
                        .filter_map(|(node, peer)| {
                            (!peer.send(&shared.key, &payload)).then(|| node.clone())
                        })
                        .collect();
                    for node in stuck {
                        drop_peer(&mut peers, &node);
                    }
                    peers.header = Some(payload);
                    let took = began.elapsed().as_micros() as u64;
                    peers.header_writes.record(took);
                }
            }
        }
    }
}

fn drop_peer(peers: &mut Peers, node: &str) {
    if let Some(peer) = peers.by_node.remove(node) {
        let _ = peer.stream.shutdown(std::net::Shutdown::Both);
        LOG.warn(format_args!(
            "node {node} did not take a push: dropped (it follows etcd until it connects again)"
        ));
    }
}

/// Hands connections to the greeters; past [`WAITING`] waiting, closes them.
fn accept(listener: &TcpListener, waiting: &SyncSender<TcpStream>) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                // Full: dropped here, closed.
                let _ = waiting.try_send(stream);
            }
            Err(error) => {
                // Out of descriptors, most likely: wait rather than spin.
                LOG.warn(format_args!("accepting a push connection: {error}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Takes connections from the queue: nonce out, the agent's name back under the key within
/// [`HELLO_WITHIN`], then the last header, and the connection joins the peers.
fn greet(shared: &Shared, queue: &Mutex<Receiver<TcpStream>>) {
    loop {
        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(mut stream) = next else {
            return;
        };
        let nonce: [u8; NONCE] = random();
        let node = (|| -> std::io::Result<Option<String>> {
            let deadline = Instant::now() + HELLO_WITHIN;
            stream.set_write_timeout(Some(HELLO_WITHIN))?;
            stream.write_all(&nonce)?;
            let (payload, tag) = read_frame(&mut stream, MOST_HELLO, deadline)?;
            if !verify(&shared.key, &[HELLO, &nonce, &payload], &tag) {
                return Ok(None);
            }
            Ok(String::from_utf8(payload)
                .ok()
                .filter(|n| cosched_proto::valid_node_name(n)))
        })();
        let Ok(Some(node)) = node else {
            continue;
        };
        keep_probing(&stream);
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let mut peer = Peer {
            stream,
            nonce,
            sequence: 0,
        };
        let mut peers = shared.peers.lock().unwrap_or_else(|p| p.into_inner());
        let joined = crate::encode(&Pushed::Joined);
        if !peer.send(&shared.key, &joined) {
            continue;
        }
        if let Some(header) = peers.header.clone() {
            if !peer.send(&shared.key, &header) {
                continue;
            }
        }
        if let Some(former) = peers.by_node.insert(node, peer) {
            let _ = former.stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The agent's side: one connection to the leader.
pub struct PushLink {
    stream: TcpStream,
    address: SocketAddr,
    key: hmac::Key,
    nonce: [u8; NONCE],
    sequence: u64,
    /// What was read and is not yet a whole frame: one read takes what came (a frame is
    /// one write of the leader's), not its length, payload and tag one by one.
    pending: Vec<u8>,
}

/// What one read of the connection takes at most.
const READ_CHUNK: usize = 16 * 1024;

/// How long connecting and the greeting may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(1);

impl PushLink {
    pub fn connect(offer: &PushOffer, node: &str) -> Result<PushLink, PushError> {
        let key = parse_key(&offer.key).ok_or(PushError::Key)?;
        let address = offer.address;
        let io = |source| PushError::Io { address, source };
        let mut stream = TcpStream::connect_timeout(&address, CONNECT_WITHIN).map_err(io)?;
        stream.set_read_timeout(Some(CONNECT_WITHIN)).map_err(io)?;
        stream.set_write_timeout(Some(CONNECT_WITHIN)).map_err(io)?;
        let mut nonce = [0; NONCE];
        stream.read_exact(&mut nonce).map_err(io)?;
        let hello = tag(&key, &[HELLO, &nonce, node.as_bytes()]);
        stream
            .write_all(&frame(node.as_bytes(), hello))
            .map_err(io)?;
        let mut link = PushLink {
            stream,
            address,
            key,
            nonce,
            sequence: 0,
            pending: Vec::new(),
        };
        // Within the same bound: a server that holds the connection without answering (one
        // that took the leader's port) must not hold the agent's thread.
        match link.receive()? {
            Pushed::Joined => {}
            _ => {
                return Err(PushError::Refused {
                    address,
                    why: "the first frame is not the greeting's answer".into(),
                })
            }
        }
        link.stream.set_read_timeout(None).map_err(io)?;
        keep_probing(&link.stream);
        Ok(link)
    }

    /// A handle that ends the link from another thread (`shutdown`).
    pub fn handle(&self) -> std::io::Result<TcpStream> {
        self.stream.try_clone()
    }

    /// The descriptor to wait on for [`PushLink::receive_ready`].
    pub fn descriptor(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
    }

    /// The next write pushed, waited for; an error ends the link.
    pub fn receive(&mut self) -> Result<Pushed, PushError> {
        loop {
            if let Some(pushed) = self.take_frame()? {
                return Ok(pushed);
            }
            self.read_more()?;
        }
    }

    /// The writes one read brings, whole (none if the read ended inside a frame): for a
    /// caller that waited for the descriptor to be readable, so the read does not wait. An
    /// error ends the link.
    pub fn receive_ready(&mut self) -> Result<Vec<Pushed>, PushError> {
        self.read_more()?;
        let mut pushed = Vec::new();
        while let Some(one) = self.take_frame()? {
            pushed.push(one);
        }
        Ok(pushed)
    }

    fn read_more(&mut self) -> Result<(), PushError> {
        let address = self.address;
        let mut chunk = [0; READ_CHUNK];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(PushError::Io {
                address,
                source: std::io::ErrorKind::UnexpectedEof.into(),
            }),
            Ok(read) => {
                self.pending.extend_from_slice(&chunk[..read]);
                Ok(())
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(source) => Err(PushError::Io { address, source }),
        }
    }

    /// The first whole frame of what was read, its tag checked, parsed.
    fn take_frame(&mut self) -> Result<Option<Pushed>, PushError> {
        let address = self.address;
        let Some(&prefix) = self.pending.first_chunk::<4>() else {
            return Ok(None);
        };
        let length =
            frame_length(prefix, MOST_FRAME).map_err(|why| PushError::Refused { address, why })?;
        let end = 4 + length + TAG;
        if self.pending.len() < end {
            return Ok(None);
        }
        let (payload, tag) = self.pending[4..end].split_at(length);
        let sequence = self.sequence.to_be_bytes();
        if !verify(&self.key, &[FRAME, &self.nonce, &sequence, payload], tag) {
            return Err(PushError::Refused {
                address,
                why: format!("frame {} fails its tag", self.sequence),
            });
        }
        let parsed = serde_json::from_slice(payload).map_err(|e| PushError::Refused {
            address,
            why: format!("frame {}: {e}", self.sequence),
        });
        self.sequence += 1;
        self.pending.drain(..end);
        parsed.map(Some)
    }
}

fn parse_key(hex: &str) -> Option<hmac::Key> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect();
    Some(hmac::Key::new(hmac::HMAC_SHA256, &bytes?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(number: u64) -> Generation {
        crate::test_generation(number, 0)
    }

    fn connected(pusher: &Pusher, node: &str) -> PushLink {
        let link = PushLink::connect(&pusher.offer(), node).unwrap();
        // The greeting is checked on a greeter thread: wait until it joined.
        for _ in 0..500 {
            if pusher
                .shared
                .peers
                .lock()
                .unwrap()
                .by_node
                .contains_key(node)
            {
                return link;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("{node} never joined the pusher");
    }

    #[test]
    fn an_agent_gets_the_last_header_then_its_own_orders_in_order() {
        let pusher = Pusher::start("127.0.0.1:0".parse().unwrap()).unwrap();
        pusher.header(header(1), 10);
        let mut a = connected(&pusher, "a");
        let _b = connected(&pusher, "b");
        pusher.order("b", "k/b".into(), Command::Stop { cancel: false }, 11);
        pusher.order("a", "k/a".into(), Command::Stop { cancel: false }, 12);
        pusher.header(header(2), 13);
        assert_eq!(
            a.receive().unwrap(),
            Pushed::Header {
                generation: header(1),
                revision: 10
            }
        );
        assert_eq!(
            a.receive().unwrap(),
            Pushed::Order {
                key: "k/a".into(),
                command: Command::Stop { cancel: false },
                revision: 12
            }
        );
        assert!(matches!(
            a.receive().unwrap(),
            Pushed::Header { revision: 13, .. }
        ));
        assert_eq!(pusher.connected(), 2);
    }

    #[test]
    fn without_the_key_no_frame_is_sent_and_none_is_taken() {
        let pusher = Pusher::start("127.0.0.1:0".parse().unwrap()).unwrap();
        pusher.header(header(1), 10);
        // A stranger guessing the key is greeted with nothing and never joins.
        let stranger = PushOffer {
            key: "00".repeat(32),
            ..pusher.offer()
        };
        assert!(PushLink::connect(&stranger, "a").is_err());
        assert_eq!(pusher.connected(), 0);

        // A server without the key (one that took the leader's port) feeds an agent nothing.
        let impostor = TcpListener::bind("127.0.0.1:0").unwrap();
        let fooled = PushOffer {
            address: impostor.local_addr().unwrap(),
            ..pusher.offer()
        };
        let server = std::thread::spawn(move || {
            let (mut stream, _) = impostor.accept().unwrap();
            let nonce = [7; NONCE];
            stream.write_all(&nonce).unwrap();
            read_frame(&mut stream, MOST_HELLO, Instant::now() + HELLO_WITHIN).unwrap();
            let payload = crate::encode(&Pushed::Header {
                generation: header(9),
                revision: 99,
            });
            let guess = hmac::Key::new(hmac::HMAC_SHA256, &[0; 32]);
            let forged = tag(&guess, &[FRAME, &nonce, &0u64.to_be_bytes(), &payload]);
            stream.write_all(&frame(&payload, forged)).unwrap();
            stream
        });
        assert!(matches!(
            PushLink::connect(&fooled, "a"),
            Err(PushError::Refused { .. })
        ));
        drop(server.join());
    }

    #[test]
    fn a_frame_replayed_on_another_connection_fails_its_tag() {
        let pusher = Pusher::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut first = connected(&pusher, "a");
        pusher.order("a", "k".into(), Command::Stop { cancel: false }, 5);
        first.receive().unwrap();
        // Same node again: the former connection is closed, the new one has its own nonce.
        let mut second = connected(&pusher, "a");
        assert!(first.receive().is_err());
        pusher.order("a", "k2".into(), Command::Stop { cancel: false }, 6);
        assert!(matches!(
            second.receive().unwrap(),
            Pushed::Order { revision: 6, .. }
        ));
        // What the first connection saw, replayed into a fresh one, is refused.
        let replayed = Pushed::Order {
            key: "k".into(),
            command: Command::Stop { cancel: false },
            revision: 5,
        };
        let payload = crate::encode(&replayed);
        let old_tag = tag(
            &first.key,
            &[FRAME, &first.nonce, &0u64.to_be_bytes(), &payload],
        );
        assert!(!verify(
            &second.key,
            &[FRAME, &second.nonce, &1u64.to_be_bytes(), &payload],
            old_tag.as_ref()
        ));
    }

    #[test]
    fn a_greeting_trickled_a_byte_at_a_time_is_cut_off() {
        let pusher = Pusher::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut stream = TcpStream::connect(pusher.offer().address).unwrap();
        let mut nonce = [0; NONCE];
        stream.read_exact(&mut nonce).unwrap();
        // A long greeting announced, then a byte every 100 ms: each read is quick, the
        // whole is not.
        stream.write_all(&200u32.to_be_bytes()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let started = Instant::now();
        let cut = loop {
            if started.elapsed() > Duration::from_secs(10) {
                break false;
            }
            let mut byte = [0; 1];
            match stream.read(&mut byte) {
                Ok(0) => break true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => break true,
            }
            if stream.write_all(b"x").is_err() {
                break true;
            }
        };
        assert!(
            cut,
            "a trickled greeting held its greeter for 10 s (200 bytes take 20 s)"
        );
        assert_eq!(pusher.connected(), 0);
    }

    #[test]
    fn keys_are_64_hex_digits() {
        assert!(parse_key(&"ab".repeat(32)).is_some());
        assert!(parse_key(&"ab".repeat(31)).is_none());
        assert!(parse_key(&"zz".repeat(32)).is_none());
        assert!(parse_key(&"é".repeat(32)).is_none());
    }
}
