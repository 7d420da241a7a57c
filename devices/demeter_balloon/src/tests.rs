//! Device tests: a mock driver posts descriptor chains on guest memory made
//! of an anonymous FMem tier, a memfd-backed SMem tier and a piece of RAM in
//! no tier. No VM needed.

#![allow(clippy::undocumented_unsafe_blocks)]

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devices::event_loop::DeviceLoop;
use devices::virtio::{
    ActiveQueue, GuestMemoryMmap, Queue, QueueT, VirtioDevice, VirtioInterrupt, VirtioInterruptType,
};
use virtio_queue::desc::split::Descriptor as SplitDescriptor;
use virtio_queue::desc::RawDescriptor;
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, FileOffset, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use crate::defs::*;
use crate::metrics::{BadDescriptor, BadPfn};
use crate::{Balloon, BalloonConfig, BalloonError, BalloonHandle, TierMemory, TierRange};

const MIB: u64 = 1 << 20;
const FMEM_BASE: u64 = 0;
const FMEM_LEN: u64 = 16 * MIB;
const SMEM_BASE: u64 = 16 * MIB;
const SMEM_LEN: u64 = 16 * MIB;
/// RAM that belongs to no tier.
const ORPHAN_BASE: u64 = 32 * MIB;
const ORPHAN_LEN: u64 = MIB;
/// Where the mock driver puts its buffers (inside FMem, below the pages
/// the tests inflate).
const DATA_BASE: u64 = 0x8_0000;
const DATA_END: u64 = 0x40_0000;

const F_STATS: u64 = 1 << VIRTIO_BALLOON_F_STATS_VQ;
const F_HETERO: u64 = 1 << VIRTIO_BALLOON_F_HETERO_MEM;
const F_V1: u64 = 1 << 32;

fn pfn(gpa: u64) -> u32 {
    (gpa >> PFN_SHIFT) as u32
}

fn memfd(len: u64) -> File {
    let fd = unsafe { libc::memfd_create(c"balloon-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(len).unwrap();
    f
}

struct Env {
    mem: GuestMemoryMmap,
    smem_file: Arc<File>,
}

impl Env {
    fn new() -> Self {
        let file = memfd(SMEM_LEN);
        let mem = GuestMemoryMmap::from_ranges_with_files([
            (GuestAddress(FMEM_BASE), FMEM_LEN as usize, None),
            (
                GuestAddress(SMEM_BASE),
                SMEM_LEN as usize,
                Some(FileOffset::new(file.try_clone().unwrap(), 0)),
            ),
            (GuestAddress(ORPHAN_BASE), ORPHAN_LEN as usize, None),
        ])
        .unwrap();
        Self {
            mem,
            smem_file: Arc::new(file),
        }
    }

    fn tiers(&self) -> [TierMemory; 2] {
        [
            TierMemory::new(vec![TierRange::anonymous(FMEM_BASE, FMEM_LEN)]),
            TierMemory::new(vec![TierRange::file_backed(
                SMEM_BASE,
                SMEM_LEN,
                self.smem_file.clone(),
                0,
            )]),
        ]
    }

    fn balloon(&self, config: BalloonConfig) -> Balloon {
        Balloon::new(config, self.tiers()).unwrap()
    }

    fn fill(&self, gpa: u64, len: u64, byte: u8) {
        self.mem
            .write_slice(&vec![byte; len as usize], GuestAddress(gpa))
            .unwrap();
    }

    fn is_filled(&self, gpa: u64, len: u64, byte: u8) -> bool {
        let mut b = vec![0u8; len as usize];
        self.mem.read_slice(&mut b, GuestAddress(gpa)).unwrap();
        b.iter().all(|&x| x == byte)
    }

    /// Whether the host page behind `gpa` is resident (mincore).
    fn resident(&self, gpa: u64) -> bool {
        use vm_memory::GuestMemoryBackend;
        let host = self.mem.get_host_address(GuestAddress(gpa)).unwrap();
        let mut v = 0u8;
        assert_eq!(
            unsafe { libc::mincore(host.cast(), PAGE_SIZE as usize, &mut v) },
            0
        );
        v & 1 != 0
    }

    /// Bytes of the SMem memfd actually allocated.
    fn smem_allocated(&self) -> u64 {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe { libc::fstat(self.smem_file.as_raw_fd(), &mut st) },
            0
        );
        st.st_blocks as u64 * 512
    }
}

fn hetero_config() -> BalloonConfig {
    BalloonConfig {
        statistics: true,
        heterogeneous_memory: true,
        deflate_on_oom: true,
        stats_interval: None,
        ..Default::default()
    }
}

/// Records every interrupt raised.
#[derive(Default)]
struct RecordingInterrupt(Mutex<Vec<VirtioInterruptType>>);

impl VirtioInterrupt for RecordingInterrupt {
    fn trigger(&self, int_type: VirtioInterruptType) -> std::io::Result<()> {
        self.0.lock().unwrap().push(int_type);
        Ok(())
    }
}

impl RecordingInterrupt {
    fn take(&self) -> Vec<VirtioInterruptType> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// The driver side: queues in guest memory and a bump allocator for buffers.
struct Driver<'a> {
    mem: &'a GuestMemoryMmap,
    queues: Vec<MockSplitQueue<'a, GuestMemoryMmap>>,
    next_desc: Vec<u16>,
    next_buf: u64,
}

impl<'a> Driver<'a> {
    fn new(mem: &'a GuestMemoryMmap, sizes: &[u16]) -> Self {
        let queues = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| MockSplitQueue::create(mem, GuestAddress(0x1_0000 * (i as u64 + 1)), s))
            .collect();
        Self {
            mem,
            queues,
            next_desc: vec![0; sizes.len()],
            next_buf: DATA_BASE,
        }
    }

    fn active_queues(&self) -> Vec<ActiveQueue> {
        self.queues
            .iter()
            .enumerate()
            .map(|(index, q)| ActiveQueue {
                index,
                queue: q.create_queue::<Queue>().unwrap(),
                event: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            })
            .collect()
    }

    fn buf(&mut self, data: &[u8]) -> u64 {
        let addr = self.next_buf;
        self.next_buf = (addr + data.len() as u64 + 15) & !15;
        if self.next_buf >= DATA_END {
            self.next_buf = DATA_BASE;
            return self.buf(data);
        }
        self.mem.write_slice(data, GuestAddress(addr)).unwrap();
        addr
    }

    /// Posts one chain of `(addr, len, device_writable)` descriptors.
    fn post(&mut self, q: usize, descs: &[(u64, u32, bool)]) {
        let size = self.queues[q].create_queue::<Queue>().unwrap().max_size();
        let n = descs.len() as u16;
        let mut off = self.next_desc[q];
        if off + n > size {
            off = 0;
        }
        let raw: Vec<RawDescriptor> = descs
            .iter()
            .enumerate()
            .map(|(i, &(addr, len, write))| {
                let last = i + 1 == descs.len();
                let flags = if last { 0 } else { 1 } | if write { 2 } else { 0 };
                RawDescriptor::from(SplitDescriptor::new(addr, len, flags, off + i as u16 + 1))
            })
            .collect();
        self.queues[q].add_desc_chains(&raw, off).unwrap();
        self.next_desc[q] = off + n;
    }

    fn post_bytes(&mut self, q: usize, data: &[u8]) {
        let addr = self.buf(data);
        self.post(q, &[(addr, data.len() as u32, false)]);
    }

    fn post_pfns(&mut self, q: usize, pfns: &[u32]) {
        let data: Vec<u8> = pfns.iter().flat_map(|p| p.to_le_bytes()).collect();
        self.post_bytes(q, &data);
    }

    fn used_count(&self, q: usize) -> u16 {
        self.queues[q].used().idx().load()
    }
}

