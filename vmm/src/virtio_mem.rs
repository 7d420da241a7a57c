//! One virtio-mem device per memory zone with `hotplug_size`, over the
//! zone's hotplug region, reporting the zone's guest NUMA node.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use devices::virtio_mem::{MemRegion, VirtioMem, VirtioMemHandle};
use kvm_ioctls::VmFd;
use vm_config::hotplug::VIRTIO_MEM_BLOCK_SIZE;
use vm_config::VmConfig;

use crate::device_manager::DeviceManager;
use crate::memory::MemoryManager;
use crate::vm::VmError;

/// Device id of a zone's virtio-mem device in `vm.counters`.
pub fn device_id(zone: &str) -> String {
    format!("__virtio_mem_{zone}")
}

/// The guest NUMA node (ACPI proximity domain) a zone belongs to.
fn zone_node(config: &VmConfig, zone: &str) -> Option<u16> {
    config
        .numa
        .iter()
        .flatten()
        .find(|n| n.memory_zones.iter().flatten().any(|z| z == zone))
        .and_then(|n| u16::try_from(n.guest_numa_id).ok())
}

/// Attaches a virtio-mem device for every zone with a hotplug region, with
/// the zone's `hotplugged_size` requested from the start. Returns their
/// handles by zone id.
pub fn attach(
    config: &VmConfig,
    vm_fd: &VmFd,
    memory: &MemoryManager,
    devices: &mut DeviceManager,
) -> Result<BTreeMap<String, VirtioMemHandle>, VmError> {
    let mut handles = BTreeMap::new();
    for zone in memory.zones() {
        let Some(region) = &zone.hotplug else {
            continue;
        };
        let file = region
            .fd
            .as_ref()
            .map(|f| f.try_clone().map(Arc::new))
            .transpose()
            .map_err(|e| VmError::Io("duplicating a hotplug region's fd", e))?;
        let requested = config
            .memory
            .zones
            .iter()
            .flatten()
            .find(|z| z.id == zone.id)
            .and_then(|z| z.hotplugged_size)
            .unwrap_or(0);
        let device = VirtioMem::new(
            MemRegion {
                addr: region.gpa,
                size: region.size,
                block_size: VIRTIO_MEM_BLOCK_SIZE,
                file,
                file_offset: 0,
                node_id: zone_node(config, &zone.id),
            },
            requested,
        )
        .map_err(|e| VmError::Config(format!("memory zone '{}': {e}", zone.id)))?;
        handles.insert(zone.id.clone(), device.handle());
        log::info!(
            "virtio-mem for zone '{}': {} MiB at {:#x}, {} MiB requested",
            zone.id,
            region.size >> 20,
            region.gpa,
            requested >> 20
        );
        devices.attach_virtio(
            vm_fd,
            memory.guest_memory(),
            device_id(&zone.id),
            Arc::new(Mutex::new(device)),
        )?;
    }
    Ok(handles)
}
