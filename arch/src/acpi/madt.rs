//! MADT ("APIC"): local APICs, the IOAPIC, interrupt source overrides and
//! the local APIC NMI.
//!
//! Built on `acpi_tables::sdt::Sdt` rather than the crate's `MADT` type,
//! because that type cannot set the MADT flags (PCAT_COMPAT) and only
//! accepts structures implementing zerocopy traits, which this crate does
//! not depend on. The crate's `ProcessorLocalApic` and `IoApic` structures
//! are reused; overrides and the NMI structure are laid out here.

use acpi_tables::madt::{EnabledStatus, IoApic, ProcessorLocalApic};

use super::{aml_bytes, device_interrupts, new_sdt, AcpiConfig, Trigger};
use crate::layout;

const MADT_REVISION: u8 = 5;
/// MADT flag: the system also has dual 8259 PICs.
const PCAT_COMPAT: u32 = 1;
const IOAPIC_ID: u8 = layout::IOAPIC_ID;
const LAPIC_ADDR: u32 = layout::APIC_START as u32;
const IOAPIC_ADDR: u32 = layout::IOAPIC_START as u32;
const _: () = assert!(layout::APIC_START <= u32::MAX as u64);
const _: () = assert!(layout::IOAPIC_START <= u32::MAX as u64);

/// Interrupt source override structure (type 2).
const INTERRUPT_SOURCE_OVERRIDE: u8 = 2;
/// Local APIC NMI structure (type 4).
const LOCAL_APIC_NMI: u8 = 4;
/// ISA IRQs are 0..16; only those can be overridden.
const ISA_IRQS: u32 = 16;
/// MPS INTI flags: active high (polarity 01) + level-triggered (trigger 11).
const INTI_ACTIVE_HIGH_LEVEL: u16 = 0b11_01;
/// MPS INTI flags: conforms to the bus (ISA: edge, active high).
const INTI_CONFORMS: u16 = 0;
/// "All processors" in a local APIC NMI structure.
const ALL_PROCESSORS: u8 = 0xff;

/// Interrupt source override: ISA IRQ `source` is GSI `gsi`.
fn source_override(source: u8, gsi: u32, flags: u16) -> [u8; 10] {
    let mut s = [0u8; 10];
    s[0] = INTERRUPT_SOURCE_OVERRIDE;
    s[1] = 10;
    s[2] = 0; // bus: ISA
    s[3] = source;
    s[4..8].copy_from_slice(&gsi.to_le_bytes());
    s[8..10].copy_from_slice(&flags.to_le_bytes());
    s
}

