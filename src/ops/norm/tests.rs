//! Normalization tests against naive f64 references, the ONNX spec
//! examples, error paths and thread-count independence.

use crate::ir::attributes::{Attribute, Attributes};
use crate::ir::{BuildContext, Operator};
use crate::ops::unary::kernel::tests::{build_op, run_op};
use crate::tensor::Tensor;
use half::f16;

/// Deterministic pseudo-random values in about [-2, 2].
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn t(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, v).unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

fn run(
    op: &str,
    attrs: &[(&str, Attribute)],
    opset: i64,
    ins: &[&Tensor],
) -> crate::Result<Tensor> {
    let o = build_op(op, attrs, opset, &[])?;
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|t| Some(*t)).collect();
    run_op(o.as_ref(), &ins)
}

/// Builds with `n` outputs.
fn build_n(
    op: &str,
    attrs: &[(&str, Attribute)],
    opset: i64,
    n: usize,
) -> crate::Result<Box<dyn Operator>> {
    let map = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let attrs = Attributes::new("node", op, map);
    let ctx = BuildContext {
        attrs: &attrs,
        opset,
        consts: &[],
        num_inputs: 3,
        num_outputs: n,
        fusion: &crate::ir::Fusion::NONE,
    };
    crate::ops::build("", op, &ctx)
}

/// Naive normalization of rows of `len`, scale/bias indexed by `idx(row, col)`.
fn naive_rows(
    x: &[f32],
    len: usize,
    eps: f64,
    center: bool,
    sb: impl Fn(usize, usize) -> (f64, f64),
) -> Vec<f64> {
    let mut out = vec![];
    for (r, row) in x.chunks(len).enumerate() {
        let n = len as f64;
        let mean = if center {
            row.iter().map(|&v| v as f64).sum::<f64>() / n
        } else {
            0.0
        };
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        for (c, &v) in row.iter().enumerate() {
            let (s, b) = sb(r, c);
            out.push((v as f64 - mean) / (var + eps).sqrt() * s + b);
        }
    }
    out
}

#[test]
fn batchnorm_matches_reference_folded_or_not() {
    let (n, c, s) = (2, 3, 20);
    let x = t(&[n, c, 4, 5], data(n * c * s, 1));
    let sc = t(&[c], vec![1.0, 1.5, -0.5]);
    let b = t(&[c], vec![0.0, 1.0, -2.0]);
    let m = t(&[c], vec![0.1, -0.2, 0.3]);
    let v = t(&[c], vec![1.0, 0.5, 2.0]);
    let (xs, p) = (vals(&x), [vals(&sc), vals(&b), vals(&m), vals(&v)]);
    let want: Vec<f64> = (0..xs.len())
        .map(|i| {
            let ch = (i / s) % c;
            (xs[i] - p[2][ch]) / (p[3][ch] + 1e-5).sqrt() * p[0][ch] + p[1][ch]
        })
        .collect();
    let y = run("BatchNormalization", &[], 15, &[&x, &sc, &b, &m, &v]).unwrap();
    close(&vals(&y), &want, 1e-6);
    let consts = [None, Some(&sc), Some(&b), Some(&m), Some(&v)];
    let o = build_op("BatchNormalization", &[], 15, &consts).unwrap();
    let y2 = run_op(
        o.as_ref(),
        &[Some(&x), Some(&sc), Some(&b), Some(&m), Some(&v)],
    )
    .unwrap();
    assert_eq!(y, y2);
    // f64 and f16 data.
    let x64 = Tensor::from_vec(x.shape(), xs.clone()).unwrap();
    let p64: Vec<Tensor> = p
        .iter()
        .map(|v| Tensor::from_vec(&[c], v.clone()).unwrap())
        .collect();
    let y64 = run(
        "BatchNormalization",
        &[],
        15,
        &[&x64, &p64[0], &p64[1], &p64[2], &p64[3]],
    )
    .unwrap();
    close(&vals(&y64), &want, 1e-12);
    let xh = Tensor::from_vec(x.shape(), xs.iter().map(|&v| f16::from_f64(v)).collect()).unwrap();
    let yh = run("BatchNormalization", &[], 15, &[&xh, &sc, &b, &m, &v]).unwrap();
    close(&vals(&yh), &want, 4e-3);
}

