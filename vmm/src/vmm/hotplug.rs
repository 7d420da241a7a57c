//! `vm.add-disk`, `vm.add-net` and `vm.remove-device`: before boot they
//! change the configuration; on a running VM they hot-plug through ACPI
//! PCI hotplug (virtio-pci) and the configuration follows the device, so
//! `vm.info`, `vm.counters` and a reboot all see what the guest sees.

use api::{ApiError, ApiResponse, ApiResult, PciDeviceInfo, VmState};
use vm_config::{DiskConfig, NetConfig, VmConfig};

use super::Vmm;
use crate::device_manager::hotplug::HotplugError;
use crate::vm::hotplug::EJECT_WAIT;

/// A device to add.
pub(super) enum NewDevice {
    Disk(DiskConfig),
    Net(NetConfig),
}

/// `config` with every disk and NIC carrying the id it has now, so that
/// adding or removing one never renames another (generated ids count
/// across both lists).
pub(super) fn with_pinned_ids(config: &VmConfig) -> VmConfig {
    let mut pinned = config.clone();
    let (disk_ids, net_ids) = config.device_ids();
    for (d, own) in pinned.disks.iter_mut().flatten().zip(disk_ids) {
        d.id.get_or_insert(own);
    }
    for (n, own) in pinned.net.iter_mut().flatten().zip(net_ids) {
        n.id.get_or_insert(own);
    }
    pinned
}

/// `config` without the disk or NIC `id` (ids of the others kept).
pub(super) fn without_device(config: &VmConfig, id: &str) -> VmConfig {
    let mut c = with_pinned_ids(config);
    if let Some(disks) = &mut c.disks {
        disks.retain(|d| d.id.as_deref() != Some(id));
    }
    if let Some(nets) = &mut c.net {
        nets.retain(|n| n.id.as_deref() != Some(id));
    }
    c
}

fn api_error(e: HotplugError) -> ApiError {
    match e {
        HotplugError::NotPci => ApiError::NotSupported(e.to_string()),
        HotplugError::UnknownDevice(id) => ApiError::UnknownDevice(id),
        e => ApiError::Internal(e.to_string()),
    }
}

impl Vmm {
    /// `vm.add-disk` / `vm.add-net`.
    pub(super) fn add_device(&mut self, device: NewDevice) -> ApiResult {
        let state = self.state();
        let config = self.config.as_ref().ok_or(ApiError::VmNotCreated)?;
        let own_id = match &device {
            NewDevice::Disk(d) => d.id.as_deref(),
            NewDevice::Net(n) => n.id.as_deref(),
        };
        if let Some(id) = own_id.filter(|id| super::device_ids(config).any(|d| d == *id)) {
            // Upstream's words for it.
            return Err(ApiError::ConfigValidation(format!(
                "Identifier {id} is not unique"
            )));
        }
        let mut changed = with_pinned_ids(config);
        match &device {
            NewDevice::Disk(d) => changed.disks.get_or_insert_with(Vec::new).push(d.clone()),
            NewDevice::Net(n) => changed.net.get_or_insert_with(Vec::new).push(n.clone()),
        }
        // Upstream validates the whole configuration again, with or
        // without a running VM, and answers a bad one with 500.
        changed
            .validate()
            .map_err(|e| ApiError::ConfigValidation(e.to_string()))?;
        match state {
            Some(VmState::Running) => {}
            Some(VmState::Paused) => {
                return Err(ApiError::Internal(
                    "the VM is paused: resume it first (the guest takes part in hotplug)".into(),
                ))
            }
            _ => {
                self.config = Some(changed);
                return Ok(ApiResponse::Empty);
            }
        }
        // The new device is the last of its list; name it as the
        // configuration will (its own id, or the next free `_diskN`).
        let (disk_ids, net_ids) = changed.device_ids();
        let vm = self.vm.as_mut().ok_or(ApiError::VmNotRunning)?;
        let (id, bdf) = match device {
            NewDevice::Disk(d) => {
                let id = disk_ids.last().cloned().unwrap_or_default();
                let bdf = vm.hotplug_disk(id.clone(), &d).map_err(api_error)?;
                if let Some(last) = changed.disks.as_mut().and_then(|v| v.last_mut()) {
                    last.id = Some(id.clone());
                }
                (id, bdf)
            }
            NewDevice::Net(n) => {
                let id = net_ids.last().cloned().unwrap_or_default();
                let bdf = vm.hotplug_net(id.clone(), &n).map_err(api_error)?;
                if let Some(last) = changed.net.as_mut().and_then(|v| v.last_mut()) {
                    last.id = Some(id.clone());
                }
                (id, bdf)
            }
        };
        self.config = Some(changed);
        Ok(ApiResponse::PciDeviceInfo(PciDeviceInfo { id, bdf }))
    }

    /// `vm.remove-device` on a running VM: the guest is asked to eject the
    /// device; the answer waits for it (at most [`EJECT_WAIT`]).
    pub(super) fn hot_remove_device(&mut self, id: &str) -> ApiResult {
        if self.state() == Some(VmState::Paused) {
            return Err(ApiError::Internal(
                "the VM is paused: resume it first (the guest must eject the device)".into(),
            ));
        }
        let vm = self.vm.as_mut().ok_or(ApiError::VmNotRunning)?;
        let removed = vm.hot_unplug(id, EJECT_WAIT).map_err(api_error)?;
        // Whatever went (this device, or others the guest ejected
        // meanwhile) leaves the configuration.
        self.forget_devices(&removed);
        if removed.iter().any(|r| r == id) {
            Ok(ApiResponse::Empty)
        } else {
            Err(api_error(HotplugError::NotEjected {
                id: id.to_owned(),
                bound: EJECT_WAIT,
            }))
        }
    }

    /// The guest ejected slots on its own: tear those devices down.
    pub(super) fn on_guest_eject(&mut self) {
        let removed = match self.vm.as_mut() {
            Some(vm) => vm.complete_ejects(),
            None => return,
        };
        self.forget_devices(&removed);
    }

    fn forget_devices(&mut self, ids: &[String]) {
        if let Some(config) = &mut self.config {
            for id in ids {
                *config = without_device(config, id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_or_removing_a_device_never_renames_another() {
        let c = VmConfig {
            disks: Some(vec![DiskConfig::new("/a"), DiskConfig::new("/b")]),
            net: Some(vec![NetConfig::default()]),
            ..Default::default()
        };
        assert_eq!(
            c.device_ids(),
            (vec!["_disk0".into(), "_disk1".into()], vec!["_net2".into()])
        );
        let mut added = with_pinned_ids(&c);
        added.disks.as_mut().unwrap().push(DiskConfig::new("/c"));
        let (disks, nets) = added.device_ids();
        assert_eq!(nets, ["_net2"]);
        assert_eq!(disks, ["_disk0", "_disk1", "_disk2"]);
        let removed = without_device(&added, "_disk0");
        let (disks, nets) = removed.device_ids();
        assert_eq!(disks, ["_disk1", "_disk2"]);
        assert_eq!(nets, ["_net2"]);
    }
}
