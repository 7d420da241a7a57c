//! virtio-blk request handling, with chains built by virtio-queue's mock
//! queue over a temporary image.

use std::io::Write;

use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Address, Bytes, GuestAddress};
use vmm_sys_util::tempfile::TempFile;

use super::*;
use crate::event_loop::DeviceLoop;
use crate::virtio::NoopInterrupt;

const W: u16 = VRING_DESC_F_WRITE as u16;
const R: u16 = 0;
const SECTORS: u64 = 64;
const HDR: u64 = 0x10_0000;
const DATA: u64 = 0x11_0000;
const STATUS: u64 = 0x1F_0000;

type Gm = GuestMemoryMmap;

fn mem() -> Gm {
    Gm::from_ranges(&[(GuestAddress(0), 0x20_0000)]).expect("guest memory")
}

/// An image whose sector `i` is filled with byte `i`.
fn image() -> TempFile {
    let t = TempFile::new().expect("temp file");
    let mut f = t.as_file();
    for i in 0..SECTORS {
        f.write_all(&[i as u8; SECTOR_SIZE as usize]).unwrap();
    }
    t
}

fn options(t: &TempFile, readonly: bool) -> DiskOptions {
    DiskOptions {
        path: t.as_path().to_path_buf(),
        readonly,
        direct: false,
        serial: Some("tb-serial".into()),
        queue_size: 16,
        num_queues: 1,
    }
}

fn server(m: &Gm, vq: &MockSplitQueue<Gm>, t: &TempFile, readonly: bool) -> Server {
    let o = options(t, readonly);
    Server {
        mem: m.clone(),
        interrupt: Arc::new(NoopInterrupt),
        index: 0,
        queue: vq.create_queue().expect("queue"),
        queue_evt: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
        image: Arc::new(open_image(&o).unwrap()),
        serial: *b"tb-serial\0\0\0\0\0\0\0\0\0\0\0",
        metrics: Arc::new(BlockMetrics::default()),
        bounce: vec![0u8; CHUNK + ALIGN],
    }
}

/// Adds one chain starting at descriptor `first`; returns the next free index.
fn add_chain(vq: &MockSplitQueue<Gm>, first: u16, descs: &[(u64, u32, u16)]) -> u16 {
    let raw: Vec<RawDescriptor> = descs
        .iter()
        .enumerate()
        .map(|(i, &(addr, len, flags))| {
            let i = first + i as u16;
            let last = i == first + descs.len() as u16 - 1;
            let flags = if last {
                flags
            } else {
                flags | VRING_DESC_F_NEXT as u16
            };
            RawDescriptor::from(SplitDescriptor::new(addr, len, flags, i + 1))
        })
        .collect();
    vq.add_desc_chains(&raw, first).expect("chain");
    first + descs.len() as u16
}

fn header(m: &Gm, kind: u32, sector: u64) {
    let mut h = [0u8; 16];
    h[..4].copy_from_slice(&kind.to_le_bytes());
    h[8..].copy_from_slice(&sector.to_le_bytes());
    m.write_slice(&h, GuestAddress(HDR)).unwrap();
}

fn used(m: &Gm, vq: &MockSplitQueue<Gm>, i: u64) -> u32 {
    let at = vq.used_addr().unchecked_add(4 + 8 * i + 4);
    m.read_obj::<u32>(at).expect("used len")
}

fn status(m: &Gm) -> u8 {
    m.read_obj::<u8>(GuestAddress(STATUS)).unwrap()
}

/// Runs one request and returns (status, used length).
fn run(m: &Gm, s: &mut Server, vq: &MockSplitQueue<Gm>, descs: &[(u64, u32, u16)]) -> (u8, u32) {
    m.write_obj(0xAAu8, GuestAddress(STATUS)).unwrap();
    add_chain(vq, 0, descs);
    let idx = u64::from(s.queue.next_used());
    assert_eq!(s.process(), 1);
    (status(m), used(m, vq, idx))
}

fn file_bytes(t: &TempFile) -> Vec<u8> {
    std::fs::read(t.as_path()).unwrap()
}

