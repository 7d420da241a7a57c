//! Memory zone hotplug (virtio-mem): the rules for `hotplug_size`,
//! `hotplugged_size` and `vm.resize-zone`, as upstream Cloud Hypervisor has
//! them.

use crate::{HotplugMethod, MemoryZoneConfig};

/// Granularity the guest plugs and unplugs in (upstream's default; 2 MiB
/// so the host can back plugged memory with THP or 2 MiB huge pages).
pub const VIRTIO_MEM_BLOCK_SIZE: u64 = 2 << 20;
/// A virtio-mem region starts on, and is sized in, Linux's x86 memory
/// block size: the guest adds memory to its page allocator in these units.
pub const VIRTIO_MEM_REGION_ALIGN: u64 = 128 << 20;

/// Checks a zone's hotplug keys.
pub fn validate_zone(z: &MemoryZoneConfig, method: HotplugMethod) -> Result<(), String> {
    let Some(hotplug) = z.hotplug_size else {
        if z.hotplugged_size.is_some_and(|s| s != 0) {
            return Err(format!(
                "zone '{}': hotplugged_size needs hotplug_size",
                z.id
            ));
        }
        return Ok(());
    };
    if hotplug == 0 {
        return Err(format!("zone '{}': hotplug_size=0 is invalid", z.id));
    }
    if method != HotplugMethod::VirtioMem {
        return Err(format!(
            "zone '{}': hotplug_size needs --memory hotplug_method=virtio-mem \
             (virtio-mem is the only way a zone is resized)",
            z.id
        ));
    }
    if !hotplug.is_multiple_of(VIRTIO_MEM_REGION_ALIGN) {
        return Err(format!(
            "zone '{}': hotplug_size={hotplug} is not a multiple of 128 MiB",
            z.id
        ));
    }
    // With file=, plugged memory does not come from the file (as upstream:
    // the virtio-mem region is anonymous, or a memfd when shared=on).
    if let Some(plugged) = z.hotplugged_size {
        check_plugged_size(z, plugged)?;
    }
    Ok(())
}

fn check_plugged_size(z: &MemoryZoneConfig, plugged: u64) -> Result<(), String> {
    let hotplug = z.hotplug_size.unwrap_or(0);
    if plugged > hotplug {
        return Err(format!(
            "zone '{}': {plugged} bytes of hotplugged memory exceed hotplug_size={hotplug}",
            z.id
        ));
    }
    if !plugged.is_multiple_of(VIRTIO_MEM_BLOCK_SIZE) {
        return Err(format!(
            "zone '{}': hotplugged size {plugged} is not a multiple of the 2 MiB block size",
            z.id
        ));
    }
    Ok(())
}

/// `vm.resize-zone {id, desired_ram}`: the zone's whole size asked for.
/// Returns the virtio-mem part (`desired_ram - size`), or why it cannot be.
pub fn resize_target(z: &MemoryZoneConfig, desired_ram: u64) -> Result<u64, String> {
    if z.hotplug_size.is_none() {
        return Err(format!(
            "memory zone '{}' has no virtio-mem device (no hotplug_size)",
            z.id
        ));
    }
    let Some(plugged) = desired_ram.checked_sub(z.size) else {
        return Err(format!(
            "invalid to ask less ({desired_ram}) than the boot RAM ({}) of memory zone '{}'",
            z.size, z.id
        ));
    };
    check_plugged_size(z, plugged)?;
    Ok(plugged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(spec: &str) -> MemoryZoneConfig {
        MemoryZoneConfig::parse(spec).expect("zone")
    }

    #[test]
    fn hotplug_size_needs_virtio_mem_and_128mib_multiples() {
        let z = zone("id=z,size=1G,hotplug_size=1G");
        assert!(validate_zone(&z, HotplugMethod::VirtioMem).is_ok());
        let e = validate_zone(&z, HotplugMethod::Acpi).unwrap_err();
        assert!(e.contains("hotplug_method=virtio-mem"), "{e}");
        let z = zone("id=z,size=1G,hotplug_size=100M");
        assert!(validate_zone(&z, HotplugMethod::VirtioMem)
            .unwrap_err()
            .contains("128 MiB"));
        let z = zone("id=z,size=1G,hotplug_size=0");
        assert!(validate_zone(&z, HotplugMethod::VirtioMem).is_err());
    }

    /// As upstream: a file-backed zone can grow; its plugged memory is
    /// not taken from the file.
    #[test]
    fn a_file_backed_zone_takes_hotplug_size() {
        let z = zone("id=z,size=1G,file=/dev/shm/z,hotplug_size=256M");
        assert!(validate_zone(&z, HotplugMethod::VirtioMem).is_ok());
    }

    #[test]
    fn hotplugged_size_is_bounded_and_block_aligned() {
        let ok = zone("id=z,size=1G,hotplug_size=256M,hotplugged_size=128M");
        assert!(validate_zone(&ok, HotplugMethod::VirtioMem).is_ok());
        for bad in [
            "id=z,size=1G,hotplug_size=256M,hotplugged_size=512M",
            "id=z,size=1G,hotplug_size=256M,hotplugged_size=3M",
            "id=z,size=1G,hotplugged_size=128M",
        ] {
            assert!(
                validate_zone(&zone(bad), HotplugMethod::VirtioMem).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn resize_target_is_the_part_above_boot_ram() {
        let z = zone("id=z,size=1G,hotplug_size=512M");
        assert_eq!(resize_target(&z, (1 << 30) + (256 << 20)), Ok(256 << 20));
        assert_eq!(resize_target(&z, 1 << 30), Ok(0));
        assert!(resize_target(&z, 512 << 20).unwrap_err().contains("less"));
        assert!(resize_target(&z, 2 << 30).unwrap_err().contains("exceed"));
        assert!(resize_target(&z, (1 << 30) + 4096)
            .unwrap_err()
            .contains("2 MiB"));
        let plain = zone("id=p,size=1G");
        assert!(resize_target(&plain, 2 << 30)
            .unwrap_err()
            .contains("no virtio-mem"));
    }
}
