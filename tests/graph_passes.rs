//! Graph passes seen from a session: constant folding of ConstantOfShape
//! weights at load and of Shape→Gather→Concat chains once input shapes are
//! known, dead-node removal, and IR 3 models listing initializers as inputs;
//! random nodes (issue 45) are never folded, even on constant inputs.

mod common;

use common::*;
use onnx_protobuf::TensorProto;
use ramify::{Mode, Session, SessionBuilder, Tensor};

fn i64_init(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = name.into();
    t.data_type = 7;
    t.dims = dims.to_vec();
    t.int64_data = v.to_vec();
    t
}

#[test]
fn shape_chains_fold_once_shapes_are_known() {
    // y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))
    let mut unsq = node("Unsqueeze", &["d0", "axes"], &["d0u"]);
    unsq.name = "unsq".into();
    let mut cat = node("Concat", &["d0u", "minus1"], &["target"]);
    cat.attribute.push(int_attr("axis", 0));
    let m = model(
        graph(
            vec![
                node("Shape", &["x"], &["s"]),
                node("Gather", &["s", "zero"], &["d0"]),
                unsq,
                cat,
                node("Reshape", &["x", "target"], &["y"]),
                // A dead branch: nothing reads it.
                node("Relu", &["x"], &["unused"]),
            ],
            vec![value_info("x", 1, &[-1, 3, 4])],
            vec![value_info("y", 1, &[-1, 12])],
            vec![
                i64_init("zero", &[], &[0]),
                i64_init("axes", &[1], &[0]),
                i64_init("minus1", &[1], &[-1]),
            ],
        ),
        13,
    );
    let s = Session::from_bytes(&bytes(&m)).unwrap();
    // At load the batch size is unknown: the chain stays, the dead Relu goes.
    assert!(s.graph().nodes.iter().all(|n| n.op_type != "Relu"));
    assert_eq!(s.graph().nodes.len(), 5);
    let x = Tensor::from_vec(&[2, 3, 4], (0..24).map(|v| v as f32).collect()).unwrap();
    let plan = s.plan([("x", x.clone())]).unwrap();
    let ops: Vec<&str> = plan
        .graph
        .nodes
        .iter()
        .map(|n| n.op_type.as_str())
        .collect();
    assert_eq!(ops, vec!["Reshape"], "the shape chain folds away");
    let out = s.run([("x", x)]).unwrap();
    assert_eq!(out[0].1.shape(), &[2, 12]);
}

#[test]
fn constant_of_shape_weights_fold_at_load_in_ir3_models() {
    // IR 3 style: the weight's shape initializer is also listed as a graph input.
    let mut cos = node("ConstantOfShape", &["w_shape"], &["w"]);
    let mut value = onnx_protobuf::AttributeProto::new();
    value.name = "value".into();
    value.type_ = onnx_protobuf::attribute_proto::AttributeType::TENSOR.into();
    value.t = Some(initializer("", &[1], &[0.5])).into();
    cos.attribute.push(value);
    let mut m = model(
        graph(
            vec![cos, node("Add", &["x", "w"], &["y"])],
            vec![value_info("x", 1, &[2, 2]), value_info("w_shape", 7, &[2])],
            vec![value_info("y", 1, &[2, 2])],
            vec![i64_init("w_shape", &[2], &[2, 2])],
        ),
        9,
    );
    m.ir_version = 3;
    let s = Session::from_bytes(&bytes(&m)).unwrap();
    assert_eq!(
        s.inputs().len(),
        1,
        "initializers listed as inputs are not inputs"
    );
    assert_eq!(s.graph().nodes.len(), 1, "ConstantOfShape folded at load");
    let out = s
        .run([("x", Tensor::from_vec(&[2, 2], vec![1.0f32; 4]).unwrap())])
        .unwrap();
    assert_eq!(out[0].1.to_f64_vec().unwrap(), vec![1.5; 4]);
}

#[test]
fn inference_dropout_passes_its_input_through_with_or_without_a_mask_reader() {
    let x = Tensor::from_vec(&[2, 3], vec![-1.0f32, 2.0, -3.0, 4.0, 0.5, -0.5]).unwrap();
    let relu: Vec<f32> = vec![0.0, 2.0, 0.0, 4.0, 0.5, 0.0];
    // A named but unread mask (as in SqueezeNet), then one the graph returns.
    for mask_is_output in [false, true] {
        let mut outputs = vec![value_info("y", 1, &[2, 3])];
        if mask_is_output {
            outputs.push(value_info("mask", 9, &[2, 3]));
        }
        let m = model(
            graph(
                vec![
                    node("Relu", &["x"], &["r"]),
                    node("Dropout", &["r"], &["d", "mask"]),
                    node("Neg", &["d"], &["y"]),
                ],
                vec![value_info("x", 1, &[2, 3])],
                outputs,
                vec![],
            ),
            13,
        );
        let s = Session::from_bytes(&bytes(&m)).unwrap();
        for _ in 0..2 {
            let out = s.run([("x", x.clone())]).unwrap();
            let want: Vec<f64> = relu.iter().map(|&v| -f64::from(v)).collect();
            assert_eq!(out[0].1.to_f64_vec().unwrap(), want);
            if mask_is_output {
                assert_eq!(out[1].1, Tensor::from_vec(&[2, 3], vec![true; 6]).unwrap());
            } else {
                assert_eq!(out.len(), 1);
            }
        }
    }
}