#[test]
fn read_returns_the_image_sectors() {
    let (m, t) = (mem(), image());
    let vq = MockSplitQueue::new(&m, 16);
    let mut s = server(&m, &vq, &t, false);
    header(&m, VIRTIO_BLK_T_IN, 3);
    // Data split over two descriptors, across sector boundaries.
    let got = run(
        &m,
        &mut s,
        &vq,
        &[
            (HDR, 16, R),
            (DATA, 700, W),
            (DATA + 0x1000, 324, W),
            (STATUS, 1, W),
        ],
    );
    assert_eq!(got, (VIRTIO_BLK_S_OK as u8, 1025));
    let mut a = [0u8; 700];
    m.read_slice(&mut a, GuestAddress(DATA)).unwrap();
    assert!(a[..512].iter().all(|&b| b == 3) && a[512..].iter().all(|&b| b == 4));
    let mut b = [0u8; 324];
    m.read_slice(&mut b, GuestAddress(DATA + 0x1000)).unwrap();
    assert!(b.iter().all(|&x| x == 4));
    assert_eq!(s.metrics.read_bytes.load(Ordering::Relaxed), 1024);
}

#[test]
fn write_lands_in_the_file_and_flush_succeeds() {
    let (m, t) = (mem(), image());
    let vq = MockSplitQueue::new(&m, 16);
    let mut s = server(&m, &vq, &t, false);
    header(&m, VIRTIO_BLK_T_OUT, 5);
    m.write_slice(&[0x5a; 512], GuestAddress(DATA)).unwrap();
    let got = run(
        &m,
        &mut s,
        &vq,
        &[(HDR, 16, R), (DATA, 512, R), (STATUS, 1, W)],
    );
    assert_eq!(got, (VIRTIO_BLK_S_OK as u8, 1));
    let f = file_bytes(&t);
    assert!(f[5 * 512..6 * 512].iter().all(|&b| b == 0x5a));
    assert!(f[4 * 512..5 * 512].iter().all(|&b| b == 4));
    header(&m, VIRTIO_BLK_T_FLUSH, 0);
    let got = run(&m, &mut s, &vq, &[(HDR, 16, R), (STATUS, 1, W)]);
    assert_eq!(got, (VIRTIO_BLK_S_OK as u8, 1));
    assert_eq!(s.metrics.flush_ops.load(Ordering::Relaxed), 1);
}

#[test]
fn read_only_disk_refuses_writes() {
    let (m, t) = (mem(), image());
    let vq = MockSplitQueue::new(&m, 16);
    let mut s = server(&m, &vq, &t, true);
    let before = file_bytes(&t);
    header(&m, VIRTIO_BLK_T_OUT, 0);
    m.write_slice(&[0xff; 512], GuestAddress(DATA)).unwrap();
    let got = run(
        &m,
        &mut s,
        &vq,
        &[(HDR, 16, R), (DATA, 512, R), (STATUS, 1, W)],
    );
    assert_eq!(got.0, VIRTIO_BLK_S_IOERR as u8);
    assert_eq!(file_bytes(&t), before);
    assert_eq!(s.metrics.io_errors.load(Ordering::Relaxed), 1);
    // Reads still work.
    header(&m, VIRTIO_BLK_T_IN, 1);
    let got = run(
        &m,
        &mut s,
        &vq,
        &[(HDR, 16, R), (DATA, 512, W), (STATUS, 1, W)],
    );
    assert_eq!(got.0, VIRTIO_BLK_S_OK as u8);
}

#[test]
fn sector_ranges_past_the_end_fail() {
    let (m, t) = (mem(), image());
    let vq = MockSplitQueue::new(&m, 16);
    let mut s = server(&m, &vq, &t, false);
    for sector in [SECTORS - 1, SECTORS, u64::MAX, u64::MAX / 512] {
        header(&m, VIRTIO_BLK_T_IN, sector);
        let got = run(
            &m,
            &mut s,
            &vq,
            &[(HDR, 16, R), (DATA, 1024, W), (STATUS, 1, W)],
        );
        assert_eq!(got, (VIRTIO_BLK_S_IOERR as u8, 1), "sector {sector}");
        header(&m, VIRTIO_BLK_T_OUT, sector);
        let got = run(
            &m,
            &mut s,
            &vq,
            &[(HDR, 16, R), (DATA, 1024, R), (STATUS, 1, W)],
        );
        assert_eq!(got.0, VIRTIO_BLK_S_IOERR as u8, "sector {sector}");
    }
    assert_eq!(file_bytes(&t).len() as u64, SECTORS * 512, "file grew");
    assert_eq!(s.metrics.io_errors.load(Ordering::Relaxed), 8);
    // The last sector itself is fine.
    header(&m, VIRTIO_BLK_T_IN, SECTORS - 1);
    let got = run(
        &m,
        &mut s,
        &vq,
        &[(HDR, 16, R), (DATA, 512, W), (STATUS, 1, W)],
    );
    assert_eq!(got, (VIRTIO_BLK_S_OK as u8, 513));
}

