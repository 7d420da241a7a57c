//! `mtat`: SAC sizes each latency-critical VM (§3.2.1), simulated
//! annealing splits the rest among best-effort VMs (§3.2.2).
//!
//! Safety around the learned part:
//! * a missing, stale or non-finite p99 counts as an SLO violation;
//! * after two violations in a row the LC share grows by the largest
//!   allowed step, whatever the actor says (the guard);
//! * a non-finite state or action (NaN/inf from the network or the
//!   signals) switches that decision to the safe controller (grow on a
//!   violation, hold otherwise) and is noted in the decision log.

use std::collections::BTreeMap;
use std::path::Path;

use crate::annealing::{anneal, AnnealParams, BeVm};
use crate::model::{weighted_fill, Allocation, HostView, PolicyError, VmClass, VmView};
use crate::policies::hotness::access_weights;
use crate::policies::reserve::{ReserveConfig, RiseReserve};
use crate::profile::Profile;
use crate::sac::{Sac, SacConfig, SacError, Transition, STATE_DIM};

/// Violations in a row that trigger the guard.
pub const GUARD_VIOLATIONS: u32 = 2;

/// The pretrained LC agent shipped with the crate, built into the binary so
/// that the daemon needs no model file (a host, the testbed's L1).
pub const BUILTIN_MODEL: &[u8] = include_bytes!("../../models/lc-sac.safetensors");
/// How [`BUILTIN_MODEL`] is named in logs and errors.
pub const BUILTIN_MODEL_NAME: &str = "built-in policy/models/lc-sac.safetensors";

/// Configuration of the `mtat` policy.
#[derive(Clone, Debug)]
pub struct MtatConfig {
    /// Bytes per allocation unit (profiles are in bytes).
    pub unit_bytes: u64,
    /// Sample actions (training) instead of the actor's mean.
    pub explore: bool,
    /// Store transitions and train every `sac.train_every` of them.
    pub learn: bool,
    /// SAC hyper-parameters.
    pub sac: SacConfig,
    /// Annealing schedule.
    pub anneal: AnnealParams,
    /// Provision LC VMs ahead of the next step of a rising load
    /// ([`RiseReserve`]); `None`: the learned controller alone.
    pub rise_reserve: Option<ReserveConfig>,
    /// How the FMem left after the LC VMs is split among the BE VMs.
    pub be_split: BeSplit,
}

/// How `mtat` splits the FMem the LC VMs leave among the BE VMs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BeSplit {
    /// Algorithm 2 on the BE VMs' profiles: the paper's MTAT (Full).
    #[default]
    Annealing,
    /// In proportion to each BE VM's access rate, as `hotness` splits
    /// the whole budget: the paper's MTAT (LC Only) (§5: LC priority,
    /// "the remaining memory shared among BE workloads through
    /// competitive allocation"), for comparisons (the bench) only.
    AccessRate,
}

impl Default for MtatConfig {
    fn default() -> Self {
        Self {
            unit_bytes: 1 << 30,
            explore: false,
            learn: true,
            sac: SacConfig::default(),
            anneal: AnnealParams::default(),
            rise_reserve: Some(ReserveConfig::default()),
            be_split: BeSplit::Annealing,
        }
    }
}

/// Per-LC-VM memory between intervals.
#[derive(Clone, Debug, Default)]
struct LcTrack {
    prev: Option<([f32; STATE_DIM], f32)>,
    violations_in_row: u32,
    access_peak: f64,
    reserve: Option<RiseReserve>,
    /// The part of the actor's last steps that rounding to whole units
    /// left unmoved ([`quantise_step`]).
    carry: f64,
}

/// How the LC action was chosen (for the log and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LcController {
    /// The actor.
    Actor,
    /// Two violations in a row: largest step up.
    Guard,
    /// Non-finite input or output: rule-based.
    Safe,
}

impl LcController {
    fn name(self) -> &'static str {
        match self {
            Self::Actor => "actor",
            Self::Guard => "guard",
            Self::Safe => "safe",
        }
    }
}

