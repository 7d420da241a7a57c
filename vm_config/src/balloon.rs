//! The balloon's configuration (`--balloon`, `VmConfig.balloon`) and the
//! per-tier size type shared with `vm.resize`.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeTuple, Serializer};
use serde::{Deserialize, Serialize};

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
/// use vm_config::BalloonSize;
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

/// The balloon device (`--balloon`, `VmConfig.balloon`): Cloud Hypervisor's
/// schema plus the Demeter fork's `statistics` and `heterogeneous_memory`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalloonConfig {
    /// Initial balloon size: bytes, or `[fmem_bytes, smem_bytes]`.
    pub size: BalloonSize,
    /// The guest may deflate under memory pressure (DEFLATE_ON_OOM).
    #[serde(default)]
    pub deflate_on_oom: bool,
    /// Free page reporting; accepted for the schema, must be false.
    #[serde(default)]
    pub free_page_reporting: bool,
    /// Offer the statistics queue; the device polls the guest every second.
    #[serde(default)]
    pub statistics: bool,
    /// Offer HETERO_MEM: a second balloon for the slow tier (SMem).
    #[serde(default)]
    pub heterogeneous_memory: bool,
}

/// Which memory tier a zone belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Fast memory: zones of NUMA nodes with vCPUs, zones outside any
    /// node, and `--memory size=` RAM.
    Fmem = 0,
    /// Slow memory: zones of memory-only NUMA nodes.
    Smem = 1,
}

impl crate::VmConfig {
    /// The tier of zone `id`: SMem when it belongs to a NUMA node with no
    /// vCPUs, FMem otherwise.
    pub fn zone_tier(&self, id: &str) -> Tier {
        let memory_only = self.numa.iter().flatten().any(|n| {
            n.cpus.as_ref().is_none_or(|c| c.is_empty())
                && n.memory_zones.iter().flatten().any(|z| z == id)
        });
        if memory_only {
            Tier::Smem
        } else {
            Tier::Fmem
        }
    }

    /// Bytes of guest RAM in each tier, `[FMem, SMem]`.
    pub fn tier_sizes(&self) -> [u64; 2] {
        let mut sizes = [self.memory.size, 0];
        for z in self.memory.zones.iter().flatten() {
            let t = self.zone_tier(&z.id) as usize;
            sizes[t] = sizes[t].saturating_add(z.size);
        }
        sizes
    }
}
