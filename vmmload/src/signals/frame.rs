//! The x86-64 `rt_sigframe` as Linux builds it (arch/x86/kernel/signal.c,
//! signal_64.c; uapi asm/sigcontext.h, asm/ucontext.h): where it goes on the
//! stack, its bytes, and parsing it back for `rt_sigreturn`. Pure functions
//! over byte buffers, so the layout is unit-tested without a VM.

use kvm_bindings::kvm_regs;

/// `pretcode` (the handler's return address) is the first word.
const UC: usize = 8;
const UC_FLAGS: usize = UC;
const UC_STACK: usize = UC + 16;
/// `struct sigcontext` inside the ucontext.
pub const MCTX: usize = UC + 40;
const UC_SIGMASK: usize = UC + 296;
/// Offset of the siginfo in the frame.
pub const INFO: usize = UC + 304;
/// sizeof(struct rt_sigframe) without the FPU state.
pub const FRAME_SIZE: u64 = INFO as u64 + 128;

/// uc_flags: the frame has an XSAVE area and a valid `ss`.
const UC_FP_XSTATE: u64 = 1;
const UC_SIGCONTEXT_SS: u64 = 2;

/// `struct _fpx_sw_bytes` magic numbers (uapi asm/sigcontext.h).
pub const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
/// Written just past the XSAVE area.
pub const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
/// Offset of `_fpx_sw_bytes` in the legacy FXSAVE area.
const SW_BYTES: usize = 464;

/// RFLAGS bits a signal frame may change (`FIX_EFLAGS`).
pub const FIX_EFLAGS: u64 =
    0x40000 | 0x800 | 0x400 | 0x100 | 0x80 | 0x40 | 0x10 | 0x4 | 0x1 | 0x10000;

/// Order of the general registers in `struct sigcontext`.
fn gprs(r: &kvm_regs) -> [u64; 16] {
    [
        r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rdi, r.rsi, r.rbp, r.rbx, r.rdx,
        r.rax, r.rcx, r.rsp,
    ]
}

/// Where a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Address of the frame (its first word is the return address).
    pub frame: u64,
    /// Address of the XSAVE area (64-byte aligned).
    pub fpstate: u64,
}

/// `get_sigframe`: `sp` is the stack to build on (already switched to the
/// alternate stack if that applies, otherwise below the 128-byte red zone).
pub fn place(sp: u64, xstate_size: u64) -> Option<Placement> {
    let fpstate = sp.checked_sub(xstate_size + 4)? & !63;
    let frame = (fpstate.checked_sub(FRAME_SIZE)? & !15).checked_sub(8)?;
    Some(Placement { frame, fpstate })
}

/// The alternate signal stack of a thread (`stack_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AltStack {
    /// ss_sp
    pub sp: u64,
    /// ss_size (0: disabled)
    pub size: u64,
    /// SS_AUTODISARM was given.
    pub autodisarm: bool,
}

/// stack_t flags.
pub const SS_ONSTACK: u32 = 1;
/// Disabled.
pub const SS_DISABLE: u32 = 2;
/// Disarm the stack while a handler runs on it.
pub const SS_AUTODISARM: u32 = 1 << 31;

impl AltStack {
    /// `on_sig_stack`: the stack grows down from sp + size.
    pub fn contains(&self, sp: u64) -> bool {
        self.size != 0 && sp > self.sp && sp - self.sp <= self.size
    }

    /// `sas_ss_flags`.
    pub fn flags(&self, sp: u64) -> u32 {
        if self.size == 0 {
            SS_DISABLE
        } else if self.contains(sp) {
            SS_ONSTACK
        } else {
            0
        }
    }

    /// The 24-byte `stack_t` the program sees, for stack pointer `sp`.
    pub fn encode(&self, sp: u64) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&self.sp.to_le_bytes());
        let f = self.flags(sp) | if self.autodisarm { SS_AUTODISARM } else { 0 };
        b[8..12].copy_from_slice(&f.to_le_bytes());
        b[16..].copy_from_slice(&self.size.to_le_bytes());
        b
    }
}

/// What the frame records besides the registers.
pub struct FrameInput<'a> {
    /// Interrupted user state (RIP, RFLAGS, RSP are the user's).
    pub regs: &'a kvm_regs,
    /// Handler return address (sa_restorer).
    pub restorer: u64,
    /// Mask to restore on return.
    pub old_mask: u64,
    /// Alternate stack as it was before delivery.
    pub altstack: AltStack,
    /// Exception vector, error code, fault address (0 if not a fault).
    pub trapno: u64,
    /// Error code.
    pub err: u64,
    /// CR2.
    pub cr2: u64,
    /// The 128-byte siginfo.
    pub info: &'a [u8; 128],
    /// XSAVE area (standard format) of the interrupted context.
    pub xsave: &'a [u8],
    /// XCR0: the features present in `xsave`.
    pub xfeatures: u64,
}

