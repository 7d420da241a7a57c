//! virtio-console (virtio 1.2 section 5.3) without multiport: receiveq 0
//! (host to guest) and transmitq 1 (guest to host), the guest's `hvc0`.
//!
//! Output goes to a host writer (stdout, a file, or nowhere); input comes
//! from an optional [`ConsoleInput`] that another thread fills. Chains are
//! guest data: a transmit chain must be device-readable and a receive chain
//! device-writable; anything else is returned unused and counted.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use log::warn;
use vmm_sys_util::eventfd::EventFd;

use super::chain::ChainBuffers;
use super::fault::{guest_fault, ignored_config_write};
use super::{
    read_config_from_slice, take_queues, ActivateError, ActiveQueue, DeviceCounters,
    GuestMemoryMmap, Queue, QueueT, VirtioDevice, VirtioInterrupt, VirtioInterruptType,
    VIRTIO_F_VERSION_1,
};
use crate::event_loop::{EventHandler, LoopContext};

/// Virtio device id of a console.
pub const VIRTIO_ID_CONSOLE: u32 = 3;
/// Size of each queue.
pub const CONSOLE_QUEUE_SIZE: u16 = 256;
/// Host input kept while the guest posts no receive buffer; more is dropped.
pub const MAX_PENDING_INPUT: usize = 64 * 1024;
/// Output copied per step, so a huge chain needs no huge buffer.
const CHUNK: usize = 4096;

const RX_TOKEN: u64 = 0;
const TX_TOKEN: u64 = 1;
const INPUT_TOKEN: u64 = 2;

/// Bytes from the host for the guest, shared with the thread that reads
/// them; `event` is written whenever bytes are added.
pub struct ConsoleInput {
    /// Pending bytes.
    pub buffer: Mutex<VecDeque<u8>>,
    /// Signals new bytes.
    pub event: EventFd,
    /// Bytes dropped because [`MAX_PENDING_INPUT`] was reached.
    pub dropped: AtomicU64,
}

impl ConsoleInput {
    /// An empty input.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            buffer: Mutex::new(VecDeque::new()),
            event: EventFd::new(libc::EFD_NONBLOCK)?,
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues `data` for the guest (dropping what does not fit).
    pub fn push(&self, data: &[u8]) {
        let mut b = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        let room = MAX_PENDING_INPUT.saturating_sub(b.len());
        b.extend(&data[..data.len().min(room)]);
        let lost = data.len().saturating_sub(room) as u64;
        drop(b);
        if lost > 0 {
            self.dropped.fetch_add(lost, Ordering::Relaxed);
        }
        let _ = self.event.write(1);
    }
}

/// What the device has done, for `vm.counters`.
#[derive(Debug, Default)]
pub struct ConsoleMetrics {
    /// Bytes the guest wrote.
    pub tx_bytes: AtomicU64,
    /// Bytes handed to the guest.
    pub rx_bytes: AtomicU64,
    /// Chains rejected: wrong direction or outside guest RAM.
    pub bad_descriptors: AtomicU64,
    /// Writes to the host output that failed.
    pub output_errors: AtomicU64,
    /// Guest writes to the configuration space, ignored.
    pub config_writes: AtomicU64,
}

impl DeviceCounters for ConsoleMetrics {
    fn snapshot(&self) -> std::collections::BTreeMap<String, u64> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        super::named_counters(&[
            ("tx_bytes", l(&self.tx_bytes)),
            ("rx_bytes", l(&self.rx_bytes)),
            ("bad_descriptors", l(&self.bad_descriptors)),
            ("output_errors", l(&self.output_errors)),
            ("config_writes", l(&self.config_writes)),
        ])
    }
}

/// The console device.
pub struct Console {
    output: Arc<Mutex<Box<dyn Write + Send>>>,
    input: Option<Arc<ConsoleInput>>,
    metrics: Arc<ConsoleMetrics>,
}

impl Console {
    /// A console writing to `output` and reading from `input`, if any.
    pub fn new(output: Box<dyn Write + Send>, input: Option<Arc<ConsoleInput>>) -> Self {
        Self {
            output: Arc::new(Mutex::new(output)),
            input,
            metrics: Arc::new(ConsoleMetrics::default()),
        }
    }

    /// The device's counters (shared with its thread).
    pub fn metrics(&self) -> Arc<ConsoleMetrics> {
        self.metrics.clone()
    }
}

impl VirtioDevice for Console {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_CONSOLE
    }

    fn queue_max_sizes(&self) -> Vec<u16> {
        vec![CONSOLE_QUEUE_SIZE, CONSOLE_QUEUE_SIZE]
    }

    fn features(&self) -> u64 {
        1 << VIRTIO_F_VERSION_1
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // cols, rows, max_nr_ports, emerg_wr: meaningless without
        // SIZE/MULTIPORT/EMERG_WRITE, so all zero.
        read_config_from_slice(&[0u8; 12], offset, data);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        ignored_config_write(
            &self.metrics.config_writes,
            "console",
            offset,
            data,
            "EMERG_WRITE not offered",
        );
    }

    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Box<dyn EventHandler>, ActivateError> {
        let [rx, tx] = take_queues(queues, [0, 1])?;
        Ok(Box::new(Port {
            mem,
            interrupt,
            rx: rx.queue,
            rx_evt: rx.event,
            tx: tx.queue,
            tx_evt: tx.event,
            output: self.output.clone(),
            input: self.input.clone(),
            metrics: self.metrics.clone(),
        }))
    }

    fn counters(&self) -> Arc<dyn DeviceCounters> {
        self.metrics.clone()
    }
}

