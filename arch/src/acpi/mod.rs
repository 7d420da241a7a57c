//! ACPI tables for an x86-64 guest on a hardware-reduced ACPI platform.
//!
//! [`build_tables`] turns an [`AcpiConfig`] into table images placed in
//! `[layout::ACPI_TABLES_START, layout::ACPI_TABLES_END)`;
//! [`create_acpi_tables`] also writes them into guest memory and returns the
//! RSDP address (for `boot_params.acpi_rsdp_addr`).
//!
//! ```text
//! RSDP (rev 2, first in the area, so the BIOS-area scan finds it too)
//!  └─ XSDT ─┬─ FACP (FADT 6.5, HW_REDUCED_ACPI) ── X_DSDT ── DSDT
//!           ├─ APIC (MADT)
//!           ├─ SRAT, SLIT, HMAT   (only when NUMA nodes are configured)
//!           └─ MCFG               (only with a PCI root bus, `pci.rs`)
//! ```
//!
//! Each table lives in its own file: `fadt.rs`, `dsdt.rs`, `madt.rs`,
//! `numa.rs` (SRAT + SLIT) and `hmat.rs`; `validate.rs` checks the
//! configuration and resolves the NUMA topology they share.

mod dsdt;
mod error;
mod fadt;
mod hmat;
mod madt;
mod numa;
mod pci;
mod pci_hotplug;
#[cfg(test)]
mod test_util;
mod validate;

use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::xsdt::XSDT;
use acpi_tables::Aml;
use vm_memory::{
    Bytes, GuestAddress, GuestMemory, GuestMemoryBackend, GuestMemoryRegion, Permissions,
};

use crate::layout;
pub use error::AcpiError;

/// OEM ID written in every table header.
pub const OEM_ID: [u8; 6] = *b"CLOUDH";
/// OEM revision written in every table header.
const OEM_REVISION: u32 = 1;
/// Tables are placed on this alignment inside the ACPI area (the RSDP needs
/// 16 for the BIOS-area scan; the others merely look tidy in a dump).
const TABLE_ALIGNMENT: u64 = 16;

/// Proximity domains must be below this. Linux maps PXMs through an array of
/// `MAX_PXM_DOMAINS` (at least 256) entries and ignores larger ones; the
/// SLIT is indexed by proximity domain, so this also bounds its size.
pub const MAX_PROXIMITY_DOMAINS: u32 = 256;
/// HMAT access latency of a node with vCPUs when none is configured.
pub const DEFAULT_CPU_NODE_LATENCY_NS: u64 = 80;
/// HMAT access bandwidth of a node with vCPUs when none is configured.
pub const DEFAULT_CPU_NODE_BANDWIDTH_MBPS: u64 = 20_000;
/// Largest accepted HMAT latency. Linux computes `entry * base_unit` in 32
/// bits of picoseconds and drops values that overflow (~4.29 ms).
pub const MAX_LATENCY_NS: u64 = 4_000_000;
/// Largest accepted HMAT bandwidth (keeps `entry * base_unit` in 32 bits).
pub const MAX_BANDWIDTH_MBPS: u64 = 4_000_000_000;

/// What the guest's ACPI tables describe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AcpiConfig {
    /// Number of vCPUs; their APIC ids (and ACPI processor UIDs) are
    /// `0..vcpus`.
    pub vcpus: u8,
    /// Possible vCPUs (`max_vcpus`): those from `vcpus` up to here get
    /// disabled, online-capable MADT entries. 0 (or `vcpus`) means none.
    pub max_vcpus: u8,
    /// NUMA nodes. Empty means a single implicit node and no SRAT, SLIT or
    /// HMAT. vCPUs listed in no node join the first node that lists vCPUs
    /// (or the first node, if none does).
    pub numa: Vec<NumaNodeDesc>,
    /// virtio-mmio transports, described in the DSDT as `LNRO0005` devices.
    pub virtio_mmio: Vec<VirtioMmioDesc>,
    /// The PCI root bus (virtio-pci), described by the MCFG table and a
    /// host bridge in the DSDT. None: no PCI.
    pub pci: Option<PciHostDesc>,
}

/// The PCI host bridge of segment 0 (bus 0 only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PciHostDesc {
    /// ECAM base of bus 0.
    pub ecam_base: u64,
    /// ECAM size (1 MiB per bus).
    pub ecam_size: u64,
    /// Base of the 32-bit memory window the BARs are in.
    pub mmio_base: u64,
    /// Size of that window.
    pub mmio_size: u64,
    /// First of the eight configuration mechanism #1 ports (0xcf8).
    pub config_io_port: u16,
}

