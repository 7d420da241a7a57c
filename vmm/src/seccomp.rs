//! Seccomp filters, one per kind of thread (`--seccomp true|false|log`, as
//! Cloud Hypervisor spells it).
//!
//! Filters stack: a thread keeps the filter of the thread that created it
//! and adds its own. The VMM thread installs the broad [`ThreadKind::Vmm`]
//! filter before it starts any other thread, so every thread is confined
//! at least that far; vCPU and device threads then narrow it. Device
//! threads are started by a spawner thread that carries only the VMM
//! filter (`devices::sandbox`), so a device's filter does not have to allow
//! what a vCPU needs, nor the reverse.
//!
//! A denied syscall raises SIGSYS ([`SeccompMode::Trap`]); the handler
//! writes the thread and syscall number to stderr and ends the process
//! with [`SIGSYS_EXIT_CODE`], so a missing entry is a loud, attributable
//! failure rather than a hang. `log` lets the syscall run and has the
//! kernel log it (audit), for finding what a new code path needs.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io;
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Exit status of a process killed by a denied syscall (128 + SIGSYS).
pub const SIGSYS_EXIT_CODE: i32 = 128 + libc::SIGSYS;

/// What `--seccomp` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeccompMode {
    /// No filters.
    Off,
    /// Denied syscalls raise SIGSYS and end the process.
    Trap,
    /// Denied syscalls run and the kernel logs them.
    Log,
}

impl SeccompMode {
    /// Parses `true`, `false` or `log`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "true" => Ok(Self::Trap),
            "false" => Ok(Self::Off),
            "log" => Ok(Self::Log),
            other => Err(format!(
                "--seccomp: {other:?} is not one of true, false, log"
            )),
        }
    }
}

/// The kinds of threads, each with its own filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadKind {
    /// The VMM thread and the helpers it starts (API server, stdin
    /// forwarders, UART watchdog, device spawner).
    Vmm,
    /// A vCPU thread.
    Vcpu,
    /// virtio-blk's thread.
    Block,
    /// virtio-net's thread.
    Net,
    /// virtio-rng's thread.
    Rng,
    /// virtio-console's thread.
    Console,
    /// The balloon's thread.
    Balloon,
}

impl ThreadKind {
    /// The kind of a device thread, by the name it was started with.
    pub fn of_thread(name: &str) -> Option<Self> {
        Some(match name {
            devices::sandbox::SPAWNER_THREAD => Self::Vmm,
            "virtio-blk" => Self::Block,
            "virtio-net" => Self::Net,
            "virtio-rng" => Self::Rng,
            "virtio-console" => Self::Console,
            "balloon" => Self::Balloon,
            _ => return None,
        })
    }
}

/// What every thread needs: memory, futexes, signals, logging, exit.
/// (Sleeping is the VMM's: device threads wait in epoll, with a timeout
/// for their timers, and vCPUs park on a futex.)
const COMMON: &[libc::c_long] = &[
    libc::SYS_brk,
    libc::SYS_clock_gettime,
    libc::SYS_close,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_futex,
    libc::SYS_getpid,
    libc::SYS_getrandom,
    libc::SYS_gettid,
    libc::SYS_madvise,
    libc::SYS_mmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_munmap,
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_restart_syscall,
    libc::SYS_rseq,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sched_yield,
    libc::SYS_sigaltstack,
    libc::SYS_tgkill,
    libc::SYS_write,
    libc::SYS_writev,
];

/// Device threads: their epoll loop and eventfds.
const DEVICE_LOOP: &[libc::c_long] = &[
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_wait,
];

/// The VMM thread builds and tears down VMs, serves the API, opens the
/// payload and disks, creates TAPs and threads: a broad list, but no
/// exec, ptrace, mount, module loading, raw process control or BPF.
const VMM: &[libc::c_long] = &[
    libc::SYS_accept4,
    libc::SYS_access,
    libc::SYS_bind,
    libc::SYS_clock_nanosleep,
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_connect,
    libc::SYS_dup,
    libc::SYS_dup2,
    libc::SYS_dup3,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_epoll_wait,
    libc::SYS_eventfd2,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_fallocate,
    libc::SYS_fcntl,
    libc::SYS_fdatasync,
    libc::SYS_fstat,
    libc::SYS_fstatfs,
    libc::SYS_fsync,
    libc::SYS_ftruncate,
    libc::SYS_get_mempolicy,
    libc::SYS_getcwd,
    libc::SYS_getdents64,
    libc::SYS_getegid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getpeername,
    libc::SYS_getsockname,
    libc::SYS_getsockopt,
    libc::SYS_getuid,
    libc::SYS_ioctl,
    libc::SYS_listen,
    libc::SYS_lseek,
    libc::SYS_mbind,
    libc::SYS_memfd_create,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_nanosleep,
    libc::SYS_newfstatat,
    libc::SYS_open,
    libc::SYS_openat,
    libc::SYS_pipe2,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_prctl,
    libc::SYS_pread64,
    libc::SYS_prlimit64,
    libc::SYS_pwrite64,
    libc::SYS_readlink,
    libc::SYS_readlinkat,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_rt_sigaction,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_seccomp,
    libc::SYS_sendmsg,
    libc::SYS_sendto,
    libc::SYS_set_mempolicy,
    libc::SYS_set_robust_list,
    libc::SYS_setsockopt,
    libc::SYS_shutdown,
    libc::SYS_signalfd4,
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_stat,
    libc::SYS_statfs,
    libc::SYS_statx,
    libc::SYS_sysinfo,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_tkill,
    libc::SYS_uname,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_wait4,
];

