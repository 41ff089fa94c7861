//! Resize (opsets 10, 11, 13, 18, 19) and the deprecated Upsample (7, 9):
//! nearest, n-linear and cubic interpolation over any number of axes, with
//! every coordinate transformation mode, scales or sizes (with the aspect
//! ratio policies of opset 18), axes, roi for tf_crop_and_resize, and
//! antialiasing. Nearest mode is a pure copy (any element type); linear and
//! cubic weigh the taps of each axis (see [`taps`]) in f64.

mod taps;

use super::shape::num::{num_dispatch, Num};
use super::shape::{
    data, f64_list, int_list, make, move_tensor_fill, norm_axes, numel_of, strides, PAD,
};
use super::util::{fact, input, opt_input, par_rows};
use super::Registrar;
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::tensor::{Element, Tensor};
use ndarray::{ArrayD, IxDyn};
use taps::{Axis, AxisTaps, Coord, Mode, Rounding, Sampler};

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("Resize", 10, build_resize);
    r.add("Upsample", 7, build_upsample);
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Policy {
    Stretch,
    NotLarger,
    NotSmaller,
}

#[derive(Debug)]
struct Resize {
    name: &'static str,
    sampler: Sampler,
    extrapolation: f64,
    policy: Policy,
    axes: Option<Vec<i64>>,
    /// Upsample-7: scales from the attribute.
    scales_attr: Option<Vec<f32>>,
    /// Input index of scales (1 before opset 11, 2 after); sizes is 3.
    scales_at: usize,
    /// Upsample requires scales of at least 1.
    upsample: bool,
}

fn parse_mode(a: &crate::ir::attributes::Attributes, allow_cubic: bool) -> Result<Mode> {
    match a.string("mode", "nearest")?.as_str() {
        "nearest" => Ok(Mode::Nearest),
        "linear" | "bilinear" => Ok(Mode::Linear),
        "cubic" if allow_cubic => Ok(Mode::Cubic),
        other => Err(a.error("mode", format!("unsupported value {other:?}"))),
    }
}

fn build_upsample(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let mode = parse_mode(a, false)?;
    let scales_attr = if ctx.opset < 9 {
        Some(
            a.floats_opt("scales")?
                .ok_or_else(|| a.error("scales", "required but missing"))?,
        )
    } else {
        None
    };
    Ok(Box::new(Resize {
        name: "Upsample",
        sampler: legacy_sampler(mode),
        extrapolation: 0.0,
        policy: Policy::Stretch,
        axes: None,
        scales_attr,
        scales_at: 1,
        upsample: true,
    }))
}

/// Upsample and Resize-10: asymmetric coordinates, "simple" nearest rounding.
fn legacy_sampler(mode: Mode) -> Sampler {
    Sampler {
        mode,
        coord: Coord::Asymmetric,
        rounding: Rounding::Simple,
        cubic_a: -0.75,
        exclude_outside: false,
        antialias: false,
    }
}

