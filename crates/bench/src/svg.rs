//! The `--plot` picture, drawn with plotters' SVG backend: a header with
//! the run's settings and summary, then two panels, throughput per second
//! over the run and the latency percentile curve (HdrHistogram's classic
//! plot: x is log10(1 / (1 − p)), so 90 %, 99 %, 99.9 %, 99.99 % are
//! evenly spaced). Text is written as SVG `<text>` (plotters' built-in
//! size estimate, no font files are read).

use hdrhistogram::Histogram;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::BenchReport;

const WIDTH_PX: u32 = 960;
const HEIGHT_PX: u32 = 800;
const HEADER_PX: u32 = 90;
const THROUGHPUT_PX: u32 = 340;
const FONT: &str = "sans-serif";
const TITLE_PT: u32 = 22;
const CAPTION_PT: u32 = 18;
const TEXT_PT: u32 = 15;
const MARGIN_PX: u32 = 16;
const X_LABEL_AREA_PX: u32 = 46;
const Y_LABEL_AREA_PX: u32 = 72;
/// The curve is drawn up to this many nines (99.99 %).
const CURVE_NINES: f64 = 4.0;
/// Points per decade of the percentile axis.
const CURVE_STEPS_PER_NINE: usize = 100;
/// Throughput as bars up to this many seconds, as a line beyond.
const MAX_BARS: usize = 240;
/// Fraction of a second's slot left blank on each side of its bar.
const BAR_GAP: f64 = 0.06;
/// Latency axis is logarithmic when the curve spans more than this factor.
const LOG_Y_ABOVE_RATIO: f64 = 30.0;
/// Headroom above the highest value on linear axes (room for the legend).
const Y_HEADROOM: f64 = 1.2;
/// Percentile markers left of this many nines get their label on the right
/// (clear of the y axis).
const LABEL_RIGHT_BELOW_NINES: f64 = 0.8;
/// Minor grid lines between two major ones on the latency axis.
const LATENCY_LIGHT_LINES: usize = 4;
const MARKER_RADIUS_PX: u32 = 4;

const OK_BLUE: RGBColor = RGBColor(0x4e, 0x79, 0xa7);
const ERROR_RED: RGBColor = RGBColor(0xe1, 0x57, 0x59);
const MEAN_ORANGE: RGBColor = RGBColor(0xf2, 0x8e, 0x2b);
const GRID_GREY: RGBColor = RGBColor(0xdd, 0xdd, 0xdd);
const LIGHT_GRID_GREY: RGBColor = RGBColor(0xf0, 0xf0, 0xf0);

/// The percentiles marked on the curve.
const MARKED: [(f64, &str); 4] = [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9")];

type PlotResult = Result<(), Box<dyn std::error::Error>>;

pub(crate) fn render(report: &BenchReport) -> String {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
        if let Err(e) = draw(&root, report) {
            tracing::warn!(error = %e, "plot incomplete");
        }
        let _ = root.present();
    }
    out
}

fn draw(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    report: &BenchReport,
) -> PlotResult {
    root.fill(&WHITE)?;
    let (header, body) = root.split_vertically(HEADER_PX);
    let (top, bottom) = body.split_vertically(THROUGHPUT_PX);
    draw_header(&header, report)?;
    draw_throughput(&top, report)?;
    draw_latency(&bottom, &report.histogram)
}

fn centered(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).pos(Pos::new(HPos::Center, VPos::Top))
}

fn draw_header<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    report: &BenchReport,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    let mid = WIDTH_PX as i32 / 2;
    let title = format!(
        "keel bench: {} workload, {} client{} × {} in flight, {} s",
        report.workload,
        report.clients,
        if report.clients == 1 { "" } else { "s" },
        report.in_flight,
        trim(report.duration.as_secs_f64(), 1)
    );
    let bold = TextStyle::from((FONT, TITLE_PT).into_font().style(FontStyle::Bold))
        .pos(Pos::new(HPos::Center, VPos::Top));
    area.draw(&Text::new(title, (mid, 14), bold))?;
    let l = &report.latency;
    let lines = [
        format!(
            "servers {} · value {} B · {} ops, {} errors ({}%) · {} ops/s",
            report.servers.join(","),
            report.value_size,
            report.ops,
            report.errors,
            trim(report.error_rate() * 100.0, 3),
            trim(report.tps, 1)
        ),
        format!(
            "latency avg {} · p50 {} · p90 {} · p99 {} · p99.9 {} · max {}",
            fmt_us(l.avg_us),
            fmt_us(l.p50_us as f64),
            fmt_us(l.p90_us as f64),
            fmt_us(l.p99_us as f64),
            fmt_us(l.p999_us as f64),
            fmt_us(l.max_us as f64)
        ),
    ];
    for (i, line) in lines.into_iter().enumerate() {
        area.draw(&Text::new(
            line,
            (mid, 44 + 20 * i as i32),
            centered(TEXT_PT),
        ))?;
    }
    Ok(())
}

