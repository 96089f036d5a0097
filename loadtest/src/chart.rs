//! Line charts as self-contained SVG (no scripts, no fonts to fetch): the page embeds them
//! and they are written as files for the docs. Knows nothing of reports or runs: it draws
//! named series of points.

use std::fmt::Write as _;

const W: f64 = 720.0;
const H: f64 = 250.0;
const PAD: f64 = 56.0;
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// (x, y) points of a line.
pub type Points = Vec<(f64, f64)>;
/// (name, colour, points).
type Series<'a> = (String, &'a str, Points);

/// Moments marked on a time chart: a dashed vertical line at each, one colour per kind (named
/// in the legend).
#[derive(Debug, Clone, Default)]
pub struct Markers {
    pub kinds: Vec<String>,
    /// (x, index into `kinds`).
    pub at: Vec<(f64, usize)>,
}

/// One chart, ready for the page and for a file.
pub struct Chart {
    /// File stem under `charts/`.
    pub name: String,
    pub title: String,
    pub svg: String,
}

pub fn num(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A step of 1, 2 or 5 × 10^k that cuts `0..max` into at most five parts.
fn nice_step(max: f64) -> f64 {
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// A line chart of one or more series; with `x_log`, x is drawn on a log10 scale (positive
/// x only); `y_top` fixes the top of the y axis (a CDF's 1).
fn svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_log: bool,
    y_top: Option<f64>,
    markers: &Markers,
) -> String {
    let fx = |x: f64| if x_log { x.max(1e-3).log10() } else { x };
    let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!x_log || x > 0.0);
    let (mut x_min, mut x_max, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY, 0.0_f64);
    for p in series.iter().flat_map(|s| s.2.iter()).filter(|p| finite(p)) {
        x_min = x_min.min(fx(p.0));
        x_max = x_max.max(fx(p.0));
        y_max = y_max.max(p.1);
    }
    let x_step;
    if x_log {
        x_min = if x_min.is_finite() { x_min.floor() } else { 0.0 };
        x_max = if x_max.is_finite() {
            x_max.ceil().max(x_min + 1.0)
        } else {
            x_min + 1.0
        };
        x_step = 1.0;
    } else {
        x_min = 0.0;
        let top = if x_max.is_finite() && x_max > 0.0 {
            x_max
        } else {
            1.0
        };
        x_step = nice_step(top);
        x_max = (top / x_step).ceil() * x_step;
    }
    let (y_max, y_step) = match y_top {
        Some(t) => (t, t / 4.0),
        None => {
            let top = if y_max > 0.0 { y_max } else { 1.0 };
            let step = nice_step(top);
            ((top / step).ceil() * step, step)
        }
    };
    let legend = series.len() + markers.kinds.len();
    let height = H + 14.0 * legend as f64;
    let (top, bottom) = (34.0 + 14.0 * legend as f64, height - 40.0);
    let sx = |x: f64| PAD + (fx(x) - x_min) / (x_max - x_min) * (W - 2.0 * PAD);
    let sy = |y: f64| bottom - y / y_max * (bottom - top);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="#fff"/><text x="{:.1}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"##,
        W / 2.0,
        escape(title)
    );
    let (x0, x1) = (PAD, W - PAD);
    let _ = write!(
        s,
        r##"<line x1="{x0}" y1="{bottom:.1}" x2="{x1}" y2="{bottom:.1}" stroke="#444"/><line x1="{x0}" y1="{bottom:.1}" x2="{x0}" y2="{top:.1}" stroke="#444"/>"##
    );
    let mut t = x_min;
    while t <= x_max + x_step / 2.0 {
        let (x, label) = if x_log {
            (sx(10f64.powf(t)), num(10f64.powf(t)))
        } else {
            (sx(t), num(t))
        };
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="#444"/><line x1="{x:.1}" y1="{bottom:.1}" x2="{x:.1}" y2="{top:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            bottom + 4.0,
            bottom + 16.0,
        );
        t += x_step;
    }
    let mut v = 0.0;
    while v <= y_max + y_step / 2.0 {
        let _ = write!(
            s,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{x0}" y2="{y:.1}" stroke="#444"/><line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 4.0,
            x0 - 6.0,
            sy(v) + 4.0,
            num(v),
            y = sy(v),
        );
        v += y_step;
    }
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"##,
        W / 2.0,
        height - 8.0,
        escape(x_label),
        (top + bottom) / 2.0,
        (top + bottom) / 2.0,
        escape(y_label)
    );
    // Markers under the lines, in colours after the series'.
    for (k, kind) in markers.kinds.iter().enumerate() {
        let colour = PALETTE[(series.len() + k) % PALETTE.len()];
        for &(x, _) in markers.at.iter().filter(|m| m.1 == k) {
            if !x.is_finite() || fx(x) < x_min || fx(x) > x_max {
                continue;
            }
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}" stroke="{colour}" stroke-opacity="0.45" stroke-dasharray="3,3"/>"##,
                x = sx(x),
            );
        }
        let ly = 26.0 + 14.0 * (series.len() + k) as f64;
        let _ = write!(
            s,
            r##"<line x1="{x0}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-dasharray="3,3"/><text x="{:.1}" y="{ly:.1}">{}</text>"##,
            ly - 3.0,
            x0 + 12.0,
            ly - 3.0,
            x0 + 16.0,
            escape(kind)
        );
    }
    for (i, (name, colour, points)) in series.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .filter(|p| finite(p))
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let ly = 26.0 + 14.0 * i as f64;
        let _ = write!(
            s,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/><rect x="{x0}" y="{:.1}" width="12" height="3" fill="{colour}"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            path.join(" "),
            ly - 4.0,
            x0 + 16.0,
            ly,
            escape(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// The CDF of latency samples (ms) as a fraction of `expected`, at most ~400 points.
pub fn cdf_of(mut samples: Vec<f64>, expected: usize) -> Points {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let of = expected.max(n).max(1) as f64;
    let step = (n / 400).max(1);
    samples
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i + 1 == n)
        .map(|(i, &ms)| (ms, (i + 1) as f64 / of))
        .collect()
}

/// A line chart of named series, coloured in turn from the palette.
pub fn line_chart(
    name: String,
    title: String,
    axes: (&str, &str),
    series: Vec<(String, Points)>,
    x_log: bool,
    y_top: Option<f64>,
) -> Chart {
    let series: Vec<Series> = series
        .into_iter()
        .enumerate()
        .map(|(i, (label, points))| (label, PALETTE[i % PALETTE.len()], points))
        .collect();
    let svg = svg(&title, axes.0, axes.1, &series, x_log, y_top, &Markers::default());
    Chart { name, title, svg }
}

/// A line chart over time with moments marked (faults, say).
pub fn marked_time_chart(
    name: &str,
    title: &str,
    axes: (&str, &str),
    series: Vec<(String, Points)>,
    markers: &Markers,
) -> Chart {
    let series: Vec<Series> = series
        .into_iter()
        .enumerate()
        .map(|(i, (label, points))| (label, PALETTE[i % PALETTE.len()], points))
        .collect();
    let svg = svg(title, axes.0, axes.1, &series, false, None, markers);
    Chart {
        name: name.into(),
        title: title.into(),
        svg,
    }
}

/// A latency CDF chart (log scale) of one or more named sample sets.
pub fn latency_chart(name: &str, title: &str, series: Vec<(String, Points)>) -> Chart {
    line_chart(
        name.into(),
        title.into(),
        ("ms", "fraction of expected"),
        series,
        true,
        Some(1.0),
    )
}

/// A line chart over time of one or more named series.
pub fn time_chart(name: &str, title: &str, y_label: &str, series: Vec<(String, Points)>) -> Chart {
    line_chart(
        name.into(),
        title.into(),
        ("seconds", y_label),
        series,
        false,
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_scale_ticks_are_decades_and_points_stay_inside() {
        let s = svg(
            "t",
            "x",
            "y",
            &[("a".into(), "#000", vec![(2.0, 0.1), (30.0, 0.5), (4000.0, 1.0)])],
            true,
            Some(1.0),
            &Markers::default(),
        );
        for tick in [">1<", ">10<", ">100<", ">1000<", ">10000<"] {
            assert!(s.contains(tick), "tick {tick} in {s}");
        }
        let points = s.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        for p in points.split(' ') {
            let (x, y) = p.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!(
                (PAD..=W - PAD).contains(&x) && (0.0..=H + 14.0).contains(&y),
                "{p}"
            );
        }
    }

    #[test]
    fn markers_are_drawn_inside_and_named_once() {
        let markers = Markers {
            kinds: vec!["kill".into(), "restart".into()],
            at: vec![(10.0, 0), (20.0, 0), (30.0, 1), (1e9, 1)],
        };
        let s = svg(
            "t",
            "x",
            "y",
            &[("a".into(), "#000", vec![(0.0, 1.0), (40.0, 2.0)])],
            false,
            None,
            &markers,
        );
        assert_eq!(
            s.matches("stroke-opacity=\"0.45\"").count(),
            3,
            "the one past the axis is left out"
        );
        assert_eq!(s.matches(">kill<").count(), 1);
        assert_eq!(s.matches(">restart<").count(), 1);
    }

    #[test]
    fn steps_are_one_two_or_five() {
        assert_eq!(nice_step(525.0), 200.0);
        assert_eq!(nice_step(5.3), 2.0);
        assert_eq!(nice_step(30_000.0), 10_000.0);
        assert_eq!(nice_step(1.0), 0.2);
    }
}
