//! PCI hotplug of virtio devices into a running guest, through the ACPI
//! hotplug controller (`devices::pci::hotplug`) and the GED interrupt.
//!
//! Add: the device goes on the bus like a cold-plugged one (its thread,
//! BAR, vectors), then the controller's PCIU bit and a GED event tell the
//! guest, whose `acpiphp` rescans the slot. On a paused VM the device is
//! plugged paused (interrupts held, threads parked) and the guest takes
//! the GED interrupt when it runs again. Remove: the PCID bit and a GED
//! event ask the guest to let go, and the request returns; the device
//! keeps working meanwhile. When the guest's driver has unbound, `_EJ0`
//! writes B0EJ, and only then does the VMM take the device off the bus,
//! out of KVM and stop its thread ([`DeviceManager::complete_ejects`], on
//! the VMM thread's eject event). Nothing waits for the guest, which may
//! never eject. A guest that ejects a slot on its own (sysfs `power` 0)
//! is served the same way.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

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
    /// The device could not be parked like the rest of a paused VM.
    #[error("pausing the new device {id} like the rest of the paused VM: {reason}")]
    Pause {
        /// Device id.
        id: String,
        /// What failed.
        reason: String,
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
    /// Attaches `device` as `id` to the booted VM and tells the guest
    /// (PCIU, GED). With `paused`, the VM is paused: the device is parked
    /// like the others, and [`DeviceManager::resume`] starts it with them.
    /// Returns the device's slot.
    pub fn hotplug_virtio(
        &mut self,
        vm_fd: &VmFd,
        mem: &GuestMemoryMmap,
        id: String,
        device: Arc<Mutex<dyn VirtioDevice>>,
        paused: bool,
    ) -> Result<u8, HotplugError> {
        if self.pci.is_none() {
            return Err(HotplugError::NotPci);
        }
        self.attach_virtio(vm_fd, mem, id.clone(), device)?;
        let slot = self
            .pci_slot(&id)
            .ok_or_else(|| VmError::Device(format!("{id} has no PCI slot after attach")))?;
        if paused {
            if let Err(reason) = self.pause_device(&id) {
                self.detach_now(vm_fd, &id);
                return Err(HotplugError::Pause { id, reason });
            }
        }
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

    /// Holds back the interrupts of the device `id` and parks its threads,
    /// as [`DeviceManager::pause`] does for every device.
    fn pause_device(&self, id: &str) -> Result<(), String> {
        let Some(slot) = self.virtio.iter().find(|s| s.id == id) else {
            return Err(format!("no device {id}"));
        };
        slot.transport.hold_interrupts();
        for thread in slot.threads() {
            if let Err(e) = thread.handle().pause(super::DEVICE_PAUSE_WAIT) {
                for t in slot.threads() {
                    let _ = t.handle().resume();
                }
                let _ = slot.transport.release_interrupts();
                return Err(e.to_string());
            }
        }
        Ok(())
    }

    /// Asks the guest to eject the device `id` (PCID, GED) and returns at
    /// once with its slot: the device goes when the guest ejects it
    /// ([`DeviceManager::complete_ejects`]). Asking again for a device
    /// whose removal is pending asks the guest again.
    pub fn request_unplug(&self, id: &str) -> Result<u8, HotplugError> {
        if !self.has_device(id) {
            return Err(HotplugError::UnknownDevice(id.to_owned()));
        }
        let pci = self.pci.as_ref().ok_or(HotplugError::NotPci)?;
        let slot = self
            .pci_slot(id)
            .ok_or_else(|| HotplugError::UnknownDevice(id.to_owned()))?;
        let again = pci.hotplug().removal_pending(slot);
        pci.hotplug().request_removal(slot);
        self.notify_pci_change()?;
        log::info!(
            "asked the guest to eject {id} at {}{}",
            bdf(slot),
            if again { " (again)" } else { "" }
        );
        Ok(slot)
    }

    /// Whether the removal of `id` was requested and the guest has not
    /// ejected it yet (it is still attached and working).
    pub fn removal_pending(&self, id: &str) -> bool {
        match (&self.pci, self.pci_slot(id)) {
            (Some(pci), Some(slot)) => pci.hotplug().removal_pending(slot),
            _ => false,
        }
    }

    /// Whether a virtio device `id` is attached (pending removals too).
    pub fn has_device(&self, id: &str) -> bool {
        self.virtio.iter().any(|s| s.id == id)
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
