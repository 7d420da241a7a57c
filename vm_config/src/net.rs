//! Network devices (`--net`, `VmConfig.net`): Cloud Hypervisor's
//! `NetConfig` for a virtio-net over a TAP device. As in Cloud Hypervisor,
//! `ip`/`mask` are the host side of the TAP (the VMM sets them), and `mac`
//! is the guest's address.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::cli::{get, ParseError};
use crate::disk::check_queue_size;
use crate::validate::ValidationError;

/// Default host address of the TAP (Cloud Hypervisor's).
pub const DEFAULT_NET_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 249, 1);
/// Default netmask of the TAP (Cloud Hypervisor's).
pub const DEFAULT_NET_MASK: Ipv4Addr = Ipv4Addr::new(255, 255, 255, 0);
/// Default queue count: one RX/TX pair (Cloud Hypervisor's).
pub const DEFAULT_NET_NUM_QUEUES: u16 = 2;
/// Default queue size (Cloud Hypervisor's).
pub const DEFAULT_NET_QUEUE_SIZE: u16 = 256;

/// An Ethernet address, written `12:34:56:78:90:ab` (JSON: that string).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// A random unicast, locally administered address (what Cloud
    /// Hypervisor gives a NIC without `mac=`).
    pub fn local_random() -> Self {
        // RandomState is seeded from the OS's randomness once per process
        // and then per instance; good enough for a MAC, no extra crate.
        let r = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
            .to_le_bytes();
        let mut b = [r[0], r[1], r[2], r[3], r[4], r[5]];
        b[0] = (b[0] & !0x01) | 0x02;
        Self(b)
    }

    /// Group (multicast/broadcast) addresses cannot name one NIC.
    pub fn is_unicast(&self) -> bool {
        self.0[0] & 0x01 == 0 && self.0 != [0; 6]
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl FromStr for MacAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("'{s}' is not a MAC address (six hex pairs, e.g. 12:34:56:78:90:ab)");
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for b in &mut out {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self(out))
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One virtio-net NIC backed by a TAP device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetConfig {
    /// TAP name to open (created if missing); the kernel picks `vmtapN` when absent.
    #[serde(default)]
    pub tap: Option<String>,
    /// Host-side IPv4 address of the TAP.
    #[serde(default = "default_ip")]
    pub ip: Ipv4Addr,
    /// Netmask of `ip`.
    #[serde(default = "default_mask")]
    pub mask: Ipv4Addr,
    /// The guest NIC's MAC; a random local address when absent.
    #[serde(default = "MacAddr::local_random")]
    pub mac: MacAddr,
    /// MAC of the TAP (host side); the kernel's choice when absent.
    #[serde(default)]
    pub host_mac: Option<MacAddr>,
    /// MTU of the TAP, offered to the guest (`VIRTIO_NET_F_MTU`).
    #[serde(default)]
    pub mtu: Option<u16>,
    /// Accepted for schema compatibility; must be false.
    #[serde(default)]
    pub iommu: bool,
    /// Queues, RX and TX counted apart: 2 x queue pairs, at most
    /// 2 x [`MAX_NET_QUEUE_PAIRS`] and 2 x boot vCPUs (as Cloud
    /// Hypervisor); above 2 needs `--virtio-transport pci`.
    #[serde(default = "default_num_queues")]
    pub num_queues: u16,
    /// Size of each queue (a power of two).
    #[serde(default = "default_queue_size")]
    pub queue_size: u16,
    /// Device id (names the NIC in `vm.counters`); `_net<N>` when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Offer TCP segmentation offload both ways (`HOST_TSO4/6`,
    /// `GUEST_TSO4/6`; needs `offload_csum`), as upstream (default true).
    #[serde(default = "default_true")]
    pub offload_tso: bool,
    /// Upstream's UFO switch; UFO is never offered here, so the value only
    /// round-trips.
    #[serde(default = "default_true")]
    pub offload_ufo: bool,
    /// Offer partial checksums both ways (`CSUM`, `GUEST_CSUM`), as
    /// upstream (default true).
    #[serde(default = "default_true")]
    pub offload_csum: bool,
}

fn default_true() -> bool {
    true
}

fn default_ip() -> Ipv4Addr {
    DEFAULT_NET_IP
}

fn default_mask() -> Ipv4Addr {
    DEFAULT_NET_MASK
}

fn default_num_queues() -> u16 {
    DEFAULT_NET_NUM_QUEUES
}

fn default_queue_size() -> u16 {
    DEFAULT_NET_QUEUE_SIZE
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            tap: None,
            ip: DEFAULT_NET_IP,
            mask: DEFAULT_NET_MASK,
            mac: MacAddr::local_random(),
            host_mac: None,
            mtu: None,
            iommu: false,
            num_queues: DEFAULT_NET_NUM_QUEUES,
            queue_size: DEFAULT_NET_QUEUE_SIZE,
            id: None,
            offload_tso: true,
            offload_ufo: true,
            offload_csum: true,
        }
    }
}

