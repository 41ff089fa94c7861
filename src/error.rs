//! The one typed error of the library: every failure a caller can meet, with
//! enough context (operator, node, value, path) to act on it.

use std::path::PathBuf;

/// Everything that can go wrong while loading or running a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The bytes are not a valid ONNX protobuf message.
    #[error("malformed model: {0}")]
    Malformed(String),
    /// The model is valid protobuf but breaks an ONNX rule.
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// The graph's nodes depend on each other in a cycle.
    #[error("the graph has a cycle through node {node:?}")]
    Cycle {
        /// One node on the cycle.
        node: String,
    },
    /// A node reads a value that no node, input or initializer produces.
    #[error("node {node:?} reads value {value:?}, which nothing produces (missing initializer?)")]
    MissingValue {
        /// The node that reads it.
        node: String,
        /// The value's name.
        value: String,
    },
    /// No kernel exists for this operator at this opset.
    #[error("unsupported operator {op:?} in domain {domain:?} at opset {opset} (node {node:?})")]
    UnsupportedOperator {
        /// The operator type, e.g. `NonMaxSuppression`.
        op: String,
        /// Its domain (`""` is the default ONNX domain).
        domain: String,
        /// The opset version the model imports for that domain.
        opset: i64,
        /// The node's name.
        node: String,
    },
    /// ramify implements this operator, but this build leaves its family out
    /// (a reduced build: `cargo build --no-default-features --features ...`).
    #[error(
        "operator {op:?} in domain {domain:?} at opset {opset} (node {node:?}) is left out of this build: \
         rebuild with the cargo feature {feature}"
    )]
    OperatorLeftOut {
        /// The operator type.
        op: String,
        /// Its domain.
        domain: String,
        /// The opset version the model imports for that domain.
        opset: i64,
        /// The node's name.
        node: String,
        /// The cargo feature of its family, e.g. `ops-rnn`.
        feature: &'static str,
    },
    /// An element type that ramify (or this operator) does not handle.
    #[error("unsupported element type {0}")]
    UnsupportedType(String),
    /// ramify implements the operator, but not this use of it: a mode an
    /// inference runtime leaves out (Dropout in training mode with a
    /// nonzero ratio: its mask is random).
    #[error("{op}: {feature} is not supported")]
    UnsupportedFeature {
        /// The operator type.
        op: String,
        /// What is not supported, in words.
        feature: String,
    },
    /// External tensor data that cannot be used.
    #[error("external data for tensor {tensor:?}: {reason}")]
    ExternalData {
        /// The tensor whose data is external.
        tensor: String,
        /// Why it is refused.
        reason: String,
    },
    /// An attribute is missing or has the wrong kind or value.
    #[error("node {node:?} ({op}): attribute {attribute:?}: {reason}")]
    Attribute {
        /// The node's name.
        node: String,
        /// The operator type.
        op: String,
        /// The attribute's name.
        attribute: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The caller named an input the model does not have.
    #[error("unknown input {name:?}; the model's inputs are {expected:?}")]
    UnknownInput {
        /// The name given.
        name: String,
        /// The names the model accepts.
        expected: Vec<String>,
    },
    /// The caller asked for an output the model does not have.
    #[error("unknown output {name:?}; the model's outputs are {expected:?}")]
    UnknownOutput {
        /// The name given.
        name: String,
        /// The model's output names.
        expected: Vec<String>,
    },
    /// A caller's output buffer cannot hold the output.
    #[error(
        "output {name:?} needs {needed} bytes ({dtype} {shape:?}); its buffer holds {capacity}"
    )]
    OutputBuffer {
        /// The output's name.
        name: String,
        /// Its element type.
        dtype: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The bytes it needs.
        needed: usize,
        /// The bytes the buffer has.
        capacity: usize,
    },
    /// The caller did not give a value for a model input.
    #[error("missing input {0:?}")]
    MissingInput(String),
    /// An input has a shape that the model's declaration rules out.
    #[error("input {name:?} has shape {actual:?}, but the model declares {expected}")]
    InputShape {
        /// The input's name.
        name: String,
        /// The shape given.
        actual: Vec<usize>,
        /// The declared shape, with symbolic dimensions by name.
        expected: String,
    },
    /// An input has the wrong element type.
    #[error("input {name:?} has element type {actual}, but the model declares {expected}")]
    InputType {
        /// The input's name.
        name: String,
        /// The type given.
        actual: String,
        /// The declared type.
        expected: String,
    },
    /// A value of one kind (tensor, sequence, optional) where another is
    /// needed: a sequence given to a tensor operator, or a sequence graph
    /// output asked for through a tensor-only API.
    #[error("{what} is a {actual}, where a {expected} is needed")]
    ValueKind {
        /// The value or operator input concerned.
        what: String,
        /// The kind given.
        actual: String,
        /// The kind needed.
        expected: String,
    },
    /// An operator met inputs it cannot work with (shapes, types, values).
    #[error("{op}: {reason}")]
    Op {
        /// The operator type.
        op: String,
        /// What is wrong.
        reason: String,
    },
    /// An operator failed inside a node; wraps the operator's error with the node.
    #[error("node {node:?} ({op}): {source}")]
    Node {
        /// The node's name.
        node: String,
        /// The operator type.
        op: String,
        /// The underlying error.
        source: Box<Error>,
    },
    /// A tensor would exceed the memory budget (see
    /// [`SessionBuilder::memory_limit`](crate::SessionBuilder::memory_limit)),
    /// or the system refused its allocation. Nothing was allocated.
    #[error("{what}: {dtype} tensor of shape {shape:?} needs {}, over the memory limit of {}", show_bytes(*.bytes), format_bytes(*.limit as u128))]
    MemoryLimit {
        /// The tensor: an operator output, an initializer, an input.
        what: String,
        /// Its element type.
        dtype: String,
        /// Its shape (empty when only an element count was known).
        shape: Vec<usize>,
        /// Its size in bytes; `None` when the size does not fit in 128 bits.
        bytes: Option<u128>,
        /// The limit in force, in bytes.
        limit: usize,
    },
    /// The intermediate values a run would hold at once exceed the memory
    /// budget (each one alone fits it).
    #[error("node {node:?} ({op}): the run would hold {} of intermediate values at once, over the memory limit of {}", format_bytes(*.bytes), format_bytes(*.limit as u128))]
    PlanMemory {
        /// The node at which the most bytes are live.
        node: String,
        /// Its operator type.
        op: String,
        /// The bytes live there.
        bytes: u128,
        /// The limit in force, in bytes.
        limit: usize,
    },
    /// A run passed its time limit, or could not finish within its
    /// deadline × delay ratio and stopped early; the details say how far it
    /// got and the estimate that decided.
    #[error("deadline: {0}")]
    Deadline(Box<DeadlineMiss>),
    /// The run was cancelled through its
    /// [`CancelToken`](crate::CancelToken); the session stays
    /// usable.
    #[error("the run was cancelled")]
    Cancelled,
    /// A bug inside ramify (a caught panic); the session stays usable.
    #[error("internal error: {0}")]
    Internal(String),
    /// Invalid configuration given to the runtime.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Why and where a run stopped for its deadline.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadlineMiss {
    /// What was passed or could not be met, in words.
    pub reason: String,
    /// Time the run had taken when it stopped.
    pub elapsed: std::time::Duration,
    /// Operators run by then, and in all (both 0 while loading).
    pub operators_run: usize,
    /// Operators of the plan.
    pub operators: usize,
    /// The estimated time still needed that decided the stop (on the
    /// fastest plan the load allowed), when an estimate decided it.
    pub remaining: Option<std::time::Duration>,
}

