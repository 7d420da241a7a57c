//! Turning a decision into resize steps (§3.3.1, Algorithm 3): the change
//! is cut into slices of at most `p_max` units promoted and `p_max` units
//! demoted; while an LC VM still has to move, each slice moves the LC VMs
//! first and takes the counterpart from (or gives it to) the best-effort
//! VMs in proportion to their own demand; then the best-effort VMs
//! exchange among themselves. Within a slice donors shrink before
//! receivers grow, and no slice lets the sum of shares exceed the budget
//! (Algorithm 3 assumes a full FMem; with free budget, growth may outrun
//! the matching shrink by exactly that headroom).

/// One VM's move in a decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmMove {
    /// VM name.
    pub vm: String,
    /// Latency-critical VMs move first.
    pub lc: bool,
    /// Share now, units.
    pub current: u64,
    /// Share wanted, units.
    pub target: u64,
}

/// One time slice: shrink `shrink` (wait until done), then grow `grow`.
/// Each entry is a VM and its new share, units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    /// Donors and their new share.
    pub shrink: Vec<(String, u64)>,
    /// Receivers and their new share.
    pub grow: Vec<(String, u64)>,
}

/// A plan that cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// p_max of zero moves nothing.
    #[error("p_max must be at least one unit")]
    ZeroSlice,
    /// Σ targets over the budget.
    #[error("targets sum to {0} units, over the budget of {1}")]
    TargetsOverBudget(u64, u64),
}

/// Splits `x` among `demands` in proportion (largest remainder), never
/// giving anyone more than its demand; Σ = min(x, Σ demands).
pub fn proportional_split(x: u64, demands: &[u64]) -> Vec<u64> {
    let total: u64 = demands.iter().sum();
    if x >= total {
        return demands.to_vec();
    }
    let mut out = Vec::with_capacity(demands.len());
    let mut rems = Vec::with_capacity(demands.len());
    for (i, &d) in demands.iter().enumerate() {
        let num = u128::from(x) * u128::from(d);
        out.push((num / u128::from(total)) as u64);
        rems.push((num % u128::from(total), i));
    }
    let mut left = x - out.iter().sum::<u64>();
    rems.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in rems {
        if left == 0 {
            break;
        }
        if out[i] < demands[i] {
            out[i] += 1;
            left -= 1;
        }
    }
    out
}

