//! The executor: runs a plan's nodes, reading inputs from the value store or
//! the plan's constants and releasing each value after its last reader.

use super::{Plan, ValueStore};
use crate::error::{Error, Result};
use crate::graph::{wrap, ValueId};
use crate::tensor::Tensor;
use std::sync::Arc;

/// Runs node `index` of the plan against the store.
pub fn run_node(plan: &Plan, store: &ValueStore, index: usize) -> Result<()> {
    let node = &plan.graph.nodes[index];
    let mut held: Vec<Option<Arc<Tensor>>> = Vec::with_capacity(node.inputs.len());
    for &input in &node.inputs {
        held.push(match input {
            None => None,
            Some(id) => Some(value(plan, store, id).ok_or_else(|| Error::MissingValue {
                node: node.name.clone(),
                value: plan.graph.name(id).to_string(),
            })?),
        });
    }
    let args: Vec<Option<&Tensor>> = held.iter().map(|t| t.as_deref()).collect();
    let outs = node.op.run(&args).map_err(|e| wrap(node, e))?;
    drop(args);
    drop(held);
    for &input in node.inputs.iter().flatten() {
        store.release(input);
    }
    for (slot, t) in node.outputs.iter().zip(outs) {
        if let Some(id) = slot {
            store.put(*id, Arc::new(t));
        }
    }
    Ok(())
}

/// A value from the store, or the plan's constant.
pub fn value(plan: &Plan, store: &ValueStore, id: ValueId) -> Option<Arc<Tensor>> {
    plan.graph.constant(id).cloned().or_else(|| store.get(id))
}

/// Runs every node in order on the current thread pool and returns the graph
/// outputs in order.
pub fn run_serial(plan: &Plan, inputs: Vec<(ValueId, Arc<Tensor>)>) -> Result<Vec<Arc<Tensor>>> {
    let store = ValueStore::new(plan);
    for (id, t) in inputs {
        store.put(id, t);
    }
    for i in 0..plan.graph.nodes.len() {
        run_node(plan, &store, i)?;
    }
    collect_outputs(plan, &store)
}

/// The graph outputs from a finished run.
pub fn collect_outputs(plan: &Plan, store: &ValueStore) -> Result<Vec<Arc<Tensor>>> {
    plan.graph
        .outputs
        .iter()
        .map(|&id| {
            value(plan, store, id).ok_or_else(|| {
                Error::InvalidModel(format!(
                    "graph output {:?} was not produced",
                    plan.graph.name(id)
                ))
            })
        })
        .collect()
}
