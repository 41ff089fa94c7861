//! The graph IR: values, nodes with their built operators, graph inputs and
//! outputs, and constants; plus the passes that order, specialise (shape
//! inference and constant folding), prune and fuse it, run in one named
//! order by [`pipeline`].

mod body;
mod fold;
mod fuse;
mod metadata;
mod order;
pub mod pipeline;
mod prune;
#[cfg(test)]
pub(crate) mod test_support;

pub use body::Body;
pub use fold::{specialize, Facts};
pub use fuse::fuse;
pub use metadata::ModelMetadata;
pub use order::topological_sort;
pub use prune::prune;

use crate::error::{Error, Result};
use crate::ir::attributes::Attributes;
use crate::ir::{BuildContext, Fact, Fusion, Kind, Operator};
use crate::ops;
use crate::tensor::{DType, Tensor};
use std::fmt;
use std::sync::Arc;

/// Index of a value in [`Graph::values`].
pub type ValueId = usize;

/// One dimension of a declared shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A named (or anonymous, empty name) free dimension.
    Symbolic(String),
}

/// The type a model declares for a value.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// Element type (of the tensor, or of a sequence's or optional's tensors).
    pub dtype: DType,
    /// Tensor, sequence or optional.
    pub kind: Kind,
    /// Dimensions, when the model declares a shape.
    pub dims: Option<Vec<Dim>>,
}

impl Declared {
    /// True when `shape` fits the declared dimensions.
    pub fn accepts(&self, shape: &[usize]) -> bool {
        match &self.dims {
            None => true,
            Some(dims) => {
                dims.len() == shape.len()
                    && dims.iter().zip(shape).all(|(d, &s)| match d {
                        Dim::Fixed(f) => *f == s,
                        Dim::Symbolic(_) => true,
                    })
            }
        }
    }

    /// The declared shape with free dimensions set to `free`.
    pub fn concrete_shape(&self, free: usize) -> Option<Vec<usize>> {
        self.dims.as_ref().map(|dims| {
            dims.iter()
                .map(|d| match d {
                    Dim::Fixed(f) => *f,
                    Dim::Symbolic(_) => free,
                })
                .collect()
        })
    }
}

impl fmt::Display for Declared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Tensor => {}
            Kind::Sequence => return write!(f, "sequence of {}", self.dtype),
            k => return write!(f, "{k} of {}", self.dtype),
        }
        write!(f, "{}", self.dtype)?;
        match &self.dims {
            None => write!(f, "[?]"),
            Some(dims) => {
                let parts: Vec<String> = dims
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => n.to_string(),
                        Dim::Symbolic(s) if s.is_empty() => "?".to_string(),
                        Dim::Symbolic(s) => s.clone(),
                    })
                    .collect();
                write!(f, "[{}]", parts.join(", "))
            }
        }
    }
}

/// A value: a graph input, a node output or a constant.
#[derive(Debug, Clone)]
pub struct Value {
    /// The name in the model.
    pub name: String,
    /// The declared type, if the model declares one.
    pub declared: Option<Declared>,
}

/// A node: one operator applied to values.
#[derive(Debug, Clone)]
pub struct Node {
    /// The node's name (made up from its first output when the model gives none).
    pub name: String,
    /// ONNX operator type.
    pub op_type: String,
    /// Operator domain (`""` for the default ONNX domain).
    pub domain: String,
    /// The opset version imported for the domain.
    pub opset: i64,
    /// Inputs; `None` for an absent optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs; `None` for an unused optional output.
    pub outputs: Vec<Option<ValueId>>,
    /// Attributes.
    pub attrs: Attributes,
    /// What load-time fusions gave the node (its operator is built with it).
    pub fusion: Fusion,
    /// The built operator.
    pub op: Arc<dyn Operator>,
    /// Which inputs were constants when `op` was built (bit i = input i).
    pub built_with_consts: u64,
}

