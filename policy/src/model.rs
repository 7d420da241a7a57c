//! What a policy sees and what it decides. Every amount of FMem is an
//! integer number of allocation units (`unit_bytes` in the configuration,
//! a multiple of 4 KiB), so budget arithmetic is exact.

use std::collections::BTreeMap;

use crate::profile::Profile;

/// Service class of a VM.
#[derive(Clone, Debug, PartialEq)]
pub enum VmClass {
    /// Latency-critical: the smallest FMem share that keeps p99 ≤ `slo_ms`.
    LatencyCritical {
        /// p99 service-level objective, milliseconds (> 0).
        slo_ms: f64,
    },
    /// Best-effort: a fair share of what the LC VMs leave.
    BestEffort,
}

impl VmClass {
    /// Whether this is an LC VM.
    pub fn is_lc(&self) -> bool {
        matches!(self, Self::LatencyCritical { .. })
    }
}

/// A VM as the policy knows it from configuration.
#[derive(Clone, Debug)]
pub struct VmSpec {
    /// Unique name (the socket's file stem or the configured name).
    pub name: String,
    /// LC or BE.
    pub class: VmClass,
    /// Smallest FMem share the policy may give, units.
    pub min_units: u64,
    /// Largest FMem share (the VM's FMem tier), units.
    pub max_units: u64,
    /// Throughput against FMem share (BE VMs under `mtat`).
    pub profile: Option<Profile>,
    /// Memory accesses per second at the LC VM's peak load, to normalise
    /// the SAC state; `None`: the largest rate seen so far.
    pub access_scale: Option<f64>,
}

/// What was measured about one VM in the last interval. `None` means the
/// signal is missing or stale; policies must treat that conservatively.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VmObservation {
    /// FMem share the VM holds now (its FMem tier minus its balloon), units.
    pub share_units: u64,
    /// p99 latency over the last window, milliseconds (LC VMs).
    pub p99_ms: Option<f64>,
    /// Fraction of the VM's memory in use that lies in FMem.
    pub fmem_usage_ratio: Option<f64>,
    /// Fraction of its memory accesses that went to FMem.
    pub fmem_access_ratio: Option<f64>,
    /// Memory accesses per second.
    pub access_rate: Option<f64>,
}

/// One VM with its observation.
#[derive(Clone, Debug)]
pub struct VmView {
    /// Configuration.
    pub spec: VmSpec,
    /// Latest measurements.
    pub obs: VmObservation,
}

/// Everything a policy decides from.
#[derive(Clone, Debug)]
pub struct HostView {
    /// FMem the VMs may hold together, units.
    pub budget_units: u64,
    /// Largest LC change per interval (eq. 1's bound), units.
    pub max_step_units: u64,
    /// The VMs, in a stable order.
    pub vms: Vec<VmView>,
    /// When the view was taken, seconds on the caller's clock (policies
    /// that remember use only differences of it).
    pub clock_s: f64,
}

/// A policy's answer: the FMem share each VM should hold, units.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allocation {
    /// Target share by VM name.
    pub targets: BTreeMap<String, u64>,
    /// Why (safe-guard engaged, fallbacks), for the decision log.
    pub notes: Vec<String>,
}

/// Reasons a decision cannot be made or is unsafe.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    /// Σ minimums exceeds the budget.
    #[error(
        "FMem budget of {budget} units is below the sum of the VMs' minimums ({minimums} units)"
    )]
    BudgetBelowMinimums {
        /// Budget.
        budget: u64,
        /// Σ min_units.
        minimums: u64,
    },
    /// A policy produced an allocation over the budget (a bug; refused).
    #[error("allocation of {total} units exceeds the budget of {budget} units")]
    OverBudget {
        /// Σ targets.
        total: u64,
        /// Budget.
        budget: u64,
    },
    /// A VM's target is outside its bounds or missing.
    #[error("target for VM {vm} is {target:?}, outside [{min}, {max}]")]
    OutOfBounds {
        /// VM.
        vm: String,
        /// Target, if any.
        target: Option<u64>,
        /// Bound.
        min: u64,
        /// Bound.
        max: u64,
    },
}

impl HostView {
    /// Checks that the minimums fit in the budget.
    pub fn check_feasible(&self) -> Result<(), PolicyError> {
        let minimums: u64 = self.vms.iter().map(|v| v.spec.min_units).sum();
        if minimums > self.budget_units {
            return Err(PolicyError::BudgetBelowMinimums {
                budget: self.budget_units,
                minimums,
            });
        }
        Ok(())
    }

