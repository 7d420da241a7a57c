//! Checks an [`AcpiConfig`] and resolves its NUMA description into the
//! complete topology the SRAT, SLIT and HMAT are built from: every vCPU in
//! exactly one node, a full distance matrix, effective HMAT performance
//! values and the HMAT initiator of every node.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    is_platform_gsi, AcpiConfig, AcpiError, NumaNodeDesc, DEFAULT_CPU_NODE_BANDWIDTH_MBPS,
    DEFAULT_CPU_NODE_LATENCY_NS, MAX_BANDWIDTH_MBPS, MAX_LATENCY_NS, MAX_PROXIMITY_DOMAINS,
};
use crate::layout;

/// SLIT distance of a node to itself (Linux requires exactly this).
pub(super) const LOCAL_DISTANCE: u8 = 10;
/// SLIT distance between two nodes when nothing is configured.
pub(super) const DEFAULT_REMOTE_DISTANCE: u8 = 20;
/// The DSDT names virtio-mmio devices `VR00`..`VRFF`.
const MAX_VIRTIO_MMIO_DEVICES: usize = 256;

/// One NUMA node after resolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NumaNode {
    pub domain: u32,
    /// vCPUs of the node, ascending, including vCPUs no node listed.
    pub cpus: Vec<u8>,
    pub memory: Vec<(u64, u64)>,
    /// Hot-pluggable ranges (SRAT only; HMAT and the checks above are
    /// about boot RAM).
    pub hotplug_memory: Vec<(u64, u64)>,
    /// Effective HMAT access latency (ns) of this node's memory.
    pub latency_ns: u64,
    /// Effective HMAT access bandwidth (MB/s) of this node's memory.
    pub bandwidth_mbps: u64,
    /// Proximity domain of the node whose vCPUs are this node's memory's
    /// "attached initiator" in the HMAT: the node itself if it has vCPUs,
    /// else the nearest (by SLIT distance) node with vCPUs.
    pub initiator: u32,
}

impl NumaNode {
    pub fn has_cpus(&self) -> bool {
        !self.cpus.is_empty()
    }

    pub fn has_memory(&self) -> bool {
        !self.memory.is_empty()
    }
}

/// The resolved NUMA topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NumaTopology {
    /// Nodes in configuration order.
    pub nodes: Vec<NumaNode>,
    /// Proximity domain of every vCPU, indexed by APIC id.
    pub cpu_domain: Vec<u32>,
    /// Number of SLIT localities: highest proximity domain + 1.
    pub localities: usize,
    /// SLIT matrix, row-major: `distances[from * localities + to]`.
    pub distances: Vec<u8>,
}

impl NumaTopology {
    pub fn distance(&self, from: u32, to: u32) -> u8 {
        let index = from as usize * self.localities + to as usize;
        self.distances
            .get(index)
            .copied()
            .unwrap_or(DEFAULT_REMOTE_DISTANCE)
    }
}

/// Checks the virtio-mmio windows and their GSIs.
pub(super) fn check_virtio_mmio(cfg: &AcpiConfig) -> Result<(), AcpiError> {
    let devices = &cfg.virtio_mmio;
    if devices.len() > MAX_VIRTIO_MMIO_DEVICES {
        return Err(AcpiError::TooManyVirtioMmioDevices(devices.len()));
    }
    let mut windows = Vec::with_capacity(devices.len());
    let mut gsis: BTreeMap<u32, usize> = BTreeMap::new();
    for (index, dev) in devices.iter().enumerate() {
        let end = dev.base.checked_add(dev.size).filter(|_| dev.size > 0);
        let Some(end) = end else {
            return Err(AcpiError::InvalidVirtioMmioWindow {
                index,
                base: dev.base,
                size: dev.size,
            });
        };
        windows.push((dev.base, end, index));
        if dev.gsi >= layout::IOAPIC_NUM_PINS || is_platform_gsi(dev.gsi) {
            return Err(AcpiError::InvalidVirtioMmioGsi {
                index,
                gsi: dev.gsi,
            });
        }
        if let Some(&first) = gsis.get(&dev.gsi) {
            return Err(AcpiError::DuplicateVirtioMmioGsi {
                first,
                second: index,
                gsi: dev.gsi,
            });
        }
        gsis.insert(dev.gsi, index);
    }
    windows.sort_unstable();
    for pair in windows.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(AcpiError::OverlappingVirtioMmio {
                first: pair[0].2,
                second: pair[1].2,
            });
        }
    }
    Ok(())
}

