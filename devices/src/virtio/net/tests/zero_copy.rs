//! Frames read from the TAP straight into the guest's receive buffers
//! (one `readv`: the header into the VMM's copy, the rest in place), and
//! what is still copied: a frame larger than the buffers posted, buffers
//! across memory regions, frames above the limit.

use super::*;

/// (id, len) of used entry `i` of the queue at `base`.
fn used_entry(m: &Gm, base: u64, i: u64) -> (u32, u32) {
    let (_, u) = rings(base);
    let id = m.read_obj::<u32>(u.unchecked_add(4 + 8 * i)).unwrap();
    let len = m.read_obj::<u32>(u.unchecked_add(4 + 8 * i + 4)).unwrap();
    (id, len)
}

/// A frame whose payload bytes all differ from their neighbours, so a
/// piece at the wrong offset shows.
fn patterned(len: usize) -> Vec<u8> {
    let mut f = frame(0, len);
    for (i, b) in f.iter_mut().enumerate().skip(VNET_HDR_LEN) {
        *b = (i * 7 + i / 251) as u8;
    }
    f
}

fn copied(r: &Rig) -> u64 {
    r.server.metrics.rx_copied.load(Ordering::Relaxed)
}

fn mrg_rig() -> Rig {
    let mut r = rig();
    r.server.mrg_rxbuf = true;
    r
}

/// Chain `i`: one device-writable buffer of `len` bytes at `BUF + i x step`.
fn post(r: &Rig, i: u16, step: u64, len: u32) {
    add_chain(&r.m, RXQ, i, &[(BUF + step * u64::from(i), len, W)]);
}

/// The bytes of used entries `first..first + n`, each chain being one
/// buffer at `BUF + id x step`, concatenated.
fn gather(r: &Rig, step: u64, first: u64, n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for i in first..first + n {
        let (id, len) = used_entry(&r.m, RXQ, i);
        let mut b = vec![0u8; len as usize];
        r.m.read_slice(&mut b, GuestAddress(BUF + step * u64::from(id)))
            .unwrap();
        out.extend_from_slice(&b);
    }
    out
}

fn num_buffers(r: &Rig, step: u64, chain: u16) -> u16 {
    r.m.read_obj::<u16>(GuestAddress(BUF + step * u64::from(chain) + 10))
        .unwrap()
}

#[test]
fn a_frame_is_read_into_its_chain_with_the_header_split_over_two_buffers() {
    let mut r = rig();
    // The buffers start dirty: nothing of it may show in the header.
    r.m.write_slice(&[0xee; 0x3000], GuestAddress(BUF)).unwrap();
    let f = patterned(1500);
    r.host.send(&f).unwrap();
    add_chain(
        &r.m,
        RXQ,
        0,
        &[(BUF, 5, W), (BUF + 0x1000, 7, W), (BUF + 0x2000, 2000, W)],
    );
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0), (1, 1500));
    let mut hdr = [0u8; 12];
    r.m.read_slice(&mut hdr[..5], GuestAddress(BUF)).unwrap();
    r.m.read_slice(&mut hdr[5..], GuestAddress(BUF + 0x1000))
        .unwrap();
    // No offload negotiated: the TAP's flags cleared, num_buffers 1.
    assert_eq!(hdr, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    let mut payload = vec![0u8; 1489];
    r.m.read_slice(&mut payload, GuestAddress(BUF + 0x2000))
        .unwrap();
    assert_eq!(&payload[..1488], &f[12..]);
    assert_eq!(payload[1488], 0xee, "written past the frame");
    assert_eq!(copied(&r), 0, "the frame went through the bounce buffer");
    assert_eq!(r.server.metrics.rx_frames.load(Ordering::Relaxed), 1);
}

