//! virtio-net frame handling, with a datagram socket pair standing in for
//! the TAP (one frame per read/write, as a TAP) and chains built by
//! virtio-queue's mock queue.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::sync::Mutex;

use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use vm_memory::{Address, Bytes, GuestAddress};

use super::*;
use crate::virtio::NoopInterrupt;

const W: u16 = VRING_DESC_F_WRITE as u16;
const R: u16 = 0;
const RXQ: u64 = 0;
const TXQ: u64 = 0x1_0000;
const BUF: u64 = 0x10_0000;

type Gm = GuestMemoryMmap;

fn mem() -> Gm {
    Gm::from_ranges(&[(GuestAddress(0), 0x40_0000)]).expect("guest memory")
}

struct Rig {
    m: Gm,
    server: Server,
    /// The host end of the "TAP".
    host: UnixDatagram,
    epoll: Epoll,
}

/// A datagram socket pair standing in for a TAP: the device end (as a
/// file, watched by an epoll under TAP_TOKEN) and the host end.
fn fake_tap() -> (File, UnixDatagram, Epoll) {
    let (dev, host) = UnixDatagram::pair().unwrap();
    dev.set_nonblocking(true).unwrap();
    host.set_nonblocking(true).unwrap();
    let tap = File::from(OwnedFd::from(dev));
    let epoll = Epoll::new().unwrap();
    epoll
        .ctl(
            ControlOperation::Add,
            tap.as_raw_fd(),
            EpollEvent::new(EventSet::IN, TAP_TOKEN),
        )
        .unwrap();
    (tap, host, epoll)
}

/// A server over `m` with its RX and TX rings at `RXQ` and `TXQ`, wired
/// to a fake TAP: the server, the TAP's host end and an epoll on it.
fn server_on(m: &Gm) -> (Server, UnixDatagram, Epoll) {
    let (tap, host, epoll) = fake_tap();
    let q = |base| ActiveQueue {
        index: 0,
        queue: make_queue(m, base),
        event: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
    };
    let server = Server::new(
        m.clone(),
        Arc::new(NoopInterrupt),
        q(RXQ),
        q(TXQ),
        Arc::new(tap),
        Arc::new(NetMetrics::default()),
    );
    (server, host, epoll)
}

fn rig() -> Rig {
    let m = mem();
    let (server, host, epoll) = server_on(&m);
    Rig {
        m,
        server,
        host,
        epoll,
    }
}

/// Avail and used ring addresses of the size-16 queue at `base` (the
/// descriptor table is at `base`). Laid out by hand: the mock queue's
/// used ring overlaps its avail ring past 8 entries.
/// Interrupts raised, in order.
#[derive(Default)]
struct Recorder(Mutex<Vec<VirtioInterruptType>>);

impl VirtioInterrupt for Recorder {
    fn trigger(&self, t: VirtioInterruptType) -> io::Result<()> {
        self.0.lock().unwrap().push(t);
        Ok(())
    }
}

