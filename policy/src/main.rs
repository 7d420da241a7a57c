//! `tier-policy`: see `tier-policy --help` and docs/policy.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Parser, Subcommand};

use tier_policy::bench::{bench, make_policy_with, BenchMode};
use tier_policy::daemon::config::Config;
use tier_policy::daemon::profile::{sweep, Sweep};
use tier_policy::daemon::vmm::Vmm;
use tier_policy::daemon::{metrics, read_status, Daemon};
use tier_policy::policies::mtat::BUILTIN_MODEL_NAME;
use tier_policy::policies::reserve::ReserveConfig;
use tier_policy::policies::{Mtat, MtatConfig};
use tier_policy::profile::ProfileFile;
use tier_policy::sim::{paper_scenario, LoadTrace, SimConfig, Simulator};
use tier_policy::train::pretrain;

#[derive(Parser)]
#[command(
    name = "tier-policy",
    version,
    about = "Host fast-memory (FMem) policy daemon for co-located tiered-memory VMs (MTAT)",
    long_about = "Divides a host's FMem among VMs and enforces the split through each VMM's double balloon \
                  (vm.resize). Policies: static (equal split), hotness (by access rate), mtat (SAC sizing \
                  for latency-critical VMs, simulated annealing for best-effort VMs). See docs/policy.md."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the daemon against the VMMs of a configuration file.
    Run {
        /// TOML configuration (docs/policy.md).
        #[arg(long, short)]
        config: PathBuf,
        /// Override the configured policy (static, hotness, mtat).
        #[arg(long)]
        policy: Option<String>,
        /// Stop after this many intervals (default: until SIGTERM/SIGINT).
        #[arg(long)]
        cycles: Option<u64>,
    },
    /// Show the running daemon's status (from its state directory).
    Status {
        /// The daemon's configuration (to find its state directory).
        #[arg(long, short, conflicts_with = "state_dir")]
        config: Option<PathBuf>,
        /// The state directory directly.
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Simulate one policy on the paper's host and print a JSON summary.
    Sim {
        /// static, hotness or mtat.
        #[arg(long, default_value = "mtat")]
        policy: String,
        /// `fig7`, or a constant LC load such as `0.5`.
        #[arg(long, default_value = "fig7")]
        trace: String,
        /// Simulated seconds.
        #[arg(long, default_value_t = 540)]
        seconds: u64,
        /// SAC model for mtat.
        #[arg(long)]
        model: Option<PathBuf>,
        /// Decide only every interval, never early on an SLO violation.
        #[arg(long)]
        interval_only: bool,
        /// mtat without the rise reserve (the learned controller alone).
        #[arg(long)]
        no_rise_reserve: bool,
    },
    /// Compare every policy in simulation (one JSON line; scripts/bench.sh mtat).
    Bench {
        /// SAC model for mtat.
        #[arg(long)]
        model: Option<PathBuf>,
        /// Exit non-zero if a hard invariant fails (budget, slices, SLO at
        /// constant loads, SA against brute force, calibration, budget at
        /// scale); runs only what the invariants need unless --full.
        #[arg(long)]
        check: bool,
        /// With --check: run the whole benchmark, not only the asserted runs.
        #[arg(long, requires = "check")]
        full: bool,
    },
    /// Pretrain the LC agent in the simulator and save the model.
    Train {
        /// Where to write the model (safetensors).
        #[arg(long)]
        out: PathBuf,
        /// Simulated episodes (the defaults made the shipped model).
        #[arg(long, default_value_t = 1200)]
        episodes: usize,
        /// Seconds per episode.
        #[arg(long, default_value_t = 300)]
        seconds: u64,
        /// RNG seed.
        #[arg(long, default_value_t = 5)]
        seed: u64,
    },
    /// Build a BE VM's throughput profile by sweeping its FMem balloon.
    Profile {
        /// The VMM's API socket.
        #[arg(long)]
        socket: PathBuf,
        /// File the workload rewrites with `<ops_per_s> [<unix_time>]`.
        #[arg(long)]
        throughput_file: PathBuf,
        /// Points after the first (FMem 0, tier/steps, …, tier).
        #[arg(long, default_value_t = 8)]
        steps: u64,
        /// Seconds to measure at each point.
        #[arg(long, default_value_t = 10.0)]
        settle_s: f64,
        /// Where to write the profile (JSON).
        #[arg(long)]
        out: PathBuf,
    },
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

fn run_daemon(config: PathBuf, policy: Option<String>, cycles: Option<u64>) -> Result<(), String> {
    let mut cfg = Config::load(&config).map_err(|e| e.to_string())?;
    if let Some(p) = policy {
        cfg.policy = p;
    }
    let model = cfg.model.clone();
    let mtat_cfg = MtatConfig {
        unit_bytes: cfg.unit_bytes,
        rise_reserve: (cfg.rise_reserve_s > 0.0).then(|| ReserveConfig {
            hold_s: cfg.rise_reserve_s,
            ..Default::default()
        }),
        ..Default::default()
    };
    let policy = if cfg.policy == "mtat" && model.is_none() {
        log::info!("mtat without host.model: the LC agent is the {BUILTIN_MODEL_NAME}");
        let mtat = Mtat::builtin(mtat_cfg).map_err(|e| e.to_string())?;
        Box::new(mtat)
    } else {
        make_policy_with(&cfg.policy, model.as_deref(), mtat_cfg)?
    };
    let listen = cfg.metrics_listen.clone();
    let interval = cfg.interval_s;
    install_signal_handlers();
    let mut d = Daemon::new(cfg, policy, &STOP)?;
    if let Some(addr) = listen {
        metrics::serve(&addr, d.status())?;
        log::info!("metrics on http://{addr}/metrics");
    }
    match cycles {
        Some(n) => {
            for i in 0..n {
                if STOP.load(Ordering::Relaxed) {
                    break;
                }
                d.cycle();
                if i + 1 < n {
                    std::thread::sleep(Duration::from_secs_f64(interval));
                }
            }
        }
        None => d.run(),
    }
    Ok(())
}

fn status(
    config: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    as_json: bool,
) -> Result<(), String> {
    let dir = match (config, state_dir) {
        (_, Some(d)) => d,
        (Some(c), None) => Config::load(&c).map_err(|e| e.to_string())?.state_dir,
        (None, None) => return Err("give --config or --state-dir".into()),
    };
    let s = read_status(&dir)?;
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    println!(
        "policy {}  budget {:.2} GiB  held {:.2} GiB  decisions {}  errors {}  replans {}  dropped {}  cpu {:.2} s",
        s.policy, gib(s.budget_bytes), gib(s.committed_bytes), s.decisions, s.decision_errors, s.replans, s.vms_dropped, s.cpu_seconds
    );
    println!(
        "{:<16} {:>5} {:>10} {:>10} {:>9} {:>8} {:>10} {:>8}",
        "VM", "class", "FMem GiB", "target", "p99 ms", "SLO ms", "violations", "access"
    );
    for (n, v) in &s.vms {
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "{:<16} {:>5} {:>10.2} {:>10.2} {:>9} {:>8} {:>10} {:>8}",
            n,
            v.class,
            gib(v.share_bytes),
            gib(v.target_bytes),
            opt(v.p99_ms),
            opt(v.slo_ms),
            v.slo_violations,
            v.access_source
        );
    }
    Ok(())
}

