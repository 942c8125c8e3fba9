//! `compare`'s SVG: two panels (latency, message rate) against message
//! size, one line per test and device/path, coloured by operation and
//! shaded off RC.

use super::Row;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use rdma_direct::{Error, Result};

/// Width of the SVG, two panels of half of it side by side [px].
const PLOT_W: u32 = 1400;
/// Height of a panel's chart (caption, plotting area, axes) [px]; the
/// legends go below the charts.
const CHART_H: u32 = 540;
/// Height of one row of a legend [px].
const LEGEND_ROW: i32 = 22;

/// One line (or single point) of a panel: one test on one device/path.
struct Series {
    test: &'static str,
    /// `<test> <device>/<data path>`.
    label: String,
    color: RGBColor,
    /// Index of the device/path: picks the marker and the dash.
    dev: usize,
    /// (bytes, value), by bytes.
    points: Vec<(f64, f64)>,
}

/// The colour of a test's operation (write, read, send, atomic), the same in
/// both panels and on every device (Okabe-Ito's palette, which readers with
/// a colour-vision deficiency tell apart too), shaded for a row off RC
/// (`:UD` and `:UC` darker, `:SRQ` lighter, `:DC` lighter still).
fn op_color(test: &str) -> RGBColor {
    let base = match test.split('_').next() {
        Some("write") => RGBColor(0x00, 0x72, 0xb2),
        Some("read") => RGBColor(0xd5, 0x5e, 0x00),
        Some("send") => RGBColor(0x00, 0x9e, 0x73),
        Some("atomic") => RGBColor(0xcc, 0x79, 0xa7),
        _ => RGBColor(0x00, 0x00, 0x00),
    };
    // Off RC the operation's colour is shaded, so that send_lat,
    // send_lat:UD and send_lat:SRQ differ: UD and UC darker, SRQ lighter.
    let mix = |c: RGBColor, to: u8, f: f64| {
        let m = |x: u8| (f64::from(x) * (1.0 - f) + f64::from(to) * f).round() as u8;
        RGBColor(m(c.0), m(c.1), m(c.2))
    };
    match test.rsplit_once(':').map(|(_, t)| t) {
        Some("UD") | Some("UC") => mix(base, 0x00, 0.45),
        Some("SRQ") => mix(base, 0xff, 0.5),
        Some("DC") => mix(base, 0xff, 0.7),
        _ => base,
    }
}

/// Draws marker `dev` (filled circle, triangle, square, diamond, then an
/// x; then again) of `color` centred on `at`, in `area`'s pixels.
fn marker(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    at: (i32, i32),
    dev: usize,
    color: RGBColor,
) -> std::result::Result<(), String> {
    let (x, y) = at;
    let fill = color.filled();
    match dev % 5 {
        0 => area.draw(&Circle::new(at, 4, fill)),
        1 => area.draw(&TriangleMarker::new(at, 5, fill)),
        2 => area.draw(&Rectangle::new([(x - 4, y - 4), (x + 4, y + 4)], fill)),
        3 => area.draw(&Polygon::new(
            vec![(x, y - 5), (x + 5, y), (x, y + 5), (x - 5, y)],
            fill,
        )),
        _ => area.draw(&Cross::new(at, 4, color.stroke_width(2))),
    }
    .map_err(|e| e.to_string())
}

/// Tick values of a log axis within lo..=hi: 1, 2 and 5 of each decade, or
/// 1 and 3, or only the powers of ten, whichever first gives at most `max`.
/// Each value is the double nearest its decimal, so it prints as that.
fn log_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    // At most 64 decades, whatever the bounds (the rows are checked to
    // 1e-9..=1e12; this keeps a bad bound from looping for ever).
    let e0 = lo.log10().floor().clamp(-32.0, 32.0) as i32;
    let e1 = hi.log10().ceil().clamp(-32.0, 32.0) as i32;
    let mut out = Vec::new();
    for mantissas in [&[1, 2, 5][..], &[1, 3], &[1]] {
        out = (e0..=e1)
            .flat_map(|e| mantissas.iter().map(move |m| format!("{m}e{e}")))
            .filter_map(|t| t.parse::<f64>().ok())
            .filter(|v| (lo..=hi).contains(v))
            .collect();
        if out.len() <= max {
            break;
        }
    }
    out
}

