//! Bodies of API requests and responses (Cloud Hypervisor's schema plus the
//! tier extension of `desired_balloon`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use vm_config::VmConfig;

/// Device counters: device id → counter name → value (`GET vm.counters`).
pub type VmCounters = BTreeMap<String, BTreeMap<String, u64>>;

/// The VM's life-cycle state, as `vm.info` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VmState {
    /// Created by `vm.create`, not booted yet (or deleted back to nothing).
    Created,
    /// vCPUs are running.
    Running,
    /// The guest was shut down (by `vm.shutdown` or by itself); `vm.boot`
    /// starts it again.
    Shutdown,
    /// vCPUs are stopped by `vm.pause`; `vm.resume` continues them.
    Paused,
}

impl fmt::Display for VmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One node of the device tree in `vm.info`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceNode {
    /// Device id.
    pub id: String,
    /// Resources the device uses (I/O ports, MMIO ranges, interrupts), in a
    /// free-form JSON shape.
    #[serde(default)]
    pub resources: Vec<serde_json::Value>,
    /// Ids of child devices.
    #[serde(default)]
    pub children: Vec<String>,
    /// PCI address `segment:bus:device.function`, if on PCI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bdf: Option<String>,
}

/// `GET vm.info`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmInfo {
    /// The configuration the VM was created with (with resizes applied).
    pub config: VmConfig,
    /// Current state.
    pub state: VmState,
    /// Guest RAM actually usable by the guest, in bytes: boot RAM plus
    /// what the guest plugged through virtio-mem, minus what the balloon
    /// holds.
    #[serde(default)]
    pub memory_actual_size: u64,
    /// Devices, by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_tree: Option<BTreeMap<String, DeviceNode>>,
}

/// `GET vmm.ping`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmmPingResponse {
    /// Build identification (e.g. `git describe` output).
    pub build_version: String,
    /// Release version.
    pub version: String,
    /// Process id of the VMM.
    pub pid: i64,
    /// Compile-time features.
    #[serde(default)]
    pub features: Vec<String>,
}

impl VmmPingResponse {
    /// A ping answer for this process, with `version` as both versions.
    pub fn for_this_process(version: &str, features: Vec<String>) -> Self {
        Self {
            build_version: version.to_owned(),
            version: version.to_owned(),
            pid: i64::from(std::process::id()),
            features,
        }
    }
}

pub use vm_config::BalloonSize;

/// One tier's balloon in `GET vm.balloon-stats` (tier extension).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalloonTierStats {
    /// `fmem` or `smem`.
    pub tier: String,
    /// Balloon size the host asked for, bytes.
    pub target: u64,
    /// Balloon size the guest reports, bytes.
    pub actual: u64,
    /// Bytes of this tier's RAM the host holds as inflated (released on the
    /// host), counted from the PFNs the guest sent.
    pub host_inflated: u64,
    /// The guest's total memory in this tier (from the Demeter driver's
    /// per-tier statistics; absent until it reported them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_total: Option<u64>,
    /// The guest's free memory in this tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_free: Option<u64>,
    /// `guest_total - guest_free`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_used: Option<u64>,
    /// Size of this tier's virtio-mem regions (zones' `hotplug_size`),
    /// bytes: what `vm.resize-zone` can add beyond boot RAM.
    #[serde(default)]
    pub hotplug_size: u64,
    /// virtio-mem memory the host asked this tier's zones to have plugged.
    #[serde(default)]
    pub hotplug_requested: u64,
    /// virtio-mem memory the guest has plugged in this tier: the tier's
    /// RAM is its boot RAM plus this, minus `actual`.
    #[serde(default)]
    pub hotplug_plugged: u64,
}

/// `GET vm.balloon-stats`: newest upstream's `balloon_actual` and `stats`,
/// plus one entry per tier.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalloonStatsResponse {
    /// Both balloons together as the guest reports them, bytes.
    pub balloon_actual: u64,
    /// Whether the guest driver negotiated one balloon per tier.
    pub heterogeneous_memory: bool,
    /// How many statistics reports the guest sent so far.
    pub stats_updates: u64,
    /// `[FMem, SMem]`.
    pub tiers: Vec<BalloonTierStats>,
    /// The guest's latest virtio-balloon statistics by name (bytes or
    /// counts, as the virtio spec defines each tag).
    #[serde(default)]
    pub stats: BTreeMap<String, u64>,
}

