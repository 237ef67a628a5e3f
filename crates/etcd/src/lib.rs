//! cosched-etcd: a small blocking client for etcd's v3 API through its JSON gateway (etcd
//! 3.4 serves `/v3/...` as HTTP/1.1 JSON beside gRPC), enough for cosched's control state:
//! keys and prefixes, compare-and-create (the leader key), leases (node membership) and
//! watches that resume from a revision without losing or repeating events.
//!
//! Why not a gRPC client: cosched is synchronous code without an async runtime, and the
//! gRPC crates bring tokio, tonic and (for one of them) protoc at build time. The gateway
//! costs about 0.3 ms per request here (notes: cluster-on-one-machine).
//!
//! Every request goes to the member that answered last; a member that refuses the
//! connection or answers 503 is skipped for the next (a dead member of three otherwise keeps
//! failing a share of requests, notes).
//!
//! With [`Credentials`], the client authenticates (etcd's user/password auth) and sends the
//! token with every request, authenticating again when etcd says the token is no longer
//! valid. Without auth, every process that reaches etcd (a job on a node included) can
//! read and write the cluster's control state.
//!
//! With [`Tls`], every endpoint is `https://` and etcd's certificate must be signed by the
//! CA given; the client presents its own certificate (etcd's `--client-cert-auth` then
//! refuses the handshake of any process without a key its CA signed, before any request).

mod http;
pub mod testing;
mod tls;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::Connection;
pub use http::Endpoint;
use serde_json::{json, Value};
use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
pub use tls::{read_private, FileError, Identity, Tls, TlsError};

/// How long a request may take before the next member is tried. A member whose leader died
/// holds a write until then: with the leader of three killed, writes came back after 1.6 s
/// with 0.5 s, 2.1 s with 1 s and 5.1 s with 5 s (real_etcd.rs, three members, this VM).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("'{0}' is not an etcd endpoint (http://HOST:PORT or https://HOST:PORT)")]
    BadEndpoint(String),
    #[error("etcd endpoint {0} is plain HTTP while TLS is configured: give https://{host}:{port}", host = .0.host, port = .0.port)]
    PlainWithTls(Endpoint),
    #[error(
        "etcd endpoint {0} is https but no CA is given to check etcd's certificate (--etcd-ca)"
    )]
    TlsWithoutCa(Endpoint),
    #[error("no etcd endpoint given")]
    NoEndpoints,
    #[error("no etcd member answers ({tried}): {last}")]
    Unavailable { tried: String, last: String },
    #[error("etcd at {endpoint} refused {path}: {status} {message}")]
    Refused {
        endpoint: Endpoint,
        path: &'static str,
        status: u16,
        message: String,
    },
    #[error("etcd at {endpoint} sent an answer to {path} that is not etcd's: {why}")]
    Garbled {
        endpoint: Endpoint,
        path: &'static str,
        why: String,
    },
    #[error("the watch from revision {from} was compacted away (oldest kept: {compacted}): read the state again")]
    Compacted { from: i64, compacted: i64 },
    #[error("the watch stream ended: {0}")]
    WatchEnded(String),
}

/// A key and its value with etcd's bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
}

/// A condition of a transaction ([`Client::txn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare<'a> {
    /// The key does not exist.
    Absent(&'a str),
    /// The key was last written at this revision (0: it does not exist).
    Modified(&'a str, i64),
    /// The key is attached to this lease (a leader's key: only its holder passes).
    Leased(&'a str, i64),
}

/// One write of a batch ([`Client::write_all`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write<'a> {
    Put(&'a str, &'a [u8]),
    Delete(&'a str),
}

impl Write<'_> {
    pub fn key(&self) -> &str {
        match self {
            Write::Put(key, _) | Write::Delete(key) => key,
        }
    }
}

/// Most operations etcd takes in one transaction (its `--max-txn-ops` default).
pub const MAX_TXN_OPS: usize = 128;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    Put(KeyValue),
    Delete { key: String, mod_revision: i64 },
}

