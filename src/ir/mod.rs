//! The intermediate representation's vocabulary, below both the graph and the
//! operators: what is known about a value before running ([`Fact`]), what an
//! operator is built from ([`BuildContext`], [`attributes`]), the [`Operator`]
//! trait every kernel implements, and the [`Subgraph`] trait through which
//! control-flow operators run their bodies without knowing how a graph is
//! represented or executed.

use crate::error::Result;
use crate::tensor::{DType, Tensor};
use attributes::Attributes;
use std::fmt::Debug;
use std::sync::Arc;

pub mod attributes;
pub mod fusion;
pub mod value;

pub use fusion::{Activation, Fusion, FusionKind, Scale};
pub use value::{run_via_values, tensor_args, Kind, Optional, Sequence, Value};

/// What is known about a value before running: its element type and, when
/// fixed, its shape; and its kind (a tensor unless said otherwise: a
/// sequence's or optional's `dtype` is its tensors' element type, and its
/// `shape` is `None`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fact {
    /// Element type.
    pub dtype: DType,
    /// Concrete shape, or `None` when it depends on data.
    pub shape: Option<Vec<usize>>,
    /// Tensor, sequence or optional.
    pub kind: Kind,
}

impl Fact {
    /// A fact with a known shape.
    pub fn new(dtype: DType, shape: Vec<usize>) -> Fact {
        Fact {
            dtype,
            shape: Some(shape),
            kind: Kind::Tensor,
        }
    }

    /// A fact whose shape is unknown.
    pub fn unknown_shape(dtype: DType) -> Fact {
        Fact {
            dtype,
            shape: None,
            kind: Kind::Tensor,
        }
    }

    /// The fact of a value of `kind` (not a tensor: its shape is unknown)
    /// whose tensors have element type `dtype`.
    pub fn of_kind(kind: Kind, dtype: DType) -> Fact {
        Fact {
            dtype,
            shape: None,
            kind,
        }
    }

    /// The fact describing a tensor.
    pub fn of(t: &Tensor) -> Fact {
        Fact::new(t.dtype(), t.shape().to_vec())
    }

    /// The fact describing a value of any kind.
    pub fn of_value(v: &Value) -> Fact {
        match v {
            Value::Tensor(t) => Fact::of(t),
            v => Fact::of_kind(v.kind(), v.dtype()),
        }
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
/// imports, the inputs that are constants at load time, and the neighbours
/// a fusion gave it.
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
    /// What load-time fusions gave the node ([`Fusion::NONE`] for a node
    /// as the model wrote it).
    pub fusion: &'a Fusion,
}

impl BuildContext<'_> {
    /// The constant value of input `i`, if any.
    pub fn constant(&self, i: usize) -> Option<&Tensor> {
        self.consts.get(i).copied().flatten()
    }
}

/// Classes of operators with distinct single-thread throughput, for the
/// cost model; an operator names its own through [`Operator::cost_class`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// Convolutions.
    Conv,
    /// Matrix products.
    MatMul,
    /// Pooling and normalisation.
    Window,
    /// Elementwise arithmetic and activations.
    Elementwise,
    /// Data movement and everything else.
    Other,
}

