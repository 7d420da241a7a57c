//! The virtio-pci transport, modern (virtio 1.2 section 4.1): a PCI
//! function whose BAR 0 holds the common configuration, ISR, device
//! configuration and notification structures, the MSI-X table and its
//! pending bit array.
//!
//! ```text
//! BAR 0 (32-bit memory, BAR_SIZE)
//!   0x0000 common configuration      (cap type 1)
//!   0x1000 ISR status                (cap type 3)
//!   0x2000 device configuration      (cap type 4)
//!   0x3000 notifications, 4 bytes a queue (cap type 2), KVM ioeventfds
//!   0x4000 MSI-X table               (MSI-X capability)
//!   0x5000 MSI-X pending bit array
//! ```
//!
//! The virtio state machine (status, feature negotiation, queue setup and
//! its validation, activation and reset through the device thread) is the
//! one of [`MmioTransport`]; [`common_cfg`] translates PCI's register
//! layout onto it. Interrupts leave through MSI-X only (no INTx pin).
//! Wiring into KVM is the VMM's: each notification eventfd
//! ([`VirtioPciDevice::queue_evts`]) becomes an ioeventfd at
//! [`notify_address`], each MSI-X vector's eventfd an irqfd on its own GSI.

pub mod common_cfg;
pub mod interrupt;

use std::sync::{Arc, Mutex};

use log::debug;
use vmm_sys_util::eventfd::EventFd;

use crate::event_loop::LoopHandle;
use crate::pci::{ConfigSpace, MsiRouting, Msix, MsixVector, PciFunction, PciHeader};
use crate::virtio::{GuestMemoryMmap, MmioTransport, VirtioDevice};
use crate::{BusDevice, IrqTrigger};
use common_cfg::{CommonCfg, COMMON_CFG_LEN};
pub use interrupt::{PciInterrupt, NO_VECTOR};

/// Size of BAR 0.
pub const BAR_SIZE: u64 = 0x8000;
const COMMON_OFFSET: u64 = 0x0000;
const ISR_OFFSET: u64 = 0x1000;
const ISR_LEN: u64 = 4;
const DEVICE_OFFSET: u64 = 0x2000;
const DEVICE_LEN: u64 = 0x1000;
const NOTIFY_OFFSET: u64 = 0x3000;
const NOTIFY_LEN: u64 = 0x1000;
/// Bytes between two queues' notification addresses.
pub const NOTIFY_MULTIPLIER: u64 = 4;
const MSIX_TABLE_OFFSET: u64 = 0x4000;
const MSIX_PBA_OFFSET: u64 = 0x5000;
/// At most this many MSI-X vectors (one page of table).
pub const MAX_VECTORS: usize = 256;

/// PCI vendor ID of virtio devices.
pub const VIRTIO_PCI_VENDOR_ID: u16 = 0x1af4;
/// Modern virtio-pci device IDs are this plus the virtio device type.
pub const VIRTIO_PCI_DEVICE_ID_BASE: u16 = 0x1040;

const PCI_CAP_ID_VENDOR: u8 = 0x09;
const PCI_CAP_ID_MSIX: u8 = 0x11;
const CFG_TYPE_COMMON: u8 = 1;
const CFG_TYPE_NOTIFY: u8 = 2;
const CFG_TYPE_ISR: u8 = 3;
const CFG_TYPE_DEVICE: u8 = 4;
const MSIX_ENABLE: u16 = 1 << 15;
const MSIX_FUNCTION_MASK: u16 = 1 << 14;

/// Guest-physical address of queue `index`'s notification register in a
/// BAR 0 at `bar`.
pub fn notify_address(bar: u64, index: usize) -> u64 {
    bar + NOTIFY_OFFSET + index as u64 * NOTIFY_MULTIPLIER
}

/// MSI-X vectors a device gets: one per queue plus one for configuration
/// changes.
pub fn vectors_for(device: &dyn VirtioDevice) -> usize {
    device.queue_max_sizes().len() + 1
}

