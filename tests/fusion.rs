//! Load-time fusions give the same results as the unfused graph: Conv →
//! BatchNormalization → Relu and Gemm → Clip, per-channel Mul/Add folded
//! into Conv and BatchNormalization (DenseNet's batch norms), on the example
//! model and on models built here.

mod common;

use common::*;
use onnx_protobuf::AttributeProto;
use ramify::onnx::read_tensor_file;
use ramify::{SessionBuilder, Tensor};

fn floats_attr(name: &str, v: f32) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.into();
    a.f = v;
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::FLOAT.into();
    a
}

fn seq(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * scale)
        .collect()
}

fn conv_bn_relu_gemm_clip() -> Vec<u8> {
    let mut bn = node("BatchNormalization", &["c", "s", "b", "m", "v"], &["bn"]);
    bn.attribute.push(floats_attr("epsilon", 1e-3));
    let mut clip = node("Clip", &["g", "lo", "hi"], &["y"]);
    clip.name = "clip".into();
    let m = model(
        graph(
            vec![
                node("Conv", &["x", "w", "cb"], &["c"]),
                bn,
                node("Relu", &["bn"], &["r"]),
                node("Flatten", &["r"], &["f"]),
                node("Gemm", &["f", "gw", "gb"], &["g"]),
                clip,
            ],
            vec![value_info("x", 1, &[1, 3, 6, 6])],
            vec![value_info("y", 1, &[1, 5])],
            vec![
                initializer("w", &[4, 3, 3, 3], &seq(108, 1.0)),
                initializer("cb", &[4], &seq(4, 0.2)),
                initializer("s", &[4], &[1.5, 0.5, 1.0, 2.0]),
                initializer("b", &[4], &seq(4, 0.3)),
                initializer("m", &[4], &seq(4, 0.1)),
                initializer("v", &[4], &[0.5, 1.0, 2.0, 0.25]),
                initializer("gw", &[64, 5], &seq(320, 0.03)),
                initializer("gb", &[5], &seq(5, 0.1)),
                initializer("lo", &[], &[-0.2]),
                initializer("hi", &[], &[0.3]),
            ],
        ),
        13,
    );
    bytes(&m)
}

/// DenseNet-121's layer: Conv → BN → Mul → Add → Relu, then a
/// pre-activation BN → Mul → Add (constant first) → Relu → Conv, then a
/// scalar Mul (folded) and a Mul varying along the width (not folded).
fn densenet_style_chain() -> Vec<u8> {
    let m = model(
        graph(
            vec![
                node("Conv", &["x", "w"], &["c"]),
                node("BatchNormalization", &["c", "s", "b", "m", "v"], &["bn"]),
                node("Mul", &["bn", "k3"], &["k"]),
                node("Add", &["k", "k4"], &["a"]),
                node("Relu", &["a"], &["r"]),
                node("BatchNormalization", &["r", "s", "b", "m", "v"], &["bn2"]),
                node("Mul", &["k3", "bn2"], &["k_2"]),
                node("Add", &["k1", "k_2"], &["a2"]),
                node("Relu", &["a2"], &["r2"]),
                node("Conv", &["r2", "w2"], &["c2"]),
                node("Mul", &["c2", "half"], &["h"]),
                node("Mul", &["h", "across"], &["y"]),
            ],
            vec![value_info("x", 1, &[1, 3, 6, 6])],
            vec![value_info("y", 1, &[1, 2, 4, 4])],
            vec![
                initializer("w", &[4, 3, 3, 3], &seq(108, 1.0)),
                initializer("s", &[4], &[1.5, 0.5, 1.0, 2.0]),
                initializer("b", &[4], &seq(4, 0.3)),
                initializer("m", &[4], &seq(4, 0.1)),
                initializer("v", &[4], &[0.5, 1.0, 2.0, 0.25]),
                initializer("k3", &[4, 1, 1], &[0.5, -1.5, 2.0, 0.75]),
                initializer("k4", &[1, 4, 1, 1], &[0.1, -0.2, 0.3, -0.4]),
                initializer("k1", &[4, 1, 1], &[-0.3, 0.2, 0.4, -0.1]),
                initializer("w2", &[2, 4, 1, 1], &seq(8, 1.0)),
                initializer("half", &[], &[0.5]),
                initializer("across", &[1, 1, 4], &[1.0, -1.0, 2.0, 0.5]),
            ],
        ),
        13,
    );
    bytes(&m)
}

