//! Hardware-reduced ACPI sleep control, sleep status and reset registers
//! (FADT `SLEEP_CONTROL_REG`, `SLEEP_STATUS_REG`, `RESET_REG`), which is
//! how a guest powers off (`poweroff`) or resets.
//!
//! Attach at [`arch::layout::ACPI_SLEEP_CONTROL_PORT`], length 3: offset 0
//! sleep control, 1 sleep status, 2 reset.

use vmm_sys_util::eventfd::EventFd;

use crate::BusDevice;

/// What the guest asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerEvent {
    /// Entered S5.
    PowerOff,
    /// Wrote the reset value.
    Reset,
}

const SLP_EN: u8 = 1 << 5;
const SLP_TYP_SHIFT: u8 = 2;
const SLP_TYP_MASK: u8 = 0x7;

/// The three registers; events are signalled on eventfds the VMM polls.
pub struct AcpiPmDevice {
    poweroff: EventFd,
    reset: EventFd,
}

impl AcpiPmDevice {
    /// Signals `poweroff` on S5 entry and `reset` on a reset-register write.
    pub fn new(poweroff: EventFd, reset: EventFd) -> Self {
        Self { poweroff, reset }
    }

    /// Decodes a write of `value` at `offset`.
    pub fn decode(offset: u64, value: u8) -> Option<PowerEvent> {
        match offset {
            0 if value & SLP_EN != 0
                && (value >> SLP_TYP_SHIFT) & SLP_TYP_MASK == arch::layout::ACPI_S5_SLP_TYP =>
            {
                Some(PowerEvent::PowerOff)
            }
            2 if value == arch::layout::ACPI_RESET_VALUE => Some(PowerEvent::Reset),
            _ => None,
        }
    }
}

impl BusDevice for AcpiPmDevice {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        // Sleep status: WAK_STS never set; nothing else is readable.
        data.fill(0);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let Some(&value) = data.first() else { return };
        let evt = match Self::decode(offset, value) {
            Some(PowerEvent::PowerOff) => &self.poweroff,
            Some(PowerEvent::Reset) => &self.reset,
            None => {
                log::debug!("acpi-pm: ignoring write {value:#x} at offset {offset}");
                return;
            }
        };
        if let Err(e) = evt.write(1) {
            log::error!("acpi-pm: cannot signal power event: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s5_entry_and_reset_are_decoded() {
        assert_eq!(
            AcpiPmDevice::decode(0, (5 << 2) | SLP_EN),
            Some(PowerEvent::PowerOff)
        );
        assert_eq!(AcpiPmDevice::decode(0, 5 << 2), None, "SLP_EN not set");
        assert_eq!(
            AcpiPmDevice::decode(0, (3 << 2) | SLP_EN),
            None,
            "S3 is not S5"
        );
        assert_eq!(AcpiPmDevice::decode(2, 1), Some(PowerEvent::Reset));
        assert_eq!(AcpiPmDevice::decode(1, 1), None);
    }

    #[test]
    fn poweroff_write_signals_the_eventfd() {
        let off = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let rst = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut dev = AcpiPmDevice::new(off.try_clone().unwrap(), rst.try_clone().unwrap());
        dev.write(0, &[(5 << 2) | SLP_EN]);
        assert_eq!(off.read().unwrap(), 1);
        assert!(rst.read().is_err(), "reset must not fire");
    }
}