#[test]
fn batchnorm_spatial_zero_and_errors() {
    // Opset 7 `spatial=0`: parameters per (channel, position).
    let x = t(&[2, 2, 2], data(8, 2));
    let p = t(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
    let z = t(&[2, 2], vec![0.0; 4]);
    let one = t(&[2, 2], vec![1.0; 4]);
    let attrs = [
        ("spatial", Attribute::Int(0)),
        ("epsilon", Attribute::Float(0.0)),
    ];
    let y = run("BatchNormalization", &attrs, 7, &[&x, &p, &z, &z, &one]).unwrap();
    let want: Vec<f64> = vals(&x)
        .iter()
        .enumerate()
        .map(|(i, v)| v * (i % 4 + 1) as f64)
        .collect();
    close(&vals(&y), &want, 1e-6);
    // training_mode=1 is built by batch_train (tested there).
    let tm = [("training_mode", Attribute::Int(1))];
    assert!(build_op("BatchNormalization", &tm, 15, &[]).is_ok());
    assert!(build_n("BatchNormalization", &[], 15, 3).is_err());
    let bad = t(&[3], vec![1.0; 3]);
    assert!(run("BatchNormalization", &[], 15, &[&x, &bad, &bad, &bad, &bad]).is_err());
    let x1 = t(&[4], vec![1.0; 4]);
    assert!(run(
        "BatchNormalization",
        &[],
        15,
        &[&x1, &bad, &bad, &bad, &bad]
    )
    .is_err());
    let xi = Tensor::from_vec(&[1, 3], vec![1i32; 3]).unwrap();
    assert!(run(
        "BatchNormalization",
        &[],
        15,
        &[&xi, &bad, &bad, &bad, &bad]
    )
    .is_err());
}

#[test]
fn instance_norm_matches_reference() {
    let (n, c, s) = (2, 3, 7);
    let x = t(&[n, c, s], data(n * c * s, 3));
    let sc = t(&[c], vec![1.0, 2.0, 0.5]);
    let b = t(&[c], vec![0.5, -1.0, 0.0]);
    let (sv, bv) = (vals(&sc), vals(&b));
    let want = naive_rows(&data(n * c * s, 3), s, 1e-5, true, |r, _| {
        (sv[r % c], bv[r % c])
    });
    let y = run("InstanceNormalization", &[], 6, &[&x, &sc, &b]).unwrap();
    close(&vals(&y), &want, 1e-5);
    assert!(run(
        "InstanceNormalization",
        &[],
        6,
        &[&x, &b, &t(&[2], vec![0.0; 2])]
    )
    .is_err());
}

#[test]
fn layer_norm_axes_and_stats_outputs() {
    let x = t(&[2, 3, 4], data(24, 4));
    for axis in [-1i64, 1, 0] {
        let a = if axis < 0 { 2 } else { axis as usize };
        let len: usize = [2, 3, 4][a..].iter().product();
        let sc = t(&[len], data(len, 5));
        let b = t(&[len], data(len, 6));
        let (sv, bv) = (vals(&sc), vals(&b));
        let want = naive_rows(&data(24, 4), len, 1e-5, true, |_, col| (sv[col], bv[col]));
        let attrs = [("axis", Attribute::Int(axis))];
        // Scale given in the normalized shape (broadcast source of the same size).
        let sc_shaped = t(&[2, 3, 4][a..], data(len, 5));
        let b_shaped = t(&[2, 3, 4][a..], data(len, 6));
        let y = run(
            "LayerNormalization",
            &attrs,
            17,
            &[&x, &sc_shaped, &b_shaped],
        )
        .unwrap();
        close(&vals(&y), &want, 1e-5);
    }
    // Mean and InvStdDev outputs, scale broadcast from [1, 4], no bias.
    let o = build_n("LayerNormalization", &[("axis", Attribute::Int(1))], 17, 3).unwrap();
    let sc = t(&[1, 4], vec![1.0; 4]);
    let out = o.run(&[Some(&x), Some(&sc), None]).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[1].shape(), &[2, 1, 1]);
    let xs = data(24, 4);
    let m0 = xs[..12].iter().map(|&v| v as f64).sum::<f64>() / 12.0;
    close(&vals(&out[1])[..1], &[m0], 1e-6);
    let v0 = xs[..12]
        .iter()
        .map(|&v| (v as f64 - m0).powi(2))
        .sum::<f64>()
        / 12.0;
    close(&vals(&out[2])[..1], &[1.0 / (v0 + 1e-5).sqrt()], 1e-6);
    assert!(run("LayerNormalization", &[], 17, &[&x, &t(&[3], vec![1.0; 3])]).is_err());
    assert!(run(
        "LayerNormalization",
        &[("axis", Attribute::Int(3))],
        17,
        &[&x, &sc]
    )
    .is_err());
}

