//! The best-effort split (§3.2.2, Algorithm 2): maximise the worst-off
//! VM's normalised performance NP (eq. 3) by simulated annealing over
//! one-unit swaps between two VMs, from an equal split.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::model::weighted_fill;
use crate::profile::Profile;

/// Weight of mean NP in the score, so that among splits with the same
/// worst-off VM the search prefers more total performance (the min alone
/// is flat over most swaps and would leave the walk blind).
const MEAN_TIE_BREAK: f64 = 1e-3;

/// Annealing schedule.
#[derive(Clone, Debug)]
pub struct AnnealParams {
    /// Initial temperature T0 (in NP units).
    pub t0: f64,
    /// Decay γ per iteration (0 < γ < 1).
    pub gamma: f64,
    /// Stop when T falls below this.
    pub t_min: f64,
    /// Iteration cap.
    pub max_iters: usize,
    /// RNG seed (decisions are reproducible from the log).
    pub seed: u64,
}

impl Default for AnnealParams {
    fn default() -> Self {
        Self {
            t0: 0.05,
            gamma: 0.998,
            t_min: 1e-6,
            max_iters: 8000,
            seed: 0x4d54_4154,
        }
    }
}

/// One best-effort VM to split for.
#[derive(Clone, Debug)]
pub struct BeVm<'a> {
    /// Throughput against FMem.
    pub profile: &'a Profile,
    /// Bounds, units.
    pub min_units: u64,
    /// Bounds, units.
    pub max_units: u64,
}

