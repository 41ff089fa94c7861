//! Operators: the kernels, their shape rules and FLOP counts, and the registry
//! that maps ONNX operator names to them. Operators depend only on the tensor
//! type, attributes and errors.

use crate::attributes::Attributes;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::OnceLock;

pub mod checked;
pub mod interrupt;
pub mod util;

mod activation;
mod attention;
mod binary;
mod control;
mod conv;
mod extra;
mod gemm;
mod loss;
mod misc;
mod norm;
mod pool;
mod quant;
mod reduce;
mod resize;
mod rnn;
mod shape;
mod signal;
mod unary;
mod vision;

/// What is known about a value before running: its element type and, when
/// fixed, its shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fact {
    /// Element type.
    pub dtype: DType,
    /// Concrete shape, or `None` when it depends on data.
    pub shape: Option<Vec<usize>>,
}

impl Fact {
    /// A fact with a known shape.
    pub fn new(dtype: DType, shape: Vec<usize>) -> Fact {
        Fact {
            dtype,
            shape: Some(shape),
        }
    }

    /// A fact whose shape is unknown.
    pub fn unknown_shape(dtype: DType) -> Fact {
        Fact { dtype, shape: None }
    }

    /// The fact describing a tensor.
    pub fn of(t: &Tensor) -> Fact {
        Fact::new(t.dtype(), t.shape().to_vec())
    }

    /// Number of elements, when the shape is known.
    pub fn len(&self) -> Option<usize> {
        self.shape.as_ref().map(|s| s.iter().product())
    }

    /// Whether the value has no elements, when the shape is known.
    pub fn is_empty(&self) -> Option<bool> {
        self.len().map(|n| n == 0)
    }
}

/// One input as shape inference sees it: absent (optional input left out),
/// or its fact plus its value when the value is a constant.
#[derive(Debug, Clone, Copy)]
pub struct InferInput<'a> {
    /// The input's fact, `None` when the optional input is absent.
    pub fact: Option<&'a Fact>,
    /// The input's value when it is constant.
    pub value: Option<&'a Tensor>,
}

/// What an operator is built from: its attributes, the opset the model
/// imports, and the inputs that are constants at load time.
#[derive(Debug, Clone, Copy)]
pub struct BuildContext<'a> {
    /// The node's attributes.
    pub attrs: &'a Attributes,
    /// Opset version of the operator's domain.
    pub opset: i64,
    /// Per input: the constant value, if the input is a constant.
    pub consts: &'a [Option<&'a Tensor>],
    /// How many inputs the node has (absent optional ones included).
    pub num_inputs: usize,
    /// How many outputs the node has.
    pub num_outputs: usize,
}

impl BuildContext<'_> {
    /// The constant value of input `i`, if any.
    pub fn constant(&self, i: usize) -> Option<&Tensor> {
        self.consts.get(i).copied().flatten()
    }
}

/// An operator instance, built once per node.
pub trait Operator: Send + Sync + Debug {
    /// Output facts from input facts (and constant input values).
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>>;
    /// Floating-point (or integer) operations for these input and output facts.
    fn flops(&self, inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64;
    /// Computes the outputs. Absent optional inputs are `None`. Kernels split
    /// their work over the threads of the current rayon pool and only over
    /// independent outputs, so results do not depend on the thread count.
    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>>;
    /// The outputs computed from input facts alone, for operators whose
    /// result depends only on shapes and types (`Shape`, `Size`); this lets
    /// constant folding remove them once shapes are known.
    fn fold_from_facts(&self, _inputs: &[InferInput]) -> Option<Vec<Tensor>> {
        None
    }
}

/// Builds an operator for one node.
pub type Builder = fn(&BuildContext) -> Result<Box<dyn Operator>>;

/// The registry entry of one operator type.
#[derive(Clone, Copy)]
pub struct OpEntry {
    /// Lowest opset version this implementation covers.
    pub since: i64,
    /// The operator family (module) that implements it.
    pub family: &'static str,
    /// The builder.
    pub build: Builder,
}

/// Maps operator names of the default ONNX domain to their builders.
pub struct Registry {
    ops: HashMap<&'static str, OpEntry>,
    family: &'static str,
}

impl Registry {
    /// Registers `name` from opset `since`.
    pub fn add(&mut self, name: &'static str, since: i64, build: Builder) {
        let family = self.family;
        self.ops.insert(
            name,
            OpEntry {
                since,
                family,
                build,
            },
        );
    }

    /// The entry for `name`, if supported.
    pub fn get(&self, name: &str) -> Option<&OpEntry> {
        self.ops.get(name)
    }

    /// All supported operators with their entries, sorted by name.
    pub fn entries(&self) -> Vec<(&'static str, OpEntry)> {
        let mut v: Vec<_> = self.ops.iter().map(|(k, e)| (*k, *e)).collect();
        v.sort_unstable_by_key(|(k, _)| *k);
        v
    }

    /// All supported operator names, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.ops.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

/// A family of operators: its name and the function registering them.
type Family = (&'static str, fn(&mut Registry));

/// The process-wide registry of built-in operators.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Registry {
            ops: HashMap::new(),
            family: "",
        };
        let families: &[Family] = &[
            ("activation", activation::register),
            ("attention", attention::register),
            ("binary", binary::register),
            ("control", control::register),
            ("conv", conv::register),
            ("extra", extra::register),
            ("gemm", gemm::register),
            ("loss", loss::register),
            ("misc", misc::register),
            ("norm", norm::register),
            ("pool", pool::register),
            ("quant", quant::register),
            ("reduce", reduce::register),
            ("resize", resize::register),
            ("rnn", rnn::register),
            ("shape", shape::register),
            ("signal", signal::register),
            ("unary", unary::register),
            ("vision", vision::register),
        ];
        for &(family, register) in families {
            r.family = family;
            register(&mut r);
        }
        r
    })
}

/// The domains whose operators ramify implements.
pub fn is_supported_domain(domain: &str) -> bool {
    matches!(domain, "" | "ai.onnx")
}

/// Builds the operator for a node of type `op_type` in `domain` at `opset`.
pub fn build(domain: &str, op_type: &str, ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let unsupported = || Error::UnsupportedOperator {
        op: op_type.to_string(),
        domain: domain.to_string(),
        opset: ctx.opset,
        node: ctx.attrs.node().to_string(),
    };
    if !is_supported_domain(domain) {
        return Err(unsupported());
    }
    match registry().get(op_type) {
        Some(entry) if ctx.opset >= entry.since => (entry.build)(ctx),
        _ => Err(unsupported()),
    }
}
