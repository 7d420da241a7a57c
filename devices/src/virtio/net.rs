//! virtio-net (virtio 1.2 section 5.1) over a TAP, one RX/TX queue pair
//! or, multiqueue, one per descriptor of an `IFF_MULTI_QUEUE` TAP.
//!
//! Multiqueue (`VIRTIO_NET_F_MQ` with `VIRTIO_NET_F_CTRL_VQ`, offered when
//! the NIC has more than one pair): pair `i` is queues `2i`/`2i+1` and TAP
//! descriptor `i`, served by device thread `i` with nothing shared but
//! atomic counters; the control queue (index `2 x pairs`) is served on
//! thread 0 (see [`ctrl`]). Until the driver sends `VQ_PAIRS_SET`, and
//! when it did not negotiate MQ, only pair 0 is used: the other TAP
//! descriptors are detached so the kernel steers no flow to them.
//!
//! Features: `VIRTIO_F_VERSION_1`, `VIRTIO_NET_F_MAC` (and `_MTU` when an
//! MTU is configured), `VIRTIO_NET_F_MRG_RXBUF`, `VIRTIO_RING_F_EVENT_IDX`,
//! checksum and TSO offloads both ways (see [`offload`]). Every frame sits behind the 12-byte header, which the TAP
//! speaks too (see [`super::tap`]), so offloaded frames pass through with
//! the header the other side wrote, less what was not negotiated. The
//! device thread moves frames with non-blocking reads and writes:
//!
//! * RX: a frame goes to the next receive buffer or, with mergeable
//!   buffers (`VIRTIO_NET_F_MRG_RXBUF`, always offered, as upstream), to
//!   as many as it takes, their count in the header's `num_buffers`. It
//!   is read from the TAP with one `readv` straight into them: chains are
//!   taken from the ring ahead of the frames (enough for the largest
//!   one, each parsed once and held until a frame uses it); the 12-byte
//!   header goes to the VMM's own copy, completed there (offloads,
//!   `num_buffers`) and then written to the guest; what the held chains
//!   cannot take (too few posted, a buffer across two memory regions,
//!   more than 128 pieces) goes to a bounce buffer and is copied once
//!   more chains come (`rx_copied`). When the guest has too few buffers
//!   left, the frame (and the buffers already taken for it) is kept, the
//!   TAP is taken out of the epoll set (no spinning on a readable TAP)
//!   and put back on the next RX queue notification. A frame larger than
//!   the buffer (without mergeable buffers), than the whole ring (with
//!   them) or than [`MAX_PACKET`] is dropped and counted; the buffers are
//!   kept for the next frame.
//! * TX: each chain (device-readable only) is written to the TAP as one
//!   frame, with the header fields no offload feature allows cleared: one
//!   `writev` of a filtered copy of the header and the chain's buffers in
//!   guest memory (a copy through a bounce buffer when a buffer crosses
//!   memory regions or the chain has more than 64 pieces).
//!
//! Notifications (`VIRTIO_RING_F_EVENT_IDX`, offered): TX drains its ring
//! with the guest's kicks suppressed and asks for the next one when empty;
//! RX asks for one only when it runs out of buffers; interrupts follow the
//! driver's `used_event`. A pass stopped by its bound with work left
//! writes its own queue eventfd to come back.
//!
//! Chains come from the guest: wrong direction, bad lengths or buffers
//! outside RAM are returned unused, counted, and the first is logged.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use log::{info, warn};
use virtio_bindings::virtio_net::{
    VIRTIO_NET_F_CTRL_VQ, VIRTIO_NET_F_MAC, VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF,
    VIRTIO_NET_F_MTU, VIRTIO_NET_S_LINK_UP,
};
use virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
use vm_memory::{Address, GuestMemoryBackend};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

use super::chain::ChainBuffers;
use super::fault::{guest_fault, ignored_config_write};
use super::tap::{TapQueues, VNET_HDR_LEN};
use super::{
    ActivateError, ActiveQueue, DeviceCounters, GuestMemoryMmap, Queue, QueueT, VirtioDevice,
    VirtioInterrupt, VirtioInterruptType, VIRTIO_F_VERSION_1,
};
use crate::event_loop::{EventHandler, LoopContext};

/// Virtio device id of a network device.
pub const VIRTIO_ID_NET: u32 = 1;
/// Ethernet header length: the shortest frame worth passing on.
const ETH_HLEN: usize = 14;
/// Largest frame (header included) either way: a 64 KiB IP packet with an
/// Ethernet and a VLAN header.
pub const MAX_PACKET: usize = VNET_HDR_LEN + 65535 + ETH_HLEN + 4;

const RX_QUEUE: usize = 0;
const TX_QUEUE: usize = 1;
const RX_TOKEN: u64 = 0;
const TX_TOKEN: u64 = 1;
const TAP_TOKEN: u64 = 2;
const CTRL_TOKEN: u64 = 3;
/// Most pieces a frame is written to the TAP from without a copy: the
/// header and the chain's buffers (Linux uses at most MAX_SKB_FRAGS + 2).
const TX_IOVECS: usize = 64;
/// Most pieces a frame is read from the TAP into: the header (into the
/// bounce buffer), the receive chains' buffers, the bounce buffer's tail.
/// Linux's mergeable buffers are 1.5 to 4 KiB, so 17 to 43 chains of one
/// buffer each cover a 64 KiB frame.
const RX_IOVECS: usize = 128;
/// Most queue pairs a NIC may have (`num_queues` up to 128).
pub const MAX_QUEUE_PAIRS: usize = 64;

