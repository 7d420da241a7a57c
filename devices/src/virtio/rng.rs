//! virtio-rng (virtio 1.2 section 5.4): the guest's entropy source, fed
//! from a host file (`/dev/urandom` by default, as in Cloud Hypervisor).
//!
//! One request queue. The driver posts device-writable buffers; the device
//! thread fills them from the source and returns them. A chain with a
//! device-readable descriptor is malformed: it is returned unfilled and
//! counted. Each request is capped at [`MAX_REQUEST_BYTES`] so a guest
//! cannot make the host read without bound.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use log::{error, warn};
use virtio_queue::QueueOwnedT;
use vm_memory::Bytes;
use vmm_sys_util::eventfd::EventFd;

use super::chain::refuse_indirect;
use super::fault::{guest_fault, ignored_config_write};
use super::{
    take_queues, ActivateError, ActiveQueue, DeviceCounters, GuestMemoryMmap, Queue, QueueT,
    VirtioDevice, VirtioInterrupt, VirtioInterruptType, VIRTIO_F_VERSION_1,
};
use crate::event_loop::{EventHandler, LoopContext};

/// Virtio device id of an entropy device.
pub const VIRTIO_ID_RNG: u32 = 4;
/// Size of the request queue.
pub const RNG_QUEUE_SIZE: u16 = 256;
/// Most bytes written for one request (one descriptor chain).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

const QUEUE_TOKEN: u64 = 0;

/// What the device has done, for `vm.counters`.
#[derive(Debug, Default)]
pub struct RngMetrics {
    /// Requests completed.
    pub requests: AtomicU64,
    /// Bytes of entropy handed to the guest.
    pub bytes: AtomicU64,
    /// Chains rejected: a device-readable descriptor, or outside guest RAM.
    pub bad_descriptors: AtomicU64,
    /// Reads from the source that failed.
    pub source_errors: AtomicU64,
    /// Guest writes to the (empty) configuration space, ignored.
    pub config_writes: AtomicU64,
}

impl DeviceCounters for RngMetrics {
    fn snapshot(&self) -> std::collections::BTreeMap<String, u64> {
        super::named_counters(&[
            ("requests", self.requests.load(Ordering::Relaxed)),
            ("bytes", self.bytes.load(Ordering::Relaxed)),
            (
                "bad_descriptors",
                self.bad_descriptors.load(Ordering::Relaxed),
            ),
            ("source_errors", self.source_errors.load(Ordering::Relaxed)),
            ("config_writes", self.config_writes.load(Ordering::Relaxed)),
        ])
    }
}

/// The entropy device.
pub struct Rng {
    /// Shared with the data path (reads go through `&File`).
    source: Arc<File>,
    metrics: Arc<RngMetrics>,
}

impl Rng {
    /// Opens `source` (read-only) now, so a bad path is a configuration
    /// error rather than a failure inside the running guest.
    pub fn new(source: &Path) -> io::Result<Self> {
        Ok(Self {
            source: Arc::new(File::open(source)?),
            metrics: Arc::new(RngMetrics::default()),
        })
    }

    /// The device's counters (shared with its thread).
    pub fn metrics(&self) -> Arc<RngMetrics> {
        self.metrics.clone()
    }
}

impl VirtioDevice for Rng {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_RNG
    }

    fn queue_max_sizes(&self) -> Vec<u16> {
        vec![RNG_QUEUE_SIZE]
    }

    fn features(&self) -> u64 {
        1 << VIRTIO_F_VERSION_1
    }

    fn read_config(&self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        ignored_config_write(
            &self.metrics.config_writes,
            "rng",
            offset,
            data,
            "the device has no configuration",
        );
    }

    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Box<dyn EventHandler>, ActivateError> {
        let [active] = take_queues(queues, [0])?;
        Ok(Box::new(Filler {
            mem,
            interrupt,
            queue: active.queue,
            queue_evt: active.event,
            source: self.source.clone(),
            metrics: self.metrics.clone(),
        }))
    }

    fn counters(&self) -> Arc<dyn DeviceCounters> {
        self.metrics.clone()
    }
}

/// The device thread's state: fills request buffers.
struct Filler {
    mem: GuestMemoryMmap,
    interrupt: Arc<dyn VirtioInterrupt>,
    queue: Queue,
    queue_evt: EventFd,
    source: Arc<File>,
    metrics: Arc<RngMetrics>,
}

