//! A Cloud-Hypervisor-compatible VMM for tiered memory.
//!
//! Threads: the VMM thread (this crate's [`Vmm::run`]) owns the VM and is
//! the only one that changes it; it sleeps in epoll on the VM's platform
//! events and on a signalfd for SIGINT/SIGTERM. Each vCPU has its own
//! thread ([`cpu`]). Guest RAM is one host mapping per memory zone
//! ([`memory`]).

#![deny(missing_docs)]

pub mod balloon;
pub mod console;
pub mod cpu;
pub mod device_manager;
pub mod io_devices;
pub mod landlock;
pub mod memory;
pub mod seccomp;
pub mod serial_input;
pub mod virtio_mem;
pub mod virtio_mmio;
pub mod virtio_pci;
pub mod vm;
mod vmm;
mod zone_resize;

pub use vmm::{block_termination_signals, ApiEndpoint, ExitStatus, Vmm, VmmError};