/// A value tick's label: the shortest decimal that reads back as the value
/// (`0.002`, `1`, `50`, `1000`): never an exponent, never padded zeros.
fn value_label(v: f64) -> String {
    // Three significant digits, so an axis's float noise does not show.
    let v: f64 = format!("{v:.2e}").parse().unwrap_or(v);
    format!("{v}")
}

/// Message-size ticks: powers of two within 1..=hi, every 2nd (4th, ...)
/// so that at most 9 remain.
fn size_ticks(hi: f64) -> Vec<f64> {
    let n = hi.log2().floor().max(0.0) as u32 + 1;
    let step = n.div_ceil(9);
    (0..n)
        .step_by(step as usize)
        .map(|e| 2f64.powi(e as i32))
        .collect()
}

/// A message-size tick's label: bytes, `Ki` (1024) or `Mi` (1024^2).
fn size_label(v: f64) -> String {
    let b = v.round() as u64;
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} Mi", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} Ki", b >> 10),
        b => b.to_string(),
    }
}

/// The SVG text of two panels side by side, both log-log against message
/// size [bytes]: the latency tests' t_typical [us] on the left, the
/// bandwidth tests' message rate [million messages/s] on the right. One
/// series per test and device/path: the colour is the test's operation
/// (write, read, send, atomic), the marker (and a dashed line after the
/// first) the device/path; a series of one point (the atomics, which always
/// move 8 bytes) is a marker alone, in the plot and in its legend. Each
/// panel's legend is below its chart, outside the plotting area. A panel
/// with no rows says so. `path` only names the file in errors
/// (`Error::Invalid`).
pub(super) fn plot(path: &std::path::Path, rows: &[Row]) -> Result<String> {
    let err = |e: String| Error::Invalid(format!("plot {}: {e}", path.display()));
    // Device/path in order of first appearance, the same in both panels.
    let mut devs: Vec<String> = Vec::new();
    for r in rows {
        let d = format!("{}/{}", r.device, r.data_path);
        if !devs.contains(&d) {
            devs.push(d);
        }
    }
    type Value = fn(&Row) -> Option<f64>;
    let panels: [(&str, &str, &str, Value); 2] = [
        (
            "latency (write, send: one-way; read, atomic: round trip)",
            "t_typical [µs]",
            "no latency test in this run",
            |r| r.lat.map(|l| l.0),
        ),
        (
            "message rate (bandwidth tests)",
            "message rate [million messages/s]",
            "no bandwidth test in this run",
            |r| r.bw.map(|b| b.1),
        ),
    ];
    // Each panel's series, by test (in order of first appearance), then device/path.
    let series: Vec<Vec<Series>> = panels
        .iter()
        .map(|(_, _, _, value)| {
            let mut out: Vec<Series> = Vec::new();
            for r in rows {
                let Some(v) = value(r).filter(|v| *v > 0.0) else {
                    continue;
                };
                let dev = devs
                    .iter()
                    .position(|d| *d == format!("{}/{}", r.device, r.data_path))
                    .unwrap_or(0);
                let label = format!("{} {}", r.test, devs[dev]);
                match out.iter_mut().find(|s| s.label == label) {
                    Some(s) => s.points.push((r.bytes as f64, v)),
                    None => out.push(Series {
                        test: r.test,
                        label,
                        color: op_color(r.test),
                        dev,
                        points: vec![(r.bytes as f64, v)],
                    }),
                }
            }
            let mut tests: Vec<&str> = Vec::new();
            for s in &out {
                if !tests.contains(&s.test) {
                    tests.push(s.test);
                }
            }
            out.sort_by_key(|s| (tests.iter().position(|t| *t == s.test), s.dev));
            for s in &mut out {
                s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            out
        })
        .collect();
    // Legend grid: a row per test when there are 2 or 3 device/paths.
    let cols = devs.len().clamp(2, 3);
    let legend_rows = series
        .iter()
        .map(|s| s.len().div_ceil(cols))
        .max()
        .unwrap_or(0)
        .max(1) as i32;
    let height = CHART_H + (legend_rows * LEGEND_ROW + 24) as u32;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (PLOT_W, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let halves = root.split_evenly((1, 2));
        for (((caption, y_desc, empty, _), series), half) in panels.iter().zip(&series).zip(&halves)
        {
            let (chart_area, legend_area) = half.split_vertically(CHART_H);
            let pts = series.iter().flat_map(|s| &s.points);
            let Some(xmax) = pts.clone().map(|p| p.0).reduce(f64::max) else {
                chart_area
                    .draw(&Text::new(
                        *empty,
                        (60, CHART_H as i32 / 2),
                        ("sans-serif", 16).into_font(),
                    ))
                    .map_err(|e| err(e.to_string()))?;
                continue;
            };
            let xmax = xmax.max(2.0) * 2.0;
            let ymin = pts.clone().map(|p| p.1).fold(f64::INFINITY, f64::min) / 2.0;
            let ymax = pts.map(|p| p.1).fold(0.0, f64::max) * 2.0;
            let x = (1.0f64..xmax).log_scale().with_key_points(size_ticks(xmax));
            let y = (ymin..ymax)
                .log_scale()
                .with_key_points(log_ticks(ymin, ymax, 12));
            let mut chart = ChartBuilder::on(&chart_area)
                .caption(*caption, ("sans-serif", 18))
                .margin(12)
                .margin_right(28)
                .x_label_area_size(52)
                .y_label_area_size(84)
                .build_cartesian_2d(x, y)
                .map_err(|e| err(e.to_string()))?;
            chart
                .configure_mesh()
                .x_desc("message size [bytes; Ki = 1024]")
                .y_desc(*y_desc)
                .axis_desc_style(("sans-serif", 16))
                .label_style(("sans-serif", 13))
                .x_label_formatter(&|x| size_label(*x))
                .y_label_formatter(&|y| value_label(*y))
                .draw()
                .map_err(|e| err(e.to_string()))?;
            for s in series {
                let style = s.color.stroke_width(2);
                if s.dev == 0 {
                    chart.draw_series(LineSeries::new(s.points.clone(), style))
                } else {
                    chart.draw_series(DashedLineSeries::new(s.points.clone(), 8, 5, style))
                }
                .map_err(|e| err(e.to_string()))?;
            }
            // The markers after every line, so that no line hides one.
            for s in series {
                for p in &s.points {
                    marker(&root, chart.backend_coord(p), s.dev, s.color).map_err(err)?;
                }
            }
            // The legend: marker, with a line sample when the series is a line.
            let cell = (PLOT_W as i32 / 2 - 100) / cols as i32;
            for (i, s) in series.iter().enumerate() {
                let (col, row) = ((i % cols) as i32, (i / cols) as i32);
                let (lx, ly) = (84 + col * cell, 8 + row * LEGEND_ROW + LEGEND_ROW / 2);
                if s.points.len() > 1 {
                    let segments: &[(i32, i32)] = if s.dev == 0 {
                        &[(0, 30)]
                    } else {
                        &[(0, 8), (11, 19), (22, 30)]
                    };
                    for &(a, b) in segments {
                        legend_area
                            .draw(&PathElement::new(
                                vec![(lx + a, ly), (lx + b, ly)],
                                s.color.stroke_width(2),
                            ))
                            .map_err(|e| err(e.to_string()))?;
                    }
                }
                marker(&legend_area, (lx + 15, ly), s.dev, s.color).map_err(err)?;
                legend_area
                    .draw(&Text::new(
                        s.label.clone(),
                        (lx + 38, ly),
                        TextStyle::from(("sans-serif", 14).into_font())
                            .pos(Pos::new(HPos::Left, VPos::Center)),
                    ))
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_off_rc_are_their_operations_colour_shaded() {
        let send = op_color("send_lat");
        assert_eq!(send, RGBColor(0x00, 0x9e, 0x73));
        assert_eq!(op_color("send_bw"), send);
        let (ud, srq, uc) = (
            op_color("send_lat:UD"),
            op_color("send_lat:SRQ"),
            op_color("write_lat:UC"),
        );
        assert!(ud != send && srq != send && ud != srq, "{ud:?} {srq:?}");
        // Darker and lighter, channel by channel.
        assert!(ud.1 < send.1 && srq.1 > send.1);
        assert!(uc.2 < op_color("write_lat").2);
        assert_eq!(op_color("send_bw:SRQ"), srq);
        let dc = op_color("send_lat:DC");
        assert!(dc != srq && dc != send && dc.1 > srq.1, "{dc:?}");
    }
}
