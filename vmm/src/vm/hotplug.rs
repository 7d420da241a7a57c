//! Hot-plugging disks and NICs into a running VM (`vm.add-disk`,
//! `vm.add-net`) and unplugging them (`vm.remove-device`), on virtio-pci.

use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::DeviceNode;
use vm_config::{DiskConfig, NetConfig};

use super::Vm;
use crate::device_manager::hotplug::{bdf, HotplugError};

/// How long `vm.remove-device` waits for the guest to eject the device.
/// Linux's acpiphp unbinds the driver (a disk flushes its cache first)
/// and evaluates `_EJ0`; in the nested testbed that takes seconds, so the
/// bound is generous but well below the API's 60 s answer deadline.
pub const EJECT_WAIT: Duration = Duration::from_secs(20);

impl Vm {
    /// Builds the disk `id` (its image is opened now) and hot-plugs it.
    /// Returns its BDF.
    pub fn hotplug_disk(&mut self, id: String, cfg: &DiskConfig) -> Result<String, HotplugError> {
        self.check_pci()?;
        let (id, dev) = crate::io_devices::create_disk(id, cfg)?;
        self.hotplug(id, Arc::new(Mutex::new(dev)))
    }

    /// Builds the NIC `id` (its TAP is opened now) and hot-plugs it.
    /// Returns its BDF.
    pub fn hotplug_net(&mut self, id: String, cfg: &NetConfig) -> Result<String, HotplugError> {
        self.check_pci()?;
        let (id, dev) = crate::io_devices::create_net(id, cfg)?;
        self.hotplug(id, Arc::new(Mutex::new(dev)))
    }

    fn check_pci(&self) -> Result<(), HotplugError> {
        match self.devices.eject_fd() {
            Some(_) => Ok(()),
            None => Err(HotplugError::NotPci),
        }
    }

    fn hotplug(
        &mut self,
        id: String,
        dev: Arc<Mutex<dyn devices::virtio::VirtioDevice>>,
    ) -> Result<String, HotplugError> {
        let mem = self.memory.guest_memory();
        let slot = self.devices.hotplug_virtio(&self.vm_fd, mem, id, dev)?;
        Ok(bdf(slot))
    }

    /// Asks the guest to eject `id`, waits at most `bound` for it, then
    /// tears the device down. On timeout the device stays attached.
    /// Returns every device torn down (others the guest ejected meanwhile
    /// go too) and whether `id` was among them.
    pub fn hot_unplug(&mut self, id: &str, bound: Duration) -> Result<Vec<String>, HotplugError> {
        let slot = self.devices.request_unplug(id)?;
        self.devices.wait_for_eject(slot, bound);
        Ok(self.devices.complete_ejects(&self.vm_fd))
    }

    /// Tears down what the guest ejected on its own; returns those ids.
    pub fn complete_ejects(&mut self) -> Vec<String> {
        self.devices.complete_ejects(&self.vm_fd)
    }

    /// Readable when the guest ejected a PCI slot (virtio-pci only).
    pub fn eject_fd(&self) -> Option<RawFd> {
        self.devices.eject_fd()
    }

    /// Every virtio device by id, with its BDF on PCI (`vm.info`).
    pub fn device_tree(&self) -> BTreeMap<String, DeviceNode> {
        self.devices.device_tree()
    }
}
