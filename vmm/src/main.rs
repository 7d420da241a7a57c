//! `cloud-hypervisor`: boots a Linux guest with FMem/SMem memory tiers,
//! with Cloud Hypervisor's command-line syntax.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use vm_config::{
    BalloonConfig, ConsoleConfig, CpusConfig, DiskConfig, MemoryConfig, MemoryZoneConfig,
    NetConfig, NumaConfig, PayloadConfig, PlatformConfig, RngConfig, VmConfig,
};
use vmm::{ExitStatus, Vmm};

#[derive(Parser, Debug)]
#[command(
    name = "cloud-hypervisor",
    version,
    about = "A Cloud-Hypervisor-compatible VMM for tiered memory (FMem/SMem NUMA nodes)",
    long_about = "Boots a Linux guest whose memory tiers appear as NUMA nodes: a fast node with \
the vCPUs (FMem) and memory-only slow nodes (SMem), described to the guest through ACPI \
SRAT/SLIT/HMAT. Each --memory-zone is its own host mapping, bound to a host NUMA node."
)]
struct Cli {
    /// Kernel to boot: a bzImage (as Debian ships it) or an ELF vmlinux.
    #[arg(long, value_name = "PATH")]
    kernel: Option<PathBuf>,
    /// Initramfs image.
    #[arg(long, value_name = "PATH")]
    initramfs: Option<PathBuf>,
    /// Kernel command line.
    #[arg(long, value_name = "STRING")]
    cmdline: Option<String>,
    #[arg(long, help = CpusConfig::SYNTAX, default_value = "boot=1")]
    cpus: String,
    #[arg(long, help = MemoryConfig::SYNTAX, default_value = "size=512M")]
    memory: String,
    #[arg(long = "memory-zone", help = MemoryZoneConfig::SYNTAX, num_args = 1.., action = clap::ArgAction::Append)]
    memory_zone: Vec<String>,
    #[arg(long, help = NumaConfig::SYNTAX, num_args = 1.., action = clap::ArgAction::Append)]
    numa: Vec<String>,
    #[arg(long, help = DiskConfig::SYNTAX, num_args = 1.., action = clap::ArgAction::Append)]
    disk: Vec<String>,
    #[arg(long, help = NetConfig::SYNTAX, num_args = 1.., action = clap::ArgAction::Append)]
    net: Vec<String>,
    #[arg(long, help = RngConfig::SYNTAX, default_value = "src=/dev/urandom")]
    rng: String,
    #[arg(long, help = BalloonConfig::SYNTAX)]
    balloon: Option<String>,
    #[arg(long, help = PlatformConfig::SYNTAX)]
    platform: Option<String>,
    #[arg(long, help = ConsoleConfig::SERIAL_SYNTAX, default_value = "null")]
    serial: String,
    #[arg(long, help = ConsoleConfig::CONSOLE_SYNTAX, default_value = "tty")]
    console: String,
    #[arg(long = "api-socket", help = api::ApiSocket::SYNTAX)]
    api_socket: Option<String>,
    /// Write the log here instead of stderr.
    #[arg(long = "log-file", value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// More log output (-v info, -vv debug, -vvv trace).
    #[arg(short, action = clap::ArgAction::Count)]
    v: u8,
    /// Seccomp filters per thread (on by default, as upstream): true (a
    /// denied syscall ends the VMM with a report naming the thread and the
    /// syscall), false, or log (denied syscalls run and the kernel logs
    /// them).
    #[arg(long, value_name = "true|false|log", default_value = "true")]
    seccomp: String,
    /// Restrict file access, from start, to the paths the command-line
    /// configuration names plus --landlock-rules (without --kernel: /dev/kvm,
    /// /dev/net/tun, /dev/urandom, the API socket's directory and the rules).
    #[arg(long)]
    landlock: bool,
    #[arg(long = "landlock-rules", help = vmm::landlock::RULES_SYNTAX, num_args = 1.., action = clap::ArgAction::Append)]
    landlock_rules: Vec<String>,
    /// Transport of every virtio device (our extension; upstream is
    /// PCI-only): pci (the default: a PCI root bus with ECAM, virtio-pci
    /// functions, MSI-X, hotplug) or mmio (virtio-mmio windows in the
    /// DSDT). See docs/virtio-pci.md.
    #[arg(
        long = "virtio-transport",
        value_name = "pci|mmio",
        default_value = "pci"
    )]
    virtio_transport: vmm::virtio_pci::VirtioTransport,
}

