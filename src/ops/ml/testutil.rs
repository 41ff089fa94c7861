//! Test helpers for the `ai.onnx.ml` operators: building a node of that
//! domain through the registry.

use crate::error::Result;
use crate::ir::attributes::Attribute;
use crate::ir::{Fusion, Operator};
use crate::ops::testutil::build_in;
use crate::ops::ML_DOMAIN;

pub(super) use crate::ops::testutil::strings;

/// Builds `op` of `ai.onnx.ml` at `opset` with these attributes, no
/// constant inputs and one output.
pub(super) fn build_ml(
    op: &str,
    opset: i64,
    attrs: &[(&str, Attribute)],
    num_inputs: usize,
) -> Result<Box<dyn Operator>> {
    build_in(
        ML_DOMAIN,
        op,
        opset,
        attrs,
        &Fusion::NONE,
        &[],
        (num_inputs, 1),
    )
}
