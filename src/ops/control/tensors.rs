//! Tensor helpers of the control-flow operators: a boolean condition, one
//! slice along an axis, stacking per-iteration results along a new axis, and
//! collecting those results within the memory budget.

use crate::error::{Error, Result};
use crate::tensor::widths::{by_width, same_width, Bits, Width};
use crate::tensor::{budget, Tensor};

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
pub(super) fn take(t: &Tensor, axis: usize, i: usize) -> Result<Tensor> {
    if axis >= t.shape().len() || i >= t.shape()[axis] {
        return Err(Error::op(
            "take",
            format!("slice {i} of axis {axis} is outside shape {:?}", t.shape()),
        ));
    }
    let s = t.shape();
    let inner: usize = s[axis + 1..].iter().product();
    let mut shape = s.to_vec();
    shape.remove(axis);
    let v = by_width!(t, src => Bits::vec(take_bits(src, s[axis], inner, i)));
    Tensor::from_width("take", t.dtype(), &shape, v)
}

/// Slice `i` of row-major `src` seen as `[outer, dim, inner]`: `[outer, inner]`.
#[inline(never)]
fn take_bits<B: Clone>(src: &[B], dim: usize, inner: usize, i: usize) -> Vec<B> {
    let outer = src.len().checked_div(dim * inner).unwrap_or(0);
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        let at = (o * dim + i) * inner;
        out.extend_from_slice(&src[at..at + inner]);
    }
    out
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
    let widths: Vec<Width> = parts.iter().map(Tensor::width).collect();
    let inner: usize = first.shape()[axis..].iter().product();
    let mut shape = first.shape().to_vec();
    shape.insert(axis, parts.len());
    // The types were checked equal above: every part has the first's width.
    let v = by_width!(first, f => {
        let bits: Vec<_> = widths.iter().filter_map(|w| same_width(f, w)).collect();
        Bits::vec(stack_bits(&bits, inner))
    });
    Tensor::from_width(op, first.dtype(), &shape, v)
}

/// Row-major parts of `inner`-element rows, interleaved row by row: the
/// parts stacked along a new axis before those rows.
#[inline(never)]
fn stack_bits<B: Clone>(parts: &[&[B]], inner: usize) -> Vec<B> {
    let outer = parts
        .first()
        .map_or(0, |p| p.len().checked_div(inner).unwrap_or(0));
    let mut out = Vec::with_capacity(outer * inner * parts.len());
    for o in 0..outer {
        for p in parts {
            out.extend_from_slice(&p[o * inner..(o + 1) * inner]);
        }
    }
    out
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
