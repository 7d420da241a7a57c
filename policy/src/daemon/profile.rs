//! `tier-policy profile`: builds a best-effort VM's throughput-against-FMem
//! profile by sweeping its FMem balloon and reading a throughput source
//! (a file the workload rewrites: `<ops_per_s> [<unix_time>]`).

use std::path::Path;
use std::time::{Duration, Instant};

use super::signals::read_latency_file;
use super::vmm::Vmm;
use crate::profile::Profile;

/// Sweep parameters.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// Points after 0 (shares 0, tier/steps, …, tier).
    pub steps: u64,
    /// Measurement window after each resize completes.
    pub settle: Duration,
    /// Longest wait for the balloon to reach a target.
    pub timeout: Duration,
}

/// Sweeps and returns the profile (restoring the VM's share at the end).
/// Measured dips (noise) are flattened to the running maximum, since a
/// profile must be monotone; how many were flattened is returned too.
pub fn sweep(vmm: &Vmm, throughput: &Path, s: &Sweep) -> Result<(Profile, usize), String> {
    let tier = vmm.fmem_tier().map_err(|e| e.to_string())?;
    let start = vmm.sample(tier).map_err(|e| e.to_string())?;
    let original = start.target_share_bytes();
    let steps = s.steps.max(1);
    let mut points = Vec::new();
    let result = (|| {
        for k in 0..=steps {
            let share = (tier / steps * k) & !4095;
            vmm.resize_share(tier, share, start.smem_target)
                .map_err(|e| e.to_string())?;
            let deadline = Instant::now() + s.timeout;
            loop {
                let now = vmm.sample(tier).map_err(|e| e.to_string())?;
                if now.fmem_balloon.0 == now.fmem_balloon.1 {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "balloon did not reach {share} bytes of FMem in {:?}",
                        s.timeout
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            // The measurement window itself, not a synchronisation wait.
            std::thread::sleep(s.settle);
            let t = read_latency_file(throughput, s.settle.as_secs_f64().max(1.0))
                .map_err(|e| format!("throughput source: {e}"))?;
            log::info!("FMem {share} bytes: throughput {t}");
            points.push((share, t));
        }
        Ok(())
    })();
    if let Err(e) = vmm.resize_share(tier, original, start.smem_target) {
        log::error!("could not restore the VM's FMem share of {original} bytes: {e}");
    }
    result?;
    let mut flattened = 0;
    for i in 1..points.len() {
        if points[i].1 < points[i - 1].1 {
            points[i].1 = points[i - 1].1;
            flattened += 1;
        }
    }
    Profile::new(points)
        .map(|p| (p, flattened))
        .map_err(|e| e.to_string())
}
