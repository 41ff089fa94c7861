//! Structure-aware operator fuzzing: one node of an operator picked from
//! ramify's default-domain registry, at a fuzzed opset, with fuzzed
//! attributes and 1–4 small fuzzed input tensors (graph inputs fed at run
//! time, initializers, or omitted optional inputs), as a serialized ONNX
//! model that is loaded and run once. Errors are fine; panics, aborts, hangs
//! and running out of memory are the bugs.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use protobuf::Message;
use ramify::{DType, Tensor};
use ramify_fuzz::{
    element_count, float_attr, floats_attr, graph, int_attr, ints_attr, make_tensor, model, node,
    string_attr, strings_attr, tensor_attr, untyped_value_info, value_info, ElemVal, ALL_DTYPES,
};
use std::sync::OnceLock;

/// Newest opset tried.
const MAX_OPSET: i64 = 26;
/// Most elements in one fuzzed tensor.
const MAX_ELEMS: usize = 1024;

/// Attribute names of the default-domain operators.
const ATTR_NAMES: &[&str] = &[
    "axis",
    "axes",
    "keepdims",
    "alpha",
    "beta",
    "gamma",
    "mode",
    "to",
    "dtype",
    "perm",
    "kernel_shape",
    "strides",
    "pads",
    "dilations",
    "group",
    "auto_pad",
    "ceil_mode",
    "count_include_pad",
    "storage_order",
    "output_shape",
    "output_padding",
    "epsilon",
    "momentum",
    "training_mode",
    "split",
    "num_outputs",
    "starts",
    "ends",
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
    "transA",
    "transB",
    "min",
    "max",
    "bias",
    "lambd",
    "p",
    "k",
    "largest",
    "sorted",
    "select_last_index",
    "noop_with_empty_axes",
    "reduction",
    "ignore_index",
    "coordinate_transformation_mode",
    "cubic_coeff_a",
    "exclude_outside",
    "extrapolation_value",
    "nearest_mode",
    "antialias",
    "keep_aspect_ratio_policy",
    "scales",
    "sizes",
    "align_corners",
    "padding_mode",
    "direction",
    "hidden_size",
    "activations",
    "activation_alpha",
    "activation_beta",
    "clip",
    "input_forget",
    "linear_before_reset",
    "layout",
    "batch_axis",
    "time_axis",
    "blocksize",
    "block_size",
    "batch_dims",
    "allowzero",
    "exclusive",
    "reverse",
    "detect_negative",
    "detect_positive",
    "fmod",
    "saturate",
    "output_datatype",
    "spatial_scale",
    "sampling_ratio",
    "output_height",
    "output_width",
    "center_point_box",
    "approximate",
    "equation",
    "upper",
    "num_groups",
    "stash_type",
    "seed",
    "ratio",
    "shape",
    "size",
    "periodic",
    "onesided",
    "inverse",
    "dft_length",
    "frame_step",
    "is_causal",
    "scale",
    "softcap",
    "q_num_heads",
    "kv_num_heads",
    "qk_matmul_output_mode",
    "softmax_precision",
    "start",
    "end",
    "spatial",
    "tie_breaker",
    "sample_size",
    "high",
    "low",
    "mean",
    "num_scan_inputs",
    "axis_w",
    "precision",
    "fill_value",
    "unbiased",
    "activation",
    "delimiter",
    "maxsplit",
    "pad_value",
    "interleaved",
    "rotary_embedding_dim",
    "num_heads",
    "sideways",
    "T",
    "output_dtype",
    "across_channels",
    "normalize_variance",
    "bidirectional",
];

