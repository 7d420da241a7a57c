//! Serde types of the VM configuration (Cloud Hypervisor's `VmConfig`
//! schema, plus the tier extensions on `NumaConfig`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Default number of boot vCPUs.
pub const DEFAULT_VCPUS: u8 = 1;
/// Default guest RAM when no `--memory` is given (Cloud Hypervisor's).
pub const DEFAULT_MEMORY_SIZE: u64 = 512 << 20;
/// Default guest physical address width.
pub const DEFAULT_MAX_PHYS_BITS: u8 = 46;

/// The whole VM. JSON goes through [`crate::compat`] first (upstream-only
/// fields), then a strict parse that rejects unknown fields; serialized, it
/// carries upstream's defaults for those fields, as upstream's `vm.info` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmConfig {
    /// vCPUs.
    pub cpus: CpusConfig,
    /// Guest RAM and its zones.
    pub memory: MemoryConfig,
    /// What to boot.
    pub payload: Option<PayloadConfig>,
    /// The 16550 UART on ttyS0.
    pub serial: ConsoleConfig,
    /// The virtio console (hvc0).
    pub console: ConsoleConfig,
    /// Guest NUMA nodes.
    pub numa: Option<Vec<NumaConfig>>,
    /// The (double) balloon.
    pub balloon: Option<crate::BalloonConfig>,
    /// Virtio block devices.
    pub disks: Option<Vec<crate::DiskConfig>>,
    /// Virtio network devices.
    pub net: Option<Vec<crate::NetConfig>>,
    /// The virtio entropy device (always present, as in Cloud Hypervisor).
    pub rng: RngConfig,
    /// Accepted for schema compatibility; must be false.
    pub iommu: bool,
    /// Accepted for schema compatibility; must be false.
    pub watchdog: bool,
    /// The guest's SMBIOS identity (`--platform`).
    pub platform: crate::PlatformConfig,
}

/// [`VmConfig`]'s fields with their JSON defaults, parsed strictly.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictVmConfig {
    #[serde(default)]
    cpus: CpusConfig,
    #[serde(default)]
    memory: MemoryConfig,
    payload: Option<PayloadConfig>,
    #[serde(default = "ConsoleConfig::default_serial")]
    serial: ConsoleConfig,
    #[serde(default = "ConsoleConfig::default_console")]
    console: ConsoleConfig,
    numa: Option<Vec<NumaConfig>>,
    #[serde(default)]
    balloon: Option<crate::BalloonConfig>,
    #[serde(default)]
    disks: Option<Vec<crate::DiskConfig>>,
    #[serde(default)]
    net: Option<Vec<crate::NetConfig>>,
    #[serde(default)]
    rng: RngConfig,
    #[serde(default)]
    iommu: bool,
    #[serde(default)]
    watchdog: bool,
    #[serde(default)]
    platform: crate::PlatformConfig,
}

/// [`VmConfig`] as written, before upstream's defaults are added.
#[derive(Serialize)]
struct WireVmConfig<'a> {
    cpus: &'a CpusConfig,
    memory: &'a MemoryConfig,
    payload: &'a Option<PayloadConfig>,
    serial: &'a ConsoleConfig,
    console: &'a ConsoleConfig,
    numa: &'a Option<Vec<NumaConfig>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    balloon: &'a Option<crate::BalloonConfig>,
    disks: &'a Option<Vec<crate::DiskConfig>>,
    net: &'a Option<Vec<crate::NetConfig>>,
    rng: &'a RngConfig,
    iommu: bool,
    watchdog: bool,
    platform: &'a crate::PlatformConfig,
}

impl Serialize for VmConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let wire = WireVmConfig {
            cpus: &self.cpus,
            memory: &self.memory,
            payload: &self.payload,
            serial: &self.serial,
            console: &self.console,
            numa: &self.numa,
            balloon: &self.balloon,
            disks: &self.disks,
            net: &self.net,
            rng: &self.rng,
            iommu: self.iommu,
            watchdog: self.watchdog,
            platform: &self.platform,
        };
        let mut v = serde_json::to_value(wire).map_err(S::Error::custom)?;
        crate::compat::add_upstream_defaults(&mut v);
        v.serialize(s)
    }
}

impl<'de> Deserialize<'de> for VmConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut v = serde_json::Value::deserialize(d)?;
        crate::compat::strip_upstream_fields(&mut v).map_err(D::Error::custom)?;
        let s = StrictVmConfig::deserialize(v).map_err(D::Error::custom)?;
        Ok(Self {
            cpus: s.cpus,
            memory: s.memory,
            payload: s.payload,
            serial: s.serial,
            console: s.console,
            numa: s.numa,
            balloon: s.balloon,
            disks: s.disks,
            net: s.net,
            rng: s.rng,
            iommu: s.iommu,
            watchdog: s.watchdog,
            platform: s.platform,
        })
    }
}

