//! GridSample (opsets 16 and 20): samples `X` of shape `[N, C, D1..Dr]` at
//! the normalized coordinates of `grid` (`[N, O1..Or, r]`, the last axis
//! listing the innermost spatial axis first) with nearest, (bi/tri)linear or
//! cubic interpolation, zeros, border or reflection padding, and
//! `align_corners`. Opset 16 allows only 4-D inputs. The semantics follow
//! ONNX's reference implementation (PyTorch's `grid_sample`): each spatial
//! axis contributes its own taps and the sample is their tensor product.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::quant::{float_tensor, float_values};
use crate::ops::shape::{numel_of, strides};
use crate::ops::util::{fact, input, out_len, par_rows};
use crate::tensor::Tensor;

const OP: &str = "GridSample";

/// The coefficient `A` of Keys' cubic convolution, as PyTorch uses it.
const CUBIC_A: f64 = -0.75;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

#[derive(Debug)]
struct GridSample {
    mode: Mode,
    padding: Padding,
    align_corners: bool,
    /// Opset 16 samples 4-D inputs only.
    only_2d: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let default_mode = if ctx.opset >= 20 {
        "linear"
    } else {
        "bilinear"
    };
    let mode = match a.string("mode", default_mode)?.as_str() {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        other => return Err(a.error("mode", format!("unsupported value {other:?}"))),
    };
    let padding = match a.string("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => {
            return Err(a.error("padding_mode", format!("unsupported value {other:?}")));
        }
    };
    Ok(Box::new(GridSample {
        mode,
        padding,
        align_corners: a.int("align_corners", 0)? != 0,
        only_2d: ctx.opset < 20,
    }))
}

/// Reflects `x` into `[lo, hi]` by folding at the borders (PyTorch's rule).
pub(super) fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let (dx, from_low) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (dx / range).trunc();
    let r = dx - n * range;
    let even = n % 2.0 == 0.0;
    match (from_low, even) {
        (true, true) | (false, false) => lo + r,
        _ => hi - r,
    }
}