/// Why a virtio-pci function could not be built.
#[derive(Debug, thiserror::Error)]
pub enum VirtioPciError {
    /// The device has more queues than vectors fit.
    #[error("{0} MSI-X vectors asked for, at most {MAX_VECTORS}")]
    TooManyVectors(usize),
    /// BAR 0 does not fit the 32-bit space or is misaligned.
    #[error("BAR 0 at {0:#x}: {1}")]
    Bar(u64, String),
    /// The configuration space refused a capability.
    #[error("configuration space: {0}")]
    Config(#[from] crate::pci::config_space::ConfigSpaceError),
    /// Creating the state machine's eventfds.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Class code by virtio device type, as the guest's `lspci` shows it.
fn class_code(device_type: u32) -> u32 {
    match device_type {
        crate::virtio::net::VIRTIO_ID_NET => 0x02_0000, // Ethernet controller
        crate::virtio::block::VIRTIO_ID_BLOCK => 0x01_8000, // mass storage
        crate::virtio::console::VIRTIO_ID_CONSOLE => 0x07_8000, // communication
        _ => 0xff_0000,                                 // unclassified
    }
}

/// A `virtio_pci_cap` (section 4.1.4): which BAR range holds a structure.
fn virtio_cap(cfg_type: u8, offset: u64, length: u64, extra: &[u8]) -> Vec<u8> {
    let mut cap = vec![PCI_CAP_ID_VENDOR, 0, (16 + extra.len()) as u8, cfg_type];
    cap.extend_from_slice(&[0, 0, 0, 0]); // BAR 0, id 0, padding
    cap.extend_from_slice(&(offset as u32).to_le_bytes());
    cap.extend_from_slice(&(length as u32).to_le_bytes());
    cap.extend_from_slice(extra);
    cap
}

/// One virtio device as a PCI function.
pub struct VirtioPciDevice {
    config: ConfigSpace,
    transport: MmioTransport,
    interrupt: Arc<PciInterrupt>,
    common: CommonCfg,
    /// Offset of the MSI-X capability in configuration space.
    msix_cap: u16,
}

impl VirtioPciDevice {
    /// `device` behind a function whose BAR 0 is at `bar` (32-bit,
    /// aligned to [`BAR_SIZE`]), signalling through `vectors` (one per
    /// queue plus one, see [`vectors_for`]) routed by `router`. Its data
    /// path runs on `event_loop`.
    pub fn new(
        device: Arc<Mutex<dyn VirtioDevice>>,
        mem: GuestMemoryMmap,
        event_loop: LoopHandle,
        bar: u64,
        vectors: Vec<MsixVector>,
        router: Arc<dyn MsiRouting>,
    ) -> Result<Self, VirtioPciError> {
        let n_vectors = vectors.len();
        if n_vectors == 0 || n_vectors > MAX_VECTORS {
            return Err(VirtioPciError::TooManyVectors(n_vectors));
        }
        let bar32 =
            u32::try_from(bar).map_err(|_| VirtioPciError::Bar(bar, "not below 4 GiB".into()))?;
        let device_type = device
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .device_type();
        // The state machine's own GSI eventfd is never registered: this
        // transport interrupts through `PciInterrupt`.
        let mut transport = MmioTransport::new(device, mem, IrqTrigger::new()?, event_loop)?;
        let msix = Arc::new(Msix::new(vectors, router));
        let interrupt = Arc::new(PciInterrupt::new(
            transport.interrupt(),
            msix.clone(),
            transport.queue_evts().len(),
        ));
        transport.set_device_interrupt(interrupt.clone());

        let mut config = ConfigSpace::new(&PciHeader {
            vendor_id: VIRTIO_PCI_VENDOR_ID,
            device_id: VIRTIO_PCI_DEVICE_ID_BASE + (device_type & 0x3f) as u16,
            // Section 4.1.2.1: revision 1 or more for a non-transitional device.
            revision: 1,
            class: class_code(device_type),
            subsystem_vendor_id: VIRTIO_PCI_VENDOR_ID,
            subsystem_id: 0x40,
        });
        config
            .set_bar(0, bar32, BAR_SIZE as u32)
            .map_err(|e| VirtioPciError::Bar(bar, e.to_string()))?;
        for (ty, off, len, extra) in [
            (CFG_TYPE_COMMON, COMMON_OFFSET, COMMON_CFG_LEN, vec![]),
            (CFG_TYPE_ISR, ISR_OFFSET, ISR_LEN, vec![]),
            (CFG_TYPE_DEVICE, DEVICE_OFFSET, DEVICE_LEN, vec![]),
            (
                CFG_TYPE_NOTIFY,
                NOTIFY_OFFSET,
                NOTIFY_LEN,
                (NOTIFY_MULTIPLIER as u32).to_le_bytes().to_vec(),
            ),
        ] {
            let cap = virtio_cap(ty, off, len, &extra);
            config.add_capability(&cap, &vec![0; cap.len()])?;
        }
        // Table size is N-1; both structures in BAR 0 (BIR 0).
        let control = (n_vectors - 1) as u16;
        let mut cap = vec![PCI_CAP_ID_MSIX, 0];
        cap.extend_from_slice(&control.to_le_bytes());
        cap.extend_from_slice(&(MSIX_TABLE_OFFSET as u32).to_le_bytes());
        cap.extend_from_slice(&(MSIX_PBA_OFFSET as u32).to_le_bytes());
        let mut wmask = vec![0u8; cap.len()];
        wmask[2..4].copy_from_slice(&(MSIX_ENABLE | MSIX_FUNCTION_MASK).to_le_bytes());
        let msix_cap = u16::from(config.add_capability(&cap, &wmask)?);
        Ok(Self {
            config,
            transport,
            interrupt,
            common: CommonCfg::default(),
            msix_cap,
        })
    }

    /// Queue notification eventfds by queue index, for KVM ioeventfds at
    /// [`notify_address`].
    pub fn queue_evts(&self) -> &[EventFd] {
        self.transport.queue_evts()
    }

    /// The device's interrupt (pause/resume, counters).
    pub fn interrupt(&self) -> Arc<PciInterrupt> {
        self.interrupt.clone()
    }

    /// BAR 0's guest-physical address.
    pub fn bar(&self) -> u64 {
        self.config.bar(0).map_or(0, |b| b.0)
    }

    fn msix_control_changed(&self) {
        let control = self.config.read_u16(usize::from(self.msix_cap) + 2);
        self.interrupt.msix().set_control(
            control & MSIX_ENABLE != 0,
            control & MSIX_FUNCTION_MASK != 0,
        );
    }
}

impl PciFunction for VirtioPciDevice {
    fn config_read(&mut self, reg: u16, data: &mut [u8]) {
        self.config.read(reg, data);
    }

    fn config_write(&mut self, reg: u16, data: &[u8]) {
        self.config.write(reg, data);
        let control = self.msix_cap + 2..self.msix_cap + 4;
        let written = reg..reg.saturating_add(data.len() as u16);
        if written.start < control.end && control.start < written.end {
            self.msix_control_changed();
        }
    }
}

impl BusDevice for VirtioPciDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if !self.config.memory_enabled() {
            data.fill(0xff);
            return;
        }
        let len = data.len() as u64;
        match offset {
            o if o + len <= COMMON_OFFSET + COMMON_CFG_LEN => self.common.read(
                &mut self.transport,
                &self.interrupt,
                o - COMMON_OFFSET,
                data,
            ),
            o if (ISR_OFFSET..ISR_OFFSET + ISR_LEN).contains(&o) => {
                data.fill(0);
                if o == ISR_OFFSET {
                    data[0] = self.interrupt.take_isr();
                }
            }
            o if o >= DEVICE_OFFSET && o + len <= DEVICE_OFFSET + DEVICE_LEN => {
                // The state machine forwards its window's 0x100.. to the device.
                self.transport.read(0x100 + (o - DEVICE_OFFSET), data);
            }
            o if o >= MSIX_TABLE_OFFSET
                && o + len <= MSIX_TABLE_OFFSET + self.interrupt.msix().table_bytes() =>
            {
                self.interrupt
                    .msix()
                    .table_read(o - MSIX_TABLE_OFFSET, data)
            }
            o if o >= MSIX_PBA_OFFSET
                && o + len <= MSIX_PBA_OFFSET + self.interrupt.msix().pba_bytes() =>
            {
                self.interrupt.msix().pba_read(o - MSIX_PBA_OFFSET, data)
            }
            _ => data.fill(0),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if !self.config.memory_enabled() {
            return;
        }
        let len = data.len() as u64;
        match offset {
            o if o + len <= COMMON_OFFSET + COMMON_CFG_LEN => self.common.write(
                &mut self.transport,
                &self.interrupt,
                o - COMMON_OFFSET,
                data,
            ),
            o if o >= DEVICE_OFFSET && o + len <= DEVICE_OFFSET + DEVICE_LEN => {
                self.transport.write(0x100 + (o - DEVICE_OFFSET), data);
            }
            o if o >= NOTIFY_OFFSET && o + len <= NOTIFY_OFFSET + NOTIFY_LEN => {
                // Reached only without an ioeventfd (or a misaligned
                // write): the address names the queue.
                let index = ((o - NOTIFY_OFFSET) / NOTIFY_MULTIPLIER) as u32;
                self.transport.write(
                    u64::from(virtio_bindings::virtio_mmio::VIRTIO_MMIO_QUEUE_NOTIFY),
                    &index.to_le_bytes(),
                );
            }
            o if o >= MSIX_TABLE_OFFSET
                && o + len <= MSIX_TABLE_OFFSET + self.interrupt.msix().table_bytes() =>
            {
                self.interrupt
                    .msix()
                    .table_write(o - MSIX_TABLE_OFFSET, data)
            }
            _ => debug!("virtio-pci: {len}-byte write at BAR offset {offset:#x} ignored"),
        }
    }
}

#[cfg(test)]
mod multiqueue_tests;
#[cfg(test)]
mod tests;