/// Worst-off NP of `alloc` (the paper's fairness metric).
pub fn min_np(vms: &[BeVm<'_>], alloc: &[u64], unit_bytes: u64) -> f64 {
    vms.iter()
        .zip(alloc)
        .map(|(v, &m)| v.profile.np(m.saturating_mul(unit_bytes)))
        .fold(f64::INFINITY, f64::min)
}

fn nps(vms: &[BeVm<'_>], alloc: &[u64], unit_bytes: u64) -> Vec<f64> {
    vms.iter()
        .zip(alloc)
        .map(|(v, &m)| v.profile.np(m.saturating_mul(unit_bytes)))
        .collect()
}

/// The annealer's objective from each VM's NP.
fn score_of(nps: &[f64]) -> f64 {
    if nps.is_empty() {
        return 0.0;
    }
    let min = nps.iter().copied().fold(f64::INFINITY, f64::min);
    min + MEAN_TIE_BREAK * nps.iter().sum::<f64>() / nps.len() as f64
}

fn score(vms: &[BeVm<'_>], alloc: &[u64], unit_bytes: u64) -> f64 {
    score_of(&nps(vms, alloc, unit_bytes))
}

/// Algorithm 2: splits `total` units among `vms`. Returns shares within
/// each VM's bounds summing to at most `total` (less only when every VM is
/// at its maximum). Needs Σ min ≤ total.
pub fn anneal(vms: &[BeVm<'_>], total: u64, unit_bytes: u64, p: &AnnealParams) -> Vec<u64> {
    let n = vms.len();
    let bounds: Vec<(u64, u64)> = vms.iter().map(|v| (v.min_units, v.max_units)).collect();
    let mut cur = weighted_fill(total, &bounds, &vec![1.0; n]);
    if n < 2 {
        return cur;
    }
    // Each VM's NP, updated for the two VMs a swap touches rather than
    // looked up in every profile at every iteration; the score stays the
    // same sum over the same values, so the walk is unchanged.
    let mut cur_np = nps(vms, &cur, unit_bytes);
    let np_at = |k: usize, m: u64| vms[k].profile.np(m.saturating_mul(unit_bytes));
    let mut cur_score = score_of(&cur_np);
    let (mut best, mut best_score) = (cur.clone(), cur_score);
    let mut rng = SmallRng::seed_from_u64(p.seed);
    let mut t = p.t0;
    let mut iter = 0;
    while iter < p.max_iters && t > p.t_min {
        iter += 1;
        t *= p.gamma;
        let i = rng.random_range(0..n);
        let mut j = rng.random_range(0..n - 1);
        if j >= i {
            j += 1;
        }
        // Δm = ±1 unit: i gains, j loses (or the reverse).
        let (gain, lose) = if rng.random_bool(0.5) { (i, j) } else { (j, i) };
        if cur[gain] >= bounds[gain].1 || cur[lose] <= bounds[lose].0 {
            continue;
        }
        let (np_gain, np_lose) = (cur_np[gain], cur_np[lose]);
        cur[gain] += 1;
        cur[lose] -= 1;
        cur_np[gain] = np_at(gain, cur[gain]);
        cur_np[lose] = np_at(lose, cur[lose]);
        let s = score_of(&cur_np);
        let delta = s - cur_score;
        if delta > 0.0 || rng.random::<f64>() < (delta / t).exp() {
            cur_score = s;
            if s > best_score {
                best_score = s;
                best.clone_from(&cur);
            }
        } else {
            cur[gain] -= 1;
            cur[lose] += 1;
            cur_np[gain] = np_gain;
            cur_np[lose] = np_lose;
        }
    }
    best
}

/// Exhaustive search over every split of `total` (for checking the
/// annealer; exponential in the number of VMs).
pub fn brute_force(vms: &[BeVm<'_>], total: u64, unit_bytes: u64) -> Vec<u64> {
    let n = vms.len();
    let bounds: Vec<(u64, u64)> = vms.iter().map(|v| (v.min_units, v.max_units)).collect();
    let target = total.min(bounds.iter().map(|b| b.1).sum());
    let mut best = weighted_fill(total, &bounds, &vec![1.0; n]);
    let mut best_score = score(vms, &best, unit_bytes);
    let mut cur = vec![0u64; n];
    fn rec(
        k: usize,
        left: u64,
        cur: &mut Vec<u64>,
        bounds: &[(u64, u64)],
        eval: &mut dyn FnMut(&[u64]),
    ) {
        if k + 1 == cur.len() {
            if (bounds[k].0..=bounds[k].1).contains(&left) {
                cur[k] = left;
                eval(cur);
            }
            return;
        }
        let hi = bounds[k].1.min(left);
        for m in bounds[k].0..=hi {
            cur[k] = m;
            rec(k + 1, left - m, cur, bounds, eval);
        }
    }
    if n > 0 {
        rec(0, target, &mut cur, &bounds, &mut |a: &[u64]| {
            let s = score(vms, a, unit_bytes);
            if s > best_score {
                best_score = s;
                best = a.to_vec();
            }
        });
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn concave(slope: f64, floor: f64, size: u64) -> Profile {
        // floor + (1 - floor)·(1 - (1 - x)^slope) on 0..=size units of 1 byte.
        let pts = (0..=size)
            .map(|m| {
                let x = m as f64 / size as f64;
                (m, floor + (1.0 - floor) * (1.0 - (1.0 - x).powf(slope)))
            })
            .collect();
        Profile::new(pts).unwrap()
    }

    #[test]
    fn sa_matches_brute_force_within_one_percent() {
        let profiles = [
            concave(1.0, 0.3, 40),
            concave(3.0, 0.5, 40),
            concave(2.0, 0.2, 40),
            concave(1.5, 0.6, 40),
        ];
        for n in 2..=4 {
            for total in [8u64, 20, 32, 50] {
                let vms: Vec<BeVm> = profiles[..n]
                    .iter()
                    .map(|p| BeVm {
                        profile: p,
                        min_units: 0,
                        max_units: 40,
                    })
                    .collect();
                let sa = anneal(&vms, total, 1, &AnnealParams::default());
                let bf = brute_force(&vms, total, 1);
                let (a, b) = (min_np(&vms, &sa, 1), min_np(&vms, &bf, 1));
                assert!(
                    a >= 0.99 * b,
                    "n={n} total={total}: SA {a} vs brute force {b}"
                );
                assert!(sa.iter().sum::<u64>() <= total);
            }
        }
    }

    /// Algorithm 2 with the whole score recomputed at every step: what
    /// [`anneal`]'s per-VM NP cache must reproduce exactly.
    fn anneal_by_full_score(vms: &[BeVm<'_>], total: u64, p: &AnnealParams) -> Vec<u64> {
        let n = vms.len();
        let bounds: Vec<(u64, u64)> = vms.iter().map(|v| (v.min_units, v.max_units)).collect();
        let mut cur = weighted_fill(total, &bounds, &vec![1.0; n]);
        let mut cur_score = score(vms, &cur, 1);
        let (mut best, mut best_score) = (cur.clone(), cur_score);
        let mut rng = SmallRng::seed_from_u64(p.seed);
        let mut t = p.t0;
        for _ in 0..p.max_iters {
            if t <= p.t_min {
                break;
            }
            t *= p.gamma;
            let i = rng.random_range(0..n);
            let mut j = rng.random_range(0..n - 1);
            if j >= i {
                j += 1;
            }
            let (gain, lose) = if rng.random_bool(0.5) { (i, j) } else { (j, i) };
            if cur[gain] >= bounds[gain].1 || cur[lose] <= bounds[lose].0 {
                continue;
            }
            cur[gain] += 1;
            cur[lose] -= 1;
            let s = score(vms, &cur, 1);
            let delta = s - cur_score;
            if delta > 0.0 || rng.random::<f64>() < (delta / t).exp() {
                cur_score = s;
                if s > best_score {
                    best_score = s;
                    best.clone_from(&cur);
                }
            } else {
                cur[gain] -= 1;
                cur[lose] += 1;
            }
        }
        best
    }

    #[test]
    fn cached_np_anneals_exactly_like_the_full_score() {
        let profiles: Vec<Profile> = (0..12)
            .map(|k| concave(1.0 + f64::from(k % 4) * 0.5, 0.1 + 0.07 * f64::from(k), 30))
            .collect();
        for n in [2, 5, 12] {
            for total in [12u64, 40, 150, 400] {
                let vms: Vec<BeVm> = profiles[..n]
                    .iter()
                    .enumerate()
                    .map(|(k, p)| BeVm {
                        profile: p,
                        min_units: (k % 3) as u64,
                        max_units: 30,
                    })
                    .collect();
                let p = AnnealParams::default();
                assert_eq!(
                    anneal(&vms, total, 1, &p),
                    anneal_by_full_score(&vms, total, &p),
                    "n={n} total={total}"
                );
            }
        }
    }

    #[test]
    fn sa_keeps_bounds_and_improves_on_equal_split() {
        let a = concave(1.0, 0.1, 10);
        let b = concave(1.0, 0.9, 10);
        let vms = [
            BeVm {
                profile: &a,
                min_units: 1,
                max_units: 10,
            },
            BeVm {
                profile: &b,
                min_units: 2,
                max_units: 10,
            },
        ];
        let s = anneal(&vms, 10, 1, &AnnealParams::default());
        assert_eq!(s.iter().sum::<u64>(), 10);
        assert!(s[1] >= 2 && s[0] >= 1);
        // The sensitive VM (a) must get more than half.
        assert!(s[0] > 5, "{s:?}");
        assert!(min_np(&vms, &s, 1) > min_np(&vms, &[5, 5], 1));
    }

    #[test]
    fn sa_with_more_memory_than_vms_can_hold_fills_them() {
        let a = concave(1.0, 0.1, 4);
        let vms = [
            BeVm {
                profile: &a,
                min_units: 0,
                max_units: 4,
            },
            BeVm {
                profile: &a,
                min_units: 0,
                max_units: 3,
            },
        ];
        assert_eq!(anneal(&vms, 100, 1, &AnnealParams::default()), vec![4, 3]);
    }
}
