//! The guest process: the VM, its address space, one vCPU thread per guest
//! thread, the pause protocol used by the sampler, and how the run ends.
//!
//! Threads: each guest thread runs on its own host thread with its own vCPU,
//! so a relayed blocking call (read, futex wait) blocks only that thread.
//! Pausing: the sampler takes `gate` for writing after kicking every vCPU
//! with `KICK_SIGNAL`. The signal is blocked in all threads except inside
//! KVM_RUN (KVM_SET_SIGNAL_MASK), so a kick is never lost and never
//! interrupts a relayed system call.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockWriteGuard};

use kvm_bindings::{kvm_regs, CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, SyncReg, VcpuExit, VcpuFd, VmFd};
use log::{debug, info, warn};

use crate::machine::{self, EXC_PORT_BASE, SYSCALL_PORT};
use crate::mm::Mm;
use crate::ram::GuestRam;
use crate::sys::{self, Action};
use crate::tracking::Tracker;

/// How the run ended.
#[derive(Debug, Clone)]
pub enum Ending {
    /// exit/exit_group status.
    Exit(i32),
    /// Killed by a signal, with an explanation for the user.
    Signal(i32, String),
    /// vmmload itself failed.
    Error(String),
    /// `--timeout` expired.
    Timeout,
}

/// Which hypervisor behaviour was found at the first system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `syscall` entered CPL0: standard KVM (VMX/SVM).
    Standard,
    /// `syscall` stayed at CPL3: the PVM-style hypervisor of this machine.
    Pvm,
}

impl Backend {
    /// Human-readable name.
    pub fn describe(self) -> &'static str {
        match self {
            Backend::Standard => "standard KVM (syscall enters CPL0 in hardware)",
            Backend::Pvm => "PVM-style hypervisor (syscall stays at CPL3; stub exits by port I/O)",
        }
    }
}

/// Per-thread handle known to the process.
pub struct ThreadHandle {
    /// pthread of the host thread running the vCPU.
    pub pthread: libc::pthread_t,
}

/// Emulated signal dispositions (the program's view).
pub struct Signals {
    /// Raw `struct sigaction` per signal: handler, flags, restorer, mask.
    pub actions: [[u64; 4]; 65],
}

/// Counters for the report.
#[derive(Default)]
pub struct Counters {
    /// System calls handled.
    pub syscalls: AtomicU64,
    /// vCPU exits of any kind.
    pub exits: AtomicU64,
    /// Total nanoseconds spent in exits handled by vmmload (syscall path).
    pub syscall_ns: AtomicU64,
    /// Per-call and per-exit-reason detail.
    pub profile: crate::profile::Profile,
}

/// Options the process needs.
#[derive(Debug, Clone)]
pub struct ProcOptions {
    /// Guest RAM size.
    pub mem: u64,
    /// Dirty ring entries (0 = no write tracking).
    pub ring_entries: u32,
    /// Read tracking strategy request.
    pub reads: crate::tracking::ReadRequest,
    /// Statistics thresholds.
    pub stats: crate::stats::StatsConfig,
    /// Serve sequential file reads from the in-guest cache (PVM only).
    pub read_cache: bool,
    /// Answer time and identity calls in the guest (PVM only).
    pub fast_calls: bool,
    /// vmmload options to pass on when the program calls execve (the new
    /// program runs under a fresh vmmload).
    pub reexec: Vec<String>,
    /// How the run is supervised and reported.
    pub session: crate::session::Session,
}