/// vCPUs (`--cpus`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpusConfig {
    /// vCPUs started at boot.
    pub boot_vcpus: u8,
    /// Possible vCPUs: those above `boot_vcpus` are described to the guest
    /// as present-later (MADT online-capable) but never started.
    pub max_vcpus: u8,
    /// Optional topology.
    #[serde(default)]
    pub topology: Option<CpuTopology>,
    /// Hyper-V enlightenments (not supported; must be false).
    #[serde(default)]
    pub kvm_hyperv: bool,
    /// Guest physical address bits.
    #[serde(default = "default_max_phys_bits")]
    pub max_phys_bits: u8,
    /// Host CPUs each vCPU thread is pinned to.
    #[serde(default)]
    pub affinity: Option<Vec<CpuAffinity>>,
}

fn default_max_phys_bits() -> u8 {
    DEFAULT_MAX_PHYS_BITS
}

impl Default for CpusConfig {
    fn default() -> Self {
        Self {
            boot_vcpus: DEFAULT_VCPUS,
            max_vcpus: DEFAULT_VCPUS,
            topology: None,
            kvm_hyperv: false,
            max_phys_bits: DEFAULT_MAX_PHYS_BITS,
            affinity: None,
        }
    }
}

/// CPU topology (threads per core, cores per die, dies per package, packages).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuTopology {
    /// Threads per core.
    pub threads_per_core: u8,
    /// Cores per die.
    pub cores_per_die: u8,
    /// Dies per package.
    pub dies_per_package: u8,
    /// Packages (sockets).
    pub packages: u8,
}

/// One vCPU's host CPU set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuAffinity {
    /// vCPU index.
    pub vcpu: u8,
    /// Host CPUs it may run on.
    pub host_cpus: Vec<usize>,
}

/// Guest RAM (`--memory`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// RAM outside any zone; must be 0 when zones are used.
    pub size: u64,
    /// KSM merging (not supported; must be false).
    #[serde(default)]
    pub mergeable: bool,
    /// Back RAM with a memfd instead of private anonymous memory.
    #[serde(default)]
    pub shared: bool,
    /// Back RAM with hugetlbfs pages.
    #[serde(default)]
    pub hugepages: bool,
    /// Huge page size (default: the system default).
    #[serde(default)]
    pub hugepage_size: Option<u64>,
    /// Populate all of RAM before boot.
    #[serde(default)]
    pub prefault: bool,
    /// Allow transparent huge pages on anonymous RAM.
    #[serde(default = "default_true")]
    pub thp: bool,
    /// Memory hotplug (not supported; must be absent or 0).
    #[serde(default)]
    pub hotplug_size: Option<u64>,
    /// How memory is hot-plugged: a zone's `hotplug_size` needs
    /// [`HotplugMethod::VirtioMem`], as upstream.
    #[serde(default)]
    pub hotplug_method: HotplugMethod,
    /// The zones, each its own host mapping.
    #[serde(default)]
    pub zones: Option<Vec<MemoryZoneConfig>>,
}

fn default_true() -> bool {
    true
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            size: DEFAULT_MEMORY_SIZE,
            mergeable: false,
            shared: false,
            hugepages: false,
            hugepage_size: None,
            prefault: false,
            thp: true,
            hotplug_size: None,
            hotplug_method: HotplugMethod::Acpi,
            zones: None,
        }
    }
}

/// `--memory hotplug_method=` (upstream's `HotplugMethod`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HotplugMethod {
    /// ACPI memory hotplug (upstream's default; not built here, so only
    /// the value is accepted).
    #[default]
    Acpi,
    /// virtio-mem: one device per memory zone with `hotplug_size`.
    VirtioMem,
}

/// One memory zone (`--memory-zone`): a tier's RAM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryZoneConfig {
    /// Zone name, referenced by `--numa memory_zones=`.
    pub id: String,
    /// Size in bytes.
    pub size: u64,
    /// Map this file (a DAX device or a file on PMEM, say) instead of anonymous memory.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// Back with a memfd (holes can be punched in it).
    #[serde(default)]
    pub shared: bool,
    /// Back with hugetlbfs pages.
    #[serde(default)]
    pub hugepages: bool,
    /// Huge page size.
    #[serde(default)]
    pub hugepage_size: Option<u64>,
    /// Bind the zone's pages to this host NUMA node (mbind MPOL_BIND).
    #[serde(default)]
    pub host_numa_node: Option<u32>,
    /// Size of the zone's virtio-mem region (a multiple of 128 MiB): how
    /// much memory `vm.resize-zone` can add to the zone.
    #[serde(default)]
    pub hotplug_size: Option<u64>,
    /// How much of `hotplug_size` is plugged at boot (and, after
    /// `vm.resize-zone`, the last size asked for, so a reboot keeps it).
    #[serde(default)]
    pub hotplugged_size: Option<u64>,
    /// Populate the zone before boot.
    #[serde(default)]
    pub prefault: bool,
}