fn stats_buf(entries: &[(u16, u64)]) -> Vec<u8> {
    entries
        .iter()
        .flat_map(|(t, v)| t.to_le_bytes().into_iter().chain(v.to_le_bytes()))
        .collect()
}

/// A negotiated balloon with a handler over mock queues.
fn start<'a>(
    env: &'a Env,
    config: BalloonConfig,
    acked: u64,
) -> (
    Balloon,
    Driver<'a>,
    crate::handler::BalloonHandler,
    Arc<RecordingInterrupt>,
) {
    let mut b = env.balloon(config);
    b.ack_features(acked | F_V1);
    let sizes = b.queue_max_sizes();
    let driver = Driver::new(&env.mem, &sizes);
    let irq = Arc::new(RecordingInterrupt::default());
    let h = b
        .handler(env.mem.clone(), irq.clone(), driver.active_queues())
        .unwrap();
    (b, driver, h, irq)
}

// Queue indexes with HETERO_MEM but no stats.
const Q_INFLATE: usize = 0;
const Q_DEFLATE: usize = 1;
const Q_H_INFLATE: usize = 2;
const Q_H_DEFLATE: usize = 3;

#[test]
fn inflate_releases_anonymous_fmem_pages() {
    let env = Env::new();
    let (b, mut d, mut h, irq) = start(&env, hetero_config(), F_HETERO);
    let base = 4 * MIB;
    env.fill(base, 4 * PAGE_SIZE, 0xaa);
    d.post_pfns(
        Q_INFLATE,
        &[pfn(base), pfn(base + PAGE_SIZE), pfn(base + 3 * PAGE_SIZE)],
    );
    assert!(env.resident(base));
    h.process_queue(Q_INFLATE);
    // Released: no longer resident (checked before reading it back).
    assert!(!env.resident(base) && !env.resident(base + 3 * PAGE_SIZE));
    assert!(env.resident(base + 2 * PAGE_SIZE));
    assert!(env.is_filled(base, 2 * PAGE_SIZE, 0));
    assert!(
        env.is_filled(base + 2 * PAGE_SIZE, PAGE_SIZE, 0xaa),
        "a page not inflated keeps its data"
    );
    assert!(env.is_filled(base + 3 * PAGE_SIZE, PAGE_SIZE, 0));
    assert!(h.is_inflated(base) && !h.is_inflated(base + 2 * PAGE_SIZE));
    assert_eq!(d.used_count(Q_INFLATE), 1);
    assert_eq!(
        irq.take(),
        vec![VirtioInterruptType::Queue(Q_INFLATE as u16)]
    );
    let c = b.counters();
    assert_eq!(c["fmem_inflated_pages"], 3);
    assert_eq!(c["fmem_balloon_pages"], 3);
    assert_eq!(c["smem_balloon_pages"], 0);
    assert_eq!(b.stats().tiers[FMEM].host_balloon_bytes, 3 * PAGE_SIZE);
}