/// `PUT vm.resize`. Every field is optional; absent or `null` means "leave
/// as is".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmResizeData {
    /// New number of vCPUs (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_vcpus: Option<u8>,
    /// New guest RAM size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_ram: Option<u64>,
    /// New balloon size, per tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_balloon: Option<BalloonSize>,
}

/// `PUT vm.resize-zone`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmResizeZoneData {
    /// Memory zone id.
    pub id: String,
    /// New size of the zone in bytes.
    pub desired_ram: u64,
}

/// `PUT vm.resize-disk`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmResizeDiskData {
    /// Disk id.
    pub id: String,
    /// New size of the disk in bytes.
    pub desired_size: u64,
}

/// What `vm.add-disk` and `vm.add-net` answer (200) for a device
/// hot-plugged into a running VM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PciDeviceInfo {
    /// Device id (as `vm.counters` and `vm.remove-device` name it).
    pub id: String,
    /// Its PCI address, `segment:bus:device.function` (`0000:00:05.0`).
    pub bdf: String,
}

/// `PUT vm.remove-device`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmRemoveDeviceData {
    /// Device id.
    pub id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn balloon(json: &str) -> Result<BalloonSize, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn balloon_integer_means_fast_tier_only() {
        assert_eq!(balloon("0"), Ok(BalloonSize { fmem: 0, smem: 0 }));
        assert_eq!(
            balloon("18446744073709551615"),
            Ok(BalloonSize {
                fmem: u64::MAX,
                smem: 0
            })
        );
    }

    #[test]
    fn balloon_pair_sets_both_tiers() {
        assert_eq!(
            balloon("[1073741824, 2147483648]"),
            Ok(BalloonSize {
                fmem: 1 << 30,
                smem: 2 << 30
            })
        );
    }

    #[test]
    fn balloon_rejects_bad_shapes_with_a_message() {
        for bad in ["[]", "[1]", "[1,2,3]", "[1,2,3,4,5]"] {
            let e = balloon(bad).unwrap_err();
            assert!(e.contains("two-element array"), "{bad}: {e}");
        }
        for bad in ["-1", "[-1, 0]", "[0, -7]"] {
            let e = balloon(bad).unwrap_err();
            assert!(e.contains("negative"), "{bad}: {e}");
        }
        for bad in [
            "1.5",
            "\"1G\"",
            "true",
            "{}",
            "null",
            "[1, \"2\"]",
            "[1.0, 2]",
        ] {
            assert!(balloon(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn balloon_serializes_upstream_compatible_when_possible() {
        let one = serde_json::to_string(&BalloonSize { fmem: 5, smem: 0 }).unwrap();
        assert_eq!(one, "5");
        let two = serde_json::to_string(&BalloonSize { fmem: 5, smem: 6 }).unwrap();
        assert_eq!(two, "[5,6]");
    }

    #[test]
    fn resize_accepts_nulls_and_rejects_unknown_fields() {
        let r: VmResizeData =
            serde_json::from_str(r#"{"desired_vcpus":null,"desired_balloon":[1,2]}"#).unwrap();
        assert_eq!(r.desired_vcpus, None);
        assert_eq!(r.desired_balloon, Some(BalloonSize { fmem: 1, smem: 2 }));
        assert!(serde_json::from_str::<VmResizeData>(r#"{"desired_cpus":1}"#).is_err());
        assert!(serde_json::from_str::<VmResizeData>(r#"{"desired_vcpus":256}"#).is_err());
    }

    #[test]
    fn vm_state_uses_upstream_names() {
        assert_eq!(
            serde_json::to_string(&VmState::Paused).unwrap(),
            "\"Paused\""
        );
        assert!(serde_json::from_str::<VmState>("\"paused\"").is_err());
    }
}
