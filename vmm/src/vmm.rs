//! The VMM thread: boots the VM, then waits for it to power off, reset or
//! fail, or for a signal, and decides how the process ends.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use api::{ApiError, ApiReceiver, ApiRequest, ApiResponse, ApiResult, VmInfo, VmState};
use vm_config::VmConfig;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

use crate::cpu::VcpuExitReason;
use crate::vm::{Vm, VmError};

mod hotplug;

/// How the VMM process should end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitStatus {
    /// The guest powered off, or we were asked to stop: exit 0.
    Clean(String),
    /// The guest or the VMM failed: exit non-zero with this message.
    Failed(String),
}

/// Errors of the VMM thread itself.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    /// Building or booting the VM failed.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// epoll/signalfd plumbing failed.
    #[error("{0}: {1}")]
    Io(&'static str, std::io::Error),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Token {
    Signal = 1,
    VcpuExit,
    PowerOff,
    Reset,
    Api,
    Eject,
}

impl Token {
    fn from_u64(v: u64) -> Option<Self> {
        [
            Token::Signal,
            Token::VcpuExit,
            Token::PowerOff,
            Token::Reset,
            Token::Api,
            Token::Eject,
        ]
        .into_iter()
        .find(|t| *t as u64 == v)
    }
}

/// The REST API's end inside the VMM thread.
pub struct ApiEndpoint {
    /// Requests from the HTTP thread.
    pub receiver: ApiReceiver,
    /// Written to stop the HTTP thread.
    pub kill_evt: EventFd,
    /// The HTTP thread.
    pub thread: std::thread::JoinHandle<()>,
}

/// The VMM: at most one VM and the loop that supervises it. Only this
/// thread creates, changes or destroys the VM; the API thread sends it
/// typed requests.
pub struct Vmm {
    config: Option<VmConfig>,
    vm: Option<Vm>,
    paused: bool,
    booted_once: bool,
    /// Where stdin goes: the current VM's UART (re-pointed on every boot).
    serial_input: Option<crate::serial_input::SerialInputRoute>,
    epoll: Epoll,
    signals: OwnedFd,
    api: Option<ApiEndpoint>,
}

/// What handling an API request asks the loop to do next.
enum After {
    Continue,
    Exit(ExitStatus),
}

