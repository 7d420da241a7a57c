//! Page-access statistics as in the vmmload paper §5.2: a per-page
//! exponential moving average of access frequency, hot/warm/cold per
//! interval (a page untouched for `cold_after` is cold), reads versus writes
//! per region, 2 MiB huge-page utilisation and footprint over time.
//!
//! Pure logic: it receives one `Sample` per interval and knows nothing of KVM.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

/// Classification thresholds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StatsConfig {
    /// Interval length in milliseconds.
    pub interval_ms: u64,
    /// A page untouched this long is cold.
    pub cold_after_ms: u64,
    /// EMA weight of the newest interval.
    pub ema_alpha: f64,
    /// EMA at or above which a page is hot.
    pub hot_threshold: f64,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            interval_ms: 250,
            cold_after_ms: 2000,
            ema_alpha: 0.5,
            hot_threshold: 0.5,
        }
    }
}

/// One interval's raw observations (page addresses are 4 KiB aligned).
#[derive(Debug, Default, Clone)]
pub struct Sample {
    /// Milliseconds since start.
    pub t_ms: f64,
    /// Pages written (may repeat).
    pub written: Vec<u64>,
    /// Pages whose accessed bit was set (may repeat).
    pub accessed: Vec<u64>,
    /// Mapped guest frames.
    pub mapped_pages: u64,
    /// Ring-full exits during the interval.
    pub ring_full: u64,
    /// Whether reads were tracked.
    pub reads_tracked: bool,
}

/// Per-page history.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PageStat {
    /// Exponential moving average of "accessed in the interval".
    pub ema: f64,
    /// Intervals with a read-only access.
    pub read_intervals: u32,
    /// Intervals with a write.
    pub write_intervals: u32,
    /// First interval index seen.
    pub first: u32,
    /// Last interval index accessed.
    pub last: u32,
}

/// Page class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Frequently accessed.
    Hot,
    /// Accessed recently but not often.
    Warm,
    /// Not accessed for `cold_after`.
    Cold,
}

/// One row of the time series.
#[derive(Debug, Clone, Serialize)]
pub struct IntervalRow {
    /// Interval index.
    pub index: u32,
    /// Milliseconds since start at the end of the interval.
    pub t_ms: f64,
    /// Pages accessed (read or written).
    pub accessed: u64,
    /// Pages written.
    pub written: u64,
    /// Pages only read.
    pub read_only: u64,
    /// Hot pages.
    pub hot: u64,
    /// Warm pages.
    pub warm: u64,
    /// Cold pages.
    pub cold: u64,
    /// Pages touched so far (footprint).
    pub footprint: u64,
    /// Guest frames mapped by vmmload.
    pub mapped: u64,
    /// Ring-full exits in the interval.
    pub ring_full: u64,
    /// 2 MiB regions touched in the interval.
    pub huge_regions: u64,
    /// Mean fraction of touched 4 KiB pages per touched 2 MiB region.
    pub huge_util_mean: f64,
}

/// Per-2 MiB-region history.
#[derive(Debug, Clone, Default)]
pub struct HugeStat {
    ever: [u64; 8],
    /// Most pages touched in one interval.
    pub max_per_interval: u32,
    /// Sum over intervals of pages touched (for the mean).
    pub sum_per_interval: u64,
    /// Intervals in which the region was touched.
    pub intervals: u32,
}

impl HugeStat {
    /// Distinct 4 KiB pages ever touched.
    pub fn ever(&self) -> u32 {
        self.ever.iter().map(|w| w.count_ones()).sum()
    }
}

/// All statistics.
#[derive(Debug, Default)]
pub struct Stats {
    /// Thresholds.
    pub cfg: StatsConfig,
    /// Per-page history, by page address.
    pub pages: BTreeMap<u64, PageStat>,
    /// Time series.
    pub rows: Vec<IntervalRow>,
    /// Per interval: (page, 1 = read only, 2 = written), for the heat map.
    pub heat: Vec<Vec<(u64, u8)>>,
    /// Per 2 MiB region (address >> 21).
    pub huge: BTreeMap<u64, HugeStat>,
    /// Mappings at the last sample: (start, end, label).
    pub regions: Vec<(u64, u64, String)>,
    /// Whether reads were tracked.
    pub reads_tracked: bool,
}

/// Most interval heat rows kept (older ones are merged pairwise).
const MAX_HEAT_ROWS: usize = 4096;

impl Stats {
    /// Empty statistics with thresholds.
    pub fn new(cfg: StatsConfig) -> Stats {
        Stats {
            cfg,
            ..Default::default()
        }
    }

    /// Remembers the current mappings for region labels.
    pub fn set_regions(&mut self, r: Vec<(u64, u64, String)>) {
        self.regions = r;
    }

    /// Classifies a page at interval `now`.
    pub fn class(&self, p: &PageStat, now: u32) -> Class {
        let idle_ms = (now - p.last) as u64 * self.cfg.interval_ms;
        if idle_ms >= self.cfg.cold_after_ms {
            Class::Cold
        } else if p.ema >= self.cfg.hot_threshold {
            Class::Hot
        } else {
            Class::Warm
        }
    }

