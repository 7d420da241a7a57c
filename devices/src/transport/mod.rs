//! Virtio transports other than virtio-mmio (which lives with the device
//! models in [`crate::virtio`]).

pub mod virtio_pci;
