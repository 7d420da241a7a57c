use std::os::fd::FromRawFd;
use std::sync::atomic::AtomicUsize;

use proptest::prelude::*;
use virtio_bindings::virtio_ring::VRING_DESC_F_WRITE;
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Address, Bytes, FileOffset, GuestAddress};

use super::blocks::{BlockState, Blocks, Change, Refusal, Request, Response};
use super::*;

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 2 * MIB;
/// The region: 8 blocks above the rings.
const REGION: u64 = 0x1000_0000;
const REGION_SIZE: u64 = 16 * MIB;
const REQ_AT: u64 = 0x10_0000;
const RESP_AT: u64 = 0x10_1000;

fn blocks(requested: u64) -> Blocks {
    let mut b = Blocks::new(REGION, REGION_SIZE, BLOCK);
    b.set_requested(requested);
    b
}

fn plug(addr: u64, nb_blocks: u16) -> Request {
    Request::Plug { addr, nb_blocks }
}

fn unplug(addr: u64, nb_blocks: u16) -> Request {
    Request::Unplug { addr, nb_blocks }
}

fn apply(b: &mut Blocks, r: Request) -> Result<Response, Refusal> {
    let (resp, change) = b.decide(r)?;
    b.commit(change);
    Ok(resp)
}

#[test]
fn plug_is_acked_up_to_the_requested_size_and_nacked_beyond() {
    let mut b = blocks(4 * BLOCK);
    assert_eq!(apply(&mut b, plug(REGION, 3)), Ok(Response::Ack(None)));
    assert_eq!(b.plugged_size(), 3 * BLOCK);
    assert_eq!(
        apply(&mut b, plug(REGION + 3 * BLOCK, 2)),
        Err(Refusal::BeyondRequested)
    );
    assert_eq!(
        b.plugged_size(),
        3 * BLOCK,
        "a refused plug changed nothing"
    );
    assert_eq!(
        apply(&mut b, plug(REGION + 3 * BLOCK, 1)),
        Ok(Response::Ack(None))
    );
    assert_eq!(b.plugged_runs(), vec![(0, 4)]);
}

#[test]
fn misaligned_outside_and_empty_requests_are_errors() {
    let mut b = blocks(REGION_SIZE);
    let cases = [
        (plug(REGION + 4096, 1), Refusal::Misaligned),
        (plug(REGION, 0), Refusal::Misaligned),
        (plug(REGION - BLOCK, 1), Refusal::OutsideRegion),
        (plug(REGION + 7 * BLOCK, 2), Refusal::OutsideRegion),
        (plug(REGION + REGION_SIZE, 1), Refusal::OutsideRegion),
        (plug(u64::MAX - BLOCK + 1, u16::MAX), Refusal::OutsideRegion),
        (plug(0, 1), Refusal::OutsideRegion),
        (unplug(REGION + 1, 1), Refusal::Misaligned),
        (
            Request::State {
                addr: REGION + 8 * BLOCK,
                nb_blocks: 1,
            },
            Refusal::OutsideRegion,
        ),
        (Request::Unknown(77), Refusal::UnknownType),
    ];
    for (r, want) in cases {
        assert_eq!(apply(&mut b, r), Err(want), "{r:?}");
    }
    assert_eq!(b.plugged_size(), 0);
}

#[test]
fn plugging_twice_or_unplugging_what_is_not_plugged_is_an_error() {
    let mut b = blocks(REGION_SIZE);
    assert!(apply(&mut b, plug(REGION + BLOCK, 2)).is_ok());
    assert_eq!(apply(&mut b, plug(REGION, 2)), Err(Refusal::WrongState));
    assert_eq!(apply(&mut b, unplug(REGION, 2)), Err(Refusal::WrongState));
    assert_eq!(
        apply(&mut b, unplug(REGION + 3 * BLOCK, 1)),
        Err(Refusal::WrongState)
    );
    assert_eq!(b.plugged_size(), 2 * BLOCK);
    assert!(apply(&mut b, unplug(REGION + BLOCK, 2)).is_ok());
    assert_eq!(b.plugged_size(), 0);
}