mod ctrl;
mod offload;
use offload::Offloads;

/// What the device has done, for `vm.counters`.
#[derive(Debug, Default)]
pub struct NetMetrics {
    /// Frames given to the guest.
    pub rx_frames: AtomicU64,
    /// Their bytes (without the virtio header).
    pub rx_bytes: AtomicU64,
    /// Frames from the TAP that could not be delivered (too big or too short).
    pub rx_dropped: AtomicU64,
    /// Frames the guest sent.
    pub tx_frames: AtomicU64,
    /// Their bytes (without the virtio header).
    pub tx_bytes: AtomicU64,
    /// Guest frames the TAP did not take.
    pub tx_dropped: AtomicU64,
    /// Malformed chains: wrong direction, bad length, outside guest RAM.
    pub bad_descriptors: AtomicU64,
    /// Failed TAP reads or writes.
    pub tap_errors: AtomicU64,
    /// Times RX stopped reading the TAP for want of guest buffers.
    pub rx_no_buffers: AtomicU64,
    /// Frames given to the guest partly or wholly by copy, through the
    /// bounce buffer, instead of read straight into its buffers (too few
    /// buffers posted, or buffers that do not lend themselves to it).
    pub rx_copied: AtomicU64,
    /// Guest writes to the configuration space, ignored.
    pub config_writes: AtomicU64,
    /// Control queue commands (multiqueue only).
    pub ctrl_commands: AtomicU64,
    /// Control commands answered `VIRTIO_NET_ERR`: unsupported, or a pair
    /// count outside 1..=pairs.
    pub ctrl_refused: AtomicU64,
}

impl DeviceCounters for NetMetrics {
    fn snapshot(&self) -> std::collections::BTreeMap<String, u64> {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        super::named_counters(&[
            ("rx_frames", l(&self.rx_frames)),
            ("rx_bytes", l(&self.rx_bytes)),
            ("rx_dropped", l(&self.rx_dropped)),
            ("tx_frames", l(&self.tx_frames)),
            ("tx_bytes", l(&self.tx_bytes)),
            ("tx_dropped", l(&self.tx_dropped)),
            ("bad_descriptors", l(&self.bad_descriptors)),
            ("tap_errors", l(&self.tap_errors)),
            ("rx_no_buffers", l(&self.rx_no_buffers)),
            ("rx_copied", l(&self.rx_copied)),
            ("config_writes", l(&self.config_writes)),
            ("ctrl_commands", l(&self.ctrl_commands)),
            ("ctrl_refused", l(&self.ctrl_refused)),
        ])
    }
}

/// What the guest sees.
#[derive(Debug, Clone, Copy)]
pub struct NetOptions {
    /// The NIC's MAC address.
    pub mac: [u8; 6],
    /// MTU offered with `VIRTIO_NET_F_MTU`.
    pub mtu: Option<u16>,
    /// Size of each queue.
    pub queue_size: u16,
    /// Offer partial checksums both ways.
    pub offload_csum: bool,
    /// Offer TSO both ways (only with `offload_csum`).
    pub offload_tso: bool,
}

/// The network device.
pub struct Net {
    options: NetOptions,
    /// One descriptor per queue pair, shared with the data paths (frames
    /// go through `&File`).
    taps: Arc<TapQueues>,
    /// What the driver accepted; None until FEATURES_OK (and after a
    /// reset), when the queue layout is the largest one.
    acked: Option<u64>,
    metrics: Arc<NetMetrics>,
}

impl Net {
    /// A NIC over `tap`: a non-blocking descriptor with one frame (behind a
    /// [`VNET_HDR_LEN`]-byte header) per read or write.
    pub fn new(tap: File, options: NetOptions) -> Self {
        Self::with_queues(TapQueues::new(vec![tap], false), options)
    }

    /// A multiqueue NIC: one queue pair per descriptor of `taps` (at
    /// most [`MAX_QUEUE_PAIRS`]; callers check).
    pub fn with_queues(taps: TapQueues, options: NetOptions) -> Self {
        Self {
            options,
            taps: Arc::new(taps),
            acked: None,
            metrics: Arc::new(NetMetrics::default()),
        }
    }

    fn pairs(&self) -> usize {
        self.taps.len().max(1)
    }

    /// Whether the negotiated layout is multiqueue with a control queue.
    fn multiqueue(features: u64) -> bool {
        let need = (1u64 << VIRTIO_NET_F_MQ) | (1u64 << VIRTIO_NET_F_CTRL_VQ);
        features & need == need
    }

    /// Queue count and the control queue's index, for `features`.
    fn layout(&self, features: u64) -> (usize, Option<usize>) {
        if Self::multiqueue(features) {
            let n = 2 * self.pairs();
            (n + 1, Some(n))
        } else if features & (1u64 << VIRTIO_NET_F_CTRL_VQ) != 0 {
            (3, Some(2))
        } else {
            (2, None)
        }
    }

    /// The device's counters (shared with its thread).
    pub fn metrics(&self) -> Arc<NetMetrics> {
        self.metrics.clone()
    }

