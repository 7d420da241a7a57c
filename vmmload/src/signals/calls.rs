//! The signal system calls, emulated on vmmload's signal state:
//! rt_sigaction, rt_sigprocmask, rt_sigpending, sigaltstack, rt_sigsuspend,
//! pause, rt_sigtimedwait, kill/tkill/tgkill, rt_(tg)sigqueueinfo and
//! rt_sigreturn. Every guest pointer is read through the page tables; a bad
//! one gives EFAULT, a bad frame at rt_sigreturn gives SIGSEGV.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvm_bindings::{kvm_regs, kvm_xsave};
use kvm_ioctls::VcpuFd;

use super::frame::{self, AltStack, SS_AUTODISARM, SS_DISABLE, SS_ONSTACK};
use super::pending::{SigInfo, SI_TKILL, SI_USER};
use super::{lock, set_mask, ThreadSig, ERESTARTNOHAND, UNBLOCKABLE};
use crate::process::{Ending, Process, Thread};
use crate::sys::Action;

fn err(e: i32) -> Action {
    Action::Return(-(e as i64))
}

fn efault() -> Action {
    err(libc::EFAULT)
}

fn valid_sig(sig: u64) -> Option<i32> {
    (1..=64).contains(&sig).then_some(sig as i32)
}

/// rt_sigaction(sig, act, oact, sigsetsize).
pub fn sigaction(p: &Process, a: &[u64; 6]) -> Action {
    let Some(sig) = valid_sig(a[0]) else {
        return err(libc::EINVAL);
    };
    if a[3] != 8 || (a[1] != 0 && (sig == 9 || sig == 19)) {
        return err(libc::EINVAL);
    }
    let mm = lock(&p.mm);
    let new = if a[1] != 0 {
        match mm.read_bytes(a[1], 32) {
            Ok(b) => Some(b),
            Err(_) => return efault(),
        }
    } else {
        None
    };
    let mut s = lock(&p.signals);
    if a[2] != 0 {
        let old: Vec<u8> = s.actions[sig as usize]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        if mm.write_bytes(a[2], &old).is_err() {
            return efault();
        }
    }
    if let Some(b) = new {
        let w = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_le_bytes(x)
        };
        s.actions[sig as usize] = [w(0), w(1), w(2), w(3) & !UNBLOCKABLE];
        drop(s);
        drop(mm);
        // Setting an action that ignores the signal discards it (POSIX).
        if super::ignored(p, sig) {
            lock(&p.sigq.pending).discard(sig);
            for t in lock(&p.sigq.threads).iter() {
                lock(&t.pending).discard(sig);
            }
        }
    }
    Action::Return(0)
}

/// rt_sigprocmask(how, set, oset, sigsetsize).
pub fn sigprocmask(p: &Process, t: &mut Thread, a: &[u64; 6]) -> Action {
    if a[3] != 8 {
        return err(libc::EINVAL);
    }
    let mm = lock(&p.mm);
    let new = if a[1] != 0 {
        match mm.read_u64(a[1]) {
            Ok(v) => Some(v),
            Err(_) => return efault(),
        }
    } else {
        None
    };
    let cur = t.sigmask;
    let next = match (a[0], new) {
        (_, None) => cur,
        (0, Some(v)) => cur | v,
        (1, Some(v)) => cur & !v,
        (2, Some(v)) => v,
        _ => return err(libc::EINVAL),
    };
    if a[2] != 0 && mm.write_bytes(a[2], &cur.to_le_bytes()).is_err() {
        return efault();
    }
    drop(mm);
    set_mask(t, next);
    Action::Return(0)
}

/// rt_sigpending(set, sigsetsize): pending signals that are blocked.
pub fn sigpending(p: &Process, t: &Thread, a: &[u64; 6]) -> Action {
    if a[1] > 8 {
        return err(libc::EINVAL);
    }
    let set = (lock(&t.sig.pending).set | lock(&p.sigq.pending).set) & t.sigmask;
    match lock(&p.mm).write_bytes(a[0], &set.to_le_bytes()[..a[1] as usize]) {
        Ok(()) => Action::Return(0),
        Err(_) => efault(),
    }
}