#[test]
fn state_reports_plugged_unplugged_and_mixed() {
    let mut b = blocks(REGION_SIZE);
    assert!(apply(&mut b, plug(REGION + 2 * BLOCK, 2)).is_ok());
    let state = |b: &mut Blocks, at: u64, n: u16| {
        apply(
            b,
            Request::State {
                addr: REGION + at * BLOCK,
                nb_blocks: n,
            },
        )
    };
    assert_eq!(
        state(&mut b, 2, 2),
        Ok(Response::Ack(Some(BlockState::Plugged)))
    );
    assert_eq!(
        state(&mut b, 0, 2),
        Ok(Response::Ack(Some(BlockState::Unplugged)))
    );
    assert_eq!(
        state(&mut b, 1, 3),
        Ok(Response::Ack(Some(BlockState::Mixed)))
    );
}

#[test]
fn unplug_all_empties_the_region_even_below_the_requested_size() {
    let mut b = blocks(REGION_SIZE);
    assert!(apply(&mut b, plug(REGION, 3)).is_ok());
    assert!(apply(&mut b, plug(REGION + 5 * BLOCK, 2)).is_ok());
    assert_eq!(b.plugged_runs(), vec![(0, 3), (5, 2)]);
    assert_eq!(
        b.decide(Request::UnplugAll).map(|d| d.1),
        Ok(Change::UnplugAll)
    );
    assert!(apply(&mut b, Request::UnplugAll).is_ok());
    assert_eq!(b.plugged_size(), 0);
    assert!(b.plugged_runs().is_empty());
}

#[test]
fn requests_and_responses_have_the_specifications_layout() {
    let mut raw = [0u8; blocks::REQUEST_LEN];
    raw[0] = 1; // UNPLUG
    raw[8..16].copy_from_slice(&(REGION + BLOCK).to_le_bytes());
    raw[16..18].copy_from_slice(&3u16.to_le_bytes());
    assert_eq!(Request::parse(&raw), unplug(REGION + BLOCK, 3));
    raw[0] = 9;
    assert_eq!(Request::parse(&raw), Request::Unknown(9));
    assert_eq!(Response::Nack.to_bytes(), [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(Response::Error.to_bytes()[0], 3);
    assert_eq!(
        Response::Ack(Some(BlockState::Mixed)).to_bytes(),
        [0, 0, 0, 0, 0, 0, 0, 0, 2, 0]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::virtio::fuzz_support::cases()))]
    /// Any sequence of requests and resizes: no panic, the plugged size is
    /// the number of set bits, plugs never pass the requested size.
    #[test]
    fn any_request_sequence_keeps_the_bitmap_consistent(
        ops in proptest::collection::vec((0u16..5, 0u64..20, 0u16..12, 0u64..10), 1..64)
    ) {
        let mut b = blocks(0);
        for (ty, block, n, requested) in ops {
            let addr = REGION.wrapping_add(block.wrapping_sub(2).wrapping_mul(BLOCK)).wrapping_add(u64::from(ty == 4) * 4096);
            let r = match ty {
                0 | 4 => plug(addr, n),
                1 => unplug(addr, n),
                2 => Request::UnplugAll,
                _ => Request::State { addr, nb_blocks: n },
            };
            let before = b.plugged_size();
            match apply(&mut b, r) {
                Ok(_) => {}
                Err(_) => prop_assert_eq!(b.plugged_size(), before),
            }
            if matches!(r, Request::Plug { .. }) && b.plugged_size() > before {
                prop_assert!(b.plugged_size() <= b.requested_size());
            }
            let bits = (0..8).filter(|&i| b.is_plugged(i)).count() as u64;
            prop_assert_eq!(b.plugged_size(), bits * BLOCK);
            b.set_requested(requested.min(8) * BLOCK);
        }
    }
}

// ---- the device and its data path, on real guest memory ----

fn memfd(len: u64) -> File {
    // SAFETY: a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"virtio-mem-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: a fresh descriptor we own.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(len).expect("size memfd");
    f
}

/// Guest memory: 2 MiB for rings and buffers, and the region, anonymous or
/// on a memfd.
fn memory(file: Option<&File>) -> GuestMemoryMmap {
    let region = file.map(|f| FileOffset::new(f.try_clone().expect("dup"), 0));
    GuestMemoryMmap::from_ranges_with_files([
        (GuestAddress(0), 2 * MIB as usize, None),
        (GuestAddress(REGION), REGION_SIZE as usize, region),
    ])
    .expect("guest memory")
}