/// String attribute values the operators look for.
const STR_VALUES: &[&str] = &[
    "",
    "NOTSET",
    "SAME_UPPER",
    "SAME_LOWER",
    "VALID",
    "constant",
    "reflect",
    "edge",
    "wrap",
    "nearest",
    "linear",
    "cubic",
    "bilinear",
    "bicubic",
    "zeros",
    "border",
    "reflection",
    "half_pixel",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
    "half_pixel_symmetric",
    "round_prefer_floor",
    "round_prefer_ceil",
    "floor",
    "ceil",
    "stretch",
    "not_larger",
    "not_smaller",
    "none",
    "mean",
    "sum",
    "add",
    "mul",
    "max",
    "min",
    "forward",
    "reverse",
    "bidirectional",
    "Relu",
    "Tanh",
    "Sigmoid",
    "Affine",
    "LeakyRelu",
    "ThresholdedRelu",
    "ScaledTanh",
    "HardSigmoid",
    "Elu",
    "Softsign",
    "Softplus",
    "tanh",
    "DCR",
    "CRD",
    "avg",
    "output_half_pixel",
    "ij,jk->ik",
    "ii->i",
    "...i,...i->...",
    "bij,bjk->bik",
    "i,i",
    "ab->ba",
    "abc,cd->abd",
    "i->",
    "ii",
    "a,b->ab",
    "...,...->...",
    "Swish",
    "Clip",
    "HardSwish",
];

#[derive(Arbitrary, Debug)]
enum Int {
    Small(i8),
    Edge(u8),
    Any(i64),
}

