//! The small models the C API tests load, built in code so their outputs are
//! known exactly (opset 13):
//! - `relu_add_bytes`: x[N,4] → Relu → Add(b = [1, 2, 3, 4]) → y[N,4];
//! - `matmul_add_bytes`: x[N,4] → MatMul(W[4,3]) → Add(b[3]) → y[N,3], with
//!   [`MATMUL_W`] and [`MATMUL_B`] (the C program computes the same by hand);
//! - `matmul_integer_bytes`: a u8[4,64] → MatMulInteger(B s8[64,40]) →
//!   y i32[4,40] whose first 20 columns of B are all 127, so rows of 255
//!   saturate the narrow int8 kernel's i16 pair sums;
//! - `three_heads_bytes`: the same y, and r = Relu(x) declared [?,4] (an
//!   unnamed free dimension), and s = Sigmoid(x) with no declared shape; with
//!   metadata (producer, version, description, two custom pairs).
//!
//! Shared by the crate's unit tests and the C program's test; built with the
//! workspace's shared test model builder (`tests/model_builder`).

use model_builder::onnx_protobuf::{
    type_proto::Value as TypeValue, GraphProto, Message, ModelProto, StringStringEntryProto,
    ValueInfoProto,
};
use model_builder::{
    initializer as float_initializer, value_info_free as typed_value_info, INT32, INT8, UINT8,
};

/// A float tensor value with dims (-1 = the symbolic dimension "N", any
/// other negative value an unnamed free dimension).
fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    typed_value_info(name, model_builder::FLOAT, dims)
}

/// A node with one output, named `op_output`.
fn node(op: &str, inputs: &[&str], output: &str) -> model_builder::onnx_protobuf::NodeProto {
    model_builder::node(op, inputs, &[output])
}

/// W of `matmul_add_bytes`, row-major [4, 3].
pub const MATMUL_W: [f32; 12] = [1.0, 0.0, -1.0, 2.0, 1.0, 0.0, 0.0, 0.5, 1.0, -1.0, 1.0, 2.0];
/// b of `matmul_add_bytes`, [3].
pub const MATMUL_B: [f32; 3] = [0.5, -1.0, 2.0];

/// The serialized model around `graph`, at opset 13.
fn model(graph: GraphProto) -> Vec<u8> {
    model_builder::bytes(&model_builder::model(graph, 13))
}

/// The serialized model x[N,4] → MatMul(W) → Add(b) → y[N,3].
#[allow(dead_code)]
pub fn matmul_add_bytes() -> Vec<u8> {
    let mut g = GraphProto::new();
    g.name = "matmul_add".into();
    g.node = vec![
        node("MatMul", &["x", "W"], "xw"),
        node("Add", &["xw", "b"], "y"),
    ];
    g.input = vec![value_info("x", &[-1, 4])];
    g.output = vec![value_info("y", &[-1, 3])];
    g.initializer = vec![
        float_initializer("W", &[4, 3], &MATMUL_W),
        float_initializer("b", &[3], &MATMUL_B),
    ];
    model(g)
}

/// The serialized model x[N,4] → Relu → Add(b) → y[N,4].
#[allow(dead_code)]
pub fn relu_add_bytes() -> Vec<u8> {
    let mut g = GraphProto::new();
    g.name = "relu_add".into();
    g.node = vec![node("Relu", &["x"], "r"), node("Add", &["r", "b"], "y")];
    g.input = vec![value_info("x", &[-1, 4])];
    g.output = vec![value_info("y", &[-1, 4])];
    g.initializer = vec![float_initializer("b", &[4], &[1.0, 2.0, 3.0, 4.0])];
    model(g)
}

/// The serialized model with three outputs: y = x·W + b [N,3], r = Relu(x)
/// [?,4] and s = Sigmoid(x) (no declared shape), with metadata.
#[allow(dead_code)]
pub fn three_heads_bytes() -> Vec<u8> {
    let mut g = GraphProto::new();
    g.name = "three_heads".into();
    g.doc_string = "a test graph".into();
    g.node = vec![
        node("MatMul", &["x", "W"], "xw"),
        node("Add", &["xw", "b"], "y"),
        node("Relu", &["x"], "r"),
        node("Sigmoid", &["x"], "s"),
    ];
    g.input = vec![value_info("x", &[-1, 4])];
    let mut s = value_info("s", &[]);
    if let Some(TypeValue::TensorType(tt)) = s.type_.as_mut().and_then(|t| t.value.as_mut()) {
        tt.shape = None.into();
    }
    g.output = vec![value_info("y", &[-1, 3]), value_info("r", &[-2, 4]), s];
    g.initializer = vec![
        float_initializer("W", &[4, 3], &MATMUL_W),
        float_initializer("b", &[3], &MATMUL_B),
    ];
    let mut m = ModelProto::parse_from_bytes(&model(g)).expect("just written");
    m.producer_name = "ramify-tests".into();
    m.producer_version = "2.0".into();
    m.domain = "org.ramify.tests".into();
    m.model_version = 3;
    m.doc_string = "three heads on one input".into();
    for (k, v) in [("labels", "cat,dog,bird"), ("mean", "0.5")] {
        let mut e = StringStringEntryProto::new();
        e.key = k.into();
        e.value = v.into();
        m.metadata_props.push(e);
    }
    m.write_to_bytes().expect("serializable model")
}

/// Rows of `matmul_integer_bytes`' input.
#[allow(dead_code)]
pub const INT8_M: usize = 4;
/// Columns of its input (the reduction length).
#[allow(dead_code)]
pub const INT8_K: usize = 64;
/// Columns of its output.
#[allow(dead_code)]
pub const INT8_N: usize = 40;

/// B of `matmul_integer_bytes` at (k, n): 127 in the first 20 columns, else small.
#[allow(dead_code)]
pub fn int8_b(k: usize, n: usize) -> i8 {
    if n < 20 {
        127
    } else {
        ((k * INT8_N + n) % 5) as i8
    }
}

/// The serialized model a u8[4,64] → MatMulInteger(B) → y i32[4,40].
#[allow(dead_code)]
pub fn matmul_integer_bytes() -> Vec<u8> {
    let raw = (0..INT8_K * INT8_N)
        .map(|i| int8_b(i / INT8_N, i % INT8_N) as u8)
        .collect();
    let b = model_builder::raw_initializer("b", INT8, &[INT8_K as i64, INT8_N as i64], raw);
    let mut g = GraphProto::new();
    g.name = "matmul_integer".into();
    g.node = vec![node("MatMulInteger", &["a", "b"], "y")];
    g.input = vec![typed_value_info(
        "a",
        UINT8,
        &[INT8_M as i64, INT8_K as i64],
    )];
    g.output = vec![typed_value_info(
        "y",
        INT32,
        &[INT8_M as i64, INT8_N as i64],
    )];
    g.initializer = vec![b];
    model(g)
}
