//! The graph IR: values, nodes with their built operators, graph inputs and
//! outputs, constants, and control-flow bodies as data ([`Body`]); plus the
//! passes that order, specialise (shape inference and constant folding),
//! prune and fuse it, run in one named order by [`pipeline`].

mod body;
mod fold;
mod fuse;
mod metadata;
mod order;
pub mod pipeline;
mod prune;
#[cfg(test)]
pub(crate) mod test_support;

pub use body::{Body, BodyBinder};
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
    /// Constants whose data the graph handed to the operators that read
    /// them ([`Graph::release_adopted`]): only their facts stay, indexed by
    /// [`ValueId`] (shorter than `values` when none was released).
    pub released: Vec<Option<Fact>>,
    /// What the model file says about itself (empty for subgraphs).
    pub metadata: Arc<ModelMetadata>,
}

impl Graph {
    /// The constant value of `id`, if it is constant.
    pub fn constant(&self, id: ValueId) -> Option<&Arc<Tensor>> {
        self.constants.get(id).and_then(|c| c.as_ref())
    }

    /// The fact of `id` when it is a constant whose data its readers hold
    /// ([`Graph::release_adopted`]); the executor passes `None` for it.
    pub fn released(&self, id: ValueId) -> Option<&Fact> {
        self.released.get(id).and_then(|f| f.as_ref())
    }

    /// Whether `id` is a constant, held here or released to its readers.
    pub fn is_constant(&self, id: ValueId) -> bool {
        self.constant(id).is_some() || self.released(id).is_some()
    }

    /// Total bytes of constant data (weights), those released to the
    /// operators that read them included.
    pub fn weight_bytes(&self) -> usize {
        let held: usize = self.constants.iter().flatten().map(|t| t.byte_size()).sum();
        let released: u128 = self
            .released
            .iter()
            .flatten()
            .filter_map(|f| crate::tensor::budget::tensor_bytes(f.dtype, f.shape.as_deref()?))
            .sum();
        held.saturating_add(usize::try_from(released).unwrap_or(usize::MAX))
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
            // An operator holding a released constant keeps it: built
            // again, it would find no data for that input.
            if node
                .inputs
                .iter()
                .flatten()
                .any(|&id| self.released(id).is_some())
            {
                continue;
            }
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

impl Graph {
    /// Hands each constant to the operators that read it when every one of
    /// them takes it ([`Operator::adopt_constant`]: e.g. a convolution that
    /// keeps its weights packed for its kernel and lets the original go), so
    /// that the data lives once, in the form the kernels read. The graph
    /// keeps the constant's fact; runs pass `None` for it. Graph outputs and
    /// values read by nothing stay. `fixed_shapes`: every run has the same
    /// input shapes. Returns the bytes released.
    pub fn release_adopted(&mut self, fixed_shapes: bool) -> usize {
        let mut readers: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.values.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for (slot, id) in node.inputs.iter().enumerate() {
                if let Some(r) = id.and_then(|id| readers.get_mut(id)) {
                    r.push((n, slot));
                }
            }
        }
        let mut bytes = 0;
        for (id, reads) in readers.iter().enumerate() {
            let Some(t) = self.constant(id).cloned() else {
                continue;
            };
            if reads.is_empty() || self.outputs.contains(&id) {
                continue;
            }
            let all = reads
                .iter()
                .all(|&(n, slot)| self.nodes[n].op.adopt_constant(slot, &t, fixed_shapes));
            if !all {
                continue;
            }
            if self.released.len() < self.values.len() {
                self.released.resize(self.values.len(), None);
            }
            self.released[id] = Some(Fact::of(&t));
            self.constants[id] = None;
            bytes += t.byte_size();
        }
        bytes
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
