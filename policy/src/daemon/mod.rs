//! The host daemon: discover VMMs, poll them, decide once per interval,
//! enforce with `vm.resize` slice by slice (donors first, waiting for the
//! guest's `actual` before the next step), log every decision as a JSON
//! line, and publish `/metrics`.

pub mod config;
pub mod metrics;
pub mod profile;
pub mod react;
pub mod signals;
pub mod stall;
pub mod vmm;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::enforce::{plan, VmMove};
use crate::model::{HostView, VmClass, VmObservation, VmSpec, VmView};
use crate::policies::{decide_checked, Policy};
use crate::sim::thread_cpu_s;
use config::{Config, VmConfig};
use metrics::{SharedStatus, VmStatus};
use react::WindowClock;
use signals::{read_latency_sample, AccessCounters};
use stall::ReleaseFloors;
use vmm::{Vmm, VmmSample};

/// How often a slice's progress is polled: the API has no completion
/// event for a balloon reaching its target, so this is a bounded poll.
const RESIZE_POLL: Duration = Duration::from_millis(100);

/// How often LC latency sources are read between decisions
/// (`react_to_violations`).
const REACT_POLL: Duration = Duration::from_secs(1);

struct Tracked {
    cfg: VmConfig,
    vmm: Vmm,
    fmem_tier: u64,
    counters: AccessCounters,
    sample: Option<VmmSample>,
    violations: u64,
    last_target: u64,
}

/// The daemon.
pub struct Daemon {
    cfg: Config,
    policy: Box<dyn Policy>,
    vms: BTreeMap<String, Tracked>,
    log: File,
    status: SharedStatus,
    move_rate: f64,
    cycles: u64,
    stop: &'static AtomicBool,
    /// FMem still held by VMMs that stopped answering, bytes.
    reserved: BTreeMap<String, u64>,
    /// Donors whose guest could not free FMem lately.
    floors: ReleaseFloors,
    /// When the last decision's plan ended (applied, abandoned or
    /// refused), unix seconds.
    plan_done: f64,
    /// Each LC VM's latency windows.
    clocks: BTreeMap<String, WindowClock>,
}

/// How a wait for balloons to reach their targets ended.
#[derive(Debug, PartialEq)]
enum Wait {
    /// Every balloon's actual equals its target.
    Reached,
    /// These VMs' balloons stood still short of their targets for
    /// `stall_s` (their guests cannot free or take FMem now).
    Stalled(Vec<String>),
    /// `resize_timeout_s` passed with balloons still moving.
    TimedOut,
    /// The daemon is stopping.
    Stopped,
    /// A VMM did not answer or went away.
    Failed,
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Daemon {
    /// Opens the decision log in `state_dir` and prepares the status.
    pub fn new(
        cfg: Config,
        policy: Box<dyn Policy>,
        stop: &'static AtomicBool,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(&cfg.state_dir)
            .map_err(|e| format!("{}: {e}", cfg.state_dir.display()))?;
        let log_path = cfg.state_dir.join("decisions.jsonl");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        let status = SharedStatus::default();
        if let Ok(mut s) = status.lock() {
            s.policy = policy.name().into();
            s.budget_bytes = cfg.budget_bytes;
            s.move_rate = cfg.move_rate;
        }
        Ok(Self {
            move_rate: cfg.move_rate,
            cfg,
            policy,
            vms: BTreeMap::new(),
            log,
            status,
            cycles: 0,
            stop,
            reserved: BTreeMap::new(),
            floors: ReleaseFloors::default(),
            plan_done: 0.0,
            clocks: BTreeMap::new(),
        })
    }

    /// The shared status (for `/metrics`).
    pub fn status(&self) -> SharedStatus {
        self.status.clone()
    }

    fn with_status(&self, f: impl FnOnce(&mut metrics::Status)) {
        match self.status.lock() {
            Ok(mut s) => f(&mut s),
            Err(e) => f(&mut e.into_inner()),
        }
    }

    /// Sockets to watch: configured VMs, and every `*.sock` in the socket
    /// directory (unconfigured ones are best-effort VMs named by file stem).
    fn candidates(&self) -> Vec<(VmConfig, PathBuf)> {
        let mut out: Vec<(VmConfig, PathBuf)> = Vec::new();
        for v in &self.cfg.vms {
            let sock = v.socket.clone().or_else(|| {
                self.cfg
                    .socket_dir
                    .as_ref()
                    .map(|d| d.join(format!("{}.sock", v.name)))
            });
            if let Some(s) = sock {
                out.push((v.clone(), s));
            }
        }
        if let Some(dir) = &self.cfg.socket_dir {
            if let Ok(rd) = std::fs::read_dir(dir) {
                let mut found: Vec<PathBuf> = rd
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                    .collect();
                found.sort();
                for p in found {
                    let Some(stem) = p.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
                        continue;
                    };
                    if out.iter().any(|(c, s)| c.name == stem || *s == p) {
                        continue;
                    }
                    out.push((
                        VmConfig {
                            name: stem,
                            socket: None,
                            slo_ms: None,
                            latency: None,
                            min_bytes: 0,
                            profile: None,
                            access_scale: None,
                        },
                        p,
                    ));
                }
            }
        }
        out
    }

