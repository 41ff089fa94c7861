//! The transformer fusions (issue 43) on models built here: the erf GELU
//! written out as Div/Erf/Add/Mul/Mul (each exporter's order) becomes one
//! Gelu, so does the tanh GELU (its cube as Pow or two Muls), and
//! attention's `Softmax(MatMul / √d + mask)` takes the scale and mask; all
//! fire only on the exact pattern, with private intermediates,
//! and give the unfused graph's result within float rounding (tolerances
//! at each assertion), bit-identical at 1 and 2 threads.

mod common;

use common::*;
use onnx_protobuf::{NodeProto, TensorProto};
use ramify::{SessionBuilder, Tensor};

fn scalar(name: &str, v: f32) -> TensorProto {
    initializer(name, &[], &[v])
}

/// Deterministic values in `[-scale, scale]`.
fn values(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 % 1009) as f32 / 504.0 - 1.0) * scale)
        .collect()
}

/// Runs a model with one input `x` (and optionally `mask`); returns the
/// outputs and the op types of the built graph.
fn run(
    model: &[u8],
    fusion: bool,
    cpus: usize,
    feeds: &[(&str, Tensor)],
) -> (Vec<Vec<f32>>, Vec<String>) {
    let s = SessionBuilder::new()
        .fusion(fusion)
        .cpus(cpus)
        .build_from_bytes(model)
        .unwrap();
    let out = s.run(feeds.iter().cloned()).unwrap();
    let outs = out
        .iter()
        .map(|(_, t)| {
            t.to_f64_vec()
                .unwrap()
                .into_iter()
                .map(|v| v as f32)
                .collect()
        })
        .collect();
    let ops = s.graph().nodes.iter().map(|n| n.op_type.clone()).collect();
    (outs, ops)
}

const ROWS: usize = 64;
const COLS: usize = 512;

/// x → erf GELU in `order` → y; `erf_out` also makes the Erf's output a
/// graph output; `root` is the constant x is divided by.
fn gelu_model(order: usize, erf_out: bool, root: f32) -> Vec<u8> {
    let mut nodes = vec![match order {
        3 => node("Mul", &["x", "inv_root"], &["d"]),
        _ => node("Div", &["x", "root"], &["d"]),
    }];
    nodes.push(node("Erf", &["d"], &["e"]));
    match order {
        0 | 3 => nodes.extend([
            node("Add", &["e", "one"], &["p"]),
            node("Mul", &["x", "p"], &["m"]),
            node("Mul", &["m", "half"], &["y"]),
        ]),
        1 => nodes.extend([
            node("Mul", &["half", "x"], &["h"]),
            node("Add", &["one", "e"], &["p"]),
            node("Mul", &["h", "p"], &["y"]),
        ]),
        _ => nodes.extend([
            node("Add", &["e", "one"], &["p"]),
            node("Mul", &["p", "half"], &["m"]),
            node("Mul", &["x", "m"], &["y"]),
        ]),
    }
    let mut outputs = vec![value_info("y", 1, &[ROWS as i64, COLS as i64])];
    if erf_out {
        outputs.push(value_info("e", 1, &[ROWS as i64, COLS as i64]));
    }
    bytes(&model(
        graph(
            nodes,
            vec![value_info("x", 1, &[ROWS as i64, COLS as i64])],
            outputs,
            vec![
                scalar("root", root),
                scalar("inv_root", 1.0 / root),
                scalar("one", 1.0),
                scalar("half", 0.5),
            ],
        ),
        17,
    ))
}

fn gelu_input() -> Tensor {
    Tensor::from_vec(&[ROWS, COLS], values(ROWS * COLS, 9.0)).unwrap()
}

