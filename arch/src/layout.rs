//! Guest physical address map of an x86-64 VM.
//!
//! Low memory (below 1 MiB) holds the boot structures; RAM starts again at
//! 1 MiB and runs up to the 32-bit device hole, then continues above 4 GiB.
//!
//! ```text
//! 0x0000_0500  GDT                    0x0000_7000  boot_params (zero page)
//! 0x0000_9000  PML4, PDPTE, PDE       0x0002_0000  kernel command line
//! 0x0009_fc00  EBDA .. 0x000f_ffff    reserved; MP table at 0x0009_fc00,
//!                                     ACPI tables at 0x000e_0000,
//!                                     SMBIOS at 0x000f_c000
//! 0x0010_0000  RAM (kernel, initramfs, ...)
//! 0xc000_0000  32-bit device hole: PCI BARs (0xc000_0000), virtio-mmio
//!              (0xd000_0000), PCI ECAM (0xe000_0000), IOAPIC, LAPIC
//! 0x1_0000_0000 RAM continues
//! ```

/// Global descriptor table used while entering the 64-bit kernel.
pub const BOOT_GDT_START: u64 = 0x500;
/// Interrupt descriptor table (empty) loaded at boot.
pub const BOOT_IDT_START: u64 = 0x520;
/// Linux `boot_params` ("zero page").
pub const ZERO_PAGE_START: u64 = 0x7000;
/// Initial stack pointer of the boot vCPU.
pub const BOOT_STACK_POINTER: u64 = 0x8ff0;
/// Identity-mapping page tables: PML4, one PDPT, four PDs (first 4 GiB, 2 MiB pages).
pub const PML4_START: u64 = 0x9000;
/// Page-directory-pointer table for the first 512 GiB.
pub const PDPTE_START: u64 = 0xa000;
/// First of four page directories (0xb000..0xf000).
pub const PDE_START: u64 = 0xb000;
/// Kernel command line, NUL-terminated.
pub const CMDLINE_START: u64 = 0x2_0000;
/// Largest command line we accept (Linux's x86 COMMAND_LINE_SIZE).
pub const CMDLINE_MAX_SIZE: usize = 2048;
/// Start of the extended BIOS data area; everything from here to 1 MiB is
/// reported to the guest as reserved.
pub const EBDA_START: u64 = 0x9_fc00;
/// Where the RSDP and the other ACPI tables are written (inside the reserved
/// BIOS area, where Linux also scans for the RSDP).
pub const ACPI_TABLES_START: u64 = 0xe_0000;
/// End (exclusive) of the ACPI table area: the SMBIOS area follows.
pub const ACPI_TABLES_END: u64 = SMBIOS_START;
/// The SMBIOS area: the 64-bit entry point ("_SM3_", which Linux and
/// dmidecode look for on 16-byte boundaries in 0xF0000..0x100000) and,
/// after it, the structure table. It sits at the top of the BIOS area so
/// that the ACPI tables below keep 112 KiB.
pub const SMBIOS_START: u64 = 0xf_c000;
/// End (exclusive) of the SMBIOS area.
pub const SMBIOS_END: u64 = 0x10_0000;
// The entry point must be where the SMBIOS scan looks, on a paragraph
// boundary; the area must not overlap the ACPI tables or RAM above 1 MiB.
const _: () = assert!(SMBIOS_START >= 0xf_0000 && SMBIOS_START & 0xf == 0);
const _: () = assert!(ACPI_TABLES_START < ACPI_TABLES_END && ACPI_TABLES_END <= SMBIOS_START);
const _: () = assert!(SMBIOS_START < SMBIOS_END && SMBIOS_END <= HIGH_RAM_START);
/// Start of high RAM; the kernel is loaded here.
pub const HIGH_RAM_START: u64 = 0x10_0000;
/// Start of the 32-bit device hole (no RAM between here and 4 GiB).
pub const MEM_32BIT_DEVICES_START: u64 = 0xc000_0000;
/// Size of the 32-bit device hole.
pub const MEM_32BIT_DEVICES_SIZE: u64 = 0x4000_0000;
/// First guest address above the 32-bit device hole.
pub const RAM_64BIT_START: u64 = 0x1_0000_0000;
/// Virtio-mmio device windows are allocated from here, 4 KiB each.
pub const VIRTIO_MMIO_START: u64 = 0xd000_0000;
/// Size of one virtio-mmio window.
pub const VIRTIO_MMIO_SIZE: u64 = 0x1000;
/// PCI BARs (virtio-pci) are allocated from here, in the 32-bit hole.
pub const PCI_MMIO_START: u64 = 0xc000_0000;
/// Size of the PCI BAR window (the host bridge's `_CRS` memory range).
pub const PCI_MMIO_SIZE: u64 = 0x1000_0000;
/// ECAM (memory-mapped PCI configuration space) of bus 0, described by
/// the MCFG table.
pub const PCI_ECAM_START: u64 = 0xe000_0000;
/// ECAM size: one bus (32 devices x 8 functions x 4 KiB).
pub const PCI_ECAM_SIZE: u64 = 0x10_0000;
/// The ACPI PCI hotplug controller's registers (`\_SB_.PHPR`: PCIU, PCID,
/// B0EJ, PSEG), right after ECAM.
pub const PCI_HOTPLUG_START: u64 = PCI_ECAM_START + PCI_ECAM_SIZE;
/// Size of the PCI hotplug register block.
pub const PCI_HOTPLUG_SIZE: u64 = 0x10;
/// I/O ports of PCI configuration mechanism #1 (0xcf8 address, 0xcfc data).
pub const PCI_CONFIG_IO_PORT: u16 = 0xcf8;
/// First GSI for MSI-X vectors: above the IOAPIC's pins, routed by KVM
/// GSI routing to MSI messages.
pub const PCI_MSI_FIRST_GSI: u32 = IOAPIC_NUM_PINS;
/// APIC id of the IOAPIC (the MADT and the MP table).
pub const IOAPIC_ID: u8 = 0;
/// IOAPIC base address (the standard one).
pub const IOAPIC_START: u64 = 0xfec0_0000;
/// Local APIC base address (the standard one).
pub const APIC_START: u64 = 0xfee0_0000;

