//! The statistics queue: the tag table and the entry parser.
//!
//! Entries are packed little-endian `{tag: u16, val: u64}` (10 bytes).
//! Tags 0..=9 mean the same for every driver. Tags 10..=15 are where the
//! two drivers this device serves disagree:
//!
//! * Linux's stock `virtio_balloon` (6.10 and later) uses them for
//!   `oom_kills`, `alloc_stalls`, `async_scans`, `direct_scans`,
//!   `async_reclaims`, `direct_reclaims`;
//! * Demeter's driver (`mm/demeter/balloon.c`, which negotiates
//!   `VIRTIO_BALLOON_F_HETERO_MEM`) uses them for per-tier values:
//!   10 FMem access count, 11 FMem free bytes, 12 FMem total bytes,
//!   13 SMem access count, 14 SMem free bytes, 15 SMem total bytes.
//!
//! So the meaning of 10..=15 follows the negotiated features: with
//! HETERO_MEM they are the per-tier tags, without it the standard ones.
//!
//! Tags `0x8000..=0x801f` are a vendor range for values the guest's user
//! space reports through our driver (`guest/kmod/balloon`, sysfs
//! `guest_report`): the tiering agent's statistics, named in
//! [`GUEST_TAGS`] (the same with or without HETERO_MEM). A tag of that
//! range with no name yet is treated as unknown.
//!
//! Any other tag is counted and ignored (never an error: the Demeter host
//! rejected its own driver's tags).

use std::collections::BTreeMap;

use crate::defs::STAT_ENTRY_SIZE;

/// Names of the tags every driver shares (0..=9).
pub const COMMON_TAGS: [&str; 10] = [
    "swap_in",
    "swap_out",
    "major_faults",
    "minor_faults",
    "free_memory",
    "total_memory",
    "available_memory",
    "disk_caches",
    "hugetlb_allocations",
    "hugetlb_failures",
];

/// Names of tags 10..=15 as Linux's stock driver sends them.
pub const STANDARD_EXTRA_TAGS: [&str; 6] = [
    "oom_kills",
    "alloc_stalls",
    "async_scans",
    "direct_scans",
    "async_reclaims",
    "direct_reclaims",
];

/// Names of tags 10..=15 as Demeter's driver sends them (HETERO_MEM).
pub const DEMETER_TIER_TAGS: [&str; 6] = [
    "fmem_access",
    "fmem_free",
    "fmem_total",
    "smem_access",
    "smem_free",
    "smem_total",
];

/// First tag of the guest-reported (vendor) range.
pub const GUEST_TAG_BASE: u16 = 0x8000;
/// Number of tags in the guest-reported range (`0x8000..=0x801f`).
pub const GUEST_TAG_COUNT: u16 = 32;

/// Names of the guest-reported tags, from [`GUEST_TAG_BASE`] on: the guest
/// tiered-memory manager's statistics as `tiering-agent run` reports them
/// (totals over the managed processes; cumulative counters since the
/// agent started). The rest of the range is reserved.
pub const GUEST_TAGS: [&str; 15] = [
    // 0x8000: targets (processes) under management and running
    "tiering_targets",
    // 0x8001: pages of the running targets on the FMem node (numa_maps)
    "tiering_fmem_pages",
    // 0x8002: pages of the running targets on the SMem node
    "tiering_smem_pages",
    // 0x8003: 4 KiB pages the agent promoted to FMem
    "tiering_promoted_pages",
    // 0x8004: pages the agent demoted to SMem
    "tiering_demoted_pages",
    // 0x8005: pages whose move failed
    "tiering_failed_pages",
    // 0x8006: relocation rounds
    "tiering_rounds",
    // 0x8007: access samples taken (module, all targets)
    "tiering_samples",
    // 0x8008: samples per second, last epoch (running targets)
    "tiering_samples_per_s",
    // 0x8009: sampling source: 0 none, 1 accessed bits, 2 PEBS
    "tiering_source",
    // 0x800a: classifier epochs (module)
    "tiering_epochs",
    // 0x800b: CPU time of the agent (user + system)
    "tiering_agent_cpu_ns",
    // 0x800c: CPU time of the module's worker thread
    "tiering_kernel_cpu_ns",
    // 0x800d: sampled accesses to FMem pages of the managed processes
    // (cumulative); with 0x800e, the FMem access ratio and access rate
    // that the host policy daemon (tier-policy) reads
    "tiering_fmem_accesses",
    // 0x800e: sampled accesses to SMem pages (cumulative)
    "tiering_smem_accesses",
];

/// Tag of `tiering_promoted_pages`.
pub const TAG_TIERING_PROMOTED: u16 = GUEST_TAG_BASE + 3;

/// Tag of the FMem free-bytes entry (Demeter).
pub const TAG_FMEM_FREE: u16 = 11;
/// Tag of the FMem total-bytes entry (Demeter).
pub const TAG_FMEM_TOTAL: u16 = 12;
/// Tag of the SMem free-bytes entry (Demeter).
pub const TAG_SMEM_FREE: u16 = 14;
/// Tag of the SMem total-bytes entry (Demeter).
pub const TAG_SMEM_TOTAL: u16 = 15;