    fn config_space(&self) -> [u8; 12] {
        let mut c = [0u8; 12];
        c[..6].copy_from_slice(&self.options.mac);
        // status (read only with VIRTIO_NET_F_STATUS, not offered): link up.
        c[6..8].copy_from_slice(&(VIRTIO_NET_S_LINK_UP as u16).to_le_bytes());
        // max_virtqueue_pairs (meaningful only with MQ); at most 64.
        c[8..10].copy_from_slice(&(self.pairs() as u16).to_le_bytes());
        c[10..12].copy_from_slice(&self.options.mtu.unwrap_or(0).to_le_bytes());
        c
    }
}

impl VirtioDevice for Net {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_NET
    }

    fn queue_max_sizes(&self) -> Vec<u16> {
        // Before negotiation: the largest layout (it sizes the eventfds).
        let (n, _) = self.layout(self.acked.unwrap_or_else(|| self.features()));
        vec![self.options.queue_size; n]
    }

    fn worker_count(&self) -> usize {
        self.pairs()
    }

    fn features(&self) -> u64 {
        let mut f = (1u64 << VIRTIO_F_VERSION_1)
            | (1u64 << VIRTIO_NET_F_MAC)
            | (1u64 << VIRTIO_NET_F_MRG_RXBUF)
            | (1u64 << VIRTIO_RING_F_EVENT_IDX)
            | offload::offered(self.options.offload_csum, self.options.offload_tso);
        if self.options.mtu.is_some() {
            f |= 1u64 << VIRTIO_NET_F_MTU;
        }
        if self.pairs() > 1 {
            f |= (1u64 << VIRTIO_NET_F_CTRL_VQ) | (1u64 << VIRTIO_NET_F_MQ);
        }
        f
    }

    fn ack_features(&mut self, features: u64) {
        self.acked = Some(features);
    }

    fn reset(&mut self) {
        self.acked = None;
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        super::read_config_from_slice(&self.config_space(), offset, data);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        ignored_config_write(
            &self.metrics.config_writes,
            "net",
            offset,
            data,
            "the MAC is writable only by legacy drivers",
        );
    }

    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Box<dyn EventHandler>, ActivateError> {
        super::single_worker(self.servers(mem, interrupt, queues)?, "queue pairs")
    }

    fn activate_workers(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Vec<Box<dyn EventHandler>>, ActivateError> {
        self.servers(mem, interrupt, queues)
    }

    fn counters(&self) -> Arc<dyn DeviceCounters> {
        self.metrics.clone()
    }
}

impl Net {
    /// One data path per queue pair the driver set up (pair 0 required,
    /// a pair needs both its queues), the control queue with pair 0.
    fn servers(
        &self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Vec<Box<dyn EventHandler>>, ActivateError> {
        let features = self.acked.unwrap_or(0);
        let event_idx = features & (1u64 << VIRTIO_RING_F_EVENT_IDX) != 0;
        let (count, ctrl_index) = self.layout(features);
        let mut by_index: Vec<Option<ActiveQueue>> = (0..count).map(|_| None).collect();
        for mut q in queues {
            // Section 2.7.10: every queue of the device, the control
            // queue too, suppresses notifications by event index.
            q.queue.set_event_idx(event_idx);
            let i = q.index;
            match by_index.get_mut(i) {
                Some(slot) => *slot = Some(q),
                None => {
                    return Err(ActivateError::Invalid(format!(
                        "queue {i} is outside the negotiated layout of {count}"
                    )))
                }
            }
        }
        let mut ctrl = ctrl_index
            .and_then(|i| by_index[i].take())
            .map(|q| ctrl::CtrlQueue {
                // Below 2 x 64 + 1.
                index: q.index as u16,
                queue: q.queue,
                evt: q.event,
                taps: self.taps.clone(),
                mq: Self::multiqueue(features),
                metrics: self.metrics.clone(),
            });
        let pairs = if Self::multiqueue(features) {
            self.pairs()
        } else {
            1
        };
        let offloads = Offloads::from_features(features);
        let mut servers: Vec<Box<dyn EventHandler>> = Vec::new();
        for pair in 0..pairs {
            let rx = by_index[2 * pair].take();
            let tx = by_index[2 * pair + 1].take();
            let (rx, tx) = match (rx, tx) {
                (Some(rx), Some(tx)) => (rx, tx),
                (None, None) if pair > 0 => continue,
                (None, _) => return Err(ActivateError::MissingQueue(2 * pair)),
                (_, None) => return Err(ActivateError::MissingQueue(2 * pair + 1)),
            };
            let tap = self
                .taps
                .file(pair)
                .ok_or_else(|| ActivateError::Invalid(format!("no TAP queue for pair {pair}")))?;
            let mut server = Server::new(
                mem.clone(),
                interrupt.clone(),
                rx,
                tx,
                tap,
                self.metrics.clone(),
            );
            // Below MAX_QUEUE_PAIRS.
            server.pair = pair as u16;
            server.offloads = offloads;
            server.mrg_rxbuf = features & (1u64 << VIRTIO_NET_F_MRG_RXBUF) != 0;
            if pair == 0 {
                server.ctrl = ctrl.take();
                server.taps = Some(self.taps.clone());
            }
            servers.push(Box::new(server));
        }
        Ok(servers)
    }
}

/// A queue pair's device thread state.
struct Server {
    mem: GuestMemoryMmap,
    interrupt: Arc<dyn VirtioInterrupt>,
    /// Which pair: its queues are `2 x pair` and `2 x pair + 1`.
    pair: u16,
    /// The control queue (pair 0 of a multiqueue NIC).
    ctrl: Option<ctrl::CtrlQueue>,
    /// Every pair's TAP descriptor (pair 0): only the first is attached
    /// until the driver asks for more.
    taps: Option<Arc<TapQueues>>,
    rx: Queue,
    rx_evt: EventFd,
    tx: Queue,
    tx_evt: EventFd,
    tap: Arc<File>,
    metrics: Arc<NetMetrics>,
    /// Which header fields pass each way.
    offloads: Offloads,
    /// The header of each frame read from the TAP, and the part of a
    /// frame that did not fit the held receive chains (at its offset in
    /// the frame); MAX_PACKET + 1 bytes, so a longer frame shows.
    rx_frame: Vec<u8>,
    /// The length of a frame read from the TAP and not yet delivered.
    rx_pending: Option<usize>,
    /// The pending frame's bytes 12..rx_in_place lie in place in the
    /// held chains (in ring order, from the first); its header and the
    /// rest are in `rx_frame`.
    rx_in_place: usize,
    /// How many bytes of held chains the next read covers with iovecs:
    /// the largest frame lately, decaying (so small frames, such as the
    /// ACKs of a guest's TCP stream, are not read with 40-odd iovecs
    /// into 64 KiB of buffers), back to [`MAX_PACKET`] after a frame that
    /// did not fit.
    rx_expect: usize,
    /// Whether the TAP is in the epoll set with EPOLLIN.
    tap_armed: bool,
    /// Whether the TAP is in the epoll set at all: a TAP deleted on the
    /// host polls as an error forever, so it is taken out until the next
    /// RX notification.
    tap_registered: bool,
    tx_frame: Vec<u8>,
    /// Whether the driver negotiated `VIRTIO_NET_F_MRG_RXBUF`.
    mrg_rxbuf: bool,
    /// Receive chains taken from the ring and not yet used, in ring
    /// order, and their writable bytes: taken ahead of the frames, so
    /// each is read into straight from the TAP, enough for the largest
    /// frame with mergeable buffers (or all the ring has), one without.
    /// Each is parsed once and kept until a frame uses it.
    rx_held: Vec<ChainBuffers>,
    rx_held_len: u64,
}

/// What the RX loop does after a frame.
enum RxStep {
    /// Go on with the next frame.
    Next,
    /// The guest has too few buffers for the pending frame.
    NoBuffers,
    /// The used ring is broken: stop until the next event.
    Stop,
}

impl EventHandler for Server {
    fn watch(&self) -> Vec<(RawFd, u64)> {
        // The TAP starts armed (tap_armed).
        let mut w = vec![
            (self.rx_evt.as_raw_fd(), RX_TOKEN),
            (self.tx_evt.as_raw_fd(), TX_TOKEN),
            (self.tap.as_raw_fd(), TAP_TOKEN),
        ];
        if let Some(c) = &self.ctrl {
            w.push((c.evt.as_raw_fd(), CTRL_TOKEN));
        }
        w
    }

