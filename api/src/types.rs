//! Bodies of API requests and responses (Cloud Hypervisor's schema plus the
//! tier extension of `desired_balloon`).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeTuple, Serializer};
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
    /// Guest RAM actually usable by the guest: total RAM minus what the
    /// balloon holds, in bytes.
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

/// How much memory the balloon should hold, per tier (tier extension).
///
/// JSON: an integer `n` (Cloud Hypervisor's form: all from the fast tier,
/// same as `[n, 0]`) or a two-element array `[fmem_bytes, smem_bytes]` (the
/// Demeter fork's form). Negative numbers, non-integers, strings and arrays
/// of another length are rejected with a message saying what was expected;
/// the fork silently turned bad lists into `[0, 0]`, which we must not.
///
/// It serializes as a plain integer when `smem` is 0 (so requests stay
/// valid for upstream Cloud Hypervisor) and as `[fmem, smem]` otherwise.
///
/// ```
/// use api::BalloonSize;
/// let a: BalloonSize = serde_json::from_str("1073741824").unwrap();
/// assert_eq!(a, BalloonSize { fmem: 1 << 30, smem: 0 });
/// let b: BalloonSize = serde_json::from_str("[1, 2]").unwrap();
/// assert_eq!(b, BalloonSize { fmem: 1, smem: 2 });
/// assert!(serde_json::from_str::<BalloonSize>("[1, 2, 3]").is_err());
/// assert!(serde_json::from_str::<BalloonSize>("-5").is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BalloonSize {
    /// Bytes taken from the fast-memory (FMEM, DRAM) node.
    pub fmem: u64,
    /// Bytes taken from the slow-memory (SMEM) node.
    pub smem: u64,
}

impl BalloonSize {
    /// Both tiers together (saturating).
    pub fn total(&self) -> u64 {
        self.fmem.saturating_add(self.smem)
    }

    /// As the fork's `[u64; 2]`.
    pub fn as_array(&self) -> [u64; 2] {
        [self.fmem, self.smem]
    }
}

impl From<[u64; 2]> for BalloonSize {
    fn from([fmem, smem]: [u64; 2]) -> Self {
        Self { fmem, smem }
    }
}

impl From<u64> for BalloonSize {
    fn from(fmem: u64) -> Self {
        Self { fmem, smem: 0 }
    }
}

impl Serialize for BalloonSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.smem == 0 {
            return s.serialize_u64(self.fmem);
        }
        let mut t = s.serialize_tuple(2)?;
        t.serialize_element(&self.fmem)?;
        t.serialize_element(&self.smem)?;
        t.end()
    }
}

const BALLOON_EXPECTED: &str =
    "a non-negative integer (bytes) or a two-element array [fmem_bytes, smem_bytes]";

struct BalloonVisitor;

impl<'de> Visitor<'de> for BalloonVisitor {
    type Value = BalloonSize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(BALLOON_EXPECTED)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<BalloonSize, E> {
        Ok(BalloonSize::from(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<BalloonSize, E> {
        u64::try_from(v)
            .map(BalloonSize::from)
            .map_err(|_| E::custom(format!("balloon size {v} is negative")))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BalloonSize, A::Error> {
        let mut sizes = Vec::with_capacity(2);
        while let Some(v) = seq.next_element::<TierBytes>()? {
            sizes.push(v.0);
            if sizes.len() > 2 {
                return Err(de::Error::custom(format!(
                    "balloon size list has more than 2 elements; expected {BALLOON_EXPECTED}"
                )));
            }
        }
        match sizes[..] {
            [fmem, smem] => Ok(BalloonSize { fmem, smem }),
            _ => Err(de::Error::custom(format!(
                "balloon size list has {} element(s); expected {BALLOON_EXPECTED}",
                sizes.len()
            ))),
        }
    }
}

/// One element of the `[fmem, smem]` list: a non-negative integer.
struct TierBytes(u64);

impl<'de> Deserialize<'de> for TierBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TierBytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative integer number of bytes")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TierBytes, E> {
                Ok(TierBytes(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TierBytes, E> {
                u64::try_from(v)
                    .map(TierBytes)
                    .map_err(|_| E::custom(format!("balloon size {v} is negative")))
            }
        }
        d.deserialize_u64(V)
    }
}

impl<'de> Deserialize<'de> for BalloonSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BalloonVisitor)
    }
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