/// The bytes from `p.frame` up to the end of the FPU state.
pub fn encode(p: Placement, f: &FrameInput<'_>) -> Vec<u8> {
    let xsize = f.xsave.len();
    let total = (p.fpstate - p.frame) as usize + xsize + 4;
    let mut b = vec![0u8; total];
    let put =
        |b: &mut Vec<u8>, off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut b, 0, f.restorer);
    put(&mut b, UC_FLAGS, UC_FP_XSTATE | UC_SIGCONTEXT_SS);
    b[UC_STACK..UC_STACK + 24].copy_from_slice(&f.altstack.encode(f.regs.rsp));
    for (i, v) in gprs(f.regs).iter().enumerate() {
        put(&mut b, MCTX + i * 8, *v);
    }
    put(&mut b, MCTX + 128, f.regs.rip);
    put(&mut b, MCTX + 136, f.regs.rflags);
    b[MCTX + 144..MCTX + 146].copy_from_slice(&0x33u16.to_le_bytes());
    b[MCTX + 150..MCTX + 152].copy_from_slice(&0x2bu16.to_le_bytes());
    put(&mut b, MCTX + 152, f.err);
    put(&mut b, MCTX + 160, f.trapno);
    put(&mut b, MCTX + 168, f.old_mask);
    put(&mut b, MCTX + 176, f.cr2);
    put(&mut b, MCTX + 184, p.fpstate);
    put(&mut b, UC_SIGMASK, f.old_mask);
    b[INFO..INFO + 128].copy_from_slice(f.info);
    let fp = (p.fpstate - p.frame) as usize;
    b[fp..fp + xsize].copy_from_slice(f.xsave);
    let sw = fp + SW_BYTES;
    b[sw..sw + 48].fill(0);
    b[sw..sw + 4].copy_from_slice(&FP_XSTATE_MAGIC1.to_le_bytes());
    b[sw + 4..sw + 8].copy_from_slice(&(xsize as u32 + 4).to_le_bytes());
    b[sw + 8..sw + 16].copy_from_slice(&f.xfeatures.to_le_bytes());
    b[sw + 16..sw + 20].copy_from_slice(&(xsize as u32).to_le_bytes());
    b[fp + xsize..fp + xsize + 4].copy_from_slice(&FP_XSTATE_MAGIC2.to_le_bytes());
    b
}

/// What `rt_sigreturn` restores, parsed from the frame's bytes.
#[derive(Debug)]
pub struct Restored {
    /// Registers (RFLAGS already filtered through FIX_EFLAGS).
    pub regs: kvm_regs,
    /// Signal mask.
    pub mask: u64,
    /// Requested alternate stack (sp, flags, size).
    pub stack: (u64, u32, u64),
    /// Address of the FPU state (0: none).
    pub fpstate: u64,
}

/// Parses the `FRAME_SIZE` bytes of a frame. `cur_flags` are the RFLAGS the
/// bits outside FIX_EFLAGS come from.
pub fn decode(b: &[u8], cur_flags: u64) -> Option<Restored> {
    if b.len() < FRAME_SIZE as usize {
        return None;
    }
    let get = |off: usize| -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[off..off + 8]);
        u64::from_le_bytes(w)
    };
    let g: Vec<u64> = (0..16).map(|i| get(MCTX + i * 8)).collect();
    let regs = kvm_regs {
        r8: g[0],
        r9: g[1],
        r10: g[2],
        r11: g[3],
        r12: g[4],
        r13: g[5],
        r14: g[6],
        r15: g[7],
        rdi: g[8],
        rsi: g[9],
        rbp: g[10],
        rbx: g[11],
        rdx: g[12],
        rax: g[13],
        rcx: g[14],
        rsp: g[15],
        rip: get(MCTX + 128),
        rflags: (cur_flags & !FIX_EFLAGS) | (get(MCTX + 136) & FIX_EFLAGS) | 2,
    };
    let flags = u32::from_le_bytes(b[UC_STACK + 8..UC_STACK + 12].try_into().ok()?);
    Some(Restored {
        regs,
        mask: get(UC_SIGMASK),
        stack: (get(UC_STACK), flags, get(UC_STACK + 16)),
        fpstate: get(MCTX + 184),
    })
}

/// Checks the software-reserved bytes of an XSAVE area read back from a
/// frame. Returns how many bytes of it are XSAVE state (the legacy 512 if
/// the magic numbers are absent, as Linux then restores FXSAVE state only).
pub fn fp_extent(legacy: &[u8], magic2: Option<u32>, max: usize) -> usize {
    if legacy.len() < 512 {
        return 0;
    }
    let w = |o: usize| {
        u32::from_le_bytes(
            legacy[SW_BYTES + o..SW_BYTES + o + 4]
                .try_into()
                .unwrap_or([0; 4]),
        )
    };
    let (m1, ext, size) = (w(0), w(4) as usize, w(16) as usize);
    if m1 == FP_XSTATE_MAGIC1
        && size >= 576
        && size <= max
        && ext == size + 4
        && magic2 == Some(FP_XSTATE_MAGIC2)
    {
        size
    } else {
        512
    }
}