/// A vCPU thread: KVM_RUN and the devices behind its I/O and MMIO exits.
/// Beyond [`COMMON`] only its KVM ioctls ([`vcpu_ioctls`]) and, for a
/// driver's activation of a virtio device, `fcntl(F_DUPFD_CLOEXEC)`: the
/// transport hands the device thread clones of its queue eventfds (and a
/// device its own, say the balloon's control eventfd). The data path then
/// starts on the device's thread by message (`devices::event_loop`): a
/// vCPU creates no eventfd, epoll or thread.
const VCPU: &[libc::c_long] = &[];

/// Positioned reads and writes of the image (`read_exact_at` /
/// `write_all_at`) and FLUSH (`sync_data`); the image was opened and
/// sized on the VMM thread.
const BLOCK: &[libc::c_long] = &[libc::SYS_fdatasync, libc::SYS_pread64, libc::SYS_pwrite64];

/// The TAP is a character device: frames go through `read`/`write`.
const NET: &[libc::c_long] = &[];

const RNG: &[libc::c_long] = &[];

const CONSOLE: &[libc::c_long] = &[];

/// The balloon gives pages back: madvise (common) and hole punching.
const BALLOON: &[libc::c_long] = &[libc::SYS_fallocate];

/// `_IOR(KVMIO, nr, size)`.
const fn kvm_ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (0xAE << 8) | nr
}

/// The ioctls a vCPU thread issues on its vCPU fd.
fn vcpu_ioctls() -> Vec<u64> {
    vec![
        0xAE80,                                                        // KVM_RUN
        0xAE9A,                                                        // KVM_NMI
        kvm_ior(0x81, std::mem::size_of::<kvm_bindings::kvm_regs>()),  // KVM_GET_REGS
        kvm_ior(0x83, std::mem::size_of::<kvm_bindings::kvm_sregs>()), // KVM_GET_SREGS
    ]
}

fn rules_for(kind: ThreadKind) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::Error> {
    let extra: &[libc::c_long] = match kind {
        ThreadKind::Vmm => VMM,
        ThreadKind::Vcpu => VCPU,
        ThreadKind::Block => BLOCK,
        ThreadKind::Net => NET,
        ThreadKind::Rng => RNG,
        ThreadKind::Console => CONSOLE,
        ThreadKind::Balloon => BALLOON,
    };
    let device = !matches!(kind, ThreadKind::Vmm | ThreadKind::Vcpu);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = COMMON
        .iter()
        .chain(extra)
        .chain(if device { DEVICE_LOOP } else { &[] })
        .map(|&nr| (nr, Vec::new()))
        .collect();
    // F_GETFD: Rust's std checks that a descriptor is open before it
    // closes it (debug builds), as when a thread drops an eventfd.
    let mut fcntl_cmds = vec![libc::F_GETFD as u64];
    if kind == ThreadKind::Vcpu {
        rules.insert(libc::SYS_ioctl, arg_is_one_of(1, &vcpu_ioctls())?);
        fcntl_cmds.push(libc::F_DUPFD_CLOEXEC as u64);
    }
    if kind != ThreadKind::Vmm {
        rules.insert(libc::SYS_fcntl, arg_is_one_of(1, &fcntl_cmds)?);
    }
    Ok(rules)
}

/// Rules that allow a syscall when its argument `arg` equals one of
/// `values` (compared as 32 bits: ioctl requests and fcntl commands are
/// `int`/`unsigned int` in the kernel).
fn arg_is_one_of(arg: u8, values: &[u64]) -> Result<Vec<SeccompRule>, seccompiler::Error> {
    let rule = |v| {
        SeccompRule::new(vec![SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            v,
        )?])
    };
    Ok(values.iter().map(|&v| rule(v)).collect::<Result<_, _>>()?)
}