    /// Finds VMMs, samples each; drops the ones that fail (they come back
    /// through discovery when their VMM answers again).
    fn refresh(&mut self) {
        let cands = self.candidates();
        let names: Vec<String> = cands.iter().map(|c| c.0.name.clone()).collect();
        let gone: Vec<String> = self
            .vms
            .keys()
            .filter(|k| !names.contains(k))
            .cloned()
            .collect();
        self.reserved.retain(|k, _| names.contains(k));
        for g in gone {
            log::warn!("{g}: socket gone, VM dropped");
            self.vms.remove(&g);
            self.floors.forget(&g);
            self.with_status(|s| {
                s.vms_dropped += 1;
                s.vms.remove(&g);
            });
        }
        for (cfg, sock) in cands {
            let vmm = Vmm::new(&sock);
            let r = vmm
                .fmem_tier()
                .and_then(|tier| vmm.sample(tier).map(|s| (tier, s)));
            match r {
                Ok((tier, sample)) => {
                    let t = self.vms.entry(cfg.name.clone()).or_insert_with(|| {
                        log::info!("{}: tracking VMM at {}", cfg.name, sock.display());
                        Tracked {
                            cfg: cfg.clone(),
                            vmm,
                            fmem_tier: tier,
                            counters: AccessCounters::default(),
                            sample: None,
                            violations: 0,
                            last_target: sample.target_share_bytes(),
                        }
                    });
                    t.fmem_tier = tier;
                    t.sample = Some(sample);
                    self.reserved.remove(&cfg.name);
                }
                Err(e) => {
                    self.floors.forget(&cfg.name);
                    if let Some(tr) = self.vms.remove(&cfg.name) {
                        // A VMM that fails while its socket is still there may
                        // still hold its FMem: keep that reserved until it
                        // answers again or its socket goes away.
                        let held = tr.sample.as_ref().map_or(tr.fmem_tier, |s| s.share_bytes());
                        if sock.exists() {
                            self.reserved.insert(cfg.name.clone(), held);
                        }
                        log::warn!("{}: {e}; VM dropped until its VMM answers again ({} bytes of FMem kept reserved)", cfg.name, self.reserved.get(&cfg.name).copied().unwrap_or(0));
                        self.with_status(|s| {
                            s.vms_dropped += 1;
                            s.vms.remove(&cfg.name);
                        });
                    } else {
                        log::debug!("{}: not reachable: {e}", cfg.name);
                    }
                    if !sock.exists() {
                        self.reserved.remove(&cfg.name);
                    }
                }
            }
        }
    }

