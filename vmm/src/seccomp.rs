//! Seccomp filters, one per kind of thread (`--seccomp true|false|log`, as
//! Cloud Hypervisor spells it).
//!
//! Filters stack: a thread keeps the filters of the thread that created it
//! and adds its own; a syscall passes only if every filter allows it. The
//! main thread installs the [`ThreadKind::Process`] ceiling (the union of
//! what any thread needs) before it starts any other thread, so nothing
//! ever runs unfiltered. Each thread then narrows it to its role, first
//! thing (the allowed groups per kind are in [`groups`], argument rules in
//! [`arg_rules`]):
//!
//! | thread | filters | role |
//! |---|---|---|
//! | main | Process, Vmm | VM build/reboot/teardown, API requests; serves no socket |
//! | `http-server` (+ its call pool) | Process, Api | the API socket; no file, no KVM |
//! | `device-spawner` | Process, Spawner | starts device threads |
//! | `virtio-*`, `balloon` | Process, Spawner, device | the data path: epoll, its own I/O |
//! | `vcpuN` | Process, Vmm, Vcpu | KVM_RUN and the buses; no read, no open |
//! | `serial-in`, `console-in`, `serial-watchdog` | Process, Vmm, ConsoleIo | stdin, ticks |
//!
//! There is no signal thread: termination signals arrive on a signalfd in
//! the main thread's loop; the vCPU kick and SIGSYS are handlers.
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

// The syscall numbers (SYS_*) and fcntl/prctl constants the lists name.
use libc::*;

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
    /// The ceiling every thread carries: installed by the main thread
    /// before it starts any other, so it is the union of what all need.
    Process,
    /// The main (VMM) thread once its helpers run: builds, reboots and
    /// tears down VMs and answers API requests handed over by the API
    /// thread, but serves no socket itself.
    Vmm,
    /// The API server (`http-server`) and its blocking-call pool.
    Api,
    /// The device spawner, which starts device threads (each then adds its
    /// own filter).
    Spawner,
    /// stdin forwarders and the UART watchdog (`serial-in`, `console-in`,
    /// `serial-watchdog`).
    ConsoleIo,
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
    /// Every kind, for tests and documentation.
    pub const ALL: [ThreadKind; 11] = [
        Self::Process,
        Self::Vmm,
        Self::Api,
        Self::Spawner,
        Self::ConsoleIo,
        Self::Vcpu,
        Self::Block,
        Self::Net,
        Self::Rng,
        Self::Console,
        Self::Balloon,
    ];

    /// The kind of a thread started through `devices::sandbox`, by name.
    pub fn of_thread(name: &str) -> Option<Self> {
        Some(match name {
            devices::sandbox::SPAWNER_THREAD => Self::Spawner,
            "virtio-blk" => Self::Block,
            "virtio-net" => Self::Net,
            "virtio-rng" => Self::Rng,
            "virtio-console" => Self::Console,
            "balloon" => Self::Balloon,
            _ => return None,
        })
    }

    fn label(self) -> &'static str {
        match self {
            Self::Process => "process",
            Self::Vmm => "vmm",
            Self::Api => "http-server",
            Self::Spawner => "device-spawner",
            Self::ConsoleIo => "console-io",
            Self::Vcpu => "vcpu",
            Self::Block => "virtio-blk",
            Self::Net => "virtio-net",
            Self::Rng => "virtio-rng",
            Self::Console => "virtio-console",
            Self::Balloon => "balloon",
        }
    }
}

/// A group of syscalls allowed together, with the reason.
struct Group {
    #[allow(dead_code)] // documentation, kept with the list
    why: &'static str,
    syscalls: &'static [libc::c_long],
}

