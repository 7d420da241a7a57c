//! Pretraining the LC agent in the simulator (Algorithm 1 against the
//! workload models), so that the daemon starts from a policy that already
//! knows the shape of the problem and keeps learning online.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::policies::{Mtat, MtatConfig};
use crate::sac::SacError;
use crate::sim::{paper_scenario, LoadTrace, SimConfig, Simulator};

/// Training progress of one episode.
#[derive(Clone, Debug)]
pub struct EpisodeReport {
    /// Episode number.
    pub episode: usize,
    /// Its LC violation rate.
    pub violation_rate: f64,
    /// Mean LC share, units.
    pub mean_lc_share: f64,
}

/// A random load trace for one episode: constant, Fig. 7 (once), or a random
/// walk of steps of at most ±20 % (Fig. 7's step size) held 60–300 s.
///
/// The state cannot foresee a rise in load, so the actor keeps as much
/// reserve as the training traces' rises make worth its cost in reward:
/// loads that jumped across the whole range every 10–60 s (an earlier
/// version of this function) taught it to hold several times the smallest
/// share that meets the SLO. A rise the share cannot absorb is what the
/// guard is for.
pub fn random_trace(rng: &mut SmallRng) -> LoadTrace {
    match rng.random_range(0..3) {
        0 => LoadTrace::Constant(rng.random_range(0.1..1.0)),
        1 => {
            // Fig. 7 once, then its last level.
            let step_s = rng.random_range(20..60);
            let mut steps: Vec<(u64, f64)> = [0.2, 0.4, 0.6, 0.8, 1.0, 0.8, 0.6, 0.4, 0.2]
                .iter()
                .map(|&l| (step_s, l))
                .collect();
            steps.push((600, 0.2));
            LoadTrace::Steps(steps)
        }
        _ => {
            let mut load: f64 = rng.random_range(0.1..1.0);
            let mut steps = Vec::with_capacity(8);
            for _ in 0..8 {
                steps.push((rng.random_range(60..300), load));
                let delta = f64::from(rng.random_range(-2i32..=2)) * 0.1;
                load = (load + delta).clamp(0.1, 1.0);
            }
            LoadTrace::Steps(steps)
        }
    }
}

/// Trains a fresh agent for `episodes` simulated runs of `seconds` each
/// and returns the policy (explore off, learning on, as deployed).
pub fn pretrain(
    episodes: usize,
    seconds: u64,
    seed: u64,
    mut progress: impl FnMut(&EpisodeReport),
) -> Result<Mtat, SacError> {
    let mut rng = SmallRng::seed_from_u64(seed);
    // Decisions at the regular interval only: the agent learns what one
    // interval's action is worth; the daemon's early decision on a
    // violation is layered on top (docs/policy.md).
    let sim_cfg = SimConfig {
        react_to_violations: false,
        ..Default::default()
    };
    // Without the rise reserve: the agent learns what its own actions are
    // worth (the reserve is layered on top when deployed, as the early
    // decision is).
    let mut policy = Mtat::new(MtatConfig {
        unit_bytes: sim_cfg.unit_bytes,
        explore: true,
        learn: true,
        rise_reserve: None,
        ..Default::default()
    })?;
    for episode in 0..episodes {
        let trace = random_trace(&mut rng);
        let cfg = SimConfig {
            seed: rng.random(),
            ..sim_cfg.clone()
        };
        let Ok(mut sim) = Simulator::new(cfg, paper_scenario(trace)) else {
            continue;
        };
        // Start from a random LC share, so that every region is visited.
        let mut shares = vec![0u64; sim.specs().len()];
        shares[0] = rng.random_range(0..=28);
        let rest = (32 - shares[0]) / 4;
        shares[1..].iter_mut().for_each(|s| *s = rest);
        sim.set_shares(&shares);
        let r = sim.run(Some(&mut policy), seconds);
        progress(&EpisodeReport {
            episode,
            violation_rate: r.violation_rate(),
            mean_lc_share: r.lc_share.iter().sum::<u64>() as f64 / r.lc_share.len().max(1) as f64,
        });
    }
    policy.set_mode(false, true);
    Ok(policy)
}
