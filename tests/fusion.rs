//! Load-time fusions give the same results as the unfused graph: Conv →
//! BatchNormalization → Relu and Gemm → Clip, on the example model and on a
//! model built here.

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
