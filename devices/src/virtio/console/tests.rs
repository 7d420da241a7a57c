//! virtio-console queues, with chains built by virtio-queue's mock queue.

use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Address, Bytes, GuestAddress};

use super::*;
use crate::virtio::NoopInterrupt;

const W: u16 = VRING_DESC_F_WRITE as u16;
const R: u16 = 0;

type Gm = GuestMemoryMmap;

fn mem() -> Gm {
    Gm::from_ranges(&[(GuestAddress(0), 0x20_0000)]).expect("guest memory")
}

/// A writer the test can read back.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn desc(addr: u64, len: u32, flags: u16, next: u16) -> RawDescriptor {
    RawDescriptor::from(SplitDescriptor::new(addr, len, flags, next))
}

fn port(m: &Gm, rx: &MockSplitQueue<Gm>, tx: &MockSplitQueue<Gm>, sink: &Sink) -> Port {
    Port {
        mem: m.clone(),
        interrupt: Arc::new(NoopInterrupt),
        rx: rx.create_queue().expect("rx"),
        rx_evt: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
        tx: tx.create_queue().expect("tx"),
        tx_evt: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
        output: Arc::new(Mutex::new(Box::new(sink.clone()))),
        input: Some(Arc::new(ConsoleInput::new().unwrap())),
        metrics: Arc::new(ConsoleMetrics::default()),
    }
}

fn used_len(m: &Gm, vq: &MockSplitQueue<Gm>, i: u64) -> u32 {
    let at = vq.used_addr().unchecked_add(4 + 8 * i + 4);
    m.read_obj::<u32>(at).expect("used len")
}

fn queues(m: &Gm) -> (MockSplitQueue<'_, Gm>, MockSplitQueue<'_, Gm>) {
    (
        MockSplitQueue::create(m, GuestAddress(0), 16),
        MockSplitQueue::create(m, GuestAddress(0x8000), 16),
    )
}

#[test]
fn transmit_writes_guest_bytes_to_the_output() {
    let m = mem();
    let (rx, tx) = queues(&m);
    m.write_slice(b"hello ", GuestAddress(0x10_0000)).unwrap();
    m.write_slice(b"hvc0\n", GuestAddress(0x11_0000)).unwrap();
    tx.build_desc_chain(&[
        desc(0x10_0000, 6, VRING_DESC_F_NEXT as u16, 1),
        desc(0x11_0000, 5, R, 0),
    ])
    .unwrap();
    let sink = Sink::default();
    let mut p = port(&m, &rx, &tx, &sink);
    assert_eq!(p.transmit(), 1);
    assert_eq!(&*sink.0.lock().unwrap(), b"hello hvc0\n");
    assert_eq!(p.metrics.tx_bytes.load(Ordering::Relaxed), 11);
}

#[test]
fn writable_transmit_buffer_is_rejected() {
    let m = mem();
    let (rx, tx) = queues(&m);
    tx.build_desc_chain(&[desc(0x10_0000, 16, W, 0)]).unwrap();
    let sink = Sink::default();
    let mut p = port(&m, &rx, &tx, &sink);
    assert_eq!(p.transmit(), 1);
    assert!(sink.0.lock().unwrap().is_empty());
    assert_eq!(p.metrics.bad_descriptors.load(Ordering::Relaxed), 1);
}

#[test]
fn transmit_outside_ram_is_counted() {
    let m = mem();
    let (rx, tx) = queues(&m);
    tx.build_desc_chain(&[desc(0x1F_FF00, 0x1000, R, 0)])
        .unwrap();
    let sink = Sink::default();
    let mut p = port(&m, &rx, &tx, &sink);
    assert_eq!(p.transmit(), 1);
    assert_eq!(p.metrics.bad_descriptors.load(Ordering::Relaxed), 1);
}

#[test]
fn input_waits_for_a_receive_buffer_and_is_split_across_buffers() {
    let m = mem();
    let (rx, tx) = queues(&m);
    let sink = Sink::default();
    let mut p = port(&m, &rx, &tx, &sink);
    let input = p.input.clone().unwrap();
    input.push(b"ls -l\n");
    assert_eq!(p.receive(), 0, "no buffer posted yet");
    rx.build_multiple_desc_chains(&[desc(0x10_0000, 4, W, 0), desc(0x11_0000, 64, W, 0)])
        .unwrap();
    p.rx = rx.create_queue().unwrap();
    assert_eq!(p.receive(), 6);
    assert_eq!((used_len(&m, &rx, 0), used_len(&m, &rx, 1)), (4, 2));
    let mut got = [0u8; 6];
    m.read_slice(&mut got[..4], GuestAddress(0x10_0000))
        .unwrap();
    m.read_slice(&mut got[4..], GuestAddress(0x11_0000))
        .unwrap();
    assert_eq!(&got, b"ls -l\n");
}

