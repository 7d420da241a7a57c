//! Early decisions on an SLO violation.
//!
//! Decisions come once per interval, but a load step between two of them
//! would otherwise violate the SLO until the next one. Between decisions
//! the daemon therefore reads each LC VM's latency source about once a
//! second, and a window over the SLO brings the next decision forward —
//! but only a window that *began after the last plan was fully applied*:
//! one that still covers seconds before the growth took effect says
//! nothing about whether the growth was enough, and reacting to it would
//! grow the VM twice for one step.
//!
//! A window's end is its timestamp (the file's `<unix_time>` or mtime, a
//! Prometheus sample's timestamp); its length is measured as the time
//! between two successive windows. A source without timestamps (a
//! Prometheus sample without one) never triggers an early decision.

/// What the daemon knows of one LC VM's latency windows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowClock {
    last_end: Option<f64>,
    length: Option<f64>,
}

impl WindowClock {
    /// Notes a window that ended at `end` (unix seconds); the length is
    /// the time since the previous distinct window.
    pub fn saw(&mut self, end: f64) {
        if !end.is_finite() {
            return;
        }
        match self.last_end {
            Some(prev) if end > prev => {
                self.length = Some(end - prev);
                self.last_end = Some(end);
            }
            // Same window again, or the clock went back (a restarted
            // writer): start measuring afresh.
            Some(prev) if end < prev => {
                self.length = None;
                self.last_end = Some(end);
            }
            Some(_) => {}
            None => self.last_end = Some(end),
        }
    }

    /// Whether the window that ended at `end` began at or after `since`
    /// (unknown length: no).
    pub fn began_after(&self, end: f64, since: f64) -> bool {
        self.length.is_some_and(|len| end - len >= since)
    }
}

/// Whether a reading of `p99_ms` for a window ending at `end` should bring
/// the next decision forward, given the SLO and when the last plan was
/// fully applied. Updates the clock with the reading.
pub fn should_react(
    clock: &mut WindowClock,
    p99_ms: f64,
    end: Option<f64>,
    slo_ms: f64,
    plan_done: f64,
) -> bool {
    let Some(end) = end else {
        return false;
    };
    clock.saw(end);
    p99_ms.is_finite() && p99_ms > slo_ms && clock.began_after(end, plan_done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_length_is_measured_between_distinct_windows() {
        let mut c = WindowClock::default();
        c.saw(100.0);
        assert!(!c.began_after(100.0, 0.0), "one window: length unknown");
        c.saw(100.0);
        assert!(!c.began_after(100.0, 0.0), "the same window twice");
        c.saw(105.0);
        assert!(c.began_after(105.0, 100.0));
        assert!(!c.began_after(105.0, 100.5));
        // A writer restarted with an older clock: measured afresh.
        c.saw(50.0);
        assert!(!c.began_after(50.0, 0.0));
        c.saw(f64::NAN);
        c.saw(51.0);
        assert!(c.began_after(51.0, 50.0));
    }

    #[test]
    fn reacts_only_to_a_violating_window_after_the_plan() {
        let mut c = WindowClock::default();
        // First reading: no window length yet, no reaction.
        assert!(!should_react(&mut c, 99.0, Some(10.0), 20.0, 0.0));
        // Over the SLO, window [10, 15) began after the plan (done at 9).
        assert!(should_react(&mut c, 99.0, Some(15.0), 20.0, 9.0));
        // Window [15, 20) still covers the plan that ended at 17: no.
        assert!(!should_react(&mut c, 99.0, Some(20.0), 20.0, 17.0));
        // Met SLO, or a non-finite value (counted at the decision): no.
        assert!(!should_react(&mut c, 19.0, Some(25.0), 20.0, 17.0));
        assert!(!should_react(&mut c, f64::NAN, Some(30.0), 20.0, 17.0));
        // No timestamp at all: never.
        assert!(!should_react(&mut c, 99.0, None, 20.0, 0.0));
    }
}
