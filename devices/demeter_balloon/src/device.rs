//! The balloon as a [`VirtioDevice`], and its control API.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vmm_sys_util::eventfd::EventFd;

use devices::event_loop::EventHandler;
use devices::virtio::{
    read_config_from_slice, ActivateError, ActiveQueue, DeviceCounters, GuestMemoryMmap,
    VirtioDevice, VirtioInterrupt, VirtioInterruptType, VIRTIO_F_VERSION_1,
};

use crate::defs::*;
use crate::event_handler::BalloonPath;
use crate::handler::BalloonHandler;
use crate::metrics::Metrics;
use crate::stats::{GuestStats, TAG_FMEM_FREE, TAG_FMEM_TOTAL, TAG_SMEM_FREE, TAG_SMEM_TOTAL};
use crate::tier::TierMemory;
use crate::BalloonError;

/// How the balloon is configured (the `--balloon` option).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalloonConfig {
    /// Initial targets in bytes: `[FMem, SMem]`. Multiples of 4 KiB.
    pub size: [u64; 2],
    /// Offer the statistics queue.
    pub statistics: bool,
    /// With `statistics`: how often the device asks the guest for fresh
    /// statistics (`None`: only when [`BalloonHandle::request_stats`] is
    /// called).
    pub stats_interval: Option<Duration>,
    /// Offer DEFLATE_ON_OOM: the guest may deflate under memory pressure.
    pub deflate_on_oom: bool,
    /// Offer HETERO_MEM: a second queue pair and target for the SMem tier.
    pub heterogeneous_memory: bool,
}

impl Default for BalloonConfig {
    fn default() -> Self {
        Self {
            size: [0, 0],
            statistics: false,
            stats_interval: Some(Duration::from_secs(1)),
            deflate_on_oom: false,
            heterogeneous_memory: false,
        }
    }
}

/// State shared by the device, its thread and the control handles.
pub(crate) struct Shared {
    /// `num_pages`, `num_hetero_pages`.
    target: [AtomicU32; 2],
    /// `actual`, `actual_hetero` as the guest reports them.
    actual: [AtomicU32; 2],
    offered: u64,
    acked: AtomicU64,
    negotiated: AtomicBool,
    tier_size: [u64; 2],
    pub(crate) metrics: Metrics,
    pub(crate) stats: Mutex<GuestStats>,
    interrupt: Mutex<Option<Arc<dyn VirtioInterrupt>>>,
    control: EventFd,
}

impl Shared {
    /// Whether the SMem tier is in play: HETERO_MEM negotiated, or (before
    /// negotiation) offered.
    fn hetero_active(&self) -> bool {
        let features = if self.negotiated.load(Ordering::SeqCst) {
            self.acked.load(Ordering::SeqCst)
        } else {
            self.offered
        };
        features & (1 << VIRTIO_BALLOON_F_HETERO_MEM) != 0
    }

    fn hetero_negotiated(&self) -> bool {
        self.negotiated.load(Ordering::SeqCst)
            && self.acked.load(Ordering::SeqCst) & (1 << VIRTIO_BALLOON_F_HETERO_MEM) != 0
    }

    /// Largest target of each tier. Without HETERO_MEM the single balloon
    /// may take pages from either tier, so its bound is all RAM.
    fn limits(&self) -> [u64; 2] {
        if self.hetero_active() {
            self.tier_size
        } else {
            [self.tier_size[0] + self.tier_size[1], 0]
        }
    }

