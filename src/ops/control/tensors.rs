//! Tensor helpers of the control-flow operators: a boolean condition, one
//! slice along an axis, and stacking per-iteration results along a new axis.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use ndarray::{Axis, IxDyn};

/// The truth value of a one-element condition tensor (bool or numeric).
pub(super) fn truth(op: &str, t: &Tensor) -> Result<bool> {
    if t.len() != 1 {
        return Err(Error::op(
            op,
            format!("the condition has {} elements, not 1", t.len()),
        ));
    }
    if let Some(a) = t.array::<bool>() {
        return Ok(a.iter().next().copied().unwrap_or(false));
    }
    let v = t.to_f64_vec()?;
    Ok(v.first().is_some_and(|&x| x != 0.0))
}

/// Slice `i` of `t` along `axis`, with that axis removed.
pub(super) fn take(t: &Tensor, axis: usize, i: usize) -> Tensor {
    crate::map_same!(t, a => a.index_axis(Axis(axis), i).to_owned())
}

/// Stacks same-shaped tensors of one type along a new `axis`.
pub(super) fn stack(op: &str, parts: &[Tensor], axis: usize) -> Result<Tensor> {
    let first = parts
        .first()
        .ok_or_else(|| Error::op(op, "nothing to stack"))?;
    if axis > first.shape().len() {
        return Err(Error::op(op, format!("axis {axis} out of range")));
    }
    for p in parts {
        if p.dtype() != first.dtype() || p.shape() != first.shape() {
            return Err(Error::op(
                op,
                format!(
                    "iterations give different outputs: {} {:?} and {} {:?}",
                    first.dtype(),
                    first.shape(),
                    p.dtype(),
                    p.shape()
                ),
            ));
        }
    }
    Ok(crate::map_same!(first, a0 => {
        let _ = a0;
        let views: Vec<_> = parts
            .iter()
            .filter_map(|p| crate::tensor::Element::view(p))
            .map(|a| a.view())
            .collect::<Vec<ndarray::ArrayViewD<_>>>();
        ndarray::stack(Axis(axis), &views)
            .map_err(|e| Error::op(op, e.to_string()))?
            .into_dimensionality::<IxDyn>()
            .map_err(|e| Error::op(op, e.to_string()))?
    }))
}
