//! Mergeable receive buffers (`VIRTIO_NET_F_MRG_RXBUF`): a frame spread
//! over several chains with `num_buffers` set, frames that wait for
//! buffers instead of being cut, and the guest's malformed chains.

use super::*;

const MRG: u64 = 1 << VIRTIO_NET_F_MRG_RXBUF;

/// (id, len) of used entry `i` of the queue at `base`.
fn used_entry(m: &Gm, base: u64, i: u64) -> (u32, u32) {
    let (_, u) = rings(base);
    let id = m.read_obj::<u32>(u.unchecked_add(4 + 8 * i)).unwrap();
    let len = m.read_obj::<u32>(u.unchecked_add(4 + 8 * i + 4)).unwrap();
    (id, len)
}

fn used_idx(m: &Gm, base: u64) -> u16 {
    used(m, base, 0).0
}

fn mrg_rig() -> Rig {
    let mut r = rig();
    r.server.mrg_rxbuf = true;
    r
}

/// Posts chain `i` as one device-writable buffer of `len` bytes at
/// `BUF + i x 0x1000`.
fn post(r: &Rig, i: u16, len: u32) {
    add_chain(&r.m, RXQ, i, &[(addr(i), len, W)]);
}

fn addr(i: u16) -> u64 {
    BUF + 0x1000 * u64::from(i)
}

/// The bytes of used entries `first..first + n` (each at its chain's
/// buffer), concatenated.
fn gather(r: &Rig, first: u64, n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for i in first..first + n {
        let (id, len) = used_entry(&r.m, RXQ, i);
        let mut b = vec![0u8; len as usize];
        r.m.read_slice(&mut b, GuestAddress(addr(id as u16)))
            .unwrap();
        out.extend_from_slice(&b);
    }
    out
}

fn num_buffers(r: &Rig, chain: u16) -> u16 {
    r.m.read_obj::<u16>(GuestAddress(addr(chain) + 10)).unwrap()
}

#[test]
fn a_frame_spans_several_buffers_with_num_buffers_set() {
    let mut r = mrg_rig();
    let f = frame(0x33, 3000);
    r.host.send(&f).unwrap();
    for i in 0..4 {
        post(&r, i, 1024);
    }
    r.server.process_rx(&r.epoll);
    assert_eq!(used_idx(&r.m, RXQ), 3, "three buffers used");
    assert_eq!(used_entry(&r.m, RXQ, 0), (0, 1024));
    assert_eq!(used_entry(&r.m, RXQ, 1), (1, 1024));
    assert_eq!(used_entry(&r.m, RXQ, 2), (2, 952));
    assert_eq!(num_buffers(&r, 0), 3);
    let got = gather(&r, 0, 3);
    assert_eq!(&got[12..], &f[12..], "payload split or reordered wrongly");
    // The fourth chain is taken ahead, parsed and held, unused, for the
    // next frame (which is read straight into it).
    assert_eq!(r.server.rx.next_avail(), 4);
    assert_eq!(r.server.rx_held.len(), 1, "the fourth buffer was used");
    let m = &r.server.metrics;
    assert_eq!(m.rx_frames.load(Ordering::Relaxed), 1);
    assert_eq!(m.rx_bytes.load(Ordering::Relaxed), 2988);
    assert_eq!(m.rx_dropped.load(Ordering::Relaxed), 0);
    // A small frame next: one buffer, num_buffers 1.
    r.host.send(&frame(0x44, 60)).unwrap();
    r.server.process_rx(&r.epoll);
    assert_eq!(used_entry(&r.m, RXQ, 3), (3, 60));
    assert_eq!(num_buffers(&r, 3), 1);
}

#[test]
fn a_frame_waits_for_enough_buffers_and_is_not_cut() {
    let mut r = mrg_rig();
    let f = frame(0x55, 3000);
    r.host.send(&f).unwrap();
    r.host.send(&frame(0x66, 60)).unwrap();
    post(&r, 0, 1024);
    post(&r, 1, 1024);
    r.server.process_rx(&r.epoll);
    assert_eq!(used_idx(&r.m, RXQ), 0, "part of a frame was delivered");
    assert!(!r.server.tap_armed, "TAP still polled without buffers");
    assert_eq!(r.server.metrics.rx_no_buffers.load(Ordering::Relaxed), 1);
    // The guest posts one more buffer and notifies.
    post(&r, 2, 1024);
    r.server.rx_evt.write(1).unwrap();
    r.server.event(
        RX_TOKEN,
        &mut crate::event_loop::LoopContext::detached(&r.epoll, &mut None),
    );
    assert_eq!(used_idx(&r.m, RXQ), 3);
    assert_eq!(num_buffers(&r, 0), 3);
    assert_eq!(used_entry(&r.m, RXQ, 2), (2, 952));
    assert_eq!(&gather(&r, 0, 3)[12..], &f[12..]);
    // The second frame waits in turn.
    assert!(!r.server.tap_armed);
    post(&r, 3, 1024);
    r.server.process_rx(&r.epoll);
    assert_eq!(used_entry(&r.m, RXQ, 3), (3, 60));
    assert_eq!(
        r.m.read_obj::<u8>(GuestAddress(addr(3) + 12)).unwrap(),
        0x66
    );
    let m = &r.server.metrics;
    assert_eq!(m.rx_frames.load(Ordering::Relaxed), 2);
    assert_eq!(m.rx_dropped.load(Ordering::Relaxed), 0);
}

