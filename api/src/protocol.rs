//! The internal API protocol between the HTTP thread and the VMM thread.
//! See the crate documentation for the steps.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use vm_config::{DiskConfig, NetConfig, VmConfig};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::types::{
    BalloonStatsResponse, PciDeviceInfo, VmCounters, VmInfo, VmRemoveDeviceData, VmResizeData,
    VmResizeDiskData, VmResizeZoneData, VmState, VmmPingResponse,
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
    /// `PUT vm.nmi`: inject an NMI into every vCPU. Running VM only.
    VmNmi,
    /// `PUT vm.add-disk`: before boot the disk joins the configuration
    /// (204); a running VM gets it hot-plugged on virtio-pci (200,
    /// [`ApiResponse::PciDeviceInfo`]; 500 on virtio-mmio).
    VmAddDisk(Box<DiskConfig>),
    /// `PUT vm.add-net`: as [`ApiRequest::VmAddDisk`] for a NIC.
    VmAddNet(Box<NetConfig>),
    /// `PUT vm.remove-device`: before boot a disk or NIC leaves the
    /// configuration; a running or paused VM's guest is asked to eject it
    /// and the answer comes at once, as upstream's: the device is torn
    /// down when the guest ejects it (virtio-pci; 500 on mmio).
    VmRemoveDevice(VmRemoveDeviceData),
    /// `PUT vm.resize-zone`: needs virtio-mem (500 once the zone exists).
    VmResizeZone(VmResizeZoneData),
    /// `PUT vm.resize-disk`: 500 once the disk exists (not implemented).
    VmResizeDisk(VmResizeDiskData),
    /// An upstream endpoint for a feature this VMM does not have: answered
    /// with the state error upstream gives first, else
    /// [`ApiError::NotSupported`].
    Unsupported(UnsupportedAction),
}

/// What an endpoint of a missing feature needs before upstream would try
/// the feature itself, so that the state errors come out as upstream's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// A VM must exist (404 otherwise).
    Vm,
    /// The VM must run (500 "VM is not running" otherwise).
    Running,
    /// No VM may exist (500 "VM is already created" otherwise).
    NoVm,
}

/// A request for a feature this VMM lacks (see [`ApiRequest::Unsupported`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnsupportedAction {
    /// The endpoint, e.g. `vm.add-fs`.
    pub endpoint: &'static str,
    /// The feature, for the error message (`virtio-fs`).
    pub feature: &'static str,
    /// The state check done first.
    pub needs: Needs,
}

impl UnsupportedAction {
    /// The answer for a VM in `state` (`None`: no VM): upstream's state
    /// error if it would give one, else [`ApiError::NotSupported`].
    pub fn refusal(&self, state: Option<VmState>) -> ApiError {
        let running = matches!(state, Some(VmState::Running | VmState::Paused));
        match (self.needs, state) {
            (Needs::Vm, None) => ApiError::VmNotCreated,
            (Needs::Running, _) if !running => ApiError::VmNotRunning,
            (Needs::NoVm, Some(_)) => ApiError::VmAlreadyCreated,
            _ => ApiError::NotSupported(self.feature.into()),
        }
    }
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
            Self::VmNmi => "vm.nmi",
            Self::VmAddDisk(_) => "vm.add-disk",
            Self::VmAddNet(_) => "vm.add-net",
            Self::VmRemoveDevice(_) => "vm.remove-device",
            Self::VmResizeZone(_) => "vm.resize-zone",
            Self::VmResizeDisk(_) => "vm.resize-disk",
            Self::Unsupported(a) => a.endpoint,
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
    /// `vm.add-disk`, `vm.add-net` on a running VM: the hot-plugged device.
    PciDeviceInfo(PciDeviceInfo),
}