#[test]
fn per_channel_mul_and_add_fold_into_conv_and_batch_norm() {
    let m = densenet_style_chain();
    let (fused, n_fused) = run(&m, true);
    let (plain, n_plain) = run(&m, false);
    assert_eq!(n_plain, 12);
    assert_eq!(
        n_fused, 4,
        "Conv+BN+Mul+Add+Relu, BN+Mul+Add+Relu, Conv+Mul, and the Mul along the width"
    );
    for (a, b) in fused.iter().zip(&plain) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }
    assert!(plain.iter().any(|&v| v != 0.0), "output not degenerate");
}

/// ResNet's residual joins: Relu(Add(conv, shortcut)) (the Add and the Relu
/// fuse into the Conv) and Relu(Sum(...)) of two non-Conv values.
fn residual_joins() -> Vec<u8> {
    let m = model(
        graph(
            vec![
                node("Conv", &["x", "w3"], &["c"]),
                node("Add", &["c", "x"], &["a"]),
                node("Relu", &["a"], &["r"]),
                node("Sum", &["x", "r"], &["s"]),
                node("Relu", &["s"], &["y"]),
            ],
            vec![value_info("x", 1, &[1, 3, 6, 6])],
            vec![value_info("y", 1, &[1, 3, 6, 6])],
            vec![initializer("w3", &[3, 3, 1, 1], &seq(9, 2.0))],
        ),
        13,
    );
    bytes(&m)
}

#[test]
fn residual_add_and_sum_take_the_relu_bit_for_bit() {
    // (The Sum's inputs are the graph input and the fused Conv's output,
    // which already carries an activation, so the Sum stays.)
    let m = residual_joins();
    let (fused, n_fused) = run(&m, true);
    let (plain, n_plain) = run(&m, false);
    assert_eq!(
        (n_plain, n_fused),
        (5, 2),
        "Add+Relu fuse into the Conv, Relu into the Sum"
    );
    assert_eq!(fused, plain);
    assert!(plain.contains(&0.0), "the Relu clamps some sums");
    assert!(plain.iter().any(|&v| v > 0.0));
}

/// A downsampling block's join: Relu(Add(conv(x), conv(x))), both 3×3
/// Convs with a bias; the later Conv takes the Add and the Relu.
#[test]
fn residual_add_of_two_convs_fuses_into_the_later() {
    let m = model(
        graph(
            vec![
                node("Conv", &["x", "wa", "ba"], &["a"]),
                node("Conv", &["x", "wb", "bb"], &["b"]),
                node("Add", &["a", "b"], &["s"]),
                node("Relu", &["s"], &["y"]),
            ],
            vec![value_info("x", 1, &[1, 3, 6, 6])],
            vec![value_info("y", 1, &[1, 3, 4, 4])],
            vec![
                initializer("wa", &[3, 3, 3, 3], &seq(81, 2.0)),
                initializer("ba", &[3], &seq(3, 0.5)),
                initializer("wb", &[3, 3, 3, 3], &seq(81, 0.7)),
                initializer("bb", &[3], &seq(3, -0.5)),
            ],
        ),
        13,
    );
    let m = bytes(&m);
    let (fused, n_fused) = run(&m, true);
    let (plain, n_plain) = run(&m, false);
    assert_eq!((n_plain, n_fused), (4, 2));
    assert_eq!(fused, plain);
    assert!(plain.contains(&0.0) && plain.iter().any(|&v| v > 0.0));
    let s = SessionBuilder::new().build_from_bytes(&m).unwrap();
    let last = &s.graph().nodes[1];
    assert_eq!((last.op_type.as_str(), last.inputs.len()), ("Conv", 4));
}

fn run(model: &[u8], fusion: bool) -> (Vec<f64>, usize) {
    let s = SessionBuilder::new()
        .fusion(fusion)
        .cpus(1)
        .build_from_bytes(model)
        .unwrap();
    let x = Tensor::from_vec(&[1, 3, 6, 6], seq(108, 2.0)).unwrap();
    let out = s.run([("x", x)]).unwrap();
    (out[0].1.to_f64_vec().unwrap(), s.graph().nodes.len())
}

#[test]
fn fused_and_unfused_graphs_agree() {
    let m = conv_bn_relu_gemm_clip();
    let (fused, n_fused) = run(&m, true);
    let (plain, n_plain) = run(&m, false);
    assert_eq!(n_plain, 6);
    assert_eq!(
        n_fused, 3,
        "Conv+BN+Relu and Gemm+Clip should each become one node"
    );
    for (a, b) in fused.iter().zip(&plain) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }
    assert!(
        plain.iter().any(|&v| v > -0.2 && v < 0.3),
        "clip range exercised"
    );
    assert!(
        plain.iter().any(|&v| v == -0.2f32 as f64),
        "lower clip bound exercised"
    );
}

