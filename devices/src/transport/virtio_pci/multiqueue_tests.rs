//! A two-queue virtio-blk behind the virtio-pci function, driven as
//! Linux's virtio_blk with VIRTIO_BLK_F_MQ drives it: each queue is served
//! by its own device thread and interrupts through its own MSI-X vector.

use std::time::{Duration, Instant};

use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::tempfile::TempFile;

use super::*;
use crate::event_loop::DeviceLoop;
use crate::pci::MsiMessage;
use crate::virtio::{Block, DiskOptions};

const BAR: u64 = 0xc000_0000;
const VIRTIO_BLK_F_MQ: u64 = 1 << 12;
const VERSION_1: u64 = 1 << 32;

struct NoRoutes;
impl MsiRouting for NoRoutes {
    fn route(&self, _gsi: u32, _msg: MsiMessage) -> std::io::Result<()> {
        Ok(())
    }
}

fn bar_r(d: &mut VirtioPciDevice, off: u64, len: usize) -> u64 {
    let mut b = [0u8; 8];
    d.read(off, &mut b[..len]);
    u64::from_le_bytes(b)
}

fn bar_w(d: &mut VirtioPciDevice, off: u64, len: usize, v: u64) {
    d.write(off, &v.to_le_bytes()[..len]);
}

/// Queue `q`'s rings: descriptor table, avail, used.
fn rings(q: u64) -> (u64, u64, u64) {
    let base = 0x1_0000 * (q + 1);
    (base, base + 0x1000, base + 0x2000)
}

const NEXT: u16 = 1;
const WRITE: u16 = 2;

/// Makes the chain `descs` (address, length, writable) available as queue
/// `q`'s first and only entry, descriptors from 0.
fn post(mem: &GuestMemoryMmap, q: u64, descs: &[(u64, u32, bool)]) {
    let (desc, avail, _) = rings(q);
    for (i, &(addr, len, writable)) in descs.iter().enumerate() {
        let d = desc + 16 * i as u64;
        let mut flags = if writable { WRITE } else { 0 };
        if i + 1 < descs.len() {
            flags |= NEXT;
        }
        mem.write_obj(addr, GuestAddress(d)).unwrap();
        mem.write_obj(len, GuestAddress(d + 8)).unwrap();
        mem.write_obj(flags, GuestAddress(d + 12)).unwrap();
        mem.write_obj(i as u16 + 1, GuestAddress(d + 14)).unwrap();
    }
    mem.write_obj(0u16, GuestAddress(avail + 4)).unwrap();
    mem.write_obj(1u16, GuestAddress(avail + 2)).unwrap();
}

