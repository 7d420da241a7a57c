//! vCPU threads: one per vCPU, each running KVM_RUN and dispatching I/O
//! exits to the device buses. The VMM thread pauses, resumes and stops
//! them by changing a shared run state and kicking each thread with a
//! signal that makes KVM_RUN return (via `immediate_exit`, so a kick that
//! lands just before KVM_RUN is not lost).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use devices::Bus;
use kvm_bindings::kvm_run;
use kvm_ioctls::{VcpuExit, VcpuFd};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

/// Why the VM stopped running, as reported by a vCPU thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VcpuExitReason {
    /// KVM reported a guest-initiated shutdown/poweroff system event.
    PowerOff,
    /// KVM reported a reset request.
    Reset,
    /// The guest triple-faulted (KVM_EXIT_SHUTDOWN).
    TripleFault {
        /// vCPU index.
        vcpu: u8,
    },
    /// Something unrecoverable.
    Error(String),
}

/// The state the VMM wants the vCPUs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunState {
    Running,
    Paused,
    Stopping,
}

struct Shared {
    state: Mutex<RunState>,
    changed: Condvar,
    /// vCPUs currently parked in the paused state.
    parked: Mutex<usize>,
    parked_changed: Condvar,
    /// First exit reason reported (later ones are logged only).
    exit_reason: Mutex<Option<VcpuExitReason>>,
    exit_evt: EventFd,
    /// Per vCPU: an NMI to inject before the next KVM_RUN (`vm.nmi`).
    nmi_pending: Vec<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Everything a vCPU thread needs besides its fd.
pub struct VcpuContext {
    /// Port I/O devices.
    pub io_bus: Bus,
    /// MMIO devices.
    pub mmio_bus: Bus,
}

/// The running vCPU threads.
pub struct VcpuManager {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

thread_local! {
    /// This thread's kvm_run page, for the kick signal handler.
    static KVM_RUN: Cell<*mut kvm_run> = const { Cell::new(std::ptr::null_mut()) };
}

extern "C" fn kick_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    KVM_RUN.with(|run| {
        let ptr = run.get();
        if !ptr.is_null() {
            // SAFETY: the pointer is this thread's kvm_run mapping, valid
            // while the vCPU fd lives (it is cleared before the fd drops).
            unsafe { (*ptr).immediate_exit = 1 };
        }
    });
}

fn kick_signal() -> libc::c_int {
    SIGRTMIN()
}

/// Installs the kick handler; call once per process before starting vCPUs.
pub fn register_kick_signal() -> std::io::Result<()> {
    register_signal_handler(kick_signal(), kick_handler)
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
}

/// How long pause waits for every vCPU to park.
const PAUSE_TIMEOUT: Duration = Duration::from_secs(10);

impl VcpuManager {
    /// Starts one thread per vCPU fd. `exit_evt` is signalled when a vCPU
    /// reports a [`VcpuExitReason`].
    pub fn start(
        vcpus: Vec<VcpuFd>,
        ctx: Arc<VcpuContext>,
        exit_evt: EventFd,
        affinity: &[(u8, Vec<usize>)],
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(RunState::Running),
            changed: Condvar::new(),
            parked: Mutex::new(0),
            parked_changed: Condvar::new(),
            exit_reason: Mutex::new(None),
            exit_evt,
            nmi_pending: vcpus.iter().map(|_| AtomicBool::new(false)).collect(),
        });
        let mut handles = Vec::new();
        for (index, fd) in vcpus.into_iter().enumerate() {
            let index = index as u8;
            let shared = shared.clone();
            let ctx = ctx.clone();
            let cpus = affinity
                .iter()
                .find(|(v, _)| *v == index)
                .map(|(_, c)| c.clone());
            let handle = std::thread::Builder::new()
                .name(format!("vcpu{index}"))
                .spawn(move || {
                    if let Some(cpus) = cpus {
                        pin_current_thread(index, &cpus);
                    }
                    if let Err(e) = crate::seccomp::enter(crate::seccomp::ThreadKind::Vcpu) {
                        report(&shared, VcpuExitReason::Error(format!("vcpu{index}: {e}")));
                        return;
                    }
                    run_vcpu(index, fd, &ctx, &shared)
                })?;
            handles.push(handle);
        }
        Ok(Self { shared, handles })
    }

    /// The first exit reason a vCPU reported, if any.
    pub fn exit_reason(&self) -> Option<VcpuExitReason> {
        lock(&self.shared.exit_reason).clone()
    }

    fn set_state(&self, state: RunState) {
        *lock(&self.shared.state) = state;
        self.shared.changed.notify_all();
        self.kick_all();
    }

    /// Makes every vCPU's KVM_RUN return so it sees new shared state.
    fn kick_all(&self) {
        for h in &self.handles {
            // A thread that already exited cannot be signalled; that is fine.
            let _ = h.kill(kick_signal());
        }
    }

    /// Stops every vCPU at its next exit and waits until all are parked.
    pub fn pause(&self) -> Result<(), String> {
        self.set_state(RunState::Paused);
        let live = self.handles.iter().filter(|h| !h.is_finished()).count();
        let parked = lock(&self.shared.parked);
        let (parked, timeout) = self
            .shared
            .parked_changed
            .wait_timeout_while(parked, PAUSE_TIMEOUT, |p| *p < live)
            .unwrap_or_else(|p| p.into_inner());
        if timeout.timed_out() {
            return Err(format!(
                "only {} of {live} vCPUs paused within {PAUSE_TIMEOUT:?}",
                *parked
            ));
        }
        Ok(())
    }

    /// Queues an NMI for every vCPU and kicks them out of KVM_RUN; each
    /// injects it (KVM_NMI) before it runs again. A paused vCPU gets it on
    /// resume, as on upstream.
    pub fn nmi(&self) {
        for pending in &self.shared.nmi_pending {
            pending.store(true, Ordering::Release);
        }
        self.kick_all();
    }

    /// Lets paused vCPUs run again.
    pub fn resume(&self) {
        self.set_state(RunState::Running);
    }

    /// Stops and joins every vCPU thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Stops and joins every vCPU thread (idempotent).
    pub fn shutdown(&mut self) {
        self.set_state(RunState::Stopping);
        for h in self.handles.drain(..) {
            if h.join().is_err() {
                log::error!("a vCPU thread panicked");
            }
        }
    }
}