#[test]
fn inflate_punches_holes_in_memfd_backed_smem() {
    let env = Env::new();
    let (b, mut d, mut h, _) = start(&env, hetero_config(), F_HETERO);
    let base = SMEM_BASE + 2 * MIB;
    env.fill(base, 64 * PAGE_SIZE, 0x55);
    let before = env.smem_allocated();
    assert!(before >= 64 * PAGE_SIZE);
    let pfns: Vec<u32> = (0..64).map(|i| pfn(base + i * PAGE_SIZE)).collect();
    d.post_pfns(Q_H_INFLATE, &pfns);
    h.process_queue(Q_H_INFLATE);
    // The file really lost the pages (checked before reading them back:
    // a read fault on a shared memfd mapping allocates again).
    assert_eq!(env.smem_allocated(), before - 64 * PAGE_SIZE);
    assert!(env.is_filled(base, 64 * PAGE_SIZE, 0));
    assert_eq!(b.counters()["smem_balloon_pages"], 64);
    assert_eq!(b.counters()["release_errors"], 0);
    // Deflate: the pages are usable again.
    d.post_pfns(Q_H_DEFLATE, &pfns[..10]);
    h.process_queue(Q_H_DEFLATE);
    assert_eq!(b.counters()["smem_balloon_pages"], 54);
    assert_eq!(b.counters()["smem_deflated_pages"], 10);
    env.fill(base, PAGE_SIZE, 7);
    assert!(env.is_filled(base, PAGE_SIZE, 7));
}

#[test]
fn pfns_on_the_wrong_tier_queue_are_refused_and_not_released() {
    let env = Env::new();
    let (b, mut d, mut h, _) = start(&env, hetero_config(), F_HETERO);
    let f = 5 * MIB;
    let s = SMEM_BASE + 5 * MIB;
    env.fill(f, PAGE_SIZE, 1);
    env.fill(s, PAGE_SIZE, 2);
    d.post_pfns(Q_INFLATE, &[pfn(s)]);
    d.post_pfns(Q_H_INFLATE, &[pfn(f)]);
    h.process_all();
    assert!(env.is_filled(f, PAGE_SIZE, 1));
    assert!(env.is_filled(s, PAGE_SIZE, 2));
    let c = b.counters();
    assert_eq!(c["bad_pfn_wrong_tier"], 2);
    assert_eq!(c["fmem_balloon_pages"] + c["smem_balloon_pages"], 0);
    // Both chains still went back to the driver.
    assert_eq!(d.used_count(Q_INFLATE), 1);
    assert_eq!(d.used_count(Q_H_INFLATE), 1);
}

#[test]
fn duplicates_outside_ram_and_orphan_pages_are_counted() {
    let env = Env::new();
    let (b, mut d, mut h, _) = start(&env, hetero_config(), F_HETERO);
    let p = pfn(6 * MIB);
    d.post_pfns(
        Q_INFLATE,
        &[p, p, pfn(64 * MIB), u32::MAX, pfn(ORPHAN_BASE)],
    );
    h.process_queue(Q_INFLATE);
    d.post_pfns(Q_INFLATE, &[p]);
    d.post_pfns(Q_DEFLATE, &[p, p, pfn(7 * MIB)]);
    h.process_all();
    let m = &b.counters();
    assert_eq!(m["bad_pfn_already_inflated"], 2);
    assert_eq!(m["bad_pfn_outside_ram"], 2);
    assert_eq!(m["bad_pfn_no_tier"], 1);
    assert_eq!(m["bad_pfn_not_inflated"], 2);
    assert_eq!(m["fmem_inflated_pages"], 1);
    assert_eq!(m["fmem_deflated_pages"], 1);
    assert_eq!(m["fmem_balloon_pages"], 0);
    // After the deflate the page can be inflated again.
    d.post_pfns(Q_INFLATE, &[p]);
    h.process_queue(Q_INFLATE);
    assert_eq!(b.counters()["fmem_balloon_pages"], 1);
    assert_eq!(b.counters()["bad_pfn_already_inflated"], 2);
}

#[test]
fn malformed_chains_are_counted_skipped_and_returned() {
    let env = Env::new();
    let (b, mut d, mut h, _) = start(&env, hetero_config(), F_HETERO);
    let good = d.buf(&pfn(8 * MIB).to_le_bytes());
    // Device-writable buffer on an inflate queue.
    d.post(Q_INFLATE, &[(good, 4, true)]);
    // Length not a multiple of 4.
    d.post(Q_INFLATE, &[(good, 6, false)]);
    // Longer than MAX_PFNS_PER_CHAIN.
    d.post(
        Q_INFLATE,
        &[(good, (MAX_PFNS_PER_CHAIN as u32 + 1) * 4, false)],
    );
    // Outside guest memory.
    d.post(Q_INFLATE, &[(0x10_0000_0000, 8, false)]);
    // Spanning past the end of a region.
    d.post(Q_INFLATE, &[(ORPHAN_BASE + ORPHAN_LEN - 4, 8, false)]);
    // Empty.
    d.post(Q_INFLATE, &[(good, 0, false)]);
    // A good chain split over two descriptors with a 2-byte boundary.
    let two = d.buf(&[pfn(9 * MIB).to_le_bytes(), pfn(10 * MIB).to_le_bytes()].concat());
    d.post(Q_INFLATE, &[(two, 2, false), (two + 2, 6, false)]);
    h.process_queue(Q_INFLATE);
    let m = b.counters();
    assert_eq!(m["bad_descriptor_wrong_direction"], 1);
    assert_eq!(m["bad_descriptor_bad_length"], 1);
    assert_eq!(m["bad_descriptor_too_long"], 1);
    assert_eq!(m["bad_descriptor_unreadable"], 2);
    assert_eq!(m["empty_chains"], 1);
    assert_eq!(m["fmem_inflated_pages"], 2, "only the split chain inflated");
    assert_eq!(d.used_count(Q_INFLATE), 7, "every chain returned");
    assert!(!h.is_inflated(8 * MIB));
}

