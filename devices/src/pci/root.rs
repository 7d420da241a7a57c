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
    #[error("the PCI bus has no free slot (at most {} devices besides the host bridge)", SLOTS - 1)]
    Full,
    /// The slot is taken or does not exist.
    #[error("PCI slot {0} is taken or does not exist")]
    SlotTaken(u8),
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
        let slot = self.free_slot()?;
        self.slots[usize::from(slot)] = Some(function);
        Ok(slot)
    }

    /// The lowest free slot (what [`PciRoot::add`] would take).
    pub fn free_slot(&self) -> Result<u8, PciRootError> {
        let slot = self
            .slots
            .iter()
            .position(Option::is_none)
            .ok_or(PciRootError::Full)?;
        // Below SLOTS (32).
        Ok(slot as u8)
    }

    /// Puts `function` in `slot`, which must be free (hotplug reserves the
    /// slot with [`PciRoot::free_slot`] before it builds the function).
    pub fn insert(&mut self, slot: u8, function: SharedFunction) -> Result<(), PciRootError> {
        match self.slots.get_mut(usize::from(slot)) {
            Some(s @ None) => {
                *s = Some(function);
                Ok(())
            }
            _ => Err(PciRootError::SlotTaken(slot)),
        }
    }

    /// Takes the function out of `slot` (unplug); the host bridge stays.
    pub fn remove(&mut self, slot: u8) -> Option<SharedFunction> {
        if slot == 0 {
            return None;
        }
        self.slots.get_mut(usize::from(slot))?.take()
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

    #[test]
    fn a_freed_slot_is_reused_lowest_first_and_the_host_bridge_stays() {
        let mut root = PciRoot::new();
        let f = || -> SharedFunction { Arc::new(Mutex::new(HostBridge::new())) };
        for _ in 1..SLOTS {
            root.add(f()).unwrap();
        }
        assert_eq!(root.free_slot(), Err(PciRootError::Full));
        assert!(root.remove(9).is_some());
        assert!(root.remove(9).is_none(), "already empty");
        assert!(root.remove(4).is_some());
        let mut id = [0u8; 4];
        root.config_read(0, 4, 0, 0, &mut id);
        assert_eq!(id, [0xff; 4], "an unplugged slot reads all ones");
        assert_eq!(root.free_slot(), Ok(4));
        assert_eq!(root.insert(9, f()), Ok(()));
        assert_eq!(root.insert(9, f()), Err(PciRootError::SlotTaken(9)));
        assert_eq!(root.insert(32, f()), Err(PciRootError::SlotTaken(32)));
        assert_eq!(root.add(f()), Ok(4));
        assert_eq!(root.add(f()), Err(PciRootError::Full));
        assert!(
            root.remove(0).is_none(),
            "the host bridge cannot be removed"
        );
        root.config_read(0, 0, 0, 0, &mut id);
        assert_eq!(u32::from_le_bytes(id), 0x0d57_8086);
    }
}
