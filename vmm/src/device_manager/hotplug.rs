//! PCI hotplug of virtio devices into a running guest, through the ACPI
//! hotplug controller (`devices::pci::hotplug`) and the GED interrupt.
//!
//! Add: the device goes on the bus like a cold-plugged one (its thread,
//! BAR, vectors), then the controller's PCIU bit and a GED event tell the
//! guest, whose `acpiphp` rescans the slot. Remove: the PCID bit and a GED
//! event ask the guest to let go; its driver unbinds and `_EJ0` writes
//! B0EJ; only then does the VMM take the device off the bus, out of KVM
//! and stop its thread ([`DeviceManager::complete_ejects`]). A guest that
//! ejects a slot on its own (sysfs `power` 0) is served the same way.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::DeviceNode;
use arch::layout;
use devices::virtio::{GuestMemoryMmap, VirtioDevice};
use kvm_ioctls::VmFd;

use super::DeviceManager;
use crate::vm::VmError;

/// Why a hotplug request failed.
#[derive(Debug, thiserror::Error)]
pub enum HotplugError {
    /// The VM's virtio devices are not on PCI.
    #[error(
        "device hotplug needs the virtio-pci transport (start the VMM with --virtio-transport pci)"
    )]
    NotPci,
    /// No device has this id.
    #[error("no device with id {0:?}")]
    UnknownDevice(String),
    /// The guest did not eject the device in time.
    #[error(
        "the guest did not eject device {id:?} within {bound:?}; it stays attached \
         (it is removed if the guest ejects it later)"
    )]
    NotEjected {
        /// Device id.
        id: String,
        /// How long the VMM waited.
        bound: Duration,
    },
    /// Building or wiring the device failed.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// The GED could not interrupt the guest.
    #[error("notifying the guest: {0}")]
    Notify(std::io::Error),
}

/// `0000:00:ss.0`, the way Cloud Hypervisor writes a BDF.
pub fn bdf(slot: u8) -> String {
    format!("0000:00:{slot:02x}.0")
}

impl DeviceManager {
    /// Attaches `device` as `id` while the guest runs and tells the guest
    /// (PCIU, GED). Returns the device's slot.
    pub fn hotplug_virtio(
        &mut self,
        vm_fd: &VmFd,
        mem: &GuestMemoryMmap,
        id: String,
        device: Arc<Mutex<dyn VirtioDevice>>,
    ) -> Result<u8, HotplugError> {
        if self.pci.is_none() {
            return Err(HotplugError::NotPci);
        }
        self.attach_virtio(vm_fd, mem, id.clone(), device)?;
        let slot = self
            .pci_slot(&id)
            .ok_or_else(|| VmError::Device(format!("{id} has no PCI slot after attach")))?;
        if let Some(pci) = &self.pci {
            pci.hotplug().device_added(slot);
        }
        if let Err(e) = self.notify_pci_change() {
            // The guest was not told: take the device back off the bus.
            self.detach_now(vm_fd, &id);
            return Err(e);
        }
        log::info!("hot-plugged {id} at {}", bdf(slot));
        Ok(slot)
    }

    /// Takes `id` off the bus without the guest's eject (it never knew).
    fn detach_now(&mut self, vm_fd: &VmFd, id: &str) {
        let Some(at) = self.virtio.iter().position(|s| s.id == id) else {
            return;
        };
        let mut slot = self.virtio.remove(at);
        if let (Some(pci), Some(attachment)) = (&mut self.pci, slot.pci.take()) {
            pci.detach(vm_fd, attachment);
        }
    }

    /// Asks the guest to eject the device `id` (PCID, GED). Returns its
    /// slot, to wait on with [`DeviceManager::wait_for_eject`].
    pub fn request_unplug(&self, id: &str) -> Result<u8, HotplugError> {
        let pci = self.pci.as_ref().ok_or(HotplugError::NotPci)?;
        let slot = self
            .pci_slot(id)
            .ok_or_else(|| HotplugError::UnknownDevice(id.to_owned()))?;
        pci.hotplug().request_removal(slot);
        self.notify_pci_change()?;
        Ok(slot)
    }

    /// Waits at most `bound` for the guest to eject `slot`.
    pub fn wait_for_eject(&self, slot: u8, bound: Duration) -> bool {
        self.pci
            .as_ref()
            .is_some_and(|pci| pci.hotplug().wait_for_eject(slot, bound))
    }

    /// Takes every device the guest ejected off the bus and out of KVM and
    /// stops its thread. Returns the ids removed.
    pub fn complete_ejects(&mut self, vm_fd: &VmFd) -> Vec<String> {
        let Some(pci) = &mut self.pci else {
            return Vec::new();
        };
        let ejected = pci.hotplug().take_ejected();
        if ejected == 0 {
            return Vec::new();
        }
        let mut removed = Vec::new();
        let mut kept = Vec::with_capacity(self.virtio.len());
        for mut slot in std::mem::take(&mut self.virtio) {
            let hit = slot
                .pci
                .as_ref()
                .is_some_and(|a| ejected & (1u32 << a.slot) != 0);
            match slot.pci.take() {
                Some(attachment) if hit => {
                    let at = bdf(attachment.slot);
                    pci.detach(vm_fd, attachment);
                    // Dropping the slot stops the device thread (and
                    // closes its disk or TAP once the thread let go).
                    log::info!("unplugged {} from {at}", slot.id);
                    removed.push(slot.id.clone());
                }
                attachment => {
                    slot.pci = attachment;
                    kept.push(slot);
                }
            }
        }
        self.virtio = kept;
        removed
    }

    /// The eventfd that becomes readable when the guest ejects a slot.
    pub fn eject_fd(&self) -> Option<RawFd> {
        self.pci
            .as_ref()
            .map(|pci| pci.hotplug().eject_event().as_raw_fd())
    }

    /// The PCI slot of the device `id`, on virtio-pci.
    pub fn pci_slot(&self, id: &str) -> Option<u8> {
        self.virtio
            .iter()
            .find(|s| s.id == id)
            .and_then(|s| s.pci.as_ref())
            .map(|a| a.slot)
    }

    /// `vm.info`'s device tree: every virtio device, with its BDF on PCI.
    pub fn device_tree(&self) -> BTreeMap<String, DeviceNode> {
        self.virtio
            .iter()
            .map(|s| {
                let node = DeviceNode {
                    id: s.id.clone(),
                    pci_bdf: s.pci.as_ref().map(|a| bdf(a.slot)),
                    ..Default::default()
                };
                (s.id.clone(), node)
            })
            .collect()
    }

    fn notify_pci_change(&self) -> Result<(), HotplugError> {
        let ged = self
            .ged
            .as_ref()
            .ok_or_else(|| HotplugError::Notify(std::io::Error::other("no GED")))?;
        ged.lock()
            .unwrap_or_else(|p| p.into_inner())
            .notify(layout::GED_EVENT_PCI_HOTPLUG)
            .map_err(HotplugError::Notify)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_is_written_as_cloud_hypervisor_does() {
        assert_eq!(bdf(5), "0000:00:05.0");
        assert_eq!(bdf(31), "0000:00:1f.0");
    }
}
