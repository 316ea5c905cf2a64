//! The `--plot` picture: a hand-written SVG with two panels, throughput per
//! second over the run and the latency percentile curve (HdrHistogram's
//! classic plot: x is log10(1 / (1 − p)), so 90 %, 99 %, 99.9 %, 99.99 %
//! are evenly spaced).

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::report::BenchReport;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 800.0;
const FONT: &str = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";
/// The curve is drawn up to this many nines (99.99 %).
const CURVE_NINES: f64 = 4.0;
/// Points per decade of the percentile axis.
const CURVE_STEPS_PER_NINE: usize = 100;
/// Throughput as bars up to this many seconds, as a line beyond.
const MAX_BARS: usize = 240;
/// Latency axis is logarithmic when the curve spans more than this factor.
const LOG_Y_ABOVE_RATIO: f64 = 30.0;

/// The plotting rectangle of a panel (SVG user units).
#[derive(Clone, Copy)]
struct Area {
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

impl Area {
    fn width(&self) -> f64 {
        self.right - self.left
    }
    fn height(&self) -> f64 {
        self.bottom - self.top
    }
}

const THROUGHPUT: Area = Area {
    left: 100.0,
    top: 120.0,
    right: 920.0,
    bottom: 370.0,
};
const LATENCY: Area = Area {
    left: 100.0,
    top: 480.0,
    right: 920.0,
    bottom: 730.0,
};

pub(crate) fn render(report: &BenchReport) -> String {
    let mut s = String::with_capacity(32 * 1024);
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" {FONT}>"
    );
    let _ = writeln!(
        s,
        "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>"
    );
    let title = format!(
        "keel bench: {} workload, {} client{} × {} in flight, {} s",
        report.workload,
        report.clients,
        if report.clients == 1 { "" } else { "s" },
        report.in_flight,
        trim(report.duration.as_secs_f64(), 1)
    );
    text(&mut s, WIDTH / 2.0, 32.0, 20.0, "middle", "bold", &title);
    let line1 = format!(
        "servers {} · value {} B · {} ops, {} errors ({}%) · {} ops/s",
        report.servers.join(","),
        report.value_size,
        report.ops,
        report.errors,
        trim(report.error_rate() * 100.0, 3),
        trim(report.tps, 1)
    );
    text(&mut s, WIDTH / 2.0, 56.0, 13.0, "middle", "normal", &line1);
    let l = &report.latency;
    let line2 = format!(
        "latency avg {} · p50 {} · p90 {} · p99 {} · p99.9 {} · max {}",
        fmt_us(l.avg_us),
        fmt_us(l.p50_us as f64),
        fmt_us(l.p90_us as f64),
        fmt_us(l.p99_us as f64),
        fmt_us(l.p999_us as f64),
        fmt_us(l.max_us as f64)
    );
    text(&mut s, WIDTH / 2.0, 76.0, 13.0, "middle", "normal", &line2);
    throughput_panel(&mut s, report);
    latency_panel(&mut s, &report.histogram);
    s.push_str("</svg>\n");
    s
}

