//! Command-line parsers: one `SYNTAX` and one `parse` per option.

use std::path::PathBuf;

use option_parser::{
    ByteSized, ByteSizedList, IntegerList, OptionParser, OptionParserError, StringList, Toggle,
    TupleList,
};

use crate::types::*;

/// A command-line option that could not be parsed. The message names the option.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// The option string itself was malformed.
    #[error("{option}: {source}")]
    Option {
        /// The option, e.g. `--memory-zone`.
        option: &'static str,
        /// What was wrong.
        source: OptionParserError,
    },
    /// A value had the right shape but is not allowed.
    #[error("{option}: {reason}")]
    Invalid {
        /// The option, e.g. `--cpus`.
        option: &'static str,
        /// What was wrong.
        reason: String,
    },
}

pub(crate) fn parser(
    option: &'static str,
    keys: &[&str],
    input: &str,
) -> Result<OptionParser, ParseError> {
    let mut p = OptionParser::new();
    p.add_all(keys);
    p.parse(input)
        .map_err(|source| ParseError::Option { option, source })?;
    Ok(p)
}

/// Upstream keys we take only at values that ask for nothing: `(key,
/// accepted values)`; an empty list means any value is refused.
pub(crate) type UpstreamKeys<'a> = &'a [(&'a str, &'a [&'a str])];

/// [`parser`] that also knows `upstream` keys and refuses their other values,
/// naming the key and the value.
pub(crate) fn parser_with_upstream(
    option: &'static str,
    keys: &[&str],
    upstream: UpstreamKeys<'_>,
    input: &str,
) -> Result<OptionParser, ParseError> {
    let mut all = keys.to_vec();
    all.extend(upstream.iter().map(|(k, _)| *k));
    let p = parser(option, &all, input)?;
    for (key, ok) in upstream {
        if let Some(v) = p.get(key) {
            if !ok.contains(&v) {
                return Err(invalid(
                    option,
                    format!("{key}={v} is not supported by this VMM"),
                ));
            }
        }
    }
    Ok(p)
}

const ON: &[&str] = &["on", "true"];
const OFF: &[&str] = &["off", "false"];
pub(crate) const PCI_KEYS: [(&str, &[&str]); 2] = [("pci_segment", &["0"]), ("pci_device_id", &[])];

/// Converts `key` of `p`, tagging errors with `option`.
pub(crate) fn get<T>(
    p: &OptionParser,
    option: &'static str,
    key: &str,
) -> Result<Option<T>, ParseError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    p.convert(key)
        .map_err(|source| ParseError::Option { option, source })
}

pub(crate) fn toggle(
    p: &OptionParser,
    option: &'static str,
    key: &str,
    default: bool,
) -> Result<bool, ParseError> {
    Ok(get::<Toggle>(p, option, key)?.map_or(default, |t| t.0))
}

pub(crate) fn invalid(option: &'static str, reason: impl Into<String>) -> ParseError {
    ParseError::Invalid {
        option,
        reason: reason.into(),
    }
}

fn to_u8(option: &'static str, what: &str, v: u64) -> Result<u8, ParseError> {
    u8::try_from(v).map_err(|_| invalid(option, format!("{what} {v} is out of range (0-255)")))
}

impl CpusConfig {
    /// `--cpus` syntax.
    pub const SYNTAX: &'static str = "boot=<boot_vcpus>,max=<max_vcpus>,\
topology=<threads_per_core>:<cores_per_die>:<dies_per_package>:<packages>,\
kvm_hyperv=on|off,max_phys_bits=<bits>,affinity=[<vcpu>@[<host_cpus>],...] \
(default boot=1,max_phys_bits=46)";

    /// Parses a `--cpus` value.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        const O: &str = "--cpus";
        let p = parser_with_upstream(
            O,
            &[
                "boot",
                "max",
                "topology",
                "kvm_hyperv",
                "max_phys_bits",
                "affinity",
            ],
            &[
                ("features", &["[]", ""]),
                ("nested", ON),
                ("core_scheduling", &["vm", "off"]),
            ],
            input,
        )?;
        let boot = get::<u8>(&p, O, "boot")?.unwrap_or(DEFAULT_VCPUS);
        let max = get::<u8>(&p, O, "max")?.unwrap_or(boot);
        let topology = p.get("topology").map(parse_topology).transpose()?;
        let affinity = p.get("affinity").map(parse_affinity).transpose()?;
        Ok(Self {
            boot_vcpus: boot,
            max_vcpus: max,
            topology,
            kvm_hyperv: toggle(&p, O, "kvm_hyperv", false)?,
            max_phys_bits: get::<u8>(&p, O, "max_phys_bits")?.unwrap_or(DEFAULT_MAX_PHYS_BITS),
            affinity,
        })
    }
}

fn parse_topology(s: &str) -> Result<CpuTopology, ParseError> {
    let parts: Vec<&str> = s.split(':').collect();
    let nums = parts
        .iter()
        .map(|v| v.parse::<u8>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            invalid(
                "--cpus",
                format!("topology '{s}' must be four numbers t:c:d:p"),
            )
        })?;
    match nums[..] {
        [threads_per_core, cores_per_die, dies_per_package, packages] => Ok(CpuTopology {
            threads_per_core,
            cores_per_die,
            dies_per_package,
            packages,
        }),
        _ => Err(invalid(
            "--cpus",
            format!("topology '{s}' must be four numbers t:c:d:p"),
        )),
    }
}