#[test]
fn indirect_tables_are_refused_and_returned() {
    let env = Env::new();
    let (b, mut d, mut h, _) = start(&env, hetero_config(), F_HETERO);
    let pfns = d.buf(&pfn(8 * MIB).to_le_bytes());
    let table = d.buf(&[0u8; 16]);
    env.mem
        .write_obj(SplitDescriptor::new(pfns, 4, 0, 0), GuestAddress(table))
        .unwrap();
    // VIRTQ_DESC_F_INDIRECT = 4.
    let raw = RawDescriptor::from(SplitDescriptor::new(table, 16, 4, 0));
    d.queues[Q_INFLATE].add_desc_chains(&[raw], 0).unwrap();
    h.process_queue(Q_INFLATE);
    assert_eq!(b.counters()["bad_descriptor_indirect_table"], 1);
    assert_eq!(b.counters()["fmem_inflated_pages"], 0);
    assert_eq!(d.used_count(Q_INFLATE), 1, "the chain is returned");
    assert!(!h.is_inflated(8 * MIB));
}

#[test]
fn corrupt_avail_index_is_counted_not_fatal() {
    let env = Env::new();
    let (b, d, mut h, _) = start(&env, hetero_config(), F_HETERO);
    // avail.idx jumps far past the queue size.
    d.queues[Q_INFLATE].avail().idx().store(1000);
    h.process_queue(Q_INFLATE);
    assert_eq!(b.counters()["bad_descriptor_bad_ring"], 1);
}

#[test]
fn stats_are_parsed_held_and_returned_on_request() {
    let env = Env::new();
    let (b, mut d, mut h, irq) = start(&env, hetero_config(), F_HETERO | F_STATS);
    let q_stats = 2;
    let buf = stats_buf(&[
        (4, 1000 * MIB),
        (5, 2000 * MIB),
        (11, 300 * MIB),
        (12, 1000 * MIB),
        (14, 700 * MIB),
        (15, 1000 * MIB),
        (99, 1),
        (16, 2),
    ]);
    d.post_bytes(q_stats, &buf);
    h.process_queue(q_stats);
    assert_eq!(d.used_count(q_stats), 0, "the stats buffer is held");
    assert!(irq.take().is_empty());
    let s = b.stats();
    assert!(s.heterogeneous_memory);
    assert_eq!(s.updates, 1);
    assert_eq!(s.guest["free_memory"], 1000 * MIB);
    assert_eq!(s.tiers[FMEM].guest_total_bytes, Some(1000 * MIB));
    assert_eq!(s.tiers[FMEM].guest_used_bytes, Some(700 * MIB));
    assert_eq!(s.tiers[SMEM].guest_free_bytes, Some(700 * MIB));
    let c = b.counters();
    assert_eq!(c["unknown_stat_tags"], 2);
    assert_eq!(c["stat_smem_total"], 1000 * MIB);
    // Refresh: the buffer goes back with an interrupt.
    assert!(h.request_stats());
    assert_eq!(d.used_count(q_stats), 1);
    assert_eq!(irq.take(), vec![VirtioInterruptType::Queue(q_stats as u16)]);
    assert!(!h.request_stats(), "nothing held until the guest answers");
    // The guest answers; a second buffer while one is held is returned.
    d.post_bytes(q_stats, &stats_buf(&[(4, 5)]));
    d.post_bytes(q_stats, &stats_buf(&[(4, 6)]));
    h.process_queue(q_stats);
    assert_eq!(b.stats().guest["free_memory"], 6);
    assert_eq!(b.counters()["bad_descriptor_extra_stats_buffer"], 1);
    assert_eq!(d.used_count(q_stats), 2);
    // Malformed stats buffers are counted but still held/returned.
    d.post_bytes(q_stats, &[1, 2, 3]);
    h.process_queue(q_stats);
    assert_eq!(b.counters()["bad_descriptor_bad_length"], 1);
}

#[test]
fn stock_driver_tags_10_to_15_keep_their_standard_names() {
    let env = Env::new();
    let (b, mut d, mut h, _) = start(&env, hetero_config(), F_STATS);
    d.post_bytes(2, &stats_buf(&[(10, 3), (15, 4)]));
    h.process_queue(2);
    let s = b.stats();
    assert!(!s.heterogeneous_memory);
    assert_eq!(s.guest["oom_kills"], 3);
    assert_eq!(s.guest["direct_reclaims"], 4);
    assert_eq!(s.tiers[FMEM].guest_total_bytes, None);
}