    /// Observations for the policy; updates per-VM counters and status.
    fn observe(&mut self) -> Vec<VmView> {
        let t = now_s();
        let max_age = 2.0 * self.cfg.interval_s;
        let unit = self.cfg.unit_bytes;
        let mut views = Vec::new();
        let mut latency_errors = 0;
        let mut statuses = BTreeMap::new();
        self.clocks.retain(|k, _| self.vms.contains_key(k));
        for (name, tr) in &mut self.vms {
            let Some(sample) = &tr.sample else { continue };
            let stats = &sample.stats;
            let share = sample.share_bytes();
            let guest = tr.counters.update(t, &stats.stats);
            let tiers = &stats.tiers;
            let used = |i: usize| tiers.get(i).and_then(|x| x.guest_used);
            let usage_ratio = match (used(0), used(1)) {
                (Some(f), Some(s)) if f + s > 0 => Some(f as f64 / (f + s) as f64),
                _ => None,
            };
            let (access_rate, access_ratio, source) = match guest {
                Some(g) => (Some(g.rate), g.fmem_ratio, "guest"),
                // No agent tags: the balloon's own figure, memory in use.
                None => (
                    (used(0).zip(used(1))).map(|(f, s)| (f + s) as f64),
                    None,
                    "balloon",
                ),
            };
            let p99 = match (&tr.cfg.latency, tr.cfg.slo_ms) {
                (Some(src), Some(_)) => match read_latency_sample(src, max_age) {
                    Ok(v) => {
                        if let Some(end) = v.window_end {
                            self.clocks.entry(name.clone()).or_default().saw(end);
                        }
                        Some(v.p99_ms)
                    }
                    Err(e) => {
                        log::warn!("{name}: {e}; counted as an SLO violation");
                        latency_errors += 1;
                        None
                    }
                },
                _ => None,
            };
            if let Some(slo) = tr.cfg.slo_ms {
                if p99.is_none_or(|p| p > slo) {
                    tr.violations += 1;
                }
            }
            let class = match tr.cfg.slo_ms {
                Some(slo_ms) => VmClass::LatencyCritical { slo_ms },
                None => VmClass::BestEffort,
            };
            statuses.insert(
                name.clone(),
                VmStatus {
                    class: if class.is_lc() { "lc" } else { "be" }.into(),
                    share_bytes: share,
                    target_bytes: tr.last_target,
                    p99_ms: p99,
                    slo_ms: tr.cfg.slo_ms,
                    slo_violations: tr.violations,
                    access_source: source.into(),
                    access_rate,
                    counter_resets: tr.counters.resets,
                },
            );
            views.push(VmView {
                spec: VmSpec {
                    name: name.clone(),
                    class,
                    min_units: tr.cfg.min_bytes.div_ceil(unit).min(tr.fmem_tier / unit),
                    max_units: tr.fmem_tier / unit,
                    profile: tr.cfg.profile.clone(),
                    access_scale: tr.cfg.access_scale,
                },
                obs: VmObservation {
                    // Rounded up: a VM whose balloon stopped between two
                    // units holds part of the upper one, and a plan that
                    // saw it at the lower one would never ask it to shrink
                    // and find every growth refused by the budget.
                    share_units: share.div_ceil(unit),
                    p99_ms: p99,
                    fmem_usage_ratio: usage_ratio,
                    fmem_access_ratio: access_ratio,
                    access_rate,
                },
            });
        }
        let committed: u64 = self
            .vms
            .values()
            .filter_map(|t| t.sample.as_ref())
            .map(|s| s.share_bytes())
            .sum();
        self.with_status(|s| {
            s.latency_errors += latency_errors;
            s.vms = statuses;
            s.committed_bytes = committed;
        });
        views
    }

    /// One interval: refresh, observe, decide, enforce, log.
    pub fn cycle(&mut self) {
        self.cycle_for(None);
    }

    /// A cycle; `early` names the LC VM whose violation brought it forward.
    fn cycle_for(&mut self, early: Option<&str>) {
        self.decide_and_enforce(early);
        self.plan_done = now_s();
    }

