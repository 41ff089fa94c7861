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
pub mod overflow;
pub mod parallel;
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
mod ml;
mod norm;
mod pool;
mod quant;
mod random;
mod reduce;
mod resize;
mod rnn;
mod sequence;
mod shape;
mod signal;
mod text;
mod unary;
mod vision;

#[cfg(test)]
pub(crate) mod testutil;

/// Builds an operator for one node.
pub type Builder = fn(&BuildContext) -> Result<Box<dyn Operator>>;

/// The default ONNX domain, as the registry keys it (`""`; `"ai.onnx"` is
/// the same domain).
pub const DEFAULT_DOMAIN: &str = "";

/// onnxruntime's contrib domain (its opset version is 1).
pub const MS_DOMAIN: &str = "com.microsoft";

/// ONNX's preview domain (FlexAttention; its opset version is 1).
pub const PREVIEW_DOMAIN: &str = "ai.onnx.preview";

/// ONNX's classical machine-learning domain (LabelEncoder, TreeEnsemble, ...).
pub const ML_DOMAIN: &str = "ai.onnx.ml";

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

/// Where an operator family registers its operators: the [`Registry`]
/// (with their builders) or the [`Catalog`] (names only, for every family,
/// also those a reduced build leaves out).
pub trait Registrar {
    /// Registers `name` of `domain` from opset `since` of that domain.
    fn add_in(&mut self, domain: &'static str, name: &'static str, since: i64, build: Builder);

    /// Registers `name` of the default ONNX domain from opset `since`.
    fn add(&mut self, name: &'static str, since: i64, build: Builder) {
        self.add_in(DEFAULT_DOMAIN, name, since, build);
    }
}

/// Maps (domain, operator name) to builders, for the families this build
/// includes.
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

impl Registrar for Registry {
    fn add_in(&mut self, domain: &'static str, name: &'static str, since: i64, build: Builder) {
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
}

impl Registry {
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
        crate::order::sort_by(&mut v, |(k, e), (l, f)| (e.domain, k).cmp(&(f.domain, l)));
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

/// Where an operator of any family lives, whether this build includes it
/// or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogEntry {
    /// Lowest opset version (of its domain) ramify implements it from.
    pub since: i64,
    /// Its family (module).
    pub family: &'static str,
    /// The cargo feature that builds the family, e.g. `ops-rnn`.
    pub feature: &'static str,
}

/// Every operator of every family by (domain, name), with its family and
/// cargo feature: what a reduced build reports for operators it left out,
/// and what `ramify ops --required` maps models to.
pub struct Catalog {
    /// Per domain, the entries by operator name.
    ops: HashMap<&'static str, HashMap<&'static str, CatalogEntry>>,
    family: (&'static str, &'static str),
}

impl Registrar for Catalog {
    fn add_in(&mut self, domain: &'static str, name: &'static str, since: i64, _build: Builder) {
        let (family, feature) = self.family;
        self.ops
            .entry(canonical_domain(domain))
            .or_default()
            .insert(
                name,
                CatalogEntry {
                    since,
                    family,
                    feature,
                },
            );
    }
}

impl Catalog {
    /// Where `name` of `domain` lives, if ramify implements it at all.
    pub fn get(&self, domain: &str, name: &str) -> Option<&CatalogEntry> {
        self.ops.get(canonical_domain(domain))?.get(name)
    }

    /// Every operator as (domain, name, entry), sorted by domain, then name.
    pub fn entries(&self) -> Vec<(&'static str, &'static str, CatalogEntry)> {
        let mut v: Vec<_> = self
            .ops
            .iter()
            .flat_map(|(d, m)| m.iter().map(|(k, e)| (*d, *k, *e)))
            .collect();
        crate::order::sort_by(&mut v, |(d, k, _), (e, l, _)| (d, k).cmp(&(e, l)));
        v
    }

    /// Every family's cargo feature, sorted.
    pub fn features(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self
            .ops
            .values()
            .flat_map(|m| m.values().map(|e| e.feature))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// The registry and the catalog, built together.
struct Operators {
    registry: Registry,
    catalog: Catalog,
}

/// Registers family `$module` in the catalog always, and in the registry
/// when its cargo feature is on. A family left out is then never
/// referenced, and the linker drops its code.
macro_rules! family {
    ($ops:ident, $name:literal, $feature:tt, $module:ident) => {
        $ops.catalog.family = ($name, $feature);
        $module::register(&mut $ops.catalog);
        if cfg!(feature = $feature) {
            $ops.registry.family = $name;
            $module::register(&mut $ops.registry);
        }
    };
}

fn operators() -> &'static Operators {
    static OPERATORS: OnceLock<Operators> = OnceLock::new();
    OPERATORS.get_or_init(|| {
        let mut ops = Operators {
            registry: Registry {
                ops: HashMap::new(),
                family: "",
            },
            catalog: Catalog {
                ops: HashMap::new(),
                family: ("", ""),
            },
        };
        family!(ops, "activation", "ops-activation", activation);
        family!(ops, "attention", "ops-attention", attention);
        family!(ops, "binary", "ops-binary", binary);
        family!(ops, "contrib", "ops-contrib", contrib);
        family!(ops, "control", "ops-control", control);
        family!(ops, "conv", "ops-conv", conv);
        family!(ops, "extra", "ops-extra", extra);
        family!(ops, "gemm", "ops-gemm", gemm);
        family!(ops, "loss", "ops-loss", loss);
        family!(ops, "misc", "ops-misc", misc);
        family!(ops, "ml", "ops-ml", ml);
        family!(ops, "norm", "ops-norm", norm);
        family!(ops, "pool", "ops-pool", pool);
        family!(ops, "quant", "ops-quant", quant);
        family!(ops, "random", "ops-random", random);
        family!(ops, "reduce", "ops-reduce", reduce);
        family!(ops, "resize", "ops-resize", resize);
        family!(ops, "rnn", "ops-rnn", rnn);
        family!(ops, "sequence", "ops-sequence", sequence);
        family!(ops, "shape", "ops-shape", shape);
        family!(ops, "signal", "ops-signal", signal);
        family!(ops, "text", "ops-text", text);
        family!(ops, "unary", "ops-unary", unary);
        family!(ops, "vision", "ops-vision", vision);
        ops
    })
}

/// The process-wide registry of the operators this build includes.
pub fn registry() -> &'static Registry {
    &operators().registry
}

/// Every operator ramify implements, with its family's cargo feature.
pub fn catalog() -> &'static Catalog {
    &operators().catalog
}

/// The domains whose operators ramify implements.
pub fn is_supported_domain(domain: &str) -> bool {
    matches!(
        domain,
        "" | "ai.onnx" | MS_DOMAIN | PREVIEW_DOMAIN | ML_DOMAIN
    )
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
        Some(_) => Err(unsupported()),
        None => match catalog().get(domain, op_type) {
            Some(left_out) if ctx.opset >= left_out.since => Err(Error::OperatorLeftOut {
                op: op_type.to_string(),
                domain: domain.to_string(),
                opset: ctx.opset,
                node: ctx.attrs.node().to_string(),
                feature: left_out.feature,
            }),
            _ => Err(unsupported()),
        },
    }
}