const MEMORY: Group = Group {
    why: "heap and stacks (malloc, thread stacks, guard pages, trimming)",
    syscalls: &[
        SYS_brk,
        SYS_madvise,
        SYS_mmap,
        SYS_mprotect,
        SYS_mremap,
        SYS_munmap,
    ],
};
const SYNC: Group = Group {
    why: "locks, condvars, channels and parking (a paused vCPU parks on a futex)",
    syscalls: &[SYS_futex, SYS_sched_yield],
};
const SIGNALS: Group = Group {
    why: "signal masks and handlers' returns (vCPU kick, SIGSYS report), pthread_kill",
    syscalls: &[
        SYS_restart_syscall,
        SYS_rt_sigprocmask,
        SYS_rt_sigreturn,
        SYS_sigaltstack,
        SYS_tgkill,
    ],
};
const BASICS: Group = Group {
    why: "time, ids, randomness for hash seeds, closing descriptors, thread exit",
    syscalls: &[
        SYS_clock_gettime,
        SYS_close,
        SYS_exit,
        SYS_exit_group,
        SYS_getpid,
        SYS_getrandom,
        SYS_gettid,
        SYS_rseq,
    ],
};
const WRITE: Group = Group {
    why: "log lines, eventfd signals (interrupts, notifications), serial output",
    syscalls: &[SYS_write, SYS_writev],
};
const READ: Group = Group {
    why: "eventfds, stdin, the TAP, the entropy source (never needed on a vCPU)",
    syscalls: &[SYS_read, SYS_readv],
};
const EPOLL_WAIT: Group = Group {
    why: "an event loop over descriptors made elsewhere",
    syscalls: &[SYS_epoll_ctl, SYS_epoll_pwait, SYS_epoll_wait],
};
const SLEEP: Group = Group {
    why: "periodic ticks and back-off waits",
    syscalls: &[SYS_clock_nanosleep, SYS_nanosleep],
};
const THREAD_START: Group = Group {
    why: "starting threads (and, in the new thread, naming it and entering its filter)",
    syscalls: &[
        SYS_clone,
        SYS_clone3,
        SYS_prctl,
        SYS_sched_getaffinity,
        SYS_seccomp,
        SYS_set_robust_list,
    ],
};
const SOCKET_SERVER: Group = Group {
    why: "serving the API socket: accept, read requests, write answers, close",
    syscalls: &[
        SYS_accept4,
        SYS_recvfrom,
        SYS_recvmsg,
        SYS_sendmsg,
        SYS_sendto,
        SYS_shutdown,
    ],
};
const SOCKET_SETUP: Group = Group {
    why: "binding the API socket (path or inherited fd) and peer checks, before the VMM loop",
    syscalls: &[
        SYS_bind,
        SYS_connect,
        SYS_getpeername,
        SYS_getsockname,
        SYS_getsockopt,
        SYS_listen,
        SYS_setsockopt,
        SYS_socketpair,
    ],
};
const STAT: Group = Group {
    why: "validating a vm.create body: does the host NUMA node a zone names exist (sysfs)",
    syscalls: &[SYS_newfstatat, SYS_statx],
};
const UNLINK: Group = Group {
    why: "removing the API socket file the server created",
    syscalls: &[SYS_unlink, SYS_unlinkat],
};
const VM_BUILD: Group = Group {
    why: "building VMs: open payload, disks, zone files, /dev/kvm and the TAP; KVM \
          objects, eventfds, memfds, NUMA policy, hugepage checks, the TAP's AF_INET \
          control socket, pinning, the API request eventfd and termination signalfd",
    syscalls: &[
        SYS_access,
        SYS_dup,
        SYS_dup2,
        SYS_dup3,
        SYS_epoll_create1,
        SYS_epoll_pwait2,
        SYS_eventfd2,
        SYS_faccessat,
        SYS_faccessat2,
        SYS_fcntl,
        SYS_fstat,
        SYS_fstatfs,
        SYS_ftruncate,
        SYS_get_mempolicy,
        SYS_getcwd,
        SYS_getdents64,
        SYS_getegid,
        SYS_geteuid,
        SYS_getgid,
        SYS_getuid,
        SYS_ioctl,
        SYS_lseek,
        SYS_mbind,
        SYS_memfd_create,
        SYS_mkdir,
        SYS_mkdirat,
        SYS_newfstatat,
        SYS_open,
        SYS_openat,
        SYS_pipe2,
        SYS_poll,
        SYS_ppoll,
        SYS_prlimit64,
        SYS_readlink,
        SYS_readlinkat,
        SYS_rename,
        SYS_renameat,
        SYS_rt_sigaction,
        SYS_sched_setaffinity,
        SYS_set_mempolicy,
        SYS_signalfd4,
        SYS_socket,
        SYS_stat,
        SYS_statfs,
        SYS_statx,
        SYS_sysinfo,
        SYS_timerfd_create,
        SYS_timerfd_settime,
        SYS_tkill,
        SYS_uname,
    ],
};
const DISK_IO: Group = Group {
    why: "positioned reads and writes of a disk image, FLUSH (sync_data)",
    syscalls: &[SYS_fdatasync, SYS_fsync, SYS_pread64, SYS_pwrite64],
};
const PUNCH_HOLE: Group = Group {
    why: "giving ballooned pages of memfd/file zones back (FALLOC_FL_PUNCH_HOLE)",
    syscalls: &[SYS_fallocate],
};

