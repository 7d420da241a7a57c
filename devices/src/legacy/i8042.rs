//! Just enough of the i8042 keyboard controller for `reboot=k`: the guest
//! writes 0xfe to port 0x64 to reset.

use vm_superio::I8042Device;

use crate::{BusDevice, IrqTrigger};

/// The controller at ports 0x60..=0x64 (attach it at 0x60, length 5).
pub struct I8042 {
    inner: I8042Device<IrqTrigger>,
}

impl I8042 {
    /// `reset` is signalled when the guest asks for a CPU reset.
    pub fn new(reset: IrqTrigger) -> Self {
        Self {
            inner: I8042Device::new(reset),
        }
    }
}

impl BusDevice for I8042 {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if let ([byte], Ok(off)) = (data, u8::try_from(offset)) {
            *byte = self.inner.read(off);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let ([byte], Ok(off)) = (data, u8::try_from(offset)) {
            if let Err(e) = self.inner.write(off, *byte) {
                log::warn!("i8042: signalling reset failed: {e}");
            }
        }
    }
}
