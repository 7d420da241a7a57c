//! Builds the double balloon from the configuration: which guest RAM each
//! tier owns, how its host memory is released, and the device itself.

use std::sync::Arc;
use std::time::Duration;

use demeter_balloon::{Balloon, BalloonConfig as DeviceConfig, TierMemory, TierRange};
use vm_config::{BalloonConfig, Tier, VmConfig};

use crate::memory::MemoryManager;
use crate::vm::VmError;

/// How often the device asks the guest for statistics (with `statistics=on`).
const STATS_INTERVAL: Duration = Duration::from_secs(1);

/// The RAM of each tier, `[FMem, SMem]`, as the balloon sees it: every
/// range of every zone and its virtio-mem region, with the backing file
/// for hole punching and the host page size.
pub fn tier_memory(config: &VmConfig, memory: &MemoryManager) -> Result<[TierMemory; 2], VmError> {
    let mut tiers = [Vec::new(), Vec::new()];
    for zone in memory.zones() {
        let file = zone
            .fd
            .as_ref()
            .map(|f| f.try_clone().map(Arc::new))
            .transpose()
            .map_err(|e| VmError::Io("duplicating a zone's backing fd", e))?;
        let tier = config.zone_tier(&zone.id);
        for r in &zone.ranges {
            let range = match &file {
                Some(f) => TierRange::file_backed(r.gpa, r.len, f.clone(), r.zone_offset),
                None => TierRange::anonymous(r.gpa, r.len),
            };
            tiers[tier as usize].push(range.with_page_size(zone.page_size));
        }
        // Plugged virtio-mem memory is the zone's RAM too: the guest's
        // balloon may take pages from it (docs/virtio-mem.md).
        if let Some(h) = &zone.hotplug {
            let range = match &h.fd {
                Some(f) => {
                    let f = f
                        .try_clone()
                        .map_err(|e| VmError::Io("duplicating a hotplug region's fd", e))?;
                    TierRange::file_backed(h.gpa, h.size, Arc::new(f), 0)
                }
                None => TierRange::anonymous(h.gpa, h.size),
            };
            tiers[tier as usize].push(range.with_page_size(zone.page_size));
        }
    }
    Ok(tiers.map(TierMemory::new))
}

/// The balloon device for `balloon` over the VM's RAM.
pub fn create(
    config: &VmConfig,
    balloon: &BalloonConfig,
    memory: &MemoryManager,
) -> Result<Balloon, VmError> {
    let tiers = tier_memory(config, memory)?;
    let device_config = DeviceConfig {
        size: balloon.size.as_array(),
        statistics: balloon.statistics,
        stats_interval: balloon.statistics.then_some(STATS_INTERVAL),
        deflate_on_oom: balloon.deflate_on_oom,
        heterogeneous_memory: balloon.heterogeneous_memory,
    };
    log::info!(
        "balloon: FMem {} MiB, SMem {} MiB of RAM; initial size {:?}{}",
        tiers[Tier::Fmem as usize].size() >> 20,
        tiers[Tier::Smem as usize].size() >> 20,
        balloon.size.as_array(),
        if balloon.heterogeneous_memory {
            " (one balloon per tier)"
        } else {
            ""
        }
    );
    Balloon::new(device_config, tiers).map_err(|e| VmError::Device(format!("balloon: {e}")))
}
