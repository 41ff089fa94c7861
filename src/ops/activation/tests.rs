//! Tests of the activation family against naive f64 formulas and the ONNX
//! specification's examples.

use crate::ir::attributes::Attribute;
use crate::ops::gemm::fused::Activation;
use crate::ops::unary::kernel::tests::{build_op, run_op, t1};
use crate::tensor::Tensor;
use half::f16;

fn run(op: &str, attrs: &[(&str, Attribute)], opset: i64, inputs: &[&Tensor]) -> Tensor {
    let o = build_op(op, attrs, opset, &[]).unwrap();
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    run_op(o.as_ref(), &ins).unwrap()
}

fn sample() -> Vec<f32> {
    (0..2001).map(|i| (i as f32 - 1000.0) * 0.013).collect()
}

fn check(op: &str, attrs: &[(&str, Attribute)], opset: i64, f: impl Fn(f64) -> f64) {
    let xs = sample();
    let got = run(op, attrs, opset, &[&t1(xs.clone())])
        .to_f64_vec()
        .unwrap();
    for (x, g) in xs.iter().zip(got) {
        let want = f(*x as f64);
        let tol = 2e-6 * (1.0 + want.abs());
        assert!((g - want).abs() <= tol, "{op}({x}) = {g}, want {want}");
    }
}

#[test]
fn pointwise_match_reference_formulas() {
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let softplus = |x: f64| (1.0 + x.exp()).ln();
    check("Relu", &[], 14, |x| x.max(0.0));
    check("LeakyRelu", &[("alpha", Attribute::Float(0.1))], 16, |x| {
        if x < 0.0 {
            0.1f32 as f64 * x
        } else {
            x
        }
    });
    check("Sigmoid", &[], 13, sig);
    check("Tanh", &[], 13, f64::tanh);
    check("HardSwish", &[], 14, |x| {
        x * (x / 6.0 + 0.5).clamp(0.0, 1.0)
    });
    check("Elu", &[("alpha", Attribute::Float(2.0))], 6, |x| {
        if x < 0.0 {
            2.0 * (x.exp() - 1.0)
        } else {
            x
        }
    });
    check("Selu", &[], 6, |x| {
        let (a, g) = (1.673_263_2f32 as f64, 1.050_701f32 as f64);
        if x > 0.0 {
            g * x
        } else {
            g * (a * x.exp() - a)
        }
    });
    check("Celu", &[("alpha", Attribute::Float(2.0))], 12, |x| {
        x.max(0.0) + (2.0 * ((x / 2.0).exp() - 1.0)).min(0.0)
    });
    check("HardSigmoid", &[], 6, |x| {
        (0.2f32 as f64 * x + 0.5).clamp(0.0, 1.0)
    });
    check("Gelu", &[], 20, |x| {
        0.5 * x * (1.0 + libm::erf(x / 2f64.sqrt()))
    });
    let tanh_attr = [("approximate", Attribute::String("tanh".into()))];
    check("Gelu", &tanh_attr, 20, |x| {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (k * (x + 0.044_715f32 as f64 * x * x * x)).tanh())
    });
    check("Softplus", &[], 1, softplus);
    check("Softsign", &[], 1, |x| x / (1.0 + x.abs()));
    check(
        "ThresholdedRelu",
        &[("alpha", Attribute::Float(2.0))],
        10,
        |x| {
            if x > 2.0 {
                x
            } else {
                0.0
            }
        },
    );
    check("Mish", &[], 18, |x| x * softplus(x).tanh());
    check("Swish", &[("alpha", Attribute::Float(0.5))], 24, |x| {
        x * sig(0.5 * x)
    });
    check(
        "Shrink",
        &[
            ("lambd", Attribute::Float(1.5)),
            ("bias", Attribute::Float(0.5)),
        ],
        9,
        |x| {
            if x < -1.5 {
                x + 0.5
            } else if x > 1.5 {
                x - 0.5
            } else {
                0.0
            }
        },
    );
}

#[test]
fn softplus_is_stable_for_large_inputs() {
    let got = run("Softplus", &[], 1, &[&t1(vec![200.0f32, -200.0])]);
    assert_eq!(got, t1(vec![200.0f32, 0.0]));
}

#[test]
fn standalone_activations_equal_the_fused_epilogue() {
    let xs = sample();
    let cases = [
        ("Relu", vec![], Activation::Relu),
        (
            "LeakyRelu",
            vec![("alpha", Attribute::Float(0.2))],
            Activation::LeakyRelu(0.2),
        ),
        ("Sigmoid", vec![], Activation::Sigmoid),
        ("HardSwish", vec![], Activation::HardSwish),
        ("Tanh", vec![], Activation::Tanh),
        ("Gelu", vec![], Activation::Gelu),
        (
            "Gelu",
            vec![("approximate", Attribute::String("tanh".into()))],
            Activation::GeluTanh,
        ),
        (
            "Clip",
            vec![
                ("min", Attribute::Float(-1.0)),
                ("max", Attribute::Float(6.0)),
            ],
            Activation::Clip(-1.0, 6.0),
        ),
    ];
    for (op, attrs, act) in cases {
        let opset = match op {
            "Clip" => 6,
            "Gelu" => 20,
            _ => 14,
        };
        let got = run(op, &attrs, opset, &[&t1(xs.clone())]);
        let mut fused = xs.clone();
        act.apply(&mut fused);
        assert_eq!(got, t1(fused), "{op}");
    }
}

