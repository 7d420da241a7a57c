//! The HTTP/1.1 server on the API socket.
//!
//! Why hyper (with a tokio runtime confined to this one thread) and not
//! tiny_http: Firecracker's micro_http, which Cloud Hypervisor uses, is not
//! on crates.io. tiny_http is synchronous and simpler, but it gives no
//! access to the client socket, so there is no read timeout: a client that
//! sends half a body would hold a worker thread forever, and it spawns a
//! thread per connection without bound. hyper gives per-connection header
//! read timeouts, lets us bound body size and body read time, serves any
//! number of slow connections from one thread, and has a graceful shutdown
//! for in-flight answers. The runtime never leaves the `http-server` thread
//! (plus a small blocking pool for [`ApiSender::call`]), so the VMM keeps its
//! thread-per-concern design and never sees async code.

use std::convert::Infallible;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::ext::ReasonPhrase;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, SERVER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::UnixListener;
use tokio::sync::Semaphore;
use vmm_sys_util::eventfd::EventFd;

use crate::protocol::{ApiError, ApiSender};
use crate::router::{error_reply, find_route, reply_for, HttpError, HttpReply, MAX_BODY_SIZE};
use crate::socket::ApiSocket;

/// The `Server` header on every answer (as upstream).
pub const SERVER_NAME: &str = "Cloud Hypervisor API";

/// Limits of the server. [`ServerOptions::default`] is what the VMM uses;
/// tests shorten the timeouts.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// A client must send a request's complete headers within this time,
    /// else its connection is closed.
    pub header_timeout: Duration,
    /// A client must send the complete body within this time (408).
    pub body_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// After the kill event, in-flight answers get this long to finish.
    pub shutdown_grace: Duration,
    /// Run first thing on the server thread (the VMM's seccomp filter for
    /// it); if it fails the server does not start.
    pub confine_thread: Option<fn() -> io::Result<()>>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 64,
            shutdown_grace: Duration::from_secs(2),
            confine_thread: None,
        }
    }
}

/// [`start_http_server_with`] with [`ServerOptions::default`].
pub fn start_http_server(
    socket: ApiSocket,
    sender: ApiSender,
    kill_evt: EventFd,
) -> io::Result<JoinHandle<()>> {
    start_http_server_with(socket, sender, kill_evt, ServerOptions::default())
}

/// Starts the `http-server` thread on `socket`. Every request becomes one
/// [`ApiSender::call`]; the thread never touches the VM.
///
/// Binding errors are returned here, before the thread starts. The thread
/// ends when `kill_evt` becomes readable (the VMM writes it; the server
/// never reads it): it stops accepting, lets in-flight answers finish for
/// [`ServerOptions::shutdown_grace`], removes the socket file it created,
/// and returns. Join the handle after writing `kill_evt`.
pub fn start_http_server_with(
    socket: ApiSocket,
    sender: ApiSender,
    kill_evt: EventFd,
    options: ServerOptions,
) -> io::Result<JoinHandle<()>> {
    let std_listener = socket.listen()?;
    std_listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(4)
        .thread_name("http-server-call")
        .build()?;
    let (listener, kill) = {
        let _guard = runtime.enter();
        let listener = UnixListener::from_std(std_listener)?;
        // SAFETY: the EventFd owns its fd, which stays open and unchanged
        // until the EventFd is dropped, and the AsyncFd owns the EventFd.
        let kill = unsafe { AsyncFd::register_with_interest(kill_evt, Interest::READABLE) }?;
        (listener, kill)
    };
    let owned_path = match socket {
        ApiSocket::Path(p) => Some(p),
        ApiSocket::Fd(_) => None,
    };
    let confine = options.confine_thread;
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let handle = std::thread::Builder::new()
        .name("http-server".into())
        .spawn(move || {
            let confined = confine.map_or(Ok(()), |f| f());
            let ok = confined.is_ok();
            let _ = ready_tx.send(confined);
            if !ok {
                return;
            }
            let server = Server {
                sender,
                options,
                owned_path,
            };
            runtime.block_on(server.run(listener, kill));
            // Calls still blocked on a wedged VMM are abandoned.
            runtime.shutdown_timeout(Duration::from_millis(100));
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(io::Error::other(
                "the API server thread died before it started",
            ))
        }
    }
}

