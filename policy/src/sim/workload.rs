//! Workload models for the simulator, calibrated from the MTAT paper
//! where it gives numbers (see docs/policy.md, "Simulator calibration",
//! for each number and its source; the rest are our assumptions).

use crate::profile::{Profile, ProfileError};

/// A latency-critical service (a key-value server).
#[derive(Clone, Debug)]
pub struct LcModel {
    /// VM name.
    pub name: String,
    /// SLO, ms (Table 1: Redis 20 ms).
    pub slo_ms: f64,
    /// FMem at which all of its hot data is in FMem (FMEM_ALL), units.
    pub hot_units: u64,
    /// Sustainable load with no FMem, as a fraction of the FMEM_ALL
    /// maximum (calibrated so that `hotness` shows Table 4's pattern).
    pub smem_capacity: f64,
    /// Memory accesses per second at the FMEM_ALL maximum load.
    pub peak_access_rate: f64,
}

impl LcModel {
    /// Fraction of its hot data in FMem with `share` units.
    pub fn fmem_fraction(&self, share: u64) -> f64 {
        (share as f64 / self.hot_units.max(1) as f64).min(1.0)
    }

    /// Largest load (fraction of the FMEM_ALL maximum) that meets the SLO
    /// with `share` units: rises linearly with the FMem fraction (Fig. 1:
    /// throughput falls monotonically as FMem shrinks).
    pub fn capacity(&self, share: u64) -> f64 {
        self.smem_capacity + (1.0 - self.smem_capacity) * self.fmem_fraction(share)
    }

    /// p99 latency, ms, at `load` with `share` units: a queue whose p99 is
    /// SLO/10 when idle and reaches the SLO exactly at the capacity (the
    /// knee, where the paper sets its SLOs, Fig. 1), saturating at 50×SLO.
    pub fn p99_ms(&self, load: f64, share: u64) -> f64 {
        let rho = 0.9 * load / self.capacity(share);
        if rho >= 0.998 {
            return 50.0 * self.slo_ms;
        }
        (0.1 * self.slo_ms / (1.0 - rho)).min(50.0 * self.slo_ms)
    }

    /// Fraction of accesses served from FMem: skewed, so the hottest data
    /// (placed first) takes more than its size's share.
    pub fn fmem_access_ratio(&self, share: u64) -> f64 {
        self.fmem_fraction(share).sqrt()
    }
}

/// A best-effort batch job.
#[derive(Clone, Debug)]
pub struct BeModel {
    /// VM name.
    pub name: String,
    /// Its memory, units (Table 2's RSS in GB).
    pub rss_units: u64,
    /// NP with no FMem.
    pub floor: f64,
    /// Curvature of NP in the FMem fraction x: floor + (1-floor)(1-(1-x)^k).
    pub k: f64,
    /// Throughput with all its memory in FMem (arbitrary ops/s).
    pub full_throughput: f64,
    /// Memory accesses per second (what `hotness` sees).
    pub access_rate: f64,
}

impl BeModel {
    /// Normalised performance (eq. 3) with `share` units.
    pub fn np(&self, share: u64) -> f64 {
        let x = (share as f64 / self.rss_units.max(1) as f64).min(1.0);
        self.floor + (1.0 - self.floor) * (1.0 - (1.0 - x).powf(self.k))
    }

    /// Its offline profile at every unit from 0 to its RSS (§4: 1 GB steps).
    pub fn profile(&self, unit_bytes: u64) -> Result<Profile, ProfileError> {
        let points = (0..=self.rss_units)
            .map(|m| (m * unit_bytes, self.full_throughput * self.np(m)))
            .collect();
        Profile::new(points)
    }
}

/// The paper's setting as models: Redis (Table 1) with four BE jobs
/// (Table 2) on 32 GiB of FMem in 1 GiB units.
pub fn paper_lc(name: &str) -> LcModel {
    LcModel {
        name: name.into(),
        slo_ms: 20.0,
        hot_units: 28,
        smem_capacity: 0.49,
        peak_access_rate: 0.3e9,
    }
}

/// The four BE jobs of Table 2 (RSS from the table; sensitivity and
/// access rates are our assumptions).
pub fn paper_be() -> Vec<BeModel> {
    let be = |name: &str, rss, floor, k, rate| BeModel {
        name: name.into(),
        rss_units: rss,
        floor,
        k,
        full_throughput: 100.0,
        access_rate: rate,
    };
    vec![
        be("sssp", 35, 0.45, 2.0, 1.2e9),
        be("bfs", 35, 0.55, 2.0, 1.0e9),
        be("pr", 36, 0.40, 1.5, 1.4e9),
        be("xsbench", 32, 0.30, 3.0, 0.6e9),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lc_knee_is_at_the_slo_with_all_fmem() {
        let m = paper_lc("lc");
        assert!((m.p99_ms(1.0, 28) - 20.0).abs() < 1e-9);
        assert!(m.p99_ms(0.99, 28) < 20.0);
        assert!(m.p99_ms(1.01, 28) > 20.0);
        assert!(m.p99_ms(0.6, 0) > 20.0);
        assert!(m.capacity(10) > m.capacity(5));
    }

    #[test]
    fn be_profiles_are_valid_and_monotone() {
        for b in paper_be() {
            let p = b.profile(1 << 30).unwrap();
            assert!((p.np(0) - b.floor).abs() < 1e-9);
            assert_eq!(p.np(b.rss_units << 30), 1.0);
        }
    }
}
