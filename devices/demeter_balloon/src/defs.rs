//! Wire-protocol constants: feature bits, queue layout, config space.
//!
//! Compatible with the Demeter authors' double balloon (one virtio-balloon
//! device with a second inflate/deflate pair for the slow tier) and, when
//! `VIRTIO_BALLOON_F_HETERO_MEM` is not negotiated, with Linux's stock
//! `virtio_balloon` driver.

/// Virtio device id of a memory balloon.
pub const VIRTIO_ID_BALLOON: u32 = 5;

/// Feature bit: the host must be told before pages are used (not offered).
pub const VIRTIO_BALLOON_F_MUST_TELL_HOST: u32 = 0;
/// Feature bit: a statistics queue exists.
pub const VIRTIO_BALLOON_F_STATS_VQ: u32 = 1;
/// Feature bit: the guest deflates under memory pressure.
pub const VIRTIO_BALLOON_F_DEFLATE_ON_OOM: u32 = 2;
/// Feature bit: free page reporting queue (not offered).
pub const VIRTIO_BALLOON_F_REPORTING: u32 = 5;
/// Feature bit (Demeter): a second inflate/deflate queue pair for the
/// slow-memory (SMem) tier, and the `num_hetero_pages`/`actual_hetero`
/// config fields.
pub const VIRTIO_BALLOON_F_HETERO_MEM: u32 = 6;

/// Balloon PFNs are 4 KiB page frame numbers whatever the guest page size.
pub const PFN_SHIFT: u32 = 12;
/// Size of one balloon page.
pub const PAGE_SIZE: u64 = 1 << PFN_SHIFT;

/// Size of the inflate and deflate queues (both tiers).
pub const PFN_QUEUE_SIZE: u16 = 128;
/// Size of the statistics queue.
pub const STATS_QUEUE_SIZE: u16 = 32;

/// Most PFNs accepted in one descriptor chain. Linux's stock driver and
/// Demeter's send at most 256; longer chains are counted and skipped.
pub const MAX_PFNS_PER_CHAIN: usize = 4096;
/// Most statistics entries accepted in one buffer.
pub const MAX_STATS_PER_BUFFER: usize = 256;
/// Size of one packed `{tag: u16, val: u64}` statistics entry.
pub const STAT_ENTRY_SIZE: usize = 10;

/// Size of the config space.
pub const CONFIG_SIZE: usize = 24;
/// Config offset of `num_pages` (FMem target, host writes).
pub const CONFIG_NUM_PAGES: u64 = 0;
/// Config offset of `actual` (FMem balloon size, guest writes).
pub const CONFIG_ACTUAL: u64 = 4;
/// Config offset of `free_page_hint_cmd_id` (unused, reads 0).
pub const CONFIG_FREE_PAGE_HINT_CMD_ID: u64 = 8;
/// Config offset of `poison_val` (unused, reads 0).
pub const CONFIG_POISON_VAL: u64 = 12;
/// Config offset of `num_hetero_pages` (SMem target, host writes).
pub const CONFIG_NUM_HETERO_PAGES: u64 = 16;
/// Config offset of `actual_hetero` (SMem balloon size, guest writes).
pub const CONFIG_ACTUAL_HETERO: u64 = 20;

/// Tier index of fast memory (the NUMA node with CPUs).
pub const FMEM: usize = 0;
/// Tier index of slow memory (the memory-only NUMA node).
pub const SMEM: usize = 1;
/// Short names of the tiers, used in counter keys.
pub const TIER_NAMES: [&str; 2] = ["fmem", "smem"];

/// What a queue carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// PFNs the guest gives up. `tier` is the tier every PFN must lie in,
    /// or `None` when HETERO_MEM is not negotiated (a stock balloon takes
    /// pages from anywhere).
    Inflate {
        /// Required tier.
        tier: Option<usize>,
    },
    /// PFNs the guest takes back.
    Deflate {
        /// Required tier, as for `Inflate`.
        tier: Option<usize>,
    },
    /// Guest memory statistics.
    Stats,
}

/// The queues, in the order the driver finds them, for the features it
/// accepted: inflate, deflate, [stats], [reporting: never offered],
/// [hetero-inflate, hetero-deflate]. Indexes are compacted: a queue whose
/// feature was not accepted takes no index.
pub fn queue_layout(acked: u64) -> Vec<(QueueKind, u16)> {
    let hetero = acked & (1 << VIRTIO_BALLOON_F_HETERO_MEM) != 0;
    let normal_tier = hetero.then_some(FMEM);
    let mut v = vec![
        (QueueKind::Inflate { tier: normal_tier }, PFN_QUEUE_SIZE),
        (QueueKind::Deflate { tier: normal_tier }, PFN_QUEUE_SIZE),
    ];
    if acked & (1 << VIRTIO_BALLOON_F_STATS_VQ) != 0 {
        v.push((QueueKind::Stats, STATS_QUEUE_SIZE));
    }
    if hetero {
        v.push((QueueKind::Inflate { tier: Some(SMEM) }, PFN_QUEUE_SIZE));
        v.push((QueueKind::Deflate { tier: Some(SMEM) }, PFN_QUEUE_SIZE));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_indexes_are_compacted_by_negotiated_features() {
        let kinds = |f: u64| {
            queue_layout(f)
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        let stats = 1 << VIRTIO_BALLOON_F_STATS_VQ;
        let hetero = 1 << VIRTIO_BALLOON_F_HETERO_MEM;
        assert_eq!(
            kinds(0),
            vec![
                QueueKind::Inflate { tier: None },
                QueueKind::Deflate { tier: None }
            ]
        );
        assert_eq!(kinds(stats)[2], QueueKind::Stats);
        let h = kinds(hetero);
        assert_eq!(h.len(), 4);
        assert_eq!(h[0], QueueKind::Inflate { tier: Some(FMEM) });
        assert_eq!(h[2], QueueKind::Inflate { tier: Some(SMEM) });
        assert_eq!(h[3], QueueKind::Deflate { tier: Some(SMEM) });
        let hs = queue_layout(hetero | stats);
        assert_eq!(hs.len(), 5);
        assert_eq!(hs[2], (QueueKind::Stats, STATS_QUEUE_SIZE));
        assert_eq!(
            hs[4],
            (QueueKind::Deflate { tier: Some(SMEM) }, PFN_QUEUE_SIZE)
        );
    }
}
