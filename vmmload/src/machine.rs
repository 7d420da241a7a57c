//! The minimal machine: GDT, IDT, TSS with I/O bitmap, the syscall and
//! exception stubs, and the initial state of each vCPU.
//!
//! The supervisor part is deliberately tiny. The syscall stub is two
//! instructions: `out %al, $SYSCALL_PORT; sysretq`. On standard KVM `syscall`
//! enters it at CPL0 and the VMM lets `sysretq` return; on this project's PVM
//! hypervisor `syscall` stays at CPL3 (the stub page is user-accessible and
//! the TSS I/O bitmap allows the port), so the VMM completes the return
//! itself (RIP = RCX, RFLAGS = R11). Exception vectors each do
//! `out %al, $(EXC_PORT_BASE + vector); hlt`: the VMM reads the frame and
//! decides. No other supervisor code exists.

use kvm_bindings::{kvm_msr_entry, kvm_segment, kvm_sregs, Msrs};

use crate::mm::{Mm, MmError};

/// Base of vmmload's supervisor area (PML4 slot 511).
pub const SYS_BASE: u64 = 0xffff_ff80_0000_0000;
/// GDT page.
pub const GDT_VA: u64 = SYS_BASE;
/// IDT page.
pub const IDT_VA: u64 = SYS_BASE + 0x1000;
/// TSS (3 pages: 104 bytes + 8 KiB I/O bitmap + terminator).
pub const TSS_VA: u64 = SYS_BASE + 0x2000;
/// Syscall stub page (user-accessible, read-only).
pub const STUB_VA: u64 = SYS_BASE + 0x5000;
/// Exception stub page (supervisor).
pub const EXC_VA: u64 = SYS_BASE + 0x6000;
/// Read-cache control page (user-writable; see `readcache.rs`).
pub const CACHE_CTL_VA: u64 = SYS_BASE + 0x7000;
/// Read-cache data buffer (user-readable).
pub const CACHE_BUF_VA: u64 = SYS_BASE + 0x10_0000;
/// Read-cache buffer size.
pub const CACHE_BUF_SIZE: u64 = 1 << 20;
/// Offset of the PVM syscall entry (with the in-guest fast paths) in the stub page.
pub const STUB_PVM_ENTRY: u64 = 0x10;
/// Offset of the `rep movsb` of the read-cache fast path.
pub const STUB_COPY_OFF: u64 = 0x1ec;
/// Exception stack pages.
pub const EXC_STACK_VA: u64 = SYS_BASE + 0x8000;
/// Top of the exception stack (TSS.RSP0).
pub const EXC_STACK_TOP: u64 = SYS_BASE + 0x10000;

/// Port the syscall stub writes to.
pub const SYSCALL_PORT: u16 = 0xe0;
/// Port of exception vector 0; vector v uses `EXC_PORT_BASE + v`.
pub const EXC_PORT_BASE: u16 = 0x80;

/// Kernel code selector.
pub const KERNEL_CS: u16 = 0x10;
/// User data selector (RPL 3).
pub const USER_DS: u16 = 0x2b;
/// User 64-bit code selector (RPL 3).
pub const USER_CS: u16 = 0x33;
/// TSS selector.
pub const TSS_SEL: u16 = 0x40;

const TSS_LIMIT: u32 = 104 + 8192;
const MSR_STAR: u32 = 0xc000_0081;
const MSR_LSTAR: u32 = 0xc000_0082;
const MSR_CSTAR: u32 = 0xc000_0083;
const MSR_SFMASK: u32 = 0xc000_0084;
/// RFLAGS bits cleared on `syscall` (TF, IF, DF, IOPL, NT, AC) as Linux does.
const SFMASK: u64 = 0x47700;

/// Vectors that push an error code.
pub fn has_error_code(v: u8) -> bool {
    matches!(v, 8 | 10..=14 | 17 | 21 | 29 | 30)
}

