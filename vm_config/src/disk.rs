//! Block devices (`--disk`, `VmConfig.disks`): Cloud Hypervisor's
//! `DiskConfig`, limited to what a virtio-blk over a raw image needs.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cli::{get, invalid, toggle, ParseError};
use crate::validate::ValidationError;

/// Default queue count (Cloud Hypervisor's).
pub const DEFAULT_DISK_NUM_QUEUES: u16 = 1;
/// Default queue size (Cloud Hypervisor's).
pub const DEFAULT_DISK_QUEUE_SIZE: u16 = 128;
/// Most request queues of one disk (each has its MSI-X vector and thread).
pub const MAX_DISK_QUEUES: u16 = 64;

/// One virtio-blk disk backed by a raw image file (or a host block device).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskConfig {
    /// The raw image.
    pub path: PathBuf,
    /// Offer the disk read-only (`VIRTIO_BLK_F_RO`); the image is opened read-only.
    #[serde(default)]
    pub readonly: bool,
    /// Open the image with `O_DIRECT` (no host page cache).
    #[serde(default)]
    pub direct: bool,
    /// Accepted for schema compatibility; must be false.
    #[serde(default)]
    pub iommu: bool,
    /// Request queues, 1..=[`MAX_DISK_QUEUES`] and at most the boot vCPUs
    /// (as Cloud Hypervisor); above 1 needs `--virtio-transport pci`.
    #[serde(default = "default_num_queues")]
    pub num_queues: u16,
    /// Size of the request queue (a power of two).
    #[serde(default = "default_queue_size")]
    pub queue_size: u16,
    /// Device id (names the disk in `vm.counters`); `_disk<N>` when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Serial the guest reads with `VIRTIO_BLK_T_GET_ID` (at most 20 bytes).
    #[serde(default)]
    pub serial: Option<String>,
}

fn default_num_queues() -> u16 {
    DEFAULT_DISK_NUM_QUEUES
}

fn default_queue_size() -> u16 {
    DEFAULT_DISK_QUEUE_SIZE
}

/// Longest serial `VIRTIO_BLK_T_GET_ID` can return.
pub const DISK_SERIAL_MAX: usize = 20;

impl DiskConfig {
    /// A disk over `path` with every other field at its default.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            readonly: false,
            direct: false,
            iommu: false,
            num_queues: DEFAULT_DISK_NUM_QUEUES,
            queue_size: DEFAULT_DISK_QUEUE_SIZE,
            id: None,
            serial: None,
        }
    }

    /// `--disk` syntax.
    pub const SYNTAX: &'static str = "path=<raw image>,readonly=on|off,direct=on|off,\
id=<device id>,serial=<serial, up to 20 bytes>,num_queues=<1..=vCPUs>,queue_size=<size> \
(virtio-blk; repeat the option or give several values for several disks)";

    /// Parses one `--disk` value.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        const O: &str = "--disk";
        const ANY_BOOL: &[&str] = &["on", "off", "true", "false"];
        let upstream: crate::cli::UpstreamKeys<'_> = &[
            ("vhost_user", &["off", "false"]),
            ("socket", &[]),
            ("rate_limit_group", &[]),
            ("bw_size", &[]),
            ("bw_one_time_burst", &[]),
            ("bw_refill_time", &[]),
            ("ops_size", &[]),
            ("ops_one_time_burst", &[]),
            ("ops_refill_time", &[]),
            ("queue_affinity", &[]),
            ("backing_files", &["off", "false"]),
            ("sparse", &["on", "true"]),
            ("image_type", &["raw"]),
            ("lock_granularity", &["byte-range"]),
            // We use neither io_uring nor AIO.
            ("_disable_io_uring", ANY_BOOL),
            ("_disable_aio", ANY_BOOL),
            crate::cli::PCI_KEYS[0],
            crate::cli::PCI_KEYS[1],
        ];
        let keys = [
            "path",
            "readonly",
            "direct",
            "iommu",
            "num_queues",
            "queue_size",
            "id",
            "serial",
        ];
        let p = crate::cli::parser_with_upstream(O, &keys, upstream, input)?;
        let path = p
            .get("path")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| invalid(O, "path=<raw image> is required"))?;
        Ok(Self {
            readonly: toggle(&p, O, "readonly", false)?,
            direct: toggle(&p, O, "direct", false)?,
            iommu: toggle(&p, O, "iommu", false)?,
            num_queues: get::<u16>(&p, O, "num_queues")?.unwrap_or(DEFAULT_DISK_NUM_QUEUES),
            queue_size: get::<u16>(&p, O, "queue_size")?.unwrap_or(DEFAULT_DISK_QUEUE_SIZE),
            id: p.get("id").map(str::to_owned),
            serial: p.get("serial").map(str::to_owned),
            ..Self::new(path)
        })
    }

    /// Checks one disk on its own (ids are checked across devices by
    /// [`crate::VmConfig::validate`]).
    pub fn validate(&self) -> Result<(), ValidationError> {
        let err = |m: String| Err(ValidationError::Disk(m));
        let name = self.path.display();
        if self.path.as_os_str().is_empty() {
            return err("path must not be empty".into());
        }
        if self.iommu {
            return Err(ValidationError::Unsupported("--disk iommu=on"));
        }
        if self.num_queues == 0 || self.num_queues > MAX_DISK_QUEUES {
            return err(format!(
                "{name}: num_queues={} must be 1..={MAX_DISK_QUEUES}",
                self.num_queues
            ));
        }
        check_queue_size("--disk", self.queue_size, 4).map_err(ValidationError::Disk)?;
        if self
            .serial
            .as_ref()
            .is_some_and(|s| s.len() > DISK_SERIAL_MAX)
        {
            return err(format!(
                "{name}: serial is longer than {DISK_SERIAL_MAX} bytes"
            ));
        }
        Ok(())
    }
}