impl Recorder {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// The options the tests' devices use (here and in the virtio-pci
/// multiqueue tests).
pub(crate) fn options() -> NetOptions {
    NetOptions {
        mac: [2, 0, 0, 0, 0, 1],
        mtu: None,
        queue_size: 16,
        offload_csum: true,
        offload_tso: true,
    }
}

/// An RX/TX pair of the rig's rings activated on @n (as negotiated).
fn activate_rx_tx(n: &mut Net, m: &Gm) -> Vec<Box<dyn EventHandler>> {
    let q = |index, base| ActiveQueue {
        index,
        queue: make_queue(m, base),
        event: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
    };
    n.activate_workers(
        m.clone(),
        Arc::new(NoopInterrupt),
        vec![q(0, RXQ), q(1, TXQ)],
    )
    .unwrap()
}

fn rings(base: u64) -> (GuestAddress, GuestAddress) {
    (GuestAddress(base + 0x100), GuestAddress(base + 0x200))
}

fn make_queue(m: &Gm, base: u64) -> Queue {
    let (avail, used) = rings(base);
    for a in [avail, used] {
        m.write_obj(0u32, a).unwrap();
    }
    let mut q = Queue::new(16).unwrap();
    q.set_size(16);
    q.set_desc_table_address(Some(base as u32), Some(0));
    q.set_avail_ring_address(Some(avail.0 as u32), Some(0));
    q.set_used_ring_address(Some(used.0 as u32), Some(0));
    q.set_ready(true);
    assert!(q.is_valid(m));
    q
}

/// Adds one chain at descriptor `first` of the queue at `base`, as a
/// driver would: descriptors, avail ring entry, avail index.
fn add_chain(m: &Gm, base: u64, first: u16, descs: &[(u64, u32, u16)]) {
    let (avail, _) = rings(base);
    for (i, &(addr, len, flags)) in descs.iter().enumerate() {
        let index = first + i as u16;
        let flags = if i + 1 == descs.len() {
            flags
        } else {
            flags | VRING_DESC_F_NEXT as u16
        };
        let d = RawDescriptor::from(SplitDescriptor::new(addr, len, flags, index + 1));
        m.write_obj(d, GuestAddress(base + 16 * u64::from(index)))
            .unwrap();
    }
    let idx: u16 = m.read_obj(avail.unchecked_add(2)).unwrap();
    m.write_obj(first, avail.unchecked_add(4 + 2 * u64::from(idx % 16)))
        .unwrap();
    m.write_obj(idx.wrapping_add(1), avail.unchecked_add(2))
        .unwrap();
}

/// (used ring idx, len of entry i) of the queue at `base`.
fn used(m: &Gm, base: u64, i: u64) -> (u16, u32) {
    let (_, u) = rings(base);
    let idx = m.read_obj::<u16>(u.unchecked_add(2)).unwrap();
    let len = m.read_obj::<u32>(u.unchecked_add(4 + 8 * i + 4)).unwrap();
    (idx, len)
}

fn frame(payload: u8, len: usize) -> Vec<u8> {
    let mut f = vec![payload; len];
    // A header with offload flags set, which must not reach the other side.
    f[..VNET_HDR_LEN].copy_from_slice(&[1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    f
}

#[test]
fn tx_sends_the_frame_with_cleared_flags() {
    let mut r = rig();
    let f = frame(0x42, 100);
    r.m.write_slice(&f[..30], GuestAddress(BUF)).unwrap();
    r.m.write_slice(&f[30..], GuestAddress(BUF + 0x1000))
        .unwrap();
    add_chain(&r.m, TXQ, 0, &[(BUF, 30, R), (BUF + 0x1000, 70, R)]);
    r.server.process_tx();
    let mut got = [0u8; 200];
    let n = r.host.recv(&mut got).unwrap();
    assert_eq!(n, 100);
    assert_eq!(&got[..10], &[0; 10], "offload flags reached the TAP");
    assert_eq!(&got[12..100], &f[12..]);
    assert_eq!(used(&r.m, TXQ, 0), (1, 0));
    assert_eq!(r.server.metrics.tx_frames.load(Ordering::Relaxed), 1);
    assert_eq!(r.server.metrics.tx_bytes.load(Ordering::Relaxed), 88);
}

#[test]
fn tx_rejects_malformed_chains_without_sending() {
    let mut r = rig();
    // Writable descriptor (wrong direction), runt, too long, outside RAM.
    add_chain(&r.m, TXQ, 0, &[(BUF, 100, W)]);
    add_chain(&r.m, TXQ, 1, &[(BUF, 20, R)]);
    add_chain(&r.m, TXQ, 2, &[(BUF, MAX_PACKET as u32 + 1, R)]);
    add_chain(&r.m, TXQ, 3, &[(0x3F_FF00, 0x1000, R)]);
    add_chain(&r.m, TXQ, 4, &[(BUF, 60, R), (BUF + 0x1000, 10, W)]);
    r.server.process_tx();
    assert_eq!(used(&r.m, TXQ, 4).0, 5, "every chain is returned");
    assert!(r.host.recv(&mut [0u8; 64]).is_err(), "something was sent");
    assert_eq!(r.server.metrics.bad_descriptors.load(Ordering::Relaxed), 5);
    assert_eq!(r.server.metrics.tx_frames.load(Ordering::Relaxed), 0);
}

#[test]
fn rx_delivers_a_frame_with_num_buffers_one() {
    let mut r = rig();
    let f = frame(0x17, 98);
    r.host.send(&f).unwrap();
    add_chain(&r.m, RXQ, 0, &[(BUF, 1526, W)]);
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0), (1, 98));
    let mut got = [0u8; 98];
    r.m.read_slice(&mut got, GuestAddress(BUF)).unwrap();
    assert_eq!(&got[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    assert_eq!(&got[12..], &f[12..]);
    assert_eq!(r.server.metrics.rx_bytes.load(Ordering::Relaxed), 86);
}

#[test]
fn rx_without_buffers_stops_reading_and_resumes_on_notification() {
    let mut r = rig();
    for i in 0..3u8 {
        r.host.send(&frame(i, 60)).unwrap();
    }
    r.server.process_rx(&r.epoll);
    assert!(!r.server.tap_armed, "TAP still polled without buffers");
    // The TAP is still readable, but epoll must not report it (no spinning).
    let mut ev = [EpollEvent::default(); 4];
    assert_eq!(r.epoll.wait(0, &mut ev).unwrap(), 0);
    // The guest posts two buffers and notifies.
    add_chain(&r.m, RXQ, 0, &[(BUF, 1526, W)]);
    add_chain(&r.m, RXQ, 1, &[(BUF + 0x1000, 1526, W)]);
    r.server.rx_evt.write(1).unwrap();
    r.server.event(
        RX_TOKEN,
        &mut crate::event_loop::LoopContext::detached(&r.epoll, &mut None),
    );
    assert_eq!(used(&r.m, RXQ, 1), (2, 60));
    assert_eq!(r.m.read_obj::<u8>(GuestAddress(BUF + 12)).unwrap(), 0);
    assert_eq!(
        r.m.read_obj::<u8>(GuestAddress(BUF + 0x1000 + 12)).unwrap(),
        1
    );
    assert!(
        !r.server.tap_armed,
        "out of buffers again with frame 2 pending"
    );
    add_chain(&r.m, RXQ, 2, &[(BUF + 0x2000, 1526, W)]);
    r.server.event(
        RX_TOKEN,
        &mut crate::event_loop::LoopContext::detached(&r.epoll, &mut None),
    );
    assert_eq!(used(&r.m, RXQ, 2), (3, 60));
    assert_eq!(
        r.m.read_obj::<u8>(GuestAddress(BUF + 0x2000 + 12)).unwrap(),
        2
    );
    assert!(r.server.tap_armed, "TAP drained: polled again");
    let m = &r.server.metrics;
    assert_eq!(m.rx_frames.load(Ordering::Relaxed), 3);
    assert_eq!(m.rx_dropped.load(Ordering::Relaxed), 0);
    assert!(m.rx_no_buffers.load(Ordering::Relaxed) >= 2);
}

#[test]
fn rx_drops_oversized_frames_but_keeps_the_buffer() {
    let mut r = rig();
    r.host.send(&frame(1, 2000)).unwrap();
    r.host.send(&frame(2, 100)).unwrap();
    add_chain(&r.m, RXQ, 0, &[(BUF, 1526, W)]);
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0), (1, 100));
    assert_eq!(r.m.read_obj::<u8>(GuestAddress(BUF + 12)).unwrap(), 2);
    assert_eq!(r.server.metrics.rx_dropped.load(Ordering::Relaxed), 1);
    assert_eq!(r.server.metrics.rx_frames.load(Ordering::Relaxed), 1);
}

#[test]
fn rx_returns_bad_buffers_and_keeps_the_frame() {
    let mut r = rig();
    r.host.send(&frame(9, 80)).unwrap();
    // Device-readable, outside RAM, then a good one.
    add_chain(&r.m, RXQ, 0, &[(BUF, 1526, R)]);
    add_chain(&r.m, RXQ, 1, &[(0x3F_FF00, 0x1000, W)]);
    add_chain(&r.m, RXQ, 2, &[(BUF + 0x1000, 1526, W)]);
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0), (3, 0));
    assert_eq!(used(&r.m, RXQ, 1).1, 0);
    assert_eq!(used(&r.m, RXQ, 2).1, 80);
    assert_eq!(
        r.m.read_obj::<u8>(GuestAddress(BUF + 0x1000 + 12)).unwrap(),
        9
    );
    assert_eq!(r.server.metrics.bad_descriptors.load(Ordering::Relaxed), 2);
}

