//! FADT ("FACP"), revision 6.5, for a hardware-reduced ACPI platform.
//!
//! Hardware-reduced means no PM1/GPE register blocks, no SCI and no FACS:
//! the guest powers off by writing `SLP_TYP << 2 | SLP_EN` to the sleep
//! control register (with `SLP_TYP` from the DSDT's `\_S5_`) and resets by
//! writing the reset value to the reset register. All three are one-byte
//! I/O ports.

use acpi_tables::fadt::{FADTBuilder, Flags};
use acpi_tables::gas::{AccessSize, AddressSpace, GAS};

use super::{aml_bytes, OEM_ID, OEM_REVISION};
use crate::layout;

/// IA-PC boot architecture flags (ACPI 6.5 table 5.11): no VGA, and no CMOS
/// RTC. Without the latter, Linux's rtc_cmos probes ports 0x70/0x71 that
/// nothing emulates and spends seconds of the boot waiting for the update
/// flag to clear; the guest's wall clock comes from kvm-clock instead.
const IAPC_BOOT_ARCH_VGA_NOT_PRESENT: u16 = 1 << 2;
const IAPC_BOOT_ARCH_CMOS_RTC_NOT_PRESENT: u16 = 1 << 5;

/// Goes in the FADT "Hypervisor Vendor Identity" field.
const HYPERVISOR_VENDOR_ID: [u8; 8] = *b"CLOUDHYP";

/// An 8-bit register in I/O port space.
fn io_port_register(port: u16) -> GAS {
    GAS::new(
        AddressSpace::SystemIo,
        8,
        0,
        AccessSize::ByteAccess,
        u64::from(port),
    )
}

/// Builds the FADT; `dsdt_addr` goes in `X_DSDT`.
pub(super) fn build_fadt(dsdt_addr: u64) -> Vec<u8> {
    let mut fadt = FADTBuilder::new(OEM_ID, *b"CHFACP  ", OEM_REVISION)
        .dsdt_64(dsdt_addr)
        .flag(Flags::HwReducedAcpi)
        .flag(Flags::ResetRegSup)
        // No fixed-feature buttons: without these two flags Linux creates
        // LNXPWRBN/LNXSLPBN devices; the power button is the control-method
        // device \_SB_.PWRB in the DSDT.
        .flag(Flags::PwrButton)
        .flag(Flags::SlpButton);
    fadt.iapc_boot_arch =
        (IAPC_BOOT_ARCH_VGA_NOT_PRESENT | IAPC_BOOT_ARCH_CMOS_RTC_NOT_PRESENT).into();
    fadt.reset_reg = io_port_register(layout::ACPI_RESET_PORT);
    fadt.reset_value = layout::ACPI_RESET_VALUE;
    fadt.sleep_control_reg = io_port_register(layout::ACPI_SLEEP_CONTROL_PORT);
    fadt.sleep_status_reg = io_port_register(layout::ACPI_SLEEP_STATUS_PORT);
    fadt.hypervisor_vendor_identity = u64::from_le_bytes(HYPERVISOR_VENDOR_ID).into();
    aml_bytes(&fadt.finalize())
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    // Field offsets from the ACPI 6.5 FADT layout.
    const IAPC_BOOT_ARCH: usize = 109;
    const FLAGS: usize = 112;
    const RESET_REG: usize = 116;
    const RESET_VALUE: usize = 128;
    const MINOR_VERSION: usize = 131;
    const X_FIRMWARE_CTRL: usize = 132;
    const X_DSDT: usize = 140;
    const SLEEP_CONTROL_REG: usize = 244;
    const SLEEP_STATUS_REG: usize = 256;
    const HYPERVISOR_ID: usize = 268;

    fn assert_byte_io_register(fadt: &[u8], off: usize, port: u16) {
        assert_eq!(fadt[off], 1, "address space: system I/O");
        assert_eq!(fadt[off + 1], 8, "bit width");
        assert_eq!(fadt[off + 2], 0, "bit offset");
        assert_eq!(fadt[off + 3], 1, "byte access");
        assert_eq!(le64(fadt, off + 4), u64::from(port));
    }

    #[test]
    fn fadt_is_revision_6_5_and_checksummed() {
        let fadt = build_fadt(0xe_1000);
        assert_eq!(&fadt[0..4], b"FACP");
        assert_eq!(fadt.len(), 276);
        assert_eq!(le32(&fadt, 4), 276);
        assert_eq!(fadt[8], 6);
        assert_eq!(fadt[MINOR_VERSION], 5);
        assert_eq!(checksum(&fadt), 0);
    }

    #[test]
    fn fadt_is_hardware_reduced_with_reset_support_and_no_fixed_buttons() {
        let fadt = build_fadt(0xe_1000);
        let flags = le32(&fadt, FLAGS);
        assert_ne!(flags & (1 << 20), 0, "HW_REDUCED_ACPI");
        assert_ne!(flags & (1 << 10), 0, "RESET_REG_SUP");
        assert_ne!(flags & (1 << 4), 0, "PWR_BUTTON (no fixed power button)");
        assert_ne!(flags & (1 << 5), 0, "SLP_BUTTON (no fixed sleep button)");
        assert_eq!(le64(&fadt, X_FIRMWARE_CTRL), 0, "no FACS");
    }

    #[test]
    fn fadt_says_there_is_no_cmos_rtc_and_no_vga() {
        let fadt = build_fadt(0xe_1000);
        let arch = u16::from_le_bytes([fadt[IAPC_BOOT_ARCH], fadt[IAPC_BOOT_ARCH + 1]]);
        assert_eq!(arch, (1 << 5) | (1 << 2));
    }

    #[test]
    fn fadt_points_at_the_dsdt_through_x_dsdt_only() {
        let fadt = build_fadt(0xe_1230);
        assert_eq!(le64(&fadt, X_DSDT), 0xe_1230);
        assert_eq!(le32(&fadt, 40), 0, "32-bit DSDT pointer unused");
    }

    #[test]
    fn fadt_reset_and_sleep_registers_are_the_platform_io_ports() {
        let fadt = build_fadt(0xe_1000);
        assert_byte_io_register(&fadt, RESET_REG, layout::ACPI_RESET_PORT);
        assert_eq!(fadt[RESET_VALUE], layout::ACPI_RESET_VALUE);
        assert_byte_io_register(&fadt, SLEEP_CONTROL_REG, layout::ACPI_SLEEP_CONTROL_PORT);
        assert_byte_io_register(&fadt, SLEEP_STATUS_REG, layout::ACPI_SLEEP_STATUS_PORT);
        assert_eq!(&fadt[HYPERVISOR_ID..HYPERVISOR_ID + 8], b"CLOUDHYP");
    }
}