/// Checks the PCI host bridge's windows: ECAM of one bus (1 MiB aligned)
/// and the BAR window, both non-empty and below 4 GiB.
pub(super) fn check_pci(cfg: &AcpiConfig) -> Result<(), AcpiError> {
    let Some(pci) = &cfg.pci else {
        return Ok(());
    };
    let below_4g =
        |base: u64, size: u64| size > 0 && base.checked_add(size).is_some_and(|end| end <= 1 << 32);
    if !below_4g(pci.ecam_base, pci.ecam_size)
        || pci.ecam_size != 1 << 20
        || !pci.ecam_base.is_multiple_of(1 << 20)
    {
        return Err(AcpiError::InvalidPciWindow {
            what: "ECAM",
            base: pci.ecam_base,
            size: pci.ecam_size,
        });
    }
    if !below_4g(pci.mmio_base, pci.mmio_size) {
        return Err(AcpiError::InvalidPciWindow {
            what: "BAR window",
            base: pci.mmio_base,
            size: pci.mmio_size,
        });
    }
    Ok(())
}

/// Validates `cfg.numa` and resolves it; `None` when no NUMA is configured.
pub(super) fn resolve_numa(cfg: &AcpiConfig) -> Result<Option<NumaTopology>, AcpiError> {
    let Some(first_node) = cfg.numa.first() else {
        return Ok(None);
    };
    if cfg.vcpus == 0 {
        return Err(AcpiError::NoVcpus);
    }
    let domains = check_domains(&cfg.numa)?;
    let owner = check_cpus(cfg)?;
    check_memory(&cfg.numa)?;
    let explicit = check_distances(&cfg.numa, &domains)?;
    check_performance(&cfg.numa)?;

    // vCPUs no node lists go to the first node that lists vCPUs (or to the
    // first node): every vCPU needs an SRAT entry, or Linux spreads the
    // unlisted ones round-robin over the nodes.
    let fallback = cfg
        .numa
        .iter()
        .find(|n| !n.cpus.is_empty())
        .unwrap_or(first_node)
        .proximity_domain;
    let cpu_domain: Vec<u32> = owner.iter().map(|o| o.unwrap_or(fallback)).collect();

    let localities = domains.last().map_or(0, |&d| d as usize + 1);
    let mut distances = vec![DEFAULT_REMOTE_DISTANCE; localities * localities];
    for from in 0..localities {
        for to in 0..localities {
            let key = (from as u32, to as u32);
            distances[from * localities + to] = if from == to {
                LOCAL_DISTANCE
            } else {
                explicit
                    .get(&key)
                    .or_else(|| explicit.get(&(key.1, key.0)))
                    .copied()
                    .unwrap_or(DEFAULT_REMOTE_DISTANCE)
            };
        }
    }
    let mut topology = NumaTopology {
        nodes: Vec::with_capacity(cfg.numa.len()),
        cpu_domain,
        localities,
        distances,
    };

    for desc in &cfg.numa {
        let cpus: Vec<u8> = (0..cfg.vcpus)
            .filter(|&cpu| topology.cpu_domain[cpu as usize] == desc.proximity_domain)
            .collect();
        if cpus.is_empty() && desc.memory.is_empty() {
            return Err(AcpiError::EmptyNumaNode(desc.proximity_domain));
        }
        topology.nodes.push(NumaNode {
            domain: desc.proximity_domain,
            latency_ns: desc
                .access_latency_ns
                .unwrap_or(DEFAULT_CPU_NODE_LATENCY_NS),
            bandwidth_mbps: desc
                .access_bandwidth_mbps
                .unwrap_or(DEFAULT_CPU_NODE_BANDWIDTH_MBPS),
            initiator: desc.proximity_domain,
            cpus,
            memory: desc.memory.clone(),
            hotplug_memory: desc.hotplug_memory.clone(),
        });
    }
    resolve_memory_only_nodes(&mut topology, &cfg.numa)?;
    warn_on_mismatched_dram(&topology);
    Ok(Some(topology))
}