/// The device thread's state.
struct Port {
    mem: GuestMemoryMmap,
    interrupt: Arc<dyn VirtioInterrupt>,
    rx: Queue,
    rx_evt: EventFd,
    tx: Queue,
    tx_evt: EventFd,
    output: Arc<Mutex<Box<dyn Write + Send>>>,
    input: Option<Arc<ConsoleInput>>,
    metrics: Arc<ConsoleMetrics>,
}

impl EventHandler for Port {
    fn watch(&self) -> Vec<(RawFd, u64)> {
        let mut watch = vec![
            (self.rx_evt.as_raw_fd(), RX_TOKEN),
            (self.tx_evt.as_raw_fd(), TX_TOKEN),
        ];
        if let Some(i) = &self.input {
            watch.push((i.event.as_raw_fd(), INPUT_TOKEN));
        }
        watch
    }

    fn start(&mut self, _ctx: &mut LoopContext<'_>) {
        self.transmit();
        self.receive();
    }

    fn event(&mut self, token: u64, _ctx: &mut LoopContext<'_>) {
        match token {
            TX_TOKEN => {
                let _ = self.tx_evt.read();
                self.transmit();
            }
            RX_TOKEN => {
                let _ = self.rx_evt.read();
                self.receive();
            }
            _ => {
                if let Some(i) = &self.input {
                    let _ = i.event.read();
                }
                self.receive();
            }
        }
    }
}

impl Port {
    fn bad(&self, what: &str) {
        guest_fault(
            &self.metrics.bad_descriptors,
            "console",
            format_args!("malformed chain ({what}); returned unused"),
        );
    }

    fn notify(&mut self, queue: u16) {
        let q = if queue == 0 {
            &mut self.rx
        } else {
            &mut self.tx
        };
        if q.needs_notification(&self.mem).unwrap_or(true) {
            if let Err(e) = self.interrupt.trigger(VirtioInterruptType::Queue(queue)) {
                warn!("console: raising the queue interrupt: {e}");
            }
        }
    }

    /// Writes every pending transmit chain to the output; returns how many
    /// chains were completed.
    fn transmit(&mut self) -> usize {
        let mut done = 0;
        let mut buf = vec![0u8; CHUNK];
        while let Some((head, parsed)) = ChainBuffers::pop(&mut self.tx, &self.mem) {
            match parsed {
                Ok(b) if b.writable_len() == 0 => self.write_out(&b, &mut buf),
                Ok(_) => self.bad("device-writable buffer on the transmit queue"),
                Err(e) => self.bad(&e.to_string()),
            }
            if let Err(e) = self.tx.add_used(&self.mem, head, 0) {
                self.bad(&format!("adding used buffer {head}: {e}"));
                continue;
            }
            done += 1;
        }
        if done > 0 {
            self.notify(1);
        }
        done
    }

    fn write_out(&self, b: &ChainBuffers, buf: &mut [u8]) {
        let mut out = self.output.lock().unwrap_or_else(|p| p.into_inner());
        let mut at = 0u64;
        while at < b.readable_len() {
            // CHUNK fits in u64 and the remainder is below CHUNK.
            let n = (b.readable_len() - at).min(CHUNK as u64) as usize;
            if let Err(e) = b.read_at(&self.mem, at, &mut buf[..n]) {
                drop(out);
                self.bad(&e.to_string());
                return;
            }
            if out.write_all(&buf[..n]).is_err() {
                self.metrics.output_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.metrics.tx_bytes.fetch_add(n as u64, Ordering::Relaxed);
            at += n as u64;
        }
        let _ = out.flush();
    }

    /// Moves pending input into receive buffers; returns the bytes delivered.
    fn receive(&mut self) -> usize {
        let Some(input) = self.input.clone() else {
            return 0;
        };
        let mut delivered = 0;
        let mut used = 0;
        loop {
            let mut pending = input.buffer.lock().unwrap_or_else(|p| p.into_inner());
            if pending.is_empty() {
                break;
            }
            let Some((head, parsed)) = ChainBuffers::pop(&mut self.rx, &self.mem) else {
                break; // kept until the guest posts a buffer (RX_TOKEN)
            };
            let mut written = 0u32;
            match parsed {
                Ok(b) if b.readable_len() == 0 => {
                    // Bounded by MAX_PENDING_INPUT, so it fits in u32.
                    let n = pending
                        .len()
                        .min(usize::try_from(b.writable_len()).unwrap_or(usize::MAX));
                    let data: Vec<u8> = pending.iter().take(n).copied().collect();
                    match b.write_at(&self.mem, 0, &data) {
                        Ok(()) => {
                            pending.drain(..n);
                            written = n as u32;
                        }
                        Err(e) => self.bad(&e.to_string()),
                    }
                }
                Ok(_) => self.bad("device-readable buffer on the receive queue"),
                Err(e) => self.bad(&e.to_string()),
            }
            drop(pending);
            if let Err(e) = self.rx.add_used(&self.mem, head, written) {
                self.bad(&format!("adding used buffer {head}: {e}"));
                break;
            }
            used += 1;
            delivered += written as usize;
        }
        self.metrics
            .rx_bytes
            .fetch_add(delivered as u64, Ordering::Relaxed);
        if used > 0 {
            self.notify(0);
        }
        delivered
    }
}

#[cfg(test)]
mod tests;