#[test]
fn rx_spreads_a_frame_over_a_chain() {
    let mut r = rig();
    let f = frame(5, 3000);
    r.host.send(&f).unwrap();
    add_chain(
        &r.m,
        RXQ,
        0,
        &[
            (BUF, 12, W),
            (BUF + 0x1000, 2000, W),
            (BUF + 0x2000, 2000, W),
        ],
    );
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0), (1, 3000));
    let mut tail = [0u8; 988];
    r.m.read_slice(&mut tail, GuestAddress(BUF + 0x2000))
        .unwrap();
    assert_eq!(&tail[..], &f[2012..]);
}

#[test]
fn random_chains_never_panic() {
    let mut r = rig();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..500u16 {
        // Half the rounds with mergeable receive buffers.
        r.server.mrg_rxbuf = round >= 250;
        let base = if next() % 2 == 0 { RXQ } else { TXQ };
        let n = 1 + (next() % 3) as usize;
        let descs: Vec<(u64, u32, u16)> = (0..n)
            .map(|_| {
                let addr = [BUF, BUF + 0x1000, 0x3F_FFF0, 0x40_0000][(next() % 4) as usize];
                let len = [0u32, 1, 12, 60, 1526, 70_000][(next() % 6) as usize];
                let flags = if next() % 2 == 0 { R } else { W };
                (addr, len, flags)
            })
            .collect();
        add_chain(&r.m, base, (round % 4) * 4, &descs);
        if next() % 2 == 0 {
            let _ = r.host.send(&frame(0, 20 + (next() % 3000) as usize));
        }
        r.server.process_tx();
        r.server.process_rx(&r.epoll);
        while r.host.recv(&mut [0u8; 4096]).is_ok() {}
    }
}

