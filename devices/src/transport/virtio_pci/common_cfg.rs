//! The common configuration structure (virtio 1.2 section 4.1.4.3),
//! translated onto the virtio state machine of [`MmioTransport`]: the
//! same status, feature and queue rules apply whatever the transport,
//! and only what PCI adds (MSI-X vector numbers, queue count, notify
//! offsets, read-back of selectors) is kept here.

use virtio_bindings::virtio_mmio as reg;

use super::interrupt::PciInterrupt;
use crate::virtio::MmioTransport;
use crate::BusDevice;

/// Size of the structure (up to `queue_device`).
pub const COMMON_CFG_LEN: u64 = 0x38;

const DEVICE_FEATURE_SELECT: u64 = 0x00;
const DEVICE_FEATURE: u64 = 0x04;
const DRIVER_FEATURE_SELECT: u64 = 0x08;
const DRIVER_FEATURE: u64 = 0x0c;
const CONFIG_MSIX_VECTOR: u64 = 0x10;
const NUM_QUEUES: u64 = 0x12;
const DEVICE_STATUS: u64 = 0x14;
const CONFIG_GENERATION: u64 = 0x15;
const QUEUE_SELECT: u64 = 0x16;
const QUEUE_SIZE: u64 = 0x18;
const QUEUE_MSIX_VECTOR: u64 = 0x1a;
const QUEUE_ENABLE: u64 = 0x1c;
const QUEUE_NOTIFY_OFF: u64 = 0x1e;
const QUEUE_DESC: u64 = 0x20;
const QUEUE_DRIVER: u64 = 0x28;
const QUEUE_DEVICE: u64 = 0x30;

/// Selector values the driver reads back.
#[derive(Debug, Default)]
pub struct CommonCfg {
    device_feature_select: u32,
    driver_feature_select: u32,
    driver_features: u64,
    queue_select: u16,
}

fn mmio_read(t: &mut MmioTransport, offset: u32) -> u32 {
    let mut b = [0u8; 4];
    t.read(u64::from(offset), &mut b);
    u32::from_le_bytes(b)
}

fn mmio_write(t: &mut MmioTransport, offset: u32, v: u32) {
    t.write(u64::from(offset), &v.to_le_bytes());
}

/// The 64-bit queue address field a `len`-byte access at `offset` lands
/// in: (its mmio low register, whether the access is its high half).
fn queue_address(offset: u64) -> Option<(u32, bool)> {
    let (base, low) = match offset & !7 {
        QUEUE_DESC => (QUEUE_DESC, reg::VIRTIO_MMIO_QUEUE_DESC_LOW),
        QUEUE_DRIVER => (QUEUE_DRIVER, reg::VIRTIO_MMIO_QUEUE_AVAIL_LOW),
        QUEUE_DEVICE => (QUEUE_DEVICE, reg::VIRTIO_MMIO_QUEUE_USED_LOW),
        _ => return None,
    };
    Some((low, offset - base == 4))
}

