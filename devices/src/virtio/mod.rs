//! Virtio 1.x devices, kept apart from their transport.
//!
//! A device implements [`VirtioDevice`]: it says what it offers (device
//! type, feature bits, queue sizes, configuration space) and is activated
//! once the driver has set `DRIVER_OK`, receiving guest memory, an
//! interrupt and its ready queues with their notification eventfds. The
//! transport ([`MmioTransport`], virtio-mmio version 2) runs the status
//! state machine and validates everything the guest writes before a device
//! sees it. A device never touches KVM: interrupts leave through a
//! [`VirtioInterrupt`] and notifications arrive on eventfds, so a device can
//! be tested (and fuzzed) without a VM.

pub mod block;
pub mod chain;
pub mod console;
pub mod fault;
#[cfg(test)]
pub(crate) mod fuzz_support;
mod mmio;
pub mod net;
pub mod rng;
pub mod tap;

pub use block::{Block, DiskOptions};
pub use console::{Console, ConsoleInput};
pub use mmio::{MmioInterrupt, MmioTransport, MMIO_NOTIFY_OFFSET, MMIO_WINDOW_SIZE, RESET_WAIT};
pub use net::{Net, NetOptions};
pub use rng::Rng;
pub use tap::Tap;

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use vmm_sys_util::eventfd::EventFd;

use crate::event_loop::EventHandler;

pub use virtio_queue::{Queue, QueueT};

/// Guest memory as seen by virtio devices.
pub type GuestMemoryMmap = vm_memory::GuestMemoryMmap<()>;

/// Device status bits (virtio 1.2 section 2.1).
pub mod status {
    /// The guest found the device.
    pub const ACKNOWLEDGE: u32 = virtio_bindings::virtio_config::VIRTIO_CONFIG_S_ACKNOWLEDGE;
    /// The guest knows how to drive it.
    pub const DRIVER: u32 = virtio_bindings::virtio_config::VIRTIO_CONFIG_S_DRIVER;
    /// The driver is set up and ready to drive the device.
    pub const DRIVER_OK: u32 = virtio_bindings::virtio_config::VIRTIO_CONFIG_S_DRIVER_OK;
    /// Feature negotiation is complete.
    pub const FEATURES_OK: u32 = virtio_bindings::virtio_config::VIRTIO_CONFIG_S_FEATURES_OK;
    /// The device hit an error it cannot recover from without a reset.
    pub const DEVICE_NEEDS_RESET: u32 = virtio_bindings::virtio_config::VIRTIO_CONFIG_S_NEEDS_RESET;
    /// The driver gave up on the device.
    pub const FAILED: u32 = virtio_bindings::virtio_config::VIRTIO_CONFIG_S_FAILED;
}

/// `VIRTIO_F_VERSION_1` (bit 32): the device is a virtio 1.x ("modern")
/// device. Every device driven by [`MmioTransport`] must offer it and the
/// driver must accept it.
pub const VIRTIO_F_VERSION_1: u32 = virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;

/// Which interrupt a device raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirtioInterruptType {
    /// The configuration space changed (sets "configuration change" in the
    /// transport's interrupt status).
    Config,
    /// Buffers were put in the used ring of this queue (sets "used buffer").
    Queue(u16),
}

/// How a device notifies the driver. Implemented by the transport; devices
/// call it from their own threads.
pub trait VirtioInterrupt: Send + Sync {
    /// Raises the interrupt.
    fn trigger(&self, int_type: VirtioInterruptType) -> io::Result<()>;
}

/// An interrupt that goes nowhere, for tests and fuzzing.
#[derive(Debug, Default)]
pub struct NoopInterrupt;

impl VirtioInterrupt for NoopInterrupt {
    fn trigger(&self, _int_type: VirtioInterruptType) -> io::Result<()> {
        Ok(())
    }
}

/// Why a device could not be activated.
#[derive(Debug, thiserror::Error)]
pub enum ActivateError {
    /// The driver did not set up a queue the device needs.
    #[error("queue {0} is required but was not made ready by the driver")]
    MissingQueue(usize),
    /// Starting the device's worker failed.
    #[error("starting the device worker: {0}")]
    Worker(#[source] io::Error),
    /// Something else the device could not accept.
    #[error("{0}")]
    Invalid(String),
}

/// A queue handed to a device at activation: its index (as the driver
/// numbers it), the queue itself, and the eventfd the driver's notifications
/// arrive on.
pub struct ActiveQueue {
    /// Queue index.
    pub index: usize,
    /// The queue, validated against guest memory by the transport.
    pub queue: Queue,
    /// Signalled when the driver notifies this queue.
    pub event: EventFd,
}

/// A virtio device, independent of the transport that exposes it.
///
/// Calls come from the transport (on vCPU threads, under the device's lock)
/// except where noted; they must be quick and must not block on the guest.
pub trait VirtioDevice: Send {
    /// Virtio device id (virtio 1.2 section 5), e.g. 5 for a balloon.
    fn device_type(&self) -> u32;

    /// Maximum size of each queue the driver may set up, in queue-index
    /// order. The list may depend on the features the driver accepted
    /// ([`VirtioDevice::ack_features`]): a transport reads it once when it
    /// is created (that length bounds the queue count and the notification
    /// eventfds) and again after `FEATURES_OK`. Sizes must be powers of two.
    fn queue_max_sizes(&self) -> Vec<u16>;

    /// Feature bits the device offers. Must include [`VIRTIO_F_VERSION_1`].
    fn features(&self) -> u64;

