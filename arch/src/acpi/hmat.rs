//! HMAT (revision 2): memory proximity domain attributes and the access
//! latency / bandwidth of every memory node as seen from the vCPU nodes.
//!
//! What Linux 6.12 does with it (drivers/acpi/numa/hmat.c,
//! mm/memory-tiers.c):
//! - a Memory Proximity Domain Attributes structure with "initiator valid"
//!   pins the memory node's initiator; Linux then takes that node's
//!   performance from the locality entries (initiator, memory node) only;
//! - ACCESS_LATENCY (data type 0) sets both read and write latency, and
//!   ACCESS_BANDWIDTH (data type 3) both read and write bandwidth; a node
//!   gets an abstract distance only if latency and bandwidth are non-zero;
//! - in revision 2, latency is `entry * base_unit` picoseconds (rounded up
//!   to ns) and bandwidth `entry * base_unit` MB/s; a product above
//!   `u32::MAX` is dropped as 0;
//! - nodes with vCPUs and memory give the DRAM reference, and a node's
//!   abstract distance is `576 * lat / lat_dram * bw_dram / bw`; the memory
//!   tier is that divided by 128. With the defaults (2x latency, 1/2
//!   bandwidth) a memory-only node gets 2304: tier 18, below DRAM's tier 4.
//!
//! Built on `acpi_tables::sdt::Sdt` instead of the crate's `HMAT`, which
//! writes revision 1 (Linux then reads entries with revision-1 units) and
//! whose `SystemLocality::set_entry_value` indexes entries by the number of
//! initiators instead of targets (wrong, or a panic, when the two differ).
//! The crate's `MemoryProximityDomain` is correct and is reused.

use acpi_tables::hmat::MemoryProximityDomain;

use super::validate::{NumaNode, NumaTopology};
use super::{aml_bytes, new_sdt};

const HMAT_REVISION: u8 = 2;
/// Largest entry value; 0xffff means "unreachable" and 0 "no information".
const MAX_ENTRY: u64 = 0xfffe;
/// System Locality Latency and Bandwidth Information structure type.
const SYSTEM_LOCALITY: u16 = 1;
/// Flags value: memory hierarchy "memory" (not a cache level).
const MEMORY_HIERARCHY_MEMORY: u8 = 0;
/// Data type: access latency.
const ACCESS_LATENCY: u8 = 0;
/// Data type: access bandwidth.
const ACCESS_BANDWIDTH: u8 = 3;
/// Picoseconds per nanosecond: revision-2 latency base units are in ps.
const PS_PER_NS: u64 = 1000;

/// One System Locality Latency and Bandwidth Information structure.
struct Locality {
    data_type: u8,
    entry_base_unit: u64,
    initiators: Vec<u32>,
    targets: Vec<u32>,
    /// Initiator-major: `entries[i * targets.len() + t]`.
    entries: Vec<u16>,
}

impl Locality {
    const HEADER_LEN: usize = 32;

    fn to_bytes(&self) -> Vec<u8> {
        let len = Self::HEADER_LEN
            + 4 * self.initiators.len()
            + 4 * self.targets.len()
            + 2 * self.entries.len();
        let mut s = Vec::with_capacity(len);
        s.extend_from_slice(&SYSTEM_LOCALITY.to_le_bytes());
        s.extend_from_slice(&0u16.to_le_bytes()); // reserved
        s.extend_from_slice(&(len as u32).to_le_bytes());
        s.push(MEMORY_HIERARCHY_MEMORY); // flags
        s.push(self.data_type);
        s.push(0); // minimum transfer size (unused: flag not set)
        s.push(0); // reserved
        s.extend_from_slice(&(self.initiators.len() as u32).to_le_bytes());
        s.extend_from_slice(&(self.targets.len() as u32).to_le_bytes());
        s.extend_from_slice(&0u32.to_le_bytes()); // reserved
        s.extend_from_slice(&self.entry_base_unit.to_le_bytes());
        for domain in self.initiators.iter().chain(&self.targets) {
            s.extend_from_slice(&domain.to_le_bytes());
        }
        for entry in &self.entries {
            s.extend_from_slice(&entry.to_le_bytes());
        }
        s
    }
}

/// Chooses a shared base unit and 16-bit entries for `values` (each >= 1),
/// where one input unit is `unit` base-unit ticks. Entries are in
/// `1..=MAX_ENTRY`; `round_up` rounds them up (latency: never report memory
/// faster than it is), otherwise to nearest.
fn encode(values: &[u64], unit: u64, round_up: bool) -> (u64, Vec<u16>) {
    let max = values.iter().copied().max().unwrap_or(1);
    let scale = max.div_ceil(MAX_ENTRY).max(1);
    let entries = values
        .iter()
        .map(|&v| {
            let e = if round_up {
                v.div_ceil(scale)
            } else {
                (v + scale / 2) / scale
            };
            u16::try_from(e.clamp(1, MAX_ENTRY)).unwrap_or(u16::MAX - 1)
        })
        .collect();
    (scale * unit, entries)
}