/// A virtqueue size must be a power of two (virtio 1.2 section 2.7) no
/// larger than 32768; `min` is what the device needs per request.
pub(crate) fn check_queue_size(option: &str, size: u16, min: u16) -> Result<(), String> {
    if !size.is_power_of_two() || size < min || size > 32768 {
        return Err(format!(
            "{option}: queue_size={size} must be a power of two from {min} to 32768"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key_and_defaults() {
        let d = DiskConfig::parse("path=/img.raw").unwrap();
        assert_eq!(d, DiskConfig::new("/img.raw"));
        assert_eq!((d.num_queues, d.queue_size), (1, 128));
        let d = DiskConfig::parse(
            "path=/img.raw,readonly=on,direct=on,id=root,serial=abc,num_queues=1,queue_size=64",
        )
        .unwrap();
        assert!(d.readonly && d.direct);
        assert_eq!(d.id.as_deref(), Some("root"));
        assert_eq!(d.serial.as_deref(), Some("abc"));
        assert_eq!(d.queue_size, 64);
        d.validate().unwrap();
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            "",
            "readonly=on",
            "path=",
            "path=/a,readonly=maybe",
            "path=/a,bogus=1",
            "path=/a,vhost_user=on",
            "path=/a,queue_size=-1",
            "path=/a,queue_size=70000",
            "path=/a,path=/b",
        ] {
            let e = DiskConfig::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("--disk:"), "{bad}: {e}");
        }
    }

    #[test]
    fn validation_rejects_what_the_device_cannot_do() {
        for bad in [
            "path=/a,num_queues=0",
            "path=/a,num_queues=65",
            "path=/a,queue_size=100",
            "path=/a,queue_size=2",
            "path=/a,iommu=on",
            "path=/a,serial=123456789012345678901",
        ] {
            let d = DiskConfig::parse(bad).unwrap();
            assert!(d.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn json_matches_cloud_hypervisor() {
        let d: DiskConfig = serde_json::from_str(r#"{"path":"/img"}"#).unwrap();
        assert_eq!(d, DiskConfig::new("/img"));
        assert!(serde_json::from_str::<DiskConfig>(r#"{"readonly":true}"#).is_err());
        assert!(serde_json::from_str::<DiskConfig>(r#"{"path":"/a","x":1}"#).is_err());
        assert!(serde_json::from_str::<DiskConfig>(r#"{"path":"/a","queue_size":-1}"#).is_err());
    }
}
