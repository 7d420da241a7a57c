//! The virtio-mmio transport, "modern" register layout (version 2), as in
//! virtio 1.2 section 4.2.
//!
//! One [`MmioTransport`] owns a 4 KiB window ([`MMIO_WINDOW_SIZE`]) on the
//! VMM's MMIO [`Bus`](crate::Bus). Wiring it into a VM takes three steps,
//! all done by the VMM (this crate never calls KVM):
//!
//! 1. the transport's interrupt eventfd ([`MmioTransport::irq_evt`]) is
//!    registered as a KVM irqfd for the window's GSI (edge triggered; the
//!    ACPI DSDT describes the window as an `LNRO0005` device with that GSI);
//! 2. each queue eventfd ([`MmioTransport::queue_evts`], index `i`) is
//!    registered as a KVM ioeventfd at `base + MMIO_NOTIFY_OFFSET`, 4 bytes,
//!    with datamatch `i`, so guest notifications never leave the kernel;
//!    a notification that does reach the bus (no ioeventfd registered)
//!    signals the same eventfd, so both paths work;
//! 3. the transport is inserted on the MMIO bus at `base` with length
//!    [`MMIO_WINDOW_SIZE`].
//!
//! Everything the driver writes is checked here before the device sees it:
//! status transitions follow section 3.1.1, feature bits must be a subset of
//! what the device offered and include `VIRTIO_F_VERSION_1`, queue sizes
//! must be powers of two no larger than the device's maximum, and ring
//! addresses must be aligned and inside guest memory.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use log::{debug, warn};
use virtio_queue::{Queue, QueueT};
use vmm_sys_util::eventfd::EventFd;

use super::{
    status, ActiveQueue, GuestMemoryMmap, VirtioDevice, VirtioInterrupt, VirtioInterruptType,
    VIRTIO_F_VERSION_1,
};
use crate::event_loop::{EventHandler, LoopHandle};
use crate::{BusDevice, IrqTrigger};

/// How long a driver's reset (a vCPU thread) waits for the device thread
/// to drop the data path. A device thread checks for commands between
/// requests, so this is rarely reached; past it the vCPU returns and
/// Status reads non-zero until the device thread is done (drivers poll
/// Status after a reset, section 2.4.1).
pub const RESET_WAIT: Duration = Duration::from_millis(50);

/// Size of one virtio-mmio window.
pub const MMIO_WINDOW_SIZE: u64 = 0x1000;
/// Offset of the QueueNotify register inside a window: where the VMM
/// registers the queue ioeventfds (datamatch = queue index).
pub const MMIO_NOTIFY_OFFSET: u64 = 0x50;

const MAGIC_VALUE: u32 = 0x7472_6976; // "virt"
const MMIO_VERSION: u32 = 2;
const VENDOR_ID: u32 = 0;

// Register offsets (virtio 1.2 section 4.2.2, table "MMIO Device Register Layout").
const REG_MAGIC: u64 = 0x000;
const REG_VERSION: u64 = 0x004;
const REG_DEVICE_ID: u64 = 0x008;
const REG_VENDOR_ID: u64 = 0x00c;
const REG_DEVICE_FEATURES: u64 = 0x010;
const REG_DEVICE_FEATURES_SEL: u64 = 0x014;
const REG_DRIVER_FEATURES: u64 = 0x020;
const REG_DRIVER_FEATURES_SEL: u64 = 0x024;
const REG_QUEUE_SEL: u64 = 0x030;
const REG_QUEUE_NUM_MAX: u64 = 0x034;
const REG_QUEUE_NUM: u64 = 0x038;
const REG_QUEUE_READY: u64 = 0x044;
const REG_QUEUE_NOTIFY: u64 = MMIO_NOTIFY_OFFSET;
const REG_INTERRUPT_STATUS: u64 = 0x060;
const REG_INTERRUPT_ACK: u64 = 0x064;
const REG_STATUS: u64 = 0x070;
const REG_QUEUE_DESC_LOW: u64 = 0x080;
const REG_QUEUE_DESC_HIGH: u64 = 0x084;
const REG_QUEUE_DRIVER_LOW: u64 = 0x090;
const REG_QUEUE_DRIVER_HIGH: u64 = 0x094;
const REG_QUEUE_DEVICE_LOW: u64 = 0x0a0;
const REG_QUEUE_DEVICE_HIGH: u64 = 0x0a4;
const REG_SHM_SEL: u64 = 0x0ac;
const REG_SHM_LEN_LOW: u64 = 0x0b0;
const REG_SHM_BASE_HIGH: u64 = 0x0bc;
const REG_CONFIG_GENERATION: u64 = 0x0fc;
const CONFIG_SPACE: u64 = 0x100;

/// InterruptStatus bit: a used buffer was added to a queue.
pub const INT_USED_BUFFER: u32 = virtio_bindings::virtio_mmio::VIRTIO_MMIO_INT_VRING;
/// InterruptStatus bit: the configuration space changed.
pub const INT_CONFIG_CHANGE: u32 = virtio_bindings::virtio_mmio::VIRTIO_MMIO_INT_CONFIG;

/// The interrupt side of a virtio-mmio window: the InterruptStatus bits,
/// the configuration generation counter and the eventfd KVM turns into a
/// GSI edge. Shared between the transport and the device's threads.
///
/// A paused interrupt (the VM is paused) records its status bits but does
/// not signal the GSI until it is resumed.
#[derive(Debug)]
pub struct MmioInterrupt {
    status: AtomicU32,
    config_generation: AtomicU32,
    irq: IrqTrigger,
    paused: AtomicBool,
    deferred: AtomicBool,
    signalled: AtomicU64,
}

impl MmioInterrupt {
    /// A new interrupt using `irq`.
    pub fn new(irq: IrqTrigger) -> Self {
        Self {
            status: AtomicU32::new(0),
            config_generation: AtomicU32::new(0),
            irq,
            paused: AtomicBool::new(false),
            deferred: AtomicBool::new(false),
            signalled: AtomicU64::new(0),
        }
    }

    /// Holds interrupts back: they are recorded, not signalled. The caller
    /// orders this against the device thread (pause it after this).
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Signals the GSI if an interrupt was held back, and lets later ones
    /// through.
    pub fn resume(&self) -> std::io::Result<()> {
        self.paused.store(false, Ordering::SeqCst);
        if self.deferred.swap(false, Ordering::SeqCst) {
            self.signal()?;
        }
        Ok(())
    }