/// TSS contents: RSP0, I/O map base, bitmap allowing only the syscall port.
fn tss_image(rsp0: u64) -> Vec<u8> {
    let mut t = vec![0u8; 3 * 4096];
    t[4..12].copy_from_slice(&rsp0.to_le_bytes());
    t[102..104].copy_from_slice(&104u16.to_le_bytes());
    for byte in &mut t[104..104 + 8192 + 1] {
        *byte = 0xff;
    }
    let p = SYSCALL_PORT as usize;
    t[104 + p / 8] &= !(1 << (p % 8));
    t
}

/// Base of the per-vCPU TSS and exception stack areas of vCPUs 1, 2, …
const VCPU_AREA: u64 = SYS_BASE + 0x20_0000;

/// The TSS of vCPU `id` (vCPU 0 uses the one `build` made). Every vCPU gets
/// its own TSS and exception stack, so threads that fault at the same time
/// do not share a stack.
pub fn vcpu_tss(mm: &mut Mm, id: u64) -> Result<u64, MmError> {
    if id == 0 {
        return Ok(TSS_VA);
    }
    let base = VCPU_AREA + (id - 1) * 0x1_0000;
    let mut frames = [0u64; 3];
    for (i, f) in frames.iter_mut().enumerate() {
        *f = mm.map_system(base + i as u64 * 0x1000, false, true)?;
    }
    for i in 0..4 {
        mm.map_system(base + 0x4000 + i * 0x1000, false, true)?;
    }
    let t = tss_image(base + 0x8000);
    for (i, f) in frames.iter().enumerate() {
        mm.ram.write(*f, &t[i * 4096..(i + 1) * 4096]);
    }
    Ok(base)
}

/// Writes the GDT, IDT, TSS and stubs into freshly mapped system pages.
pub fn build(mm: &mut Mm) -> Result<(), MmError> {
    let gdt = mm.map_system(GDT_VA, false, true)?;
    let idt = mm.map_system(IDT_VA, false, false)?;
    let mut tss = [0u64; 3];
    for (i, t) in tss.iter_mut().enumerate() {
        *t = mm.map_system(TSS_VA + i as u64 * 0x1000, false, true)?;
    }
    let stub = mm.map_system(STUB_VA, true, false)?;
    let exc = mm.map_system(EXC_VA, false, false)?;
    let ctl = mm.map_system(CACHE_CTL_VA, true, true)?;
    for i in 0..CACHE_BUF_SIZE / 0x1000 {
        mm.map_system(CACHE_BUF_VA + i * 0x1000, true, false)?;
    }
    for i in 0..8 {
        mm.map_system(EXC_STACK_VA + i * 0x1000, false, true)?;
    }
    let ram = mm.ram.clone();

    // GDT.
    let mut g = [0u64; 10];
    g[1] = 0x00cf_9b00_0000_ffff; // 0x08 kernel code 32
    g[2] = 0x00af_9b00_0000_ffff; // 0x10 kernel code 64
    g[3] = 0x00cf_9300_0000_ffff; // 0x18 kernel data
    g[4] = 0x00cf_fb00_0000_ffff; // 0x23 user code 32
    g[5] = 0x00cf_f300_0000_ffff; // 0x2b user data
    g[6] = 0x00af_fb00_0000_ffff; // 0x33 user code 64
    let (b, l) = (TSS_VA, TSS_LIMIT as u64);
    g[8] = (l & 0xffff)
        | ((b & 0xff_ffff) << 16)
        | (0x8b << 40)
        | (((l >> 16) & 0xf) << 48)
        | (((b >> 24) & 0xff) << 56);
    g[9] = b >> 32;
    let bytes: Vec<u8> = g.iter().flat_map(|e| e.to_le_bytes()).collect();
    ram.write(gdt, &bytes);

    // IDT: 32 interrupt gates to 4-byte handler slots. #BP and #OF may be
    // raised from user mode (DPL 3) like on Linux.
    let mut idt_bytes = Vec::with_capacity(32 * 16);
    for v in 0..32u64 {
        let off = EXC_VA + v * 4;
        let dpl3 = v == 3 || v == 4;
        let attr: u64 = if dpl3 { 0xee } else { 0x8e };
        let lo = (off & 0xffff)
            | ((KERNEL_CS as u64) << 16)
            | (attr << 40)
            | (((off >> 16) & 0xffff) << 48);
        let hi = off >> 32;
        idt_bytes.extend_from_slice(&lo.to_le_bytes());
        idt_bytes.extend_from_slice(&hi.to_le_bytes());
    }
    ram.write(idt, &idt_bytes);
    let mut h = Vec::with_capacity(128);
    for v in 0..32u8 {
        h.extend_from_slice(&[0xe6, EXC_PORT_BASE as u8 + v, 0xf4, 0x90]);
    }
    ram.write(exc, &h);

    let t = tss_image(EXC_STACK_TOP);
    for (i, f) in tss.iter().enumerate() {
        ram.write(*f, &t[i * 4096..(i + 1) * 4096]);
    }

    ram.write(stub, &STUB_CODE);
    let mut c = [0u8; 32];
    c[..8].copy_from_slice(&(-1i64).to_le_bytes());
    c[8..16].copy_from_slice(&CACHE_BUF_VA.to_le_bytes());
    ram.write(ctl, &c);
    Ok(())
}

