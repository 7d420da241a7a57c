//! Guest RAM: memory zones (tiers) bound to their host NUMA nodes, laid
//! out in guest physical space around the 32-bit device hole, and
//! registered with KVM.
//!
//! Each piece of a zone (a zone crossing the hole has two) is a host
//! mapping owned by its vm-memory region: the mapping lives as long as the
//! last clone of the guest memory object, wherever that clone is (a device
//! thread, a transport), so no drop order can unmap memory still in use.

use std::fs::{File, OpenOptions};
use std::os::fd::FromRawFd;
use std::path::Path;
use std::sync::Arc;

use arch::layout::{MEM_32BIT_DEVICES_START, RAM_64BIT_START};
use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;
use vm_config::{MemoryZoneConfig, VmConfig};
use vm_memory::mmap::MmapRegionBuilder;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap, GuestMemoryRegion, GuestRegionMmap};

pub mod hotplug;
pub use hotplug::HotplugRegion;

/// Errors while creating guest RAM.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// mmap, memfd or file setup failed.
    #[error("memory zone '{zone}': {what}: {source}")]
    Backing {
        /// Zone id.
        zone: String,
        /// The failing step.
        what: &'static str,
        /// OS error.
        source: std::io::Error,
    },
    /// mbind to the requested host node failed.
    #[error("memory zone '{zone}': binding to host NUMA node {node} failed: {source}")]
    Bind {
        /// Zone id.
        zone: String,
        /// Host node.
        node: u32,
        /// OS error.
        source: std::io::Error,
    },
    /// The backing file is smaller than the zone.
    #[error(
        "memory zone '{zone}': file {path} is {len} bytes, smaller than the zone ({size} bytes)"
    )]
    FileTooSmall {
        /// Zone id.
        zone: String,
        /// File path.
        path: String,
        /// File length.
        len: u64,
        /// Zone size.
        size: u64,
    },
    /// Registering guest memory failed.
    #[error("guest memory layout: {0}")]
    Layout(String),
    /// KVM refused a memory slot.
    #[error("KVM_SET_USER_MEMORY_REGION for zone '{zone}': {source}")]
    Memslot {
        /// Zone id.
        zone: String,
        /// KVM error.
        source: kvm_ioctls::Error,
    },
}

/// A piece of a zone placed in guest physical memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestRange {
    /// Guest physical start.
    pub gpa: u64,
    /// Length in bytes.
    pub len: u64,
    /// Offset of this piece inside the zone's host mapping.
    pub zone_offset: u64,
}

/// One zone: where it sits and how it is backed. Its memory belongs to the
/// guest memory regions (one per range).
#[derive(Debug)]
pub struct Zone {
    /// Zone id from the configuration.
    pub id: String,
    /// Size in bytes.
    pub size: u64,
    /// Where its pieces sit in guest physical memory.
    pub ranges: Vec<GuestRange>,
    /// Host NUMA node it is bound to.
    pub host_numa_node: Option<u32>,
    /// Backing file or memfd (for hole punching), if any.
    pub fd: Option<File>,
    /// Host page size of the backing: 4 KiB, or the huge page size.
    pub page_size: u64,
    /// The zone's virtio-mem region (`hotplug_size`), if any.
    pub hotplug: Option<HotplugRegion>,
}

/// All of guest RAM.
pub struct MemoryManager {
    zones: Vec<Arc<Zone>>,
    guest_memory: GuestMemoryMmap,
}

/// Zone starts are 2 MiB aligned so THP and 2 MiB huge pages line up.
const ZONE_ALIGN: u64 = 2 << 20;

/// Places zones of `sizes` one after another in guest physical memory,
/// skipping the 32-bit device hole. Pure, so it can be tested.
pub fn layout_zones(sizes: &[u64]) -> Vec<Vec<GuestRange>> {
    let mut cursor = 0u64;
    sizes
        .iter()
        .map(|&size| {
            let mut ranges = Vec::new();
            let mut offset = 0;
            cursor = cursor.next_multiple_of(ZONE_ALIGN);
            while offset < size {
                if (MEM_32BIT_DEVICES_START..RAM_64BIT_START).contains(&cursor) {
                    cursor = RAM_64BIT_START;
                }
                let limit = if cursor < MEM_32BIT_DEVICES_START {
                    MEM_32BIT_DEVICES_START
                } else {
                    u64::MAX
                };
                let len = (size - offset).min(limit - cursor);
                ranges.push(GuestRange {
                    gpa: cursor,
                    len,
                    zone_offset: offset,
                });
                offset += len;
                cursor += len;
            }
            ranges
        })
        .collect()
}

