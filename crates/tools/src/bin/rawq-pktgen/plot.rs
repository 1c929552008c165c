//! `--plot FILE.svg`: pictures of what the report says, drawn from its JSON (plotters, SVG
//! backend). A run: the latency histogram (log-linear buckets on a logarithmic axis, the
//! percentiles marked), the packet rate of each second and the run's ledger (the same ledger
//! the text and `--json` show: drawn from its JSON). An RFC 2544 test: frame loss and
//! latency over the rate of every trial, one curve per frame size.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use rawq_tools::ledger::{key, Ledger};
use serde_json::Value;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

const W: u32 = 960;
const PANEL_H: u32 = 420;
const FONT: &str = "sans-serif";

fn err(path: &Path, e: impl std::fmt::Display) -> rawq::Error {
    rawq::Error::Config(format!("--plot {}: {e}", path.display()))
}

fn f64_at(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

/// Colours of the series (one per frame size, percentile or stream).
const PALETTE: [RGBColor; 7] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// A run's pictures from its summary `v` (the `--json` object). Returns how many panels were
/// drawn (0: the run had nothing to draw, no file is written).
pub fn run(path: &Path, v: &Value) -> rawq::Result<usize> {
    let hist: Vec<(f64, f64, f64)> = v
        .pointer("/latency/histogram")
        .and_then(Value::as_array)
        .map(|b| {
            b.iter()
                .filter_map(|b| {
                    Some((
                        f64_at(b, "lo_ns")?,
                        f64_at(b, "hi_ns")?,
                        f64_at(b, "count")?,
                    ))
                })
                .filter(|b| b.2 > 0.0)
                .collect()
        })
        .unwrap_or_default();
    let seconds: Vec<(f64, f64)> = v
        .get("per_second")
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(|s| Some((f64_at(s, "t_s")?, f64_at(s, "tx_pps")?)))
                .collect()
        })
        .unwrap_or_default();
    let ledger = v
        .get("ledger")
        .and_then(Ledger::from_json)
        .filter(|l| l.offered > 0 || l.named() > 0);
    let panels = usize::from(!hist.is_empty())
        + usize::from(!seconds.is_empty())
        + usize::from(ledger.is_some());
    if panels == 0 {
        return Ok(0);
    }
    let root = SVGBackend::new(path, (W, PANEL_H * panels as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let areas = root.split_evenly((panels, 1));
    let mut next = areas.iter();
    if !hist.is_empty() {
        let lat = v.get("latency").unwrap_or(&Value::Null);
        latency_histogram(next.next().expect("a panel per picture"), &hist, lat)
            .map_err(|e| err(path, e))?;
    }
    if !seconds.is_empty() {
        let target = v.pointer("/rate/target_pps").and_then(Value::as_f64);
        let short = ledger.as_ref().map_or(&[][..], |l| l.shortfalls());
        per_second(
            next.next().expect("a panel per picture"),
            &seconds,
            target,
            short,
        )
        .map_err(|e| err(path, e))?;
    }
    if let Some(l) = &ledger {
        ledger_bars(next.next().expect("a panel per picture"), l).map_err(|e| err(path, e))?;
    }
    root.present().map_err(|e| err(path, e))?;
    Ok(panels)
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// The latency histogram: each bucket a bar over its range on a logarithmic time axis (the
/// buckets are log-linear, so bars are of even width), frames on a linear axis; min, the
/// percentiles and max as vertical lines.
fn latency_histogram(area: &Area, hist: &[(f64, f64, f64)], lat: &Value) -> DrawResult {
    let lo = hist.iter().map(|b| b.0).fold(f64::MAX, f64::min).max(1.0);
    let hi = hist
        .iter()
        .map(|b| b.1 + 1.0)
        .fold(0.0, f64::max)
        .max(lo * 2.0);
    let top = hist.iter().map(|b| b.2).fold(0.0, f64::max) * 1.15;
    let path = lat.get("path").and_then(Value::as_str).unwrap_or("");
    let stamps = lat.get("timestamps").and_then(Value::as_str).unwrap_or("");
    let samples = lat.get("samples").and_then(Value::as_u64).unwrap_or(0);
    let mut c = ChartBuilder::on(area)
        .caption(
            format!("Latency ({path}, {stamps} timestamps): {samples} samples"),
            (FONT, 20),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((lo * 0.9..hi * 1.1).log_scale(), 0.0..top)?;
    c.configure_mesh()
        .x_desc("latency (ns, logarithmic)")
        .y_desc("frames")
        .x_label_formatter(&|x| rawq_gen::fmt_ns(*x as u64))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    c.draw_series(hist.iter().map(|&(l, h, n)| {
        Rectangle::new(
            [(l.max(lo), 0.0), (h + 1.0, n)],
            PALETTE[0].mix(0.6).filled(),
        )
    }))?;
    let mut marks: Vec<(String, f64)> = Vec::new();
    for (name, key) in [
        ("min", "min_ns"),
        ("p50", "p50_ns"),
        ("p90", "p90_ns"),
        ("p99", "p99_ns"),
        ("p99.9", "p99.9_ns"),
        ("max", "max_ns"),
    ] {
        if let Some(x) = f64_at(lat, key) {
            marks.push((name.to_string(), x.max(lo)));
        }
    }
    for (i, (name, x)) in marks.iter().enumerate() {
        let colour = PALETTE[1 + i % (PALETTE.len() - 1)];
        let x = *x;
        c.draw_series(LineSeries::new(
            [(x, 0.0), (x, top)],
            colour.stroke_width(2),
        ))?
        .label(format!("{name} {}", rawq_gen::fmt_ns(x as u64)))
        .legend(move |(lx, ly)| {
            PathElement::new([(lx, ly), (lx + 18, ly)], colour.stroke_width(2))
        });
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 14))
        .draw()?;
    Ok(())
}

/// The packet rate of each second of the run, with the target rate.
fn per_second(
    area: &Area,
    seconds: &[(f64, f64)],
    target: Option<f64>,
    short: &[String],
) -> DrawResult {
    let t_end = seconds.iter().map(|s| s.0).fold(1.0, f64::max) + 0.5;
    let top = seconds
        .iter()
        .map(|s| s.1)
        .chain(target)
        .fold(1.0, f64::max)
        * 1.15;
    // Where the sender fell short of what was asked, the figure says so beside it.
    let caption = match short.first() {
        Some(f) => format!("Packets sent per second (short of what was asked: {f})"),
        None => "Packets sent per second".into(),
    };
    let mut c = ChartBuilder::on(area)
        .caption(caption, (FONT, 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..t_end, 0.0..top)?;
    c.configure_mesh()
        .x_desc("time since start (s)")
        .y_desc("packets per second")
        .y_label_formatter(&|y| crate::window::fmt_pps(*y))
        .draw()?;
    c.draw_series(LineSeries::new(
        seconds.iter().copied(),
        PALETTE[0].stroke_width(2),
    ))?
    .label("achieved (each second)")
    .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], PALETTE[0].stroke_width(2)));
    c.draw_series(
        seconds
            .iter()
            .map(|&p| Circle::new(p, 3, PALETTE[0].filled())),
    )?;
    if let Some(t) = target {
        c.draw_series(LineSeries::new(
            [(0.0, t), (t_end, t)],
            PALETTE[1].stroke_width(1),
        ))?
        .label("target")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], PALETTE[1]));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, 14))
        .draw()?;
    Ok(())
}

