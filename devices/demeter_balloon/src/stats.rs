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
        _ => None,
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
