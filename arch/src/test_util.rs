//! Helpers shared by the unit tests of the MP table and the SMBIOS tables.

use vm_memory::{GuestAddress, GuestMemoryMmap};

/// The first MiB of guest memory: base memory and the BIOS area the tables
/// land in.
pub fn mem() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).expect("guest memory")
}
