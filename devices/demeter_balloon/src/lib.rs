//! Demeter's double balloon: a virtio-balloon device (virtio id 5) that
//! resizes each memory tier of a VM on its own.
//!
//! One device carries two balloons. The usual inflate/deflate queue pair
//! and `num_pages`/`actual` serve the fast tier (FMem, tier 0); with
//! `VIRTIO_BALLOON_F_HETERO_MEM` (bit 6) negotiated, a second pair and
//! `num_hetero_pages`/`actual_hetero` serve the slow tier (SMem, tier 1).
//! Without that feature it is a plain virtio balloon that Linux's stock
//! `virtio_balloon` drives. See `docs/balloon.md` for the wire protocol.
//!
//! Layout, one role per module:
//! * [`defs`] — wire constants and the queue layout;
//! * [`device`] — [`Balloon`] (the [`VirtioDevice`](devices::virtio::VirtioDevice))
//!   and [`BalloonHandle`], the control API for the VMM thread;
//! * [`handler`] — the data path (descriptor chains → inflate, deflate,
//!   statistics), usable without a thread for tests and fuzzing;
//! * `event_handler` — the data path as the shared device loop runs it
//!   (queues, statistics requests, the statistics timer);
//! * [`tier`] — which RAM belongs to which tier, the inflated-page bitmaps
//!   and the release of host memory;
//! * [`stats`] — the statistics tag table;
//! * [`metrics`] — counters.
//!
//! ```no_run
//! use std::sync::{Arc, Mutex};
//! use demeter_balloon::{Balloon, BalloonConfig, TierMemory, TierRange};
//! use devices::event_loop::DeviceLoop;
//! use devices::virtio::{GuestMemoryMmap, MmioTransport, MMIO_WINDOW_SIZE};
//! use devices::IrqTrigger;
//!
//! # fn f(mem: GuestMemoryMmap, mmio_bus: &mut devices::Bus) -> Result<(), Box<dyn std::error::Error>> {
//! let tiers = [
//!     TierMemory::new(vec![TierRange::anonymous(0, 1 << 30)]),
//!     TierMemory::new(vec![TierRange::anonymous(1 << 30, 4 << 30)]),
//! ];
//! let config = BalloonConfig { heterogeneous_memory: true, statistics: true, ..Default::default() };
//! let balloon = Arc::new(Mutex::new(Balloon::new(config, tiers)?));
//! let handle = balloon.lock().unwrap().handle();
//! // The device thread: keep `device_loop` as long as the device lives.
//! let device_loop = DeviceLoop::spawn("balloon")?;
//! let transport = MmioTransport::new(balloon, mem, IrqTrigger::new()?, device_loop.handle())?;
//! // Register transport.irq_evt() as an irqfd and transport.queue_evts()
//! // as ioeventfds (see devices::virtio::MmioTransport), then:
//! mmio_bus.insert(Arc::new(Mutex::new(transport)), 0xd000_0000, MMIO_WINDOW_SIZE)?;
//! handle.resize([256 << 20, 1 << 30])?;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod defs;
pub mod device;
mod event_handler;
#[doc(hidden)]
pub mod fuzzing;
pub mod handler;
pub mod metrics;
pub mod stats;
pub mod tier;

pub use device::{Balloon, BalloonConfig, BalloonHandle, BalloonStats, TierStats};
pub use tier::{TierMemory, TierRange};

/// Errors of the balloon's constructor and control API.
#[derive(Debug, thiserror::Error)]
pub enum BalloonError {
    /// A target is not a whole number of 4 KiB pages.
    #[error("balloon size {size} for {tier} is not a multiple of 4 KiB")]
    NotPageAligned {
        /// Tier name.
        tier: &'static str,
        /// The size asked for.
        size: u64,
    },
    /// A target is larger than the memory it can be taken from.
    #[error("balloon size {size} for {tier} is larger than the {limit} bytes it can take")]
    LargerThanTier {
        /// Tier name.
        tier: &'static str,
        /// The size asked for.
        size: u64,
        /// The largest size allowed.
        limit: u64,
    },
    /// A non-zero SMem target without HETERO_MEM.
    #[error(
        "an SMem balloon size needs heterogeneous_memory=on and a guest driver that supports it"
    )]
    NoHeteroMem,
    /// The tier description is unusable.
    #[error("invalid memory tiers: {0}")]
    InvalidTiers(String),
    /// Creating an eventfd failed.
    #[error("creating an eventfd: {0}")]
    EventFd(#[source] std::io::Error),
    /// Signalling the guest or the device thread failed.
    #[error("signalling the balloon: {0}")]
    Interrupt(#[source] std::io::Error),
}

#[cfg(test)]
mod tests;