impl DeadlineMiss {
    /// A stop for `reason` after `elapsed`, progress not yet known.
    pub fn new(reason: impl Into<String>, elapsed: std::time::Duration) -> DeadlineMiss {
        DeadlineMiss {
            reason: reason.into(),
            elapsed,
            operators_run: 0,
            operators: 0,
            remaining: None,
        }
    }
}

impl std::fmt::Display for DeadlineMiss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "{}; stopped after {:.1} ms",
            self.reason,
            ms(self.elapsed)
        )?;
        if self.operators > 0 {
            write!(
                f,
                ", {} of {} operators run",
                self.operators_run, self.operators
            )?;
        }
        if let Some(r) = self.remaining {
            write!(f, ", {:.1} ms estimated still to run", ms(r))?;
        }
        Ok(())
    }
}

/// Bytes for an error message: exact count and binary units.
fn show_bytes(bytes: Option<u128>) -> String {
    match bytes {
        Some(b) if b < 1024 => format!("{b} bytes"),
        Some(b) => format!("{b} bytes ({})", format_bytes(b)),
        None => "more than 2^128 bytes".to_string(),
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether the run stopped because it was cancelled or ran out of time
    /// (looking through the nodes that wrap the error).
    pub fn is_interrupt(&self) -> bool {
        match self {
            Error::Cancelled | Error::Deadline(_) => true,
            Error::Node { source, .. } => source.is_interrupt(),
            _ => false,
        }
    }

    /// The error without the nodes that wrap it.
    pub fn into_root(self) -> Error {
        match self {
            Error::Node { source, .. } => source.into_root(),
            e => e,
        }
    }

    /// Shorthand for an operator error.
    pub fn op(op: &str, reason: impl Into<String>) -> Self {
        Error::Op {
            op: op.to_string(),
            reason: reason.into(),
        }
    }
}

/// A byte count for people: `512 B`, `1.5 KiB`, `4.0 TiB`.
pub fn format_bytes(bytes: u128) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
