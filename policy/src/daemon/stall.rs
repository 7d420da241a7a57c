//! Donors whose guest cannot give FMem back now.
//!
//! A guest frees FMem for its balloon only as fast as it can move or drop
//! the pages in it; a guest whose FMem is full of pages in use (a BE job's
//! hot set) can stop short of the target for a long time. Asking it again
//! at every interval blocks each plan at its first slice while the
//! receivers (the LC VM first) wait. A stalled donor is therefore held at
//! the unit it stopped in (its *release floor*) for a few decisions, so
//! that the policy takes the FMem from the other VMs, and is asked again
//! once the floor expires.

use std::collections::BTreeMap;

use crate::model::VmView;

/// Decisions a release floor lasts.
pub const FLOOR_DECISIONS: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Floor {
    units: u64,
    decisions_left: u32,
}

/// Release floors of the VMs whose shrink stalled.
#[derive(Debug, Default)]
pub struct ReleaseFloors {
    floors: BTreeMap<String, Floor>,
}

impl ReleaseFloors {
    /// `vm` stalled holding `units` (rounded up): keep it there for the
    /// next [`FLOOR_DECISIONS`] decisions.
    pub fn record(&mut self, vm: &str, units: u64) {
        self.floors.insert(
            vm.to_string(),
            Floor {
                units,
                decisions_left: FLOOR_DECISIONS,
            },
        );
    }

    /// A VM that went away keeps no floor.
    pub fn forget(&mut self, vm: &str) {
        self.floors.remove(vm);
    }

    /// The floor of `vm`, if any.
    pub fn get(&self, vm: &str) -> Option<u64> {
        self.floors.get(vm).map(|f| f.units)
    }

    /// Raises each floored VM's minimum to its floor for this decision
    /// and counts the decision against the floor. A VM that has since
    /// released below its floor drops it; if the raised minimums would
    /// not fit in `budget_units`, none is applied (the policy then sees
    /// the configured bounds). Returns notes for the decision log.
    pub fn apply(&mut self, views: &mut [VmView], budget_units: u64) -> Vec<String> {
        let mut notes = Vec::new();
        self.floors
            .retain(|vm, f| match views.iter().find(|v| &v.spec.name == vm) {
                Some(v) if v.obs.share_units < f.units => {
                    notes.push(format!("{vm}: released below its floor, floor dropped"));
                    false
                }
                Some(_) => true,
                None => false,
            });
        if self.floors.is_empty() {
            return notes;
        }
        let raised = |v: &VmView, f: Option<&Floor>| {
            f.map_or(v.spec.min_units, |f| {
                v.spec.min_units.max(f.units.min(v.spec.max_units))
            })
        };
        let sum: u64 = views
            .iter()
            .map(|v| raised(v, self.floors.get(&v.spec.name)))
            .sum();
        if sum > budget_units {
            notes.push(format!(
                "release floors not applied: minimums would sum to {sum} units, over the budget of {budget_units}"
            ));
        } else {
            for v in views.iter_mut() {
                if let Some(f) = self.floors.get(&v.spec.name) {
                    let min = raised(v, Some(f));
                    notes.push(format!(
                        "{}: its guest could not free FMem, held at {min} units ({} more decisions)",
                        v.spec.name,
                        f.decisions_left - 1
                    ));
                    v.spec.min_units = min;
                }
            }
        }
        self.floors.retain(|_, f| {
            f.decisions_left -= 1;
            f.decisions_left > 0
        });
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{VmClass, VmObservation, VmSpec};

    fn vm(name: &str, min: u64, max: u64, share: u64) -> VmView {
        VmView {
            spec: VmSpec {
                name: name.into(),
                class: VmClass::BestEffort,
                min_units: min,
                max_units: max,
                profile: None,
                access_scale: None,
            },
            obs: VmObservation {
                share_units: share,
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_floor_raises_the_minimum_for_its_decisions_then_expires() {
        let mut f = ReleaseFloors::default();
        f.record("a", 6);
        for k in 0..FLOOR_DECISIONS {
            let mut views = vec![vm("a", 1, 8, 6), vm("b", 1, 8, 4)];
            let notes = f.apply(&mut views, 12);
            assert_eq!(views[0].spec.min_units, 6, "decision {k}");
            assert_eq!(views[1].spec.min_units, 1);
            assert!(notes[0].contains("held at 6 units"), "{notes:?}");
        }
        let mut views = vec![vm("a", 1, 8, 6), vm("b", 1, 8, 4)];
        assert!(f.apply(&mut views, 12).is_empty());
        assert_eq!(views[0].spec.min_units, 1);
        assert_eq!(f.get("a"), None);
    }

    #[test]
    fn a_vm_that_released_after_all_or_went_away_loses_its_floor() {
        let mut f = ReleaseFloors::default();
        f.record("a", 6);
        f.record("gone", 3);
        let mut views = vec![vm("a", 1, 8, 5)];
        let notes = f.apply(&mut views, 12);
        assert_eq!(views[0].spec.min_units, 1);
        assert!(notes[0].contains("released below its floor"));
        assert_eq!((f.get("a"), f.get("gone")), (None, None));
        f.record("b", 2);
        f.forget("b");
        assert_eq!(f.get("b"), None);
    }

    #[test]
    fn floors_that_do_not_fit_the_budget_are_not_applied() {
        let mut f = ReleaseFloors::default();
        f.record("a", 7);
        f.record("b", 7);
        let mut views = vec![vm("a", 1, 8, 7), vm("b", 1, 8, 7)];
        let notes = f.apply(&mut views, 12);
        assert_eq!((views[0].spec.min_units, views[1].spec.min_units), (1, 1));
        assert!(notes[0].contains("not applied"), "{notes:?}");
    }

    #[test]
    fn a_floor_never_exceeds_the_tier() {
        let mut f = ReleaseFloors::default();
        f.record("a", 9);
        let mut views = vec![vm("a", 1, 8, 9)];
        f.apply(&mut views, 12);
        assert_eq!(views[0].spec.min_units, 8);
    }
}