/// Most queue pairs of one NIC (one TAP descriptor, two MSI-X vectors and
/// a thread each).
pub const MAX_NET_QUEUE_PAIRS: u16 = 64;

/// Smallest MTU an IPv4 link may have (RFC 791).
pub const MIN_MTU: u16 = 68;

impl NetConfig {
    /// `--net` syntax.
    pub const SYNTAX: &'static str = "tap=<if name>,ip=<host IPv4 of the tap>,\
mask=<netmask>,mac=<guest MAC>,host_mac=<tap MAC>,mtu=<mtu>,id=<device id>,\
num_queues=<2 x queue pairs>,queue_size=<size> (virtio-net over a TAP the VMM creates or opens and \
configures; default ip=192.168.249.1,mask=255.255.255.0, a random mac; repeat for \
several NICs)";

    /// Parses one `--net` value.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        const O: &str = "--net";
        let upstream: crate::cli::UpstreamKeys<'_> = &[
            ("fd", &[]),
            ("vhost_user", &["off", "false"]),
            ("socket", &[]),
            ("vhost_mode", &["client"]),
            ("bw_size", &[]),
            ("bw_one_time_burst", &[]),
            ("bw_refill_time", &[]),
            ("ops_size", &[]),
            ("ops_one_time_burst", &[]),
            ("ops_refill_time", &[]),
            crate::cli::PCI_KEYS[0],
            crate::cli::PCI_KEYS[1],
        ];
        let keys = [
            "tap",
            "ip",
            "mask",
            "mac",
            "host_mac",
            "mtu",
            "iommu",
            "num_queues",
            "queue_size",
            "id",
            "offload_tso",
            "offload_ufo",
            "offload_csum",
        ];
        let p = crate::cli::parser_with_upstream(O, &keys, upstream, input)?;
        Ok(Self {
            tap: p.get("tap").filter(|t| !t.is_empty()).map(str::to_owned),
            ip: get::<Ipv4Addr>(&p, O, "ip")?.unwrap_or(DEFAULT_NET_IP),
            mask: get::<Ipv4Addr>(&p, O, "mask")?.unwrap_or(DEFAULT_NET_MASK),
            mac: get::<MacAddr>(&p, O, "mac")?.unwrap_or_else(MacAddr::local_random),
            host_mac: get::<MacAddr>(&p, O, "host_mac")?,
            mtu: get::<u16>(&p, O, "mtu")?,
            iommu: crate::cli::toggle(&p, O, "iommu", false)?,
            num_queues: get::<u16>(&p, O, "num_queues")?.unwrap_or(DEFAULT_NET_NUM_QUEUES),
            queue_size: get::<u16>(&p, O, "queue_size")?.unwrap_or(DEFAULT_NET_QUEUE_SIZE),
            id: p.get("id").map(str::to_owned),
            offload_tso: crate::cli::toggle(&p, O, "offload_tso", true)?,
            offload_ufo: crate::cli::toggle(&p, O, "offload_ufo", true)?,
            offload_csum: crate::cli::toggle(&p, O, "offload_csum", true)?,
        })
    }

    /// Checks one NIC on its own (ids are checked across devices by
    /// [`crate::VmConfig::validate`]).
    pub fn validate(&self) -> Result<(), ValidationError> {
        let err = |m: String| Err(ValidationError::Net(m));
        if self.iommu {
            return Err(ValidationError::Unsupported("--net iommu=on"));
        }
        let max = 2 * MAX_NET_QUEUE_PAIRS;
        if self.num_queues < 2 || !self.num_queues.is_multiple_of(2) || self.num_queues > max {
            return err(format!(
                "num_queues={} must be an even number from 2 to {max} (RX and TX of each pair)",
                self.num_queues
            ));
        }
        check_queue_size("--net", self.queue_size, 2).map_err(ValidationError::Net)?;
        if !self.mac.is_unicast() {
            return err(format!("mac={} is not a unicast address", self.mac));
        }
        if let Some(m) = self.host_mac.filter(|m| !m.is_unicast()) {
            return err(format!("host_mac={m} is not a unicast address"));
        }
        // The kernel refuses non-contiguous masks (SIOCSIFNETMASK).
        let mask = u32::from(self.mask);
        if mask.leading_ones() + mask.trailing_zeros() != 32 {
            return err(format!("mask={} is not a contiguous netmask", self.mask));
        }
        if let Some(mtu) = self.mtu.filter(|&m| m < MIN_MTU) {
            return err(format!("mtu={mtu} is below {MIN_MTU}"));
        }
        if let Some(t) = &self.tap {
            // IFNAMSIZ is 16 with the NUL; '/' and spaces are refused by the kernel.
            if t.is_empty() || t.len() > 15 || t.contains(['/', ' ', ':']) || t == "." || t == ".."
            {
                return err(format!("tap='{t}' is not a valid interface name"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parses_prints_and_rejects() {
        let m: MacAddr = "12:34:56:78:90:AB".parse().unwrap();
        assert_eq!(m.0, [0x12, 0x34, 0x56, 0x78, 0x90, 0xab]);
        assert_eq!(m.to_string(), "12:34:56:78:90:ab");
        for bad in [
            "",
            "12:34:56:78:90",
            "12:34:56:78:90:ab:cd",
            "1:34:56:78:90:ab",
            "12:34:56:78:90:xg",
            "+1:34:56:78:90:ab",
            "12-34-56-78-90-ab",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
        let r = MacAddr::local_random();
        assert!(r.is_unicast() && r.0[0] & 0x02 != 0, "{r}");
        assert!(!"01:00:5e:00:00:01".parse::<MacAddr>().unwrap().is_unicast());
    }

    #[test]
    fn parses_every_key_with_cloud_hypervisor_defaults() {
        let n = NetConfig::parse("").unwrap();
        assert_eq!((n.ip, n.mask), (DEFAULT_NET_IP, DEFAULT_NET_MASK));
        assert!(n.mac.is_unicast() && n.tap.is_none());
        n.validate().unwrap();
        let n = NetConfig::parse(
            "tap=tap0,ip=192.168.10.10,mask=255.255.255.0,mac=12:34:56:78:90:01,\
host_mac=12:34:56:78:90:02,mtu=1400,id=n0,num_queues=2,queue_size=128",
        )
        .unwrap();
        assert_eq!(n.tap.as_deref(), Some("tap0"));
        assert_eq!(n.ip, Ipv4Addr::new(192, 168, 10, 10));
        assert_eq!(n.mac.to_string(), "12:34:56:78:90:01");
        assert_eq!(n.host_mac.unwrap().to_string(), "12:34:56:78:90:02");
        assert_eq!((n.mtu, n.queue_size), (Some(1400), 128));
        n.validate().unwrap();
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            "ip=300.1.1.1",
            "ip=192.168.1",
            "mask=255.255.255",
            "mac=12:34",
            "host_mac=zz:34:56:78:90:01",
            "mtu=70000",
            "fd=3",
            "bogus=1",
            "ip=1.2.3.4,ip=1.2.3.5",
        ] {
            let e = NetConfig::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("--net:"), "{bad}: {e}");
        }
        for bad in [
            "mask=255.0.255.0",
            "mac=01:00:5e:00:00:01",
            "mac=00:00:00:00:00:00",
            "host_mac=ff:ff:ff:ff:ff:ff",
            "num_queues=0",
            "num_queues=1",
            "num_queues=3",
            "num_queues=130",
            "queue_size=3",
            "mtu=10",
            "tap=averyveryverylongname",
            "tap=a/b",
            "iommu=on",
        ] {
            let n = NetConfig::parse(bad).unwrap();
            assert!(n.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn json_defaults_and_errors() {
        let n: NetConfig = serde_json::from_str(
            r#"{"ip":"192.168.10.10","mask":"255.255.255.0","mac":"12:34:56:78:90:01"}"#,
        )
        .unwrap();
        assert_eq!(n.mac.to_string(), "12:34:56:78:90:01");
        assert_eq!((n.num_queues, n.queue_size), (2, 256));
        let v = serde_json::to_value(&n).unwrap();
        assert_eq!(v["ip"], "192.168.10.10");
        assert_eq!(v["mac"], "12:34:56:78:90:01");
        let a: NetConfig = serde_json::from_str("{}").unwrap();
        let b: NetConfig = serde_json::from_str("{}").unwrap();
        assert_ne!(a.mac, b.mac, "each NIC gets its own random MAC");
        for bad in [
            r#"{"ip":"x"}"#,
            r#"{"mac":"12:34:56:78:90"}"#,
            r#"{"mac":5}"#,
            r#"{"vhost_user":true}"#,
            r#"{"mtu":-1}"#,
        ] {
            assert!(serde_json::from_str::<NetConfig>(bad).is_err(), "{bad}");
        }
    }
}