#[test]
fn relu_takes_signed_integers_and_half_floats() {
    assert_eq!(
        run("Relu", &[], 14, &[&t1(vec![-3i32, 0, 5])]),
        t1(vec![0i32, 0, 5])
    );
    let h = t1(vec![f16::from_f32(-1.5), f16::from_f32(2.5)]);
    assert_eq!(
        run("Relu", &[], 14, &[&h]),
        t1(vec![f16::from_f32(0.0), f16::from_f32(2.5)])
    );
    let o = build_op("Relu", &[], 14, &[]).unwrap();
    assert!(o.run(&[Some(&t1(vec![true]))]).is_err());
    assert!(o.run(&[Some(&t1(vec![1u8]))]).is_err());
}

#[test]
fn clip_bounds_from_inputs_attributes_and_integers() {
    let x = t1(vec![-5.0f32, -1.0, 0.5, 3.0, f32::NAN]);
    let lo = Tensor::scalar(-2.0f32);
    let hi = Tensor::scalar(1.0f32);
    let got = run("Clip", &[], 13, &[&x, &lo, &hi]).to_f64_vec().unwrap();
    assert_eq!(&got[..4], &[-2.0, -1.0, 0.5, 1.0]);
    assert!(got[4].is_nan());
    // Only a max (min left out).
    let o = build_op("Clip", &[], 13, &[]).unwrap();
    let r = run_op(o.as_ref(), &[Some(&x), None, Some(&hi)]).unwrap();
    assert_eq!(r.to_f64_vec().unwrap()[..4], [-5.0, -1.0, 0.5, 1.0]);
    // min > max gives max everywhere.
    let r = run("Clip", &[], 13, &[&x, &Tensor::scalar(2.0f32), &hi]);
    assert_eq!(r.to_f64_vec().unwrap()[..4], [1.0; 4]);
    // Integers, with attribute bounds in old opsets for floats.
    let xi = t1(vec![-100i8, 0, 100]);
    let r = run(
        "Clip",
        &[],
        13,
        &[&xi, &Tensor::scalar(-10i8), &Tensor::scalar(10i8)],
    );
    assert_eq!(r, t1(vec![-10i8, 0, 10]));
    let attrs = [
        ("min", Attribute::Float(0.0)),
        ("max", Attribute::Float(6.0)),
    ];
    let r = run("Clip", &attrs, 6, &[&t1(vec![-1.0f32, 7.0])]);
    assert_eq!(r, t1(vec![0.0f32, 6.0]));
    // A bound of the wrong type or shape is an error.
    assert!(o
        .run(&[Some(&x), Some(&Tensor::scalar(1.0f64)), None])
        .is_err());
    assert!(o
        .run(&[Some(&x), Some(&t1(vec![1.0f32, 2.0])), None])
        .is_err());
}

#[test]
fn prelu_broadcasts_per_channel_and_generally() {
    // NCHW input with a per-channel slope [C, 1, 1].
    let x = Tensor::from_vec(&[2, 3, 2, 2], (0..24).map(|i| i as f32 - 12.0).collect()).unwrap();
    let s = Tensor::from_vec(&[3, 1, 1], vec![0.1f32, 0.2, 0.3]).unwrap();
    let got = run("PRelu", &[], 16, &[&x, &s]).to_f64_vec().unwrap();
    for (i, g) in got.iter().enumerate() {
        let v = i as f32 - 12.0;
        let c = (i / 4) % 3;
        let want = if v < 0.0 {
            v * [0.1f32, 0.2, 0.3][c]
        } else {
            v
        };
        assert_eq!(*g, want as f64, "element {i}");
    }
    // A slope varying along the last axis, and a scalar slope.
    let s = t1(vec![0.5f32, 0.25]);
    let got = run("PRelu", &[], 16, &[&x, &s]).to_f64_vec().unwrap();
    assert_eq!(&got[..4], &[-6.0, -2.75, -5.0, -2.25]);
    let got = run("PRelu", &[], 16, &[&x, &Tensor::scalar(0.5f32)])
        .to_f64_vec()
        .unwrap();
    assert_eq!(got[0], -6.0);
    // A slope that would grow the input is an error, as is a type mismatch.
    let o = build_op("PRelu", &[], 16, &[]).unwrap();
    let big = Tensor::from_vec(&[4, 3, 1, 1], vec![0.1f32; 12]).unwrap();
    assert!(o.run(&[Some(&x), Some(&big)]).is_err());
    assert!(o.run(&[Some(&x), Some(&Tensor::scalar(0.5f64))]).is_err());
}