    /// An LC VM with a latency window over its SLO that began after the
    /// last plan ended (`daemon::react`); unreadable or stale sources are
    /// left to the next decision, which counts them as violations.
    fn violation_to_react(&mut self) -> Option<String> {
        let cpu0 = thread_cpu_s();
        let found = self.find_violation();
        let cpu = thread_cpu_s() - cpu0;
        self.with_status(|s| s.cpu_seconds += cpu);
        found
    }

    fn find_violation(&mut self) -> Option<String> {
        let max_age = 2.0 * self.cfg.interval_s;
        for (name, tr) in &self.vms {
            let (Some(src), Some(slo)) = (&tr.cfg.latency, tr.cfg.slo_ms) else {
                continue;
            };
            let Ok(s) = read_latency_sample(src, max_age) else {
                continue;
            };
            let clock = self.clocks.entry(name.clone()).or_default();
            if react::should_react(clock, s.p99_ms, s.window_end, slo, self.plan_done) {
                return Some(name.clone());
            }
        }
        None
    }

    fn decide_and_enforce(&mut self, early: Option<&str>) {
        let cpu0 = thread_cpu_s();
        self.refresh();
        let views = self.observe();
        self.cycles += 1;
        if self.cycles == 1 {
            // The first interval only reads the current shares and counter
            // baselines: a restarted daemon never begins by reshuffling.
            self.write_log(json!({"ts": now_s(), "event": "start", "policy": self.policy.name(),
                "vms": views.iter().map(|v| json!({"name": v.spec.name, "share_units": v.obs.share_units})).collect::<Vec<_>>()}));
            self.with_status(|s| s.cpu_seconds += thread_cpu_s() - cpu0);
            self.write_status();
            return;
        }
        let reserved: u64 = self.reserved.values().sum();
        let budget_bytes = self.cfg.budget_bytes.saturating_sub(reserved);
        let mut views = views;
        let floor_notes = self
            .floors
            .apply(&mut views, budget_bytes / self.cfg.unit_bytes);
        let view = HostView {
            budget_units: budget_bytes / self.cfg.unit_bytes,
            max_step_units: ((self.move_rate * self.cfg.interval_s / 2.0)
                / self.cfg.unit_bytes as f64)
                .floor()
                .max(1.0) as u64,
            vms: views,
            clock_s: now_s(),
        };
        let t0 = Instant::now();
        let decision = decide_checked(self.policy.as_mut(), &view);
        let decide_ms = t0.elapsed().as_secs_f64() * 1e3;
        let mut entry = json!({
            "ts": now_s(),
            "event": "decision",
            "policy": self.policy.name(),
            "unit_bytes": self.cfg.unit_bytes,
            "budget_units": view.budget_units,
            "reserved_bytes": reserved,
            "max_step_units": view.max_step_units,
            "decide_ms": decide_ms,
            "early": early,
            "vms": view.vms.iter().map(|v| json!({
                "name": v.spec.name, "lc": v.spec.class.is_lc(), "share_units": v.obs.share_units,
                "min_units": v.spec.min_units, "max_units": v.spec.max_units, "p99_ms": v.obs.p99_ms,
                "fmem_usage_ratio": v.obs.fmem_usage_ratio, "fmem_access_ratio": v.obs.fmem_access_ratio,
                "access_rate": v.obs.access_rate,
            })).collect::<Vec<_>>(),
        });
        let alloc = match decision {
            Ok(a) => a,
            Err(e) => {
                log::error!("decision refused: {e}");
                entry["error"] = json!(e.to_string());
                self.write_log(entry);
                self.with_status(|s| {
                    s.decision_errors += 1;
                    s.cpu_seconds += thread_cpu_s() - cpu0;
                });
                return;
            }
        };
        for n in &alloc.notes {
            log::info!("{n}");
        }
        entry["targets"] = json!(alloc.targets);
        entry["notes"] = json!(floor_notes.iter().chain(&alloc.notes).collect::<Vec<_>>());
        let moves: Vec<VmMove> = view
            .vms
            .iter()
            .map(|v| VmMove {
                vm: v.spec.name.clone(),
                lc: v.spec.class.is_lc(),
                current: v.obs.share_units,
                target: alloc
                    .targets
                    .get(&v.spec.name)
                    .copied()
                    .unwrap_or(v.obs.share_units),
            })
            .collect();
        for (name, t) in &alloc.targets {
            if let Some(tr) = self.vms.get_mut(name) {
                tr.last_target = t * self.cfg.unit_bytes;
            }
        }
        let p_max_units = (self.cfg.p_max_bytes / self.cfg.unit_bytes).max(1);
        let slices = match plan(&moves, view.budget_units, p_max_units) {
            Ok(s) => s,
            Err(e) => {
                log::error!("cannot plan: {e}");
                entry["error"] = json!(e.to_string());
                self.write_log(entry);
                self.with_status(|s| s.decision_errors += 1);
                return;
            }
        };
        let (log_slices, outcome) = self.enforce(&slices);
        entry["slices"] = json!(log_slices);
        entry["outcome"] = json!(outcome);
        self.write_log(entry);
        let cpu = thread_cpu_s() - cpu0;
        let rate = self.move_rate;
        self.with_status(|s| {
            s.decisions += 1;
            s.early_decisions += u64::from(early.is_some());
            s.last_decision_ms = decide_ms;
            s.cpu_seconds += cpu;
            s.move_rate = rate;
            if outcome != "done" {
                s.replans += 1;
            }
        });
        self.write_status();
    }