/// The run's ledger: a bar for each bucket that holds frames (received and unattributed
/// always), its frames and words beside it; the offered frames as a line.
fn ledger_bars(area: &Area, l: &Ledger) -> DrawResult {
    let mut rows: Vec<(String, u64)> = l
        .buckets()
        .iter()
        .filter(|b| b.frames > 0 || b.key == key::RECEIVED || b.key == key::SENT)
        .map(|b| (format!("{} {}", b.frames, b.text), b.frames))
        .collect();
    rows.push((
        format!("{} unattributed", l.unattributed()),
        l.unattributed(),
    ));
    if l.double_counted() > 0 {
        rows.push((
            format!("{} counted twice (a defect)", l.double_counted()),
            l.double_counted(),
        ));
    }
    let top = l.offered.max(l.named()).max(1) as f64 * 1.05;
    let mut caption = format!("Ledger: {} frames offered, {} lost", l.offered, l.lost());
    if let Some(f) = l.shortfalls().first() {
        caption += &format!(" (short of what was asked: {f})");
    }
    let mut c = ChartBuilder::on(area)
        .caption(caption, (FONT, 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(20)
        .build_cartesian_2d(0.0..top, 0.0..rows.len() as f64)?;
    c.configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc(format!("frames ({})", l.offered_as))
        .draw()?;
    for (i, (label, n)) in rows.iter().enumerate() {
        let y = (rows.len() - 1 - i) as f64;
        let colour = PALETTE[i % PALETTE.len()];
        c.draw_series([Rectangle::new(
            [(0.0, y + 0.2), (*n as f64, y + 0.8)],
            colour.mix(0.6).filled(),
        )])?;
        c.draw_series([Text::new(label.clone(), (top * 0.01, y + 0.5), (FONT, 14))])?;
    }
    c.draw_series(LineSeries::new(
        [
            (l.offered as f64, 0.0),
            (l.offered as f64, rows.len() as f64),
        ],
        BLACK.stroke_width(1),
    ))?;
    Ok(())
}

/// One frame size's trials: (rate asked for, loss in %, p50 and p99 latency in ns).
type Points = Vec<(f64, f64, Option<f64>, Option<f64>)>;

/// An RFC 2544 test's pictures from its report `v`: frame loss over the rate and latency over
/// the rate, one curve per frame size (every trial with a rate, in rate order). Returns the
/// panels drawn (0: no trial had a rate).
pub fn rfc2544(path: &Path, v: &Value) -> rawq::Result<usize> {
    let mut sizes: Vec<(u64, Points)> = Vec::new();
    for s in v
        .get("sizes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let size = s.get("frame_size").and_then(Value::as_u64).unwrap_or(0);
        let mut pts: Points = s
            .get("trials")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let rate = f64_at(t, "rate_pps").or_else(|| f64_at(t, "achieved_pps"))?;
                let loss = 100.0 * f64_at(t, "loss_ratio")?;
                let l = t.get("latency").unwrap_or(&Value::Null);
                Some((rate, loss, f64_at(l, "p50_ns"), f64_at(l, "p99_ns")))
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !pts.is_empty() {
            sizes.push((size, pts));
        }
    }
    if sizes.is_empty() {
        return Ok(0);
    }
    let root = SVGBackend::new(path, (W, PANEL_H * 2)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let areas = root.split_evenly((2, 1));
    let test = v.get("test").and_then(Value::as_str).unwrap_or("");
    rfc2544_loss(&areas[0], &sizes, test).map_err(|e| err(path, e))?;
    rfc2544_latency(&areas[1], &sizes).map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))?;
    Ok(2)
}

fn rate_range(sizes: &[(u64, Points)]) -> (f64, f64) {
    let all = sizes.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(l, h), r| (l.min(r), h.max(r)));
    let pad = ((hi - lo) * 0.05).max(hi * 0.01).max(1.0);
    ((lo - pad).max(0.0), hi + pad)
}