/// Algorithm 3. `budget` bounds Σ shares after every slice (if the VMs
/// start over it, the sum only falls until it is under).
pub fn plan(moves: &[VmMove], budget: u64, p_max: u64) -> Result<Vec<Slice>, PlanError> {
    if p_max == 0 {
        return Err(PlanError::ZeroSlice);
    }
    let total_target: u64 = moves.iter().map(|m| m.target).sum();
    if total_target > budget {
        return Err(PlanError::TargetsOverBudget(total_target, budget));
    }
    let mut cur: Vec<u64> = moves.iter().map(|m| m.current).collect();
    let up = |cur: &[u64], i: usize| moves[i].target.saturating_sub(cur[i]);
    let down = |cur: &[u64], i: usize| cur[i].saturating_sub(moves[i].target);
    let idx =
        |lc: bool| -> Vec<usize> { (0..moves.len()).filter(|&i| moves[i].lc == lc).collect() };
    let (lcs, bes) = (idx(true), idx(false));
    let mut slices = Vec::new();
    loop {
        let sum = |set: &[usize], f: &dyn Fn(&[u64], usize) -> u64| -> u64 {
            set.iter().map(|&i| f(&cur, i)).sum()
        };
        let (lc_up, lc_down) = (sum(&lcs, &up), sum(&lcs, &down));
        let (be_up, be_down) = (sum(&bes, &up), sum(&bes, &down));
        let promote = lc_up + be_up;
        let demote = lc_down + be_down;
        if promote == 0 && demote == 0 {
            return Ok(slices);
        }
        let p = p_max.min(promote.max(demote));
        let (mut lc_g, lc_d, mut be_g, be_d) = if lc_up + lc_down > 0 {
            // The LC VMs move first; the best-effort VMs take the
            // counterpart, within the same p_max per direction.
            let (g, d) = (lc_up.min(p), lc_down.min(p));
            (g, d, be_up.min(d).min(p - g), be_down.min(g).min(p - d))
        } else {
            (0, 0, be_up.min(p), be_down.min(p))
        };
        // Budget: growth may exceed shrink only by the free headroom.
        let now: u64 = cur.iter().sum();
        let headroom = budget.saturating_sub(now);
        let allowed = lc_d + be_d + headroom;
        if lc_g + be_g > allowed {
            let excess = lc_g + be_g - allowed;
            let cut_be = excess.min(be_g);
            be_g -= cut_be;
            lc_g -= excess - cut_be;
        }
        let mut slice = Slice::default();
        let mut apply = |set: &[usize], amount: u64, grow: bool, cur: &mut Vec<u64>| {
            let demands: Vec<u64> = set
                .iter()
                .map(|&i| if grow { up(cur, i) } else { down(cur, i) })
                .collect();
            for (k, part) in proportional_split(amount, &demands).into_iter().enumerate() {
                if part == 0 {
                    continue;
                }
                let i = set[k];
                if grow {
                    cur[i] += part;
                    slice.grow.push((moves[i].vm.clone(), cur[i]));
                } else {
                    cur[i] -= part;
                    slice.shrink.push((moves[i].vm.clone(), cur[i]));
                }
            }
        };
        apply(&lcs, lc_d, false, &mut cur);
        apply(&bes, be_d, false, &mut cur);
        apply(&lcs, lc_g, true, &mut cur);
        apply(&bes, be_g, true, &mut cur);
        debug_assert!(!slice.shrink.is_empty() || !slice.grow.is_empty());
        slices.push(slice);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn mv(vm: &str, lc: bool, current: u64, target: u64) -> VmMove {
        VmMove {
            vm: vm.into(),
            lc,
            current,
            target,
        }
    }

    /// Replays a plan, checking every invariant; returns the final shares.
    fn replay(moves: &[VmMove], budget: u64, p_max: u64) -> BTreeMap<String, u64> {
        let slices = plan(moves, budget, p_max).unwrap();
        let mut shares: BTreeMap<String, u64> =
            moves.iter().map(|m| (m.vm.clone(), m.current)).collect();
        let start: u64 = shares.values().sum();
        let lc_names: Vec<&str> = moves
            .iter()
            .filter(|m| m.lc)
            .map(|m| m.vm.as_str())
            .collect();
        let lc_left = |s: &BTreeMap<String, u64>| -> u64 {
            moves
                .iter()
                .filter(|m| m.lc)
                .map(|m| s[&m.vm].abs_diff(m.target))
                .sum()
        };
        let lc_total = lc_left(&shares);
        for (k, sl) in slices.iter().enumerate() {
            let before = shares.clone();
            let mut shrunk = 0;
            for (vm, s) in &sl.shrink {
                assert!(*s < shares[vm], "shrink grows {vm}");
                shrunk += shares[vm] - s;
                shares.insert(vm.clone(), *s);
            }
            let mut grown = 0;
            for (vm, s) in &sl.grow {
                assert!(*s > shares[vm], "grow shrinks {vm}");
                grown += s - shares[vm];
                shares.insert(vm.clone(), *s);
            }
            assert!(
                shrunk <= p_max && grown <= p_max,
                "slice {k} moves {shrunk}/{grown} > {p_max}"
            );
            let sum: u64 = shares.values().sum();
            assert!(
                sum <= budget.max(start),
                "slice {k}: Σ {sum} over budget {budget}"
            );
            // Every VM moves towards its target, never past it.
            for m in moves {
                let (b, a) = (before[&m.vm], shares[&m.vm]);
                assert!(a.abs_diff(m.target) <= b.abs_diff(m.target));
            }
            // LC first: while LC movement remains, each slice moves the LC
            // VMs by a full slice (or what is left).
            let moved_lc = lc_left(&before) - lc_left(&shares);
            if lc_left(&before) > 0 {
                let direction_bound = p_max.min(lc_left(&before));
                assert!(moved_lc > 0, "slice {k} skips the LC VMs {lc_names:?}");
                if lc_names.len() == 1 && budget >= start {
                    assert_eq!(moved_lc, direction_bound, "slice {k}");
                }
            }
        }
        if lc_total > 0 && lc_names.len() == 1 {
            // The LC VM is done within its first ⌈Δ/p_max⌉ slices.
            let needed = lc_total.div_ceil(p_max) as usize;
            let mut s: BTreeMap<String, u64> =
                moves.iter().map(|m| (m.vm.clone(), m.current)).collect();
            for sl in slices.iter().take(needed) {
                for (vm, v) in sl.shrink.iter().chain(&sl.grow) {
                    s.insert(vm.clone(), *v);
                }
            }
            assert_eq!(lc_left(&s), 0);
        }
        shares
    }

    #[test]
    fn lc_growth_takes_from_be_donors_in_proportion() {
        let moves = [
            mv("lc", true, 4, 12),
            mv("a", false, 10, 6),
            mv("b", false, 10, 6),
            mv("c", false, 0, 0),
        ];
        let slices = plan(&moves, 24, 4).unwrap();
        assert_eq!(slices.len(), 2);
        assert_eq!(slices[0].shrink, vec![("a".into(), 8), ("b".into(), 8)]);
        assert_eq!(slices[0].grow, vec![("lc".into(), 8)]);
        let end = replay(&moves, 24, 4);
        assert_eq!(end["lc"], 12);
    }

    #[test]
    fn lc_shrink_feeds_be_receivers_then_be_exchange() {
        let moves = [
            mv("lc", true, 20, 10),
            mv("a", false, 2, 12),
            mv("b", false, 8, 4),
            mv("c", false, 0, 4),
        ];
        let end = replay(&moves, 30, 3);
        assert_eq!(
            end,
            moves.iter().map(|m| (m.vm.clone(), m.target)).collect()
        );
        let slices = plan(&moves, 30, 3).unwrap();
        // First slice: LC gives 3, the BE receivers take them.
        assert_eq!(slices[0].shrink, vec![("lc".into(), 17)]);
        assert_eq!(
            slices[0]
                .grow
                .iter()
                .map(|g| g.0.as_str())
                .collect::<Vec<_>>(),
            ["a", "c"]
        );
    }

    #[test]
    fn growth_without_donors_uses_headroom_only() {
        let moves = [mv("lc", true, 0, 5), mv("a", false, 0, 5)];
        let end = replay(&moves, 10, 2);
        assert_eq!((end["lc"], end["a"]), (5, 5));
        assert_eq!(plan(&moves, 9, 2), Err(PlanError::TargetsOverBudget(10, 9)));
        assert_eq!(plan(&moves, 10, 0), Err(PlanError::ZeroSlice));
    }

    #[test]
    fn proportional_split_is_exact_and_capped() {
        assert_eq!(proportional_split(5, &[4, 4]), vec![3, 2]);
        assert_eq!(proportional_split(10, &[1, 2]), vec![1, 2]);
        assert_eq!(proportional_split(0, &[1, 2]), vec![0, 0]);
        assert_eq!(proportional_split(3, &[0, 0, 9]), vec![0, 0, 3]);
    }

    proptest! {
        #[test]
        fn plans_keep_every_invariant(
            spec in proptest::collection::vec((0u64..40, 0u64..40), 1..8),
            lc_count in 0usize..3,
            p_max in 1u64..10,
            slack in 0u64..10,
        ) {
            let moves: Vec<VmMove> = spec.iter().enumerate().map(|(i, &(c, t))| {
                mv(&format!("vm{i}"), i < lc_count, c, t)
            }).collect();
            let budget = moves.iter().map(|m| m.current).sum::<u64>()
                .max(moves.iter().map(|m| m.target).sum::<u64>()) + slack;
            let end = replay(&moves, budget, p_max);
            for m in &moves {
                prop_assert_eq!(end[&m.vm], m.target);
            }
        }

        #[test]
        fn over_budget_start_only_falls(
            spec in proptest::collection::vec((0u64..40, 0u64..40), 2..6),
            p_max in 1u64..10,
        ) {
            let moves: Vec<VmMove> = spec.iter().enumerate().map(|(i, &(c, t))| {
                mv(&format!("vm{i}"), i == 0, c, t)
            }).collect();
            let budget = moves.iter().map(|m| m.target).sum::<u64>();
            let end = replay(&moves, budget, p_max);
            for m in &moves {
                prop_assert_eq!(end[&m.vm], m.target);
            }
        }
    }
}
