//! Pictures of results, as SVG documents (`--plot FILE.svg`):
//!
//! - nccl-tests ([`nccl`]): bus bandwidth against message size (log2 axis), one curve per
//!   test of each log, and the figure the fabric must reach (the verdict's reference, e.g.
//!   21.875 GB/s for two DGX Sparks on one cable) as a dashed line;
//! - a bench sweep ([`bench`]): output tokens/s and time to first token (p50, p95) against
//!   concurrency (log2 axis); with `--compare` the earlier run beside it, dashed;
//! - a soak: output tokens/s per window over time, every stall shaded; an earlier soak dashed.
//!
//! Drawn with plotters' SVG backend only (no fonts are read: text is left to the SVG viewer).
//! Pure: results in, the SVG text out; writing the file is the CLI's job. Nothing here opens
//! a file, a socket or a process.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::nccl::Analysis;
use crate::bench::measure::BenchReport;
use crate::bench::soak::{SoakReport, clock};

/// Why no picture could be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The results hold no figure to draw (a failed run, an empty log).
    #[error("nothing to plot: {0}")]
    Empty(String),
    /// plotters refused (should not happen with the SVG backend).
    #[error("drawing the picture: {0}")]
    Draw(String),
}

/// `--plot FILE.svg`: the picture is SVG, so the name must say so.
pub fn svg_path(s: &str) -> Result<std::path::PathBuf, String> {
    let p = std::path::PathBuf::from(s);
    let svg = p
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if !svg {
        return Err(format!(
            "{s:?}: the picture is written as SVG; give a file name ending in .svg (convert it with e.g. `rsvg-convert -o plot.png plot.svg`)"
        ));
    }
    Ok(p)
}

fn draw_err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

/// This run, an earlier run, the reference line, stalls.
const NOW: RGBColor = RGBColor(31, 119, 180);
const EARLIER: RGBColor = RGBColor(255, 127, 14);
const SERIES: [RGBColor; 6] = [
    NOW,
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];
const EXPECTED: RGBColor = RGBColor(214, 39, 40);
const STALL: RGBColor = RGBColor(214, 39, 40);

const FONT: &str = "sans-serif";

/// One curve: its label, its points, dashed or not, a dot at each point or not.
struct Curve {
    label: String,
    color: RGBColor,
    dashed: bool,
    markers: bool,
    points: Vec<(f64, f64)>,
}

/// A horizontal reference line.
struct Reference {
    label: String,
    y: f64,
}

/// Halfway to white (a second figure of the same run).
fn lighter(c: RGBColor) -> RGBColor {
    let half = |v: u8| v / 2 + 128;
    RGBColor(half(c.0), half(c.1), half(c.2))
}

/// Ticks of a log2 axis that read as sizes: `8 B`, `1 MiB`, `4 GiB`.
fn size_label(v: &f64) -> String {
    if (v - v.round()).abs() > 1e-6 || *v < 0.0 || *v > 62.0 {
        return String::new();
    }
    crate::progress::human_bytes(1u64 << (v.round() as u32))
}

/// Ticks of a log2 axis that read as counts: `1`, `4`, `32`.
fn count_label(v: &f64) -> String {
    if (v - v.round()).abs() > 1e-6 || *v < 0.0 || *v > 30.0 {
        return String::new();
    }
    (1u64 << (v.round() as u32)).to_string()
}

/// `lo..hi` with room around the points (and never empty).
fn padded(lo: f64, hi: f64, pad: f64) -> Range<f64> {
    if hi > lo {
        (lo - pad)..(hi + pad)
    } else {
        (lo - pad.max(1.0))..(hi + pad.max(1.0))
    }
}

/// The top of a y axis that starts at 0, with room above the highest point for the legend's
/// `entries` lines (it sits in the upper left corner).
fn top(values: impl Iterator<Item = f64>, entries: usize) -> f64 {
    let max = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
    let room = 1.1 + 0.07 * entries as f64;
    if max > 0.0 { max * room } else { 1.0 }
}