    /// How many times the GSI was signalled.
    pub fn signalled(&self) -> u64 {
        self.signalled.load(Ordering::Relaxed)
    }

    fn signal(&self) -> std::io::Result<()> {
        self.signalled.fetch_add(1, Ordering::Relaxed);
        self.irq.0.write(1)
    }

    /// Current InterruptStatus register value.
    pub fn status(&self) -> u32 {
        self.status.load(Ordering::SeqCst)
    }

    /// Current ConfigGeneration register value.
    pub fn config_generation(&self) -> u32 {
        self.config_generation.load(Ordering::SeqCst)
    }

    /// The eventfd to register as a KVM irqfd.
    pub fn irq_evt(&self) -> &EventFd {
        &self.irq.0
    }

    fn ack(&self, bits: u32) {
        self.status.fetch_and(!bits, Ordering::SeqCst);
    }

    fn clear(&self) {
        self.status.store(0, Ordering::SeqCst);
    }
}

impl MmioInterrupt {
    /// Records `int_type` in InterruptStatus (and bumps ConfigGeneration
    /// for a configuration change) without signalling: virtio-pci keeps
    /// the same status for its ISR register and signals MSI-X itself.
    pub(crate) fn latch(&self, int_type: VirtioInterruptType) {
        let bit = match int_type {
            VirtioInterruptType::Config => {
                // Section 4.2.2: ConfigGeneration changes whenever the
                // configuration space may have changed.
                self.config_generation.fetch_add(1, Ordering::SeqCst);
                INT_CONFIG_CHANGE
            }
            VirtioInterruptType::Queue(_) => INT_USED_BUFFER,
        };
        self.status.fetch_or(bit, Ordering::SeqCst);
    }

    /// Reads and clears InterruptStatus (virtio-pci's ISR is read-to-clear).
    pub(crate) fn take_status(&self) -> u32 {
        self.status.swap(0, Ordering::SeqCst)
    }
}

impl VirtioInterrupt for MmioInterrupt {
    fn trigger(&self, int_type: VirtioInterruptType) -> std::io::Result<()> {
        self.latch(int_type);
        if self.paused.load(Ordering::SeqCst) {
            self.deferred.store(true, Ordering::SeqCst);
            return Ok(());
        }
        self.signal()
    }
}

/// Kinds of driver mistakes, each logged once per transport.
#[derive(Clone, Copy)]
enum Misuse {
    Access = 0,
    Status,
    Features,
    QueueWrite,
    QueueValue,
    Activate,
    Notify,
}

/// A virtio-mmio (version 2) window in front of one [`VirtioDevice`].
pub struct MmioTransport {
    device: Arc<Mutex<dyn VirtioDevice>>,
    /// The device's threads: the loop given to [`MmioTransport::new`],
    /// then its [`LoopHandle::workers`] (a multiqueue device). Activation
    /// hands data path `i` to thread `i`; a reset waits for all.
    event_loops: Vec<LoopHandle>,
    /// Resets the device threads have not carried out yet (loop index,
    /// ticket): Status reads non-zero and the driver cannot start again
    /// until they have.
    reset_pending: Vec<(usize, u64)>,
    /// Resets that took longer than [`RESET_WAIT`].
    slow_resets: u64,
    mem: GuestMemoryMmap,
    interrupt: Arc<MmioInterrupt>,
    /// What the device interrupts through, when not `interrupt` (the
    /// virtio-pci transport reuses this state machine with MSI-X).
    device_interrupt: Option<Arc<dyn VirtioInterrupt>>,
    queue_evts: Vec<EventFd>,
    queues: Vec<Queue>,
    /// A queue whose size or address the driver set to something invalid:
    /// activation will fail with DEVICE_NEEDS_RESET.
    queue_bad: Vec<bool>,
    queue_select: u32,
    device_features_select: u32,
    driver_features_select: u32,
    driver_features: u64,
    status: u32,
    activated: bool,
    warned: u32,
}

impl MmioTransport {
    /// A transport for `device`, accessing `mem`, interrupting through
    /// `irq`; the device's data path runs on the loop behind `event_loop`.
    ///
    /// Creates one notification eventfd per queue the device can have at
    /// most (the length of its first [`VirtioDevice::queue_max_sizes`]).
    pub fn new(
        device: Arc<Mutex<dyn VirtioDevice>>,
        mem: GuestMemoryMmap,
        irq: IrqTrigger,
        event_loop: LoopHandle,
    ) -> std::io::Result<Self> {
        let max_sizes = lock(&device).queue_max_sizes();
        let queue_evts = max_sizes
            .iter()
            .map(|_| EventFd::new(libc::EFD_NONBLOCK))
            .collect::<std::io::Result<Vec<_>>>()?;
        // A reset drops notifications the old driver left behind, on the
        // device thread (a vCPU reads no descriptor).
        let notifiers = queue_evts
            .iter()
            .map(EventFd::try_clone)
            .collect::<std::io::Result<Vec<_>>>()?;
        event_loop.drain_on_reset(notifiers)?;
        let mut transport = Self {
            device,
            event_loops: std::iter::once(event_loop.clone())
                .chain(event_loop.workers().iter().cloned())
                .collect(),
            reset_pending: Vec::new(),
            slow_resets: 0,
            mem,
            interrupt: Arc::new(MmioInterrupt::new(irq)),
            device_interrupt: None,
            queue_evts,
            queues: Vec::new(),
            queue_bad: Vec::new(),
            queue_select: 0,
            device_features_select: 0,
            driver_features_select: 0,
            driver_features: 0,
            status: 0,
            activated: false,
            warned: 0,
        };
        transport.build_queues(&max_sizes)?;
        Ok(transport)
    }

    /// Queue notification eventfds, by queue index. Register each as a KVM
    /// ioeventfd at `base + MMIO_NOTIFY_OFFSET` (4 bytes) with datamatch =
    /// its index.
    pub fn queue_evts(&self) -> &[EventFd] {
        &self.queue_evts
    }

    /// The interrupt eventfd to register as a KVM irqfd for this window's GSI.
    pub fn irq_evt(&self) -> &EventFd {
        self.interrupt.irq_evt()
    }

    /// The interrupt state shared with the device.
    pub fn interrupt(&self) -> Arc<MmioInterrupt> {
        self.interrupt.clone()
    }

    /// Makes the device interrupt through `interrupt` instead of this
    /// window's GSI (InterruptStatus is then `interrupt`'s business).
    pub(crate) fn set_device_interrupt(&mut self, interrupt: Arc<dyn VirtioInterrupt>) {
        self.device_interrupt = Some(interrupt);
    }

