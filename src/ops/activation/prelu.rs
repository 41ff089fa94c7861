//! PRelu: `x` where `x >= 0`, else `slope · x`, with the slope broadcast to
//! the input's shape (unidirectionally). The input is seen as rows over its
//! trailing dimensions where the broadcast slope is constant (for a
//! per-channel slope on NCHW, one row per plane), so each row uses one
//! slope value and no broadcast copy of the slope is made.

use crate::error::{Error, Result};
use crate::ir::{Fact, InferInput, OpClass, Operator};
use crate::ops::unary::kernel::{array_from, contiguous};
use crate::ops::util::{broadcast_shapes, fact, input, out_len, par_rows};
use crate::ops::Registrar;
use crate::tensor::{Element, Tensor};
use ndarray::ArrayD;

#[derive(Debug)]
struct PRelu;

/// Checks that `slope` broadcasts to `x` without changing `x`'s shape.
fn check_shapes(x: &[usize], slope: &[usize]) -> Result<()> {
    let b = broadcast_shapes("PRelu", x, slope)?;
    if b != x {
        return Err(Error::op(
            "PRelu",
            format!("slope of shape {slope:?} does not broadcast to input shape {x:?}"),
        ));
    }
    Ok(())
}

/// Where each row's slope lies: the slope broadcast to `x`'s leading
/// dimensions up to the last one where it varies, as indices into the
/// row-major slope, one per row of the returned count of trailing
/// elements. Computed from the shapes alone, so it is compiled once, not
/// once per element type.
fn slope_rows(x_shape: &[usize], slope_shape: &[usize]) -> (Vec<usize>, usize) {
    let rank = x_shape.len();
    let aligned: Vec<usize> = std::iter::repeat_n(1, rank - slope_shape.len())
        .chain(slope_shape.iter().copied())
        .collect();
    let last = aligned.iter().rposition(|&d| d != 1).map_or(0, |p| p + 1);
    let inner: usize = x_shape[last..].iter().product();
    // The slope's row-major strides over its aligned shape; 0 where it
    // broadcasts (a dimension of 1).
    let mut strides = vec![0usize; last];
    let mut acc = aligned[last..].iter().product::<usize>();
    for k in (0..last).rev() {
        if aligned[k] != 1 {
            strides[k] = acc;
        }
        acc *= aligned[k];
    }
    let lead = &x_shape[..last];
    let count: usize = lead.iter().product();
    let mut rows = Vec::with_capacity(count);
    let mut idx = vec![0usize; last];
    let mut at = 0usize;
    for _ in 0..count {
        rows.push(at);
        // Advance the odometer over the leading dimensions.
        for k in (0..last).rev() {
            idx[k] += 1;
            at += strides[k];
            if idx[k] < lead[k] {
                break;
            }
            at -= idx[k] * strides[k];
            idx[k] = 0;
        }
    }
    (rows, inner)
}

fn prelu<T: Element + Copy + PartialOrd + std::ops::Mul<Output = T>>(
    x: &ArrayD<T>,
    slope: &ArrayD<T>,
) -> Result<ArrayD<T>> {
    check_shapes(x.shape(), slope.shape())?;
    let (rows, inner) = slope_rows(x.shape(), slope.shape());
    let slope = contiguous(slope);
    let src = contiguous(x);
    let mut out = vec![T::default(); src.len()];
    let zero = T::default();
    par_rows(&mut out, inner, |first, chunk| {
        for (r, row) in chunk.chunks_mut(inner.max(1)).enumerate() {
            let s = slope[rows[first + r]];
            let start = (first + r) * inner;
            for (o, &v) in row.iter_mut().zip(&src[start..start + inner]) {
                *o = if v < zero { v * s } else { v };
            }
        }
    });
    array_from("PRelu", x.shape(), out)
}

impl Operator for PRelu {
    fn cost_class(&self) -> OpClass {
        OpClass::Elementwise
    }

    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact("PRelu", inputs, 0)?;
        let s = fact("PRelu", inputs, 1)?;
        if x.dtype != s.dtype {
            return Err(Error::op(
                "PRelu",
                format!("slope has type {}, input {}", s.dtype, x.dtype),
            ));
        }
        if let (Some(xs), Some(ss)) = (&x.shape, &s.shape) {
            check_shapes(xs, ss)?;
        }
        Ok(vec![x.clone()])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        2 * out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input("PRelu", inputs, 0)?;
        let s = input("PRelu", inputs, 1)?;
        let mismatch = || {
            Error::op(
                "PRelu",
                format!("slope has type {}, input {}", s.dtype(), x.dtype()),
            )
        };
        macro_rules! go {
            ($($v:ident),*) => {
                match (x, s) {
                    $((Tensor::$v(a), Tensor::$v(b)) => Tensor::$v(prelu(a, b)?),)*
                    (Tensor::Bool(_) | Tensor::String(_), _) => {
                        return Err(Error::op(
                            "PRelu",
                            format!("input of type {} is not supported", x.dtype()),
                        ))
                    }
                    _ => return Err(mismatch()),
                }
            };
        }
        Ok(vec![go!(F32, F64, F16, BF16, I32, I64, U32, U64)])
    }
}

pub(super) fn register(r: &mut impl Registrar) {
    r.add("PRelu", 1, |_| Ok(Box::new(PRelu)));
}