#[test]
fn rms_norm_matches_reference() {
    let x = t(&[3, 8], data(24, 7));
    let sc = t(&[8], data(8, 8));
    let sv = vals(&sc);
    let want = naive_rows(&data(24, 7), 8, 1e-5, false, |_, c| (sv[c], 0.0));
    let y = run("RMSNormalization", &[], 23, &[&x, &sc]).unwrap();
    close(&vals(&y), &want, 1e-5);
}

#[test]
fn group_norm_opset18_per_group_and_21_per_channel() {
    let (n, c, s, g) = (2, 4, 3, 2);
    let x = t(&[n, c, s], data(n * c * s, 9));
    let xs = data(n * c * s, 9);
    let attrs = [("num_groups", Attribute::Int(g as i64))];
    let sg = t(&[g], vec![2.0, -1.0]);
    let bg = t(&[g], vec![0.5, 1.0]);
    let want = naive_rows(&xs, c / g * s, 1e-5, true, |r, _| {
        ([2.0, -1.0][r % g], [0.5, 1.0][r % g])
    });
    let y = run("GroupNormalization", &attrs, 18, &[&x, &sg, &bg]).unwrap();
    close(&vals(&y), &want, 1e-5);
    let sc = t(&[c], vec![1.0, 2.0, 3.0, 4.0]);
    let bc = t(&[c], vec![0.0, 0.1, 0.2, 0.3]);
    let want = naive_rows(&xs, c / g * s, 1e-5, true, |r, col| {
        let ch = (r % g) * (c / g) + col / s;
        ((ch + 1) as f64, ch as f64 * 0.1)
    });
    let y = run("GroupNormalization", &attrs, 21, &[&x, &sc, &bc]).unwrap();
    close(&vals(&y), &want, 1e-5);
    assert!(run("GroupNormalization", &attrs, 21, &[&x, &sg, &bg]).is_err());
    let bad = [("num_groups", Attribute::Int(3))];
    assert!(run("GroupNormalization", &bad, 21, &[&x, &sc, &bc]).is_err());
}

#[test]
fn mvn_default_and_custom_axes() {
    let shape = [2, 3, 2, 2];
    let xs = data(24, 10);
    let x = t(&shape, xs.clone());
    // Default axes [0, 2, 3]: per channel over batch and space.
    let mut want = vec![0.0; 24];
    for ch in 0..3 {
        let idx: Vec<usize> = (0..24).filter(|i| (i / 4) % 3 == ch).collect();
        let m = idx.iter().map(|&i| xs[i] as f64).sum::<f64>() / 8.0;
        let v = idx.iter().map(|&i| (xs[i] as f64 - m).powi(2)).sum::<f64>() / 8.0;
        for &i in &idx {
            want[i] = (xs[i] as f64 - m) / (v.sqrt() + 1e-9);
        }
    }
    let y = run("MeanVarianceNormalization", &[], 13, &[&x]).unwrap();
    close(&vals(&y), &want, 1e-5);
    let attrs = [("axes", Attribute::Ints(vec![2, 3]))];
    let y = run("MeanVarianceNormalization", &attrs, 13, &[&x]).unwrap();
    let want = naive_rows(&xs, 4, 0.0, true, |_, _| (1.0, 0.0));
    close(&vals(&y), &want, 1e-4);
    let bad = [("axes", Attribute::Ints(vec![4]))];
    assert!(run("MeanVarianceNormalization", &bad, 13, &[&x]).is_err());
}