impl MemoryManager {
    /// Creates every zone of `config` (or one implicit zone for
    /// `--memory size=`), binds and prefaults them as asked, and registers
    /// them with `vm`.
    pub fn new(config: &VmConfig, vm: &VmFd) -> Result<Self, MemoryError> {
        let zone_configs: Vec<MemoryZoneConfig> = match config.memory.zones.as_deref() {
            Some(zones) if !zones.is_empty() => zones.to_vec(),
            _ => vec![MemoryZoneConfig {
                id: "mem0".into(),
                size: config.memory.size,
                file: None,
                shared: config.memory.shared,
                hugepages: config.memory.hugepages,
                hugepage_size: config.memory.hugepage_size,
                host_numa_node: None,
                hotplug_size: None,
                hotplugged_size: None,
                prefault: config.memory.prefault,
            }],
        };
        let layout = layout_zones(&zone_configs.iter().map(|z| z.size).collect::<Vec<_>>());
        let ram_end = layout
            .iter()
            .flatten()
            .map(|r| r.gpa + r.len)
            .max()
            .unwrap_or(0);
        let hotplug_layout = hotplug::layout_hotplug(&zone_configs, ram_end);
        let mut zones = Vec::new();
        let mut regions = Vec::new();
        let mut slot = 0u32;
        for ((zc, ranges), hotplug_at) in zone_configs.iter().zip(layout).zip(hotplug_layout) {
            let (mut zone, mut zone_regions) = create_zone(zc, config.memory.thp, ranges)?;
            if let Some((gpa, size)) = hotplug_at {
                let (region, mapping) = hotplug::create_region(zc, config.memory.thp, gpa, size)?;
                zone.hotplug = Some(region);
                zone_regions.push(mapping);
            }
            for region in zone_regions {
                let mem_region = kvm_userspace_memory_region {
                    slot,
                    flags: 0,
                    guest_phys_addr: region.start_addr().0,
                    memory_size: region.len(),
                    userspace_addr: region.as_ptr() as u64,
                };
                regions.push(region);
                // SAFETY: the mapping belongs to a region of the guest
                // memory object this manager keeps for the VM's lifetime
                // (and a device's clone keeps it longer, never shorter).
                unsafe { vm.set_user_memory_region(mem_region) }.map_err(|source| {
                    MemoryError::Memslot {
                        zone: zone.id.clone(),
                        source,
                    }
                })?;
                slot += 1;
            }
            zones.push(Arc::new(zone));
        }
        // Hotplug regions sit above every zone: sort by guest address.
        regions.sort_by_key(|r| r.start_addr());
        let guest_memory = GuestMemoryMmap::from_regions(regions)
            .map_err(|e| MemoryError::Layout(e.to_string()))?;
        Ok(Self {
            zones,
            guest_memory,
        })
    }

    /// The guest memory object used to read and write guest RAM.
    pub fn guest_memory(&self) -> &GuestMemoryMmap {
        &self.guest_memory
    }

    /// The zones, in configuration order.
    pub fn zones(&self) -> &[Arc<Zone>] {
        &self.zones
    }

    /// A zone by id.
    pub fn zone(&self, id: &str) -> Option<&Arc<Zone>> {
        self.zones.iter().find(|z| z.id == id)
    }

    /// Every RAM range (guest base, length), for the e820 map.
    pub fn ram_ranges(&self) -> Vec<(u64, u64)> {
        self.zones
            .iter()
            .flat_map(|z| z.ranges.iter().map(|r| (r.gpa, r.len)))
            .collect()
    }
}

/// Huge page size when `hugepage_size` is not given (x86-64's default).
const DEFAULT_HUGEPAGE_SIZE: u64 = 2 << 20;
const MADV_POPULATE_WRITE: i32 = 23;
const MPOL_BIND: i32 = 2;
const MPOL_MF_STRICT: u32 = 1;
const MPOL_MF_MOVE: u32 = 1 << 1;

fn os_err(zone: &str, what: &'static str) -> MemoryError {
    MemoryError::Backing {
        zone: zone.to_owned(),
        what,
        source: std::io::Error::last_os_error(),
    }
}