/// Eq. 2: `1 - fmem_ratio` when the SLO holds, −1 otherwise.
pub fn reward(slo_met: bool, fmem_usage_ratio: f64) -> f32 {
    if slo_met {
        (1.0 - fmem_usage_ratio.clamp(0.0, 1.0)) as f32
    } else {
        -1.0
    }
}

/// The p99 of the last interval over the SLO, the state's fourth entry,
/// capped at [`SLACK_CAP`]; a missing or non-finite p99 reads as the cap
/// (a violation, never a success).
///
/// Algorithm 1's state (usage ratio, access ratio, access count) says how
/// loaded the VM is but not how close it runs to its SLO; with it alone
/// the actor settled at several times the smallest share that meets the
/// SLO (docs/policy.md). The slack is what a minimal share is defined by.
pub fn slo_slack(p99_ms: Option<f64>, slo_ms: f64) -> f32 {
    match p99_ms {
        Some(p) if p.is_finite() && slo_ms > 0.0 => (p / slo_ms).clamp(0.0, SLACK_CAP) as f32,
        _ => SLACK_CAP as f32,
    }
}

/// Largest SLO slack the state carries (p99 at twice the SLO or worse).
pub const SLACK_CAP: f64 = 2.0;

/// Eq. 1: an action in [-1, 1] as a change of at most `max_step` whole
/// units, with the rounding remainder carried from earlier decisions
/// (`carry`, in [-0.5, 0.5]); returns the step and the remainder to
/// carry on.
///
/// Eq. 1 scales the action to M·t/2 units, many units when the balloon
/// is fast (9 in the simulator): rounding each decision on its own would
/// drop every action under half a unit, so an actor that keeps asking
/// for a small shrink (seen: −0.03, a third of a unit, at every decision
/// at 50 % load) would never get one. Carried, a steady small action
/// moves a unit every few decisions (a remainder is at most half a unit,
/// so a change of direction costs at most that).
pub fn quantise_step(action: f32, max_step: u64, carry: f64) -> (i64, f64) {
    let a = f64::from(action);
    if !a.is_finite() {
        return (0, 0.0);
    }
    let bound = max_step as f64;
    let total = a.clamp(-1.0, 1.0) * bound + carry.clamp(-0.5, 0.5);
    let step = total.round().clamp(-bound, bound);
    (step as i64, (total - step).clamp(-0.5, 0.5))
}

/// The MTAT policy.
pub struct Mtat {
    cfg: MtatConfig,
    agent: Sac,
    lc: BTreeMap<String, LcTrack>,
    /// Decisions per controller, for metrics.
    pub controller_counts: BTreeMap<&'static str, u64>,
}

impl Mtat {
    /// A policy with a fresh (untrained) agent.
    pub fn new(cfg: MtatConfig) -> Result<Self, SacError> {
        let agent = Sac::new(cfg.sac.clone())?;
        Ok(Self::with_agent(cfg, agent))
    }

    /// A policy whose agent is loaded from a saved model.
    pub fn load(cfg: MtatConfig, model: &Path) -> Result<Self, SacError> {
        let agent = Sac::load(cfg.sac.clone(), model)?;
        Ok(Self::with_agent(cfg, agent))
    }

    /// A policy whose agent is the model built into the binary
    /// ([`BUILTIN_MODEL`]).
    pub fn builtin(cfg: MtatConfig) -> Result<Self, SacError> {
        let agent = Sac::load_bytes(cfg.sac.clone(), BUILTIN_MODEL, BUILTIN_MODEL_NAME)?;
        Ok(Self::with_agent(cfg, agent))
    }

    fn with_agent(cfg: MtatConfig, agent: Sac) -> Self {
        Self {
            cfg,
            agent,
            lc: BTreeMap::new(),
            controller_counts: BTreeMap::new(),
        }
    }

    /// The agent (to save after training).
    pub fn agent(&self) -> &Sac {
        &self.agent
    }

    /// Switches exploration and learning (pretraining vs deployment).
    pub fn set_mode(&mut self, explore: bool, learn: bool) {
        self.cfg.explore = explore;
        self.cfg.learn = learn;
    }