    fn check_size(&self, size: [u64; 2]) -> Result<[u32; 2], BalloonError> {
        if size[1] != 0 && !self.hetero_active() {
            return Err(BalloonError::NoHeteroMem);
        }
        let limits = self.limits();
        let mut pages = [0u32; 2];
        for t in 0..2 {
            if !size[t].is_multiple_of(PAGE_SIZE) {
                return Err(BalloonError::NotPageAligned {
                    tier: TIER_NAMES[t],
                    size: size[t],
                });
            }
            if size[t] > limits[t] {
                return Err(BalloonError::LargerThanTier {
                    tier: TIER_NAMES[t],
                    size: size[t],
                    limit: limits[t],
                });
            }
            pages[t] =
                u32::try_from(size[t] / PAGE_SIZE).map_err(|_| BalloonError::LargerThanTier {
                    tier: TIER_NAMES[t],
                    size: size[t],
                    limit: u64::from(u32::MAX) * PAGE_SIZE,
                })?;
        }
        Ok(pages)
    }

    fn config_bytes(&self) -> [u8; CONFIG_SIZE] {
        let fields = [
            self.target[FMEM].load(Ordering::SeqCst),
            self.actual[FMEM].load(Ordering::SeqCst),
            0, // free_page_hint_cmd_id
            0, // poison_val
            self.target[SMEM].load(Ordering::SeqCst),
            self.actual[SMEM].load(Ordering::SeqCst),
        ];
        let mut b = [0u8; CONFIG_SIZE];
        for (i, f) in fields.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&f.to_le_bytes());
        }
        b
    }

    fn features(&self) -> u64 {
        if self.negotiated.load(Ordering::SeqCst) {
            self.acked.load(Ordering::SeqCst)
        } else {
            self.offered
        }
    }
}

/// Per-tier view of the balloon.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TierStats {
    /// Target the host set, bytes.
    pub target_bytes: u64,
    /// Balloon size the guest reports (`actual`/`actual_hetero`), bytes.
    pub actual_bytes: u64,
    /// Bytes of this tier the host holds as inflated (validated PFNs).
    pub host_balloon_bytes: u64,
    /// The guest's total memory of the tier (Demeter per-tier statistics).
    pub guest_total_bytes: Option<u64>,
    /// The guest's free memory of the tier.
    pub guest_free_bytes: Option<u64>,
    /// `guest_total_bytes - guest_free_bytes`.
    pub guest_used_bytes: Option<u64>,
}

/// What [`BalloonHandle::stats`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BalloonStats {
    /// Whether the driver negotiated HETERO_MEM (two balloons).
    pub heterogeneous_memory: bool,
    /// `[FMem, SMem]`. Without HETERO_MEM the single balloon is reported
    /// as FMem, and `host_balloon_bytes` still says which tier its pages
    /// came from.
    pub tiers: [TierStats; 2],
    /// The latest guest statistics by name (see [`crate::stats`]).
    pub guest: BTreeMap<String, u64>,
    /// Number of statistics updates received.
    pub updates: u64,
}

/// The control side of a balloon, for the VMM thread. Cheap to clone;
/// never blocks on the guest or on the device lock.
#[derive(Clone)]
pub struct BalloonHandle {
    shared: Arc<Shared>,
}

impl BalloonHandle {
    /// Sets the targets `[FMem, SMem]` in bytes and raises a configuration
    /// change interrupt so the driver moves its balloons.
    ///
    /// Errors (nothing changes): a size that is not a multiple of 4 KiB
    /// (sizes are not rounded), a size larger than its tier (without
    /// HETERO_MEM the single balloon is bounded by all RAM), a non-zero
    /// SMem size when HETERO_MEM is not negotiated (or, before the driver
    /// negotiated, not offered).
    pub fn resize(&self, size: [u64; 2]) -> Result<(), BalloonError> {
        let pages = self.shared.check_size(size)?;
        for (target, pages) in self.shared.target.iter().zip(pages) {
            target.store(pages, Ordering::SeqCst);
        }
        let irq = self
            .shared
            .interrupt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(irq) = irq {
            irq.trigger(VirtioInterruptType::Config)
                .map_err(BalloonError::Interrupt)?;
        }
        Ok(())
    }

    /// Balloon sizes the guest reports, bytes `[FMem, SMem]`.
    pub fn actual(&self) -> [u64; 2] {
        [0, 1].map(|t| u64::from(self.shared.actual[t].load(Ordering::SeqCst)) * PAGE_SIZE)
    }

