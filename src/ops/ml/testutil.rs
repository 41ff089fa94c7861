//! Test helpers for the `ai.onnx.ml` operators: building a node of that
//! domain through the registry.

use crate::error::Result;
use crate::ir::attributes::{Attribute, Attributes};
use crate::ir::{BuildContext, Operator};
use crate::ops::{build, ML_DOMAIN};
use std::collections::BTreeMap;

/// Builds `op` of `ai.onnx.ml` at `opset` with these attributes and no
/// constant inputs.
pub(super) fn build_ml(
    op: &str,
    opset: i64,
    attrs: &[(&str, Attribute)],
    num_inputs: usize,
) -> Result<Box<dyn Operator>> {
    let map: BTreeMap<String, Attribute> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let attrs = Attributes::new("test_node", op, map);
    let ctx = BuildContext {
        attrs: &attrs,
        opset,
        consts: &[],
        num_inputs,
        num_outputs: 1,
        fusion: &crate::ir::Fusion::NONE,
    };
    build(ML_DOMAIN, op, &ctx)
}

/// A strings attribute.
pub(super) fn strings(v: &[&str]) -> Attribute {
    Attribute::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect())
}
