//! Multiqueue: feature negotiation and queue layout, the control queue
//! (including garbage), and each pair served with its own queues, TAP
//! descriptor and interrupt.

use virtio_bindings::virtio_net::{
    VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, VIRTIO_NET_ERR, VIRTIO_NET_OK,
};

use super::*;
use crate::virtio::net::ctrl::{decode, Command, CtrlQueue};

const MQ: u64 = 1 << VIRTIO_NET_F_MQ;
const CTRL: u64 = 1 << VIRTIO_NET_F_CTRL_VQ;
const V1: u64 = 1 << VIRTIO_F_VERSION_1;
const CTRLQ: u64 = 0x2_0000;
const CMD: u64 = 0x20_0000;
const ACK: u64 = 0x21_0000;

/// A NIC with `pairs` fake TAP descriptors and the host ends of them.
fn nic(pairs: usize) -> (Net, Vec<UnixDatagram>) {
    let (files, hosts): (Vec<File>, Vec<UnixDatagram>) = (0..pairs)
        .map(|_| {
            let (dev, host) = UnixDatagram::pair().unwrap();
            dev.set_nonblocking(true).unwrap();
            (File::from(OwnedFd::from(dev)), host)
        })
        .unzip();
    (
        Net::with_queues(TapQueues::new(files, false), options()),
        hosts,
    )
}

fn active(m: &Gm, index: usize, base: u64) -> ActiveQueue {
    ActiveQueue {
        index,
        queue: make_queue(m, base),
        event: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
    }
}

#[test]
fn mq_is_offered_only_with_several_pairs_and_sets_the_layout() {
    let (one, _h) = nic(1);
    assert_eq!(one.features() & (MQ | CTRL), 0);
    assert_eq!(one.queue_max_sizes().len(), 2);
    assert_eq!(one.worker_count(), 1);

    let (mut n, _h) = nic(4);
    assert_eq!(n.features() & (MQ | CTRL), MQ | CTRL);
    assert_eq!(n.worker_count(), 4);
    let mut pairs = [0u8; 2];
    n.read_config(8, &mut pairs);
    assert_eq!(u16::from_le_bytes(pairs), 4, "max_virtqueue_pairs");
    // Before negotiation: the largest layout (4 pairs and the control queue).
    assert_eq!(n.queue_max_sizes().len(), 9);
    n.ack_features(V1 | MQ | CTRL);
    assert_eq!(n.queue_max_sizes().len(), 9);
    // A driver without MQ: one pair, the control queue at index 2.
    n.ack_features(V1 | CTRL);
    assert_eq!(n.queue_max_sizes().len(), 3);
    // MQ without the control queue it depends on is not multiqueue.
    n.ack_features(V1 | MQ);
    assert_eq!(n.queue_max_sizes().len(), 2);
    n.reset();
    assert_eq!(n.queue_max_sizes().len(), 9);
}

#[test]
fn each_pair_gets_its_own_data_path_and_pair_zero_the_control_queue() {
    let m = mem();
    let (mut n, _h) = nic(2);
    n.ack_features(V1 | MQ | CTRL);
    let queues = (0..5).map(|i| active(&m, i, 0x1000 * i as u64)).collect();
    let paths = n
        .activate_workers(m.clone(), Arc::new(NoopInterrupt), queues)
        .unwrap();
    assert_eq!(paths.len(), 2);
    // RX, TX, TAP, and the control queue on pair 0 only.
    assert_eq!(paths[0].watch().len(), 4);
    assert_eq!(paths[1].watch().len(), 3);
    assert_eq!(paths[0].watch()[3].1, CTRL_TOKEN);
    // The single-thread entry point refuses a multiqueue layout.
    let queues = (0..5).map(|i| active(&m, i, 0x1000 * i as u64)).collect();
    assert!(n
        .activate(m.clone(), Arc::new(NoopInterrupt), queues)
        .is_err());
}

