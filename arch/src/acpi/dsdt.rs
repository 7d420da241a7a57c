//! DSDT: the AML namespace of the platform devices.
//!
//! ```text
//! Name (\_S5_, Package () { SLP_TYP, SLP_TYP, 0, 0 })
//! Scope (\_SB_) {
//!     Device (COM1)  PNP0501, IO 0x3f8/8, IRQ 4 (edge, high)
//!     Device (PWRB)  PNP0C0C, control-method power button
//!     Device (GED_)  ACPI0013, Interrupt GED_IRQ (level, high, exclusive)
//!         OperationRegion (GDST, SystemIO, GED_EVENT_PORT, 1)
//!         Field (GDST, ByteAcc, NoLock, Preserve) { GDAT, 8 }
//!         Method (_EVT, 1, Serialized) {
//!             Local0 = GDAT                      // read-to-clear: read once
//!             Local1 = Local0 & POWER_BUTTON_BIT
//!             If (Local1 == POWER_BUTTON_BIT) { Notify (\_SB_.PWRB, 0x80) }
//!             With PCI: If (Local0 & PCI_HOTPLUG_BIT) { \_SB_.PCI0.PCNT () }
//!         }
//!     Device (VRnn)  LNRO0005, one per virtio-mmio window
//!     Device (PCI0), Device (MBRD)   with a PCI root bus (`pci.rs`)
//! }
//! ```

use acpi_tables::aml::{
    AddressSpace, AddressSpaceCacheable, And, Device, EISAName, Equal, Field, FieldAccessType,
    FieldEntry, FieldLockRule, FieldUpdateRule, If, Interrupt, Local, Memory32Fixed, Method,
    MethodCall, Name, Notify, OpRegion, OpRegionSpace, Package, Path, ResourceTemplate, Scope,
    Store, IO,
};
use acpi_tables::Aml;

use super::{aml_bytes, new_sdt, AcpiConfig, Trigger, VirtioMmioDesc};
use super::{GED_TRIGGER, VIRTIO_MMIO_TRIGGER};
use crate::layout;

/// DSDT revision 2+ means 64-bit AML integers.
const DSDT_REVISION: u8 = 6;
/// `Notify` value for "power button pressed" on a PNP0C0C device.
const NOTIFY_POWER_BUTTON: u8 = 0x80;
/// `_UID` of the single instance of a device type.
const ZERO_UID: u8 = 0;

/// An extended interrupt resource for an active-high, exclusive GSI.
fn interrupt(gsi: u32, trigger: Trigger) -> Interrupt {
    Interrupt::new(true, trigger == Trigger::Edge, false, false, gsi)
}

fn s5_package() -> Name {
    let typ = layout::ACPI_S5_SLP_TYP;
    Name::new(
        Path::new("_S5_"),
        &Package::new(vec![&typ, &typ, &0u8, &0u8]),
    )
}

fn com1() -> Vec<u8> {
    let port = layout::COM1_PORT;
    aml_bytes(&Device::new(
        Path::new("COM1"),
        vec![
            &Name::new(Path::new("_HID"), &EISAName::new("PNP0501")),
            &Name::new(Path::new("_UID"), &ZERO_UID),
            &Name::new(
                Path::new("_CRS"),
                &ResourceTemplate::new(vec![
                    &IO::new(port, port, 1, 8),
                    &interrupt(layout::COM1_IRQ, Trigger::Edge),
                ]),
            ),
        ],
    ))
}

fn power_button() -> Vec<u8> {
    aml_bytes(&Device::new(
        Path::new("PWRB"),
        vec![
            &Name::new(Path::new("_HID"), &EISAName::new("PNP0C0C")),
            &Name::new(Path::new("_UID"), &ZERO_UID),
        ],
    ))
}

/// The GED; with `pci_hotplug` its `_EVT` also scans the PCI hotplug
/// controller (`\_SB_.PCI0.PCNT`) when the VMM sets that event bit.
fn generic_event_device(pci_hotplug: bool) -> Vec<u8> {
    let bit = layout::GED_EVENT_POWER_BUTTON;
    let port = layout::GED_EVENT_PORT;
    let pwrb = Path::new("\\_SB_.PWRB");
    let gdat = Path::new("GDAT");
    let notify_power_button = Notify::new(&pwrb, &NOTIFY_POWER_BUTTON);
    let is_power_button = Equal::new(&Local(1), &bit);
    let pci_bit = layout::GED_EVENT_PCI_HOTPLUG;
    let pci_bits = And::new(&Local(2), &Local(0), &pci_bit);
    let is_pci = Equal::new(&Local(2), &pci_bit);
    let pcnt = MethodCall::new(Path::new("\\_SB_.PCI0.PCNT"), vec![]);
    let scan_pci = If::new(&is_pci, vec![&pcnt]);
    let read_events = Store::new(&Local(0), &gdat);
    let power_bits = And::new(&Local(1), &Local(0), &bit);
    let press = If::new(&is_power_button, vec![&notify_power_button]);
    let mut evt: Vec<&dyn Aml> = vec![&read_events, &power_bits, &press];
    if pci_hotplug {
        evt.push(&pci_bits);
        evt.push(&scan_pci);
    }
    aml_bytes(&Device::new(
        Path::new("GED_"),
        vec![
            &Name::new(Path::new("_HID"), &"ACPI0013"),
            &Name::new(Path::new("_UID"), &ZERO_UID),
            &Name::new(
                Path::new("_CRS"),
                &ResourceTemplate::new(vec![&interrupt(layout::GED_IRQ, GED_TRIGGER)]),
            ),
            &OpRegion::new(Path::new("GDST"), OpRegionSpace::SystemIO, &port, &1u8),
            &Field::new(
                Path::new("GDST"),
                FieldAccessType::Byte,
                FieldLockRule::NoLock,
                FieldUpdateRule::Preserve,
                vec![FieldEntry::Named(*b"GDAT", 8)],
            ),
            &Method::new(Path::new("_EVT"), 1, true, evt),
        ],
    ))
}