#[derive(Default)]
struct CountingInterrupt {
    config: AtomicUsize,
    queue: AtomicUsize,
}

impl VirtioInterrupt for CountingInterrupt {
    fn trigger(&self, t: VirtioInterruptType) -> std::io::Result<()> {
        let c = match t {
            VirtioInterruptType::Config => &self.config,
            VirtioInterruptType::Queue(_) => &self.queue,
        };
        c.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

struct Rig {
    mem: GuestMemoryMmap,
    vq: MockSplitQueue<'static, GuestMemoryMmap>,
    dev: VirtioMem,
    path: handler::RequestPath,
    irq: Arc<CountingInterrupt>,
    posted: u16,
}

fn rig(file: Option<File>, requested: u64) -> Rig {
    let mem = memory(file.as_ref());
    // The mock queue borrows the memory; leak one clone per test rig.
    let leaked: &'static GuestMemoryMmap = Box::leak(Box::new(mem.clone()));
    let vq = MockSplitQueue::new(leaked, 64);
    let file = file.map(Arc::new);
    let mut dev = VirtioMem::new(
        MemRegion {
            addr: REGION,
            size: REGION_SIZE,
            block_size: BLOCK,
            file,
            file_offset: 0,
            node_id: Some(1),
        },
        requested,
    )
    .expect("device");
    let irq = Arc::new(CountingInterrupt::default());
    let active = ActiveQueue {
        index: 0,
        queue: vq.create_queue().expect("queue"),
        event: EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"),
    };
    let handler = dev
        .activate(mem.clone(), irq.clone(), vec![active])
        .expect("activate");
    drop(handler); // the tests drive a path of their own over the same queue
    let path = handler::RequestPath::new(
        mem.clone(),
        irq.clone(),
        ActiveQueue {
            index: 0,
            queue: vq.create_queue().expect("queue"),
            event: EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"),
        },
        dev.shared.clone(),
        dev.file.clone(),
        0,
    );
    Rig {
        mem,
        vq,
        dev,
        path,
        irq,
        posted: 0,
    }
}

use vmm_sys_util::eventfd::EventFd;

fn desc(addr: u64, len: u32, flags: u16) -> RawDescriptor {
    RawDescriptor::from(SplitDescriptor::new(addr, len, flags, 0))
}

impl Rig {
    /// Posts one request (type, addr, blocks) and serves it; returns the
    /// response type and state, or None when the chain was not answered.
    fn send(&mut self, ty: u16, addr: u64, nb_blocks: u16) -> Option<(u16, u16)> {
        let mut raw = [0u8; blocks::REQUEST_LEN];
        raw[0..2].copy_from_slice(&ty.to_le_bytes());
        raw[8..16].copy_from_slice(&addr.to_le_bytes());
        raw[16..18].copy_from_slice(&nb_blocks.to_le_bytes());
        self.mem
            .write_slice(&raw, GuestAddress(REQ_AT))
            .expect("req");
        self.mem
            .write_slice(&[0xff; 10], GuestAddress(RESP_AT))
            .expect("resp");
        self.post(&[
            desc(REQ_AT, blocks::REQUEST_LEN as u32, 0),
            desc(
                RESP_AT,
                blocks::RESPONSE_LEN as u32,
                VRING_DESC_F_WRITE as u16,
            ),
        ])
    }

    fn post(&mut self, chain: &[RawDescriptor]) -> Option<(u16, u16)> {
        self.vq.build_desc_chain(chain).expect("chain");
        assert_eq!(self.path.process(), 1);
        let i = u64::from(self.posted);
        self.posted += 1;
        let used = self.vq.used_addr().unchecked_add(4 + 8 * i + 4);
        let len: u32 = self.mem.read_obj(used).expect("used len");
        if len == 0 {
            return None;
        }
        let resp: [u8; 10] = self.mem.read_obj(GuestAddress(RESP_AT)).expect("resp");
        Some((
            u16::from_le_bytes([resp[0], resp[1]]),
            u16::from_le_bytes([resp[8], resp[9]]),
        ))
    }

    fn config_u64(&self, offset: u64) -> u64 {
        let mut b = [0u8; 8];
        self.dev.read_config(offset, &mut b);
        u64::from_le_bytes(b)
    }

    fn counter(&self, name: &str) -> u64 {
        self.dev.handle().counters()[name]
    }
}

const ACK: u16 = 0;
const NACK: u16 = 1;
const ERROR: u16 = 3;

#[test]
fn the_configuration_space_describes_the_region() {
    let r = rig(None, 4 * BLOCK);
    assert_eq!(r.dev.device_type(), 24);
    assert_eq!(r.dev.features(), (1 << 32) | 1, "VERSION_1 and ACPI_PXM");
    assert_eq!(r.config_u64(0), BLOCK);
    let mut node = [0u8; 2];
    r.dev.read_config(8, &mut node);
    assert_eq!(u16::from_le_bytes(node), 1);
    assert_eq!(r.config_u64(16), REGION);
    assert_eq!(r.config_u64(24), REGION_SIZE);
    assert_eq!(r.config_u64(32), REGION_SIZE);
    assert_eq!(r.config_u64(40), 0);
    assert_eq!(r.config_u64(48), 4 * BLOCK);
}

#[test]
fn guest_requests_are_answered_and_counted() {
    let mut r = rig(None, 2 * BLOCK);
    assert_eq!(r.send(0, REGION, 2), Some((ACK, 0)));
    assert_eq!(r.config_u64(40), 2 * BLOCK, "plugged_size follows");
    assert_eq!(r.send(0, REGION + 2 * BLOCK, 1), Some((NACK, 0)));
    assert_eq!(r.send(0, REGION + 4096, 1), Some((ERROR, 0)));
    assert_eq!(r.send(0, REGION + 8 * BLOCK, 1), Some((ERROR, 0)));
    assert_eq!(
        r.send(1, REGION + 4 * BLOCK, 1),
        Some((ERROR, 0)),
        "not plugged"
    );
    assert_eq!(r.send(7, REGION, 1), Some((ERROR, 0)));
    assert_eq!(r.send(3, REGION, 3), Some((ACK, 2)), "mixed");
    assert_eq!(r.counter("plug_requests"), 1);
    assert_eq!(r.counter("nacks"), 1);
    assert_eq!(r.counter("bad_alignment"), 1);
    assert_eq!(r.counter("bad_range"), 1);
    assert_eq!(r.counter("bad_state"), 1);
    assert_eq!(r.counter("bad_type"), 1);
    assert_eq!(r.counter("state_requests"), 1);
    assert!(r.irq.queue.load(Ordering::Relaxed) >= 1);
}

#[test]
fn short_or_readable_only_chains_are_returned_unanswered() {
    let mut r = rig(None, 2 * BLOCK);
    assert_eq!(
        r.post(&[desc(REQ_AT, blocks::REQUEST_LEN as u32, 0)]),
        None,
        "no response buffer"
    );
    assert_eq!(
        r.post(&[
            desc(REQ_AT, 8, 0),
            desc(RESP_AT, 10, VRING_DESC_F_WRITE as u16)
        ]),
        None,
        "request too short"
    );
    assert_eq!(
        r.post(&[
            desc(REQ_AT, 24, 0),
            desc(0x7fff_0000, 10, VRING_DESC_F_WRITE as u16)
        ]),
        None,
        "response outside guest memory"
    );
    assert_eq!(r.counter("bad_descriptors"), 3);
    assert_eq!(r.config_u64(40), 0);
}

#[test]
fn unplugged_anonymous_memory_reads_zero_again() {
    let mut r = rig(None, 4 * BLOCK);
    assert_eq!(r.send(0, REGION + 2 * BLOCK, 2), Some((ACK, 0)));
    let at = GuestAddress(REGION + 3 * BLOCK + 4096);
    r.mem.write_obj(0xdead_beef_u64, at).expect("write");
    assert_eq!(r.send(1, REGION + 2 * BLOCK, 2), Some((ACK, 0)));
    assert_eq!(r.mem.read_obj::<u64>(at).expect("read"), 0);
    assert_eq!(r.config_u64(40), 0);
    assert_eq!(r.counter("unplug_requests"), 1);
}

#[test]
fn unplugging_a_memfd_region_punches_holes() {
    let mut r = rig(Some(memfd(REGION_SIZE)), REGION_SIZE);
    let allocated = |r: &Rig| {
        use std::os::unix::fs::MetadataExt;
        r.dev
            .file
            .as_ref()
            .expect("file")
            .metadata()
            .expect("stat")
            .blocks()
            * 512
    };
    assert_eq!(r.send(0, REGION, 8), Some((ACK, 0)));
    r.mem
        .write_slice(&vec![7u8; REGION_SIZE as usize], GuestAddress(REGION))
        .expect("fill");
    assert!(allocated(&r) >= REGION_SIZE);
    assert_eq!(r.send(1, REGION, 4), Some((ACK, 0)));
    assert!(allocated(&r) <= REGION_SIZE / 2, "half given back");
    assert_eq!(r.send(2, 0, 0), Some((ACK, 0)), "unplug all");
    assert_eq!(allocated(&r), 0);
    assert_eq!(r.config_u64(40), 0);
    assert_eq!(
        r.mem
            .read_obj::<u8>(GuestAddress(REGION + 7 * BLOCK))
            .expect("read"),
        0
    );
}

#[test]
fn resize_sets_the_requested_size_and_interrupts_an_active_driver() {
    let r = rig(None, 0);
    let h = r.dev.handle();
    h.resize(6 * BLOCK).expect("resize");
    assert_eq!(r.config_u64(48), 6 * BLOCK);
    assert_eq!(h.requested_size(), 6 * BLOCK);
    assert_eq!(r.irq.config.load(Ordering::Relaxed), 1);
    assert!(matches!(
        h.resize(REGION_SIZE + BLOCK),
        Err(ResizeError::TooLarge { .. })
    ));
    assert!(matches!(
        h.resize(BLOCK + 4096),
        Err(ResizeError::Unaligned { .. })
    ));
    assert_eq!(
        h.requested_size(),
        6 * BLOCK,
        "refused resizes change nothing"
    );
    assert_eq!(r.irq.config.load(Ordering::Relaxed), 1);
    let mut dev = r.dev;
    dev.reset();
    h.resize(0).expect("resize after reset");
    assert_eq!(
        r.irq.config.load(Ordering::Relaxed),
        1,
        "no interrupt after reset"
    );
}

#[test]
fn config_writes_are_ignored_and_counted() {
    let mut r = rig(None, 0);
    r.dev.write_config(48, &[0xff; 8]);
    assert_eq!(r.config_u64(48), 0);
    assert_eq!(r.counter("config_writes"), 1);
}

#[test]
fn a_device_cannot_start_with_more_than_its_region() {
    let region = || MemRegion {
        addr: REGION,
        size: REGION_SIZE,
        block_size: BLOCK,
        file: None,
        file_offset: 0,
        node_id: None,
    };
    assert!(VirtioMem::new(region(), REGION_SIZE + BLOCK).is_err());
    let dev = VirtioMem::new(region(), REGION_SIZE).expect("full");
    assert_eq!(dev.features(), 1 << 32, "no ACPI_PXM without a node");
}

mod fuzz {
    use super::*;
    use crate::virtio::fuzz_support::{cases, load, memory as fuzz_memory, ring_image, used_idx};

    /// The region: the last 64 KiB of the fuzz memory, 4 KiB blocks.
    const FUZZ_REGION: u64 = crate::virtio::fuzz_support::MEM - 0x1_0000;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]
        /// Random rings and request bytes: no panic, every chain returned,
        /// the plugged size always the bitmap's.
        #[test]
        fn fuzz_virtio_mem_requests(img in ring_image(), requested in 0u64..17) {
            let m = fuzz_memory();
            let dev = VirtioMem::new(
                MemRegion {
                    addr: FUZZ_REGION,
                    size: 0x1_0000,
                    block_size: 0x1000,
                    file: None,
                    file_offset: 0,
                    node_id: None,
                },
                requested * 0x1000,
            )
            .expect("device");
            let mut path = handler::RequestPath::new(
                m.clone(),
                Arc::new(crate::virtio::NoopInterrupt),
                ActiveQueue {
                    index: 0,
                    queue: load(&m, 0, &img),
                    event: EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"),
                },
                dev.shared.clone(),
                None,
                0,
            );
            let done = path.process();
            if !img.may_write_rings() {
                prop_assert_eq!(used_idx(&m, 0), path.queue_next_used());
            }
            prop_assert!(done <= 64);
            let b = dev.shared.blocks();
            let bits = (0..16).filter(|&i| b.is_plugged(i)).count() as u64;
            prop_assert_eq!(b.plugged_size(), bits * 0x1000);
            prop_assert!(b.plugged_size() <= b.requested_size());
        }
    }
}