/// The syscall stub page, assembled from `stub.S` (the unit test
/// `stub_bytes_match_stub_s` checks the bytes against the source when `as`
/// is installed).
///
/// - Offset 0, generic entry (standard KVM): `out %al,$0xe0; sysretq`.
/// - Offset 0x10, PVM entry (runs at CPL3, so natively fast): answers
///   `getpid`, `getuid`, `getgid`, `geteuid`, `getegid`, `clock_gettime`
///   (REALTIME, MONOTONIC), `gettimeofday` and `time` from the control page
///   and the TSC, and serves `read` from the read cache; everything else
///   exits through the port like the generic entry.
const STUB_CODE: [u8; 0x210] = [
    0xe6, 0xe0, 0x48, 0x0f, 0x07, 0xf4, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x48, 0x85, 0xc0, 0x0f, 0x84, 0x8e, 0x01, 0x00, 0x00, 0x48, 0x83, 0x3d, 0xff, 0x1f, 0x00, 0x00,
    0x00, 0x0f, 0x84, 0xe6, 0x01, 0x00, 0x00, 0x48, 0x83, 0xf8, 0x27, 0x74, 0x3b, 0x48, 0x83, 0xf8,
    0x66, 0x74, 0x3e, 0x48, 0x83, 0xf8, 0x68, 0x74, 0x41, 0x48, 0x83, 0xf8, 0x6b, 0x74, 0x44, 0x48,
    0x83, 0xf8, 0x6c, 0x74, 0x47, 0x48, 0x3d, 0xe4, 0x00, 0x00, 0x00, 0x74, 0x58, 0x48, 0x83, 0xf8,
    0x60, 0x0f, 0x84, 0xac, 0x00, 0x00, 0x00, 0x48, 0x3d, 0xc9, 0x00, 0x00, 0x00, 0x0f, 0x84, 0x02,
    0x01, 0x00, 0x00, 0xe9, 0xa5, 0x01, 0x00, 0x00, 0x48, 0x8b, 0x05, 0xd9, 0x1f, 0x00, 0x00, 0xeb,
    0x22, 0x48, 0x8b, 0x05, 0xd8, 0x1f, 0x00, 0x00, 0xeb, 0x19, 0x48, 0x8b, 0x05, 0xd7, 0x1f, 0x00,
    0x00, 0xeb, 0x10, 0x48, 0x8b, 0x05, 0xd6, 0x1f, 0x00, 0x00, 0xeb, 0x07, 0x48, 0x8b, 0x05, 0xd5,
    0x1f, 0x00, 0x00, 0x48, 0x8d, 0x64, 0x24, 0x80, 0x41, 0x53, 0x9d, 0x48, 0x8d, 0xa4, 0x24, 0x80,
    0x00, 0x00, 0x00, 0xff, 0xe1, 0x48, 0x83, 0xff, 0x01, 0x0f, 0x87, 0x5e, 0x01, 0x00, 0x00, 0x48,
    0x8d, 0x64, 0x24, 0x80, 0x41, 0x53, 0x51, 0x56, 0x57, 0x52, 0x0f, 0x31, 0x48, 0xc1, 0xe2, 0x20,
    0x48, 0x09, 0xd0, 0x48, 0x2b, 0x05, 0x5e, 0x1f, 0x00, 0x00, 0x48, 0xf7, 0x25, 0x5f, 0x1f, 0x00,
    0x00, 0x48, 0x0f, 0xac, 0xd0, 0x20, 0x48, 0x85, 0xff, 0x75, 0x09, 0x48, 0x03, 0x05, 0x56, 0x1f,
    0x00, 0x00, 0xeb, 0x07, 0x48, 0x03, 0x05, 0x55, 0x1f, 0x00, 0x00, 0x31, 0xd2, 0xb9, 0x00, 0xca,
    0x9a, 0x3b, 0x48, 0xf7, 0xf1, 0x48, 0x89, 0x06, 0x48, 0x89, 0x56, 0x08, 0x31, 0xc0, 0xe9, 0xeb,
    0x00, 0x00, 0x00, 0x48, 0x85, 0xf6, 0x0f, 0x85, 0x01, 0x01, 0x00, 0x00, 0x48, 0x85, 0xff, 0x0f,
    0x84, 0xf8, 0x00, 0x00, 0x00, 0x48, 0x8d, 0x64, 0x24, 0x80, 0x41, 0x53, 0x51, 0x56, 0x57, 0x52,
    0x0f, 0x31, 0x48, 0xc1, 0xe2, 0x20, 0x48, 0x09, 0xd0, 0x48, 0x2b, 0x05, 0xf8, 0x1e, 0x00, 0x00,
    0x48, 0xf7, 0x25, 0xf9, 0x1e, 0x00, 0x00, 0x48, 0x0f, 0xac, 0xd0, 0x20, 0x48, 0x03, 0x05, 0xf5,
    0x1e, 0x00, 0x00, 0x31, 0xd2, 0xb9, 0xe8, 0x03, 0x00, 0x00, 0x48, 0xf7, 0xf1, 0x31, 0xd2, 0xb9,
    0x40, 0x42, 0x0f, 0x00, 0x48, 0xf7, 0xf1, 0x48, 0x89, 0x07, 0x48, 0x89, 0x57, 0x08, 0x31, 0xc0,
    0xe9, 0x89, 0x00, 0x00, 0x00, 0x48, 0x8d, 0x64, 0x24, 0x80, 0x41, 0x53, 0x51, 0x56, 0x57, 0x52,
    0x0f, 0x31, 0x48, 0xc1, 0xe2, 0x20, 0x48, 0x09, 0xd0, 0x48, 0x2b, 0x05, 0xa8, 0x1e, 0x00, 0x00,
    0x48, 0xf7, 0x25, 0xa9, 0x1e, 0x00, 0x00, 0x48, 0x0f, 0xac, 0xd0, 0x20, 0x48, 0x03, 0x05, 0xa5,
    0x1e, 0x00, 0x00, 0x31, 0xd2, 0xb9, 0x00, 0xca, 0x9a, 0x3b, 0x48, 0xf7, 0xf1, 0x48, 0x85, 0xff,
    0x74, 0x4c, 0x48, 0x89, 0x07, 0xeb, 0x47, 0x48, 0x3b, 0x3d, 0x52, 0x1e, 0x00, 0x00, 0x75, 0x5d,
    0x48, 0x8d, 0x64, 0x24, 0x80, 0x41, 0x53, 0x51, 0x56, 0x57, 0x52, 0x48, 0x8b, 0x0d, 0x56, 0x1e,
    0x00, 0x00, 0x48, 0x2b, 0x0d, 0x47, 0x1e, 0x00, 0x00, 0x48, 0x39, 0xd1, 0x72, 0x2f, 0x48, 0x89,
    0xd1, 0x48, 0x89, 0xc8, 0x48, 0x89, 0xf7, 0x48, 0x8b, 0x35, 0x2a, 0x1e, 0x00, 0x00, 0x48, 0x03,
    0x35, 0x2b, 0x1e, 0x00, 0x00, 0x48, 0x01, 0x0d, 0x24, 0x1e, 0x00, 0x00, 0xf3, 0xa4, 0x5a, 0x5f,
    0x5e, 0x59, 0x9d, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00, 0xff, 0xe1, 0x5a, 0x5f, 0x5e,
    0x59, 0x41, 0x5b, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00, 0x31, 0xc0, 0xe6, 0xe0, 0xf4,
];