/// One guest NUMA node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaNodeDesc {
    /// ACPI proximity domain (the guest NUMA id); below
    /// [`MAX_PROXIMITY_DOMAINS`] and unique.
    pub proximity_domain: u32,
    /// vCPUs (APIC ids) of this node; empty for a memory-only node.
    pub cpus: Vec<u8>,
    /// Guest-physical RAM ranges of this node as `(base, length)`. All
    /// nodes' ranges together must cover the guest's RAM: Linux ignores the
    /// SRAT (no NUMA at all) when more than 1 MiB of e820 RAM is outside it.
    pub memory: Vec<(u64, u64)>,
    /// Guest-physical ranges that memory may be hot-plugged into later
    /// (virtio-mem regions), as `(base, length)`: SRAT memory affinity
    /// entries marked hot-pluggable, so the guest knows their node.
    pub hotplug_memory: Vec<(u64, u64)>,
    /// SLIT distances to other nodes as `(destination domain, distance)`.
    /// Unlisted pairs use the reverse direction if that is listed, else 20;
    /// the distance to itself is always 10.
    pub distances: Vec<(u32, u8)>,
    /// HMAT access latency of this node's memory from the vCPUs, in ns.
    /// Default: [`DEFAULT_CPU_NODE_LATENCY_NS`] for a node with vCPUs, twice
    /// the latency of its initiator node for a memory-only node.
    pub access_latency_ns: Option<u64>,
    /// HMAT access bandwidth of this node's memory from the vCPUs, in MB/s.
    /// Default: [`DEFAULT_CPU_NODE_BANDWIDTH_MBPS`] for a node with vCPUs,
    /// half the bandwidth of its initiator node for a memory-only node.
    pub access_bandwidth_mbps: Option<u64>,
}

/// One virtio-mmio transport window and its interrupt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VirtioMmioDesc {
    /// Guest-physical base address of the register window.
    pub base: u64,
    /// Size of the register window in bytes.
    pub size: u64,
    /// IOAPIC GSI of the device (edge-triggered, active high).
    pub gsi: u32,
}

/// Trigger mode of an interrupt; the DSDT resource descriptors and the MADT
/// interrupt source overrides are both derived from these so they agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    Edge,
    Level,
}

/// The Generic Event Device's interrupt is level-triggered, active high: the
/// line stays up while its event register is non-zero (it is read-to-clear).
const GED_TRIGGER: Trigger = Trigger::Level;

/// virtio-mmio interrupts are edge-triggered, active high.
///
/// QEMU's microvm declares them level-triggered, because QEMU models a real
/// level line that drops when the driver writes InterruptACK. Firecracker
/// declares them edge-triggered (`Interrupt(..., Edge, ActiveHigh, ...)` in
/// its DSDT), because it injects them with a plain KVM irqfd, which pulses
/// the line (assert + immediate deassert). `layout::VIRTIO_MMIO_FIRST_IRQ`
/// documents these GSIs as edge-triggered too. With a pulse, a
/// level-triggered IOAPIC pin can lose interrupts: a pulse arriving while
/// the previous one is still un-EOIed (remote IRR set) is dropped by KVM's
/// IOAPIC, whereas an edge pulse is latched in the LAPIC IRR and delivered
/// after the EOI.
/// Switch to `Level` only together with a resample irqfd / KVM_IRQ_LINE.
const VIRTIO_MMIO_TRIGGER: Trigger = Trigger::Edge;

/// GSIs the platform uses itself and never hands to virtio-mmio devices:
/// 0 (wired to the 8259's output on PCs), 2 (ISA IRQ0, the PIT, through the
/// MADT override), COM1's and the GED's.
fn is_platform_gsi(gsi: u32) -> bool {
    gsi == 0 || gsi == 2 || gsi == layout::COM1_IRQ || gsi == layout::GED_IRQ
}

/// Every GSI the DSDT describes, with its trigger mode (all active high).
fn device_interrupts(cfg: &AcpiConfig) -> Vec<(u32, Trigger)> {
    let mut irqs = vec![
        (layout::COM1_IRQ, Trigger::Edge),
        (layout::GED_IRQ, GED_TRIGGER),
    ];
    irqs.extend(cfg.virtio_mmio.iter().map(|d| (d.gsi, VIRTIO_MMIO_TRIGGER)));
    irqs
}

