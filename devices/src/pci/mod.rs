//! A conventional PCI root bus for virtio-pci: configuration space,
//! ECAM and port access to it, and MSI-X.
//!
//! ```text
//! ECAM window (MCFG) ─┐
//! 0xcf8/0xcfc ports ──┴─ PciRoot (bus 0) ─ slot 0: host bridge
//!                                        └ slot n: PciFunction (virtio-pci)
//! ```
//!
//! A function's BAR 0 sits in the [`BarWindow`] on the VMM's MMIO bus,
//! where the VMM placed it or the guest moved it; [`hotplug`] is the ACPI
//! hotplug controller that adds and removes functions while the guest
//! runs.

pub mod bar_window;
pub mod config_space;
pub mod ecam;
pub mod hotplug;
pub mod msix;
pub mod root;

pub use bar_window::{BarWindow, BarWindowDevice, BarWindowError};
pub use config_space::{ConfigSpace, PciHeader};
pub use ecam::{ConfigIo, EcamWindow};
pub use hotplug::{PciHotplug, PciHotplugRegisters};
pub use msix::{MsiMessage, MsiRouting, Msix, MsixVector};
pub use root::PciRoot;

/// A function's configuration space as the root bus reaches it.
pub trait PciFunction: Send {
    /// A configuration read of `data.len()` (1, 2 or 4) bytes at `reg`.
    fn config_read(&mut self, reg: u16, data: &mut [u8]);
    /// A configuration write.
    fn config_write(&mut self, reg: u16, data: &[u8]);
}
