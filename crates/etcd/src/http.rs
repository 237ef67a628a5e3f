//! Just enough HTTP/1.1 for etcd's JSON gateway: one POST per connection, a body read by
//! length or in chunks (a watch is one long chunked body).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// `http://host:port` of one etcd member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    pub fn parse(url: &str) -> Option<Endpoint> {
        let rest = url.strip_prefix("http://")?.trim_end_matches('/');
        let (host, port) = rest.rsplit_once(':')?;
        if host.is_empty() || host.contains('/') {
            return None;
        }
        Some(Endpoint {
            host: host.to_string(),
            port: port.parse().ok()?,
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}:{}", self.host, self.port)
    }
}

/// A response whose body is still to be read.
pub struct Response {
    pub status: u16,
    pub body: Box<dyn Read + Send>,
    /// The connection, to cut it from another thread.
    pub stream: TcpStream,
}

/// Sends `body` to `path`, with etcd's auth token when given; `timeout` bounds the
/// connection and each read (none: reads block).
pub fn post(
    endpoint: &Endpoint,
    path: &str,
    body: &[u8],
    timeout: Option<Duration>,
    token: Option<&str>,
) -> io::Result<Response> {
    let connect = timeout.unwrap_or(Duration::from_secs(5));
    let address = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
    let mut stream = TcpStream::connect_timeout(&address, connect)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(Some(connect))?;
    let authorization = token.map_or(String::new(), |t| format!("Authorization: {t}\r\n"));
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n\
         {authorization}Content-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.host,
        endpoint.port,
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let status = read_status(&mut reader)?;
    let (mut length, mut chunked) = (None, false);
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
        }
    }
    let body: Box<dyn Read + Send> = match (chunked, length) {
        (true, _) => Box::new(Chunked {
            inner: reader,
            left: 0,
            done: false,
        }),
        (false, Some(length)) => Box::new(reader.take(length)),
        (false, None) => Box::new(reader),
    };
    Ok(Response {
        status,
        body,
        stream,
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
struct Chunked<R> {
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

    #[test]
    fn endpoints_and_chunked_bodies() {
        assert_eq!(
            Endpoint::parse("http://10.77.0.1:2379/"),
            Some(Endpoint {
                host: "10.77.0.1".into(),
                port: 2379
            })
        );
        for bad in ["https://a:1", "http://a", "http://:1", "http://a:x", "a:1"] {
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
