//! x86-64 platform description for the VMM: the guest physical memory map,
//! the e820 table, boot-time CPU state, the MP table, the ACPI tables and
//! the SMBIOS tables.

#![deny(missing_docs)]

pub mod acpi;
pub mod boot;
mod checksum;
pub mod cpuid;
pub mod layout;
pub mod mptable;
pub mod regs;
pub mod smbios;
#[cfg(test)]
mod test_util;
