//! Specialisation of a graph: shape and type inference from the input facts,
//! and constant folding of every node whose result is known before running
//! (all inputs constant, or a shape-only operator with known input shapes).
//! A random operator ([`crate::ir::Operator::is_random`]) is never folded: it
//! must draw anew on every run. Sequences and optionals are never constants:
//! a node whose output is one stays in the graph.

use super::{wrap, Graph, ValueId};
use crate::error::Result;
use crate::ir::{Fact, InferInput, Value};
use crate::ops::checked::{check_facts, run_checked};
use crate::tensor::Tensor;
use std::sync::Arc;

/// What is known about each value, indexed by [`ValueId`].
pub type Facts = Vec<Option<Fact>>;

/// Infers facts for every value from the given input facts and folds the
/// nodes whose outputs are known constants, removing them from the graph.
///
/// With `strict`, an inference error is returned; without it (at load time,
/// when input shapes may be unknown), the node's outputs are left unknown.
pub fn specialize(graph: &mut Graph, inputs: &[(ValueId, Fact)], strict: bool) -> Result<Facts> {
    let mut facts: Facts = vec![None; graph.values.len()];
    for (id, c) in graph.constants.iter().enumerate() {
        if let Some(t) = c {
            facts[id] = Some(Fact::of(t));
        }
    }
    for (id, f) in graph.released.iter().enumerate() {
        if let (Some(f), Some(slot)) = (f, facts.get_mut(id)) {
            *slot = Some(f.clone());
        }
    }
    for (id, f) in inputs {
        facts[*id] = Some(f.clone());
    }
    let nodes = std::mem::take(&mut graph.nodes);
    let mut kept = Vec::with_capacity(nodes.len());
    for node in nodes {
        // Folding runs operators (a constant loop among them): a load may be
        // cancelled or time out like a run.
        crate::ops::interrupt::check()?;
        let consts: Vec<Option<Arc<Tensor>>> = node
            .inputs
            .iter()
            .map(|i| i.and_then(|id| graph.constant(id).cloned()))
            .collect();
        let all_const = node
            .inputs
            .iter()
            .zip(&consts)
            .all(|(i, c)| i.is_none() || c.is_some());
        let infer_inputs: Vec<InferInput> = node
            .inputs
            .iter()
            .zip(&consts)
            .map(|(i, c)| InferInput {
                fact: i.and_then(|id| facts[id].as_ref()),
                value: c.as_deref(),
            })
            .collect();
        let folded = if node.op.is_random() {
            None
        } else if all_const && node.op.uses_values() {
            // An operator of sequences or optionals (or control flow) folds
            // only when every output is a tensor: constants are tensors.
            let values: Vec<Option<Value>> = consts
                .iter()
                .map(|c| c.clone().map(Value::Tensor))
                .collect();
            let args: Vec<Option<&Value>> = values.iter().map(Option::as_ref).collect();
            let outs = node.op.run_values(&args).map_err(|e| wrap(&node, e))?;
            outs.into_iter()
                .map(|v| match v {
                    Value::Tensor(t) => Some(Arc::try_unwrap(t).unwrap_or_else(|t| (*t).clone())),
                    _ => None,
                })
                .collect::<Option<Vec<Tensor>>>()
        } else if all_const {
            let args: Vec<Option<&Tensor>> = consts.iter().map(|c| c.as_deref()).collect();
            Some(run_checked(node.op.as_ref(), &args).map_err(|e| wrap(&node, e))?)
        } else {
            node.op.fold_from_facts(&infer_inputs)
        };
        if let Some(outs) = folded {
            for (slot, t) in node.outputs.iter().zip(outs) {
                if let Some(id) = slot {
                    facts[*id] = Some(Fact::of(&t));
                    graph.constants[*id] = Some(Arc::new(t));
                }
            }
            continue;
        }
        let known = node
            .inputs
            .iter()
            .zip(&infer_inputs)
            .all(|(i, x)| i.is_none() || x.fact.is_some());
        if known {
            match node.op.infer(&infer_inputs) {
                Ok(out) => {
                    check_facts(&out).map_err(|e| wrap(&node, e))?;
                    for (slot, f) in node.outputs.iter().zip(out) {
                        if let Some(id) = slot {
                            facts[*id] = Some(f);
                        }
                    }
                }
                Err(e) if strict => return Err(wrap(&node, e)),
                Err(_) => {}
            }
        }
        kept.push(node);
    }
    graph.nodes = kept;
    Ok(facts)
}
