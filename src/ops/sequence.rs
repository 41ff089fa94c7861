//! Sequence and optional values: building and reading sequences of tensors
//! (SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,
//! SequenceErase, SequenceLength), cutting a tensor into a sequence and
//! joining one back (SplitToSequence, ConcatFromSequence), running a body
//! over a sequence's elements (SequenceMap), and optionals (Optional,
//! OptionalHasElement, OptionalGetElement). Every operator here works on
//! [`Value`]s ([`Operator::uses_values`](crate::ir::Operator::uses_values));
//! sequences share their tensors, so inserting or picking an element copies
//! no data. None of them is folded into a constant: sequences are never
//! constants.

use super::Registrar;
use crate::error::{Error, Result};
use crate::ir::{Fact, InferInput, Sequence, Value};
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

mod map;
mod optional;
mod seq;
mod split;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("ConcatFromSequence", 11, split::build_concat);
    r.add("Optional", 15, optional::build_optional);
    r.add("OptionalGetElement", 15, optional::build_get);
    r.add("OptionalHasElement", 15, optional::build_has);
    r.add("SequenceAt", 11, seq::build_at);
    r.add("SequenceConstruct", 11, seq::build_construct);
    r.add("SequenceEmpty", 11, seq::build_empty);
    r.add("SequenceErase", 11, seq::build_erase);
    r.add("SequenceInsert", 11, seq::build_insert);
    r.add("SequenceLength", 11, seq::build_length);
    r.add("SequenceMap", 17, map::build);
    r.add("SplitToSequence", 11, split::build_split);
}

/// Input `i`, which must be present.
fn value<'a>(op: &str, inputs: &[Option<&'a Value>], i: usize) -> Result<&'a Value> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| Error::op(op, format!("input {i} is missing")))
}

/// Input `i` as a sequence.
fn sequence<'a>(op: &str, inputs: &[Option<&'a Value>], i: usize) -> Result<&'a Sequence> {
    value(op, inputs, i)?.as_sequence(&format!("{op} input {i}"))
}

/// Input `i` as a tensor.
fn tensor<'a>(op: &str, inputs: &[Option<&'a Value>], i: usize) -> Result<&'a Arc<Tensor>> {
    value(op, inputs, i)?.as_tensor(&format!("{op} input {i}"))
}

/// A position input: a scalar (or one-element) int32 or int64 tensor.
fn position(op: &str, t: &Tensor) -> Result<i64> {
    if !matches!(t.dtype(), DType::I32 | DType::I64) || t.len() != 1 {
        return Err(Error::op(
            op,
            format!(
                "a position must be one int32 or int64, found {} {:?}",
                t.dtype(),
                t.shape()
            ),
        ));
    }
    t.to_i64_vec()?
        .first()
        .copied()
        .ok_or_else(|| Error::op(op, "the position is empty"))
}

/// The fact of input `i`, which must be known.
fn in_fact<'a>(op: &str, inputs: &[InferInput<'a>], i: usize) -> Result<&'a Fact> {
    inputs
        .get(i)
        .and_then(|x| x.fact)
        .ok_or_else(|| Error::op(op, format!("input {i} is missing")))
}