#[test]
fn example_model_fused_matches_reference() {
    let dir = repo().join("models/inception_mini/test_data_set_0");
    let input = read_tensor_file(&dir.join("input_0.pb")).unwrap();
    let want = read_tensor_file(&dir.join("output_0.pb"))
        .unwrap()
        .to_f64_vec()
        .unwrap();
    for fusion in [true, false] {
        let s = SessionBuilder::new()
            .fusion(fusion)
            .build_from_file(repo().join("models/inception_mini.onnx"))
            .unwrap();
        let got = s.run([("input", input.clone())]).unwrap()[0]
            .1
            .to_f64_vec()
            .unwrap();
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * scale, "fusion {fusion}: {g} vs {w}");
        }
    }
}

/// `DQ(a), DQ(b) → Sum → Relu → Q(scale, zp)` over u8 data.
fn qdq_sum_relu(zp: u8) -> Vec<u8> {
    let u8_scalar = |name: &str, v: u8| {
        let mut t = onnx_protobuf::TensorProto::new();
        t.name = name.into();
        t.data_type = 2;
        t.raw_data = vec![v];
        t
    };
    let m = model(
        graph(
            vec![
                node("DequantizeLinear", &["a", "sa", "za"], &["fa"]),
                node("DequantizeLinear", &["b", "sb", "zb"], &["fb"]),
                node("Sum", &["fa", "fb"], &["s"]),
                node("Relu", &["s"], &["r"]),
                node("QuantizeLinear", &["r", "sy", "zy"], &["y"]),
            ],
            vec![value_info("a", 2, &[1, 64]), value_info("b", 2, &[1, 64])],
            vec![value_info("y", 2, &[1, 64])],
            vec![
                initializer("sa", &[], &[0.05]),
                initializer("sb", &[], &[0.03]),
                initializer("sy", &[], &[0.04]),
                u8_scalar("za", 128),
                u8_scalar("zb", 100),
                u8_scalar("zy", zp),
            ],
        ),
        13,
    );
    bytes(&m)
}

#[test]
fn a_relu_before_quantization_is_absorbed_only_at_the_lowest_zero_point() {
    let a: Vec<u8> = (0..64).map(|i| (i * 4) as u8).collect();
    let b: Vec<u8> = (0..64).map(|i| (255 - i * 3) as u8).collect();
    let run = |m: &[u8], fusion: bool| {
        let s = SessionBuilder::new()
            .fusion(fusion)
            .cpus(1)
            .build_from_bytes(m)
            .unwrap();
        let ops: Vec<String> = s.graph().nodes.iter().map(|n| n.op_type.clone()).collect();
        let inputs = [
            ("a", Tensor::from_vec(&[1, 64], a.clone()).unwrap()),
            ("b", Tensor::from_vec(&[1, 64], b.clone()).unwrap()),
        ];
        let out = s.run(inputs).unwrap();
        (
            out[0]
                .1
                .view::<u8>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<u8>>(),
            ops,
        )
    };
    // Zero point 0: requantization clamps negatives to 0 as Relu would.
    let m = qdq_sum_relu(0);
    let ((fused, ops), (plain, _)) = (run(&m, true), run(&m, false));
    assert_eq!(ops, ["QLinearAdd"]);
    assert!(fused.iter().zip(&plain).all(|(f, p)| f.abs_diff(*p) <= 1));
    assert!(plain.contains(&0) && plain.iter().any(|&v| v > 50));
    // Zero point 20: Relu clamps at 20, not at 0, so the group stays float
    // (the Relu may still fuse into the Sum).
    let m = qdq_sum_relu(20);
    let ((fused, ops), (plain, _)) = (run(&m, true), run(&m, false));
    assert!(!ops.contains(&"QLinearAdd".to_string()), "{ops:?}");
    assert!(ops.contains(&"QuantizeLinear".to_string()), "{ops:?}");
    assert_eq!(fused, plain);
    assert!(plain.contains(&20) && !plain.iter().any(|&v| v < 20));
}

fn string_attr(name: &str, v: &str) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.into();
    a.s = v.as_bytes().to_vec();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::STRING.into();
    a
}

/// A model file cannot ask for a fusion: the attribute names the fusion
/// passes once used internally (`activation`, `activation_min`,
/// `residual`) are not ONNX's, and a Conv carrying them computes the plain
/// convolution, negative outputs and all.
#[test]
fn attributes_in_the_model_file_do_not_fuse() {
    let mut conv = node("Conv", &["x", "w", "cb"], &["y"]);
    conv.attribute.push(string_attr("activation", "Clip"));
    conv.attribute.push(floats_attr("activation_min", 0.0));
    conv.attribute.push(floats_attr("activation_max", 0.0));
    conv.attribute.push(int_attr("residual", 1));
    let m = bytes(&model(
        graph(
            vec![conv],
            vec![value_info("x", 1, &[1, 3, 6, 6])],
            vec![value_info("y", 1, &[1, 4, 4, 4])],
            vec![
                initializer("w", &[4, 3, 3, 3], &seq(108, 1.0)),
                initializer("cb", &[4], &seq(4, 0.2)),
            ],
        ),
        13,
    ));
    let (y, nodes) = run(&m, true);
    assert_eq!(nodes, 1);
    assert!(y.iter().any(|&v| v < 0.0) && y.iter().any(|&v| v > 0.0));
    let s = SessionBuilder::new().build_from_bytes(&m).unwrap();
    assert_eq!(s.graph().nodes[0].fusion, ramify::ir::Fusion::NONE);
}