    /// Σ FMem held now by every tracked VM, from fresh samples.
    fn committed(&mut self) -> u64 {
        let mut sum = 0;
        for tr in self.vms.values_mut() {
            if let Ok(s) = tr.vmm.sample(tr.fmem_tier) {
                tr.sample = Some(s);
            }
            sum += tr.sample.as_ref().map_or(tr.fmem_tier, |s| s.share_bytes());
        }
        sum
    }

    /// Waits until every `(vm, share)` is reached (the FMem balloon's
    /// actual equals its target), no balloon short of its target has
    /// moved for `stall_s`, or `resize_timeout_s` passes.
    fn wait_reached(&mut self, wanted: &[(String, u64)]) -> Wait {
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(self.cfg.resize_timeout_s);
        let stall = Duration::from_secs_f64(self.cfg.stall_s);
        let mut last_move = start;
        let mut last_actual: BTreeMap<&str, u64> = BTreeMap::new();
        loop {
            let mut short = Vec::new();
            for (vm, _) in wanted {
                let Some(tr) = self.vms.get_mut(vm) else {
                    return Wait::Failed;
                };
                match tr.vmm.sample(tr.fmem_tier) {
                    Ok(s) => {
                        let (target, actual) = s.fmem_balloon;
                        if target != actual {
                            short.push(vm.clone());
                        }
                        if last_actual.insert(vm, actual).is_some_and(|a| a != actual) {
                            last_move = Instant::now();
                        }
                        tr.sample = Some(s);
                    }
                    Err(_) => return Wait::Failed,
                }
            }
            if short.is_empty() {
                return Wait::Reached;
            }
            if self.stop.load(Ordering::Relaxed) {
                return Wait::Stopped;
            }
            let now = Instant::now();
            if now.duration_since(last_move) >= stall {
                return Wait::Stalled(short);
            }
            if now >= deadline {
                return Wait::TimedOut;
            }
            std::thread::sleep(RESIZE_POLL);
        }
    }