    /// The features the driver accepted, a subset of
    /// [`VirtioDevice::features`] (checked by the transport). Called when
    /// the driver sets `FEATURES_OK`; a reset forgets them. Devices whose
    /// behaviour does not depend on them keep the default.
    fn ack_features(&mut self, _features: u64) {}

    /// Reads device configuration space at `offset`. Bytes outside the
    /// configuration space read as zero.
    fn read_config(&self, offset: u64, data: &mut [u8]);

    /// Guest write to configuration space; the device validates it.
    fn write_config(&mut self, offset: u64, data: &[u8]);

    /// Builds the device's data path once the driver set `DRIVER_OK`.
    /// `queues` holds the queues the driver made ready, each already
    /// checked to lie in guest memory. The transport hands the result to
    /// the device's thread ([`DeviceLoop`](crate::event_loop::DeviceLoop));
    /// this call must not block.
    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Box<dyn EventHandler>, ActivateError>;

    /// How many device threads serve the device: one per queue (or queue
    /// pair) for a multiqueue device, so no lock is shared on the I/O path.
    /// Fixed when the device is created; the VMM starts that many
    /// [`DeviceLoop`](crate::event_loop::DeviceLoop)s.
    fn worker_count(&self) -> usize {
        1
    }

    /// [`VirtioDevice::activate`] for a device with several device
    /// threads: one data path per thread (at most
    /// [`VirtioDevice::worker_count`]), the `i`-th run by thread `i`.
    fn activate_workers(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Vec<Box<dyn EventHandler>>, ActivateError> {
        self.activate(mem, interrupt, queues).map(|h| vec![h])
    }

    /// The driver wrote 0 to the status register: return the device's own
    /// state to before negotiation. The transport resets the data path
    /// (on the device thread) separately.
    fn reset(&mut self) {}

    /// The device's counters, for `vm.counters`.
    fn counters(&self) -> Arc<dyn DeviceCounters> {
        Arc::new(NoCounters)
    }

    /// Name of the device's thread; it selects the thread's sandbox.
    fn thread_name(&self) -> &'static str {
        thread_name(self.device_type())
    }
}

/// Counters a device keeps about itself and about what its guest did
/// (requests, bytes, faults), by name.
pub trait DeviceCounters: Send + Sync {
    /// Counter name to value.
    fn snapshot(&self) -> BTreeMap<String, u64>;
}

/// Builds a [`DeviceCounters::snapshot`] from fixed names.
pub fn named_counters(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
}

/// A device without counters.
#[derive(Debug, Default)]
pub struct NoCounters;

impl DeviceCounters for NoCounters {
    fn snapshot(&self) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }
}

/// The device-thread name for a virtio device id; the VMM's seccomp
/// filters are keyed by these names.
pub fn thread_name(device_type: u32) -> &'static str {
    match device_type {
        net::VIRTIO_ID_NET => "virtio-net",
        block::VIRTIO_ID_BLOCK => "virtio-blk",
        console::VIRTIO_ID_CONSOLE => "virtio-console",
        rng::VIRTIO_ID_RNG => "virtio-rng",
        5 => "balloon",
        24 => "virtio-mem",
        _ => "virtio-device",
    }
}

/// Picks the queues a device needs, in the order of `indices`, from those
/// the transport handed to [`VirtioDevice::activate`]; a missing one is
/// [`ActivateError::MissingQueue`].
pub fn take_queues<const N: usize>(
    queues: Vec<ActiveQueue>,
    indices: [usize; N],
) -> Result<[ActiveQueue; N], ActivateError> {
    let mut by_index: BTreeMap<usize, ActiveQueue> =
        queues.into_iter().map(|q| (q.index, q)).collect();
    let mut picked = Vec::with_capacity(N);
    for i in indices {
        picked.push(by_index.remove(&i).ok_or(ActivateError::MissingQueue(i))?);
    }
    picked
        .try_into()
        .map_err(|_| ActivateError::Invalid("a queue index was asked for twice".into()))
}

/// [`VirtioDevice::activate`] of a device that builds one data path per
/// thread: its only path, or an error naming `what` when the queues the
/// driver set up need several threads.
pub fn single_worker(
    mut workers: Vec<Box<dyn EventHandler>>,
    what: &str,
) -> Result<Box<dyn EventHandler>, ActivateError> {
    match workers.pop() {
        Some(worker) if workers.is_empty() => Ok(worker),
        _ => Err(ActivateError::Invalid(format!(
            "several {what} need one device thread each (activate_workers)"
        ))),
    }
}

/// Helper for `read_config`: copies `config[offset..]` into `data`, zero
/// filling what lies outside `config`.
pub fn read_config_from_slice(config: &[u8], offset: u64, data: &mut [u8]) {
    data.fill(0);
    let Ok(start) = usize::try_from(offset) else {
        return;
    };
    if start >= config.len() {
        return;
    }
    let n = data.len().min(config.len() - start);
    data[..n].copy_from_slice(&config[start..start + n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_slice_reads_zero_fill_outside() {
        let cfg = [1u8, 2, 3, 4];
        let mut d = [9u8; 4];
        read_config_from_slice(&cfg, 2, &mut d);
        assert_eq!(d, [3, 4, 0, 0]);
        read_config_from_slice(&cfg, 4, &mut d);
        assert_eq!(d, [0; 4]);
        read_config_from_slice(&cfg, u64::MAX, &mut d);
        assert_eq!(d, [0; 4]);
    }
}
