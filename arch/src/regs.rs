//! Boot-time vCPU state for the Linux 64-bit boot protocol: long mode with
//! an identity map of the first 4 GiB, flat segments, RSI -> boot_params.

use kvm_bindings::{kvm_fpu, kvm_msr_entry, kvm_regs, kvm_segment, kvm_sregs, Msrs};
use kvm_ioctls::VcpuFd;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory};

use crate::layout::*;

/// Errors while setting up a vCPU's boot state.
#[derive(Debug, thiserror::Error)]
pub enum RegsError {
    /// Writing the GDT or page tables into guest memory failed.
    #[error("writing boot structures to guest memory: {0}")]
    GuestMemory(#[from] vm_memory::GuestMemoryError),
    /// A KVM ioctl failed.
    #[error("{0}: {1}")]
    Kvm(&'static str, kvm_ioctls::Error),
    /// KVM accepted fewer MSRs than we set.
    #[error("KVM set only {0} of {1} boot MSRs")]
    PartialMsrs(usize, usize),
}

const X86_CR0_PE: u64 = 1 << 0;
const X86_CR0_ET: u64 = 1 << 4;
const X86_CR0_PG: u64 = 1 << 31;
const X86_CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;

/// GDT entries: null, 64-bit code, data, TSS (selectors 0x08, 0x10, 0x18).
const GDT: [u64; 4] = [
    0,
    gdt_entry(0xa09b, 0, 0xfffff),
    gdt_entry(0xc093, 0, 0xfffff),
    gdt_entry(0x808b, 0, 0xfffff),
];

/// Packs a segment descriptor from its flags, base and limit.
const fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    ((base as u64 & 0xff00_0000) << (56 - 24))
        | ((flags as u64 & 0x0000_f0ff) << 40)
        | ((limit as u64 & 0x000f_0000) << (48 - 16))
        | ((base as u64 & 0x00ff_ffff) << 16)
        | (limit as u64 & 0x0000_ffff)
}

/// Unpacks GDT entry `index` into the form KVM wants.
fn kvm_segment_from_gdt(index: u8) -> kvm_segment {
    let entry = GDT[usize::from(index)];
    let base = ((entry >> 16) & 0x00ff_ffff) | ((entry >> 32) & 0xff00_0000);
    let limit = ((entry & 0xffff) | ((entry >> 32) & 0x000f_0000)) as u32;
    let g = ((entry >> 55) & 1) as u8;
    kvm_segment {
        base,
        // With 4 KiB granularity the limit counts pages.
        limit: if g == 1 { (limit << 12) | 0xfff } else { limit },
        selector: u16::from(index) * 8,
        type_: ((entry >> 40) & 0xf) as u8,
        present: ((entry >> 47) & 1) as u8,
        dpl: ((entry >> 45) & 3) as u8,
        db: ((entry >> 54) & 1) as u8,
        s: ((entry >> 44) & 1) as u8,
        l: ((entry >> 53) & 1) as u8,
        g,
        avl: ((entry >> 52) & 1) as u8,
        padding: 0,
        unusable: u8::from(((entry >> 47) & 1) == 0),
    }
}

/// Writes the boot GDT, IDT and identity-mapping page tables into guest
/// memory. Done once per VM, shared by all vCPUs.
pub fn write_boot_structures<M: GuestMemory>(mem: &M) -> Result<(), RegsError> {
    for (i, entry) in GDT.iter().enumerate() {
        mem.write_obj(*entry, GuestAddress(BOOT_GDT_START + 8 * i as u64))?;
    }
    mem.write_obj(0u64, GuestAddress(BOOT_IDT_START))?;
    // PML4[0] -> PDPT; PDPT[0..4] -> four PDs of 2 MiB pages covering 4 GiB.
    mem.write_obj(PDPTE_START | 0x3, GuestAddress(PML4_START))?;
    for pd in 0..4u64 {
        let pd_addr = PDE_START + pd * 0x1000;
        mem.write_obj(pd_addr | 0x3, GuestAddress(PDPTE_START + pd * 8))?;
        for i in 0..512u64 {
            let phys = (pd << 30) | (i << 21);
            // present | writable | page size (2 MiB)
            mem.write_obj(phys | 0x83, GuestAddress(pd_addr).unchecked_add(i * 8))?;
        }
    }
    Ok(())
}

/// Puts `vcpu` in 64-bit mode ready to jump to `entry` with RSI pointing at
/// the boot_params page.
pub fn setup_boot_vcpu(vcpu: &VcpuFd, entry: GuestAddress) -> Result<(), RegsError> {
    let mut sregs: kvm_sregs = vcpu
        .get_sregs()
        .map_err(|e| RegsError::Kvm("KVM_GET_SREGS", e))?;
    let code = kvm_segment_from_gdt(1);
    let data = kvm_segment_from_gdt(2);
    let tss = kvm_segment_from_gdt(3);
    sregs.gdt.base = BOOT_GDT_START;
    sregs.gdt.limit = (std::mem::size_of_val(&GDT) - 1) as u16;
    sregs.idt.base = BOOT_IDT_START;
    sregs.idt.limit = 7;
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = tss;
    sregs.cr0 = X86_CR0_PE | X86_CR0_ET | X86_CR0_PG;
    sregs.cr3 = PML4_START;
    sregs.cr4 = X86_CR4_PAE;
    sregs.efer = EFER_LME | EFER_LMA;
    vcpu.set_sregs(&sregs)
        .map_err(|e| RegsError::Kvm("KVM_SET_SREGS", e))?;

    let regs = kvm_regs {
        rflags: 0x2,
        rip: entry.raw_value(),
        rsp: BOOT_STACK_POINTER,
        rbp: BOOT_STACK_POINTER,
        rsi: ZERO_PAGE_START,
        ..Default::default()
    };
    vcpu.set_regs(&regs)
        .map_err(|e| RegsError::Kvm("KVM_SET_REGS", e))
}

/// x87 and SSE control words as after a reset, for every vCPU.
pub fn setup_fpu(vcpu: &VcpuFd) -> Result<(), RegsError> {
    let fpu = kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    };
    vcpu.set_fpu(&fpu)
        .map_err(|e| RegsError::Kvm("KVM_SET_FPU", e))
}

