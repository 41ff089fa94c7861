//! SplitToSequence (a tensor cut along an axis into a sequence) and
//! ConcatFromSequence (a sequence joined along an existing or a new axis).
//! Their FLOP count is the elements they copy.

use super::{in_fact, sequence, tensor};
use crate::error::{Error, Result};
use crate::ir::{run_via_values, BuildContext, Fact, InferInput, Kind, Operator, Sequence, Value};
use crate::ops::shape::concat::{concat, split_parts};
use crate::ops::util::axis as norm_axis;
use crate::tensor::{budget, Tensor};
use std::sync::Arc;

const SPLIT: &str = "SplitToSequence";
const CONCAT: &str = "ConcatFromSequence";

#[derive(Debug)]
struct SplitToSequence {
    axis: i64,
    keepdims: bool,
}

pub(super) fn build_split(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(SplitToSequence {
        axis: ctx.attrs.int("axis", 0)?,
        keepdims: ctx.attrs.int("keepdims", 1)? != 0,
    }))
}

/// The lengths of the pieces of an axis of `dim` elements: ones without a
/// `split` input, chunks of a scalar `split` (the last one shorter), or the
/// lengths of a 1-D `split` (which must add up to `dim`).
fn lengths(split: Option<&Tensor>, dim: usize) -> Result<Vec<usize>> {
    let Some(s) = split else {
        return Ok(vec![1; dim]);
    };
    let v = s.to_i64_vec()?;
    if s.shape().is_empty() {
        let n = v.first().copied().unwrap_or(0);
        if n <= 0 {
            return Err(Error::op(
                SPLIT,
                format!("the split size {n} is not positive"),
            ));
        }
        let n = n as usize;
        return Ok((0..dim)
            .step_by(n)
            .map(|start| n.min(dim - start))
            .collect());
    }
    if s.shape().len() != 1 || v.iter().any(|&x| x < 0) {
        return Err(Error::op(
            SPLIT,
            format!("split must be a scalar or a list of non-negative lengths, found {v:?}"),
        ));
    }
    let total: i64 = v.iter().sum();
    if total != dim as i64 {
        return Err(Error::op(
            SPLIT,
            format!("the lengths {v:?} add up to {total}, not the axis length {dim}"),
        ));
    }
    Ok(v.into_iter().map(|x| x as usize).collect())
}

impl Operator for SplitToSequence {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = in_fact(SPLIT, inputs, 0)?;
        if f.kind != Kind::Tensor {
            return Err(Error::ValueKind {
                what: format!("{SPLIT} input 0"),
                actual: f.kind.to_string(),
                expected: Kind::Tensor.to_string(),
            });
        }
        Ok(vec![Fact::of_kind(Kind::Sequence, f.dtype)])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        inputs
            .first()
            .copied()
            .flatten()
            .and_then(Fact::len)
            .unwrap_or(0) as u64
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        run_via_values(self, inputs)
    }

    fn uses_values(&self) -> bool {
        true
    }

    fn run_values(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = tensor(SPLIT, inputs, 0)?;
        let split = match inputs.get(1).copied().flatten() {
            Some(s) => Some(&**s.as_tensor("the split")?),
            None => None,
        };
        if x.shape().is_empty() {
            return Err(Error::op(SPLIT, "cannot split a scalar"));
        }
        let axis = norm_axis(SPLIT, self.axis, x.shape().len())?;
        let lengths = lengths(split, x.shape()[axis])?;
        budget::check("the pieces", x.dtype(), x.shape())?;
        let squeeze = split.is_none() && !self.keepdims;
        let items = split_parts(x, x.shape(), axis, &lengths, squeeze)?
            .into_iter()
            .map(Arc::new)
            .collect();
        Ok(vec![Sequence::new(x.dtype(), items)?.into()])
    }
}

#[derive(Debug)]
struct ConcatFromSequence {
    axis: i64,
    new_axis: bool,
}

pub(super) fn build_concat(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(ConcatFromSequence {
        axis: ctx.attrs.int_req("axis")?,
        new_axis: ctx.attrs.int("new_axis", 0)? != 0,
    }))
}

impl ConcatFromSequence {
    /// The output shape, checked: every tensor of one rank and one shape
    /// outside the axis (all of one shape with `new_axis`).
    fn out_shape(&self, s: &Sequence) -> Result<(usize, Vec<usize>)> {
        let first = s
            .items()
            .first()
            .ok_or_else(|| Error::op(CONCAT, "the sequence is empty"))?;
        let rank = first.shape().len();
        if rank == 0 && !self.new_axis {
            return Err(Error::op(
                CONCAT,
                "cannot concatenate scalars without new_axis",
            ));
        }
        let out_rank = rank + usize::from(self.new_axis);
        let axis = norm_axis(CONCAT, self.axis, out_rank)?;
        let mut shape = first.shape().to_vec();
        if self.new_axis {
            shape.insert(axis, 0);
        } else {
            shape[axis] = 0;
        }
        for (i, t) in s.items().iter().enumerate() {
            let fits = t.shape().len() == rank
                && (0..rank)
                    .all(|d| (!self.new_axis && d == axis) || t.shape()[d] == first.shape()[d]);
            if !fits {
                return Err(Error::op(
                    CONCAT,
                    format!(
                        "tensor {i} has shape {:?}, which does not fit {:?} on axis {axis}",
                        t.shape(),
                        first.shape()
                    ),
                ));
            }
            shape[axis] += if self.new_axis { 1 } else { t.shape()[axis] };
        }
        Ok((axis, shape))
    }
}

impl Operator for ConcatFromSequence {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = in_fact(CONCAT, inputs, 0)?;
        if f.kind != Kind::Sequence {
            return Err(Error::ValueKind {
                what: format!("{CONCAT} input 0"),
                actual: f.kind.to_string(),
                expected: Kind::Sequence.to_string(),
            });
        }
        Ok(vec![Fact::unknown_shape(f.dtype)])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        outputs.first().and_then(Fact::len).unwrap_or(0) as u64
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        run_via_values(self, inputs)
    }

    fn uses_values(&self) -> bool {
        true
    }

    fn run_values(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let s = sequence(CONCAT, inputs, 0)?;
        let (axis, shape) = self.out_shape(s)?;
        budget::check("the output", s.dtype(), &shape)?;
        // A stack along a new axis is a concat of the same data (each
        // item's shape with a 1 inserted at the axis).
        let items: Vec<&Tensor> = s.items().iter().map(|t| &**t).collect();
        let t = concat(&items, &shape, axis)?;
        Ok(vec![t.into()])
    }
}