/// Blocks SIGINT/SIGTERM in the calling thread (and every thread it starts
/// afterwards) and returns a signalfd that reports them. Call before
/// spawning any thread.
pub fn block_termination_signals() -> std::io::Result<OwnedFd> {
    // SAFETY: sigset manipulation on a local set, then sigprocmask/signalfd
    // with valid pointers; the returned fd is checked.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

fn read_signal(fd: RawFd) -> Option<u32> {
    // SAFETY: reading one signalfd_siginfo into a properly sized buffer.
    unsafe {
        let mut info: libc::signalfd_siginfo = std::mem::zeroed();
        let n = libc::read(
            fd,
            (&mut info as *mut libc::signalfd_siginfo).cast(),
            std::mem::size_of_val(&info),
        );
        (n == std::mem::size_of_val(&info) as isize).then_some(info.ssi_signo)
    }
}

impl Vmm {
    /// A VMM for `config` (None: wait for `vm.create`); `signals` comes
    /// from [`block_termination_signals`]; `api` serves requests meanwhile.
    pub fn new(
        config: Option<VmConfig>,
        signals: OwnedFd,
        api: Option<ApiEndpoint>,
    ) -> Result<Self, VmmError> {
        let epoll = Epoll::new().map_err(|e| VmmError::Io("epoll_create", e))?;
        Ok(Self {
            config,
            vm: None,
            paused: false,
            booted_once: false,
            serial_input: None,
            epoll,
            signals,
            api,
        })
    }

    fn watch(&self, fd: RawFd, token: Token) -> Result<(), VmmError> {
        self.epoll
            .ctl(
                ControlOperation::Add,
                fd,
                EpollEvent::new(EventSet::IN, token as u64),
            )
            .map_err(|e| VmmError::Io("epoll_ctl", e))
    }

    fn unwatch(&self, fd: RawFd) {
        let _ = self
            .epoll
            .ctl(ControlOperation::Delete, fd, EpollEvent::default());
    }

    fn boot(&self) -> Result<Vm, VmmError> {
        let config = self.config.as_ref().ok_or(VmError::NoPayload)?;
        let vm = Vm::boot(config)?;
        let ev = vm.events();
        self.watch(ev.vcpu_exit.as_raw_fd(), Token::VcpuExit)?;
        self.watch(ev.poweroff.as_raw_fd(), Token::PowerOff)?;
        self.watch(ev.reset.as_raw_fd(), Token::Reset)?;
        if let Some(fd) = vm.eject_fd() {
            self.watch(fd, Token::Eject)?;
        }
        Ok(vm)
    }

    fn unwatch_vm(&self, vm: &Vm) {
        let ev = vm.events();
        for fd in [
            ev.vcpu_exit.as_raw_fd(),
            ev.poweroff.as_raw_fd(),
            ev.reset.as_raw_fd(),
        ] {
            self.unwatch(fd);
        }
        if let Some(fd) = vm.eject_fd() {
            self.unwatch(fd);
        }
    }

    fn state(&self) -> Option<VmState> {
        self.config.as_ref()?;
        Some(match (&self.vm, self.paused) {
            (Some(_), true) => VmState::Paused,
            (Some(_), false) => VmState::Running,
            (None, _) if self.booted_once => VmState::Shutdown,
            (None, _) => VmState::Created,
        })
    }

    fn start_vm(&mut self) -> Result<(), VmmError> {
        let vm = self.boot()?;
        if let Some(serial) = vm.serial() {
            if self.config.as_ref().map(|c| c.serial.mode)
                == Some(vm_config::ConsoleOutputMode::Tty)
            {
                // One stdin reader per process; each boot's UART takes over.
                let route = self.serial_input.get_or_insert_with(|| {
                    let route = crate::serial_input::SerialInputRoute::default();
                    crate::serial_input::spawn_stdin_forwarder(route.clone());
                    route
                });
                route.attach(serial);
            }
        }
        self.vm = Some(vm);
        self.paused = false;
        self.booted_once = true;
        Ok(())
    }

    fn stop_vm(&mut self) {
        if let Some(vm) = self.vm.take() {
            self.unwatch_vm(&vm);
            vm.shutdown();
        }
        self.paused = false;
    }

    fn reboot_vm(&mut self) -> Result<(), VmmError> {
        log::info!("rebooting the VM");
        self.stop_vm();
        self.start_vm()
    }

    fn stop_api(&mut self) {
        if let Some(api) = self.api.take() {
            let _ = api.kill_evt.write(1);
            if api.thread.join().is_err() {
                log::error!("the HTTP API thread panicked");
            }
        }
    }

    fn handle_api(&mut self, request: ApiRequest) -> (ApiResult, After) {
        let state = self.state();
        let result = match request {
            ApiRequest::VmmPing => Ok(ApiResponse::VmmPing(
                api::VmmPingResponse::for_this_process(
                    env!("CARGO_PKG_VERSION"),
                    vec!["tiered_memory".into()],
                ),
            )),
            ApiRequest::VmmShutdown => {
                self.stop_vm();
                return (
                    Ok(ApiResponse::Empty),
                    After::Exit(ExitStatus::Clean("vmm.shutdown requested".into())),
                );
            }
            ApiRequest::VmCreate(config) => {
                if state.is_some() {
                    Err(ApiError::VmAlreadyCreated)
                } else if let Err(e) = config.validate() {
                    Err(ApiError::BadRequest(e.to_string()))
                } else {
                    self.config = Some(*config);
                    self.booted_once = false;
                    Ok(ApiResponse::Empty)
                }
            }
            ApiRequest::VmBoot => match state {
                None => Err(ApiError::VmMissingConfig),
                Some(VmState::Running | VmState::Paused) => Err(ApiError::VmAlreadyCreated),
                Some(_) => match self.start_vm() {
                    Ok(()) => Ok(ApiResponse::Empty),
                    // Upstream answers 500 for a kernel it cannot read too.
                    Err(e) => Err(ApiError::Internal(e.to_string())),
                },
            },
            ApiRequest::VmShutdown => match state {
                Some(VmState::Running | VmState::Paused) => {
                    self.stop_vm();
                    // Upstream reports a shut-down VM as Created again.
                    self.booted_once = false;
                    Ok(ApiResponse::Empty)
                }
                _ => Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmReboot => match state {
                Some(VmState::Running | VmState::Paused) => self
                    .reboot_vm()
                    .map(|_| ApiResponse::Empty)
                    .map_err(|e| ApiError::Internal(e.to_string())),
                // Upstream says "not created" here even for a VM that exists.
                _ => Err(ApiError::VmNotCreated),
            },
            ApiRequest::VmPause => match (state, &self.vm) {
                (Some(VmState::Running), Some(vm)) => match vm.pause() {
                    Ok(()) => {
                        self.paused = true;
                        Ok(ApiResponse::Empty)
                    }
                    Err(e) => Err(ApiError::Internal(e)),
                },
                (Some(VmState::Paused), _) => Err(ApiError::InvalidStateTransition {
                    action: "pause",
                    from: VmState::Paused,
                    to: VmState::Paused,
                }),
                // Upstream's answer whether or not a VM was created.
                _ => Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmResume => match (state, &self.vm) {
                (Some(VmState::Paused), Some(vm)) => {
                    self.paused = false;
                    vm.resume()
                        .map(|()| ApiResponse::Empty)
                        .map_err(ApiError::Internal)
                }
                (Some(VmState::Running), _) => Err(ApiError::InvalidStateTransition {
                    action: "resume",
                    from: VmState::Running,
                    to: VmState::Running,
                }),
                // Upstream's answer whether or not a VM was created.
                _ => Err(ApiError::VmNotRunning),
            },
            // A paused guest could not react to the button; refuse rather
            // than let it shut down the moment it is resumed.
            ApiRequest::VmPowerButton => match (state, &self.vm) {
                (Some(VmState::Running), Some(vm)) => vm
                    .power_button()
                    .map(|_| ApiResponse::Empty)
                    .map_err(|e| ApiError::Internal(e.to_string())),
                // Upstream's answer whether or not a VM was created.
                _ => Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmNmi => match (state, &self.vm) {
                (Some(VmState::Running | VmState::Paused), Some(vm)) => {
                    vm.nmi();
                    Ok(ApiResponse::Empty)
                }
                // Upstream's answer whether or not a VM was created.
                _ => Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmDelete => {
                self.stop_vm();
                self.config = None;
                Ok(ApiResponse::Empty)
            }
            ApiRequest::VmInfo => match (&self.config, state) {
                (Some(config), Some(state)) => {
                    let ballooned = self
                        .vm
                        .as_ref()
                        .and_then(Vm::balloon)
                        .map_or(0, |b| b.actual().iter().sum::<u64>());
                    Ok(ApiResponse::VmInfo(Box::new(VmInfo {
                        config: config.clone(),
                        state,
                        memory_actual_size: (config.total_memory()
                            + crate::zone_resize::plugged_bytes(self.vm.as_ref()))
                        .saturating_sub(ballooned),
                        // As upstream: a device tree once the VM is booted.
                        device_tree: self.vm.as_ref().map(Vm::device_tree),
                    })))
                }
                _ => Err(ApiError::VmNotCreated),
            },
            ApiRequest::VmCounters => match (state, &self.vm) {
                (Some(VmState::Running | VmState::Paused), Some(vm)) => {
                    Ok(ApiResponse::VmCounters(vm.counters()))
                }
                // Upstream's answer whether or not a VM was created.
                _ => Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmBalloonStats => match (state, &self.vm) {
                (Some(VmState::Running | VmState::Paused), Some(vm)) => {
                    let hotplug = self
                        .config
                        .as_ref()
                        .map(|c| crate::zone_resize::tier_hotplug(c, Some(vm)))
                        .unwrap_or_default();
                    vm.balloon()
                        .map(|b| ApiResponse::BalloonStats(Box::new(balloon_stats(b, hotplug))))
                        .ok_or(ApiError::NoBalloon)
                }
                // Upstream's answer whether or not a VM was created.
                _ => Err(ApiError::VmNotRunning),
            },
            ApiRequest::VmResize(data) => self.resize(data).map(|()| ApiResponse::Empty),
            ApiRequest::VmAddDisk(disk) => self.add_device(hotplug::NewDevice::Disk(*disk)),
            ApiRequest::VmAddNet(net) => self.add_device(hotplug::NewDevice::Net(*net)),
            ApiRequest::VmRemoveDevice(data) => self.remove_device(&data.id),
            ApiRequest::VmResizeZone(data) => match self.config.as_mut() {
                None => Err(ApiError::VmNotCreated),
                Some(config) => crate::zone_resize::resize_zone(
                    config,
                    self.vm.as_ref(),
                    &data.id,
                    data.desired_ram,
                )
                .map(|()| ApiResponse::Empty),
            },
            ApiRequest::VmResizeDisk(data) => match &self.config {
                None => Err(ApiError::VmNotCreated),
                Some(c) if !device_ids(c).any(|id| id == data.id) => {
                    Err(ApiError::Internal(format!(
                        "Failed resizing a disk image: no disk with id {:?}",
                        data.id
                    )))
                }
                Some(_) => Err(ApiError::NotSupported("resizing a disk".into())),
            },
            ApiRequest::Unsupported(action) => Err(action.refusal(state)),
        };
        (result, After::Continue)
    }

    /// `vm.resize`: before boot the configuration changes (as upstream);
    /// a booted VM can only move its balloon (no CPU or memory hotplug).
    fn resize(&mut self, data: api::VmResizeData) -> Result<(), ApiError> {
        let running = matches!(self.state(), Some(VmState::Running | VmState::Paused));
        let config = self.config.as_ref().ok_or(ApiError::VmNotCreated)?;
        if data.desired_vcpus.is_none() && data.desired_ram.is_none() {
            return match data.desired_balloon {
                Some(size) => self.resize_balloon(size),
                None => Err(ApiError::BadRequest(
                    "vm.resize needs desired_vcpus, desired_ram or desired_balloon".into(),
                )),
            };
        }
        let mut resized = config.clone();
        if let Some(vcpus) = data.desired_vcpus {
            if vcpus > config.cpus.max_vcpus {
                return Err(ApiError::Internal("Requested vCPUs exceed maximum".into()));
            }
            if running && vcpus != config.cpus.boot_vcpus {
                return Err(ApiError::NotSupported("CPU hotplug (desired_vcpus)".into()));
            }
            resized.cpus.boot_vcpus = vcpus;
        }
        if let Some(ram) = data.desired_ram {
            if ram != config.total_memory() {
                if running {
                    return Err(ApiError::NotSupported(
                        "memory hotplug (desired_ram; the balloon resizes a running VM)".into(),
                    ));
                }
                if resized.memory.zones.is_some() {
                    return Err(ApiError::NotSupported(
                        "desired_ram with memory zones (resize each zone instead)".into(),
                    ));
                }
                resized.memory.size = ram;
            }
        }
        resized
            .validate()
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        self.config = Some(resized);
        if let Some(size) = data.desired_balloon {
            self.resize_balloon(size)?;
        }
        Ok(())
    }

    /// Adds or removes a disk or NIC in the configuration of a VM that is
    /// not running. A running VM would need hotplug (virtio-pci).
    fn change_devices(&mut self, change: impl FnOnce(&mut VmConfig)) -> Result<(), ApiError> {
        let running = matches!(self.state(), Some(VmState::Running | VmState::Paused));
        let config = self.config.as_ref().ok_or(ApiError::VmNotCreated)?;
        if running {
            return Err(ApiError::NotSupported(
                "device hotplug into a running VM (virtio-pci)".into(),
            ));
        }
        let mut changed = config.clone();
        change(&mut changed);
        changed
            .validate()
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        self.config = Some(changed);
        Ok(())
    }

    fn remove_device(&mut self, id: &str) -> ApiResult {
        let config = self.config.as_ref().ok_or(ApiError::VmNotCreated)?;
        // A device whose removal is pending has left the configuration but
        // not the VM: asking again asks the guest again, as upstream.
        let pending = self.vm.as_ref().is_some_and(|vm| vm.removal_pending(id));
        if !pending && !device_ids(config).any(|d| d == id) {
            return Err(ApiError::UnknownDevice(id.to_owned()));
        }
        if matches!(self.state(), Some(VmState::Running | VmState::Paused)) {
            return self.hot_remove_device(id);
        }
        // Name the rest as they were named, so their ids do not shift.
        let changed = hotplug::without_device(config, id);
        self.change_devices(|c| *c = changed)?;
        Ok(ApiResponse::Empty)
    }

    /// Sets the balloon's per-tier target. A booted VM's device moves at
    /// once (asynchronously: the guest inflates or deflates in the
    /// background); the configuration keeps the size for the next boot.
    fn resize_balloon(&mut self, size: api::BalloonSize) -> Result<(), ApiError> {
        let config = self.config.as_ref().ok_or(ApiError::VmNotCreated)?;
        if config.balloon.is_none() {
            return Err(ApiError::NoBalloon);
        }
        // Check on a copy; the configuration changes only once the device
        // (if the VM runs) accepted the new targets.
        let mut resized = config.clone();
        if let Some(b) = resized.balloon.as_mut() {
            b.size = size;
        }
        resized
            .validate_balloon()
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        if let Some(handle) = self.vm.as_ref().and_then(Vm::balloon) {
            handle
                .resize(size.as_array())
                .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        }
        self.config = Some(resized);
        log::info!("balloon target set to {:?}", size.as_array());
        Ok(())
    }

    /// Boots the VM (if one was given) and supervises it until the process
    /// should exit; serves API requests meanwhile.
    pub fn run(mut self) -> Result<ExitStatus, VmmError> {
        let status = self.run_loop();
        self.stop_vm();
        self.stop_api();
        status
    }

    fn run_loop(&mut self) -> Result<ExitStatus, VmmError> {
        self.watch(self.signals.as_raw_fd(), Token::Signal)?;
        if let Some(api) = &self.api {
            self.watch(api.receiver.as_raw_fd(), Token::Api)?;
        }
        if self.config.as_ref().is_some_and(|c| c.payload.is_some()) {
            self.start_vm()?;
        }
        let mut events = vec![EpollEvent::default(); 8];
        loop {
            let n = match self.epoll.wait(-1, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(VmmError::Io("epoll_wait", e)),
            };
            for event in &events[..n] {
                let Some(token) = Token::from_u64(event.data()) else {
                    continue;
                };
                match token {
                    Token::Signal => {
                        let sig = read_signal(self.signals.as_raw_fd());
                        log::info!("received signal {sig:?}: shutting down");
                        return Ok(ExitStatus::Clean(format!(
                            "stopped by signal {}",
                            sig.unwrap_or(0)
                        )));
                    }
                    Token::Api => {
                        let messages = match self.api.as_ref().map(|a| a.receiver.drain()) {
                            Some(Ok(m)) => m,
                            Some(Err(e)) => return Err(VmmError::Io("reading API requests", e)),
                            None => continue,
                        };
                        for msg in messages {
                            let (result, after) = self.handle_api(msg.request.clone());
                            msg.respond(result);
                            if let After::Exit(status) = after {
                                return Ok(status);
                            }
                        }
                    }
                    Token::Eject => self.on_guest_eject(),
                    Token::PowerOff => return Ok(ExitStatus::Clean("guest powered off".into())),
                    Token::Reset => {
                        if let Some(vm) = &self.vm {
                            let _ = vm.events().reset.read();
                        }
                        log::info!("guest requested a reset");
                        self.reboot_vm()?;
                    }
                    Token::VcpuExit => {
                        let reason = self.vm.as_ref().and_then(|vm| {
                            let _ = vm.events().vcpu_exit.read();
                            vm.vcpu_exit_reason()
                        });
                        match reason {
                            Some(VcpuExitReason::PowerOff) => {
                                return Ok(ExitStatus::Clean("guest powered off".into()))
                            }
                            Some(VcpuExitReason::Reset) => {
                                log::info!("guest requested a reset");
                                self.reboot_vm()?;
                            }
                            Some(VcpuExitReason::TripleFault { vcpu }) => {
                                return Ok(ExitStatus::Failed(format!(
                                    "guest triple fault on vCPU {vcpu} (KVM_EXIT_SHUTDOWN): the guest crashed"
                                )))
                            }
                            Some(VcpuExitReason::Error(msg)) => return Ok(ExitStatus::Failed(msg)),
                            None => {}
                        }
                    }
                }
            }
        }
    }
}

/// The `vm.balloon-stats` answer from the device's view.
/// `hotplug`: each tier's virtio-mem (region, requested, plugged) bytes.
fn balloon_stats(
    balloon: &demeter_balloon::BalloonHandle,
    hotplug: [(u64, u64, u64); 2],
) -> api::BalloonStatsResponse {
    let stats = balloon.stats();
    let tiers = stats
        .tiers
        .iter()
        .zip(["fmem", "smem"])
        .zip(hotplug)
        .map(
            |((t, name), (size, requested, plugged))| api::BalloonTierStats {
                tier: name.into(),
                target: t.target_bytes,
                actual: t.actual_bytes,
                host_inflated: t.host_balloon_bytes,
                guest_total: t.guest_total_bytes,
                guest_free: t.guest_free_bytes,
                guest_used: t.guest_used_bytes,
                hotplug_size: size,
                hotplug_requested: requested,
                hotplug_plugged: plugged,
            },
        )
        .collect();
    api::BalloonStatsResponse {
        balloon_actual: balloon.actual().iter().sum(),
        heterogeneous_memory: stats.heterogeneous_memory,
        stats_updates: stats.updates,
        tiers,
        stats: stats.guest,
    }
}

/// Ids of the configured disks and NICs, as the devices are named at boot.
fn device_ids(config: &VmConfig) -> impl Iterator<Item = String> {
    let (disks, nets) = config.device_ids();
    disks.into_iter().chain(nets)
}