/// Applies a new alternate stack (do_sigaltstack); `sp` is the caller's
/// stack pointer.
pub fn set_altstack(t: &ThreadSig, sp: u64, ss_sp: u64, flags: u32, size: u64) -> Result<(), i32> {
    let mut alt = lock(&t.altstack);
    if alt.contains(sp) {
        return Err(libc::EPERM);
    }
    let mode = flags & !SS_AUTODISARM;
    if mode != 0 && mode != SS_DISABLE && mode != SS_ONSTACK {
        return Err(libc::EINVAL);
    }
    if mode == SS_DISABLE {
        *alt = AltStack::default();
    } else {
        if size < 2048 {
            return Err(libc::ENOMEM);
        }
        *alt = AltStack {
            sp: ss_sp,
            size,
            autodisarm: flags & SS_AUTODISARM != 0,
        };
    }
    Ok(())
}

/// sigaltstack(ss, oss).
pub fn sigaltstack(p: &Process, t: &Thread, r: &kvm_regs) -> Action {
    let (ss, oss) = (r.rdi, r.rsi);
    let mm = lock(&p.mm);
    let new = if ss != 0 {
        match mm.read_bytes(ss, 24) {
            Ok(b) => Some(b),
            Err(_) => return efault(),
        }
    } else {
        None
    };
    let old = lock(&t.sig.altstack).encode(r.rsp);
    if let Some(b) = new {
        let w = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        let flags = w(8) as u32;
        if let Err(e) = set_altstack(&t.sig, r.rsp, w(0), flags, w(16)) {
            return err(e);
        }
    }
    if oss != 0 && mm.write_bytes(oss, &old).is_err() {
        return efault();
    }
    Action::Return(0)
}

/// Sleeps until a signal in `wanted`, or one the thread does not block, is
/// pending (or the deadline passes). Returns false on timeout.
fn wait_for(p: &Process, t: &Thread, wanted: u64, deadline: Option<Instant>) -> bool {
    let mut g = lock(&t.sig.pending);
    loop {
        let allowed = !t.sig.mask.load(Ordering::SeqCst) | wanted;
        let shared = lock(&p.sigq.pending).set;
        if (g.set | shared) & allowed != 0 || p.stopping.load(Ordering::SeqCst) {
            return true;
        }
        g = match deadline {
            None => t.sig.wake.wait(g).unwrap_or_else(|e| e.into_inner()),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return false;
                }
                t.sig
                    .wake
                    .wait_timeout(g, d - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
        };
    }
}

/// rt_sigsuspend(mask, sigsetsize) and pause (mask None): sleep until a
/// handler runs; the old mask comes back when it returns.
pub fn sigsuspend(p: &Process, t: &mut Thread, a: &[u64; 6], mask: bool) -> Action {
    if mask {
        if a[1] != 8 {
            return err(libc::EINVAL);
        }
        let Ok(m) = lock(&p.mm).read_u64(a[0]) else {
            return efault();
        };
        *lock(&t.sig.saved_mask) = Some(t.sigmask);
        set_mask(t, m);
    }
    wait_for(p, t, 0, None);
    Action::Return(-ERESTARTNOHAND)
}

