//! PCI bus 0 of segment 0: up to 32 single-function devices, slot 0 being
//! the host bridge. Configuration accesses come from the ECAM window or
//! the 0xcf8/0xcfc ports ([`super::ecam`]).

use std::sync::{Arc, Mutex};

use super::config_space::{ConfigSpace, PciHeader};
use super::PciFunction;

/// Devices per bus.
pub const SLOTS: usize = 32;

/// A function's configuration space behind a lock, as the root bus holds it.
pub type SharedFunction = Arc<Mutex<dyn PciFunction>>;

/// Why a device could not be put on the bus.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PciRootError {
    /// Every slot is taken.
    #[error("the PCI bus has no free slot (at most {SLOTS} devices)")]
    Full,
}

/// The root bus.
pub struct PciRoot {
    slots: Vec<Option<SharedFunction>>,
}

impl Default for PciRoot {
    fn default() -> Self {
        Self::new()
    }
}

impl PciRoot {
    /// A bus with the host bridge in slot 0.
    pub fn new() -> Self {
        let mut slots: Vec<Option<SharedFunction>> = vec![None; SLOTS];
        slots[0] = Some(Arc::new(Mutex::new(HostBridge::new())));
        Self { slots }
    }

    /// Puts `function` in the first free slot and returns the slot.
    pub fn add(&mut self, function: SharedFunction) -> Result<u8, PciRootError> {
        let slot = self
            .slots
            .iter()
            .position(Option::is_none)
            .ok_or(PciRootError::Full)?;
        self.slots[slot] = Some(function);
        // Below SLOTS (32).
        Ok(slot as u8)
    }

    fn function(&self, bus: u8, device: u8, function: u8) -> Option<&SharedFunction> {
        if bus != 0 || function != 0 {
            return None;
        }
        self.slots.get(usize::from(device))?.as_ref()
    }

    /// A configuration read; a missing function reads all ones (master abort).
    pub fn config_read(&self, bus: u8, device: u8, function: u8, reg: u16, data: &mut [u8]) {
        match self.function(bus, device, function) {
            Some(f) => lock(f).config_read(reg, data),
            None => data.fill(0xff),
        }
    }

    /// A configuration write; to a missing function it goes nowhere.
    pub fn config_write(&self, bus: u8, device: u8, function: u8, reg: u16, data: &[u8]) {
        if let Some(f) = self.function(bus, device, function) {
            lock(f).config_write(reg, data);
        }
    }
}

fn lock(f: &SharedFunction) -> std::sync::MutexGuard<'_, dyn PciFunction + 'static> {
    f.lock().unwrap_or_else(|p| p.into_inner())
}

/// The host bridge in slot 0 (Linux's type 1 probe looks for one).
struct HostBridge(ConfigSpace);

impl HostBridge {
    fn new() -> Self {
        Self(ConfigSpace::new(&PciHeader {
            // Cloud Hypervisor's (and Intel's 5520) host bridge IDs.
            vendor_id: 0x8086,
            device_id: 0x0d57,
            revision: 0,
            class: 0x06_0000,
            subsystem_vendor_id: 0,
            subsystem_id: 0,
        }))
    }
}

impl PciFunction for HostBridge {
    fn config_read(&mut self, reg: u16, data: &mut [u8]) {
        self.0.read(reg, data);
    }
    fn config_write(&mut self, reg: u16, data: &[u8]) {
        self.0.write(reg, data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_bridge_first_then_free_slots_then_full() {
        let mut root = PciRoot::new();
        let mut id = [0u8; 4];
        root.config_read(0, 0, 0, 0, &mut id);
        assert_eq!(u32::from_le_bytes(id), 0x0d57_8086);
        root.config_read(0, 1, 0, 0, &mut id);
        assert_eq!(id, [0xff; 4]);
        for slot in 1..SLOTS {
            let f: SharedFunction = Arc::new(Mutex::new(HostBridge::new()));
            assert_eq!(root.add(f), Ok(slot as u8));
        }
        let f: SharedFunction = Arc::new(Mutex::new(HostBridge::new()));
        assert_eq!(root.add(f), Err(PciRootError::Full));
        // Other buses and functions do not exist.
        root.config_read(1, 0, 0, 0, &mut id);
        assert_eq!(id, [0xff; 4]);
        root.config_read(0, 0, 1, 0, &mut id);
        assert_eq!(id, [0xff; 4]);
        root.config_write(0, 40, 0, 0, &[0; 4]);
    }
}
