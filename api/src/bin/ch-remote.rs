//! `ch-remote`: drive a running VMM through its API socket, with Cloud
//! Hypervisor's subcommands.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use api::client::{api_request, ClientError, Method};
use api::{BalloonSize, VmResizeData};
use clap::{Parser, Subcommand};
use option_parser::{ByteSized, ByteSizedList};

/// Remotely control a Cloud Hypervisor compatible VMM.
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
    /// Ping the VMM to check for API server availability.
    Ping,
    /// Info on the VM.
    Info,
    /// Counters from the VM.
    Counters,
    /// Balloon sizes per tier (FMem, SMem) and the guest's memory statistics.
    BalloonStats,
    /// Create a VM from a JSON configuration (a file, or `-`/nothing for stdin).
    Create {
        /// Path to the VM configuration JSON, or `-` for stdin.
        #[arg(value_name = "FILE")]
        path: Option<PathBuf>,
    },
    /// Boot a created VM.
    Boot,
    /// Shutdown the VM.
    Shutdown,
    /// Reboot the VM.
    Reboot,
    /// Pause the VM.
    Pause,
    /// Resume the VM.
    Resume,
    /// Trigger a power button in the VM.
    PowerButton,
    /// Delete a VM.
    Delete,
    /// Resize the VM: vCPUs, RAM, or the balloon (per tier).
    Resize {
        /// New vCPUs count.
        #[arg(long, value_name = "N")]
        cpus: Option<u8>,
        /// New memory size in bytes (supports K/M/G suffix).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        memory: Option<u64>,
        /// New balloon size: SIZE (fast tier) or [FMEM,SMEM], K/M/G suffixes.
        #[arg(long, value_name = "SIZE|[FMEM,SMEM]", value_parser = parse_balloon)]
        balloon: Option<BalloonSize>,
    },
    /// Shutdown the VMM.
    ShutdownVmm,
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

fn read_config(path: Option<&Path>) -> Result<Vec<u8>, Error> {
    match path {
        None => read_stdin(),
        Some(p) if p == Path::new("-") => read_stdin(),
        Some(p) => std::fs::read(p).map_err(|e| Error::ReadConfig(p.display().to_string(), e)),
    }
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
    match cli.command {
        Command::Ping => call(s, Method::Get, "vmm.ping", None),
        Command::Info => call(s, Method::Get, "vm.info", None),
        Command::Counters => call(s, Method::Get, "vm.counters", None),
        Command::Create { path } => {
            let body = read_config(path.as_deref())?;
            call(s, Method::Put, "vm.create", Some(&body))
        }
        Command::Boot => call(s, Method::Put, "vm.boot", None),
        Command::Shutdown => call(s, Method::Put, "vm.shutdown", None),
        Command::Reboot => call(s, Method::Put, "vm.reboot", None),
        Command::Pause => call(s, Method::Put, "vm.pause", None),
        Command::Resume => call(s, Method::Put, "vm.resume", None),
        Command::PowerButton => call(s, Method::Put, "vm.power-button", None),
        Command::Delete => call(s, Method::Put, "vm.delete", None),
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
            let body = serde_json::to_vec(&data)?;
            call(s, Method::Put, "vm.resize", Some(&body))
        }
        Command::ShutdownVmm => call(s, Method::Put, "vmm.shutdown", None),
        Command::BalloonStats => call(s, Method::Get, "vm.balloon-stats", None),
    }
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