#[test]
fn get_id_and_unsupported_types() {
    let (m, t) = (mem(), image());
    let vq = MockSplitQueue::new(&m, 16);
    let mut s = server(&m, &vq, &t, false);
    header(&m, VIRTIO_BLK_T_GET_ID, 0);
    let got = run(
        &m,
        &mut s,
        &vq,
        &[(HDR, 16, R), (DATA, 20, W), (STATUS, 1, W)],
    );
    assert_eq!(got, (VIRTIO_BLK_S_OK as u8, 21));
    let mut id = [0u8; 9];
    m.read_slice(&mut id, GuestAddress(DATA)).unwrap();
    assert_eq!(&id, b"tb-serial");
    for kind in [11u32, 13, 10, 0xdead_beef] {
        header(&m, kind, 0);
        let got = run(&m, &mut s, &vq, &[(HDR, 16, R), (STATUS, 1, W)]);
        assert_eq!(got, (VIRTIO_BLK_S_UNSUPP as u8, 1), "type {kind}");
    }
}

#[test]
fn malformed_chains_get_ioerr_or_nothing_and_are_counted() {
    let (m, t) = (mem(), image());
    let vq = MockSplitQueue::new(&m, 16);
    let mut s = server(&m, &vq, &t, false);
    let before = file_bytes(&t);
    let ioerr = VIRTIO_BLK_S_IOERR as u8;
    // Header too short.
    header(&m, VIRTIO_BLK_T_IN, 0);
    assert_eq!(
        run(&m, &mut s, &vq, &[(HDR, 8, R), (STATUS, 1, W)]).0,
        ioerr
    );
    // Read with device-readable data (wrong direction).
    let got = run(
        &m,
        &mut s,
        &vq,
        &[(HDR, 16, R), (DATA, 512, R), (STATUS, 1, W)],
    );
    assert_eq!(got, (ioerr, 1));
    // Write with device-writable data (wrong direction).
    header(&m, VIRTIO_BLK_T_OUT, 0);
    let got = run(
        &m,
        &mut s,
        &vq,
        &[(HDR, 16, R), (DATA, 512, W), (STATUS, 1, W)],
    );
    assert_eq!(got, (ioerr, 1));
    // Not a whole sector.
    assert_eq!(
        run(
            &m,
            &mut s,
            &vq,
            &[(HDR, 16, R), (DATA, 100, R), (STATUS, 1, W)]
        )
        .0,
        ioerr
    );
    // Flush with data.
    header(&m, VIRTIO_BLK_T_FLUSH, 0);
    assert_eq!(
        run(
            &m,
            &mut s,
            &vq,
            &[(HDR, 16, R), (DATA, 512, R), (STATUS, 1, W)]
        )
        .0,
        ioerr
    );
    assert_eq!(s.metrics.bad_requests.load(Ordering::Relaxed), 5);
    // No writable byte for the status: returned with nothing written.
    header(&m, VIRTIO_BLK_T_IN, 0);
    assert_eq!(run(&m, &mut s, &vq, &[(HDR, 16, R)]), (0xAA, 0));
    // Readable after writable, and a buffer outside guest RAM.
    assert_eq!(
        run(&m, &mut s, &vq, &[(STATUS, 1, W), (HDR, 16, R)]),
        (0xAA, 0)
    );
    assert_eq!(
        run(
            &m,
            &mut s,
            &vq,
            &[(HDR, 16, R), (0x1F_FF00, 0x1000, W), (STATUS, 1, W)]
        ),
        (0xAA, 0)
    );
    assert_eq!(s.metrics.bad_requests.load(Ordering::Relaxed), 8);
    assert_eq!(file_bytes(&t), before);
}