/// A locality structure from every vCPU node to every memory node. Every
/// initiator sees a memory node with that node's configured performance;
/// Linux only reads the entry of the node's attached initiator.
fn locality(
    data_type: u8,
    initiators: &[&NumaNode],
    targets: &[&NumaNode],
    value: fn(&NumaNode) -> u64,
    unit: u64,
    round_up: bool,
) -> Locality {
    let per_target: Vec<u64> = targets.iter().map(|n| value(n)).collect();
    let (entry_base_unit, target_entries) = encode(&per_target, unit, round_up);
    Locality {
        data_type,
        entry_base_unit,
        initiators: initiators.iter().map(|n| n.domain).collect(),
        targets: targets.iter().map(|n| n.domain).collect(),
        entries: target_entries.repeat(initiators.len()),
    }
}

/// Builds the HMAT.
pub(super) fn build_hmat(topology: &NumaTopology) -> Vec<u8> {
    let initiators: Vec<&NumaNode> = topology.nodes.iter().filter(|n| n.has_cpus()).collect();
    let targets: Vec<&NumaNode> = topology.nodes.iter().filter(|n| n.has_memory()).collect();

    let mut hmat = new_sdt(*b"HMAT", HMAT_REVISION, *b"CHHMAT  ");
    hmat.append_slice(&0u32.to_le_bytes()); // reserved
    for node in &targets {
        let attributes = MemoryProximityDomain::new(node.initiator, node.domain);
        hmat.append_slice(&aml_bytes(&attributes));
    }
    let latency = locality(
        ACCESS_LATENCY,
        &initiators,
        &targets,
        |n| n.latency_ns,
        PS_PER_NS,
        true,
    );
    let bandwidth = locality(
        ACCESS_BANDWIDTH,
        &initiators,
        &targets,
        |n| n.bandwidth_mbps,
        1,
        false,
    );
    hmat.append_slice(&latency.to_bytes());
    hmat.append_slice(&bandwidth.to_bytes());
    hmat.as_slice().to_vec()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::test_util::*;
    use super::super::validate::resolve_numa;
    use super::super::{AcpiConfig, MAX_BANDWIDTH_MBPS, MAX_LATENCY_NS};
    use super::*;

    const HMAT_HEADER: usize = 40;

    fn hmat(cfg: &AcpiConfig) -> Vec<u8> {
        build_hmat(&resolve_numa(cfg).expect("valid").expect("NUMA"))
    }

    /// (flags, initiator, memory domain) of every type-0 structure.
    fn proximity(b: &[u8]) -> Vec<(u16, u32, u32)> {
        hmat_subtables(b, HMAT_HEADER)
            .into_iter()
            .filter(|s| le16(s, 0) == 0)
            .map(|s| {
                assert_eq!(s.len(), 40);
                (le16(s, 8), le32(s, 12), le32(s, 16))
            })
            .collect()
    }

    /// Linux's revision-2 `hmat_normalize()`.
    fn normalize(entry: u16, base: u64, data_type: u8) -> u32 {
        if entry == 0 || entry == 0xffff || base > u64::from(u32::MAX / u32::from(entry)) {
            return 0;
        }
        let value = u32::from(entry) * base as u32;
        if data_type <= 2 {
            value.div_ceil(1000)
        } else {
            value
        }
    }

    /// data type -> (initiator, target) -> value as Linux reads it.
    fn localities(b: &[u8]) -> BTreeMap<u8, BTreeMap<(u32, u32), u32>> {
        let mut out = BTreeMap::new();
        for s in hmat_subtables(b, HMAT_HEADER) {
            if le16(s, 0) != 1 {
                continue;
            }
            assert_eq!(s[8] & 0x0f, 0, "memory hierarchy");
            let data_type = s[9];
            let ni = le32(s, 12) as usize;
            let nt = le32(s, 16) as usize;
            let base = le64(s, 24);
            assert_eq!(s.len(), 32 + 4 * ni + 4 * nt + 2 * ni * nt);
            let inits: Vec<u32> = (0..ni).map(|i| le32(s, 32 + 4 * i)).collect();
            let targs: Vec<u32> = (0..nt).map(|t| le32(s, 32 + 4 * ni + 4 * t)).collect();
            let entries = 32 + 4 * ni + 4 * nt;
            let mut values = BTreeMap::new();
            for (i, init) in inits.iter().enumerate() {
                for (t, targ) in targs.iter().enumerate() {
                    let entry = le16(s, entries + 2 * (i * nt + t));
                    values.insert((*init, *targ), normalize(entry, base, data_type));
                }
            }
            assert!(out.insert(data_type, values).is_none(), "one per type");
        }
        out
    }

    /// mm/memory-tiers.c `mt_perf_to_adistance()` with read == write, then
    /// the tier id (`adistance >> MEMTIER_CHUNK_BITS`).
    fn linux_memory_tier(lat: u32, bw: u32, dram_lat: u32, dram_bw: u32) -> i64 {
        let adist = 576i64 * (2 * i64::from(lat)) / (2 * i64::from(dram_lat))
            * (2 * i64::from(dram_bw))
            / (2 * i64::from(bw));
        adist >> 7
    }

    #[test]
    fn hmat_is_revision_2_and_checksummed() {
        let b = hmat(&two_node_config());
        assert_eq!(&b[0..4], b"HMAT");
        assert_eq!(b[8], 2);
        assert_eq!(checksum(&b), 0);
        assert_eq!(le32(&b, 4) as usize, b.len());
    }

    #[test]
    fn every_memory_node_has_a_proximity_structure_with_a_valid_cpu_initiator() {
        let mut cfg = three_node_config();
        cfg.numa[2].distances = vec![(1, 25), (0, 30)];
        let b = hmat(&cfg);
        assert_eq!(proximity(&b), vec![(1, 0, 0), (1, 1, 1), (1, 1, 2)]);
    }

    #[test]
    fn cpu_only_nodes_are_initiators_but_get_no_proximity_structure() {
        let mut cfg = three_node_config();
        cfg.numa[1].memory.clear();
        let b = hmat(&cfg);
        assert_eq!(proximity(&b), vec![(1, 0, 0), (1, 0, 2)]);
        let loc = localities(&b);
        let inits: Vec<u32> = loc[&ACCESS_LATENCY].keys().map(|k| k.0).collect();
        assert!(inits.contains(&1));
        assert!(!loc[&ACCESS_LATENCY].keys().any(|k| k.1 == 1));
    }

    #[test]
    fn latency_and_bandwidth_entries_decode_to_the_configured_values() {
        let mut cfg = three_node_config();
        cfg.numa[0].access_latency_ns = Some(75);
        cfg.numa[0].access_bandwidth_mbps = Some(25_000);
        cfg.numa[1].access_latency_ns = Some(78);
        cfg.numa[2].access_latency_ns = Some(300);
        cfg.numa[2].access_bandwidth_mbps = Some(5_000);
        let loc = localities(&hmat(&cfg));
        assert_eq!(loc.len(), 2, "access latency and access bandwidth only");
        let lat = &loc[&ACCESS_LATENCY];
        let bw = &loc[&ACCESS_BANDWIDTH];
        for init in [0, 1] {
            assert_eq!(lat[&(init, 0)], 75);
            assert_eq!(lat[&(init, 1)], 78);
            assert_eq!(lat[&(init, 2)], 300);
            assert_eq!(bw[&(init, 0)], 25_000);
            assert_eq!(bw[&(init, 1)], 20_000);
            assert_eq!(bw[&(init, 2)], 5_000);
        }
        assert_eq!(lat.len(), 6, "2 initiators x 3 targets");
    }

    #[test]
    fn memory_only_node_defaults_land_in_a_lower_linux_memory_tier() {
        let loc = localities(&hmat(&two_node_config()));
        let (lat, bw) = (&loc[&ACCESS_LATENCY], &loc[&ACCESS_BANDWIDTH]);
        let (dram_lat, dram_bw) = (lat[&(0, 0)], bw[&(0, 0)]);
        assert_eq!((dram_lat, dram_bw), (80, 20_000));
        let (slow_lat, slow_bw) = (lat[&(0, 1)], bw[&(0, 1)]);
        assert_eq!((slow_lat, slow_bw), (160, 10_000));
        let dram_tier = linux_memory_tier(dram_lat, dram_bw, dram_lat, dram_bw);
        let slow_tier = linux_memory_tier(slow_lat, slow_bw, dram_lat, dram_bw);
        assert_eq!(dram_tier, 4);
        assert_eq!(slow_tier, 18);
    }

    #[test]
    fn extreme_values_fit_16_bit_entries_and_linux_32_bit_products() {
        let mut cfg = two_node_config();
        cfg.numa[0].access_latency_ns = Some(1);
        cfg.numa[0].access_bandwidth_mbps = Some(1);
        cfg.numa[1].access_latency_ns = Some(MAX_LATENCY_NS);
        cfg.numa[1].access_bandwidth_mbps = Some(MAX_BANDWIDTH_MBPS);
        let loc = localities(&hmat(&cfg));
        let (lat, bw) = (&loc[&ACCESS_LATENCY], &loc[&ACCESS_BANDWIDTH]);
        // Non-zero after Linux's overflow check, and within one base unit.
        let big_lat = lat[&(0, 1)];
        assert!(big_lat >= MAX_LATENCY_NS as u32 && big_lat < MAX_LATENCY_NS as u32 + 100);
        let big_bw = u64::from(bw[&(0, 1)]);
        assert!(big_bw.abs_diff(MAX_BANDWIDTH_MBPS) < 100_000);
        // The small values share the coarse base unit but never become 0.
        assert!(lat[&(0, 0)] >= 1);
        assert!(bw[&(0, 0)] >= 1);
    }

    #[test]
    fn encode_rounds_latency_up_and_bandwidth_to_nearest() {
        assert_eq!(encode(&[80, 160], 1000, true), (1000, vec![80, 160]));
        let (base, entries) = encode(&[1, 200_000], 1000, true);
        assert_eq!(base, 4000);
        assert_eq!(entries, vec![1, 50_000]);
        let (base, entries) = encode(&[5, 200_001], 1, false);
        assert_eq!(base, 4);
        assert_eq!(entries, vec![1, 50_000]);
    }
}