/// rt_sigtimedwait(set, info, timeout, sigsetsize).
pub fn sigtimedwait(p: &Process, t: &Thread, a: &[u64; 6]) -> Action {
    if a[3] != 8 {
        return err(libc::EINVAL);
    }
    let mm = lock(&p.mm);
    let Ok(set) = mm.read_u64(a[0]) else {
        return efault();
    };
    let deadline = if a[2] != 0 {
        let Ok(b) = mm.read_bytes(a[2], 16) else {
            return efault();
        };
        let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
        let nsec = i64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
        if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
            return err(libc::EINVAL);
        }
        Some(Instant::now() + Duration::new(sec as u64, nsec as u32))
    } else {
        None
    };
    drop(mm);
    let wanted = set & !UNBLOCKABLE;
    loop {
        let got = {
            let mut tp = lock(&t.sig.pending);
            let mut sp = lock(&p.sigq.pending);
            let i = tp.take(wanted).or_else(|| sp.take(wanted));
            t.sig.any.store(tp.set != 0, Ordering::SeqCst);
            p.sigq.any.store(sp.set != 0, Ordering::SeqCst);
            i
        };
        if let Some(info) = got {
            if a[1] != 0 && lock(&p.mm).write_bytes(a[1], &info.0).is_err() {
                return efault();
            }
            return Action::Return(info.signo() as i64);
        }
        let other = !t.sigmask & !wanted;
        if (lock(&t.sig.pending).set | lock(&p.sigq.pending).set) & other != 0 {
            return err(libc::EINTR);
        }
        if p.stopping.load(Ordering::SeqCst) || !wait_for(p, t, wanted, deadline) {
            return err(libc::EAGAIN);
        }
    }
}

fn find_thread(p: &Process, tid: i32) -> Option<Arc<ThreadSig>> {
    lock(&p.sigq.threads).iter().find(|t| t.tid == tid).cloned()
}

fn me() -> (i32, u32) {
    // SAFETY: getpid/getuid have no preconditions.
    unsafe { (libc::getpid(), libc::getuid()) }
}

/// kill (62), tkill (200), tgkill (234). Signals to the program itself are
/// queued for it; others go to the host.
pub fn kill(p: &Process, nr: u64, a: &[u64; 6]) -> Action {
    let (pid, uid) = me();
    let (target, sig) = match nr {
        62 => (a[0] as i32, a[1]),
        200 => (a[0] as i32, a[1]),
        _ => (a[1] as i32, a[2]),
    };
    let thread = match nr {
        62 => None,
        200 => find_thread(p, target),
        _ if a[0] as i32 == pid => find_thread(p, target),
        _ => None,
    };
    let is_self = nr == 62 && target == pid || nr != 62 && thread.is_some();
    if !is_self {
        return crate::sys::relay_plain(p, nr, a);
    }
    if sig > 64 {
        return err(libc::EINVAL);
    }
    if sig == 0 {
        return Action::Return(0);
    }
    let info = if nr == 62 {
        SigInfo::from_process(sig as i32, SI_USER, pid, uid)
    } else {
        SigInfo::from_process(sig as i32, SI_TKILL, pid, uid)
    };
    super::send(p, thread.as_ref(), info);
    if p.stopping.load(Ordering::SeqCst) {
        return Action::Stop;
    }
    Action::Return(0)
}

/// rt_sigqueueinfo (129) and rt_tgsigqueueinfo (297).
pub fn sigqueueinfo(p: &Process, nr: u64, a: &[u64; 6]) -> Action {
    let (pid, _) = me();
    let (tgid, tid, sig, uinfo) = if nr == 129 {
        (a[0] as i32, None, a[1], a[2])
    } else {
        (a[0] as i32, Some(a[1] as i32), a[2], a[3])
    };
    let thread = tid.and_then(|t| find_thread(p, t));
    if tgid != pid || tid.is_some() && thread.is_none() {
        let spec = if nr == 129 {
            [
                crate::relay::Arg::V,
                crate::relay::Arg::V,
                crate::relay::Arg::InF(128),
                crate::relay::Arg::V,
                crate::relay::Arg::V,
                crate::relay::Arg::V,
            ]
        } else {
            [
                crate::relay::Arg::V,
                crate::relay::Arg::V,
                crate::relay::Arg::V,
                crate::relay::Arg::InF(128),
                crate::relay::Arg::V,
                crate::relay::Arg::V,
            ]
        };
        return crate::sys::relay_spec(p, nr, &spec, a);
    }
    let Some(sig) = valid_sig(sig) else {
        return err(libc::EINVAL);
    };
    let Ok(b) = lock(&p.mm).read_bytes(uinfo, 128) else {
        return efault();
    };
    let mut info = SigInfo([0; 128]);
    info.0.copy_from_slice(&b);
    info.0[..4].copy_from_slice(&sig.to_le_bytes());
    super::send(p, thread.as_ref(), info);
    if p.stopping.load(Ordering::SeqCst) {
        return Action::Stop;
    }
    Action::Return(0)
}