impl Drop for VcpuManager {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn pin_current_thread(index: u8, cpus: &[usize]) {
    // SAFETY: cpu_set_t is plain data; CPU_SET/sched_setaffinity get valid pointers.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            log::warn!(
                "vcpu{index}: cannot pin to host CPUs {cpus:?}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

fn report(shared: &Shared, reason: VcpuExitReason) {
    let mut slot = lock(&shared.exit_reason);
    if slot.is_none() {
        *slot = Some(reason);
        drop(slot);
        if let Err(e) = shared.exit_evt.write(1) {
            log::error!("cannot signal VM exit: {e}");
        }
    } else {
        log::debug!("later vCPU exit ignored: {reason:?}");
    }
}

/// Parks while paused; returns false when the thread must end.
fn wait_while_paused(shared: &Shared) -> bool {
    let mut state = lock(&shared.state);
    if *state == RunState::Paused {
        *lock(&shared.parked) += 1;
        shared.parked_changed.notify_all();
        while *state == RunState::Paused {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        *lock(&shared.parked) -= 1;
    }
    *state == RunState::Running
}

const KVM_SYSTEM_EVENT_SHUTDOWN: u32 = 1;
const KVM_SYSTEM_EVENT_RESET: u32 = 2;
const KVM_SYSTEM_EVENT_CRASH: u32 = 3;

fn run_vcpu(index: u8, mut fd: VcpuFd, ctx: &VcpuContext, shared: &Shared) {
    KVM_RUN.with(|run| run.set(fd.get_kvm_run() as *mut kvm_run));
    let mut unknown_ports = std::collections::BTreeSet::new();
    loop {
        if !wait_while_paused(shared) {
            break;
        }
        let nmi = shared.nmi_pending.get(usize::from(index));
        if nmi.is_some_and(|p| p.swap(false, Ordering::AcqRel)) {
            if let Err(e) = fd.nmi() {
                log::warn!("vcpu{index}: cannot inject the NMI: {e}");
            }
        }
        let reason = match fd.run() {
            Ok(exit) => handle_exit(index, exit, ctx, &mut unknown_ports),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                fd.set_kvm_immediate_exit(0);
                None
            }
            Err(e) => Some(VcpuExitReason::Error(format!(
                "vcpu{index}: KVM_RUN failed: {e}"
            ))),
        };
        if let Some(reason) = reason {
            if !matches!(reason, VcpuExitReason::PowerOff | VcpuExitReason::Reset) {
                log_crash_state(index, &fd);
            }
            report(shared, reason);
            break;
        }
    }
    KVM_RUN.with(|run| run.set(std::ptr::null_mut()));
}

/// Logs where a vCPU was when the guest crashed or KVM gave up on it, so
/// that a triple fault can be traced to a guest symbol (System.map).
fn log_crash_state(index: u8, fd: &VcpuFd) {
    match (fd.get_regs(), fd.get_sregs()) {
        (Ok(r), Ok(s)) => log::error!(
            "vcpu{index} state: rip={:#x} rsp={:#x} rflags={:#x} cs={:#x} cr0={:#x} cr2={:#x} \
             cr3={:#x} cr4={:#x} efer={:#x} idt={:#x}+{:#x}",
            r.rip,
            r.rsp,
            r.rflags,
            s.cs.selector,
            s.cr0,
            s.cr2,
            s.cr3,
            s.cr4,
            s.efer,
            s.idt.base,
            s.idt.limit
        ),
        (Err(e), _) | (_, Err(e)) => log::error!("vcpu{index}: cannot read its registers: {e}"),
    }
}

/// Handles one exit; `Some` ends the VM.
fn handle_exit(
    index: u8,
    exit: VcpuExit<'_>,
    ctx: &VcpuContext,
    unknown_ports: &mut std::collections::BTreeSet<u16>,
) -> Option<VcpuExitReason> {
    match exit {
        VcpuExit::IoIn(port, data) => {
            if !ctx.io_bus.read(u64::from(port), data) {
                // Nothing there: the bus floats high, as on real hardware.
                data.fill(0xff);
                if unknown_ports.insert(port) {
                    log::debug!("vcpu{index}: read from unclaimed port {port:#x}");
                }
            }
            None
        }
        VcpuExit::IoOut(port, data) => {
            if !ctx.io_bus.write(u64::from(port), data) && unknown_ports.insert(port) {
                log::debug!("vcpu{index}: write to unclaimed port {port:#x}");
            }
            None
        }
        VcpuExit::MmioRead(addr, data) => {
            if !ctx.mmio_bus.read(addr, data) {
                data.fill(0xff);
                log::debug!("vcpu{index}: read from unclaimed MMIO {addr:#x}");
            }
            None
        }
        VcpuExit::MmioWrite(addr, data) => {
            if !ctx.mmio_bus.write(addr, data) {
                log::debug!("vcpu{index}: write to unclaimed MMIO {addr:#x}");
            }
            None
        }
        // With the in-kernel LAPIC, HLT only reaches us if KVM decides so; just resume.
        VcpuExit::Hlt => None,
        VcpuExit::Shutdown => Some(VcpuExitReason::TripleFault { vcpu: index }),
        VcpuExit::SystemEvent(kind, _) => match kind {
            KVM_SYSTEM_EVENT_SHUTDOWN => Some(VcpuExitReason::PowerOff),
            KVM_SYSTEM_EVENT_RESET => Some(VcpuExitReason::Reset),
            KVM_SYSTEM_EVENT_CRASH => Some(VcpuExitReason::Error(format!(
                "vcpu{index}: guest crashed (KVM system event)"
            ))),
            other => Some(VcpuExitReason::Error(format!(
                "vcpu{index}: unknown system event {other}"
            ))),
        },
        VcpuExit::FailEntry(reason, cpu) => Some(VcpuExitReason::Error(format!(
            "vcpu{index}: KVM entry failed (hardware reason {reason:#x}, host cpu {cpu})"
        ))),
        VcpuExit::InternalError => Some(VcpuExitReason::Error(format!(
            "vcpu{index}: KVM internal error"
        ))),
        VcpuExit::Intr => None,
        other => Some(VcpuExitReason::Error(format!(
            "vcpu{index}: unexpected exit {other:?}"
        ))),
    }
}