/// Model `m`, a written-out GELU, runs as one Gelu node, within float
/// rounding of the unfused graph (absolute 1e-6 where `1 + erf` or `1 +
/// tanh` cancels in the negative tail, relative `rel` elsewhere), within
/// 1e-6 relative (plus `floor`) of `exact`, and bit-identical at 1 and 2
/// threads.
fn assert_fused_gelu(m: &[u8], what: &str, rel: f32, exact: impl Fn(f64) -> f64, floor: f64) {
    let x = values(ROWS * COLS, 9.0);
    let feeds = [("x", gelu_input())];
    let (fused, ops) = run(m, true, 1, &feeds);
    assert_eq!(ops, ["Gelu"], "{what}");
    let (plain, plain_ops) = run(m, false, 1, &feeds);
    assert!(plain_ops.len() >= 5, "{what}: {plain_ops:?}");
    for ((&a, &b), &v) in fused[0].iter().zip(&plain[0]).zip(&x) {
        assert!((a - b).abs() <= 1e-6 + rel * b.abs(), "{what}: {a} vs {b}");
        let want = exact(v as f64);
        assert!(
            (a as f64 - want).abs() <= 1e-6 * want.abs() + floor,
            "{what}: gelu({v}) = {a}, exactly {want}"
        );
    }
    let (two, _) = run(m, true, 2, &feeds);
    assert!(
        two[0]
            .iter()
            .zip(&fused[0])
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "{what}: 1 and 2 threads differ"
    );
}

#[test]
fn erf_gelu_chains_become_one_gelu_in_every_order() {
    for order in 0..4 {
        let m = gelu_model(order, false, std::f32::consts::SQRT_2);
        assert_fused_gelu(
            &m,
            &format!("order {order}"),
            2e-6,
            |v| 0.5 * v * libm::erfc(-v / std::f64::consts::SQRT_2),
            1e-30,
        );
    }
}

#[test]
fn gelu_fusion_needs_private_intermediates_and_the_right_constants() {
    let feeds = [("x", gelu_input())];
    let (outs, ops) = run(
        &gelu_model(0, true, std::f32::consts::SQRT_2),
        true,
        1,
        &feeds,
    );
    assert!(ops.contains(&"Erf".to_string()), "{ops:?}");
    assert_eq!(outs.len(), 2);
    let (_, ops) = run(&gelu_model(1, false, 2.0), true, 1, &feeds);
    assert!(!ops.contains(&"Gelu".to_string()), "{ops:?}");
    let (_, ops) = run(&gelu_model(3, false, 1.5), true, 1, &feeds);
    assert!(!ops.contains(&"Gelu".to_string()), "{ops:?}");
}

