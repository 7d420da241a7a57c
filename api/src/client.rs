//! A dependency-free HTTP/1.1 client over a UNIX socket, for `ch-remote`
//! and tests: one request per connection (`Connection: close`).
//!
//! ```no_run
//! use api::client::{api_request, Method};
//! let r = api_request("/run/ch.sock".as_ref(), Method::Get, "vmm.ping", None).unwrap();
//! assert_eq!(r.status, 200);
//! ```

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::router::API_PREFIX;

/// How long to wait for the server's answer; longer than
/// [`crate::DEFAULT_CALL_TIMEOUT`] so the server's own 503 arrives first.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(90);

/// Largest response accepted.
const MAX_RESPONSE: u64 = 16 << 20;

/// The methods the API uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// PUT.
    Put,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Put => "PUT",
        }
    }
}

/// A failed exchange.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error("cannot connect to the API socket {path}")]
    Connect {
        /// Socket path.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Reading or writing failed.
    #[error("API socket I/O failed")]
    Io(#[from] io::Error),
    /// The server's answer is not valid HTTP.
    #[error("malformed HTTP response: {0}")]
    Malformed(String),
    /// The server answered with an error status.
    #[error("server responded with {status}: {message}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The error chain from the body, joined with ": ".
        message: String,
    },
}

/// A parsed HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body (de-chunked).
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// First header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `Ok(body)` for 2xx, else [`ClientError::Status`] with the server's
    /// error text (the JSON array of the error chain, joined).
    pub fn into_result(self) -> Result<Vec<u8>, ClientError> {
        if (200..300).contains(&self.status) {
            return Ok(self.body);
        }
        let message = match serde_json::from_slice::<Vec<String>>(&self.body) {
            Ok(chain) => chain.join(": "),
            Err(_) => String::from_utf8_lossy(&self.body).into_owned(),
        };
        Err(ClientError::Status {
            status: self.status,
            message,
        })
    }
}

/// Sends `method /api/v1/<endpoint>` with an optional JSON body to the
/// server on `socket` and returns its answer, whatever the status.
pub fn api_request(
    socket: &Path,
    method: Method,
    endpoint: &str,
    body: Option<&[u8]>,
) -> Result<HttpResponse, ClientError> {
    let stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: socket.display().to_string(),
        source,
    })?;
    let path = format!("{API_PREFIX}{endpoint}");
    let raw = raw_request(method.as_str(), &path, body);
    exchange(stream, &raw, RESPONSE_TIMEOUT)
}

/// The bytes of a request (also used by tests to write partial requests).
pub fn raw_request(method: &str, path: &str, body: Option<&[u8]>) -> Vec<u8> {
    let mut raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\nConnection: close\r\n"
    )
    .into_bytes();
    if let Some(body) = body {
        raw.extend_from_slice(
            format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            )
            .as_bytes(),
        );
    }
    raw.extend_from_slice(b"\r\n");
    if let Some(body) = body {
        raw.extend_from_slice(body);
    }
    raw
}

/// Writes `raw` on `stream` and reads one response until the server closes
/// or the declared length is read.
pub fn exchange(
    mut stream: UnixStream,
    raw: &[u8],
    timeout: Duration,
) -> Result<HttpResponse, ClientError> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(raw)?;
    let mut buf = Vec::new();
    let mut reader = stream.take(MAX_RESPONSE);
    let mut chunk = [0u8; 8192];
    loop {
        let n = reader.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(r) = parse_response(&buf)? {
            return Ok(r);
        }
    }
    parse_response(&buf)?.ok_or_else(|| ClientError::Malformed("truncated response".into()))
}

/// Parses a complete response from `buf`; `Ok(None)` while incomplete.
pub fn parse_response(buf: &[u8]) -> Result<Option<HttpResponse>, ClientError> {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| ClientError::Malformed("non-UTF-8 header".into()))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next(), parts.next());
    if !version.is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(ClientError::Malformed(format!(
            "status line {status_line:?}"
        )));
    }
    let status = code
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| ClientError::Malformed(format!("status line {status_line:?}")))?;
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| ClientError::Malformed(format!("header line {line:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let mut response = HttpResponse {
        status,
        headers,
        body: Vec::new(),
    };
    let rest = &buf[head_end + 4..];
    if response
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        return Ok(dechunk(rest)?.map(|body| HttpResponse { body, ..response }));
    }
    let len = match response.header("content-length") {
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| ClientError::Malformed(format!("content-length {v:?}")))?,
        None if status == 204 || status == 304 || (100..200).contains(&status) => 0,
        // No length: the body runs to the end of the connection.
        None => return Ok(None),
    };
    if rest.len() < len {
        return Ok(None);
    }
    response.body = rest[..len].to_vec();
    Ok(Some(response))
}

fn dechunk(mut rest: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
    let mut body = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_str = std::str::from_utf8(&rest[..eol])
            .map_err(|_| ClientError::Malformed("chunk size".into()))?;
        let size_str = size_str.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_str, 16)
            .map_err(|_| ClientError::Malformed(format!("chunk size {size_str:?}")))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(Some(body));
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_delimited_and_bodiless_responses() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer: x\r\n\r\n{}")
            .unwrap()
            .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{}"[..]));
        assert_eq!(r.header("SERVER"), Some("x"));
        let r = parse_response(b"HTTP/1.1 204 No Content\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.status, 204);
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn parses_chunked_bodies() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n";
        assert_eq!(parse_response(raw).unwrap().unwrap().body, b"[]");
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_response(b"SSH-2.0\r\n\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 abc\r\n\r\n").is_err());
    }

    #[test]
    fn error_status_carries_the_server_error_chain() {
        let r = HttpResponse {
            status: 409,
            headers: vec![],
            body: br#"["VM is already booted","detail"]"#.to_vec(),
        };
        let e = r.into_result().unwrap_err();
        assert_eq!(
            e.to_string(),
            "server responded with 409: VM is already booted: detail"
        );
    }
}
