//! Operators: the kernels, their shape rules and FLOP counts, and the registry
//! that maps ONNX operator names to them. Operators depend only on the IR
//! vocabulary ([`crate::ir`]), the tensor type and errors.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Operator};
use std::collections::HashMap;
use std::sync::OnceLock;

pub mod calibration;
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
