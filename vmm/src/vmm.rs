//! The VMM thread: boots the VM, then waits for it to power off, reset or
//! fail, or for a signal, and decides how the process ends.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use vm_config::VmConfig;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

use crate::cpu::VcpuExitReason;
use crate::vm::{Vm, VmError};

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
}

impl Token {
    fn from_u64(v: u64) -> Option<Self> {
        [
            Token::Signal,
            Token::VcpuExit,
            Token::PowerOff,
            Token::Reset,
        ]
        .into_iter()
        .find(|t| *t as u64 == v)
    }
}

/// The VMM: one VM and the loop that supervises it.
pub struct Vmm {
    config: VmConfig,
    epoll: Epoll,
    signals: OwnedFd,
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
    /// A VMM for `config`; `signals` comes from [`block_termination_signals`].
    pub fn new(config: VmConfig, signals: OwnedFd) -> Result<Self, VmmError> {
        let epoll = Epoll::new().map_err(|e| VmmError::Io("epoll_create", e))?;
        Ok(Self {
            config,
            epoll,
            signals,
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
        let vm = Vm::boot(&self.config)?;
        let ev = vm.events();
        self.watch(ev.vcpu_exit.as_raw_fd(), Token::VcpuExit)?;
        self.watch(ev.poweroff.as_raw_fd(), Token::PowerOff)?;
        self.watch(ev.reset.as_raw_fd(), Token::Reset)?;
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
    }

    /// Boots the VM and supervises it until the process should exit.
    pub fn run(self) -> Result<ExitStatus, VmmError> {
        self.watch(self.signals.as_raw_fd(), Token::Signal)?;
        let mut vm = self.boot()?;
        if let Some(serial) = vm.serial() {
            if self.config.serial.mode == vm_config::ConsoleOutputMode::Tty {
                crate::console::spawn_stdin_forwarder(serial.clone());
            }
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
                        vm.shutdown();
                        return Ok(ExitStatus::Clean(format!(
                            "stopped by signal {}",
                            sig.unwrap_or(0)
                        )));
                    }
                    Token::PowerOff => {
                        vm.shutdown();
                        return Ok(ExitStatus::Clean("guest powered off".into()));
                    }
                    Token::Reset => {
                        let _ = vm.events().reset.read();
                        log::info!("guest requested a reset: rebooting");
                        self.unwatch_vm(&vm);
                        vm.shutdown();
                        vm = self.boot()?;
                    }
                    Token::VcpuExit => {
                        let _ = vm.events().vcpu_exit.read();
                        let reason = vm.vcpu_exit_reason();
                        match reason {
                            Some(VcpuExitReason::PowerOff) => {
                                vm.shutdown();
                                return Ok(ExitStatus::Clean("guest powered off".into()));
                            }
                            Some(VcpuExitReason::Reset) => {
                                log::info!("guest requested a reset: rebooting");
                                self.unwatch_vm(&vm);
                                vm.shutdown();
                                vm = self.boot()?;
                            }
                            Some(VcpuExitReason::TripleFault { vcpu }) => {
                                vm.shutdown();
                                return Ok(ExitStatus::Failed(format!(
                                    "guest triple fault on vCPU {vcpu} (KVM_EXIT_SHUTDOWN): the guest crashed"
                                )));
                            }
                            Some(VcpuExitReason::Error(msg)) => {
                                vm.shutdown();
                                return Ok(ExitStatus::Failed(msg));
                            }
                            None => {}
                        }
                    }
                }
            }
        }
    }
}