    /// Current targets, bytes `[FMem, SMem]`.
    pub fn target(&self) -> [u64; 2] {
        [0, 1].map(|t| u64::from(self.shared.target[t].load(Ordering::SeqCst)) * PAGE_SIZE)
    }

    /// Targets, sizes and the guest's latest statistics.
    pub fn stats(&self) -> BalloonStats {
        let hetero = self.shared.hetero_negotiated();
        let guest = self
            .shared
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let target = self.target();
        let actual = self.actual();
        let tier_tags = [
            (TAG_FMEM_TOTAL, TAG_FMEM_FREE),
            (TAG_SMEM_TOTAL, TAG_SMEM_FREE),
        ];
        let tiers = [0, 1].map(|t| {
            let (total, free) = if hetero {
                (guest.get(tier_tags[t].0), guest.get(tier_tags[t].1))
            } else {
                (None, None)
            };
            TierStats {
                target_bytes: target[t],
                actual_bytes: actual[t],
                host_balloon_bytes: self.shared.metrics.balloon_pages[t].load(Ordering::Relaxed)
                    * PAGE_SIZE,
                guest_total_bytes: total,
                guest_free_bytes: free,
                guest_used_bytes: total.zip(free).map(|(t, f)| t.saturating_sub(f)),
            }
        });
        BalloonStats {
            heterogeneous_memory: hetero,
            tiers,
            guest: guest.named(hetero),
            updates: guest.updates,
        }
    }

    /// Every counter by name, plus targets, actual sizes and the latest
    /// guest statistics (`stat_<name>`).
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let mut m = self.shared.metrics.snapshot();
        let (target, actual) = (self.target(), self.actual());
        for t in 0..2 {
            m.insert(format!("{}_target_bytes", TIER_NAMES[t]), target[t]);
            m.insert(format!("{}_actual_bytes", TIER_NAMES[t]), actual[t]);
        }
        for (k, v) in self.stats().guest {
            m.insert(format!("stat_{k}"), v);
        }
        m
    }

    /// Asks the guest for fresh statistics now (asynchronous: the values
    /// show up in [`BalloonHandle::stats`] once the guest answered).
    pub fn request_stats(&self) -> Result<(), BalloonError> {
        self.shared
            .control
            .write(1)
            .map_err(BalloonError::Interrupt)
    }
}

/// The double balloon device.
pub struct Balloon {
    shared: Arc<Shared>,
    tiers: [TierMemory; 2],
    stats_interval: Option<Duration>,
}

impl Balloon {
    /// A balloon over the two tiers `tiers` (`[FMem, SMem]`; SMem may be
    /// empty unless `heterogeneous_memory` is set), with the initial
    /// targets of `config.size` (checked like [`BalloonHandle::resize`]).
    pub fn new(config: BalloonConfig, tiers: [TierMemory; 2]) -> Result<Self, BalloonError> {
        TierMemory::check(&tiers).map_err(BalloonError::InvalidTiers)?;
        if config.heterogeneous_memory && tiers[SMEM].size() == 0 {
            return Err(BalloonError::InvalidTiers(
                "heterogeneous_memory needs a non-empty SMem tier".into(),
            ));
        }
        if tiers[FMEM].size() == 0 {
            return Err(BalloonError::InvalidTiers("the FMem tier is empty".into()));
        }
        let mut offered = 1u64 << VIRTIO_F_VERSION_1;
        if config.statistics {
            offered |= 1 << VIRTIO_BALLOON_F_STATS_VQ;
        }
        if config.deflate_on_oom {
            offered |= 1 << VIRTIO_BALLOON_F_DEFLATE_ON_OOM;
        }
        if config.heterogeneous_memory {
            offered |= 1 << VIRTIO_BALLOON_F_HETERO_MEM;
        }
        let shared = Arc::new(Shared {
            target: Default::default(),
            actual: Default::default(),
            offered,
            acked: AtomicU64::new(0),
            negotiated: AtomicBool::new(false),
            tier_size: [tiers[FMEM].size(), tiers[SMEM].size()],
            metrics: Metrics::default(),
            stats: Mutex::new(GuestStats::default()),
            interrupt: Mutex::new(None),
            control: EventFd::new(libc::EFD_NONBLOCK).map_err(BalloonError::EventFd)?,
        });
        let pages = shared.check_size(config.size)?;
        for (target, pages) in shared.target.iter().zip(pages) {
            target.store(pages, Ordering::SeqCst);
        }
        Ok(Self {
            shared,
            tiers,
            stats_interval: if config.statistics {
                config.stats_interval
            } else {
                None
            },
        })
    }

