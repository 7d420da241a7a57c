//! The 16550 UART on ttyS0 (vm-superio's model on the I/O bus).

use std::io::Write;

use vm_superio::serial::NoEvents;
use vm_superio::Serial;

use crate::{BusDevice, IrqTrigger};

/// COM1: guest output goes to `out`, host input arrives through
/// [`SerialDevice::enqueue_input`].
pub struct SerialDevice {
    inner: Serial<IrqTrigger, NoEvents, Box<dyn Write + Send>>,
}

impl SerialDevice {
    /// A UART interrupting through `irq` and writing to `out`.
    pub fn new(irq: IrqTrigger, out: Box<dyn Write + Send>) -> Self {
        Self {
            inner: Serial::new(irq, out),
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
}

impl BusDevice for SerialDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if let ([byte], Ok(off)) = (data, u8::try_from(offset)) {
            *byte = self.inner.read(off);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let ([byte], Ok(off)) = (data, u8::try_from(offset)) {
            if let Err(e) = self.inner.write(off, *byte) {
                log::warn!("serial: write failed: {e:?}");
            }
        }
    }
}