#[test]
fn random_chains_never_panic() {
    let (m, t) = (mem(), image());
    let mut s = server(&m, &MockSplitQueue::new(&m, 16), &t, false);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..2000 {
        let kind = [0u32, 1, 4, 8, 11][(next() % 5) as usize];
        header(&m, kind, next() % (SECTORS + 4));
        let n = 1 + (next() % 4) as usize;
        let descs: Vec<(u64, u32, u16)> = (0..n)
            .map(|i| {
                let addr = [HDR, DATA, DATA + 0x2000, STATUS, 0x1F_FFF0][(next() % 5) as usize];
                let len = [1u32, 16, 100, 512, 1024, 0x20][(next() % 6) as usize];
                let flags = if i == 0 || next() % 3 == 0 { R } else { W };
                (addr, len, flags)
            })
            .collect();
        // The mock's avail ring does not wrap: start a fresh queue each time.
        let vq = MockSplitQueue::new(&m, 16);
        s.queue = vq.create_queue().unwrap();
        add_chain(&vq, 0, &descs);
        assert_eq!(s.process(), 1);
    }
    assert_eq!(file_bytes(&t).len() as u64, SECTORS * 512);
}

#[test]
fn device_offers_capacity_and_flags() {
    let t = image();
    let dev = Block::new(options(&t, true)).unwrap();
    assert_eq!(dev.sectors(), SECTORS);
    let f = dev.features();
    for bit in [VIRTIO_F_VERSION_1, VIRTIO_BLK_F_RO, VIRTIO_BLK_F_FLUSH] {
        assert_ne!(f & (1 << bit), 0, "feature {bit}");
    }
    let mut cap = [0u8; 8];
    dev.read_config(0, &mut cap);
    assert_eq!(u64::from_le_bytes(cap), SECTORS);
    let mut seg = [0u8; 4];
    dev.read_config(12, &mut seg);
    assert_eq!(u32::from_le_bytes(seg), 14);
    let rw = Block::new(options(&t, false)).unwrap();
    assert_eq!(rw.features() & (1 << VIRTIO_BLK_F_RO), 0);
    assert!(Block::new(DiskOptions {
        path: "/nonexistent/disk.raw".into(),
        ..options(&t, false)
    })
    .is_err());
}

#[test]
fn activated_device_serves_notifications_on_its_thread() {
    let (m, t) = (mem(), image());
    let vq = MockSplitQueue::new(&m, 16);
    let mut dev = Block::new(options(&t, false)).unwrap();
    let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
    let lp = DeviceLoop::spawn("virtio-blk").unwrap();
    let h = lp.handle();
    // What the transport does on DRIVER_OK.
    let start = |dev: &mut Block| {
        let active = ActiveQueue {
            index: 0,
            queue: vq.create_queue().unwrap(),
            event: evt.try_clone().unwrap(),
        };
        let path = dev.activate(m.clone(), Arc::new(NoopInterrupt), vec![active]);
        h.activate(path.unwrap()).unwrap();
    };
    start(&mut dev);
    header(&m, VIRTIO_BLK_T_IN, 7);
    add_chain(&vq, 0, &[(HDR, 16, R), (DATA, 512, W), (STATUS, 1, W)]);
    evt.write(1).unwrap();
    let used_idx = vq.used_addr().unchecked_add(2);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while m.read_obj::<u16>(used_idx).unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "request not served");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(status(&m), VIRTIO_BLK_S_OK as u8);
    assert_eq!(m.read_obj::<u8>(GuestAddress(DATA)).unwrap(), 7);
    assert!(h.wait_reset(h.reset(), std::time::Duration::from_secs(10)));
    // The image is shared, not moved: a second activation serves again.
    start(&mut dev);
    header(&m, VIRTIO_BLK_T_IN, 9);
    add_chain(&vq, 3, &[(HDR, 16, R), (DATA, 512, W), (STATUS, 1, W)]);
    evt.write(1).unwrap();
    while m.read_obj::<u16>(used_idx).unwrap() < 2 {
        assert!(std::time::Instant::now() < deadline, "request not served");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(m.read_obj::<u8>(GuestAddress(DATA)).unwrap(), 9);
}

