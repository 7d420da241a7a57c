//! Queue processing: turns the guest's descriptor chains into inflate,
//! deflate and statistics updates. Pure with respect to threads and epoll
//! (see `event_handler` for the loop), so tests and the fuzz target drive
//! it directly.
//!
//! Every chain the guest posts is returned in the used ring (length 0),
//! also when it was malformed, so a driver waiting for its buffer never
//! hangs; the one exception is the statistics buffer, which is held until
//! the host wants fresh statistics (that is how the protocol asks).

use std::sync::Arc;

use log::warn;
use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::Bytes;
use vmm_sys_util::eventfd::EventFd;

use devices::virtio::chain::refuse_indirect;
use devices::virtio::{
    ActivateError, ActiveQueue, GuestMemoryMmap, VirtioInterrupt, VirtioInterruptType,
};

use crate::defs::{
    queue_layout, QueueKind, MAX_PFNS_PER_CHAIN, MAX_STATS_PER_BUFFER, STAT_ENTRY_SIZE,
    VIRTIO_BALLOON_F_HETERO_MEM,
};
use crate::device::Shared;
use crate::metrics::{BadDescriptor, Metrics};
use crate::stats::{parse_entries, tag_name};
use crate::tier::{TierMemory, Tiers};

/// One activated queue.
pub(crate) struct Slot {
    pub(crate) kind: QueueKind,
    pub(crate) index: usize,
    pub(crate) queue: Queue,
    pub(crate) event: EventFd,
}

/// The device's data path.
pub struct BalloonHandler {
    mem: GuestMemoryMmap,
    interrupt: Arc<dyn VirtioInterrupt>,
    pub(crate) slots: Vec<Slot>,
    tiers: Tiers,
    shared: Arc<Shared>,
    hetero: bool,
    /// The statistics buffer the guest posted, held until a refresh.
    stats_held: Option<(usize, u16)>,
}

enum ChainError {
    Bad(BadDescriptor),
}

/// Reads a device-readable chain whole, at most `max` bytes, a multiple of
/// `unit` bytes long.
fn read_chain<M>(
    mem: &GuestMemoryMmap,
    chain: virtio_queue::DescriptorChain<M>,
    max: usize,
    unit: usize,
) -> Result<Vec<u8>, ChainError>
where
    M: std::ops::Deref,
    M::Target: vm_memory::GuestMemory,
{
    let mut buf = Vec::new();
    for desc in chain {
        if desc.is_write_only() {
            return Err(ChainError::Bad(BadDescriptor::WrongDirection));
        }
        let len = desc.len() as usize;
        if len > max - buf.len() {
            return Err(ChainError::Bad(BadDescriptor::TooLong));
        }
        let start = buf.len();
        buf.resize(start + len, 0);
        mem.read_slice(&mut buf[start..], desc.addr())
            .map_err(|_| ChainError::Bad(BadDescriptor::Unreadable))?;
    }
    if buf.len() % unit != 0 {
        return Err(ChainError::Bad(BadDescriptor::BadLength));
    }
    Ok(buf)
}

impl BalloonHandler {
    /// Builds the handler for the queues the transport handed over.
    pub(crate) fn new(
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
        acked: u64,
        tiers: &[TierMemory; 2],
        shared: Arc<Shared>,
    ) -> Result<Self, ActivateError> {
        let layout = queue_layout(acked);
        let mut slots = Vec::new();
        for q in queues {
            let Some(&(kind, _)) = layout.get(q.index) else {
                return Err(ActivateError::Invalid(format!(
                    "balloon has no queue {}",
                    q.index
                )));
            };
            slots.push(Slot {
                kind,
                index: q.index,
                queue: q.queue,
                event: q.event,
            });
        }
        for required in [0, 1] {
            if !slots.iter().any(|s| s.index == required) {
                return Err(ActivateError::MissingQueue(required));
            }
        }
        Ok(Self {
            mem,
            interrupt,
            slots,
            tiers: Tiers::new(tiers),
            shared,
            hetero: acked & (1 << VIRTIO_BALLOON_F_HETERO_MEM) != 0,
            stats_held: None,
        })
    }

    /// Processes every queue.
    pub fn process_all(&mut self) {
        for s in 0..self.slots.len() {
            self.process_slot(s);
        }
    }

    /// Processes the queue with driver index `index`, if activated.
    pub fn process_queue(&mut self, index: usize) {
        if let Some(s) = self.slots.iter().position(|s| s.index == index) {
            self.process_slot(s);
        }
    }