/// One guest NUMA node (`--numa`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaConfig {
    /// Node id (ACPI proximity domain).
    pub guest_numa_id: u32,
    /// vCPUs on this node; none makes it a memory-only node.
    #[serde(default)]
    pub cpus: Option<Vec<u8>>,
    /// Distances to other nodes (SLIT).
    #[serde(default)]
    pub distances: Option<Vec<NumaDistance>>,
    /// Memory zones that make up this node's RAM.
    #[serde(default)]
    pub memory_zones: Option<Vec<String>>,
    /// Tier extension: access latency from the CPU node(s), in ns (HMAT).
    #[serde(default)]
    pub latency_ns: Option<u64>,
    /// Tier extension: access bandwidth from the CPU node(s), in MB/s (HMAT).
    #[serde(default)]
    pub bandwidth_mbps: Option<u64>,
}

/// A SLIT distance to another node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaDistance {
    /// The other node.
    pub destination: u32,
    /// Relative distance (10 = local).
    pub distance: u8,
}

/// What to boot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayloadConfig {
    /// Firmware (not supported; direct kernel boot only).
    #[serde(default)]
    pub firmware: Option<PathBuf>,
    /// bzImage or ELF vmlinux.
    #[serde(default)]
    pub kernel: Option<PathBuf>,
    /// Kernel command line.
    #[serde(default)]
    pub cmdline: Option<String>,
    /// Initramfs image.
    #[serde(default)]
    pub initramfs: Option<PathBuf>,
}

/// Where a console's output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsoleOutputMode {
    /// No device at all.
    Off,
    /// A pseudo terminal (not supported).
    Pty,
    /// The VMM's own stdin/stdout.
    Tty,
    /// Append to a file.
    File,
    /// A UNIX socket (not supported).
    Socket,
    /// The device exists, its output is discarded.
    Null,
}

/// A console device (`--serial`, `--console`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Output file for `File` mode.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// Socket path for `Socket` mode.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// Output mode.
    pub mode: ConsoleOutputMode,
    /// Place behind a vIOMMU (not supported).
    #[serde(default)]
    pub iommu: bool,
}

impl ConsoleConfig {
    /// A console in `mode` with no file.
    pub fn with_mode(mode: ConsoleOutputMode) -> Self {
        Self {
            file: None,
            socket: None,
            mode,
            iommu: false,
        }
    }

    /// Cloud Hypervisor's default serial: present, output discarded.
    pub fn default_serial() -> Self {
        Self::with_mode(ConsoleOutputMode::Null)
    }

    /// Cloud Hypervisor's default virtio console: output to the VMM's stdout.
    pub fn default_console() -> Self {
        Self::with_mode(ConsoleOutputMode::Tty)
    }
}

/// The virtio entropy device (`--rng`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RngConfig {
    /// Host file the entropy is read from.
    pub src: PathBuf,
    /// Accepted for schema compatibility; must be false.
    #[serde(default)]
    pub iommu: bool,
}

impl Default for RngConfig {
    fn default() -> Self {
        Self {
            src: PathBuf::from("/dev/urandom"),
            iommu: false,
        }
    }
}

impl Default for VmConfig {
    fn default() -> Self {
        Self {
            cpus: CpusConfig::default(),
            memory: MemoryConfig::default(),
            payload: None,
            serial: ConsoleConfig::default_serial(),
            console: ConsoleConfig::default_console(),
            numa: None,
            balloon: None,
            disks: None,
            net: None,
            rng: RngConfig::default(),
            iommu: false,
            watchdog: false,
            platform: crate::PlatformConfig::default(),
        }
    }
}

impl VmConfig {
    /// The id of every disk, then every NIC, as the devices are named at
    /// boot: the configured id, else upstream's generated name (`_disk0`,
    /// `_net1`: one counter across device kinds, skipping names taken by
    /// configured ids), so that counters and `remove-device` use the ids
    /// upstream's users know.
    pub fn device_ids(&self) -> (Vec<String>, Vec<String>) {
        let given: std::collections::BTreeSet<&str> = (self.disks.iter().flatten())
            .filter_map(|d| d.id.as_deref())
            .chain(self.net.iter().flatten().filter_map(|n| n.id.as_deref()))
            .collect();
        let mut next = 0usize;
        let mut name = |prefix: &str, own: Option<&String>| match own {
            Some(id) => id.clone(),
            None => loop {
                let candidate = format!("{prefix}{next}");
                next += 1;
                if !given.contains(candidate.as_str()) {
                    break candidate;
                }
            },
        };
        let disks = (self.disks.iter().flatten())
            .map(|d| name("_disk", d.id.as_ref()))
            .collect();
        let nets = (self.net.iter().flatten())
            .map(|n| name("_net", n.id.as_ref()))
            .collect();
        (disks, nets)
    }

    /// Total guest RAM: `memory.size` plus every zone.
    pub fn total_memory(&self) -> u64 {
        let zones: u64 = self
            .memory
            .zones
            .iter()
            .flatten()
            .fold(0u64, |acc, z| acc.saturating_add(z.size));
        self.memory.size.saturating_add(zones)
    }
}