#[test]
fn direct_io_goes_through_the_aligned_bounce_buffer() {
    let (m, t) = (mem(), image());
    let vq = MockSplitQueue::new(&m, 16);
    let o = DiskOptions {
        direct: true,
        ..options(&t, false)
    };
    let image = match open_image(&o) {
        Ok(i) => i,
        // tmpfs and some others refuse O_DIRECT; nothing to test there.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return,
        Err(e) => panic!("open O_DIRECT: {e}"),
    };
    let mut s = server(&m, &vq, &t, false);
    s.image = Arc::new(image);
    header(&m, VIRTIO_BLK_T_OUT, 8);
    m.write_slice(&[0x77; 4096], GuestAddress(DATA + 3))
        .unwrap();
    // An unaligned guest buffer: the bounce buffer keeps O_DIRECT happy.
    let got = run(
        &m,
        &mut s,
        &vq,
        &[(HDR, 16, R), (DATA + 3, 4096, R), (STATUS, 1, W)],
    );
    assert_eq!(got, (VIRTIO_BLK_S_OK as u8, 1));
    header(&m, VIRTIO_BLK_T_IN, 8);
    let got = run(
        &m,
        &mut s,
        &vq,
        &[(HDR, 16, R), (DATA + 0x8001, 4096, W), (STATUS, 1, W)],
    );
    assert_eq!(got, (VIRTIO_BLK_S_OK as u8, 4097));
    let mut back = [0u8; 4096];
    m.read_slice(&mut back, GuestAddress(DATA + 0x8001))
        .unwrap();
    assert!(back.iter().all(|&b| b == 0x77));
    assert!(file_bytes(&t)[8 * 512..16 * 512].iter().all(|&b| b == 0x77));
}

#[test]
fn requests_above_the_byte_cap_are_refused_before_any_io() {
    let m = mem();
    let t = TempFile::new().unwrap();
    // Large enough that only the cap, not the capacity, can refuse it.
    t.as_file().set_len(2 * MAX_REQUEST_BYTES).unwrap();
    let vq = MockSplitQueue::new(&m, 16);
    let mut s = server(&m, &vq, &t, false);
    header(&m, VIRTIO_BLK_T_IN, 0);
    // Five 1 MiB descriptors over the same guest pages: 5 MiB of data.
    let mut descs = vec![(HDR, 16, R)];
    descs.extend(std::iter::repeat_n((0u64, 0x10_0000u32, W), 5));
    descs.push((STATUS, 1, W));
    let got = run(&m, &mut s, &vq, &descs);
    assert_eq!(got, (VIRTIO_BLK_S_IOERR as u8, 1));
    assert_eq!(s.metrics.oversized_requests.load(Ordering::Relaxed), 1);
    assert_eq!(s.metrics.read_ops.load(Ordering::Relaxed), 0);
    // Exactly the cap is served.
    let vq = MockSplitQueue::new(&m, 16);
    s.queue = vq.create_queue().unwrap();
    let mut descs = vec![(HDR, 16, R)];
    descs.extend(std::iter::repeat_n((0u64, 0x10_0000u32, W), 4));
    descs.push((STATUS, 1, W));
    let got = run(&m, &mut s, &vq, &descs);
    assert_eq!(got, (VIRTIO_BLK_S_OK as u8, 4 * 0x10_0000 + 1));
}

#[test]
fn offered_segment_limits_stay_within_the_byte_cap() {
    for q in [1u16, 2, 3, 16, 128, 256, 1024, 32768] {
        let (size_max, seg_max) = segment_limits(q);
        assert!(seg_max >= 1 && size_max >= 4096, "queue {q}");
        assert!(
            u64::from(seg_max) * u64::from(size_max) <= MAX_REQUEST_BYTES,
            "queue {q}: {seg_max} x {size_max}"
        );
    }
    let t = image();
    let dev = Block::new(options(&t, false)).unwrap();
    assert_ne!(dev.features() & (1 << VIRTIO_BLK_F_SIZE_MAX), 0);
    let mut size_max = [0u8; 4];
    dev.read_config(8, &mut size_max);
    assert_eq!(u32::from_le_bytes(size_max), segment_limits(16).0);
}

