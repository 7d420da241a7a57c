//! virtio-mem (virtio 1.2 section 5.15, device id 24): memory the host adds
//! to and takes from a running guest, in blocks of a region placed above
//! guest RAM. One device per memory zone with `hotplug_size`, so plugged
//! memory belongs to the zone's guest NUMA node (the `node_id` the device
//! reports with `VIRTIO_MEM_F_ACPI_PXM`) and to its host binding (the
//! region's mapping is bound like the zone's).
//!
//! The host only asks: [`VirtioMemHandle::resize`] sets `requested_size`
//! and raises the configuration-change interrupt; the guest's driver then
//! plugs or unplugs blocks with requests on the one queue, which the device
//! thread checks against the block bitmap ([`blocks`]). Unplugged blocks
//! are released on the host (`MADV_DONTNEED`, and `FALLOC_FL_PUNCH_HOLE`
//! for a memfd region) before the guest hears "done". Nothing the guest
//! sends can make the device panic: malformed requests are answered with
//! `VIRTIO_MEM_RESP_ERROR`, plugging past the requested size with `NACK`,
//! and each kind is counted.

pub mod blocks;
mod handler;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::event_loop::EventHandler;
use crate::virtio::fault::ignored_config_write;
use crate::virtio::{
    read_config_from_slice, take_queues, ActivateError, ActiveQueue, DeviceCounters,
    GuestMemoryMmap, VirtioDevice, VirtioInterrupt, VirtioInterruptType, VIRTIO_F_VERSION_1,
};
use blocks::Blocks;

/// Virtio device id of a memory device.
pub const VIRTIO_ID_MEM: u32 = 24;
/// Size of the request queue (upstream's).
pub const QUEUE_SIZE: u16 = 128;
/// `VIRTIO_MEM_F_ACPI_PXM`: `node_id` is an ACPI proximity domain.
pub const VIRTIO_MEM_F_ACPI_PXM: u32 = 0;
/// Size of `struct virtio_mem_config`.
pub const CONFIG_LEN: usize = 56;

/// Where the region is and how its host memory is given back.
pub struct MemRegion {
    /// Guest physical start (aligned to the block size).
    pub addr: u64,
    /// Size in bytes (a multiple of the block size).
    pub size: u64,
    /// Bytes per block (a power of two).
    pub block_size: u64,
    /// The region's memfd, if it has one: released blocks get a hole
    /// punched at `addr - region start + file_offset`.
    pub file: Option<Arc<File>>,
    /// Offset of the region's first byte in `file`.
    pub file_offset: u64,
    /// Guest NUMA node (ACPI proximity domain), if the zone has one.
    pub node_id: Option<u16>,
}

/// Errors of [`VirtioMemHandle::resize`].
#[derive(Debug, thiserror::Error)]
pub enum ResizeError {
    /// Not a multiple of the block size.
    #[error("{size} bytes is not a multiple of the {block_size}-byte block size")]
    Unaligned {
        /// Asked size.
        size: u64,
        /// Block size.
        block_size: u64,
    },
    /// More than the region holds.
    #[error("{size} bytes exceed the virtio-mem region ({region} bytes)")]
    TooLarge {
        /// Asked size.
        size: u64,
        /// Region size.
        region: u64,
    },
    /// The configuration-change interrupt could not be raised.
    #[error("raising the configuration change interrupt: {0}")]
    Interrupt(std::io::Error),
}

/// What the device has seen, for `vm.counters`.
#[derive(Debug, Default)]
pub struct MemMetrics {
    /// Plug requests accepted.
    pub plug_requests: AtomicU64,
    /// Unplug requests accepted.
    pub unplug_requests: AtomicU64,
    /// Unplug-all requests accepted.
    pub unplug_all_requests: AtomicU64,
    /// State requests answered.
    pub state_requests: AtomicU64,
    /// Plug requests past the requested size (answered NACK).
    pub nacks: AtomicU64,
    /// Requests with a misaligned address or no blocks (ERROR).
    pub bad_alignment: AtomicU64,
    /// Requests leaving the region (ERROR).
    pub bad_range: AtomicU64,
    /// Plugging plugged blocks or unplugging unplugged ones (ERROR).
    pub bad_state: AtomicU64,
    /// Undefined request types (ERROR).
    pub bad_type: AtomicU64,
    /// Chains too short for a request and its response, outside guest
    /// RAM, or with indirect descriptors (returned unanswered).
    pub bad_descriptors: AtomicU64,
    /// Host memory of unplugged blocks that could not be released (the
    /// request is answered ERROR and the blocks stay plugged).
    pub release_errors: AtomicU64,
    /// Guest writes to the (read-only) configuration space.
    pub config_writes: AtomicU64,
    /// Times the host changed the requested size.
    pub resizes: AtomicU64,
}

/// State shared by the device model (config reads on vCPUs), its thread
/// (requests) and the VMM's handle (resizes).
struct Shared {
    blocks: Mutex<Blocks>,
    node_id: Option<u16>,
    metrics: MemMetrics,
    interrupt: Mutex<Option<Arc<dyn VirtioInterrupt>>>,
}

impl Shared {
    fn blocks(&self) -> MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn config(&self) -> [u8; CONFIG_LEN] {
        let b = self.blocks();
        let mut c = [0u8; CONFIG_LEN];
        c[0..8].copy_from_slice(&b.block_size().to_le_bytes());
        c[8..10].copy_from_slice(&self.node_id.unwrap_or(0).to_le_bytes());
        c[16..24].copy_from_slice(&b.addr().to_le_bytes());
        c[24..32].copy_from_slice(&b.region_size().to_le_bytes());
        // usable_region_size: the whole region may be plugged.
        c[32..40].copy_from_slice(&b.region_size().to_le_bytes());
        c[40..48].copy_from_slice(&b.plugged_size().to_le_bytes());
        c[48..56].copy_from_slice(&b.requested_size().to_le_bytes());
        c
    }
}