    fn start(&mut self, ctx: &mut LoopContext<'_>) {
        // On the device thread (its seccomp filter allows TUNSETOFFLOAD,
        // the activating vCPU's does not). On failure the TAP hands over
        // plain frames, which the guest takes whatever it negotiated.
        if let Err(e) = super::tap::set_offload(&self.tap, self.offloads.tun_flags()) {
            warn!("net: TUNSETOFFLOAD {:#x}: {e}", self.offloads.tun_flags());
        }
        // Section 5.1.6.5.5: one pair until VQ_PAIRS_SET.
        if let Some(taps) = &self.taps {
            if let Err(e) = taps.enable(1) {
                self.tap_error("detaching the unused queues of", &e);
            }
        }
        let epoll = ctx.epoll();
        if let Some(c) = &mut self.ctrl {
            c.process(&self.mem, &*self.interrupt);
        }
        self.process_tx();
        self.process_rx(epoll);
    }

    fn event(&mut self, token: u64, ctx: &mut LoopContext<'_>) {
        let epoll = ctx.epoll();
        match token {
            RX_TOKEN => {
                let _ = self.rx_evt.read();
                self.process_rx(epoll);
            }
            TX_TOKEN => {
                let _ = self.tx_evt.read();
                self.process_tx();
            }
            TAP_TOKEN => self.process_rx(epoll),
            CTRL_TOKEN => {
                if let Some(c) = &mut self.ctrl {
                    let _ = c.evt.read();
                    c.process(&self.mem, &*self.interrupt);
                }
            }
            _ => {}
        }
    }
}

impl Server {
    fn new(
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        rx: ActiveQueue,
        tx: ActiveQueue,
        tap: Arc<File>,
        metrics: Arc<NetMetrics>,
    ) -> Self {
        info!(
            "net: RX queue of {} and TX queue of {} buffers",
            rx.queue.size(),
            tx.queue.size()
        );
        Self {
            mem,
            interrupt,
            pair: 0,
            ctrl: None,
            taps: None,
            rx: rx.queue,
            rx_evt: rx.event,
            tx: tx.queue,
            tx_evt: tx.event,
            tap,
            metrics,
            offloads: Offloads::default(),
            rx_frame: vec![0u8; MAX_PACKET + 1],
            rx_pending: None,
            rx_in_place: 0,
            rx_expect: MAX_PACKET,
            tap_armed: true,
            tap_registered: true,
            tx_frame: vec![0u8; MAX_PACKET],
            mrg_rxbuf: false,
            rx_held: Vec::new(),
            rx_held_len: 0,
        }
    }