/// Picks the initiator of every memory-only node and derives its default
/// performance from it: 2x the latency, 1/2 the bandwidth. That puts it in a
/// lower Linux memory tier (abstract distance 4x that of DRAM).
fn resolve_memory_only_nodes(
    topology: &mut NumaTopology,
    descs: &[NumaNodeDesc],
) -> Result<(), AcpiError> {
    let cpu_nodes: Vec<(u32, u64, u64)> = topology
        .nodes
        .iter()
        .filter(|n| n.has_cpus())
        .map(|n| (n.domain, n.latency_ns, n.bandwidth_mbps))
        .collect();
    for (index, desc) in descs.iter().enumerate() {
        if topology.nodes[index].has_cpus() {
            continue;
        }
        let domain = desc.proximity_domain;
        // `min_by_key` keeps the first of equally near nodes.
        let &(initiator, latency, bandwidth) = cpu_nodes
            .iter()
            .min_by_key(|(cpu_domain, _, _)| topology.distance(*cpu_domain, domain))
            .ok_or(AcpiError::NoVcpus)?;
        let node = &mut topology.nodes[index];
        node.initiator = initiator;
        node.latency_ns = desc
            .access_latency_ns
            .unwrap_or_else(|| latency.saturating_mul(2).min(MAX_LATENCY_NS));
        node.bandwidth_mbps = desc
            .access_bandwidth_mbps
            .unwrap_or_else(|| (bandwidth / 2).max(1));
    }
    Ok(())
}

/// Linux takes the performance of the first node with vCPUs and memory as
/// the DRAM reference and disables HMAT-based tiering if another such node
/// differs from it by more than 10% (mm/memory-tiers.c).
fn warn_on_mismatched_dram(topology: &NumaTopology) {
    let mut dram = topology
        .nodes
        .iter()
        .filter(|n| n.has_cpus() && n.has_memory());
    let Some(reference) = dram.next() else {
        return;
    };
    let differs = |a: u64, reference: u64| a.abs_diff(reference).saturating_mul(10) > reference;
    for node in dram {
        if differs(node.latency_ns, reference.latency_ns)
            || differs(node.bandwidth_mbps, reference.bandwidth_mbps)
        {
            log::warn!(
                "NUMA node {} performance differs >10% from node {}; Linux will not use the HMAT for memory tiering",
                node.domain,
                reference.domain
            );
        }
    }
}

/// Bytes of `regions` (`(base, length)`) outside every one of the
/// non-overlapping `ranges`.
pub(super) fn uncovered_bytes(regions: &[(u64, u64)], ranges: &[(u64, u64)]) -> u64 {
    let end = |base: u64, len: u64| base.saturating_add(len);
    regions
        .iter()
        .map(|&(r_base, r_len)| {
            let covered: u64 = ranges
                .iter()
                .map(|&(base, len)| {
                    let lo = base.max(r_base);
                    let hi = end(base, len).min(end(r_base, r_len));
                    hi.saturating_sub(lo)
                })
                .sum();
            r_len.saturating_sub(covered)
        })
        .sum()
}

/// Unique, in range; returns the sorted set.
fn check_domains(nodes: &[NumaNodeDesc]) -> Result<Vec<u32>, AcpiError> {
    let mut seen = BTreeSet::new();
    for node in nodes {
        let domain = node.proximity_domain;
        if domain >= MAX_PROXIMITY_DOMAINS {
            return Err(AcpiError::ProximityDomainTooLarge(domain));
        }
        if !seen.insert(domain) {
            return Err(AcpiError::DuplicateProximityDomain(domain));
        }
    }
    Ok(seen.into_iter().collect())
}

