//! Weights live once: float32 convolutions take their weights from the
//! graph (`Graph::release_adopted`) and let the originals go once packed.
//! Results must equal a session that keeps every weight, bit for bit, on
//! the input shape that packed them and on other shapes (where the weights
//! are unpacked again, or another kernel takes the layer).

mod common;

use common::{bytes, f32_bits, graph, initializer, int_attr, model, node, value_info};
use ramify::{Session, SessionBuilder, Tensor};

/// X[1, 16, h, w] → Conv 1×1 (32) → Relu → Conv 3×3 pad 1 (24) → Y, with
/// fixed or free spatial dims.
fn two_convs(free: bool) -> Vec<u8> {
    let side = if free { -1 } else { 8 };
    let w1: Vec<f32> = (0..32 * 16)
        .map(|i| ((i * 7 % 23) as f32 - 11.0) / 17.0)
        .collect();
    let b1: Vec<f32> = (0..32).map(|i| i as f32 / 50.0).collect();
    let w2: Vec<f32> = (0..24 * 32 * 9)
        .map(|i| ((i * 5 % 31) as f32 - 15.0) / 40.0)
        .collect();
    let mut c2 = node("Conv", &["r", "w2"], &["y"]);
    let mut pads = int_attr("pads", 0);
    pads.ints = vec![1, 1, 1, 1];
    pads.type_ = onnx_protobuf::attribute_proto::AttributeType::INTS.into();
    c2.attribute.push(pads);
    let g = graph(
        vec![
            node("Conv", &["x", "w1", "b1"], &["c"]),
            node("Relu", &["c"], &["r"]),
            c2,
        ],
        vec![value_info("x", 1, &[1, 16, side, side])],
        vec![value_info("y", 1, &[1, 24, side, side])],
        vec![
            initializer("w1", &[32, 16, 1, 1], &w1),
            initializer("b1", &[32], &b1),
            initializer("w2", &[24, 32, 3, 3], &w2),
        ],
    );
    bytes(&model(g, 13))
}

fn input(side: usize) -> Tensor {
    let n = 16 * side * side;
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0)
        .collect();
    Tensor::from_vec(&[1, 16, side, side], v).unwrap()
}

fn run(s: &Session, side: usize) -> Vec<u32> {
    let out = s.run([("x", input(side))]).unwrap();
    f32_bits(&out[0].1)
}

fn released(s: &Session) -> usize {
    s.graph().released.iter().flatten().count()
}

#[test]
fn fixed_shapes_release_the_pointwise_weights_and_match_kept_ones() {
    let m = two_convs(false);
    let lean = SessionBuilder::new().cpus(1).build_from_bytes(&m).unwrap();
    let kept = SessionBuilder::new()
        .cpus(1)
        .keep_weights(true)
        .build_from_bytes(&m)
        .unwrap();
    assert!(released(&lean) >= 1, "the 1×1 layer's W is adopted");
    assert_eq!(released(&kept), 0);
    let want = run(&kept, 8);
    // The first run packs and lets the originals go; the next ones read
    // only the packed weights.
    for _ in 0..3 {
        assert_eq!(run(&lean, 8), want);
    }
}

#[test]
fn other_shapes_after_the_release_match_kept_weights() {
    let m = two_convs(true);
    let lean = SessionBuilder::new().cpus(2).build_from_bytes(&m).unwrap();
    let kept = SessionBuilder::new()
        .cpus(2)
        .keep_weights(true)
        .build_from_bytes(&m)
        .unwrap();
    assert!(released(&lean) >= 1);
    // 8×8 packs; 3×3 is too small for the pointwise panels (W unpacked for
    // the plain GEMM); 20×20 may take other kernels; 8×8 again reads the
    // packed weights.
    for side in [8, 3, 20, 1, 8] {
        assert_eq!(run(&lean, side), run(&kept, side), "side {side}");
    }
}

#[test]
fn the_example_model_gives_the_same_bits_with_and_without_release() {
    let path = common::repo().join("models/inception_mini.onnx");
    let lean = Session::from_file(&path).unwrap();
    let kept = SessionBuilder::new()
        .keep_weights(true)
        .build_from_file(&path)
        .unwrap();
    let info = &lean.inputs()[0];
    let shape = info
        .declared
        .as_ref()
        .and_then(|d| d.concrete_shape(1))
        .unwrap();
    let n: usize = shape.iter().product();
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 31 % 97) as f32 - 48.0) / 50.0)
        .collect();
    let x = Tensor::from_vec(&shape, x).unwrap();
    let want = kept.run([(info.name.as_str(), x.clone())]).unwrap();
    for _ in 0..2 {
        let got = lean.run([(info.name.as_str(), x.clone())]).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(f32_bits(&g.1), f32_bits(&w.1));
        }
    }
}
