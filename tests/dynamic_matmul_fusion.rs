//! Dynamically quantized linear layers fused into MatMulIntegerToFloat
//! (issue 39): onnxruntime's quantize_dynamic writes `DynamicQuantizeLinear
//! → MatMulInteger → Cast → Mul(x_scale · w_scale) [→ Add(bias)]`, which the
//! fusion turns into one node running the int8 product with the scale and
//! bias applied as it is stored. The fused graph gives the unfused graph's
//! bits (per-tensor and per-column scales and zero points, int8 and uint8
//! weights, the bias on either side or none, a scale that is no Mul), the
//! same at 1 and 2 threads; chains it must not take stay as they were.

mod common;

use common::*;
use onnx_protobuf::{NodeProto, TensorProto};
use ramify::{SessionBuilder, Tensor};

const BATCH: usize = 2;
const ROWS: usize = 37;
const K: usize = 70;
const N: usize = 45;
const INT8: i32 = 3;
const UINT8: i32 = 2;

/// Deterministic values in `[-scale, scale]`.
fn values(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + seed) * 7919 % 1009) as f32 / 504.0 - 1.0) * scale)
        .collect()
}

/// Deterministic bytes.
fn codes(n: usize, seed: usize) -> Vec<u8> {
    (0..n)
        .map(|i| ((i * 37 + seed * 101) % 251) as u8)
        .collect()
}

/// How one layer is written.
#[derive(Clone, Copy, Debug)]
struct Layer {
    /// W is int8 (else uint8).
    signed: bool,
    /// W's scale and zero point per column (else per tensor).
    per_column: bool,
    /// None: no bias; Some(true): `Add(b, y)`; Some(false): `Add(y, b)`.
    bias_first: Option<bool>,
    /// The scale is `Mul(s, cast)` (else `Mul(cast, s)`).
    scale_first: bool,
    /// The scale is `Div(x_scale, 1 / w_scale)`, not a Mul.
    scale_by_div: bool,
}

const PLAIN: Layer = Layer {
    signed: true,
    per_column: false,
    bias_first: Some(false),
    scale_first: false,
    scale_by_div: false,
};

/// The nodes and initializers of layer `l` (names suffixed `l`) reading
/// the quantized x, its scale and zero point, and writing `y{l}`.
fn layer(l: usize, c: Layer, nodes: &mut Vec<NodeProto>, inits: &mut Vec<TensorProto>) {
    let name = |s: &str| format!("{s}{l}");
    let (ty, w_len) = (
        if c.signed { INT8 } else { UINT8 },
        if c.per_column { N } else { 1 },
    );
    let p_dims: Vec<i64> = if c.per_column { vec![N as i64] } else { vec![] };
    let zero: Vec<u8> = (0..w_len).map(|j| (j * 5 % 7) as u8 + 1).collect();
    let zero = if c.signed {
        zero.iter().map(|&z| (z as i8 - 4) as u8).collect()
    } else {
        zero
    };
    let scale: Vec<f32> = (0..w_len)
        .map(|j| 0.003 + j as f32 * 1e-4 + l as f32 * 1e-3)
        .collect();
    inits.push(raw_initializer(
        &name("w"),
        ty,
        &[K as i64, N as i64],
        codes(K * N, l + 2),
    ));
    inits.push(raw_initializer(&name("wz"), ty, &p_dims, zero));
    inits.push(initializer(
        &name("b"),
        &[N as i64],
        &values(N, 11 + l, 1.5),
    ));
    let s = name("s");
    if c.scale_by_div {
        let inv: Vec<f32> = scale.iter().map(|v| 1.0 / v).collect();
        inits.push(initializer(&name("ws_inv"), &p_dims, &inv));
        nodes.push(node("Div", &["xs", &name("ws_inv")], &[&s]));
    } else {
        inits.push(initializer(&name("ws"), &p_dims, &scale));
        nodes.push(node("Mul", &["xs", &name("ws")], &[&s]));
    }
    let (acc, cast, prod) = (name("acc"), name("cast"), name("prod"));
    nodes.push(node(
        "MatMulInteger",
        &["xq", &name("w"), "xz", &name("wz")],
        &[&acc],
    ));
    let mut cast_node = node("Cast", &[&acc], &[&cast]);
    cast_node.attribute.push(int_attr("to", 1));
    nodes.push(cast_node);
    let y = name("y");
    let mul_out = if c.bias_first.is_some() { &prod } else { &y };
    let mul_in: [&str; 2] = if c.scale_first {
        [&s, &cast]
    } else {
        [&cast, &s]
    };
    nodes.push(node("Mul", &mul_in, &[mul_out]));
    match c.bias_first {
        None => {}
        Some(true) => nodes.push(node("Add", &[&name("b"), &prod], &[&y])),
        Some(false) => nodes.push(node("Add", &[&prod, &name("b")], &[&y])),
    }
}