#[test]
fn bad_buffers_are_returned_empty_before_the_frame() {
    let mut r = mrg_rig();
    let f = frame(0x77, 2000);
    r.host.send(&f).unwrap();
    post(&r, 0, 1024);
    // Device-readable, outside guest RAM, shorter than the header,
    // readable after writable.
    add_chain(&r.m, RXQ, 1, &[(addr(1), 1024, R)]);
    add_chain(&r.m, RXQ, 2, &[(0x3F_FF00, 0x1000, W)]);
    post(&r, 3, 8);
    add_chain(&r.m, RXQ, 4, &[(addr(4), 512, W), (addr(4) + 512, 512, R)]);
    // (Descriptors 4 and 5 are chain 4's.)
    post(&r, 6, 1024);
    r.server.process_rx(&r.epoll);
    assert_eq!(used_idx(&r.m, RXQ), 6);
    for (i, id) in [1, 2, 3, 4].into_iter().enumerate() {
        assert_eq!(used_entry(&r.m, RXQ, i as u64), (id, 0), "bad chain {id}");
    }
    // The frame's buffers follow, consecutive.
    assert_eq!(used_entry(&r.m, RXQ, 4), (0, 1024));
    assert_eq!(used_entry(&r.m, RXQ, 5), (6, 976));
    assert_eq!(num_buffers(&r, 0), 2);
    assert_eq!(&gather(&r, 4, 2)[12..], &f[12..]);
    assert_eq!(r.server.metrics.bad_descriptors.load(Ordering::Relaxed), 4);
    assert_eq!(r.server.metrics.rx_frames.load(Ordering::Relaxed), 1);
}

#[test]
fn a_frame_larger_than_the_whole_ring_is_dropped_and_the_buffers_kept() {
    let mut r = mrg_rig();
    // 16 buffers of 100 bytes: 1600 bytes can never hold 3000.
    r.host.send(&frame(1, 3000)).unwrap();
    r.host.send(&frame(2, 60)).unwrap();
    r.host.send(&frame(3, 250)).unwrap();
    for i in 0..16 {
        post(&r, i, 100);
    }
    r.server.process_rx(&r.epoll);
    assert_eq!(r.server.metrics.rx_dropped.load(Ordering::Relaxed), 1);
    assert_eq!(used_idx(&r.m, RXQ), 4, "1 + 3 buffers");
    assert_eq!(used_entry(&r.m, RXQ, 0), (0, 60));
    assert_eq!(r.m.read_obj::<u8>(GuestAddress(addr(0) + 12)).unwrap(), 2);
    assert_eq!(num_buffers(&r, 0), 1);
    assert_eq!(used_entry(&r.m, RXQ, 1), (1, 100));
    assert_eq!(used_entry(&r.m, RXQ, 3), (3, 50));
    assert_eq!(num_buffers(&r, 1), 3);
    assert!(r.server.tap_armed, "TAP drained: polled again");
    assert_eq!(r.server.metrics.rx_frames.load(Ordering::Relaxed), 2);
}

#[test]
fn mergeable_buffers_are_offered_and_used_only_when_negotiated() {
    for acked in [0, MRG] {
        let m = mem();
        let (dev, host) = UnixDatagram::pair().unwrap();
        dev.set_nonblocking(true).unwrap();
        let mut n = Net::new(File::from(OwnedFd::from(dev)), options());
        assert_ne!(n.features() & MRG, 0, "MRG_RXBUF not offered");
        n.ack_features((1 << VIRTIO_F_VERSION_1) | acked);
        let mut paths = activate_rx_tx(&mut n, &m);
        host.send(&frame(9, 3000)).unwrap();
        for i in 0..3u16 {
            add_chain(&m, RXQ, i, &[(addr(i), 1024, W)]);
        }
        let epoll = Epoll::new().unwrap();
        paths[0].event(
            TAP_TOKEN,
            &mut crate::event_loop::LoopContext::detached(&epoll, &mut None),
        );
        let idx = used(&m, RXQ, 0).0;
        if acked == MRG {
            assert_eq!(idx, 3, "frame not spread over the buffers");
            assert_eq!(m.read_obj::<u16>(GuestAddress(BUF + 10)).unwrap(), 3);
            assert_eq!(n.metrics().rx_frames.load(Ordering::Relaxed), 1);
        } else {
            // One chain per frame: too small, dropped, the buffers kept.
            assert_eq!(idx, 0);
            assert_eq!(n.metrics().rx_dropped.load(Ordering::Relaxed), 1);
        }
    }
}