fn throughput_panel(s: &mut String, report: &BenchReport) {
    let a = THROUGHPUT;
    text(
        s,
        a.left,
        a.top - 14.0,
        15.0,
        "start",
        "bold",
        "Throughput (successful operations per second)",
    );
    let ok = &report.per_second;
    let errs = &report.per_second_errors;
    let n = ok.len().max(1);
    let peak = ok.iter().chain(errs.iter()).copied().max().unwrap_or(0) as f64;
    let (yticks, ytop) = linear_ticks(peak.max(report.tps) * 1.05, 5);
    let x = |sec: f64| a.left + sec / n as f64 * a.width();
    let y = |v: f64| a.bottom - v / ytop * a.height();
    frame(s, a);
    for t in &yticks {
        hgrid(s, a, y(*t), &fmt_count(*t));
    }
    let (xticks, _) = linear_ticks(n as f64, n.min(10));
    for t in xticks.iter().filter(|t| **t <= n as f64 + 1e-9) {
        vtick(s, a, x(*t), &trim(*t, 1));
    }
    if ok.len() <= MAX_BARS {
        let slot = a.width() / n as f64;
        let pad = (slot * 0.12).min(6.0);
        for (i, v) in ok.iter().enumerate() {
            let top = y(*v as f64);
            let _ = writeln!(
                s,
                "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"#4e79a7\"/>",
                x(i as f64) + pad,
                top,
                (slot - 2.0 * pad).max(0.5),
                a.bottom - top
            );
        }
    } else {
        let pts: Vec<(f64, f64)> = ok
            .iter()
            .enumerate()
            .map(|(i, v)| (x(i as f64 + 0.5), y(*v as f64)))
            .collect();
        polyline(s, &pts, "#4e79a7", 1.5);
    }
    if errs.iter().any(|e| *e > 0) {
        let pts: Vec<(f64, f64)> = errs
            .iter()
            .enumerate()
            .map(|(i, v)| (x(i as f64 + 0.5), y(*v as f64)))
            .collect();
        polyline(s, &pts, "#e15759", 2.0);
        text(
            s,
            a.right - 4.0,
            a.top + 32.0,
            12.0,
            "end",
            "normal",
            "red: errors per second",
        );
    }
    if report.tps > 0.0 {
        let ym = y(report.tps);
        let _ = writeln!(
            s,
            "<line x1=\"{:.2}\" y1=\"{ym:.2}\" x2=\"{:.2}\" y2=\"{ym:.2}\" stroke=\"#f28e2b\" \
             stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>",
            a.left, a.right
        );
        label(
            s,
            a.right - 4.0,
            ym - 5.0,
            "end",
            &format!("mean {} ops/s", fmt_count(report.tps)),
        );
    }
    axis_labels(s, a, "time since start (s)", "operations / s");
}

fn latency_panel(s: &mut String, hist: &Histogram<u64>) {
    let a = LATENCY;
    text(
        s,
        a.left,
        a.top - 14.0,
        15.0,
        "start",
        "bold",
        "Latency by percentile (successful operations)",
    );
    frame(s, a);
    let x = |nines: f64| a.left + nines / CURVE_NINES * a.width();
    // Percentile axis: 0 %, 50 %, 90 %, 99 %, 99.9 %, 99.99 %.
    for (nines, label) in [
        (0.0, "0%"),
        (2f64.log10(), "50%"),
        (1.0, "90%"),
        (2.0, "99%"),
        (3.0, "99.9%"),
        (4.0, "99.99%"),
    ] {
        vtick(s, a, x(nines), label);
    }
    axis_labels(
        s,
        a,
        "percentile (log scale: each step right is one more nine)",
        "latency",
    );
    if hist.is_empty() {
        text(
            s,
            (a.left + a.right) / 2.0,
            (a.top + a.bottom) / 2.0,
            16.0,
            "middle",
            "normal",
            "no successful operations",
        );
        return;
    }
    let steps = CURVE_NINES as usize * CURVE_STEPS_PER_NINE;
    let curve: Vec<(f64, u64)> = (0..=steps)
        .map(|k| {
            let nines = k as f64 / CURVE_STEPS_PER_NINE as f64;
            let q = 1.0 - 10f64.powf(-nines);
            (nines, hist.value_at_quantile(q.max(0.0)).max(1))
        })
        .collect();
    let lo = curve.first().map(|c| c.1).unwrap_or(1) as f64;
    let hi = curve.last().map(|c| c.1).unwrap_or(1) as f64;
    let log = hi / lo.max(1.0) > LOG_Y_ABOVE_RATIO;
    let scale: Box<dyn Fn(f64) -> f64> = if log {
        let dlo = lo.log10().floor();
        let dhi = hi.log10().ceil().max(dlo + 1.0);
        for d in (dlo as i32)..=(dhi as i32) {
            let v = 10f64.powi(d);
            let yy = a.bottom - (v.log10() - dlo) / (dhi - dlo) * a.height();
            hgrid(s, a, yy, &fmt_us(v));
            for m in [2.0, 5.0] {
                let mv = v * m;
                if mv.log10() < dhi {
                    let my = a.bottom - (mv.log10() - dlo) / (dhi - dlo) * a.height();
                    let _ = writeln!(
                        s,
                        "<line x1=\"{:.2}\" y1=\"{my:.2}\" x2=\"{:.2}\" y2=\"{my:.2}\" \
                         stroke=\"#eeeeee\" stroke-width=\"1\"/>",
                        a.left, a.right
                    );
                }
            }
        }
        text(
            s,
            a.left + 6.0,
            a.top + 16.0,
            11.0,
            "start",
            "normal",
            "(latency axis logarithmic)",
        );
        Box::new(move |v: f64| a.bottom - (v.max(1.0).log10() - dlo) / (dhi - dlo) * a.height())
    } else {
        let (ticks, top) = linear_ticks(hi * 1.05, 5);
        for t in &ticks {
            hgrid(s, a, a.bottom - t / top * a.height(), &fmt_us(*t));
        }
        Box::new(move |v: f64| a.bottom - v / top * a.height())
    };
    let pts: Vec<(f64, f64)> = curve
        .iter()
        .map(|(nines, v)| (x(*nines), scale(*v as f64)))
        .collect();
    polyline(s, &pts, "#4e79a7", 2.0);
    for (q, name) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9")] {
        let v = hist.value_at_quantile(q).max(1) as f64;
        let (px, py) = (x(-(1.0f64 - q).log10()), scale(v));
        let _ = writeln!(
            s,
            "<circle cx=\"{px:.2}\" cy=\"{py:.2}\" r=\"4\" fill=\"#e15759\"/>"
        );
        let tag = format!("{name} {}", fmt_us(v));
        // Left of the point unless that would run into the y axis labels.
        let (lx, anchor) = if px - 7.0 * tag.chars().count() as f64 - 6.0 < a.left + 4.0 {
            (px + 6.0, "start")
        } else {
            (px - 6.0, "end")
        };
        label(s, lx, py - 8.0, anchor, &tag);
    }
    text(
        s,
        a.right - 4.0,
        a.bottom - 8.0,
        12.0,
        "end",
        "normal",
        &format!("max {}", fmt_us(hist.max() as f64)),
    );
}

