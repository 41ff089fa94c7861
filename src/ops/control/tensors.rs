//! Tensor helpers of the control-flow operators: a boolean condition, one
//! slice along an axis, stacking per-iteration results along a new axis, and
//! collecting those results within the memory budget.

use crate::error::{Error, Result};
use crate::tensor::{budget, Tensor};
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

/// The per-iteration results of one scan output, counted against the memory
/// budget as they come, so that a loop of many trips is refused before its
/// parts outgrow the budget rather than when they are stacked.
#[derive(Debug, Default, Clone)]
pub struct ScanParts {
    /// The results so far, one per iteration.
    pub parts: Vec<Tensor>,
    elements: u128,
}

impl ScanParts {
    /// Adds iteration `trip`'s result for scan output `output`.
    pub fn push(&mut self, output: usize, trip: usize, v: Tensor) -> Result<()> {
        self.elements += v.len() as u128;
        budget::check_count(
            &format!("scan output {output} after {} iterations", trip + 1),
            v.dtype(),
            self.elements,
        )?;
        self.parts.push(v);
        Ok(())
    }
}