    pub(crate) fn process_slot(&mut self, s: usize) {
        let Self {
            mem,
            interrupt,
            slots,
            tiers,
            shared,
            hetero,
            stats_held,
        } = self;
        let metrics = &shared.metrics;
        let slot = &mut slots[s];
        let (kind, index) = (slot.kind, slot.index);
        let size = slot.queue.size();
        let chains: Vec<_> = match slot.queue.iter(&*mem) {
            Ok(it) => it.collect(),
            Err(_) => {
                metrics.bad_descriptor(BadDescriptor::BadRing, index);
                return;
            }
        };
        let mut used = Vec::with_capacity(chains.len());
        for chain in chains {
            let head = chain.head_index();
            if head >= size {
                metrics.bad_descriptor(BadDescriptor::BadRing, index);
                continue;
            }
            if refuse_indirect(&slot.queue, mem, head).is_err() {
                metrics.bad_descriptor(BadDescriptor::IndirectTable, index);
                used.push(head);
                continue;
            }
            match kind {
                QueueKind::Inflate { tier } | QueueKind::Deflate { tier } => {
                    used.push(head);
                    let buf = match read_chain(mem, chain, MAX_PFNS_PER_CHAIN * 4, 4) {
                        Ok(b) => b,
                        Err(ChainError::Bad(why)) => {
                            metrics.bad_descriptor(why, index);
                            continue;
                        }
                    };
                    if buf.is_empty() {
                        Metrics::add(&metrics.empty_chains, 1);
                        continue;
                    }
                    let pfns: Vec<u32> = buf
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect();
                    if matches!(kind, QueueKind::Inflate { .. }) {
                        // Sorted, neighbouring pages are released with one
                        // madvise/fallocate per run.
                        let mut pfns = pfns;
                        pfns.sort_unstable();
                        tiers.inflate(mem, &pfns, tier, metrics, index);
                    } else {
                        tiers.deflate(mem, &pfns, tier, metrics, index);
                    }
                }
                QueueKind::Stats => {
                    match read_chain(
                        mem,
                        chain,
                        MAX_STATS_PER_BUFFER * STAT_ENTRY_SIZE,
                        STAT_ENTRY_SIZE,
                    ) {
                        Ok(buf) => {
                            let mut stats = shared.stats.lock().unwrap_or_else(|p| p.into_inner());
                            for e in parse_entries(&buf) {
                                if tag_name(e.tag, *hetero).is_some() {
                                    stats.by_tag.insert(e.tag, e.val);
                                } else {
                                    metrics.unknown_stat_tag(e.tag);
                                }
                            }
                            stats.updates += 1;
                            Metrics::add(&metrics.stats_updates, 1);
                        }
                        Err(ChainError::Bad(why)) => metrics.bad_descriptor(why, index),
                    }
                    // Hold the buffer: giving it back is how the host asks
                    // for the next update. A driver posts only one; if a
                    // second arrives, return the older one.
                    if let Some((_, old)) = stats_held.replace((s, head)) {
                        metrics.bad_descriptor(BadDescriptor::ExtraStatsBuffer, index);
                        used.push(old);
                    }
                }
            }
        }
        Self::complete(mem, &**interrupt, slot, &used, metrics);
    }

    /// Returns `heads` to the guest and interrupts it if it wants that.
    fn complete(
        mem: &GuestMemoryMmap,
        interrupt: &dyn VirtioInterrupt,
        slot: &mut Slot,
        heads: &[u16],
        metrics: &Metrics,
    ) {
        if heads.is_empty() {
            return;
        }
        for &head in heads {
            if let Err(e) = slot.queue.add_used(mem, head, 0) {
                warn!("balloon: queue {}: adding used buffer: {e}", slot.index);
            }
        }
        if slot.queue.needs_notification(mem).unwrap_or(true) {
            if let Err(e) = interrupt.trigger(VirtioInterruptType::Queue(slot.index as u16)) {
                if metrics
                    .interrupt_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    == 0
                {
                    warn!("balloon: raising queue interrupt: {e}");
                }
            }
        }
    }

    /// Asks the guest for fresh statistics by giving back the statistics
    /// buffer it posted. Returns false if no buffer is held (no statistics
    /// queue, or the guest has not sent one yet).
    pub fn request_stats(&mut self) -> bool {
        let Some((s, head)) = self.stats_held.take() else {
            return false;
        };
        Metrics::add(&self.shared.metrics.stats_requests, 1);
        Self::complete(
            &self.mem,
            &*self.interrupt,
            &mut self.slots[s],
            &[head],
            &self.shared.metrics,
        );
        true
    }

    /// Forgets every inflated page (the driver went away).
    pub(crate) fn clear(&mut self) {
        self.tiers.clear(&self.shared.metrics);
    }

    /// Whether the 4 KiB page at `gpa` is in the balloon.
    #[cfg(test)]
    pub(crate) fn is_inflated(&self, gpa: u64) -> bool {
        self.tiers.is_inflated(gpa)
    }
}
