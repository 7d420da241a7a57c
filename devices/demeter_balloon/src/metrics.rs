//! Counters of what the device did and of what the guest got wrong.
//!
//! Every kind of bad input has its own counter and is logged once (the
//! first time it happens), so a hostile guest cannot flood the host log.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use log::warn;

use crate::defs::TIER_NAMES;

/// Why a PFN from the guest was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadPfn {
    /// The page is not guest RAM.
    OutsideRam,
    /// The page is RAM of the other tier (e.g. an SMem page on the FMem
    /// inflate queue).
    WrongTier,
    /// The page is RAM but belongs to no tier the device was given.
    NoTier,
    /// Inflate of a page already in the balloon.
    AlreadyInflated,
    /// Deflate of a page not in the balloon.
    NotInflated,
}

impl BadPfn {
    /// Every reason, in counter order.
    pub const ALL: [BadPfn; 5] = [
        BadPfn::OutsideRam,
        BadPfn::WrongTier,
        BadPfn::NoTier,
        BadPfn::AlreadyInflated,
        BadPfn::NotInflated,
    ];

    /// Counter key suffix.
    pub fn name(self) -> &'static str {
        match self {
            BadPfn::OutsideRam => "outside_ram",
            BadPfn::WrongTier => "wrong_tier",
            BadPfn::NoTier => "no_tier",
            BadPfn::AlreadyInflated => "already_inflated",
            BadPfn::NotInflated => "not_inflated",
        }
    }
}

/// Why a descriptor chain was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadDescriptor {
    /// A device-writable descriptor where the device only reads.
    WrongDirection,
    /// Longer than the device accepts.
    TooLong,
    /// A length that is not a whole number of entries (4 bytes per PFN,
    /// 10 per statistics entry).
    BadLength,
    /// The buffer does not lie in guest memory.
    Unreadable,
    /// The available ring itself is corrupt (index jumped too far).
    BadRing,
    /// A second statistics buffer while one was still held.
    ExtraStatsBuffer,
    /// An indirect descriptor table (`VIRTIO_RING_F_INDIRECT_DESC` is not offered).
    IndirectTable,
}

impl BadDescriptor {
    /// Every reason, in counter order.
    pub const ALL: [BadDescriptor; 7] = [
        BadDescriptor::WrongDirection,
        BadDescriptor::TooLong,
        BadDescriptor::BadLength,
        BadDescriptor::Unreadable,
        BadDescriptor::BadRing,
        BadDescriptor::ExtraStatsBuffer,
        BadDescriptor::IndirectTable,
    ];

    /// Counter key suffix.
    pub fn name(self) -> &'static str {
        match self {
            BadDescriptor::WrongDirection => "wrong_direction",
            BadDescriptor::TooLong => "too_long",
            BadDescriptor::BadLength => "bad_length",
            BadDescriptor::Unreadable => "unreadable",
            BadDescriptor::BadRing => "bad_ring",
            BadDescriptor::ExtraStatsBuffer => "extra_stats_buffer",
            BadDescriptor::IndirectTable => "indirect_table",
        }
    }
}

fn bump(c: &AtomicU64, n: u64) -> u64 {
    c.fetch_add(n, Ordering::Relaxed)
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// The device's counters. Shared between the device thread (writer) and
/// the VMM thread (reader).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Pages inflated, per tier (cumulative).
    pub inflated: [AtomicU64; 2],
    /// Pages deflated, per tier (cumulative).
    pub deflated: [AtomicU64; 2],
    /// Pages in the balloon now, per tier, as the host tracks them.
    pub balloon_pages: [AtomicU64; 2],
    bad_pfn: [AtomicU64; BadPfn::ALL.len()],
    bad_descriptor: [AtomicU64; BadDescriptor::ALL.len()],
    /// Descriptor chains of length zero (a driver that found no page to
    /// give; harmless).
    pub empty_chains: AtomicU64,
    /// Statistics entries with a tag the device does not know.
    pub unknown_stat_tags: AtomicU64,
    /// Statistics buffers received.
    pub stats_updates: AtomicU64,
    /// Statistics refreshes requested from the guest.
    pub stats_requests: AtomicU64,
    /// madvise/fallocate failures while releasing memory.
    pub release_errors: AtomicU64,
    /// Guest writes to read-only or unknown config fields.
    pub bad_config_writes: AtomicU64,
    /// Interrupts that could not be delivered.
    pub interrupt_errors: AtomicU64,
}