/// Naive softmax over axis `a` of a `[d0, d1, d2]` tensor.
fn naive_softmax(x: &[f32], dims: [usize; 3], a: usize, log: bool) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    let at = |i: [usize; 3]| i[0] * dims[1] * dims[2] + i[1] * dims[2] + i[2];
    for i0 in 0..dims[0] {
        for i1 in 0..dims[1] {
            for i2 in 0..dims[2] {
                let mut idx = [i0, i1, i2];
                if idx[a] != 0 {
                    continue;
                }
                let lane: Vec<usize> = (0..dims[a])
                    .map(|k| {
                        idx[a] = k;
                        at(idx)
                    })
                    .collect();
                let max = lane.iter().map(|&p| x[p] as f64).fold(f64::MIN, f64::max);
                let sum: f64 = lane.iter().map(|&p| (x[p] as f64 - max).exp()).sum();
                for &p in &lane {
                    let v = x[p] as f64 - max;
                    out[p] = if log { v - sum.ln() } else { v.exp() / sum };
                }
            }
        }
    }
    out
}

#[test]
fn softmax_and_log_softmax_along_every_axis() {
    let dims = [3usize, 4, 5];
    let x: Vec<f32> = (0..60)
        .map(|i| ((i * 37) % 23) as f32 * 0.7 - 8.0)
        .collect();
    let t = Tensor::from_vec(&dims, x.clone()).unwrap();
    for (op, log) in [("Softmax", false), ("LogSoftmax", true)] {
        for a in 0..3 {
            let attrs = [("axis", Attribute::Int(a as i64 - 3))];
            let got = run(op, &attrs, 13, &[&t]).to_f64_vec().unwrap();
            let want = naive_softmax(&x, dims, a, log);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
                    "{op} axis {a}: {g} vs {w}"
                );
            }
        }
    }
    // Opset < 13 coerces to 2-D at axis 1: one softmax over 20 elements.
    let got = run("Softmax", &[], 11, &[&t]).to_f64_vec().unwrap();
    let want = naive_softmax(&x, [3, 20, 1], 1, false);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
    }
    // Large inputs do not overflow.
    let big = run("Softmax", &[], 13, &[&t1(vec![1000.0f32, 1000.0])]);
    assert_eq!(big, t1(vec![0.5f32, 0.5]));
}

#[test]
fn hardmax_marks_the_first_maximum() {
    let x = Tensor::from_vec(&[2, 3], vec![1.0f32, 3.0, 3.0, -1.0, -2.0, -3.0]).unwrap();
    let got = run("Hardmax", &[], 13, &[&x]);
    let want = Tensor::from_vec(&[2, 3], vec![0.0f32, 1.0, 0.0, 1.0, 0.0, 0.0]).unwrap();
    assert_eq!(got, want);
    let got = run("Hardmax", &[("axis", Attribute::Int(0))], 13, &[&x]);
    let want = Tensor::from_vec(&[2, 3], vec![1.0f32, 1.0, 1.0, 0.0, 0.0, 0.0]).unwrap();
    assert_eq!(got, want);
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let n = 1 << 17;
    let x = Tensor::from_vec(
        &[64, n / 64],
        (0..n).map(|i| (i % 977) as f32 * 0.01 - 4.0).collect(),
    )
    .unwrap();
    let s = Tensor::from_vec(&[64, 1], (0..64).map(|i| i as f32 * 0.01).collect()).unwrap();
    let pool = |k| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(k)
            .build()
            .unwrap()
    };
    for (op, extra) in [
        ("Softmax", None),
        ("Gelu", None),
        ("Sigmoid", None),
        ("PRelu", Some(&s)),
    ] {
        let mut ins = vec![&x];
        ins.extend(extra);
        let one = pool(1).install(|| run(op, &[], 20, &ins));
        let three = pool(3).install(|| run(op, &[], 20, &ins));
        assert_eq!(one, three, "{op}");
    }
}

#[test]
fn bad_attributes_and_types_are_errors() {
    assert!(build_op(
        "Gelu",
        &[("approximate", Attribute::String("fast".into()))],
        20,
        &[]
    )
    .is_err());
    assert!(build_op("Celu", &[("alpha", Attribute::Float(0.0))], 12, &[]).is_err());
    let o = build_op("Softmax", &[("axis", Attribute::Int(3))], 13, &[]).unwrap();
    assert!(o.run(&[Some(&t1(vec![1.0f32]))]).is_err());
    assert!(o.run(&[Some(&t1(vec![1i64]))]).is_err());
    let o = build_op("Sigmoid", &[], 13, &[]).unwrap();
    assert!(o.run(&[Some(&t1(vec![1i64]))]).is_err());
}
