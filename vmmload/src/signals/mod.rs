//! Signals for the program: dispositions, per-thread masks and pending sets,
//! delivery to the program's own handlers with a Linux `rt_sigframe`, and
//! `rt_sigreturn`.
//!
//! Sources of signals: faults of the guest (synchronous, delivered at the
//! exception exit), signals the program sends itself (kill/tgkill, SIGPIPE
//! from relayed writes), and real signals that reach vmmload because relayed
//! calls target it (alarm, timers, SIGCHLD of forked children, kill from
//! other processes). The latter are blocked in every vmmload thread and taken
//! by a forwarder thread (`host.rs`), which queues them and nudges a vCPU
//! thread with a wake signal that interrupts a relayed blocking call.
//!
//! Delivery happens at safe points of a vCPU thread (`deliver.rs`): the
//! exit of a system call (with Linux's restart rules), an exception, and any
//! other exit of KVM_RUN while the vCPU is in program code.

pub mod calls;
mod deliver;
pub mod frame;
pub mod host;
pub mod pending;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::process::{Ending, Process, Thread};
pub use deliver::{at_exit, enter_user, fault, syscall_exit, FaultCtx};
use frame::AltStack;
pub use pending::{bit, Pending, SigInfo};

/// sa_flags: the handler runs on the alternate stack.
pub const SA_ONSTACK: u64 = 0x0800_0000;
/// Restart interrupted calls.
pub const SA_RESTART: u64 = 0x1000_0000;
/// Do not block the signal in its handler.
pub const SA_NODEFER: u64 = 0x4000_0000;
/// Reset to SIG_DFL on delivery.
pub const SA_RESETHAND: u64 = 0x8000_0000;
/// sa_restorer is valid.
pub const SA_RESTORER: u64 = 0x0400_0000;

/// SIGKILL and SIGSTOP cannot be blocked.
pub const UNBLOCKABLE: u64 = (1 << 8) | (1 << 18);

/// Kernel-internal "restart" results of interrupted calls (never seen by
/// the program): restart if the handler has SA_RESTART or none runs.
pub const ERESTARTSYS: i64 = 512;
/// Always restart.
pub const ERESTARTNOINTR: i64 = 513;
/// EINTR if a handler runs, restart otherwise.
pub const ERESTARTNOHAND: i64 = 514;

/// The program-wide part of the signal state.
#[derive(Default)]
pub struct Shared {
    /// Signals sent to the process (any thread may take them).
    pub pending: Mutex<Pending>,
    /// Something may be pending somewhere (cheap check on every exit).
    pub any: AtomicBool,
    /// Live threads.
    pub threads: Mutex<Vec<Arc<ThreadSig>>>,
    /// XCR0 of the vCPUs and the size of their XSAVE area.
    xstate: OnceLock<(u64, usize)>,
}

/// The signal state of one guest thread.
pub struct ThreadSig {
    /// Host (and guest) tid.
    pub tid: i32,
    /// Blocked signals.
    pub mask: AtomicU64,
    /// Signals sent to this thread.
    pub pending: Mutex<Pending>,
    /// Set when something was queued for this thread or the process.
    pub any: AtomicBool,
    /// Waiters in sigsuspend/sigtimedwait sleep here (with `pending`).
    pub wake: Condvar,
    /// Nudged by the forwarder and not yet at a safe point.
    pub unseen: AtomicBool,
    /// Alternate signal stack.
    pub altstack: Mutex<AltStack>,
    /// Mask to restore after a handler interrupted sigsuspend/ppoll/pselect.
    pub saved_mask: Mutex<Option<u64>>,
}

thread_local! {
    /// The guest thread this host thread runs; survives fork, so a forked
    /// child inherits the alternate stack as on Linux.
    static CURRENT: std::cell::RefCell<Option<Arc<ThreadSig>>> = const { std::cell::RefCell::new(None) };
}