/// A write-like call failed with EPIPE: SIGPIPE for the calling thread, as
/// the kernel sends it (its default action ends the run).
pub fn sigpipe(p: &Process, ret: i64) -> Action {
    let (pid, uid) = me();
    if let Some(t) = super::current() {
        super::send(p, Some(&t), SigInfo::from_process(13, SI_USER, pid, uid));
    }
    if p.stopping.load(Ordering::SeqCst) {
        return Action::Stop;
    }
    Action::Return(ret)
}

fn bad_frame(p: &Process, why: &str, at: u64) -> Action {
    p.end(Ending::Signal(
        11,
        format!("rt_sigreturn: {why} (frame at {at:#x})"),
    ));
    Action::Stop
}

fn canonical(a: u64) -> bool {
    !(0x0000_8000_0000_0000..0xffff_8000_0000_0000).contains(&a)
}

/// Reads the FPU state a frame points at into a KVM XSAVE image.
fn read_fpstate(p: &Process, fp: u64) -> Option<kvm_xsave> {
    let mut x = kvm_xsave::default();
    let mut bytes = vec![0u8; 4096];
    if fp == 0 {
        // No state: the FPU starts afresh, as Linux clears it.
        bytes[..2].copy_from_slice(&0x37fu16.to_le_bytes());
        bytes[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
    } else {
        let mm = lock(&p.mm);
        let legacy = mm.read_bytes(fp, 512).ok()?;
        let magic2 = frame::announced_size(&legacy)
            .filter(|&n| n <= 4096 && fp.is_multiple_of(64))
            .and_then(|n| mm.read_bytes(fp + n as u64, 4).ok())
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let n = frame::fp_extent(&legacy, magic2, 4096);
        let all = mm.read_bytes(fp, n as u64).ok()?;
        bytes[..n].copy_from_slice(&all);
        if n == 512 {
            // FXSAVE state only: x87 and SSE from the frame, the rest initial.
            bytes[512..576].fill(0);
            bytes[512..520].copy_from_slice(&3u64.to_le_bytes());
        }
        // Linux ignores (and clears) the software bytes.
        bytes[464..512].fill(0);
    }
    for (i, w) in x.region.iter_mut().enumerate() {
        *w = u32::from_le_bytes([
            bytes[i * 4],
            bytes[i * 4 + 1],
            bytes[i * 4 + 2],
            bytes[i * 4 + 3],
        ]);
    }
    Some(x)
}

/// rt_sigreturn: restores the context saved by the frame at rsp - 8.
pub fn sigreturn(p: &Process, vcpu: &mut VcpuFd, t: &mut Thread, r: &kvm_regs) -> Action {
    let at = r.rsp.wrapping_sub(8);
    let Ok(b) = lock(&p.mm).read_bytes(at, frame::FRAME_SIZE) else {
        return bad_frame(p, "frame not readable", at);
    };
    let Some(rs) = frame::decode(&b, 0x202) else {
        return bad_frame(p, "frame not readable", at);
    };
    if !canonical(rs.regs.rip) {
        return bad_frame(p, &format!("non-canonical rip {:#x}", rs.regs.rip), at);
    }
    let Some(x) = read_fpstate(p, rs.fpstate) else {
        return bad_frame(p, "FPU state not readable", at);
    };
    // SAFETY: a complete XSAVE image; KVM validates its header, features
    // and MXCSR and refuses bad ones (then the frame is bad).
    if unsafe { vcpu.set_xsave(&x) }.is_err() {
        return bad_frame(p, "invalid FPU state", at);
    }
    set_mask(t, rs.mask);
    let (ss_sp, flags, size) = rs.stack;
    // Only EFAULT matters when the frame's stack_t is applied (Linux).
    let _ = set_altstack(&t.sig, rs.regs.rsp, ss_sp, flags, size);
    if !super::enter_user(vcpu, &rs.regs) {
        p.end(Ending::Error(
            "rt_sigreturn: cannot set the registers".into(),
        ));
        return Action::Stop;
    }
    Action::Resume
}

/// ppoll (271), epoll_pwait (281), pselect6 (270) and epoll_pwait2 (441)
/// with a signal mask: the mask applies to the program's thread while it
/// waits (vmmload's host thread keeps its own, the host sees no mask), and a
/// handler that interrupts the wait returns to the old mask.
pub fn masked_wait(p: &Process, t: &mut Thread, nr: u64, a: &[u64; 6]) -> Action {
    use crate::relay::Arg::{InF, IoF, OutN, V};
    let spec = match nr {
        270 => [V, IoF(128), IoF(128), IoF(128), IoF(16), V],
        441 => [V, OutN(12, 2), V, InF(16), V, V],
        _ => match crate::relay::spec(nr) {
            Some((_, spec)) => spec,
            None => return err(libc::ENOSYS),
        },
    };
    let mut args = *a;
    // Where the mask is: pselect6 passes {const sigset_t *, size_t}.
    let (mask_ptr, mask_size) = match nr {
        270 if a[5] != 0 => {
            let Ok(b) = lock(&p.mm).read_bytes(a[5], 16) else {
                return efault();
            };
            let w = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
            args[5] = 0;
            (w(0), w(8))
        }
        270 => (0, 0),
        271 => {
            args[3] = 0;
            (a[3], a[4])
        }
        _ => {
            args[4] = 0;
            (a[4], a[5])
        }
    };
    if mask_ptr != 0 {
        if mask_size != 8 {
            return err(libc::EINVAL);
        }
        let Ok(m) = lock(&p.mm).read_u64(mask_ptr) else {
            return efault();
        };
        *lock(&t.sig.saved_mask) = Some(t.sigmask);
        set_mask(t, m);
        let allowed = !t.sigmask;
        if (lock(&t.sig.pending).set | lock(&p.sigq.pending).set) & allowed != 0 {
            return Action::Return(-ERESTARTNOHAND);
        }
    }
    let r = crate::sys::relay_spec(p, nr, &spec, &args);
    if mask_ptr != 0 && !matches!(r, Action::Return(v) if v == -(libc::EINTR as i64)) {
        let saved = lock(&t.sig.saved_mask).take();
        if let Some(m) = saved {
            set_mask(t, m);
        }
    }
    r
}

/// POSIX timers (timer_create … timer_delete) are host timers of vmmload:
/// their signals reach the forwarder like alarm's. A timer that signals one
/// thread (SIGEV_THREAD_ID) would target a vmmload thread that blocks it,
/// so it is refused with EINVAL (logged).
pub fn timer(p: &Process, nr: u64, a: &[u64; 6]) -> Action {
    use crate::relay::Arg::{InF, OutF, V};
    const SIGEV_THREAD_ID: i32 = 4;
    let spec = match nr {
        222 => {
            if a[1] != 0 {
                let Ok(ev) = lock(&p.mm).read_bytes(a[1], 64) else {
                    return efault();
                };
                let notify = i32::from_le_bytes([ev[12], ev[13], ev[14], ev[15]]);
                if notify == SIGEV_THREAD_ID {
                    p.log_once(
                        "timer_create with SIGEV_THREAD_ID is not supported (EINVAL)".into(),
                    );
                    return err(libc::EINVAL);
                }
            }
            [V, InF(64), OutF(4), V, V, V]
        }
        223 => [V, V, InF(32), OutF(32), V, V],
        224 => [V, OutF(32), V, V, V, V],
        _ => [V; 6],
    };
    crate::sys::relay_spec(p, nr, &spec, a)
}
