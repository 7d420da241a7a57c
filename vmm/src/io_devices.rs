//! Builds the disks (virtio-blk) and NICs (virtio-net over a TAP) from the
//! configuration; their ids (`id`, or `_disk<N>` / `_net<N>`, as Cloud
//! Hypervisor names them) key their counters.

use devices::virtio::tap::TapQueues;
use devices::virtio::{Block, Console, DiskOptions, Net, NetOptions, Tap};
use vm_config::{ConsoleOutputMode, DiskConfig, NetConfig, VmConfig};

use crate::vm::VmError;

/// Counter name of the virtio console (Cloud Hypervisor's device id).
pub const CONSOLE_ID: &str = "__console";

/// The disk's device; its image is opened now.
pub fn create_disk(id: String, cfg: &DiskConfig) -> Result<(String, Block), VmError> {
    let dev = Block::new(DiskOptions {
        path: cfg.path.clone(),
        readonly: cfg.readonly,
        direct: cfg.direct,
        serial: cfg.serial.clone(),
        queue_size: cfg.queue_size,
        num_queues: cfg.num_queues,
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
pub fn create_net(id: String, cfg: &NetConfig) -> Result<(String, Net), VmError> {
    let err = |e: std::io::Error| VmError::Config(format!("--net {id}: {e}"));
    // num_queues counts RX and TX queues: one TAP descriptor per pair.
    let pairs = usize::from(cfg.num_queues / 2).max(1);
    let (tap, others) = Tap::open_queues(cfg.tap.as_deref(), pairs).map_err(err)?;
    if let Some(mac) = cfg.host_mac {
        tap.set_mac(mac.0).map_err(err)?;
    }
    if let Some(mtu) = cfg.mtu {
        tap.set_mtu(mtu).map_err(err)?;
    }
    tap.set_ipv4(cfg.ip, cfg.mask).map_err(err)?;
    tap.up().map_err(err)?;
    log::info!(
        "net {id}: TAP {} at {}/{}, guest MAC {}, {pairs} queue pair(s)",
        tap.name(),
        cfg.ip,
        cfg.mask,
        cfg.mac
    );
    let mut files = vec![tap.into_file()];
    files.extend(others);
    let dev = Net::with_queues(
        TapQueues::new(files, pairs > 1),
        NetOptions {
            mac: cfg.mac.0,
            mtu: cfg.mtu,
            queue_size: cfg.queue_size,
            offload_csum: cfg.offload_csum,
            offload_tso: cfg.offload_tso,
        },
    );
    Ok((id, dev))
}

/// The virtio console (`hvc0`), or None when `console.mode` is Off.
/// Pty and Socket are refused by validation.
pub fn create_console(config: &VmConfig) -> Result<Option<Console>, VmError> {
    let c = &config.console;
    let output: Box<dyn std::io::Write + Send> = match c.mode {
        ConsoleOutputMode::Off => return Ok(None),
        ConsoleOutputMode::Tty => Box::new(crate::console::FlushingStdout),
        ConsoleOutputMode::File => {
            let path = c
                .file
                .as_ref()
                .ok_or_else(|| VmError::Config("--console file= needs a path".into()))?;
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| {
                    VmError::Config(format!("--console: cannot open {}: {e}", path.display()))
                })?;
            Box::new(f)
        }
        _ => Box::new(std::io::sink()),
    };
    // stdin belongs to the serial port when both are on the terminal, as in
    // Cloud Hypervisor.
    let input = (c.mode == ConsoleOutputMode::Tty
        && config.serial.mode != ConsoleOutputMode::Tty
        && crate::console::stdin_is_interactive())
    .then(crate::console::virtio_console_stdin)
    .flatten();
    if c.mode == ConsoleOutputMode::Tty && config.serial.mode == ConsoleOutputMode::Tty {
        log::warn!(
            "serial and virtio console both write to this terminal; input goes to the serial"
        );
    }
    Ok(Some(Console::new(output, input)))
}
