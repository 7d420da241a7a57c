//! A conventional PCI root bus for virtio-pci: configuration space,
//! ECAM and port access to it, and MSI-X.
//!
//! ```text
//! ECAM window (MCFG) ─┐
//! 0xcf8/0xcfc ports ──┴─ PciRoot (bus 0) ─ slot 0: host bridge
//!                                        └ slot n: PciFunction (virtio-pci)
//! ```
//!
//! A function's BARs are separate [`BusDevice`](crate::BusDevice)s on the
//! VMM's MMIO bus, at the addresses the VMM assigned.

pub mod config_space;
pub mod ecam;
pub mod msix;
pub mod root;

pub use config_space::{ConfigSpace, PciHeader};
pub use ecam::{ConfigIo, EcamWindow};
pub use msix::{MsiMessage, MsiRouting, Msix, MsixVector};
pub use root::PciRoot;

/// A function's configuration space as the root bus reaches it.
pub trait PciFunction: Send {
    /// A configuration read of `data.len()` (1, 2 or 4) bytes at `reg`.
    fn config_read(&mut self, reg: u16, data: &mut [u8]);
    /// A configuration write.
    fn config_write(&mut self, reg: u16, data: &[u8]);
}