#[test]
fn readable_receive_buffer_is_rejected_and_input_kept() {
    let m = mem();
    let (rx, tx) = queues(&m);
    rx.build_desc_chain(&[desc(0x10_0000, 16, R, 0)]).unwrap();
    let sink = Sink::default();
    let mut p = port(&m, &rx, &tx, &sink);
    let input = p.input.clone().unwrap();
    input.push(b"x");
    assert_eq!(p.receive(), 0);
    assert_eq!(p.metrics.bad_descriptors.load(Ordering::Relaxed), 1);
    assert_eq!(input.buffer.lock().unwrap().len(), 1);
}

#[test]
fn input_beyond_the_limit_is_dropped_and_counted() {
    let i = ConsoleInput::new().unwrap();
    i.push(&vec![b'a'; MAX_PENDING_INPUT + 10]);
    assert_eq!(i.buffer.lock().unwrap().len(), MAX_PENDING_INPUT);
    assert_eq!(i.dropped.load(Ordering::Relaxed), 10);
}

/// Random descriptor tables must never panic the device.
#[test]
fn random_chains_do_not_panic() {
    let m = mem();
    let mut seed = 0x1234_5678_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..200 {
        let (rx, tx) = queues(&m);
        let n = (next() % 4 + 1) as usize;
        let descs: Vec<_> = (0..n)
            .map(|i| {
                let r = next();
                let flags = (r as u16) & (W | VRING_DESC_F_NEXT as u16);
                desc(
                    r % 0x30_0000,
                    (r >> 32) as u32 % 0x2_0000,
                    flags,
                    ((i + 1) % 16) as u16,
                )
            })
            .collect();
        let _ = tx.build_desc_chain(&descs);
        let _ = rx.build_desc_chain(&descs);
        let sink = Sink::default();
        let mut p = port(&m, &rx, &tx, &sink);
        p.input.clone().unwrap().push(b"abc");
        p.transmit();
        p.receive();
    }
}

#[test]
fn indirect_transmit_chain_is_refused_unsent() {
    use virtio_bindings::virtio_ring::VRING_DESC_F_INDIRECT;
    let m = mem();
    let (rx, tx) = queues(&m);
    m.write_slice(b"secret", GuestAddress(0x10_0000)).unwrap();
    m.write_obj(
        SplitDescriptor::new(0x10_0000, 6, R, 0),
        GuestAddress(0x12_0000),
    )
    .unwrap();
    tx.build_desc_chain(&[desc(0x12_0000, 16, VRING_DESC_F_INDIRECT as u16, 0)])
        .unwrap();
    let sink = Sink::default();
    let mut p = port(&m, &rx, &tx, &sink);
    assert_eq!(p.transmit(), 1);
    assert!(sink.0.lock().unwrap().is_empty(), "indirect data was sent");
    assert_eq!(p.metrics.bad_descriptors.load(Ordering::Relaxed), 1);
}

#[test]
fn config_writes_are_counted() {
    let mut c = Console::new(Box::new(Sink::default()), None);
    for _ in 0..500 {
        c.write_config(0, &[0xff; 4]);
    }
    assert_eq!(c.metrics().config_writes.load(Ordering::Relaxed), 500);
}

mod fuzz {
    use super::*;
    use crate::virtio::fuzz_support::{cases, load, memory, ring_image, used_idx};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]
        #[test]
        fn fuzz_console_queues(
            rx_img in ring_image(),
            tx_img in ring_image(),
            input in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let m = memory();
            let sink = Sink::default();
            let rx = load(&m, 0, &rx_img);
            let tx = load(&m, 0x400, &tx_img);
            let console_input = Arc::new(ConsoleInput::new().unwrap());
            console_input.push(&input);
            let mut p = Port {
                mem: m.clone(),
                interrupt: Arc::new(NoopInterrupt),
                rx,
                rx_evt: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
                tx,
                tx_evt: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
                output: Arc::new(Mutex::new(Box::new(sink.clone()))),
                input: Some(console_input),
                metrics: Arc::new(ConsoleMetrics::default()),
            };
            p.transmit();
            p.receive();
            if !rx_img.may_write_rings() {
                prop_assert_eq!(used_idx(&m, 0x400), p.tx.next_used());
                prop_assert_eq!(used_idx(&m, 0), p.rx.next_used());
            }
            let sent = sink.0.lock().unwrap().len() as u64;
            prop_assert_eq!(sent, p.metrics.tx_bytes.load(Ordering::Relaxed));
            prop_assert!(p.metrics.rx_bytes.load(Ordering::Relaxed) <= input.len() as u64);
        }
    }
}
