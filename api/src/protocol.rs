//! The internal API protocol between the HTTP thread and the VMM thread.
//! See the crate documentation for the steps.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use vm_config::VmConfig;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::types::{
    BalloonStatsResponse, VmCounters, VmInfo, VmResizeData, VmState, VmmPingResponse,
};

/// Everything the VMM can be asked. One variant per REST action; the doc of
/// each says when it is allowed. The VMM thread alone carries them out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiRequest {
    /// `PUT vm.create`: store a (validated) configuration. Only when no VM
    /// exists, else [`ApiError::VmAlreadyCreated`].
    VmCreate(Box<VmConfig>),
    /// `PUT vm.boot`: build and start the VM. From `Created` or `Shutdown`;
    /// [`ApiError::VmNotCreated`] without a VM, [`ApiError::VmAlreadyBooted`]
    /// when running or paused.
    VmBoot,
    /// `PUT vm.shutdown`: stop the vCPUs and tear the VM down, keeping the
    /// configuration (state `Shutdown`). From `Running` or `Paused`.
    VmShutdown,
    /// `PUT vm.reboot`: shutdown then boot with the same configuration.
    /// From `Running` or `Paused`.
    VmReboot,
    /// `PUT vm.pause`: stop the vCPUs. From `Running` only.
    VmPause,
    /// `PUT vm.resume`: continue the vCPUs. From `Paused` only.
    VmResume,
    /// `PUT vm.power-button`: press the ACPI power button; the guest shuts
    /// itself down. From `Running`.
    VmPowerButton,
    /// `PUT vm.delete`: shut down if needed and forget the VM. Any state;
    /// deleting when no VM exists succeeds (as upstream).
    VmDelete,
    /// `GET vm.info`: configuration, state, usable memory. Any state but
    /// "no VM" ([`ApiError::VmNotCreated`]).
    VmInfo,
    /// `GET vm.counters`: per-device counters. Needs a booted VM.
    VmCounters,
    /// `PUT vm.resize`: vCPUs, RAM, or balloon (per tier). Before boot only
    /// the configuration changes.
    VmResize(VmResizeData),
    /// `GET vm.balloon-stats`: per-tier balloon sizes and the guest's
    /// statistics. Needs a booted VM with a balloon.
    VmBalloonStats,
    /// `GET vmm.ping`: always allowed.
    VmmPing,
    /// `PUT vmm.shutdown`: always allowed. The VMM replies first, then
    /// shuts the VM down, fires the HTTP server's kill event, and exits.
    VmmShutdown,
}

impl ApiRequest {
    /// The endpoint name (`vm.boot`), for logs and errors.
    pub fn endpoint(&self) -> &'static str {
        match self {
            Self::VmCreate(_) => "vm.create",
            Self::VmBoot => "vm.boot",
            Self::VmShutdown => "vm.shutdown",
            Self::VmReboot => "vm.reboot",
            Self::VmPause => "vm.pause",
            Self::VmResume => "vm.resume",
            Self::VmPowerButton => "vm.power-button",
            Self::VmDelete => "vm.delete",
            Self::VmInfo => "vm.info",
            Self::VmCounters => "vm.counters",
            Self::VmResize(_) => "vm.resize",
            Self::VmBalloonStats => "vm.balloon-stats",
            Self::VmmPing => "vmm.ping",
            Self::VmmShutdown => "vmm.shutdown",
        }
    }
}

/// What the VMM answers on success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiResponse {
    /// No body (HTTP 204; 200 for `vmm.shutdown`).
    Empty,
    /// `vm.info`.
    VmInfo(Box<VmInfo>),
    /// `vm.counters`.
    VmCounters(VmCounters),
    /// `vm.balloon-stats`.
    BalloonStats(Box<BalloonStatsResponse>),
    /// `vmm.ping`.
    VmmPing(VmmPingResponse),
}

