//! Small ONNX models built in code, shared by the library's integration
//! tests (`tests/common`), the command line's tests, the C API's tests
//! (`ffi/tests/common`), the benches and the fuzz crate.
//!
//! A dev-only crate: it depends on the ONNX protobuf types alone, never on
//! the library, so the library's dependencies are unchanged and every user
//! of a model builds it the same way.

use onnx_protobuf::{
    attribute_proto::AttributeType,
    tensor_shape_proto::{dimension::Value as DimValue, Dimension},
    type_proto::{Tensor as TypeTensor, Value as TypeValue},
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};

pub use onnx_protobuf;
pub use protobuf;

/// ONNX element type FLOAT.
pub const FLOAT: i32 = 1;
/// ONNX element type UINT8.
pub const UINT8: i32 = 2;
/// ONNX element type INT8.
pub const INT8: i32 = 3;
/// ONNX element type INT32.
pub const INT32: i32 = 6;
/// ONNX element type INT64.
pub const INT64: i32 = 7;

/// One declared dimension of a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(i64),
    /// A symbolic dimension with this name.
    Param(String),
    /// A free dimension with no name.
    Free,
}

impl Dim {
    /// The dimension `d` in the short notation of [`value_info`]: a size
    /// where `d ≥ 0`, the symbolic "N" where `d = -1`, and, below that,
    /// "N" where `unnamed_below` is false or a free dimension where true.
    fn short(d: i64, unnamed_below: bool) -> Dim {
        match d {
            0.. => Dim::Fixed(d),
            -1 => Dim::Param("N".into()),
            _ if unnamed_below => Dim::Free,
            _ => Dim::Param("N".into()),
        }
    }
}

/// A tensor value of ONNX element type `elem_type` with the given
/// dimensions.
pub fn value_info_dims(name: &str, elem_type: i32, dims: &[Dim]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for d in dims {
        let mut dim = Dimension::new();
        dim.value = match d {
            Dim::Fixed(n) => Some(DimValue::DimValue(*n)),
            Dim::Param(p) => Some(DimValue::DimParam(p.clone())),
            Dim::Free => None,
        };
        shape.dim.push(dim);
    }
    let mut tt = TypeTensor::new();
    tt.elem_type = elem_type;
    tt.shape = Some(shape).into();
    let mut tp = TypeProto::new();
    tp.value = Some(TypeValue::TensorType(tt));
    let mut vi = ValueInfoProto::new();
    vi.name = name.into();
    vi.type_ = Some(tp).into();
    vi
}

/// A tensor value with dims; any negative dim is the symbolic "N".
pub fn value_info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    let dims: Vec<Dim> = dims.iter().map(|&d| Dim::short(d, false)).collect();
    value_info_dims(name, elem_type, &dims)
}

/// A tensor value with dims: -1 is the symbolic "N", any other negative
/// value an unnamed free dimension.
pub fn value_info_free(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    let dims: Vec<Dim> = dims.iter().map(|&d| Dim::short(d, true)).collect();
    value_info_dims(name, elem_type, &dims)
}

/// A value info with a name only (no declared type).
pub fn untyped_value_info(name: &str) -> ValueInfoProto {
    let mut vi = ValueInfoProto::new();
    vi.name = name.into();
    vi
}

/// A node of the default domain named `name`.
pub fn named_node<S: AsRef<str>>(name: &str, op: &str, inputs: &[S], outputs: &[S]) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = op.into();
    n.name = name.into();
    n.input = inputs.iter().map(|s| s.as_ref().to_string()).collect();
    n.output = outputs.iter().map(|s| s.as_ref().to_string()).collect();
    n
}

/// A node of the default domain, named `op_firstoutput`.
pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    let name = format!("{op}_{}", outputs.first().unwrap_or(&""));
    named_node(&name, op, inputs, outputs)
}

/// An attribute of type `ty` with no value yet.
fn attr(name: &str, ty: AttributeType) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.into();
    a.type_ = ty.into();
    a
}

/// An INT attribute.
pub fn int_attr(name: &str, v: i64) -> AttributeProto {
    let mut a = attr(name, AttributeType::INT);
    a.i = v;
    a
}

/// A FLOAT attribute.
pub fn float_attr(name: &str, v: f32) -> AttributeProto {
    let mut a = attr(name, AttributeType::FLOAT);
    a.f = v;
    a
}

/// An INTS attribute.
pub fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    let mut a = attr(name, AttributeType::INTS);
    a.ints = v.to_vec();
    a
}

/// A FLOATS attribute.
pub fn floats_attr(name: &str, v: &[f32]) -> AttributeProto {
    let mut a = attr(name, AttributeType::FLOATS);
    a.floats = v.to_vec();
    a
}

/// A STRING attribute.
pub fn string_attr(name: &str, v: &str) -> AttributeProto {
    let mut a = attr(name, AttributeType::STRING);
    a.s = v.as_bytes().to_vec();
    a
}

/// A STRINGS attribute.
pub fn strings_attr<S: AsRef<str>>(name: &str, v: &[S]) -> AttributeProto {
    let mut a = attr(name, AttributeType::STRINGS);
    a.strings = v.iter().map(|s| s.as_ref().as_bytes().to_vec()).collect();
    a
}

/// A TENSOR attribute.
pub fn tensor_attr(name: &str, t: TensorProto) -> AttributeProto {
    let mut a = attr(name, AttributeType::TENSOR);
    a.t = Some(t).into();
    a
}

/// A graph-valued attribute (a Loop body, an If branch).
pub fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    let mut a = attr(name, AttributeType::GRAPH);
    a.g = Some(g).into();
    a
}

/// A tensor initializer of ONNX element type `data_type` from its raw
/// little-endian bytes.
pub fn raw_initializer(name: &str, data_type: i32, dims: &[i64], raw: Vec<u8>) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = name.into();
    t.data_type = data_type;
    t.dims = dims.to_vec();
    t.raw_data = raw;
    t
}

/// A float tensor initializer with raw data.
pub fn initializer(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    let raw = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    raw_initializer(name, FLOAT, dims, raw)
}

/// An int64 tensor initializer with raw data (shapes, axes, counts).
pub fn int64_initializer(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    let raw = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    raw_initializer(name, INT64, dims, raw)
}

/// A scalar int64 initializer (in `int64_data`).
pub fn int64_init(name: &str, v: i64) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = name.into();
    t.data_type = INT64;
    t.int64_data = vec![v];
    t
}

/// A graph named "test" from nodes, inputs, outputs and initializers.
pub fn graph(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
) -> GraphProto {
    let mut g = GraphProto::new();
    g.name = "test".into();
    g.node = nodes;
    g.input = inputs;
    g.output = outputs;
    g.initializer = inits;
    g
}

/// A model (IR version 8) around a graph, importing the default domain at
/// `opset`.
pub fn model(graph: GraphProto, opset: i64) -> ModelProto {
    let mut m = ModelProto::new();
    m.ir_version = 8;
    let mut o = OperatorSetIdProto::new();
    o.version = opset;
    m.opset_import.push(o);
    m.graph = Some(graph).into();
    m
}

/// Serialized bytes of a model.
pub fn bytes(m: &ModelProto) -> Vec<u8> {
    m.write_to_bytes().expect("serializable")
}
