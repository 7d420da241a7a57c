//! Intel MultiProcessor Specification (1.4) table: the floating pointer
//! and the base configuration table (processors, the ISA bus, the IOAPIC
//! and its interrupt assignments, the local interrupts).
//!
//! Linux uses the MADT when ACPI is on, but it looks for this table first
//! on every boot, and each step of its scan remaps the rest of the window
//! it searches: without a table it walks all of 0xF0000..0x100000 in 16-byte
//! steps, some 4,000 remaps of up to 16 pages each, which under nested or
//! shadow paging costs seconds (2.6 s in the testbed). The floating pointer
//! therefore sits at the start of the last KiB of base memory (0x9FC00),
//! the second place Linux looks, and the scan stops there. With `acpi=off`
//! the table is what the guest enumerates CPUs and interrupts from, so it
//! says the same as the MADT.

use vm_memory::{Bytes, GuestAddress, GuestMemory, GuestMemoryError};

use crate::checksum::checksum_byte;
use crate::layout;

/// Floating pointer structure: "_MP_", 16 bytes.
const FLOATING_POINTER_LEN: usize = 16;
/// Configuration table header: "PCMP", 44 bytes.
const HEADER_LEN: usize = 44;
/// Processor entry length; every other base entry is 8 bytes.
const PROCESSOR_LEN: usize = 20;
const ENTRY_LEN: usize = 8;
/// MP specification revision 1.4.
const SPEC_REV: u8 = 4;
/// Base entry types.
const TYPE_PROCESSOR: u8 = 0;
const TYPE_BUS: u8 = 1;
const TYPE_IOAPIC: u8 = 2;
const TYPE_IO_INTERRUPT: u8 = 3;
const TYPE_LOCAL_INTERRUPT: u8 = 4;
/// Interrupt types of I/O and local interrupt entries.
const INT_VECTORED: u8 = 0;
const INT_NMI: u8 = 1;
const INT_EXTINT: u8 = 3;
/// Processor flags: usable, bootstrap processor.
const CPU_ENABLED: u8 = 1;
const CPU_BSP: u8 = 2;
/// Local APIC and IOAPIC versions (integrated APIC; 82093AA-style IOAPIC).
const LAPIC_VERSION: u8 = 0x14;
const IOAPIC_VERSION: u8 = 0x11;
const IOAPIC_ENABLED: u8 = 1;
/// ISA interrupts 0..16 are assigned (identity, IRQ 0 to pin 2 as the
/// MADT's override says).
const ISA_IRQS: u8 = 16;
/// Local APIC id meaning "every processor" in a local interrupt entry.
const ALL_LAPICS: u8 = 0xff;
/// Processors an entry can name: APIC ids are one byte and 0xff is "all".
pub const MAX_CPUS: usize = 255;

/// Where the floating pointer is written (the second window Linux scans).
pub const MPTABLE_START: u64 = layout::EBDA_START;
/// Largest table: the pointer, the header and every entry for
/// [`MAX_CPUS`] processors.
pub const MPTABLE_MAX_LEN: usize = FLOATING_POINTER_LEN
    + HEADER_LEN
    + MAX_CPUS * PROCESSOR_LEN
    + ENTRY_LEN * (2 + ISA_IRQS as usize + 2);
// The table stays in the reserved BIOS area, below the ACPI tables.
const _: () = assert!(MPTABLE_START + MPTABLE_MAX_LEN as u64 <= layout::ACPI_TABLES_START);