/// Creates the zone's backing and one owned mapping per range, advised,
/// bound and prefaulted as configured, as guest memory regions.
fn create_zone(
    zc: &MemoryZoneConfig,
    thp: bool,
    ranges: Vec<GuestRange>,
) -> Result<(Zone, Vec<GuestRegionMmap>), MemoryError> {
    let (fd, flags) = backing(zc)?;
    let mut regions = Vec::with_capacity(ranges.len());
    for r in &ranges {
        let mut builder = MmapRegionBuilder::new(r.len as usize)
            .with_mmap_prot(libc::PROT_READ | libc::PROT_WRITE)
            .with_mmap_flags(flags)
            .with_hugetlbfs(zc.hugepages);
        if let Some(f) = &fd {
            let f = f.try_clone().map_err(|source| MemoryError::Backing {
                zone: zc.id.clone(),
                what: "duplicating the backing fd",
                source,
            })?;
            builder = builder.with_file_offset(FileOffset::new(f, r.zone_offset));
        }
        let mapping = builder.build().map_err(|e| MemoryError::Backing {
            zone: zc.id.clone(),
            what: "mmap",
            source: std::io::Error::other(e),
        })?;
        let (addr, len) = (mapping.as_ptr(), mapping.size());
        if thp && !zc.hugepages && zc.file.is_none() && !zc.shared {
            // SAFETY: advice on the mapping just created.
            unsafe { libc::madvise(addr.cast(), len, libc::MADV_HUGEPAGE) };
        }
        // Guest RAM is not needed in a forked child (and must not be COW-shared).
        // SAFETY: advice on the mapping just created.
        unsafe { libc::madvise(addr.cast(), len, libc::MADV_DONTFORK) };
        if let Some(node) = zc.host_numa_node {
            bind_to_node(&zc.id, addr, len, node)?;
        }
        if zc.prefault {
            prefault(&zc.id, addr, len)?;
        }
        let region = GuestRegionMmap::new(mapping, GuestAddress(r.gpa))
            .ok_or_else(|| MemoryError::Layout(format!("region at {:#x} overflows", r.gpa)))?;
        regions.push(region);
    }
    let zone = Zone {
        id: zc.id.clone(),
        size: zc.size,
        ranges,
        host_numa_node: zc.host_numa_node,
        fd,
        page_size: if zc.hugepages {
            zc.hugepage_size.unwrap_or(DEFAULT_HUGEPAGE_SIZE)
        } else {
            4096
        },
        hotplug: None,
    };
    Ok((zone, regions))
}

/// Opens the zone's backing object and picks the mmap flags.
fn backing(zc: &MemoryZoneConfig) -> Result<(Option<File>, i32), MemoryError> {
    if let Some(path) = &zc.file {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| MemoryError::Backing {
                zone: zc.id.clone(),
                what: "opening file",
                source,
            })?;
        check_file_size(zc, path, &file)?;
        return Ok((Some(file), libc::MAP_SHARED | libc::MAP_NORESERVE));
    }
    let huge_flags = if zc.hugepages {
        hugepage_size_flag(zc.hugepage_size)
    } else {
        0
    };
    if zc.shared {
        let name = std::ffi::CString::new(format!("ch-zone-{}", zc.id)).unwrap_or_default();
        let mfd_flags = libc::MFD_CLOEXEC
            | if zc.hugepages {
                libc::MFD_HUGETLB | huge_flags as u32
            } else {
                0
            };
        // SAFETY: name is a valid C string; the fd is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), mfd_flags) };
        if fd < 0 {
            return Err(os_err(&zc.id, "memfd_create"));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(zc.size)
            .map_err(|source| MemoryError::Backing {
                zone: zc.id.clone(),
                what: "sizing memfd",
                source,
            })?;
        return Ok((Some(file), libc::MAP_SHARED | libc::MAP_NORESERVE));
    }
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    if zc.hugepages {
        flags |= libc::MAP_HUGETLB | huge_flags;
    }
    Ok((None, flags))
}

/// MAP_HUGE_* encoding of an explicit huge page size (log2 << 26).
fn hugepage_size_flag(size: Option<u64>) -> i32 {
    match size {
        Some(s) if s.is_power_of_two() => (s.trailing_zeros() as i32) << libc::MAP_HUGE_SHIFT,
        _ => 0,
    }
}

fn check_file_size(zc: &MemoryZoneConfig, path: &Path, file: &File) -> Result<(), MemoryError> {
    let meta = file.metadata().map_err(|source| MemoryError::Backing {
        zone: zc.id.clone(),
        what: "stat of file",
        source,
    })?;
    // Character devices (DAX) report length 0; only regular files are checked.
    if meta.is_file() && meta.len() < zc.size {
        return Err(MemoryError::FileTooSmall {
            zone: zc.id.clone(),
            path: path.display().to_string(),
            len: meta.len(),
            size: zc.size,
        });
    }
    Ok(())
}