/// What every thread needs.
const COMMON: &[&Group] = &[&MEMORY, &SYNC, &SIGNALS, &BASICS, &WRITE];

/// The groups each kind allows beyond [`COMMON`]; ioctl, fcntl and prctl
/// are further narrowed by argument in [`arg_rules`].
fn groups(kind: ThreadKind) -> &'static [&'static Group] {
    use ThreadKind::*;
    match kind {
        Process => &[
            &READ,
            &EPOLL_WAIT,
            &SLEEP,
            &THREAD_START,
            &SOCKET_SERVER,
            &SOCKET_SETUP,
            &UNLINK,
            &VM_BUILD,
            &DISK_IO,
            &PUNCH_HOLE,
        ],
        Vmm => &[
            &READ,
            &EPOLL_WAIT,
            &SLEEP,
            &THREAD_START,
            &UNLINK,
            &VM_BUILD,
            &DISK_IO,
            &PUNCH_HOLE,
        ],
        Api => &[
            &READ,
            &EPOLL_WAIT,
            &THREAD_START,
            &SOCKET_SERVER,
            &STAT,
            &UNLINK,
        ],
        // Device threads' filters stack on this one: it must allow theirs.
        Spawner => &[&READ, &EPOLL_WAIT, &THREAD_START, &DISK_IO, &PUNCH_HOLE],
        ConsoleIo => &[&READ, &SLEEP],
        // KVM_RUN and the buses behind its exits: nothing to read, no loop.
        Vcpu => &[],
        Block => &[&READ, &EPOLL_WAIT, &DISK_IO],
        Net | Rng | Console => &[&READ, &EPOLL_WAIT],
        Balloon => &[&READ, &EPOLL_WAIT, &PUNCH_HOLE],
    }
}

/// `_IOR(KVMIO, nr, size)`.
const fn kvm_ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (0xAE << 8) | nr
}

/// `_IOW(KVMIO, nr, size)`.
const fn kvm_iow(nr: u64, size: usize) -> u64 {
    (1 << 30) | ((size as u64) << 16) | (0xAE << 8) | nr
}

/// The ioctls a vCPU thread issues on its vCPU fd: KVM_RUN, KVM_NMI, and
/// KVM_GET_REGS/KVM_GET_SREGS for the triple-fault report; plus, on the VM
/// fd, KVM_SET_GSI_ROUTING: a guest's MSI-X table write (an exit into a
/// virtio-pci BAR) routes the vector's GSI before the vCPU returns.
fn vcpu_ioctls() -> Vec<u64> {
    vec![
        0xAE80,                                                              // KVM_RUN
        0xAE9A,                                                              // KVM_NMI
        kvm_ior(0x81, std::mem::size_of::<kvm_bindings::kvm_regs>()),        // KVM_GET_REGS
        kvm_ior(0x83, std::mem::size_of::<kvm_bindings::kvm_sregs>()),       // KVM_GET_SREGS
        kvm_iow(0x6a, std::mem::size_of::<kvm_bindings::kvm_irq_routing>()), // KVM_SET_GSI_ROUTING
    ]
}

/// The ioctl "types" (bits 8-15 of the request) the VMM uses: KVM (0xAE),
/// 'T' (TUN setup, terminal attributes, FIONBIO) and socket ioctls (0x89,
/// the TAP's address, mask, MTU and flags). No block, filesystem, vhost or
/// other driver's ioctl passes.
const IOCTL_TYPES: [u64; 3] = [0xAE, b'T' as u64, 0x89];