    /// Algorithm 1's state for one LC VM, plus the SLO slack; `None`
    /// entries are filled conservatively, non-finite ones are passed on
    /// (the caller falls back).
    fn state(&self, v: &VmView, track: &LcTrack, slo_ms: f64) -> [f32; STATE_DIM] {
        let usage = v
            .obs
            .fmem_usage_ratio
            .unwrap_or_else(|| v.obs.share_units as f64 / v.spec.max_units.max(1) as f64);
        let access = v.obs.fmem_access_ratio.unwrap_or(usage);
        let scale = v.spec.access_scale.unwrap_or(track.access_peak);
        // No rate: assume peak load, so that the actor does not shrink.
        let count = match v.obs.access_rate {
            Some(r) if scale > 0.0 => r / scale,
            Some(r) if !r.is_finite() => r,
            _ => 1.0,
        };
        [
            usage as f32,
            access as f32,
            count as f32,
            slo_slack(v.obs.p99_ms, slo_ms),
        ]
    }

    fn decide_lc(
        &mut self,
        v: &VmView,
        max_step: u64,
        clock_s: f64,
        notes: &mut Vec<String>,
    ) -> Result<u64, PolicyError> {
        let VmClass::LatencyCritical { slo_ms } = v.spec.class else {
            return Ok(v.obs.share_units);
        };
        let name = v.spec.name.clone();
        let mut track = self.lc.remove(&name).unwrap_or_else(|| LcTrack {
            reserve: self.cfg.rise_reserve.clone().map(RiseReserve::new),
            ..Default::default()
        });
        if let Some(r) = v.obs.access_rate.filter(|r| r.is_finite()) {
            track.access_peak = track.access_peak.max(r);
        }
        let slo_met = match v.obs.p99_ms {
            Some(p) if p.is_finite() => p <= slo_ms,
            Some(_) => {
                notes.push(format!("{name}: non-finite p99 counted as a violation"));
                false
            }
            None => {
                notes.push(format!("{name}: no fresh p99, counted as a violation"));
                false
            }
        };
        track.violations_in_row = if slo_met {
            0
        } else {
            track.violations_in_row + 1
        };
        let s = self.state(v, &track, slo_ms);
        let finite_state = s.iter().all(|x| x.is_finite());
        if let Some(r) = track.reserve.as_mut() {
            r.observe(clock_s, f64::from(s[2]), v.obs.share_units, slo_met);
        }
        if let (Some((ps, pa)), true, true) = (track.prev, finite_state, self.cfg.learn) {
            // Eq. 2 on the interval the action produced: its p99 and the
            // FMem usage ratio it left (Algorithm 1 line 8 reads the ratio
            // before the action; after it, a shrink that keeps the SLO is
            // credited to the action that made it, which learns faster).
            let r = reward(slo_met, f64::from(s[0]));
            // Training errors are logged, never fatal: the guard still holds.
            if let Err(e) = self.agent.observe(Transition {
                s: ps,
                a: pa,
                r,
                s2: s,
            }) {
                notes.push(format!("{name}: SAC training failed: {e}"));
            }
        }
        let actor = if finite_state {
            self.agent.act(s, self.cfg.explore).unwrap_or(f32::NAN)
        } else {
            f32::NAN
        };
        let (action, how) = if track.violations_in_row >= GUARD_VIOLATIONS {
            notes.push(format!(
                "{name}: {} SLO violations in a row, guard grows by the largest step",
                track.violations_in_row
            ));
            (1.0, LcController::Guard)
        } else if !actor.is_finite() {
            notes.push(format!(
                "{name}: non-finite state {s:?} or action, safe controller"
            ));
            (if slo_met { 0.0 } else { 1.0 }, LcController::Safe)
        } else {
            (actor, LcController::Actor)
        };
        *self.controller_counts.entry(how.name()).or_default() += 1;
        let share = v.obs.share_units;
        // The actor's step carries its rounding remainder to the next
        // decision; the guard's and the safe controller's are whole steps.
        let carry = if how == LcController::Actor && slo_met {
            track.carry
        } else {
            0.0
        };
        let (delta, carry) = quantise_step(action, max_step, carry);
        let mut target =
            (share as i64 + delta).clamp(v.spec.min_units as i64, v.spec.max_units as i64) as u64;
        // A move the bounds cut short leaves nothing to carry.
        track.carry = if target as i64 == share as i64 + delta {
            carry
        } else {
            0.0
        };
        let mut action = action;
        // Ahead of the next step of a rising load: never below the share
        // that step needs, growing by at most eq. 1's bound.
        let reserve = track
            .reserve
            .as_ref()
            .and_then(|r| r.floor(clock_s, v.spec.max_units))
            .map(|f| f.min(share + max_step).max(v.spec.min_units));
        if let Some(floor) = reserve.filter(|f| *f > target) {
            notes.push(format!(
                "{name}: load rising, {floor} units held for its next step ({} chose {target})",
                how.name()
            ));
            *self.controller_counts.entry("rise_reserve").or_default() += 1;
            action = ((floor as f64 - share as f64) / max_step as f64).clamp(-1.0, 1.0) as f32;
            target = floor;
            track.carry = 0.0;
        }
        // Learn from what was done: the actor's choice, or what the
        // fallback or the reserve did instead.
        track.prev = finite_state.then_some((s, action));
        self.lc.insert(name, track);
        Ok(target)
    }
}

