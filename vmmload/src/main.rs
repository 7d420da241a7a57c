//! vmmload: run one unmodified x86-64 Linux program in a minimal KVM guest
//! (no guest OS), relay its system calls to the host, and profile its page
//! accesses with KVM dirty logging and page-table accessed bits.

mod elf;
mod fastcalls;
mod fds;
mod forkexec;
mod forkreport;
mod futex;
mod group;
mod heatmap;
mod kvmpaging;
mod loader;
mod machine;
mod memslots;
mod messages;
mod mm;
mod process;
mod profile;
mod ram;
mod readcache;
mod relay;
mod report;
mod selfexe;
mod session;
mod shm;
mod signals;
mod stats;
mod sys;
mod tracking;

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use kvm_bindings::kvm_regs;

use process::{ProcOptions, Process, VcpuStart};
use stats::StatsConfig;
use tracking::ReadRequest;

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "vmmload",
    about = "Run one x86-64 Linux program in a minimal VM and profile its page accesses",
    trailing_var_arg = true
)]
struct Cli {
    /// Dirty-ring entries per vCPU (power of two, >= 256; 0 turns tracking off).
    /// The default is KVM's maximum: every ring-full exit re-protects the
    /// harvested pages, so a small ring makes a program that rewrites more
    /// pages per interval than the ring holds fault on them again and again.
    #[arg(long, default_value_t = 65536)]
    ring_entries: u32,
    /// Read tracking (auto picks by backend).
    #[arg(long, value_enum, default_value_t = ReadRequest::Auto)]
    reads: ReadRequest,
    /// Sampling interval in milliseconds.
    #[arg(long, default_value_t = 250)]
    interval_ms: u64,
    /// A page untouched this long counts as cold.
    #[arg(long, default_value_t = 2000)]
    cold_after_ms: u64,
    /// Weight of the newest interval in the moving average.
    #[arg(long, default_value_t = 0.5)]
    ema_alpha: f64,
    /// Moving average at or above which a page is hot.
    #[arg(long, default_value_t = 0.5)]
    hot_threshold: f64,
    /// Do not serve sequential file reads from the in-guest read cache
    /// (PVM backend; see docs/vmmload.md).
    #[arg(long)]
    no_read_cache: bool,
    /// Do not answer time and identity calls inside the guest (PVM backend).
    #[arg(long)]
    no_fast_calls: bool,
    /// Guest RAM size in MiB (default: host RAM plus swap; only what the
    /// program touches is backed).
    #[arg(long)]
    mem_mib: Option<u64>,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Write the CSV time series here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write the heat-map PNG here.
    #[arg(long)]
    heatmap: Option<PathBuf>,
    /// Kill the program and everything it started after this many seconds
    /// (exit status 124).
    #[arg(long)]
    timeout: Option<f64>,
    /// At --timeout or a termination signal, SIGKILL what is still running
    /// this many seconds after the first signal.
    #[arg(long, default_value_t = 2.0)]
    kill_after: f64,
    /// Stay in the caller's process group (a program may then read the
    /// terminal, but its forked children are not ended at --timeout).
    #[arg(long)]
    foreground: bool,
    /// Print nothing a native run would not (no summary, no warnings;
    /// see --log).
    #[arg(long, short)]
    quiet: bool,
    /// Append vmmload's own messages (warnings, notices) to this file.
    #[arg(long)]
    log: Option<PathBuf>,
    /// More output (-v: backend and strategies, -vv: debug).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// argv[0] for the program (used when the program exec'ed another one).
    #[arg(long, hide = true)]
    argv0: Option<String>,
    /// Set by the program's execve: this process already runs the program.
    #[arg(long, hide = true)]
    exec_continued: bool,
    /// No summary table (a forked child's exec), warnings as usual.
    #[arg(long, hide = true)]
    no_summary: bool,
    /// The program and its arguments.
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
    command: Vec<String>,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = messages::init(cli.verbose, cli.quiet, cli.log.as_deref()) {
        let log = cli
            .log
            .as_deref()
            .unwrap_or(std::path::Path::new(""))
            .display();
        eprintln!("vmmload: --log {log}: {e}");
        std::process::exit(2);
    }
    let code = run(cli);
    std::process::exit(code);
}

fn validate(cli: &Cli) -> Result<(), String> {
    if cli.interval_ms == 0 || cli.interval_ms > 3_600_000 {
        return Err("--interval-ms must be between 1 and 3600000".into());
    }
    if !(cli.ema_alpha > 0.0 && cli.ema_alpha <= 1.0) {
        return Err("--ema-alpha must be in (0, 1]".into());
    }
    if cli.mem_mib.is_some_and(|m| !(16..=1 << 24).contains(&m)) {
        return Err("--mem-mib must be between 16 and 16777216".into());
    }
    if cli.timeout.is_some_and(|t| !(t > 0.0 && t.is_finite())) {
        return Err("--timeout must be a positive number of seconds".into());
    }
    if !(cli.kill_after >= 0.0 && cli.kill_after <= 3600.0) {
        return Err("--kill-after must be between 0 and 3600 seconds".into());
    }
    Ok(())
}

