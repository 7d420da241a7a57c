//! The virtio-mem region of each zone with `hotplug_size`: placed above
//! all guest RAM, aligned to Linux's memory block size, backed and bound
//! like its zone (same `shared`/`hugepages`, same `host_numa_node`, never
//! prefaulted: a block's pages appear when the guest plugs and touches it),
//! registered with KVM and part of the guest memory object (the guest may
//! put virtio buffers in plugged memory), but not in the e820 map.

use arch::layout::RAM_64BIT_START;
use vm_config::hotplug::VIRTIO_MEM_REGION_ALIGN;
use vm_config::MemoryZoneConfig;
use vm_memory::GuestRegionMmap;

use super::{create_zone, GuestRange, MemoryError};

/// A zone's virtio-mem region.
#[derive(Debug)]
pub struct HotplugRegion {
    /// Guest physical start (128 MiB aligned).
    pub gpa: u64,
    /// Size in bytes (`hotplug_size`).
    pub size: u64,
    /// The region's memfd (`shared=on` zones), for hole punching.
    pub fd: Option<std::fs::File>,
}

/// Places the hotplug regions of `zones` one after another from the end
/// of RAM (`ram_end`), above 4 GiB, each 128 MiB aligned. Returns one
/// entry per zone (None without `hotplug_size`). Pure, for tests.
pub fn layout_hotplug(zones: &[MemoryZoneConfig], ram_end: u64) -> Vec<Option<(u64, u64)>> {
    let mut cursor = ram_end.max(RAM_64BIT_START);
    zones
        .iter()
        .map(|z| {
            let size = z.hotplug_size.filter(|&s| s > 0)?;
            let gpa = cursor.next_multiple_of(VIRTIO_MEM_REGION_ALIGN);
            cursor = gpa + size;
            Some((gpa, size))
        })
        .collect()
}

/// Creates the mapping of one region like its zone's, bound to the zone's
/// host node, without prefaulting.
pub(super) fn create_region(
    zc: &MemoryZoneConfig,
    thp: bool,
    gpa: u64,
    size: u64,
) -> Result<(HotplugRegion, GuestRegionMmap), MemoryError> {
    let region_config = MemoryZoneConfig {
        size,
        prefault: false,
        file: None,
        hotplug_size: None,
        hotplugged_size: None,
        ..zc.clone()
    };
    let range = GuestRange {
        gpa,
        len: size,
        zone_offset: 0,
    };
    let (zone, mut regions) = create_zone(&region_config, thp, vec![range])?;
    let region = regions
        .pop()
        .ok_or_else(|| MemoryError::Layout(format!("zone '{}': no hotplug mapping", zc.id)))?;
    Ok((
        HotplugRegion {
            gpa,
            size,
            fd: zone.fd,
        },
        region,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(spec: &str) -> MemoryZoneConfig {
        MemoryZoneConfig::parse(spec).expect("zone")
    }

    #[test]
    fn regions_go_above_ram_and_4gib_aligned_to_128mib() {
        let zones = [
            zone("id=a,size=1G,hotplug_size=256M"),
            zone("id=b,size=1G"),
            zone("id=c,size=1G,hotplug_size=128M"),
        ];
        let l = layout_hotplug(&zones, 3 << 30);
        assert_eq!(l[0], Some((4 << 30, 256 << 20)));
        assert_eq!(l[1], None);
        assert_eq!(l[2], Some(((4 << 30) + (256 << 20), 128 << 20)));
        let l = layout_hotplug(&zones, (5 << 30) + 4096);
        assert_eq!(l[0], Some(((5 << 30) + (128 << 20), 256 << 20)));
    }

    /// A file-backed zone's region leaves the file alone: boot RAM maps
    /// the file, plugged memory is anonymous (as upstream).
    #[test]
    fn a_file_backed_zones_region_is_not_the_file() {
        let dir = std::env::temp_dir().join(format!("hotplug-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("zone");
        std::fs::File::create(&path)
            .and_then(|f| f.set_len(4 << 20))
            .expect("file");
        let zc = zone(&format!(
            "id=f,size=4M,file={},hotplug_size=128M",
            path.display()
        ));
        let (region, mapping) = create_region(&zc, false, 4 << 30, 128 << 20).expect("region");
        assert!(region.fd.is_none(), "private: anonymous, no fd");
        assert_eq!(vm_memory::GuestMemoryRegion::len(&mapping), 128 << 20);
        let len = std::fs::metadata(&path).expect("stat").len();
        assert_eq!(len, 4 << 20, "the zone's file is untouched");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A bound zone's region is bound too: its pages can only come from
    /// the zone's host node.
    #[test]
    fn the_region_has_the_zones_binding_and_backing() {
        let zc = zone("id=s,size=4M,shared=on,host_numa_node=0,hotplug_size=128M");
        let (region, mapping) = create_region(&zc, false, 4 << 30, 128 << 20).expect("region");
        assert!(region.fd.is_some(), "shared zone: memfd-backed region");
        assert_eq!(vm_memory::GuestMemoryRegion::len(&mapping), 128 << 20);
        let mut mode = 0i32;
        let mut mask = [0u64; 16];
        // MPOL_F_ADDR (2): the policy of the mapping at that address.
        // SAFETY: buffers sized as passed; an address of our own mapping.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_get_mempolicy,
                &mut mode as *mut i32,
                mask.as_mut_ptr(),
                (mask.len() * 64) as u64,
                mapping.as_ptr(),
                2u64,
            )
        };
        assert_eq!(ret, 0, "get_mempolicy");
        assert_eq!(mode, super::super::MPOL_BIND);
        assert_eq!(mask[0], 1, "bound to node 0");
    }
}
