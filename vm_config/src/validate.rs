//! Cross-option checks that no single option parser can make.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::types::*;

/// A configuration that parsed but cannot be run. Messages name the option.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValidationError {
    /// Something about the vCPUs.
    #[error("--cpus: {0}")]
    Cpus(String),
    /// Something about `--memory`.
    #[error("--memory: {0}")]
    Memory(String),
    /// Something about a `--memory-zone`.
    #[error("--memory-zone: {0}")]
    Zone(String),
    /// Something about a `--numa` node.
    #[error("--numa: {0}")]
    Numa(String),
    /// Something about `--balloon`.
    #[error("--balloon: {0}")]
    Balloon(String),
    /// Something about a `--disk`.
    #[error("--disk: {0}")]
    Disk(String),
    /// Something about a `--net`.
    #[error("--net: {0}")]
    Net(String),
    /// Two devices with the same id, or a reserved one.
    #[error("device id '{0}': {1}")]
    DeviceId(String, &'static str),
    /// Something about `--platform` (the SMBIOS identity).
    #[error("--platform: {0}")]
    Platform(String),
    /// Something about the payload.
    #[error("{0}")]
    Payload(String),
    /// A feature of the schema this VMM does not implement.
    #[error("{0} is not supported by this VMM")]
    Unsupported(&'static str),
    /// A field set to a value this VMM does not implement.
    #[error("{field}={value} is not supported by this VMM")]
    UnsupportedValue {
        /// The field, e.g. `console.mode`.
        field: &'static str,
        /// Its value.
        value: String,
    },
}

/// Largest vCPU count (APIC ids must fit the 8-bit xAPIC id).
pub const MAX_VCPUS: u8 = 254;

impl VmConfig {
    /// Checks the configuration against itself and against this host's NUMA
    /// nodes (read from sysfs).
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.validate_with(&|node| {
            Path::new(&format!("/sys/devices/system/node/node{node}")).exists()
        })
    }

    /// [`VmConfig::validate`] with the host-node check injected (for tests).
    pub fn validate_with(
        &self,
        host_has_node: &dyn Fn(u32) -> bool,
    ) -> Result<(), ValidationError> {
        self.validate_cpus()?;
        self.validate_memory(host_has_node)?;
        self.validate_numa()?;
        self.validate_payload()?;
        self.validate_balloon()?;
        self.validate_devices()?;
        self.platform.validate()?;
        if self.rng.iommu {
            return Err(ValidationError::Unsupported("--rng iommu=on"));
        }
        if self.iommu {
            return Err(ValidationError::Unsupported("iommu"));
        }
        if self.watchdog {
            return Err(ValidationError::Unsupported("watchdog"));
        }
        self.validate_consoles()
    }

    /// Serial and virtio console: the modes we implement, files where needed.
    fn validate_consoles(&self) -> Result<(), ValidationError> {
        for (name, c) in [("serial", &self.serial), ("console", &self.console)] {
            let field = if name == "serial" {
                "serial.mode"
            } else {
                "console.mode"
            };
            if matches!(c.mode, ConsoleOutputMode::Pty | ConsoleOutputMode::Socket) {
                return Err(ValidationError::UnsupportedValue {
                    field,
                    value: format!("{:?}", c.mode),
                });
            }
            if c.mode == ConsoleOutputMode::File && c.file.is_none() {
                return Err(ValidationError::Payload(format!(
                    "--{name}: file mode needs a file"
                )));
            }
            if c.iommu {
                return Err(ValidationError::UnsupportedValue {
                    field: if name == "serial" {
                        "serial.iommu"
                    } else {
                        "console.iommu"
                    },
                    value: "true".into(),
                });
            }
        }
        // Both on Tty is allowed, as upstream: both write to stdout and
        // stdin goes to the serial port.
        Ok(())
    }

    /// Checks only the balloon against the memory layout (also for
    /// `vm.resize`).
    pub fn validate_balloon(&self) -> Result<(), ValidationError> {
        let Some(b) = &self.balloon else {
            return Ok(());
        };
        let err = |m: String| Err(ValidationError::Balloon(m));
        if b.free_page_reporting {
            return Err(ValidationError::Unsupported(
                "--balloon free_page_reporting=on",
            ));
        }
        for (tier, size) in [("fmem", b.size.fmem), ("smem", b.size.smem)] {
            check_page_multiple("--balloon", &format!("{tier} size"), size)
                .map_err(ValidationError::Balloon)?;
        }
        let [fmem, smem] = self.tier_sizes();
        if b.heterogeneous_memory {
            if smem == 0 {
                return err("heterogeneous_memory=on needs a slow tier: a --numa node \
                     with memory zones and no cpus"
                    .into());
            }
            if b.size.fmem > fmem || b.size.smem > smem {
                return err(format!(
                    "size=[{},{}] is larger than the tiers ([{fmem},{smem}] bytes)",
                    b.size.fmem, b.size.smem
                ));
            }
        } else if b.size.smem != 0 {
            return err("a size for the slow tier needs heterogeneous_memory=on".into());
        }
        if b.size.total() >= fmem.saturating_add(smem) {
            return err(format!(
                "size {} leaves the guest no memory (RAM is {} bytes)",
                b.size.total(),
                fmem.saturating_add(smem)
            ));
        }
        Ok(())
    }

    /// Disks and NICs, and their ids across both kinds.
    fn validate_devices(&self) -> Result<(), ValidationError> {
        let mut ids = BTreeSet::new();
        let disks = self.disks.iter().flatten();
        let nets = self.net.iter().flatten();
        let vcpus = u16::from(self.cpus.boot_vcpus);
        for d in disks.clone() {
            d.validate()?;
            // Cloud Hypervisor's TooManyQueues: a queue per vCPU at most.
            if d.num_queues > vcpus {
                return Err(ValidationError::Disk(format!(
                    "{}: num_queues={} is more than the {vcpus} boot vCPUs",
                    d.path.display(),
                    d.num_queues
                )));
            }
        }
        for n in nets.clone() {
            n.validate()?;
            if n.num_queues / 2 > vcpus {
                return Err(ValidationError::Net(format!(
                    "num_queues={} is {} queue pairs, more than the {vcpus} boot vCPUs",
                    n.num_queues,
                    n.num_queues / 2
                )));
            }
        }
        let (disk_ids, net_ids) = self.device_ids();
        for id in disk_ids.iter().chain(&net_ids) {
            if id.is_empty() {
                return Err(ValidationError::DeviceId(id.clone(), "must not be empty"));
            }
            // The fixed devices' ids (__rng, __balloon, __console, __serial)
            // start with two; upstream's generated ones (_disk0) with one
            // and appear in configs copied from upstream's vm.info.
            if id.starts_with("__") {
                return Err(ValidationError::DeviceId(
                    id.clone(),
                    "ids starting with '__' are reserved",
                ));
            }
            if !ids.insert(id.as_str()) {
                return Err(ValidationError::DeviceId(id.clone(), "used twice"));
            }
        }
        Ok(())
    }

    fn validate_cpus(&self) -> Result<(), ValidationError> {
        let c = &self.cpus;
        if c.boot_vcpus == 0 || c.boot_vcpus > MAX_VCPUS {
            return Err(ValidationError::Cpus(format!(
                "boot={} must be 1..={MAX_VCPUS}",
                c.boot_vcpus
            )));
        }
        // vCPUs above boot_vcpus are possible but not started (MADT entries
        // marked online-capable); there is no hotplug to start them later.
        if c.max_vcpus < c.boot_vcpus || c.max_vcpus > MAX_VCPUS {
            return Err(ValidationError::Cpus(format!(
                "max={} must be boot={}..={MAX_VCPUS}",
                c.max_vcpus, c.boot_vcpus
            )));
        }
        if c.kvm_hyperv {
            return Err(ValidationError::Unsupported("--cpus kvm_hyperv=on"));
        }
        if !(32..=52).contains(&c.max_phys_bits) {
            return Err(ValidationError::Cpus(format!(
                "max_phys_bits={} must be 32..=52",
                c.max_phys_bits
            )));
        }
        if let Some(t) = &c.topology {
            let product = u32::from(t.threads_per_core)
                * u32::from(t.cores_per_die)
                * u32::from(t.dies_per_package)
                * u32::from(t.packages);
            if product != u32::from(c.max_vcpus) {
                return Err(ValidationError::Cpus(format!(
                    "topology {}:{}:{}:{} gives {product} vCPUs, not {}",
                    t.threads_per_core,
                    t.cores_per_die,
                    t.dies_per_package,
                    t.packages,
                    c.max_vcpus
                )));
            }
        }
        let mut seen = BTreeSet::new();
        for a in c.affinity.iter().flatten() {
            if a.vcpu >= c.max_vcpus {
                return Err(ValidationError::Cpus(format!(
                    "affinity names vCPU {} but there are {}",
                    a.vcpu, c.max_vcpus
                )));
            }
            if !seen.insert(a.vcpu) {
                return Err(ValidationError::Cpus(format!(
                    "affinity given twice for vCPU {}",
                    a.vcpu
                )));
            }
            if a.host_cpus.is_empty() {
                return Err(ValidationError::Cpus(format!(
                    "affinity for vCPU {} lists no host CPUs",
                    a.vcpu
                )));
            }
        }
        Ok(())
    }

    fn validate_memory(&self, host_has_node: &dyn Fn(u32) -> bool) -> Result<(), ValidationError> {
        let m = &self.memory;
        let zones = m.zones.as_deref().unwrap_or_default();
        if !zones.is_empty() && m.size != 0 {
            return Err(ValidationError::Memory(format!(
                "size={} with --memory-zone: use size=0 when memory zones are given",
                m.size
            )));
        }
        if zones.is_empty() && m.size == 0 {
            return Err(ValidationError::Memory(
                "size=0 without any --memory-zone gives the guest no RAM".into(),
            ));
        }
        if m.mergeable {
            return Err(ValidationError::Unsupported("--memory mergeable=on"));
        }
        if m.hotplug_size.unwrap_or(0) != 0 {
            return Err(ValidationError::Unsupported(
                "memory hotplug (hotplug_size)",
            ));
        }
        check_page_multiple("--memory", "size", m.size).map_err(ValidationError::Memory)?;
        let mut ids = BTreeSet::new();
        for z in zones {
            if !ids.insert(z.id.as_str()) {
                return Err(ValidationError::Zone(format!("id '{}' used twice", z.id)));
            }
            if z.size == 0 {
                return Err(ValidationError::Zone(format!("zone '{}' has size 0", z.id)));
            }
            check_page_multiple("--memory-zone", &format!("zone '{}' size", z.id), z.size)
                .map_err(ValidationError::Zone)?;
            crate::hotplug::validate_zone(z, m.hotplug_method).map_err(ValidationError::Zone)?;
            if let Some(node) = z.host_numa_node {
                if !host_has_node(node) {
                    return Err(ValidationError::Zone(format!(
                        "zone '{}': host_numa_node={node} does not exist on this host",
                        z.id
                    )));
                }
            }
            if z.file.is_some() && z.hugepages {
                return Err(ValidationError::Zone(format!(
                    "zone '{}': file= and hugepages=on cannot be combined",
                    z.id
                )));
            }
        }
        // 52-bit guest physical space is the hard ceiling; also keep the sum sane.
        if self.total_memory() >= (1u64 << 46) {
            return Err(ValidationError::Memory(
                "total guest memory must be below 64 TiB".into(),
            ));
        }
        Ok(())
    }

    fn validate_numa(&self) -> Result<(), ValidationError> {
        let Some(nodes) = self.numa.as_deref() else {
            return Ok(());
        };
        let zone_ids: BTreeSet<&str> = self
            .memory
            .zones
            .iter()
            .flatten()
            .map(|z| z.id.as_str())
            .collect();
        let node_ids: BTreeSet<u32> = nodes.iter().map(|n| n.guest_numa_id).collect();
        if node_ids.len() != nodes.len() {
            return Err(ValidationError::Numa(
                "a guest_numa_id is used twice".into(),
            ));
        }
        let mut zone_owner: BTreeMap<&str, u32> = BTreeMap::new();
        let mut cpu_owner: BTreeMap<u8, u32> = BTreeMap::new();
        for n in nodes {
            let id = n.guest_numa_id;
            for z in n.memory_zones.iter().flatten() {
                if !zone_ids.contains(z.as_str()) {
                    return Err(ValidationError::Numa(format!(
                        "node {id} names memory zone '{z}', which does not exist"
                    )));
                }
                if let Some(other) = zone_owner.insert(z, id) {
                    return Err(ValidationError::Numa(format!(
                        "memory zone '{z}' is in node {other} and node {id}"
                    )));
                }
            }
            for &c in n.cpus.iter().flatten() {
                if c >= self.cpus.max_vcpus {
                    return Err(ValidationError::Numa(format!(
                        "node {id} names vCPU {c} but there are only {} (0-{})",
                        self.cpus.max_vcpus,
                        self.cpus.max_vcpus.saturating_sub(1)
                    )));
                }
                if let Some(other) = cpu_owner.insert(c, id) {
                    return Err(ValidationError::Numa(format!(
                        "vCPU {c} is in node {other} and node {id}"
                    )));
                }
            }
            for d in n.distances.iter().flatten() {
                if !node_ids.contains(&d.destination) {
                    return Err(ValidationError::Numa(format!(
                        "node {id} gives a distance to node {}, which does not exist",
                        d.destination
                    )));
                }
                if d.destination == id && d.distance != 10 {
                    return Err(ValidationError::Numa(format!(
                        "node {id}: distance to itself must be 10"
                    )));
                }
                if d.destination != id && d.distance <= 10 {
                    return Err(ValidationError::Numa(format!(
                        "node {id}: distance {} to node {} must be greater than 10",
                        d.distance, d.destination
                    )));
                }
            }
            if n.latency_ns == Some(0) || n.bandwidth_mbps == Some(0) {
                return Err(ValidationError::Numa(format!(
                    "node {id}: latency_ns and bandwidth_mbps must be positive"
                )));
            }
        }
        if cpu_owner.is_empty() {
            return Err(ValidationError::Numa("no node has vCPUs".into()));
        }
        let missing: Vec<u8> = (0..self.cpus.boot_vcpus)
            .filter(|c| !cpu_owner.contains_key(c))
            .collect();
        if !missing.is_empty() {
            return Err(ValidationError::Numa(format!(
                "vCPUs {missing:?} are in no node"
            )));
        }
        if let Some(z) = zone_ids.iter().find(|z| !zone_owner.contains_key(**z)) {
            return Err(ValidationError::Numa(format!(
                "memory zone '{z}' is in no node"
            )));
        }
        if self.memory.size != 0 {
            return Err(ValidationError::Numa(
                "--numa needs --memory size=0 and --memory-zone".into(),
            ));
        }
        Ok(())
    }

    fn validate_payload(&self) -> Result<(), ValidationError> {
        let Some(p) = &self.payload else {
            return Ok(());
        };
        if p.firmware.is_some() {
            return Err(ValidationError::Unsupported("firmware boot (use --kernel)"));
        }
        if p.kernel.is_none() {
            return Err(ValidationError::Payload(
                "payload: a kernel is required".into(),
            ));
        }
        if p.cmdline.as_ref().is_some_and(|c| c.len() >= 2048) {
            return Err(ValidationError::Payload(
                "--cmdline: longer than 2047 bytes".into(),
            ));
        }
        Ok(())
    }
}

