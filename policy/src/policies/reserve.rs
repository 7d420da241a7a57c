//! Provisioning a latency-critical VM ahead of the next step of a rising
//! load (ours, not in the MTAT paper).
//!
//! A reactive controller cannot meet the SLO in the first windows of a load
//! step: the violation must be seen before the share grows, and the growth
//! takes slices of p_max/M each. Loads that rise in steps (the paper's Fig. 7,
//! a morning ramp) rise again soon after a rise; so for `hold_s` after a rise
//! of at least `min_rise`, the LC VM holds the share it would need one more
//! such step up. That share comes from what was seen: the smallest share at
//! which the SLO held at a load at least that high, remembered for
//! `memory_s`; a load never met before gets the most the VM may hold. A
//! constant or falling load gets no reserve, so the learned controller alone
//! sizes the VM there.

/// Parameters of [`RiseReserve`].
#[derive(Clone, Debug)]
pub struct ReserveConfig {
    /// Smallest rise of the load signal between two decisions that counts
    /// as a step (the signal is the access count over its scale, 1 at
    /// peak); well above what noise moves an interval's mean.
    pub min_rise: f64,
    /// How long after a rise the next one is provisioned for, seconds.
    pub hold_s: f64,
    /// How long a share that met the SLO is remembered, seconds.
    pub memory_s: f64,
    /// Loads within this much of the forecast count as "at least as high"
    /// (an interval's mean load is itself measured with noise).
    pub tolerance: f64,
}

impl Default for ReserveConfig {
    fn default() -> Self {
        Self {
            min_rise: 0.05,
            hold_s: 60.0,
            memory_s: 3600.0,
            tolerance: 0.01,
        }
    }
}

/// A share that met the SLO at a load.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Met {
    load: f64,
    share: u64,
    at_s: f64,
}

/// One LC VM's load trend and the shares that met its SLO.
#[derive(Clone, Debug, Default)]
pub struct RiseReserve {
    cfg: ReserveConfig,
    /// Shares that met the SLO, none dominated by another (a higher or
    /// equal load met with a smaller or equal share).
    met: Vec<Met>,
    last_load: Option<f64>,
    last_clock_s: Option<f64>,
    /// Rise accumulated over consecutive decisions that saw the load rise.
    rising: f64,
    /// The last completed rise.
    last_step: f64,
    last_rise_s: Option<f64>,
}

impl RiseReserve {
    /// A reserve with `cfg`.
    pub fn new(cfg: ReserveConfig) -> Self {
        Self {
            cfg,
            ..Default::default()
        }
    }

    /// Records a decision's inputs: the load signal over the last interval,
    /// the share the VM held while it was measured and whether the SLO
    /// held. Non-finite loads are ignored; a clock that went back (a new
    /// simulation, a stepped wall clock) starts over.
    pub fn observe(&mut self, now_s: f64, load: f64, share: u64, slo_met: bool) {
        if !load.is_finite() || !now_s.is_finite() {
            return;
        }
        if self.last_clock_s.is_some_and(|c| now_s < c) {
            *self = Self::new(self.cfg.clone());
        }
        self.last_clock_s = Some(now_s);
        if let Some(prev) = self.last_load {
            let d = load - prev;
            if d >= self.cfg.min_rise {
                self.rising += d;
                self.last_rise_s = Some(now_s);
            } else if d <= -self.cfg.min_rise {
                // Falling: nothing to provision for.
                self.rising = 0.0;
                self.last_step = 0.0;
                self.last_rise_s = None;
            } else if self.rising > 0.0 {
                self.last_step = self.rising;
                self.rising = 0.0;
            }
        }
        self.last_load = Some(load);
        let memory = self.cfg.memory_s;
        self.met.retain(|m| now_s - m.at_s <= memory);
        if slo_met {
            let new = Met {
                load,
                share,
                at_s: now_s,
            };
            if !self
                .met
                .iter()
                .any(|m| m.load >= new.load && m.share <= new.share)
            {
                self.met
                    .retain(|m| !(m.load <= new.load && m.share >= new.share));
                self.met.push(new);
            }
        }
    }

    /// The share to hold now for one more step up, if the load rose within
    /// the last `hold_s` (`None`: no rise under way).
    pub fn floor(&self, now_s: f64, max_units: u64) -> Option<u64> {
        let since = self.last_rise_s?;
        if now_s - since > self.cfg.hold_s {
            return None;
        }
        let step = self.last_step.max(self.rising);
        let want = self.last_load? + step - self.cfg.tolerance;
        Some(
            self.met
                .iter()
                .filter(|m| m.load >= want)
                .map(|m| m.share)
                .min()
                .unwrap_or(max_units)
                .min(max_units),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_reserve_at_a_constant_or_falling_load() {
        let mut r = RiseReserve::new(ReserveConfig::default());
        for (k, load) in [0.5, 0.51, 0.49, 0.5, 0.3, 0.1].into_iter().enumerate() {
            r.observe(5.0 * k as f64, load, 3, true);
            assert_eq!(r.floor(5.0 * k as f64, 28), None, "decision {k}");
        }
    }

    #[test]
    fn a_rise_provisions_the_share_that_met_one_step_higher() {
        let mut r = RiseReserve::new(ReserveConfig::default());
        // Seen before: 0.6 met with 8 units (and with 12), 0.8 with 19.
        r.observe(0.0, 0.6, 12, true);
        r.observe(5.0, 0.6, 8, true);
        r.observe(10.0, 0.8, 19, true);
        r.observe(15.0, 0.8, 17, false);
        r.observe(20.0, 0.2, 0, true);
        assert_eq!(r.floor(20.0, 28), None, "the load fell");
        // A step of 0.2 seen over two decisions (0.2 -> 0.3 -> 0.4): the
        // forecast is the rise so far, then the whole step once it ended.
        r.observe(25.0, 0.3, 0, true);
        assert_eq!(r.floor(25.0, 28), Some(8), "0.4 needs what 0.6 met with");
        r.observe(30.0, 0.4, 0, true);
        r.observe(35.0, 0.4, 0, true);
        assert_eq!(r.floor(35.0, 28), Some(8), "0.6 met with 8");
        r.observe(40.0, 0.6, 8, true);
        assert_eq!(r.floor(40.0, 28), Some(19), "0.8 met with 19, not 17");
    }

    #[test]
    fn a_clock_that_goes_back_starts_over() {
        let mut r = RiseReserve::new(ReserveConfig::default());
        r.observe(100.0, 0.2, 0, true);
        r.observe(105.0, 0.4, 0, true);
        assert_eq!(r.floor(105.0, 28), Some(28));
        r.observe(0.0, 0.4, 0, true);
        assert_eq!(r.floor(0.0, 28), None);
    }

    #[test]
    fn an_unmet_load_gets_the_most_the_vm_may_hold_and_the_reserve_expires() {
        let mut r = RiseReserve::new(ReserveConfig::default());
        r.observe(0.0, 0.6, 8, true);
        r.observe(5.0, 0.8, 19, true);
        // Rising 0.6 -> 0.8; the next step, 1.0, never met.
        assert_eq!(r.floor(5.0, 28), Some(28));
        r.observe(10.0, 0.8, 19, true);
        assert_eq!(r.floor(10.0, 28), Some(28), "held after the rise ended");
        assert_eq!(r.floor(66.0, 28), None, "hold_s after the rise");
    }
}