    fn count_bad(&self, why: &str) {
        guest_fault(
            &self.metrics.bad_descriptors,
            "net",
            format_args!("malformed chain: {why}"),
        );
    }

    fn tap_error(&self, what: &str, e: &io::Error) {
        if self.metrics.tap_errors.fetch_add(1, Ordering::Relaxed) == 0 {
            warn!("net: {what} the TAP failed: {e} (further errors only counted)");
        }
    }

    /// Takes the TAP out of the epoll set: it reads EBADFD.
    fn unregister_tap(&mut self, epoll: &Epoll) {
        if !self.tap_registered {
            return;
        }
        match epoll.ctl(
            ControlOperation::Delete,
            self.tap.as_raw_fd(),
            EpollEvent::default(),
        ) {
            Ok(()) => {
                self.tap_registered = false;
                self.tap_armed = false;
            }
            Err(e) => warn!("net: removing a detached TAP queue from epoll: {e}"),
        }
    }

    /// Adds or removes the TAP from the epoll set.
    fn arm_tap(&mut self, epoll: &Epoll, armed: bool) {
        if armed && !self.tap_registered {
            match epoll.ctl(
                ControlOperation::Add,
                self.tap.as_raw_fd(),
                EpollEvent::new(EventSet::IN, TAP_TOKEN),
            ) {
                Ok(()) => {
                    self.tap_registered = true;
                    self.tap_armed = true;
                }
                Err(e) => warn!("net: putting a TAP queue back in epoll: {e}"),
            }
            return;
        }
        if self.tap_armed == armed || !self.tap_registered {
            return;
        }
        let events = if armed {
            EventSet::IN
        } else {
            EventSet::empty()
        };
        match epoll.ctl(
            ControlOperation::Modify,
            self.tap.as_raw_fd(),
            EpollEvent::new(events, TAP_TOKEN),
        ) {
            Ok(()) => self.tap_armed = armed,
            Err(e) => warn!("net: changing the TAP's epoll registration: {e}"),
        }
    }

    fn notify(&mut self, queue: usize) {
        let q = if queue == RX_QUEUE {
            &mut self.rx
        } else {
            &mut self.tx
        };
        if q.needs_notification(&self.mem).unwrap_or(true) {
            // queue is 0 or 1, pair below MAX_QUEUE_PAIRS.
            let index = 2 * self.pair + queue as u16;
            if let Err(e) = self.interrupt.trigger(VirtioInterruptType::Queue(index)) {
                warn!("net: raising the queue interrupt: {e}");
            }
        }
    }