/// Rules narrowing ioctl, fcntl and prctl by argument, for the kinds that
/// may call them at all.
fn arg_rules(kind: ThreadKind) -> Result<Vec<(i64, Vec<SeccompRule>)>, seccompiler::Error> {
    use ThreadKind::*;
    let mut rules = Vec::new();
    match kind {
        Process | Vmm => {
            let types = IOCTL_TYPES
                .iter()
                .map(|t| {
                    SeccompRule::new(vec![SeccompCondition::new(
                        1,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(0xff00),
                        t << 8,
                    )?])
                })
                .collect::<Result<_, _>>()?;
            rules.push((SYS_ioctl, types));
        }
        Vcpu => rules.push((SYS_ioctl, arg_is_one_of(1, &vcpu_ioctls())?)),
        _ => {}
    }
    // fcntl: the VMM's VM_BUILD group has it whole; everyone else gets
    // F_GETFD (Rust's std checks a descriptor is open before closing it in
    // debug builds) and a vCPU F_DUPFD_CLOEXEC (activation hands the device
    // thread clones of the queue eventfds).
    if !matches!(kind, Process | Vmm) {
        let mut cmds = vec![F_GETFD as u64];
        if kind == Vcpu {
            cmds.push(F_DUPFD_CLOEXEC as u64);
        }
        rules.push((SYS_fcntl, arg_is_one_of(1, &cmds)?));
    }
    // prctl only names a new thread and sets no_new_privs before its filter.
    if groups(kind).iter().any(|g| g.syscalls.contains(&SYS_prctl)) {
        let ops = [PR_SET_NAME as u64, PR_SET_NO_NEW_PRIVS as u64];
        rules.push((SYS_prctl, arg_is_one_of(0, &ops)?));
    }
    Ok(rules)
}

fn rules_for(kind: ThreadKind) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::Error> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = COMMON
        .iter()
        .chain(groups(kind))
        .flat_map(|g| g.syscalls.iter())
        .map(|&nr| (nr, Vec::new()))
        .collect();
    rules.extend(arg_rules(kind)?);
    Ok(rules)
}

/// The syscalls `kind` may make at all (with or without argument rules).
pub fn allowed_syscalls(kind: ThreadKind) -> Vec<i64> {
    rules_for(kind)
        .map(|r| r.into_keys().collect())
        .unwrap_or_default()
}

/// Rules that allow a syscall when its argument `arg` equals one of
/// `values` (compared as 32 bits: ioctl requests, fcntl commands and prctl
/// options are `int`/`unsigned int` in the kernel).
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

/// Two filters the process filter comes with, so no thread can fork: a
/// filter names whole syscalls, and `clone` and `clone3` must stay for
/// threads. `clone3` fails with ENOSYS (its flags sit in memory, out of a
/// filter's reach; glibc then starts threads with `clone`, as on kernels
/// before 5.3), and `clone` without `CLONE_THREAD` (a fork) is denied like
/// any other syscall.
fn no_fork_filters(mode: SeccompMode) -> io::Result<Vec<BpfProgram>> {
    let denied = match mode {
        SeccompMode::Off => return Ok(Vec::new()),
        SeccompMode::Trap => SeccompAction::Trap,
        SeccompMode::Log => SeccompAction::Log,
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(io::Error::other)?;
    let compile = |rules: BTreeMap<i64, Vec<SeccompRule>>, action| {
        SeccompFilter::new(rules, SeccompAction::Allow, action, arch)
            .and_then(BpfProgram::try_from)
            .map_err(io::Error::other)
    };
    let fork = SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(CLONE_THREAD as u64),
        0,
    )
    .map_err(io::Error::other)?])
    .map_err(io::Error::other)?;
    Ok(vec![
        compile(
            BTreeMap::from([(SYS_clone3, Vec::new())]),
            SeccompAction::Errno(ENOSYS as u32),
        )?,
        compile(BTreeMap::from([(SYS_clone, vec![fork])]), denied)?,
    ])
}

thread_local! {
    /// The filter this thread entered last, for the SIGSYS report (read
    /// there without any syscall).
    /// A thread that entered none has its creator's filters.
    static CONFINED_AS: Cell<&'static str> = const { Cell::new("helper (inherited filters)") };
}

/// Confines the calling thread as `kind` (for [`ThreadKind::Process`],
/// with [`no_fork_filters`]).
pub fn apply(kind: ThreadKind, mode: SeccompMode) -> io::Result<()> {
    let Some(program) = filter(kind, mode)? else {
        return Ok(());
    };
    let mut programs = vec![program];
    if kind == ThreadKind::Process {
        programs.extend(no_fork_filters(mode)?);
    }
    CONFINED_AS.with(|c| c.set(kind.label()));
    for program in &programs {
        seccompiler::apply_filter(program)
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

/// Confines the API server's thread (a plain function, for
/// `api::ServerOptions::confine_thread`).
pub fn enter_api() -> io::Result<()> {
    enter(ThreadKind::Api)
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
