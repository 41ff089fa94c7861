//! Reshapes without copying: a node whose operator only changes a tensor's
//! shape (given its input's shape, for a Transpose) ([`Operator::is_view_of_input`](crate::ir::Operator::is_view_of_input),
//! when nothing reads its other outputs) and is the last reader
//! of its data takes the tensor out of the store and relabels its shape,
//! instead of copying the data into a new tensor. The output shape is the
//! plan's inferred fact, so the node's own shape rule already checked it;
//! anything unusual (a shared tensor, an unknown shape, a count mismatch)
//! falls back to running the operator.

use super::{Plan, ValueStore};
use crate::error::{Error, Result};
use crate::graph::ValueId;
use crate::ir::{Fact, Value};
use crate::tensor::{Element, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::sync::Arc;

/// Whether `node`'s first output is its first input's data under another
/// shape (the operator says so, given whether inputs after the first are
/// present) and nothing reads its other outputs.
fn passes_data_through(plan: &Plan, node: &crate::graph::Node) -> bool {
    let later_inputs = node.inputs.iter().skip(1).any(Option::is_some);
    let data = node.inputs.first().copied().flatten();
    let fact = data.and_then(|id| plan.facts.get(id)?.as_ref());
    node.op.is_view_of_input(later_inputs, fact)
        && node
            .outputs
            .iter()
            .skip(1)
            .all(|o| o.is_none_or(|id| plan.uses[id] == 0))
}

/// The data input, output and output fact of node `index` when it can
/// forward its input's storage: a view operator with a non-constant data
/// input read by no one after it and an output of known shape and type.
fn candidate<'p>(
    plan: &'p Plan,
    store: &ValueStore,
    index: usize,
) -> Option<(ValueId, ValueId, &'p Fact)> {
    let node = &plan.graph.nodes[index];
    if !passes_data_through(plan, node) {
        return None;
    }
    let data = (*node.inputs.first()?)?;
    let out = node.outputs[0]?;
    let reads = node.inputs.iter().flatten().filter(|&&i| i == data).count();
    if plan.graph.is_constant(data) || reads != 1 || !store.is_last_read(data) {
        return None;
    }
    let fact = plan.facts.get(out)?.as_ref()?;
    fact.shape.as_ref()?;
    Some((data, out, fact))
}

/// Runs node `index` as a relabelling of its input's storage when it can:
/// `Ok(true)` when done (the output stored, the inputs released), `Ok(false)`
/// when the operator must run.
pub(super) fn forward(plan: &Plan, store: &ValueStore, index: usize) -> Result<bool> {
    let Some((data, out, fact)) = candidate(plan, store, index) else {
        return Ok(false);
    };
    let shape = fact.shape.as_deref().unwrap_or(&[]);
    match store.get(data) {
        Some(Value::Tensor(t))
            if t.dtype() == fact.dtype && shape.iter().product::<usize>() == t.len() => {}
        _ => return Ok(false),
    }
    let node = &plan.graph.nodes[index];
    let taken = store.take(data).ok_or_else(|| Error::MissingValue {
        node: node.name.clone(),
        value: plan.graph.name(data).to_string(),
    })?;
    for &input in node.inputs.iter().flatten() {
        if input != data {
            store.release(input);
        }
    }
    let taken = taken.into_tensor("a view's input")?;
    let owned = Arc::try_unwrap(taken).unwrap_or_else(|shared| (*shared).clone());
    let t = relabel(owned, shape).ok_or_else(|| {
        Error::op(
            &node.op_type,
            format!("cannot view the data as shape {shape:?}"),
        )
    })?;
    store.put(out, Value::from(t));
    Ok(true)
}

/// The tensor under `shape` (same element count), without copying when it
/// is in standard layout.
fn relabel(t: Tensor, shape: &[usize]) -> Option<Tensor> {
    fn go<T: Element>(a: ArrayD<T>, shape: &[usize]) -> Option<Tensor> {
        a.into_shape_with_order(IxDyn(shape))
            .ok()
            .map(T::into_tensor)
    }
    crate::dispatch!(t.into_standard_layout(), a => go(a, shape))
}