/// Y ticks: whole numbers once the axis goes past 20.
fn y_label(top: f64) -> impl Fn(&f64) -> String {
    move |v: &f64| {
        if top > 20.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    }
}

/// How one chart looks.
struct Axes<'a> {
    caption: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    x: Range<f64>,
    y: Range<f64>,
    x_label: &'a dyn Fn(&f64) -> String,
    /// Integer ticks only on a log2 axis.
    x_ticks: usize,
}

/// Draws curves, reference lines and shaded spans onto one area.
fn chart(
    area: &DrawingArea<SVGBackend, Shift>,
    axes: &Axes,
    curves: &[Curve],
    references: &[Reference],
    shaded: &[(f64, f64)],
    shaded_label: Option<&str>,
) -> Result<(), PlotError> {
    let mut c = ChartBuilder::on(area)
        .caption(axes.caption, (FONT, 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(axes.x.clone(), axes.y.clone())
        .map_err(draw_err)?;
    c.configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_labels(axes.x_ticks)
        .y_labels(8)
        .x_label_formatter(axes.x_label)
        .y_label_formatter(&y_label(axes.y.end))
        .max_light_lines(1)
        .light_line_style(RGBColor(240, 240, 240))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(draw_err)?;
    let (y0, y1) = (axes.y.start, axes.y.end);
    for (i, &(a, b)) in shaded.iter().enumerate() {
        let series = c
            .draw_series(std::iter::once(Rectangle::new(
                [(a, y0), (b.max(a), y1)],
                STALL.mix(0.18).filled(),
            )))
            .map_err(draw_err)?;
        if i == 0
            && let Some(label) = shaded_label
        {
            series.label(label).legend(|(x, y)| {
                Rectangle::new([(x, y - 6), (x + 20, y + 6)], STALL.mix(0.18).filled())
            });
        }
    }
    for r in references {
        let style = EXPECTED.stroke_width(2);
        c.draw_series(DashedLineSeries::new(
            [(axes.x.start, r.y), (axes.x.end, r.y)],
            10,
            6,
            style,
        ))
        .map_err(draw_err)?
        .label(&r.label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    for curve in curves {
        let style = curve.color.stroke_width(2);
        let drawn = if curve.dashed {
            c.draw_series(DashedLineSeries::new(
                curve.points.iter().copied(),
                8,
                5,
                style,
            ))
            .map_err(draw_err)?
        } else {
            c.draw_series(LineSeries::new(curve.points.iter().copied(), style))
                .map_err(draw_err)?
        };
        drawn
            .label(&curve.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        if !curve.markers {
            continue;
        }
        let color = curve.color;
        c.draw_series(
            curve
                .points
                .iter()
                .map(move |&p| Circle::new(p, 3, color.filled())),
        )
        .map_err(draw_err)?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font((FONT, 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// Renders onto an SVG string of `size`.
fn svg(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), PlotError>,
) -> Result<String, PlotError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        draw(&root)?;
        root.present().map_err(draw_err)?;
    }
    Ok(out)
}

/// Bus bandwidth against message size for every test of every log.
pub fn nccl(analyses: &[Analysis]) -> Result<String, PlotError> {
    let several = analyses.len() > 1;
    let mut curves = Vec::new();
    let mut references: Vec<Reference> = Vec::new();
    for a in analyses {
        for t in &a.tests {
            let points: Vec<(f64, f64)> = t
                .run
                .rows
                .iter()
                .filter(|r| r.size_bytes > 0)
                .filter_map(|r| Some(((r.size_bytes as f64).log2(), r.busbw_gbs()?)))
                .collect();
            if points.is_empty() {
                continue;
            }
            let test = t.test.clone().unwrap_or_else(|| "nccl-tests".to_string());
            let file = a.source.as_deref().map(|s| {
                std::path::Path::new(s)
                    .file_name()
                    .map_or(s.to_string(), |f| f.to_string_lossy().into_owned())
            });
            let label = match (file, several) {
                (Some(f), true) => format!("{test} ({f})"),
                _ => test,
            };
            curves.push(Curve {
                label,
                color: SERIES[curves.len() % SERIES.len()],
                dashed: false,
                markers: true,
                points,
            });
            if let Some(e) = &t.verdict.expectation
                && !references.iter().any(|r| r.y == e.min_busbw_gbs)
            {
                references.push(Reference {
                    label: format!(
                        "expected ≥ {} GB/s: {} ({})",
                        e.min_busbw_gbs, e.setup, e.test
                    ),
                    y: e.min_busbw_gbs,
                });
            }
        }
    }
    if curves.is_empty() {
        return Err(PlotError::Empty(
            "no test of the log has result rows (the run failed before it measured anything)"
                .to_string(),
        ));
    }
    let xs = curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    let ys = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.1))
        .chain(references.iter().map(|r| r.y));
    let span = (hi - lo).max(1.0);
    let axes = Axes {
        caption: "nccl-tests: bus bandwidth by message size",
        x_desc: "message size (log2)",
        y_desc: "bus bandwidth (GB/s)",
        x: padded(lo, hi, 0.5),
        y: 0.0..top(ys, curves.len() + references.len()),
        x_label: &size_label,
        x_ticks: ((span / 2.0).ceil() as usize + 1).clamp(2, 16),
    };
    svg((960, 540), |root| {
        chart(root, &axes, &curves, &references, &[], None)
    })
}

/// A bench run: a sweep's two charts, or a soak's time series; with the earlier run of
/// `--compare` beside it (dashed) when it is of the same kind.
pub fn bench(now: &BenchReport, earlier: Option<&BenchReport>) -> Result<String, PlotError> {
    match &now.soak {
        Some(soak) => soak_chart(now, soak, earlier.and_then(|e| Some((e, e.soak.as_ref()?)))),
        None => sweep_charts(now, earlier.filter(|e| e.soak.is_none())),
    }
}

fn run_label(r: &BenchReport, which: &str) -> String {
    format!("{which}: {} ({})", r.model, r.started_at)
}

fn sweep_charts(now: &BenchReport, earlier: Option<&BenchReport>) -> Result<String, PlotError> {
    let runs: Vec<(&BenchReport, RGBColor, bool, &str)> = std::iter::once((now, NOW, false, "now"))
        .chain(earlier.map(|e| (e, EARLIER, true, "earlier")))
        .collect();
    let level_x = |c: u32| f64::from(c.max(1)).log2();
    let mut tps = Vec::new();
    let mut ttft = Vec::new();
    for &(r, color, dashed, which) in &runs {
        let label = run_label(r, which);
        tps.push(Curve {
            label: label.clone(),
            color,
            dashed,
            markers: true,
            points: r
                .levels
                .iter()
                .filter(|l| l.requests > 0)
                .map(|l| (level_x(l.concurrency), l.output_tokens_per_s))
                .collect(),
        });
        for (name, pick) in [("p50", 0), ("p95", 1)] {
            ttft.push(Curve {
                label: format!("{label}, TTFT {name}"),
                color: if pick == 0 { color } else { lighter(color) },
                dashed: dashed || pick == 1,
                markers: true,
                points: r
                    .levels
                    .iter()
                    .filter_map(|l| {
                        let p = l.ttft_ms?;
                        Some((
                            level_x(l.concurrency),
                            if pick == 0 { p.p50 } else { p.p95 },
                        ))
                    })
                    .collect(),
            });
        }
    }
    tps.retain(|c| !c.points.is_empty());
    ttft.retain(|c| !c.points.is_empty());
    if tps.is_empty() {
        return Err(PlotError::Empty(
            "no level of the run finished a request".to_string(),
        ));
    }
    let xs: Vec<f64> = tps
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let x = padded(lo, hi, 0.3);
    let ticks = ((hi - lo).ceil() as usize + 1).clamp(2, 12);
    let tps_axes = Axes {
        caption: "output tokens/s by concurrency",
        x_desc: "requests in flight (log2)",
        y_desc: "output tokens/s",
        x: x.clone(),
        y: 0.0..top(
            tps.iter().flat_map(|c| c.points.iter().map(|p| p.1)),
            tps.len(),
        ),
        x_label: &count_label,
        x_ticks: ticks,
    };
    let ttft_axes = Axes {
        caption: "time to first token by concurrency",
        x_desc: "requests in flight (log2)",
        y_desc: "TTFT (ms)",
        x,
        y: 0.0..top(
            ttft.iter().flat_map(|c| c.points.iter().map(|p| p.1)),
            ttft.len(),
        ),
        x_label: &count_label,
        x_ticks: ticks,
    };
    svg((1280, 520), |root| {
        let halves = root.split_evenly((1, 2));
        chart(&halves[0], &tps_axes, &tps, &[], &[], None)?;
        chart(&halves[1], &ttft_axes, &ttft, &[], &[], None)
    })
}

/// A window series as steps: each window's rate held from its start to its end.
fn steps(s: &SoakReport) -> Vec<(f64, f64)> {
    s.windows
        .iter()
        .flat_map(|w| [(w.start_s, w.tokens_per_s), (w.end_s, w.tokens_per_s)])
        .collect()
}

fn soak_chart(
    now: &BenchReport,
    soak: &SoakReport,
    earlier: Option<(&BenchReport, &SoakReport)>,
) -> Result<String, PlotError> {
    let mut curves = vec![Curve {
        label: format!("{}, {} streams", run_label(now, "now"), soak.concurrency),
        color: NOW,
        dashed: false,
        markers: false,
        points: steps(soak),
    }];
    if let Some((r, s)) = earlier {
        curves.push(Curve {
            label: format!("{}, {} streams", run_label(r, "earlier"), s.concurrency),
            color: EARLIER,
            dashed: true,
            markers: false,
            points: steps(s),
        });
    }
    curves.retain(|c| !c.points.is_empty());
    if curves.is_empty() {
        return Err(PlotError::Empty(
            "the soak ended before its first window".to_string(),
        ));
    }
    let end = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .fold(soak.elapsed_s, f64::max);
    let shaded: Vec<(f64, f64)> = soak.stalls.iter().map(|s| (s.start_s, s.end_s)).collect();
    let stall_label = format!(
        "stall: requests in flight, no token for ≥ {} s",
        soak.stall_after_s
    );
    let time_label = |v: &f64| clock(*v);
    let axes = Axes {
        caption: "soak: output tokens/s over time",
        x_desc: "time since the start (m:ss)",
        y_desc: "output tokens/s",
        x: 0.0..end.max(1.0),
        y: 0.0..top(
            curves.iter().flat_map(|c| c.points.iter().map(|p| p.1)),
            curves.len() + usize::from(!shaded.is_empty()),
        ),
        x_label: &time_label,
        x_ticks: 10,
    };
    svg((1200, 520), |root| {
        chart(
            root,
            &axes,
            &curves,
            &[],
            &shaded,
            (!shaded.is_empty()).then_some(stall_label.as_str()),
        )
    })
}

/// Ticks of a linear axis of context tokens: `0`, `16k`, `100k`.
fn depth_label(v: &f64) -> String {
    if *v < 0.0 {
        return String::new();
    }
    if *v >= 1000.0 {
        format!("{:.0}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

/// A protocol run (`bench --protocol`): prompt processing and generation tokens/s (each
/// figure's mean over the runs) against the context depth, one curve per concurrency.
pub fn protocol(r: &crate::bench::protocol::ProtocolReport) -> Result<String, PlotError> {
    use crate::bench::protocol::llama_benchy::Metric;
    let runs: Vec<_> = r
        .llama_benchy
        .benchmarks
        .iter()
        .filter(|b| !b.is_context_prefill_phase)
        .collect();
    let mut levels: Vec<u32> = runs.iter().map(|b| b.concurrency).collect();
    levels.sort_unstable();
    levels.dedup();
    let curves =
        |pick: &dyn Fn(&crate::bench::protocol::llama_benchy::BenchmarkRun) -> Option<&Metric>| {
            levels
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    let mut points: Vec<(f64, f64)> = runs
                        .iter()
                        .filter(|b| b.concurrency == c)
                        .filter_map(|b| Some((f64::from(b.context_size), pick(b)?.mean)))
                        .collect();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Curve {
                        label: format!("concurrency {c}"),
                        color: SERIES[i % SERIES.len()],
                        dashed: false,
                        markers: true,
                        points,
                    }
                })
                .filter(|c| !c.points.is_empty())
                .collect::<Vec<_>>()
        };
    let pp = curves(&|b| b.pp_throughput.as_ref());
    let tg = curves(&|b| b.tg_throughput.as_ref());
    if pp.is_empty() && tg.is_empty() {
        return Err(PlotError::Empty(
            "no cell of the run finished a request".to_string(),
        ));
    }
    let xs: Vec<f64> = pp
        .iter()
        .chain(&tg)
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let x = padded(lo, hi, (hi - lo).max(1.0) * 0.05);
    let axes = |caption, y_desc, cs: &[Curve]| Axes {
        caption,
        x_desc: "context depth (tokens)",
        y_desc,
        x: x.clone(),
        y: 0.0..top(
            cs.iter().flat_map(|c| c.points.iter().map(|p| p.1)),
            cs.len(),
        ),
        x_label: &depth_label,
        x_ticks: 8,
    };
    let pp_axes = axes("prompt processing tokens/s by depth", "pp t/s", &pp);
    let tg_axes = axes("generation tokens/s by depth", "tg t/s", &tg);
    svg((1280, 520), |root| {
        let halves = root.split_evenly((1, 2));
        chart(&halves[0], &pp_axes, &pp, &[], &[], None)?;
        chart(&halves[1], &tg_axes, &tg, &[], &[], None)
    })
}

/// A lil run: aggregate decode tokens/s by concurrency (log2), one curve per context; an
/// invalid cell (`null`) is no point.
pub fn lil(r: &crate::bench::protocol::lil::LilReport) -> Result<String, PlotError> {
    let curves: Vec<Curve> = r
        .metadata
        .context_lengths
        .iter()
        .enumerate()
        .map(|(i, &ctx)| {
            let mut points: Vec<(f64, f64)> = r
                .results
                .iter()
                .filter(|c| c.context_tokens == ctx && c.concurrency > 0)
                .filter_map(|c| Some((f64::from(c.concurrency).log2(), c.aggregate_tps?)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Curve {
                label: format!(
                    "context {}",
                    crate::bench::protocol::lil::context_label(ctx)
                ),
                color: SERIES[i % SERIES.len()],
                dashed: false,
                markers: true,
                points,
            }
        })
        .filter(|c| !c.points.is_empty())
        .collect();
    if curves.is_empty() {
        return Err(PlotError::Empty(
            "no cell of the run has a valid figure".to_string(),
        ));
    }
    let xs: Vec<f64> = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let axes = Axes {
        caption: "aggregate decode tokens/s by concurrency",
        x_desc: "concurrency",
        y_desc: "tok/s",
        x: padded(lo, hi, 0.25),
        y: 0.0..top(
            curves.iter().flat_map(|c| c.points.iter().map(|p| p.1)),
            curves.len(),
        ),
        x_label: &count_label,
        x_ticks: 8,
    };
    svg((960, 520), |root| {
        chart(root, &axes, &curves, &[], &[], None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_ticks_read_as_sizes_and_counts_and_only_at_whole_powers() {
        assert_eq!(size_label(&3.0), "8 B");
        assert_eq!(size_label(&30.0), "1 GiB");
        assert_eq!(size_label(&2.5), "");
        assert_eq!(count_label(&5.0), "32");
        assert_eq!(count_label(&0.0), "1");
    }

    #[test]
    fn a_log_with_no_rows_has_nothing_to_plot() {
        let a = crate::report::nccl::analyse("", &Default::default());
        let e = nccl(&[a]).unwrap_err().to_string();
        assert!(e.starts_with("nothing to plot"), "{e}");
    }
}
