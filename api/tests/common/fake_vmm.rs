//! TEST DOUBLE of the VMM thread: answers [`ApiRequest`]s from a small
//! state machine so the API crate can be tested without KVM. It boots
//! nothing; it is not the product (the real VMM lives in the vmm crate).
//! It is driven exactly as the real VMM must drive an `ApiReceiver`:
//! epoll on the receiver's fd, then `drain()` and answer each message.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::time::Duration;

use api::{
    ApiError, ApiReceiver, ApiRequest, ApiResponse, ApiResult, BalloonSize, VmInfo, VmState,
    VmmPingResponse,
};
use vm_config::VmConfig;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

/// The fake's behaviour knobs.
#[derive(Clone, Debug, Default)]
pub struct FakeOptions {
    /// Whether the "VM" has a balloon device (else vm.resize with
    /// desired_balloon answers NoBalloon).
    pub has_balloon: bool,
    /// Sleep this long before answering each request (a busy VMM).
    pub delay: Duration,
}

/// The fake VMM's state.
#[derive(Debug, Default)]
pub struct FakeVmm {
    vm: Option<(VmConfig, VmState)>,
    balloon: BalloonSize,
    options: FakeOptions,
    requests: u64,
}

impl FakeVmm {
    /// A VMM with no VM.
    pub fn new(options: FakeOptions) -> Self {
        Self {
            options,
            ..Default::default()
        }
    }

    fn state(&self) -> Result<VmState, ApiError> {
        self.vm
            .as_ref()
            .map(|(_, s)| *s)
            .ok_or(ApiError::VmNotCreated)
    }

    /// The state of a VM that must exist (else upstream's 500 "not running").
    fn running(&self) -> Result<VmState, ApiError> {
        self.state().map_err(|_| ApiError::VmNotRunning)
    }

    fn set_state(&mut self, state: VmState) {
        if let Some((_, s)) = &mut self.vm {
            *s = state;
        }
    }

