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
mod contrib;
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

/// The default ONNX domain, as the registry keys it (`""`; `"ai.onnx"` is
/// the same domain).
pub const DEFAULT_DOMAIN: &str = "";

/// onnxruntime's contrib domain (its opset version is 1).
pub const MS_DOMAIN: &str = "com.microsoft";

/// The registry entry of one operator type.
#[derive(Clone, Copy)]
pub struct OpEntry {
    /// The operator's domain (`""` for the default ONNX domain).
    pub domain: &'static str,
    /// Lowest opset version (of its domain) this implementation covers.
    pub since: i64,
    /// The operator family (module) that implements it.
    pub family: &'static str,
    /// The builder.
    pub build: Builder,
}

/// Maps (domain, operator name) to builders.
pub struct Registry {
    /// Per domain, the entries by operator name.
    ops: HashMap<&'static str, HashMap<&'static str, OpEntry>>,
    family: &'static str,
}

/// The registry's key for a domain as a model writes it.
fn canonical_domain(domain: &str) -> &str {
    if domain == "ai.onnx" {
        DEFAULT_DOMAIN
    } else {
        domain
    }
}

impl Registry {
    /// Registers `name` of the default ONNX domain from opset `since`.
    pub fn add(&mut self, name: &'static str, since: i64, build: Builder) {
        self.add_in(DEFAULT_DOMAIN, name, since, build);
    }

    /// Registers `name` of `domain` from opset `since` of that domain.
    pub fn add_in(&mut self, domain: &'static str, name: &'static str, since: i64, build: Builder) {
        let family = self.family;
        let domain = canonical_domain(domain);
        self.ops.entry(domain).or_default().insert(
            name,
            OpEntry {
                domain,
                since,
                family,
                build,
            },
        );
    }

    /// The entry for `name` of the default domain, if supported.
    pub fn get(&self, name: &str) -> Option<&OpEntry> {
        self.get_in(DEFAULT_DOMAIN, name)
    }

    /// The entry for `name` of `domain` (`"ai.onnx"` is the default domain),
    /// if supported.
    pub fn get_in(&self, domain: &str, name: &str) -> Option<&OpEntry> {
        self.ops.get(canonical_domain(domain))?.get(name)
    }

    /// All supported operators of every domain with their entries (each
    /// names its domain), sorted by domain, then name.
    pub fn entries(&self) -> Vec<(&'static str, OpEntry)> {
        let mut v: Vec<_> = self
            .ops
            .values()
            .flat_map(|m| m.iter().map(|(k, e)| (*k, *e)))
            .collect();
        v.sort_unstable_by_key(|(k, e)| (e.domain, *k));
        v
    }

    /// The supported operator names of the default domain, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        self.names_in(DEFAULT_DOMAIN)
    }

    /// The supported operator names of `domain`, sorted.
    pub fn names_in(&self, domain: &str) -> Vec<&'static str> {
        let mut v: Vec<_> = self
            .ops
            .get(canonical_domain(domain))
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
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
            ("contrib", contrib::register),
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
    matches!(domain, "" | "ai.onnx" | MS_DOMAIN)
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
    match registry().get_in(domain, op_type) {
        Some(entry) if ctx.opset >= entry.since => (entry.build)(ctx),
        _ => Err(unsupported()),
    }
}
