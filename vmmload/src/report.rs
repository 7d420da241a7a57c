//! Output: the JSON report, the CSV time series, the heat-map PNG (address ×
//! time coloured by read/write, with hot/warm/cold above it, like Fig. 4 of
//! the vmmload paper) and the summary table on stderr.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::process::{Backend, Ending};
use crate::stats::{Class, Stats};

/// Facts about the run.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// Program and arguments.
    pub command: Vec<String>,
    /// How it ended.
    pub ending: Ending,
    /// Wall time.
    pub elapsed: Duration,
    /// Backend, if a syscall happened.
    pub backend: Option<Backend>,
    /// Write tracking name.
    pub writes: String,
    /// Read tracking name.
    pub reads: String,
    /// Ring-full exits.
    pub ring_full_events: u64,
    /// System calls.
    pub syscalls: u64,
    /// vCPU exits.
    pub exits: u64,
    /// Time spent handling system calls in vmmload.
    pub syscall_ns: u64,
    /// In-guest read cache: refills (exits) and bytes served.
    pub read_cache: (u64, u64),
    /// Per-call / per-exit profile (`profile::Profile::json`).
    pub profile: serde_json::Value,
}

/// Where to write.
pub struct Outputs<'a> {
    /// JSON report.
    pub json: Option<&'a Path>,
    /// CSV time series.
    pub csv: Option<&'a Path>,
    /// Heat map.
    pub png: Option<&'a Path>,
}

#[derive(Serialize)]
struct PageOut {
    addr: String,
    region: String,
    read_intervals: u32,
    write_intervals: u32,
    ema: f64,
    class: Class,
}

#[derive(Serialize, Default)]
struct RegionOut {
    region: String,
    pages_touched: u64,
    pages_written: u64,
    read_intervals: u64,
    write_intervals: u64,
    read_write_ratio: Option<f64>,
}

#[derive(Serialize)]
struct HugeOut {
    base: String,
    region: String,
    pages_touched: u32,
    utilisation: f64,
    max_pages_per_interval: u32,
    mean_pages_per_interval: f64,
    intervals: u32,
}

fn ending_json(e: &Ending) -> serde_json::Value {
    match e {
        Ending::Exit(c) => serde_json::json!({"kind": "exit", "status": c}),
        Ending::Signal(s, m) => {
            serde_json::json!({"kind": "signal", "signal": s, "status": 128 + s, "message": m})
        }
        Ending::Error(m) => serde_json::json!({"kind": "error", "message": m}),
        Ending::Timeout => serde_json::json!({"kind": "timeout"}),
    }
}

fn regions(st: &Stats) -> Vec<RegionOut> {
    let mut m: BTreeMap<String, RegionOut> = BTreeMap::new();
    for (&a, p) in &st.pages {
        let r = m.entry(st.region_of(a).to_string()).or_default();
        r.pages_touched += 1;
        if p.write_intervals > 0 {
            r.pages_written += 1;
        }
        r.read_intervals += p.read_intervals as u64;
        r.write_intervals += p.write_intervals as u64;
    }
    let mut v: Vec<RegionOut> = m
        .into_iter()
        .map(|(k, mut r)| {
            r.region = k;
            r.read_write_ratio =
                (r.write_intervals > 0).then(|| r.read_intervals as f64 / r.write_intervals as f64);
            r
        })
        .collect();
    v.sort_by_key(|r| std::cmp::Reverse(r.read_intervals + r.write_intervals));
    v
}

fn huge(st: &Stats) -> Vec<HugeOut> {
    st.huge
        .iter()
        .map(|(&r, h)| HugeOut {
            base: format!("{:#x}", r << 21),
            region: st.region_of(r << 21).to_string(),
            pages_touched: h.ever(),
            utilisation: h.ever() as f64 / 512.0,
            max_pages_per_interval: h.max_per_interval,
            mean_pages_per_interval: if h.intervals > 0 {
                h.sum_per_interval as f64 / h.intervals as f64
            } else {
                0.0
            },
            intervals: h.intervals,
        })
        .collect()
}

/// The JSON document.
pub fn json(info: &RunInfo, st: &Stats) -> serde_json::Value {
    let now = st.rows.len().saturating_sub(1) as u32;
    let pages: Vec<PageOut> = st
        .pages
        .iter()
        .map(|(&a, p)| PageOut {
            addr: format!("{a:#x}"),
            region: st.region_of(a).to_string(),
            read_intervals: p.read_intervals,
            write_intervals: p.write_intervals,
            ema: p.ema,
            class: st.class(p, now),
        })
        .collect();
    let written = st.pages.values().filter(|p| p.write_intervals > 0).count();
    let read_only = st.pages.values().filter(|p| p.write_intervals == 0).count();
    let peak_mapped = st.rows.iter().map(|r| r.mapped).max().unwrap_or(0);
    serde_json::json!({
        "command": info.command,
        "ending": ending_json(&info.ending),
        "elapsed_ms": info.elapsed.as_secs_f64() * 1000.0,
        "backend": info.backend.map(|b| match b { Backend::Pvm => "pvm", Backend::Standard => "standard-kvm" }),
        "write_tracking": info.writes,
        "read_tracking": info.reads,
        "config": st.cfg,
        "syscalls": info.syscalls,
        "exits": info.exits,
        "mean_syscall_handling_us": if info.syscalls > 0 { info.syscall_ns as f64 / info.syscalls as f64 / 1000.0 } else { 0.0 },
        "ring_full_events": info.ring_full_events,
        "read_cache": {"refills": info.read_cache.0, "bytes": info.read_cache.1},
        "profile": info.profile,
        "totals": {
            "pages_touched": st.pages.len(),
            "pages_written": written,
            "pages_read_only": read_only,
            "peak_mapped_frames": peak_mapped,
            "intervals": st.rows.len(),
        },
        "intervals": st.rows,
        "regions": regions(st),
        "huge_pages": huge(st),
        "pages": pages,
    })
}