/// Every listed vCPU exists and is listed once; returns each vCPU's node.
fn check_cpus(cfg: &AcpiConfig) -> Result<Vec<Option<u32>>, AcpiError> {
    let mut owner: Vec<Option<u32>> = vec![None; cfg.vcpus as usize];
    for node in &cfg.numa {
        let domain = node.proximity_domain;
        for &cpu in &node.cpus {
            let slot = owner
                .get_mut(cpu as usize)
                .ok_or(AcpiError::CpuOutOfRange {
                    domain,
                    cpu,
                    vcpus: cfg.vcpus,
                })?;
            if let Some(first) = *slot {
                return Err(AcpiError::CpuListedTwice {
                    cpu,
                    first,
                    second: domain,
                });
            }
            *slot = Some(domain);
        }
    }
    Ok(owner)
}

/// Ranges are non-empty, do not wrap and do not overlap (Linux refuses
/// overlapping SRAT ranges of different nodes and falls back to no NUMA).
fn check_memory(nodes: &[NumaNodeDesc]) -> Result<(), AcpiError> {
    let mut ranges = Vec::new();
    for node in nodes {
        let domain = node.proximity_domain;
        for &(base, size) in &node.memory {
            let end = base.checked_add(size).filter(|_| size > 0);
            let Some(end) = end else {
                return Err(AcpiError::InvalidMemoryRange { domain, base, size });
            };
            ranges.push((base, end, domain));
        }
    }
    if ranges.is_empty() {
        return Err(AcpiError::NoNumaMemory);
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(AcpiError::OverlappingMemory {
                first: pair[0].2,
                second: pair[1].2,
                second_base: pair[1].0,
            });
        }
    }
    Ok(())
}

/// Distances name configured domains, once each, with values Linux's
/// `slit_valid()` accepts; returns them keyed by `(from, to)`.
fn check_distances(
    nodes: &[NumaNodeDesc],
    domains: &[u32],
) -> Result<BTreeMap<(u32, u32), u8>, AcpiError> {
    let mut explicit = BTreeMap::new();
    for node in nodes {
        let from = node.proximity_domain;
        for &(to, distance) in &node.distances {
            if domains.binary_search(&to).is_err() {
                return Err(AcpiError::UnknownDistanceDomain { from, to });
            }
            let valid = if to == from {
                distance == LOCAL_DISTANCE
            } else {
                distance > LOCAL_DISTANCE
            };
            if !valid {
                return Err(AcpiError::InvalidDistance { from, to, distance });
            }
            if explicit.insert((from, to), distance).is_some() {
                return Err(AcpiError::DuplicateDistance { from, to });
            }
        }
    }
    Ok(explicit)
}