#[test]
fn indirect_chains_are_refused_without_io() {
    use virtio_bindings::virtio_ring::VRING_DESC_F_INDIRECT;
    let (m, t) = (mem(), image());
    let vq = MockSplitQueue::new(&m, 16);
    let mut s = server(&m, &vq, &t, false);
    // An indirect table holding a valid read request.
    let table = 0x18_0000u64;
    let inner = [
        SplitDescriptor::new(HDR, 16, VRING_DESC_F_NEXT as u16, 1),
        SplitDescriptor::new(DATA, 512, W | VRING_DESC_F_NEXT as u16, 2),
        SplitDescriptor::new(STATUS, 1, W, 0),
    ];
    for (i, d) in inner.iter().enumerate() {
        m.write_obj(*d, GuestAddress(table + 16 * i as u64))
            .unwrap();
    }
    header(&m, VIRTIO_BLK_T_IN, 5);
    m.write_obj(0xAAu8, GuestAddress(STATUS)).unwrap();
    let raw = RawDescriptor::from(SplitDescriptor::new(
        table,
        48,
        VRING_DESC_F_INDIRECT as u16,
        0,
    ));
    vq.add_desc_chains(&[raw], 0).unwrap();
    assert_eq!(s.process(), 1);
    assert_eq!(used(&m, &vq, 0), 0);
    assert_eq!(status(&m), 0xAA, "the request must not be served");
    assert_eq!(s.metrics.read_ops.load(Ordering::Relaxed), 0);
    assert_eq!(s.metrics.bad_requests.load(Ordering::Relaxed), 1);
}

#[test]
fn config_writes_are_counted() {
    let t = image();
    let mut dev = Block::new(options(&t, false)).unwrap();
    for i in 0..1000u64 {
        dev.write_config(i % 24, &[1, 2, 3, 4]);
    }
    assert_eq!(dev.metrics().config_writes.load(Ordering::Relaxed), 1000);
    let mut cap = [0u8; 8];
    dev.read_config(0, &mut cap);
    assert_eq!(u64::from_le_bytes(cap), SECTORS, "config unchanged");
}

#[test]
fn a_full_queue_is_served_in_bounded_batches() {
    let m = mem();
    let t = TempFile::new().unwrap();
    t.as_file().set_len(2 * MAX_REQUEST_BYTES).unwrap();
    let vq = MockSplitQueue::new(&m, 32);
    let mut s = server(&m, &vq, &t, false);
    header(&m, VIRTIO_BLK_T_IN, 0);
    // Four 3.75 MiB reads (the same guest pages each time).
    let mut first = 0;
    for _ in 0..4 {
        let mut descs = vec![(HDR, 16, R)];
        descs.extend(std::iter::repeat_n((DATA, 0xC_0000u32, W), 5));
        descs.push((STATUS, 1, W));
        first = add_chain(&vq, first, &descs);
    }
    assert_eq!(s.process(), 3, "a batch ends once BATCH_BYTES were moved");
    assert_eq!(s.queue_evt.read().unwrap(), 1, "the thread re-armed itself");
    assert_eq!(s.process(), 1);
    assert!(s.queue_evt.read().is_err(), "nothing left to re-arm for");
    assert_eq!(s.metrics.read_ops.load(Ordering::Relaxed), 4);
}

mod fuzz {
    use super::*;
    use crate::virtio::fuzz_support::{cases, load, memory, ring_image, used_idx, RingImage};
    use proptest::prelude::*;

