//! Upstream Cloud Hypervisor v53 fields that our `VmConfig` does not model.
//!
//! Upstream's `vm.info` writes every field back with its default, so a
//! config copied from upstream carries `pci_segment: 0`, `nested: true`,
//! `debug_console: {"mode":"Off","iobase":233}` and so on. Each such field
//! is listed here with the values that ask for nothing beyond what this
//! VMM does; those are accepted and dropped (they carry no information, and
//! upstream fills the same defaults back in). Any other value is an error
//! naming the field and the value, so a request for a behaviour we lack is
//! never silently ignored. Fields that are not upstream's at all still
//! fail as unknown fields in the strict parse that follows.

use serde_json::{Map, Value};

/// Which values of an upstream-only field ask for nothing.
#[derive(Clone, Copy)]
enum Allowed {
    /// `null`, or a JSON value equal to this literal.
    Is(&'static str),
    /// `null` or an empty array.
    Empty,
    /// Anything: the field only matters for a feature we do not have (say,
    /// `iommu_address_width_bits` without an IOMMU).
    Any,
    /// One of these literals (or `null`).
    OneOf(&'static [&'static str]),
}

impl Allowed {
    fn accepts(self, v: &Value) -> bool {
        let lit = |s: &str| serde_json::from_str::<Value>(s).ok();
        match self {
            _ if v.is_null() => true,
            Self::Is(s) => lit(s).as_ref() == Some(v),
            Self::Empty => v.as_array().is_some_and(Vec::is_empty),
            Self::Any => true,
            Self::OneOf(list) => list.iter().any(|s| lit(s).as_ref() == Some(v)),
        }
    }
}

use Allowed::*;

/// PCI placement keys every upstream device carries; we have no PCI bus.
const PCI: [(&str, Allowed); 2] = [("pci_segment", Is("0")), ("pci_device_id", Is("null"))];