fn rfc2544_loss(area: &Area, sizes: &[(u64, Points)], test: &str) -> DrawResult {
    let (lo, hi) = rate_range(sizes);
    let top = sizes
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.1;
    let mut c = ChartBuilder::on(area)
        .caption(
            format!("RFC 2544 {test}: frame loss over the offered rate"),
            (FONT, 20),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(lo..hi, 0.0..top)?;
    c.configure_mesh()
        .x_desc("offered rate (packets per second)")
        .y_desc("frame loss (%)")
        .x_label_formatter(&|x| crate::window::fmt_pps(*x))
        .draw()?;
    for (i, (size, pts)) in sizes.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        c.draw_series(LineSeries::new(
            pts.iter().map(|p| (p.0, p.1)),
            colour.stroke_width(2),
        ))?
        .label(format!("{size}-byte frames"))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2)));
        c.draw_series(
            pts.iter()
                .map(|p| Circle::new((p.0, p.1), 3, colour.filled())),
        )?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .draw()?;
    Ok(())
}

fn rfc2544_latency(area: &Area, sizes: &[(u64, Points)]) -> DrawResult {
    let (lo, hi) = rate_range(sizes);
    let lat = sizes
        .iter()
        .flat_map(|s| s.1.iter().flat_map(|p| [p.2, p.3]))
        .flatten();
    let lmax = lat.fold(0.0f64, f64::max);
    let lmax = if lmax > 0.0 { lmax * 1.15 } else { 1000.0 };
    let mut c = ChartBuilder::on(area)
        .caption(
            "Round-trip latency over the offered rate (p50 solid, p99 dashed)",
            (FONT, 20),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(90)
        .build_cartesian_2d(lo..hi, 0.0..lmax)?;
    c.configure_mesh()
        .x_desc("offered rate (packets per second)")
        .y_desc("round-trip latency")
        .x_label_formatter(&|x| crate::window::fmt_pps(*x))
        .y_label_formatter(&|y| rawq_gen::fmt_ns(*y as u64))
        .draw()?;
    for (i, (size, pts)) in sizes.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let p50: Vec<(f64, f64)> = pts.iter().filter_map(|p| Some((p.0, p.2?))).collect();
        let p99: Vec<(f64, f64)> = pts.iter().filter_map(|p| Some((p.0, p.3?))).collect();
        c.draw_series(LineSeries::new(p50.iter().copied(), colour.stroke_width(2)))?
            .label(format!("{size}-byte frames"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2)));
        c.draw_series(DashedLineSeries::new(
            p99.iter().copied(),
            6,
            4,
            colour.stroke_width(1),
        ))?;
        c.draw_series(p50.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .draw()?;
    Ok(())
}
