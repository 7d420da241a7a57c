//! `hotness`: FMem in proportion to each VM's measured access rate, the
//! hypervisor-side analogue of frequency-based tiering (MEMTIS, TPP) that
//! the paper compares against.

use crate::model::{weighted_fill, Allocation, HostView, PolicyError};
use crate::policies::Policy;

/// Access-rate-proportional split.
#[derive(Clone, Debug, Default)]
pub struct Hotness;

impl Policy for Hotness {
    fn name(&self) -> &'static str {
        "hotness"
    }

    fn decide(&mut self, view: &HostView) -> Result<Allocation, PolicyError> {
        let rates: Vec<Option<f64>> = view
            .vms
            .iter()
            .map(|v| v.obs.access_rate.filter(|r| r.is_finite() && *r >= 0.0))
            .collect();
        let known: Vec<f64> = rates.iter().flatten().copied().collect();
        // A VM without a usable rate is weighted like the average VM.
        let fallback = if known.is_empty() {
            1.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        let mut notes = Vec::new();
        let weights: Vec<f64> = view
            .vms
            .iter()
            .zip(&rates)
            .map(|(v, r)| {
                r.unwrap_or_else(|| {
                    notes.push(format!(
                        "{}: no access rate, weighted as the mean",
                        v.spec.name
                    ));
                    fallback
                })
            })
            .collect();
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
