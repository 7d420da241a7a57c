//! `vm.add-disk`, `vm.add-net` and `vm.remove-device`: before boot they
//! change the configuration; on a booted VM (running or paused, as
//! upstream) they hot-plug through ACPI PCI hotplug (virtio-pci).
//!
//! An added device is in the configuration, `vm.info`'s device tree and
//! `vm.counters` when the answer comes. A removal answers at once, as
//! upstream's: the configuration forgets the device then (a reboot or the
//! next boot does not bring it back), while the device stays attached,
//! working, in the device tree and in `vm.counters` until the guest ejects
//! it; its id stays taken until then. Asking again asks the guest again.

use api::{ApiError, ApiResponse, ApiResult, PciDeviceInfo, VmState};
use vm_config::{DiskConfig, NetConfig, VmConfig};

use super::Vmm;
use crate::device_manager::hotplug::HotplugError;

/// A device to add.
pub(super) enum NewDevice {
    Disk(DiskConfig),
    Net(NetConfig),
}

impl NewDevice {
    fn id(&self) -> Option<&str> {
        match self {
            NewDevice::Disk(d) => d.id.as_deref(),
            NewDevice::Net(n) => n.id.as_deref(),
        }
    }

    fn set_id(&mut self, id: String) {
        match self {
            NewDevice::Disk(d) => d.id = Some(id),
            NewDevice::Net(n) => n.id = Some(id),
        }
    }

    /// The prefix of the ids generated for this kind (upstream's).
    fn id_prefix(&self) -> &'static str {
        match self {
            NewDevice::Disk(_) => "_disk",
            NewDevice::Net(_) => "_net",
        }
    }
}

/// The lowest `{prefix}N` that `taken` does not claim: the id the
/// configuration would generate, kept clear of ids that attached devices
/// still hold (a removal the guest has not carried out yet).
pub(super) fn fresh_id(prefix: &str, taken: impl Fn(&str) -> bool) -> String {
    (0usize..)
        .map(|n| format!("{prefix}{n}"))
        .find(|id| !taken(id))
        .unwrap_or_else(|| format!("{prefix}{}", usize::MAX))
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
    pub(super) fn add_device(&mut self, mut device: NewDevice) -> ApiResult {
        let state = self.state();
        let config = self.config.as_ref().ok_or(ApiError::VmNotCreated)?;
        if let Some(id) = device.id() {
            if super::device_ids(config).any(|d| d == id) {
                // Upstream's words for it.
                return Err(ApiError::ConfigValidation(format!(
                    "Identifier {id} is not unique"
                )));
            }
            if self.vm.as_ref().is_some_and(|vm| vm.has_device(id)) {
                return Err(ApiError::Internal(format!(
                    "Identifier {id} is not unique: the device with this id is still attached \
                     (its removal waits for the guest to eject it)"
                )));
            }
        }
        let booted = matches!(state, Some(VmState::Running | VmState::Paused));
        let mut changed = with_pinned_ids(config);
        if booted && device.id().is_none() {
            // Name it now, as the configuration would, but clear of the
            // ids of devices the guest has not ejected yet.
            let (disk_ids, net_ids) = changed.device_ids();
            let vm = self.vm.as_ref();
            let id = fresh_id(device.id_prefix(), |c| {
                disk_ids.iter().chain(&net_ids).any(|d| d == c)
                    || vm.is_some_and(|vm| vm.has_device(c))
            });
            device.set_id(id);
        }
        match &device {
            NewDevice::Disk(d) => changed.disks.get_or_insert_with(Vec::new).push(d.clone()),
            NewDevice::Net(n) => changed.net.get_or_insert_with(Vec::new).push(n.clone()),
        }
        // Upstream validates the whole configuration again, with or
        // without a running VM, and answers a bad one with 500.
        changed
            .validate()
            .map_err(|e| ApiError::ConfigValidation(e.to_string()))?;
        if !booted {
            self.config = Some(changed);
            return Ok(ApiResponse::Empty);
        }
        // A paused VM gets the device now, parked with the rest; the guest
        // takes the hotplug interrupt when it is resumed.
        let paused = state == Some(VmState::Paused);
        let id = device.id().unwrap_or_default().to_owned();
        let vm = self.vm.as_mut().ok_or(ApiError::VmNotRunning)?;
        let bdf = match &device {
            NewDevice::Disk(d) => vm.hotplug_disk(id.clone(), d, paused),
            NewDevice::Net(n) => vm.hotplug_net(id.clone(), n, paused),
        }
        .map_err(api_error)?;
        self.config = Some(changed);
        Ok(ApiResponse::PciDeviceInfo(PciDeviceInfo { id, bdf }))
    }

    /// `vm.remove-device` on a booted VM: asks the guest to eject the
    /// device and answers at once (see the module's comment). A guest
    /// that never ejects keeps the device; nothing waits for it.
    pub(super) fn hot_remove_device(&mut self, id: &str) -> ApiResult {
        let vm = self.vm.as_ref().ok_or(ApiError::VmNotRunning)?;
        vm.hot_unplug(id).map_err(api_error)?;
        self.forget_devices(&[id.to_owned()]);
        Ok(ApiResponse::Empty)
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

    #[test]
    fn a_generated_id_is_the_configurations_and_skips_ids_still_attached() {
        // With every id pinned, the configuration names a new unnamed disk
        // with the lowest free `_diskN`; fresh_id agrees.
        let c = with_pinned_ids(&VmConfig {
            disks: Some(vec![DiskConfig::new("/a"), DiskConfig::new("/b")]),
            net: Some(vec![NetConfig::default()]),
            ..Default::default()
        });
        let without = without_device(&c, "_disk0");
        let (disks, nets) = without.device_ids();
        let in_config = |id: &str| disks.iter().chain(&nets).any(|d| d == id);
        let mut added = without.clone();
        added.disks.as_mut().unwrap().push(DiskConfig::new("/c"));
        assert_eq!(added.device_ids().0.last().unwrap(), "_disk0");
        assert_eq!(fresh_id("_disk", in_config), "_disk0");
        // ... but _disk0 is still attached while its removal is pending.
        let attached = |id: &str| in_config(id) || id == "_disk0";
        assert_eq!(fresh_id("_disk", attached), "_disk2");
        assert_eq!(fresh_id("_net", attached), "_net0");
    }
}