/// I/O port of the ACPI sleep control register (hardware-reduced ACPI).
/// The guest writes `SLP_TYP << 2 | SLP_EN` here to power off.
pub const ACPI_SLEEP_CONTROL_PORT: u16 = 0x600;
/// I/O port of the ACPI sleep status register.
pub const ACPI_SLEEP_STATUS_PORT: u16 = 0x601;
/// I/O port of the ACPI reset register; writing [`ACPI_RESET_VALUE`] reboots.
pub const ACPI_RESET_PORT: u16 = 0x602;
/// Value the guest writes to [`ACPI_RESET_PORT`] to reset.
pub const ACPI_RESET_VALUE: u8 = 0x1;
/// `SLP_TYP` value of the `\_S5_` (soft-off) package in the DSDT.
pub const ACPI_S5_SLP_TYP: u8 = 5;
/// I/O port of the Generic Event Device's event-status register (one byte,
/// read-to-clear). Bit 0: power button pressed.
pub const GED_EVENT_PORT: u16 = 0x610;
/// GSI the Generic Event Device interrupts on (level, active high).
pub const GED_IRQ: u32 = 9;
/// Bit in the GED event register that means "power button".
pub const GED_EVENT_POWER_BUTTON: u8 = 1 << 0;
/// Bit in the GED event register that means "PCI devices changed" (the
/// AML then scans the hotplug controller; Cloud Hypervisor's bit value).
pub const GED_EVENT_PCI_HOTPLUG: u8 = 1 << 2;
/// COM1 I/O base and its ISA IRQ.
pub const COM1_PORT: u16 = 0x3f8;
/// ISA IRQ line of COM1.
pub const COM1_IRQ: u32 = 4;
/// First GSI handed to virtio-mmio devices (one each, edge triggered).
pub const VIRTIO_MMIO_FIRST_IRQ: u32 = 5;
/// Number of IOAPIC input pins, i.e. usable GSIs `0..IOAPIC_NUM_PINS`
/// (KVM's in-kernel IOAPIC has 24).
pub const IOAPIC_NUM_PINS: u32 = 24;