/// Errors while writing the MP table.
#[derive(Debug, thiserror::Error)]
pub enum MptableError {
    /// More processors than one-byte APIC ids can name.
    #[error("{0} vCPUs do not fit an MP table (at most {MAX_CPUS})")]
    TooManyCpus(usize),
    /// Writing the table to guest memory failed.
    #[error("writing the MP table: {0}")]
    GuestMemory(#[from] GuestMemoryError),
}

fn processor(apic_id: u8, enabled: bool, signature: u32, features: u32) -> [u8; PROCESSOR_LEN] {
    let mut e = [0u8; PROCESSOR_LEN];
    e[0] = TYPE_PROCESSOR;
    e[1] = apic_id;
    e[2] = LAPIC_VERSION;
    e[3] = if enabled { CPU_ENABLED } else { 0 } | if apic_id == 0 { CPU_BSP } else { 0 };
    e[4..8].copy_from_slice(&signature.to_le_bytes());
    e[8..12].copy_from_slice(&features.to_le_bytes());
    e
}

fn io_interrupt(kind: u8, bus_irq: u8, pin: u8) -> [u8; ENTRY_LEN] {
    // Flags 0: conforms to the bus (ISA: edge, active high).
    [
        TYPE_IO_INTERRUPT,
        kind,
        0,
        0,
        0,
        bus_irq,
        layout::IOAPIC_ID,
        pin,
    ]
}

fn local_interrupt(kind: u8, lint: u8) -> [u8; ENTRY_LEN] {
    [TYPE_LOCAL_INTERRUPT, kind, 0, 0, 0, 0, ALL_LAPICS, lint]
}

/// The processor signature (CPUID.1 EAX) and feature flags (CPUID.1 EDX)
/// of the host, which the guest's CPUID also reports.
fn cpu_signature() -> (u32, u32) {
    let r = std::arch::x86_64::__cpuid(1);
    (r.eax, r.edx)
}

/// The configuration table for `boot_vcpus` running and up to `max_vcpus`
/// possible processors (those beyond the boot ones are listed unusable).
fn config_table(boot_vcpus: usize, max_vcpus: usize) -> Vec<u8> {
    let (signature, features) = cpu_signature();
    let mut entries = Vec::new();
    let mut count: u16 = 0;
    for cpu in 0..max_vcpus.max(boot_vcpus) {
        // `cpu` < MAX_CPUS, checked by the caller.
        entries.extend_from_slice(&processor(cpu as u8, cpu < boot_vcpus, signature, features));
        count += 1;
    }
    entries.extend_from_slice(&[TYPE_BUS, 0, b'I', b'S', b'A', b' ', b' ', b' ']);
    let ioapic = (layout::IOAPIC_START as u32).to_le_bytes();
    entries.extend_from_slice(&[
        TYPE_IOAPIC,
        layout::IOAPIC_ID,
        IOAPIC_VERSION,
        IOAPIC_ENABLED,
    ]);
    entries.extend_from_slice(&ioapic);
    count += 2;
    // The 8259's output on pin 0 (virtual wire), the PIT's IRQ 0 on pin 2,
    // every other ISA IRQ on its own pin.
    entries.extend_from_slice(&io_interrupt(INT_EXTINT, 0, 0));
    entries.extend_from_slice(&io_interrupt(INT_VECTORED, 0, 2));
    count += 2;
    for irq in 1..ISA_IRQS {
        if irq != 2 {
            entries.extend_from_slice(&io_interrupt(INT_VECTORED, irq, irq));
            count += 1;
        }
    }
    entries.extend_from_slice(&local_interrupt(INT_EXTINT, 0));
    entries.extend_from_slice(&local_interrupt(INT_NMI, 1));
    count += 2;

    let len = (HEADER_LEN + entries.len()) as u16;
    let mut t = Vec::with_capacity(len as usize);
    t.extend_from_slice(b"PCMP");
    t.extend_from_slice(&len.to_le_bytes());
    t.push(SPEC_REV);
    t.push(0); // checksum, below
    t.extend_from_slice(b"CLOUDH  ");
    t.extend_from_slice(b"CHMPTABLE   ");
    t.extend_from_slice(&0u32.to_le_bytes()); // no OEM table
    t.extend_from_slice(&0u16.to_le_bytes());
    t.extend_from_slice(&count.to_le_bytes());
    t.extend_from_slice(&(layout::APIC_START as u32).to_le_bytes());
    t.extend_from_slice(&[0u8; 4]); // no extended entries
    t.extend_from_slice(&entries);
    t[7] = checksum_byte(&t);
    t
}

fn floating_pointer(table_addr: u32) -> [u8; FLOATING_POINTER_LEN] {
    let mut p = [0u8; FLOATING_POINTER_LEN];
    p[0..4].copy_from_slice(b"_MP_");
    p[4..8].copy_from_slice(&table_addr.to_le_bytes());
    p[8] = 1; // length in 16-byte units
    p[9] = SPEC_REV;
    // p[11] = 0: a configuration table follows (no default configuration);
    // p[12] = 0: virtual wire mode, no IMCR.
    p[10] = checksum_byte(&p);
    p
}

/// Writes the MP floating pointer and configuration table at
/// [`MPTABLE_START`] for `boot_vcpus` running and `max_vcpus` possible
/// vCPUs (APIC ids `0..`, as the MADT).
pub fn write_mptable<M: GuestMemory>(
    mem: &M,
    boot_vcpus: usize,
    max_vcpus: usize,
) -> Result<(), MptableError> {
    let cpus = boot_vcpus.max(max_vcpus);
    if cpus > MAX_CPUS {
        return Err(MptableError::TooManyCpus(cpus));
    }
    let table_addr = MPTABLE_START + FLOATING_POINTER_LEN as u64;
    mem.write_slice(
        &floating_pointer(table_addr as u32),
        GuestAddress(MPTABLE_START),
    )?;
    mem.write_slice(
        &config_table(boot_vcpus, max_vcpus),
        GuestAddress(table_addr),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::sum;
    use crate::test_util::mem;
    use vm_memory::GuestMemoryMmap;

    /// Finds the floating pointer as Linux does: 16-byte steps through the
    /// first KiB, then the last KiB of base memory, then the BIOS ROM.
    fn scan(mem: &GuestMemoryMmap) -> Option<u64> {
        for (base, len) in [(0u64, 0x400u64), (639 * 0x400, 0x400), (0xf_0000, 0x1_0000)] {
            for a in (base..base + len).step_by(16) {
                let mut p = [0u8; 16];
                mem.read_slice(&mut p, GuestAddress(a)).unwrap();
                if &p[0..4] == b"_MP_" && p[8] == 1 && sum(&p) == 0 && (p[9] == 1 || p[9] == 4) {
                    return Some(a);
                }
            }
        }
        None
    }

    /// The configuration table the pointer at `fp` names.
    fn table(mem: &GuestMemoryMmap, fp: u64) -> Vec<u8> {
        let addr: u32 = mem.read_obj(GuestAddress(fp + 4)).unwrap();
        let len: u16 = mem.read_obj(GuestAddress(u64::from(addr) + 4)).unwrap();
        let mut t = vec![0u8; usize::from(len)];
        mem.read_slice(&mut t, GuestAddress(u64::from(addr)))
            .unwrap();
        t
    }

    /// (type, bytes) of every base entry, walked by type-dependent length.
    fn entries(t: &[u8]) -> Vec<Vec<u8>> {
        let count = u16::from_le_bytes([t[34], t[35]]) as usize;
        let mut out = Vec::new();
        let mut off = HEADER_LEN;
        for _ in 0..count {
            let len = if t[off] == TYPE_PROCESSOR {
                PROCESSOR_LEN
            } else {
                ENTRY_LEN
            };
            out.push(t[off..off + len].to_vec());
            off += len;
        }
        assert_eq!(off, t.len(), "entry count and table length agree");
        out
    }

    #[test]
    fn linux_finds_the_pointer_in_its_second_window() {
        let m = mem();
        write_mptable(&m, 2, 2).unwrap();
        assert_eq!(scan(&m), Some(0x9_fc00));
    }

    #[test]
    fn header_and_checksums_are_valid() {
        let m = mem();
        write_mptable(&m, 4, 8).unwrap();
        let t = table(&m, MPTABLE_START);
        assert_eq!(&t[0..4], b"PCMP");
        assert_eq!(t[6], SPEC_REV);
        assert_eq!(sum(&t), 0);
        let lapic = u32::from_le_bytes([t[36], t[37], t[38], t[39]]);
        assert_eq!(u64::from(lapic), layout::APIC_START);
    }

    #[test]
    fn processors_match_the_madt() {
        let m = mem();
        write_mptable(&m, 2, 4).unwrap();
        let t = table(&m, MPTABLE_START);
        let cpus: Vec<(u8, u8)> = entries(&t)
            .iter()
            .filter(|e| e[0] == TYPE_PROCESSOR)
            .map(|e| (e[1], e[3]))
            .collect();
        assert_eq!(
            cpus,
            vec![(0, CPU_ENABLED | CPU_BSP), (1, CPU_ENABLED), (2, 0), (3, 0)]
        );
    }

    #[test]
    fn isa_interrupts_reach_the_ioapic_as_the_madt_says() {
        let m = mem();
        write_mptable(&m, 1, 1).unwrap();
        let t = table(&m, MPTABLE_START);
        let all = entries(&t);
        let ioapics: Vec<_> = all.iter().filter(|e| e[0] == TYPE_IOAPIC).collect();
        assert_eq!(ioapics.len(), 1);
        assert_eq!(ioapics[0][1], layout::IOAPIC_ID);
        let addr = u32::from_le_bytes([ioapics[0][4], ioapics[0][5], ioapics[0][6], ioapics[0][7]]);
        assert_eq!(u64::from(addr), layout::IOAPIC_START);
        let vectored: Vec<(u8, u8)> = all
            .iter()
            .filter(|e| e[0] == TYPE_IO_INTERRUPT && e[1] == INT_VECTORED)
            .map(|e| (e[5], e[7]))
            .collect();
        // IRQ 0 on pin 2, IRQ 2 (the cascade) not assigned, the rest 1:1.
        assert!(vectored.contains(&(0, 2)));
        assert!(vectored.iter().all(|&(irq, pin)| irq == 0 || irq == pin));
        assert_eq!(vectored.len(), 15);
        let lints: Vec<(u8, u8)> = all
            .iter()
            .filter(|e| e[0] == TYPE_LOCAL_INTERRUPT)
            .map(|e| (e[1], e[7]))
            .collect();
        assert_eq!(lints, vec![(INT_EXTINT, 0), (INT_NMI, 1)]);
    }

    #[test]
    fn the_largest_table_fits_below_the_acpi_tables() {
        let m = mem();
        write_mptable(&m, MAX_CPUS, MAX_CPUS).unwrap();
        let t = table(&m, MPTABLE_START);
        assert_eq!(sum(&t), 0);
        assert_eq!(FLOATING_POINTER_LEN + t.len(), MPTABLE_MAX_LEN);
        assert!(matches!(
            write_mptable(&m, MAX_CPUS + 1, 0),
            Err(MptableError::TooManyCpus(256))
        ));
    }
}