/// A whole model's graph.
#[derive(Debug, Clone)]
pub struct Graph {
    /// Every value, indexed by [`ValueId`].
    pub values: Vec<Value>,
    /// The nodes, in topological order once [`topological_sort`] has run.
    pub nodes: Vec<Node>,
    /// The inputs the caller feeds (initializers excluded).
    pub inputs: Vec<ValueId>,
    /// The outputs the caller receives.
    pub outputs: Vec<ValueId>,
    /// Constant values (initializers and folded results), indexed by [`ValueId`].
    pub constants: Vec<Option<Arc<Tensor>>>,
    /// What the model file says about itself (empty for subgraphs).
    pub metadata: Arc<ModelMetadata>,
}

impl Graph {
    /// The constant value of `id`, if it is constant.
    pub fn constant(&self, id: ValueId) -> Option<&Arc<Tensor>> {
        self.constants.get(id).and_then(|c| c.as_ref())
    }

    /// Total bytes of constant data (weights).
    pub fn weight_bytes(&self) -> usize {
        self.constants.iter().flatten().map(|t| t.byte_size()).sum()
    }

    /// The value's name.
    pub fn name(&self, id: ValueId) -> &str {
        &self.values[id].name
    }

    /// Builds (or rebuilds) a node's operator from its attributes and the
    /// graph's current constants.
    pub fn build_op(&self, node: &Node) -> Result<(Arc<dyn Operator>, u64)> {
        self.build_op_for(
            &node.op_type,
            &node.domain,
            node.opset,
            &node.inputs,
            node.outputs.len(),
            &node.attrs,
            &node.fusion,
        )
    }

    /// Builds an operator for a node with these parts; returns it with the
    /// mask of inputs that were constant.
    #[allow(clippy::too_many_arguments)]
    pub fn build_op_for(
        &self,
        op_type: &str,
        domain: &str,
        opset: i64,
        inputs: &[Option<ValueId>],
        num_outputs: usize,
        attrs: &Attributes,
        fusion: &Fusion,
    ) -> Result<(Arc<dyn Operator>, u64)> {
        let consts: Vec<Option<&Tensor>> = inputs
            .iter()
            .map(|i| i.and_then(|id| self.constant(id)).map(|t| t.as_ref()))
            .collect();
        let ctx = BuildContext {
            attrs,
            opset,
            consts: &consts,
            num_inputs: inputs.len(),
            num_outputs,
            fusion,
        };
        let op = ops::build(domain, op_type, &ctx)?;
        Ok((Arc::from(op), const_mask(&consts)))
    }

    /// Rebuilds the operators of nodes that gained constant inputs since they
    /// were built, so that they can prepare (e.g. pre-pack) those constants.
    pub fn rebuild_ops(&mut self) -> Result<()> {
        for i in 0..self.nodes.len() {
            let node = &self.nodes[i];
            let consts: Vec<Option<&Tensor>> = node
                .inputs
                .iter()
                .map(|v| v.and_then(|id| self.constant(id)).map(|t| t.as_ref()))
                .collect();
            if const_mask(&consts) != node.built_with_consts {
                let (op, mask) = self.build_op(node).map_err(|e| wrap(node, e))?;
                self.nodes[i].op = op;
                self.nodes[i].built_with_consts = mask;
            }
        }
        Ok(())
    }
}

fn const_mask(consts: &[Option<&Tensor>]) -> u64 {
    consts
        .iter()
        .enumerate()
        .take(64)
        .filter(|(_, c)| c.is_some())
        .fold(0, |m, (i, _)| m | (1 << i))
}

/// Wraps an operator error with the node it happened in.
pub fn wrap(node: &Node, e: Error) -> Error {
    match e {
        Error::Op { .. } | Error::MemoryLimit { .. } => Error::Node {
            node: node.name.clone(),
            op: node.op_type.clone(),
            source: Box::new(e),
        },
        other => other,
    }
}

/// The facts of the graph inputs for concrete tensors.
pub fn facts_of(tensors: &[(ValueId, &Tensor)]) -> Vec<(ValueId, Fact)> {
    tensors.iter().map(|(id, t)| (*id, Fact::of(t))).collect()
}