impl EventHandler for Filler {
    fn watch(&self) -> Vec<(RawFd, u64)> {
        vec![(self.queue_evt.as_raw_fd(), QUEUE_TOKEN)]
    }

    fn start(&mut self, _ctx: &mut LoopContext<'_>) {
        self.process(); // requests posted before DRIVER_OK
    }

    fn event(&mut self, _token: u64, _ctx: &mut LoopContext<'_>) {
        let _ = self.queue_evt.read();
        self.process();
    }
}

impl Filler {
    /// Serves every available request; returns how many were completed.
    fn process(&mut self) -> usize {
        let mem = &self.mem;
        let chains: Vec<_> = match self.queue.iter(mem) {
            Ok(it) => it.collect(),
            Err(e) => {
                guest_fault(
                    &self.metrics.bad_descriptors,
                    "rng",
                    format_args!("request queue is unusable: {e}"),
                );
                return 0;
            }
        };
        let mut done = 0;
        let mut buf = vec![0u8; 4096];
        for chain in chains {
            let head = chain.head_index();
            let mut written: u32 = 0;
            // Not offered, so never negotiated: refuse the whole chain.
            let mut bad = refuse_indirect(&self.queue, mem, head).is_err();
            let walk = (!bad).then_some(chain);
            for desc in walk.into_iter().flatten() {
                if !desc.is_write_only() {
                    bad = true;
                    break;
                }
                let room = MAX_REQUEST_BYTES - written as usize;
                let mut left = (desc.len() as usize).min(room);
                let mut addr = desc.addr();
                while left > 0 {
                    let n = left.min(buf.len());
                    if let Err(e) = (&*self.source).read_exact(&mut buf[..n]) {
                        if self.metrics.source_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                            error!("rng: reading the entropy source: {e}");
                        }
                        break;
                    }
                    if mem.write_slice(&buf[..n], addr).is_err() {
                        bad = true;
                        break;
                    }
                    // n <= 4096 and written stays <= MAX_REQUEST_BYTES.
                    written += n as u32;
                    left -= n;
                    addr = vm_memory::GuestAddress(addr.0.wrapping_add(n as u64));
                }
                if bad || written as usize >= MAX_REQUEST_BYTES {
                    break;
                }
            }
            if bad {
                guest_fault(
                    &self.metrics.bad_descriptors,
                    "rng",
                    format_args!(
                        "malformed request (device-readable, indirect or outside guest RAM); returned unfilled"
                    ),
                );
                written = 0;
            }
            if let Err(e) = self.queue.add_used(mem, head, written) {
                guest_fault(
                    &self.metrics.bad_descriptors,
                    "rng",
                    format_args!("adding used buffer {head}: {e}"),
                );
                continue;
            }
            self.metrics.requests.fetch_add(1, Ordering::Relaxed);
            self.metrics
                .bytes
                .fetch_add(u64::from(written), Ordering::Relaxed);
            done += 1;
        }
        if done > 0 && self.queue.needs_notification(mem).unwrap_or(true) {
            if let Err(e) = self.interrupt.trigger(VirtioInterruptType::Queue(0)) {
                warn!("rng: raising the queue interrupt: {e}");
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio::NoopInterrupt;
    use virtio_bindings::virtio_ring::VRING_DESC_F_WRITE;
    use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::{Address, GuestAddress, GuestMemoryMmap as Gm};

    fn mem() -> Gm<()> {
        Gm::from_ranges(&[(GuestAddress(0), 0x20_0000)]).expect("guest memory")
    }

    fn filler(m: &Gm<()>, queue: Queue) -> Filler {
        Filler {
            mem: m.clone(),
            interrupt: Arc::new(NoopInterrupt),
            queue,
            queue_evt: EventFd::new(libc::EFD_NONBLOCK).expect("eventfd"),
            source: Arc::new(File::open("/dev/urandom").expect("urandom")),
            metrics: Arc::new(RngMetrics::default()),
        }
    }

    fn desc(addr: u64, len: u32, flags: u16) -> RawDescriptor {
        RawDescriptor::from(SplitDescriptor::new(addr, len, flags, 0))
    }

    fn used_len(m: &Gm<()>, vq: &MockSplitQueue<Gm<()>>, i: u64) -> u32 {
        // used ring: flags(2) idx(2) then {id u32, len u32} entries
        let at = vq.used_addr().unchecked_add(4 + 8 * i + 4);
        m.read_obj::<u32>(at).expect("used len")
    }

    #[test]
    fn fills_writable_buffer() {
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        vq.build_desc_chain(&[desc(0x10_0000, 512, VRING_DESC_F_WRITE as u16)])
            .expect("chain");
        let mut f = filler(&m, vq.create_queue().expect("queue"));
        assert_eq!(f.process(), 1);
        assert_eq!(used_len(&m, &vq, 0), 512);
        let mut out = [0u8; 512];
        m.read_slice(&mut out, GuestAddress(0x10_0000))
            .expect("read");
        assert!(out.iter().any(|&b| b != 0), "buffer stayed zero");
        assert_eq!(f.metrics.bytes.load(Ordering::Relaxed), 512);
    }

    #[test]
    fn indirect_chain_is_returned_unfilled() {
        use virtio_bindings::virtio_ring::VRING_DESC_F_INDIRECT;
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        m.write_obj(
            SplitDescriptor::new(0x10_0000, 64, VRING_DESC_F_WRITE as u16, 0),
            GuestAddress(0x12_0000),
        )
        .expect("table");
        vq.build_desc_chain(&[desc(0x12_0000, 16, VRING_DESC_F_INDIRECT as u16)])
            .expect("chain");
        let mut f = filler(&m, vq.create_queue().expect("queue"));
        assert_eq!(f.process(), 1);
        assert_eq!(used_len(&m, &vq, 0), 0);
        let mut out = [0u8; 64];
        m.read_slice(&mut out, GuestAddress(0x10_0000))
            .expect("read");
        assert_eq!(out, [0u8; 64], "the indirect buffer was filled");
        assert_eq!(f.metrics.bad_descriptors.load(Ordering::Relaxed), 1);
    }

    mod fuzz {
        use super::*;
        use crate::virtio::fuzz_support::{cases, load, memory, ring_image, used_idx};
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(cases()))]
            #[test]
            fn fuzz_rng_requests(img in ring_image()) {
                let m = memory();
                let mut f = filler(&m, load(&m, 0, &img));
                let done = f.process();
                if !img.may_write_rings() {
                    prop_assert_eq!(used_idx(&m, 0), f.queue.next_used());
                }
                prop_assert_eq!(done as u64, f.metrics.requests.load(Ordering::Relaxed));
                prop_assert!(
                    f.metrics.bytes.load(Ordering::Relaxed) <= done as u64 * MAX_REQUEST_BYTES as u64
                );
            }
        }
    }

    #[test]
    fn config_writes_are_counted() {
        let mut r = Rng::new(Path::new("/dev/urandom")).expect("rng");
        for _ in 0..100 {
            r.write_config(0, &[1]);
        }
        assert_eq!(r.metrics().config_writes.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn readable_descriptor_is_rejected_unfilled() {
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        vq.build_desc_chain(&[desc(0x10_0000, 64, 0)])
            .expect("chain");
        let mut f = filler(&m, vq.create_queue().expect("queue"));
        assert_eq!(f.process(), 1);
        assert_eq!(used_len(&m, &vq, 0), 0);
        let mut out = [0u8; 64];
        m.read_slice(&mut out, GuestAddress(0x10_0000))
            .expect("read");
        assert_eq!(out, [0u8; 64], "a device-readable buffer was written");
        assert_eq!(f.metrics.bad_descriptors.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn huge_request_is_capped() {
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        vq.build_desc_chain(&[desc(0x8_0000, 0x10_0000, VRING_DESC_F_WRITE as u16)])
            .expect("chain");
        let mut f = filler(&m, vq.create_queue().expect("queue"));
        assert_eq!(f.process(), 1);
        assert_eq!(used_len(&m, &vq, 0) as usize, MAX_REQUEST_BYTES);
    }

    #[test]
    fn buffer_outside_ram_is_counted() {
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        vq.build_desc_chain(&[desc(0x1F_FF00, 0x1000, VRING_DESC_F_WRITE as u16)])
            .expect("chain");
        let mut f = filler(&m, vq.create_queue().expect("queue"));
        assert_eq!(f.process(), 1);
        assert_eq!(used_len(&m, &vq, 0), 0);
        assert_eq!(f.metrics.bad_descriptors.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn missing_source_is_an_error() {
        assert!(Rng::new(Path::new("/nonexistent/entropy")).is_err());
    }
}