/// Waits (bounded) for queue `q` to return its first chain.
fn wait_used(mem: &GuestMemoryMmap, q: u64) {
    let used_idx = GuestAddress(rings(q).2 + 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    while mem.read_obj::<u16>(used_idx).unwrap() == 0 {
        assert!(Instant::now() < deadline, "queue {q} not served");
        std::thread::yield_now();
    }
}

/// Waits (bounded) for the vector's eventfd and consumes it.
fn wait_irq(e: &EventFd) {
    let mut p = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(e),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd that lives across the call.
    let n = unsafe { libc::poll(&mut p, 1, 10_000) };
    assert_eq!(n, 1, "no interrupt within 10 s");
    e.read().unwrap();
}

/// One read of sector `sector` on queue `q`: header, 512 bytes, status.
fn post_read(mem: &GuestMemoryMmap, q: u64, sector: u64) -> (u64, u64) {
    let (hdr, data, status) = (0x8_0000 + q * 0x1000, 0x9_0000 + q * 0x1000, 0xa_0000 + q);
    mem.write_obj(0u32, GuestAddress(hdr)).unwrap(); // VIRTIO_BLK_T_IN
    mem.write_obj(sector, GuestAddress(hdr + 8)).unwrap();
    mem.write_obj(0xffu8, GuestAddress(status)).unwrap();
    post(
        mem,
        q,
        &[(hdr, 16, false), (data, 512, true), (status, 1, true)],
    );
    (data, status)
}

/// A function for `device` on `threads` device threads, with MSI-X on and
/// every vector unmasked; returns it with its vectors' eventfds.
fn function(
    device: Arc<Mutex<dyn VirtioDevice>>,
    mem: &GuestMemoryMmap,
    threads: &[DeviceLoop],
) -> (VirtioPciDevice, Vec<EventFd>) {
    let n = vectors_for(&*device.lock().unwrap());
    let irqs: Vec<EventFd> = (0..n)
        .map(|_| EventFd::new(libc::EFD_NONBLOCK).unwrap())
        .collect();
    let vectors = irqs
        .iter()
        .enumerate()
        .map(|(i, e)| MsixVector {
            gsi: 24 + i as u32,
            irq: e.try_clone().unwrap(),
        })
        .collect();
    let handle = threads[0]
        .handle()
        .with_workers(threads[1..].iter().map(DeviceLoop::handle).collect());
    let mut d = VirtioPciDevice::new(
        device,
        mem.clone(),
        handle,
        BAR,
        vectors,
        Arc::new(NoRoutes),
    )
    .unwrap();
    d.config_write(4, &0x6u16.to_le_bytes());
    let mut ptr = [0u8; 1];
    d.config_read(0x34, &mut ptr);
    let mut cap = u16::from(ptr[0]);
    loop {
        let mut id = [0u8; 2];
        d.config_read(cap, &mut id);
        if id[0] == 0x11 {
            break;
        }
        cap = u16::from(id[1]);
        assert_ne!(cap, 0, "no MSI-X capability");
    }
    d.config_write(cap + 2, &0x8000u16.to_le_bytes());
    for v in 0..n as u64 {
        bar_w(&mut d, MSIX_TABLE_OFFSET + v * 16, 4, 0xfee0_0000);
        bar_w(&mut d, MSIX_TABLE_OFFSET + v * 16 + 8, 4, 0x40 + v);
        bar_w(&mut d, MSIX_TABLE_OFFSET + v * 16 + 12, 4, 0);
    }
    (d, irqs)
}

/// Status up to FEATURES_OK accepting `features` (VERSION_1 added).
fn negotiate(d: &mut VirtioPciDevice, features: u64) {
    bar_w(d, 0x14, 1, 1 | 2);
    bar_w(d, 0x08, 4, 0);
    bar_w(d, 0x0c, 4, features & 0xffff_ffff);
    bar_w(d, 0x08, 4, 1);
    bar_w(d, 0x0c, 4, (features | VERSION_1) >> 32);
    bar_w(d, 0x14, 1, 1 | 2 | 8);
    assert_eq!(bar_r(d, 0x14, 1), 1 | 2 | 8, "features accepted");
}

/// Sets up queue `q` (size 16) with MSI-X vector `vector`.
fn setup_queue(d: &mut VirtioPciDevice, q: u64, vector: u16) {
    let (desc, avail, used) = rings(q);
    bar_w(d, 0x16, 2, q);
    bar_w(d, 0x18, 2, 16);
    bar_w(d, 0x1a, 2, u64::from(vector));
    bar_w(d, 0x20, 8, desc);
    bar_w(d, 0x28, 8, avail);
    bar_w(d, 0x30, 8, used);
    bar_w(d, 0x1c, 2, 1);
}

fn activations(l: &DeviceLoop) -> Option<u64> {
    l.handle()
        .counters()
        .into_iter()
        .find(|(k, _)| *k == "activations")
        .map(|(_, v)| v)
}

#[test]
fn a_two_pair_nic_serves_each_pair_on_its_thread_after_vq_pairs_set() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixDatagram;

    use crate::virtio::tap::TapQueues;
    use crate::virtio::Net;

    let (files, hosts): (Vec<std::fs::File>, Vec<UnixDatagram>) = (0..2)
        .map(|_| {
            let (dev, host) = UnixDatagram::pair().unwrap();
            dev.set_nonblocking(true).unwrap();
            (std::fs::File::from(OwnedFd::from(dev)), host)
        })
        .unzip();
    let net = Net::with_queues(
        TapQueues::new(files, false),
        crate::virtio::net::tests::options(),
    );
    let device: Arc<Mutex<dyn VirtioDevice>> = Arc::new(Mutex::new(net));
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
    let threads = [
        DeviceLoop::spawn("virtio-net").unwrap(),
        DeviceLoop::spawn("virtio-net").unwrap(),
    ];
    let (mut d, irqs) = function(device, &mem, &threads);
    assert_eq!(irqs.len(), 6, "4 data queues, the control queue, config");
    bar_w(&mut d, 0x00, 4, 0);
    let offered = bar_r(&mut d, 0x04, 4);
    let (mq, ctrl) = (1u64 << 22, 1u64 << 17);
    assert_eq!(offered & (mq | ctrl), mq | ctrl);
    // max_virtqueue_pairs.
    assert_eq!(bar_r(&mut d, DEVICE_OFFSET + 8, 2), 2);
    negotiate(&mut d, offered);
    assert_eq!(bar_r(&mut d, 0x12, 2), 5, "num_queues");
    for q in 0..4u64 {
        setup_queue(&mut d, q, q as u16 + 1);
    }
    // Linux gives the control queue no vector (no callback).
    setup_queue(&mut d, 4, NO_VECTOR);
    bar_w(&mut d, 0x14, 1, 1 | 2 | 8 | 4);
    assert_eq!(bar_r(&mut d, 0x14, 1), 1 | 2 | 8 | 4, "DRIVER_OK");

    // VQ_PAIRS_SET 2 on the control queue.
    mem.write_slice(&[4, 0, 2, 0], GuestAddress(0x8_0000))
        .unwrap();
    mem.write_obj(0xaau8, GuestAddress(0x8_1000)).unwrap();
    post(&mem, 4, &[(0x8_0000, 4, false), (0x8_1000, 1, true)]);
    d.queue_evts()[4].write(1).unwrap();
    wait_used(&mem, 4);
    assert_eq!(mem.read_obj::<u8>(GuestAddress(0x8_1000)).unwrap(), 0);

    // Pair 1: a frame from its TAP descriptor lands in queue 2 and raises
    // vector 3; a frame on queue 3 leaves through the same descriptor.
    post(&mem, 2, &[(0x9_0000, 2048, true)]);
    d.queue_evts()[2].write(1).unwrap();
    let mut frame = vec![0u8; 60];
    frame[12..18].copy_from_slice(&[0xff; 6]);
    hosts[1].send(&frame).unwrap();
    wait_used(&mem, 2);
    assert_eq!(
        mem.read_obj::<u32>(GuestAddress(rings(2).2 + 8)).unwrap(),
        60,
        "used length"
    );
    // The interrupt follows the used ring update.
    wait_irq(&irqs[3]);
    for (v, e) in irqs.iter().enumerate() {
        assert!(v == 3 || e.read().is_err(), "vector {v} fired");
    }
    mem.write_slice(&frame, GuestAddress(0xa_0000)).unwrap();
    post(&mem, 3, &[(0xa_0000, 60, false)]);
    d.queue_evts()[3].write(1).unwrap();
    wait_used(&mem, 3);
    // Sent before the chain was returned.
    hosts[1].set_nonblocking(true).unwrap();
    assert_eq!(hosts[1].recv(&mut [0u8; 128]).unwrap(), 60);
    hosts[0].set_nonblocking(true).unwrap();
    let e = hosts[0].recv(&mut [0u8; 128]).unwrap_err();
    assert_eq!(
        e.kind(),
        std::io::ErrorKind::WouldBlock,
        "pair 0 sent nothing"
    );
    assert_eq!(activations(&threads[0]), Some(1));
    assert_eq!(activations(&threads[1]), Some(1));
}

