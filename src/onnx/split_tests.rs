//! The splitter on a model built here: a DequantizeLinear whose result two
//! parts read (as after QDQ fusion, where it is no value of the optimised
//! graph) is computed again in each, not handed across; a part that would
//! read a later part's value is refused.

use super::{split_model, SplitSpec};
use crate::error::Error;
use crate::ir::Fact;
use crate::tensor::DType;
use onnx_protobuf::{GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto};
use std::collections::HashMap;

fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = op.into();
    n.input = inputs.iter().map(|s| s.to_string()).collect();
    n.output = vec![output.to_string()];
    n
}

fn scalar(name: &str, data_type: i32, raw: Vec<u8>) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = name.into();
    t.data_type = data_type;
    t.raw_data = raw;
    t
}

/// x_q → DequantizeLinear → d; Relu(d) → r1; Add(d, r1) → y.
fn model() -> ModelProto {
    let mut g = GraphProto::new();
    g.name = "dq".into();
    g.node = vec![
        node("DequantizeLinear", &["x_q", "s", "zp"], "d"),
        node("Relu", &["d"], "r1"),
        node("Add", &["d", "r1"], "y"),
    ];
    let fact = |dtype, name: &str| super::value_info(name, &Fact::new(dtype, vec![4]));
    g.input = vec![fact(DType::U8, "x_q")];
    g.output = vec![fact(DType::F32, "y")];
    g.initializer = vec![
        scalar("s", 1, 0.5f32.to_le_bytes().to_vec()),
        scalar("zp", 2, vec![128]),
    ];
    let mut m = ModelProto::new();
    m.ir_version = 8;
    let mut o = OperatorSetIdProto::new();
    o.version = 13;
    m.opset_import.push(o);
    m.graph = Some(g).into();
    m
}

fn facts() -> HashMap<String, Fact> {
    [("x_q", DType::U8), ("r1", DType::F32), ("y", DType::F32)]
        .into_iter()
        .map(|(n, dtype)| (n.to_string(), Fact::new(dtype, vec![4])))
        .collect()
}

fn part_of(pairs: &[(&str, usize)]) -> HashMap<String, usize> {
    pairs.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

fn ops(model: &[u8]) -> Vec<String> {
    let m = ModelProto::parse_from_bytes(model).unwrap();
    m.graph.node.iter().map(|n| n.op_type.clone()).collect()
}

#[test]
fn an_absorbed_node_read_by_two_parts_is_computed_in_each() {
    let (constants, facts) = (HashMap::new(), facts());
    let part_of = part_of(&[("r1", 0), ("y", 1)]);
    let spec = SplitSpec {
        parts: 2,
        part_of: &part_of,
        constants: &constants,
        facts: &facts,
    };
    let parts = split_model(&model(), None, &spec).unwrap();
    assert_eq!(ops(&parts[0].model), ["DequantizeLinear", "Relu"]);
    assert_eq!(parts[0].inputs, ["x_q"]);
    assert_eq!(parts[0].outputs, ["r1"]);
    assert_eq!(ops(&parts[1].model), ["DequantizeLinear", "Add"]);
    assert_eq!(
        parts[1].inputs,
        ["x_q", "r1"],
        "d is computed again, not handed across"
    );
    assert_eq!(parts[1].outputs, ["y"]);
    let second = ModelProto::parse_from_bytes(&parts[1].model).unwrap();
    let inits: Vec<&str> = second
        .graph
        .initializer
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(inits, ["s", "zp"]);
}

#[test]
fn a_part_reading_a_later_part_is_refused() {
    let (constants, facts) = (HashMap::new(), facts());
    let part_of = part_of(&[("r1", 1), ("y", 0)]);
    let spec = SplitSpec {
        parts: 2,
        part_of: &part_of,
        constants: &constants,
        facts: &facts,
    };
    let e = split_model(&model(), None, &spec).unwrap_err();
    assert!(
        matches!(e, Error::Config(ref m) if m.contains("\"r1\"") && m.contains("later part 1")),
        "{e}"
    );
}