#[test]
fn device_config_space_and_features() {
    let (dev, _host) = UnixDatagram::pair().unwrap();
    let tap = File::from(OwnedFd::from(dev));
    let mac = [0x12, 0x34, 0x56, 0x78, 0x90, 0x01];
    let n = Net::new(
        tap,
        NetOptions {
            mac,
            mtu: Some(1400),
            queue_size: 256,
            offload_csum: true,
            offload_tso: true,
        },
    );
    let mut got = [0u8; 6];
    n.read_config(0, &mut got);
    assert_eq!(got, mac);
    let mut mtu = [0u8; 2];
    n.read_config(10, &mut mtu);
    assert_eq!(u16::from_le_bytes(mtu), 1400);
    let f = n.features();
    for bit in [VIRTIO_F_VERSION_1, VIRTIO_NET_F_MAC, VIRTIO_NET_F_MTU] {
        assert_ne!(f & (1 << bit), 0, "feature {bit}");
    }
    assert_eq!(f & offload::OFFERED, offload::OFFERED, "offloads offered");
    assert_eq!(n.queue_max_sizes(), vec![256, 256]);
}

#[test]
fn tx_refuses_indirect_chains_without_sending() {
    use virtio_bindings::virtio_ring::VRING_DESC_F_INDIRECT;
    let mut r = rig();
    let table = BUF + 0x4000;
    r.m.write_slice(&frame(7, 100), GuestAddress(BUF)).unwrap();
    r.m.write_obj(SplitDescriptor::new(BUF, 100, R, 0), GuestAddress(table))
        .unwrap();
    add_chain(&r.m, TXQ, 0, &[(table, 16, VRING_DESC_F_INDIRECT as u16)]);
    r.server.process_tx();
    assert_eq!(used(&r.m, TXQ, 0).0, 1, "the chain is returned");
    assert!(r.host.recv(&mut [0u8; 128]).is_err(), "indirect frame sent");
    assert_eq!(r.server.metrics.bad_descriptors.load(Ordering::Relaxed), 1);
}

#[test]
fn config_writes_are_counted() {
    let (dev, _host) = UnixDatagram::pair().unwrap();
    let mut n = Net::new(
        File::from(OwnedFd::from(dev)),
        NetOptions {
            mac: [2, 0, 0, 0, 0, 1],
            mtu: None,
            queue_size: 256,
            offload_csum: true,
            offload_tso: true,
        },
    );
    for i in 0..300 {
        n.write_config(i % 6, &[0xee]);
    }
    assert_eq!(n.metrics().config_writes.load(Ordering::Relaxed), 300);
    let mut mac = [0u8; 6];
    n.read_config(0, &mut mac);
    assert_eq!(mac, [2, 0, 0, 0, 0, 1], "the MAC must not change");
}

mod fuzz {
    use super::*;
    use crate::virtio::fuzz_support::{cases, load, memory, ring_image, used_idx};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]
        #[test]
        fn fuzz_net_queues(
            rx_img in ring_image(),
            tx_img in ring_image(),
            frames in prop::collection::vec(0usize..3000, 0..4),
            mrg in any::<bool>(),
            event_idx in any::<bool>(),
        ) {
            let m = memory();
            let (tap, host, epoll) = fake_tap();
            let q = |index, queue| ActiveQueue {
                index,
                queue,
                event: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            };
            let metrics = Arc::new(NetMetrics::default());
            let mut server = Server::new(
                m.clone(),
                Arc::new(NoopInterrupt),
                q(0, load(&m, 0, &rx_img)),
                q(1, load(&m, 0x400, &tx_img)),
                Arc::new(tap),
                metrics.clone(),
            );
            server.mrg_rxbuf = mrg;
            server.rx.set_event_idx(event_idx);
            server.tx.set_event_idx(event_idx);
            // Raw datagrams: runts (shorter than the vnet header) too.
            for &len in &frames {
                let _ = host.send(&vec![0x5a; len.max(1)]);
            }
            server.process_tx();
            server.process_rx(&epoll);
            let mut sent = 0u64;
            while host.recv(&mut [0u8; 70_000]).is_ok() {
                sent += 1;
            }
            prop_assert_eq!(sent, metrics.tx_frames.load(Ordering::Relaxed));
            if !rx_img.may_write_rings() {
                prop_assert_eq!(used_idx(&m, 0x400), server.tx.next_used());
                prop_assert_eq!(used_idx(&m, 0), server.rx.next_used());
            }
            prop_assert!(metrics.rx_frames.load(Ordering::Relaxed) <= frames.len() as u64);
        }
    }
}