impl Int {
    fn get(&self) -> i64 {
        match *self {
            Int::Small(v) => v as i64,
            Int::Edge(k) => {
                const E: [i64; 8] = [
                    0,
                    1,
                    -1,
                    i64::MAX,
                    i64::MIN,
                    i32::MAX as i64,
                    1 << 32,
                    -(1 << 31),
                ];
                E[k as usize % E.len()]
            }
            Int::Any(v) => v,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Float {
    Small(i8),
    Any(f32),
}

impl Float {
    fn get(&self) -> f32 {
        match *self {
            Float::Small(v) => v as f32 * 0.25,
            Float::Any(v) => v,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Str {
    Known(u8),
    Any(String),
}

impl Str {
    fn get(&self) -> String {
        match self {
            Str::Known(k) => STR_VALUES[*k as usize % STR_VALUES.len()].to_string(),
            Str::Any(s) => s.chars().take(32).collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum AttrValue {
    Int(Int),
    Float(Float),
    Ints(Vec<Int>),
    Floats(Vec<Float>),
    Str(Str),
    Strings(Vec<Str>),
    Tensor(TensorSpec),
}

#[derive(Arbitrary, Debug)]
struct AttrSpec {
    name: u8,
    value: AttrValue,
}

#[derive(Arbitrary, Debug)]
struct TensorSpec {
    dtype: u8,
    dims: Vec<u8>,
    values: Vec<ElemVal>,
}

impl TensorSpec {
    fn dtype(&self) -> DType {
        // f32 and i64 (the common data and index types) come up more often.
        let k = self.dtype as usize % (ALL_DTYPES.len() + 6);
        match k {
            k if k < ALL_DTYPES.len() => ALL_DTYPES[k],
            k if k < ALL_DTYPES.len() + 3 => DType::F32,
            _ => DType::I64,
        }
    }

    /// Rank 0..=6, dimensions 0..=7, at most MAX_ELEMS elements.
    fn shape(&self) -> Vec<usize> {
        let mut shape: Vec<usize> = self.dims.iter().take(6).map(|&d| d as usize % 8).collect();
        while element_count(&shape).unwrap_or(usize::MAX) > MAX_ELEMS {
            // Shrink the largest dimension until it fits.
            let i = (0..shape.len()).max_by_key(|&i| shape[i]).unwrap_or(0);
            shape[i] /= 2;
        }
        shape
    }

    fn tensor(&self) -> Tensor {
        let values: Vec<ElemVal> = self.values.iter().take(MAX_ELEMS).copied().collect();
        make_tensor(self.dtype(), &self.shape(), &values)
    }
}

#[derive(Arbitrary, Debug)]
enum InputKind {
    /// A graph input, fed at run time.
    Runtime,
    /// A graph input whose declared dimensions are all symbolic.
    RuntimeSymbolic,
    /// An initializer (a constant, folded at load).
    Initializer,
    /// An omitted optional input (empty name).
    Omitted,
}

#[derive(Arbitrary, Debug)]
struct InputSpec {
    kind: InputKind,
    tensor: TensorSpec,
}

#[derive(Arbitrary, Debug)]
struct OpCase {
    op: u16,
    opset: u8,
    attrs: Vec<AttrSpec>,
    first: InputSpec,
    more: Vec<InputSpec>,
    outputs: u8,
    fusion: bool,
}

fn op_names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| ramify::ops::registry().names())
}

fn attribute(spec: &AttrSpec) -> onnx_protobuf::AttributeProto {
    let name = ATTR_NAMES[spec.name as usize % ATTR_NAMES.len()];
    match &spec.value {
        AttrValue::Int(v) => int_attr(name, v.get()),
        AttrValue::Float(v) => float_attr(name, v.get()),
        AttrValue::Ints(v) => ints_attr(name, v.iter().take(8).map(Int::get).collect()),
        AttrValue::Floats(v) => floats_attr(name, v.iter().take(8).map(Float::get).collect()),
        AttrValue::Str(v) => string_attr(name, &v.get()),
        AttrValue::Strings(v) => {
            let v: Vec<String> = v.iter().take(4).map(Str::get).collect();
            strings_attr(name, &v)
        }
        AttrValue::Tensor(t) => tensor_attr(name, &t.tensor()),
    }
}

fn run_case(case: &OpCase) {
    let names = op_names();
    let op = names[case.op as usize % names.len()];
    let since = ramify::ops::registry()
        .get(op)
        .map(|e| e.since)
        .unwrap_or(1)
        .clamp(1, MAX_OPSET);
    let opset = since + case.opset as i64 % (MAX_OPSET - since + 1);

    let mut node_inputs = Vec::new();
    let mut graph_inputs = Vec::new();
    let mut inits = Vec::new();
    let mut feeds: Vec<(String, Tensor)> = Vec::new();
    for (i, spec) in std::iter::once(&case.first)
        .chain(case.more.iter().take(3))
        .enumerate()
    {
        let name = format!("x{i}");
        match spec.kind {
            InputKind::Omitted => {
                node_inputs.push(String::new());
                continue;
            }
            InputKind::Initializer => {
                inits.push(ramify::onnx::tensor_to_proto(&spec.tensor.tensor(), &name));
            }
            InputKind::Runtime | InputKind::RuntimeSymbolic => {
                let t = spec.tensor.tensor();
                let symbolic = matches!(spec.kind, InputKind::RuntimeSymbolic);
                let dims: Vec<Option<i64>> = t
                    .shape()
                    .iter()
                    .map(|&d| (!symbolic).then_some(d as i64))
                    .collect();
                graph_inputs.push(value_info(&name, t.dtype(), &dims));
                feeds.push((name.clone(), t));
            }
        }
        node_inputs.push(name);
    }
    // Trailing omitted inputs are dropped, as ONNX writers do.
    while node_inputs.last().is_some_and(|s| s.is_empty()) {
        node_inputs.pop();
    }
    let outputs: Vec<String> = (0..1 + case.outputs as usize % 3)
        .map(|i| format!("y{i}"))
        .collect();
    let mut n = node(op, &node_inputs, &outputs);
    n.attribute = case.attrs.iter().take(6).map(attribute).collect();
    let graph_outputs = outputs.iter().map(|o| untyped_value_info(o)).collect();
    let m = model(graph(vec![n], graph_inputs, graph_outputs, inits), opset);
    let bytes = m.write_to_bytes().expect("serializable");

    let Ok(session) = ramify_fuzz::builder().fusion(case.fusion).build_from_bytes(&bytes) else {
        return;
    };
    let _ = session.run(feeds);
}

fuzz_target!(|case: OpCase| run_case(&case));