#[test]
fn guest_reported_tags_reach_stats_and_counters_by_name() {
    for (feat, q_stats) in [(F_HETERO | F_STATS, 2), (F_STATS, 2)] {
        let env = Env::new();
        let (b, mut d, mut h, _) = start(&env, hetero_config(), feat);
        d.post_bytes(
            q_stats,
            &stats_buf(&[
                (4, 77),
                (0x8000, 1),
                (0x8003, 4096),
                (0x8009, 2),
                (0x800c, 123_456_789),
                (0x801f, 5), // reserved: unknown
                (0x8020, 6), // outside the range: unknown
                (0x7fff, 7), // outside the range: unknown
            ]),
        );
        h.process_queue(q_stats);
        let s = b.stats();
        assert_eq!(s.guest["free_memory"], 77);
        assert_eq!(s.guest["tiering_targets"], 1);
        assert_eq!(s.guest["tiering_promoted_pages"], 4096);
        assert_eq!(s.guest["tiering_source"], 2);
        assert_eq!(s.guest["tiering_kernel_cpu_ns"], 123_456_789);
        assert_eq!(s.guest.len(), 5);
        let c = b.counters();
        assert_eq!(c["unknown_stat_tags"], 3);
        assert_eq!(c["stat_tiering_promoted_pages"], 4096);
        assert_eq!(c["stat_tiering_source"], 2);
    }
}

#[test]
fn without_hetero_the_single_balloon_takes_pages_from_both_tiers() {
    let env = Env::new();
    let (b, mut d, mut h, _) = start(&env, BalloonConfig::default(), 0);
    assert_eq!(b.queue_max_sizes(), vec![PFN_QUEUE_SIZE, PFN_QUEUE_SIZE]);
    d.post_pfns(
        0,
        &[pfn(5 * MIB), pfn(SMEM_BASE), pfn(SMEM_BASE + PAGE_SIZE)],
    );
    h.process_queue(0);
    let c = b.counters();
    assert_eq!(c["fmem_balloon_pages"], 1);
    assert_eq!(c["smem_balloon_pages"], 2);
    assert_eq!(c["bad_pfn_wrong_tier"], 0);
    d.post_pfns(1, &[pfn(SMEM_BASE)]);
    h.process_queue(1);
    assert_eq!(b.counters()["smem_balloon_pages"], 1);
}

#[test]
fn huge_host_pages_are_released_only_when_fully_inflated() {
    let env = Env::new();
    let tiers = [
        TierMemory::new(vec![
            TierRange::anonymous(FMEM_BASE, FMEM_LEN).with_page_size(2 * MIB)
        ]),
        TierMemory::default(),
    ];
    let mut b = Balloon::new(BalloonConfig::default(), tiers).unwrap();
    b.ack_features(F_V1);
    let mut d = Driver::new(&env.mem, &b.queue_max_sizes());
    let mut h = b
        .handler(
            env.mem.clone(),
            Arc::new(RecordingInterrupt::default()),
            d.active_queues(),
        )
        .unwrap();
    let base = 8 * MIB;
    env.fill(base, 2 * MIB, 0x33);
    let pfns: Vec<u32> = (0..512).map(|i| pfn(base + i * PAGE_SIZE)).collect();
    for chunk in pfns[..511].chunks(256) {
        d.post_pfns(0, chunk);
    }
    h.process_queue(0);
    assert!(
        env.is_filled(base, PAGE_SIZE, 0x33),
        "partially inflated huge page kept"
    );
    d.post_pfns(0, &pfns[511..]);
    h.process_queue(0);
    assert!(env.is_filled(base, 2 * MIB, 0));
    assert_eq!(b.counters()["fmem_balloon_pages"], 512);
}

