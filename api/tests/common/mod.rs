//! Shared harness for the integration tests: the real HTTP server on a real
//! UNIX socket in a temporary directory, with the fake VMM thread behind it.

#![allow(dead_code)]

pub mod fake_vmm;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use api::client::{api_request, HttpResponse, Method};
use api::{channel, start_http_server_with, ApiRequest, ApiSender, ApiSocket, ServerOptions};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::tempdir::TempDir;

pub use fake_vmm::FakeOptions;

/// A running server + fake VMM.
pub struct Harness {
    _dir: TempDir,
    /// The API socket path.
    pub socket: PathBuf,
    kill_evt: EventFd,
    direct: ApiSender,
    server: Option<JoinHandle<()>>,
    vmm: Option<JoinHandle<u64>>,
}

/// Short timeouts so slow-client tests finish quickly.
pub fn test_options() -> ServerOptions {
    ServerOptions {
        header_timeout: Duration::from_millis(800),
        body_timeout: Duration::from_millis(800),
        max_connections: 64,
        shutdown_grace: Duration::from_secs(2),
        confine_thread: None,
    }
}

impl Harness {
    /// Default fake (with a balloon) and test options.
    pub fn start() -> Self {
        Self::start_with(
            FakeOptions {
                has_balloon: true,
                ..Default::default()
            },
            test_options(),
            None,
        )
    }

    /// Custom fake, server options and call timeout.
    pub fn start_with(
        fake: FakeOptions,
        options: ServerOptions,
        call_timeout: Option<Duration>,
    ) -> Self {
        let dir = TempDir::new().expect("tempdir");
        let socket = dir.as_path().join("api.sock");
        let (sender, receiver) = channel().expect("channel");
        let sender = match call_timeout {
            Some(t) => sender.with_timeout(t),
            None => sender,
        };
        let kill_evt = EventFd::new(EFD_NONBLOCK).expect("eventfd");
        let direct = sender.clone();
        let server = start_http_server_with(
            ApiSocket::Path(socket.clone()),
            sender,
            kill_evt.try_clone().expect("dup"),
            options,
        )
        .expect("server starts");
        let vmm_kill = kill_evt.try_clone().expect("dup");
        let vmm = std::thread::spawn(move || fake_vmm::run_fake_vmm(receiver, vmm_kill, fake));
        Self {
            _dir: dir,
            socket,
            kill_evt,
            direct,
            server: Some(server),
            vmm: Some(vmm),
        }
    }

    /// One request through the library client.
    pub fn req(&self, method: Method, endpoint: &str, body: Option<&str>) -> HttpResponse {
        api_request(&self.socket, method, endpoint, body.map(str::as_bytes)).expect("exchange")
    }

    /// GET.
    pub fn get(&self, endpoint: &str) -> HttpResponse {
        self.req(Method::Get, endpoint, None)
    }

    /// PUT without body.
    pub fn put(&self, endpoint: &str) -> HttpResponse {
        self.req(Method::Put, endpoint, None)
    }

    /// PUT with a JSON body.
    pub fn put_json(&self, endpoint: &str, body: &str) -> HttpResponse {
        self.req(Method::Put, endpoint, Some(body))
    }

    /// A raw connection to the server.
    pub fn connect(&self) -> UnixStream {
        UnixStream::connect(&self.socket).expect("connect")
    }

    /// Fires the kill switch (as the VMM does) and joins the server thread,
    /// returning how long the join took.
    pub fn kill_server(&mut self) -> Duration {
        let t = Instant::now();
        self.kill_evt.write(1).expect("kill");
        if let Some(h) = self.server.take() {
            h.join().expect("server thread panicked");
        }
        t.elapsed()
    }

    /// Joins the fake VMM (after vmm.shutdown) and the server.
    pub fn join_all(&mut self) -> u64 {
        let n = self.vmm.take().map(|h| h.join().expect("vmm panicked"));
        if let Some(h) = self.server.take() {
            h.join().expect("server thread panicked");
        }
        n.unwrap_or(0)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if self.vmm.as_ref().is_some_and(|h| !h.is_finished()) {
            // Stop the fake VMM directly: the server may be gone already.
            let _ = self.direct.call(ApiRequest::VmmShutdown);
        }
        let _ = self.kill_evt.write(1);
        if let Some(h) = self.server.take() {
            let _ = h.join();
        }
        if let Some(h) = self.vmm.take() {
            let _ = h.join();
        }
    }
}

/// Reads whatever the server sends until it closes (or `timeout`).
pub fn read_until_close(stream: &mut UnixStream, timeout: Duration) -> (Vec<u8>, bool) {
    stream.set_read_timeout(Some(timeout)).expect("timeout");
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, false),
        }
    }
}

/// Writes bytes, ignoring a peer that already closed.
pub fn write_raw(stream: &mut UnixStream, bytes: &[u8]) {
    let _ = stream.write_all(bytes);
}

/// The status code of a raw HTTP answer.
pub fn status_of(raw: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(raw).ok()?;
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// A minimal valid vm.create body (upstream-shaped).
pub const CREATE_BODY: &str = r#"{"cpus":{"boot_vcpus":1,"max_vcpus":1},"memory":{"size":1073741824},"payload":{"kernel":"/nonexistent/vmlinux","cmdline":"console=ttyS0"}}"#;

/// Whether a path exists.
pub fn exists(p: &Path) -> bool {
    p.exists()
}