/// One table image and where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcpiTable {
    /// Table signature; the RSDP (whose image starts with `"RSD PTR "`) is
    /// labelled `"RSDP"`.
    pub signature: [u8; 4],
    /// Guest-physical address of the image.
    pub addr: GuestAddress,
    /// The table bytes, checksummed.
    pub bytes: Vec<u8>,
}

/// All table images of a guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcpiTables {
    /// Address of the RSDP (also `tables[0]`).
    pub rsdp: GuestAddress,
    /// Every table, RSDP first, in address order.
    pub tables: Vec<AcpiTable>,
}

impl AcpiTables {
    /// The table with the given signature, if present.
    pub fn get(&self, signature: &[u8; 4]) -> Option<&AcpiTable> {
        self.tables.iter().find(|t| &t.signature == signature)
    }
}

/// Builds every ACPI table for `cfg`, placed in the layout's ACPI area.
pub fn build_tables(cfg: &AcpiConfig) -> Result<AcpiTables, AcpiError> {
    build_tables_in(
        cfg,
        GuestAddress(layout::ACPI_TABLES_START),
        GuestAddress(layout::ACPI_TABLES_END),
    )
}

/// Builds the tables and writes them into guest memory; returns the address
/// of the RSDP, to be stored in `boot_params.acpi_rsdp_addr`.
pub fn create_acpi_tables<M: GuestMemory>(
    mem: &M,
    cfg: &AcpiConfig,
) -> Result<GuestAddress, AcpiError> {
    let tables = build_tables(cfg)?;
    warn_on_numa_memory_mismatch(mem, cfg);
    for table in &tables.tables {
        mem.write_slice(&table.bytes, table.addr)
            .map_err(|source| AcpiError::GuestMemory {
                table: String::from_utf8_lossy(&table.signature).into_owned(),
                addr: table.addr.0,
                source,
            })?;
    }
    log::debug!(
        "ACPI: {} tables written, RSDP at {:#x}",
        tables.tables.len(),
        tables.rsdp.0
    );
    Ok(tables.rsdp)
}

/// NUMA memory the guest does not have, or guest memory no node has, is
/// legal ACPI but most likely a VMM bug; the latter silently disables NUMA
/// in Linux, so say so.
fn warn_on_numa_memory_mismatch<M: GuestMemory>(mem: &M, cfg: &AcpiConfig) {
    if cfg.numa.is_empty() {
        return;
    }
    let numa_ranges: Vec<(u64, u64)> = cfg.numa.iter().flat_map(|n| n.memory.clone()).collect();
    for &(base, size) in &numa_ranges {
        let backed = usize::try_from(size)
            .is_ok_and(|len| mem.check_range(GuestAddress(base), len, Permissions::Read));
        if !backed {
            log::warn!("NUMA memory {base:#x}+{size:#x} is not (all) guest memory");
        }
    }
    if let Some(physical) = mem.physical_memory() {
        let regions: Vec<(u64, u64)> = physical
            .iter()
            .map(|r| (r.start_addr().0, r.len()))
            .collect();
        // Hot-pluggable ranges (virtio-mem regions) are guest memory but
        // not e820 RAM: Linux does not count them against the SRAT.
        let mut described = numa_ranges.clone();
        described.extend(cfg.numa.iter().flat_map(|n| n.hotplug_memory.clone()));
        let uncovered = validate::uncovered_bytes(&regions, &described);
        if uncovered >= 1 << 20 {
            log::warn!(
                "{} KiB of guest memory is in no NUMA node; Linux will ignore the SRAT",
                uncovered >> 10
            );
        }
    }
}

/// A fresh table with the common header fields filled in.
fn new_sdt(signature: [u8; 4], revision: u8, table_id: [u8; 8]) -> Sdt {
    Sdt::new(signature, 36, revision, OEM_ID, table_id, OEM_REVISION)
}

/// Serializes anything the `acpi_tables` crate can emit.
fn aml_bytes(aml: &dyn Aml) -> Vec<u8> {
    let mut bytes = Vec::new();
    aml.to_aml_bytes(&mut bytes);
    bytes
}

/// Hands out aligned addresses in the ACPI area; keeps counting past its end
/// so the error can say how much room was needed.
struct Placer {
    start: u64,
    end: u64,
    next: u64,
    tables: Vec<AcpiTable>,
}

impl Placer {
    fn new(start: GuestAddress, end: GuestAddress) -> Self {
        Placer {
            start: start.0,
            end: end.0,
            next: start.0,
            tables: Vec::new(),
        }
    }