#[test]
fn config_space_layout_and_guest_writes() {
    let env = Env::new();
    let mut b = env.balloon(BalloonConfig {
        size: [8 * MIB, 4 * MIB],
        ..hetero_config()
    });
    let mut cfg = [0u8; CONFIG_SIZE];
    b.read_config(0, &mut cfg);
    let word = |c: &[u8], i: usize| u32::from_le_bytes(c[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!(word(&cfg, 0), 2048);
    assert_eq!(word(&cfg, 4), 1024);
    b.write_config(CONFIG_ACTUAL, &100u32.to_le_bytes());
    b.write_config(CONFIG_ACTUAL_HETERO, &200u32.to_le_bytes());
    // Refused: read-only fields, partial writes, out of range.
    b.write_config(CONFIG_NUM_PAGES, &1u32.to_le_bytes());
    b.write_config(CONFIG_NUM_HETERO_PAGES, &1u32.to_le_bytes());
    b.write_config(CONFIG_ACTUAL, &[1, 2]);
    b.write_config(CONFIG_ACTUAL + 1, &[1, 2, 3, 4]);
    b.write_config(CONFIG_ACTUAL_HETERO, &[0; 8]);
    b.write_config(100, &[0; 4]);
    assert_eq!(b.counters()["bad_config_writes"], 6);
    b.read_config(0, &mut cfg);
    assert_eq!(
        (
            word(&cfg, 0),
            word(&cfg, 1),
            word(&cfg, 2),
            word(&cfg, 3),
            word(&cfg, 4),
            word(&cfg, 5)
        ),
        (2048, 100, 0, 0, 1024, 200)
    );
    assert_eq!(b.actual(), [100 * PAGE_SIZE, 200 * PAGE_SIZE]);
    // Partial and out-of-range reads.
    let mut two = [0xffu8; 2];
    b.read_config(20, &mut two);
    assert_eq!(two, [200, 0]);
    b.read_config(24, &mut two);
    assert_eq!(two, [0, 0]);
}

#[test]
fn features_follow_the_configuration() {
    let env = Env::new();
    let b = env.balloon(BalloonConfig::default());
    assert_eq!(b.features(), F_V1);
    let b = env.balloon(hetero_config());
    assert_eq!(
        b.features(),
        F_V1 | F_STATS | F_HETERO | (1 << VIRTIO_BALLOON_F_DEFLATE_ON_OOM)
    );
    assert_eq!(b.device_type(), 5);
    // Before negotiation every offered queue is visible.
    assert_eq!(b.queue_max_sizes().len(), 5);
}

#[test]
fn resize_bounds() {
    let env = Env::new();
    let b = env.balloon(hetero_config());
    assert!(matches!(
        b.resize([4097, 0]),
        Err(BalloonError::NotPageAligned { .. })
    ));
    assert!(matches!(
        b.resize([FMEM_LEN + PAGE_SIZE, 0]),
        Err(BalloonError::LargerThanTier { tier: "fmem", .. })
    ));
    assert!(matches!(
        b.resize([0, SMEM_LEN + PAGE_SIZE]),
        Err(BalloonError::LargerThanTier { tier: "smem", .. })
    ));
    b.resize([FMEM_LEN, SMEM_LEN]).unwrap();
    assert_eq!(b.target(), [FMEM_LEN, SMEM_LEN]);
    // A failed resize changes nothing.
    assert!(b.resize([PAGE_SIZE, 1]).is_err());
    assert_eq!(b.target(), [FMEM_LEN, SMEM_LEN]);

    // Not offered: SMem targets are refused, FMem is bounded by all RAM.
    let plain = env.balloon(BalloonConfig::default());
    assert!(matches!(
        plain.resize([0, PAGE_SIZE]),
        Err(BalloonError::NoHeteroMem)
    ));
    plain.resize([FMEM_LEN + SMEM_LEN, 0]).unwrap();
    assert!(plain.resize([FMEM_LEN + SMEM_LEN + PAGE_SIZE, 0]).is_err());

    // Offered but not negotiated by the driver (a stock driver).
    let mut stock = env.balloon(hetero_config());
    stock.resize([0, PAGE_SIZE]).unwrap();
    stock.ack_features(F_V1 | F_STATS);
    assert!(matches!(
        stock.resize([0, PAGE_SIZE]),
        Err(BalloonError::NoHeteroMem)
    ));
    stock.resize([FMEM_LEN + PAGE_SIZE, 0]).unwrap();

    // The constructor checks the same way.
    assert!(Balloon::new(
        BalloonConfig {
            size: [0, PAGE_SIZE],
            ..Default::default()
        },
        env.tiers()
    )
    .is_err());
}

#[test]
fn constructor_rejects_bad_tiers() {
    let env = Env::new();
    let overlap = [
        TierMemory::new(vec![TierRange::anonymous(0, 2 * MIB)]),
        TierMemory::new(vec![TierRange::anonymous(MIB, 2 * MIB)]),
    ];
    assert!(matches!(
        Balloon::new(BalloonConfig::default(), overlap),
        Err(BalloonError::InvalidTiers(_))
    ));
    let unaligned = [
        TierMemory::new(vec![TierRange::anonymous(100, PAGE_SIZE)]),
        TierMemory::default(),
    ];
    assert!(Balloon::new(BalloonConfig::default(), unaligned).is_err());
    let huge_unaligned = [
        TierMemory::new(vec![
            TierRange::anonymous(MIB, 2 * MIB).with_page_size(2 * MIB)
        ]),
        TierMemory::default(),
    ];
    assert!(Balloon::new(BalloonConfig::default(), huge_unaligned).is_err());
    let no_smem = [env.tiers()[0].clone(), TierMemory::default()];
    assert!(Balloon::new(hetero_config(), no_smem).is_err());
}

#[test]
fn activation_requires_inflate_and_deflate_queues() {
    let env = Env::new();
    let mut b = env.balloon(hetero_config());
    b.ack_features(F_V1 | F_HETERO);
    let d = Driver::new(&env.mem, &b.queue_max_sizes());
    let mut qs = d.active_queues();
    qs.remove(1);
    assert!(b
        .activate(env.mem.clone(), Arc::new(RecordingInterrupt::default()), qs)
        .is_err());
    let mut qs = d.active_queues();
    qs[3].index = 9;
    assert!(b
        .activate(env.mem.clone(), Arc::new(RecordingInterrupt::default()), qs)
        .is_err());
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A heterogeneous balloon with statistics every `interval`, negotiated
/// and running on its own device loop.
struct Running<'a> {
    b: Balloon,
    handle: BalloonHandle,
    d: Driver<'a>,
    kicks: Vec<EventFd>,
    irq: Arc<RecordingInterrupt>,
    lp: DeviceLoop,
}

/// Starts a [`Running`] balloon; `before` posts buffers ahead of DRIVER_OK.
fn running(env: &Env, interval: Duration, before: impl FnOnce(&mut Driver<'_>)) -> Running<'_> {
    let mut b = env.balloon(BalloonConfig {
        stats_interval: Some(interval),
        ..hetero_config()
    });
    let handle = b.handle();
    b.ack_features(F_V1 | F_HETERO | F_STATS);
    let mut d = Driver::new(&env.mem, &b.queue_max_sizes());
    let queues = d.active_queues();
    let kicks = queues
        .iter()
        .map(|q| q.event.try_clone().unwrap())
        .collect();
    let irq = Arc::new(RecordingInterrupt::default());
    before(&mut d);
    let lp = DeviceLoop::spawn("balloon").unwrap();
    let path = b.activate(env.mem.clone(), irq.clone(), queues).unwrap();
    lp.handle().activate(path).unwrap();
    Running {
        b,
        handle,
        d,
        kicks,
        irq,
        lp,
    }
}

#[test]
fn device_thread_processes_notifications_and_resize_interrupts() {
    let env = Env::new();
    // A buffer posted before activation is picked up at start.
    let Running {
        mut b,
        handle,
        mut d,
        kicks,
        irq,
        lp,
    } = running(&env, Duration::from_millis(20), |d| {
        d.post_pfns(0, &[pfn(4 * MIB)])
    });
    let path = lp.handle();
    wait_for("first inflate", || {
        handle.counters()["fmem_balloon_pages"] == 1
    });

    d.post_pfns(3, &[pfn(SMEM_BASE + MIB)]);
    kicks[3].write(1).unwrap();
    wait_for("hetero inflate", || {
        handle.counters()["smem_balloon_pages"] == 1
    });

    // Stats: posted, then requested periodically (returned to the guest).
    d.post_bytes(2, &stats_buf(&[(14, 42)]));
    kicks[2].write(1).unwrap();
    wait_for("stats update", || handle.stats().updates == 1);
    wait_for("periodic stats request", || d.used_count(2) == 1);
    d.post_bytes(2, &stats_buf(&[(14, 43)]));
    kicks[2].write(1).unwrap();
    wait_for("second stats update", || {
        handle.stats().tiers[SMEM].guest_free_bytes == Some(43)
    });
    handle.request_stats().unwrap();
    wait_for("requested stats", || d.used_count(2) == 2);

    irq.take();
    handle.resize([PAGE_SIZE, 2 * PAGE_SIZE]).unwrap();
    assert_eq!(irq.take(), vec![VirtioInterruptType::Config]);

    b.reset();
    assert!(path.wait_reset(path.reset(), Duration::from_secs(10)));
    assert_eq!(handle.counters()["fmem_balloon_pages"], 0);
    assert_eq!(handle.counters()["smem_balloon_pages"], 0);
    assert_eq!(
        handle.target(),
        [PAGE_SIZE, 2 * PAGE_SIZE],
        "targets survive a reset"
    );
    // No interrupt source after reset: resize only updates the config.
    handle.resize([0, 0]).unwrap();
    assert!(irq.take().is_empty());
}

/// A paused device thread neither answers notifications nor runs its
/// statistics timer: no used-ring write and no interrupt until resumed.
#[test]
fn a_paused_balloon_writes_nothing_and_interrupts_nobody() {
    let env = Env::new();
    let Running {
        handle,
        mut d,
        kicks,
        irq,
        lp,
        ..
    } = running(&env, Duration::from_millis(10), |_| {});
    let path = lp.handle();
    d.post_bytes(2, &stats_buf(&[(14, 42)]));
    kicks[2].write(1).unwrap();
    wait_for("periodic stats request", || d.used_count(2) == 1);

    path.pause(Duration::from_secs(10)).unwrap();
    irq.take();
    let updates = handle.stats().updates;
    // Work arrives while paused: a statistics answer and an inflate.
    d.post_bytes(2, &stats_buf(&[(14, 43)]));
    kicks[2].write(1).unwrap();
    d.post_pfns(0, &[pfn(4 * MIB)]);
    kicks[0].write(1).unwrap();
    // Ten timer periods: the negative must hold for a while to mean anything.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(d.used_count(2), 1, "stats ring written while paused");
    assert_eq!(d.used_count(0), 0, "inflate ring written while paused");
    assert_eq!(handle.stats().updates, updates);
    assert!(irq.take().is_empty(), "interrupt while paused");

    path.resume().unwrap();
    wait_for("inflate after resume", || d.used_count(0) == 1);
    wait_for("stats after resume", || handle.stats().updates > updates);
    assert!(!irq.take().is_empty());
}

/// Through the virtio-mmio transport, as a guest driver would drive it.
#[test]
fn end_to_end_through_the_mmio_transport() {
    use devices::virtio::{status, MmioTransport, MMIO_NOTIFY_OFFSET};
    use devices::{BusDevice, IrqTrigger};

    let env = Env::new();
    let b = Arc::new(Mutex::new(env.balloon(hetero_config())));
    let handle = b.lock().unwrap().handle();
    let lp = DeviceLoop::spawn("balloon").unwrap();
    let mut t = MmioTransport::new(
        b.clone(),
        env.mem.clone(),
        IrqTrigger::new().unwrap(),
        lp.handle(),
    )
    .unwrap();
    assert_eq!(t.queue_evts().len(), 5);
    let w = |t: &mut MmioTransport, off: u64, v: u32| t.write(off, &v.to_le_bytes());
    let r = |t: &mut MmioTransport, off: u64| {
        let mut x = [0u8; 4];
        t.read(off, &mut x);
        u32::from_le_bytes(x)
    };
    assert_eq!(r(&mut t, 0x8), 5);
    w(&mut t, 0x70, status::ACKNOWLEDGE);
    w(&mut t, 0x70, status::ACKNOWLEDGE | status::DRIVER);
    w(&mut t, 0x14, 0);
    let features = r(&mut t, 0x10);
    assert_ne!(features & (1 << VIRTIO_BALLOON_F_HETERO_MEM), 0);
    // Accept everything except statistics.
    w(&mut t, 0x24, 0);
    w(&mut t, 0x20, features & !(F_STATS as u32));
    w(&mut t, 0x24, 1);
    w(&mut t, 0x20, 1);
    w(
        &mut t,
        0x70,
        status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK,
    );
    assert_ne!(r(&mut t, 0x70) & status::FEATURES_OK, 0);
    let mut d = Driver::new(&env.mem, &[128, 128, 128, 128]);
    for q in 0..4u32 {
        w(&mut t, 0x30, q);
        assert_eq!(r(&mut t, 0x34), 128);
        let m = &d.queues[q as usize];
        w(&mut t, 0x38, 128);
        w(&mut t, 0x80, m.desc_table_addr().0 as u32);
        w(&mut t, 0x84, 0);
        w(&mut t, 0x90, m.avail_addr().0 as u32);
        w(&mut t, 0x94, 0);
        w(&mut t, 0xa0, m.used_addr().0 as u32);
        w(&mut t, 0xa4, 0);
        w(&mut t, 0x44, 1);
    }
    w(&mut t, 0x30, 4);
    assert_eq!(r(&mut t, 0x34), 0, "no fifth queue without stats");
    w(
        &mut t,
        0x70,
        status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK,
    );
    assert!(t.is_activated());
    assert_eq!(r(&mut t, 0x70) & status::DEVICE_NEEDS_RESET, 0);

    // Host asks for 2 SMem pages; the guest reads the config.
    handle.resize([0, 2 * PAGE_SIZE]).unwrap();
    assert_ne!(r(&mut t, 0x60) & 2, 0, "config change interrupt");
    assert_eq!(r(&mut t, 0x100 + CONFIG_NUM_HETERO_PAGES), 2);
    w(&mut t, 0x64, 2);
    let s = SMEM_BASE + 3 * MIB;
    env.fill(s, 2 * PAGE_SIZE, 9);
    d.post_pfns(Q_H_INFLATE, &[pfn(s), pfn(s + PAGE_SIZE)]);
    w(&mut t, MMIO_NOTIFY_OFFSET, Q_H_INFLATE as u32);
    wait_for("inflate through the transport", || {
        d.used_count(Q_H_INFLATE) == 1
    });
    assert_ne!(r(&mut t, 0x60) & 1, 0, "used buffer interrupt");
    assert!(t.irq_evt().read().unwrap() >= 2);
    w(&mut t, 0x100 + CONFIG_ACTUAL_HETERO, 2);
    assert_eq!(handle.actual(), [0, 2 * PAGE_SIZE]);
    assert!(env.is_filled(s, 2 * PAGE_SIZE, 0));
    let st = handle.stats();
    assert_eq!(st.tiers[SMEM].host_balloon_bytes, 2 * PAGE_SIZE);
    assert_eq!(st.tiers[SMEM].target_bytes, 2 * PAGE_SIZE);

    // Driver reset drops the data path (the driver polls Status for 0).
    w(&mut t, 0x70, 0);
    wait_for("reset", || r(&mut t, 0x70) == 0);
    assert_eq!(handle.counters()["smem_balloon_pages"], 0);
    assert_eq!(handle.actual(), [0, 0]);
}

/// Bounded deterministic random input for every queue handler: random
/// descriptor chains (directions, lengths, addresses, PFNs near the tiers'
/// edges) and random ring indices. Never panics; counters stay consistent.
#[test]
fn random_queue_input_never_panics() {
    let env = Env::new();
    let (b, mut d, mut h, _) = start(&env, hetero_config(), F_HETERO | F_STATS);
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let interesting = [
        0,
        FMEM_LEN - PAGE_SIZE,
        SMEM_BASE,
        SMEM_BASE + SMEM_LEN - PAGE_SIZE,
        ORPHAN_BASE,
        40 * MIB,
    ];
    for round in 0..400 {
        let q = (next() % 5) as usize;
        let ndesc = 1 + (next() % 3) as usize;
        let mut descs = Vec::new();
        for _ in 0..ndesc {
            let n = (next() % 40) as usize;
            let payload: Vec<u8> = if q == 2 {
                (0..n)
                    .flat_map(|_| stats_buf(&[((next() % 20) as u16, next())]))
                    .collect()
            } else {
                (0..n)
                    .flat_map(|_| {
                        let base = interesting[(next() % interesting.len() as u64) as usize];
                        pfn(base + (next() % 64) * PAGE_SIZE).to_le_bytes()
                    })
                    .collect()
            };
            let addr = if next() % 10 == 0 {
                next()
            } else {
                d.buf(&payload)
            };
            let len = if next() % 8 == 0 {
                (next() % 64) as u32
            } else {
                payload.len() as u32
            };
            descs.push((addr, len, next() % 12 == 0));
        }
        d.post(q, &descs);
        if round % 97 == 0 {
            // Scribble over a random descriptor-table entry or ring index.
            let m = &d.queues[q];
            let addr = m.desc_table_addr().0 + (next() % (16 * 128));
            env.mem.write_obj(next() as u8, GuestAddress(addr)).unwrap();
        }
        if next() % 3 == 0 {
            h.request_stats();
        }
        h.process_queue(q);
    }
    let c = b.counters();
    for t in ["fmem", "smem"] {
        assert_eq!(
            c[&format!("{t}_balloon_pages")],
            c[&format!("{t}_inflated_pages")] - c[&format!("{t}_deflated_pages")]
        );
    }
    assert!(c["bad_pfn_already_inflated"] + c["bad_pfn_wrong_tier"] + c["bad_pfn_no_tier"] > 0);
    let _ = BadPfn::ALL;
    let _ = BadDescriptor::ALL;
}