impl WatchEvent {
    pub fn revision(&self) -> i64 {
        match self {
            WatchEvent::Put(kv) => kv.mod_revision,
            WatchEvent::Delete { mod_revision, .. } => *mod_revision,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub id: i64,
    /// Seconds left (granted, or after a keep-alive); 0 once expired.
    pub ttl: i64,
}

pub struct Client {
    endpoints: Vec<Endpoint>,
    timeout: Duration,
    /// The member that answered last.
    preferred: AtomicUsize,
    credentials: Option<Arc<Credentials>>,
    /// The token of the last authentication, shared by the copies `with_timeout` makes.
    token: Arc<Mutex<Option<String>>>,
    /// A connection left open by the last answer read whole, and its member's index: the next
    /// request goes on it.
    idle: Mutex<Option<(usize, Connection)>>,
    /// How to reach `https` members (every member, when given).
    tls: Option<Tls>,
}

/// A user of etcd's auth and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Credentials {{ user: {:?}, password: <hidden> }}",
            self.user
        )
    }
}

fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// The key just past every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Everything: etcd's "\0" range end.
    vec![0]
}

/// An int64 field: the gateway writes them as strings and leaves out zeros.
fn int(value: &Value) -> i64 {
    match value {
        Value::String(text) => text.parse().unwrap_or(0),
        Value::Number(number) => number.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn key_value(kv: &Value) -> Result<KeyValue, String> {
    let decode = |field: &str| -> Result<Vec<u8>, String> {
        match kv.get(field).and_then(Value::as_str) {
            Some(text) => STANDARD
                .decode(text)
                .map_err(|e| format!("{field} is not base64: {e}")),
            None => Ok(Vec::new()),
        }
    };
    let key = String::from_utf8(decode("key")?).map_err(|_| "a key is not UTF-8".to_string())?;
    Ok(KeyValue {
        key,
        value: decode("value")?,
        create_revision: int(&kv["create_revision"]),
        mod_revision: int(&kv["mod_revision"]),
        lease: int(&kv["lease"]),
    })
}

impl Client {
    /// A client for the members at `urls` (`http://HOST:PORT`, or with `tls` every one
    /// `https://HOST:PORT`); `timeout` bounds each request.
    pub fn new(urls: &[String], timeout: Duration, tls: Option<&Tls>) -> Result<Client, EtcdError> {
        let endpoints = urls
            .iter()
            .map(|url| Endpoint::parse(url).ok_or_else(|| EtcdError::BadEndpoint(url.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        // TLS for some members only would send the password in clear to the others.
        if let Some(endpoint) = endpoints.iter().find(|e| e.tls != tls.is_some()) {
            return Err(match tls {
                Some(_) => EtcdError::PlainWithTls(endpoint.clone()),
                None => EtcdError::TlsWithoutCa(endpoint.clone()),
            });
        }
        Ok(Client {
            endpoints,
            timeout,
            preferred: AtomicUsize::new(0),
            credentials: None,
            token: Arc::default(),
            idle: Mutex::new(None),
            tls: tls.cloned(),
        })
    }

    /// The same client, authenticating as `credentials` (etcd with auth enabled).
    pub fn with_credentials(self, credentials: Credentials) -> Client {
        Client {
            credentials: Some(Arc::new(credentials)),
            token: Arc::default(),
            ..self
        }
    }

    /// The same members and credentials, another bound on each request.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client {
            endpoints: self.endpoints.clone(),
            timeout,
            preferred: AtomicUsize::new(self.preferred.load(Ordering::Relaxed)),
            credentials: self.credentials.clone(),
            token: Arc::clone(&self.token),
            idle: Mutex::new(None),
            tls: self.tls.clone(),
        }
    }

    /// The TLS configuration for the members, if they are `https`.
    fn tls(&self) -> Option<&Arc<rustls::ClientConfig>> {
        self.tls.as_ref().map(|tls| &tls.0)
    }

    /// The kept connection to member `index`, if any (one to another member is dropped).
    fn take_idle(&self, index: usize) -> Option<Connection> {
        let kept = self.idle.lock().unwrap_or_else(|p| p.into_inner()).take();
        kept.filter(|(member, _)| *member == index)
            .map(|(_, stream)| stream)
    }

    /// Reads `response`'s body whole (at most `cap` bytes) and keeps its connection to member
    /// `index` for the next request when it can carry one: with TLS, a new connection costs a
    /// handshake, and a renewal after an outage (token refused, authenticate, ask again) took
    /// three of them, past an agent's renewal period under load.
    fn read_whole(
        &self,
        index: usize,
        mut response: http::Response,
        cap: u64,
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let mut text = Vec::new();
        let read = response.body.by_ref().take(cap).read_to_end(&mut text)?;
        // A body past the cap leaves bytes behind: that connection goes.
        if response.reusable && (read as u64) < cap {
            let connection = response.body.into_connection();
            *self.idle.lock().unwrap_or_else(|p| p.into_inner()) = Some((index, connection));
        }
        Ok((response.status, text))
    }

    /// A token from member `index` for the credentials, if any (the one held, unless
    /// `fresh`).
    fn token(&self, index: usize, fresh: bool) -> Result<Option<String>, String> {
        let Some(credentials) = &self.credentials else {
            return Ok(None);
        };
        let mut held = self.token.lock().unwrap_or_else(|p| p.into_inner());
        if !fresh {
            if let Some(token) = held.as_ref() {
                return Ok(Some(token.clone()));
            }
        }
        let endpoint = &self.endpoints[index];
        let body = json!({"name": credentials.user, "password": credentials.password});
        let response = http::post(
            endpoint,
            "/v3/auth/authenticate",
            body.to_string().as_bytes(),
            Some(self.timeout),
            None,
            self.take_idle(index),
            self.tls(),
        )
        .map_err(|e| format!("{endpoint}: authenticating: {e}"))?;
        let (status, text) = self
            .read_whole(index, response, 1 << 20)
            .unwrap_or_default();
        let answer: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
        let token = answer["token"]
            .as_str()
            .filter(|t| status == 200 && t.chars().all(|c| c.is_ascii_graphic()))
            .ok_or_else(|| {
                let why = answer["message"]
                    .as_str()
                    .unwrap_or("no token in the answer");
                format!(
                    "{endpoint}: authenticating as {}: {status} {why}",
                    credentials.user
                )
            })?;
        *held = Some(token.to_string());
        Ok(held.clone())
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// Sends one request, trying each member from the preferred one on; returns the answer
    /// (not yet read) and the member that gave it.
    /// With `fresh`, authenticates anew first (a watch: etcd answers one with a stale token
    /// 200, then ends its stream).
    /// With `reuse`, on the connection an earlier answer left open (a watch takes one of its
    /// own).
    fn send(
        &self,
        path: &'static str,
        body: &Value,
        timeout: Option<Duration>,
        fresh: bool,
        reuse: bool,
    ) -> Result<(http::Response, Endpoint, usize), EtcdError> {
        let body = body.to_string();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut last = String::new();
        for i in 0..self.endpoints.len() {
            let index = (first + i) % self.endpoints.len();
            let endpoint = &self.endpoints[index];
            // A token etcd no longer knows (it expired, or the member restarted) is renewed
            // once.
            let attempt = |fresh| {
                let token = self.token(index, fresh)?;
                let idle = if reuse { self.take_idle(index) } else { None };
                http::post(
                    endpoint,
                    path,
                    body.as_bytes(),
                    timeout,
                    token.as_deref(),
                    idle,
                    self.tls(),
                )
                .map_err(|e| format!("{endpoint}: {e}"))
            };
            let sent = match attempt(fresh) {
                Ok(response) if response.status == 401 && self.credentials.is_some() => {
                    let _ = self.read_whole(index, response, 1 << 20);
                    attempt(true)
                }
                other => other,
            };
            match sent {
                Ok(response) if response.status == 503 => {
                    last = format!("{endpoint}: 503 (no leader?)");
                }
                Ok(response) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok((response, endpoint.clone(), index));
                }
                Err(error) => last = error,
            }
        }
        let tried = self
            .endpoints
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        Err(EtcdError::Unavailable { tried, last })
    }

    /// One request and its whole JSON answer.
    fn call(&self, path: &'static str, body: Value) -> Result<Value, EtcdError> {
        self.answer(path, body).map(|(value, _)| value)
    }

    /// One request: its whole JSON answer and the member that gave it.
    fn answer(&self, path: &'static str, body: Value) -> Result<(Value, Endpoint), EtcdError> {
        let (response, endpoint, index) =
            self.send(path, &body, Some(self.timeout), false, true)?;
        let (status, text) =
            self.read_whole(index, response, 64 << 20)
                .map_err(|e| EtcdError::Unavailable {
                    tried: endpoint.to_string(),
                    last: format!(
                        "reading the answer to {path}: {}",
                        http::timed_out_as_such(e, self.timeout)
                    ),
                })?;
        let garbled = |why: String| EtcdError::Garbled {
            endpoint: endpoint.clone(),
            path,
            why,
        };
        let value: Value =
            serde_json::from_slice(&text).map_err(|e| garbled(format!("not JSON: {e}")))?;
        if status != 200 {
            let message = value
                .get("message")
                .or_else(|| value.get("error"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            return Err(EtcdError::Refused {
                endpoint,
                path,
                status,
                message,
            });
        }
        Ok((value, endpoint))
    }

    /// Forgets the history before `revision` (the keys stay): etcd keeps every revision of
    /// every key until told, and fills its space quota with them. A watch from before it
    /// then fails with [`EtcdError::Compacted`].
    pub fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        self.call(
            "/v3/kv/compaction",
            json!({"revision": revision.to_string()}),
        )?;
        Ok(())
    }

    /// Makes `credentials` etcd's root user (the root role) and turns auth on: from then on
    /// etcd serves only clients that authenticate.
    pub fn enable_auth(&self, credentials: &Credentials) -> Result<(), EtcdError> {
        let user = &credentials.user;
        self.call(
            "/v3/auth/user/add",
            json!({"name": user, "password": credentials.password}),
        )?;
        self.call("/v3/auth/role/add", json!({"name": "root"}))?;
        self.call("/v3/auth/user/grant", json!({"user": user, "role": "root"}))?;
        self.call("/v3/auth/enable", json!({}))?;
        Ok(())
    }

    /// Writes `key`; with a lease, the key goes when the lease does. Returns the revision.
    pub fn put(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<i64, EtcdError> {
        let mut body = json!({"key": b64(key.as_bytes()), "value": b64(value)});
        if let Some(lease) = lease {
            body["lease"] = json!(lease.to_string());
        }
        let answer = self.call("/v3/kv/put", body)?;
        Ok(int(&answer["header"]["revision"]))
    }

    pub fn get(&self, key: &str) -> Result<Option<KeyValue>, EtcdError> {
        let (kvs, _) = self.range(json!({"key": b64(key.as_bytes())}))?;
        Ok(kvs.into_iter().next())
    }

    /// Every key under `prefix`, in key order, and the store's revision when read (a watch
    /// from the next revision misses nothing and repeats nothing).
    pub fn get_prefix(&self, prefix: &str) -> Result<(Vec<KeyValue>, i64), EtcdError> {
        self.range(json!({"key": b64(prefix.as_bytes()), "range_end": b64(&prefix_end(prefix))}))
    }

    /// The same without the values (left empty): who wrote when, for the price of the keys.
    pub fn get_prefix_keys(&self, prefix: &str) -> Result<(Vec<KeyValue>, i64), EtcdError> {
        self.range(
            json!({"key": b64(prefix.as_bytes()), "range_end": b64(&prefix_end(prefix)),
                          "keys_only": true}),
        )
    }

    /// A range read: the keys and the revision it saw.
    fn range(&self, body: Value) -> Result<(Vec<KeyValue>, i64), EtcdError> {
        const PATH: &str = "/v3/kv/range";
        let (answer, endpoint) = self.answer(PATH, body)?;
        let kvs = answer["kvs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(key_value)
            .collect::<Result<_, _>>()
            .map_err(|why| EtcdError::Garbled {
                endpoint,
                path: PATH,
                why,
            })?;
        Ok((kvs, int(&answer["header"]["revision"])))
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&self, key: &str) -> Result<bool, EtcdError> {
        let answer = self.call("/v3/kv/deleterange", json!({"key": b64(key.as_bytes())}))?;
        Ok(int(&answer["deleted"]) > 0)
    }

    /// Deletes every key under `prefix`; returns how many there were.
    pub fn delete_prefix(&self, prefix: &str) -> Result<i64, EtcdError> {
        let body = json!({
            "key": b64(prefix.as_bytes()),
            "range_end": STANDARD.encode(prefix_end(prefix)),
        });
        Ok(int(&self.call("/v3/kv/deleterange", body)?["deleted"]))
    }

    /// Writes `key` only if it does not exist (the election of a leader: whoever creates the
    /// key leads). Returns whether this call created it.
    pub fn create(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<bool, EtcdError> {
        self.txn(&[Compare::Absent(key)], &[(key, value, lease)])
    }

    /// Writes every `(key, value, lease)` of `puts` at once if every comparison holds; returns
    /// whether they held (and the writes were made).
    pub fn txn(
        &self,
        compares: &[Compare<'_>],
        puts: &[(&str, &[u8], Option<i64>)],
    ) -> Result<bool, EtcdError> {
        Ok(self.txn_at(compares, puts)?.is_some())
    }

    /// [`Client::txn`], returning the revision of the writes when the comparisons held: each
    /// key put is then at that `mod_revision`, for a later [`Compare::Modified`] with no read.
    pub fn txn_at(
        &self,
        compares: &[Compare<'_>],
        puts: &[(&str, &[u8], Option<i64>)],
    ) -> Result<Option<i64>, EtcdError> {
        let compare: Vec<Value> = compares
            .iter()
            .map(|c| match c {
                Compare::Absent(key) => json!({"key": b64(key.as_bytes()), "target": "CREATE",
                                               "result": "EQUAL", "create_revision": "0"}),
                Compare::Modified(key, revision) => json!({"key": b64(key.as_bytes()),
                    "target": "MOD", "result": "EQUAL", "mod_revision": revision.to_string()}),
                Compare::Leased(key, lease) => json!({"key": b64(key.as_bytes()),
                    "target": "LEASE", "result": "EQUAL", "lease": lease.to_string()}),
            })
            .collect();
        let success: Vec<Value> = puts
            .iter()
            .map(|(key, value, lease)| {
                let mut put = json!({"key": b64(key.as_bytes()), "value": b64(value)});
                if let Some(lease) = lease {
                    put["lease"] = json!(lease.to_string());
                }
                json!({ "request_put": put })
            })
            .collect();
        let answer = self.call(
            "/v3/kv/txn",
            json!({"compare": compare, "success": success}),
        )?;
        let held = answer["succeeded"].as_bool().unwrap_or(false);
        Ok(held.then(|| int(&answer["header"]["revision"])))
    }

    /// Makes every write of `writes` at once, as one revision (one raft proposal instead of
    /// one per key): a controller fanning a generation out to every node's key. etcd refuses
    /// a batch of more than [`MAX_TXN_OPS`] or one naming a key twice. Returns the revision.
    pub fn write_all(&self, writes: &[Write<'_>]) -> Result<i64, EtcdError> {
        let success: Vec<Value> = writes
            .iter()
            .map(|write| match write {
                Write::Put(key, value) => {
                    json!({"request_put": {"key": b64(key.as_bytes()), "value": b64(value)}})
                }
                Write::Delete(key) => json!({"request_delete_range": {"key": b64(key.as_bytes())}}),
            })
            .collect();
        let answer = self.call("/v3/kv/txn", json!({"success": success}))?;
        Ok(int(&answer["header"]["revision"]))
    }

    /// A lease of `ttl` seconds: keys attached to it go when it is not kept alive.
    pub fn grant(&self, ttl: i64) -> Result<Lease, EtcdError> {
        let answer = self.call("/v3/lease/grant", json!({"TTL": ttl.to_string()}))?;
        Ok(Lease {
            id: int(&answer["ID"]),
            ttl: int(&answer["TTL"]),
        })
    }

    /// Renews a lease; the TTL is 0 when it has already expired.
    pub fn keep_alive(&self, id: i64) -> Result<Lease, EtcdError> {
        let answer = self.call("/v3/lease/keepalive", json!({"ID": id.to_string()}))?;
        let result = &answer["result"];
        Ok(Lease {
            id,
            ttl: int(&result["TTL"]).max(0),
        })
    }

    /// Whether the member that answers leads its etcd cluster (its status names itself).
    pub fn answers_as_leader(&self) -> Result<bool, EtcdError> {
        let answer = self.call("/v3/maintenance/status", json!({}))?;
        // Member ids are uint64: compared as the gateway's strings, never parsed to i64.
        let member = answer["header"]["member_id"].as_str();
        Ok(member.is_some() && member == answer["leader"].as_str())
    }

    /// Ends a lease now (its keys go at once).
    pub fn revoke(&self, id: i64) -> Result<(), EtcdError> {
        self.call("/v3/lease/revoke", json!({"ID": id.to_string()}))?;
        Ok(())
    }

    /// Watches every key under `prefix` from revision `from` on (events of that revision
    /// included). Waits (a request's timeout at most) for etcd to say the watch is made;
    /// then blocks only in [`Watch::next_batch`].
    ///
    /// With auth, the token held is tried first and a fresh one only if etcd refuses the
    /// watch: etcd checks a password with bcrypt (tens of milliseconds of its CPU), and
    /// 1,000 agents authenticating for every watch they start made etcd too slow to answer.
    pub fn watch(&self, prefix: &str, from: i64) -> Result<Watch, EtcdError> {
        self.watch_made(
            json!({"create_request": {
                "key": b64(prefix.as_bytes()),
                "range_end": b64(&prefix_end(prefix)),
                "start_revision": from.to_string(),
            }}),
            from,
        )
    }

    /// Watches `key`'s deletion from revision `from` on: its writes are not sent (a key
    /// rewritten every second, watched by a thousand clients, is a thousand messages a
    /// second for etcd to send).
    pub fn watch_deletes(&self, key: &str, from: i64) -> Result<Watch, EtcdError> {
        self.watch_made(
            json!({"create_request": {
                "key": b64(key.as_bytes()),
                "start_revision": from.to_string(),
                "filters": ["NOPUT"],
            }}),
            from,
        )
    }

    fn watch_made(&self, body: Value, from: i64) -> Result<Watch, EtcdError> {
        let mut fresh = false;
        loop {
            let (response, endpoint, _) = self.send("/v3/watch", &body, None, fresh, false)?;
            if response.status != 200 {
                return Err(EtcdError::Refused {
                    endpoint,
                    path: "/v3/watch",
                    status: response.status,
                    message: String::new(),
                });
            }
            let stream = response.socket;
            let mut messages = serde_json::Deserializer::from_reader(response.body).into_iter();
            let ended = |why: String| EtcdError::WatchEnded(format!("{endpoint}: {why}"));
            stream
                .set_read_timeout(Some(self.timeout))
                .map_err(|e| ended(e.to_string()))?;
            let created: Value = match messages.next() {
                Some(Ok(message)) => message,
                Some(Err(error)) => return Err(ended(error.to_string())),
                None => return Err(ended("closed before the watch was made".into())),
            };
            stream
                .set_read_timeout(None)
                .map_err(|e| ended(e.to_string()))?;
            // etcd refuses a watch whose token it no longer knows: made, then cancelled.
            let cancelled = created["result"]["canceled"].as_bool() == Some(true);
            match ending(&created, from) {
                Some(EtcdError::WatchEnded(_))
                    if cancelled && !fresh && self.credentials.is_some() =>
                {
                    fresh = true;
                    continue;
                }
                Some(EtcdError::WatchEnded(why)) => return Err(ended(why)),
                Some(other) => return Err(other),
                None => {}
            }
            return Ok(Watch {
                messages: Box::new(messages),
                stream,
                from,
                next: from,
            });
        }
    }
}

/// What ends a watch, if `message` says it ended: an error, a compaction past `from`, or a
/// cancellation (a refused watch is made, then cancelled).
fn ending(message: &Value, from: i64) -> Option<EtcdError> {
    if let Some(error) = message.get("error") {
        return Some(EtcdError::WatchEnded(error.to_string()));
    }
    let result = &message["result"];
    let compacted = int(&result["compact_revision"]);
    if compacted > 0 {
        return Some(EtcdError::Compacted { from, compacted });
    }
    (result["canceled"].as_bool() == Some(true)).then(|| {
        let why = result["cancel_reason"].as_str().unwrap_or("cancelled");
        EtcdError::WatchEnded(why.to_string())
    })
}

/// A stream of changes under a prefix, in revision order.
pub struct Watch {
    messages: Box<dyn Iterator<Item = serde_json::Result<Value>> + Send>,
    stream: TcpStream,
    from: i64,
    /// The revision the next event will have at least: where to resume after a break.
    next: i64,
}

/// Cuts a watch from another thread (its `next_batch` then returns an error).
pub struct WatchStopper(TcpStream);

/// A watch dropped is cut: a stopper taken from it holds a duplicate of its descriptor, so
/// closing the watch's own left the connection open and etcd serving the watch (seen in
/// etcd's watcher count: 7 of 10 agents' resting watches of the generation header stayed).
impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

impl WatchStopper {
    pub fn stop(&self) {
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

impl Watch {
    pub fn stopper(&self) -> std::io::Result<WatchStopper> {
        Ok(WatchStopper(self.stream.try_clone()?))
    }

    /// The revision to resume from after a break (one past the last event seen).
    pub fn resume_from(&self) -> i64 {
        self.next
    }

    /// Waits for the next batch of events (never empty).
    pub fn next_batch(&mut self) -> Result<Vec<WatchEvent>, EtcdError> {
        loop {
            let message = match self.messages.next() {
                Some(Ok(message)) => message,
                Some(Err(error)) => return Err(EtcdError::WatchEnded(error.to_string())),
                None => return Err(EtcdError::WatchEnded("closed by etcd".into())),
            };
            if let Some(ended) = ending(&message, self.from) {
                return Err(ended);
            }
            let result = &message["result"];
            let Some(events) = result["events"].as_array() else {
                continue; // created, or a progress notice
            };
            let mut batch = Vec::with_capacity(events.len());
            for event in events {
                let kv = key_value(&event["kv"]).map_err(EtcdError::WatchEnded)?;
                batch.push(match event["type"].as_str() {
                    Some("DELETE") => WatchEvent::Delete {
                        key: kv.key,
                        mod_revision: kv.mod_revision,
                    },
                    _ => WatchEvent::Put(kv),
                });
            }
            if let Some(last) = batch.last() {
                self.next = last.revision() + 1;
                return Ok(batch);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_end_past_every_key_they_start() {
        assert_eq!(prefix_end("/cosched/"), b"/cosched0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), vec![b'a', 0x80]);
        assert_eq!(prefix_end(""), vec![0]);
        assert_eq!(int(&json!("12")), 12);
        assert_eq!(int(&Value::Null), 0);
        let second = Duration::from_secs(1);
        assert!(Client::new(&["http://127.0.0.1:2379".into()], second, None).is_ok());
        assert!(matches!(
            Client::new(&["127.0.0.1:2379".into()], second, None),
            Err(EtcdError::BadEndpoint(_))
        ));
        assert!(matches!(
            Client::new(&[], second, None),
            Err(EtcdError::NoEndpoints)
        ));
        let https = Client::new(&["https://10.0.0.1:2379".into()], second, None);
        assert_eq!(
            https.err().map(|e| e.to_string()).as_deref(),
            Some("etcd endpoint https://10.0.0.1:2379 is https but no CA is given to check etcd's certificate (--etcd-ca)")
        );
    }
}