#[test]
fn activation_checks_the_queues_against_the_negotiated_layout() {
    let m = mem();
    let (mut n, _h) = nic(2);
    n.ack_features(V1 | MQ | CTRL);
    // Pair 1 with its RX queue but not its TX queue.
    let queues = [0, 1, 2, 4].map(|i| active(&m, i, 0x1000 * i as u64));
    let e = n
        .activate_workers(m.clone(), Arc::new(NoopInterrupt), queues.into())
        .err()
        .expect("half a pair activated");
    assert!(matches!(e, ActivateError::MissingQueue(3)), "{e}");
    // Pair 1 left out entirely: one data path.
    let queues = [0, 1, 4].map(|i| active(&m, i, 0x1000 * i as u64));
    let paths = n
        .activate_workers(m.clone(), Arc::new(NoopInterrupt), queues.into())
        .unwrap();
    assert_eq!(paths.len(), 1);
    // Without MQ only queues 0 and 1 exist.
    n.ack_features(V1);
    let queues = [0, 1, 2].map(|i| active(&m, i, 0x1000 * i as u64));
    assert!(n
        .activate_workers(m.clone(), Arc::new(NoopInterrupt), queues.into())
        .is_err());
    let queues = [0, 1].map(|i| active(&m, i, 0x1000 * i as u64));
    let paths = n
        .activate_workers(m, Arc::new(NoopInterrupt), queues.into())
        .unwrap();
    assert_eq!(paths.len(), 1);
}

#[test]
fn a_pair_moves_frames_of_its_own_tap_queue_and_raises_its_own_vectors() {
    let m = mem();
    let (dev, host) = UnixDatagram::pair().unwrap();
    dev.set_nonblocking(true).unwrap();
    let (_, epoll) = {
        let (t, _h, e) = fake_tap();
        (t, e)
    };
    let irq = Arc::new(Recorder::default());
    let mut s = Server::new(
        m.clone(),
        irq.clone(),
        active(&m, 2, RXQ),
        active(&m, 3, TXQ),
        Arc::new(File::from(OwnedFd::from(dev))),
        Arc::new(NetMetrics::default()),
    );
    s.pair = 1;
    host.send(&frame(5, 80)).unwrap();
    add_chain(&m, RXQ, 0, &[(BUF, 1526, W)]);
    s.process_rx(&epoll);
    assert_eq!(used(&m, RXQ, 0), (1, 80));
    add_chain(&m, TXQ, 0, &[(BUF + 0x1000, 80, R)]);
    m.write_slice(&frame(6, 80), GuestAddress(BUF + 0x1000))
        .unwrap();
    s.process_tx();
    assert_eq!(host.recv(&mut [0u8; 128]).unwrap(), 80);
    assert_eq!(
        *irq.0.lock().unwrap(),
        vec![VirtioInterruptType::Queue(2), VirtioInterruptType::Queue(3)]
    );
}

struct CtrlRig {
    m: Gm,
    ctrl: CtrlQueue,
    taps: Arc<TapQueues>,
    irq: Arc<Recorder>,
}

fn ctrl_rig(pairs: usize) -> CtrlRig {
    let m = mem();
    let (n, _h) = nic(pairs);
    let q = active(&m, 2 * pairs, CTRLQ);
    CtrlRig {
        ctrl: CtrlQueue {
            index: q.index as u16,
            queue: q.queue,
            evt: q.event,
            taps: n.taps.clone(),
            mq: true,
            metrics: n.metrics.clone(),
        },
        taps: n.taps.clone(),
        m,
        irq: Arc::new(Recorder::default()),
    }
}

impl CtrlRig {
    /// Sends `cmd` (header and data in one readable buffer) with a
    /// one-byte ack buffer; returns (ack, used length).
    fn send(&mut self, cmd: &[u8]) -> (u8, u32) {
        self.m.write_slice(cmd, GuestAddress(CMD)).unwrap();
        self.m.write_obj(0xaau8, GuestAddress(ACK)).unwrap();
        let descs = [(CMD, cmd.len() as u32, R), (ACK, 1, W)];
        self.chain(&descs)
    }

    fn chain(&mut self, descs: &[(u64, u32, u16)]) -> (u8, u32) {
        // The previous chain was answered: its descriptors are free again.
        add_chain(&self.m, CTRLQ, 0, descs);
        self.ctrl.process(&self.m, &*self.irq);
        let n = self.irq.0.lock().unwrap().len() as u64;
        let (_, len) = used(&self.m, CTRLQ, (n - 1) % 16);
        (self.m.read_obj(GuestAddress(ACK)).unwrap(), len)
    }
}

fn set_pairs(n: u16) -> Vec<u8> {
    let mut c = vec![
        VIRTIO_NET_CTRL_MQ as u8,
        VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET as u8,
    ];
    c.extend_from_slice(&n.to_le_bytes());
    c
}