fn draw_throughput<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    report: &BenchReport,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    let ok = &report.per_second;
    let errs = &report.per_second_errors;
    let seconds = ok.len().max(1) as f64;
    let peak = ok.iter().chain(errs).copied().max().unwrap_or(0) as f64;
    let top = (peak.max(report.tps) * Y_HEADROOM).max(1.0);
    let mut chart = panel(area, "Throughput (successful operations per second)")
        .build_cartesian_2d(0f64..seconds, 0f64..top)?;
    chart
        .configure_mesh()
        .max_light_lines(0)
        .bold_line_style(GRID_GREY)
        .x_desc("time since start (s)")
        .y_desc("operations / s")
        .x_label_formatter(&|v| trim(*v, 1))
        .y_label_formatter(&|v| fmt_count(*v))
        .axis_desc_style((FONT, TEXT_PT))
        .label_style((FONT, TEXT_PT - 1))
        .draw()?;
    if ok.len() <= MAX_BARS {
        chart.draw_series(ok.iter().enumerate().map(|(i, v)| {
            let x = i as f64;
            Rectangle::new(
                [(x + BAR_GAP, 0.0), (x + 1.0 - BAR_GAP, *v as f64)],
                OK_BLUE.filled(),
            )
        }))?;
    } else {
        chart.draw_series(LineSeries::new(
            ok.iter()
                .enumerate()
                .map(|(i, v)| (i as f64 + 0.5, *v as f64)),
            OK_BLUE.stroke_width(2),
        ))?;
    }
    if errs.iter().any(|e| *e > 0) {
        chart
            .draw_series(LineSeries::new(
                errs.iter()
                    .enumerate()
                    .map(|(i, v)| (i as f64 + 0.5, *v as f64)),
                ERROR_RED.stroke_width(2),
            ))?
            .label("errors per second")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], ERROR_RED.stroke_width(2)));
    }
    if report.tps > 0.0 {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, report.tps), (seconds, report.tps)],
                6,
                4,
                MEAN_ORANGE.stroke_width(2),
            ))?
            .label(format!("mean {} ops/s", fmt_count(report.tps)))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], MEAN_ORANGE.stroke_width(2)));
    }
    legend(&mut chart)
}

fn draw_latency<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    hist: &Histogram<u64>,
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    let title = "Latency by percentile (successful operations)";
    if hist.is_empty() {
        let mut chart = panel(area, title).build_cartesian_2d(percentile_axis(), 0f64..1.0)?;
        latency_mesh(&mut chart, "latency")?;
        let mid = (CURVE_NINES / 2.0, 0.5);
        chart.draw_series([Text::new(
            "no successful operations",
            mid,
            centered(CAPTION_PT),
        )])?;
        return Ok(());
    }
    let curve = percentile_curve(hist);
    let lo = curve.first().map_or(1, |c| c.1) as f64;
    let hi = curve.last().map_or(1, |c| c.1) as f64;
    if hi / lo.max(1.0) > LOG_Y_ABOVE_RATIO {
        let floor = 10f64.powf(lo.log10().floor());
        let ceil = 10f64.powf(hi.log10().ceil()).max(floor * 10.0);
        let y = (floor..ceil).log_scale();
        let mut chart = panel(area, title).build_cartesian_2d(percentile_axis(), y)?;
        latency_mesh(&mut chart, "latency (log scale)")?;
        latency_series(&mut chart, &curve, hist)
    } else {
        let mut chart =
            panel(area, title).build_cartesian_2d(percentile_axis(), 0f64..hi * Y_HEADROOM)?;
        latency_mesh(&mut chart, "latency")?;
        latency_series(&mut chart, &curve, hist)
    }
}

/// A panel's chart builder: caption, margins, label areas.
fn panel<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(
            caption,
            (FONT, CAPTION_PT).into_font().style(FontStyle::Bold),
        )
        .margin(MARGIN_PX)
        .margin_right(MARGIN_PX * 3)
        .x_label_area_size(X_LABEL_AREA_PX)
        .y_label_area_size(Y_LABEL_AREA_PX);
    builder
}

/// The percentile axis: x is nines (log10(1 / (1 − p))) from 0 to
/// [`CURVE_NINES`], with ticks exactly at 0 %, 50 %, 90 %, … 99.99 %.
struct PercentileAxis(RangedCoordf64);

/// Where the percentile axis has its ticks, in nines.
const PERCENTILE_TICKS: [f64; 6] = [0.0, std::f64::consts::LOG10_2, 1.0, 2.0, 3.0, 4.0];

impl Ranged for PercentileAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.0.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        PERCENTILE_TICKS.to_vec()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.0.range()
    }
}

fn percentile_axis() -> PercentileAxis {
    PercentileAxis((0f64..CURVE_NINES).into())
}

fn percentile_label(nines: f64) -> String {
    let percent = 100.0 * (1.0 - 10f64.powf(-nines));
    format!("{}%", trim(percent, 2))
}

