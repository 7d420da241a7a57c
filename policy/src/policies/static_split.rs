//! `static`: the budget split equally (within each VM's bounds).

use crate::model::{weighted_fill, Allocation, HostView, PolicyError};
use crate::policies::Policy;

/// Equal split, whatever the load.
#[derive(Clone, Debug, Default)]
pub struct StaticSplit;

impl Policy for StaticSplit {
    fn name(&self) -> &'static str {
        "static"
    }

    fn decide(&mut self, view: &HostView) -> Result<Allocation, PolicyError> {
        let bounds: Vec<(u64, u64)> = view
            .vms
            .iter()
            .map(|v| (v.spec.min_units, v.spec.max_units))
            .collect();
        let shares = weighted_fill(view.budget_units, &bounds, &vec![1.0; bounds.len()]);
        Ok(Allocation {
            targets: view
                .vms
                .iter()
                .zip(shares)
                .map(|(v, s)| (v.spec.name.clone(), s))
                .collect(),
            notes: Vec::new(),
        })
    }
}
