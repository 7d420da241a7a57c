//! Generic Event Device (ACPI0013): one byte of pending events, read (and
//! cleared) by the DSDT's `_EVT` method after the GED interrupt. The VMM
//! uses it for the ACPI power button.

use crate::{BusDevice, IrqTrigger};

/// The event register plus its interrupt.
pub struct GedDevice {
    pending: u8,
    irq: IrqTrigger,
}

impl GedDevice {
    /// A GED that interrupts through `irq`.
    pub fn new(irq: IrqTrigger) -> Self {
        Self { pending: 0, irq }
    }

    /// Latches `event` bits and interrupts the guest.
    pub fn notify(&mut self, event: u8) -> std::io::Result<()> {
        self.pending |= event;
        self.irq.0.write(1)
    }
}

impl BusDevice for GedDevice {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
        if let Some(first) = data.first_mut() {
            *first = std::mem::take(&mut self.pending);
        }
    }

    fn write(&mut self, _offset: u64, _data: &[u8]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_is_latched_until_read_and_interrupts() {
        let irq = IrqTrigger::new().unwrap();
        let evt = irq.0.try_clone().unwrap();
        let mut ged = GedDevice::new(irq);
        ged.notify(1).unwrap();
        assert_eq!(evt.read().unwrap(), 1);
        let mut b = [0u8];
        ged.read(0, &mut b);
        assert_eq!(b[0], 1);
        ged.read(0, &mut b);
        assert_eq!(b[0], 0, "read clears");
    }
}
