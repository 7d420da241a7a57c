//! The 16550 UART on ttyS0 (vm-superio's model on the I/O bus).

use std::io::Write;

use vm_superio::serial::NoEvents;
use vm_superio::{Serial, Trigger};

use crate::{BusDevice, IrqTrigger};

const IER_OFFSET: u8 = 1;
const IER_RDA: u8 = 0b01;
const IER_THR_EMPTY: u8 = 0b10;
/// vm-superio's receive FIFO size.
const RX_FIFO_SIZE: usize = 64;

/// COM1: guest output goes to `out`, host input arrives through
/// [`SerialDevice::enqueue_input`].
///
/// The UART's interrupt is an edge on an IOAPIC pin (irqfd). A real 16550
/// keeps its interrupt output asserted while a condition is pending; an
/// edge that the guest misses (KVM drops an edge that arrives while the pin
/// is masked) leaves Linux's 8250 driver waiting forever: no more input is
/// read, or output stops with THRE interrupts enabled. [`SerialDevice::
/// watchdog_tick`] stands in for the level: when a condition has been
/// pending for a whole tick with no guest access, it raises the edge again.
pub struct SerialDevice {
    inner: Serial<IrqTrigger, NoEvents, Box<dyn Write + Send>>,
    /// A second handle on the interrupt eventfd, for re-raising.
    irq: Option<IrqTrigger>,
    /// Guest register accesses.
    guest_accesses: u64,
    accesses_at_last_tick: u64,
    reraised: u64,
}

impl SerialDevice {
    /// A UART interrupting through `irq` and writing to `out`.
    pub fn new(irq: IrqTrigger, out: Box<dyn Write + Send>) -> Self {
        let second = irq.0.try_clone().ok().map(IrqTrigger);
        Self {
            inner: Serial::new(irq, out),
            irq: second,
            guest_accesses: 0,
            accesses_at_last_tick: 0,
            reraised: 0,
        }
    }

    /// Queues host input for the guest; returns how many bytes fit in the
    /// receive FIFO (the caller retries the rest later).
    pub fn enqueue_input(&mut self, bytes: &[u8]) -> usize {
        let room = self.inner.fifo_capacity().min(bytes.len());
        if room == 0 {
            return 0;
        }
        match self.inner.enqueue_raw_bytes(&bytes[..room]) {
            Ok(n) => n,
            Err(e) => {
                log::warn!("serial: dropping input: {e:?}");
                0
            }
        }
    }

    /// Called periodically (a few times a second). Re-raises the interrupt
    /// when the guest has an enabled condition pending (unread input, or
    /// THRE interrupts enabled, which Linux does only while it has output
    /// queued) and has not touched the UART since the previous tick.
    /// Returns whether it re-raised.
    pub fn watchdog_tick(&mut self) -> bool {
        let idle = self.guest_accesses == self.accesses_at_last_tick;
        self.accesses_at_last_tick = self.guest_accesses;
        let ier = self.inner.read(IER_OFFSET);
        let rx_waiting = ier & IER_RDA != 0 && self.inner.fifo_capacity() < RX_FIFO_SIZE;
        let tx_waiting = ier & IER_THR_EMPTY != 0;
        if !idle || !(rx_waiting || tx_waiting) {
            return false;
        }
        // Rewriting IER makes the model set the pending identification bits
        // again; the explicit trigger covers bits that were already set.
        if let Err(e) = self.inner.write(IER_OFFSET, ier) {
            log::debug!("serial: IER rewrite failed: {e:?}");
        }
        if let Some(irq) = &self.irq {
            if let Err(e) = irq.trigger() {
                log::debug!("serial: re-raising the interrupt failed: {e}");
                return false;
            }
        }
        self.reraised += 1;
        if self.reraised.is_power_of_two() {
            log::warn!(
                "serial: re-raised a pending interrupt the guest did not service ({} times so far)",
                self.reraised
            );
        }
        true
    }

    /// How many times [`SerialDevice::watchdog_tick`] re-raised the interrupt.
    pub fn reraised(&self) -> u64 {
        self.reraised
    }

    fn note_access(&mut self) {
        self.guest_accesses = self.guest_accesses.wrapping_add(1);
    }
}

impl BusDevice for SerialDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if let ([byte], Ok(off)) = (data, u8::try_from(offset)) {
            self.note_access();
            *byte = self.inner.read(off);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let ([byte], Ok(off)) = (data, u8::try_from(offset)) {
            self.note_access();
            if let Err(e) = self.inner.write(off, *byte) {
                log::warn!("serial: write failed: {e:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATA_OFFSET: u8 = 0;

    fn uart() -> (SerialDevice, vmm_sys_util::eventfd::EventFd) {
        let irq = IrqTrigger::new().unwrap();
        let evt = irq.0.try_clone().unwrap();
        (SerialDevice::new(irq, Box::new(std::io::sink())), evt)
    }

    fn pending(evt: &vmm_sys_util::eventfd::EventFd) -> u64 {
        evt.read().unwrap_or(0)
    }

    #[test]
    fn unread_input_with_an_idle_guest_re_raises_once_per_idle_tick() {
        let (mut s, evt) = uart();
        s.write(u64::from(IER_OFFSET), &[IER_RDA]);
        s.enqueue_input(b"m e\n");
        pending(&evt);
        assert!(
            !s.watchdog_tick(),
            "the guest accessed the UART during this tick"
        );
        assert!(
            s.watchdog_tick(),
            "input pending and the guest idle: re-raise"
        );
        assert!(pending(&evt) >= 1);
        // The guest reads the input: no more re-raising.
        let mut b = [0u8];
        for _ in 0..4 {
            s.read(u64::from(DATA_OFFSET), &mut b);
        }
        assert!(!s.watchdog_tick());
        assert!(!s.watchdog_tick(), "nothing pending any more");
        assert_eq!(s.reraised(), 1);
    }

    #[test]
    fn no_re_raise_without_an_enabled_condition() {
        let (mut s, _evt) = uart();
        s.enqueue_input(b"x");
        s.watchdog_tick();
        assert!(!s.watchdog_tick(), "RX interrupts are disabled");
        s.write(u64::from(IER_OFFSET), &[IER_THR_EMPTY]);
        s.watchdog_tick();
        assert!(s.watchdog_tick(), "THRE enabled and the guest idle");
    }
}