/// Why a request failed. Statuses and texts follow upstream Cloud
/// Hypervisor v53, so its clients see the same answers: 404 when no VM (or
/// no configuration) exists, 500 for an action the VM's state or this
/// VMM's features do not allow, 400 for a request a client must fix.
/// [`ApiError::reasons`] is the error chain after the endpoint's context
/// (`["Error from API", "The VM could not be paused", <reasons>...]`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The action needs a VM and none was created (404).
    #[error("VM is not created")]
    VmNotCreated,
    /// `vm.boot` without a VM (404).
    #[error("VM config is missing")]
    VmMissingConfig,
    /// `vm.create` when a VM exists, `vm.boot` when it runs (500).
    #[error("VM is already created")]
    VmAlreadyCreated,
    /// The action needs a running (or paused) VM (500).
    #[error("VM is not running")]
    VmNotRunning,
    /// Pause a paused VM, resume a running one (500).
    #[error("Cannot {action} VM")]
    InvalidStateTransition {
        /// `pause` or `resume`.
        action: &'static str,
        /// State the VM is in.
        from: VmState,
        /// State the action would lead to.
        to: VmState,
    },
    /// The request itself is wrong (400): bad value, failed validation.
    #[error("{0}")]
    BadRequest(String),
    /// The VM has no balloon device (500).
    #[error("Error from device manager")]
    NoBalloon,
    /// No device with this id (500).
    #[error("No device with id {0:?} to remove")]
    UnknownDevice(String),
    /// A device added to a VM makes its configuration invalid, e.g. a
    /// duplicate id (500, as upstream; the detail follows in the chain).
    #[error("Failed to validate config")]
    ConfigValidation(String),
    /// A feature this VMM does not have (500, as upstream answers for a
    /// feature its build or host lacks).
    #[error("not supported by this VMM: {0}")]
    NotSupported(String),
    /// The VMM did not answer in time (503). It may still carry the request
    /// out later.
    #[error("the VMM did not answer within {0:?}; the request may still be carried out")]
    Timeout(Duration),
    /// The VMM thread is gone (500).
    #[error("the VMM is not running")]
    VmmUnavailable,
    /// The VMM failed to carry out a valid request (500).
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status code this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Self::VmNotCreated | Self::VmMissingConfig => 404,
            Self::BadRequest(_) => 400,
            Self::Timeout(_) => 503,
            Self::VmAlreadyCreated
            | Self::VmNotRunning
            | Self::InvalidStateTransition { .. }
            | Self::NoBalloon
            | Self::UnknownDevice(_)
            | Self::ConfigValidation(_)
            | Self::NotSupported(_)
            | Self::VmmUnavailable
            | Self::Internal(_) => 500,
        }
    }

    /// The error chain, outermost first, in upstream's words where
    /// upstream has the case.
    pub fn reasons(&self) -> Vec<String> {
        let mut chain = vec![self.to_string()];
        match self {
            Self::InvalidStateTransition { action, from, to } => {
                chain.push(format!("Failed to {action} migratable component"));
                chain.push(format!(
                    "Invalid transition: InvalidStateTransition({from}, {to})"
                ));
            }
            Self::NoBalloon => {
                chain.push("Missing virtio-balloon, can't proceed as expected".into())
            }
            Self::ConfigValidation(detail) => chain.push(detail.clone()),
            _ => {}
        }
        chain
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
    fn statuses_are_upstreams() {
        assert_eq!(ApiError::VmNotCreated.status(), 404);
        assert_eq!(ApiError::VmMissingConfig.status(), 404);
        assert_eq!(ApiError::VmAlreadyCreated.status(), 500);
        assert_eq!(ApiError::VmNotRunning.status(), 500);
        assert_eq!(ApiError::BadRequest("x".into()).status(), 400);
        assert_eq!(ApiError::NotSupported("x".into()).status(), 500);
        let dup = ApiError::ConfigValidation("Identifier d1 is not unique".into());
        assert_eq!(dup.status(), 500);
        assert_eq!(
            dup.reasons(),
            ["Failed to validate config", "Identifier d1 is not unique"]
        );
        assert_eq!(ApiError::Timeout(Duration::ZERO).status(), 503);
        assert_eq!(ApiError::Internal("x".into()).status(), 500);
    }

    #[test]
    fn reasons_follow_upstreams_chain() {
        let e = ApiError::InvalidStateTransition {
            action: "pause",
            from: VmState::Paused,
            to: VmState::Paused,
        };
        assert_eq!(
            e.reasons(),
            [
                "Cannot pause VM",
                "Failed to pause migratable component",
                "Invalid transition: InvalidStateTransition(Paused, Paused)"
            ]
        );
        assert_eq!(ApiError::VmNotRunning.reasons(), ["VM is not running"]);
    }
}