const MSR_IA32_SYSENTER_CS: u32 = 0x174;
const MSR_IA32_SYSENTER_ESP: u32 = 0x175;
const MSR_IA32_SYSENTER_EIP: u32 = 0x176;
const MSR_STAR: u32 = 0xc000_0081;
const MSR_LSTAR: u32 = 0xc000_0082;
const MSR_CSTAR: u32 = 0xc000_0083;
const MSR_SYSCALL_MASK: u32 = 0xc000_0084;
const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
const MSR_IA32_TSC: u32 = 0x10;
const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
const MSR_IA32_MISC_ENABLE_FAST_STRING: u64 = 1;
const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;
/// MTRRs enabled, default memory type write-back.
const MTRR_ENABLE_WB: u64 = (1 << 11) | 6;

/// Model-specific registers every vCPU starts with.
pub fn setup_msrs(vcpu: &VcpuFd) -> Result<(), RegsError> {
    let entries: Vec<kvm_msr_entry> = [
        (MSR_IA32_SYSENTER_CS, 0),
        (MSR_IA32_SYSENTER_ESP, 0),
        (MSR_IA32_SYSENTER_EIP, 0),
        (MSR_STAR, 0),
        (MSR_CSTAR, 0),
        (MSR_KERNEL_GS_BASE, 0),
        (MSR_SYSCALL_MASK, 0),
        (MSR_LSTAR, 0),
        (MSR_IA32_TSC, 0),
        (MSR_IA32_MISC_ENABLE, MSR_IA32_MISC_ENABLE_FAST_STRING),
        (MSR_MTRR_DEF_TYPE, MTRR_ENABLE_WB),
    ]
    .iter()
    .map(|&(index, data)| kvm_msr_entry {
        index,
        data,
        ..Default::default()
    })
    .collect();
    let msrs =
        Msrs::from_entries(&entries).map_err(|_| RegsError::PartialMsrs(0, entries.len()))?;
    let set = vcpu
        .set_msrs(&msrs)
        .map_err(|e| RegsError::Kvm("KVM_SET_MSRS", e))?;
    if set != entries.len() {
        return Err(RegsError::PartialMsrs(set, entries.len()));
    }
    Ok(())
}

const APIC_LVT0: usize = 0x350;
const APIC_LVT1: usize = 0x360;
const APIC_MODE_NMI: u32 = 0x4;
const APIC_MODE_EXTINT: u32 = 0x7;

/// Wires LINT0 to the PIC (ExtINT) and LINT1 to NMI, as firmware would.
pub fn setup_lint(vcpu: &VcpuFd) -> Result<(), RegsError> {
    let mut lapic = vcpu
        .get_lapic()
        .map_err(|e| RegsError::Kvm("KVM_GET_LAPIC", e))?;
    for (offset, mode) in [(APIC_LVT0, APIC_MODE_EXTINT), (APIC_LVT1, APIC_MODE_NMI)] {
        let reg = &mut lapic.regs[offset..offset + 4];
        let mut value =
            u32::from_le_bytes([reg[0] as u8, reg[1] as u8, reg[2] as u8, reg[3] as u8]);
        value = (value & !0x700) | (mode << 8);
        for (dst, src) in reg.iter_mut().zip(value.to_le_bytes()) {
            *dst = src as _;
        }
    }
    vcpu.set_lapic(&lapic)
        .map_err(|e| RegsError::Kvm("KVM_SET_LAPIC", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestMemoryMmap;

    #[test]
    fn gdt_code_segment_is_64_bit() {
        let cs = kvm_segment_from_gdt(1);
        assert_eq!((cs.l, cs.db, cs.present, cs.selector), (1, 0, 1, 0x8));
        assert_eq!(cs.limit, 0xffff_ffff);
        let ds = kvm_segment_from_gdt(2);
        assert_eq!((ds.db, ds.s, ds.type_), (1, 1, 3));
    }

    #[test]
    fn page_tables_identity_map_4_gib() {
        let mem: GuestMemoryMmap =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
        write_boot_structures(&mem).unwrap();
        let pml4: u64 = mem.read_obj(GuestAddress(PML4_START)).unwrap();
        assert_eq!(pml4 & !0xfff, PDPTE_START);
        let last_pd: u64 = mem.read_obj(GuestAddress(PDPTE_START + 3 * 8)).unwrap();
        let last: u64 = mem
            .read_obj(GuestAddress((last_pd & !0xfff) + 511 * 8))
            .unwrap();
        assert_eq!(last & !0xfff, 0xffe0_0000);
        assert_eq!(last & 0x83, 0x83);
    }
}