impl DeviceCounters for Shared {
    fn snapshot(&self) -> BTreeMap<String, u64> {
        let m = &self.metrics;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (region, plugged, requested) = {
            let b = self.blocks();
            (b.region_size(), b.plugged_size(), b.requested_size())
        };
        crate::virtio::named_counters(&[
            ("region_size", region),
            ("plugged_size", plugged),
            ("requested_size", requested),
            ("plug_requests", load(&m.plug_requests)),
            ("unplug_requests", load(&m.unplug_requests)),
            ("unplug_all_requests", load(&m.unplug_all_requests)),
            ("state_requests", load(&m.state_requests)),
            ("nacks", load(&m.nacks)),
            ("bad_alignment", load(&m.bad_alignment)),
            ("bad_range", load(&m.bad_range)),
            ("bad_state", load(&m.bad_state)),
            ("bad_type", load(&m.bad_type)),
            ("bad_descriptors", load(&m.bad_descriptors)),
            ("release_errors", load(&m.release_errors)),
            ("config_writes", load(&m.config_writes)),
            ("resizes", load(&m.resizes)),
        ])
    }
}

/// The virtio-mem device of one memory zone.
pub struct VirtioMem {
    shared: Arc<Shared>,
    file: Option<Arc<File>>,
    file_offset: u64,
}

impl VirtioMem {
    /// A device over `region` with `requested` bytes to be plugged from the
    /// start (the zone's `hotplugged_size`).
    pub fn new(region: MemRegion, requested: u64) -> Result<Self, ResizeError> {
        let mut blocks = Blocks::new(region.addr, region.size, region.block_size);
        check_size(&blocks, requested)?;
        blocks.set_requested(requested);
        Ok(Self {
            shared: Arc::new(Shared {
                blocks: Mutex::new(blocks),
                node_id: region.node_id,
                metrics: MemMetrics::default(),
                interrupt: Mutex::new(None),
            }),
            file: region.file,
            file_offset: region.file_offset,
        })
    }

    /// The handle the VMM resizes the device with.
    pub fn handle(&self) -> VirtioMemHandle {
        VirtioMemHandle {
            shared: self.shared.clone(),
        }
    }
}

fn check_size(blocks: &Blocks, size: u64) -> Result<(), ResizeError> {
    if !size.is_multiple_of(blocks.block_size()) {
        return Err(ResizeError::Unaligned {
            size,
            block_size: blocks.block_size(),
        });
    }
    if size > blocks.region_size() {
        return Err(ResizeError::TooLarge {
            size,
            region: blocks.region_size(),
        });
    }
    Ok(())
}

impl VirtioDevice for VirtioMem {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_MEM
    }

    fn queue_max_sizes(&self) -> Vec<u16> {
        vec![QUEUE_SIZE]
    }

    fn features(&self) -> u64 {
        let pxm = if self.shared.node_id.is_some() {
            1 << VIRTIO_MEM_F_ACPI_PXM
        } else {
            0
        };
        (1 << VIRTIO_F_VERSION_1) | pxm
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        read_config_from_slice(&self.shared.config(), offset, data);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        ignored_config_write(
            &self.shared.metrics.config_writes,
            "virtio-mem",
            offset,
            data,
            "the configuration is read-only",
        );
    }

    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Box<dyn EventHandler>, ActivateError> {
        let [active] = take_queues(queues, [0])?;
        *self
            .shared
            .interrupt
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(interrupt.clone());
        Ok(Box::new(handler::RequestPath::new(
            mem,
            interrupt,
            active,
            self.shared.clone(),
            self.file.clone(),
            self.file_offset,
        )))
    }

    fn reset(&mut self) {
        // No configuration interrupt from a resize until activated again.
        // Plugged blocks stay plugged: a driver that probes again finds
        // plugged_size and unplugs everything first (UNPLUG_ALL), as
        // Linux's does; a rebooted VM is rebuilt with a fresh device.
        *self
            .shared
            .interrupt
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn counters(&self) -> Arc<dyn DeviceCounters> {
        self.shared.clone()
    }

    fn thread_name(&self) -> &'static str {
        "virtio-mem"
    }
}

/// The VMM's view of one device: ask for a size, read the sizes. Never
/// waits for the guest.
#[derive(Clone)]
pub struct VirtioMemHandle {
    shared: Arc<Shared>,
}

impl VirtioMemHandle {
    /// Asks the guest to have `size` bytes plugged (a multiple of the block
    /// size, at most the region) and tells it so with the configuration
    /// change interrupt (if its driver is active). Returns at once.
    pub fn resize(&self, size: u64) -> Result<(), ResizeError> {
        {
            let mut b = self.shared.blocks();
            check_size(&b, size)?;
            b.set_requested(size);
        }
        self.shared.metrics.resizes.fetch_add(1, Ordering::Relaxed);
        let irq = self
            .shared
            .interrupt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(irq) = irq {
            irq.trigger(VirtioInterruptType::Config)
                .map_err(ResizeError::Interrupt)?;
        }
        Ok(())
    }

    /// Bytes the guest has plugged.
    pub fn plugged_size(&self) -> u64 {
        self.shared.blocks().plugged_size()
    }

    /// Bytes the host asked for.
    pub fn requested_size(&self) -> u64 {
        self.shared.blocks().requested_size()
    }

    /// Size of the region.
    pub fn region_size(&self) -> u64 {
        self.shared.blocks().region_size()
    }

    /// The device's counters (as in `vm.counters`).
    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.shared.snapshot()
    }
}
