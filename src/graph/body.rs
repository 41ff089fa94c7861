//! Subgraph bodies of control-flow operators (If, Loop, Scan): the body as a
//! ramify [`Graph`] whose inputs are its formal inputs followed by the
//! outer-scope values it reads, and a small serial interpreter that runs it.

use super::{specialize, wrap, Graph};
use crate::error::{Error, Result};
use crate::ir::{tensor_args, Fact, Subgraph, Value};
use crate::ops::checked::run_checked;
use crate::tensor::DType;

/// A body graph. `graph.inputs` holds the `formal` declared inputs first, then
/// one input per outer-scope name the body reads; `outer[k]` is the index of
/// that name among the enclosing node's implicit inputs (the trailing
/// `implicit` inputs of the node).
#[derive(Debug, Clone)]
pub struct Body {
    /// The body, nodes in topological order.
    pub graph: Graph,
    /// How many declared (formal) inputs the body has.
    pub formal: usize,
    /// For each outer-scope input of the body, its index among the node's implicit inputs.
    pub outer: Vec<usize>,
    /// How many implicit (outer-scope) inputs the enclosing node lists.
    pub implicit: usize,
}

impl Subgraph for Body {
    fn formal(&self) -> usize {
        self.formal
    }

    fn implicit(&self) -> usize {
        self.implicit
    }

    fn num_outputs(&self) -> usize {
        self.graph.outputs.len()
    }

    fn is_random(&self) -> bool {
        self.graph.nodes.iter().any(|n| n.op.is_random())
    }

    fn declared_output(&self, k: usize) -> Option<DType> {
        let id = *self.graph.outputs.get(k)?;
        self.graph.values[id].declared.as_ref().map(|d| d.dtype)
    }

    fn run(&self, formal: &[Value], implicit: &[Option<&Value>]) -> Result<Vec<Value>> {
        if formal.len() != self.formal {
            return Err(Error::op(
                "subgraph",
                format!(
                    "the body takes {} inputs but is given {}",
                    self.formal,
                    formal.len()
                ),
            ));
        }
        let g = &self.graph;
        let mut vals: Vec<Option<Value>> = g
            .constants
            .iter()
            .map(|c| c.clone().map(Value::Tensor))
            .collect();
        vals.resize(g.values.len(), None);
        for (k, &id) in g.inputs.iter().enumerate() {
            let v = if k < self.formal {
                formal.get(k)
            } else {
                self.outer
                    .get(k - self.formal)
                    .and_then(|&j| implicit.get(j).copied().flatten())
            };
            let v = v.ok_or_else(|| {
                Error::op(
                    "subgraph",
                    format!("outer-scope value {:?} is not available", g.name(id)),
                )
            })?;
            vals[id] = Some(v.clone());
        }
        for node in &g.nodes {
            let mut args = Vec::with_capacity(node.inputs.len());
            for i in &node.inputs {
                args.push(match i {
                    None => None,
                    Some(id) => Some(vals[*id].as_ref().ok_or_else(|| Error::MissingValue {
                        node: node.name.clone(),
                        value: g.name(*id).to_string(),
                    })?),
                });
            }
            let needed = node.outputs.iter().flatten().count();
            let too_few = || {
                Error::op(
                    &node.op_type,
                    format!("node {:?} returned too few outputs", node.name),
                )
            };
            if node.op.uses_values() {
                let outs = node.op.run_values(&args).map_err(|e| wrap(node, e))?;
                if outs.len() < needed {
                    return Err(too_few());
                }
                for (slot, v) in node.outputs.iter().zip(outs) {
                    if let Some(id) = slot {
                        vals[*id] = Some(v);
                    }
                }
            } else {
                // A tensor operator: its tensors, as before bodies carried values.
                let outs = tensor_args(&args)
                    .and_then(|t| run_checked(node.op.as_ref(), &t))
                    .map_err(|e| wrap(node, e))?;
                drop(args);
                if outs.len() < needed {
                    return Err(too_few());
                }
                for (slot, t) in node.outputs.iter().zip(outs) {
                    if let Some(id) = slot {
                        vals[*id] = Some(Value::from(t));
                    }
                }
            }
        }
        g.outputs
            .iter()
            .map(|&id| {
                vals[id].clone().ok_or_else(|| {
                    Error::op(
                        "subgraph",
                        format!("body output {:?} was not computed", g.name(id)),
                    )
                })
            })
            .collect()
    }

    /// Shape inference over a copy of the body, falling back to the declared
    /// output types.
    fn infer(&self, formal: &[Option<Fact>], implicit: &[Option<&Fact>]) -> Vec<Option<Fact>> {
        let g = &self.graph;
        let mut known = Vec::new();
        for (k, &id) in g.inputs.iter().enumerate() {
            let f = if k < self.formal {
                formal.get(k).cloned().flatten()
            } else {
                self.outer
                    .get(k - self.formal)
                    .and_then(|&j| implicit.get(j).copied().flatten())
                    .cloned()
            };
            if let Some(f) = f {
                known.push((id, f));
            }
        }
        let mut copy = g.clone();
        let facts = specialize(&mut copy, &known, false).unwrap_or_default();
        g.outputs
            .iter()
            .map(|&id| {
                facts.get(id).cloned().flatten().or_else(|| {
                    g.values[id]
                        .declared
                        .as_ref()
                        .map(|d| Fact::of_kind(d.kind, d.dtype))
                })
            })
            .collect()
    }

    fn nominal_flops(&self, per_node: u64) -> u64 {
        (self.graph.nodes.len() as u64)
            .max(1)
            .saturating_mul(per_node.max(1))
    }
}
