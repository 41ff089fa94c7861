//! AffineGrid (opset 20): the sampling grid of an affine transform. `theta`
//! (`[N, 2, 3]` or `[N, 3, 4]`) maps the normalized coordinates of every
//! pixel of an output of `size` (`[N, C, H, W]` or `[N, C, D, H, W]`) to
//! `grid` (`[N, H, W, 2]` or `[N, D, H, W, 3]`, innermost axis first), ready
//! for GridSample.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::quant::{float_tensor, float_values};
use crate::ops::shape::{int_list, numel_of, to_dims};
use crate::ops::util::{const_value, fact, input, out_len, par_rows};
use crate::tensor::{DType, Tensor};

const OP: &str = "AffineGrid";

#[derive(Debug)]
struct AffineGrid {
    align_corners: bool,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(AffineGrid {
        align_corners: ctx.attrs.int("align_corners", 0)? != 0,
    }))
}

/// The normalized coordinate of pixel `i` of an axis of `d` pixels.
fn base(i: usize, d: usize, align_corners: bool) -> f64 {
    if align_corners {
        if d <= 1 {
            0.0
        } else {
            -1.0 + 2.0 * i as f64 / (d - 1) as f64
        }
    } else {
        -1.0 + (2 * i + 1) as f64 / d as f64
    }
}

/// The dimensions listed by the int64 tensor `size`.
fn const_dims(op: &str, t: &Tensor, what: &str) -> Result<Vec<usize>> {
    to_dims(op, &int_list(op, t, what)?, what)
}

/// Checks `theta` against `size` and returns the output shape.
fn out_shape(theta: &[usize], size: &[usize]) -> Result<Vec<usize>> {
    let r = size.len().saturating_sub(2);
    if !(r == 2 || r == 3) {
        return Err(Error::op(
            OP,
            format!("size must list 4 or 5 dimensions, found {size:?}"),
        ));
    }
    if theta != [size[0], r, r + 1] {
        return Err(Error::op(
            OP,
            format!(
                "theta of shape {theta:?} does not match size {size:?}: expected [{}, {r}, {}]",
                size[0],
                r + 1
            ),
        ));
    }
    let mut out = vec![size[0]];
    out.extend_from_slice(&size[2..]);
    out.push(r);
    numel_of::<f64>(OP, &out)?;
    Ok(out)
}

impl Operator for AffineGrid {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let theta = fact(OP, inputs, 0)?;
        let size = fact(OP, inputs, 1)?;
        if !theta.dtype.is_float() || size.dtype != DType::I64 {
            return Err(Error::op(
                OP,
                format!(
                    "theta must be floating point and size int64, found {} and {}",
                    theta.dtype, size.dtype
                ),
            ));
        }
        let dims = const_value(inputs, 1)
            .map(|v| const_dims(OP, v, "size"))
            .transpose()?;
        Ok(vec![match (&theta.shape, dims) {
            (Some(t), Some(d)) => Fact::new(theta.dtype, out_shape(t, &d)?),
            _ => Fact::unknown_shape(theta.dtype),
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0).saturating_mul(8)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let tt = input(OP, inputs, 0)?;
        let size = const_dims(OP, input(OP, inputs, 1)?, "size")?;
        let shape = out_shape(tt.shape(), &size)?;
        let theta = float_values(OP, tt)?;
        let r = shape.len() - 2;
        let spatial = &size[2..];
        let points: usize = spatial.iter().product();
        let row = points * r;
        let mut out = vec![0.0f64; shape.iter().product()];
        if row > 0 {
            par_rows(&mut out, row, |first, chunk| {
                let mut coords = vec![0.0f64; r + 1];
                coords[r] = 1.0;
                for (k, rows) in chunk.chunks_mut(row).enumerate() {
                    let th = &theta[(first + k) * r * (r + 1)..(first + k + 1) * r * (r + 1)];
                    for (p, y) in rows.chunks_mut(r).enumerate() {
                        // Pixel index per spatial axis, innermost first.
                        let mut rest = p;
                        for a in (0..r).rev() {
                            let d = spatial[a];
                            coords[r - 1 - a] = base(rest % d, d, self.align_corners);
                            rest /= d;
                        }
                        for (j, v) in y.iter_mut().enumerate() {
                            let t = &th[j * (r + 1)..(j + 1) * (r + 1)];
                            *v = t.iter().zip(&coords).map(|(a, b)| a * b).sum();
                        }
                    }
                }
            });
        }
        Ok(vec![float_tensor(OP, tt.dtype(), &shape, out)?])
    }
}