    /// Moves frames from the TAP into receive buffers until either runs out.
    fn process_rx(&mut self, epoll: &Epoll) {
        // A notification means buffers may be back: read the TAP again.
        self.arm_tap(epoll, true);
        let mut used = false;
        // Bounded so TX gets its turn under a flood; epoll (level
        // triggered) brings us back while the TAP stays readable, and the
        // RX eventfd when a frame is pending (see below).
        let mut budget_spent = true;
        // One more look after re-enabling notifications, not a loop: an
        // avail index the ring cannot hold reads as "more" forever.
        let mut looked_again = false;
        for _ in 0..usize::from(self.rx.size()).max(1) * 2 {
            let len = match self.rx_pending {
                Some(len) => len,
                None => {
                    if let RxStep::Stop = self.rx_hold_ahead(&mut used) {
                        budget_spent = false;
                        break;
                    }
                    match self.read_frame() {
                        Ok((n, _)) if n < VNET_HDR_LEN + ETH_HLEN => {
                            self.metrics.rx_dropped.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Ok((n, _)) if n > MAX_PACKET => {
                            if self.metrics.rx_dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                                warn!("net: {n}-byte frame from the TAP is longer than {MAX_PACKET} bytes; dropped");
                            }
                            continue;
                        }
                        Ok((n, in_place)) => {
                            self.rx_pending = Some(n);
                            self.rx_in_place = in_place;
                            n
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            budget_spent = false;
                            break;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        // The TAP went away under us (deleted on the host):
                        // it polls as an error forever, so stop watching it
                        // until the next RX notification.
                        Err(e) if e.raw_os_error() == Some(libc::EBADFD) => {
                            self.unregister_tap(epoll);
                            budget_spent = false;
                            break;
                        }
                        Err(e) => {
                            self.tap_error("reading", &e);
                            budget_spent = false;
                            break;
                        }
                    }
                }
            };
            let step = if self.mrg_rxbuf {
                self.rx_mergeable(len, &mut used)
            } else {
                self.rx_single(len, &mut used)
            };
            match step {
                RxStep::Next => {}
                RxStep::NoBuffers => {
                    // Ask for a notification when buffers come (with
                    // EVENT_IDX the RX queue's kicks are otherwise left
                    // suppressed), then look once more: some may have
                    // come in between.
                    if !looked_again && self.rx.enable_notification(&self.mem).unwrap_or(false) {
                        looked_again = true;
                        continue;
                    }
                    // Keep the frame; wait for the guest's next RX notification.
                    self.metrics.rx_no_buffers.fetch_add(1, Ordering::Relaxed);
                    self.arm_tap(epoll, false);
                    budget_spent = false;
                    break;
                }
                RxStep::Stop => {
                    budget_spent = false;
                    break;
                }
            }
        }
        if budget_spent && self.rx_pending.is_some() {
            // The TAP may not be readable any more: come back for the
            // pending frame after the other events.
            self.reschedule(&self.rx_evt);
        }
        if used {
            self.notify(RX_QUEUE);
        }
    }

    /// Makes the loop call us again for `evt`'s queue.
    fn reschedule(&self, evt: &EventFd) {
        if let Err(e) = evt.write(1) {
            warn!("net: rescheduling a queue: {e}");
        }
    }

    /// Takes the next receive chain from the ring into `rx_held` or, when
    /// it is malformed, returns it empty at once (before the buffers of
    /// the frame being filled, so a frame's buffers stay consecutive).
    /// None when the ring is empty; Stop when the used ring cannot be
    /// written.
    fn hold_next_chain(&mut self, used: &mut bool) -> Option<RxStep> {
        let (head, parsed) = ChainBuffers::pop(&mut self.rx, &self.mem)?;
        let bad = match parsed {
            Err(e) => e.to_string(),
            Ok(b) if b.readable_len() != 0 => {
                "receive buffer with device-readable descriptors".into()
            }
            // Section 5.1.6.3.1: each buffer at least the header.
            Ok(b) if self.mrg_rxbuf && b.writable_len() < VNET_HDR_LEN as u64 => {
                "mergeable receive buffer shorter than the 12-byte header".into()
            }
            Ok(b) => {
                self.rx_held_len += b.writable_len();
                self.rx_held.push(b);
                return Some(RxStep::Next);
            }
        };
        self.count_bad(&bad);
        Some(self.give_rx(head, 0, used))
    }

    /// Holds receive chains for the next frame before it is read, so it
    /// is read straight into them: with mergeable buffers enough for the
    /// largest frame (or all the ring has), one chain without. Held
    /// chains stay for the frames after when the next one needs fewer.
    fn rx_hold_ahead(&mut self, used: &mut bool) -> RxStep {
        let size = usize::from(self.rx.size());
        // Bounded: bad chains posted as fast as they come back cannot
        // keep the thread here.
        for _ in 0..size {
            let enough = if self.mrg_rxbuf {
                self.rx_held_len >= MAX_PACKET as u64 || self.rx_held.len() >= size
            } else {
                !self.rx_held.is_empty()
            };
            if enough {
                break;
            }
            match self.hold_next_chain(used) {
                None => break,
                Some(RxStep::Stop) => return RxStep::Stop,
                Some(_) => {}
            }
        }
        RxStep::Next
    }

    /// Reads the next frame from the TAP with one `readv`: its header into
    /// `rx_frame` (the VMM's own copy, filled in before the guest gets
    /// it), the rest straight into the held receive chains (whole chains
    /// covering `rx_expect` bytes, as far as they lend themselves to it:
    /// each buffer within one memory region, at most [`RX_IOVECS`]
    /// pieces), and what does not fit them into `rx_frame`, at its offset
    /// in the frame. Returns the frame's length and how many of its first
    /// bytes the chains hold. The iovecs always take more than
    /// [`MAX_PACKET`] bytes: a TAP cuts a frame to its reader's iovecs
    /// silently, so a longer frame must read as longer to be dropped.
    fn read_frame(&mut self) -> io::Result<(usize, usize)> {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; RX_IOVECS];
        // iov[0] is the header, set below.
        let mut n = 1;
        // Bytes of the chains the iovecs cover: the frame's bytes 0..room
        // (less the header) go in place.
        let mut room = 0usize;
        'chains: for c in &self.rx_held {
            if room >= self.rx_expect {
                break;
            }
            let first = n;
            let mut skip = VNET_HDR_LEN.saturating_sub(room) as u64;
            for &(addr, len) in c.writable_buffers() {
                let len = u64::from(len);
                if skip >= len {
                    skip -= len;
                    continue;
                }
                // Each buffer is below 4 GiB.
                let piece = (len - skip) as usize;
                // One iovec stays for the tail.
                let slice = match addr.checked_add(skip).map(|a| self.mem.get_slice(a, piece)) {
                    Some(Ok(s)) if n + 1 < RX_IOVECS => s,
                    // Across two memory regions, or too many pieces: this
                    // chain and the ones after are filled by copy.
                    _ => {
                        n = first;
                        break 'chains;
                    }
                };
                skip = 0;
                iov[n] = libc::iovec {
                    iov_base: slice.ptr_guard_mut().as_ptr().cast(),
                    iov_len: slice.len(),
                };
                n += 1;
            }
            // Below 4 GiB per chain; room stops growing past rx_expect.
            room += c.writable_len() as usize;
        }
        let cap = self.rx_frame.len();
        let frame = self.rx_frame.as_mut_ptr();
        iov[0] = libc::iovec {
            iov_base: frame.cast(),
            iov_len: VNET_HDR_LEN,
        };
        let tail = room.max(VNET_HDR_LEN);
        if tail < cap {
            iov[n] = libc::iovec {
                iov_base: frame.wrapping_add(tail).cast(),
                iov_len: cap - tail,
            };
            n += 1;
        }
        // SAFETY: iov[..n] points at `rx_frame` (owned by self, not
        // otherwise borrowed during the call; the header and the tail
        // are disjoint, both within its `cap` bytes) and at guest RAM
        // checked by get_slice, each piece within one mapped region and
        // mapped as long as `self.mem` (no Xen mappings here, so the
        // pointer outlives its guard; no dirty bitmap to mark, the memory
        // being GuestMemoryMmap<()>). The kernel writes at most iov_len
        // bytes to each; guest RAM is never seen through a Rust
        // reference. n <= RX_IOVECS.
        let r = unsafe { libc::readv(self.tap.as_raw_fd(), iov.as_ptr(), n as libc::c_int) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // Not negative.
        let len = r as usize;
        self.rx_expect = if len > room {
            MAX_PACKET
        } else {
            len.max(self.rx_expect - self.rx_expect / 8)
        };
        Ok((len, room.min(len)))
    }

