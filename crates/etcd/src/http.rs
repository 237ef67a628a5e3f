//! Just enough HTTP/1.1 for etcd's JSON gateway: POSTs on a connection kept for the next
//! request once its answer is read, a body read by length or in chunks (a watch is one long
//! chunked body), over TCP or TLS.
//!
//! Why keep connections: a connection per request leaves each in TIME_WAIT for a minute.
//! 1,000 agents renewing their leases made about 1,600 requests a second (bench/control-plane),
//! past what one machine's ports allow (28,000 a minute): connecting failed with EAGAIN. An
//! etcd host would keep a socket in TIME_WAIT per request and pay a handshake for each (and
//! with TLS, a key exchange).

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// `http://host:port` or `https://host:port` of one etcd member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

impl Endpoint {
    pub fn parse(url: &str) -> Option<Endpoint> {
        let (tls, rest) = match url.strip_prefix("https://") {
            Some(rest) => (true, rest),
            None => (false, url.strip_prefix("http://")?),
        };
        let (host, port) = rest.trim_end_matches('/').rsplit_once(':')?;
        if host.is_empty() || host.contains('/') {
            return None;
        }
        Some(Endpoint {
            host: host.to_string(),
            port: port.parse().ok()?,
            tls,
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

/// A connection to a member, plain or TLS.
pub enum Connection {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Connection {
    /// The socket under it (timeouts, and a shutdown from another thread).
    pub fn socket(&self) -> &TcpStream {
        match self {
            Connection::Plain(stream) => stream,
            Connection::Tls(stream) => &stream.sock,
        }
    }
}

impl Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Connection::Plain(stream) => stream.read(buf),
            Connection::Tls(stream) => stream.read(buf),
        }
    }
}

impl Write for Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Connection::Plain(stream) => stream.write(buf),
            Connection::Tls(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Connection::Plain(stream) => stream.flush(),
            Connection::Tls(stream) => stream.flush(),
        }
    }
}

/// An answer's body, read from its connection by length, in chunks, or to the end.
pub enum Body {
    Length(io::Take<BufReader<Connection>>),
    Chunked(Chunked<BufReader<Connection>>),
    ToClose(BufReader<Connection>),
}

impl Body {
    /// The connection, to carry another request once the body is read whole (no request is
    /// sent before the last answer is read, so nothing of the next answer is buffered).
    pub fn into_connection(self) -> Connection {
        match self {
            Body::Length(take) => take.into_inner().into_inner(),
            Body::Chunked(chunked) => chunked.inner.into_inner(),
            Body::ToClose(reader) => reader.into_inner(),
        }
    }
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Body::Length(take) => take.read(buf),
            Body::Chunked(chunked) => chunked.read(buf),
            Body::ToClose(reader) => reader.read(buf),
        }
    }
}

/// A response whose body is still to be read.
pub struct Response {
    pub status: u16,
    pub body: Body,
    /// The connection's socket, to cut it from another thread or set its timeouts.
    pub socket: TcpStream,
    /// The body has a length or chunks and the server keeps the connection open: once the
    /// body is read whole, the connection can carry another request.
    pub reusable: bool,
}

/// Sends `body` to `path`, with etcd's auth token when given; `timeout` bounds the
/// connection, the TLS handshake and each read (none: reads block). On `idle` (a connection
/// an earlier answer left open) first: if the server closed it meanwhile, before answering a
/// byte, the request goes again on a new connection (the server never read it). `tls` is
/// the client's configuration for an `https` endpoint.
pub fn post(
    endpoint: &Endpoint,
    path: &str,
    body: &[u8],
    timeout: Option<Duration>,
    token: Option<&str>,
    idle: Option<Connection>,
    tls: Option<&Arc<ClientConfig>>,
) -> io::Result<Response> {
    let connect = timeout.unwrap_or(Duration::from_secs(5));
    let authorization = token.map_or(String::new(), |t| format!("Authorization: {t}\r\n"));
    // One write: one TLS record, one segment for a small request.
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n\
         {authorization}Content-Length: {}\r\n\r\n",
        endpoint.host,
        endpoint.port,
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    if let Some(connection) = idle {
        match exchange(connection, &request, timeout, connect) {
            Err(error) if closed_before_answering(&error) => {}
            answered => return answered,
        }
    }
    let address = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
    let stream = TcpStream::connect_timeout(&address, connect)?;
    stream.set_nodelay(true)?;
    let connection = match (endpoint.tls, tls) {
        (false, _) => Connection::Plain(stream),
        (true, Some(config)) => handshake(endpoint, config, stream, connect)?,
        (true, None) => return Err(bad("an https endpoint without a TLS configuration")),
    };
    exchange(connection, &request, timeout, connect)
}