/// The guest process.
pub struct Process {
    /// The VM.
    pub vm: VmFd,
    /// Guest RAM.
    pub ram: Arc<GuestRam>,
    /// Address space.
    pub mm: Mutex<Mm>,
    /// Signal dispositions.
    pub signals: Mutex<Signals>,
    /// Pending signals, threads' signal state.
    pub sigq: crate::signals::Shared,
    /// Path of the program image (for /proc/self/exe).
    pub exe: Mutex<String>,
    /// Backend detected at the first syscall.
    pub backend: OnceLock<Backend>,
    /// Live guest threads by host tid.
    pub threads: Mutex<HashMap<i32, ThreadHandle>>,
    /// Pause gate: vCPUs hold it shared while in KVM_RUN.
    pub gate: RwLock<()>,
    /// Set once the run is ending.
    pub stopping: AtomicBool,
    /// Set while the sampler wants the vCPUs out of KVM_RUN.
    pub pause_requested: AtomicBool,
    ending: Mutex<Option<Sender<Ending>>>,
    /// Next vCPU id.
    pub next_vcpu: AtomicU64,
    /// CPUID to give every vCPU.
    pub cpuid: Option<CpuId>,
    /// Write and read tracking.
    pub tracker: Tracker,
    /// Counters.
    pub counters: Counters,
    /// Unsupported calls already logged.
    pub logged: Mutex<HashSet<String>>,
    /// Generation of guest TLB flushes requested by the sampler.
    pub flush_epoch: AtomicU64,
    /// In-guest read cache.
    pub cache: Mutex<crate::readcache::ReadCache>,
    /// This process is a fork of the program (no reports of its own).
    pub forked: bool,
    /// Options (a forked child or an exec'ed program starts from them).
    pub opts: ProcOptions,
    opts_read_cache: bool,
    opts_fast_calls: bool,
    /// Status of the last `exit` of a thread (the process status if it was the last).
    pub exit_code: AtomicI32,
}

/// Signal used to kick vCPUs out of KVM_RUN.
pub fn kick_signal() -> i32 {
    libc::SIGRTMIN() + 2
}

extern "C" fn on_kick(_: libc::c_int) {}

/// Installs the kick handler and blocks the kick signal in the calling
/// thread (threads spawned later inherit the mask).
pub fn init_signals() {
    // SAFETY: installing a no-op handler and changing our own mask.
    // No SA_RESTART: a backend may report a signal during KVM_RUN as a
    // restartable interruption, and the kick must make KVM_RUN return. The
    // signal is blocked outside KVM_RUN, so relayed calls never see EINTR.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_kick as *const () as usize;
        sa.sa_flags = 0;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(kick_signal(), &sa, std::ptr::null_mut());
        let mut set = termination_signals();
        libc::sigaddset(&mut set, kick_signal());
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    crate::signals::host::init();
}

/// Signals that end the run from outside (Ctrl-C, kill). They are blocked in
/// every thread and polled by the main thread, so the report is still
/// written before vmmload dies by the same signal.
pub fn termination_signals() -> libc::sigset_t {
    // SAFETY: building a signal set in a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// A pending termination signal, if any (does not wait).
pub fn poll_termination() -> Option<i32> {
    if crate::signals::host::forwarder_active() {
        // The signal thread takes them and applies the program's disposition.
        return None;
    }
    let set = termination_signals();
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: sigtimedwait on signals blocked in this thread, zero timeout.
    let s = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    (s > 0).then_some(s)
}

const KVM_SET_SIGNAL_MASK: libc::c_ulong = 0x4004_ae8b;

/// Lets the kick signal through while this vCPU is in KVM_RUN.
fn set_run_sigmask(vcpu: &VcpuFd) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: reading our own signal mask.
    let mut cur: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur);
        libc::sigdelset(&mut cur, kick_signal());
    }
    // struct kvm_signal_mask { __u32 len; __u8 sigset[]; } with the kernel's 8-byte sigset.
    let mut buf = [0u8; 12];
    buf[..4].copy_from_slice(&8u32.to_le_bytes());
    // SAFETY: glibc's sigset_t starts with the kernel's 64-bit mask.
    let raw = unsafe { *(&cur as *const libc::sigset_t as *const u64) };
    buf[4..].copy_from_slice(&raw.to_le_bytes());
    // SAFETY: KVM_SET_SIGNAL_MASK reads len + 8 bytes from our buffer.
    let r = unsafe { libc::ioctl(vcpu.as_raw_fd(), KVM_SET_SIGNAL_MASK, buf.as_ptr()) };
    if r != 0 {
        warn!(
            "KVM_SET_SIGNAL_MASK failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Consumes a pending kick (it stays pending after KVM_RUN returns).
fn eat_kick() {
    // SAFETY: sigtimedwait with a zero timeout on our own blocked signal.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, kick_signal());
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        while libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) > 0 {}
    }
}

