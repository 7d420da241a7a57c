//! Test-only: random descriptor rings for the devices' property tests
//! (the stable-Rust stand-in for cargo-fuzz targets; `scripts/fuzz.sh`
//! runs them longer). A [`RingImage`] is a size-16 split queue in guest
//! memory: every descriptor (address near or inside RAM, or anywhere;
//! any length; any of NEXT/WRITE/INDIRECT; any next index), the available
//! ring's heads (also out of range, and more of them than fit), and the
//! bytes every buffer holds.

use proptest::prelude::*;
use virtio_queue::desc::{split::Descriptor, RawDescriptor};
use vm_memory::{Bytes, GuestAddress};

use super::{GuestMemoryMmap, Queue, QueueT};

/// Queue size of every fuzzed queue.
pub(crate) const QSIZE: u16 = 16;
/// Guest RAM size.
pub(crate) const MEM: u64 = 0x4_0000;
/// Where buffers usually point: past the rings.
pub(crate) const DATA: u64 = 0x1000;
/// 4 KiB slots from `DATA` on start with a request header.
const SLOTS: u64 = 8;

/// Property-test cases per run: `FUZZ_CASES` (scripts/fuzz.sh raises it),
/// else a number small enough for `cargo test`.
pub(crate) fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// A descriptor as the driver writes it: (addr, len, flags, next).
type Desc = (u64, u32, u16, u16);

/// One queue's worth of guest-controlled ring state.
#[derive(Debug, Clone)]
pub(crate) struct RingImage {
    descs: Vec<Desc>,
    heads: Vec<u16>,
    fill: Vec<u8>,
    headers: Vec<(u32, u64)>,
}

/// A buffer of a chain: (address, length, device-writable).
type Buf = (u64, u32, bool);

fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => (0..SLOTS).prop_map(|k| DATA + k * 0x1000),
        3 => DATA..MEM,
        1 => MEM - 64..MEM + 64,
        1 => any::<u64>(),
        1 => 0..DATA,
    ]
}

fn len() -> impl Strategy<Value = u32> {
    prop_oneof![
        2 => Just(16u32),
        3 => (1..9u32).prop_map(|n| n * 512),
        1 => Just(1u32),
        2 => 0..1100u32,
        1 => 0..0x2_0000u32,
        1 => any::<u32>(),
    ]
}

fn slot() -> impl Strategy<Value = u64> {
    (0..SLOTS).prop_map(|k| DATA + k * 0x1000)
}

/// A chain as a driver builds it (header, data, status), or any buffers.
fn chain() -> impl Strategy<Value = Vec<Buf>> {
    prop_oneof![
        3 => (slot(), DATA + SLOTS * 0x1000..MEM - 0x1_0000, 1..9u32, any::<bool>(), slot())
            .prop_map(|(h, data, n, write, status)| vec![
                (h, 16, false),
                (data, n * 512, write),
                (status + 0x800, 1, true),
            ]),
        1 => (slot(), slot()).prop_map(|(h, status)| vec![(h, 16, false), (status + 0x800, 1, true)]),
        1 => (slot(), slot()).prop_map(|(h, id)| vec![(h, 16, false), (id + 0x800, 21, true)]),
        2 => prop::collection::vec((addr(), len(), any::<bool>()), 1..5),
    ]
}

/// A corruption of one descriptor field: (index, field, value).
fn mutation() -> impl Strategy<Value = (u16, u8, u64)> {
    (0..QSIZE, 0u8..4, any::<u64>())
}

/// Request headers (virtio-blk layout: type, reserved, sector): known
/// types and small sectors mostly, so requests get past the first checks.
fn header() -> impl Strategy<Value = (u32, u64)> {
    (
        prop_oneof![4 => prop::sample::select(vec![0u32, 1, 4, 8]), 1 => any::<u32>()],
        prop_oneof![4 => 0..80u64, 1 => any::<u64>()],
    )
}