fn sim(
    policy: &str,
    trace: &str,
    seconds: u64,
    model: Option<PathBuf>,
    interval_only: bool,
    no_rise_reserve: bool,
) -> Result<(), String> {
    let trace = match trace {
        "fig7" => LoadTrace::Fig7 { step_s: 20 },
        x => LoadTrace::Constant(
            x.parse::<f64>()
                .ok()
                .filter(|l| l.is_finite() && *l >= 0.0)
                .ok_or_else(|| format!("--trace: expected fig7 or a load >= 0, got {x:?}"))?,
        ),
    };
    let mtat_cfg = MtatConfig {
        unit_bytes: 1 << 30,
        rise_reserve: (!no_rise_reserve).then(ReserveConfig::default),
        ..Default::default()
    };
    let mut p = make_policy_with(policy, model.as_deref(), mtat_cfg)?;
    let cfg = SimConfig {
        react_to_violations: !interval_only,
        ..Default::default()
    };
    let mut s = Simulator::new(cfg, paper_scenario(trace)).map_err(|e| e.to_string())?;
    let r = s.run(Some(p.as_mut()), seconds);
    let out = serde_json::json!({
        "policy": policy, "seconds": seconds, "slo_violation_rate": r.violation_rate(),
        "decisions": r.decisions, "early_decisions": r.early_decisions,
        "be_fairness_min_np": r.be_fairness, "be_throughput": r.be_throughput,
        "max_total_units": r.max_total_units, "max_slice_units": r.max_slice_units,
        "lc_share_units": r.lc_share, "lc_load": r.lc_load, "lc_p99_ms": r.lc_p99_ms,
    });
    println!("{out}");
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let r: Result<(), String> = match cli.cmd {
        Cmd::Run {
            config,
            policy,
            cycles,
        } => run_daemon(config, policy, cycles),
        Cmd::Status {
            config,
            state_dir,
            json,
        } => status(config, state_dir, json),
        Cmd::Sim {
            policy,
            trace,
            seconds,
            model,
            interval_only,
            no_rise_reserve,
        } => sim(
            &policy,
            &trace,
            seconds,
            model,
            interval_only,
            no_rise_reserve,
        ),
        Cmd::Bench { model, check, full } => {
            let mode = if check && !full {
                BenchMode::Check
            } else {
                BenchMode::Full
            };
            bench(model.as_deref(), mode).and_then(|v| {
                println!("{v}");
                let bad = if check {
                    tier_policy::bench::check(&v)
                } else {
                    Vec::new()
                };
                if bad.is_empty() {
                    Ok(())
                } else {
                    Err(format!("benchmark invariants failed: {}", bad.join("; ")))
                }
            })
        }
        Cmd::Train {
            out,
            episodes,
            seconds,
            seed,
        } => (|| {
            let t0 = std::time::Instant::now();
            let policy = pretrain(episodes, seconds, seed, |r| {
                if r.episode % 25 == 0 {
                    log::info!(
                        "episode {}: violation rate {:.3}, mean LC share {:.1} units",
                        r.episode,
                        r.violation_rate,
                        r.mean_lc_share
                    );
                }
            })
            .map_err(|e| e.to_string())?;
            policy.agent().save(&out).map_err(|e| e.to_string())?;
            log::info!(
                "trained {} rounds in {:.1} s, saved {}",
                policy.agent().trained_rounds(),
                t0.elapsed().as_secs_f64(),
                out.display()
            );
            Ok(())
        })(),
        Cmd::Profile {
            socket,
            throughput_file,
            steps,
            settle_s,
            out,
        } => (|| {
            if !(settle_s.is_finite() && settle_s > 0.0) {
                return Err("--settle-s must be positive".to_string());
            }
            let s = Sweep {
                steps,
                settle: Duration::from_secs_f64(settle_s),
                timeout: Duration::from_secs(120),
            };
            let (profile, flattened) = sweep(&Vmm::new(&socket), &throughput_file, &s)?;
            if flattened > 0 {
                log::warn!("{flattened} measured dips flattened to keep the profile monotone");
            }
            let text = serde_json::to_string_pretty(&ProfileFile::from(profile))
                .map_err(|e| e.to_string())?;
            std::fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))
        })(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tier-policy: {e}");
            ExitCode::FAILURE
        }
    }
}