#[test]
fn two_queues_are_served_by_two_threads_with_their_own_vectors() {
    let img = TempFile::new().unwrap();
    let mut image = vec![0u8; 8 * 512];
    for (i, s) in image.chunks_mut(512).enumerate() {
        s.fill(i as u8 + 0x30);
    }
    std::io::Write::write_all(&mut img.as_file(), &image).unwrap();
    let block = Block::new(DiskOptions {
        path: img.as_path().to_path_buf(),
        readonly: false,
        direct: false,
        serial: None,
        queue_size: 16,
        num_queues: 2,
    })
    .unwrap();
    assert_eq!(block.worker_count(), 2);
    let device: Arc<Mutex<dyn VirtioDevice>> = Arc::new(Mutex::new(block));
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
    assert_eq!(vectors_for(&*device.lock().unwrap()), 3);
    let irqs: Vec<EventFd> = (0..3)
        .map(|_| EventFd::new(libc::EFD_NONBLOCK).unwrap())
        .collect();
    let vectors = irqs
        .iter()
        .enumerate()
        .map(|(i, e)| MsixVector {
            gsi: 24 + i as u32,
            irq: e.try_clone().unwrap(),
        })
        .collect();
    let (t0, t1) = (
        DeviceLoop::spawn("virtio-blk").unwrap(),
        DeviceLoop::spawn("virtio-blk").unwrap(),
    );
    let handle = t0.handle().with_workers(vec![t1.handle()]);
    let mut d = VirtioPciDevice::new(
        device,
        mem.clone(),
        handle,
        BAR,
        vectors,
        Arc::new(NoRoutes),
    )
    .unwrap();

    // Memory decode, MSI-X on with every entry unmasked.
    d.config_write(4, &0x6u16.to_le_bytes());
    let mut ptr = [0u8; 1];
    d.config_read(0x34, &mut ptr);
    let mut cap = u16::from(ptr[0]);
    loop {
        let mut id = [0u8; 2];
        d.config_read(cap, &mut id);
        if id[0] == 0x11 {
            break;
        }
        cap = u16::from(id[1]);
        assert_ne!(cap, 0, "no MSI-X capability");
    }
    d.config_write(cap + 2, &0x8000u16.to_le_bytes());
    for v in 0..3u64 {
        bar_w(&mut d, MSIX_TABLE_OFFSET + v * 16, 4, 0xfee0_0000);
        bar_w(&mut d, MSIX_TABLE_OFFSET + v * 16 + 8, 4, 0x40 + v);
        bar_w(&mut d, MSIX_TABLE_OFFSET + v * 16 + 12, 4, 0);
    }

    bar_w(&mut d, 0x14, 1, 1 | 2);
    bar_w(&mut d, 0x00, 4, 0);
    let offered = bar_r(&mut d, 0x04, 4);
    assert_ne!(offered & VIRTIO_BLK_F_MQ, 0, "MQ offered");
    // num_queues in the device configuration (offset 34).
    assert_eq!(bar_r(&mut d, DEVICE_OFFSET + 34, 2), 2);
    bar_w(&mut d, 0x08, 4, 0);
    bar_w(&mut d, 0x0c, 4, offered);
    bar_w(&mut d, 0x08, 4, 1);
    bar_w(&mut d, 0x0c, 4, VERSION_1 >> 32);
    bar_w(&mut d, 0x14, 1, 1 | 2 | 8);
    assert_eq!(bar_r(&mut d, 0x14, 1), 1 | 2 | 8, "features accepted");
    assert_eq!(bar_r(&mut d, 0x12, 2), 2, "num_queues");
    for q in 0..2u64 {
        let (desc, avail, used) = rings(q);
        bar_w(&mut d, 0x16, 2, q);
        bar_w(&mut d, 0x18, 2, 16);
        bar_w(&mut d, 0x1a, 2, q + 1);
        assert_eq!(bar_r(&mut d, 0x1a, 2), q + 1);
        bar_w(&mut d, 0x20, 8, desc);
        bar_w(&mut d, 0x28, 8, avail);
        bar_w(&mut d, 0x30, 8, used);
        bar_w(&mut d, 0x1c, 2, 1);
    }
    bar_w(&mut d, 0x10, 2, 0);
    bar_w(&mut d, 0x14, 1, 1 | 2 | 8 | 4);
    assert_eq!(bar_r(&mut d, 0x14, 1), 1 | 2 | 8 | 4, "DRIVER_OK");

    // A read on each queue, notified through its own eventfd.
    for (q, sector) in [(1u64, 5u64), (0, 2)] {
        let (data, status) = post_read(&mem, q, sector);
        d.queue_evts()[q as usize].write(1).unwrap();
        let used_idx = GuestAddress(rings(q).2 + 2);
        let deadline = Instant::now() + Duration::from_secs(10);
        while mem.read_obj::<u16>(used_idx).unwrap() == 0 {
            assert!(Instant::now() < deadline, "queue {q} not served");
            std::thread::yield_now();
        }
        assert_eq!(mem.read_obj::<u8>(GuestAddress(status)).unwrap(), 0);
        let expect = sector as u8 + 0x30;
        assert_eq!(mem.read_obj::<u8>(GuestAddress(data)).unwrap(), expect);
        // The queue's vector (q + 1) fired (it follows the used ring
        // update), not the other queue's.
        wait_irq(&irqs[q as usize + 1]);
        assert!(
            irqs[2 - q as usize].read().is_err(),
            "the other vector fired"
        );
    }
    assert!(irqs[0].read().is_err(), "no configuration interrupt");
    // Each thread took one data path.
    let activations = |l: &DeviceLoop| {
        l.handle()
            .counters()
            .into_iter()
            .find(|(k, _)| *k == "activations")
            .map(|(_, v)| v)
    };
    assert_eq!(activations(&t0), Some(1));
    assert_eq!(activations(&t1), Some(1));

    // A reset stops both threads' data paths.
    bar_w(&mut d, 0x14, 1, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while bar_r(&mut d, 0x14, 1) != 0 {
        assert!(Instant::now() < deadline, "reset not finished");
        std::thread::yield_now();
    }
    for l in [&t0, &t1] {
        let resets = l
            .handle()
            .counters()
            .into_iter()
            .find(|(k, _)| *k == "resets");
        assert_eq!(resets, Some(("resets", 1)));
    }
}