#[test]
fn vq_pairs_set_attaches_that_many_tap_queues() {
    let mut r = ctrl_rig(4);
    r.taps.enable(1).unwrap();
    assert_eq!(r.send(&set_pairs(3)), (VIRTIO_NET_OK as u8, 1));
    assert_eq!(r.taps.attached(), 3);
    assert_eq!(r.send(&set_pairs(4)), (VIRTIO_NET_OK as u8, 1));
    assert_eq!(r.taps.attached(), 4);
    assert_eq!(r.send(&set_pairs(1)), (VIRTIO_NET_OK as u8, 1));
    assert_eq!(r.taps.attached(), 1);
    // The control queue's own vector (index 8).
    assert!(r
        .irq
        .0
        .lock()
        .unwrap()
        .iter()
        .all(|t| *t == VirtioInterruptType::Queue(8)));
    assert_eq!(r.ctrl.metrics.ctrl_commands.load(Ordering::Relaxed), 3);
}

#[test]
fn bad_pair_counts_and_unknown_commands_get_err_and_change_nothing() {
    let mut r = ctrl_rig(2);
    let err = (VIRTIO_NET_ERR as u8, 1);
    assert_eq!(r.send(&set_pairs(0)), err);
    assert_eq!(r.send(&set_pairs(3)), err);
    assert_eq!(r.send(&set_pairs(0xffff)), err);
    // RX mode (class 0): not offered.
    assert_eq!(r.send(&[0, 0, 1]), err);
    // VQ_PAIRS_SET with one byte of data.
    assert_eq!(r.send(&[VIRTIO_NET_CTRL_MQ as u8, 0, 2]), err);
    // A header cut short.
    assert_eq!(r.send(&[VIRTIO_NET_CTRL_MQ as u8]), err);
    assert_eq!(r.taps.attached(), 2);
    assert_eq!(r.ctrl.metrics.ctrl_refused.load(Ordering::Relaxed), 4);
    assert_eq!(r.ctrl.metrics.bad_descriptors.load(Ordering::Relaxed), 2);
}

#[test]
fn vq_pairs_set_needs_mq_negotiated() {
    let mut r = ctrl_rig(2);
    r.ctrl.mq = false;
    r.taps.enable(1).unwrap();
    assert_eq!(r.send(&set_pairs(2)), (VIRTIO_NET_ERR as u8, 1));
    assert_eq!(r.taps.attached(), 1, "pair 1 is not served");
    assert_eq!(r.ctrl.metrics.ctrl_refused.load(Ordering::Relaxed), 1);
}

#[test]
fn control_chains_without_an_ack_byte_or_outside_ram_are_returned_unused() {
    let mut r = ctrl_rig(2);
    r.m.write_slice(&set_pairs(1), GuestAddress(CMD)).unwrap();
    // No writable byte.
    let (_, len) = r.chain(&[(CMD, 4, R)]);
    assert_eq!(len, 0);
    // Command outside guest memory.
    let (_, len) = r.chain(&[(0x3F_FFFF, 0x100, R), (ACK, 1, W)]);
    assert_eq!(len, 0);
    // Ack outside guest memory.
    let (_, len) = r.chain(&[(CMD, 4, R), (0x3F_FFFF, 0x10, W)]);
    assert_eq!(len, 0);
    assert_eq!(r.taps.attached(), 2, "nothing was executed");
    assert_eq!(r.ctrl.metrics.bad_descriptors.load(Ordering::Relaxed), 3);
}

#[test]
fn decode_reads_header_and_pair_count() {
    let mut r = ctrl_rig(2);
    r.m.write_slice(&set_pairs(2), GuestAddress(CMD)).unwrap();
    add_chain(&r.m, CTRLQ, 0, &[(CMD, 4, R), (ACK, 1, W)]);
    let (_, b) = ChainBuffers::pop(&mut r.ctrl.queue, &r.m).unwrap();
    assert_eq!(decode(&b.unwrap(), &r.m), Ok(Command::SetPairs(2)));
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::virtio::fuzz_support::cases()))]
        /// Any bytes, any buffer shapes: an answer or an unused return,
        /// never a panic, and the pair count stays within 1..=pairs.
        #[test]
        fn fuzz_control_queue(cmds in prop::collection::vec(
            (prop::collection::vec(any::<u8>(), 0..8), 0u32..3, any::<bool>()), 1..24)) {
            let mut r = ctrl_rig(3);
            for (bytes, ack_len, outside) in cmds {
                r.m.write_slice(&bytes, GuestAddress(CMD)).unwrap();
                let cmd_addr = if outside { 0x3F_FFF0 } else { CMD };
                let mut descs = vec![(cmd_addr, bytes.len() as u32, R)];
                if ack_len > 0 {
                    descs.push((ACK, ack_len, W));
                }
                r.chain(&descs);
                let a = r.taps.attached();
                prop_assert!((1..=3).contains(&a), "{a} pairs attached");
            }
        }
    }
}
