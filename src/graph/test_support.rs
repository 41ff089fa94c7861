//! Test helpers for the passes and analyses over the graph: an operator that
//! does nothing and costs one FLOP, and a node around it.

use super::{Node, ValueId};
use crate::error::Result;
use crate::ir::attributes::Attributes;
use crate::ir::{Fact, Fusion, InferInput, Operator};
use crate::tensor::Tensor;
use std::sync::Arc;

/// An operator with no outputs that costs one FLOP.
#[derive(Debug)]
pub struct Dummy;

impl Operator for Dummy {
    fn infer(&self, _: &[InferInput]) -> Result<Vec<Fact>> {
        Ok(vec![])
    }
    fn flops(&self, _: &[Option<&Fact>], _: &[Fact]) -> u64 {
        1
    }
    fn run(&self, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![])
    }
}

/// A `Dummy` node named `name` reading `inputs` and writing `outputs`.
pub fn dummy_node(name: &str, inputs: &[ValueId], outputs: &[ValueId]) -> Node {
    Node {
        name: name.into(),
        op_type: "Dummy".into(),
        domain: String::new(),
        opset: 13,
        inputs: inputs.iter().map(|&i| Some(i)).collect(),
        outputs: outputs.iter().map(|&o| Some(o)).collect(),
        attrs: Attributes::default(),
        fusion: Fusion::NONE,
        op: Arc::new(Dummy),
        built_with_consts: 0,
    }
}
