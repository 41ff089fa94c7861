//! Dropout in training mode with a nonzero ratio (the operator itself lives
//! with the shape family, which passes its input through in inference):
//! each element is kept with probability 1 − ratio and scaled by
//! 1 / (1 − ratio), or set to 0; the mask says which were kept.

use super::rng::Seed;
use crate::error::{Error, Result};
use crate::ops::quant::float_tensor;
use crate::tensor::{budget, DType, Tensor};
use ndarray::ArrayD;

const OP: &str = "Dropout";

/// Applies a random mask that drops each element of float tensor `x` with
/// probability `ratio` (in (0, 1)) and scales the rest; returns the output
/// and the mask (true where kept) when `with_mask`.
pub(crate) fn train(
    x: &Tensor,
    ratio: f64,
    seed: &Seed,
    with_mask: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    if !(ratio > 0.0 && ratio < 1.0) {
        return Err(Error::op(
            OP,
            format!("training ratio {ratio} is not in (0, 1)"),
        ));
    }
    if !x.dtype().is_float() {
        return Err(Error::op(
            OP,
            format!("expected a floating-point input, found {}", x.dtype()),
        ));
    }
    budget::check("Dropout output", x.dtype(), x.shape())?;
    if with_mask {
        budget::check("Dropout mask", DType::Bool, x.shape())?;
    }
    let keep = 1.0 - ratio;
    let mut rng = seed.rng();
    let mut v = x.to_f64_vec()?;
    let mut mask = Vec::with_capacity(if with_mask { v.len() } else { 0 });
    for e in &mut v {
        let kept = rng.uniform() >= ratio;
        *e = if kept { *e / keep } else { 0.0 };
        if with_mask {
            mask.push(kept);
        }
    }
    let y = float_tensor(OP, x.dtype(), x.shape(), v)?;
    let mask = if with_mask {
        let m = ArrayD::from_shape_vec(x.shape(), mask)
            .map_err(|e| Error::op(OP, format!("internal shape error: {e}")))?;
        Some(Tensor::Bool(m))
    } else {
        None
    };
    Ok((y, mask))
}