/// x → tanh GELU written out → y. `cube`: 0 `Pow(x, 3)`, 1 `(x·x)·x`,
/// 2 `x·(x·x)`; `outer` picks the order of the ½ and x products as in
/// [`gelu_model`] (0, 1, 2); `k` is the factor before the Tanh; `leak`
/// also outputs the Tanh's input.
fn tanh_gelu_model(cube: usize, outer: usize, k: f32, leak: bool) -> Vec<u8> {
    let mut nodes = match cube {
        0 => vec![node("Pow", &["x", "three"], &["c"])],
        1 => vec![
            node("Mul", &["x", "x"], &["s"]),
            node("Mul", &["s", "x"], &["c"]),
        ],
        _ => vec![
            node("Mul", &["x", "x"], &["s"]),
            node("Mul", &["x", "s"], &["c"]),
        ],
    };
    nodes.extend([
        node("Mul", &["cubic", "c"], &["cc"]),
        node("Add", &["x", "cc"], &["a"]),
        node("Mul", &["a", "k"], &["u"]),
        node("Tanh", &["u"], &["e"]),
    ]);
    nodes.extend(match outer {
        0 => [
            node("Add", &["e", "one"], &["p"]),
            node("Mul", &["x", "p"], &["m"]),
            node("Mul", &["m", "half"], &["y"]),
        ],
        1 => [
            node("Mul", &["x", "half"], &["h"]),
            node("Add", &["one", "e"], &["p"]),
            node("Mul", &["h", "p"], &["y"]),
        ],
        _ => [
            node("Add", &["e", "one"], &["p"]),
            node("Mul", &["half", "p"], &["m"]),
            node("Mul", &["m", "x"], &["y"]),
        ],
    });
    let dims = [ROWS as i64, COLS as i64];
    let mut outputs = vec![value_info("y", 1, &dims)];
    if leak {
        outputs.push(value_info("u", 1, &dims));
    }
    bytes(&model(
        graph(
            nodes,
            vec![value_info("x", 1, &dims)],
            outputs,
            vec![
                scalar("three", 3.0),
                scalar("cubic", 0.044_715),
                scalar("k", k),
                scalar("one", 1.0),
                scalar("half", 0.5),
            ],
        ),
        17,
    ))
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;

#[test]
fn tanh_gelu_chains_become_one_gelu_with_pow_or_muls_in_every_order() {
    for cube in 0..3 {
        for outer in 0..3 {
            let m = tanh_gelu_model(cube, outer, SQRT_2_OVER_PI, false);
            // each of the chain's eight steps rounds
            assert_fused_gelu(
                &m,
                &format!("cube {cube}, outer {outer}"),
                4e-6,
                |v| {
                    let inner = 0.797_884_560_802_865_4 * (v + 0.044_715 * v * v * v);
                    0.5 * v * (1.0 + inner.tanh())
                },
                1e-6,
            );
        }
    }
}

#[test]
fn tanh_gelu_fusion_needs_private_intermediates_and_the_right_constants() {
    let feeds = [("x", gelu_input())];
    let (outs, ops) = run(
        &tanh_gelu_model(0, 0, SQRT_2_OVER_PI, true),
        true,
        1,
        &feeds,
    );
    assert!(ops.contains(&"Tanh".to_string()), "{ops:?}");
    assert_eq!(outs.len(), 2);
    let (_, ops) = run(&tanh_gelu_model(1, 1, 0.8, false), true, 1, &feeds);
    assert!(!ops.contains(&"Gelu".to_string()), "{ops:?}");
}

const HEADS: usize = 4;
const SEQ: usize = 64;
const KEYS: usize = 128;

/// Attention scores → [scale] → [+ mask] → Softmax.
struct Attn {
    /// 0: none; 1: Div by 8; 2: Mul(0.125, s).
    scale: usize,
    /// 0: none; 1: Add(t, mask); 2: Add(mask, t).
    mask: usize,
    /// Shape of the mask.
    mask_shape: Vec<i64>,
    /// Softmax axis.
    axis: i64,
    /// Also output the scaled scores.
    leak: bool,
}

impl Default for Attn {
    fn default() -> Self {
        Attn {
            scale: 1,
            mask: 1,
            mask_shape: vec![1, 1, 1, KEYS as i64],
            axis: -1,
            leak: false,
        }
    }
}

fn attn_model(a: &Attn) -> Vec<u8> {
    let shape = [1, HEADS as i64, SEQ as i64, KEYS as i64];
    let mut nodes: Vec<NodeProto> = Vec::new();
    let mut cur = "s";
    match a.scale {
        1 => nodes.push(node("Div", &["s", "eight"], &["t"])),
        2 => nodes.push(node("Mul", &["eighth", "s"], &["t"])),
        _ => {}
    }
    if a.scale > 0 {
        cur = "t";
    }
    match a.mask {
        1 => nodes.push(node("Add", &[cur, "mask"], &["u"])),
        2 => nodes.push(node("Add", &["mask", cur], &["u"])),
        _ => {}
    }
    if a.mask > 0 {
        cur = "u";
    }
    let mut sm = node("Softmax", &[cur], &["y"]);
    sm.attribute.push(int_attr("axis", a.axis));
    nodes.push(sm);
    let mut inputs = vec![value_info("s", 1, &shape)];
    if a.mask > 0 {
        inputs.push(value_info("mask", 1, &a.mask_shape));
    }
    let mut outputs = vec![value_info("y", 1, &shape)];
    if a.leak {
        outputs.push(value_info(cur, 1, &shape));
    }
    bytes(&model(
        graph(
            nodes,
            inputs,
            outputs,
            vec![scalar("eight", 8.0), scalar("eighth", 0.125)],
        ),
        17,
    ))
}

fn attn_feeds(a: &Attn) -> Vec<(&'static str, Tensor)> {
    let n = HEADS * SEQ * KEYS;
    let s = Tensor::from_vec(&[1, HEADS, SEQ, KEYS], values(n, 40.0)).unwrap();
    let mut feeds = vec![("s", s)];
    if a.mask > 0 {
        let dims: Vec<usize> = a.mask_shape.iter().map(|&d| d as usize).collect();
        let len = dims.iter().product::<usize>();
        let m: Vec<f32> = (0..len)
            .map(|i| {
                if i % 5 == 3 {
                    f32::MIN
                } else {
                    -((i % 3) as f32)
                }
            })
            .collect();
        feeds.push(("mask", Tensor::from_vec(&dims, m).unwrap()));
    }
    feeds
}

/// (fused op types, fused output, unfused output).
fn attn_run(a: &Attn) -> (Vec<String>, Vec<f32>, Vec<f32>) {
    let m = attn_model(a);
    let feeds = attn_feeds(a);
    let (fused, ops) = run(&m, true, 1, &feeds);
    let (plain, _) = run(&m, false, 1, &feeds);
    let (two, _) = run(&m, true, 2, &feeds);
    assert!(
        two[0]
            .iter()
            .zip(&fused[0])
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "1 and 2 threads differ"
    );
    (ops, fused[0].clone(), plain[0].clone())
}

fn assert_close(fused: &[f32], plain: &[f32]) {
    for (&a, &b) in fused.iter().zip(plain) {
        // probabilities: the sum's order differs, a few ulp of the row
        assert!((a - b).abs() <= 1e-6 + 1e-5 * b.abs(), "{a} vs {b}");
    }
}

#[test]
fn scale_and_mask_fold_into_the_softmax() {
    for (scale, mask) in [(1, 1), (2, 2), (1, 0), (0, 1), (2, 1)] {
        let a = Attn {
            scale,
            mask,
            ..Attn::default()
        };
        let (ops, fused, plain) = attn_run(&a);
        assert_eq!(ops, ["Softmax"], "scale {scale} mask {mask}");
        assert_close(&fused, &plain);
        if mask > 0 {
            assert!(plain.contains(&0.0), "masked keys exercised");
        }
    }
    let per_query = Attn {
        mask_shape: vec![1, 1, SEQ as i64, KEYS as i64],
        ..Attn::default()
    };
    let (ops, fused, plain) = attn_run(&per_query);
    assert_eq!(ops, ["Softmax"]);
    assert_close(&fused, &plain);
}

#[test]
fn softmax_fusion_needs_last_axis_fitting_mask_and_private_scores() {
    let leak = Attn {
        leak: true,
        ..Attn::default()
    };
    let (ops, fused, plain) = attn_run(&leak);
    assert!(ops.contains(&"Add".to_string()), "{ops:?}");
    assert_close(&fused, &plain);
    let axis = Attn {
        axis: 2,
        ..Attn::default()
    };
    let (ops, fused, plain) = attn_run(&axis);
    assert_eq!(ops.len(), 3, "{ops:?}");
    assert_close(&fused, &plain);
    let column_mask = Attn {
        scale: 0,
        mask_shape: vec![1, 1, SEQ as i64, 1],
        ..Attn::default()
    };
    let (ops, fused, plain) = attn_run(&column_mask);
    assert_eq!(ops, ["Add", "Softmax"]);
    assert_close(&fused, &plain);
}
