//! Seccomp filters, one per kind of thread (`--seccomp true|false|log`, as
//! Cloud Hypervisor spells it).
//!
//! Filters stack: a thread keeps the filters of the thread that created it
//! and adds its own; a syscall passes only if every filter allows it. The
//! main thread installs the [`ThreadKind::Process`] ceiling (the union of
//! what any thread needs) before it starts any other thread, so nothing
//! ever runs unfiltered. Each thread then narrows it to its role, first
//! thing (the allowed groups per kind and the argument rules are in
//! `filters.rs`):
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

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

mod filters;
mod sigsys;

pub use filters::allowed_syscalls;
use filters::rules_for;
pub use sigsys::install_sigsys_handler;

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
            // virtio-mem releases unplugged blocks as the balloon does
            // (madvise, hole punching): the same filter.
            "balloon" | "virtio-mem" => Self::Balloon,
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
        SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
        0,
    )
    .map_err(io::Error::other)?])
    .map_err(io::Error::other)?;
    Ok(vec![
        compile(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Errno(libc::ENOSYS as u32),
        )?,
        compile(BTreeMap::from([(libc::SYS_clone, vec![fork])]), denied)?,
    ])
}

thread_local! {
    /// The filter this thread entered last, for the SIGSYS report (read
    /// there without any syscall).
    /// A thread that entered none has its creator's filters.
    pub(super) static CONFINED_AS: Cell<&'static str> = const { Cell::new("helper (inherited filters)") };
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

#[cfg(test)]
mod tests;
