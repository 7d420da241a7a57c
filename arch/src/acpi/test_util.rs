//! Helpers shared by the ACPI unit tests: byte readers, sub-table walkers and
//! sample configurations.

use super::{AcpiConfig, NumaNodeDesc, VirtioMmioDesc};
use crate::layout;

pub const GIB: u64 = 1 << 30;

/// Sum of all bytes; 0 for a correctly checksummed table.
pub use crate::checksum::sum as checksum;

pub fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub fn le32(b: &[u8], off: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(v)
}

pub fn le64(b: &[u8], off: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(v)
}

/// Sub-tables with a one-byte type and one-byte length (MADT, SRAT), from
/// `start` to the end of the table.
pub fn byte_subtables(table: &[u8], start: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut off = start;
    while off < table.len() {
        let len = table[off + 1] as usize;
        assert!(
            len >= 2 && off + len <= table.len(),
            "bad sub-table at {off}"
        );
        out.push(&table[off..off + len]);
        off += len;
    }
    out
}

/// Sub-tables with a u16 type and a u32 length at offset 4 (HMAT).
pub fn hmat_subtables(table: &[u8], start: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut off = start;
    while off < table.len() {
        let len = le32(table, off + 4) as usize;
        assert!(
            len >= 8 && off + len <= table.len(),
            "bad sub-table at {off}"
        );
        out.push(&table[off..off + len]);
        off += len;
    }
    out
}

/// Number of (possibly overlapping) occurrences of `needle` in `hay`.
pub fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    count(hay, needle) > 0
}

/// `n` 4 KiB virtio-mmio windows on consecutive GSIs.
pub fn virtio_devices(n: usize) -> Vec<VirtioMmioDesc> {
    (0..n)
        .map(|i| VirtioMmioDesc {
            base: layout::VIRTIO_MMIO_START + i as u64 * layout::VIRTIO_MMIO_SIZE,
            size: layout::VIRTIO_MMIO_SIZE,
            gsi: layout::VIRTIO_MMIO_FIRST_IRQ + i as u32,
        })
        .collect()
}

/// Node 0: vCPUs 0-1 and the low 2 GiB; node 1: 1 GiB above 4 GiB, no vCPUs.
pub fn two_node_config() -> AcpiConfig {
    AcpiConfig {
        vcpus: 2,
        max_vcpus: 2,
        numa: vec![
            NumaNodeDesc {
                proximity_domain: 0,
                cpus: vec![0, 1],
                memory: vec![(0, 2 * GIB)],
                hotplug_memory: Vec::new(),
                ..Default::default()
            },
            NumaNodeDesc {
                proximity_domain: 1,
                memory: vec![(4 * GIB, GIB)],
                hotplug_memory: Vec::new(),
                ..Default::default()
            },
        ],
        virtio_mmio: virtio_devices(2),
        pci: None,
    }
}

/// Nodes 0 and 1 with two vCPUs and memory each, node 2 memory only.
pub fn three_node_config() -> AcpiConfig {
    AcpiConfig {
        vcpus: 4,
        max_vcpus: 4,
        numa: vec![
            NumaNodeDesc {
                proximity_domain: 0,
                cpus: vec![0, 1],
                memory: vec![(0, 2 * GIB)],
                hotplug_memory: Vec::new(),
                ..Default::default()
            },
            NumaNodeDesc {
                proximity_domain: 1,
                cpus: vec![2, 3],
                memory: vec![(4 * GIB, 2 * GIB)],
                hotplug_memory: Vec::new(),
                ..Default::default()
            },
            NumaNodeDesc {
                proximity_domain: 2,
                memory: vec![(6 * GIB, GIB), (8 * GIB, GIB)],
                hotplug_memory: Vec::new(),
                ..Default::default()
            },
        ],
        virtio_mmio: Vec::new(),
        pci: None,
    }
}
