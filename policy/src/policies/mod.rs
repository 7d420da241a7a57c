//! Policies: one trait, three plug-ins.

use crate::model::{Allocation, HostView, PolicyError};

pub mod hotness;
pub mod mtat;
pub mod reserve;
pub mod static_split;

pub use hotness::Hotness;
pub use mtat::{BeSplit, Mtat, MtatConfig};
pub use static_split::StaticSplit;

/// A fast-memory policy: from what was measured, the share each VM should
/// hold. Called once per interval; may keep state (learning, history).
pub trait Policy: Send {
    /// Name used on the command line, in logs and metrics.
    fn name(&self) -> &'static str;
    /// Decides the targets. The caller checks the result with
    /// [`HostView::check_allocation`] before enforcing anything.
    fn decide(&mut self, view: &HostView) -> Result<Allocation, PolicyError>;
}

/// Runs `policy` and refuses any answer that breaks a bound or the budget.
pub fn decide_checked(policy: &mut dyn Policy, view: &HostView) -> Result<Allocation, PolicyError> {
    view.check_feasible()?;
    let alloc = policy.decide(view)?;
    view.check_allocation(&alloc)?;
    Ok(alloc)
}

/// Policy names the command line accepts.
pub const POLICY_NAMES: [&str; 3] = ["static", "hotness", "mtat"];