/// `[0@[0-1],1@[2]]`: vCPU @ host-CPU list.
fn parse_affinity(s: &str) -> Result<Vec<CpuAffinity>, ParseError> {
    const O: &str = "--cpus";
    let inner = s
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(s);
    let items = option_parser::split_top_level(inner, ',')
        .map_err(|source| ParseError::Option { option: O, source })?;
    items
        .iter()
        .filter(|i| !i.is_empty())
        .map(|item| {
            let (vcpu, cpus) = item.split_once('@').ok_or_else(|| {
                invalid(O, format!("affinity '{item}' must be <vcpu>@[<host cpus>]"))
            })?;
            let vcpu = vcpu
                .trim()
                .parse::<u8>()
                .map_err(|_| invalid(O, format!("affinity vCPU '{vcpu}' is not a number")))?;
            let host_cpus = cpus
                .parse::<IntegerList>()
                .map_err(|e| invalid(O, format!("affinity host CPUs '{cpus}': {e}")))?
                .0
                .into_iter()
                .map(|c| c as usize)
                .collect();
            Ok(CpuAffinity { vcpu, host_cpus })
        })
        .collect()
}

impl MemoryConfig {
    /// `--memory` syntax.
    pub const SYNTAX: &'static str = "size=<guest_memory_size>,mergeable=on|off,shared=on|off,\
hugepages=on|off,hugepage_size=<size>,prefault=on|off,thp=on|off,\
hotplug_method=acpi|virtio-mem \
(default size=512M; must be size=0 with --memory-zone)";

