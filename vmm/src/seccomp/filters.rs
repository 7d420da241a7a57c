//! What each kind of thread may call: syscall groups with the reason for
//! each, the groups per [`ThreadKind`], and the argument rules (ioctl
//! requests, fcntl commands, prctl options) that narrow some of them.

// The syscall numbers (SYS_*) and fcntl/prctl constants the lists name.
use libc::*;

use std::collections::BTreeMap;

use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};

use super::ThreadKind;

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
/// virtio-pci BAR) routes the vector's GSI before the vCPU returns; and
/// KVM_IOEVENTFD: a guest moving a hot-plugged function's BAR (Linux
/// assigns those itself) moves its queue notifications with it.
fn vcpu_ioctls() -> Vec<u64> {
    vec![
        0xAE80,                                                              // KVM_RUN
        0xAE9A,                                                              // KVM_NMI
        kvm_ior(0x81, std::mem::size_of::<kvm_bindings::kvm_regs>()),        // KVM_GET_REGS
        kvm_ior(0x83, std::mem::size_of::<kvm_bindings::kvm_sregs>()),       // KVM_GET_SREGS
        kvm_iow(0x6a, std::mem::size_of::<kvm_bindings::kvm_irq_routing>()), // KVM_SET_GSI_ROUTING
        kvm_iow(0x79, std::mem::size_of::<kvm_bindings::kvm_ioeventfd>()),   // KVM_IOEVENTFD
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
        // A multiqueue NIC attaches and detaches its TAP queues when the
        // guest changes how many pairs it uses (VQ_PAIRS_SET), and each
        // queue's thread sets the offloads the driver negotiated when it
        // starts; its filter stacks on the spawner's, which must allow
        // that too.
        Net | Spawner => rules.push((
            SYS_ioctl,
            arg_is_one_of(1, &[libc::TUNSETQUEUE, libc::TUNSETOFFLOAD])?,
        )),
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

pub(super) fn rules_for(
    kind: ThreadKind,
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::Error> {
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