fn build_config(cli: &Cli) -> Result<VmConfig, String> {
    let zones = cli
        .memory_zone
        .iter()
        .map(|z| MemoryZoneConfig::parse(z))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let numa = cli
        .numa
        .iter()
        .map(|n| NumaConfig::parse(n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let disks = cli
        .disk
        .iter()
        .map(|d| DiskConfig::parse(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let net = cli
        .net
        .iter()
        .map(|n| NetConfig::parse(n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if cli.kernel.is_none() && (cli.initramfs.is_some() || cli.cmdline.is_some()) {
        return Err("--initramfs and --cmdline need --kernel".into());
    }
    let config = VmConfig {
        cpus: CpusConfig::parse(&cli.cpus).map_err(|e| e.to_string())?,
        memory: MemoryConfig::parse(&cli.memory, (!zones.is_empty()).then_some(zones))
            .map_err(|e| e.to_string())?,
        payload: cli.kernel.as_ref().map(|k| PayloadConfig {
            kernel: Some(k.clone()),
            initramfs: cli.initramfs.clone(),
            cmdline: cli.cmdline.clone(),
            firmware: None,
        }),
        serial: ConsoleConfig::parse_serial(&cli.serial).map_err(|e| e.to_string())?,
        console: ConsoleConfig::parse_console(&cli.console).map_err(|e| e.to_string())?,
        numa: (!numa.is_empty()).then_some(numa),
        disks: (!disks.is_empty()).then_some(disks),
        net: (!net.is_empty()).then_some(net),
        rng: RngConfig::parse(&cli.rng).map_err(|e| e.to_string())?,
        balloon: cli
            .balloon
            .as_deref()
            .map(BalloonConfig::parse)
            .transpose()
            .map_err(|e| e.to_string())?,
        platform: cli
            .platform
            .as_deref()
            .map(PlatformConfig::parse)
            .transpose()
            .map_err(|e| e.to_string())?
            .unwrap_or_default(),
        ..Default::default()
    };
    config.validate().map_err(|e| e.to_string())?;
    check_payload_files(&config)?;
    Ok(config)
}

/// Reports unreadable payload files before any guest memory is allocated.
fn check_payload_files(config: &VmConfig) -> Result<(), String> {
    let Some(p) = &config.payload else {
        return Ok(());
    };
    for (option, path) in [("--kernel", &p.kernel), ("--initramfs", &p.initramfs)] {
        if let Some(path) = path {
            std::fs::File::open(path)
                .map_err(|e| format!("{option}: cannot read {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Landlock, then the process-wide seccomp ceiling, then the device
/// spawner (which narrows its own filter): in this order because each later
/// thread inherits what is in force when it starts. Runs before any other
/// thread exists; [`narrow_vmm_thread`] follows once the API server runs.
fn confine(
    cli: &Cli,
    config: Option<&VmConfig>,
    api_socket: Option<&api::ApiSocket>,
) -> Result<(), String> {
    use vmm::seccomp::{self, SeccompMode, ThreadKind};
    let mode = SeccompMode::parse(&cli.seccomp)?;
    let extra = cli
        .landlock_rules
        .iter()
        .map(|r| vmm::landlock::parse_rule(r))
        .collect::<Result<Vec<_>, _>>()?;
    if !extra.is_empty() && !cli.landlock {
        return Err("--landlock-rules needs --landlock".into());
    }
    if cli.landlock {
        let socket = match api_socket {
            Some(api::ApiSocket::Path(p)) => Some(p.as_path()),
            _ => None,
        };
        let mut rules = match config {
            Some(c) => vmm::landlock::rules_for(c, socket),
            None => vmm::landlock::rules_without_config(socket),
        };
        rules.extend(extra);
        vmm::landlock::restrict(&rules).map_err(|e| e.to_string())?;
    }
    if mode == SeccompMode::Off {
        return Ok(());
    }
    // glibc gives each thread its own malloc arena; when a thread's arena
    // shrinks after large frees (virtio-net under load), glibc opens
    // /proc/sys/vm/overcommit_memory from that thread (check_may_shrink_heap),
    // which the device filters forbid. One arena (the brk heap) never takes
    // that path; the VMM has a handful of threads, so contention is low.
    // SAFETY: mallopt only changes allocator tuning; no other thread exists yet.
    if unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) } != 1 {
        log::warn!(
            "seccomp: mallopt(M_ARENA_MAX, 1) refused; a thread's heap trim may trip its filter"
        );
    }
    seccomp::set_mode(mode);
    seccomp::install_sigsys_handler().map_err(|e| format!("seccomp: SIGSYS handler: {e}"))?;
    seccomp::enter(ThreadKind::Process).map_err(|e| e.to_string())?;
    devices::sandbox::install(seccomp::device_sandbox_hook())
        .map_err(|e| format!("seccomp: starting the device spawner: {e}"))?;
    Ok(())
}

/// The main thread's own filter, once the threads that need what it does
/// not (the API server: accept, bind) have started.
fn narrow_vmm_thread(cli: &Cli) -> Result<(), String> {
    use vmm::seccomp::{self, SeccompMode, ThreadKind};
    let mode = SeccompMode::parse(&cli.seccomp)?;
    if mode == SeccompMode::Off {
        return Ok(());
    }
    seccomp::enter(ThreadKind::Vmm).map_err(|e| e.to_string())?;
    log::info!("seccomp: a filter per thread kind ({mode:?} on a denied syscall)");
    Ok(())
}

fn init_logging(cli: &Cli) -> Result<(), String> {
    let level = match cli.v {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    let mut builder = env_logger::Builder::new();
    builder.filter_level(level).format_timestamp_millis();
    if let Some(path) = &cli.log_file {
        let file = std::fs::File::create(path)
            .map_err(|e| format!("--log-file: cannot create {}: {e}", path.display()))?;
        builder.target(env_logger::Target::Pipe(Box::new(file)));
    }
    builder.try_init().map_err(|e| e.to_string())
}

/// Starts the HTTP server thread (after the termination signals are
/// blocked, so it inherits the mask).
fn start_api(socket: api::ApiSocket) -> std::io::Result<vmm::ApiEndpoint> {
    let (sender, receiver) = api::channel()?;
    let kill_evt = vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK)?;
    let options = api::ServerOptions {
        confine_thread: Some(vmm::seccomp::enter_api),
        ..Default::default()
    };
    let thread = api::start_http_server_with(socket, sender, kill_evt.try_clone()?, options)?;
    Ok(vmm::ApiEndpoint {
        receiver,
        kill_evt,
        thread,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    vmm::virtio_pci::set_transport(cli.virtio_transport);
    if let Err(e) = init_logging(&cli) {
        eprintln!("cloud-hypervisor: {e}");
        return ExitCode::FAILURE;
    }
    let config = match build_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cloud-hypervisor: {e}");
            return ExitCode::FAILURE;
        }
    };
    if config.payload.is_none() && cli.api_socket.is_none() {
        eprintln!(
            "cloud-hypervisor: nothing to do: give --kernel, or --api-socket to wait for vm.create"
        );
        return ExitCode::FAILURE;
    }
    let api_socket = match cli
        .api_socket
        .as_deref()
        .map(api::ApiSocket::parse)
        .transpose()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cloud-hypervisor: --api-socket: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Without --kernel the VM is created through the API, as Cloud Hypervisor does.
    let config = config.payload.is_some().then_some(config);
    let signals = match vmm::block_termination_signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cloud-hypervisor: cannot set up signal handling: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = vmm::cpu::register_kick_signal() {
        eprintln!("cloud-hypervisor: cannot install the vCPU kick signal: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = confine(&cli, config.as_ref(), api_socket.as_ref()) {
        eprintln!("cloud-hypervisor: {e}");
        return ExitCode::FAILURE;
    }
    let _raw_terminal = config
        .as_ref()
        .is_some_and(|c| {
            use vm_config::ConsoleOutputMode::Tty;
            c.serial.mode == Tty || c.console.mode == Tty
        })
        .then(vmm::console::RawTerminal::enable)
        .flatten();
    let api = match api_socket.map(start_api).transpose() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cloud-hypervisor: --api-socket: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = narrow_vmm_thread(&cli) {
        eprintln!("cloud-hypervisor: {e}");
        return ExitCode::FAILURE;
    }
    let result = Vmm::new(config, signals, api).and_then(Vmm::run);
    drop(_raw_terminal);
    match result {
        Ok(ExitStatus::Clean(why)) => {
            log::info!("{why}");
            ExitCode::SUCCESS
        }
        Ok(ExitStatus::Failed(why)) => {
            eprintln!("cloud-hypervisor: {why}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("cloud-hypervisor: {e}");
            ExitCode::FAILURE
        }
    }
}