fn virtio_mmio_device(index: usize, dev: &VirtioMmioDesc) -> Vec<u8> {
    let name = format!("VR{index:02X}");
    let uid = index as u64;
    // Validation guarantees size > 0 and no wrap-around.
    let last = dev.base + (dev.size - 1);
    let mem32 = u32::try_from(dev.base)
        .ok()
        .zip(u32::try_from(dev.size).ok())
        .filter(|_| last <= u64::from(u32::MAX))
        .map(|(base, size)| Memory32Fixed::new(true, base, size));
    let mem64 = AddressSpace::<u64>::new_memory(
        AddressSpaceCacheable::NotCacheable,
        true,
        dev.base,
        last,
        None,
    );
    let memory: &dyn Aml = match &mem32 {
        Some(m) => m,
        None => &mem64,
    };
    aml_bytes(&Device::new(
        Path::new(&name),
        vec![
            &Name::new(Path::new("_HID"), &"LNRO0005"),
            &Name::new(Path::new("_UID"), &uid),
            // Coherent DMA (always true on x86; QEMU declares it too).
            &Name::new(Path::new("_CCA"), &1u8),
            &Name::new(
                Path::new("_CRS"),
                &ResourceTemplate::new(vec![memory, &interrupt(dev.gsi, VIRTIO_MMIO_TRIGGER)]),
            ),
        ],
    ))
}