fn check_page_multiple(_option: &str, what: &str, size: u64) -> Result<(), String> {
    if !size.is_multiple_of(4096) {
        return Err(format!("{what}={size} is not a multiple of 4 KiB"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BalloonConfig, Tier};

    fn tiered() -> VmConfig {
        VmConfig {
            cpus: CpusConfig::parse("boot=2").unwrap(),
            memory: MemoryConfig::parse(
                "size=0",
                Some(vec![
                    MemoryZoneConfig::parse("id=fmem,size=512M,host_numa_node=0").unwrap(),
                    MemoryZoneConfig::parse("id=smem,size=1G,host_numa_node=1").unwrap(),
                ]),
            )
            .unwrap(),
            numa: Some(vec![
                NumaConfig::parse("guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem")
                    .unwrap(),
                NumaConfig::parse("guest_numa_id=1,distances=[0@25],memory_zones=smem").unwrap(),
            ]),
            ..Default::default()
        }
    }

    fn check(cfg: &VmConfig) -> Result<(), ValidationError> {
        cfg.validate_with(&|n| n < 2)
    }

    #[test]
    fn tiered_config_is_valid() {
        check(&tiered()).unwrap();
        assert_eq!(tiered().total_memory(), 1536 << 20);
    }

    #[test]
    fn balloon_tiers_follow_the_numa_nodes() {
        let mut c = tiered();
        assert_eq!(c.zone_tier("fmem"), Tier::Fmem);
        assert_eq!(c.zone_tier("smem"), Tier::Smem);
        assert_eq!(c.tier_sizes(), [512 << 20, 1 << 30]);
        c.balloon = Some(
            BalloonConfig::parse("size=[256M,512M],heterogeneous_memory=on,statistics=on").unwrap(),
        );
        check(&c).unwrap();
    }

    #[test]
    fn balloon_sizes_are_checked_per_tier() {
        let mut c = tiered();
        let mut set = |s: &str| {
            c.balloon = Some(BalloonConfig::parse(s).unwrap());
            check(&c).map_err(|e| e.to_string())
        };
        assert!(set("size=[1G,0],heterogeneous_memory=on")
            .unwrap_err()
            .contains("larger than the tiers"));
        assert!(set("size=[0,1G],heterogeneous_memory=off")
            .unwrap_err()
            .contains("needs heterogeneous_memory=on"));
        assert!(set("size=1536M")
            .unwrap_err()
            .contains("leaves the guest no memory"));
        assert!(set("size=1000").unwrap_err().contains("multiple of 4 KiB"));
        assert!(set("size=1G,free_page_reporting=on")
            .unwrap_err()
            .contains("free_page_reporting"));
        // Without HETERO_MEM the single balloon may take from both tiers.
        set("size=1G").unwrap();
    }

    #[test]
    fn hetero_balloon_needs_a_memory_only_node() {
        let mut c = tiered();
        c.numa = None;
        c.balloon = Some(BalloonConfig::parse("size=[0,0],heterogeneous_memory=on").unwrap());
        assert!(check(&c)
            .unwrap_err()
            .to_string()
            .contains("needs a slow tier"));
    }

    #[test]
    fn memory_size_with_zones_is_rejected() {
        let mut c = tiered();
        c.memory.size = 1 << 30;
        assert!(matches!(check(&c), Err(ValidationError::Memory(m)) if m.contains("size=0")));
    }

    #[test]
    fn zone_in_two_nodes_is_rejected() {
        let mut c = tiered();
        c.numa.as_mut().unwrap()[1].memory_zones = Some(vec!["fmem".into(), "smem".into()]);
        assert!(check(&c)
            .unwrap_err()
            .to_string()
            .contains("'fmem' is in node 0 and node 1"));
    }

    #[test]
    fn missing_zone_missing_node_and_cpu_errors() {
        let mut c = tiered();
        c.numa.as_mut().unwrap()[1].memory_zones = Some(vec!["nope".into()]);
        assert!(check(&c)
            .unwrap_err()
            .to_string()
            .contains("'nope', which does not exist"));

        let mut c = tiered();
        c.numa.as_mut().unwrap()[0].distances = Some(vec![NumaDistance {
            destination: 7,
            distance: 20,
        }]);
        assert!(check(&c).unwrap_err().to_string().contains("node 7"));

        let mut c = tiered();
        c.numa.as_mut().unwrap()[0].cpus = Some(vec![0, 1, 2]);
        assert!(check(&c).unwrap_err().to_string().contains("vCPU 2"));

        let mut c = tiered();
        c.numa.as_mut().unwrap()[1].cpus = Some(vec![1]);
        assert!(check(&c)
            .unwrap_err()
            .to_string()
            .contains("vCPU 1 is in node 0 and node 1"));

        let mut c = tiered();
        c.numa.as_mut().unwrap()[0].cpus = Some(vec![0]);
        assert!(check(&c).unwrap_err().to_string().contains("in no node"));
    }

    #[test]
    fn host_node_must_exist() {
        let c = tiered();
        let err = c.validate_with(&|n| n == 0).unwrap_err().to_string();
        assert!(err.contains("host_numa_node=1 does not exist"), "{err}");
    }

    #[test]
    fn cpu_limits() {
        let mut c = tiered();
        c.cpus.max_vcpus = 4;
        check(&c).unwrap();
        c.cpus.max_vcpus = 1;
        assert!(check(&c).unwrap_err().to_string().contains("max=1"));
        let mut c = VmConfig::default();
        c.cpus.boot_vcpus = 0;
        c.cpus.max_vcpus = 0;
        assert!(matches!(check(&c), Err(ValidationError::Cpus(_))));
    }

    #[test]
    fn json_round_trips_and_rejects_unknown_fields() {
        let c = tiered();
        let json = serde_json::to_string(&c).unwrap();
        let back: VmConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        assert!(serde_json::from_str::<VmConfig>(
            r#"{"cpus":{"boot_vcpus":1,"max_vcpus":1,"bogus":1}}"#
        )
        .is_err());
    }

    #[test]
    fn upstream_minimal_create_body_is_accepted() {
        let c: VmConfig = serde_json::from_str(
            r#"{"cpus":{"boot_vcpus":2,"max_vcpus":2},"memory":{"size":1073741824},
                "payload":{"kernel":"/k","cmdline":"console=ttyS0"}}"#,
        )
        .unwrap();
        assert_eq!(c.cpus.boot_vcpus, 2);
        assert_eq!(c.serial.mode, ConsoleOutputMode::Null);
        check(&c).unwrap();
    }

    /// The `vm.create` example of upstream's docs/api.md, as it is.
    #[test]
    fn upstream_documented_create_body_is_accepted() {
        let c: VmConfig = serde_json::from_str(
            r#"{"cpus":{"boot_vcpus":4,"max_vcpus":4},
                "payload":{"kernel":"/opt/clh/kernel/vmlinux","cmdline":"console=ttyS0 console=hvc0 root=/dev/vda1 rw"},
                "disks":[{"path":"/opt/clh/images/focal-server-cloudimg-amd64.raw"}],
                "rng":{"src":"/dev/urandom"},
                "net":[{"ip":"192.168.10.10","mask":"255.255.255.0","mac":"12:34:56:78:90:01"}]}"#,
        )
        .unwrap();
        check(&c).unwrap();
        let disks = c.disks.as_deref().unwrap();
        assert_eq!(disks.len(), 1);
        assert!(!disks[0].readonly);
        let net = &c.net.as_deref().unwrap()[0];
        assert_eq!(net.ip.to_string(), "192.168.10.10");
        assert_eq!(net.mac.to_string(), "12:34:56:78:90:01");
    }

    #[test]
    fn generated_ids_follow_upstreams_single_counter() {
        let mut c = tiered();
        c.disks = Some(vec![crate::DiskConfig::new("/a")]);
        c.net = Some(vec![crate::NetConfig::default()]);
        assert_eq!(
            c.device_ids(),
            (vec!["_disk0".into()], vec!["_net1".into()])
        );
    }

    #[test]
    fn device_ids_are_unique_and_not_reserved() {
        let mut c = tiered();
        let mut d = crate::DiskConfig::new("/a");
        d.id = Some("x".into());
        let n = crate::NetConfig {
            id: Some("x".into()),
            ..Default::default()
        };
        c.disks = Some(vec![d.clone()]);
        c.net = Some(vec![n]);
        assert!(matches!(check(&c), Err(ValidationError::DeviceId(..))));
        c.net = None;
        check(&c).unwrap();
        for bad in ["", "__rng"] {
            d.id = Some(bad.into());
            c.disks = Some(vec![d.clone()]);
            assert!(check(&c).is_err(), "{bad:?}");
        }
        // Upstream's generated ids, as its vm.info writes them back.
        d.id = Some("_disk0".into());
        c.disks = Some(vec![d.clone()]);
        check(&c).unwrap();
        // ... but not one that a second, unnamed disk would also get.
        c.disks = Some(vec![crate::DiskConfig::new("/b"), d.clone()]);
        let (ids, _) = c.device_ids();
        assert_eq!(ids, ["_disk1", "_disk0"]);
        check(&c).unwrap();
        c.disks = Some(vec![crate::DiskConfig {
            queue_size: 5,
            ..crate::DiskConfig::new("/a")
        }]);
        assert!(matches!(check(&c), Err(ValidationError::Disk(_))));
    }

    #[test]
    fn queues_are_bounded_by_the_boot_vcpus_as_upstream() {
        let mut c = tiered();
        c.cpus.boot_vcpus = 2;
        c.cpus.max_vcpus = 2;
        let disk = |n| crate::DiskConfig {
            num_queues: n,
            ..crate::DiskConfig::new("/a")
        };
        let net = |n| crate::NetConfig {
            num_queues: n,
            ..Default::default()
        };
        c.disks = Some(vec![disk(2)]);
        c.net = Some(vec![net(4)]);
        check(&c).unwrap();
        c.disks = Some(vec![disk(3)]);
        let e = check(&c).unwrap_err().to_string();
        assert!(e.contains("more than the 2 boot vCPUs"), "{e}");
        c.disks = Some(vec![disk(0)]);
        assert!(matches!(check(&c), Err(ValidationError::Disk(_))));
        c.disks = None;
        for bad in [6, 5, 1, 0] {
            c.net = Some(vec![net(bad)]);
            assert!(matches!(check(&c), Err(ValidationError::Net(_))), "{bad}");
        }
    }
}
