//! Heat-map PNG: top panel hot/warm/cold pages and ring-full events over
//! time (paper Fig. 4a), bottom panel touched pages × time coloured red for
//! written and blue for read-only (paper Fig. 4b). The address axis lists
//! only touched pages, in address order, so gaps of terabytes between
//! mappings do not squash the picture; tick labels show real addresses.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;

use crate::stats::Stats;

static FONT: Once = Once::new();
static mut HAVE_FONT: bool = false;

fn load_font() -> bool {
    FONT.call_once(|| {
        for f in [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        ] {
            if let Ok(b) = std::fs::read(f) {
                let leaked: &'static [u8] = Box::leak(b.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok() {
                    // SAFETY: written once inside call_once, read only after it.
                    unsafe { HAVE_FONT = true };
                    break;
                }
            }
        }
    });
    // SAFETY: read after call_once completed.
    unsafe { HAVE_FONT }
}

type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Draws the heat map to `path`.
pub fn draw(st: &Stats, path: &Path) -> DrawResult<()> {
    let text = load_font();
    let root = BitMapBackend::new(path, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(320);
    let n = st.rows.len().max(1);
    let times: Vec<f64> = st.rows.iter().map(|r| r.t_ms / 1000.0).collect();
    let tmax = times.last().copied().unwrap_or(1.0).max(0.001);
    let t_of = |i: usize| -> f64 {
        if i == 0 {
            0.0
        } else {
            times.get(i - 1).copied().unwrap_or(tmax)
        }
    };

    // Top: classes over time.
    let ymax = st
        .rows
        .iter()
        .map(|r| r.hot + r.warm + r.cold)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut c = ChartBuilder::on(&top);
    c.margin(10);
    if text {
        c.caption(
            "pages by class (hot / warm / cold) and ring-full events",
            ("sans-serif", 18),
        )
        .x_label_area_size(30)
        .y_label_area_size(70);
    }
    let mut chart = c.build_cartesian_2d(0f64..tmax, 0f64..ymax * 1.05)?;
    if text {
        chart
            .configure_mesh()
            .x_desc("time [s]")
            .y_desc("pages")
            .draw()?;
    }
    let series = |f: &dyn Fn(&crate::stats::IntervalRow) -> f64| -> Vec<(f64, f64)> {
        st.rows.iter().map(|r| (r.t_ms / 1000.0, f(r))).collect()
    };
    type Line = (&'static str, RGBColor, Vec<(f64, f64)>);
    let lines: [Line; 3] = [
        ("hot", RED, series(&|r| r.hot as f64)),
        ("warm", RGBColor(230, 150, 0), series(&|r| r.warm as f64)),
        ("cold", BLUE, series(&|r| r.cold as f64)),
    ];
    for (name, col, pts) in lines {
        let s = chart.draw_series(LineSeries::new(pts, col.stroke_width(2)))?;
        if text {
            s.label(name).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2))
            });
        }
    }
    let rf: Vec<(f64, f64)> = st
        .rows
        .iter()
        .filter(|r| r.ring_full > 0)
        .map(|r| (r.t_ms / 1000.0, ymax * 0.02))
        .collect();
    let s = chart.draw_series(
        rf.into_iter()
            .map(|p| TriangleMarker::new(p, 5, BLACK.filled())),
    )?;
    if text {
        s.label("ring-full")
            .legend(|(x, y)| TriangleMarker::new((x + 9, y), 5, BLACK.filled()));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }

    // Bottom: touched pages × time.
    let mut rank: BTreeMap<u64, usize> = BTreeMap::new();
    for row in &st.heat {
        for &(p, _) in row {
            rank.insert(p, 0);
        }
    }
    let addrs: Vec<u64> = rank.keys().copied().collect();
    for (i, v) in rank.values_mut().enumerate() {
        *v = i;
    }
    let rows = addrs.len().max(1);
    let mut c = ChartBuilder::on(&bottom);
    c.margin(10);
    if text {
        c.caption(
            "page accesses over time (red: written, blue: read only); y = touched pages in address order",
            ("sans-serif", 18),
        )
        .x_label_area_size(30)
        .y_label_area_size(150);
    }
    let mut chart = c.build_cartesian_2d(0f64..tmax, 0f64..rows as f64)?;
    if text {
        let addrs2 = addrs.clone();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("time [s]")
            .y_labels(12)
            .y_label_formatter(&move |y| {
                let i = (*y as usize).min(addrs2.len().saturating_sub(1));
                addrs2.get(i).map(|a| format!("{a:#x}")).unwrap_or_default()
            })
            .draw()?;
    }
    let heat_n = st.heat.len();
    for (i, row) in st.heat.iter().enumerate() {
        // Heat rows may be fewer than intervals after merging: spread them.
        let idx = if heat_n == n {
            i
        } else {
            i * n / heat_n.max(1)
        };
        let (t0, t1) = (t_of(idx), t_of(idx + 1).max(t_of(idx) + tmax / 2000.0));
        chart.draw_series(row.iter().map(|&(p, kind)| {
            let y = rank[&p] as f64;
            let col = if kind == 2 { RED } else { BLUE };
            Rectangle::new([(t0, y), (t1, y + 1.0)], col.filled())
        }))?;
    }
    root.present()?;
    Ok(())
}