    /// How many queues the device has now.
    pub(crate) fn num_queues(&self) -> usize {
        self.queues.len()
    }

    /// Queue `index`'s size and ring addresses (descriptor table, driver
    /// area, device area), as the driver set them.
    pub(crate) fn queue_layout(&self, index: usize) -> Option<(u16, u64, u64, u64)> {
        self.queues
            .get(index)
            .map(|q| (q.size(), q.desc_table(), q.avail_ring(), q.used_ring()))
    }

    /// The device behind this window.
    pub fn device(&self) -> Arc<Mutex<dyn VirtioDevice>> {
        self.device.clone()
    }

    /// The Status register.
    pub fn status(&self) -> u32 {
        self.status
    }

    /// Whether the device was activated (DRIVER_OK accepted).
    pub fn is_activated(&self) -> bool {
        self.activated
    }

    /// Resets that did not finish within [`RESET_WAIT`] (the vCPU went
    /// back to the guest and the driver polled Status).
    pub fn slow_resets(&self) -> u64 {
        self.slow_resets
    }

    /// Whether a reset is still being carried out by the device thread.
    fn reset_in_progress(&mut self) -> bool {
        let loops = &self.event_loops;
        self.reset_pending
            .retain(|&(i, ticket)| !loops[i].reset_done(ticket));
        !self.reset_pending.is_empty()
    }

    fn misuse(&mut self, kind: Misuse, msg: std::fmt::Arguments<'_>) {
        let bit = 1u32 << kind as u32;
        if self.warned & bit == 0 {
            self.warned |= bit;
            warn!("virtio-mmio: {msg} (further messages of this kind suppressed)");
        } else {
            debug!("virtio-mmio: {msg}");
        }
    }