impl OpClass {
    /// Every class, in a fixed order.
    pub const ALL: [OpClass; 5] = [
        OpClass::Conv,
        OpClass::MatMul,
        OpClass::Window,
        OpClass::Elementwise,
        OpClass::Other,
    ];
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
    /// Whether the operator takes or gives values other than tensors
    /// (sequences, optionals) or passes them through (Identity, control
    /// flow): the executor then calls [`run_values`](Self::run_values)
    /// instead of [`run`](Self::run).
    fn uses_values(&self) -> bool {
        false
    }
    /// Computes the outputs from values of any kind. The default, for tensor
    /// operators, unwraps the tensors (a sequence or optional input is an
    /// [`Error::ValueKind`](crate::error::Error::ValueKind)) and calls
    /// [`run`](Self::run).
    fn run_values(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let tensors = tensor_args(inputs)?;
        Ok(self.run(&tensors)?.into_iter().map(Value::from).collect())
    }
    /// The outputs computed from input facts alone, for operators whose
    /// result depends only on shapes and types (`Shape`, `Size`); this lets
    /// constant folding remove them once shapes are known.
    fn fold_from_facts(&self, _inputs: &[InferInput]) -> Option<Vec<Tensor>> {
        None
    }
    /// Whether the outputs are drawn at random (RandomUniform, Bernoulli,
    /// Dropout in training mode, a control-flow node whose body holds one):
    /// such a node is never folded into a constant, even when all its inputs
    /// are constants, so it draws anew on every run.
    fn is_random(&self) -> bool {
        false
    }
    /// The operator's class in the cost model (its single-thread throughput).
    fn cost_class(&self) -> OpClass {
        OpClass::Other
    }
    /// Whether output 0 is input 0's data under output 0's shape (Reshape,
    /// Flatten, Squeeze, Unsqueeze, Identity, Dropout in inference, a
    /// Transpose that moves only axes of length 1), given whether any input
    /// after the first is present and input 0's fact where the plan knows
    /// it: the executor may then relabel the input's storage instead of
    /// running the kernel, provided no one reads the node's other outputs.
    fn is_view_of_input(&self, _later_inputs: bool, _data: Option<&Fact>) -> bool {
        false
    }
    /// Whether output 0, for inputs of these facts, is the inputs' elements
    /// one after another in input order (a Concat whose dimensions before
    /// its axis are all 1): the executor may then have the inputs'
    /// producers write straight into their parts of the output
    /// ([`run_into`](Self::run_into)) instead of copying them.
    fn joins_inputs(&self, _inputs: &[Option<&Fact>]) -> bool {
        false
    }
    /// Whether [`run_into`](Self::run_into) writes the operator's single
    /// float32 output straight into the given buffer, for inputs of these
    /// facts (rather than computing it apart for the caller to copy).
    fn writes_into(&self, _inputs: &[Option<&Fact>]) -> bool {
        false
    }
    /// Computes the single float32 output into `out` (its length, part of a
    /// larger buffer): `Ok(None)` once every element of `out` is written.
    /// Where the types or shapes at run time do not allow it, `out` is left
    /// alone and the outputs come back as [`run`](Self::run) gives them
    /// (`Ok(Some(..))`), for the caller to place; that is the default.
    fn run_into(
        &self,
        inputs: &[Option<&Tensor>],
        _out: &mut [f32],
    ) -> Result<Option<Vec<Tensor>>> {
        self.run(inputs).map(Some)
    }
    /// Whether the operator, built as it is and given these inputs (facts
    /// and constant values; absent optional ones have no fact), can absorb
    /// a neighbour of this kind: the fusion passes ask before they hand it
    /// over in [`BuildContext::fusion`].
    fn accepts_fusion(&self, _kind: FusionKind, _inputs: &[InferInput]) -> bool {
        false
    }
    /// The activation this operator computes on input 0, when a producer
    /// may apply it in its place, given these inputs (a Clip's bounds must
    /// be constants).
    fn as_activation(&self, _inputs: &[InferInput]) -> Option<Activation> {
        None
    }
    /// Offers the operator the graph's handle to constant input `slot`
    /// (the value it was built with). Returning true means the operator
    /// keeps it, reads that input from its own handle from now on (runs
    /// pass `None` there) and may let it go once it holds the data in
    /// another form (weights packed for its kernel); the graph then drops
    /// its copy, so that the data lives once. `fixed_shapes` says that
    /// every run has the same input shapes (the model declares them all),
    /// so that a form that serves only the shapes it was made for is
    /// enough.
    fn adopt_constant(&self, _slot: usize, _value: &Arc<Tensor>, _fixed_shapes: bool) -> bool {
        false
    }

    /// Called once when a plan is built for these facts of the node's
    /// inputs (`None` where nothing is known), before any run of that
    /// plan: an operator may get ready for those shapes here, so that its
    /// first run does not pay for it (Conv packs an adopted W in the form
    /// its kernel for these shapes reads, and lets the original go before
    /// the run's activations exist). What fails here is left for the run
    /// to report.
    fn prepare(&self, _inputs: &[Option<&Fact>]) {}
}

/// A subgraph body of a control-flow operator (If, Loop, Scan), as the
/// operator sees it: formal inputs first, then the outer-scope values the body
/// reads, taken from the enclosing node's trailing (implicit) inputs. The
/// executor implements it over the body's plans (the graph layer holds the
/// body's data, `graph::Body`); operators only call it.
pub trait Subgraph: Send + Sync + Debug {
    /// How many declared (formal) inputs the body takes.
    fn formal(&self) -> usize;
    /// How many implicit (outer-scope) inputs the enclosing node lists.
    fn implicit(&self) -> usize;
    /// Number of outputs of the body.
    fn num_outputs(&self) -> usize;
    /// The declared element type of output `k`, when the model gives one.
    fn declared_output(&self, k: usize) -> Option<DType>;
    /// Runs the body on its formal inputs and the node's implicit inputs
    /// (values of any kind). The formal inputs are handed over, so that the
    /// body may reuse their storage once it has read them.
    fn run(&self, formal: Vec<Value>, implicit: &[Option<&Value>]) -> Result<Vec<Value>>;
    /// Facts of the body outputs for these facts of its formal and the node's
    /// implicit inputs; `None` where nothing is known.
    fn infer(&self, formal: &[Option<Fact>], implicit: &[Option<&Fact>]) -> Vec<Option<Fact>>;
    /// A rough FLOP count of one run of the body, each node counted as
    /// `per_node` (node FLOPs are unknown before running).
    fn nominal_flops(&self, per_node: u64) -> u64;
    /// Whether a node of the body draws at random ([`Operator::is_random`]).
    fn is_random(&self) -> bool {
        false
    }
}