    /// After a shrink stalled: each donor still short of its target is set
    /// to the unit it stopped in (so that its guest stops fighting its
    /// workload for FMem and the share is whole units again) and gets a
    /// release floor there. That unit is at most the share the donor held
    /// before the slice, and the slice's receivers have not grown yet, so
    /// the budget holds; it is checked against fresh samples all the same,
    /// and a donor that would not fit keeps its target. Returns the settle
    /// slice for the log, if any.
    fn settle_stalled(
        &mut self,
        stalled: &[String],
        slice: &[(String, u64)],
    ) -> Option<serde_json::Value> {
        let unit = self.cfg.unit_bytes;
        let mut held_now = self.committed() + self.reserved.values().sum::<u64>();
        let mut settle = Vec::new();
        for (vm, units) in slice.iter().filter(|(vm, _)| stalled.contains(vm)) {
            let Some(s) = self.vms.get(vm).and_then(|t| t.sample.as_ref()) else {
                continue;
            };
            let share = s.share_bytes();
            let held = share.div_ceil(unit);
            log::warn!(
                "{vm}: its guest stopped at {share} of {} bytes of FMem; held at {held} units for the next decisions",
                units * unit
            );
            self.floors.record(vm, held);
            self.with_status(|st| st.stalled_donors += 1);
            let growth = (held * unit).saturating_sub(share);
            if held > *units && held_now + growth <= self.cfg.budget_bytes {
                held_now += growth;
                settle.push((vm.clone(), held));
            }
        }
        if settle.is_empty() {
            return None;
        }
        let t0 = Instant::now();
        let asked = self.resize_all(&settle);
        let reached = asked.is_ok() && self.wait_reached(&settle) == Wait::Reached;
        Some(json!({
            "shrink": [], "grow": settle, "settle": true, "elapsed_s": t0.elapsed().as_secs_f64(),
            "committed_bytes": self.committed() + self.reserved.values().sum::<u64>(), "reached": reached,
        }))
    }