fn build_resize(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    if ctx.opset < 11 {
        return Ok(Box::new(Resize {
            name: "Resize",
            sampler: legacy_sampler(parse_mode(a, false)?),
            extrapolation: 0.0,
            policy: Policy::Stretch,
            axes: None,
            scales_attr: None,
            scales_at: 1,
            upsample: false,
        }));
    }
    let mode = parse_mode(a, true)?;
    let coord = match a
        .string("coordinate_transformation_mode", "half_pixel")?
        .as_str()
    {
        "half_pixel" => Coord::HalfPixel,
        "half_pixel_symmetric" if ctx.opset >= 19 => Coord::HalfPixelSymmetric,
        "pytorch_half_pixel" => Coord::PytorchHalfPixel,
        "align_corners" => Coord::AlignCorners,
        "asymmetric" => Coord::Asymmetric,
        "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
        "tf_crop_and_resize" => Coord::TfCropAndResize,
        other => {
            return Err(a.error(
                "coordinate_transformation_mode",
                format!("unsupported value {other:?} at opset {}", ctx.opset),
            ))
        }
    };
    let rounding = match a.string("nearest_mode", "round_prefer_floor")?.as_str() {
        "round_prefer_floor" => Rounding::RoundPreferFloor,
        "round_prefer_ceil" => Rounding::RoundPreferCeil,
        "floor" => Rounding::Floor,
        "ceil" => Rounding::Ceil,
        other => return Err(a.error("nearest_mode", format!("unsupported value {other:?}"))),
    };
    let (policy, axes, antialias) = if ctx.opset >= 18 {
        let policy = match a.string("keep_aspect_ratio_policy", "stretch")?.as_str() {
            "stretch" => Policy::Stretch,
            "not_larger" => Policy::NotLarger,
            "not_smaller" => Policy::NotSmaller,
            other => {
                return Err(a.error(
                    "keep_aspect_ratio_policy",
                    format!("unsupported value {other:?}"),
                ))
            }
        };
        (policy, a.ints_opt("axes")?, a.int("antialias", 0)? != 0)
    } else {
        (Policy::Stretch, None, false)
    };
    Ok(Box::new(Resize {
        name: "Resize",
        sampler: Sampler {
            mode,
            coord,
            rounding,
            cubic_a: a.float("cubic_coeff_a", -0.75)? as f64,
            exclude_outside: a.int("exclude_outside", 0)? != 0,
            antialias: antialias && mode != Mode::Nearest,
        },
        extrapolation: a.float("extrapolation_value", 0.0)? as f64,
        policy,
        axes,
        scales_attr: None,
        scales_at: 2,
        upsample: false,
    }))
}

/// A present, non-empty tensor value.
fn nonempty(t: Option<&Tensor>) -> Option<&Tensor> {
    t.filter(|t| !t.is_empty())
}

impl Resize {
    /// The per-axis plan for an input of shape `shape`. `value(i)` gives input
    /// `i`: `None` if absent, `Some(None)` if present but unknown. Returns
    /// `Ok(None)` when a needed value is unknown.
    fn plan<'a>(
        &self,
        shape: &[usize],
        value: impl Fn(usize) -> Option<Option<&'a Tensor>>,
    ) -> Result<Option<Vec<Axis>>> {
        let op = self.name;
        let rank = shape.len();
        let axes: Vec<usize> = match &self.axes {
            Some(a) => norm_axes(op, a, rank)?,
            None => (0..rank).collect(),
        };
        let known = |i: usize| -> Result<Option<Option<&'a Tensor>>> {
            match value(i) {
                None => Ok(Some(None)),
                Some(None) => Ok(None),
                Some(Some(t)) => Ok(Some(nonempty(Some(t)))),
            }
        };
        let scales: Option<Vec<f64>> = match &self.scales_attr {
            Some(s) => Some(s.iter().map(|&v| v as f64).collect()),
            None => match known(self.scales_at)? {
                None => return Ok(None),
                Some(t) => t.map(|t| f64_list(op, t, "scales")).transpose()?,
            },
        };
        let sizes: Option<Vec<i64>> = if self.scales_at == 2 {
            match known(3)? {
                None => return Ok(None),
                Some(t) => t.map(|t| int_list(op, t, "sizes")).transpose()?,
            }
        } else {
            None
        };
        let mut plan: Vec<Axis> = shape
            .iter()
            .map(|&n| Axis {
                input: n,
                output: n,
                scale: 1.0,
                roi: (0.0, 1.0),
            })
            .collect();
        match (scales, sizes) {
            (Some(_), Some(_)) => {
                return Err(Error::op(op, "give either scales or sizes, not both"));
            }
            (None, None) => return Err(Error::op(op, "one of scales or sizes is required")),
            (Some(s), None) => {
                if s.len() != axes.len() {
                    return Err(Error::op(
                        op,
                        format!("{} scales for {} axes", s.len(), axes.len()),
                    ));
                }
                for (&d, &sc) in axes.iter().zip(&s) {
                    if !(sc > 0.0 && sc.is_finite()) || (self.upsample && sc < 1.0) {
                        return Err(Error::op(op, format!("invalid scale {sc} for axis {d}")));
                    }
                    let out = (shape[d] as f64 * sc).floor();
                    if out >= 1e15 {
                        return Err(Error::op(op, format!("output too large for scale {sc}")));
                    }
                    plan[d].output = out as usize;
                    plan[d].scale = sc;
                }
            }
            (None, Some(z)) => {
                if z.len() != axes.len() {
                    return Err(Error::op(
                        op,
                        format!("{} sizes for {} axes", z.len(), axes.len()),
                    ));
                }
                let z = super::shape::to_dims(op, &z, "sizes")?;
                let ratio = |k: usize| {
                    let n = shape[axes[k]];
                    if n == 0 {
                        1.0
                    } else {
                        z[k] as f64 / n as f64
                    }
                };
                let common = match self.policy {
                    Policy::Stretch => None,
                    Policy::NotLarger => (0..axes.len()).map(ratio).reduce(f64::min),
                    Policy::NotSmaller => (0..axes.len()).map(ratio).reduce(f64::max),
                };
                for (k, &d) in axes.iter().enumerate() {
                    let (out, sc) = match common {
                        None => (z[k], ratio(k)),
                        Some(sc) => (((shape[d] as f64) * sc + 0.5).floor() as usize, sc),
                    };
                    if shape[d] == 0 && out != 0 {
                        return Err(Error::op(
                            op,
                            format!("cannot resize the empty axis {d} to {out}"),
                        ));
                    }
                    plan[d].output = out;
                    plan[d].scale = sc;
                }
            }
        }
        if self.sampler.coord == Coord::TfCropAndResize {
            let roi = match known(1)? {
                None => return Ok(None),
                Some(t) => t.map(|t| f64_list(op, t, "roi")).transpose()?,
            };
            let roi = roi.ok_or_else(|| Error::op(op, "tf_crop_and_resize needs a roi"))?;
            if roi.len() != 2 * axes.len() {
                return Err(Error::op(
                    op,
                    format!("roi has {} values, expected {}", roi.len(), 2 * axes.len()),
                ));
            }
            for (k, &d) in axes.iter().enumerate() {
                plan[d].roi = (roi[k], roi[k + axes.len()]);
            }
        }
        numel_of::<f32>(op, &plan.iter().map(|a| a.output).collect::<Vec<_>>())?;
        Ok(Some(plan))
    }

    fn taps(&self, plan: &[Axis]) -> Result<Vec<AxisTaps>> {
        plan.iter().map(|a| self.sampler.taps(a)).collect()
    }
}