    fn run(img: &RingImage, readonly: bool) -> Result<(), TestCaseError> {
        let m = memory();
        let t = image();
        let o = options(&t, readonly);
        let mut s = Server {
            mem: m.clone(),
            interrupt: Arc::new(NoopInterrupt),
            index: 0,
            queue: load(&m, 0, img),
            queue_evt: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            image: Arc::new(open_image(&o).unwrap()),
            serial: [0; VIRTIO_BLK_ID_BYTES as usize],
            metrics: Arc::new(BlockMetrics::default()),
            bounce: vec![0u8; CHUNK + ALIGN],
        };
        s.process();
        // A full batch re-arms the queue; the loop ends with the ring.
        for _ in 0..64 {
            if s.queue_evt.read().is_err() {
                break;
            }
            s.process();
        }
        if !img.may_write_rings() {
            prop_assert_eq!(used_idx(&m, 0), s.queue.next_used());
        }
        prop_assert!(s.queue.next_used() <= s.queue.next_avail());
        prop_assert_eq!(
            file_bytes(&t).len() as u64,
            SECTORS * 512,
            "image size changed"
        );
        if readonly {
            prop_assert_eq!(s.metrics.write_ops.load(Ordering::Relaxed), 0);
        }
        if std::env::var_os("FUZZ_STATS").is_some() {
            // scripts/fuzz.sh sums these to show what the inputs reached.
            let c: Vec<String> = s
                .metrics
                .snapshot()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            eprintln!(
                "FUZZSTAT block chains={} {}",
                s.queue.next_used(),
                c.join(" ")
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]
        #[test]
        fn fuzz_block_requests(img in ring_image(), readonly in any::<bool>()) {
            run(&img, readonly)?;
        }
    }
}

/// A reset reaches the device thread after its current batch at most.
/// Measured with a queue full of 3.75 MiB reads: prints how long the
/// thread took to acknowledge; the bound asserted is deliberately loose (a
/// shared CI machine), the batching itself is checked exactly above. The
/// vCPU side never waits longer than `RESET_WAIT` (see the transport).
#[test]
fn reset_under_a_full_queue_waits_for_one_batch_at_most() {
    let m = Gm::from_ranges(&[(GuestAddress(0), 0x100_0000)]).unwrap();
    let t = TempFile::new().unwrap();
    t.as_file().set_len(2 * MAX_REQUEST_BYTES).unwrap();
    let vq = MockSplitQueue::new(&m, 256);
    header(&m, VIRTIO_BLK_T_IN, 0);
    let mut first = 0;
    let mut requests = 0;
    while first + 7 <= 256 {
        let mut descs = vec![(HDR, 16, R)];
        descs.extend(std::iter::repeat_n((0x20_0000u64, 0xC_0000u32, W), 5));
        descs.push((STATUS, 1, W));
        first = add_chain(&vq, first, &descs);
        requests += 1;
    }
    let mut dev = Block::new(DiskOptions {
        queue_size: 256,
        ..options(&t, false)
    })
    .unwrap();
    let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
    let active = ActiveQueue {
        index: 0,
        queue: vq.create_queue().unwrap(),
        event: evt.try_clone().unwrap(),
    };
    let lp = DeviceLoop::spawn("virtio-blk").unwrap();
    let h = lp.handle();
    h.activate(
        dev.activate(m.clone(), Arc::new(NoopInterrupt), vec![active])
            .unwrap(),
    )
    .unwrap();
    let t0 = std::time::Instant::now();
    assert!(h.wait_reset(h.reset(), std::time::Duration::from_secs(60)));
    let waited = t0.elapsed();
    let done = m.read_obj::<u16>(vq.used_addr().unchecked_add(2)).unwrap();
    eprintln!(
        "reset waited {waited:?} with {requests} x 3.75 MiB reads queued; {done} were served"
    );
    assert!(waited < std::time::Duration::from_secs(2), "{waited:?}");
}

#[test]
fn queue_count_is_bounded_and_mq_offered_only_with_several() {
    let t = image();
    for bad in [0, MAX_QUEUES + 1] {
        let e = Block::new(DiskOptions {
            num_queues: bad,
            ..options(&t, false)
        })
        .err()
        .expect("bad queue count accepted");
        assert!(e.to_string().contains("num_queues"), "{e}");
    }
    let one = Block::new(options(&t, false)).unwrap();
    assert_eq!(one.features() & (1 << VIRTIO_BLK_F_MQ), 0);
    assert_eq!((one.queue_max_sizes().len(), one.worker_count()), (1, 1));
    let four = Block::new(DiskOptions {
        num_queues: 4,
        ..options(&t, false)
    })
    .unwrap();
    assert_ne!(four.features() & (1 << VIRTIO_BLK_F_MQ), 0);
    assert_eq!((four.queue_max_sizes().len(), four.worker_count()), (4, 4));
    let mut n = [0u8; 2];
    four.read_config(34, &mut n);
    assert_eq!(u16::from_le_bytes(n), 4);
}
