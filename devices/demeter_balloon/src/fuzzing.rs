//! The fuzzing entry point, shared by the cargo-fuzz target
//! (`fuzz/fuzz_targets/balloon_queues.rs`) and a bounded test in the normal
//! test suite. Not part of the device's API.
//!
//! The input is copied into guest memory at address 0, where every queue's
//! descriptor table, available ring and used ring sit at fixed addresses,
//! so the fuzzer controls descriptor chains, ring indexes, buffer contents
//! and the PFNs in them. The first byte chooses the negotiated features.

use std::collections::BTreeMap;
use std::sync::Arc;

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use devices::virtio::{
    ActiveQueue, GuestMemoryMmap, NoopInterrupt, VirtioDevice, VIRTIO_F_VERSION_1,
};

use crate::defs::{VIRTIO_BALLOON_F_HETERO_MEM, VIRTIO_BALLOON_F_STATS_VQ};
use crate::{Balloon, BalloonConfig, TierMemory, TierRange};

const MIB: u64 = 1 << 20;
/// Queue size used while fuzzing (small, so random rings are often valid).
pub const FUZZ_QUEUE_SIZE: u16 = 16;
/// Per-queue stride of the ring area: descriptor table at +0, available
/// ring at +0x100, used ring at +0x200.
pub const QUEUE_STRIDE: u64 = 0x400;
/// Most input bytes used.
pub const MAX_INPUT: usize = 64 * 1024;

/// Runs one input and returns the device's counters (`None` if the input
/// was too short). Never panics on any input (that is what is tested).
pub fn run(data: &[u8]) -> Option<BTreeMap<String, u64>> {
    let (&sel, rest) = data.split_first()?;
    // RAM: [0, 1 MiB) rings and buffers (FMem), [1, 3) MiB more FMem,
    // [3, 5) MiB SMem, [5, 6) MiB in no tier.
    let Ok(mem) = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), (6 * MIB) as usize)]) else {
        return None;
    };
    let rest = &rest[..rest.len().min(MAX_INPUT)];
    if mem.write_slice(rest, GuestAddress(0)).is_err() {
        return None;
    }
    let tiers = [
        TierMemory::new(vec![TierRange::anonymous(0, 3 * MIB)]),
        TierMemory::new(vec![TierRange::anonymous(3 * MIB, 2 * MIB)]),
    ];
    let config = BalloonConfig {
        statistics: true,
        heterogeneous_memory: true,
        stats_interval: None,
        ..Default::default()
    };
    let Ok(mut balloon) = Balloon::new(config, tiers) else {
        return None;
    };
    let mut acked = 1u64 << VIRTIO_F_VERSION_1;
    if sel & 1 != 0 {
        acked |= 1 << VIRTIO_BALLOON_F_STATS_VQ;
    }
    if sel & 2 != 0 {
        acked |= 1 << VIRTIO_BALLOON_F_HETERO_MEM;
    }
    balloon.ack_features(acked);
    let mut queues = Vec::new();
    for index in 0..balloon.queue_max_sizes().len() {
        let base = index as u64 * QUEUE_STRIDE;
        let Ok(mut q) = Queue::new(FUZZ_QUEUE_SIZE) else {
            return None;
        };
        q.set_desc_table_address(Some(base as u32), Some(0));
        q.set_avail_ring_address(Some((base + 0x100) as u32), Some(0));
        q.set_used_ring_address(Some((base + 0x200) as u32), Some(0));
        q.set_ready(true);
        if !q.is_valid(&mem) {
            return None;
        }
        let Ok(event) = EventFd::new(libc::EFD_NONBLOCK) else {
            return None;
        };
        queues.push(ActiveQueue {
            index,
            queue: q,
            event,
        });
    }
    let Ok(mut handler) = balloon.handler(mem, Arc::new(NoopInterrupt), queues) else {
        return None;
    };
    handler.process_all();
    handler.request_stats();
    handler.process_all();
    // Counters must stay consistent whatever the guest sent.
    let c = balloon.counters();
    for t in ["fmem", "smem"] {
        let held = c[&format!("{t}_balloon_pages")];
        assert_eq!(
            held + c[&format!("{t}_deflated_pages")],
            c[&format!("{t}_inflated_pages")]
        );
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid inflate chain on queue 0 as a seed: one descriptor with two
    /// PFNs, avail idx 1.
    fn seed() -> Vec<u8> {
        let mut m = vec![0u8; 0x2000];
        let buf = 0x1000u64;
        m[0..8].copy_from_slice(&buf.to_le_bytes());
        m[8..12].copy_from_slice(&8u32.to_le_bytes());
        m[0x102..0x104].copy_from_slice(&1u16.to_le_bytes());
        m[0x1000..0x1004].copy_from_slice(&(((2 * MIB) >> 12) as u32).to_le_bytes());
        m[0x1004..0x1008].copy_from_slice(&(((2 * MIB + 4096) >> 12) as u32).to_le_bytes());
        let mut v = vec![2u8];
        v.extend(m);
        v
    }

    #[test]
    fn seed_inflates() {
        let c = run(&seed()).unwrap();
        assert_eq!(c["fmem_inflated_pages"], 2);
    }

    /// Bounded deterministic mutation of the seed, as a stand-in for the
    /// fuzzer in normal `cargo test`.
    #[test]
    fn mutated_inputs_never_panic() {
        let mut s = 0x0123_4567_89ab_cdefu64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let base = seed();
        for _ in 0..300 {
            let mut input = base.clone();
            for _ in 0..(1 + next() % 16) {
                let i = (next() % input.len() as u64) as usize;
                input[i] = next() as u8;
            }
            // Sometimes mutate the ring area of every queue heavily.
            if next() % 4 == 0 {
                for b in &mut input[1..1 + 5 * QUEUE_STRIDE as usize] {
                    if next() % 8 == 0 {
                        *b = next() as u8;
                    }
                }
            }
            run(&input);
        }
        run(&[]);
        run(&[3]);
    }
}