/// Ranges of the PVM stub where the only instructions that can fault are
/// stores to (or a copy into) a program-supplied pointer, with r11, rcx,
/// rsi, rdi, rdx saved below the red zone. A page fault there becomes EFAULT.
pub const STUB_USER_STORE_RANGES: [(u64, u64); 4] = [
    (0xf5, 0x103),
    (0x157, 0x165),
    (0x1a2, 0x1a7),
    (0x1ec, 0x1ee),
];

/// Control-page word offsets (see `stub.S`).
pub mod ctl {
    /// Cached fd.
    pub const FD: u64 = 0x00;
    /// Buffer address.
    pub const BUF: u64 = 0x08;
    /// Bytes consumed.
    pub const POS: u64 = 0x10;
    /// Bytes valid.
    pub const LEN: u64 = 0x18;
    /// Non-zero: answer time and identity calls in the stub.
    pub const FAST: u64 = 0x20;
    /// TSC at the time base.
    pub const TSC: u64 = 0x28;
    /// Nanoseconds per TSC tick × 2^32.
    pub const MULT: u64 = 0x30;
    /// CLOCK_REALTIME at the time base (ns).
    pub const REAL: u64 = 0x38;
    /// CLOCK_MONOTONIC at the time base (ns).
    pub const MONO: u64 = 0x40;
    /// getpid.
    pub const PID: u64 = 0x48;
    /// getuid.
    pub const UID: u64 = 0x50;
    /// getgid.
    pub const GID: u64 = 0x58;
    /// geteuid.
    pub const EUID: u64 = 0x60;
    /// getegid.
    pub const EGID: u64 = 0x68;
}

