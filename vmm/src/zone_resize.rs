//! `vm.resize-zone` and the memory figures that include virtio-mem, for
//! the VMM thread's API handlers.

use api::ApiError;
use vm_config::VmConfig;

use crate::vm::Vm;

/// `vm.resize-zone {id, desired_ram}` with upstream's semantics:
/// `desired_ram` is the zone's whole size, the part above its boot `size`
/// goes to its virtio-mem device. A running (or paused) VM's device is
/// asked at once and the guest plugs or unplugs in the background; the
/// configuration keeps the size (`hotplugged_size`) for the next boot.
/// Errors are upstream's 500s with a message saying why.
pub(crate) fn resize_zone(
    config: &mut VmConfig,
    vm: Option<&Vm>,
    id: &str,
    desired_ram: u64,
) -> Result<(), ApiError> {
    let zone = config
        .memory
        .zones
        .iter_mut()
        .flatten()
        .find(|z| z.id == id)
        .ok_or_else(|| ApiError::Internal(format!("no memory zone with id {id:?}")))?;
    let plugged = vm_config::hotplug::resize_target(zone, desired_ram)
        .map_err(|e| ApiError::Internal(format!("Failed resizing memory zone {id:?}: {e}")))?;
    if let Some(vm) = vm {
        let device = vm.virtio_mem(id).ok_or_else(|| {
            ApiError::Internal(format!("memory zone {id:?} has no virtio-mem device"))
        })?;
        device
            .resize(plugged)
            .map_err(|e| ApiError::Internal(format!("Failed resizing memory zone {id:?}: {e}")))?;
    }
    zone.hotplugged_size = Some(plugged);
    log::info!(
        "memory zone '{id}': {} MiB requested from virtio-mem ({} MiB in all)",
        plugged >> 20,
        desired_ram >> 20
    );
    Ok(())
}

/// Bytes the guest has plugged through virtio-mem, all zones.
pub(crate) fn plugged_bytes(vm: Option<&Vm>) -> u64 {
    vm.map_or(0, |vm| {
        vm.virtio_mem_devices()
            .values()
            .map(|d| d.plugged_size())
            .sum()
    })
}

/// virtio-mem per tier `[FMem, SMem]`: (region size, requested, plugged).
pub(crate) fn tier_hotplug(config: &VmConfig, vm: Option<&Vm>) -> [(u64, u64, u64); 2] {
    let mut tiers = [(0, 0, 0); 2];
    let Some(vm) = vm else {
        return tiers;
    };
    for (zone, device) in vm.virtio_mem_devices() {
        let t = &mut tiers[config.zone_tier(zone) as usize];
        t.0 += device.region_size();
        t.1 += device.requested_size();
        t.2 += device.plugged_size();
    }
    tiers
}
