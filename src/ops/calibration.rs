//! One representative operator per cost class, with inputs, for timing on the
//! device: the probes the cost model's calibration runs. They live here, with
//! the operators, so the analysis layer never names an operator type.

use crate::ir::attributes::{Attribute, Attributes};
use crate::ir::{BuildContext, Operator};
use crate::tensor::Tensor;
use std::collections::BTreeMap;

/// An operator built for timing, and inputs to run it on.
#[derive(Debug)]
pub struct Probe {
    /// The operator; its [`cost_class`](Operator::cost_class) is the class it measures.
    pub op: Box<dyn Operator>,
    /// Its inputs (deterministic values).
    pub inputs: Vec<Tensor>,
}

/// Operator type, attributes and input shapes of each probe, one per class.
type Recipe = (
    &'static str,
    Vec<(&'static str, Attribute)>,
    Vec<Vec<usize>>,
);

fn recipes() -> Vec<Recipe> {
    vec![
        (
            "Conv",
            vec![("pads", Attribute::Ints(vec![1, 1, 1, 1]))],
            vec![vec![1, 32, 28, 28], vec![32, 32, 3, 3]],
        ),
        ("MatMul", vec![], vec![vec![128, 256], vec![256, 128]]),
        (
            "MaxPool",
            vec![("kernel_shape", Attribute::Ints(vec![3, 3]))],
            vec![vec![1, 32, 28, 28]],
        ),
        (
            "Add",
            vec![],
            vec![vec![1, 64, 32, 32], vec![1, 64, 32, 32]],
        ),
        ("Transpose", vec![], vec![vec![64, 32, 32]]),
    ]
}

/// The probes, one per [`OpClass`](crate::ir::OpClass); a probe whose
/// operator cannot be built is left out.
pub fn probes() -> Vec<Probe> {
    recipes()
        .into_iter()
        .filter_map(|(op_type, attrs, shapes)| {
            let values: BTreeMap<String, Attribute> =
                attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let attrs = Attributes::new("calibration", op_type, values);
            let inputs: Vec<Tensor> = shapes
                .iter()
                .map(|s| {
                    let n = s.iter().product();
                    Tensor::from_vec(s, (0..n).map(|i| (i % 7) as f32 * 0.1).collect())
                })
                .collect::<crate::error::Result<_>>()
                .ok()?;
            let consts: Vec<Option<&Tensor>> = vec![None; inputs.len()];
            let ctx = BuildContext {
                attrs: &attrs,
                opset: 13,
                consts: &consts,
                num_inputs: inputs.len(),
                num_outputs: 1,
                fusion: &crate::ir::Fusion::NONE,
            };
            let op = super::build("", op_type, &ctx).ok()?;
            Some(Probe { op, inputs })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::OpClass;

    #[test]
    fn one_probe_per_class_each_of_its_class() {
        let classes: Vec<OpClass> = probes().iter().map(|p| p.op.cost_class()).collect();
        assert_eq!(classes, OpClass::ALL.to_vec());
    }

    #[test]
    fn operators_name_their_own_class() {
        let class = |op_type: &str, inputs: usize| {
            let attrs = Attributes::new("n", op_type, BTreeMap::new());
            let consts = vec![None; inputs];
            let ctx = BuildContext {
                attrs: &attrs,
                opset: 17,
                consts: &consts,
                num_inputs: inputs,
                num_outputs: 1,
                fusion: &crate::ir::Fusion::NONE,
            };
            super::super::build("", op_type, &ctx).unwrap().cost_class()
        };
        assert_eq!(class("ConvTranspose", 2), OpClass::Conv);
        assert_eq!(class("Gemm", 2), OpClass::MatMul);
        assert_eq!(class("Softmax", 1), OpClass::Window);
        assert_eq!(class("LayerNormalization", 2), OpClass::Window);
        assert_eq!(class("Relu", 1), OpClass::Elementwise);
        assert_eq!(class("Sum", 3), OpClass::Elementwise);
        assert_eq!(class("Reshape", 2), OpClass::Other);
        assert_eq!(class("Transpose", 1), OpClass::Other);
    }
}