#[test]
fn a_frame_is_read_straight_into_several_mergeable_chains() {
    let mut r = mrg_rig();
    r.server.offloads = Offloads::from_features(offload::OFFERED);
    let f = patterned(3000);
    r.host.send(&f).unwrap();
    for i in 0..4 {
        post(&r, i, 0x1000, 1024);
    }
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0).0, 3);
    assert_eq!(used_entry(&r.m, RXQ, 0), (0, 1024));
    assert_eq!(used_entry(&r.m, RXQ, 2), (2, 952));
    let got = gather(&r, 0x1000, 0, 3);
    // Offloads negotiated: the TAP's header passes, with num_buffers.
    assert_eq!(&got[..12], &[1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0]);
    assert_eq!(&got[12..], &f[12..]);
    assert_eq!(copied(&r), 0);
    // The fourth chain, held, takes the next frame in place.
    let g = patterned(700);
    r.host.send(&g).unwrap();
    r.server.process_rx(&r.epoll);
    assert_eq!(used_entry(&r.m, RXQ, 3), (3, 700));
    assert_eq!(num_buffers(&r, 0x1000, 3), 1);
    assert_eq!(&gather(&r, 0x1000, 3, 1)[12..], &g[12..]);
    assert_eq!(copied(&r), 0);
    assert!(r.server.rx_held.is_empty());
}

#[test]
fn chains_taken_ahead_serve_the_next_frames_in_ring_order() {
    let mut r = mrg_rig();
    for i in 0..8 {
        post(&r, i, 0x1000, 1024);
    }
    // No frame yet: the chains are taken, none used.
    r.server.process_rx(&r.epoll);
    assert_eq!(r.server.rx_held.len(), 8);
    assert_eq!(used(&r.m, RXQ, 0).0, 0);
    assert!(r.server.tap_armed);
    let frames = [patterned(1500), patterned(60), patterned(2500)];
    for f in &frames {
        r.host.send(f).unwrap();
    }
    r.server.process_rx(&r.epoll);
    let want = [(0, 1024), (1, 476), (2, 60), (3, 1024), (4, 1024), (5, 452)];
    assert_eq!(used(&r.m, RXQ, 0).0, 6);
    for (i, &e) in want.iter().enumerate() {
        assert_eq!(used_entry(&r.m, RXQ, i as u64), e, "used entry {i}");
    }
    assert_eq!(num_buffers(&r, 0x1000, 0), 2);
    assert_eq!(num_buffers(&r, 0x1000, 2), 1);
    assert_eq!(num_buffers(&r, 0x1000, 3), 3);
    assert_eq!(&gather(&r, 0x1000, 0, 2)[12..], &frames[0][12..]);
    assert_eq!(&gather(&r, 0x1000, 2, 1)[12..], &frames[1][12..]);
    assert_eq!(&gather(&r, 0x1000, 3, 3)[12..], &frames[2][12..]);
    assert_eq!(r.server.rx_held.len(), 2, "chains 6 and 7 stay held");
    assert_eq!(copied(&r), 0);
    assert_eq!(r.server.metrics.rx_frames.load(Ordering::Relaxed), 3);
}

#[test]
fn a_frame_larger_than_the_posted_buffers_waits_and_is_completed_by_copy() {
    let mut r = mrg_rig();
    let f = patterned(3000);
    r.host.send(&f).unwrap();
    post(&r, 0, 0x1000, 1024);
    post(&r, 1, 0x1000, 1024);
    r.server.process_rx(&r.epoll);
    // Read into the two chains and the bounce buffer; nothing given yet.
    assert_eq!(used(&r.m, RXQ, 0).0, 0, "part of a frame was delivered");
    assert_eq!(r.server.rx_pending, Some(3000));
    assert!(!r.server.tap_armed, "TAP still polled without buffers");
    assert_eq!(r.server.metrics.rx_no_buffers.load(Ordering::Relaxed), 1);
    post(&r, 2, 0x1000, 1024);
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0).0, 3);
    assert_eq!(used_entry(&r.m, RXQ, 2), (2, 952));
    assert_eq!(num_buffers(&r, 0x1000, 0), 3);
    assert_eq!(&gather(&r, 0x1000, 0, 3)[12..], &f[12..]);
    assert_eq!(copied(&r), 1);
    assert_eq!(r.server.metrics.rx_dropped.load(Ordering::Relaxed), 0);
    assert!(r.server.tap_armed);
}

