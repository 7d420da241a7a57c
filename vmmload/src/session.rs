//! Supervising a run: the sampler thread, waiting for the program to end
//! (exit, fatal signal, timeout, a termination signal sent to vmmload),
//! the final sample, the reports and vmmload's own exit status.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::process::{self, Ending, Process};
use crate::{report, sys};

/// How a run is supervised and what it writes.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// Program and arguments (for the report).
    pub command: Vec<String>,
    /// Sampling interval.
    pub interval_ms: u64,
    /// When `--timeout` expires (kept across the program's execve).
    pub deadline: Option<Instant>,
    /// This process leads the program's process group and ends it at a
    /// timeout or a termination signal (see `group.rs`).
    pub leads_group: bool,
    /// Grace period between the first signal and SIGKILL for the group.
    pub kill_after: Duration,
    /// No summary table.
    pub quiet: bool,
    /// JSON report.
    pub report: Option<PathBuf>,
    /// CSV time series.
    pub csv: Option<PathBuf>,
    /// Heat map.
    pub heatmap: Option<PathBuf>,
}

fn start_sampler(p: &Arc<Process>, interval_ms: u64) -> Option<JoinHandle<()>> {
    if !p.tracker.enabled() {
        return None;
    }
    let ps = p.clone();
    let iv = Duration::from_millis(interval_ms);
    let spawned = std::thread::Builder::new()
        .name("sampler".into())
        .spawn(move || {
            let mut next = Instant::now() + iv;
            while !ps.stopping.load(Ordering::SeqCst) {
                let now = Instant::now();
                if now < next {
                    // Woken early (unpark) when the run ends.
                    std::thread::park_timeout(next - now);
                    continue;
                }
                next += iv;
                if !ps.stopping.load(Ordering::SeqCst) {
                    ps.tracker.sample(&ps, false);
                }
            }
        });
    // A process limit (RLIMIT_NPROC counts threads) must not stop the
    // program: it runs on, profiled only at ring-full exits and at its end.
    spawned
        .map_err(|e| log::warn!("cannot start the sampler thread ({e}): no interval sampling"))
        .ok()
}

/// Waits for the end of the run (the first vCPU is already running),
/// writes the reports and returns vmmload's exit status (or dies by the
/// program's fatal signal).
pub fn supervise(p: Arc<Process>, rx: Receiver<Ending>, t0: Instant) -> i32 {
    let s = p.opts.session.clone();
    let sampler = start_sampler(&p, s.interval_ms);
    let deadline = s.deadline;
    let ending = loop {
        // Wake only when there is something to check: a wake-up per 20 ms
        // is a host context switch that can interrupt a running vCPU.
        let mut wait = if crate::signals::host::forwarder_active() {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(20)
        };
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(Instant::now()));
        }
        match rx.recv_timeout(wait) {
            Ok(e) => break e,
            Err(RecvTimeoutError::Disconnected) => {
                break Ending::Error("all threads vanished".into())
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(sig) = process::poll_termination() {
            break Ending::Signal(sig, String::new());
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break Ending::Timeout;
        }
    };
    p.end(ending.clone());
    let elapsed = t0.elapsed();
    end_group(&s, &ending);
    if let Some(h) = sampler {
        h.thread().unpark();
        let _ = h.join();
    }
    p.tracker.sample(&p, true);
    let info = report::RunInfo {
        command: s.command.clone(),
        ending: ending.clone(),
        elapsed,
        backend: p.backend.get().copied(),
        writes: p.tracker.writes.name(),
        reads: p.tracker.reads().name().to_string(),
        ring_full_events: p.tracker.ring_full_events.load(Ordering::Relaxed),
        syscalls: p.counters.syscalls.load(Ordering::Relaxed),
        exits: p.counters.exits.load(Ordering::Relaxed),
        syscall_ns: p.counters.syscall_ns.load(Ordering::Relaxed),
        read_cache: {
            let mm = p.mm.lock().expect("mm lock");
            let mut c = p.cache.lock().expect("cache lock");
            c.settle(&mm);
            (c.refills, c.bytes)
        },
        profile: p.counters.profile.json(),
    };
    log::info!("{}", p.counters.profile.summary());
    {
        let st = p.tracker.stats.lock().expect("stats lock");
        let outputs = report::Outputs {
            json: s.report.as_deref(),
            csv: s.csv.as_deref(),
            png: s.heatmap.as_deref(),
        };
        if let Err(e) = report::write_all(&info, &st, &outputs) {
            eprintln!("vmmload: writing reports: {e}");
        }
        if !s.quiet && p.tracker.enabled() {
            report::summary(&info, &st);
        }
    }
    finish(ending)
}

/// Ends the rest of the program's process group when the run was ended from
/// outside (timeout, termination signal), as coreutils `timeout` does. A
/// program that exits, or dies of its own fault, leaves its children
/// running, as natively.
fn end_group(s: &Session, ending: &Ending) {
    if !s.leads_group {
        return;
    }
    let sig = match ending {
        Ending::Timeout => libc::SIGTERM,
        Ending::Signal(sig, _)
            if [
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGHUP,
                libc::SIGQUIT,
                libc::SIGKILL,
            ]
            .contains(sig) =>
        {
            *sig
        }
        _ => return,
    };
    crate::group::end(sig, s.kill_after);
}

/// Ends vmmload the way the program ended.
pub fn finish(e: Ending) -> i32 {
    match e {
        Ending::Exit(c) => c,
        Ending::Timeout => {
            crate::messages::notice("timeout: program killed");
            124
        }
        Ending::Error(m) => {
            eprintln!("vmmload: {m}");
            125
        }
        Ending::Signal(sig, msg) => {
            if !msg.is_empty() {
                crate::messages::notice(&format!("program killed by {}: {msg}", sys::signame(sig)));
            }
            // Die by the same signal so the parent sees what a native run gives
            // (no core file of vmmload's address space).
            // SAFETY: resetting a handler and raising a signal in our own process.
            unsafe {
                let lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &lim);
                libc::signal(sig, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::raise(sig);
            }
            128 + sig
        }
    }
}
