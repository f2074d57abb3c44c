//! A small HTTP/1.1 client over `std::net::TcpStream` for the end-to-end tests.
//!
//! Hand-written on purpose: the tests send bytes no library would (malformed JSON, bad
//! framing), read server-sent events line by line, and drop the connection mid-stream. Every
//! call has a deadline; a server that hangs fails the test instead of hanging it.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The deadline of one ordinary call (a generation of a few dozen tokens on 2 busy cores; on a
/// CPU Vulkan device (lavapipe) with eight concurrent streams a stream has taken over 120 s).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// A whole response.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header of this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("status {}: the body is not JSON ({e}): {}", self.status, self.text()))
    }
}

/// The head of a response: status and headers.
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
}

fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10).min(timeout))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn write_request(s: &mut TcpStream, addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> io::Result<()> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    if let Some(b) = body {
        bytes.extend_from_slice(b);
    }
    s.write_all(&bytes)?;
    s.flush()
}

fn read_head(r: &mut impl BufRead) -> io::Result<Head> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if line.is_empty() {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection before answering"));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    Ok(Head { status, headers })
}

/// Decodes `Transfer-Encoding: chunked` incrementally.
pub struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            if self.inner.read_line(&mut line)? == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the chunked body ended without its last chunk"));
            }
            let size = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size, 16).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("bad chunk size line {line:?}")))?;
            if size == 0 {
                // Trailers up to the empty line.
                loop {
                    line.clear();
                    if self.inner.read_line(&mut line)? == 0 || line.trim().is_empty() {
                        break;
                    }
                }
                self.done = true;
                return Ok(0);
            }
            self.left = size;
        }
        let want = self.left.min(buf.len());
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the connection closed inside a chunk"));
        }
        self.left -= n;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

/// The body of a response, however it is framed.
fn body_reader(head: &Head, r: BufReader<TcpStream>) -> Box<dyn Read + Send> {
    let get = |name: &str| head.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    if get("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        Box::new(Chunked { inner: r, left: 0, done: false })
    } else if let Some(n) = get("content-length").and_then(|v| v.parse::<u64>().ok()) {
        Box::new(r.take(n))
    } else {
        Box::new(r)
    }
}

/// One request, the whole response read. `body` is sent as is.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>, timeout: Duration) -> io::Result<Response> {
    let deadline = Instant::now() + timeout;
    let mut s = connect(addr, timeout)?;
    if let Err(e) = write_request(&mut s, addr, method, path, headers, body) {
        // A server refusing a large body may answer and close before reading all of it.
        if !matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset) {
            return Err(e);
        }
    }
    let mut r = BufReader::new(s);
    let head = read_head(&mut r)?;
    let mut body = Vec::new();
    let mut reader = body_reader(&head, r);
    let mut buf = [0u8; 16384];
    loop {
        if Instant::now() > deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("{method} {path}: no complete answer within {timeout:?}")));
        }
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Ok(Response { status: head.status, headers: head.headers, body })
}

pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], None, CALL_TIMEOUT).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

pub fn post_json(addr: SocketAddr, path: &str, body: &Value) -> Response {
    post_raw(addr, path, body.to_string().as_bytes())
}

pub fn post_raw(addr: SocketAddr, path: &str, body: &[u8]) -> Response {
    request(addr, "POST", path, &[("Content-Type", "application/json")], Some(body), CALL_TIMEOUT).unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// A streaming response being read: server-sent events, line by line.
pub struct Sse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    lines: BufReader<Box<dyn Read + Send>>,
    deadline: Instant,
}

impl Sse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The next raw line (without its line ending); `None` at the end of the stream.
    pub fn next_line(&mut self) -> io::Result<Option<String>> {
        if Instant::now() > self.deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the stream ran past its deadline"));
        }
        let mut line = String::new();
        if self.lines.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        Ok(Some(line.trim_end_matches(['\r', '\n']).to_string()))
    }

    /// The payload of the next `data:` line; `None` at the end of the stream. Blank lines and
    /// comments are skipped; other fields are refused (the server sends only `data:`).
    pub fn next_data(&mut self) -> io::Result<Option<String>> {
        while let Some(line) = self.next_line()? {
            if line.is_empty() || line.starts_with(':') {
                continue;
            }
            let Some(data) = line.strip_prefix("data:") else {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("an SSE line that is not `data:` {line:?}")));
            };
            return Ok(Some(data.strip_prefix(' ').unwrap_or(data).to_string()));
        }
        Ok(None)
    }

    /// Every remaining `data:` payload up to the end of the stream.
    pub fn collect(mut self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        while let Some(d) = self.next_data()? {
            out.push(d);
        }
        Ok(out)
    }

    /// The whole body, when the answer was not a stream (an error).
    pub fn rest(mut self) -> String {
        let mut s = String::new();
        let _ = self.lines.read_to_string(&mut s);
        s
    }
}

/// Starts a streaming POST; the head is read, the events are not.
pub fn open_stream(addr: SocketAddr, path: &str, body: &Value, timeout: Duration) -> io::Result<Sse> {
    let deadline = Instant::now() + timeout;
    let mut s = connect(addr, timeout)?;
    let bytes = body.to_string().into_bytes();
    write_request(&mut s, addr, "POST", path, &[("Content-Type", "application/json"), ("Accept", "text/event-stream")], Some(&bytes))?;
    let mut r = BufReader::new(s);
    let head = read_head(&mut r)?;
    let status = head.status;
    let headers = head.headers.clone();
    let reader = body_reader(&head, r);
    Ok(Sse { status, headers, lines: BufReader::new(reader), deadline })
}

/// Streams a request to its end and returns the `data:` payloads (the last is `[DONE]`).
/// Panics when the answer is not a 200 event stream.
pub fn stream_all(addr: SocketAddr, path: &str, body: &Value) -> Vec<String> {
    let sse = open_stream(addr, path, body, CALL_TIMEOUT).unwrap_or_else(|e| panic!("POST {path} (stream): {e}"));
    if sse.status != 200 {
        let status = sse.status;
        panic!("POST {path} (stream): status {status}: {}", sse.rest());
    }
    assert!(
        sse.header("content-type").is_some_and(|v| v.starts_with("text/event-stream")),
        "a stream's content type is text/event-stream, got {:?}",
        sse.header("content-type")
    );
    sse.collect().unwrap_or_else(|e| panic!("POST {path} (stream): {e}"))
}

/// The JSON chunks of a finished stream (everything before `[DONE]`), checking it ends with
/// exactly one `[DONE]`.
pub fn chunks(events: &[String]) -> Vec<Value> {
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "a stream ends with `data: [DONE]`: {events:?}");
    assert_eq!(events.iter().filter(|e| *e == "[DONE]").count(), 1, "one [DONE]: {events:?}");
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap_or_else(|err| panic!("an SSE chunk is not JSON ({err}): {e}")))
        .collect()
}

/// The text a stream carried: chat deltas' `content` or completion chunks' `text`, joined.
pub fn stream_text(chunks: &[Value]) -> String {
    let mut s = String::new();
    for c in chunks {
        for choice in c["choices"].as_array().into_iter().flatten() {
            if let Some(t) = choice["delta"]["content"].as_str() {
                s.push_str(t);
            }
            if let Some(t) = choice["text"].as_str() {
                s.push_str(t);
            }
        }
    }
    s
}
