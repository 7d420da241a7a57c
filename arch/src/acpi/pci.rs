//! What a guest needs to find the PCI root bus: the MCFG table (where
//! ECAM is) and, in the DSDT, the host bridge `PCI0` with the resources it
//! decodes plus a motherboard-resources device reserving ECAM (Linux uses
//! an MCFG region only if ACPI reserves it, `pci_mmcfg_reserved`).
//!
//! ```text
//! MCFG: segment 0, buses 0..=0, ECAM at PciHostDesc::ecam_base
//! Scope (\_SB_) {
//!     Device (PCI0)  PNP0A08 / PNP0A03, _SEG 0, _BBN 0
//!         _CRS: WordBusNumber 0-0, IO 0xcf8/8, DWordMemory BAR window
//!         Snnn slots, DVNT, PCNT (hotplug, `pci_hotplug.rs`)
//!     Device (MBRD)  PNP0C02, _CRS: Memory32Fixed ECAM
//!     Device (PHPR)  the PCI hotplug controller (`pci_hotplug.rs`)
//! }
//! ```

use acpi_tables::aml::{
    AddressSpace, AddressSpaceCacheable, Device, EISAName, Memory32Fixed, Name, Path,
    ResourceTemplate, IO,
};
use acpi_tables::mcfg::MCFG;

use super::pci_hotplug::RawAml;
use super::{aml_bytes, PciHostDesc, OEM_ID, OEM_REVISION};
use crate::layout;

/// The MCFG table: one ECAM region for segment 0, bus 0.
pub(super) fn build_mcfg(pci: &PciHostDesc) -> Vec<u8> {
    let mut mcfg = MCFG::new(OEM_ID, *b"CHMCFG  ", OEM_REVISION);
    mcfg.add_ecam(pci.ecam_base, 0, 0, 0);
    aml_bytes(&mcfg)
}

/// `PCI0` and `MBRD` for the DSDT's `\_SB_` scope. `pci` must have been
/// validated (32-bit windows, no wrap).
pub(super) fn host_bridge(pci: &PciHostDesc) -> Vec<u8> {
    let window_last = pci.mmio_base + (pci.mmio_size - 1);
    let bus = AddressSpace::<u16>::new_bus_number(0, 0);
    let config_io = IO::new(pci.config_io_port, pci.config_io_port, 1, 8);
    let window = AddressSpace::<u32>::new_memory(
        AddressSpaceCacheable::NotCacheable,
        true,
        pci.mmio_base as u32,
        window_last as u32,
        None,
    );
    let mut bytes = aml_bytes(&Device::new(
        Path::new("PCI0"),
        vec![
            &Name::new(Path::new("_HID"), &EISAName::new("PNP0A08")),
            &Name::new(Path::new("_CID"), &EISAName::new("PNP0A03")),
            &Name::new(Path::new("_ADR"), &0u8),
            &Name::new(Path::new("_SEG"), &0u8),
            &Name::new(Path::new("_UID"), &0u8),
            &Name::new(Path::new("_BBN"), &0u8),
            &Name::new(
                Path::new("_CRS"),
                &ResourceTemplate::new(vec![&bus, &config_io, &window]),
            ),
            &RawAml(super::pci_hotplug::bridge_objects()),
        ],
    ));
    let ecam = Memory32Fixed::new(false, pci.ecam_base as u32, pci.ecam_size as u32);
    bytes.extend(aml_bytes(&Device::new(
        Path::new("MBRD"),
        vec![
            &Name::new(Path::new("_HID"), &EISAName::new("PNP0C02")),
            &Name::new(Path::new("_UID"), &1u8),
            &Name::new(Path::new("_CRS"), &ResourceTemplate::new(vec![&ecam])),
        ],
    )));
    bytes.extend(super::pci_hotplug::controller(
        layout::PCI_HOTPLUG_START,
        layout::PCI_HOTPLUG_SIZE,
    ));
    bytes
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::super::{build_tables, AcpiConfig};
    use super::*;

    fn desc() -> PciHostDesc {
        PciHostDesc {
            ecam_base: 0xe000_0000,
            ecam_size: 0x10_0000,
            mmio_base: 0xc000_0000,
            mmio_size: 0x1000_0000,
            config_io_port: 0xcf8,
        }
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    #[test]
    fn mcfg_has_one_ecam_entry_for_bus_zero() {
        let cfg = AcpiConfig {
            vcpus: 1,
            pci: Some(desc()),
            ..Default::default()
        };
        let tables = build_tables(&cfg).expect("tables");
        let mcfg = &tables.get(b"MCFG").expect("MCFG in the XSDT").bytes;
        // Header (36) + reserved (8) + one 16-byte allocation.
        assert_eq!(mcfg.len(), 60);
        assert_eq!(checksum(mcfg), 0);
        assert_eq!(
            u64::from_le_bytes(mcfg[44..52].try_into().unwrap()),
            0xe000_0000
        );
        assert_eq!(&mcfg[52..56], &[0, 0, 0, 0]); // segment 0, buses 0..=0
        let xsdt = &tables.get(b"XSDT").unwrap().bytes;
        let mcfg_addr = tables.get(b"MCFG").unwrap().addr.0.to_le_bytes();
        assert!(find(xsdt, &mcfg_addr).is_some());
        // Without PCI there is no MCFG.
        let none = build_tables(&AcpiConfig {
            vcpus: 1,
            ..Default::default()
        })
        .unwrap();
        assert!(none.get(b"MCFG").is_none());
    }

    #[test]
    fn dsdt_describes_the_host_bridge_and_reserves_ecam() {
        let bytes = host_bridge(&desc());
        assert!(find(&bytes, b"PCI0").is_some());
        assert!(find(&bytes, b"MBRD").is_some());
        // DWordMemory window 0xc0000000-0xcfffffff (min, max little-endian).
        let mut window = 0xc000_0000u32.to_le_bytes().to_vec();
        window.extend_from_slice(&0xcfff_ffffu32.to_le_bytes());
        assert!(find(&bytes, &window).is_some());
        // Memory32Fixed ECAM: base, then length.
        let mut ecam = 0xe000_0000u32.to_le_bytes().to_vec();
        ecam.extend_from_slice(&0x10_0000u32.to_le_bytes());
        assert!(find(&bytes, &ecam).is_some());
        // IO descriptor for 0xcf8..0xcff.
        assert!(find(&bytes, &[0x47, 1, 0xf8, 0x0c, 0xf8, 0x0c, 1, 8]).is_some());
    }
}
