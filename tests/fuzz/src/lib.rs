//! Shared helpers for ramify's fuzz targets: the session configuration,
//! tensors of any element type from
//! fuzzed values, inputs synthesised from a session's declared inputs, and
//! small ONNX models built in code (through the shared builder of
//! tests/model_builder, as the integration tests and benches build theirs).

use arbitrary::Arbitrary;
use half::{bf16, f16};
use model_builder::Dim;
use onnx_protobuf::{AttributeProto, GraphProto, NodeProto, ValueInfoProto};
use ramify::tensor::{F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2, U4};
use ramify::{DType, Element, Session, SessionBuilder, Tensor};

pub use onnx_protobuf;
pub use protobuf;

/// Synthesised inputs larger than this (in bytes, all inputs together) are
/// not run: the point is the model, not the allocator.
pub const MAX_SYNTH_INPUT_BYTES: usize = 1 << 20;

/// Every element type ramify knows.
pub const ALL_DTYPES: [DType; 24] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::Bool,
    DType::String,
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::F4E2M1,
    DType::F8E8M0,
    DType::U4,
    DType::I4,
    DType::U2,
    DType::I2,
];

/// One fuzzed element value, converted to whatever element type is asked for.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum ElemVal {
    /// A small integer (floats get half of it: -64.0 ..= 63.5).
    Small(i8),
    /// One of a list of edge values (0, ±1, extremes, NaN, ±inf, ...).
    Special(u8),
    /// Raw bits, reinterpreted (floats) or truncated (integers).
    Raw(u64),
}

const SPECIAL_F64: [f64; 14] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::MAX,
    f64::MIN,
    f64::MIN_POSITIVE,
    1e-45,
    65504.0,
    3.0e38,
    0.5,
];

const SPECIAL_I64: [i64; 16] = [
    0,
    1,
    -1,
    2,
    i64::MAX,
    i64::MIN,
    i32::MAX as i64,
    i32::MIN as i64,
    u32::MAX as i64,
    i16::MAX as i64,
    i16::MIN as i64,
    255,
    -128,
    1 << 40,
    -(1 << 40),
    100_000,
];

const SPECIAL_STR: [&str; 8] = ["", "a", "abc", "ÿ€\u{10ffff}", "0", "-1", "NaN", " "];

impl ElemVal {
    fn as_f64(self) -> f64 {
        match self {
            ElemVal::Small(v) => v as f64 * 0.5,
            ElemVal::Special(k) => SPECIAL_F64[k as usize % SPECIAL_F64.len()],
            ElemVal::Raw(b) => f64::from_bits(b),
        }
    }
    fn as_f32(self) -> f32 {
        match self {
            ElemVal::Raw(b) => f32::from_bits(b as u32),
            other => other.as_f64() as f32,
        }
    }
    fn as_i64(self) -> i64 {
        match self {
            ElemVal::Small(v) => v as i64,
            ElemVal::Special(k) => SPECIAL_I64[k as usize % SPECIAL_I64.len()],
            ElemVal::Raw(b) => b as i64,
        }
    }
    fn bits8(self) -> u8 {
        match self {
            ElemVal::Raw(b) => b as u8,
            other => other.as_i64() as u8,
        }
    }
    fn as_string(self) -> String {
        match self {
            ElemVal::Small(v) => v.to_string(),
            ElemVal::Special(k) => SPECIAL_STR[k as usize % SPECIAL_STR.len()].to_string(),
            ElemVal::Raw(b) => format!("{b:x}"),
        }
    }
}

/// The memory budget of every fuzzed session: 256 MiB.
pub const MEMORY_LIMIT: usize = 256 << 20;

/// The one place where the targets configure their sessions: the memory
/// budget and time limit an app would set for untrusted models (libFuzzer's
/// own limits, `-rss_limit_mb` and `-timeout`, sit well above them, so any
/// report is a real escape), one CPU, and a fixed load so that no iteration
/// starts a load-sampler thread.
pub fn builder() -> SessionBuilder {
    Session::builder()
        .cpus(1)
        .fixed_load(0.0)
        .pin_threads(false)
        .memory_limit(MEMORY_LIMIT)
        .time_limit(std::time::Duration::from_secs(5))
}