    /// Puts the pending `len`-byte frame in the next receive buffer, one
    /// chain per frame (no mergeable buffers).
    fn rx_single(&mut self, len: usize, used: &mut bool) -> RxStep {
        if self.rx_held.is_empty() {
            match self.hold_next_chain(used) {
                None => return RxStep::NoBuffers,
                Some(RxStep::Next) if !self.rx_held.is_empty() => {}
                // A malformed chain returned (the loop comes back), or Stop.
                Some(step) => return step,
            }
        }
        let room = self.rx_held[0].writable_len();
        if room < len as u64 {
            // Drop the frame, keep the buffer for the next one.
            self.drop_pending(len, room);
            return RxStep::Next;
        }
        self.give_frame(1, len, used)
    }

    /// Returns receive buffer `head` with `written` bytes; Stop when the
    /// used ring cannot be written.
    fn give_rx(&mut self, head: u16, written: u32, used: &mut bool) -> RxStep {
        if let Err(e) = self.rx.add_used(&self.mem, head, written) {
            self.count_bad(&format!("adding used RX buffer {head}: {e}"));
            return RxStep::Stop;
        }
        *used = true;
        RxStep::Next
    }

    /// Drops the pending `len`-byte frame: `room` bytes of buffers can
    /// never hold it.
    fn drop_pending(&mut self, len: usize, room: u64) {
        if self.metrics.rx_dropped.fetch_add(1, Ordering::Relaxed) == 0 {
            warn!("net: {len}-byte frame does not fit {room} bytes of receive buffers; dropped");
        }
        self.rx_pending = None;
        self.rx_in_place = 0;
    }

    /// Puts the pending `len`-byte frame in as many receive buffers as it
    /// takes (`VIRTIO_NET_F_MRG_RXBUF`, virtio 1.2 section 5.1.6.4):
    /// chains are taken from the ring and held until they hold the whole
    /// frame, then returned together, in order, the first one's header
    /// saying how many (`num_buffers`). Short of buffers, the frame and
    /// the chains already taken wait for the guest's next notification;
    /// nothing is truncated.
    fn rx_mergeable(&mut self, len: usize, used: &mut bool) -> RxStep {
        let need = len as u64;
        while self.rx_held_len < need {
            if self.rx_held.len() >= usize::from(self.rx.size()) {
                // Every buffer the ring can hold is taken and the frame
                // still does not fit: it never will. The buffers stay for
                // the next frame.
                self.drop_pending(len, self.rx_held_len);
                return RxStep::Next;
            }
            match self.hold_next_chain(used) {
                None => return RxStep::NoBuffers,
                Some(RxStep::Stop) => return RxStep::Stop,
                Some(_) => {}
            }
        }
        // The fewest held buffers that hold the frame (held chains may be
        // more than this one needs).
        let mut count = 0;
        let mut room = 0u64;
        while room < need {
            room += self.rx_held[count].writable_len();
            count += 1;
        }
        self.give_frame(count, len, used)
    }