    /// Adds one interval.
    pub fn record(&mut self, s: Sample) {
        let idx = self.rows.len() as u32;
        self.reads_tracked |= s.reads_tracked;
        let written: HashSet<u64> = s.written.iter().copied().collect();
        let mut touched: HashSet<u64> = s.accessed.iter().copied().collect();
        touched.extend(&written);
        let a = self.cfg.ema_alpha;
        for p in self.pages.values_mut() {
            p.ema *= 1.0 - a;
        }
        let mut heat = Vec::with_capacity(touched.len());
        let mut per_region: BTreeMap<u64, u32> = BTreeMap::new();
        for &pg in &touched {
            let w = written.contains(&pg);
            let e = self.pages.entry(pg).or_insert(PageStat {
                ema: 0.0,
                read_intervals: 0,
                write_intervals: 0,
                first: idx,
                last: idx,
            });
            e.ema += a;
            e.last = idx;
            if w {
                e.write_intervals += 1;
            } else {
                e.read_intervals += 1;
            }
            heat.push((pg, if w { 2 } else { 1 }));
            *per_region.entry(pg >> 21).or_default() += 1;
            let h = self.huge.entry(pg >> 21).or_default();
            let bit = (pg >> 12) & 511;
            h.ever[(bit / 64) as usize] |= 1 << (bit % 64);
        }
        heat.sort_unstable();
        for (&r, &n) in &per_region {
            let h = self.huge.entry(r).or_default();
            h.max_per_interval = h.max_per_interval.max(n);
            h.sum_per_interval += n as u64;
            h.intervals += 1;
        }
        let (mut hot, mut warm, mut cold) = (0, 0, 0);
        for p in self.pages.values() {
            match self.class(p, idx) {
                Class::Hot => hot += 1,
                Class::Warm => warm += 1,
                Class::Cold => cold += 1,
            }
        }
        let huge_util_mean = if per_region.is_empty() {
            0.0
        } else {
            per_region.values().map(|&n| n as f64 / 512.0).sum::<f64>() / per_region.len() as f64
        };
        self.rows.push(IntervalRow {
            index: idx,
            t_ms: s.t_ms,
            accessed: touched.len() as u64,
            written: written.len() as u64,
            read_only: (touched.len() - written.len()) as u64,
            hot,
            warm,
            cold,
            footprint: self.pages.len() as u64,
            mapped: s.mapped_pages,
            ring_full: s.ring_full,
            huge_regions: per_region.len() as u64,
            huge_util_mean,
        });
        self.heat.push(heat);
        if self.heat.len() > MAX_HEAT_ROWS {
            // Keep memory bounded for long runs: merge the two oldest rows.
            let b = self.heat.remove(1);
            self.heat[0].extend(b);
        }
    }

    /// Label of the mapping holding `addr`.
    pub fn region_of(&self, addr: u64) -> &str {
        let i = self.regions.partition_point(|r| r.0 <= addr);
        if i > 0 && self.regions[i - 1].1 > addr {
            &self.regions[i - 1].2
        } else {
            "[unmapped]"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(written: &[u64], accessed: &[u64]) -> Sample {
        Sample {
            written: written.to_vec(),
            accessed: accessed.to_vec(),
            reads_tracked: true,
            ..Default::default()
        }
    }

    #[test]
    fn page_cools_down_after_two_seconds_of_250ms_intervals() {
        let mut s = Stats::new(StatsConfig::default());
        s.record(sample(&[0x1000], &[0x1000]));
        assert_eq!(s.rows[0].hot, 1);
        for _ in 0..7 {
            s.record(sample(&[], &[]));
        }
        // 7 idle intervals = 1.75 s: not yet cold.
        assert_eq!(s.rows[7].cold, 0);
        assert_eq!(s.rows[7].warm, 1);
        s.record(sample(&[], &[]));
        assert_eq!(s.rows[8].cold, 1);
    }

    #[test]
    fn reads_and_writes_are_counted_separately() {
        let mut s = Stats::new(StatsConfig::default());
        s.record(sample(&[0x2000], &[0x2000, 0x3000]));
        let r = &s.rows[0];
        assert_eq!((r.accessed, r.written, r.read_only), (2, 1, 1));
        assert_eq!(s.pages[&0x2000].write_intervals, 1);
        assert_eq!(s.pages[&0x3000].read_intervals, 1);
    }

    #[test]
    fn one_page_of_a_2mib_region_is_1_of_512() {
        let mut s = Stats::new(StatsConfig::default());
        s.record(sample(&[0x4000_0000 + 0x5000], &[]));
        let h = &s.huge[&(0x4000_0000 >> 21)];
        assert_eq!(h.ever(), 1);
        assert_eq!(h.max_per_interval, 1);
        assert!((s.rows[0].huge_util_mean - 1.0 / 512.0).abs() < 1e-12);
    }

    #[test]
    fn region_lookup_uses_last_mappings() {
        let mut s = Stats::new(StatsConfig::default());
        s.set_regions(vec![
            (0x1000, 0x3000, "a".into()),
            (0x5000, 0x6000, "b".into()),
        ]);
        assert_eq!(s.region_of(0x2000), "a");
        assert_eq!(s.region_of(0x4000), "[unmapped]");
        assert_eq!(s.region_of(0x5000), "b");
    }
}
