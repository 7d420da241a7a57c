//! SRAT (vCPU and memory affinity) and SLIT (node distances).
//!
//! Both are built on `acpi_tables::sdt::Sdt` instead of the crate's `SRAT`
//! and `SLIT` types:
//! - the crate's SRAT cannot hold a Processor Local APIC Affinity structure
//!   (type 0): its structure list is private and it only has `add_*`
//!   methods for memory, generic initiator and RISC-V affinity. It also
//!   writes SRAT revision 1, with which Linux keeps only the low 8 bits of
//!   proximity domains; this SRAT is revision 3. The crate's
//!   `MemoryAffinity` structure is correct and is reused.
//! - the crate's SLIT can only set distances symmetrically, while a
//!   configured one-way distance must stay one-way.

use acpi_tables::srat::MemoryAffinity;

use super::validate::NumaTopology;
use super::{aml_bytes, new_sdt};

const SRAT_REVISION: u8 = 3;
const SLIT_REVISION: u8 = 1;

/// SRAT Processor Local APIC/SAPIC Affinity Structure (type 0, 16 bytes):
/// ties an xAPIC id to a proximity domain.
struct LocalApicAffinity {
    apic_id: u8,
    proximity_domain: u32,
}

impl LocalApicAffinity {
    const TYPE: u8 = 0;
    const LEN: u8 = 16;
    const ENABLED: u32 = 1 << 0;

    fn to_bytes(&self) -> [u8; 16] {
        let domain = self.proximity_domain.to_le_bytes();
        let mut s = [0u8; 16];
        s[0] = Self::TYPE;
        s[1] = Self::LEN;
        s[2] = domain[0]; // proximity domain bits 7:0
        s[3] = self.apic_id;
        s[4..8].copy_from_slice(&Self::ENABLED.to_le_bytes());
        s[8] = 0; // local SAPIC EID
        s[9..12].copy_from_slice(&domain[1..4]); // proximity domain bits 31:8
        s[12..16].copy_from_slice(&0u32.to_le_bytes()); // clock domain
        s
    }
}

/// Builds the SRAT: one enabled APIC affinity per vCPU and one enabled
/// memory affinity per memory range (memory-only nodes appear only here).
pub(super) fn build_srat(topology: &NumaTopology) -> Vec<u8> {
    let mut srat = new_sdt(*b"SRAT", SRAT_REVISION, *b"CHSRAT  ");
    srat.append_slice(&1u32.to_le_bytes()); // reserved, must be 1
    srat.append_slice(&[0u8; 8]); // reserved
    for (apic_id, &proximity_domain) in topology.cpu_domain.iter().enumerate() {
        let affinity = LocalApicAffinity {
            apic_id: apic_id as u8,
            proximity_domain,
        };
        srat.append_slice(&affinity.to_bytes());
    }
    for node in &topology.nodes {
        for &(base, size) in &node.memory {
            let affinity = MemoryAffinity::new(node.domain, base, size).enabled();
            srat.append_slice(&aml_bytes(&affinity));
        }
        // Linux gives memory hot-plugged here (virtio-mem) to this node.
        for &(base, size) in &node.hotplug_memory {
            let affinity = MemoryAffinity::new(node.domain, base, size)
                .enabled()
                .hotpluggable();
            srat.append_slice(&aml_bytes(&affinity));
        }
    }
    srat.as_slice().to_vec()
}