/// Configured latencies and bandwidths are in the encodable range.
fn check_performance(nodes: &[NumaNodeDesc]) -> Result<(), AcpiError> {
    for node in nodes {
        let domain = node.proximity_domain;
        if let Some(value) = node.access_latency_ns {
            if !(1..=MAX_LATENCY_NS).contains(&value) {
                return Err(AcpiError::InvalidLatency { domain, value });
            }
        }
        if let Some(value) = node.access_bandwidth_mbps {
            if !(1..=MAX_BANDWIDTH_MBPS).contains(&value) {
                return Err(AcpiError::InvalidBandwidth { domain, value });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::super::VirtioMmioDesc;
    use super::*;

    fn resolve(cfg: &AcpiConfig) -> Result<NumaTopology, AcpiError> {
        resolve_numa(cfg).map(|t| t.expect("NUMA configured"))
    }

    fn node(domain: u32, cpus: &[u8], memory: &[(u64, u64)]) -> NumaNodeDesc {
        NumaNodeDesc {
            proximity_domain: domain,
            cpus: cpus.to_vec(),
            memory: memory.to_vec(),
            hotplug_memory: Vec::new(),
            ..Default::default()
        }
    }

    fn numa_config(vcpus: u8, nodes: Vec<NumaNodeDesc>) -> AcpiConfig {
        AcpiConfig {
            vcpus,
            numa: nodes,
            ..Default::default()
        }
    }

    #[test]
    fn pci_windows_must_be_32_bit_and_ecam_one_aligned_bus() {
        let good = crate::acpi::PciHostDesc {
            ecam_base: 0xe000_0000,
            ecam_size: 1 << 20,
            mmio_base: 0xc000_0000,
            mmio_size: 0x1000_0000,
            config_io_port: 0xcf8,
        };
        let with = |pci| AcpiConfig {
            vcpus: 1,
            pci: Some(pci),
            ..Default::default()
        };
        assert!(check_pci(&with(good)).is_ok());
        for bad in [
            crate::acpi::PciHostDesc {
                ecam_base: 0xe008_0000,
                ..good
            },
            crate::acpi::PciHostDesc {
                ecam_size: 2 << 20,
                ..good
            },
            crate::acpi::PciHostDesc {
                mmio_base: 0xffff_0000,
                ..good
            },
            crate::acpi::PciHostDesc {
                mmio_size: 0,
                ..good
            },
        ] {
            assert!(check_pci(&with(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn no_numa_nodes_resolve_to_no_topology() {
        let cfg = AcpiConfig {
            vcpus: 2,
            ..Default::default()
        };
        assert_eq!(resolve_numa(&cfg).expect("ok"), None);
    }

    #[test]
    fn duplicate_and_oversized_proximity_domains_are_rejected() {
        let cfg = numa_config(2, vec![node(1, &[0], &[(0, GIB)]), node(1, &[1], &[])]);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::DuplicateProximityDomain(1))
        ));
        let cfg = numa_config(1, vec![node(MAX_PROXIMITY_DOMAINS, &[0], &[(0, GIB)])]);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::ProximityDomainTooLarge(256))
        ));
    }

    #[test]
    fn cpus_beyond_vcpus_or_listed_twice_are_rejected() {
        let cfg = numa_config(2, vec![node(0, &[0, 2], &[(0, GIB)])]);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::CpuOutOfRange {
                domain: 0,
                cpu: 2,
                vcpus: 2
            })
        ));
        let cfg = numa_config(2, vec![node(0, &[0, 1], &[(0, GIB)]), node(3, &[1], &[])]);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::CpuListedTwice {
                cpu: 1,
                first: 0,
                second: 3
            })
        ));
        let cfg = numa_config(2, vec![node(0, &[1, 1], &[(0, GIB)])]);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::CpuListedTwice { cpu: 1, .. })
        ));
    }

    #[test]
    fn empty_wrapping_and_overlapping_memory_ranges_are_rejected() {
        let cfg = numa_config(1, vec![node(0, &[0], &[(0, 0)])]);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::InvalidMemoryRange { size: 0, .. })
        ));
        let cfg = numa_config(1, vec![node(0, &[0], &[(u64::MAX - 10, 11)])]);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::InvalidMemoryRange { .. })
        ));
        let cfg = numa_config(
            1,
            vec![
                node(0, &[0], &[(0, 2 * GIB)]),
                node(1, &[], &[(GIB, 2 * GIB)]),
            ],
        );
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::OverlappingMemory {
                first: 0,
                second: 1,
                second_base: GIB
            })
        ));
    }

    #[test]
    fn numa_without_any_memory_and_nodes_without_cpus_or_memory_are_rejected() {
        let cfg = numa_config(1, vec![node(0, &[0], &[])]);
        assert!(matches!(resolve(&cfg), Err(AcpiError::NoNumaMemory)));
        let cfg = numa_config(1, vec![node(0, &[0], &[(0, GIB)]), node(1, &[], &[])]);
        assert!(matches!(resolve(&cfg), Err(AcpiError::EmptyNumaNode(1))));
    }

    #[test]
    fn distances_to_unknown_domains_duplicates_and_invalid_values_are_rejected() {
        let mut cfg = two_node_config();
        cfg.numa[0].distances = vec![(7, 30)];
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::UnknownDistanceDomain { from: 0, to: 7 })
        ));
        cfg.numa[0].distances = vec![(1, 30), (1, 40)];
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::DuplicateDistance { from: 0, to: 1 })
        ));
        cfg.numa[0].distances = vec![(1, 10)];
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::InvalidDistance { distance: 10, .. })
        ));
        cfg.numa[0].distances = vec![(0, 12)];
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::InvalidDistance { distance: 12, .. })
        ));
        cfg.numa[0].distances = vec![(0, 10), (1, 255)];
        assert!(resolve(&cfg).is_ok());
    }

    #[test]
    fn zero_or_oversized_latency_and_bandwidth_are_rejected() {
        let mut cfg = two_node_config();
        cfg.numa[1].access_latency_ns = Some(0);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::InvalidLatency {
                domain: 1,
                value: 0
            })
        ));
        cfg.numa[1].access_latency_ns = Some(MAX_LATENCY_NS + 1);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::InvalidLatency { .. })
        ));
        cfg.numa[1].access_latency_ns = None;
        cfg.numa[1].access_bandwidth_mbps = Some(0);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::InvalidBandwidth { .. })
        ));
        cfg.numa[1].access_bandwidth_mbps = Some(MAX_BANDWIDTH_MBPS + 1);
        assert!(matches!(
            resolve(&cfg),
            Err(AcpiError::InvalidBandwidth { .. })
        ));
    }

    #[test]
    fn unlisted_vcpus_join_the_first_node_that_lists_vcpus() {
        let cfg = numa_config(
            4,
            vec![
                node(5, &[], &[(0, GIB)]),
                node(2, &[1], &[(GIB, GIB)]),
                node(3, &[2], &[]),
            ],
        );
        let topo = resolve(&cfg).expect("ok");
        assert_eq!(topo.cpu_domain, vec![2, 2, 3, 2]);
        assert_eq!(topo.nodes[1].cpus, vec![0, 1, 3]);
        assert!(!topo.nodes[0].has_cpus());
    }

    #[test]
    fn all_vcpus_join_the_first_node_when_no_node_lists_vcpus() {
        let cfg = numa_config(
            3,
            vec![node(0, &[], &[(0, GIB)]), node(1, &[], &[(GIB, GIB)])],
        );
        let topo = resolve(&cfg).expect("ok");
        assert_eq!(topo.nodes[0].cpus, vec![0, 1, 2]);
        assert!(topo.nodes[1].cpus.is_empty());
        assert_eq!(topo.nodes[1].initiator, 0);
    }

    #[test]
    fn memory_only_node_defaults_to_twice_the_latency_and_half_the_bandwidth() {
        let topo = resolve(&two_node_config()).expect("ok");
        let (cpu, mem) = (&topo.nodes[0], &topo.nodes[1]);
        assert_eq!(cpu.latency_ns, DEFAULT_CPU_NODE_LATENCY_NS);
        assert_eq!(cpu.bandwidth_mbps, DEFAULT_CPU_NODE_BANDWIDTH_MBPS);
        assert_eq!(cpu.initiator, 0);
        assert_eq!(mem.latency_ns, 2 * DEFAULT_CPU_NODE_LATENCY_NS);
        assert_eq!(mem.bandwidth_mbps, DEFAULT_CPU_NODE_BANDWIDTH_MBPS / 2);
        assert_eq!(mem.initiator, 0);

        let mut cfg = two_node_config();
        cfg.numa[0].access_latency_ns = Some(100);
        cfg.numa[0].access_bandwidth_mbps = Some(30_000);
        cfg.numa[1].access_bandwidth_mbps = Some(1_000);
        let topo = resolve(&cfg).expect("ok");
        assert_eq!(topo.nodes[1].latency_ns, 200);
        assert_eq!(topo.nodes[1].bandwidth_mbps, 1_000);
    }

    #[test]
    fn memory_only_node_uses_the_nearest_cpu_node_as_initiator() {
        let mut cfg = three_node_config();
        // Node 2 (memory only) is nearer to node 1 than to node 0.
        cfg.numa[2].distances = vec![(0, 40), (1, 25)];
        cfg.numa[1].access_latency_ns = Some(90);
        let topo = resolve(&cfg).expect("ok");
        assert_eq!(topo.nodes[2].initiator, 1);
        assert_eq!(topo.nodes[2].latency_ns, 180);
        // Equal distances: the first CPU node wins.
        cfg.numa[2].distances.clear();
        let topo = resolve(&cfg).expect("ok");
        assert_eq!(topo.nodes[2].initiator, 0);
    }

    #[test]
    fn one_sided_distances_apply_in_both_directions_and_explicit_ones_win() {
        let mut cfg = three_node_config();
        cfg.numa[0].distances = vec![(1, 15)];
        cfg.numa[2].distances = vec![(0, 30)];
        cfg.numa[0].distances.push((2, 35));
        let topo = resolve(&cfg).expect("ok");
        assert_eq!(topo.localities, 3);
        assert_eq!(topo.distance(0, 1), 15);
        assert_eq!(topo.distance(1, 0), 15);
        assert_eq!(topo.distance(0, 2), 35);
        assert_eq!(topo.distance(2, 0), 30);
        assert_eq!(topo.distance(1, 2), DEFAULT_REMOTE_DISTANCE);
        assert_eq!(topo.distance(2, 2), LOCAL_DISTANCE);
    }

    #[test]
    fn uncovered_bytes_counts_guest_memory_outside_every_numa_range() {
        let regions = [(0, 3 * GIB), (4 * GIB, 2 * GIB)];
        assert_eq!(
            uncovered_bytes(&regions, &[(0, 3 * GIB), (4 * GIB, 2 * GIB)]),
            0
        );
        assert_eq!(
            uncovered_bytes(&regions, &[(0x10_0000, 3 * GIB)]),
            0x10_0000 + 2 * GIB
        );
        assert_eq!(
            uncovered_bytes(&regions, &[(2 * GIB, 3 * GIB)]),
            2 * GIB + GIB
        );
        assert_eq!(uncovered_bytes(&regions, &[]), 5 * GIB);
    }

    #[test]
    fn virtio_windows_must_be_nonempty_and_disjoint() {
        let mut cfg = AcpiConfig {
            vcpus: 1,
            virtio_mmio: virtio_devices(2),
            ..Default::default()
        };
        assert!(check_virtio_mmio(&cfg).is_ok());
        cfg.virtio_mmio[1].size = 0;
        assert!(matches!(
            check_virtio_mmio(&cfg),
            Err(AcpiError::InvalidVirtioMmioWindow { index: 1, .. })
        ));
        cfg.virtio_mmio[1] = VirtioMmioDesc {
            base: cfg.virtio_mmio[0].base + 0x800,
            size: 0x1000,
            gsi: 12,
        };
        assert!(matches!(
            check_virtio_mmio(&cfg),
            Err(AcpiError::OverlappingVirtioMmio {
                first: 0,
                second: 1
            })
        ));
        cfg.virtio_mmio[1] = VirtioMmioDesc {
            base: u64::MAX,
            size: 2,
            gsi: 12,
        };
        assert!(matches!(
            check_virtio_mmio(&cfg),
            Err(AcpiError::InvalidVirtioMmioWindow { .. })
        ));
    }

    #[test]
    fn virtio_gsis_must_be_free_unique_ioapic_pins() {
        let mut cfg = AcpiConfig {
            vcpus: 1,
            virtio_mmio: virtio_devices(2),
            ..Default::default()
        };
        for bad in [
            0,
            2,
            layout::COM1_IRQ,
            layout::GED_IRQ,
            layout::IOAPIC_NUM_PINS,
        ] {
            cfg.virtio_mmio[1].gsi = bad;
            assert!(
                matches!(
                    check_virtio_mmio(&cfg),
                    Err(AcpiError::InvalidVirtioMmioGsi { index: 1, gsi }) if gsi == bad
                ),
                "GSI {bad}"
            );
        }
        cfg.virtio_mmio[1].gsi = cfg.virtio_mmio[0].gsi;
        assert!(matches!(
            check_virtio_mmio(&cfg),
            Err(AcpiError::DuplicateVirtioMmioGsi {
                first: 0,
                second: 1,
                ..
            })
        ));
    }

    #[test]
    fn more_than_256_virtio_devices_are_rejected() {
        let cfg = AcpiConfig {
            vcpus: 1,
            virtio_mmio: vec![VirtioMmioDesc::default(); 257],
            ..Default::default()
        };
        assert!(matches!(
            check_virtio_mmio(&cfg),
            Err(AcpiError::TooManyVirtioMmioDevices(257))
        ));
    }
}
