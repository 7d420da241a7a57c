//! `ch-remote`: drive a running VMM through its API socket, with Cloud
//! Hypervisor's subcommands.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use api::client::{api_request, ClientError, Method};
use api::{BalloonSize, VmRemoveDeviceData, VmResizeData, VmResizeDiskData, VmResizeZoneData};
use clap::{Parser, Subcommand};
use option_parser::{ByteSized, ByteSizedList};
use vm_config::{DiskConfig, NetConfig};

/// Remotely control a cloud-hypervisor VMM (ours: Cloud Hypervisor's
/// subcommands plus `balloon-stats`, and `resize --balloon [FMEM,SMEM]`).
#[derive(Debug, Parser)]
#[command(name = "ch-remote", version)]
struct Cli {
    /// HTTP API socket path (UNIX domain socket).
    #[arg(long, value_name = "PATH")]
    api_socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Add VFIO device
    AddDevice {
        /// Direct device assignment parameters "path=<device_path>,iommu=on|off,id=<device_id>,pci_segment=<segment_id>"
        device_config: String,
    },
    /// Add block device
    AddDisk {
        /// Disk parameters "path=<disk_image_path>,readonly=on|off,direct=on|off,id=<device_id>,serial=<serial_number>,..."
        disk_config: String,
    },
    /// Add virtio-fs backed fs device
    AddFs {
        /// virtio-fs parameters "tag=<tag_name>,socket=<socket_path>,num_queues=<n>,queue_size=<n>,id=<device_id>"
        fs_config: String,
    },
    /// Add generic vhost-user device
    AddGenericVhostUser {
        /// generic vhost-user parameters "device_type=<id>,socket=<socket_path>,queue_sizes=<list>,id=<device_id>"
        generic_vhost_user_config: String,
    },
    /// Add network device
    AddNet {
        /// Network parameters "tap=<if_name>,ip=<ip_addr>,mask=<net_mask>,mac=<mac_addr>,id=<device_id>,..."
        net_config: String,
    },
    /// Add persistent memory device
    AddPmem {
        /// Persistent memory parameters "file=<backing_file_path>,size=<size>,discard_writes=on|off,id=<device_id>"
        pmem_config: String,
    },
    /// Add userspace device
    AddUserDevice {
        /// Userspace device "socket=<socket_path>,id=<device_id>"
        device_config: String,
    },
    /// Add vDPA device
    AddVdpa {
        /// vDPA device "path=<device_path>,num_queues=<n>,id=<device_id>"
        vdpa_config: String,
    },
    /// Add vsock device
    AddVsock {
        /// Virtio VSOCK parameters "cid=<context_id>,socket=<socket_path>,id=<device_id>"
        vsock_config: String,
    },
    /// Balloon sizes per tier (FMem, SMem) and the guest's memory statistics
    BalloonStats,
    /// Boot a created VM
    Boot,
    /// Create a coredump from VM
    Coredump {
        /// <file_path>
        coredump_config: String,
    },
    /// Counters from the VM
    Counters,
    /// Create VM from a JSON configuration
    Create {
        /// Path to the VM configuration JSON, or `-` for stdin
        #[arg(value_name = "path", default_value = "-")]
        path: PathBuf,
    },
    /// Delete a VM
    Delete,
    /// Info on the VM
    Info,
    /// Trigger NMI
    Nmi,
    /// Pause the VM
    Pause,
    /// Ping the VMM to check for API server availability
    Ping,
    /// Trigger a power button in the VM
    PowerButton,
    /// Reboot the VM
    Reboot,
    /// Receive a VM migration
    ReceiveMigration {
        /// "<receiver_url>" or "receiver_url=<url>"
        receive_migration_config: String,
    },
    /// Remove VFIO and PCI device
    RemoveDevice {
        /// <device_id>
        id: String,
    },
    /// Resize the VM
    Resize {
        /// New vCPUs count
        #[arg(long, value_name = "cpus")]
        cpus: Option<u8>,
        /// New memory size in bytes (supports K/M/G suffix)
        #[arg(long, value_name = "memory", value_parser = parse_size)]
        memory: Option<u64>,
        /// New balloon size in bytes (supports K/M/G suffix), or [FMEM,SMEM] per tier
        #[arg(long, value_name = "balloon", value_parser = parse_balloon)]
        balloon: Option<BalloonSize>,
    },
    /// Resize an attached disk
    ResizeDisk {
        /// Disk identifier
        #[arg(long)]
        disk: String,
        /// New disk size (supports K/M/G suffix)
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Resize a memory zone
    ResizeZone {
        /// Memory zone identifier
        #[arg(long)]
        id: String,
        /// New memory zone size in bytes (supports K/M/G suffix)
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Restore VM from a snapshot
    Restore {
        /// Restore parameters "source_url=<source_url>,prefault=on|off"
        restore_config: String,
    },
    /// Resume the VM
    Resume,
    /// Initiate a VM migration
    SendMigration {
        /// "destination_url=<url>[,local=on|off]"
        send_migration_config: String,
    },
    /// Shutdown the VM
    Shutdown,
    /// Shutdown the VMM
    ShutdownVmm,
    /// Create a snapshot from VM
    Snapshot {
        /// <destination_url>
        snapshot_config: String,
    },
}

fn parse_size(s: &str) -> Result<u64, String> {
    s.parse::<ByteSized>().map(|b| b.0)
}

/// `SIZE` → `[SIZE, 0]`; `[FMEM,SMEM]` → both. Any other list length is an
/// error (the Demeter fork silently used `[0, 0]`).
fn parse_balloon(s: &str) -> Result<BalloonSize, String> {
    let list = s.parse::<ByteSizedList>()?;
    match list.0[..] {
        [fmem] => Ok(BalloonSize { fmem, smem: 0 }),
        [fmem, smem] => Ok(BalloonSize { fmem, smem }),
        _ => Err(format!(
            "expected SIZE or [FMEM,SMEM], got {} sizes",
            list.0.len()
        )),
    }
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot read the VM configuration {0}")]
    ReadConfig(String, #[source] std::io::Error),
    #[error("resize needs at least one of --cpus, --memory, --balloon")]
    NothingToResize,
    #[error("invalid parameters")]
    Options(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot encode the request")]
    Encode(#[from] serde_json::Error),
    #[error("cannot write the answer")]
    Output(#[source] std::io::Error),
}

/// Sends one request; prints a JSON answer pretty, as upstream does.
fn call(socket: &Path, method: Method, endpoint: &str, body: Option<&[u8]>) -> Result<(), Error> {
    let body = api_request(socket, method, endpoint, body)?.into_result()?;
    if body.is_empty() {
        return Ok(());
    }
    let text = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(v) => serde_json::to_string_pretty(&v)?,
        Err(_) => String::from_utf8_lossy(&body).into_owned(),
    };
    // A reader that stops early (`ch-remote counters | grep -q x`) is not
    // an error of ours: println! would panic on the broken pipe.
    match writeln!(std::io::stdout(), "{text}") {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(Error::Output),
    }
}

fn read_config(path: &Path) -> Result<Vec<u8>, Error> {
    if path == Path::new("-") {
        return read_stdin();
    }
    std::fs::read(path).map_err(|e| Error::ReadConfig(path.display().to_string(), e))
}

fn read_stdin() -> Result<Vec<u8>, Error> {
    let mut buf = Vec::new();
    std::io::stdin()
        .read_to_end(&mut buf)
        .map_err(|e| Error::ReadConfig("from stdin".into(), e))?;
    Ok(buf)
}

fn run(cli: Cli) -> Result<(), Error> {
    let s = cli.api_socket.as_path();
    let put = |endpoint: &str, body: Vec<u8>| call(s, Method::Put, endpoint, Some(&body));
    match cli.command {
        Command::Ping => call(s, Method::Get, "vmm.ping", None),
        Command::Info => call(s, Method::Get, "vm.info", None),
        Command::Counters => call(s, Method::Get, "vm.counters", None),
        Command::BalloonStats => call(s, Method::Get, "vm.balloon-stats", None),
        Command::Create { path } => put("vm.create", read_config(&path)?),
        Command::Boot => call(s, Method::Put, "vm.boot", None),
        Command::Shutdown => call(s, Method::Put, "vm.shutdown", None),
        Command::Reboot => call(s, Method::Put, "vm.reboot", None),
        Command::Pause => call(s, Method::Put, "vm.pause", None),
        Command::Resume => call(s, Method::Put, "vm.resume", None),
        Command::PowerButton => call(s, Method::Put, "vm.power-button", None),
        Command::Nmi => call(s, Method::Put, "vm.nmi", None),
        Command::Delete => call(s, Method::Put, "vm.delete", None),
        Command::ShutdownVmm => call(s, Method::Put, "vmm.shutdown", None),
        Command::Resize {
            cpus,
            memory,
            balloon,
        } => {
            if cpus.is_none() && memory.is_none() && balloon.is_none() {
                return Err(Error::NothingToResize);
            }
            let data = VmResizeData {
                desired_vcpus: cpus,
                desired_ram: memory,
                desired_balloon: balloon,
            };
            put("vm.resize", serde_json::to_vec(&data)?)
        }
        Command::ResizeZone { id, size } => {
            let data = VmResizeZoneData {
                id,
                desired_ram: size,
            };
            put("vm.resize-zone", serde_json::to_vec(&data)?)
        }
        Command::ResizeDisk { disk, size } => {
            let data = VmResizeDiskData {
                id: disk,
                desired_size: size,
            };
            put("vm.resize-disk", serde_json::to_vec(&data)?)
        }
        Command::RemoveDevice { id } => put(
            "vm.remove-device",
            serde_json::to_vec(&VmRemoveDeviceData { id })?,
        ),
        Command::AddDisk { disk_config } => {
            let disk = DiskConfig::parse(&disk_config).map_err(|e| Error::Options(e.into()))?;
            put("vm.add-disk", serde_json::to_vec(&disk)?)
        }
        Command::AddNet { net_config } => {
            let net = NetConfig::parse(&net_config).map_err(|e| Error::Options(e.into()))?;
            put("vm.add-net", serde_json::to_vec(&net)?)
        }
        Command::AddDevice { device_config } => put("vm.add-device", options_json(&device_config)?),
        Command::AddUserDevice { device_config } => {
            put("vm.add-user-device", options_json(&device_config)?)
        }
        Command::AddFs { fs_config } => put("vm.add-fs", options_json(&fs_config)?),
        Command::AddGenericVhostUser {
            generic_vhost_user_config,
        } => put(
            "vm.add-generic-vhost-user",
            options_json(&generic_vhost_user_config)?,
        ),
        Command::AddPmem { pmem_config } => put("vm.add-pmem", options_json(&pmem_config)?),
        Command::AddVdpa { vdpa_config } => put("vm.add-vdpa", options_json(&vdpa_config)?),
        Command::AddVsock { vsock_config } => put("vm.add-vsock", options_json(&vsock_config)?),
        Command::Snapshot { snapshot_config } => put(
            "vm.snapshot",
            url_json("destination_url", &snapshot_config)?,
        ),
        Command::Coredump { coredump_config } => put(
            "vm.coredump",
            url_json("destination_url", &coredump_config)?,
        ),
        Command::Restore { restore_config } => put("vm.restore", options_json(&restore_config)?),
        Command::SendMigration {
            send_migration_config,
        } => put(
            "vm.send-migration",
            url_json("destination_url", &send_migration_config)?,
        ),
        Command::ReceiveMigration {
            receive_migration_config,
        } => put(
            "vm.receive-migration",
            url_json("receiver_url", &receive_migration_config)?,
        ),
    }
}

/// `key=value,...` as a JSON object, for the endpoints of features this
/// VMM lacks (their answer is an error either way; the body only has to
/// reach the VMM in upstream's shape): `on`/`off`/`true`/`false` become
/// booleans, integers numbers, `[a,b]` arrays.
fn options_json(options: &str) -> Result<Vec<u8>, Error> {
    let mut map = serde_json::Map::new();
    let items =
        option_parser::split_top_level(options, ',').map_err(|e| Error::Options(e.into()))?;
    for item in items.iter().filter(|i| !i.is_empty()) {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| Error::Options(format!("'{item}' is not key=value").into()))?;
        map.insert(key.trim().to_owned(), option_value(value.trim()));
    }
    Ok(serde_json::to_vec(&map)?)
}

fn option_value(value: &str) -> serde_json::Value {
    use serde_json::Value;
    match value {
        "on" | "true" => Value::Bool(true),
        "off" | "false" => Value::Bool(false),
        v if v.starts_with('[') && v.ends_with(']') => Value::Array(
            v[1..v.len() - 1]
                .split(',')
                .filter(|x| !x.is_empty())
                .map(option_value)
                .collect(),
        ),
        v => v
            .parse::<u64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(v.to_owned())),
    }
}

/// `URL` or `key=URL[,...]` as `{"key": URL, ...}`.
fn url_json(key: &str, config: &str) -> Result<Vec<u8>, Error> {
    if config.contains('=') {
        return options_json(config);
    }
    Ok(serde_json::to_vec(&serde_json::json!({ key: config }))?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("Error running command: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn balloon_flag_takes_a_size_or_a_tier_pair() {
        assert_eq!(
            parse_balloon("1G"),
            Ok(BalloonSize {
                fmem: 1 << 30,
                smem: 0
            })
        );
        assert_eq!(
            parse_balloon("[2G,6G]"),
            Ok(BalloonSize {
                fmem: 2 << 30,
                smem: 6 << 30
            })
        );
        assert!(parse_balloon("[1G,2G,3G]").is_err());
        assert!(parse_balloon("[]").is_err());
        assert!(parse_balloon("[1G,x]").is_err());
        assert!(parse_balloon("-1G").is_err());
    }

    #[test]
    fn resize_flags_parse() {
        let cli = Cli::try_parse_from([
            "ch-remote",
            "--api-socket",
            "/s",
            "resize",
            "--cpus",
            "2",
            "--memory",
            "1G",
            "--balloon",
            "[512M,1G]",
        ])
        .unwrap();
        let Command::Resize {
            cpus,
            memory,
            balloon,
        } = cli.command
        else {
            panic!("not resize");
        };
        assert_eq!((cpus, memory), (Some(2), Some(1 << 30)));
        assert_eq!(balloon.map(|b| b.as_array()), Some([512 << 20, 1 << 30]));
    }
}