/// Why a request failed. Each variant maps to one HTTP status
/// ([`ApiError::status`]): 4xx when the client can fix it (bad input, wrong
/// state), 5xx only when the VMM itself failed or is unreachable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The action needs a VM and none was created (404, as newest upstream).
    #[error("VM is not created")]
    VmNotCreated,
    /// `vm.create` when a VM already exists (409).
    #[error("VM is already created")]
    VmAlreadyCreated,
    /// The action needs a booted VM (409).
    #[error("VM is not booted")]
    VmNotBooted,
    /// `vm.boot` on a running or paused VM (409).
    #[error("VM is already booted")]
    VmAlreadyBooted,
    /// Any other action not allowed in the current state (409), such as
    /// resuming a running VM.
    #[error("invalid VM state transition from {from} to {to}")]
    InvalidStateTransition {
        /// State the VM is in.
        from: VmState,
        /// State the action would lead to.
        to: VmState,
    },
    /// The request itself is wrong (400): bad value, failed validation.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The VM has no balloon device to resize (409).
    #[error("VM has no balloon device")]
    NoBalloon,
    /// The request is well-formed but this VMM does not implement it (400,
    /// not 501: nothing is broken, the client asked for a feature we lack).
    #[error("not supported: {0}")]
    NotSupported(String),
    /// The VMM did not answer in time (503). It may still carry the request
    /// out later.
    #[error("the VMM did not answer within {0:?}; the request may still be carried out")]
    Timeout(Duration),
    /// The VMM thread is gone (500).
    #[error("the VMM is not running")]
    VmmUnavailable,
    /// The VMM failed to carry out a valid request (500).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status code this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Self::VmNotCreated => 404,
            Self::VmAlreadyCreated
            | Self::VmNotBooted
            | Self::VmAlreadyBooted
            | Self::InvalidStateTransition { .. }
            | Self::NoBalloon => 409,
            Self::BadRequest(_) | Self::NotSupported(_) => 400,
            Self::Timeout(_) => 503,
            Self::VmmUnavailable | Self::Internal(_) => 500,
        }
    }
}

/// What every request produces.
pub type ApiResult = Result<ApiResponse, ApiError>;

/// One request in flight, as the VMM thread receives it.
#[derive(Debug)]
pub struct ApiMessage {
    /// What is asked.
    pub request: ApiRequest,
    /// Where the answer goes (one channel per request).
    pub reply: mpsc::Sender<ApiResult>,
}

impl ApiMessage {
    /// Sends the answer back. A requester that gave up (timed out, client
    /// disconnected) is not an error for the VMM, so a failed send is ignored.
    pub fn respond(self, result: ApiResult) {
        let _ = self.reply.send(result);
    }
}

/// How long [`ApiSender::call`] waits by default for the VMM's answer.
///
/// Requests are served one at a time by the VMM thread, and most take
/// milliseconds; `vm.boot` of a large prefaulted VM can take seconds. A
/// minute is long enough for all legitimate work and short enough that a
/// wedged VMM thread shows up as 503 instead of a client hanging forever.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The requesting end (HTTP thread, tests). Cheap to clone.
#[derive(Clone, Debug)]
pub struct ApiSender {
    tx: mpsc::Sender<ApiMessage>,
    evt: Arc<EventFd>,
    timeout: Duration,
}