/// Builds the SLIT: `localities` x `localities` bytes indexed by proximity
/// domain, row = from, column = to.
pub(super) fn build_slit(topology: &NumaTopology) -> Vec<u8> {
    let mut slit = new_sdt(*b"SLIT", SLIT_REVISION, *b"CHSLIT  ");
    slit.append_slice(&(topology.localities as u64).to_le_bytes());
    slit.append_slice(&topology.distances);
    slit.as_slice().to_vec()
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::super::validate::resolve_numa;
    use super::super::{AcpiConfig, NumaNodeDesc};
    use super::*;

    const SRAT_HEADER: usize = 48;

    fn topology(cfg: &AcpiConfig) -> NumaTopology {
        resolve_numa(cfg).expect("valid").expect("NUMA")
    }

    /// (APIC id, proximity domain, flags) of every type-0 entry.
    fn apic_affinities(srat: &[u8]) -> Vec<(u8, u32, u32)> {
        byte_subtables(srat, SRAT_HEADER)
            .into_iter()
            .filter(|s| s[0] == 0)
            .map(|s| {
                assert_eq!(s.len(), 16);
                let domain = u32::from_le_bytes([s[2], s[9], s[10], s[11]]);
                (s[3], domain, le32(s, 4))
            })
            .collect()
    }

    /// (domain, base, length, flags) of every type-1 entry.
    fn memory_affinities(srat: &[u8]) -> Vec<(u32, u64, u64, u32)> {
        byte_subtables(srat, SRAT_HEADER)
            .into_iter()
            .filter(|s| s[0] == 1)
            .map(|s| {
                assert_eq!(s.len(), 40);
                (le32(s, 2), le64(s, 8), le64(s, 16), le32(s, 28))
            })
            .collect()
    }

    #[test]
    fn srat_header_is_revision_3_with_the_reserved_one() {
        let b = build_srat(&topology(&two_node_config()));
        assert_eq!(&b[0..4], b"SRAT");
        assert_eq!(b[8], 3);
        assert_eq!(le32(&b, 36), 1);
        assert_eq!(le64(&b, 40), 0);
        assert_eq!(checksum(&b), 0);
        assert_eq!(le32(&b, 4) as usize, b.len());
    }

    #[test]
    fn srat_has_an_enabled_apic_affinity_per_vcpu_in_its_nodes_domain() {
        let b = build_srat(&topology(&three_node_config()));
        assert_eq!(
            apic_affinities(&b),
            vec![(0, 0, 1), (1, 0, 1), (2, 1, 1), (3, 1, 1)]
        );
    }

    #[test]
    fn srat_lists_the_memory_of_a_cpu_less_node() {
        let b = build_srat(&topology(&three_node_config()));
        let mem = memory_affinities(&b);
        assert_eq!(
            mem,
            vec![
                (0, 0, 2 * GIB, 1),
                (1, 4 * GIB, 2 * GIB, 1),
                (2, 6 * GIB, GIB, 1),
                (2, 8 * GIB, GIB, 1),
            ]
        );
        assert!(apic_affinities(&b).iter().all(|&(_, d, _)| d != 2));
    }

    /// virtio-mem regions: Linux takes the node of hot-plugged memory
    /// from these entries (flags: enabled | hot-pluggable).
    #[test]
    fn srat_marks_hotplug_ranges_hot_pluggable_in_their_node() {
        let mut cfg = two_node_config();
        cfg.numa[1].hotplug_memory = vec![(16 * GIB, GIB)];
        let b = build_srat(&topology(&cfg));
        let mem = memory_affinities(&b);
        assert_eq!(mem.last(), Some(&(1, 16 * GIB, GIB, 0b11)));
        assert!(mem[..mem.len() - 1].iter().all(|m| m.3 == 1));
    }

    #[test]
    fn srat_encodes_all_bits_of_the_proximity_domain() {
        let cfg = AcpiConfig {
            vcpus: 1,
            numa: vec![NumaNodeDesc {
                proximity_domain: 255,
                cpus: vec![0],
                memory: vec![(0, GIB)],
                hotplug_memory: Vec::new(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let b = build_srat(&topology(&cfg));
        assert_eq!(apic_affinities(&b), vec![(0, 255, 1)]);
        assert_eq!(memory_affinities(&b)[0].0, 255);
    }

    #[test]
    fn slit_matrix_has_local_diagonal_default_20_and_configured_distances() {
        let mut cfg = three_node_config();
        cfg.numa[0].distances = vec![(2, 30)];
        cfg.numa[2].distances = vec![(1, 25)];
        cfg.numa[1].distances = vec![(2, 40)];
        let b = build_slit(&topology(&cfg));
        assert_eq!(&b[0..4], b"SLIT");
        assert_eq!(checksum(&b), 0);
        assert_eq!(le32(&b, 4) as usize, b.len());
        assert_eq!(le64(&b, 36), 3);
        #[rustfmt::skip]
        let expected = [
            10, 20, 30,
            20, 10, 40,
            30, 25, 10,
        ];
        assert_eq!(&b[44..], &expected);
    }

    #[test]
    fn slit_is_indexed_by_proximity_domain_even_when_domains_are_sparse() {
        let cfg = AcpiConfig {
            vcpus: 1,
            numa: vec![
                NumaNodeDesc {
                    proximity_domain: 3,
                    cpus: vec![0],
                    memory: vec![(0, GIB)],
                    hotplug_memory: Vec::new(),
                    distances: vec![(1, 17)],
                    ..Default::default()
                },
                NumaNodeDesc {
                    proximity_domain: 1,
                    memory: vec![(GIB, GIB)],
                    hotplug_memory: Vec::new(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let b = build_slit(&topology(&cfg));
        assert_eq!(le64(&b, 36), 4);
        let entry = |from: usize, to: usize| b[44 + from * 4 + to];
        assert_eq!(entry(3, 1), 17);
        assert_eq!(entry(1, 3), 17);
        for d in 0..4 {
            assert_eq!(entry(d, d), 10);
        }
        assert_eq!(b.len(), 44 + 16);
    }
}
