//! Whether the host's KVM gives the guest two-dimensional paging (EPT/NPT)
//! or shadows its page tables.
//!
//! Read tracking depends on it: with EPT/NPT the CPU sets the guest's
//! accessed bits itself and a guest TLB flush is enough to see the next
//! access, while KVM's shadow MMU (`ept=0`/`npt=0`, also what a nested
//! hypervisor without nested paging uses) keeps its shadow entries across
//! such a flush, so only dropping them through the MMU notifier re-arms.

use std::path::Path;

/// Module parameters that say whether KVM uses EPT (Intel) or NPT (AMD).
const TDP_PARAMS: [&str; 2] = [
    "/sys/module/kvm_intel/parameters/ept",
    "/sys/module/kvm_amd/parameters/npt",
];

/// Reads the loaded vendor module's parameter: `Some(true)` for EPT/NPT,
/// `Some(false)` for shadow paging, `None` when neither can be read.
pub fn host_uses_tdp() -> Option<bool> {
    TDP_PARAMS
        .iter()
        .find_map(|p| std::fs::read_to_string(Path::new(p)).ok())
        .and_then(|v| parse_bool_param(&v))
}

/// Parses a kernel boolean module parameter ("Y"/"N", "1"/"0").
fn parse_bool_param(v: &str) -> Option<bool> {
    match v.trim() {
        "Y" | "y" | "1" => Some(true),
        "N" | "n" | "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bool_param;

    #[test]
    fn parses_kernel_booleans() {
        assert_eq!(parse_bool_param("Y\n"), Some(true));
        assert_eq!(parse_bool_param("1\n"), Some(true));
        assert_eq!(parse_bool_param("N\n"), Some(false));
        assert_eq!(parse_bool_param("0"), Some(false));
        assert_eq!(parse_bool_param(""), None);
        assert_eq!(parse_bool_param("maybe"), None);
    }
}