/// CSV time series.
pub fn csv(st: &Stats) -> String {
    let mut s = String::from(
        "interval,t_ms,accessed,written,read_only,hot,warm,cold,footprint,mapped,ring_full,huge_regions,huge_util_mean\n",
    );
    for r in &st.rows {
        s.push_str(&format!(
            "{},{:.1},{},{},{},{},{},{},{},{},{},{},{:.6}\n",
            r.index,
            r.t_ms,
            r.accessed,
            r.written,
            r.read_only,
            r.hot,
            r.warm,
            r.cold,
            r.footprint,
            r.mapped,
            r.ring_full,
            r.huge_regions,
            r.huge_util_mean
        ));
    }
    s
}

/// Writes the requested files.
pub fn write_all(info: &RunInfo, st: &Stats, out: &Outputs) -> Result<(), String> {
    if let Some(p) = out.json {
        let doc = json(info, st);
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(p) = out.csv {
        std::fs::write(p, csv(st)).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(p) = out.png {
        crate::heatmap::draw(st, p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// `s` cut to its last `max - 1` characters behind an ellipsis if longer.
fn shorten(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let tail: String = s.chars().skip(n - (max - 1)).collect();
    format!("…{tail}")
}

/// Summary table on stderr.
pub fn summary(info: &RunInfo, st: &Stats) {
    let mut e = std::io::stderr().lock();
    let last = st.rows.last();
    let written = st.pages.values().filter(|p| p.write_intervals > 0).count();
    let _ = writeln!(
        e,
        "── vmmload summary ─────────────────────────────────────────────"
    );
    let _ = writeln!(
        e,
        " backend {} │ writes {} │ reads {}",
        match info.backend {
            Some(Backend::Pvm) => "pvm",
            Some(Backend::Standard) => "standard-kvm",
            None => "-",
        },
        info.writes,
        info.reads
    );
    let _ = writeln!(
        e,
        " {:.3} s │ {} syscalls │ {} exits │ {} intervals of {} ms │ {} ring-full",
        info.elapsed.as_secs_f64(),
        info.syscalls,
        info.exits,
        st.rows.len(),
        st.cfg.interval_ms,
        info.ring_full_events
    );
    let _ = writeln!(
        e,
        " footprint {} pages ({:.1} MiB): {} written, {} read-only{}",
        st.pages.len(),
        st.pages.len() as f64 / 256.0,
        written,
        st.pages.len() - written,
        if st.reads_tracked {
            ""
        } else {
            " (reads not tracked)"
        }
    );
    if let Some(r) = last {
        let _ = writeln!(
            e,
            " at exit: hot {} │ warm {} │ cold {}",
            r.hot, r.warm, r.cold
        );
    }
    let _ = writeln!(
        e,
        " {:<40} {:>7} {:>7} {:>9} {:>9}",
        "region", "pages", "written", "read-int", "write-int"
    );
    for r in regions(st).iter().take(8) {
        let name = shorten(&r.region, 40);
        let _ = writeln!(
            e,
            " {:<40} {:>7} {:>7} {:>9} {:>9}",
            name, r.pages_touched, r.pages_written, r.read_intervals, r.write_intervals
        );
    }
    let h = huge(st);
    if !h.is_empty() {
        let mean = h.iter().map(|x| x.utilisation).sum::<f64>() / h.len() as f64;
        let full = h.iter().filter(|x| x.pages_touched == 512).count();
        let _ = writeln!(
            e,
            " 2 MiB regions touched {} │ mean utilisation {:.1}% │ fully used {}",
            h.len(),
            mean * 100.0,
            full
        );
    }
    let _ = writeln!(
        e,
        "────────────────────────────────────────────────────────────────"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Sample, StatsConfig};

    #[test]
    fn long_region_names_are_shortened_on_char_boundaries() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("ééééééé", 4), "…ééé");
    }

    #[test]
    fn json_and_csv_describe_every_interval_and_page() {
        let mut st = Stats::new(StatsConfig::default());
        st.set_regions(vec![(0x1000, 0x3000, "[heap]".into())]);
        st.record(Sample {
            t_ms: 250.0,
            written: vec![0x1000],
            accessed: vec![0x1000, 0x2000],
            reads_tracked: true,
            ..Default::default()
        });
        let info = RunInfo {
            command: vec!["x".into()],
            ending: Ending::Exit(3),
            elapsed: Duration::from_millis(300),
            backend: Some(Backend::Pvm),
            writes: "dirty-ring(256 entries)".into(),
            reads: "off".into(),
            ring_full_events: 0,
            syscalls: 1,
            exits: 1,
            syscall_ns: 1000,
            read_cache: (0, 0),
            profile: serde_json::Value::Null,
        };
        let j = json(&info, &st);
        assert_eq!(j["ending"]["status"], 3);
        assert_eq!(j["totals"]["pages_written"], 1);
        assert_eq!(j["totals"]["pages_read_only"], 1);
        assert_eq!(j["regions"][0]["region"], "[heap]");
        assert_eq!(j["regions"][0]["read_write_ratio"], 1.0);
        assert_eq!(j["pages"].as_array().unwrap().len(), 2);
        let c = csv(&st);
        assert_eq!(c.lines().count(), 2);
        assert!(c.lines().nth(1).unwrap().starts_with("0,250.0,2,1,1,"));
    }
}