struct Server {
    sender: ApiSender,
    options: ServerOptions,
    owned_path: Option<PathBuf>,
}

impl Server {
    async fn run(self, listener: UnixListener, kill: AsyncFd<EventFd>) {
        let ctx = Arc::new(Ctx {
            sender: self.sender,
            body_timeout: self.options.body_timeout,
        });
        let slots = Arc::new(Semaphore::new(self.options.max_connections.max(1)));
        let graceful = GracefulShutdown::new();
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.options.header_timeout)
            .max_buf_size(64 * 1024)
            // Upstream's clients match header names case-sensitively
            // (`Content-Length:`) and never expect a `date` header.
            .title_case_headers(true)
            .auto_date_header(false);

        loop {
            let permit = tokio::select! {
                _ = kill.readable() => break,
                p = slots.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break, // never closed
                },
            };
            let stream = tokio::select! {
                _ = kill.readable() => break,
                r = listener.accept() => match r {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // EMFILE and the like: back off instead of spinning.
                        log::warn!("API socket accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let ctx = ctx.clone();
            let service = service_fn(move |req| {
                let ctx = ctx.clone();
                async move { Ok::<_, Infallible>(ctx.handle(req).await) }
            });
            let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    log::debug!("API connection ended: {e}");
                }
                drop(permit);
            });
        }

        drop(listener);
        if let Some(path) = &self.owned_path {
            let _ = std::fs::remove_file(path);
        }
        if tokio::time::timeout(self.options.shutdown_grace, graceful.shutdown())
            .await
            .is_err()
        {
            log::warn!("API connections still open at shutdown were dropped");
        }
    }
}

struct Ctx {
    sender: ApiSender,
    body_timeout: Duration,
}

impl Ctx {
    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        to_response(self.reply(req).await)
    }

    async fn reply(&self, req: Request<Incoming>) -> HttpReply {
        let route = match find_route(req.method().as_str(), req.uri().path()) {
            Ok(route) => route,
            Err(e) => return error_reply(&e),
        };
        let too_large = HttpError::BodyTooLarge {
            limit: MAX_BODY_SIZE,
        };
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_BODY_SIZE as u64) {
            return error_reply(&too_large);
        }
        let body = Limited::new(req.into_body(), MAX_BODY_SIZE).collect();
        let body = match tokio::time::timeout(self.body_timeout, body).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
                return error_reply(&too_large)
            }
            Ok(Err(e)) => return error_reply(&HttpError::BodyTimeout(e.to_string())),
            Err(_) => {
                return error_reply(&HttpError::BodyTimeout(format!(
                    "not complete after {:?}",
                    self.body_timeout
                )))
            }
        };
        let request = match route.build(&body) {
            Ok(r) => r,
            Err(e) => return error_reply(&e),
        };
        let sender = self.sender.clone();
        let result = tokio::task::spawn_blocking(move || sender.call(request))
            .await
            .unwrap_or_else(|e| Err(ApiError::Internal(format!("API call task failed: {e}"))));
        reply_for(route, result)
    }
}

/// Status line without a reason phrase (`HTTP/1.1 200 `), as upstream's
/// micro_http writes it: upstream's `ch-remote` parses everything after the
/// version up to the CR as the status number, so `200 OK` breaks it.
const NO_REASON: ReasonPhrase = ReasonPhrase::from_static(b"");

/// Puts an [`HttpReply`] on the wire framed as upstream's server frames it:
/// `Server`, `Connection`, then (unless 204) `Content-Type` and
/// `Content-Length`, in that order. After 408 and 413 the connection is
/// closed: the rest of the body is not read.
fn to_response(reply: HttpReply) -> Response<Full<Bytes>> {
    let close = matches!(reply.status, 408 | 413);
    let body = reply.body.map(Bytes::from).unwrap_or_default();
    let len = body.len();
    let mut response = Response::new(Full::new(body));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.extensions_mut().insert(NO_REASON);
    let headers = response.headers_mut();
    headers.insert(SERVER, HeaderValue::from_static(SERVER_NAME));
    let connection = if close { "close" } else { "keep-alive" };
    headers.insert(CONNECTION, HeaderValue::from_static(connection));
    if reply.status != 204 {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
    }
    response
}