    /// Parses a `--memory` value.
    pub fn parse(input: &str, zones: Option<Vec<MemoryZoneConfig>>) -> Result<Self, ParseError> {
        const O: &str = "--memory";
        let p = parser_with_upstream(
            O,
            &[
                "size",
                "mergeable",
                "shared",
                "hugepages",
                "hugepage_size",
                "prefault",
                "thp",
                "hotplug_size",
                "hotplug_method",
            ],
            &[("hotplugged_size", &["0"]), ("reserve", OFF)],
            input,
        )?;
        Ok(Self {
            size: get::<ByteSized>(&p, O, "size")?.map_or(DEFAULT_MEMORY_SIZE, |b| b.0),
            mergeable: toggle(&p, O, "mergeable", false)?,
            shared: toggle(&p, O, "shared", false)?,
            hugepages: toggle(&p, O, "hugepages", false)?,
            hugepage_size: get::<ByteSized>(&p, O, "hugepage_size")?.map(|b| b.0),
            prefault: toggle(&p, O, "prefault", false)?,
            thp: toggle(&p, O, "thp", true)?,
            hotplug_size: get::<ByteSized>(&p, O, "hotplug_size")?.map(|b| b.0),
            hotplug_method: match p.get("hotplug_method") {
                None | Some("acpi") => HotplugMethod::Acpi,
                Some("virtio-mem") => HotplugMethod::VirtioMem,
                Some(other) => {
                    return Err(invalid(
                        O,
                        format!("hotplug_method={other}: use acpi or virtio-mem"),
                    ))
                }
            },
            zones,
        })
    }
}

impl MemoryZoneConfig {
    /// `--memory-zone` syntax.
    pub const SYNTAX: &'static str = "id=<zone_id>,size=<size>,file=<path>,shared=on|off,\
hugepages=on|off,hugepage_size=<size>,host_numa_node=<node>,hotplug_size=<size>,\
hotplugged_size=<size>,prefault=on|off";

    /// Parses one `--memory-zone` value.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        const O: &str = "--memory-zone";
        let p = parser_with_upstream(
            O,
            &[
                "id",
                "size",
                "file",
                "shared",
                "hugepages",
                "hugepage_size",
                "host_numa_node",
                "hotplug_size",
                "hotplugged_size",
                "prefault",
            ],
            &[("reserve", OFF)],
            input,
        )?;
        let id = p
            .get("id")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| invalid(O, "id=<zone_id> is required"))?
            .to_owned();
        let size = get::<ByteSized>(&p, O, "size")?
            .ok_or_else(|| invalid(O, format!("zone '{id}': size=<size> is required")))?
            .0;
        Ok(Self {
            id,
            size,
            file: p.get("file").map(PathBuf::from),
            shared: toggle(&p, O, "shared", false)?,
            hugepages: toggle(&p, O, "hugepages", false)?,
            hugepage_size: get::<ByteSized>(&p, O, "hugepage_size")?.map(|b| b.0),
            host_numa_node: get::<u32>(&p, O, "host_numa_node")?,
            hotplug_size: get::<ByteSized>(&p, O, "hotplug_size")?.map(|b| b.0),
            hotplugged_size: get::<ByteSized>(&p, O, "hotplugged_size")?.map(|b| b.0),
            prefault: toggle(&p, O, "prefault", false)?,
        })
    }
}

impl NumaConfig {
    /// `--numa` syntax.
    pub const SYNTAX: &'static str = "guest_numa_id=<node>,cpus=<vcpu list>,\
distances=[<node>@<distance>,...],memory_zones=<zone list>,\
latency_ns=<access latency in ns>,bandwidth_mbps=<access bandwidth in MB/s> \
(lists: cpus=[0-3,7], memory_zones=[a,b]; latency_ns/bandwidth_mbps go into the \
HMAT and decide the guest's memory tiers)";

    /// Parses one `--numa` value.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        const O: &str = "--numa";
        let p = parser_with_upstream(
            O,
            &[
                "guest_numa_id",
                "cpus",
                "distances",
                "memory_zones",
                "latency_ns",
                "bandwidth_mbps",
            ],
            &[
                ("sgx_epc_sections", &[]),
                ("pci_segments", &[]),
                ("device_id", &[]),
            ],
            input,
        )?;
        let guest_numa_id = get::<u32>(&p, O, "guest_numa_id")?
            .ok_or_else(|| invalid(O, "guest_numa_id=<node> is required"))?;
        let cpus = get::<IntegerList>(&p, O, "cpus")?
            .map(|l| {
                l.0.into_iter()
                    .map(|c| to_u8(O, "vCPU id", c))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let distances = get::<TupleList<u32, u8>>(&p, O, "distances")?.map(|t| {
            t.0.into_iter()
                .map(|(destination, distance)| NumaDistance {
                    destination,
                    distance,
                })
                .collect()
        });
        Ok(Self {
            guest_numa_id,
            cpus,
            distances,
            memory_zones: get::<StringList>(&p, O, "memory_zones")?.map(|l| l.0),
            latency_ns: get::<u64>(&p, O, "latency_ns")?,
            bandwidth_mbps: get::<u64>(&p, O, "bandwidth_mbps")?,
        })
    }
}

