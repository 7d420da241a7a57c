//! Device models the VMM attaches to its I/O and MMIO buses.
//!
//! Each device implements [`BusDevice`]; vCPU threads dispatch port and
//! MMIO exits through a [`Bus`]. Interrupts leave through [`IrqTrigger`]
//! (an eventfd registered as a KVM irqfd), so no device calls into KVM.

#![deny(missing_docs)]

mod bus;
pub mod event_loop;
pub mod legacy;
pub mod pci;
pub mod sandbox;
pub mod transport;
pub mod virtio;
pub mod virtio_mem;

pub use bus::{Bus, BusDevice, BusError};

use std::io;

use vmm_sys_util::eventfd::EventFd;

/// An interrupt line backed by an eventfd that KVM turns into a GSI pulse.
#[derive(Debug)]
pub struct IrqTrigger(pub EventFd);

impl IrqTrigger {
    /// A new, unregistered trigger.
    pub fn new() -> io::Result<Self> {
        EventFd::new(libc::EFD_NONBLOCK).map(Self)
    }
}

impl vm_superio::Trigger for IrqTrigger {
    type E = io::Error;

    fn trigger(&self) -> io::Result<()> {
        self.0.write(1)
    }
}