/// A server over guest memory made of two adjacent regions (one host
/// mapping each), its rings in the first.
pub(super) fn two_region_rig(mrg: bool) -> (Gm, Server, UnixDatagram, Epoll) {
    let m = Gm::from_ranges(&[
        (GuestAddress(0), 0x20_0000),
        (GuestAddress(0x20_0000), 0x20_0000),
    ])
    .unwrap();
    let (mut server, host, epoll) = server_on(&m);
    server.mrg_rxbuf = mrg;
    (m, server, host, epoll)
}

mod mergeable;
mod multiqueue;
mod notify;
mod zero_copy;

#[test]
fn negotiated_offloads_pass_the_header_both_ways() {
    let mut r = rig();
    r.server.offloads = Offloads::from_features(offload::OFFERED);
    // TX: a TSO frame's header (NEEDS_CSUM, GSO_TCPV4) reaches the TAP.
    let f = frame(0x42, 100);
    r.m.write_slice(&f, GuestAddress(BUF)).unwrap();
    add_chain(&r.m, TXQ, 0, &[(BUF, 100, R)]);
    r.server.process_tx();
    let mut got = [0u8; 200];
    assert_eq!(r.host.recv(&mut got).unwrap(), 100);
    assert_eq!(&got[..12], &f[..12], "the negotiated header was changed");
    // RX: the TAP's header reaches the guest, num_buffers set to one.
    r.host.send(&frame(0x17, 98)).unwrap();
    add_chain(&r.m, RXQ, 0, &[(BUF, 1526, W)]);
    r.server.process_rx(&r.epoll);
    let mut hdr = [0u8; 12];
    r.m.read_slice(&mut hdr, GuestAddress(BUF)).unwrap();
    assert_eq!(hdr, [1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
}

#[test]
fn tx_gathers_from_guest_memory_and_falls_back_to_a_copy() {
    let mut r = rig();
    let f = frame(0x42, 1000);
    // The header split over two descriptors, then the payload in three
    // (written with writev straight from guest memory).
    let cuts = [0usize, 5, 12, 300, 301, 1000];
    let descs: Vec<(u64, u32, u16)> = cuts
        .windows(2)
        .enumerate()
        .map(|(i, w)| {
            let at = BUF + 0x1000 * i as u64;
            r.m.write_slice(&f[w[0]..w[1]], GuestAddress(at)).unwrap();
            (at, (w[1] - w[0]) as u32, R)
        })
        .collect();
    add_chain(&r.m, TXQ, 0, &descs);
    r.server.process_tx();
    let mut got = [0u8; 2000];
    assert_eq!(r.host.recv(&mut got).unwrap(), 1000);
    assert_eq!(&got[..10], &[0; 10], "offload flags reached the TAP");
    assert_eq!(&got[12..1000], &f[12..]);
    // The guest's header is left as it wrote it.
    let mut hdr = [0u8; 5];
    r.m.read_slice(&mut hdr, GuestAddress(BUF)).unwrap();
    assert_eq!(hdr, [1, 4, 0, 0, 0]);
}

#[test]
fn tx_copies_a_frame_whose_buffer_spans_two_memory_regions() {
    // Two adjacent regions: a buffer across the boundary is guest RAM
    // (the chain is valid) but not one host mapping, so no writev.
    let (m, mut server, host, _epoll) = two_region_rig(false);
    let f = frame(0x24, 1000);
    let at = 0x20_0000 - 500;
    m.write_slice(&f, GuestAddress(at)).unwrap();
    add_chain(&m, TXQ, 0, &[(at, 1000, R)]);
    server.process_tx();
    let mut got = [0u8; 2000];
    assert_eq!(host.recv(&mut got).unwrap(), 1000);
    assert_eq!(&got[..10], &[0; 10], "offload flags reached the TAP");
    assert_eq!(&got[12..1000], &f[12..]);
    assert_eq!(server.metrics.tx_frames.load(Ordering::Relaxed), 1);
}