/// Byte offset of the XSAVE header's magic2 word relative to the area, given
/// the size announced in the software bytes (to read it before trusting it).
pub fn announced_size(legacy: &[u8]) -> Option<usize> {
    if legacy.len() < 512 {
        return None;
    }
    let m1 = u32::from_le_bytes(legacy[SW_BYTES..SW_BYTES + 4].try_into().ok()?);
    (m1 == FP_XSTATE_MAGIC1).then(|| {
        u32::from_le_bytes(
            legacy[SW_BYTES + 16..SW_BYTES + 20]
                .try_into()
                .unwrap_or([0; 4]),
        ) as usize
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_follows_linux_alignment() {
        let p = place(0x7fff_ffff_e000 - 128, 832).unwrap();
        assert_eq!(p.fpstate % 64, 0);
        assert!(p.fpstate + 832 + 4 <= 0x7fff_ffff_e000 - 128);
        // On entry to the handler (after the "call"), rsp + 8 is 16-aligned.
        assert_eq!((p.frame + 8) % 16, 0);
        assert!(p.frame + FRAME_SIZE <= p.fpstate);
        assert!(place(100, 832).is_none());
    }

    #[test]
    fn frame_round_trips_registers_mask_and_stack() {
        let regs = kvm_regs {
            rax: 1,
            rbx: 2,
            rcx: 3,
            rdx: 4,
            rsi: 5,
            rdi: 6,
            rsp: 0x7000_0000,
            rbp: 8,
            r8: 9,
            r9: 10,
            r10: 11,
            r11: 12,
            r12: 13,
            r13: 14,
            r14: 15,
            r15: 16,
            rip: 0x40_1000,
            rflags: 0x202 | 0x1 | 0x400,
        };
        let xs = vec![0u8; 832];
        let alt = AltStack {
            sp: 0x6000_0000,
            size: 0x4000,
            autodisarm: false,
        };
        let info = [7u8; 128];
        let p = place(0x6000_4000, 832).unwrap();
        let b = encode(
            p,
            &FrameInput {
                regs: &regs,
                restorer: 0x40_2000,
                old_mask: 0x5,
                altstack: alt,
                trapno: 14,
                err: 6,
                cr2: 0x10,
                info: &info,
                xsave: &xs,
                xfeatures: 7,
            },
        );
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), 0x40_2000);
        assert_eq!(&b[INFO..INFO + 128], &info[..]);
        let r = decode(&b[..FRAME_SIZE as usize], 0x202).unwrap();
        assert_eq!(r.regs.rip, regs.rip);
        assert_eq!(r.regs.r15, 16);
        assert_eq!(r.regs.rsp, regs.rsp);
        assert_eq!(r.regs.rflags, 0x202 | 0x1 | 0x400);
        assert_eq!(r.mask, 0x5);
        assert_eq!(r.fpstate, p.fpstate);
        assert_eq!(r.stack, (0x6000_0000, 0, 0x4000));
        let fp = (p.fpstate - p.frame) as usize;
        let m2 = u32::from_le_bytes(b[fp + 832..fp + 836].try_into().unwrap());
        assert_eq!(fp_extent(&b[fp..fp + 512], Some(m2), 4096), 832);
        assert_eq!(announced_size(&b[fp..fp + 512]), Some(832));
    }

    #[test]
    fn sigreturn_cannot_set_privileged_flags() {
        let mut b = vec![0u8; FRAME_SIZE as usize];
        // IOPL 3, IF cleared, VM, NT: none of these may come from the frame.
        b[MCTX + 136..MCTX + 144].copy_from_slice(&(0x3000u64 | 0x20000 | 0x4000).to_le_bytes());
        let r = decode(&b, 0x202).unwrap();
        assert_eq!(r.regs.rflags, 0x202);
    }

    #[test]
    fn altstack_flags() {
        let a = AltStack {
            sp: 0x1000,
            size: 0x1000,
            autodisarm: false,
        };
        assert_eq!(a.flags(0x1800), SS_ONSTACK);
        assert_eq!(a.flags(0x2000), SS_ONSTACK);
        assert_eq!(a.flags(0x1000), 0);
        assert_eq!(AltStack::default().flags(0x1800), SS_DISABLE);
    }

    #[test]
    fn garbage_fp_state_falls_back_to_legacy() {
        assert_eq!(fp_extent(&[0u8; 512], None, 4096), 512);
        let mut l = [0u8; 512];
        l[SW_BYTES..SW_BYTES + 4].copy_from_slice(&FP_XSTATE_MAGIC1.to_le_bytes());
        l[SW_BYTES + 16..SW_BYTES + 20].copy_from_slice(&100_000u32.to_le_bytes());
        l[SW_BYTES + 4..SW_BYTES + 8].copy_from_slice(&100_004u32.to_le_bytes());
        assert_eq!(fp_extent(&l, Some(FP_XSTATE_MAGIC2), 4096), 512);
    }
}