/// Per-thread guest state kept by its vCPU thread.
pub struct Thread {
    /// Host tid (the guest sees it as its tid).
    pub tid: i32,
    /// set_tid_address / CLONE_CHILD_CLEARTID address.
    pub clear_child_tid: u64,
    /// Emulated signal mask (mirrored in `sig.mask`; change with
    /// `signals::set_mask`).
    pub sigmask: u64,
    /// Signal state shared with senders.
    pub sig: Arc<crate::signals::ThreadSig>,
    /// Last flush epoch applied to this vCPU.
    pub flush_seen: u64,
}

/// Start state of a new vCPU.
pub struct VcpuStart {
    /// General registers.
    pub regs: kvm_regs,
    /// FS base.
    pub fs_base: u64,
    /// GS base.
    pub gs_base: u64,
}

impl Process {
    /// Creates the VM and its memory.
    pub fn new(opts: ProcOptions, exe: String, ending: Sender<Ending>) -> Result<Process, String> {
        let ram = Arc::new(
            GuestRam::new(opts.mem)
                .map_err(|e| format!("cannot reserve {} bytes of guest RAM: {e}", opts.mem))?,
        );
        let mut mm = Mm::new(ram.clone()).map_err(|e| e.to_string())?;
        machine::build(&mut mm).map_err(|e| format!("building system pages: {e}"))?;
        Process::with_memory(opts, exe, ending, mm, false)
    }