/// mbind(MPOL_BIND) a mapping of zone `zone` to `node`, moving any
/// existing pages.
fn bind_to_node(zone: &str, addr: *mut u8, len: usize, node: u32) -> Result<(), MemoryError> {
    const BITS: usize = 64;
    let words = node as usize / BITS + 1;
    let mut mask = vec![0u64; words];
    mask[node as usize / BITS] |= 1 << (node as usize % BITS);
    // SAFETY: mbind on our own mapping with a correctly sized node mask.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            MPOL_BIND,
            mask.as_ptr(),
            // maxnode counts bits; the kernel wants one more than the highest.
            (words * BITS + 1) as u64,
            MPOL_MF_STRICT | MPOL_MF_MOVE,
        )
    };
    if ret != 0 {
        return Err(MemoryError::Bind {
            zone: zone.to_owned(),
            node,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Populates every page of a mapping now (after mbind, so pages land on
/// the bound node).
fn prefault(zone: &str, addr: *mut u8, len: usize) -> Result<(), MemoryError> {
    // SAFETY: advice on our own mapping.
    let ret = unsafe { libc::madvise(addr.cast(), len, MADV_POPULATE_WRITE) };
    if ret == 0 {
        return Ok(());
    }
    if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return Err(os_err(zone, "prefault (MADV_POPULATE_WRITE)"));
    }
    // Kernels before 5.14: touch every page.
    let page = 4096;
    for off in (0..len).step_by(page) {
        // SAFETY: inside our mapping (off < len); a volatile write of zero
        // allocates the page before the guest runs.
        unsafe { std::ptr::write_volatile(addr.add(off), 0) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_contiguous_below_the_hole() {
        let l = layout_zones(&[512 << 20, 1 << 30]);
        assert_eq!(
            l[0],
            vec![GuestRange {
                gpa: 0,
                len: 512 << 20,
                zone_offset: 0
            }]
        );
        assert_eq!(
            l[1],
            vec![GuestRange {
                gpa: 512 << 20,
                len: 1 << 30,
                zone_offset: 0
            }]
        );
    }

    #[test]
    fn a_zone_crossing_the_hole_is_split() {
        let l = layout_zones(&[2 << 30, 2 << 30]);
        assert_eq!(
            l[0],
            vec![GuestRange {
                gpa: 0,
                len: 2 << 30,
                zone_offset: 0
            }]
        );
        assert_eq!(
            l[1],
            vec![
                GuestRange {
                    gpa: 2 << 30,
                    len: 1 << 30,
                    zone_offset: 0
                },
                GuestRange {
                    gpa: 4 << 30,
                    len: 1 << 30,
                    zone_offset: 1 << 30
                },
            ]
        );
    }

    #[test]
    fn zone_starts_are_2mib_aligned() {
        let l = layout_zones(&[4096, 4096]);
        assert_eq!(l[1][0].gpa, ZONE_ALIGN);
    }

    /// Before the regions owned their mappings, dropping the zone unmapped
    /// memory a device thread still used (a SIGSEGV here).
    #[test]
    fn guest_memory_outlives_the_manager_while_a_device_holds_it() {
        use vm_memory::Bytes;
        for spec in ["id=anon,size=4M", "id=memfd,size=4M,shared=on"] {
            let zc = MemoryZoneConfig::parse(spec).unwrap();
            let ranges = layout_zones(&[zc.size]).remove(0);
            let (zone, regions) = create_zone(&zc, false, ranges).unwrap();
            let mem = GuestMemoryMmap::from_regions(regions).unwrap();
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let device = mem.clone();
            let worker = std::thread::spawn(move || {
                wait.recv().unwrap();
                device.write_obj(0xABu8, GuestAddress(0x1000)).unwrap();
                device.read_obj::<u8>(GuestAddress(0x1000)).unwrap()
            });
            drop(zone);
            drop(mem);
            go.send(()).unwrap();
            assert_eq!(worker.join().unwrap(), 0xAB, "{spec}");
        }
    }

    #[test]
    fn hugepage_flag_encodes_log2() {
        assert_eq!(
            hugepage_size_flag(Some(2 << 20)),
            21 << libc::MAP_HUGE_SHIFT
        );
        assert_eq!(hugepage_size_flag(None), 0);
    }
}
