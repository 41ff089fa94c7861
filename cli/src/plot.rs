//! `ramify bench --plot FILE.svg`: an SVG picture of the results, one row per
//! model. Left, the latency distribution of every mode (box from p25 to p75,
//! a thick median line, whiskers to min and max, every sample as a dot);
//! right, when several background-load levels were measured, median (solid)
//! and p95 (dashed) latency against load, one line per mode.

use crate::bench::Measured;
use anyhow::{anyhow, Result};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::ops::Range;
use std::path::Path;

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];

fn fail<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e}")
}

fn distinct<T: PartialEq + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v = Vec::new();
    for x in items {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// A linear f64 axis whose ticks are exactly the given values (categories,
/// load levels) rather than round numbers.
struct Ticks {
    range: Range<f64>,
    keys: Vec<f64>,
}

impl Ranged for Ticks {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        RangedCoordf64::from(self.range.clone()).map(value, limit)
    }
    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        self.keys.clone()
    }
    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// A short name for a model path: its file stem, or its folder's name for
/// the ONNX test layout's `…/NAME/model.onnx`.
fn short_name(model: &str) -> String {
    let p = Path::new(model);
    let stem = p.file_stem().map(|s| s.to_string_lossy().to_string());
    match (stem.as_deref(), p.parent().and_then(|d| d.file_name())) {
        (Some("model"), Some(dir)) => dir.to_string_lossy().to_string(),
        (Some(s), _) => s.to_string(),
        _ => model.to_string(),
    }
}

/// A deterministic horizontal offset in [-0.15, 0.15] for sample `k`.
fn jitter(k: usize) -> f64 {
    let h = (k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    (h as f64 / (1u64 << 24) as f64 - 0.5) * 0.3
}

/// Writes the plot of `results` to `path`.
pub fn write(path: &Path, results: &[Measured]) -> Result<()> {
    let models = distinct(results.iter().map(|m| m.model.clone()));
    let modes = distinct(results.iter().map(|m| m.mode.to_string()));
    let levels = distinct(results.iter().map(|m| m.background_load));
    let sweep = levels.len() > 1;
    let width = if sweep { 1400 } else { 800 };
    let height = 440 * models.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(fail)?;
    for (model, area) in models.iter().zip(root.split_evenly((models.len(), 1))) {
        let mine: Vec<&Measured> = results.iter().filter(|m| &m.model == model).collect();
        let name = short_name(model);
        if sweep {
            let (left, right) = area.split_horizontally(width / 2);
            distribution(&left, &name, &mine, &modes, true)?;
            against_load(&right, &name, &mine, &modes)?;
        } else {
            distribution(&area, &name, &mine, &modes, false)?;
        }
    }
    root.present().map_err(fail)
}

fn colour(modes: &[String], m: &Measured) -> RGBColor {
    let i = modes.iter().position(|x| *x == m.mode.to_string());
    PALETTE[i.unwrap_or(0) % PALETTE.len()]
}

fn distribution<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    name: &str,
    mine: &[&Measured],
    modes: &[String],
    sweep: bool,
) -> Result<()> {
    let n = mine.len().max(1);
    let labels: Vec<String> = mine
        .iter()
        .map(|m| match sweep {
            true => format!("{} @ {}", m.mode, m.background_load),
            false => m.mode.to_string(),
        })
        .collect();
    let top = mine
        .iter()
        .flat_map(|m| m.samples.iter().copied())
        .fold(0.0, f64::max);
    let keys: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{name}: latency per mode"),
            ("sans-serif", 18).into_font(),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            Ticks {
                range: -0.5..n as f64 - 0.5,
                keys,
            },
            0.0..(top * 1.1).max(1e-3),
        )
        .map_err(fail)?;
    let fmt = |x: &f64| {
        let i = x.round().max(0.0) as usize;
        labels.get(i).cloned().unwrap_or_default()
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&fmt)
        .y_desc("latency (ms)")
        .draw()
        .map_err(fail)?;
    for (i, m) in mine.iter().enumerate() {
        let c = colour(modes, m);
        let s = m.stats();
        let x = i as f64;
        let boxed = [(x - 0.25, s.p25), (x + 0.25, s.p75)];
        chart
            .draw_series([
                Rectangle::new(boxed, c.mix(0.2).filled()),
                Rectangle::new(boxed, c.stroke_width(1)),
            ])
            .map_err(fail)?;
        chart
            .draw_series([
                PathElement::new(vec![(x, s.min), (x, s.p25)], c.stroke_width(1)),
                PathElement::new(vec![(x, s.p75), (x, s.max)], c.stroke_width(1)),
                PathElement::new(
                    vec![(x - 0.25, s.median), (x + 0.25, s.median)],
                    c.stroke_width(3),
                ),
            ])
            .map_err(fail)?;
        chart
            .draw_series(
                m.samples
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| Circle::new((x + jitter(k), v), 2, c.mix(0.7).filled())),
            )
            .map_err(fail)?;
    }
    Ok(())
}

fn against_load<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    name: &str,
    mine: &[&Measured],
    modes: &[String],
) -> Result<()> {
    let mut levels = distinct(mine.iter().map(|m| m.background_load));
    levels.sort_unstable();
    let last = levels.last().copied().unwrap_or(0).max(1) as f64;
    let top = mine.iter().map(|m| m.stats().p95).fold(0.0, f64::max);
    let keys: Vec<f64> = levels.iter().map(|&l| l as f64).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{name}: latency against background load"),
            ("sans-serif", 18).into_font(),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            Ticks {
                range: -0.2..last + 0.2,
                keys,
            },
            0.0..(top * 1.2).max(1e-3),
        )
        .map_err(fail)?;
    chart
        .configure_mesh()
        .x_label_formatter(&|x| format!("{x:.0}"))
        .x_desc("busy background processes")
        .y_desc("latency (ms)")
        .draw()
        .map_err(fail)?;
    for mode in modes {
        let mut rows: Vec<&&Measured> = mine
            .iter()
            .filter(|m| m.mode.to_string() == *mode)
            .collect();
        let Some(first) = rows.first() else { continue };
        let c = colour(modes, first);
        rows.sort_by_key(|m| m.background_load);
        let stats: Vec<(f64, f64, f64)> = rows
            .iter()
            .map(|m| {
                let s = m.stats();
                (m.background_load as f64, s.median, s.p95)
            })
            .collect();
        let median: Vec<(f64, f64)> = stats.iter().map(|&(l, m, _)| (l, m)).collect();
        let p95: Vec<(f64, f64)> = stats.iter().map(|&(l, _, p)| (l, p)).collect();
        chart
            .draw_series(LineSeries::new(median.clone(), c.stroke_width(2)))
            .map_err(fail)?
            .label(format!("{mode} median"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(DashedLineSeries::new(p95.clone(), 6, 4, c.stroke_width(2)))
            .map_err(fail)?
            .label(format!("{mode} p95"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 8, y)], c.stroke_width(2)));
        chart
            .draw_series(
                median
                    .into_iter()
                    .chain(p95)
                    .map(|p| Circle::new(p, 3, c.filled())),
            )
            .map_err(fail)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_and_jitter() {
        assert_eq!(short_name("models/inception_mini.onnx"), "inception_mini");
        assert_eq!(
            short_name("a/light/inception_v1/model.onnx"),
            "inception_v1"
        );
        for k in 0..100 {
            assert!(jitter(k).abs() <= 0.15);
        }
        assert_ne!(jitter(0), jitter(1));
    }
}