    /// Creates a VM around existing guest memory (a new program, or the copy
    /// a forked child inherited).
    pub fn with_memory(
        opts: ProcOptions,
        exe: String,
        ending: Sender<Ending>,
        mm: Mm,
        forked: bool,
    ) -> Result<Process, String> {
        let (kvm, vm) = open_vm()?;
        // Needed on Intel for real-mode support; harmless elsewhere. Below 4 GiB,
        // guest RAM starts at 4 GiB.
        let _ = vm.set_tss_address(0xfffb_d000);
        let tracker = Tracker::new(&kvm, &vm, &opts).map_err(|e| format!("dirty tracking: {e}"))?;
        let p_ram = mm.ram.clone();
        let cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES).ok();
        let cache = crate::readcache::ReadCache::new(&mm, opts.read_cache);
        let p = Process {
            vm,
            ram: p_ram,
            mm: Mutex::new(mm),
            signals: Mutex::new(Signals {
                actions: crate::signals::host::initial_actions(),
            }),
            sigq: crate::signals::Shared::default(),
            exe: Mutex::new(exe),
            backend: OnceLock::new(),
            threads: Mutex::new(HashMap::new()),
            gate: RwLock::new(()),
            stopping: AtomicBool::new(false),
            pause_requested: AtomicBool::new(false),
            ending: Mutex::new(Some(ending)),
            next_vcpu: AtomicU64::new(0),
            cpuid,
            tracker,
            counters: Counters::default(),
            logged: Mutex::new(HashSet::new()),
            flush_epoch: AtomicU64::new(0),
            exit_code: AtomicI32::new(0),
            cache: Mutex::new(cache),
            opts_read_cache: opts.read_cache,
            opts_fast_calls: opts.fast_calls,
            forked,
            opts,
        };
        p.add_memslot()
            .map_err(|e| format!("KVM_SET_USER_MEMORY_REGION: {e}"))?;
        Ok(p)
    }

    /// Registers (or re-registers) guest RAM's memslots (`memslots.rs`).
    pub fn add_memslot(&self) -> Result<(), kvm_ioctls::Error> {
        use std::os::unix::io::AsRawFd;
        self.ram
            .slots
            .attach(self.vm.as_raw_fd(), self.tracker.memslot_flags())
            .map_err(|e| kvm_ioctls::Error::new(e.raw_os_error().unwrap_or(libc::EINVAL)))
    }

    /// Removes the memslots (the caller re-adds them; vCPUs must be paused).
    pub fn remove_memslot(&self) -> Result<(), kvm_ioctls::Error> {
        self.ram
            .slots
            .detach()
            .map_err(|e| kvm_ioctls::Error::new(e.raw_os_error().unwrap_or(libc::EINVAL)))
    }

    /// Reports how the run ends (first report wins).
    pub fn end(&self, e: Ending) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(tx) = self.ending.lock().expect("ending lock").take() {
            let _ = tx.send(e);
        }
    }

    /// Logs an unsupported feature once.
    pub fn log_once(&self, what: String) {
        if self.logged.lock().expect("log lock").insert(what.clone()) {
            warn!("{what}");
        }
    }

    /// Kicks every vCPU out of KVM_RUN (standard KVM returns EINTR; this
    /// machine's PVM backend swallows the signal while guest user code runs,
    /// so nothing may depend on a kick arriving there).
    pub fn kick_all(&self) {
        for t in self.threads.lock().expect("threads lock").values() {
            // SAFETY: signalling a live thread of ours with a handled signal.
            unsafe { libc::pthread_kill(t.pthread, kick_signal()) };
        }
    }

    /// Tries to stop all vCPUs (they wait before KVM_RUN) for up to ~100 ms.
    /// Returns `None` if some vCPU did not leave KVM_RUN in time.
    pub fn pause(&self) -> Option<Paused<'_>> {
        self.pause_requested.store(true, Ordering::SeqCst);
        for i in 0..400 {
            if i % 20 == 0 {
                self.kick_all();
            }
            if let Ok(g) = self.gate.try_write() {
                return Some(Paused { p: self, _g: g });
            }
            std::thread::sleep(std::time::Duration::from_micros(250));
        }
        self.pause_requested.store(false, Ordering::SeqCst);
        None
    }

    /// Creates and configures a vCPU.
    pub fn create_vcpu(&self, start: &VcpuStart) -> Result<VcpuFd, String> {
        let id = self.next_vcpu.fetch_add(1, Ordering::SeqCst);
        let mut vcpu = create_vcpu_fd(&self.vm, id)?;
        if let Some(c) = &self.cpuid {
            if let Err(e) = vcpu.set_cpuid2(c) {
                debug!("KVM_SET_CPUID2: {e}");
            }
        }
        let (pml4, tss) = {
            let mut mm = self.mm.lock().expect("mm lock");
            let tss = machine::vcpu_tss(&mut mm, id).map_err(|e| format!("vCPU {id} TSS: {e}"))?;
            (mm.pml4, tss)
        };
        let s = vcpu
            .get_sregs()
            .map_err(|e| format!("KVM_GET_SREGS: {e}"))?;
        let mut s = machine::user_sregs(s, pml4, start.fs_base, tss);
        s.gs.base = start.gs_base;
        vcpu.set_sregs(&s)
            .map_err(|e| format!("KVM_SET_SREGS: {e}"))?;
        let lstar = match self.backend.get() {
            Some(Backend::Pvm) if self.opts_read_cache || self.opts_fast_calls => {
                machine::STUB_VA + machine::STUB_PVM_ENTRY
            }
            _ => machine::STUB_VA,
        };
        vcpu.set_msrs(&machine::syscall_msrs(lstar))
            .map_err(|e| format!("KVM_SET_MSRS: {e}"))?;
        if let Ok(mut x) = vcpu.get_xcrs() {
            if x.nr_xcrs > 0 {
                // The host's enabled state components, limited to what KVM
                // offers guests (CPUID 0xD.0) and without AMX tile data,
                // which a host process must request permission for.
                let offered = self
                    .cpuid
                    .as_ref()
                    .and_then(|c| {
                        c.as_slice()
                            .iter()
                            .find(|e| e.function == 0xd && e.index == 0)
                            .map(|e| ((e.edx as u64) << 32) | e.eax as u64)
                    })
                    .unwrap_or(u64::MAX);
                x.xcrs[0].value = machine::host_xcr0() & offered & !(3 << 17);
                if let Err(e) = vcpu.set_xcrs(&x) {
                    debug!("KVM_SET_XCRS: {e}");
                }
            }
        }
        vcpu.set_regs(&start.regs)
            .map_err(|e| format!("KVM_SET_REGS: {e}"))?;
        self.tracker
            .add_vcpu(&vcpu)
            .map_err(|e| format!("dirty ring: {e}"))?;
        vcpu.set_sync_valid_reg(SyncReg::Register);
        Ok(vcpu)
    }

    /// Spawns the host thread for a vCPU. `ready` receives the new tid.
    pub fn spawn(
        self: &Arc<Self>,
        vcpu: VcpuFd,
        setup: sys::ThreadSetup,
        ready: std::sync::mpsc::Sender<i32>,
    ) {
        let p = self.clone();
        let r = std::thread::Builder::new()
            .name("vcpu".into())
            .spawn(move || p.run_vcpu_here(vcpu, setup, ready));
        if let Err(e) = r {
            self.end(Ending::Error(format!("cannot create a host thread: {e}")));
        }
    }

    /// Runs a guest thread on the calling host thread until it exits. If
    /// KVM cannot run the vCPU on this thread, `ready` is dropped (clone
    /// fails with EAGAIN), or the run ends with an error for the first one.
    pub fn run_vcpu_here(
        self: &Arc<Self>,
        mut vcpu: VcpuFd,
        setup: sys::ThreadSetup,
        ready: std::sync::mpsc::Sender<i32>,
    ) {
        if let Err(e) = prepare_run(&mut vcpu) {
            if self.threads.lock().expect("threads lock").is_empty() {
                self.end(Ending::Error(format!("KVM_RUN: {e}")));
            }
            return;
        }
        let tid = gettid();
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        self.threads
            .lock()
            .expect("threads lock")
            .insert(tid, ThreadHandle { pthread: me });
        let mut t = Thread {
            tid,
            clear_child_tid: setup.clear_child_tid,
            sigmask: setup.sigmask & !crate::signals::UNBLOCKABLE,
            sig: crate::signals::register_thread(self, tid, setup.sigmask),
            flush_seen: self.flush_epoch.load(Ordering::SeqCst),
        };
        sys::thread_started(self, &t, &setup);
        let _ = ready.send(tid);
        self.vcpu_loop(vcpu, &mut t);
    }

    fn vcpu_loop(self: &Arc<Self>, mut vcpu: VcpuFd, t: &mut Thread) {
        set_run_sigmask(&vcpu);
        // The last exits before a fatal one: on SVM a shutdown resets the
        // vCPU, so its own RIP says nothing about where the guest was.
        let mut recent = RecentExits::default();
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            while self.pause_requested.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            let guard = self.gate.read().expect("gate lock");
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let epoch = self.flush_epoch.load(Ordering::SeqCst);
            if epoch != t.flush_seen {
                t.flush_seen = epoch;
                flush_guest_tlb(&vcpu);
            }
            let exit = match vcpu.run() {
                Ok(VcpuExit::IoOut(port, _)) => Exit::Port(port),
                Ok(VcpuExit::Unsupported(31)) => Exit::RingFull,
                Ok(VcpuExit::Intr) => Exit::Kick,
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => Exit::Kick,
                Ok(VcpuExit::Hlt) => Exit::Fatal("guest halted".into()),
                Ok(VcpuExit::Shutdown) => Exit::Fatal("triple fault (KVM_EXIT_SHUTDOWN)".into()),
                Ok(VcpuExit::InternalError) => {
                    Exit::Fatal("KVM internal error (emulation failure)".into())
                }
                Ok(VcpuExit::FailEntry(r, _)) => {
                    Exit::Fatal(format!("VM entry failed (reason {r:#x})"))
                }
                Ok(VcpuExit::MmioRead(a, _)) | Ok(VcpuExit::MmioWrite(a, _)) => {
                    Exit::Fatal(format!("guest access to unbacked physical address {a:#x}"))
                }
                Ok(other) => Exit::Fatal(format!("unexpected exit {other:?}")),
                Err(e) => Exit::Fatal(format!("KVM_RUN: {e}")),
            };
            drop(guard);
            if let Exit::Fatal(msg) = &exit {
                let rip = vcpu.get_regs().map(|r| r.rip).unwrap_or(0);
                let msg = format!("{msg} at rip {rip:#x}; {}", recent.describe());
                self.counters.exits.fetch_add(1, Ordering::Relaxed);
                self.counters.profile.exit(exit.reason());
                self.end(Ending::Error(msg));
                return;
            }
            {
                let r = &vcpu.sync_regs().regs;
                recent.push(&exit, r.rip, r.rax);
            }
            self.counters.exits.fetch_add(1, Ordering::Relaxed);
            self.counters.profile.exit(exit.reason());
            match exit {
                Exit::Kick => {
                    eat_kick();
                    if !crate::signals::at_exit(self, &mut vcpu, t) {
                        return;
                    }
                }
                Exit::RingFull => {
                    self.tracker.ring_full(self);
                    if !crate::signals::at_exit(self, &mut vcpu, t) {
                        return;
                    }
                }
                Exit::Port(SYSCALL_PORT) => {
                    let start = std::time::Instant::now();
                    let act = self.syscall(&mut vcpu, t);
                    self.counters
                        .syscall_ns
                        .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    if let Action::ThreadExit = act {
                        self.thread_exit(t);
                        return;
                    }
                    if let Action::Stop = act {
                        return;
                    }
                }
                Exit::Port(port) if (EXC_PORT_BASE..EXC_PORT_BASE + 32).contains(&port) => {
                    let v = (port - EXC_PORT_BASE) as u8;
                    if !sys::exception(self, &mut vcpu, t, v) {
                        return;
                    }
                }
                Exit::Port(port) => {
                    self.end(Ending::Error(format!("unexpected port I/O to {port:#x}")));
                    return;
                }
                // Ended above, before the exit was recorded.
                Exit::Fatal(_) => return,
            }
        }
    }

    fn syscall(self: &Arc<Self>, vcpu: &mut VcpuFd, t: &mut Thread) -> Action {
        if self.stopping.load(Ordering::SeqCst) {
            // exit_group or a fatal signal already ended the program.
            return Action::Stop;
        }
        self.counters.syscalls.fetch_add(1, Ordering::Relaxed);
        let backend = *self.backend.get_or_init(|| {
            let cpl3 = vcpu.get_sregs().map(|s| s.cs.dpl == 3).unwrap_or(true);
            let b = if cpl3 {
                Backend::Pvm
            } else {
                Backend::Standard
            };
            info!("backend: {}", b.describe());
            self.tracker.choose_reads(b);
            if b == Backend::Pvm && (self.opts_read_cache || self.opts_fast_calls) {
                // From now on syscalls enter the stub's fast paths first.
                let lstar = machine::lstar_msr(machine::STUB_VA + machine::STUB_PVM_ENTRY);
                if let Err(e) = vcpu.set_msrs(&lstar) {
                    warn!("cannot switch LSTAR to the fast-path entry: {e}");
                }
                info!(
                    "in-guest read cache: {}",
                    if self.opts_read_cache { "on" } else { "off" }
                );
                if self.opts_fast_calls {
                    let khz = vcpu.get_tsc_khz().unwrap_or(0);
                    let mm = self.mm.lock().expect("mm lock");
                    let on = crate::fastcalls::enable(&mm, khz);
                    info!(
                        "in-guest time and identity calls: {}",
                        if on {
                            "on"
                        } else {
                            "off (TSC not constant/non-stop)"
                        }
                    );
                }
            }
            b
        });
        let regs = vcpu.sync_regs().regs;
        let start = std::time::Instant::now();
        self.counters.profile.syscall_start(regs.rax, regs.rsi);
        let act = sys::handle(self, vcpu, t, &regs);
        self.counters
            .profile
            .syscall_done(regs.rax, regs.rsi, start.elapsed().as_nanos() as u64);
        // Result into RAX, return to the program, pending signals delivered.
        crate::signals::syscall_exit(self, vcpu, t, &regs, act, backend)
    }

    fn thread_exit(&self, t: &Thread) {
        if t.clear_child_tid != 0 {
            let mm = self.mm.lock().expect("mm lock");
            if let Ok(segs) = mm.translate(t.clear_child_tid, 4, true) {
                let p = segs[0].ptr as *mut u32;
                // SAFETY: a 4-byte aligned word inside guest RAM; futex wake on it
                // lets pthread_join in another guest thread proceed.
                unsafe {
                    std::ptr::write_volatile(p, 0);
                    libc::syscall(libc::SYS_futex, p, libc::FUTEX_WAKE, 1, 0, 0, 0);
                }
            }
        }
        crate::signals::unregister_thread(self, t.tid);
        let mut th = self.threads.lock().expect("threads lock");
        th.remove(&t.tid);
        if th.is_empty() {
            drop(th);
            self.end(Ending::Exit(self.exit_code.load(Ordering::SeqCst)));
        }
    }
}