/// Registers the guest thread running on this host thread.
pub fn register_thread(p: &Arc<Process>, tid: i32, mask: u64) -> Arc<ThreadSig> {
    let inherited = CURRENT.with(|c| c.borrow().as_ref().map(|t| *lock(&t.altstack)));
    let t = Arc::new(ThreadSig {
        tid,
        mask: AtomicU64::new(mask & !UNBLOCKABLE),
        pending: Mutex::new(Pending::default()),
        any: AtomicBool::new(false),
        wake: Condvar::new(),
        unseen: AtomicBool::new(false),
        altstack: Mutex::new(inherited.unwrap_or_default()),
        saved_mask: Mutex::new(None),
    });
    CURRENT.with(|c| *c.borrow_mut() = Some(t.clone()));
    lock(&p.sigq.threads).push(t.clone());
    host::thread_started(p);
    t
}

/// The guest thread running on this host thread.
pub fn current() -> Option<Arc<ThreadSig>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Forgets an exiting thread.
pub fn unregister_thread(p: &Process, tid: i32) {
    lock(&p.sigq.threads).retain(|t| t.tid != tid);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the thread's mask (both copies).
pub fn set_mask(t: &mut Thread, m: u64) {
    let m = m & !UNBLOCKABLE;
    t.sigmask = m;
    t.sig.mask.store(m, Ordering::SeqCst);
}

/// Default action of a signal.
#[derive(Debug, PartialEq, Eq)]
pub enum Default {
    /// Ignore.
    Ignore,
    /// Stop the process.
    Stop,
    /// Terminate (with or without core).
    Terminate,
}

/// Linux's default action.
pub fn default_action(sig: i32) -> Default {
    match sig {
        17 | 18 | 23 | 28 => Default::Ignore,
        19..=22 => Default::Stop,
        _ => Default::Terminate,
    }
}

/// Ignored right now (so it is discarded when sent): SIG_IGN, or SIG_DFL
/// with an "ignore" default.
pub fn ignored(p: &Process, sig: i32) -> bool {
    let h = lock(&p.signals).actions[sig as usize][0];
    h == 1 || h == 0 && default_action(sig) == Default::Ignore
}

/// Queues a signal for thread `target` (Some) or the process (None) and
/// makes a thread that can take it notice. Returns false if it was
/// discarded or coalesced.
pub fn send(p: &Process, target: Option<&Arc<ThreadSig>>, info: SigInfo) -> bool {
    let sig = info.signo();
    let threads = lock(&p.sigq.threads).clone();
    let blocked_everywhere = match target {
        Some(t) => t.mask.load(Ordering::SeqCst) & bit(sig) != 0,
        None => threads
            .iter()
            .all(|t| t.mask.load(Ordering::SeqCst) & bit(sig) != 0),
    };
    if ignored(p, sig) && !blocked_everywhere {
        return false;
    }
    // A fatal default action that nothing blocks kills the program now, as
    // Linux's complete_signal does, even while a thread spins.
    let h = lock(&p.signals).actions[sig as usize][0];
    if h == 0 && default_action(sig) == Default::Terminate && !blocked_everywhere {
        p.end(Ending::Signal(sig, String::new()));
        return true;
    }
    let queued = match target {
        Some(t) => {
            let q = lock(&t.pending).push(info);
            t.any.store(true, Ordering::SeqCst);
            q
        }
        None => {
            let q = lock(&p.sigq.pending).push(info);
            p.sigq.any.store(true, Ordering::SeqCst);
            q
        }
    };
    let chosen = match target {
        Some(t) => Some(t.clone()),
        None => threads
            .iter()
            .find(|t| t.mask.load(Ordering::SeqCst) & bit(sig) == 0)
            .cloned(),
    };
    if let Some(t) = chosen {
        nudge(&t);
    }
    queued
}

/// Wakes a thread that may be blocked in a relayed call, a signal wait or
/// KVM_RUN, unless it is the calling thread (which is at a safe point).
fn nudge(t: &Arc<ThreadSig>) {
    {
        let _g = lock(&t.pending);
        t.wake.notify_all();
    }
    if t.tid == crate::process::gettid() {
        return;
    }
    t.unseen.store(true, Ordering::SeqCst);
    host::poke(t.tid);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_actions() {
        assert_eq!(default_action(17), Default::Ignore);
        assert_eq!(default_action(28), Default::Ignore);
        assert_eq!(default_action(20), Default::Stop);
        assert_eq!(default_action(14), Default::Terminate);
        assert_eq!(default_action(40), Default::Terminate);
    }
}
