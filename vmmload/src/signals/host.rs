//! Real signals that reach vmmload on the program's behalf (alarm, itimers,
//! POSIX timers, SIGCHLD of forked children, kill from other processes,
//! Ctrl-C). They are blocked in every vmmload thread; one forwarder thread
//! per host process takes them with `sigtimedwait` and queues them for the
//! program. A vCPU thread is woken with `wake_signal()`, which is unblocked
//! on vCPU threads and has a handler without SA_RESTART, so a relayed
//! blocking call returns EINTR (and is restarted or not by Linux's rules).
//!
//! A wake that lands between vmmload's last look at the pending set and the
//! start of a blocking host call would be lost, so the forwarder repeats it
//! (backing off from 2 ms to 100 ms) until the thread reaches a safe point.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::pending::SigInfo;
use crate::process::Process;

/// Wakes a vCPU thread out of a relayed call.
pub fn wake_signal() -> i32 {
    libc::SIGRTMAX()
}

/// Signals vmmload leaves alone: those it cannot or must not catch (KILL,
/// STOP; faults of vmmload itself; job control, which stops vmmload and so
/// the program as natively; SIGPIPE, which Rust ignores and vmmload raises
/// for the program from EPIPE), glibc's internal ones, and its own kicks.
fn excluded(sig: i32) -> bool {
    matches!(sig, 4 | 5 | 7 | 8 | 9 | 11 | 13 | 18..=22 | 31 | 32 | 33)
        || sig == wake_signal()
        || sig == crate::process::kick_signal()
}

/// The set of forwarded signals.
pub fn forwarded() -> libc::sigset_t {
    // SAFETY: building a signal set in a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in 1..=64 {
            if !excluded(s) {
                libc::sigaddset(&mut set, s);
            }
        }
        set
    }
}

extern "C" fn on_wake(_: libc::c_int) {}

/// Signals whose disposition survives execve as SIG_IGN: all but the
/// uncatchable ones, glibc's and vmmload's own, and SIGPIPE (Rust ignores it
/// in every program, so an inherited SIG_IGN cannot be told apart).
fn inheritable(sig: i32) -> bool {
    !matches!(sig, 9 | 13 | 19 | 32 | 33)
        && sig != wake_signal()
        && sig != crate::process::kick_signal()
}

/// Signals vmmload found ignored when it started (its parent, or the
/// program before execve, ignored them): the program starts with them
/// ignored, as it would natively.
static INHERITED_IGNORED: AtomicU64 = AtomicU64::new(0);

/// Initial dispositions of a program (not a forked child, which copies its
/// parent's).
pub fn initial_actions() -> [[u64; 4]; 65] {
    let ign = INHERITED_IGNORED.load(Ordering::SeqCst);
    let mut a = [[0u64; 4]; 65];
    for (s, act) in a.iter_mut().enumerate().skip(1) {
        if ign & super::bit(s as i32) != 0 {
            act[0] = 1;
        }
    }
    a
}

fn set_host_action(sig: i32, handler: libc::sighandler_t) {
    // SAFETY: setting SIG_IGN/SIG_DFL, no handler code involved.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Installs the wake handler and blocks the forwarded signals and the wake
/// signal in the calling thread (before any other thread exists, so all
/// inherit it). vCPU threads unblock the wake signal in `thread_started`.
/// Inherited SIG_IGN dispositions are recorded for the program and reset
/// on the host (vmmload itself must, e.g., still reap its children).
pub fn init() {
    let mut ign = 0u64;
    for sig in (1..=64).filter(|&s| inheritable(s)) {
        // SAFETY: querying a disposition into a local.
        let cur = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut old);
            old.sa_sigaction
        };
        if cur == libc::SIG_IGN {
            ign |= super::bit(sig);
            set_host_action(sig, libc::SIG_DFL);
        }
    }
    INHERITED_IGNORED.store(ign, Ordering::SeqCst);
    // SAFETY: installing a no-op handler and changing our own mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_wake as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(wake_signal(), &sa, std::ptr::null_mut());
        let mut set = forwarded();
        libc::sigaddset(&mut set, wake_signal());
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Pid of the host process whose forwarder runs (a forked child needs its own).
static FORWARDER_PID: AtomicI32 = AtomicI32::new(0);