impl crate::BalloonConfig {
    /// `--balloon` syntax.
    pub const SYNTAX: &'static str = "size=<size>|[<fmem_size>,<smem_size>],\
deflate_on_oom=on|off,statistics=on|off,heterogeneous_memory=on|off \
(a single size is taken from the fast tier; [FMEM,SMEM] needs heterogeneous_memory=on: \
one balloon per tier, the SMem one on the memory-only NUMA node)";

    /// Parses a `--balloon` value.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        const O: &str = "--balloon";
        let p = parser_with_upstream(
            O,
            &[
                "size",
                "deflate_on_oom",
                "free_page_reporting",
                "statistics",
                "heterogeneous_memory",
            ],
            &[("iommu", OFF), ("id", &[]), PCI_KEYS[0], PCI_KEYS[1]],
            input,
        )?;
        let size = match get::<ByteSizedList>(&p, O, "size")?.map(|l| l.0).as_deref() {
            Some([fmem]) => crate::BalloonSize::from(*fmem),
            Some([fmem, smem]) => crate::BalloonSize {
                fmem: *fmem,
                smem: *smem,
            },
            Some(other) => {
                return Err(invalid(
                    O,
                    format!(
                        "size= has {} sizes: give one size or [<fmem>,<smem>]",
                        other.len()
                    ),
                ))
            }
            None => return Err(invalid(O, "size=<size> is required")),
        };
        Ok(Self {
            size,
            deflate_on_oom: toggle(&p, O, "deflate_on_oom", false)?,
            free_page_reporting: toggle(&p, O, "free_page_reporting", false)?,
            statistics: toggle(&p, O, "statistics", false)?,
            heterogeneous_memory: toggle(&p, O, "heterogeneous_memory", false)?,
        })
    }
}

impl RngConfig {
    /// `--rng` syntax.
    pub const SYNTAX: &'static str =
        "src=<entropy source path> (default src=/dev/urandom; the device is always present)";