/// The options a program started by the guest's execve runs with.
fn reexec_args(cli: &Cli) -> Vec<String> {
    let mut v = vec![
        format!("--ring-entries={}", cli.ring_entries),
        format!("--interval-ms={}", cli.interval_ms),
        format!("--cold-after-ms={}", cli.cold_after_ms),
        format!("--ema-alpha={}", cli.ema_alpha),
        format!("--hot-threshold={}", cli.hot_threshold),
        format!("--mem-mib={}", mem_bytes(cli) >> 20),
        format!("--kill-after={}", cli.kill_after),
    ];
    let reads = match cli.reads {
        ReadRequest::Auto => "auto",
        ReadRequest::Off => "off",
        ReadRequest::MemslotCycle => "memslot-cycle",
        ReadRequest::HostRemap => "host-remap",
        ReadRequest::FlushTlb => "flush-tlb",
    };
    v.push(format!("--reads={reads}"));
    for (flag, on) in [
        ("--no-read-cache", cli.no_read_cache),
        ("--no-fast-calls", cli.no_fast_calls),
        ("--quiet", cli.quiet),
        ("--foreground", cli.foreground),
    ] {
        if on {
            v.push(flag.into());
        }
    }
    for _ in 0..cli.verbose {
        v.push("-v".into());
    }
    for (flag, path) in [
        ("--report", &cli.report),
        ("--csv", &cli.csv),
        ("--heatmap", &cli.heatmap),
        ("--log", &cli.log),
    ] {
        if let Some(p) = path {
            let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
            v.push(format!("{flag}={}", abs.display()));
        }
    }
    v
}

/// Guest RAM size in bytes.
fn mem_bytes(cli: &Cli) -> u64 {
    cli.mem_mib.map_or_else(ram::host_default_size, |m| m << 20)
}

fn run(cli: Cli) -> i32 {
    let started = Instant::now();
    if let Err(e) = validate(&cli) {
        eprintln!("vmmload: {e}");
        return 2;
    }
    if !cli.foreground && !cli.exec_continued {
        // Fails only for a session leader, which leads its group already.
        if let Err(e) = group::lead() {
            log::debug!("setpgid: {e}");
        }
    }
    // SAFETY: getpgrp and getpid have no preconditions.
    let leads_group = !cli.foreground && unsafe { libc::getpgrp() == libc::getpid() };
    let path = match loader::resolve(&cli.command[0]) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("vmmload: {e}");
            return e.exit_code();
        }
    };
    let exe = std::fs::canonicalize(&path)
        .unwrap_or_else(|_| path.clone())
        .display()
        .to_string();
    let cfg = StatsConfig {
        interval_ms: cli.interval_ms,
        cold_after_ms: cli.cold_after_ms,
        ema_alpha: cli.ema_alpha,
        hot_threshold: cli.hot_threshold,
    };
    let opts = ProcOptions {
        mem: mem_bytes(&cli),
        ring_entries: cli.ring_entries,
        reads: cli.reads,
        read_cache: !cli.no_read_cache,
        fast_calls: !cli.no_fast_calls,
        stats: cfg,
        reexec: reexec_args(&cli),
        session: session::Session {
            command: cli.command.clone(),
            interval_ms: cli.interval_ms,
            deadline: cli
                .timeout
                .map(|t| started + std::time::Duration::from_secs_f64(t)),
            leads_group,
            kill_after: std::time::Duration::from_secs_f64(cli.kill_after),
            quiet: cli.quiet || cli.no_summary,
            report: cli.report.clone(),
            csv: cli.csv.clone(),
            heatmap: cli.heatmap.clone(),
        },
    };
    process::init_signals();
    let (tx, rx) = mpsc::channel();
    let p = match Process::new(opts, exe, tx) {
        Ok(p) => Arc::new(p),
        Err(e) => {
            eprintln!("vmmload: {e}");
            return 125;
        }
    };
    let envp: Vec<String> = std::env::vars_os()
        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
        .collect();
    let loaded = {
        let mut mm = p.mm.lock().expect("mm lock");
        let mut argv = cli.command.clone();
        if let Some(a0) = &cli.argv0 {
            argv[0] = a0.clone();
        }
        match loader::load(&mut mm, &path, &argv, &envp) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("vmmload: {e}");
                return e.exit_code();
            }
        }
    };
    if let Ok(real) = std::fs::canonicalize(&loaded.path) {
        *p.exe.lock().expect("exe lock") = real.display().to_string();
    }
    log::info!(
        "loaded {} (interpreter: {}), entry {:#x}",
        loaded.path.display(),
        loaded.interp.as_deref().unwrap_or("none"),
        loaded.entry
    );
    let start = VcpuStart {
        regs: kvm_regs {
            rip: loaded.entry,
            rsp: loaded.rsp,
            rflags: 0x202,
            ..Default::default()
        },
        fs_base: 0,
        gs_base: 0,
    };
    let vcpu = match p.create_vcpu(&start) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("vmmload: {e}");
            return 125;
        }
    };
    let t0 = Instant::now();
    let (rtx, _rrx) = mpsc::channel();
    p.spawn(vcpu, sys::ThreadSetup::default(), rtx);
    session::supervise(p, rx, t0)
}
