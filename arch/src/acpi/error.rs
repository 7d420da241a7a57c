//! The error type of the ACPI table builder.

use super::{MAX_BANDWIDTH_MBPS, MAX_LATENCY_NS, MAX_PROXIMITY_DOMAINS};
use crate::layout;

/// Errors from building or writing the ACPI tables.
#[derive(Debug, thiserror::Error)]
pub enum AcpiError {
    /// The configuration has no vCPU.
    #[error("at least one vCPU is required")]
    NoVcpus,
    /// The PCI host bridge's ECAM or BAR window is empty, misaligned or
    /// not entirely below 4 GiB (both are 32-bit resources here).
    #[error(
        "PCI {what} {base:#x}+{size:#x} must be non-empty, 1 MiB aligned for ECAM, and below 4 GiB"
    )]
    InvalidPciWindow {
        /// "ECAM" or "BAR window".
        what: &'static str,
        /// Base address.
        base: u64,
        /// Size.
        size: u64,
    },
    /// Two NUMA nodes share a proximity domain.
    #[error("NUMA proximity domain {0} is configured more than once")]
    DuplicateProximityDomain(u32),
    /// A proximity domain is too large for Linux.
    #[error("NUMA proximity domain {0} is too large (must be below {MAX_PROXIMITY_DOMAINS})")]
    ProximityDomainTooLarge(u32),
    /// A NUMA node lists a vCPU that does not exist.
    #[error("NUMA node {domain} lists vCPU {cpu}, but there are only {vcpus} vCPUs")]
    CpuOutOfRange {
        /// Proximity domain of the node.
        domain: u32,
        /// The offending vCPU.
        cpu: u8,
        /// Number of vCPUs.
        vcpus: u8,
    },
    /// A vCPU is listed twice (in two nodes, or twice in one).
    #[error("vCPU {cpu} is listed in NUMA node {first} and again in NUMA node {second}")]
    CpuListedTwice {
        /// The offending vCPU.
        cpu: u8,
        /// Node where it was first listed.
        first: u32,
        /// Node where it was listed again.
        second: u32,
    },
    /// A NUMA node ends up with neither vCPUs nor memory.
    #[error("NUMA node {0} has neither vCPUs nor memory")]
    EmptyNumaNode(u32),
    /// NUMA nodes are configured, but none has memory.
    #[error("NUMA nodes are configured but none of them has memory")]
    NoNumaMemory,
    /// A memory range is empty or runs past the end of the address space.
    #[error("memory range {base:#x}+{size:#x} of NUMA node {domain} is empty or wraps around")]
    InvalidMemoryRange {
        /// Proximity domain of the node.
        domain: u32,
        /// Base of the range.
        base: u64,
        /// Length of the range.
        size: u64,
    },
    /// Two memory ranges overlap.
    #[error("memory range at {second_base:#x} (NUMA node {second}) overlaps a range of NUMA node {first}")]
    OverlappingMemory {
        /// Node of the lower range.
        first: u32,
        /// Node of the overlapping range.
        second: u32,
        /// Base of the overlapping range.
        second_base: u64,
    },
    /// A distance names a proximity domain that is not configured.
    #[error("NUMA node {from} has a distance to unknown proximity domain {to}")]
    UnknownDistanceDomain {
        /// Node that lists the distance.
        from: u32,
        /// The unknown destination.
        to: u32,
    },
    /// A distance is listed twice for the same pair.
    #[error("NUMA node {from} lists its distance to node {to} more than once")]
    DuplicateDistance {
        /// Node that lists the distance.
        from: u32,
        /// Destination node.
        to: u32,
    },
    /// A distance Linux would reject (self must be 10, others above 10).
    #[error("invalid distance {distance} from NUMA node {from} to {to} (self is 10, others must be 11..=255)")]
    InvalidDistance {
        /// Source node.
        from: u32,
        /// Destination node.
        to: u32,
        /// The rejected value.
        distance: u8,
    },
    /// An HMAT latency outside `1..=MAX_LATENCY_NS`.
    #[error("access latency {value} ns of NUMA node {domain} is outside 1..={MAX_LATENCY_NS}")]
    InvalidLatency {
        /// Node.
        domain: u32,
        /// Rejected latency in ns.
        value: u64,
    },
    /// An HMAT bandwidth outside `1..=MAX_BANDWIDTH_MBPS`.
    #[error(
        "access bandwidth {value} MB/s of NUMA node {domain} is outside 1..={MAX_BANDWIDTH_MBPS}"
    )]
    InvalidBandwidth {
        /// Node.
        domain: u32,
        /// Rejected bandwidth in MB/s.
        value: u64,
    },
    /// More virtio-mmio devices than the DSDT can name.
    #[error("{0} virtio-mmio devices configured; at most 256 are supported")]
    TooManyVirtioMmioDevices(usize),
    /// A virtio-mmio window is empty or wraps around.
    #[error("virtio-mmio device {index}: window {base:#x}+{size:#x} is empty or wraps around")]
    InvalidVirtioMmioWindow {
        /// Position in [`AcpiConfig::virtio_mmio`](super::AcpiConfig::virtio_mmio).
        index: usize,
        /// Window base.
        base: u64,
        /// Window size.
        size: u64,
    },
    /// Two virtio-mmio windows overlap.
    #[error("virtio-mmio devices {first} and {second} have overlapping windows")]
    OverlappingVirtioMmio {
        /// Position of one device.
        first: usize,
        /// Position of the other device.
        second: usize,
    },
    /// A virtio-mmio GSI is beyond the IOAPIC or used by the platform.
    #[error("virtio-mmio device {index}: GSI {gsi} is not available (must be below {}, not 0, 2, COM1's or the GED's)", layout::IOAPIC_NUM_PINS)]
    InvalidVirtioMmioGsi {
        /// Position in [`AcpiConfig::virtio_mmio`](super::AcpiConfig::virtio_mmio).
        index: usize,
        /// The GSI.
        gsi: u32,
    },
    /// Two virtio-mmio devices share a GSI.
    #[error("virtio-mmio devices {first} and {second} share GSI {gsi}")]
    DuplicateVirtioMmioGsi {
        /// Position of one device.
        first: usize,
        /// Position of the other device.
        second: usize,
        /// The shared GSI.
        gsi: u32,
    },
    /// The tables do not fit in the ACPI area.
    #[error("ACPI tables need {needed} bytes, but the ACPI area holds only {available}")]
    TablesTooLarge {
        /// Bytes needed (including alignment padding).
        needed: u64,
        /// Size of the area.
        available: u64,
    },
    /// Writing a table into guest memory failed.
    #[error("cannot write ACPI table {table} at {addr:#x} into guest memory")]
    GuestMemory {
        /// Signature of the table.
        table: String,
        /// Guest-physical address of the table.
        addr: u64,
        /// The underlying error.
        #[source]
        source: vm_memory::GuestMemoryError,
    },
}