    /// Parses a `--rng` value.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        const O: &str = "--rng";
        let p = parser_with_upstream(O, &["src", "iommu"], &PCI_KEYS, input)?;
        Ok(Self {
            src: p
                .get("src")
                .map_or_else(|| Self::default().src, PathBuf::from),
            iommu: toggle(&p, O, "iommu", false)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balloon_single_size_and_tier_pair() {
        let b = crate::BalloonConfig::parse("size=1G").unwrap();
        assert_eq!(b.size, crate::BalloonSize::from(1 << 30));
        assert!(!b.heterogeneous_memory && !b.statistics && !b.deflate_on_oom);
        let b = crate::BalloonConfig::parse(
            "size=[2G,6G],statistics=on,deflate_on_oom=on,heterogeneous_memory=on",
        )
        .unwrap();
        assert_eq!(b.size.as_array(), [2 << 30, 6 << 30]);
        assert!(b.heterogeneous_memory && b.statistics && b.deflate_on_oom);
    }

    #[test]
    fn rng_defaults_to_urandom_and_takes_a_source() {
        assert_eq!(
            RngConfig::parse("").unwrap().src,
            PathBuf::from("/dev/urandom")
        );
        let r = RngConfig::parse("src=/dev/hwrng").unwrap();
        assert_eq!(r.src, PathBuf::from("/dev/hwrng"));
        assert!(RngConfig::parse("source=/dev/hwrng").is_err());
    }

    #[test]
    fn balloon_rejects_bad_sizes() {
        for bad in [
            "statistics=on",
            "size=[1G]x",
            "size=[1G,2G,3G]",
            "size=-1",
            "size=1Q",
        ] {
            assert!(crate::BalloonConfig::parse(bad).is_err(), "{bad}");
        }
        let e = crate::BalloonConfig::parse("size=[1G,2G,3G]").unwrap_err();
        assert!(e.to_string().contains("--balloon"), "{e}");
    }

    #[test]
    fn cpus_defaults_and_full_syntax() {
        let c = CpusConfig::parse("boot=2").unwrap();
        assert_eq!((c.boot_vcpus, c.max_vcpus, c.max_phys_bits), (2, 2, 46));
        let c =
            CpusConfig::parse("boot=2,max=2,topology=1:2:1:1,affinity=[0@[0-1],1@[1]]").unwrap();
        assert_eq!(c.topology.unwrap().cores_per_die, 2);
        let aff = c.affinity.unwrap();
        assert_eq!(aff[0].host_cpus, vec![0, 1]);
        assert_eq!(aff[1].vcpu, 1);
    }

    #[test]
    fn cpus_errors_name_the_option() {
        for bad in [
            "boot=x",
            "boot=2,foo=1",
            "topology=1:2",
            "boot=300",
            "affinity=[0-1]",
        ] {
            let err = CpusConfig::parse(bad).unwrap_err().to_string();
            assert!(err.starts_with("--cpus:"), "{bad}: {err}");
        }
    }

    #[test]
    fn memory_zone_parses_every_key() {
        let z = MemoryZoneConfig::parse(
            "id=fmem,size=512M,host_numa_node=0,shared=on,file=/dev/dax0.0,hugepages=off,prefault=on",
        )
        .unwrap();
        assert_eq!(z.id, "fmem");
        assert_eq!(z.size, 512 << 20);
        assert_eq!(z.host_numa_node, Some(0));
        assert!(z.shared && z.prefault && !z.hugepages);
        assert_eq!(z.file.unwrap(), PathBuf::from("/dev/dax0.0"));
    }

    #[test]
    fn memory_zone_requires_id_and_size() {
        assert!(MemoryZoneConfig::parse("size=1G")
            .unwrap_err()
            .to_string()
            .contains("id="));
        assert!(MemoryZoneConfig::parse("id=a")
            .unwrap_err()
            .to_string()
            .contains("size="));
        assert!(MemoryZoneConfig::parse("id=a,size=1X")
            .unwrap_err()
            .to_string()
            .contains("--memory-zone"));
    }

    #[test]
    fn numa_parses_lists_distances_and_tier_keys() {
        let n = NumaConfig::parse(
            "guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem,latency_ns=80,bandwidth_mbps=20000",
        )
        .unwrap();
        assert_eq!(n.cpus, Some(vec![0, 1]));
        assert_eq!(
            n.distances.unwrap()[0],
            NumaDistance {
                destination: 1,
                distance: 25
            }
        );
        assert_eq!(n.memory_zones, Some(vec!["fmem".to_string()]));
        assert_eq!((n.latency_ns, n.bandwidth_mbps), (Some(80), Some(20000)));
        let n = NumaConfig::parse("guest_numa_id=1,memory_zones=[a,b]").unwrap();
        assert_eq!(n.cpus, None);
        assert_eq!(n.memory_zones.unwrap().len(), 2);
    }

    #[test]
    fn numa_rejects_bad_values() {
        assert!(NumaConfig::parse("cpus=0").is_err());
        assert!(NumaConfig::parse("guest_numa_id=0,cpus=[256]").is_err());
        assert!(NumaConfig::parse("guest_numa_id=0,distances=[1@1000]").is_err());
    }
}
