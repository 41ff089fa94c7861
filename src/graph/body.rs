//! Subgraph bodies of control-flow operators (If, Loop, Scan, SequenceMap)
//! as graph data: the body as a ramify [`Graph`] whose inputs are its formal
//! inputs followed by the outer-scope values it reads, with what the graph
//! layer knows of it (its facts for given input facts, its declared output
//! types). Running a body is the executor's: a [`BodyBinder`], passed down
//! from the session when a model is parsed, turns each `Body` into the
//! [`Subgraph`] its operator receives.

use super::{specialize, Graph, ValueId};
use crate::error::{Error, Result};
use crate::ir::{Fact, Subgraph, Value};
use crate::tensor::DType;
use std::sync::Arc;

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

/// Makes the runnable form of a body, the [`Subgraph`] its control-flow
/// operator is built with. The executor implements it; the ONNX conversion
/// calls it for each body it converts (inner bodies first), so the graph and
/// the operators never know how a body runs.
pub trait BodyBinder: Sync {
    /// The subgraph that runs `body`.
    fn bind(&self, body: Body) -> Result<Arc<dyn Subgraph>>;
}

impl Body {
    /// The body's input values in `graph.inputs` order: the formal inputs,
    /// then the outer-scope values it reads, picked from the node's implicit
    /// inputs.
    pub fn inputs(&self, formal: Vec<Value>, implicit: &[Option<&Value>]) -> Result<Vec<Value>> {
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
        let mut values = formal;
        values.reserve(self.outer.len());
        for (k, &j) in self.outer.iter().enumerate() {
            let v = implicit.get(j).copied().flatten().ok_or_else(|| {
                let id = self.graph.inputs.get(self.formal + k).copied();
                Error::op(
                    "subgraph",
                    format!(
                        "outer-scope value {:?} is not available",
                        id.map_or("?", |id| self.graph.name(id))
                    ),
                )
            })?;
            values.push(v.clone());
        }
        Ok(values)
    }

    /// The facts the body's inputs are declared with: element type and
    /// kind only (a body's declared shapes are not checked against what it
    /// is given, so nothing may be folded from them); an outer-scope input
    /// has none.
    pub fn declared_kinds(&self) -> Vec<(ValueId, Fact)> {
        self.graph
            .inputs
            .iter()
            .filter_map(|&id| {
                let d = self.graph.values[id].declared.as_ref()?;
                Some((id, Fact::of_kind(d.kind, d.dtype)))
            })
            .collect()
    }

    /// Number of outputs of the body.
    pub fn num_outputs(&self) -> usize {
        self.graph.outputs.len()
    }

    /// Whether a node of the body draws at random.
    pub fn is_random(&self) -> bool {
        self.graph.nodes.iter().any(|n| n.op.is_random())
    }

    /// The declared element type of output `k`, when the model gives one.
    pub fn declared_output(&self, k: usize) -> Option<DType> {
        let id = *self.graph.outputs.get(k)?;
        self.graph.values[id].declared.as_ref().map(|d| d.dtype)
    }

    /// Facts of the body outputs for these facts of its formal inputs and of
    /// the node's implicit inputs: shape inference over a copy of the body,
    /// falling back to the declared output types.
    pub fn infer(&self, formal: &[Option<Fact>], implicit: &[Option<&Fact>]) -> Vec<Option<Fact>> {
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

    /// A rough FLOP count of one run, each node counted as `per_node`.
    pub fn nominal_flops(&self, per_node: u64) -> u64 {
        (self.graph.nodes.len() as u64)
            .max(1)
            .saturating_mul(per_node.max(1))
    }
}