/// x → DynamicQuantizeLinear → one layer per entry of `layers` (all
/// reading the one quantization), each output a graph output; `extra`
/// names more graph outputs.
fn model_of(layers: &[Layer], extra: &[&str]) -> Vec<u8> {
    let mut nodes = vec![node("DynamicQuantizeLinear", &["x"], &["xq", "xs", "xz"])];
    let mut inits = Vec::new();
    for (l, &c) in layers.iter().enumerate() {
        layer(l, c, &mut nodes, &mut inits);
    }
    let shape = [BATCH as i64, ROWS as i64, N as i64];
    let mut outputs: Vec<_> = (0..layers.len())
        .map(|l| value_info(&format!("y{l}"), 1, &shape))
        .collect();
    for e in extra {
        let ty = if e.starts_with("acc") { 6 } else { 1 };
        outputs.push(value_info(e, ty, &shape));
    }
    let x = value_info("x", 1, &[BATCH as i64, ROWS as i64, K as i64]);
    bytes(&model(graph(nodes, vec![x], outputs, inits), 17))
}

/// The outputs' bits and the built graph's op types.
fn run(model: &[u8], fusion: bool, cpus: usize) -> (Vec<Vec<u32>>, Vec<String>) {
    let s = SessionBuilder::new()
        .fusion(fusion)
        .cpus(cpus)
        .build_from_bytes(model)
        .unwrap();
    let x = Tensor::from_vec(&[BATCH, ROWS, K], values(BATCH * ROWS * K, 5, 2.0)).unwrap();
    let out = s.run([("x", x)]).unwrap();
    let bits = out
        .iter()
        .map(|(_, t)| match t {
            Tensor::F32(a) => a.iter().map(|v| v.to_bits()).collect(),
            Tensor::I32(a) => a.iter().map(|&v| v as u32).collect(),
            other => panic!("unexpected output type {}", other.dtype()),
        })
        .collect();
    let ops = s.graph().nodes.iter().map(|n| n.op_type.clone()).collect();
    (bits, ops)
}

#[test]
fn dynamic_linear_layers_fuse_with_the_same_bits() {
    let variants = [
        PLAIN,
        Layer {
            bias_first: Some(true),
            per_column: true,
            ..PLAIN
        },
        Layer {
            bias_first: None,
            signed: false,
            scale_first: true,
            ..PLAIN
        },
        Layer {
            signed: false,
            per_column: true,
            bias_first: Some(true),
            ..PLAIN
        },
        Layer {
            scale_by_div: true,
            per_column: true,
            ..PLAIN
        },
    ];
    for v in variants {
        let m = model_of(&[v], &[]);
        let (plain, plain_ops) = run(&m, false, 1);
        assert!(
            plain_ops.contains(&"MatMulInteger".to_string()),
            "{plain_ops:?}"
        );
        let (fused, ops) = run(&m, true, 1);
        let mut want = vec!["DynamicQuantizeLinear", "MatMulIntegerToFloat"];
        if v.scale_by_div {
            want.insert(1, "Div");
        }
        assert_eq!(ops, want, "{v:?}");
        assert!(fused == plain, "{v:?}: fused and unfused bits differ");
        assert!(run(&m, true, 2).0 == fused, "{v:?}: 1 and 2 CPUs differ");
    }
    // Q, K and V reading one quantization each fuse.
    let qkv = [
        PLAIN,
        Layer {
            per_column: true,
            ..PLAIN
        },
        PLAIN,
    ];
    let m = model_of(&qkv, &[]);
    let (fused, ops) = run(&m, true, 1);
    assert_eq!(
        ops.iter().filter(|o| *o == "MatMulIntegerToFloat").count(),
        3
    );
    assert_eq!(ops.len(), 4, "{ops:?}");
    assert!(fused == run(&m, false, 1).0);
}

#[test]
fn chains_read_elsewhere_stay_unfused() {
    // The product itself is a graph output: nothing fuses.
    let m = model_of(&[PLAIN], &["acc0"]);
    let (fused, ops) = run(&m, true, 1);
    assert!(ops.contains(&"MatMulInteger".to_string()), "{ops:?}");
    assert!(
        !ops.contains(&"MatMulIntegerToFloat".to_string()),
        "{ops:?}"
    );
    assert!(fused == run(&m, false, 1).0);
    // The scaled product is a graph output: the chain fuses up to it and
    // the bias stays an Add.
    let m = model_of(&[PLAIN], &["prod0"]);
    let (fused, ops) = run(&m, true, 1);
    assert_eq!(
        ops,
        ["DynamicQuantizeLinear", "MatMulIntegerToFloat", "Add"]
    );
    assert!(fused == run(&m, false, 1).0);
    // The scale product is read twice (it is a graph output too): it stays
    // a Mul and the fused node takes it whole.
    let m = model_of(&[PLAIN], &["s0"]);
    let (fused, ops) = run(&m, true, 1);
    assert_eq!(
        ops,
        ["DynamicQuantizeLinear", "Mul", "MatMulIntegerToFloat"]
    );
    assert!(fused == run(&m, false, 1).0);
}
