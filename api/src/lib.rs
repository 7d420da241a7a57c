//! Cloud Hypervisor compatible REST API: the internal API protocol, the
//! HTTP server on the API socket, and a small HTTP-over-UNIX-socket client
//! (used by `ch-remote` and tests).
//!
//! # The internal API protocol
//!
//! The HTTP thread never touches the VM. It turns each HTTP request into one
//! typed [`ApiRequest`] and asks the VMM thread, which alone changes VM
//! state:
//!
//! 1. [`channel`] creates the pair: an [`ApiSender`] (HTTP side, clonable)
//!    and an [`ApiReceiver`] (VMM side). They share an mpsc channel (the
//!    data plane) and a non-blocking eventfd (the control plane).
//! 2. The VMM thread registers the receiver's fd ([`ApiReceiver`] is
//!    `AsRawFd`) for `EPOLLIN` in its epoll set.
//! 3. [`ApiSender::call`] creates a reply channel for this request only,
//!    sends an [`ApiMessage`] `{request, reply}` on the mpsc channel, then
//!    writes the eventfd.
//! 4. When epoll reports the fd, the VMM thread calls
//!    [`ApiReceiver::drain`] (reads the eventfd *first*, then takes every
//!    queued message, so a message sent meanwhile re-arms the eventfd and
//!    none is lost), carries each request out in order, and answers with
//!    [`ApiMessage::respond`].
//! 5. `call` waits for the answer at most [`ApiSender::timeout`]
//!    ([`DEFAULT_CALL_TIMEOUT`]); then it gives [`ApiError::Timeout`] (503).
//!    A dropped reply sender or VMM gives [`ApiError::VmmUnavailable`] (500).
//!
//! ```
//! use api::{channel, ApiRequest, ApiResponse};
//! let (sender, receiver) = channel().unwrap();
//! let vmm = std::thread::spawn(move || loop {
//!     // A real VMM waits in epoll_wait on receiver's fd instead of polling.
//!     for msg in receiver.drain().unwrap() {
//!         let bye = msg.request == ApiRequest::VmmShutdown;
//!         msg.respond(Ok(ApiResponse::Empty));
//!         if bye { return; }
//!     }
//!     std::thread::yield_now();
//! });
//! assert_eq!(sender.call(ApiRequest::VmmShutdown), Ok(ApiResponse::Empty));
//! vmm.join().unwrap();
//! ```
//!
//! # Shutdown
//!
//! [`start_http_server`] takes a kill-switch eventfd. The VMM writes it
//! when it exits (after answering `vmm.shutdown`, or for any other reason)
//! and joins the server thread; the server never sends requests to its own
//! socket.

#![deny(missing_docs)]

pub mod client;
mod protocol;
pub mod router;
mod server;
mod socket;
mod types;

pub use protocol::{
    channel, ApiError, ApiMessage, ApiReceiver, ApiRequest, ApiResponse, ApiResult, ApiSender,
    Needs, UnsupportedAction, DEFAULT_CALL_TIMEOUT,
};
pub use server::{start_http_server, start_http_server_with, ServerOptions, SERVER_NAME};
pub use socket::{ApiSocket, ApiSocketError};
pub use types::{
    BalloonSize, BalloonStatsResponse, BalloonTierStats, DeviceNode, PciDeviceInfo, VmCounters,
    VmInfo, VmRemoveDeviceData, VmResizeData, VmResizeDiskData, VmResizeZoneData, VmState,
    VmmPingResponse,
};