/// `act(DQ(a) + other)`: `a` uint8 through a DequantizeLinear, `other`
/// int8 through another DQ (`both`) or a float input `f` of `f_shape`.
fn dequantized_add(op: &str, act: &str, both: bool, f_shape: &[i64]) -> Vec<u8> {
    let x = [3, 31, 29, 23];
    let other = if both { "fb" } else { "f" };
    let mut nodes = vec![node("DequantizeLinear", &["a", "sa", "za"], &["fa"])];
    if both {
        nodes.push(node("DequantizeLinear", &["b", "sb", "zb"], &["fb"]));
    }
    nodes.push(node(op, &["fa", other], &["s"]));
    let mut a = node(act, &["s"], &["y"]);
    if act == "LeakyRelu" {
        a.attribute.push(floats_attr("alpha", 0.1));
    }
    nodes.push(a);
    let inputs = vec![
        value_info("a", 2, &x),
        value_info("b", 3, &x),
        value_info("f", 1, f_shape),
    ];
    let m = model(
        graph(
            nodes,
            inputs,
            vec![value_info("y", 1, &[])],
            vec![
                initializer("sa", &[], &[0.05]),
                initializer("sb", &[], &[0.03]),
                raw_initializer("za", 2, &[], vec![131]),
                raw_initializer("zb", 3, &[], vec![(-7i8) as u8]),
            ],
        ),
        13,
    );
    bytes(&m)
}

/// The residual joins onnxruntime's quantizer leaves in float
/// (`Relu(DQ(branch) + shortcut)` in QOperator ResNets): the Add or Sum
/// reads the 8-bit operands itself and takes the activation, with the
/// unfused graph's bits, on one shape (chunk tails, spans split over two
/// threads) and under broadcasting.
#[test]
fn adds_read_dequantized_operands_bit_for_bit() {
    let n = 3 * 31 * 29 * 23;
    let a: Vec<u8> = (0..n).map(|i| (i * 7 % 256) as u8).collect();
    let b: Vec<i8> = (0..n).map(|i| (i * 13 % 256) as u8 as i8).collect();
    let cases: [(&str, &str, bool, &[i64]); 5] = [
        ("Add", "Relu", true, &[1]),
        ("Sum", "Relu", false, &[3, 31, 29, 23]),
        ("Add", "LeakyRelu", false, &[3, 31, 29, 23]),
        ("Sum", "Sigmoid", true, &[1]),
        ("Add", "Relu", false, &[31, 1, 1]),
    ];
    for (op, act, both, f_shape) in cases {
        let m = dequantized_add(op, act, both, f_shape);
        let f_len: i64 = f_shape.iter().product();
        let run = |fusion: bool| {
            let s = SessionBuilder::new()
                .fusion(fusion)
                .cpus(2)
                .build_from_bytes(&m)
                .unwrap();
            let ops: Vec<String> = s.graph().nodes.iter().map(|n| n.op_type.clone()).collect();
            let f_dims: Vec<usize> = f_shape.iter().map(|&d| d as usize).collect();
            let inputs = [
                ("a", Tensor::from_vec(&[3, 31, 29, 23], a.clone()).unwrap()),
                ("b", Tensor::from_vec(&[3, 31, 29, 23], b.clone()).unwrap()),
                (
                    "f",
                    Tensor::from_vec(&f_dims, seq(f_len as usize, 9.0)).unwrap(),
                ),
            ];
            let out = s.run(inputs).unwrap();
            let bits: Vec<u32> = out[0]
                .1
                .view::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            (bits, ops)
        };
        let ((fused, ops), (plain, plain_ops)) = (run(true), run(false));
        let case = format!("{op} {act} both={both} f={f_shape:?}");
        assert_eq!(ops, [op], "{case}: {ops:?}");
        assert!(plain_ops.len() >= 3, "{case}: {plain_ops:?}");
        assert_eq!(fused.len(), n, "{case}");
        assert!(fused == plain, "{case}: fused and unfused differ");
        assert!(
            plain.iter().any(|&v| f32::from_bits(v) > 0.5),
            "{case}: values exercised"
        );
    }
}
