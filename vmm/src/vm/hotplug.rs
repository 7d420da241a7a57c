//! Hot-plugging disks and NICs into a booted VM, running or paused
//! (`vm.add-disk`, `vm.add-net`), and unplugging them (`vm.remove-device`),
//! on virtio-pci.

use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use api::DeviceNode;
use vm_config::{DiskConfig, NetConfig};

use super::Vm;
use crate::device_manager::hotplug::{bdf, HotplugError};

impl Vm {
    /// Builds the disk `id` (its image is opened now) and hot-plugs it;
    /// `paused`: the VM is paused and the disk starts paused with it.
    /// Returns its BDF.
    pub fn hotplug_disk(
        &mut self,
        id: String,
        cfg: &DiskConfig,
        paused: bool,
    ) -> Result<String, HotplugError> {
        self.check_pci()?;
        let (id, dev) = crate::io_devices::create_disk(id, cfg)?;
        self.hotplug(id, Arc::new(Mutex::new(dev)), paused)
    }

    /// Builds the NIC `id` (its TAP is opened now) and hot-plugs it;
    /// `paused` as for [`Vm::hotplug_disk`]. Returns its BDF.
    pub fn hotplug_net(
        &mut self,
        id: String,
        cfg: &NetConfig,
        paused: bool,
    ) -> Result<String, HotplugError> {
        self.check_pci()?;
        let (id, dev) = crate::io_devices::create_net(id, cfg)?;
        self.hotplug(id, Arc::new(Mutex::new(dev)), paused)
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
        paused: bool,
    ) -> Result<String, HotplugError> {
        let mem = self.memory.guest_memory();
        let slot = self
            .devices
            .hotplug_virtio(&self.vm_fd, mem, id, dev, paused)?;
        Ok(bdf(slot))
    }

    /// Asks the guest to eject `id` and returns at once; the device is
    /// torn down when the guest ejects it ([`Vm::complete_ejects`]), and
    /// stays attached and working until then.
    pub fn hot_unplug(&self, id: &str) -> Result<(), HotplugError> {
        self.devices.request_unplug(id).map(|_| ())
    }

    /// Whether `id`'s removal was requested and the guest has not ejected
    /// it yet.
    pub fn removal_pending(&self, id: &str) -> bool {
        self.devices.removal_pending(id)
    }

    /// Whether a virtio device `id` is attached (pending removals too).
    pub fn has_device(&self, id: &str) -> bool {
        self.devices.has_device(id)
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