fn frame(s: &mut String, a: Area) {
    let _ = writeln!(
        s,
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333333\" \
         stroke-width=\"1\"/>",
        a.left,
        a.top,
        a.width(),
        a.height()
    );
}

/// A horizontal grid line at `y` with its label left of the axis.
fn hgrid(s: &mut String, a: Area, y: f64, label: &str) {
    let _ = writeln!(
        s,
        "<line x1=\"{:.2}\" y1=\"{y:.2}\" x2=\"{:.2}\" y2=\"{y:.2}\" stroke=\"#dddddd\" \
         stroke-width=\"1\"/>",
        a.left, a.right
    );
    let _ = writeln!(
        s,
        "<line x1=\"{:.2}\" y1=\"{y:.2}\" x2=\"{:.2}\" y2=\"{y:.2}\" stroke=\"#333333\"/>",
        a.left - 5.0,
        a.left
    );
    text(s, a.left - 8.0, y + 4.0, 12.0, "end", "normal", label);
}

/// A tick on the x axis at `x` with its label below, and a faint grid line.
fn vtick(s: &mut String, a: Area, x: f64, label: &str) {
    let _ = writeln!(
        s,
        "<line x1=\"{x:.2}\" y1=\"{:.2}\" x2=\"{x:.2}\" y2=\"{:.2}\" stroke=\"#eeeeee\"/>",
        a.top, a.bottom
    );
    let _ = writeln!(
        s,
        "<line x1=\"{x:.2}\" y1=\"{:.2}\" x2=\"{x:.2}\" y2=\"{:.2}\" stroke=\"#333333\"/>",
        a.bottom,
        a.bottom + 5.0
    );
    text(s, x, a.bottom + 19.0, 12.0, "middle", "normal", label);
}