/// Builds the DSDT. `cfg.virtio_mmio` must have been validated.
pub(super) fn build_dsdt(cfg: &AcpiConfig) -> Vec<u8> {
    let mut devices = com1();
    devices.extend(power_button());
    devices.extend(generic_event_device(cfg.pci.is_some()));
    for (index, dev) in cfg.virtio_mmio.iter().enumerate() {
        devices.extend(virtio_mmio_device(index, dev));
    }
    if let Some(pci) = &cfg.pci {
        devices.extend(super::pci::host_bridge(pci));
    }
    let mut dsdt = new_sdt(*b"DSDT", DSDT_REVISION, *b"CHDSDT  ");
    dsdt.append_slice(&aml_bytes(&s5_package()));
    dsdt.append_slice(&Scope::raw(Path::new("\\_SB_"), devices));
    dsdt.as_slice().to_vec()
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    fn dsdt(cfg: &AcpiConfig) -> Vec<u8> {
        build_dsdt(cfg)
    }

    fn base_config() -> AcpiConfig {
        AcpiConfig {
            vcpus: 1,
            ..Default::default()
        }
    }

    /// Extended interrupt descriptor bytes for a single GSI.
    fn ext_irq(gsi: u32, edge: bool) -> Vec<u8> {
        let mut v = vec![0x89, 6, 0, 0x01 | (u8::from(edge) << 1), 1];
        v.extend_from_slice(&gsi.to_le_bytes());
        v
    }

    #[test]
    fn dsdt_header_is_revision_2_or_later_and_checksummed() {
        let b = dsdt(&base_config());
        assert_eq!(&b[0..4], b"DSDT");
        assert!(b[8] >= 2, "64-bit integers");
        assert_eq!(le32(&b, 4) as usize, b.len());
        assert_eq!(checksum(&b), 0);
    }

    #[test]
    fn dsdt_has_s5_package_with_the_platform_slp_typ() {
        let b = dsdt(&base_config());
        let typ = layout::ACPI_S5_SLP_TYP;
        // NameOp "_S5_" PackageOp PkgLength NumElements=4 BytePrefix typ BytePrefix typ Zero Zero
        let expected = [
            0x08, b'_', b'S', b'5', b'_', 0x12, 8, 4, 0x0a, typ, 0x0a, typ, 0, 0,
        ];
        assert!(contains(&b, &expected));
    }

    #[test]
    fn dsdt_describes_com1_at_its_port_and_irq() {
        let b = dsdt(&base_config());
        assert!(contains(&b, b"COM1"));
        // EISAID("PNP0501") as a DWordConst.
        assert!(contains(&b, &[0x0c, 0x41, 0xd0, 0x05, 0x01]));
        let port = layout::COM1_PORT.to_le_bytes();
        assert!(contains(
            &b,
            &[0x47, 1, port[0], port[1], port[0], port[1], 1, 8]
        ));
        assert!(contains(&b, &ext_irq(layout::COM1_IRQ, true)));
    }

    #[test]
    fn dsdt_has_a_control_method_power_button() {
        let b = dsdt(&base_config());
        assert!(contains(&b, b"PWRB"));
        // EISAID("PNP0C0C")
        assert!(contains(&b, &[0x0c, 0x41, 0xd0, 0x0c, 0x0c]));
    }

    #[test]
    fn ged_has_level_interrupt_event_port_region_and_power_button_notify() {
        let b = dsdt(&base_config());
        assert!(contains(&b, b"GED_"));
        assert!(contains(&b, b"ACPI0013\0"));
        assert!(contains(&b, &ext_irq(layout::GED_IRQ, false)));
        let port = layout::GED_EVENT_PORT.to_le_bytes();
        // OperationRegion(GDST, SystemIO, WordConst port, One)
        assert!(contains(
            &b,
            &[0x5b, 0x80, b'G', b'D', b'S', b'T', 1, 0x0b, port[0], port[1], 1]
        ));
        // Field(GDST, ByteAcc) { GDAT, 8 }
        assert!(contains(
            &b,
            &[b'G', b'D', b'S', b'T', 0x01, b'G', b'D', b'A', b'T', 8]
        ));
        // Method(_EVT, 1, Serialized)
        assert!(contains(&b, &[b'_', b'E', b'V', b'T', 0x09]));
        // Notify(\_SB_.PWRB, 0x80)
        assert!(contains(
            &b,
            &[0x86, b'\\', 0x2e, b'_', b'S', b'B', b'_', b'P', b'W', b'R', b'B', 0x0a, 0x80]
        ));
    }

    #[test]
    fn with_pci_the_ged_scans_the_hotplug_controller() {
        // \_SB_.PCI0.PCNT as a method call: RootChar, MultiNamePrefix, 3 segments.
        let pcnt = [
            b'\\', 0x2f, 3, b'_', b'S', b'B', b'_', b'P', b'C', b'I', b'0', b'P', b'C', b'N', b'T',
        ];
        assert!(!contains(&dsdt(&base_config()), &pcnt));
        let mut cfg = base_config();
        cfg.pci = Some(crate::acpi::PciHostDesc {
            ecam_base: layout::PCI_ECAM_START,
            ecam_size: layout::PCI_ECAM_SIZE,
            mmio_base: layout::PCI_MMIO_START,
            mmio_size: layout::PCI_MMIO_SIZE,
            config_io_port: layout::PCI_CONFIG_IO_PORT,
        });
        let b = dsdt(&cfg);
        assert!(contains(&b, &pcnt));
        // And (Local0, 4, Local2)
        assert!(contains(
            &b,
            &[0x7b, 0x60, 0x0a, layout::GED_EVENT_PCI_HOTPLUG, 0x62]
        ));
        assert!(contains(&b, b"PHPR"));
        assert!(contains(&b, b"S031"));
    }

    #[test]
    fn every_virtio_mmio_window_becomes_an_lnro0005_device_with_an_edge_interrupt() {
        let mut cfg = base_config();
        cfg.virtio_mmio = virtio_devices(3);
        let b = dsdt(&cfg);
        assert_eq!(count(&b, b"LNRO0005\0"), 3);
        for (i, dev) in cfg.virtio_mmio.iter().enumerate() {
            assert!(contains(&b, format!("VR{i:02X}").as_bytes()));
            let mut mem = vec![0x86, 9, 0, 1];
            mem.extend_from_slice(&(dev.base as u32).to_le_bytes());
            mem.extend_from_slice(&(dev.size as u32).to_le_bytes());
            assert!(contains(&b, &mem), "device {i} window");
            assert!(contains(&b, &ext_irq(dev.gsi, true)), "device {i} irq");
        }
    }

    #[test]
    fn virtio_window_above_4g_uses_a_qword_memory_descriptor() {
        let mut cfg = base_config();
        cfg.virtio_mmio = vec![VirtioMmioDesc {
            base: 0x10_0000_0000,
            size: 0x1000,
            gsi: 5,
        }];
        let b = dsdt(&cfg);
        assert!(contains(&b, &0x10_0000_0000u64.to_le_bytes()));
        assert!(contains(&b, &0x10_0000_0fffu64.to_le_bytes()));
        assert!(
            contains(&b, &[0x8a, 43, 0]),
            "QWord address space descriptor"
        );
        assert!(!contains(&b, &[0x86, 9, 0, 1]), "no Memory32Fixed");
    }
}