    fn resize_all(&mut self, set: &[(String, u64)]) -> Result<(), String> {
        for (vm, units) in set {
            let tr = self.vms.get(vm).ok_or_else(|| format!("{vm}: gone"))?;
            let smem = tr.sample.as_ref().map_or(0, |s| s.smem_target);
            tr.vmm
                .resize_share(tr.fmem_tier, units * self.cfg.unit_bytes, smem)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Applies the slices; returns the log of each and the outcome.
    fn enforce(&mut self, slices: &[crate::enforce::Slice]) -> (Vec<serde_json::Value>, String) {
        let mut out = Vec::new();
        for (k, sl) in slices.iter().enumerate() {
            let t0 = Instant::now();
            let mut moved = 0u64;
            for (vm, units) in &sl.shrink {
                if let Some(s) = self.vms.get(vm).and_then(|t| t.sample.as_ref()) {
                    moved += s.share_bytes().saturating_sub(units * self.cfg.unit_bytes);
                }
            }
            // A slice that stops half-way is logged too, with what was
            // asked of the VMMs: the log must explain every target they hold.
            let abandoned = |d: &mut Self, out: &mut Vec<serde_json::Value>| {
                out.push(json!({
                    "shrink": sl.shrink, "grow": [], "elapsed_s": t0.elapsed().as_secs_f64(),
                    "committed_bytes": d.committed(), "reached": false,
                }));
            };
            if let Err(e) = self.resize_all(&sl.shrink) {
                abandoned(self, &mut out);
                return (out, format!("replan: slice {k} shrink failed: {e}"));
            }
            let waited = self.wait_reached(&sl.shrink);
            let why = match &waited {
                Wait::Reached => None,
                Wait::Stalled(vms) => Some(format!(
                    "stalled ({} still short after {} s without progress)",
                    vms.join(", "),
                    self.cfg.stall_s
                )),
                Wait::TimedOut => {
                    Some(format!("did not finish in {} s", self.cfg.resize_timeout_s))
                }
                Wait::Stopped => Some("the daemon is stopping".to_string()),
                Wait::Failed => Some("lost a VMM".to_string()),
            };
            if let Some(why) = why {
                abandoned(self, &mut out);
                // Only a stall: a shrink still moving at the timeout is
                // left to finish, and the next interval replans from it.
                if let Wait::Stalled(vms) = &waited {
                    out.extend(self.settle_stalled(vms, &sl.shrink));
                }
                return (out, format!("replan: slice {k} shrink {why}"));
            }
            // Growth from the same fresh samples as the sum: a receiver
            // still giving FMem from an earlier abandoned shrink holds less
            // now than when the decision was made.
            let committed = self.committed() + self.reserved.values().sum::<u64>();
            let growth: u64 = sl
                .grow
                .iter()
                .filter_map(|(vm, u)| {
                    self.vms
                        .get(vm)
                        .and_then(|t| t.sample.as_ref())
                        .map(|s| (u * self.cfg.unit_bytes).saturating_sub(s.share_bytes()))
                })
                .sum();
            if growth > 0 && committed + growth > self.cfg.budget_bytes {
                return (out, format!("replan: slice {k} growth of {growth} bytes would exceed the budget (held {committed})"));
            }
            if let Err(e) = self.resize_all(&sl.grow) {
                out.push(json!({
                    "shrink": sl.shrink, "grow": sl.grow, "elapsed_s": t0.elapsed().as_secs_f64(),
                    "committed_bytes": self.committed(), "reached": false,
                }));
                return (out, format!("replan: slice {k} grow failed: {e}"));
            }
            let sum_after_grow_request = self.committed();
            let grown = self.wait_reached(&sl.grow);
            let reached = grown == Wait::Reached;
            moved += growth;
            let secs = t0.elapsed().as_secs_f64();
            if moved > 0 && secs > 0.05 && reached {
                // Eq. 1's M, measured: bytes moved per second of slice.
                let m = moved as f64 / secs;
                self.move_rate = 0.7 * self.move_rate + 0.3 * m;
            }
            out.push(json!({
                "shrink": sl.shrink, "grow": sl.grow, "elapsed_s": secs,
                "committed_bytes": sum_after_grow_request, "reached": reached,
            }));
            if !reached {
                return (
                    out,
                    format!("replan: slice {k} growth did not finish: {grown:?}"),
                );
            }
        }
        (out, "done".into())
    }

    fn write_log(&mut self, v: serde_json::Value) {
        if let Err(e) = writeln!(self.log, "{v}") {
            log::error!("decision log: {e}");
        }
    }

    fn write_status(&self) {
        let snapshot = self
            .status
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone());
        let path = self.cfg.state_dir.join("status.json");
        let tmp = self.cfg.state_dir.join("status.json.tmp");
        let r = serde_json::to_vec_pretty(&snapshot)
            .map_err(std::io::Error::other)
            .and_then(|b| std::fs::write(&tmp, b))
            .and_then(|_| std::fs::rename(&tmp, &path));
        if let Err(e) = r {
            log::warn!("{}: {e}", path.display());
        }
    }

    /// Runs cycles every interval until `stop` is set; with
    /// `react_to_violations`, an LC VM's violation brings a cycle forward
    /// (`daemon::react`), and the next one is an interval after it. Never
    /// two early cycles in a row: a violation no decision can cure (an LC
    /// VM at its largest share) would otherwise decide every second.
    pub fn run(&mut self) {
        let interval = Duration::from_secs_f64(self.cfg.interval_s);
        let mut early: Option<String> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            self.cycle_for(early.as_deref());
            let may_react = self.cfg.react_to_violations && early.is_none();
            early = None;
            // The interval counts from the cycle's start, as the policy's
            // action bound (eq. 1) assumes; a cycle longer than it is
            // followed at once by the next.
            let next = started + interval;
            let mut next_read = Instant::now() + REACT_POLL;
            // Sleep in short steps so that SIGTERM ends the daemon promptly.
            while Instant::now() < next && !self.stop.load(Ordering::Relaxed) {
                if may_react && Instant::now() >= next_read {
                    next_read += REACT_POLL;
                    early = self.violation_to_react();
                    if early.is_some() {
                        break;
                    }
                }
                let wake = next.min(next_read);
                std::thread::sleep(
                    wake.saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(200)),
                );
            }
        }
    }
}

/// Reads `status.json` from a state directory.
pub fn read_status(state_dir: &Path) -> Result<metrics::Status, String> {
    let p = state_dir.join("status.json");
    let text = std::fs::read_to_string(&p)
        .map_err(|e| format!("{}: {e} (is the daemon running?)", p.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
}