/// Keys' cubic weights of the taps at `x0 - 1 .. x0 + 2` for fraction `t`.
pub(super) fn cubic_weights(t: f64) -> [f64; 4] {
    let a = CUBIC_A;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// One spatial axis: its size and the borders that padding folds or clamps at.
#[derive(Debug, Clone, Copy)]
struct Axis {
    size: usize,
    lo: f64,
    hi: f64,
}

impl GridSample {
    fn axis(&self, size: usize) -> Axis {
        let d = size as f64;
        let (lo, hi) = if self.align_corners {
            (0.0, d - 1.0)
        } else {
            (-0.5, d - 0.5)
        };
        Axis { size, lo, hi }
    }

    /// The pixel coordinate of normalized coordinate `g` on `axis`.
    fn denormalize(&self, g: f64, axis: &Axis) -> f64 {
        let d = axis.size as f64;
        if self.align_corners {
            (g + 1.0) / 2.0 * (d - 1.0)
        } else {
            ((g + 1.0) * d - 1.0) / 2.0
        }
    }

    /// The element index read for integer position `i`, `None` for zeros.
    fn index(&self, i: f64, axis: &Axis) -> Option<usize> {
        let last = axis.size.checked_sub(1)?;
        let clamp = |v: f64| v.clamp(0.0, last as f64) as usize;
        match self.padding {
            Padding::Zeros => (i >= 0.0 && i <= last as f64).then_some(i as usize),
            Padding::Border => Some(clamp(i)),
            Padding::Reflection => Some(clamp(reflect(i, axis.lo, axis.hi).trunc())),
        }
    }

    /// The taps (index, weight) of one axis for normalized coordinate `g`.
    fn axis_taps(&self, g: f64, axis: &Axis, taps: &mut Vec<(Option<usize>, f64)>) {
        taps.clear();
        if axis.size == 0 {
            taps.push((None, 0.0));
            return;
        }
        let mut x = self.denormalize(g, axis);
        if self.mode == Mode::Nearest {
            x = x.round_ties_even();
        }
        if x < axis.lo || x > axis.hi {
            match self.padding {
                Padding::Border => x = x.clamp(0.0, axis.size as f64 - 1.0),
                Padding::Reflection => x = reflect(x, axis.lo, axis.hi),
                Padding::Zeros => {}
            }
        }
        match self.mode {
            Mode::Nearest => taps.push((self.index(x.trunc(), axis), 1.0)),
            Mode::Linear => {
                let x0 = x.floor();
                let t = x - x0;
                taps.push((self.index(x0, axis), 1.0 - t));
                taps.push((self.index(x0 + 1.0, axis), t));
            }
            Mode::Cubic => {
                let x0 = x.floor();
                let w = cubic_weights(x - x0);
                for (k, wk) in w.into_iter().enumerate() {
                    taps.push((self.index(x0 + k as f64 - 1.0, axis), wk));
                }
            }
        }
    }

    fn out_shape(&self, x: &[usize], g: &[usize]) -> Result<Vec<usize>> {
        let r = x.len().saturating_sub(2);
        if x.len() < 3 || (self.only_2d && x.len() != 4) {
            let want = if self.only_2d { "4" } else { "at least 3" };
            return Err(Error::op(
                OP,
                format!("X must have rank {want}, found shape {x:?}"),
            ));
        }
        if g.len() != x.len() || g[0] != x[0] || g[g.len() - 1] != r {
            return Err(Error::op(
                OP,
                format!("grid of shape {g:?} does not match X of shape {x:?}: expected [{}, ..., {r}] of rank {}", x[0], x.len()),
            ));
        }
        let mut out = vec![x[0], x[1]];
        out.extend_from_slice(&g[1..g.len() - 1]);
        numel_of::<f64>(OP, &out)?;
        Ok(out)
    }
}

/// Samples one point: the weighted sum over the tensor product of the axes' taps.
fn sample(plane: &[f64], per_axis: &[Vec<(Option<usize>, f64)>], st: &[usize]) -> f64 {
    let mut acc = 0.0;
    let mut pick = vec![0usize; per_axis.len()];
    loop {
        let mut w = 1.0;
        let mut off = Some(0usize);
        for (a, &k) in pick.iter().enumerate() {
            let (i, wk) = per_axis[a][k];
            w *= wk;
            off = match (off, i) {
                (Some(o), Some(i)) => Some(o + i * st[a]),
                _ => None,
            };
        }
        if let Some(o) = off {
            acc += w * plane[o];
        }
        let mut a = per_axis.len();
        loop {
            if a == 0 {
                return acc;
            }
            a -= 1;
            pick[a] += 1;
            if pick[a] < per_axis[a].len() {
                break;
            }
            pick[a] = 0;
        }
    }
}

impl Operator for GridSample {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let g = fact(OP, inputs, 1)?;
        if !x.dtype.is_float() || !g.dtype.is_float() {
            return Err(Error::op(
                OP,
                format!(
                    "X and grid must be floating point, found {} and {}",
                    x.dtype, g.dtype
                ),
            ));
        }
        Ok(vec![match (&x.shape, &g.shape) {
            (Some(xs), Some(gs)) => Fact::new(x.dtype, self.out_shape(xs, gs)?),
            _ => Fact::unknown_shape(x.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        let r = inputs
            .first()
            .copied()
            .flatten()
            .and_then(|f| f.shape.as_ref())
            .map_or(2, |s| s.len().saturating_sub(2)) as u32;
        let taps: u64 = match self.mode {
            Mode::Nearest => 1,
            Mode::Linear => 2u64.saturating_pow(r),
            Mode::Cubic => 4u64.saturating_pow(r),
        };
        out_len(outputs, 0).saturating_mul(2 * taps + 8 * r as u64)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let xt = input(OP, inputs, 0)?;
        let gt = input(OP, inputs, 1)?;
        let shape = self.out_shape(xt.shape(), gt.shape())?;
        let x = float_values(OP, xt)?;
        let g = float_values(OP, gt)?;
        let dims = &xt.shape()[2..];
        let r = dims.len();
        let axes: Vec<Axis> = dims.iter().map(|&d| self.axis(d)).collect();
        let st = strides(dims);
        let plane_in: usize = dims.iter().product();
        let points: usize = shape[2..].iter().product();
        let channels = shape[1];
        let mut out = vec![0.0f64; shape.iter().product()];
        if points > 0 {
            par_rows(&mut out, points, |first, chunk| {
                let mut per_axis = vec![Vec::with_capacity(4); r];
                for (k, row) in chunk.chunks_mut(points).enumerate() {
                    let nc = first + k;
                    let n = nc / channels.max(1);
                    let plane = &x[nc * plane_in..(nc + 1) * plane_in];
                    for (p, y) in row.iter_mut().enumerate() {
                        let gp = &g[(n * points + p) * r..(n * points + p + 1) * r];
                        for (a, taps) in per_axis.iter_mut().enumerate() {
                            self.axis_taps(gp[r - 1 - a], &axes[a], taps);
                        }
                        *y = sample(plane, &per_axis, &st);
                    }
                }
            });
        }
        Ok(vec![float_tensor(OP, xt.dtype(), &shape, out)?])
    }
}