#[test]
fn lrn_matches_onnx_reference() {
    let (n, c, s) = (2, 5, 3);
    let xs = data(n * c * s, 11);
    let x = t(&[n, c, s, 1], xs.clone());
    let (alpha, beta, bias, size) = (0.002f32, 0.5f32, 2.0f32, 3usize);
    let mut want = vec![];
    for i in 0..xs.len() {
        let (nn, ch, j) = (i / (c * s), (i / s) % c, i % s);
        let lo = ch.saturating_sub((size - 1) / 2);
        let hi = (ch + size / 2).min(c - 1);
        let sq: f64 = (lo..=hi)
            .map(|k| (xs[(nn * c + k) * s + j] as f64).powi(2))
            .sum();
        want.push(xs[i] as f64 / (bias as f64 + alpha as f64 / size as f64 * sq).powf(beta as f64));
    }
    let attrs = [
        ("alpha", Attribute::Float(alpha)),
        ("beta", Attribute::Float(beta)),
        ("bias", Attribute::Float(bias)),
        ("size", Attribute::Int(size as i64)),
    ];
    let y = run("LRN", &attrs, 13, &[&x]).unwrap();
    close(&vals(&y), &want, 1e-5);
    assert!(build_op("LRN", &[], 13, &[]).is_err());
}

#[test]
fn lp_norm_p1_p2() {
    let x = t(&[2, 3, 2], data(12, 12));
    let xs = vals(&x);
    for p in [1i64, 2] {
        let mut want = vec![0.0; 12];
        for o in 0..2 {
            for j in 0..2 {
                let idx: Vec<usize> = (0..3).map(|k| o * 6 + k * 2 + j).collect();
                let norm: f64 = if p == 1 {
                    idx.iter().map(|&i| xs[i].abs()).sum()
                } else {
                    idx.iter().map(|&i| xs[i] * xs[i]).sum::<f64>().sqrt()
                };
                for &i in &idx {
                    want[i] = xs[i] / norm;
                }
            }
        }
        let attrs = [("axis", Attribute::Int(1)), ("p", Attribute::Int(p))];
        let y = run("LpNormalization", &attrs, 1, &[&x]).unwrap();
        close(&vals(&y), &want, 1e-6);
    }
    assert!(build_op("LpNormalization", &[("p", Attribute::Int(3))], 1, &[]).is_err());
    // An all-zero lane normalises to zeros, not NaN.
    let z = t(&[2, 2], vec![0.0, 3.0, 0.0, 4.0]);
    let y = run("LpNormalization", &[("axis", Attribute::Int(0))], 1, &[&z]).unwrap();
    assert_eq!(vals(&y), vec![0.0, 0.6f32 as f64, 0.0, 0.8f32 as f64]);
}

#[test]
fn bit_identical_at_any_thread_count() {
    let x = t(&[4, 16, 64, 64], data(4 * 16 * 4096, 13));
    let c16 = t(&[16], data(16, 14));
    let pos = t(&[16], vec![0.7; 16]);
    let ln = t(&[64], data(64, 15));
    type Case<'a> = (&'a str, Vec<(&'a str, Attribute)>, i64, Vec<&'a Tensor>);
    let cases: Vec<Case> = vec![
        (
            "BatchNormalization",
            vec![],
            15,
            vec![&x, &c16, &c16, &c16, &pos],
        ),
        ("InstanceNormalization", vec![], 6, vec![&x, &c16, &c16]),
        ("LayerNormalization", vec![], 17, vec![&x, &ln, &ln]),
        (
            "GroupNormalization",
            vec![("num_groups", Attribute::Int(4))],
            21,
            vec![&x, &c16, &c16],
        ),
        ("MeanVarianceNormalization", vec![], 13, vec![&x]),
        ("LRN", vec![("size", Attribute::Int(5))], 13, vec![&x]),
        (
            "LpNormalization",
            vec![("axis", Attribute::Int(1))],
            1,
            vec![&x],
        ),
    ];
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let three = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for (op, attrs, opset, ins) in cases {
        let a = one.install(|| run(op, &attrs, opset, &ins).unwrap());
        let b = three.install(|| run(op, &attrs, opset, &ins).unwrap());
        assert_eq!(a, b, "{op}");
    }
}