    fn reserve(&mut self, len: usize) -> u64 {
        let addr = self.next.next_multiple_of(TABLE_ALIGNMENT);
        self.next = addr.saturating_add(len as u64);
        addr
    }

    fn place(&mut self, signature: [u8; 4], bytes: Vec<u8>) -> u64 {
        let addr = self.reserve(bytes.len());
        self.tables.push(AcpiTable {
            signature,
            addr: GuestAddress(addr),
            bytes,
        });
        addr
    }

    fn finish(self) -> Result<Vec<AcpiTable>, AcpiError> {
        if self.next > self.end {
            return Err(AcpiError::TablesTooLarge {
                needed: self.next - self.start,
                available: self.end.saturating_sub(self.start),
            });
        }
        Ok(self.tables)
    }
}

/// [`build_tables`] for an arbitrary area `[start, end)`; `start` must be
/// 16-byte aligned (the RSDP goes there).
fn build_tables_in(
    cfg: &AcpiConfig,
    start: GuestAddress,
    end: GuestAddress,
) -> Result<AcpiTables, AcpiError> {
    if cfg.vcpus == 0 {
        return Err(AcpiError::NoVcpus);
    }
    validate::check_virtio_mmio(cfg)?;
    validate::check_pci(cfg)?;
    let numa = validate::resolve_numa(cfg)?;

    let mut placer = Placer::new(start, end);
    let rsdp_addr = placer.reserve(Rsdp::len());
    let dsdt_addr = placer.place(*b"DSDT", dsdt::build_dsdt(cfg));
    let mut xsdt_entries = vec![
        placer.place(*b"FACP", fadt::build_fadt(dsdt_addr)),
        placer.place(*b"APIC", madt::build_madt(cfg)),
    ];
    if let Some(topology) = &numa {
        xsdt_entries.push(placer.place(*b"SRAT", numa::build_srat(topology)));
        xsdt_entries.push(placer.place(*b"SLIT", numa::build_slit(topology)));
        xsdt_entries.push(placer.place(*b"HMAT", hmat::build_hmat(topology)));
    }
    if let Some(pci) = &cfg.pci {
        xsdt_entries.push(placer.place(*b"MCFG", pci::build_mcfg(pci)));
    }
    let mut xsdt = XSDT::new(OEM_ID, *b"CHXSDT  ", OEM_REVISION);
    for addr in xsdt_entries {
        xsdt.add_entry(addr);
    }
    let xsdt_addr = placer.place(*b"XSDT", aml_bytes(&xsdt));
    let mut tables = placer.finish()?;
    tables.insert(
        0,
        AcpiTable {
            signature: *b"RSDP",
            addr: GuestAddress(rsdp_addr),
            bytes: aml_bytes(&Rsdp::new(OEM_ID, xsdt_addr)),
        },
    );
    Ok(AcpiTables {
        rsdp: GuestAddress(rsdp_addr),
        tables,
    })
}

#[cfg(test)]
mod tests {
    use super::test_util::*;
    use super::*;
    use vm_memory::GuestMemoryMmap;

    fn configs() -> Vec<AcpiConfig> {
        vec![
            AcpiConfig {
                vcpus: 1,
                ..Default::default()
            },
            AcpiConfig {
                vcpus: 4,
                virtio_mmio: virtio_devices(3),
                ..Default::default()
            },
            two_node_config(),
            three_node_config(),
        ]
    }

    #[test]
    fn every_table_checksums_to_zero_and_its_length_field_matches_its_size() {
        for cfg in configs() {
            let tables = build_tables(&cfg).expect("tables");
            for t in tables.tables.iter().filter(|t| &t.signature != b"RSDP") {
                assert_eq!(checksum(&t.bytes), 0, "{:?}", t.signature);
                assert_eq!(
                    le32(&t.bytes, 4) as usize,
                    t.bytes.len(),
                    "{:?}",
                    t.signature
                );
                assert_eq!(&t.bytes[0..4], &t.signature);
                assert_eq!(&t.bytes[10..16], &OEM_ID);
            }
        }
    }

    #[test]
    fn rsdp_is_first_in_the_bios_area_with_valid_checksums() {
        let tables = build_tables(&two_node_config()).expect("tables");
        assert_eq!(tables.rsdp, GuestAddress(layout::ACPI_TABLES_START));
        assert_eq!(tables.rsdp.0 % 16, 0);
        let rsdp = &tables.tables[0];
        assert_eq!(rsdp.addr, tables.rsdp);
        let b = &rsdp.bytes;
        assert_eq!(b.len(), 36);
        assert_eq!(&b[0..8], b"RSD PTR ");
        assert_eq!(b[15], 2, "revision");
        assert_eq!(le32(b, 20), 36, "length");
        assert_eq!(checksum(&b[0..20]), 0, "ACPI 1.0 checksum");
        assert_eq!(checksum(b), 0, "extended checksum");
        assert_eq!(le64(b, 24), tables.get(b"XSDT").expect("xsdt").addr.0);
    }