impl CommonCfg {
    /// A driver read of `data.len()` bytes at `offset`. Accesses must
    /// match a field's width (64-bit fields also in 32-bit halves);
    /// anything else reads as zero.
    pub fn read(&self, t: &mut MmioTransport, irq: &PciInterrupt, offset: u64, data: &mut [u8]) {
        data.fill(0);
        let sel = usize::from(self.queue_select);
        let layout = t.queue_layout(sel);
        let value: u64 = match (offset, data.len()) {
            (DEVICE_FEATURE_SELECT, 4) => u64::from(self.device_feature_select),
            (DEVICE_FEATURE, 4) => u64::from(mmio_read(t, reg::VIRTIO_MMIO_DEVICE_FEATURES)),
            (DRIVER_FEATURE_SELECT, 4) => u64::from(self.driver_feature_select),
            (DRIVER_FEATURE, 4) => match self.driver_feature_select {
                0 => self.driver_features & 0xffff_ffff,
                1 => self.driver_features >> 32,
                _ => 0,
            },
            (CONFIG_MSIX_VECTOR, 2) => u64::from(irq.config_vector()),
            (NUM_QUEUES, 2) => t.num_queues() as u64,
            (DEVICE_STATUS, 1) => u64::from(mmio_read(t, reg::VIRTIO_MMIO_STATUS) & 0xff),
            (CONFIG_GENERATION, 1) => {
                u64::from(mmio_read(t, reg::VIRTIO_MMIO_CONFIG_GENERATION) & 0xff)
            }
            (QUEUE_SELECT, 2) => u64::from(self.queue_select),
            (QUEUE_SIZE, 2) => layout.map_or(0, |l| u64::from(l.0)),
            (QUEUE_MSIX_VECTOR, 2) => u64::from(irq.queue_vector(sel)),
            (QUEUE_ENABLE, 2) => u64::from(mmio_read(t, reg::VIRTIO_MMIO_QUEUE_READY)),
            // Queue i is notified at notify_off i (times the multiplier).
            (QUEUE_NOTIFY_OFF, 2) => layout.map_or(0, |_| sel as u64),
            (QUEUE_DESC..=0x37, 4 | 8) if offset.is_multiple_of(data.len() as u64) => {
                let full = layout.map_or(0, |l| match offset & !7 {
                    QUEUE_DESC => l.1,
                    QUEUE_DRIVER => l.2,
                    _ => l.3,
                });
                if offset % 8 == 4 {
                    full >> 32
                } else {
                    full
                }
            }
            _ => {
                log::debug!("virtio-pci: {}-byte common read at {offset:#x}", data.len());
                return;
            }
        };
        let n = data.len();
        data.copy_from_slice(&value.to_le_bytes()[..n]);
    }

    /// A driver write; the virtio rules are checked by the state machine.
    pub fn write(&mut self, t: &mut MmioTransport, irq: &PciInterrupt, offset: u64, data: &[u8]) {
        let mut raw = [0u8; 8];
        let Some(dst) = raw.get_mut(..data.len()) else {
            return;
        };
        dst.copy_from_slice(data);
        let value = u64::from_le_bytes(raw);
        let v32 = value as u32;
        match (offset, data.len()) {
            (DEVICE_FEATURE_SELECT, 4) => {
                self.device_feature_select = v32;
                mmio_write(t, reg::VIRTIO_MMIO_DEVICE_FEATURES_SEL, v32);
            }
            (DRIVER_FEATURE_SELECT, 4) => {
                self.driver_feature_select = v32;
                mmio_write(t, reg::VIRTIO_MMIO_DRIVER_FEATURES_SEL, v32);
            }
            (DRIVER_FEATURE, 4) => {
                mmio_write(t, reg::VIRTIO_MMIO_DRIVER_FEATURES, v32);
                match self.driver_feature_select {
                    0 => self.driver_features = (self.driver_features & !0xffff_ffff) | value,
                    1 => self.driver_features = (self.driver_features & 0xffff_ffff) | value << 32,
                    _ => {}
                }
            }
            (CONFIG_MSIX_VECTOR, 2) => irq.set_config_vector(value as u16),
            (DEVICE_STATUS, 1) => {
                mmio_write(t, reg::VIRTIO_MMIO_STATUS, v32);
                if v32 == 0 {
                    // Section 2.4: a reset returns every field to its
                    // initial value.
                    irq.reset_vectors();
                    *self = Self::default();
                }
            }
            (QUEUE_SELECT, 2) => {
                self.queue_select = value as u16;
                mmio_write(t, reg::VIRTIO_MMIO_QUEUE_SEL, v32);
            }
            (QUEUE_SIZE, 2) => mmio_write(t, reg::VIRTIO_MMIO_QUEUE_NUM, v32),
            (QUEUE_MSIX_VECTOR, 2) => {
                irq.set_queue_vector(usize::from(self.queue_select), value as u16)
            }
            (QUEUE_ENABLE, 2) => mmio_write(t, reg::VIRTIO_MMIO_QUEUE_READY, v32),
            (QUEUE_DESC..=0x37, 4 | 8) if offset.is_multiple_of(data.len() as u64) => {
                let Some((low, high)) = queue_address(offset) else {
                    return;
                };
                if data.len() == 8 {
                    mmio_write(t, low, v32);
                    mmio_write(t, low + 4, (value >> 32) as u32);
                } else {
                    mmio_write(t, if high { low + 4 } else { low }, v32);
                }
            }
            _ => log::debug!(
                "virtio-pci: {}-byte common write at {offset:#x} ignored",
                data.len()
            ),
        }
    }
}