fn latency_mesh<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<PercentileAxis, Y>>,
    y_desc: &str,
) -> PlotResult
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .max_light_lines(LATENCY_LIGHT_LINES)
        .light_line_style(LIGHT_GRID_GREY)
        .bold_line_style(GRID_GREY)
        .x_desc("percentile (log scale: each step right is one more nine)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| percentile_label(*v))
        .y_label_formatter(&|v| fmt_us(*v))
        .axis_desc_style((FONT, TEXT_PT))
        .label_style((FONT, TEXT_PT - 1))
        .draw()?;
    Ok(())
}

/// (nines, latency µs ≥ 1) from 0 to [`CURVE_NINES`].
fn percentile_curve(hist: &Histogram<u64>) -> Vec<(f64, u64)> {
    let steps = CURVE_NINES as usize * CURVE_STEPS_PER_NINE;
    (0..=steps)
        .map(|k| {
            let nines = k as f64 / CURVE_STEPS_PER_NINE as f64;
            let q = 1.0 - 10f64.powf(-nines);
            (nines, hist.value_at_quantile(q.max(0.0)).max(1))
        })
        .collect()
}

fn latency_series<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    curve: &[(f64, u64)],
    hist: &Histogram<u64>,
) -> PlotResult
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .draw_series(LineSeries::new(
            curve.iter().map(|(n, v)| (*n, *v as f64)),
            OK_BLUE.stroke_width(2),
        ))?
        .label(format!("latency (max {})", fmt_us(hist.max() as f64)))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], OK_BLUE.stroke_width(2)));
    chart.draw_series(MARKED.iter().map(|(q, name)| {
        let v = hist.value_at_quantile(*q).max(1) as f64;
        let nines = -(1.0 - q).log10();
        let tag = format!("{name} {}", fmt_us(v));
        let (offset, side) = if nines < LABEL_RIGHT_BELOW_NINES {
            (6, HPos::Left)
        } else {
            (-6, HPos::Right)
        };
        let style =
            TextStyle::from((FONT, TEXT_PT - 1).into_font()).pos(Pos::new(side, VPos::Bottom));
        EmptyElement::at((nines, v))
            + Circle::new((0, 0), MARKER_RADIUS_PX, ERROR_RED.filled())
            + Text::new(tag, (offset, -6), style)
    }))?;
    legend(chart)
}

fn legend<'a, DB, X, Y>(chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>) -> PlotResult
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(GRID_GREY)
        .label_font((FONT, TEXT_PT - 1))
        .draw()?;
    Ok(())
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
    fn numbers_read_well() {
        assert_eq!(fmt_us(850.0), "850 µs");
        assert_eq!(fmt_us(1_250.0), "1.25 ms");
        assert_eq!(fmt_us(2_500_000.0), "2.5 s");
        assert_eq!(fmt_count(950.0), "950");
        assert_eq!(fmt_count(2_500.0), "2.5k");
        assert_eq!(fmt_count(12_345.0), "12.3k");
        assert_eq!(fmt_count(1_200_000.0), "1.2M");
        assert_eq!(trim(2.50, 3), "2.5");
    }

    #[test]
    fn percentile_ticks_read_as_percentiles() {
        let labels: Vec<String> = PERCENTILE_TICKS.into_iter().map(percentile_label).collect();
        assert_eq!(labels, ["0%", "50%", "90%", "99%", "99.9%", "99.99%"]);
    }

    /// A run with only errors and more seconds than bars: a line, the
    /// error series and the empty-latency notice, all as SVG text.
    #[test]
    fn a_failed_long_run_still_plots() {
        const SECONDS: usize = MAX_BARS + 60;
        let report = BenchReport {
            workload: crate::Workload::Set,
            servers: vec!["127.0.0.1:1".into()],
            clients: 1,
            in_flight: 1,
            value_size: 100,
            seed: 0,
            root: "/r".into(),
            duration: std::time::Duration::from_secs(SECONDS as u64),
            elapsed: std::time::Duration::from_secs(SECONDS as u64),
            ops: SECONDS as u64,
            successes: 0,
            errors: SECONDS as u64,
            tps: 0.0,
            latency: crate::LatencySummary::of(&Histogram::new(3).unwrap()),
            ops_by_kind: Vec::new(),
            error_kinds: Vec::new(),
            per_second: vec![0; SECONDS],
            per_second_errors: vec![1; SECONDS],
            histogram: Histogram::new(3).unwrap(),
            setup: std::time::Duration::ZERO,
            cleaned_nodes: 0,
            cleanup: std::time::Duration::ZERO,
            cleanup_error: None,
            kept_tree: false,
        };
        let svg = render(&report);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for text in [
            "no successful operations",
            "errors per second",
            "Throughput",
            "99.99%",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(!svg.contains("<rect x=\"0\" y=\"0\" width=\"0\""));
    }

    #[test]
    fn the_curve_rises_and_ends_at_four_nines() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1..=10_000u64 {
            h.record(v).unwrap();
        }
        let curve = percentile_curve(&h);
        assert_eq!(curve.len(), CURVE_NINES as usize * CURVE_STEPS_PER_NINE + 1);
        assert!(curve
            .windows(2)
            .all(|w| w[0].1 <= w[1].1 && w[0].0 < w[1].0));
        assert_eq!(curve.last().unwrap().0, CURVE_NINES);
    }
}