/// Lays `chains` out in a descriptor table (NEXT-linked, as many as fit),
/// applies `mutations`, and returns the table and the chains' heads.
fn lay_out(chains: &[Vec<Buf>], mutations: &[(u16, u8, u64)]) -> (Vec<Desc>, Vec<u16>) {
    let mut descs: Vec<Desc> = vec![(0, 0, 0, 0); usize::from(QSIZE)];
    let mut heads = Vec::new();
    let mut i = 0u16;
    for c in chains {
        if i as usize + c.len() > descs.len() {
            break;
        }
        heads.push(i);
        for (k, &(addr, len, write)) in c.iter().enumerate() {
            let last = k + 1 == c.len();
            let flags = u16::from(!last) | if write { 2 } else { 0 };
            descs[usize::from(i)] = (addr, len, flags, i + 1);
            i += 1;
        }
    }
    for &(index, field, value) in mutations {
        let d = &mut descs[usize::from(index % QSIZE)];
        match field {
            0 => d.0 = value,
            1 => d.1 = value as u32,
            2 => d.2 = value as u16 & 7,
            _ => d.3 = value as u16 % 20,
        }
    }
    (descs, heads)
}

/// A random ring image: chains shaped as drivers build them, some random
/// buffers, a few corrupted fields, and sometimes heads that are bogus or
/// more than the ring holds.
pub(crate) fn ring_image() -> impl Strategy<Value = RingImage> {
    (
        prop::collection::vec(chain(), 1..6),
        prop::collection::vec(mutation(), 0..3),
        prop::collection::vec(0u16..20, 0..3),
        prop::collection::vec(any::<u8>(), 1..256),
        prop::collection::vec(header(), SLOTS as usize),
    )
        .prop_map(|(chains, mutations, extra_heads, fill, headers)| {
            let (descs, mut heads) = lay_out(&chains, &mutations);
            heads.extend(extra_heads);
            RingImage {
                descs,
                heads,
                fill,
                headers,
            }
        })
}

/// Fresh guest RAM.
pub(crate) fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM as usize)]).expect("guest memory")
}

/// Writes `img` as a queue at `base` (descriptor table at `base`, available
/// ring at `base + 0x100`, used ring at `base + 0x200`) and returns that
/// queue, ready. Buffers outside the rings hold `img.fill`, repeated.
pub(crate) fn load(mem: &GuestMemoryMmap, base: u64, img: &RingImage) -> Queue {
    let mut at = DATA;
    while at < MEM {
        let n = img.fill.len().min((MEM - at) as usize);
        mem.write_slice(&img.fill[..n], GuestAddress(at))
            .expect("fill");
        at += n as u64;
    }
    for (k, &(kind, sector)) in img.headers.iter().enumerate() {
        let mut h = [0u8; 16];
        h[..4].copy_from_slice(&kind.to_le_bytes());
        h[8..].copy_from_slice(&sector.to_le_bytes());
        mem.write_slice(&h, GuestAddress(DATA + k as u64 * 0x1000))
            .expect("header");
    }
    for (i, &(addr, len, flags, next)) in img.descs.iter().enumerate() {
        let d = RawDescriptor::from(Descriptor::new(addr, len, flags, next));
        mem.write_obj(d, GuestAddress(base + 16 * i as u64))
            .expect("descriptor");
    }
    let avail = base + 0x100;
    for (i, &h) in img.heads.iter().take(usize::from(QSIZE)).enumerate() {
        mem.write_obj(h, GuestAddress(avail + 4 + 2 * i as u64))
            .expect("avail entry");
    }
    mem.write_obj(0u16, GuestAddress(avail))
        .expect("avail flags");
    mem.write_obj(img.heads.len() as u16, GuestAddress(avail + 2))
        .expect("avail idx");
    mem.write_obj(0u32, GuestAddress(base + 0x200))
        .expect("used");
    let mut q = Queue::new(QSIZE).expect("queue");
    q.set_size(QSIZE);
    q.set_desc_table_address(Some(base as u32), Some(0));
    q.set_avail_ring_address(Some(avail as u32), Some(0));
    q.set_used_ring_address(Some((base + 0x200) as u32), Some(0));
    q.set_ready(true);
    q
}

impl RingImage {
    /// Whether a device-writable descriptor reaches the ring area, where a
    /// device writing the guest's data may overwrite a used index (the
    /// guest's own doing; the used-ring checks skip such images).
    pub(crate) fn may_write_rings(&self) -> bool {
        self.descs
            .iter()
            .any(|&(addr, _, flags, _)| flags & 2 != 0 && addr < DATA)
    }
}

/// The used ring's index of the queue at `base`.
pub(crate) fn used_idx(mem: &GuestMemoryMmap, base: u64) -> u16 {
    mem.read_obj(GuestAddress(base + 0x202)).expect("used idx")
}
