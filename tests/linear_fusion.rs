//! A linear layer's bias and activation fused into its MatMul (issue 43):
//! `Add(MatMul(x, W), b)` with one bias value per column becomes one
//! MatMul, which then takes the activation after it (the erf GELU, written
//! as one Gelu or as its Div/Erf/Add/Mul/Mul chain, or a Relu). The fused
//! graph gives the unfused graph's bits (the written-out GELU chain: within
//! a few ulp), the same at 1 and 2 threads; the fusion
//! leaves alone biases that vary along rows, products that are graph
//! outputs and the tanh GELU.

mod common;

use common::*;
use onnx_protobuf::{AttributeProto, NodeProto, TensorProto};
use ramify::{SessionBuilder, Tensor};

const BATCH: usize = 2;
const ROWS: usize = 70;
const K: usize = 96;
const N: usize = 200;

/// Deterministic values in `[-scale, scale]`.
fn values(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + seed) * 7919 % 1009) as f32 / 504.0 - 1.0) * scale)
        .collect()
}

fn string_attr(name: &str, v: &str) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.into();
    a.s = v.as_bytes().to_vec();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::STRING.into();
    a
}

/// What follows the product.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tail {
    /// `Add(y, b)`, nothing after.
    Bias,
    /// `Add(b, y)` (bias first), then one opset-20 Gelu.
    BiasFirstGelu,
    /// The bias, then the erf GELU written out (Div, Erf, Add, Mul, Mul).
    BiasGeluChain,
    /// The bias, then Relu.
    BiasRelu,
    /// The bias, then the tanh GELU.
    BiasTanhGelu,
}

/// x `[BATCH, ROWS, K]` · W `[K, N]` + bias of shape `bias_shape`, then the
/// tail; `product_out` also makes the product a graph output.
fn linear_model(tail: Tail, bias_shape: &[usize], product_out: bool) -> Vec<u8> {
    let mut nodes: Vec<NodeProto> = vec![node("MatMul", &["x", "w"], &["p"])];
    let bias_out = if tail == Tail::Bias { "y" } else { "z" };
    nodes.push(match tail {
        Tail::BiasFirstGelu => node("Add", &["b", "p"], &[bias_out]),
        _ => node("Add", &["p", "b"], &[bias_out]),
    });
    match tail {
        Tail::Bias => {}
        Tail::BiasFirstGelu => nodes.push(node("Gelu", &["z"], &["y"])),
        Tail::BiasTanhGelu => {
            let mut g = node("Gelu", &["z"], &["y"]);
            g.attribute.push(string_attr("approximate", "tanh"));
            nodes.push(g);
        }
        Tail::BiasRelu => nodes.push(node("Relu", &["z"], &["y"])),
        Tail::BiasGeluChain => nodes.extend([
            node("Div", &["z", "root"], &["d"]),
            node("Erf", &["d"], &["e"]),
            node("Add", &["e", "one"], &["q"]),
            node("Mul", &["z", "q"], &["m"]),
            node("Mul", &["m", "half"], &["y"]),
        ]),
    }
    let shape = [BATCH as i64, ROWS as i64, N as i64];
    let mut outputs = vec![value_info("y", 1, &shape)];
    if product_out {
        outputs.push(value_info("p", 1, &shape));
    }
    let bias_len: usize = bias_shape.iter().product();
    let dims: Vec<i64> = bias_shape.iter().map(|&d| d as i64).collect();
    let inits: Vec<TensorProto> = vec![
        initializer("w", &[K as i64, N as i64], &values(K * N, 3, 0.2)),
        initializer("b", &dims, &values(bias_len, 11, 1.5)),
        initializer("root", &[], &[std::f32::consts::SQRT_2]),
        initializer("one", &[], &[1.0]),
        initializer("half", &[], &[0.5]),
    ];
    bytes(&model(
        graph(
            nodes,
            vec![value_info("x", 1, &[BATCH as i64, ROWS as i64, K as i64])],
            outputs,
            inits,
        ),
        20,
    ))
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
            other => panic!("expected float32, found {}", other.dtype()),
        })
        .collect();
    let ops = s.graph().nodes.iter().map(|n| n.op_type.clone()).collect();
    (bits, ops)
}

#[test]
fn bias_and_activation_fold_into_the_matmul_with_the_same_bits() {
    for (tail, bias_shape) in [
        (Tail::Bias, vec![N]),
        (Tail::BiasFirstGelu, vec![1, 1, N]),
        (Tail::BiasGeluChain, vec![N]),
        (Tail::BiasRelu, vec![1, N]),
        (Tail::BiasTanhGelu, vec![N]),
    ] {
        let m = linear_model(tail, &bias_shape, false);
        let (plain, plain_ops) = run(&m, false, 1);
        assert!(plain_ops.len() >= 2, "{tail:?}: {plain_ops:?}");
        let (one, ops) = run(&m, true, 1);
        assert_eq!(ops, ["MatMul"], "{tail:?}");
        assert!(run(&m, true, 2).0 == one, "{tail:?}: 1 and 2 CPUs differ");
        if tail == Tail::BiasGeluChain {
            // The written-out chain rounds each step: the fused kernel is
            // within a few ulp of it (absolute 1e-6 where 1 + erf cancels).
            for (&a, &b) in one[0].iter().zip(&plain[0]) {
                let (a, b) = (f32::from_bits(a), f32::from_bits(b));
                assert!((a - b).abs() <= 1e-6 + 2e-6 * b.abs(), "{a} vs {b}");
            }
        } else {
            assert!(one == plain, "{tail:?}: fused and unfused bits differ");
        }
    }
}

#[test]
fn the_fusion_leaves_row_biases_and_shared_products_alone() {
    // A bias varying along rows is an ordinary Add.
    let m = linear_model(Tail::Bias, &[ROWS, N], false);
    let (fused, ops) = run(&m, true, 1);
    assert_eq!(ops, ["MatMul", "Add"]);
    assert_eq!(fused, run(&m, false, 1).0);
    // The product is also a graph output: the bias stays an Add (which
    // takes the Relu).
    let m = linear_model(Tail::BiasRelu, &[N], true);
    let (fused, ops) = run(&m, true, 1);
    assert_eq!(ops, ["MatMul", "Add"]);
    assert_eq!(fused, run(&m, false, 1).0);
}