fn seg(selector: u16, code: bool, dpl: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_: if code { 11 } else { 3 },
        present: 1,
        dpl,
        db: u8::from(!code),
        s: 1,
        l: u8::from(code),
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Special registers for a vCPU starting in user mode.
pub fn user_sregs(mut s: kvm_sregs, pml4: u64, fs_base: u64, tss: u64) -> kvm_sregs {
    s.cs = seg(USER_CS, true, 3);
    let ds = seg(USER_DS, false, 3);
    s.ds = ds;
    s.es = ds;
    s.ss = ds;
    s.fs = ds;
    s.fs.base = fs_base;
    s.gs = ds;
    s.tr = kvm_segment {
        base: tss,
        limit: TSS_LIMIT,
        selector: TSS_SEL,
        type_: 11,
        present: 1,
        ..Default::default()
    };
    s.ldt = kvm_segment {
        type_: 2,
        unusable: 1,
        ..Default::default()
    };
    s.gdt.base = GDT_VA;
    s.gdt.limit = 10 * 8 - 1;
    s.idt.base = IDT_VA;
    s.idt.limit = 32 * 16 - 1;
    s.cr0 = 0x8005_0033; // PG WP NE ET MP PE AM
    s.cr3 = pml4;
    // PAE, PGE, OSFXSR, OSXMMEXCPT, OSXSAVE.
    s.cr4 = (1 << 5) | (1 << 7) | (1 << 9) | (1 << 10) | (1 << 18);
    s.efer = 0xd01; // SCE LME LMA NXE
    s
}

/// The syscall MSRs, with LSTAR at `lstar`.
pub fn syscall_msrs(lstar: u64) -> Msrs {
    let e = |index, data| kvm_msr_entry {
        index,
        data,
        ..Default::default()
    };
    Msrs::from_entries(&[
        e(MSR_STAR, (0x23u64 << 48) | ((KERNEL_CS as u64) << 32)),
        e(MSR_LSTAR, lstar),
        e(MSR_CSTAR, lstar),
        e(MSR_SFMASK, SFMASK),
    ])
    .expect("four MSR entries fit")
}

/// Just LSTAR (switching to the PVM entry after detection).
pub fn lstar_msr(lstar: u64) -> Msrs {
    Msrs::from_entries(&[kvm_msr_entry {
        index: MSR_LSTAR,
        data: lstar,
        ..Default::default()
    }])
    .expect("one MSR entry fits")
}

/// The host's XCR0 (enabled XSAVE features), so that the guest program sees
/// the same vector extensions as natively.
pub fn host_xcr0() -> u64 {
    let leaf1 = std::arch::x86_64::__cpuid(1);
    if leaf1.ecx & (1 << 27) == 0 {
        return 3;
    }
    let (lo, hi): (u32, u32);
    // SAFETY: OSXSAVE is set, so xgetbv(0) is permitted in user mode.
    unsafe {
        std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack));
    }
    ((hi as u64) << 32) | lo as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ram::GuestRam;
    use std::sync::Arc;

    #[test]
    fn system_pages_are_private_and_stub_is_user_readable_only() {
        let mut mm = Mm::new(Arc::new(GuestRam::new(16 << 20).unwrap())).unwrap();
        build(&mut mm).unwrap();
        let stub = mm.pte(STUB_VA);
        assert_eq!(
            stub & (crate::mm::PTE_U | crate::mm::PTE_W),
            crate::mm::PTE_U
        );
        assert_eq!(mm.pte(GDT_VA) & crate::mm::PTE_U, 0);
        assert!(mm.is_private_frame(stub & crate::mm::PTE_ADDR));
        assert!(mm.translate(STUB_VA, 1, false).is_err());
    }

    /// The embedded bytes are the assembly of `stub.S` (skipped without `as`).
    #[test]
    fn stub_bytes_match_stub_s() {
        let dir = std::env::temp_dir().join(format!("vmmload-stub-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let obj = dir.join("stub.o");
        let bin = dir.join("stub.bin");
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src/stub.S");
        let ok = std::process::Command::new("as")
            .arg("-o")
            .arg(&obj)
            .arg(src)
            .status()
            .is_ok_and(|s| s.success())
            && std::process::Command::new("objcopy")
                .args(["-O", "binary", "-j", ".text"])
                .arg(&obj)
                .arg(&bin)
                .status()
                .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("as/objcopy not available: skipping");
            return;
        }
        let b = std::fs::read(&bin).unwrap();
        assert_eq!(&b[..STUB_CODE.len()], &STUB_CODE[..]);
        assert_eq!(&b[0x2000..0x2008], &(-1i64).to_le_bytes());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn error_code_vectors_match_the_sdm() {
        let with: Vec<u8> = (0..32).filter(|&v| has_error_code(v)).collect();
        assert_eq!(with, vec![8, 10, 11, 12, 13, 14, 17, 21, 29, 30]);
    }
}