const TOP: &[(&str, Allowed)] = &[
    ("rate_limit_groups", Empty),
    ("fs", Empty),
    ("pmem", Empty),
    ("devices", Empty),
    ("user_devices", Empty),
    ("vdpa", Empty),
    ("generic_vhost_user", Empty),
    ("landlock_rules", Empty),
    ("pci_segments", Empty),
    ("vsock", Is("null")),
    ("tpm", Is("null")),
    ("rtc", Is("null")),
    ("pvpanic", Is("false")),
    ("landlock_enable", Is("false")),
];
const CPUS: &[(&str, Allowed)] = &[
    ("features", OneOf(&["{}", r#"{"amx":false}"#])),
    ("nested", Is("true")),
    // We never set up core scheduling, which is what "Off" asks for; "Vm"
    // is upstream's default and must round-trip.
    ("core_scheduling", OneOf(&[r#""Vm""#, r#""Off""#])),
    ("profile", Is(r#""Host""#)),
];
const MEMORY: &[(&str, Allowed)] = &[("hotplugged_size", Is("0")), ("reserve", Is("false"))];
const ZONE: &[(&str, Allowed)] = &[("reserve", Is("false")), ("mergeable", Is("false"))];
const CONSOLE: &[(&str, Allowed)] = &[("id", Is("null")), PCI[0], PCI[1]];
const RNG: &[(&str, Allowed)] = &[PCI[0], PCI[1]];
const BALLOON: &[(&str, Allowed)] = &[("id", Is("null")), ("iommu", Is("false")), PCI[0], PCI[1]];
const DISK: &[(&str, Allowed)] = &[
    ("vhost_user", Is("false")),
    ("vhost_socket", Is("null")),
    ("rate_limit_group", Is("null")),
    ("rate_limiter_config", Is("null")),
    // We use neither io_uring nor AIO: disabling them changes nothing.
    ("disable_io_uring", Any),
    ("disable_aio", Any),
    ("queue_affinity", Empty),
    ("backing_files", Is("false")),
    ("sparse", Is("true")),
    // "Unknown" is upstream's default (probe the image); we only read raw.
    ("image_type", OneOf(&[r#""Raw""#, r#""Unknown""#])),
    // We take no lock; "ByteRange" is the default and must round-trip.
    ("lock_granularity", Is(r#""ByteRange""#)),
    PCI[0],
    PCI[1],
];
const NET: &[(&str, Allowed)] = &[
    ("vhost_user", Is("false")),
    ("vhost_socket", Is("null")),
    ("vhost_mode", Is(r#""Client""#)),
    ("fds", Empty),
    ("rate_limiter_config", Is("null")),
    PCI[0],
    PCI[1],
];
const NUMA: &[(&str, Allowed)] = &[("pci_segments", Empty), ("device_id", Is("null"))];
const DEBUG_CONSOLE: &[(&str, Allowed)] = &[
    ("mode", Is(r#""Off""#)),
    ("file", Is("null")),
    // The port of a debug console that is off.
    ("iobase", Any),
];
/// Upstream's platform keys beside the SMBIOS identity, which
/// [`crate::PlatformConfig`] models (`system_*`, `oem_strings`,
/// `chassis_asset_tag` and the older `serial_number`, `uuid`).
const PLATFORM: &[(&str, Allowed)] = &[
    ("num_pci_segments", Is("1")),
    ("iommu_segments", Empty),
    ("iommu_address_width_bits", Any),
    ("iommufd", Is("false")),
    ("iommufd_fd", OneOf(&["-1"])),
    ("vfio_p2p_dma", Any),
];

/// An upstream field set to a value this VMM cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}={value} is not supported by this VMM")]
pub struct Unsupported {
    /// Dotted path, e.g. `disks[0].vhost_user`.
    pub field: String,
    /// The value as JSON.
    pub value: String,
}

/// Checks and removes the upstream-only fields of a `VmConfig` body.
pub fn strip_upstream_fields(config: &mut Value) -> Result<(), Unsupported> {
    let Some(top) = config.as_object_mut() else {
        return Ok(()); // the strict parse reports the wrong type
    };
    strip(top, "", TOP)?;
    // A whole upstream object with nothing for us inside.
    if let Some(mut v) = top.remove("debug_console") {
        if let Some(obj) = v.as_object_mut() {
            strip(obj, "debug_console", DEBUG_CONSOLE)?;
            if let Some((k, _)) = obj.iter().next() {
                return Err(unsupported(&format!("debug_console.{k}"), &obj[k]));
            }
        } else if !v.is_null() {
            return Err(unsupported("debug_console", &v));
        }
    }
    // The platform: upstream's PCI/IOMMU/VFIO keys go, the SMBIOS identity
    // stays for the strict parse; `null` is upstream's "no platform".
    if top.get("platform").is_some_and(Value::is_null) {
        top.remove("platform");
    }
    strip_in(top, "platform", PLATFORM)?;
    strip_in(top, "cpus", CPUS)?;
    strip_in(top, "memory", MEMORY)?;
    if let Some(memory) = top.get_mut("memory").and_then(Value::as_object_mut) {
        strip_each(memory, "memory.zones", "zones", ZONE)?;
    }
    strip_in(top, "serial", CONSOLE)?;
    strip_in(top, "console", CONSOLE)?;
    strip_in(top, "rng", RNG)?;
    strip_in(top, "balloon", BALLOON)?;
    strip_each(top, "disks", "disks", DISK)?;
    strip_each(top, "net", "net", NET)?;
    strip_each(top, "numa", "numa", NUMA)?;
    Ok(())
}

/// [`strip_upstream_fields`] for the body of `vm.add-disk` (a `DiskConfig`).
pub fn strip_upstream_disk_fields(disk: &mut Value) -> Result<(), Unsupported> {
    match disk.as_object_mut() {
        Some(obj) => strip(obj, "disk", DISK),
        None => Ok(()), // the strict parse reports the wrong type
    }
}

/// [`strip_upstream_fields`] for the body of `vm.add-net` (a `NetConfig`).
pub fn strip_upstream_net_fields(net: &mut Value) -> Result<(), Unsupported> {
    match net.as_object_mut() {
        Some(obj) => strip(obj, "net", NET),
        None => Ok(()),
    }
}

/// What upstream v53's `vm.info` writes for the fields we drop, so our
/// `vm.info` has upstream's shape and every value there asks for nothing.
const DEFAULTS: &[(&str, &str)] = &[
    (
        "",
        r#"{"debug_console":{"mode":"Off","iobase":233},"pvpanic":false,"landlock_enable":false}"#,
    ),
    (
        "platform",
        r#"{"num_pci_segments":1,"iommu_address_width_bits":64,"iommufd":false,"vfio_p2p_dma":true}"#,
    ),
    (
        "cpus",
        r#"{"features":{"amx":false},"nested":true,"core_scheduling":"Vm","profile":"Host"}"#,
    ),
    ("memory", r#"{"reserve":false}"#),
    ("memory.zones", r#"{"reserve":false,"mergeable":false}"#),
    ("console", r#"{"pci_segment":0}"#),
    ("rng", r#"{"pci_segment":0}"#),
    ("balloon", r#"{"pci_segment":0}"#),
    (
        "disks",
        r#"{"pci_segment":0,"vhost_user":false,"disable_io_uring":false,"disable_aio":false,
            "backing_files":false,"sparse":true,"image_type":"Raw","lock_granularity":"ByteRange"}"#,
    ),
    (
        "net",
        r#"{"pci_segment":0,"vhost_user":false,"vhost_mode":"Client"}"#,
    ),
];

/// Adds [`DEFAULTS`] to a serialized `VmConfig` (objects that are present).
pub fn add_upstream_defaults(config: &mut Value) {
    for (path, defaults) in DEFAULTS {
        let Ok(Value::Object(defaults)) = serde_json::from_str::<Value>(defaults) else {
            continue; // the literals above are objects; a unit test checks it
        };
        let mut targets: Vec<&mut Value> = vec![config];
        for key in path.split('.').filter(|k| !k.is_empty()) {
            targets = targets
                .into_iter()
                .filter_map(|t| t.get_mut(key))
                .flat_map(|t| match t {
                    Value::Array(items) => items.iter_mut().collect::<Vec<_>>(),
                    other => vec![other],
                })
                .collect();
        }
        for t in targets {
            if let Some(obj) = t.as_object_mut() {
                for (k, v) in &defaults {
                    obj.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
}

fn unsupported(field: &str, value: &Value) -> Unsupported {
    Unsupported {
        field: field.to_owned(),
        value: value.to_string(),
    }
}

fn strip(
    obj: &mut Map<String, Value>,
    path: &str,
    table: &[(&str, Allowed)],
) -> Result<(), Unsupported> {
    for &(key, allowed) in table {
        let Some(v) = obj.get(key) else { continue };
        if !allowed.accepts(v) {
            let field = if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            };
            return Err(unsupported(&field, v));
        }
        obj.remove(key);
    }
    Ok(())
}

fn strip_in(
    top: &mut Map<String, Value>,
    key: &str,
    table: &[(&str, Allowed)],
) -> Result<(), Unsupported> {
    match top.get_mut(key).and_then(Value::as_object_mut) {
        Some(obj) => strip(obj, key, table),
        None => Ok(()),
    }
}

fn strip_each(
    parent: &mut Map<String, Value>,
    path: &str,
    key: &str,
    table: &[(&str, Allowed)],
) -> Result<(), Unsupported> {
    let Some(items) = parent.get_mut(key).and_then(Value::as_array_mut) else {
        return Ok(());
    };
    for (i, item) in items.iter_mut().enumerate() {
        if let Some(obj) = item.as_object_mut() {
            strip(obj, &format!("{path}[{i}]"), table)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