#[test]
fn small_frames_narrow_the_read_and_a_larger_one_widens_it_again() {
    let mut r = mrg_rig();
    for i in 0..16 {
        post(&r, i, 0x2000, 0x2000);
    }
    // (A datagram socket queues at most 10 frames by default.)
    for _ in 0..2 {
        for _ in 0..6 {
            r.host.send(&patterned(60)).unwrap();
        }
        r.server.process_rx(&r.epoll);
    }
    assert_eq!(used(&r.m, RXQ, 0).0, 12);
    assert_eq!(copied(&r), 0);
    // 64 KiB x (7/8)^12 is two chains of 8 KiB.
    assert!(r.server.rx_expect <= 0x4000, "{}", r.server.rx_expect);
    // 20000 bytes: two chains read in place, the third filled by copy.
    let big = patterned(20_000);
    r.host.send(&big).unwrap();
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0).0, 15);
    assert_eq!(used_entry(&r.m, RXQ, 14), (14, 20_000 - 0x4000));
    assert_eq!(&gather(&r, 0x2000, 12, 3)[12..], &big[12..]);
    assert_eq!(copied(&r), 1);
    assert_eq!(r.server.rx_expect, MAX_PACKET);
    // The next one is read in place whatever its size.
    let next = patterned(5000);
    r.host.send(&next).unwrap();
    r.server.process_rx(&r.epoll);
    assert_eq!(used_entry(&r.m, RXQ, 15), (15, 5000));
    assert_eq!(&gather(&r, 0x2000, 15, 1)[12..], &next[12..]);
    assert_eq!(copied(&r), 1);
}

#[test]
fn a_chain_across_two_memory_regions_is_filled_by_copy() {
    // One chain per frame: the whole frame copied.
    let (m, mut server, host, epoll) = two_region_rig(false);
    let at = 0x20_0000 - 500;
    let f = patterned(1000);
    host.send(&f).unwrap();
    add_chain(&m, RXQ, 0, &[(at, 1526, W)]);
    server.process_rx(&epoll);
    assert_eq!(used(&m, RXQ, 0), (1, 1000));
    let mut got = vec![0u8; 1000];
    m.read_slice(&mut got, GuestAddress(at)).unwrap();
    assert_eq!(&got[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    assert_eq!(&got[12..], &f[12..]);
    assert_eq!(server.metrics.rx_copied.load(Ordering::Relaxed), 1);
    assert_eq!(server.metrics.bad_descriptors.load(Ordering::Relaxed), 0);

    // Mergeable: the chains before it are read in place, it and the
    // ones after by copy.
    let (m, mut server, host, epoll) = two_region_rig(true);
    let bufs = [0x1F_0000, at, 0x1F_1000];
    for (i, &a) in bufs.iter().enumerate() {
        add_chain(&m, RXQ, i as u16, &[(a, 1024, W)]);
    }
    let f = patterned(2500);
    host.send(&f).unwrap();
    server.process_rx(&epoll);
    assert_eq!(used(&m, RXQ, 0).0, 3);
    let mut got = Vec::new();
    for (i, &a) in bufs.iter().enumerate() {
        let (id, len) = used_entry(&m, RXQ, i as u64);
        assert_eq!(id, i as u32);
        let mut b = vec![0u8; len as usize];
        m.read_slice(&mut b, GuestAddress(a)).unwrap();
        got.extend_from_slice(&b);
    }
    assert_eq!(got.len(), 2500);
    assert_eq!(&got[10..12], &[3, 0], "num_buffers");
    assert_eq!(&got[12..], &f[12..]);
    assert_eq!(server.metrics.rx_copied.load(Ordering::Relaxed), 1);
}

#[test]
fn a_frame_above_the_limit_is_dropped_and_counted_and_the_buffers_kept() {
    // Mergeable: 16 chains of 8 KiB hold more than MAX_PACKET.
    let mut r = mrg_rig();
    for i in 0..16 {
        post(&r, i, 0x2000, 0x2000);
    }
    r.host.send(&patterned(MAX_PACKET + 1)).unwrap();
    let f = patterned(100);
    r.host.send(&f).unwrap();
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0).0, 1);
    assert_eq!(used_entry(&r.m, RXQ, 0), (0, 100));
    assert_eq!(num_buffers(&r, 0x2000, 0), 1);
    assert_eq!(&gather(&r, 0x2000, 0, 1)[12..], &f[12..]);
    let m = &r.server.metrics;
    assert_eq!(m.rx_dropped.load(Ordering::Relaxed), 1);
    assert_eq!(m.rx_frames.load(Ordering::Relaxed), 1);

    // One chain per frame: a buffer larger than the limit does not let a
    // longer frame through cut.
    let mut r = rig();
    add_chain(&r.m, RXQ, 0, &[(BUF, 70_000, W)]);
    r.host.send(&patterned(MAX_PACKET + 1)).unwrap();
    r.host.send(&f).unwrap();
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0), (1, 100));
    assert_eq!(r.server.metrics.rx_dropped.load(Ordering::Relaxed), 1);
    // The largest frame still passes.
    let big = patterned(MAX_PACKET);
    r.host.send(&big).unwrap();
    add_chain(&r.m, RXQ, 1, &[(BUF + 0x2_0000, 70_000, W)]);
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 1), (2, MAX_PACKET as u32));
    let mut got = vec![0u8; MAX_PACKET];
    r.m.read_slice(&mut got, GuestAddress(BUF + 0x2_0000))
        .unwrap();
    assert_eq!(&got[12..], &big[12..]);
    assert_eq!(copied(&r), 0);
}

