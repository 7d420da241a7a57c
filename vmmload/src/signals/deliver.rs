//! Delivery of pending signals at the vCPU thread's safe points: the end
//! of a system call (with Linux's restart rules), an exception, and other
//! exits of KVM_RUN; building the handler's frame and entering it.

use std::sync::atomic::Ordering;

use kvm_bindings::{kvm_regs, kvm_xsave};
use kvm_ioctls::{SyncReg, VcpuFd};

use super::frame::{self, AltStack};
use super::{
    bit, default_action, lock, set_mask, Default, SigInfo, ERESTARTNOHAND, ERESTARTNOINTR,
    ERESTARTSYS, SA_NODEFER, SA_ONSTACK, SA_RESETHAND, SA_RESTART, SA_RESTORER,
};
use crate::process::{Backend, Ending, Process, Thread};
use crate::sys::Action;

/// The next signal this thread must act on.
enum Next {
    Handler(SigInfo, [u64; 4]),
    Fatal(i32),
}

/// Dequeues signals until one needs action (ignored ones are dropped, stop
/// signals stop vmmload, i.e. the program, as natively).
fn next_signal(p: &Process, t: &Thread) -> Option<Next> {
    t.sig.unseen.store(false, Ordering::SeqCst);
    if !t.sig.any.load(Ordering::SeqCst) && !p.sigq.any.load(Ordering::SeqCst) {
        return None;
    }
    let allowed = !t.sig.mask.load(Ordering::SeqCst);
    loop {
        let info = {
            let mut tp = lock(&t.sig.pending);
            let mut sp = lock(&p.sigq.pending);
            let i = tp.take(allowed).or_else(|| sp.take(allowed));
            t.sig.any.store(tp.set != 0, Ordering::SeqCst);
            p.sigq.any.store(sp.set != 0, Ordering::SeqCst);
            i
        }?;
        let sig = info.signo();
        let act = lock(&p.signals).actions[sig as usize];
        match act[0] {
            1 => continue,
            0 => match default_action(sig) {
                Default::Ignore => continue,
                Default::Stop => {
                    // SAFETY: stopping our own process, as the default action does.
                    unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) };
                    continue;
                }
                Default::Terminate => return Some(Next::Fatal(sig)),
            },
            _ => return Some(Next::Handler(info, act)),
        }
    }
}

/// XCR0 and XSAVE size of the vCPUs (max offset+size of the enabled
/// components, as the kernel sizes the signal frame's FPU area).
fn xstate(p: &Process, vcpu: &VcpuFd) -> (u64, usize) {
    *p.sigq.xstate.get_or_init(|| {
        let xcr0 = vcpu
            .get_xcrs()
            .ok()
            .and_then(|x| {
                x.xcrs[..x.nr_xcrs as usize]
                    .iter()
                    .find(|e| e.xcr == 0)
                    .map(|e| e.value)
            })
            .unwrap_or(3);
        let mut size = 576usize;
        for i in 2..63 {
            if xcr0 & (1 << i) != 0 {
                let c = std::arch::x86_64::__cpuid_count(0xd, i);
                size = size.max((c.eax + c.ebx) as usize);
            }
        }
        (xcr0, size.min(4096))
    })
}