/// Nearest mode: a copy through offset maps (extrapolated positions, at
/// [`PAD`], get `fill`, a scalar of `x`'s type). Compiled once per width.
fn nearest(x: &Tensor, taps: &[AxisTaps], fill: &Tensor, out: &[usize]) -> Result<Tensor> {
    let st = strides(x.shape());
    let maps: Vec<Vec<usize>> = taps
        .iter()
        .zip(&st)
        .map(|(t, &s)| {
            t.iter()
                .map(|x| {
                    x.as_ref()
                        .and_then(|v| v.first())
                        .map_or(PAD, |&(i, _)| i * s)
                })
                .collect()
        })
        .collect();
    move_tensor_fill("Resize", x, out, &maps, fill)
}

/// `v` (the extrapolation value) in `a`'s type, as a scalar tensor.
fn fill_value<T: Element>(_a: &ArrayD<T>, v: f64) -> Tensor {
    let t = crate::ops::shape::num::num_value::<T>(v);
    T::into_tensor(ArrayD::from_elem(IxDyn(&[]), t.unwrap_or_default()))
}

/// Linear and cubic modes: weighted sums of the taps, accumulated in f64.
fn interpolate<T: Num>(
    a: &ArrayD<T>,
    taps: &[AxisTaps],
    extrapolation: f64,
    out: &[usize],
) -> Result<Tensor> {
    let src = data(a);
    let st = strides(a.shape());
    let rank = out.len();
    let n = numel_of::<T>("Resize", out)?;
    let fill = T::from_f64(extrapolation);
    let mut dst = vec![fill; n];
    if n == 0 {
        return make("Resize", out, dst);
    }
    // Tap offsets per axis, pre-multiplied by the strides.
    let taps: Vec<AxisTaps> = taps
        .iter()
        .zip(&st)
        .map(|(t, &s)| {
            t.iter()
                .map(|x| {
                    x.as_ref()
                        .map(|v| v.iter().map(|&(i, w)| (i * s, w)).collect())
                })
                .collect()
        })
        .collect();
    let (outer_shape, row) = if rank == 0 {
        (&[][..], 1)
    } else {
        (&out[..rank - 1], out[rank - 1])
    };
    let outer_taps = &taps[..rank.saturating_sub(1)];
    let last: Option<&AxisTaps> = taps.last();
    par_rows(&mut dst, row, |first, chunk| {
        let mut idx = crate::ops::shape::unravel(first, outer_shape);
        let mut combo: Vec<(usize, f64)> = Vec::new();
        let mut next: Vec<(usize, f64)> = Vec::new();
        for r in chunk.chunks_mut(row) {
            // The combined taps of the outer axes for this row.
            combo.clear();
            combo.push((0, 1.0));
            let mut outside = false;
            for (d, &i) in idx.iter().enumerate() {
                match &outer_taps[d][i] {
                    None => {
                        outside = true;
                        break;
                    }
                    Some(t) => {
                        next.clear();
                        for &(o, w) in &combo {
                            for &(o2, w2) in t {
                                next.push((o + o2, w * w2));
                            }
                        }
                        std::mem::swap(&mut combo, &mut next);
                    }
                }
            }
            if !outside {
                match last {
                    None => {
                        let v: f64 = combo.iter().map(|&(o, w)| w * src[o].to_f64()).sum();
                        r[0] = T::from_f64(v);
                    }
                    Some(lt) => {
                        for (x, o) in r.iter_mut().enumerate() {
                            if let Some(t) = &lt[x] {
                                let mut v = 0.0;
                                for &(o1, w1) in &combo {
                                    for &(o2, w2) in t {
                                        v += w1 * w2 * src[o1 + o2].to_f64();
                                    }
                                }
                                *o = T::from_f64(v);
                            }
                        }
                    }
                }
            }
            crate::ops::shape::increment(&mut idx, outer_shape);
        }
    });
    make("Resize", out, dst)
}