#[test]
fn with_event_idx_a_frame_short_of_buffers_asks_past_the_held_ones() {
    let mut r = mrg_rig();
    r.server.rx.set_event_idx(true);
    let (_, u) = rings(RXQ);
    let avail_event = |m: &Gm| m.read_obj::<u16>(u.unchecked_add(4 + 8 * 16)).unwrap();
    post(&r, 0, 0x1000, 1024);
    post(&r, 1, 0x1000, 1024);
    r.host.send(&patterned(3000)).unwrap();
    r.server.process_rx(&r.epoll);
    assert!(!r.server.tap_armed);
    // Both chains are held: the next kick is for the third.
    assert_eq!(avail_event(&r.m), 2);
    post(&r, 2, 0x1000, 1024);
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0).0, 3);
    assert_eq!(r.server.metrics.rx_frames.load(Ordering::Relaxed), 1);
}

#[test]
fn a_chain_changed_after_it_was_made_available_is_used_as_first_read() {
    // A driver must not touch a buffer it made available (virtio 1.2
    // section 2.7.13); if it does, the device keeps what it parsed:
    // buffers checked against guest RAM when taken.
    let mut r = mrg_rig();
    post(&r, 0, 0x1000, 2048);
    post(&r, 1, 0x1000, 2048);
    r.server.process_rx(&r.epoll);
    assert_eq!(r.server.rx_held.len(), 2);
    // Chain 1 now says "outside guest RAM".
    let d = RawDescriptor::from(SplitDescriptor::new(0x3F_FF00, 2048, W, 0));
    r.m.write_obj(d, GuestAddress(RXQ + 16)).unwrap();
    let f = patterned(3000);
    r.host.send(&f).unwrap();
    r.server.process_rx(&r.epoll);
    assert_eq!(used_entry(&r.m, RXQ, 1), (1, 952));
    assert_eq!(&gather(&r, 0x1000, 0, 2)[12..], &f[12..]);
    assert_eq!(r.server.metrics.bad_descriptors.load(Ordering::Relaxed), 0);
}
