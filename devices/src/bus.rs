//! Address-range dispatch for port I/O and MMIO exits.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A device on a bus. `offset` is relative to the device's base.
pub trait BusDevice: Send {
    /// Guest read of `data.len()` bytes at `offset`.
    fn read(&mut self, offset: u64, data: &mut [u8]);
    /// Guest write of `data` at `offset`.
    fn write(&mut self, offset: u64, data: &[u8]);
}

/// Errors when inserting a device.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BusError {
    /// The new range overlaps an existing one.
    #[error("bus range {base:#x}+{len:#x} overlaps an existing device")]
    Overlap {
        /// Base of the rejected range.
        base: u64,
        /// Its length.
        len: u64,
    },
    /// Zero-length range.
    #[error("bus range at {0:#x} has zero length")]
    ZeroLength(u64),
}

type SharedDevice = Arc<Mutex<dyn BusDevice>>;

/// A set of non-overlapping ranges, each owned by one device.
#[derive(Default, Clone)]
pub struct Bus {
    devices: BTreeMap<u64, (u64, SharedDevice)>,
}

impl Bus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attaches `device` at `[base, base + len)`.
    pub fn insert(&mut self, device: SharedDevice, base: u64, len: u64) -> Result<(), BusError> {
        if len == 0 {
            return Err(BusError::ZeroLength(base));
        }
        let end = base
            .checked_add(len)
            .ok_or(BusError::Overlap { base, len })?;
        let before = self.devices.range(..end).next_back();
        if let Some((&b, &(l, _))) = before {
            if b + l > base {
                return Err(BusError::Overlap { base, len });
            }
        }
        self.devices.insert(base, (len, device));
        Ok(())
    }

    fn find(&self, addr: u64, len: usize) -> Option<(u64, &SharedDevice)> {
        let (&base, (dev_len, dev)) = self.devices.range(..=addr).next_back()?;
        let offset = addr - base;
        (offset + len as u64 <= *dev_len).then_some((offset, dev))
    }

    /// Dispatches a read; returns false (and leaves `data` alone) if no
    /// device covers the access.
    pub fn read(&self, addr: u64, data: &mut [u8]) -> bool {
        match self.find(addr, data.len()) {
            Some((offset, dev)) => {
                lock(dev).read(offset, data);
                true
            }
            None => false,
        }
    }

    /// Dispatches a write; returns false if no device covers the access.
    pub fn write(&self, addr: u64, data: &[u8]) -> bool {
        match self.find(addr, data.len()) {
            Some((offset, dev)) => {
                lock(dev).write(offset, data);
                true
            }
            None => false,
        }
    }
}

/// Locks a device, recovering from a poisoned lock: a device that panicked
/// once keeps its last state rather than taking every vCPU down with it.
fn lock(dev: &SharedDevice) -> std::sync::MutexGuard<'_, dyn BusDevice + 'static> {
    dev.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo(Vec<(u64, Vec<u8>)>);
    impl BusDevice for Echo {
        fn read(&mut self, offset: u64, data: &mut [u8]) {
            data.fill(offset as u8);
        }
        fn write(&mut self, offset: u64, data: &[u8]) {
            self.0.push((offset, data.to_vec()));
        }
    }

    #[test]
    fn dispatch_uses_device_relative_offsets() {
        let dev = Arc::new(Mutex::new(Echo(vec![])));
        let mut bus = Bus::new();
        bus.insert(dev.clone(), 0x3f8, 8).unwrap();
        let mut b = [0u8; 1];
        assert!(bus.read(0x3fa, &mut b));
        assert_eq!(b[0], 2);
        assert!(bus.write(0x3ff, &[7]));
        assert_eq!(dev.lock().unwrap().0, vec![(7, vec![7])]);
    }

    #[test]
    fn accesses_outside_or_straddling_devices_are_refused() {
        let mut bus = Bus::new();
        bus.insert(Arc::new(Mutex::new(Echo(vec![]))), 0x600, 2)
            .unwrap();
        assert!(!bus.read(0x602, &mut [0u8; 1]));
        assert!(!bus.write(0x601, &[0, 0]));
        assert!(!bus.read(0x5ff, &mut [0u8; 1]));
    }

    #[test]
    fn overlapping_ranges_are_rejected() {
        let mut bus = Bus::new();
        bus.insert(Arc::new(Mutex::new(Echo(vec![]))), 0x600, 4)
            .unwrap();
        let e = bus.insert(Arc::new(Mutex::new(Echo(vec![]))), 0x603, 4);
        assert_eq!(
            e,
            Err(BusError::Overlap {
                base: 0x603,
                len: 4
            })
        );
        assert!(bus
            .insert(Arc::new(Mutex::new(Echo(vec![]))), 0x5f0, 0x10)
            .is_ok());
        assert!(bus
            .insert(Arc::new(Mutex::new(Echo(vec![]))), 0x5f8, 0x10)
            .is_err());
        assert_eq!(
            bus.insert(Arc::new(Mutex::new(Echo(vec![]))), 0x700, 0),
            Err(BusError::ZeroLength(0x700))
        );
    }
}
