//! A line chart as a small hand-written SVG: a log-scaled x axis (the curve's points are
//! powers of ten or of four) or a linear one from zero (time, for the soak), a linear y axis
//! from zero, one polyline with dots per series, and a legend; and a grid of such charts in
//! one picture. Enough for `docs/`, and no plotting dependency to build.

use std::fmt::Write;

/// Size of the picture and of the margins around the plot, in px.
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// Colours of the series, in order.
const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// One line: its name in the legend and its (x, y) points, x > 0.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Escapes text for an SVG text node.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A number as a short tick label: 1k, 10k, 1M.
fn label(v: f64) -> String {
    if v >= 1e6 && (v / 1e6).fract() == 0.0 {
        format!("{}M", v / 1e6)
    } else if v >= 1e3 && (v / 1e3).fract() == 0.0 {
        format!("{}k", v / 1e3)
    } else if v.fract() == 0.0 {
        format!("{v}")
    } else {
        format!("{v:.2}")
    }
}

/// A "nice" tick step near `span / 5`: 1, 2 or 5 times a power of ten.
fn step(span: f64) -> f64 {
    let raw = (span / 5.0).max(f64::MIN_POSITIVE);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

/// How x values map to the width of the plot.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scale {
    /// log10 from the smallest x to the largest; ticks at the first series' x values.
    Log,
    /// From 0 to the largest x; ticks at "nice" steps.
    Linear,
}

/// The chart on a log-scaled x axis. The x ticks are the x values of the first series.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    chart(title, x_label, y_label, series, Scale::Log)
}

/// The chart on a linear x axis from zero (time), ticks at round steps.
pub fn time_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    chart(title, x_label, y_label, series, Scale::Linear)
}

/// `charts` (each as [`line_chart`] draws it) in one picture, `columns` side by side.
pub fn grid(charts: &[String], columns: usize) -> String {
    let columns = columns.max(1);
    let rows = charts.len().div_ceil(columns).max(1);
    let (w, h) = (WIDTH * columns as f64, HEIGHT * rows as f64);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">"#
    );
    svg.push('\n');
    for (i, c) in charts.iter().enumerate() {
        let (x, y) = (WIDTH * (i % columns) as f64, HEIGHT * (i / columns) as f64);
        let _ = write!(svg, r#"<g transform="translate({x},{y})">"#);
        svg.push_str(c);
        svg.push_str("</g>\n");
    }
    svg.push_str("</svg>\n");
    svg
}

fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series], scale: Scale) -> String {
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|x| *x > 0.0)
        .collect();
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let x_min = xs.iter().copied().fold(f64::INFINITY, f64::min).max(1e-9);
    let x_max = match scale {
        Scale::Log => xs.iter().copied().fold(0.0, f64::max).max(x_min * 10.0),
        Scale::Linear => xs.iter().copied().fold(0.0, f64::max).max(1e-9),
    };
    let y_max = ys.fold(0.0, f64::max);
    let y_step = step(if y_max > 0.0 { y_max } else { 1.0 });
    let y_top = ((y_max / y_step).floor() + 1.0) * y_step;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let px = |x: f64| match scale {
        Scale::Log => LEFT + (x.log10() - x_min.log10()) / (x_max.log10() - x_min.log10()) * plot_w,
        Scale::Linear => LEFT + x / x_max * plot_w,
    };
    let py = |y: f64| TOP + plot_h - y / y_top * plot_h;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r##"<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        esc(title)
    );
    // Horizontal grid and y ticks.
    let mut y = 0.0;
    while y <= y_top + y_step / 2.0 {
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}" stroke="#dddddd"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{text}</text>"##,
            x2 = WIDTH - RIGHT,
            yy = py(y),
            tx = LEFT - 6.0,
            ty = py(y) + 4.0,
            text = label(y)
        );
        y += y_step;
    }
    // x ticks at the first series' points (log) or at round steps (linear).
    let x_ticks: Vec<f64> = match scale {
        Scale::Log => series
            .first()
            .map(|s| s.points.iter().map(|p| p.0).collect())
            .unwrap_or_default(),
        Scale::Linear => {
            let x_step = step(x_max);
            (0..)
                .map(|k| k as f64 * x_step)
                .take_while(|x| *x <= x_max)
                .collect()
        }
    };
    for x in &x_ticks {
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{TOP}" y2="{1}" stroke="#eeeeee"/><text x="{0:.1}" y="{2}" text-anchor="middle">{3}</text>"##,
            px(*x),
            TOP + plot_h,
            TOP + plot_h + 16.0,
            label(*x)
        );
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444444"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0,
        esc(x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        esc(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.0 > 0.0)
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        for p in &points {
            let (x, y) = p.split_once(',').expect("formatted as x,y");
            let _ = writeln!(svg, r#"<circle cx="{x}" cy="{y}" r="3" fill="{colour}"/>"#);
        }
        let ly = TOP + 14.0 + 16.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{0}" x2="{1}" y1="{2}" y2="{2}" stroke="{colour}" stroke-width="2"/><text x="{3}" y="{4}">{5}</text>"#,
            LEFT + 10.0,
            LEFT + 30.0,
            ly,
            LEFT + 36.0,
            ly + 4.0,
            esc(&s.name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}
