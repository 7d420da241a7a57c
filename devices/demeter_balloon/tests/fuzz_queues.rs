//! The balloon's fuzz entry point (`demeter_balloon::fuzzing::run`, also
//! the cargo-fuzz target) under proptest on stable Rust: inflate, deflate
//! and statistics queues built from arbitrary bytes, PFN lists and stats
//! entries included. `scripts/fuzz.sh` runs it longer (FUZZ_CASES).

use demeter_balloon::fuzzing::{run, QUEUE_STRIDE};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// Guest pages of the fuzz layout's tiers (6 MiB of RAM).
const RAM_PAGES: u32 = (6 << 20) >> 12;
/// Buffers start here, one 4 KiB area per queue.
const BUFFERS: usize = 0x2000;

/// Inputs shaped like a driver's rings: each queue gets a few chains of
/// one buffer whose length is a whole number of PFNs (or of statistics
/// entries) or anything, the buffers hold PFNs mostly inside guest RAM
/// (so inflation, deflation and the PFN checks all run), then a few bytes
/// anywhere are overwritten.
fn input() -> impl Strategy<Value = Vec<u8>> {
    let len = prop_oneof![
        3 => (1u32..64).prop_map(|n| n * 4),
        1 => (1u32..20).prop_map(|n| n * 10),
        1 => any::<u32>(),
    ];
    let pfn = prop_oneof![3 => 0..RAM_PAGES, 1 => RAM_PAGES - 8..RAM_PAGES + 8, 1 => any::<u32>()];
    (
        any::<u8>(),
        prop::collection::vec(prop::collection::vec(len, 0..4), 5),
        prop::collection::vec(pfn, 5 * 1024),
        prop::collection::vec((0usize..BUFFERS + 5 * 0x1000, any::<u8>()), 0..8),
    )
        .prop_map(|(sel, queues, pfns, flips)| {
            let mut m = vec![0u8; BUFFERS + 5 * 0x1000];
            for (q, chains) in queues.iter().enumerate() {
                let base = q * QUEUE_STRIDE as usize;
                for (i, &len) in chains.iter().enumerate() {
                    let buf = (BUFFERS + q * 0x1000 + i * 0x400) as u64;
                    let d = base + 16 * i;
                    m[d..d + 8].copy_from_slice(&buf.to_le_bytes());
                    m[d + 8..d + 12].copy_from_slice(&len.to_le_bytes());
                    let a = base + 0x100 + 4 + 2 * i;
                    m[a..a + 2].copy_from_slice(&(i as u16).to_le_bytes());
                }
                let idx = base + 0x102;
                m[idx..idx + 2].copy_from_slice(&(chains.len() as u16).to_le_bytes());
            }
            for (i, p) in pfns.iter().enumerate() {
                let at = BUFFERS + 4 * i;
                m[at..at + 4].copy_from_slice(&p.to_le_bytes());
            }
            for (at, b) in flips {
                m[at] = b;
            }
            let mut v = vec![sel];
            v.extend(m);
            v
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]
    #[test]
    fn fuzz_balloon_queues(data in input()) {
        let counters = run(&data);
        prop_assert!(counters.is_some(), "a non-empty input always runs");
        if std::env::var_os("FUZZ_STATS").is_some() {
            let c = counters.unwrap_or_default();
            let sum = |k: &str| c.iter().filter(|(n, _)| n.contains(k)).map(|(_, v)| v).sum::<u64>();
            eprintln!(
                "FUZZSTAT balloon inflated={} bad_descriptor={} bad_pfn={} stats_updates={}",
                sum("inflated_pages"),
                sum("bad_descriptor"),
                sum("bad_pfn"),
                sum("stats_updates")
            );
        }
    }
}