    /// Checks that `alloc` names every VM within its bounds and fits the
    /// budget: the last line of defence before anything is enforced.
    pub fn check_allocation(&self, alloc: &Allocation) -> Result<(), PolicyError> {
        let mut total = 0u64;
        for v in &self.vms {
            let t = alloc.targets.get(&v.spec.name).copied();
            match t {
                Some(t) if (v.spec.min_units..=v.spec.max_units).contains(&t) => total += t,
                _ => {
                    return Err(PolicyError::OutOfBounds {
                        vm: v.spec.name.clone(),
                        target: t,
                        min: v.spec.min_units,
                        max: v.spec.max_units,
                    })
                }
            }
        }
        if total > self.budget_units {
            return Err(PolicyError::OverBudget {
                total,
                budget: self.budget_units,
            });
        }
        Ok(())
    }
}

/// Splits `total` units among VMs with bounds `[min, max]` in proportion to
/// `weights` (water-filling: a VM at its maximum gives its excess to the
/// others). Returns shares whose sum is `min(total, Σ max)`, each within
/// bounds, assuming `Σ min ≤ total`. Non-finite or negative weights count
/// as 0; what the weighted VMs cannot hold is split equally among the rest.
pub fn weighted_fill(total: u64, bounds: &[(u64, u64)], weights: &[f64]) -> Vec<u64> {
    let mut shares: Vec<u64> = bounds.iter().map(|b| b.0).collect();
    let mut left = total.saturating_sub(shares.iter().sum());
    let clean: Vec<f64> = weights
        .iter()
        .map(|w| if w.is_finite() && *w > 0.0 { *w } else { 0.0 })
        .collect();
    left = fill_pass(&mut shares, left, bounds, &clean);
    if left > 0 {
        fill_pass(&mut shares, left, bounds, &vec![1.0; bounds.len()]);
    }
    shares
}

/// One water-filling pass; returns what is left.
fn fill_pass(shares: &mut [u64], mut left: u64, bounds: &[(u64, u64)], weight: &[f64]) -> u64 {
    loop {
        let open: Vec<usize> = (0..shares.len())
            .filter(|&i| shares[i] < bounds[i].1 && weight[i] > 0.0)
            .collect();
        if left == 0 || open.is_empty() {
            return left;
        }
        let wsum: f64 = open.iter().map(|&i| weight[i]).sum();
        let mut given = 0u64;
        for &i in &open {
            let part = ((left as f64) * weight[i] / wsum).floor() as u64;
            let g = part.min(bounds[i].1 - shares[i]);
            shares[i] += g;
            given += g;
        }
        left -= given;
        if given == 0 {
            // Less is left than there are open VMs: one unit each, largest
            // weight first (ties by position, so the result is stable).
            let mut order = open;
            order.sort_by(|&a, &b| weight[b].total_cmp(&weight[a]).then(a.cmp(&b)));
            for i in order {
                if left == 0 {
                    break;
                }
                shares[i] += 1;
                left -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_fill_respects_bounds_and_total() {
        let s = weighted_fill(10, &[(0, 3), (0, 100), (2, 100)], &[1.0, 1.0, 1.0]);
        assert_eq!(s.iter().sum::<u64>(), 10);
        assert!(s[0] <= 3 && s[2] >= 2);
        let s = weighted_fill(10, &[(0, 2), (0, 3)], &[1.0, 0.0]);
        assert_eq!(
            s,
            vec![2, 3],
            "the unweighted VM takes what the other cannot hold"
        );
        let s = weighted_fill(7, &[(0, 10), (0, 10)], &[f64::NAN, -1.0]);
        assert_eq!(s.iter().sum::<u64>(), 7);
        let s = weighted_fill(9, &[(0, 10), (0, 10)], &[2.0, 1.0]);
        assert_eq!(s, vec![6, 3]);
    }

    proptest::proptest! {
        #[test]
        fn weighted_fill_never_exceeds_total_or_bounds(
            total in 0u64..500,
            spec in proptest::collection::vec((0u64..20, 0u64..200, 0.0f64..10.0), 1..12),
        ) {
            let bounds: Vec<(u64, u64)> = spec.iter().map(|&(a, b, _)| (a.min(b), a.max(b))).collect();
            let weights: Vec<f64> = spec.iter().map(|s| s.2).collect();
            let mins: u64 = bounds.iter().map(|b| b.0).sum();
            proptest::prop_assume!(mins <= total);
            let s = weighted_fill(total, &bounds, &weights);
            let maxs: u64 = bounds.iter().map(|b| b.1).sum();
            proptest::prop_assert!(s.iter().sum::<u64>() <= total);
            for (x, b) in s.iter().zip(&bounds) {
                proptest::prop_assert!(*x >= b.0 && *x <= b.1);
            }
            // Work-conserving: everything is given out that fits.
            proptest::prop_assert_eq!(s.iter().sum::<u64>(), total.min(maxs));
        }
    }
}