/// Number of elements of `shape`, or `None` on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// A tensor of `dtype` and `shape` whose elements cycle through `vals`
/// (zeros when `vals` is empty).
pub fn make_tensor(dtype: DType, shape: &[usize], vals: &[ElemVal]) -> Tensor {
    let n = element_count(shape).expect("bounded shape");
    let at = |i: usize| -> ElemVal {
        if vals.is_empty() {
            ElemVal::Small(0)
        } else {
            vals[i % vals.len()]
        }
    };
    fn build<T: Element>(shape: &[usize], n: usize, f: impl Fn(usize) -> T) -> Tensor {
        Tensor::from_vec(shape, (0..n).map(f).collect()).expect("length matches shape")
    }
    match dtype {
        DType::F32 => build(shape, n, |i| at(i).as_f32()),
        DType::F64 => build(shape, n, |i| at(i).as_f64()),
        DType::F16 => build(shape, n, |i| match at(i) {
            ElemVal::Raw(b) => f16::from_bits(b as u16),
            v => f16::from_f64(v.as_f64()),
        }),
        DType::BF16 => build(shape, n, |i| match at(i) {
            ElemVal::Raw(b) => bf16::from_bits(b as u16),
            v => bf16::from_f64(v.as_f64()),
        }),
        DType::I8 => build(shape, n, |i| at(i).as_i64() as i8),
        DType::I16 => build(shape, n, |i| at(i).as_i64() as i16),
        DType::I32 => build(shape, n, |i| at(i).as_i64() as i32),
        DType::I64 => build(shape, n, |i| at(i).as_i64()),
        DType::U8 => build(shape, n, |i| at(i).as_i64() as u8),
        DType::U16 => build(shape, n, |i| at(i).as_i64() as u16),
        DType::U32 => build(shape, n, |i| at(i).as_i64() as u32),
        DType::U64 => build(shape, n, |i| at(i).as_i64() as u64),
        DType::Bool => build(shape, n, |i| at(i).as_i64() != 0),
        DType::String => build(shape, n, |i| at(i).as_string()),
        DType::F8E4M3FN => build(shape, n, |i| F8E4M3FN::from_bits(at(i).bits8())),
        DType::F8E4M3FNUZ => build(shape, n, |i| F8E4M3FNUZ::from_bits(at(i).bits8())),
        DType::F8E5M2 => build(shape, n, |i| F8E5M2::from_bits(at(i).bits8())),
        DType::F8E5M2FNUZ => build(shape, n, |i| F8E5M2FNUZ::from_bits(at(i).bits8())),
        DType::F4E2M1 => build(shape, n, |i| F4E2M1::from_bits(at(i).bits8())),
        DType::F8E8M0 => build(shape, n, |i| F8E8M0::from_bits(at(i).bits8())),
        DType::U4 => build(shape, n, |i| U4::wrapping(at(i).as_i64())),
        DType::I4 => build(shape, n, |i| I4::wrapping(at(i).as_i64())),
        DType::U2 => build(shape, n, |i| U2::wrapping(at(i).as_i64())),
        DType::I2 => build(shape, n, |i| I2::wrapping(at(i).as_i64())),
    }
}

/// Small deterministic values (0, 1, 2, 0, 1, 2, ...) for synthesised inputs.
const SYNTH_VALUES: [ElemVal; 3] = [ElemVal::Small(0), ElemVal::Small(1), ElemVal::Small(2)];

/// Inputs for every declared input of `session`: the declared type and shape
/// with symbolic dimensions set to 1 (an input with no declared type is an f32
/// scalar, one with no declared shape a scalar). `None` when the inputs would
/// take more than [`MAX_SYNTH_INPUT_BYTES`].
pub fn synth_inputs(session: &Session) -> Option<Vec<(String, Tensor)>> {
    let mut total = 0usize;
    let mut out = Vec::new();
    for info in session.inputs() {
        let (dtype, shape) = match &info.declared {
            Some(d) => (d.dtype, d.concrete_shape(1).unwrap_or_default()),
            None => (DType::F32, Vec::new()),
        };
        let n = element_count(&shape)?;
        let elem = match dtype {
            DType::String => 8,
            other => other.size_of(),
        };
        total = total.checked_add(n.checked_mul(elem)?)?;
        if total > MAX_SYNTH_INPUT_BYTES {
            return None;
        }
        out.push((info.name.clone(), make_tensor(dtype, &shape, &SYNTH_VALUES)));
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// ONNX protobuf builders: the shared test model builder
// (tests/model_builder), with the fuzz targets' own signatures where they
// take the library's types or owned names.

pub use model_builder::{
    float_attr, int_attr, model, string_attr, strings_attr, untyped_value_info,
};

/// A tensor value info; `dims[i] = None` declares dimension i symbolic.
pub fn value_info(name: &str, dtype: DType, dims: &[Option<i64>]) -> ValueInfoProto {
    let dims: Vec<Dim> = dims
        .iter()
        .enumerate()
        .map(|(i, d)| match d {
            Some(n) => Dim::Fixed(*n),
            None => Dim::Param(format!("d{i}")),
        })
        .collect();
    model_builder::value_info_dims(name, dtype.onnx_code(), &dims)
}

/// A node of the default domain.
pub fn node(op: &str, inputs: &[String], outputs: &[String]) -> NodeProto {
    model_builder::named_node(&format!("{op}_0"), op, inputs, outputs)
}

/// An INTS attribute.
pub fn ints_attr(name: &str, v: Vec<i64>) -> AttributeProto {
    model_builder::ints_attr(name, &v)
}

/// A FLOATS attribute.
pub fn floats_attr(name: &str, v: Vec<f32>) -> AttributeProto {
    model_builder::floats_attr(name, &v)
}

/// A TENSOR attribute.
pub fn tensor_attr(name: &str, t: &Tensor) -> AttributeProto {
    model_builder::tensor_attr(name, ramify::onnx::tensor_to_proto(t, ""))
}

/// A graph named "fuzz" from nodes, inputs, outputs and initializers.
pub fn graph(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<onnx_protobuf::TensorProto>,
) -> GraphProto {
    let mut g = model_builder::graph(nodes, inputs, outputs, inits);
    g.name = "fuzz".into();
    g
}