impl Metrics {
    /// Counts a refused PFN; logs the first of each reason.
    pub fn bad_pfn(&self, why: BadPfn, pfn: u64, queue: usize) {
        if bump(&self.bad_pfn[why as usize], 1) == 0 {
            warn!(
                "balloon: refused PFN {pfn:#x} on queue {queue}: {} (counted; further ones not logged)",
                why.name()
            );
        }
    }

    /// Count of refused PFNs for `why`.
    pub fn bad_pfn_count(&self, why: BadPfn) -> u64 {
        get(&self.bad_pfn[why as usize])
    }

    /// Counts a skipped descriptor chain; logs the first of each reason.
    pub fn bad_descriptor(&self, why: BadDescriptor, queue: usize) {
        if bump(&self.bad_descriptor[why as usize], 1) == 0 {
            warn!(
                "balloon: skipped descriptor chain on queue {queue}: {} (counted; further ones not logged)",
                why.name()
            );
        }
    }

    /// Count of skipped chains for `why`.
    pub fn bad_descriptor_count(&self, why: BadDescriptor) -> u64 {
        get(&self.bad_descriptor[why as usize])
    }

    /// Counts unknown statistics tags; logs the first.
    pub fn unknown_stat_tag(&self, tag: u16) {
        if bump(&self.unknown_stat_tags, 1) == 0 {
            warn!(
                "balloon: ignoring unknown statistics tag {tag} (counted; further ones not logged)"
            );
        }
    }

    /// Counts a failed release; logs the first.
    pub fn release_error(&self, gpa: u64, len: u64, what: &str, err: &std::io::Error) {
        if bump(&self.release_errors, 1) == 0 {
            warn!("balloon: {what} of {len:#x} bytes at GPA {gpa:#x} failed: {err} (counted; further ones not logged)");
        }
    }

    /// Counts a refused config write; logs the first.
    pub fn bad_config_write(&self, offset: u64, len: usize) {
        if bump(&self.bad_config_writes, 1) == 0 {
            warn!(
                "balloon: ignoring guest config write of {len} bytes at offset {offset} (only 4-byte writes at 4 and 20 are allowed)"
            );
        }
    }

    pub(crate) fn add(c: &AtomicU64, n: u64) {
        bump(c, n);
    }

    pub(crate) fn sub(c: &AtomicU64, n: u64) {
        c.fetch_sub(n, Ordering::Relaxed);
    }

    /// Every counter by name.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for (t, name) in TIER_NAMES.iter().enumerate() {
            m.insert(format!("{name}_inflated_pages"), get(&self.inflated[t]));
            m.insert(format!("{name}_deflated_pages"), get(&self.deflated[t]));
            m.insert(format!("{name}_balloon_pages"), get(&self.balloon_pages[t]));
        }
        for why in BadPfn::ALL {
            m.insert(format!("bad_pfn_{}", why.name()), self.bad_pfn_count(why));
        }
        for why in BadDescriptor::ALL {
            m.insert(
                format!("bad_descriptor_{}", why.name()),
                self.bad_descriptor_count(why),
            );
        }
        m.insert("empty_chains".into(), get(&self.empty_chains));
        m.insert("unknown_stat_tags".into(), get(&self.unknown_stat_tags));
        m.insert("stats_updates".into(), get(&self.stats_updates));
        m.insert("stats_requests".into(), get(&self.stats_requests));
        m.insert("release_errors".into(), get(&self.release_errors));
        m.insert("bad_config_writes".into(), get(&self.bad_config_writes));
        m.insert("interrupt_errors".into(), get(&self.interrupt_errors));
        m
    }
}