/// All vCPUs are outside KVM_RUN while this lives.
pub struct Paused<'a> {
    p: &'a Process,
    _g: RwLockWriteGuard<'a, ()>,
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.p.pause_requested.store(false, Ordering::SeqCst);
    }
}

enum Exit {
    Port(u16),
    RingFull,
    Kick,
    Fatal(String),
}

/// The last few exits of one vCPU: (reason, RIP, RAX) as KVM reported them.
#[derive(Default)]
struct RecentExits {
    entries: [(&'static str, u64, u64); 4],
    next: usize,
}

impl RecentExits {
    fn push(&mut self, exit: &Exit, rip: u64, rax: u64) {
        let what = match exit {
            Exit::Port(SYSCALL_PORT) => "syscall",
            Exit::Port(_) => "exception",
            Exit::RingFull => "ring-full",
            Exit::Kick => "kick",
            Exit::Fatal(_) => "fatal",
        };
        self.entries[self.next % self.entries.len()] = (what, rip, rax);
        self.next += 1;
    }

    /// Oldest first, e.g. "last exits: kick at rip 0x401000 (rax 0x1), …".
    fn describe(&self) -> String {
        let n = self.next.min(self.entries.len());
        let list: Vec<String> = (self.next - n..self.next)
            .map(|i| {
                let (w, rip, rax) = self.entries[i % self.entries.len()];
                format!("{w} at rip {rip:#x} (rax {rax:#x})")
            })
            .collect();
        if list.is_empty() {
            "no earlier exit".into()
        } else {
            format!("last exits: {}", list.join(", "))
        }
    }
}

impl Exit {
    fn reason(&self) -> crate::profile::ExitReason {
        use crate::profile::ExitReason as R;
        match self {
            Exit::Port(SYSCALL_PORT) => R::Syscall,
            Exit::Port(p) if (EXC_PORT_BASE..EXC_PORT_BASE + 32).contains(p) => R::Exception,
            Exit::RingFull => R::RingFull,
            Exit::Kick => R::Kick,
            _ => R::Other,
        }
    }
}

/// Opens /dev/kvm and creates the VM, both on hidden high descriptors.
fn open_vm() -> Result<(Kvm, VmFd), String> {
    use std::os::unix::io::{AsRawFd, FromRawFd};
    // SAFETY: opening a device node with a NUL-terminated path.
    let fd = unsafe { libc::open(c"/dev/kvm".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!(
            "cannot open /dev/kvm: {}",
            std::io::Error::last_os_error()
        ));
    }
    let fd = crate::fds::hide(fd).map_err(|e| format!("/dev/kvm: {e}"))?;
    // SAFETY: we own this freshly opened /dev/kvm descriptor.
    let kvm = unsafe { Kvm::from_raw_fd(fd) };
    // SAFETY: KVM_CREATE_VM (type 0) on the /dev/kvm descriptor.
    let vfd = unsafe { libc::ioctl(kvm.as_raw_fd(), 0xae01, 0) };
    if vfd < 0 {
        return Err(format!(
            "KVM_CREATE_VM: {}",
            std::io::Error::last_os_error()
        ));
    }
    let vfd = crate::fds::hide(vfd).map_err(|e| format!("VM descriptor: {e}"))?;
    // SAFETY: a VM descriptor we own.
    let vm =
        unsafe { kvm.create_vmfd_from_rawfd(vfd) }.map_err(|e| format!("KVM_CREATE_VM: {e}"))?;
    Ok((kvm, vm))
}

/// KVM_CREATE_VCPU on a hidden high descriptor.
fn create_vcpu_fd(vm: &VmFd, id: u64) -> Result<VcpuFd, String> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: KVM_CREATE_VCPU on our VM descriptor.
    let fd = unsafe { libc::ioctl(vm.as_raw_fd(), 0xae41, id as libc::c_ulong) };
    if fd < 0 {
        return Err(format!(
            "KVM_CREATE_VCPU: {}",
            std::io::Error::last_os_error()
        ));
    }
    let fd = crate::fds::hide(fd).map_err(|e| format!("vCPU descriptor: {e}"))?;
    // SAFETY: a vCPU descriptor we own.
    unsafe { vm.create_vcpu_from_rawfd(fd) }.map_err(|e| format!("KVM_CREATE_VCPU: {e}"))
}

/// Flushes the guest TLB on standard KVM: changing CR4.PGE through
/// KVM_SET_SREGS makes KVM reset the MMU context and flush.
fn flush_guest_tlb(vcpu: &VcpuFd) {
    if let Ok(mut s) = vcpu.get_sregs() {
        s.cr4 ^= 1 << 7;
        let _ = vcpu.set_sregs(&s);
    }
}

/// The caller's host thread id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The first KVM_RUN of a vCPU on a host thread does per-thread setup in KVM
/// (on recent kernels it may create a kernel worker task counted against
/// RLIMIT_NPROC). Doing it with `immediate_exit` set runs no guest code and
/// shows whether it works: KVM answers EINTR when it does. Without this, a
/// persistent EAGAIN from KVM_RUN would look like a kick forever.
pub fn prepare_run(vcpu: &mut VcpuFd) -> std::io::Result<()> {
    vcpu.set_kvm_immediate_exit(1);
    let r = vcpu.run().map(|_| ());
    vcpu.set_kvm_immediate_exit(0);
    match r {
        Err(e) if e.errno() == libc::EINTR => Ok(()),
        Err(e) => Err(std::io::Error::from_raw_os_error(e.errno())),
        Ok(()) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_exits_keep_the_last_four_oldest_first() {
        let mut r = RecentExits::default();
        assert_eq!(r.describe(), "no earlier exit");
        for i in 0..6u64 {
            let e = if i % 2 == 0 {
                Exit::Kick
            } else {
                Exit::Port(SYSCALL_PORT)
            };
            r.push(&e, 0x1000 + i, i);
        }
        assert_eq!(
            r.describe(),
            "last exits: kick at rip 0x1002 (rax 0x2), syscall at rip 0x1003 (rax 0x3), \
             kick at rip 0x1004 (rax 0x4), syscall at rip 0x1005 (rax 0x5)"
        );
    }
}