/// The compiled filter for `kind`, or None when seccomp is off.
pub fn filter(kind: ThreadKind, mode: SeccompMode) -> io::Result<Option<BpfProgram>> {
    let mismatch = match mode {
        SeccompMode::Off => return Ok(None),
        SeccompMode::Trap => SeccompAction::Trap,
        SeccompMode::Log => SeccompAction::Log,
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(io::Error::other)?;
    let rules = rules_for(kind).map_err(io::Error::other)?;
    let f = SeccompFilter::new(rules, mismatch, SeccompAction::Allow, arch)
        .map_err(io::Error::other)?;
    BpfProgram::try_from(f).map(Some).map_err(io::Error::other)
}

impl ThreadKind {
    fn label(self) -> &'static str {
        match self {
            Self::Vmm => "vmm",
            Self::Vcpu => "vcpu",
            Self::Block => "virtio-blk",
            Self::Net => "virtio-net",
            Self::Rng => "virtio-rng",
            Self::Console => "virtio-console",
            Self::Balloon => "balloon",
        }
    }
}

thread_local! {
    /// The filter this thread entered last, for the SIGSYS report (read
    /// there without any syscall).
    static CONFINED_AS: Cell<&'static str> = const { Cell::new("unconfined") };
}

/// Confines the calling thread as `kind`.
pub fn apply(kind: ThreadKind, mode: SeccompMode) -> io::Result<()> {
    if let Some(program) = filter(kind, mode)? {
        CONFINED_AS.with(|c| c.set(kind.label()));
        seccompiler::apply_filter(&program)
            .map_err(|e| io::Error::other(format!("seccomp filter for {kind:?}: {e}")))?;
    }
    Ok(())
}

/// The process's `--seccomp` mode, set once at start.
static MODE: OnceLock<SeccompMode> = OnceLock::new();

/// Sets the process-wide mode [`enter`] uses; the first call wins.
pub fn set_mode(mode: SeccompMode) {
    let _ = MODE.set(mode);
}

/// Confines the calling thread as `kind` under the process's mode (none
/// before [`set_mode`], as in unit tests).
pub fn enter(kind: ThreadKind) -> io::Result<()> {
    apply(kind, MODE.get().copied().unwrap_or(SeccompMode::Off))
}

/// The hook `devices::sandbox` runs first thing on every device thread
/// (and on its spawner): the filter of the thread's kind, by name. A thread
/// with a name no filter is known for does not start.
pub fn device_sandbox_hook() -> devices::sandbox::SandboxHook {
    Box::new(|name| match ThreadKind::of_thread(name) {
        Some(kind) => enter(kind),
        None => Err(io::Error::other(format!(
            "seccomp: no filter for a thread named {name:?}"
        ))),
    })
}

/// Installs the SIGSYS handler that reports a denied syscall and ends the
/// process. Call before the first filter is applied.
pub fn install_sigsys_handler() -> io::Result<()> {
    // SAFETY: a zeroed sigaction with a valid handler function and
    // SA_SIGINFO; sigaction gets valid pointers.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigsys as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(libc::SIGSYS, &act, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Layout of the SIGSYS part of `siginfo_t` (after the common header):
/// the faulting instruction, the syscall number and the audit arch.
#[repr(C)]
struct SigsysInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    _pad: libc::c_int,
    call_addr: *mut libc::c_void,
    syscall: libc::c_int,
    arch: libc::c_uint,
}

/// Formats `n` in decimal into `buf`; returns the digits.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 0 {
            return &buf[i..];
        }
    }
}

extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // Only write(2) and exit_group(2) here: every filter allows them, and a
    // second denied syscall inside this handler would kill the process
    // without a word (SIGSYS is blocked while it runs).
    let kind = CONFINED_AS.with(Cell::get);
    // SAFETY: the kernel passes a valid siginfo for SIGSYS (SA_SIGINFO),
    // laid out as SigsysInfo; the buffers are local or static.
    unsafe {
        let nr = (*(info as *const SigsysInfo)).syscall;
        let mut digits = [0u8; 20];
        let nr = decimal(u64::try_from(nr).unwrap_or(0), &mut digits);
        for part in [
            &b"cloud-hypervisor: seccomp: a "[..],
            kind.as_bytes(),
            &b" thread"[..],
            &b" made a forbidden syscall "[..],
            nr,
            &b" (run with --seccomp log to find every one)\n"[..],
        ] {
            libc::write(2, part.as_ptr().cast(), part.len());
        }
        libc::_exit(SIGSYS_EXIT_CODE);
    }
}

#[cfg(test)]
mod tests;