/// Whether this host process's forwarder thread consumes the termination
/// signals (the supervisor then must not poll for them).
pub fn forwarder_active() -> bool {
    // SAFETY: getpid has no preconditions.
    FORWARDER_PID.load(Ordering::SeqCst) == unsafe { libc::getpid() }
}

/// A vCPU thread starts: it accepts the wake signal, and the process gets a
/// forwarder if it has none yet.
pub fn thread_started(p: &Arc<Process>) {
    // SAFETY: changing the calling thread's own mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, wake_signal());
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    if let Err(e) = start_forwarder(p) {
        log::warn!("cannot start the signal thread ({e}): signals to vmmload end the run");
    }
}

/// Starts this host process's forwarder thread unless it runs already. A
/// forked child starts it before its fork is reported done, so that a
/// thread limit (RLIMIT_NPROC) fails the fork instead of the child.
pub fn start_forwarder(p: &Arc<Process>) -> std::io::Result<()> {
    if forwarder_active() {
        return Ok(());
    }
    // SAFETY: getpid has no preconditions.
    FORWARDER_PID.store(unsafe { libc::getpid() }, Ordering::SeqCst);
    let weak = Arc::downgrade(p);
    let r = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || forward(weak));
    if r.is_err() {
        FORWARDER_PID.store(0, Ordering::SeqCst);
    }
    r.map(|_| ())
}

/// Sends the wake signal to thread `tid` of this process (tgkill: a thread
/// that already exited gives ESRCH, never another process's thread).
pub fn poke(tid: i32) {
    // SAFETY: tgkill with our own pid and a handled signal.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, wake_signal()) };
}

fn forward(weak: Weak<Process>) {
    let set = forwarded();
    let mut backoff = Duration::from_millis(2);
    loop {
        let Some(p) = weak.upgrade() else { return };
        let renudge: Vec<i32> = super::lock(&p.sigq.threads)
            .iter()
            .filter(|t| t.unseen.load(Ordering::SeqCst))
            .map(|t| t.tid)
            .collect();
        drop(p);
        let wait = if renudge.is_empty() {
            backoff = Duration::from_millis(2);
            Duration::from_secs(1)
        } else {
            backoff
        };
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: siginfo_t is plain data; sigtimedwait fills it.
        let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for signals blocked in every thread of ours.
        let s = unsafe { libc::sigtimedwait(&set, &mut si, &ts) };
        let Some(p) = weak.upgrade() else { return };
        if s > 0 {
            // SAFETY: siginfo_t is 128 bytes of plain data.
            let raw: [u8; 128] = unsafe { std::mem::transmute_copy(&si) };
            super::send(&p, None, SigInfo(raw));
        } else if !renudge.is_empty() {
            for t in renudge {
                poke(t);
            }
            backoff = (backoff * 2).min(Duration::from_millis(100));
        }
    }
}

/// Runs `exec` (vmmload re-executing itself for the program's execve) with
/// the wake signal blocked: a wake that arrived after the point of no return
/// would otherwise hit the new image before it installs its handler and
/// kill it (the default action). A blocked one stays pending, harmlessly.
/// Signals the program ignores are ignored on the host across the exec, so
/// the new program starts with them ignored (execve keeps SIG_IGN).
pub fn around_exec<T>(p: &Process, exec: impl FnOnce() -> T) -> T {
    let actions = super::lock(&p.signals).actions;
    let ignored: Vec<i32> = (1..=64)
        .filter(|&s| inheritable(s) && actions[s as usize][0] == 1)
        .collect();
    for &s in &ignored {
        set_host_action(s, libc::SIG_IGN);
    }
    // SAFETY: changing the calling thread's own mask.
    let change = |how| unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, wake_signal());
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    };
    change(libc::SIG_BLOCK);
    let r = exec();
    change(libc::SIG_UNBLOCK);
    for &s in &ignored {
        set_host_action(s, libc::SIG_DFL);
    }
    r
}