/// The name of `tag`, or `None` for an unknown tag. `hetero` says whether
/// HETERO_MEM was negotiated.
pub fn tag_name(tag: u16, hetero: bool) -> Option<&'static str> {
    let t = usize::from(tag);
    match t {
        0..=9 => Some(COMMON_TAGS[t]),
        10..=15 if hetero => Some(DEMETER_TIER_TAGS[t - 10]),
        10..=15 => Some(STANDARD_EXTRA_TAGS[t - 10]),
        _ => tag
            .checked_sub(GUEST_TAG_BASE)
            .filter(|&i| i < GUEST_TAG_COUNT)
            .and_then(|i| GUEST_TAGS.get(usize::from(i)).copied()),
    }
}

/// One parsed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatEntry {
    /// Tag.
    pub tag: u16,
    /// Value.
    pub val: u64,
}

/// Splits a buffer into entries. The caller checked that the length is a
/// multiple of the entry size; a trailing partial entry is ignored.
pub fn parse_entries(buf: &[u8]) -> impl Iterator<Item = StatEntry> + '_ {
    buf.chunks_exact(STAT_ENTRY_SIZE).map(|c| StatEntry {
        tag: u16::from_le_bytes([c[0], c[1]]),
        val: u64::from_le_bytes([c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]]),
    })
}

/// The latest statistics the guest sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestStats {
    /// Latest value by tag.
    pub by_tag: BTreeMap<u16, u64>,
    /// Number of statistics buffers received.
    pub updates: u64,
}

impl GuestStats {
    /// Latest value of `tag`, if the guest ever sent it.
    pub fn get(&self, tag: u16) -> Option<u64> {
        self.by_tag.get(&tag).copied()
    }

    /// Every value by name (see [`tag_name`]).
    pub fn named(&self, hetero: bool) -> BTreeMap<String, u64> {
        self.by_tag
            .iter()
            .filter_map(|(&t, &v)| tag_name(t, hetero).map(|n| (n.to_owned(), v)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_table_depends_on_hetero() {
        assert_eq!(tag_name(4, false), Some("free_memory"));
        assert_eq!(tag_name(4, true), Some("free_memory"));
        assert_eq!(tag_name(10, false), Some("oom_kills"));
        assert_eq!(tag_name(TAG_FMEM_FREE, true), Some("fmem_free"));
        assert_eq!(tag_name(TAG_SMEM_TOTAL, true), Some("smem_total"));
        assert_eq!(tag_name(16, true), None);
        assert_eq!(tag_name(u16::MAX, false), None);
    }

    #[test]
    fn guest_tags_are_named_on_both_wires() {
        for hetero in [false, true] {
            assert_eq!(tag_name(0x8000, hetero), Some("tiering_targets"));
            assert_eq!(
                tag_name(TAG_TIERING_PROMOTED, hetero),
                Some("tiering_promoted_pages")
            );
            assert_eq!(tag_name(0x8009, hetero), Some("tiering_source"));
            assert_eq!(tag_name(0x800c, hetero), Some("tiering_kernel_cpu_ns"));
            // Reserved part of the range, and just outside it: unknown.
            assert_eq!(tag_name(0x800d, hetero), Some("tiering_fmem_accesses"));
            assert_eq!(tag_name(0x800e, hetero), Some("tiering_smem_accesses"));
            assert_eq!(tag_name(0x800f, hetero), None);
            assert_eq!(tag_name(0x801f, hetero), None);
            assert_eq!(tag_name(0x7fff, hetero), None);
            assert_eq!(tag_name(0x8020, hetero), None);
        }
        assert!(GUEST_TAGS.len() <= usize::from(GUEST_TAG_COUNT));
        // Names are unique and never collide with the other tables.
        let mut all: Vec<&str> = COMMON_TAGS
            .iter()
            .chain(&STANDARD_EXTRA_TAGS)
            .chain(&DEMETER_TIER_TAGS)
            .chain(&GUEST_TAGS)
            .copied()
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn guest_tags_parse_and_name() {
        let mut b = vec![];
        for (t, v) in [(0x8003u16, 1234u64), (0x800b, u64::MAX), (0x8015, 7)] {
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&v.to_le_bytes());
        }
        let mut g = GuestStats::default();
        for e in parse_entries(&b) {
            if tag_name(e.tag, true).is_some() {
                g.by_tag.insert(e.tag, e.val);
            }
        }
        let named = g.named(true);
        assert_eq!(named["tiering_promoted_pages"], 1234);
        assert_eq!(named["tiering_agent_cpu_ns"], u64::MAX);
        assert_eq!(named.len(), 2, "the reserved tag is not kept");
    }

    #[test]
    fn entries_are_packed_little_endian() {
        let mut b = vec![];
        b.extend_from_slice(&5u16.to_le_bytes());
        b.extend_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        b.extend_from_slice(&[1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xff]);
        let v: Vec<_> = parse_entries(&b).collect();
        assert_eq!(
            v,
            vec![
                StatEntry {
                    tag: 5,
                    val: 0x1122_3344_5566_7788
                },
                StatEntry { tag: 1, val: 2 }
            ]
        );
    }
}