    fn build_queues(&mut self, max_sizes: &[u16]) -> std::io::Result<()> {
        // Never more queues than eventfds the VMM registered.
        let n = max_sizes.len().min(self.queue_evts.len());
        self.queues = max_sizes[..n]
            .iter()
            .map(|&max| {
                Queue::new(max).map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("queue max size {max}: {e}"),
                    )
                })
            })
            .collect::<std::io::Result<_>>()?;
        self.queue_bad = vec![false; n];
        Ok(())
    }

    fn selected_queue(&mut self) -> Option<&mut Queue> {
        self.queues.get_mut(self.queue_select as usize)
    }

    /// Section 2.4 (device reset) and 4.2.2.1: writing 0 to Status resets
    /// the device; QueueReady, InterruptStatus and features read as zero.
    fn reset(&mut self) {
        lock(&self.device).reset();
        // The data path is dropped on its own thread; wait a bounded time
        // so a driver that does not poll Status still finds it stopped.
        let tickets: Vec<(usize, u64)> = self
            .event_loops
            .iter()
            .enumerate()
            .map(|(i, l)| (i, l.reset()))
            .collect();
        // One bound for all threads: they drop their data paths in parallel.
        let deadline = std::time::Instant::now() + RESET_WAIT;
        let mut slow = false;
        for (i, ticket) in tickets {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !self.event_loops[i].wait_reset(ticket, left) {
                slow = true;
                self.reset_pending.push((i, ticket));
            }
        }
        if slow {
            self.slow_resets += 1;
        }
        let max_sizes = lock(&self.device).queue_max_sizes();
        if self.build_queues(&max_sizes).is_err() {
            self.queues.clear();
            self.queue_bad.clear();
        }
        self.interrupt.clear();
        self.queue_select = 0;
        self.device_features_select = 0;
        self.driver_features_select = 0;
        self.driver_features = 0;
        self.activated = false;
        self.status = 0;
    }

    /// The status state machine (sections 2.1 and 3.1.1).
    fn write_status(&mut self, value: u32) {
        if value == 0 {
            self.reset();
            return;
        }
        if self.reset_in_progress() {
            self.misuse(
                Misuse::Status,
                format_args!("status {value:#x} written before the reset completed"),
            );
            return;
        }
        // DEVICE_NEEDS_RESET is the device's bit; the driver cannot set or clear it.
        let value =
            (value & !status::DEVICE_NEEDS_RESET) | (self.status & status::DEVICE_NEEDS_RESET);
        let old = self.status;
        if value & old != old {
            self.misuse(
                Misuse::Status,
                format_args!("driver cleared status bits {old:#x} -> {value:#x} without a reset"),
            );
            return;
        }
        let added = value & !old;
        if added & status::FAILED != 0 {
            // Section 2.1: the driver gave up; keep the device as it is.
            self.status |= status::FAILED;
        }
        // Section 3.1.1: ACKNOWLEDGE, DRIVER, FEATURES_OK, DRIVER_OK, in order.
        let prereq = [
            (status::ACKNOWLEDGE, 0),
            (status::DRIVER, status::ACKNOWLEDGE),
            (status::FEATURES_OK, status::DRIVER),
            (status::DRIVER_OK, status::FEATURES_OK),
        ];
        for (bit, needs) in prereq {
            if added & bit == 0 {
                continue;
            }
            if self.status & needs != needs {
                let st = self.status;
                self.misuse(
                    Misuse::Status,
                    format_args!("status bit {bit:#x} set before {needs:#x} (status {st:#x})"),
                );
                return;
            }
            match bit {
                // Section 3.1.1 step 6: on refusal the driver re-reads
                // Status and sees FEATURES_OK unset.
                status::FEATURES_OK if !self.negotiate() => return,
                status::DRIVER_OK => {
                    self.status |= status::DRIVER_OK;
                    self.activate();
                    continue;
                }
                _ => {}
            }
            self.status |= bit;
        }
        let unknown = added
            & !(status::ACKNOWLEDGE
                | status::DRIVER
                | status::FEATURES_OK
                | status::DRIVER_OK
                | status::FAILED);
        if unknown != 0 {
            self.misuse(
                Misuse::Status,
                format_args!("unknown status bits {unknown:#x} ignored"),
            );
        }
    }

    /// Section 2.2 / 6.1: the driver may accept only offered features and
    /// must accept VIRTIO_F_VERSION_1 on a modern transport.
    fn negotiate(&mut self) -> bool {
        let offered = lock(&self.device).features();
        let accepted = self.driver_features;
        if accepted & !offered != 0 {
            self.misuse(
                Misuse::Features,
                format_args!(
                    "driver accepted features {:#x} the device never offered",
                    accepted & !offered
                ),
            );
            return false;
        }
        if accepted & (1u64 << VIRTIO_F_VERSION_1) == 0 {
            self.misuse(
                Misuse::Features,
                format_args!(
                    "driver did not accept VIRTIO_F_VERSION_1 (legacy drivers are not supported)"
                ),
            );
            return false;
        }
        let max_sizes = {
            let mut dev = lock(&self.device);
            dev.ack_features(accepted);
            dev.queue_max_sizes()
        };
        if let Err(e) = self.build_queues(&max_sizes) {
            self.misuse(
                Misuse::Activate,
                format_args!("device queue layout after negotiation: {e}"),
            );
            return false;
        }
        true
    }

    /// DRIVER_OK: hand the ready queues to the device. On failure set
    /// DEVICE_NEEDS_RESET and send a configuration change notification
    /// (section 2.1.2).
    fn activate(&mut self) {
        let mut active = Vec::new();
        let mut error = None;
        for (index, queue) in self.queues.iter().enumerate() {
            if !queue.ready() {
                continue;
            }
            if self.queue_bad[index] || !queue.is_valid(&self.mem) {
                error = Some(format!("queue {index} has an invalid size or ring address"));
                break;
            }
            let copy =
                Queue::try_from(queue.state()).map_err(|e| format!("copying queue {index}: {e}"));
            let event = self.queue_evts[index]
                .try_clone()
                .map_err(|e| format!("cloning queue {index} eventfd: {e}"));
            match (copy, event) {
                (Ok(queue), Ok(event)) => active.push(ActiveQueue {
                    index,
                    queue,
                    event,
                }),
                (Err(e), _) | (_, Err(e)) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let interrupt: Arc<dyn VirtioInterrupt> = match &self.device_interrupt {
            Some(i) => i.clone(),
            None => self.interrupt.clone(),
        };
        let result = match error {
            Some(e) => Err(e),
            None => lock(&self.device)
                .activate_workers(self.mem.clone(), interrupt.clone(), active)
                .map_err(|e| e.to_string())
                .and_then(|handlers| self.start_workers(handlers)),
        };
        match result {
            Ok(()) => self.activated = true,
            Err(e) => {
                self.misuse(Misuse::Activate, format_args!("activation failed: {e}"));
                self.status |= status::DEVICE_NEEDS_RESET;
                let _ = interrupt.trigger(VirtioInterruptType::Config);
            }
        }
    }

    /// Hands data path `i` to device thread `i`. A device that returns
    /// more data paths than it has threads is a bug: nothing starts.
    fn start_workers(&self, handlers: Vec<Box<dyn EventHandler>>) -> Result<(), String> {
        if handlers.is_empty() || handlers.len() > self.event_loops.len() {
            return Err(format!(
                "{} data paths for {} device threads",
                handlers.len(),
                self.event_loops.len()
            ));
        }
        for (i, (handler, event_loop)) in handlers.into_iter().zip(&self.event_loops).enumerate() {
            event_loop
                .activate(handler)
                .map_err(|e| format!("starting data path {i}: {e}"))?;
        }
        Ok(())
    }

    /// Queue registers may only be written between FEATURES_OK and
    /// DRIVER_OK (section 4.2.3.2), and size/addresses only while the queue
    /// is not ready (section 4.2.2.2).
    fn queue_writable(&mut self, reg: u64, needs_not_ready: bool) -> bool {
        let st = self.status;
        if st & status::FEATURES_OK == 0 || st & status::DRIVER_OK != 0 {
            self.misuse(
                Misuse::QueueWrite,
                format_args!("queue register {reg:#x} written in status {st:#x}"),
            );
            return false;
        }
        let sel = self.queue_select;
        match self.queues.get(sel as usize).map(|q| q.ready()) {
            None => {
                self.misuse(
                    Misuse::QueueWrite,
                    format_args!("queue register {reg:#x} written for missing queue {sel}"),
                );
                false
            }
            Some(true) if needs_not_ready => {
                self.misuse(
                    Misuse::QueueWrite,
                    format_args!("queue {sel} register {reg:#x} written while the queue is ready"),
                );
                false
            }
            Some(_) => true,
        }
    }

    fn write_queue_reg(&mut self, reg: u64, v: u32) {
        // Linux deletes its queues after a reset by writing QueueReady = 0
        // (and checks it reads back 0): harmless whenever not running.
        if reg == REG_QUEUE_READY && v == 0 && self.status & status::DRIVER_OK == 0 {
            if let Some(q) = self.selected_queue() {
                q.set_ready(false);
            }
            return;
        }
        if !self.queue_writable(reg, reg != REG_QUEUE_READY) {
            return;
        }
        let sel = self.queue_select as usize;
        let q = &mut self.queues[sel];
        let ok = match reg {
            REG_QUEUE_NUM => {
                let size = u16::try_from(v).unwrap_or(0);
                q.try_set_size(size).is_ok()
            }
            REG_QUEUE_READY => {
                q.set_ready(v == 1);
                v <= 1
            }
            REG_QUEUE_DESC_LOW | REG_QUEUE_DESC_HIGH => {
                let a = compose(q.desc_table(), reg == REG_QUEUE_DESC_HIGH, v);
                q.try_set_desc_table_address(vm_memory::GuestAddress(a))
                    .is_ok()
            }
            REG_QUEUE_DRIVER_LOW | REG_QUEUE_DRIVER_HIGH => {
                let a = compose(q.avail_ring(), reg == REG_QUEUE_DRIVER_HIGH, v);
                q.try_set_avail_ring_address(vm_memory::GuestAddress(a))
                    .is_ok()
            }
            REG_QUEUE_DEVICE_LOW | REG_QUEUE_DEVICE_HIGH => {
                let a = compose(q.used_ring(), reg == REG_QUEUE_DEVICE_HIGH, v);
                q.try_set_used_ring_address(vm_memory::GuestAddress(a))
                    .is_ok()
            }
            _ => true,
        };
        if !ok {
            self.queue_bad[sel] = true;
            self.misuse(
                Misuse::QueueValue,
                format_args!("queue {sel}: invalid value {v:#x} for register {reg:#x}"),
            );
        }
    }

    fn read_reg(&mut self, offset: u64) -> u32 {
        match offset {
            REG_MAGIC => MAGIC_VALUE,
            REG_VERSION => MMIO_VERSION,
            REG_DEVICE_ID => lock(&self.device).device_type(),
            REG_VENDOR_ID => VENDOR_ID,
            REG_DEVICE_FEATURES => {
                let f = lock(&self.device).features();
                match self.device_features_select {
                    0 => f as u32,
                    1 => (f >> 32) as u32,
                    _ => 0,
                }
            }
            REG_QUEUE_NUM_MAX => self.selected_queue().map_or(0, |q| u32::from(q.max_size())),
            REG_QUEUE_READY => self.selected_queue().map_or(0, |q| u32::from(q.ready())),
            REG_INTERRUPT_STATUS => self.interrupt.status(),
            REG_STATUS if self.reset_in_progress() => status::DEVICE_NEEDS_RESET,
            // The device thread could not take the data path.
            REG_STATUS if self.activated && self.event_loops.iter().any(LoopHandle::failed) => {
                self.status | status::DEVICE_NEEDS_RESET
            }
            REG_STATUS => self.status,
            // Section 4.2.2: a non-existent shared memory region has length -1.
            REG_SHM_LEN_LOW..=REG_SHM_BASE_HIGH => u32::MAX,
            REG_CONFIG_GENERATION => self.interrupt.config_generation(),
            _ => {
                self.misuse(
                    Misuse::Access,
                    format_args!("read of write-only or unknown register {offset:#x}"),
                );
                0
            }
        }
    }

    fn write_reg(&mut self, offset: u64, v: u32) {
        match offset {
            REG_DEVICE_FEATURES_SEL => self.device_features_select = v,
            REG_DRIVER_FEATURES_SEL => self.driver_features_select = v,
            REG_DRIVER_FEATURES => {
                // Section 3.1.1: features are written after DRIVER and before FEATURES_OK.
                if self.status & status::DRIVER == 0 || self.status & status::FEATURES_OK != 0 {
                    let st = self.status;
                    self.misuse(
                        Misuse::Features,
                        format_args!("DriverFeatures written in status {st:#x}"),
                    );
                    return;
                }
                match self.driver_features_select {
                    0 => {
                        self.driver_features = (self.driver_features & !0xffff_ffff) | u64::from(v)
                    }
                    1 => {
                        self.driver_features =
                            (self.driver_features & 0xffff_ffff) | (u64::from(v) << 32)
                    }
                    s => {
                        if v != 0 {
                            self.misuse(
                                Misuse::Features,
                                format_args!("driver accepted features {v:#x} in unknown word {s}"),
                            );
                        }
                    }
                }
            }
            REG_QUEUE_SEL => self.queue_select = v,
            REG_QUEUE_NUM
            | REG_QUEUE_READY
            | REG_QUEUE_DESC_LOW
            | REG_QUEUE_DESC_HIGH
            | REG_QUEUE_DRIVER_LOW
            | REG_QUEUE_DRIVER_HIGH
            | REG_QUEUE_DEVICE_LOW
            | REG_QUEUE_DEVICE_HIGH => self.write_queue_reg(offset, v),
            REG_QUEUE_NOTIFY => match self
                .queue_evts
                .get(v as usize)
                .filter(|_| (v as usize) < self.queues.len())
            {
                Some(evt) => {
                    if let Err(e) = evt.write(1) {
                        warn!("virtio-mmio: signalling queue {v}: {e}");
                    }
                }
                None => self.misuse(
                    Misuse::Notify,
                    format_args!("notification for missing queue {v}"),
                ),
            },
            REG_INTERRUPT_ACK => self.interrupt.ack(v),
            REG_STATUS => self.write_status(v),
            REG_SHM_SEL => {}
            _ => self.misuse(
                Misuse::Access,
                format_args!("write of read-only or unknown register {offset:#x}"),
            ),
        }
    }
}

/// Replaces the low or high 32 bits of `old` with `v`.
fn compose(old: u64, high: bool, v: u32) -> u64 {
    if high {
        (old & 0xffff_ffff) | (u64::from(v) << 32)
    } else {
        (old & !0xffff_ffff) | u64::from(v)
    }
}

fn lock(dev: &Arc<Mutex<dyn VirtioDevice>>) -> MutexGuard<'_, dyn VirtioDevice + 'static> {
    dev.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl BusDevice for MmioTransport {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if offset >= CONFIG_SPACE {
            lock(&self.device).read_config(offset - CONFIG_SPACE, data);
            return;
        }
        // Section 4.2.2.2: registers are accessed with 32-bit aligned accesses.
        if data.len() != 4 || !offset.is_multiple_of(4) {
            self.misuse(
                Misuse::Access,
                format_args!("{}-byte read at {offset:#x}", data.len()),
            );
            data.fill(0);
            return;
        }
        let v = self.read_reg(offset);
        data.copy_from_slice(&v.to_le_bytes());
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if offset >= CONFIG_SPACE {
            lock(&self.device).write_config(offset - CONFIG_SPACE, data);
            return;
        }
        let Ok(bytes) = <[u8; 4]>::try_from(data) else {
            self.misuse(
                Misuse::Access,
                format_args!("{}-byte write at {offset:#x}", data.len()),
            );
            return;
        };
        if !offset.is_multiple_of(4) {
            self.misuse(
                Misuse::Access,
                format_args!("unaligned write at {offset:#x}"),
            );
            return;
        }
        self.write_reg(offset, u32::from_le_bytes(bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_loop::{DeviceLoop, EventHandler, LoopContext};
    use crate::virtio::ActivateError;
    use std::os::fd::{AsRawFd, RawFd};
    use std::sync::mpsc;
    use vm_memory::GuestAddress;

    const MEM_SIZE: usize = 0x10_0000;

    #[derive(Default)]
    struct Dummy {
        acked: u64,
        config: [u8; 8],
        activated: Option<Vec<(usize, u16)>>,
        resets: u32,
        fail_activate: bool,
        extra_queue_feature: bool,
        /// With a handler that blocks in its first event until released.
        stuck: Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>,
    }

    /// The data path of [`Dummy`]: drains queue 0's notifications,
    /// optionally getting stuck in the first one.
    struct DummyPath {
        evt: EventFd,
        stuck: Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>,
    }

    impl EventHandler for DummyPath {
        fn watch(&self) -> Vec<(RawFd, u64)> {
            vec![(self.evt.as_raw_fd(), 0)]
        }
        fn start(&mut self, _ctx: &mut LoopContext<'_>) {}
        fn event(&mut self, _token: u64, _ctx: &mut LoopContext<'_>) {
            let _ = self.evt.read();
            if let Some((entered, release)) = self.stuck.take() {
                entered.send(()).unwrap();
                let _ = release.recv();
            }
        }
    }

    const DUMMY_FEATURE_EXTRA: u64 = 1 << 3;

    impl VirtioDevice for Dummy {
        fn device_type(&self) -> u32 {
            42
        }
        fn queue_max_sizes(&self) -> Vec<u16> {
            // A third queue exists only if feature bit 3 is acked (or not yet negotiated).
            if self.acked == 0 || self.acked & DUMMY_FEATURE_EXTRA != 0 {
                vec![16, 8, 4]
            } else {
                vec![16, 8]
            }
        }
        fn features(&self) -> u64 {
            (1 << VIRTIO_F_VERSION_1)
                | DUMMY_FEATURE_EXTRA
                | if self.extra_queue_feature { 1 << 40 } else { 0 }
        }
        fn ack_features(&mut self, features: u64) {
            self.acked = features;
        }
        fn read_config(&self, offset: u64, data: &mut [u8]) {
            crate::virtio::read_config_from_slice(&self.config, offset, data);
        }
        fn write_config(&mut self, offset: u64, data: &[u8]) {
            if offset == 0 && data.len() == 4 {
                self.config[..4].copy_from_slice(data);
            }
        }
        fn activate(
            &mut self,
            _mem: GuestMemoryMmap,
            interrupt: Arc<dyn VirtioInterrupt>,
            mut queues: Vec<ActiveQueue>,
        ) -> Result<Box<dyn EventHandler>, ActivateError> {
            if self.fail_activate {
                return Err(ActivateError::MissingQueue(0));
            }
            interrupt.trigger(VirtioInterruptType::Queue(0)).unwrap();
            self.activated = Some(queues.iter().map(|q| (q.index, q.queue.size())).collect());
            let evt = queues.remove(0).event;
            Ok(Box::new(DummyPath {
                evt,
                stuck: self.stuck.take(),
            }))
        }
        fn reset(&mut self) {
            self.resets += 1;
            self.acked = 0;
            self.activated = None;
        }
    }

    fn setup() -> (Arc<Mutex<Dummy>>, MmioTransport, DeviceLoop) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).unwrap();
        let dev = Arc::new(Mutex::new(Dummy::default()));
        let lp = DeviceLoop::spawn("virtio-test").unwrap();
        let t =
            MmioTransport::new(dev.clone(), mem, IrqTrigger::new().unwrap(), lp.handle()).unwrap();
        (dev, t, lp)
    }

    fn r(t: &mut MmioTransport, off: u64) -> u32 {
        let mut b = [0u8; 4];
        t.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    fn w(t: &mut MmioTransport, off: u64, v: u32) {
        t.write(off, &v.to_le_bytes());
    }

    /// Writes 0 to Status and polls until it reads 0, as Linux does (the
    /// device thread may take longer than RESET_WAIT on a loaded machine).
    fn driver_reset(t: &mut MmioTransport) {
        w(t, REG_STATUS, 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while r(t, REG_STATUS) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "reset never completed"
            );
            std::thread::yield_now();
        }
    }

    fn set_features(t: &mut MmioTransport, f: u64) {
        w(t, REG_DRIVER_FEATURES_SEL, 0);
        w(t, REG_DRIVER_FEATURES, f as u32);
        w(t, REG_DRIVER_FEATURES_SEL, 1);
        w(t, REG_DRIVER_FEATURES, (f >> 32) as u32);
    }

    fn setup_queue(t: &mut MmioTransport, idx: u32, size: u32, base: u64) {
        w(t, REG_QUEUE_SEL, idx);
        w(t, REG_QUEUE_NUM, size);
        w(t, REG_QUEUE_DESC_LOW, base as u32);
        w(t, REG_QUEUE_DESC_HIGH, (base >> 32) as u32);
        w(t, REG_QUEUE_DRIVER_LOW, (base + 0x1000) as u32);
        w(t, REG_QUEUE_DRIVER_HIGH, 0);
        w(t, REG_QUEUE_DEVICE_LOW, (base + 0x2000) as u32);
        w(t, REG_QUEUE_DEVICE_HIGH, 0);
        w(t, REG_QUEUE_READY, 1);
    }

    /// Drives the device to FEATURES_OK with `features`.
    fn negotiate(t: &mut MmioTransport, features: u64) {
        w(t, REG_STATUS, status::ACKNOWLEDGE);
        w(t, REG_STATUS, status::ACKNOWLEDGE | status::DRIVER);
        set_features(t, features);
        w(
            t,
            REG_STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK,
        );
    }

    const ALL_OK: u32 =
        status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK;

    #[test]
    fn identification_registers() {
        let (_, mut t, _lp) = setup();
        assert_eq!(r(&mut t, REG_MAGIC), 0x7472_6976);
        assert_eq!(r(&mut t, REG_VERSION), 2);
        assert_eq!(r(&mut t, REG_DEVICE_ID), 42);
        assert_eq!(r(&mut t, REG_VENDOR_ID), 0);
        w(&mut t, REG_DEVICE_FEATURES_SEL, 0);
        assert_eq!(r(&mut t, REG_DEVICE_FEATURES), DUMMY_FEATURE_EXTRA as u32);
        w(&mut t, REG_DEVICE_FEATURES_SEL, 1);
        assert_eq!(r(&mut t, REG_DEVICE_FEATURES), 1);
        w(&mut t, REG_DEVICE_FEATURES_SEL, 2);
        assert_eq!(r(&mut t, REG_DEVICE_FEATURES), 0);
        assert_eq!(r(&mut t, REG_SHM_LEN_LOW), u32::MAX);
        assert_eq!(t.queue_evts().len(), 3);
    }

    #[test]
    fn full_initialisation_activates_with_ready_queues() {
        let (dev, mut t, _lp) = setup();
        negotiate(&mut t, (1 << VIRTIO_F_VERSION_1) | DUMMY_FEATURE_EXTRA);
        assert_eq!(
            r(&mut t, REG_STATUS) & status::FEATURES_OK,
            status::FEATURES_OK
        );
        w(&mut t, REG_QUEUE_SEL, 2);
        assert_eq!(r(&mut t, REG_QUEUE_NUM_MAX), 4);
        setup_queue(&mut t, 0, 8, 0x1_0000);
        setup_queue(&mut t, 2, 4, 0x2_0000);
        assert_eq!(r(&mut t, REG_QUEUE_READY), 1);
        w(&mut t, REG_STATUS, ALL_OK);
        assert_eq!(r(&mut t, REG_STATUS), ALL_OK);
        assert!(t.is_activated());
        assert_eq!(dev.lock().unwrap().activated, Some(vec![(0, 8), (2, 4)]));
        // The dummy raised a queue interrupt while activating.
        assert_eq!(r(&mut t, REG_INTERRUPT_STATUS), INT_USED_BUFFER);
        assert_eq!(t.irq_evt().read().unwrap(), 1);
        w(&mut t, REG_INTERRUPT_ACK, INT_USED_BUFFER);
        assert_eq!(r(&mut t, REG_INTERRUPT_STATUS), 0);
    }

    #[test]
    fn queue_layout_follows_negotiated_features() {
        let (_, mut t, _lp) = setup();
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1);
        w(&mut t, REG_QUEUE_SEL, 2);
        assert_eq!(
            r(&mut t, REG_QUEUE_NUM_MAX),
            0,
            "queue 2 vanishes without feature 3"
        );
        w(&mut t, REG_QUEUE_NOTIFY, 2);
        assert!(
            t.queue_evts()[2].read().is_err(),
            "notify of a missing queue is dropped"
        );
    }

    #[test]
    fn features_ok_refused_for_unoffered_bits_or_missing_version_1() {
        let (dev, mut t, _lp) = setup();
        negotiate(&mut t, (1 << VIRTIO_F_VERSION_1) | (1 << 5));
        assert_eq!(r(&mut t, REG_STATUS), status::ACKNOWLEDGE | status::DRIVER);
        driver_reset(&mut t);
        negotiate(&mut t, DUMMY_FEATURE_EXTRA);
        assert_eq!(r(&mut t, REG_STATUS), status::ACKNOWLEDGE | status::DRIVER);
        assert_eq!(dev.lock().unwrap().acked, 0);
        // DRIVER_OK without FEATURES_OK is ignored.
        w(
            &mut t,
            REG_STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::DRIVER_OK,
        );
        assert!(!t.is_activated());
    }

    #[test]
    fn status_bits_must_be_set_in_order_and_never_cleared() {
        let (_, mut t, _lp) = setup();
        w(&mut t, REG_STATUS, status::DRIVER);
        assert_eq!(r(&mut t, REG_STATUS), 0);
        w(&mut t, REG_STATUS, status::ACKNOWLEDGE | status::DRIVER);
        assert_eq!(r(&mut t, REG_STATUS), status::ACKNOWLEDGE | status::DRIVER);
        w(&mut t, REG_STATUS, status::ACKNOWLEDGE);
        assert_eq!(r(&mut t, REG_STATUS), status::ACKNOWLEDGE | status::DRIVER);
        w(
            &mut t,
            REG_STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::DEVICE_NEEDS_RESET,
        );
        assert_eq!(r(&mut t, REG_STATUS), status::ACKNOWLEDGE | status::DRIVER);
        w(
            &mut t,
            REG_STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::FAILED,
        );
        assert_eq!(r(&mut t, REG_STATUS) & status::FAILED, status::FAILED);
    }

    #[test]
    fn invalid_queue_values_make_activation_fail_with_needs_reset() {
        for (size, base) in [
            (6u32, 0x1_0000u64),
            (32, 0x1_0000),
            (0, 0x1_0000),
            (8, MEM_SIZE as u64 - 0x800),
            (8, 0x1_0008),
        ] {
            let (dev, mut t, _lp) = setup();
            negotiate(&mut t, 1 << VIRTIO_F_VERSION_1 | DUMMY_FEATURE_EXTRA);
            setup_queue(&mut t, 0, size, base);
            w(&mut t, REG_STATUS, ALL_OK);
            assert!(!t.is_activated(), "size {size} base {base:#x}");
            assert_ne!(r(&mut t, REG_STATUS) & status::DEVICE_NEEDS_RESET, 0);
            assert_ne!(r(&mut t, REG_INTERRUPT_STATUS) & INT_CONFIG_CHANGE, 0);
            assert!(dev.lock().unwrap().activated.is_none());
        }
    }

    #[test]
    fn device_activation_failure_sets_needs_reset_and_reset_recovers() {
        let (dev, mut t, _lp) = setup();
        dev.lock().unwrap().fail_activate = true;
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1);
        w(&mut t, REG_STATUS, ALL_OK);
        assert_ne!(r(&mut t, REG_STATUS) & status::DEVICE_NEEDS_RESET, 0);
        let gen = r(&mut t, REG_CONFIG_GENERATION);
        assert_eq!(gen, 1);
        driver_reset(&mut t);
        assert_eq!(r(&mut t, REG_STATUS), 0);
        assert_eq!(r(&mut t, REG_INTERRUPT_STATUS), 0);
        assert_eq!(dev.lock().unwrap().resets, 1);
    }

    #[test]
    fn queue_registers_are_locked_outside_the_setup_window() {
        let (dev, mut t, _lp) = setup();
        // Before FEATURES_OK.
        setup_queue(&mut t, 0, 8, 0x1_0000);
        assert_eq!(r(&mut t, REG_QUEUE_READY), 0);
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1 | DUMMY_FEATURE_EXTRA);
        setup_queue(&mut t, 0, 8, 0x1_0000);
        // Size change on a ready queue is ignored.
        w(&mut t, REG_QUEUE_NUM, 4);
        w(&mut t, REG_STATUS, ALL_OK);
        assert_eq!(dev.lock().unwrap().activated, Some(vec![(0, 8)]));
        // After DRIVER_OK.
        w(&mut t, REG_QUEUE_SEL, 1);
        w(&mut t, REG_QUEUE_READY, 1);
        assert_eq!(r(&mut t, REG_QUEUE_READY), 0);
        // Features can no longer change.
        set_features(&mut t, 0);
        assert_eq!(
            dev.lock().unwrap().acked & (1 << VIRTIO_F_VERSION_1),
            1 << VIRTIO_F_VERSION_1
        );
    }

    #[test]
    fn notify_signals_the_queue_eventfd() {
        let (_, mut t, _lp) = setup();
        w(&mut t, REG_QUEUE_NOTIFY, 1);
        assert_eq!(t.queue_evts()[1].read().unwrap(), 1);
        w(&mut t, REG_QUEUE_NOTIFY, 7);
        for e in t.queue_evts() {
            assert!(e.read().is_err());
        }
    }

    #[test]
    fn reset_clears_state_and_stale_notifications() {
        let (dev, mut t, _lp) = setup();
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1 | DUMMY_FEATURE_EXTRA);
        setup_queue(&mut t, 0, 8, 0x1_0000);
        w(&mut t, REG_STATUS, ALL_OK);
        w(&mut t, REG_QUEUE_NOTIFY, 0);
        driver_reset(&mut t);
        assert_eq!(r(&mut t, REG_STATUS), 0);
        assert!(!t.is_activated());
        assert!(t.queue_evts()[0].read().is_err());
        // Linux's vm_del_vq after a reset.
        w(&mut t, REG_QUEUE_SEL, 0);
        w(&mut t, REG_QUEUE_READY, 0);
        assert_eq!(r(&mut t, REG_QUEUE_READY), 0);
        assert_eq!(t.warned, 0, "a clean driver teardown logs nothing");
        assert_eq!(dev.lock().unwrap().resets, 1);
        assert!(dev.lock().unwrap().activated.is_none());
        // And the device can be brought up again.
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1 | DUMMY_FEATURE_EXTRA);
        setup_queue(&mut t, 1, 8, 0x3_0000);
        w(&mut t, REG_STATUS, ALL_OK);
        assert_eq!(dev.lock().unwrap().activated, Some(vec![(1, 8)]));
    }

    #[test]
    fn config_space_is_forwarded_and_bad_register_accesses_ignored() {
        let (dev, mut t, _lp) = setup();
        dev.lock().unwrap().config = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut b = [0u8; 2];
        t.read(0x106, &mut b);
        assert_eq!(b, [7, 8]);
        let mut b8 = [0u8; 8];
        t.read(0x104, &mut b8);
        assert_eq!(b8, [5, 6, 7, 8, 0, 0, 0, 0]);
        t.write(0x100, &[9, 9, 9, 9]);
        assert_eq!(dev.lock().unwrap().config[..4], [9, 9, 9, 9]);
        // Non-32-bit register accesses.
        let mut b1 = [0xffu8; 1];
        t.read(REG_MAGIC, &mut b1);
        assert_eq!(b1, [0]);
        t.write(REG_STATUS, &[1]);
        assert_eq!(r(&mut t, REG_STATUS), 0);
        t.write(REG_STATUS + 2, &[1, 0, 0, 0]);
        assert_eq!(r(&mut t, REG_STATUS), 0);
        // Unknown registers.
        w(&mut t, 0x0f0, 1);
        assert_eq!(r(&mut t, 0x0f0), 0);
        assert_eq!(r(&mut t, REG_QUEUE_NUM), 0);
    }

    #[test]
    fn config_interrupt_bumps_generation() {
        let (_, mut t, _lp) = setup();
        let irq = t.interrupt();
        irq.trigger(VirtioInterruptType::Config).unwrap();
        assert_eq!(r(&mut t, REG_CONFIG_GENERATION), 1);
        assert_eq!(r(&mut t, REG_INTERRUPT_STATUS), INT_CONFIG_CHANGE);
        irq.trigger(VirtioInterruptType::Queue(1)).unwrap();
        assert_eq!(
            r(&mut t, REG_INTERRUPT_STATUS),
            INT_CONFIG_CHANGE | INT_USED_BUFFER
        );
        w(&mut t, REG_INTERRUPT_ACK, INT_CONFIG_CHANGE);
        assert_eq!(r(&mut t, REG_INTERRUPT_STATUS), INT_USED_BUFFER);
        assert_eq!(t.irq_evt().read().unwrap(), 2);
    }

    #[test]
    fn random_register_writes_never_panic() {
        // Deterministic xorshift; the guest controls every register.
        let (_, mut t, _lp) = setup();
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let off = (s % 0x120) & !3;
            let v = (s >> 32) as u32 & if s & 0x100 != 0 { 0xff } else { u32::MAX };
            if s & 1 == 0 {
                w(&mut t, off, v);
            } else {
                r(&mut t, off);
            }
        }
    }

    #[test]
    fn reset_with_a_request_in_flight_returns_to_the_vcpu_within_the_bound() {
        let (dev, mut t, _lp) = setup();
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        dev.lock().unwrap().stuck = Some((entered_tx, release_rx));
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1 | DUMMY_FEATURE_EXTRA);
        setup_queue(&mut t, 0, 8, 0x1_0000);
        w(&mut t, REG_STATUS, ALL_OK);
        w(&mut t, REG_QUEUE_NOTIFY, 0);
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the request reached the device thread");
        // The device thread is stuck in the request: the guest's reset
        // must still return, after at most RESET_WAIT.
        let t0 = std::time::Instant::now();
        w(&mut t, REG_STATUS, 0);
        let took = t0.elapsed();
        eprintln!("reset with a stuck request returned after {took:?}");
        assert!(took < RESET_WAIT + Duration::from_millis(500), "{took:?}");
        assert_eq!(t.slow_resets(), 1);
        assert_ne!(r(&mut t, REG_STATUS), 0, "reset reported done too early");
        w(&mut t, REG_STATUS, status::ACKNOWLEDGE);
        assert_eq!(r(&mut t, REG_STATUS), status::DEVICE_NEEDS_RESET);
        release.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while r(&mut t, REG_STATUS) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "reset never completed"
            );
            std::thread::yield_now();
        }
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1 | DUMMY_FEATURE_EXTRA);
        setup_queue(&mut t, 0, 8, 0x1_0000);
        w(&mut t, REG_STATUS, ALL_OK);
        assert!(t.is_activated(), "the device starts again after the reset");
    }

    #[test]
    fn a_paused_interrupt_is_held_back_until_resume() {
        let (_, mut t, _lp) = setup();
        let irq = t.interrupt();
        irq.pause();
        irq.trigger(VirtioInterruptType::Queue(0)).unwrap();
        irq.trigger(VirtioInterruptType::Config).unwrap();
        assert!(t.irq_evt().read().is_err(), "signalled while paused");
        assert_eq!(irq.signalled(), 0);
        assert_eq!(
            r(&mut t, REG_INTERRUPT_STATUS),
            INT_USED_BUFFER | INT_CONFIG_CHANGE
        );
        irq.resume().unwrap();
        assert_eq!(t.irq_evt().read().unwrap(), 1, "one signal for both");
        assert_eq!(irq.signalled(), 1);
        irq.resume().unwrap();
        assert!(t.irq_evt().read().is_err(), "nothing more was held back");
    }
}