    #[test]
    fn xsdt_points_at_every_table_except_dsdt() {
        for cfg in configs() {
            let tables = build_tables(&cfg).expect("tables");
            let xsdt = &tables.get(b"XSDT").expect("xsdt").bytes;
            let entries: Vec<u64> = (36..xsdt.len()).step_by(8).map(|o| le64(xsdt, o)).collect();
            let mut expected: Vec<u64> = tables
                .tables
                .iter()
                .filter(|t| !matches!(&t.signature, b"RSDP" | b"XSDT" | b"DSDT"))
                .map(|t| t.addr.0)
                .collect();
            expected.sort_unstable();
            let mut got = entries.clone();
            got.sort_unstable();
            assert_eq!(got, expected);
            let with_numa = !cfg.numa.is_empty();
            for sig in [b"SRAT", b"SLIT", b"HMAT"] {
                assert_eq!(tables.get(sig).is_some(), with_numa, "{sig:?}");
            }
        }
    }

    #[test]
    fn fadt_x_dsdt_points_at_the_dsdt() {
        let tables = build_tables(&two_node_config()).expect("tables");
        let fadt = &tables.get(b"FACP").expect("fadt").bytes;
        assert_eq!(le64(fadt, 140), tables.get(b"DSDT").expect("dsdt").addr.0);
    }

    #[test]
    fn tables_are_aligned_disjoint_and_inside_the_acpi_area() {
        for cfg in configs() {
            let tables = build_tables(&cfg).expect("tables");
            let mut prev_end = layout::ACPI_TABLES_START;
            for t in &tables.tables {
                assert_eq!(t.addr.0 % TABLE_ALIGNMENT, 0);
                assert!(t.addr.0 >= prev_end, "{:?} overlaps", t.signature);
                prev_end = t.addr.0 + t.bytes.len() as u64;
            }
            assert!(prev_end <= layout::ACPI_TABLES_END);
        }
    }

    #[test]
    fn tables_that_do_not_fit_the_area_are_rejected() {
        let cfg = two_node_config();
        let start = GuestAddress(layout::ACPI_TABLES_START);
        let err = build_tables_in(&cfg, start, GuestAddress(start.0 + 0x200)).unwrap_err();
        match err {
            AcpiError::TablesTooLarge { needed, available } => {
                assert_eq!(available, 0x200);
                assert!(needed > 0x200);
            }
            other => panic!("unexpected {other:?}"),
        }

        // 3400 memory ranges are 136 KB of SRAT entries alone.
        let mut big = two_node_config();
        big.numa[1].memory = (0..3400u64)
            .map(|i| (0x1_0000_0000 + i * 0x20_0000, 0x10_0000))
            .collect();
        assert!(matches!(
            build_tables(&big),
            Err(AcpiError::TablesTooLarge { .. })
        ));
    }

    #[test]
    fn zero_vcpus_are_rejected() {
        let cfg = AcpiConfig::default();
        assert!(matches!(build_tables(&cfg), Err(AcpiError::NoVcpus)));
    }

    #[test]
    fn create_acpi_tables_writes_every_image_into_guest_memory() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x20_0000)])
            .expect("guest memory");
        let cfg = two_node_config();
        let rsdp = create_acpi_tables(&mem, &cfg).expect("create");
        let tables = build_tables(&cfg).expect("tables");
        assert_eq!(rsdp, tables.rsdp);
        for t in &tables.tables {
            let mut buf = vec![0u8; t.bytes.len()];
            mem.read_slice(&mut buf, t.addr).expect("read back");
            assert_eq!(buf, t.bytes, "{:?}", t.signature);
        }
    }

    #[test]
    fn create_acpi_tables_fails_when_the_acpi_area_is_not_guest_memory() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0x10_0000), 0x10_0000)])
            .expect("guest memory");
        let cfg = AcpiConfig {
            vcpus: 1,
            ..Default::default()
        };
        let err = create_acpi_tables(&mem, &cfg).unwrap_err();
        assert!(matches!(err, AcpiError::GuestMemory { .. }), "{err:?}");
    }
}