fn xsave_bytes(x: &kvm_xsave) -> Vec<u8> {
    x.region.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Fault details recorded in the frame's sigcontext.
#[derive(Default, Clone, Copy)]
pub struct FaultCtx {
    /// Exception vector.
    pub trapno: u64,
    /// Error code.
    pub err: u64,
    /// CR2 for page faults.
    pub cr2: u64,
}

/// Builds the frame for `info` on the program's stack and turns `u` into the
/// handler's entry state. Err(()) if the frame cannot be written (Linux then
/// kills with SIGSEGV).
fn setup_frame(
    p: &Process,
    vcpu: &VcpuFd,
    t: &mut Thread,
    u: &mut kvm_regs,
    info: &SigInfo,
    act: [u64; 4],
    fault: FaultCtx,
) -> Result<(), ()> {
    let sig = info.signo();
    let [handler, flags, restorer, sa_mask] = act;
    // x86-64 Linux needs SA_RESTORER; a non-canonical handler would fault
    // on the return to user mode (and sysretq to it faults in CPL0).
    let canonical = |a: u64| !(0x0000_8000_0000_0000..0xffff_8000_0000_0000).contains(&a);
    if flags & SA_RESTORER == 0 || !canonical(handler) {
        return Err(());
    }
    let old_mask = lock(&t.sig.saved_mask).take().unwrap_or(t.sigmask);
    let alt = *lock(&t.sig.altstack);
    let nested = alt.contains(u.rsp);
    let mut sp = u.rsp.wrapping_sub(128);
    let mut entering = false;
    if flags & SA_ONSTACK != 0 && alt.flags(sp) == 0 {
        sp = alt.sp.wrapping_add(alt.size);
        entering = true;
    }
    let (xcr0, xsize) = xstate(p, vcpu);
    let xsave = vcpu.get_xsave().map_err(|_| ())?;
    let xs = xsave_bytes(&xsave);
    let place = frame::place(sp, xsize as u64).ok_or(())?;
    if (nested || entering) && !alt.contains(place.frame) {
        return Err(());
    }
    let bytes = frame::encode(
        place,
        &frame::FrameInput {
            regs: u,
            restorer,
            old_mask,
            altstack: alt,
            trapno: fault.trapno,
            err: fault.err,
            cr2: fault.cr2,
            info: &info.0,
            xsave: &xs[..xsize],
            xfeatures: xcr0,
        },
    );
    lock(&p.mm)
        .write_bytes(place.frame, &bytes)
        .map_err(|_| ())?;
    p.tracker
        .note_vmm_writes(&[(place.frame, bytes.len() as u64)]);
    if alt.autodisarm && entering {
        *lock(&t.sig.altstack) = AltStack::default();
    }
    let mut m = old_mask | sa_mask;
    if flags & SA_NODEFER == 0 {
        m |= bit(sig);
    }
    set_mask(t, m);
    if flags & SA_RESETHAND != 0 {
        lock(&p.signals).actions[sig as usize][0] = 0;
    }
    u.rdi = sig as u64;
    u.rsi = place.frame + frame::INFO as u64;
    u.rdx = place.frame + 8;
    u.rax = 0;
    u.rsp = place.frame;
    u.rip = handler;
    u.rflags &= !(0x400 | 0x10000 | 0x100);
    Ok(())
}

/// Delivers every deliverable signal to `u` (nested frames, the last one
/// runs first, as Linux does before returning to user mode). Returns false
/// if the program ends. `restart`: the interrupted call's restart code and
/// number.
fn deliver_all(
    p: &Process,
    vcpu: &VcpuFd,
    t: &mut Thread,
    u: &mut kvm_regs,
    mut restart: Option<(i64, u64)>,
) -> (bool, bool) {
    let mut any = false;
    while let Some(n) = next_signal(p, t) {
        match n {
            Next::Fatal(sig) => {
                p.end(Ending::Signal(sig, String::new()));
                return (false, any);
            }
            Next::Handler(info, act) => {
                if let Some((code, nr)) = restart.take() {
                    let again =
                        code == ERESTARTNOINTR || code == ERESTARTSYS && act[1] & SA_RESTART != 0;
                    if again {
                        u.rax = nr;
                        u.rip = u.rip.wrapping_sub(2);
                    } else {
                        u.rax = (-(libc::EINTR as i64)) as u64;
                    }
                }
                if setup_frame(p, vcpu, t, u, &info, act, FaultCtx::default()).is_err() {
                    p.end(Ending::Signal(
                        11,
                        format!(
                            "cannot deliver {} (signal frame at rsp {:#x} not writable or no restorer)",
                            crate::sys::signame(info.signo()),
                            u.rsp
                        ),
                    ));
                    return (false, any);
                }
                any = true;
            }
        }
    }
    if let Some((_, nr)) = restart {
        // No handler ran: the call restarts transparently.
        u.rax = nr;
        u.rip = u.rip.wrapping_sub(2);
    }
    (true, any)
}

/// How an EINTR of a relayed call restarts (Linux's per-call rules: calls
/// with timeouts and waits for events are not restarted after a handler).
fn restart_code(nr: u64, a: &[u64; 6], ret: i64) -> Option<i64> {
    if (-516..=-512).contains(&ret) {
        return Some(if ret == -516 { ERESTARTNOHAND } else { -ret });
    }
    // close has already released the descriptor: its EINTR is final.
    if ret != -(libc::EINTR as i64) || nr == 3 {
        return None;
    }
    Some(match nr {
        7 | 23 | 270 | 271 | 232 | 281 | 441 | 35 | 230 | 34 | 128 | 130 | 208 | 65 | 220 | 69
        | 70 | 299 => ERESTARTNOHAND,
        202 if a[1] & 0x7f == 0 && a[3] != 0 => ERESTARTNOHAND,
        _ => ERESTARTSYS,
    })
}

/// The end of a system call: writes the result and delivers pending
/// signals (replaces the plain "result in RAX" return).
pub fn syscall_exit(
    p: &Process,
    vcpu: &mut VcpuFd,
    t: &mut Thread,
    entry: &kvm_regs,
    act: Action,
    backend: Backend,
) -> Action {
    match act {
        Action::Return(v) => {
            let a = [
                entry.rdi, entry.rsi, entry.rdx, entry.r10, entry.r8, entry.r9,
            ];
            let restart = restart_code(entry.rax, &a, v);
            let mut u = *entry;
            u.rax = v as u64;
            u.rip = entry.rcx;
            u.rflags = entry.r11;
            let pending = t.sig.any.load(Ordering::SeqCst) || p.sigq.any.load(Ordering::SeqCst);
            if !pending && restart.is_none() {
                let r = &mut vcpu.sync_regs_mut().regs;
                r.rax = v as u64;
                if backend == Backend::Pvm {
                    r.rip = entry.rcx;
                    r.rflags = entry.r11;
                }
                vcpu.set_sync_dirty_reg(SyncReg::Register);
                return act;
            }
            let (alive, delivered) =
                deliver_all(p, vcpu, t, &mut u, restart.map(|c| (c, entry.rax)));
            if !alive {
                return Action::Stop;
            }
            if !delivered {
                // The saved mask of an interrupted sigsuspend/ppoll goes back.
                let saved = lock(&t.sig.saved_mask).take();
                if let Some(m) = saved {
                    set_mask(t, m);
                }
            }
            let r = &mut vcpu.sync_regs_mut().regs;
            let stub_rip = r.rip;
            *r = u;
            if backend == Backend::Standard {
                // At CPL0 before the stub's sysretq: it returns to RCX with
                // RFLAGS from R11.
                r.rip = stub_rip;
                r.rcx = u.rip;
                r.r11 = u.rflags;
            }
            vcpu.set_sync_dirty_reg(SyncReg::Register);
            act
        }
        Action::Resume => {
            // rt_sigreturn set the registers; signals it unblocked go now.
            let Ok(mut u) = vcpu.get_regs() else {
                return Action::Resume;
            };
            let (alive, delivered) = deliver_all(p, vcpu, t, &mut u, None);
            if !alive {
                return Action::Stop;
            }
            if delivered && vcpu.set_regs(&u).is_err() {
                p.end(Ending::Error(
                    "KVM_SET_REGS failed after signal delivery".into(),
                ));
                return Action::Stop;
            }
            Action::Resume
        }
        other => other,
    }
}

/// Makes the vCPU continue in user mode with exactly `u` (from CPL0 code of
/// vmmload's stubs: switches the segments to user mode first).
pub fn enter_user(vcpu: &VcpuFd, u: &kvm_regs) -> bool {
    let Ok(s) = vcpu.get_sregs() else {
        return false;
    };
    if s.cs.dpl != 3 {
        let (fs, gs) = (s.fs.base, s.gs.base);
        let mut n = crate::machine::user_sregs(s, s.cr3, fs, s.tr.base);
        n.gs.base = gs;
        if vcpu.set_sregs(&n).is_err() {
            return false;
        }
    }
    vcpu.set_regs(u).is_ok()
}

/// A KVM_RUN exit other than a system call or exception (a kick, a full
/// dirty ring): deliver pending signals if the vCPU is in program code.
/// Returns false if the program ends.
pub fn at_exit(p: &Process, vcpu: &mut VcpuFd, t: &mut Thread) -> bool {
    if !t.sig.any.load(Ordering::SeqCst) && !p.sigq.any.load(Ordering::SeqCst) {
        t.sig.unseen.store(false, Ordering::SeqCst);
        return true;
    }
    let Ok(s) = vcpu.get_sregs() else {
        return true;
    };
    let Ok(mut u) = vcpu.get_regs() else {
        return true;
    };
    let in_stub = u.rip >= crate::machine::SYS_BASE;
    if s.cs.dpl != 3 || in_stub {
        // Inside vmmload's stub: the next system-call exit delivers.
        return true;
    }
    let (alive, delivered) = deliver_all(p, vcpu, t, &mut u, None);
    if alive && delivered && !enter_user(vcpu, &u) {
        p.end(Ending::Error(
            "cannot enter a signal handler (KVM_SET_REGS)".into(),
        ));
        return false;
    }
    alive
}

/// A fault of the program: runs its handler, or ends the run as the
/// default action. Returns true if the vCPU continues.
pub fn fault(
    p: &Process,
    vcpu: &mut VcpuFd,
    t: &mut Thread,
    info: SigInfo,
    mut u: kvm_regs,
    ctx: FaultCtx,
    what: String,
) -> bool {
    let sig = info.signo();
    let act = lock(&p.signals).actions[sig as usize];
    // Blocked or ignored faults kill, as Linux's force_sig_fault does.
    if act[0] <= 1 || t.sigmask & bit(sig) != 0 {
        p.end(Ending::Signal(sig, what));
        return false;
    }
    if setup_frame(p, vcpu, t, &mut u, &info, act, ctx).is_err() {
        p.end(Ending::Signal(
            11,
            format!(
                "{what}; its {} handler frame cannot be written",
                crate::sys::signame(sig)
            ),
        ));
        return false;
    }
    if !enter_user(vcpu, &u) {
        p.end(Ending::Error("cannot enter a signal handler".into()));
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupted_calls_restart_as_linux_decides() {
        let a = [0u64; 6];
        let eintr = -(libc::EINTR as i64);
        assert_eq!(restart_code(0, &a, eintr), Some(ERESTARTSYS)); // read
        assert_eq!(restart_code(61, &a, eintr), Some(ERESTARTSYS)); // wait4
        assert_eq!(restart_code(35, &a, eintr), Some(ERESTARTNOHAND)); // nanosleep
        assert_eq!(restart_code(7, &a, eintr), Some(ERESTARTNOHAND)); // poll
        assert_eq!(restart_code(3, &a, eintr), None); // close: never restarted
        assert_eq!(restart_code(0, &a, 5), None);
        assert_eq!(restart_code(130, &a, -ERESTARTNOHAND), Some(ERESTARTNOHAND));
        // futex wait: restarted without a timeout, not with one.
        let mut f = [0u64; 6];
        assert_eq!(restart_code(202, &f, eintr), Some(ERESTARTSYS));
        f[3] = 0x1000;
        assert_eq!(restart_code(202, &f, eintr), Some(ERESTARTNOHAND));
    }
}