    /// Gives the pending `len`-byte frame to the guest in the first
    /// `count` held chains, returned consecutively: the header from
    /// `rx_frame`, completed by [`Offloads::fill_rx`] (`num_buffers` =
    /// `count`), then the bytes that are not in place yet (past
    /// `rx_in_place`), copied from `rx_frame`.
    fn give_frame(&mut self, count: usize, len: usize, used: &mut bool) -> RxStep {
        // The part of the frame chain `c` takes at frame offset `off`:
        // below MAX_PACKET.
        let part = |c: &ChainBuffers, off: usize| c.writable_len().min((len - off) as u64) as usize;
        // count <= queue size <= 32768.
        self.offloads
            .fill_rx(&mut self.rx_frame[..VNET_HDR_LEN], count as u16);
        let chains = &self.rx_held[..count];
        let copy_from = self.rx_in_place.max(VNET_HDR_LEN);
        let mut ok = chains.first().is_some_and(|c| {
            c.write_at(&self.mem, 0, &self.rx_frame[..VNET_HDR_LEN])
                .is_ok()
        });
        let mut off = 0;
        for c in chains {
            let end = off + part(c, off);
            let from = copy_from.max(off);
            if from < end {
                ok &= c
                    .write_at(&self.mem, (from - off) as u64, &self.rx_frame[from..end])
                    .is_ok();
            }
            off = end;
        }
        if ok {
            self.count_rx(len);
            if copy_from < len {
                self.metrics.rx_copied.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            // Parsed buffers lie in guest RAM, so only a change of guest
            // memory gets here: each buffer goes back empty (a runt the
            // driver drops), the frame with them.
            self.count_bad("receive buffer outside guest memory");
            self.metrics.rx_dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.rx_pending = None;
        self.rx_in_place = 0;
        let mut step = RxStep::Next;
        let mut off = 0;
        for i in 0..count {
            let c = &self.rx_held[i];
            let (head, n) = (c.head, part(c, off));
            off += n;
            // n <= MAX_PACKET.
            let written = if ok { n as u32 } else { 0 };
            if let RxStep::Stop = self.give_rx(head, written, used) {
                step = RxStep::Stop;
                break;
            }
        }
        let gone: u64 = self.rx_held.drain(..count).map(|c| c.writable_len()).sum();
        self.rx_held_len -= gone;
        step
    }

    fn count_rx(&self, len: usize) {
        self.metrics.rx_frames.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .rx_bytes
            .fetch_add((len - VNET_HDR_LEN) as u64, Ordering::Relaxed);
    }

    /// Writes the chain's frame to the TAP straight from guest memory
    /// (one `writev`, no copy of the payload): the header from a local
    /// copy, filtered as [`Offloads::filter_tx`] says (so the guest cannot
    /// change it between the filter and the TAP's checks), the rest from
    /// the chain's buffers. None when the chain does not lend itself (more
    /// than [`TX_IOVECS`] pieces, a buffer across two memory regions, a
    /// header that cannot be read): the caller copies instead.
    fn send_gather(&self, b: &ChainBuffers) -> Option<io::Result<usize>> {
        let mut hdr = [0u8; VNET_HDR_LEN];
        b.read_at(&self.mem, 0, &mut hdr).ok()?;
        self.offloads.filter_tx(&mut hdr);
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; TX_IOVECS];
        iov[0] = libc::iovec {
            iov_base: hdr.as_mut_ptr().cast(),
            iov_len: hdr.len(),
        };
        let mut n = 1;
        let mut skip = VNET_HDR_LEN as u64;
        for &(addr, len) in b.readable_buffers() {
            let len = u64::from(len);
            if skip >= len {
                skip -= len;
                continue;
            }
            // Each buffer is below 4 GiB and the frame below MAX_PACKET.
            let piece = (len - skip) as usize;
            let slice = self.mem.get_slice(addr.checked_add(skip)?, piece).ok()?;
            skip = 0;
            *iov.get_mut(n)? = libc::iovec {
                iov_base: slice.ptr_guard().as_ptr().cast_mut().cast(),
                iov_len: slice.len(),
            };
            n += 1;
        }
        // SAFETY: iov[..n] points at `hdr`, alive on this frame, and at
        // guest RAM checked by get_slice, mapped as long as `self.mem`
        // (no Xen mappings here, so the pointer outlives its guard); the
        // kernel only reads them. n <= TX_IOVECS.
        let r = unsafe { libc::writev(self.tap.as_raw_fd(), iov.as_ptr(), n as libc::c_int) };
        Some(if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            // Not negative.
            Ok(r as usize)
        })
    }

    /// Sends every frame the guest queued. The guest's notifications are
    /// suppressed while the ring is drained (section 2.7.10: the used
    /// ring's flag, or with EVENT_IDX a stale `avail_event`) and asked for
    /// again, with a last look at the ring, when it is empty.
    fn process_tx(&mut self) {
        let mut used = false;
        // Bounded so RX gets its turn against a guest that keeps sending;
        // the TX eventfd brings us back.
        let mut budget = usize::from(self.tx.size()).max(1) * 4;
        'ring: loop {
            // Fails only on a used ring outside RAM, which add_used reports.
            let _ = self.tx.disable_notification(&self.mem);
            let mut popped = false;
            while let Some((head, parsed)) = ChainBuffers::pop(&mut self.tx, &self.mem) {
                popped = true;
                match parsed {
                    Err(e) => self.count_bad(&e.to_string()),
                    Ok(b) if b.writable_len() != 0 => {
                        self.count_bad("transmit buffer with device-writable descriptors")
                    }
                    Ok(b) => self.send(&b),
                }
                if let Err(e) = self.tx.add_used(&self.mem, head, 0) {
                    self.count_bad(&format!("adding used TX buffer {head}: {e}"));
                    break 'ring;
                }
                used = true;
                budget -= 1;
                if budget == 0 {
                    self.reschedule(&self.tx_evt);
                    break 'ring;
                }
            }
            match self.tx.enable_notification(&self.mem) {
                // More came in between. (Nothing popped although the index
                // says more: an index the ring cannot hold; wait for a kick.)
                Ok(true) if popped => continue,
                Ok(_) => break,
                Err(e) => {
                    self.count_bad(&format!("re-enabling TX notifications: {e}"));
                    break;
                }
            }
        }
        if used {
            self.notify(TX_QUEUE);
        }
    }

    fn send(&mut self, b: &ChainBuffers) {
        let len = b.readable_len();
        if len < (VNET_HDR_LEN + ETH_HLEN) as u64 || len > MAX_PACKET as u64 {
            self.count_bad("transmit frame shorter than its headers or longer than 64 KiB");
            return;
        }
        // Checked above: len <= MAX_PACKET.
        let len = len as usize;
        let written = match self.send_gather(b) {
            Some(r) => r,
            None => {
                if b.read_at(&self.mem, 0, &mut self.tx_frame[..len]).is_err() {
                    self.count_bad("transmit buffer outside guest memory");
                    return;
                }
                // Offload requests the driver did not negotiate must not
                // reach the TAP.
                self.offloads.filter_tx(&mut self.tx_frame[..len]);
                (&*self.tap).write(&self.tx_frame[..len])
            }
        };
        match written {
            Ok(_) => {
                self.metrics.tx_frames.fetch_add(1, Ordering::Relaxed);
                self.metrics
                    .tx_bytes
                    .fetch_add((len - VNET_HDR_LEN) as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.metrics.tx_dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.metrics.tx_dropped.fetch_add(1, Ordering::Relaxed);
                self.tap_error("writing to", &e);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