/// A TLS session with `endpoint` on `stream`, its handshake done (bounded by `timeout`) so
/// that a certificate etcd's CA did not sign is refused here, with a message that says so.
fn handshake(
    endpoint: &Endpoint,
    config: &Arc<ClientConfig>,
    mut stream: TcpStream,
    timeout: Duration,
) -> io::Result<Connection> {
    let name = ServerName::try_from(endpoint.host.clone())
        .map_err(|e| bad(&format!("'{}' is not a host name: {e}", endpoint.host)))?;
    let mut session =
        ClientConnection::new(Arc::clone(config), name).map_err(|e| bad(&format!("TLS: {e}")))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    while session.is_handshaking() {
        session
            .complete_io(&mut stream)
            .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake: {e}")))?;
    }
    Ok(Connection::Tls(Box::new(StreamOwned::new(session, stream))))
}
/// The server had closed a kept connection: writing failed, or it ended before a status.
fn closed_before_answering(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

/// Writes the request on `connection` and reads the answer's head.
fn exchange(
    connection: Connection,
    request: &[u8],
    timeout: Option<Duration>,
    connect: Duration,
) -> io::Result<Response> {
    ask(connection, request, timeout, connect)
        .map_err(|error| timed_out_as_such(error, timeout.unwrap_or(connect)))
}

/// A socket timeout reads as EAGAIN, "Resource temporarily unavailable": agents at 1,000
/// nodes logged that when etcd was slow to answer, and it read like a lack of ports or
/// memory. Said as what it is, with the bound.
pub fn timed_out_as_such(error: io::Error, timeout: Duration) -> io::Error {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {} ms", timeout.as_millis()),
        ),
        _ => error,
    }
}

fn ask(
    mut connection: Connection,
    request: &[u8],
    timeout: Option<Duration>,
    connect: Duration,
) -> io::Result<Response> {
    let socket = connection.socket().try_clone()?;
    socket.set_read_timeout(timeout)?;
    socket.set_write_timeout(Some(connect))?;
    connection.write_all(request)?;
    connection.flush()?;
    let mut reader = BufReader::new(connection);
    // Nothing at all: the server had closed a kept connection.
    let first = loop {
        match reader.fill_buf() {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            answer => break answer?.len(),
        }
    };
    if first == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let status = read_status(&mut reader)?;
    let (mut length, mut chunked, mut close) = (None, false, false);
    loop {
        let line = read_crlf_line(&mut reader)?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<u64>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    let reusable = !close && (chunked || length.is_some());
    let body = match (chunked, length) {
        (true, _) => Body::Chunked(Chunked {
            inner: reader,
            left: 0,
            done: false,
        }),
        (false, Some(length)) => Body::Length(reader.take(length)),
        (false, None) => Body::ToClose(reader),
    };
    Ok(Response {
        status,
        body,
        socket,
        reusable,
    })
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn read_crlf_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    // Header lines are short; a peer sending megabytes of one is not etcd.
    reader.take(16 << 10).read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Err(bad("connection closed in the middle of a header line"));
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| bad("header line is not UTF-8"))
}

fn read_status(reader: &mut impl BufRead) -> io::Result<u16> {
    let line = read_crlf_line(reader)?;
    let mut words = line.split(' ');
    match (words.next(), words.next().and_then(|w| w.parse().ok())) {
        (Some(version), Some(status)) if version.starts_with("HTTP/1.") => Ok(status),
        _ => Err(bad("not an HTTP/1.1 status line")),
    }
}