    /// Carries out one request (the state machine under test).
    pub fn handle(&mut self, request: ApiRequest) -> ApiResult {
        use VmState::*;
        self.requests += 1;
        match request {
            ApiRequest::VmCreate(config) => {
                if self.vm.is_some() {
                    return Err(ApiError::VmAlreadyCreated);
                }
                self.vm = Some((*config, Created));
                self.balloon = BalloonSize::default();
            }
            ApiRequest::VmBoot => match self.state().map_err(|_| ApiError::VmMissingConfig)? {
                Created | Shutdown => self.set_state(Running),
                Running | Paused => return Err(ApiError::VmAlreadyCreated),
            },
            ApiRequest::VmShutdown => match self.running()? {
                Running | Paused => self.set_state(Shutdown),
                Created | Shutdown => return Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmReboot => match self.state()? {
                Running | Paused => self.set_state(Running),
                Created | Shutdown => return Err(ApiError::VmNotCreated),
            },
            ApiRequest::VmPause => match self.running()? {
                Running => self.set_state(Paused),
                Paused => {
                    return Err(ApiError::InvalidStateTransition {
                        action: "pause",
                        from: Paused,
                        to: Paused,
                    })
                }
                Created | Shutdown => return Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmResume => match self.running()? {
                Paused => self.set_state(Running),
                Running => {
                    return Err(ApiError::InvalidStateTransition {
                        action: "resume",
                        from: Running,
                        to: Running,
                    })
                }
                Created | Shutdown => return Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmPowerButton => {
                // The guest reacts to the button by shutting itself down;
                // a paused guest cannot.
                if self.running()? != Running {
                    return Err(ApiError::VmNotRunning);
                }
                self.set_state(Shutdown);
            }
            ApiRequest::VmNmi => {
                self.running()?;
            }
            ApiRequest::VmDelete => self.vm = None,
            ApiRequest::VmInfo => {
                let (config, state) = self.vm.clone().ok_or(ApiError::VmNotCreated)?;
                let memory_actual_size = config.total_memory().saturating_sub(self.balloon.total());
                return Ok(ApiResponse::VmInfo(Box::new(VmInfo {
                    config,
                    state,
                    memory_actual_size,
                    device_tree: None,
                })));
            }
            ApiRequest::VmCounters => match self.running()? {
                Running | Paused => {
                    let mut balloon = BTreeMap::new();
                    balloon.insert("fmem_bytes".to_string(), self.balloon.fmem);
                    balloon.insert("smem_bytes".to_string(), self.balloon.smem);
                    let mut counters = BTreeMap::new();
                    counters.insert("__balloon".to_string(), balloon);
                    return Ok(ApiResponse::VmCounters(counters));
                }
                Created | Shutdown => return Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmResize(data) => {
                self.state()?;
                if data.desired_vcpus.is_some() {
                    return Err(ApiError::NotSupported("vCPU hotplug".into()));
                }
                if data.desired_ram.is_some() {
                    return Err(ApiError::NotSupported("memory hotplug".into()));
                }
                if let Some(b) = data.desired_balloon {
                    if !self.options.has_balloon {
                        return Err(ApiError::NoBalloon);
                    }
                    let total = self.vm.as_ref().map_or(0, |(c, _)| c.total_memory());
                    if b.total() >= total {
                        return Err(ApiError::BadRequest(format!(
                            "balloon size {} is not smaller than guest RAM {total}",
                            b.total()
                        )));
                    }
                    self.balloon = b;
                }
            }
            ApiRequest::VmBalloonStats => match self.running()? {
                Running | Paused if self.options.has_balloon => {
                    let tier = |name: &str, bytes: u64| api::BalloonTierStats {
                        tier: name.into(),
                        target: bytes,
                        actual: bytes,
                        host_inflated: bytes,
                        ..Default::default()
                    };
                    return Ok(ApiResponse::BalloonStats(Box::new(
                        api::BalloonStatsResponse {
                            balloon_actual: self.balloon.total(),
                            heterogeneous_memory: true,
                            stats_updates: 0,
                            tiers: vec![
                                tier("fmem", self.balloon.fmem),
                                tier("smem", self.balloon.smem),
                            ],
                            stats: BTreeMap::new(),
                        },
                    )));
                }
                Running | Paused => return Err(ApiError::NoBalloon),
                Created | Shutdown => return Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmmPing => {
                return Ok(ApiResponse::VmmPing(VmmPingResponse::for_this_process(
                    "0.1.0-fake",
                    vec!["fake-vmm".into()],
                )))
            }
            ApiRequest::VmmShutdown => self.vm = None,
            ApiRequest::VmAddDisk(_)
            | ApiRequest::VmAddNet(_)
            | ApiRequest::VmRemoveDevice(_)
            | ApiRequest::VmResizeZone(_)
            | ApiRequest::VmResizeDisk(_) => {
                self.state()?;
                return Err(ApiError::NotSupported(request.endpoint().into()));
            }
            ApiRequest::Unsupported(action) => {
                return Err(action.refusal(self.state().ok()));
            }
        }
        Ok(ApiResponse::Empty)
    }
}

const API_EVENT: u64 = 1;

/// The fake VMM's control loop: epoll on the API eventfd, drain, answer.
/// Returns after answering `vmm.shutdown`, having written `kill_evt` so
/// the HTTP server stops. Returns the number of requests served.
pub fn run_fake_vmm(receiver: ApiReceiver, kill_evt: EventFd, options: FakeOptions) -> u64 {
    let epoll = Epoll::new().expect("epoll");
    epoll
        .ctl(
            ControlOperation::Add,
            receiver.as_raw_fd(),
            EpollEvent::new(EventSet::IN, API_EVENT),
        )
        .expect("epoll add");
    let delay = options.delay;
    let mut vmm = FakeVmm::new(options);
    let mut events = [EpollEvent::default(); 4];
    loop {
        let n = match epoll.wait(-1, &mut events) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("epoll_wait: {e}"),
        };
        for event in &events[..n] {
            if event.data() != API_EVENT {
                continue;
            }
            for msg in receiver.drain().expect("drain") {
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                let bye = msg.request == ApiRequest::VmmShutdown;
                let result = vmm.handle(msg.request.clone());
                msg.respond(result);
                if bye {
                    kill_evt.write(1).expect("kill_evt");
                    return vmm.requests;
                }
            }
        }
    }
}