impl crate::policies::Policy for Mtat {
    fn name(&self) -> &'static str {
        "mtat"
    }

    fn decide(&mut self, view: &HostView) -> Result<Allocation, PolicyError> {
        let mut notes = Vec::new();
        let (lc, be): (Vec<&VmView>, Vec<&VmView>) =
            view.vms.iter().partition(|v| v.spec.class.is_lc());
        // Forget VMs that went away.
        self.lc.retain(|k, _| lc.iter().any(|v| &v.spec.name == k));
        let mut lc_targets = Vec::with_capacity(lc.len());
        for v in &lc {
            lc_targets.push(self.decide_lc(
                v,
                view.max_step_units.max(1),
                view.clock_s,
                &mut notes,
            )?);
        }
        // LC first, but the best-effort minimums always fit.
        let be_min: u64 = be.iter().map(|v| v.spec.min_units).sum();
        let lc_room = view.budget_units.saturating_sub(be_min);
        if lc_targets.iter().sum::<u64>() > lc_room {
            let bounds: Vec<(u64, u64)> = lc
                .iter()
                .zip(&lc_targets)
                .map(|(v, &t)| (v.spec.min_units, t))
                .collect();
            let weights: Vec<f64> = bounds.iter().map(|b| (b.1 - b.0) as f64).collect();
            lc_targets = weighted_fill(lc_room, &bounds, &weights);
            notes.push(format!(
                "LC targets cut to {lc_room} units to keep best-effort minimums"
            ));
        }
        let remaining = view.budget_units - lc_targets.iter().sum::<u64>().min(view.budget_units);
        let fallback_profiles: Vec<Option<Profile>> = be
            .iter()
            .map(|v| {
                if v.spec.profile.is_some() {
                    return None;
                }
                notes.push(format!("{}: no profile, assumed linear", v.spec.name));
                let max_bytes = v.spec.max_units.max(1).saturating_mul(self.cfg.unit_bytes);
                Profile::new(vec![(0, 1.0), (max_bytes, 2.0)]).ok()
            })
            .collect();
        let mut be_vms = Vec::with_capacity(be.len());
        for (v, fb) in be.iter().zip(&fallback_profiles) {
            let Some(profile) = v.spec.profile.as_ref().or(fb.as_ref()) else {
                continue;
            };
            be_vms.push(BeVm {
                profile,
                min_units: v.spec.min_units,
                max_units: v.spec.max_units,
            });
        }
        let be_targets = if self.cfg.be_split == BeSplit::AccessRate {
            let bounds: Vec<(u64, u64)> = be
                .iter()
                .map(|v| (v.spec.min_units, v.spec.max_units))
                .collect();
            let weights = access_weights(be.iter().copied(), &mut notes);
            weighted_fill(remaining, &bounds, &weights)
        } else if be_vms.len() == be.len() {
            anneal(&be_vms, remaining, self.cfg.unit_bytes, &self.cfg.anneal)
        } else {
            let bounds: Vec<(u64, u64)> = be
                .iter()
                .map(|v| (v.spec.min_units, v.spec.max_units))
                .collect();
            weighted_fill(remaining, &bounds, &vec![1.0; bounds.len()])
        };
        let mut targets = BTreeMap::new();
        for (v, t) in lc.iter().zip(lc_targets) {
            targets.insert(v.spec.name.clone(), t);
        }
        for (v, t) in be.iter().zip(be_targets) {
            targets.insert(v.spec.name.clone(), t);
        }
        Ok(Allocation { targets, notes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{VmObservation, VmSpec};
    use crate::policies::{decide_checked, Hotness, Policy, StaticSplit};

    fn lc(name: &str, share: u64, p99: Option<f64>) -> VmView {
        VmView {
            spec: VmSpec {
                name: name.into(),
                class: VmClass::LatencyCritical { slo_ms: 20.0 },
                min_units: 1,
                max_units: 24,
                profile: None,
                access_scale: Some(100.0),
            },
            obs: VmObservation {
                share_units: share,
                p99_ms: p99,
                fmem_usage_ratio: Some(share as f64 / 24.0),
                fmem_access_ratio: Some(0.5),
                access_rate: Some(50.0),
            },
        }
    }

    fn be(name: &str, share: u64, floor: f64) -> VmView {
        VmView {
            spec: VmSpec {
                name: name.into(),
                class: VmClass::BestEffort,
                min_units: 0,
                max_units: 32,
                profile: Some(Profile::new(vec![(0, floor), (32 << 30, 1.0)]).unwrap()),
                access_scale: None,
            },
            obs: VmObservation {
                share_units: share,
                access_rate: Some(1000.0),
                ..Default::default()
            },
        }
    }

    fn view(vms: Vec<VmView>) -> HostView {
        HostView {
            budget_units: 32,
            max_step_units: 6,
            vms,
            clock_s: 0.0,
        }
    }

    #[test]
    fn the_builtin_model_is_the_shipped_file() {
        let cfg = MtatConfig {
            unit_bytes: 1 << 30,
            ..Default::default()
        };
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/lc-sac.safetensors");
        let mut from_file = Mtat::load(cfg.clone(), &path).unwrap();
        let mut builtin = Mtat::builtin(cfg).unwrap();
        let v = view(vec![lc("lc", 8, Some(5.0)), be("be", 20, 0.5)]);
        let a = from_file.decide(&v).unwrap();
        let b = builtin.decide(&v).unwrap();
        assert_eq!(a.targets, b.targets);
    }

    #[test]
    fn reward_and_action_bounds_follow_eq_1_and_2() {
        assert_eq!(reward(true, 0.25), 0.75);
        assert_eq!(reward(false, 0.25), -1.0);
        assert_eq!(reward(true, 7.0), 0.0);
        assert_eq!(quantise_step(1.0, 6, 0.0), (6, 0.0));
        assert_eq!(quantise_step(-3.0, 6, 0.0), (-6, 0.0));
        assert_eq!(quantise_step(0.5, 6, 0.0), (3, 0.0));
        assert_eq!(quantise_step(f32::NAN, 6, 0.4), (0, 0.0));
        // A whole step never exceeds eq. 1's bound, whatever is carried.
        assert_eq!(quantise_step(-1.0, 6, -0.5).0, -6);
    }

    #[test]
    fn a_small_steady_action_moves_a_unit_every_few_decisions() {
        // A third of a unit per decision (the shipped actor at 50 % load,
        // max_step 9): rounded alone it never moves.
        let (mut carry, mut moved) = (0.0, Vec::new());
        for _ in 0..9 {
            let (step, c) = quantise_step(-0.037, 9, carry);
            carry = c;
            moved.push(step);
        }
        assert_eq!(moved.iter().sum::<i64>(), -3, "{moved:?}");
        assert!(moved.iter().all(|s| (-1..=0).contains(s)), "{moved:?}");
        assert!(carry.abs() <= 0.5);
    }

    #[test]
    fn slo_slack_caps_and_counts_missing_latency_as_over() {
        assert_eq!(slo_slack(Some(10.0), 20.0), 0.5);
        assert_eq!(slo_slack(Some(-1.0), 20.0), 0.0);
        assert_eq!(slo_slack(Some(1e9), 20.0), SLACK_CAP as f32);
        assert_eq!(slo_slack(None, 20.0), SLACK_CAP as f32);
        assert_eq!(slo_slack(Some(f64::NAN), 20.0), SLACK_CAP as f32);
        assert_eq!(slo_slack(Some(f64::INFINITY), 20.0), SLACK_CAP as f32);
    }

    #[test]
    fn guard_grows_by_the_largest_step_after_two_violations() {
        let mut m = Mtat::new(MtatConfig {
            learn: false,
            ..Default::default()
        })
        .unwrap();
        let v = view(vec![
            lc("lc", 4, Some(50.0)),
            be("a", 14, 0.5),
            be("b", 14, 0.5),
        ]);
        let first = decide_checked(&mut m, &v).unwrap();
        assert!(!first.notes.iter().any(|n| n.contains("guard")));
        let second = decide_checked(&mut m, &v).unwrap();
        assert_eq!(second.targets["lc"], 10, "{second:?}");
        assert!(second.notes.iter().any(|n| n.contains("guard")));
        // Missing latency counts as a violation too.
        let v = view(vec![lc("lc", 10, None), be("a", 11, 0.5), be("b", 11, 0.5)]);
        let third = decide_checked(&mut m, &v).unwrap();
        assert_eq!(third.targets["lc"], 16);
        // Met SLO resets the count: the actor decides again.
        let v = view(vec![
            lc("lc", 16, Some(1.0)),
            be("a", 8, 0.5),
            be("b", 8, 0.5),
        ]);
        let fourth = decide_checked(&mut m, &v).unwrap();
        assert!(!fourth.notes.iter().any(|n| n.contains("guard")));
        assert_eq!(m.controller_counts["guard"], 2);
    }

    #[test]
    fn a_rising_load_holds_the_next_step_in_reserve() {
        let run = |reserve: Option<ReserveConfig>| {
            let mut m = Mtat::new(MtatConfig {
                learn: false,
                rise_reserve: reserve,
                ..Default::default()
            })
            .unwrap();
            let at = |clock_s: f64, share: u64, rate: f64| {
                let mut l = lc("lc", share, Some(5.0));
                l.obs.access_rate = Some(rate);
                let rest = (32 - share) / 2;
                let mut v = view(vec![l, be("a", rest, 0.5), be("b", rest, 0.5)]);
                v.clock_s = clock_s;
                v
            };
            // 20 % of the access scale, then 40 %: a rise to a load never
            // met before, so the next step (60 %) gets what the VM may
            // hold, at most eq. 1's step (6) above its share.
            let first = decide_checked(&mut m, &at(0.0, 8, 20.0)).unwrap();
            let rise = decide_checked(&mut m, &at(5.0, 8, 40.0)).unwrap();
            let later = decide_checked(&mut m, &at(100.0, 14, 40.0)).unwrap();
            (first, rise, later)
        };
        let noted = |a: &Allocation| a.notes.iter().any(|n| n.contains("load rising"));
        let (first, rise, later) = run(Some(ReserveConfig::default()));
        assert!(!noted(&first), "{first:?}");
        assert_eq!(rise.targets["lc"], 14, "{rise:?}");
        assert!(noted(&rise));
        assert!(!noted(&later), "hold_s after the rise: {later:?}");
        let (_, rise, _) = run(None);
        assert!(!noted(&rise));
        assert!(rise.targets["lc"] < 14, "{rise:?}");
    }

    #[test]
    fn nan_signals_fall_back_to_the_safe_controller() {
        let mut m = Mtat::new(MtatConfig {
            learn: true,
            ..Default::default()
        })
        .unwrap();
        let mut bad = lc("lc", 4, Some(f64::NAN));
        bad.obs.fmem_access_ratio = Some(f64::INFINITY);
        let a = decide_checked(&mut m, &view(vec![bad, be("a", 14, 0.5)])).unwrap();
        assert_eq!(a.targets["lc"], 10, "violation + NaN state: grow");
        assert!(a.notes.iter().any(|n| n.contains("safe controller")));
        assert_eq!(m.agent().buffered(), 0);
    }

    #[test]
    fn be_split_favours_the_sensitive_vm_and_budget_holds() {
        let mut m = Mtat::new(MtatConfig {
            learn: false,
            ..Default::default()
        })
        .unwrap();
        let v = view(vec![
            lc("lc", 8, Some(1.0)),
            be("weak", 12, 0.2),
            be("strong", 12, 0.8),
        ]);
        let a = decide_checked(&mut m, &v).unwrap();
        assert!(a.targets["weak"] > a.targets["strong"], "{a:?}");
        assert!(a.targets.values().sum::<u64>() <= 32);
    }

    #[test]
    fn lc_only_splits_what_the_lc_vm_leaves_by_access_rate() {
        // The paper's MTAT (LC Only): the same LC decision as MTAT (Full),
        // the rest in proportion to the BE VMs' access rates (3:1 here),
        // not by their profiles (which favour "weak").
        let make = |be_split| {
            Mtat::new(MtatConfig {
                learn: false,
                be_split,
                ..Default::default()
            })
            .unwrap()
        };
        let mut weak = be("weak", 12, 0.2);
        weak.obs.access_rate = Some(1000.0);
        let mut strong = be("strong", 12, 0.8);
        strong.obs.access_rate = Some(3000.0);
        let v = view(vec![lc("lc", 8, Some(1.0)), weak, strong]);
        let full = decide_checked(&mut make(BeSplit::Annealing), &v).unwrap();
        let only = decide_checked(&mut make(BeSplit::AccessRate), &v).unwrap();
        assert_eq!(full.targets["lc"], only.targets["lc"]);
        let left = 32 - only.targets["lc"];
        assert_eq!(only.targets["weak"] + only.targets["strong"], left);
        assert!(
            only.targets["strong"] >= 3 * only.targets["weak"],
            "{only:?}"
        );
        assert!(full.targets["weak"] > full.targets["strong"], "{full:?}");
    }

    #[test]
    fn every_policy_refuses_a_budget_below_the_minimums() {
        let mut vms = vec![lc("lc", 8, Some(1.0)), be("a", 12, 0.2)];
        vms[1].spec.min_units = 40;
        let v = view(vms);
        let mut policies: Vec<Box<dyn Policy>> = vec![
            Box::new(StaticSplit),
            Box::new(Hotness),
            Box::new(Mtat::new(MtatConfig::default()).unwrap()),
        ];
        for p in &mut policies {
            let e = decide_checked(p.as_mut(), &v).unwrap_err();
            assert!(
                matches!(e, PolicyError::BudgetBelowMinimums { .. }),
                "{}",
                p.name()
            );
        }
    }

    #[test]
    fn lc_growth_never_eats_be_minimums() {
        let mut m = Mtat::new(MtatConfig {
            learn: false,
            ..Default::default()
        })
        .unwrap();
        let mut a = be("a", 2, 0.2);
        a.spec.min_units = 10;
        let mut b = be("b", 2, 0.2);
        b.spec.min_units = 10;
        let v = view(vec![lc("lc", 20, Some(99.0)), a.clone(), b.clone()]);
        decide_checked(&mut m, &v).unwrap();
        let alloc = decide_checked(&mut m, &v).unwrap();
        assert_eq!(alloc.targets["lc"], 12);
        assert_eq!((alloc.targets["a"], alloc.targets["b"]), (10, 10));
    }
}