/// A chunked body (RFC 9112 §7.1), without trailers.
pub struct Chunked<R> {
    inner: R,
    left: u64,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let line = read_crlf_line(&mut self.inner)?;
            let size = line.split(';').next().unwrap_or("").trim();
            self.left = u64::from_str_radix(size, 16).map_err(|_| bad("bad chunk size"))?;
            if self.left == 0 {
                // The trailer section, to its empty line: the connection may carry more.
                while !read_crlf_line(&mut self.inner)?.is_empty() {}
                self.done = true;
                return Ok(0);
            }
        }
        let wanted = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..wanted])?;
        if n == 0 {
            return Err(bad("connection closed in the middle of a chunk"));
        }
        self.left -= n as u64;
        if self.left == 0 && !read_crlf_line(&mut self.inner)?.is_empty() {
            return Err(bad("chunk not followed by CRLF"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_kept_connection_the_server_closed_is_replaced_by_a_new_one() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Answers one request per connection, then closes it (as a server past its idle
        // timeout does).
        let server = std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut stream, _) = listener.accept().unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"{}") {
                    let n = stream.read(&mut buf).unwrap();
                    assert!(n > 0, "the request ended early");
                    request.extend_from_slice(&buf[..n]);
                }
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ntrue")
                    .unwrap();
            }
        });
        let endpoint = Endpoint {
            host: "127.0.0.1".into(),
            port,
            tls: false,
        };
        let timeout = Some(Duration::from_secs(10));
        let mut first = post(&endpoint, "/x", b"{}", timeout, None, None, None).unwrap();
        assert!(
            first.reusable,
            "a body of known length on a connection kept open"
        );
        let mut text = String::new();
        first.body.read_to_string(&mut text).unwrap();
        assert_eq!(text, "true");
        std::thread::sleep(Duration::from_millis(50));
        let kept = first.body.into_connection();
        let mut second = post(&endpoint, "/x", b"{}", timeout, None, Some(kept), None).unwrap();
        assert_eq!(second.status, 200);
        second.body.read_to_string(&mut text).unwrap();
        assert_eq!(text, "truetrue");
        server.join().unwrap();
    }

    #[test]
    fn a_server_that_never_answers_is_said_to_time_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Takes the connection and reads the request, never answering.
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            while stream.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        let endpoint = Endpoint {
            host: "127.0.0.1".into(),
            port,
            tls: false,
        };
        let timeout = Some(Duration::from_millis(200));
        let Err(error) = post(&endpoint, "/x", b"{}", timeout, None, None, None) else {
            panic!("a server that never answers answered");
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(error.to_string(), "no answer within 200 ms");
        drop(error);
        server.join().unwrap();
    }

    #[test]
    fn endpoints_and_chunked_bodies() {
        assert_eq!(
            Endpoint::parse("http://10.77.0.1:2379/"),
            Some(Endpoint {
                host: "10.77.0.1".into(),
                port: 2379,
                tls: false,
            })
        );
        assert_eq!(
            Endpoint::parse("https://etcd.example:2379").map(|e| e.to_string()),
            Some("https://etcd.example:2379".into())
        );
        for bad in [
            "ftp://a:1",
            "https://a",
            "http://a",
            "http://:1",
            "http://a:x",
            "a:1",
        ] {
            assert_eq!(Endpoint::parse(bad), None, "{bad}");
        }
        let wire = b"5\r\nhello\r\n7;x=y\r\n, world\r\n0\r\n\r\n";
        let mut body = Chunked {
            inner: &wire[..],
            left: 0,
            done: false,
        };
        let mut text = String::new();
        body.read_to_string(&mut text).unwrap();
        assert_eq!(text, "hello, world");
        let cut = b"5\r\nhel";
        let mut body = Chunked {
            inner: &cut[..],
            left: 0,
            done: false,
        };
        assert!(body.read_to_string(&mut String::new()).is_err());
    }
}
