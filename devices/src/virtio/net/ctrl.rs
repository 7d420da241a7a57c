//! The control queue of a multiqueue NIC (virtio 1.2 section 5.1.6.5):
//! only `VIRTIO_NET_CTRL_MQ` / `VQ_PAIRS_SET` is implemented, the one
//! command a driver sends when it negotiated `VIRTIO_NET_F_MQ` and none of
//! the other control features (RX mode, MAC and VLAN filters, announce,
//! RSS are not offered). Every other command is answered
//! `VIRTIO_NET_ERR`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use log::{info, warn};
use virtio_bindings::virtio_net::{
    VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MIN, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET,
    VIRTIO_NET_ERR, VIRTIO_NET_OK,
};
use vmm_sys_util::eventfd::EventFd;

use super::NetMetrics;
use crate::virtio::chain::ChainBuffers;
use crate::virtio::fault::guest_fault;
use crate::virtio::tap::TapQueues;
use crate::virtio::{GuestMemoryMmap, Queue, QueueT, VirtioInterrupt, VirtioInterruptType};

/// The control queue, served on the thread of queue pair 0.
pub(super) struct CtrlQueue {
    pub(super) queue: Queue,
    pub(super) evt: EventFd,
    /// Its queue index (2 x pairs), which is also its interrupt source.
    pub(super) index: u16,
    pub(super) taps: Arc<TapQueues>,
    /// Whether the driver negotiated `VIRTIO_NET_F_MQ`: without it the
    /// MQ class is not the driver's to use.
    pub(super) mq: bool,
    pub(super) metrics: Arc<NetMetrics>,
}

/// What a well-formed command asks for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Command {
    /// `VQ_PAIRS_SET` with this many pairs.
    SetPairs(u16),
    /// Anything else: class, command.
    Other(u8, u8),
}

/// Decodes a command from the device-readable part of a chain: the
/// `virtio_net_ctrl_hdr` (class, command) and its data.
pub(super) fn decode(b: &ChainBuffers, mem: &GuestMemoryMmap) -> Result<Command, &'static str> {
    let mut hdr = [0u8; 2];
    if b.readable_len() < 2 || b.read_at(mem, 0, &mut hdr).is_err() {
        return Err("control command without a readable header");
    }
    let (class, cmd) = (hdr[0], hdr[1]);
    if u32::from(class) != VIRTIO_NET_CTRL_MQ || u32::from(cmd) != VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET {
        return Ok(Command::Other(class, cmd));
    }
    let mut pairs = [0u8; 2];
    if b.readable_len() < 4 || b.read_at(mem, 2, &mut pairs).is_err() {
        return Err("VQ_PAIRS_SET without its 2-byte pair count");
    }
    Ok(Command::SetPairs(u16::from_le_bytes(pairs)))
}

impl CtrlQueue {
    /// Answers every command on the queue and raises its interrupt if the
    /// driver wants one.
    pub(super) fn process(&mut self, mem: &GuestMemoryMmap, interrupt: &dyn VirtioInterrupt) {
        let mut used = false;
        // With EVENT_IDX the driver kicks only when told to (avail_event):
        // re-enable after draining, and drain again if it added meanwhile.
        // Bounded: at most a ring's worth of rounds.
        for _ in 0..=self.queue.size() {
            used |= self.drain(mem);
            if !self.queue.enable_notification(mem).unwrap_or(false) {
                break;
            }
        }
        if used && self.queue.needs_notification(mem).unwrap_or(true) {
            if let Err(e) = interrupt.trigger(VirtioInterruptType::Queue(self.index)) {
                warn!("net: raising the control queue interrupt: {e}");
            }
        }
    }

    /// Answers the commands on the ring; returns whether any was.
    fn drain(&mut self, mem: &GuestMemoryMmap) -> bool {
        let mut used = false;
        while let Some((head, parsed)) = ChainBuffers::pop(&mut self.queue, mem) {
            let len = match parsed {
                Err(e) => {
                    self.bad(&e.to_string());
                    0
                }
                Ok(b) if b.writable_len() == 0 => {
                    self.bad("control command without a writable ack byte");
                    0
                }
                Ok(b) => {
                    let ack = match decode(&b, mem) {
                        Ok(cmd) => self.execute(cmd),
                        Err(why) => {
                            self.bad(why);
                            VIRTIO_NET_ERR as u8
                        }
                    };
                    match b.write_at(mem, 0, &[ack]) {
                        Ok(()) => 1,
                        Err(_) => {
                            self.bad("ack byte outside guest memory");
                            0
                        }
                    }
                }
            };
            if let Err(e) = self.queue.add_used(mem, head, len) {
                self.bad(&format!("adding used control buffer {head}: {e}"));
                break;
            }
            used = true;
        }
        used
    }

    fn execute(&mut self, cmd: Command) -> u8 {
        self.metrics.ctrl_commands.fetch_add(1, Ordering::Relaxed);
        let max = self.taps.len();
        let refused = |metrics: &NetMetrics, what: std::fmt::Arguments<'_>| {
            guest_fault(&metrics.ctrl_refused, "net", what);
            VIRTIO_NET_ERR as u8
        };
        match cmd {
            Command::SetPairs(n) if !self.mq => refused(
                &self.metrics,
                format_args!("VQ_PAIRS_SET {n} without VIRTIO_NET_F_MQ negotiated"),
            ),
            Command::SetPairs(n)
                if n < VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MIN as u16 || usize::from(n) > max =>
            {
                refused(
                    &self.metrics,
                    format_args!("VQ_PAIRS_SET {n}: the device has 1..={max} pairs"),
                )
            }
            Command::SetPairs(n) => match self.taps.enable(usize::from(n)) {
                Ok(()) => {
                    info!("net: guest uses {n} of {max} queue pairs");
                    VIRTIO_NET_OK as u8
                }
                Err(e) => {
                    self.metrics.tap_errors.fetch_add(1, Ordering::Relaxed);
                    warn!("net: VQ_PAIRS_SET {n}: {e}");
                    VIRTIO_NET_ERR as u8
                }
            },
            Command::Other(class, cmd) => refused(
                &self.metrics,
                format_args!("control class {class} command {cmd} is not supported"),
            ),
        }
    }

    fn bad(&self, why: &str) {
        guest_fault(
            &self.metrics.bad_descriptors,
            "net",
            format_args!("control queue: {why}"),
        );
    }
}