impl Operator for Resize {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(self.name, inputs, 0)?;
        if self.sampler.mode != Mode::Nearest
            && matches!(f.dtype, crate::DType::Bool | crate::DType::String)
        {
            return Err(Error::op(
                self.name,
                format!(
                    "{:?} mode needs numeric data, found {}",
                    self.sampler.mode, f.dtype
                ),
            ));
        }
        let Some(shape) = &f.shape else {
            return Ok(vec![Fact::unknown_shape(f.dtype)]);
        };
        let plan = self.plan(shape, |i| {
            inputs.get(i).and_then(|x| x.fact.map(|_| x.value))
        })?;
        Ok(vec![match plan {
            Some(p) => Fact::new(f.dtype, p.iter().map(|a| a.output).collect()),
            None => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let out = super::util::out_len(outputs, 0);
        let per_axis: u64 = match self.sampler.mode {
            Mode::Nearest => 1,
            Mode::Linear => 2,
            Mode::Cubic => 4,
        };
        let resized = match (inputs.first().copied().flatten(), outputs.first()) {
            (Some(Fact { shape: Some(a), .. }), Some(Fact { shape: Some(b), .. })) => {
                a.iter().zip(b).filter(|(x, y)| x != y).count() as u32
            }
            _ => 2,
        };
        out.saturating_mul(per_axis.saturating_pow(resized))
            .max(u64::from(out > 0))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(self.name, inputs, 0)?;
        let plan = self
            .plan(x.shape(), |i| opt_input(inputs, i).map(Some))?
            .ok_or_else(|| {
                Error::op(self.name, "internal error: parameters unknown at run time")
            })?;
        let out: Vec<usize> = plan.iter().map(|a| a.output).collect();
        let taps = self.taps(&plan)?;
        let y = if self.sampler.mode == Mode::Nearest {
            let fill = crate::dispatch!(x, a => fill_value(a, self.extrapolation));
            nearest(x, &taps, &fill, &out)?
        } else {
            num_dispatch!(self.name, x, a => interpolate(a, &taps, self.extrapolation, &out))?
        };
        Ok(vec![y])
    }
}

#[cfg(test)]
mod tests;