impl ApiSender {
    /// The same sender with another answer timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The answer timeout in use.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends `request` to the VMM thread and waits (at most the timeout) for
    /// its answer. [`ApiError::VmmUnavailable`] when the VMM thread is gone,
    /// [`ApiError::Timeout`] when it does not answer in time.
    pub fn call(&self, request: ApiRequest) -> ApiResult {
        let (reply, answer) = mpsc::channel();
        self.tx
            .send(ApiMessage { request, reply })
            .map_err(|_| ApiError::VmmUnavailable)?;
        // Data first, then the wake-up: the VMM drains the channel after
        // reading the eventfd, so it cannot miss this message.
        self.evt
            .write(1)
            .map_err(|e| ApiError::Internal(format!("cannot wake the VMM thread: {e}")))?;
        match answer.recv_timeout(self.timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(ApiError::Timeout(self.timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(ApiError::VmmUnavailable),
        }
    }
}

/// The VMM thread's end: register [`ApiReceiver::as_raw_fd`] for `EPOLLIN`
/// in the VMM's epoll set; when it fires call [`ApiReceiver::drain`] and
/// answer every message it returns.
#[derive(Debug)]
pub struct ApiReceiver {
    rx: mpsc::Receiver<ApiMessage>,
    evt: EventFd,
}

impl ApiReceiver {
    /// Consumes the wake-up (resets the eventfd counter). Call it *before*
    /// taking messages, so a message sent meanwhile re-arms the eventfd.
    pub fn ack_event(&self) -> io::Result<()> {
        match self.evt.read() {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The next pending message, if any (never blocks).
    pub fn try_recv(&self) -> Option<ApiMessage> {
        // Empty or disconnected (the HTTP server is gone): nothing to do.
        self.rx.try_recv().ok()
    }

    /// [`ApiReceiver::ack_event`] then every pending message, in order.
    pub fn drain(&self) -> io::Result<Vec<ApiMessage>> {
        self.ack_event()?;
        Ok(std::iter::from_fn(|| self.try_recv()).collect())
    }
}

impl AsRawFd for ApiReceiver {
    fn as_raw_fd(&self) -> RawFd {
        self.evt.as_raw_fd()
    }
}

/// A connected sender/receiver pair sharing one non-blocking eventfd.
pub fn channel() -> io::Result<(ApiSender, ApiReceiver)> {
    let evt = EventFd::new(EFD_NONBLOCK)?;
    let (tx, rx) = mpsc::channel();
    let sender = ApiSender {
        tx,
        evt: Arc::new(evt.try_clone()?),
        timeout: DEFAULT_CALL_TIMEOUT,
    };
    Ok((sender, ApiReceiver { rx, evt }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn call_gets_the_vmm_answer_and_wakes_the_eventfd() {
        let (tx, rx) = channel().unwrap();
        let vmm = thread::spawn(move || loop {
            let msgs = rx.drain().unwrap();
            for m in msgs {
                let done = m.request == ApiRequest::VmmShutdown;
                m.respond(Ok(ApiResponse::Empty));
                if done {
                    return;
                }
            }
            thread::sleep(Duration::from_millis(1));
        });
        assert_eq!(tx.call(ApiRequest::VmmPing), Ok(ApiResponse::Empty));
        assert_eq!(tx.call(ApiRequest::VmmShutdown), Ok(ApiResponse::Empty));
        vmm.join().unwrap();
        assert_eq!(tx.call(ApiRequest::VmmPing), Err(ApiError::VmmUnavailable));
    }

    #[test]
    fn call_times_out_when_the_vmm_is_busy() {
        let (tx, rx) = channel().unwrap();
        let tx = tx.with_timeout(Duration::from_millis(50));
        assert_eq!(
            tx.call(ApiRequest::VmBoot),
            Err(ApiError::Timeout(Duration::from_millis(50)))
        );
        // The request stayed queued, and the eventfd was signalled.
        let msgs = rx.drain().unwrap();
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].request, ApiRequest::VmBoot);
        assert!(rx.drain().unwrap().is_empty());
        // Answering a requester that gave up does not panic.
        msgs.into_iter()
            .for_each(|m| m.respond(Ok(ApiResponse::Empty)));
    }

    #[test]
    fn a_message_dropped_unanswered_is_reported_as_vmm_unavailable() {
        let (tx, rx) = channel().unwrap();
        let t = thread::spawn(move || tx.call(ApiRequest::VmInfo));
        let msg = loop {
            if let Some(m) = rx.try_recv() {
                break m;
            }
            thread::sleep(Duration::from_millis(1));
        };
        drop(msg);
        assert_eq!(t.join().unwrap(), Err(ApiError::VmmUnavailable));
    }

    #[test]
    fn statuses_are_4xx_for_clients_and_5xx_for_the_vmm() {
        assert_eq!(ApiError::VmNotCreated.status(), 404);
        assert_eq!(ApiError::VmAlreadyBooted.status(), 409);
        assert_eq!(ApiError::BadRequest("x".into()).status(), 400);
        assert_eq!(ApiError::NotSupported("x".into()).status(), 400);
        assert_eq!(ApiError::Timeout(Duration::ZERO).status(), 503);
        assert_eq!(ApiError::Internal("x".into()).status(), 500);
    }
}