fn axis_labels(s: &mut String, a: Area, xlabel: &str, ylabel: &str) {
    text(
        s,
        (a.left + a.right) / 2.0,
        a.bottom + 40.0,
        13.0,
        "middle",
        "normal",
        xlabel,
    );
    let (cx, cy) = (a.left - 72.0, (a.top + a.bottom) / 2.0);
    let _ = writeln!(
        s,
        "<text x=\"{cx:.2}\" y=\"{cy:.2}\" font-size=\"13\" text-anchor=\"middle\" \
         transform=\"rotate(-90 {cx:.2} {cy:.2})\">{}</text>",
        escape(ylabel)
    );
}

fn polyline(s: &mut String, pts: &[(f64, f64)], color: &str, width: f64) {
    let mut points = String::with_capacity(pts.len() * 16);
    for (x, y) in pts {
        let _ = write!(points, "{x:.2},{y:.2} ");
    }
    let _ = writeln!(
        s,
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"{width}\" \
         stroke-linejoin=\"round\"/>",
        points.trim_end()
    );
}

/// Text with a white outline, readable on top of bars and grid lines.
fn label(s: &mut String, x: f64, y: f64, anchor: &str, body: &str) {
    let _ = writeln!(
        s,
        "<text x=\"{x:.2}\" y=\"{y:.2}\" font-size=\"12\" text-anchor=\"{anchor}\" \
         stroke=\"white\" stroke-width=\"3\" stroke-linejoin=\"round\" \
         paint-order=\"stroke\">{}</text>",
        escape(body)
    );
}

fn text(s: &mut String, x: f64, y: f64, size: f64, anchor: &str, weight: &str, body: &str) {
    let _ = writeln!(
        s,
        "<text x=\"{x:.2}\" y=\"{y:.2}\" font-size=\"{size}\" text-anchor=\"{anchor}\" \
         font-weight=\"{weight}\">{}</text>",
        escape(body)
    );
}

pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// 1, 2, 2.5 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let decade = 10f64.powf(raw.log10().floor());
    let f = raw / decade;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 2.5 {
        2.5
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * decade
}

/// Ticks 0, step, …, top with top >= max and about `target` steps.
pub(crate) fn linear_ticks(max: f64, target: usize) -> (Vec<f64>, f64) {
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let step = nice_step(max / target.max(1) as f64);
    let steps = (max / step).ceil().max(1.0) as usize;
    let ticks = (0..=steps).map(|i| i as f64 * step).collect();
    (ticks, steps as f64 * step)
}

/// `x` with at most `decimals` decimals, trailing zeros removed.
pub(crate) fn trim(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A count: 950, 12.5k, 1.2M.
pub(crate) fn fmt_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6, 2))
    } else if v >= 1e4 {
        format!("{}k", trim(v / 1e3, 1))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3, 2))
    } else {
        trim(v, 1)
    }
}

/// A latency given in µs: 850 µs, 1.25 ms, 2.5 s.
pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", trim(us / 1e6, 2))
    } else if us >= 1e3 {
        format!("{} ms", trim(us / 1e3, 2))
    } else {
        format!("{} µs", trim(us, 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice_and_cover_the_maximum() {
        let (t, top) = linear_ticks(9_300.0, 5);
        assert_eq!(top, 10_000.0);
        assert_eq!(t, vec![0.0, 2_000.0, 4_000.0, 6_000.0, 8_000.0, 10_000.0]);
        let (t, top) = linear_ticks(1.0, 10);
        assert!(top >= 1.0 && t.len() == 11);
        let (t, top) = linear_ticks(0.0, 5);
        assert!(top > 0.0 && t[0] == 0.0);
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(fmt_us(850.0), "850 µs");
        assert_eq!(fmt_us(1_250.0), "1.25 ms");
        assert_eq!(fmt_us(2_500_000.0), "2.5 s");
        assert_eq!(fmt_count(950.0), "950");
        assert_eq!(fmt_count(2_500.0), "2.5k");
        assert_eq!(fmt_count(12_345.0), "12.3k");
        assert_eq!(fmt_count(1_200_000.0), "1.2M");
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