/// Builds the MADT.
pub(super) fn build_madt(cfg: &AcpiConfig) -> Vec<u8> {
    let mut madt = new_sdt(*b"APIC", MADT_REVISION, *b"CHMADT  ");
    madt.append_slice(&LAPIC_ADDR.to_le_bytes());
    madt.append_slice(&PCAT_COMPAT.to_le_bytes());
    for cpu in 0..cfg.vcpus {
        let lapic = ProcessorLocalApic::new(cpu, cpu, EnabledStatus::Enabled);
        madt.append_slice(&aml_bytes(&lapic));
    }
    // Not started now (max_vcpus > boot_vcpus): the guest counts them as
    // possible CPUs but does not bring them up.
    for cpu in cfg.vcpus..cfg.max_vcpus {
        let lapic = ProcessorLocalApic::new(cpu, cpu, EnabledStatus::DisabledOnlineCapable);
        madt.append_slice(&aml_bytes(&lapic));
    }
    madt.append_slice(&aml_bytes(&IoApic::new(IOAPIC_ID, IOAPIC_ADDR, 0)));
    // KVM's in-kernel PIT drives IOAPIC pin 2, as on PCs.
    madt.append_slice(&source_override(0, 2, INTI_CONFORMS));
    // Level-triggered ISA-range GSIs must be declared, or the guest assumes
    // the ISA default (edge, active high) for them.
    // Above the ISA range the DSDT descriptor alone sets the mode.
    for (gsi, trigger) in device_interrupts(cfg) {
        if trigger == Trigger::Level && gsi < ISA_IRQS {
            madt.append_slice(&source_override(gsi as u8, gsi, INTI_ACTIVE_HIGH_LEVEL));
        }
    }
    madt.append_slice(&[LOCAL_APIC_NMI, 6, ALL_PROCESSORS, 0, 0, 1]);
    madt.as_slice().to_vec()
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    fn madt(vcpus: u8) -> Vec<u8> {
        build_madt(&AcpiConfig {
            vcpus,
            virtio_mmio: virtio_devices(3),
            ..Default::default()
        })
    }

    fn of_type(madt: &[u8], ty: u8) -> Vec<Vec<u8>> {
        byte_subtables(madt, 44)
            .into_iter()
            .filter(|s| s[0] == ty)
            .map(<[u8]>::to_vec)
            .collect()
    }

    #[test]
    fn madt_header_has_lapic_address_and_pcat_compat() {
        let b = madt(2);
        assert_eq!(&b[0..4], b"APIC");
        assert_eq!(checksum(&b), 0);
        assert_eq!(le32(&b, 4) as usize, b.len());
        assert_eq!(u64::from(le32(&b, 36)), layout::APIC_START);
        assert_eq!(le32(&b, 40) & 1, 1);
    }

    #[test]
    fn vcpus_beyond_boot_are_disabled_but_online_capable() {
        let b = build_madt(&AcpiConfig {
            vcpus: 2,
            max_vcpus: 4,
            virtio_mmio: virtio_devices(1),
            ..Default::default()
        });
        let flags: Vec<u32> = of_type(&b, 0).iter().map(|l| le32(l, 4)).collect();
        assert_eq!(flags, vec![1, 1, 2, 2]);
    }

    #[test]
    fn madt_has_one_enabled_local_apic_per_vcpu() {
        let b = madt(5);
        let lapics = of_type(&b, 0);
        assert_eq!(lapics.len(), 5);
        for (i, l) in lapics.iter().enumerate() {
            assert_eq!(l.len(), 8);
            assert_eq!(l[2] as usize, i, "processor UID");
            assert_eq!(l[3] as usize, i, "APIC id");
            assert_eq!(le32(l, 4) & 1, 1, "enabled");
        }
    }

    #[test]
    fn madt_has_ioapic_zero_at_the_standard_address_from_gsi_zero() {
        let ioapics = of_type(&madt(1), 1);
        assert_eq!(ioapics.len(), 1);
        let io = &ioapics[0];
        assert_eq!(io.len(), 12);
        assert_eq!(io[2], 0, "IOAPIC id");
        assert_eq!(u64::from(le32(io, 4)), layout::IOAPIC_START);
        assert_eq!(le32(io, 8), 0, "GSI base");
    }

    #[test]
    fn madt_overrides_irq0_to_gsi2_and_declares_the_level_triggered_ged() {
        let overrides = of_type(&madt(1), 2);
        let decoded: Vec<(u8, u8, u32, u16)> = overrides
            .iter()
            .map(|o| (o[2], o[3], le32(o, 4), le16(o, 8)))
            .collect();
        assert!(decoded.contains(&(0, 0, 2, 0)), "{decoded:?}");
        let ged = layout::GED_IRQ;
        assert!(
            decoded.contains(&(0, ged as u8, ged, 0x000d)),
            "{decoded:?}"
        );
        // Edge-triggered virtio-mmio and COM1 GSIs keep the ISA default.
        assert_eq!(decoded.len(), 2, "{decoded:?}");
    }

    #[test]
    fn madt_routes_nmi_to_lint1_of_all_processors() {
        let nmis = of_type(&madt(3), 4);
        assert_eq!(nmis, vec![vec![4, 6, 0xff, 0, 0, 1]]);
    }
}
