//! Builds the disks (virtio-blk) and NICs (virtio-net over a TAP) from the
//! configuration, and names their counters as Cloud Hypervisor does
//! (`id`, or `_disk<N>` / `_net<N>`).

use std::collections::BTreeMap;
use std::sync::Arc;

use devices::virtio::block::BlockMetrics;
use devices::virtio::net::NetMetrics;
use devices::virtio::{Block, DiskOptions, Net, NetOptions, Tap};
use vm_config::{DiskConfig, NetConfig};

use crate::vm::VmError;

/// Where one device's counters come from.
pub enum Counters {
    /// A disk.
    Block(Arc<BlockMetrics>),
    /// A NIC.
    Net(Arc<NetMetrics>),
}

impl Counters {
    /// Counter name → value.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        let pairs = match self {
            Self::Block(m) => m.snapshot(),
            Self::Net(m) => m.snapshot(),
        };
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }
}

/// The disk's device; its image is opened now.
pub fn create_disk(index: usize, cfg: &DiskConfig) -> Result<(String, Block), VmError> {
    let id = cfg.id.clone().unwrap_or_else(|| format!("_disk{index}"));
    let dev = Block::new(DiskOptions {
        path: cfg.path.clone(),
        readonly: cfg.readonly,
        direct: cfg.direct,
        serial: cfg.serial.clone(),
        queue_size: cfg.queue_size,
    })
    .map_err(|e| {
        VmError::Config(format!(
            "--disk {}: cannot open {}{}: {e}",
            id,
            cfg.path.display(),
            if cfg.readonly { " read-only" } else { "" }
        ))
    })?;
    Ok((id, dev))
}

/// The NIC's device over a TAP created (or opened) and configured now.
pub fn create_net(index: usize, cfg: &NetConfig) -> Result<(String, Net), VmError> {
    let id = cfg.id.clone().unwrap_or_else(|| format!("_net{index}"));
    let err = |e: std::io::Error| VmError::Config(format!("--net {id}: {e}"));
    let tap = Tap::open(cfg.tap.as_deref()).map_err(err)?;
    if let Some(mac) = cfg.host_mac {
        tap.set_mac(mac.0).map_err(err)?;
    }
    if let Some(mtu) = cfg.mtu {
        tap.set_mtu(mtu).map_err(err)?;
    }
    tap.set_ipv4(cfg.ip, cfg.mask).map_err(err)?;
    tap.up().map_err(err)?;
    log::info!(
        "net {id}: TAP {} at {}/{}, guest MAC {}",
        tap.name(),
        cfg.ip,
        cfg.mask,
        cfg.mac
    );
    let dev = Net::new(
        tap.into_file(),
        NetOptions {
            mac: cfg.mac.0,
            mtu: cfg.mtu,
            queue_size: cfg.queue_size,
        },
    );
    Ok((id, dev))
}
