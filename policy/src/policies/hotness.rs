//! `hotness`: FMem in proportion to each VM's measured access rate, the
//! hypervisor-side analogue of frequency-based tiering (MEMTIS, TPP) that
//! the paper compares against.

use crate::model::{weighted_fill, Allocation, HostView, PolicyError, VmView};
use crate::policies::Policy;

/// Access-rate-proportional split.
#[derive(Clone, Debug, Default)]
pub struct Hotness;

impl Policy for Hotness {
    fn name(&self) -> &'static str {
        "hotness"
    }

    fn decide(&mut self, view: &HostView) -> Result<Allocation, PolicyError> {
        let mut notes = Vec::new();
        let weights = access_weights(view.vms.iter(), &mut notes);
        let bounds: Vec<(u64, u64)> = view
            .vms
            .iter()
            .map(|v| (v.spec.min_units, v.spec.max_units))
            .collect();
        let shares = weighted_fill(view.budget_units, &bounds, &weights);
        Ok(Allocation {
            targets: view
                .vms
                .iter()
                .zip(shares)
                .map(|(v, s)| (v.spec.name.clone(), s))
                .collect(),
            notes,
        })
    }
}

/// Each VM's weight for an access-rate-proportional split: its measured
/// access rate, or, without a usable one, the mean of the VMs that have
/// one (noted).
pub(crate) fn access_weights<'a>(
    vms: impl Iterator<Item = &'a VmView> + Clone,
    notes: &mut Vec<String>,
) -> Vec<f64> {
    let rate = |v: &VmView| v.obs.access_rate.filter(|r| r.is_finite() && *r >= 0.0);
    let known: Vec<f64> = vms.clone().filter_map(rate).collect();
    // A VM without a usable rate is weighted like the average VM.
    let fallback = if known.is_empty() {
        1.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    vms.map(|v| {
        rate(v).unwrap_or_else(|| {
            notes.push(format!(
                "{}: no access rate, weighted as the mean",
                v.spec.name
            ));
            fallback
        })
    })
    .collect()
}