/// u = RandomUniform(shape [256]), r = RandomUniformLike(c) of a constant,
/// d = Dropout(c, 0.5, true) with constant inputs, y = r + x: every random
/// node has only constant inputs (or none), so folding would freeze it.
fn random_model(seed: Option<f32>) -> Vec<u8> {
    use onnx_protobuf::attribute_proto::AttributeType;
    let attr = |name: &str, f: Option<f32>, i: Option<i64>, ints: &[i64]| {
        let mut a = onnx_protobuf::AttributeProto::new();
        a.name = name.into();
        if let Some(f) = f {
            a.f = f;
            a.type_ = AttributeType::FLOAT.into();
        } else if let Some(i) = i {
            a.i = i;
            a.type_ = AttributeType::INT.into();
        } else {
            a.ints = ints.to_vec();
            a.type_ = AttributeType::INTS.into();
        }
        a
    };
    let mut uniform = node("RandomUniform", &[], &["u"]);
    uniform.attribute.push(attr("shape", None, None, &[256]));
    let mut like = node("RandomUniformLike", &["c"], &["r"]);
    let mut dropout = node("Dropout", &["c1", "ratio", "training"], &["d"]);
    if let Some(s) = seed {
        uniform.attribute.push(attr("seed", Some(s), None, &[]));
        like.attribute.push(attr("seed", Some(s + 1.0), None, &[]));
        dropout
            .attribute
            .push(attr("seed", None, Some(s as i64), &[]));
    }
    let mut ratio = initializer("ratio", &[], &[0.5]);
    ratio.dims.clear();
    let mut training = TensorProto::new();
    training.name = "training".into();
    training.data_type = 9;
    training.int32_data = vec![1];
    let m = model(
        graph(
            vec![uniform, like, dropout, node("Add", &["r", "x"], &["y"])],
            vec![value_info("x", 1, &[256])],
            vec![
                value_info("u", 1, &[256]),
                value_info("y", 1, &[256]),
                value_info("d", 1, &[256]),
            ],
            vec![
                initializer("c", &[256], &[0.0; 256]),
                initializer("c1", &[256], &[1.0; 256]),
                ratio,
                training,
            ],
        ),
        13,
    );
    bytes(&m)
}

fn run_random(s: &Session) -> Vec<Vec<f64>> {
    let x = Tensor::from_vec(&[256], vec![0.0f32; 256]).unwrap();
    let out = s.run([("x", x)]).unwrap();
    out.iter().map(|(_, t)| t.to_f64_vec().unwrap()).collect()
}

#[test]
fn random_nodes_draw_on_every_run_and_repeat_with_a_seed() {
    let s = Session::from_bytes(&random_model(None)).unwrap();
    let (a, b) = (run_random(&s), run_random(&s));
    for (k, (a, b)) in a.iter().zip(&b).enumerate() {
        assert_ne!(a, b, "output {k} is the same on two runs without a seed");
        assert!(a.iter().all(|v| (0.0..=2.0).contains(v)), "output {k}");
    }
    let seeded = |mode| {
        let s = SessionBuilder::new()
            .mode(mode)
            .build_from_bytes(&random_model(Some(3.0)))
            .unwrap();
        let first = run_random(&s);
        assert_eq!(first, run_random(&s), "two seeded runs in {mode:?}");
        first
    };
    assert_eq!(seeded(Mode::Serial), seeded(Mode::Parallel));
}

/// An If on a constant condition whose branches draw (RandomUniform) is
/// random too: it must not be folded into the first run's draw.
#[test]
fn a_control_flow_node_with_a_random_body_is_not_folded() {
    use onnx_protobuf::attribute_proto::AttributeType;
    let branch = |name: &str| {
        let mut shape = onnx_protobuf::AttributeProto::new();
        shape.name = "shape".into();
        shape.ints = vec![64];
        shape.type_ = AttributeType::INTS.into();
        let mut n = node("RandomUniform", &[], &[name]);
        n.attribute.push(shape);
        graph(vec![n], vec![], vec![value_info(name, 1, &[64])], vec![])
    };
    let mut cond = TensorProto::new();
    cond.name = "cond".into();
    cond.data_type = 9;
    cond.int32_data = vec![1];
    let mut n = node("If", &["cond"], &["y"]);
    n.attribute.push(graph_attr("then_branch", branch("t")));
    n.attribute.push(graph_attr("else_branch", branch("e")));
    let m = model(
        graph(vec![n], vec![], vec![value_info("y", 1, &[64])], vec![cond]),
        13,
    );
    let s = Session::from_bytes(&bytes(&m)).unwrap();
    let run = || {
        s.run(Vec::<(&str, Tensor)>::new()).unwrap()[0]
            .1
            .to_f64_vec()
            .unwrap()
    };
    assert_ne!(run(), run(), "the If was folded into one draw");
}
