//! Notification suppression both ways (section 2.7.10): with
//! `VIRTIO_RING_F_EVENT_IDX` the device publishes `avail_event` when it
//! wants a kick and interrupts only past the driver's `used_event`;
//! without it, the used ring's NO_NOTIFY flag while TX drains.

use virtio_bindings::virtio_ring::VRING_USED_F_NO_NOTIFY;

use super::*;

/// A server over the rig's rings raising interrupts into a recorder,
/// its queues with EVENT_IDX as asked.
fn server(event_idx: bool) -> (Rig, Arc<Recorder>) {
    let mut r = rig();
    let irq = Arc::new(Recorder::default());
    r.server.interrupt = irq.clone();
    r.server.rx.set_event_idx(event_idx);
    r.server.tx.set_event_idx(event_idx);
    (r, irq)
}

/// The driver's `used_event` of the size-16 queue at `base`.
fn set_used_event(m: &Gm, base: u64, v: u16) {
    let (avail, _) = rings(base);
    m.write_obj(v, avail.unchecked_add(4 + 2 * 16)).unwrap();
}

/// The device's `avail_event` of the size-16 queue at `base`.
fn avail_event(m: &Gm, base: u64) -> u16 {
    let (_, used) = rings(base);
    m.read_obj(used.unchecked_add(4 + 8 * 16)).unwrap()
}

fn used_flags(m: &Gm, base: u64) -> u16 {
    let (_, used) = rings(base);
    m.read_obj(used).unwrap()
}

fn tx_frame(r: &Rig, i: u16) {
    let at = BUF + 0x1000 * u64::from(i);
    r.m.write_slice(&frame(i as u8, 80), GuestAddress(at))
        .unwrap();
    add_chain(&r.m, TXQ, i, &[(at, 80, R)]);
}

#[test]
fn event_idx_is_offered_and_set_on_every_queue() {
    let (dev, _host) = UnixDatagram::pair().unwrap();
    let mut n = Net::new(File::from(OwnedFd::from(dev)), options());
    let ei = 1u64 << VIRTIO_RING_F_EVENT_IDX;
    assert_ne!(n.features() & ei, 0, "EVENT_IDX not offered");
    // Negotiated: the TX path publishes avail_event after draining.
    for acked in [0, ei] {
        let m = mem();
        n.ack_features((1 << VIRTIO_F_VERSION_1) | acked);
        let mut paths = activate_rx_tx(&mut n, &m);
        for i in 0..3u16 {
            let at = BUF + 0x1000 * u64::from(i);
            m.write_slice(&frame(1, 80), GuestAddress(at)).unwrap();
            add_chain(&m, TXQ, i, &[(at, 80, R)]);
        }
        let epoll = Epoll::new().unwrap();
        paths[0].event(
            TX_TOKEN,
            &mut crate::event_loop::LoopContext::detached(&epoll, &mut None),
        );
        assert_eq!(used(&m, TXQ, 0).0, 3);
        let want = if acked == ei { 3 } else { 0 };
        assert_eq!(avail_event(&m, TXQ), want, "acked {acked:#x}");
    }
}

#[test]
fn tx_asks_for_the_next_kick_and_interrupts_only_past_used_event() {
    let (mut r, irq) = server(true);
    // The driver wants an interrupt once entry 3 (the fourth) is used.
    set_used_event(&r.m, TXQ, 3);
    tx_frame(&r, 0);
    tx_frame(&r, 1);
    r.server.process_tx();
    assert_eq!(used(&r.m, TXQ, 0).0, 2);
    assert_eq!(avail_event(&r.m, TXQ), 2, "next kick not asked for");
    assert_eq!(irq.count(), 0, "interrupt before used_event");
    tx_frame(&r, 2);
    tx_frame(&r, 3);
    r.server.process_tx();
    assert_eq!(avail_event(&r.m, TXQ), 4);
    assert_eq!(irq.count(), 1, "no interrupt past used_event");
    assert_eq!(r.server.metrics.tx_frames.load(Ordering::Relaxed), 4);
}

#[test]
fn without_event_idx_tx_reenables_kicks_and_always_interrupts() {
    let (mut r, irq) = server(false);
    tx_frame(&r, 0);
    r.server.process_tx();
    assert_eq!(
        used_flags(&r.m, TXQ) & VRING_USED_F_NO_NOTIFY as u16,
        0,
        "kicks left suppressed after draining"
    );
    assert_eq!(irq.count(), 1);
}

#[test]
fn rx_out_of_buffers_asks_for_a_kick() {
    let (mut r, irq) = server(true);
    set_used_event(&r.m, RXQ, 0);
    r.host.send(&frame(1, 60)).unwrap();
    r.host.send(&frame(2, 60)).unwrap();
    add_chain(&r.m, RXQ, 0, &[(BUF, 1526, W)]);
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 0), (1, 60));
    assert_eq!(irq.count(), 1);
    // Frame 2 waits: the device asks to be told of buffer 1.
    assert!(!r.server.tap_armed);
    assert_eq!(avail_event(&r.m, RXQ), 1);
    add_chain(&r.m, RXQ, 1, &[(BUF + 0x1000, 1526, W)]);
    r.server.process_rx(&r.epoll);
    assert_eq!(used(&r.m, RXQ, 1), (2, 60));
    // used_event still 0: the driver has not asked for another interrupt.
    assert_eq!(irq.count(), 1);
}

#[test]
fn an_avail_index_beyond_the_ring_neither_hangs_nor_panics() {
    for event_idx in [false, true] {
        let (mut r, _irq) = server(event_idx);
        r.host.send(&frame(1, 60)).unwrap();
        for base in [RXQ, TXQ] {
            let (avail, _) = rings(base);
            r.m.write_obj(100u16, avail.unchecked_add(2)).unwrap();
        }
        r.server.process_tx();
        r.server.process_rx(&r.epoll);
        assert_eq!(used(&r.m, TXQ, 0).0, 0);
        assert_eq!(used(&r.m, RXQ, 0).0, 0);
        assert!(!r.server.tap_armed, "RX must wait for a kick");
    }
}