    /// The control handle for the VMM thread.
    pub fn handle(&self) -> BalloonHandle {
        BalloonHandle {
            shared: self.shared.clone(),
        }
    }

    /// See [`BalloonHandle::resize`].
    pub fn resize(&self, size: [u64; 2]) -> Result<(), BalloonError> {
        self.handle().resize(size)
    }

    /// See [`BalloonHandle::actual`].
    pub fn actual(&self) -> [u64; 2] {
        self.handle().actual()
    }

    /// See [`BalloonHandle::target`].
    pub fn target(&self) -> [u64; 2] {
        self.handle().target()
    }

    /// See [`BalloonHandle::stats`].
    pub fn stats(&self) -> BalloonStats {
        self.handle().stats()
    }

    /// See [`BalloonHandle::counters`].
    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.handle().counters()
    }

    /// Builds the data-path handler without starting a thread (tests,
    /// fuzzing).
    pub fn handler(
        &self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<BalloonHandler, ActivateError> {
        BalloonHandler::new(
            mem,
            interrupt,
            queues,
            self.shared.features(),
            &self.tiers,
            self.shared.clone(),
        )
    }
}

impl VirtioDevice for Balloon {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_BALLOON
    }

    fn queue_max_sizes(&self) -> Vec<u16> {
        queue_layout(self.shared.features())
            .into_iter()
            .map(|(_, size)| size)
            .collect()
    }

    fn features(&self) -> u64 {
        self.shared.offered
    }

    fn ack_features(&mut self, features: u64) {
        self.shared
            .acked
            .store(features & self.shared.offered, Ordering::SeqCst);
        self.shared.negotiated.store(true, Ordering::SeqCst);
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        read_config_from_slice(&self.shared.config_bytes(), offset, data);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        let tier = match offset {
            CONFIG_ACTUAL => FMEM,
            CONFIG_ACTUAL_HETERO => SMEM,
            _ => {
                self.shared.metrics.bad_config_write(offset, data.len());
                return;
            }
        };
        let Ok(bytes) = <[u8; 4]>::try_from(data) else {
            self.shared.metrics.bad_config_write(offset, data.len());
            return;
        };
        self.shared.actual[tier].store(u32::from_le_bytes(bytes), Ordering::SeqCst);
    }

    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Box<dyn EventHandler>, ActivateError> {
        let handler = self.handler(mem, interrupt.clone(), queues)?;
        let control = self
            .shared
            .control
            .try_clone()
            .map_err(ActivateError::Worker)?;
        *self
            .shared
            .interrupt
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(interrupt);
        Ok(Box::new(BalloonPath {
            handler,
            control,
            stats_interval: self.stats_interval,
        }))
    }

    fn reset(&mut self) {
        // No more configuration interrupts from resize until activated again.
        *self
            .shared
            .interrupt
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        self.shared.negotiated.store(false, Ordering::SeqCst);
        self.shared.acked.store(0, Ordering::SeqCst);
        for t in 0..2 {
            self.shared.actual[t].store(0, Ordering::SeqCst);
        }
    }

    fn counters(&self) -> Arc<dyn DeviceCounters> {
        Arc::new(self.handle())
    }
}

impl DeviceCounters for BalloonHandle {
    fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counters()
    }
}
