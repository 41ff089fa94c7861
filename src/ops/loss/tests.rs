//! Loss tests against naive f64 references written after ONNX's reference
//! implementations, hand-computed spec-style examples, the edge cases
//! (ignore_index naming a valid class, every entry ignored, labels out of
//! range), other float types and thread-count independence.

use crate::ir::attributes::Attribute;
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::unary::kernel::tests::build_op;
use crate::tensor::Tensor;
use half::{bf16, f16};

/// Deterministic pseudo-random values in about [-2, 2].
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// Deterministic labels in [0, c).
fn labels(n: usize, c: usize, seed: u64) -> Vec<i64> {
    data(n, seed)
        .iter()
        .map(|v| (((v + 2.0) * 1000.0) as usize % c) as i64)
        .collect()
}

fn t<T: crate::Element>(shape: &[usize], v: Vec<T>) -> Tensor {
    Tensor::from_vec(shape, v).unwrap()
}

/// Builds `op` with `outputs` outputs.
fn build(
    op: &str,
    attrs: &[(&str, Attribute)],
    outputs: usize,
) -> crate::Result<Box<dyn Operator>> {
    let map = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let attrs = crate::ir::attributes::Attributes::new("node", op, map);
    let ctx = BuildContext {
        attrs: &attrs,
        opset: 13,
        consts: &[],
        num_inputs: 3,
        num_outputs: outputs,
        fusion: &crate::ir::Fusion::NONE,
    };
    crate::ops::build("", op, &ctx)
}

/// Runs `o`, checking that infer predicted every output fact and flops > 0.
fn run(o: &dyn Operator, ins: &[Option<&Tensor>]) -> crate::Result<Vec<Tensor>> {
    let facts: Vec<Option<Fact>> = ins.iter().map(|t| t.map(Fact::of)).collect();
    let inf: Vec<InferInput> = facts
        .iter()
        .map(|f| InferInput {
            fact: f.as_ref(),
            value: None,
        })
        .collect();
    let predicted = o.infer(&inf)?;
    let out = o.run(ins)?;
    assert_eq!(predicted, out.iter().map(Fact::of).collect::<Vec<_>>());
    let fr: Vec<Option<&Fact>> = facts.iter().map(|f| f.as_ref()).collect();
    assert!(o.flops(&fr, &predicted) > 0);
    Ok(out)
}

fn attrs(reduction: &str, ii: Option<i64>) -> Vec<(&'static str, Attribute)> {
    let mut a = vec![(
        "reduction",
        Attribute::String(reduction.as_bytes().to_vec()),
    )];
    if let Some(i) = ii {
        a.push(("ignore_index", Attribute::Int(i)));
    }
    a
}

/// ONNX's reference algorithm in f64: x `[N, C, D]` (log-probabilities for
/// NLL, scores for SCE), returns (loss values, log_prob).
fn reference(
    sce: bool,
    x: &[f64],
    (n, c, d): (usize, usize, usize),
    tg: &[i64],
    w: Option<&[f64]>,
    reduction: &str,
    ii: Option<i64>,
) -> (Vec<f64>, Vec<f64>) {
    let mut lp = x.to_vec();
    if sce {
        for i in 0..n {
            for k in 0..d {
                let col: Vec<f64> = (0..c).map(|j| x[(i * c + j) * d + k]).collect();
                let m = col.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = col.iter().map(|v| (v - m).exp()).sum();
                for j in 0..c {
                    lp[(i * c + j) * d + k] = (col[j] - m) - s.ln();
                }
            }
        }
    }
    let mut loss = vec![0.0; n * d];
    let mut gw = vec![1.0; n * d];
    for i in 0..n {
        for k in 0..d {
            let p = i * d + k;
            if Some(tg[p]) == ii {
                gw[p] = 0.0;
                continue;
            }
            let cls = tg[p] as usize;
            gw[p] = w.map_or(1.0, |w| w[cls]);
            loss[p] = -lp[(i * c + cls) * d + k] * gw[p];
        }
    }
    let out = match reduction {
        "none" => loss,
        "sum" => vec![loss.iter().sum()],
        _ => vec![loss.iter().sum::<f64>() / gw.iter().sum::<f64>()],
    };
    (out, lp)
}

fn close(got: &Tensor, want: &[f64], tol: f64) {
    let g = got.to_f64_vec().unwrap();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * (1.0 + b.abs());
        assert!(ok, "element {i}: got {a}, want {b}");
    }
}

#[test]
fn both_losses_match_reference_over_shapes_reductions_and_weights() {
    let shapes: [&[usize]; 4] = [&[3, 5], &[2, 4, 6], &[2, 3, 2, 3], &[1, 2, 2, 1, 3, 2]];
    for (si, shape) in shapes.iter().enumerate() {
        let (n, c) = (shape[0], shape[1]);
        let d: usize = shape[2..].iter().product();
        let lshape: Vec<usize> = std::iter::once(n)
            .chain(shape[2..].iter().copied())
            .collect();
        let xv = data(n * c * d, si as u64 + 1);
        let x = t(shape, xv.clone());
        let xd: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
        let tg = labels(n * d, c, si as u64 + 7);
        let lab = t(&lshape, tg.clone());
        let lab32 = t(&lshape, tg.iter().map(|&v| v as i32).collect::<Vec<_>>());
        let wv: Vec<f32> = (0..c).map(|j| 0.5 + j as f32 * 0.25).collect();
        let w = t(&[c], wv.clone());
        let wd: Vec<f64> = wv.iter().map(|&v| v as f64).collect();
        for red in ["none", "sum", "mean"] {
            for ii in [None, Some(tg[0]), Some(-1)] {
                for weighted in [false, true] {
                    let wr = weighted.then_some(&wd[..]);
                    let wi = weighted.then_some(&w);
                    for sce in [true, false] {
                        let (want, lp) = reference(sce, &xd, (n, c, d), &tg, wr, red, ii);
                        let op = if sce {
                            "SoftmaxCrossEntropyLoss"
                        } else {
                            "NegativeLogLikelihoodLoss"
                        };
                        let outs = if sce { 2 } else { 1 };
                        let o = build(op, &attrs(red, ii), outs).unwrap();
                        for l in [&lab, &lab32] {
                            let r = run(o.as_ref(), &[Some(&x), Some(l), wi]).unwrap();
                            close(&r[0], &want, 1e-5);
                            if sce {
                                close(&r[1], &lp, 1e-6);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn spec_style_examples() {
    // NLL, N=1 C=3: loss = -x[label]; mean with weights = Σ w·l / Σ w.
    let x = t(&[2, 3], vec![-1.0f32, -2.0, -3.0, -0.5, -1.5, -2.5]);
    let y = t(&[2], vec![2i64, 0]);
    let w = t(&[3], vec![1.0f32, 2.0, 4.0]);
    let o = build("NegativeLogLikelihoodLoss", &attrs("none", None), 1).unwrap();
    let r = run(o.as_ref(), &[Some(&x), Some(&y), None]).unwrap();
    assert_eq!(r[0], t(&[2], vec![3.0f32, 0.5]));
    let o = build("NegativeLogLikelihoodLoss", &attrs("mean", None), 1).unwrap();
    let r = run(o.as_ref(), &[Some(&x), Some(&y), Some(&w)]).unwrap();
    assert_eq!(r[0], Tensor::scalar((4.0f32 * 3.0 + 0.5) / 5.0));
    // SCE with equal scores: every class has probability 1/C.
    let x = t(&[2, 4], vec![0.0f32; 8]);
    let y = t(&[2], vec![1i64, 3]);
    let o = build("SoftmaxCrossEntropyLoss", &attrs("sum", None), 2).unwrap();
    let r = run(o.as_ref(), &[Some(&x), Some(&y), None]).unwrap();
    close(&r[0], &[2.0 * 4f64.ln()], 1e-6);
    close(&r[1], &[-(4f64.ln()); 8], 1e-6);
}

#[test]
fn ignore_index_edge_cases() {
    let x = t(&[2, 3], data(6, 3));
    // ignore_index naming a valid class: those entries count neither in the
    // sum nor in the mean's denominator.
    let y = t(&[2], vec![1i64, 2]);
    for op in ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"] {
        let o = build(op, &attrs("mean", Some(1)), 1).unwrap();
        let none = build(op, &attrs("none", Some(1)), 1).unwrap();
        let all = run(none.as_ref(), &[Some(&x), Some(&y), None]).unwrap()[0]
            .to_f64_vec()
            .unwrap();
        assert_eq!(all[0], 0.0);
        let m = run(o.as_ref(), &[Some(&x), Some(&y), None]).unwrap();
        close(&m[0], &[all[1]], 1e-6);
        // Every entry ignored: mean is 0/0 = NaN, sum is 0.
        let yi = t(&[2], vec![1i64, 1]);
        let m = run(o.as_ref(), &[Some(&x), Some(&yi), None]).unwrap();
        assert!(m[0].to_f64_vec().unwrap()[0].is_nan());
        let s = build(op, &attrs("sum", Some(1)), 1).unwrap();
        let r = run(s.as_ref(), &[Some(&x), Some(&yi), None]).unwrap();
        assert_eq!(r[0], Tensor::scalar(0.0f32));
        // An ignored label may lie outside [0, C), weights or not.
        let w = t(&[3], vec![1.0f32, 2.0, 3.0]);
        let o = build(op, &attrs("mean", Some(-7)), 1).unwrap();
        let yo = t(&[2], vec![-7i64, 2]);
        assert!(run(o.as_ref(), &[Some(&x), Some(&yo), Some(&w)]).is_ok());
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let x = t(&[2, 3], data(6, 4));
    for op in ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"] {
        let o = build(op, &attrs("mean", Some(0)), 1).unwrap();
        for bad in [vec![3i64, 1], vec![-1, 1], vec![1, i64::MAX]] {
            let y = t(&[2], bad);
            let e = o.run(&[Some(&x), Some(&y), None]).unwrap_err();
            assert!(e.to_string().contains("outside"), "{e}");
        }
        let y = t(&[2], vec![0i64, 1]);
        // Rank-1 scores, mismatched labels, bad weights and types.
        let x1 = t(&[3], vec![0.0f32; 3]);
        assert!(o.run(&[Some(&x1), Some(&y), None]).is_err());
        assert!(o
            .run(&[Some(&x), Some(&t(&[3], vec![0i64; 3])), None])
            .is_err());
        assert!(o
            .run(&[Some(&x), Some(&t(&[2, 1], vec![0i64; 2])), None])
            .is_err());
        assert!(o
            .run(&[Some(&x), Some(&y), Some(&t(&[2], vec![1.0f32; 2]))])
            .is_err());
        assert!(o
            .run(&[Some(&x), Some(&y), Some(&t(&[3], vec![1.0f64; 3]))])
            .is_err());
        assert!(o
            .run(&[Some(&x), Some(&t(&[2], vec![0.0f32; 2])), None])
            .is_err());
        assert!(o
            .run(&[Some(&t(&[2, 3], vec![0i64; 6])), Some(&y), None])
            .is_err());
        assert!(o.run(&[Some(&x), None, None]).is_err());
        assert!(build(op, &attrs("avg", None), 1).is_err());
    }
    assert!(build("NegativeLogLikelihoodLoss", &[], 2).is_err());
    assert!(build("SoftmaxCrossEntropyLoss", &[], 3).is_err());
    // Empty batch: `none` is empty, mean is NaN.
    let o = build("SoftmaxCrossEntropyLoss", &attrs("mean", None), 1).unwrap();
    let r = o.run(&[
        Some(&t(&[0, 3], Vec::<f32>::new())),
        Some(&t(&[0], Vec::<i64>::new())),
        None,
    ]);
    assert!(r.unwrap()[0].to_f64_vec().unwrap()[0].is_nan());
    let _ = build_op("SoftmaxCrossEntropyLoss", &[], 13, &[]).unwrap();
}

#[test]
fn other_float_types() {
    let (n, c, d) = (2usize, 4usize, 3usize);
    let xv = data(n * c * d, 9);
    let xd: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
    let tg = labels(n * d, c, 10);
    let y = t(&[n, d], tg.clone());
    let wd = [1.0, 0.5, 2.0, 1.5];
    let cases = [
        (t(&[n, c, d], xd.clone()), t(&[c], wd.to_vec()), 1e-12),
        (
            t(
                &[n, c, d],
                xv.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>(),
            ),
            t(
                &[c],
                wd.iter().map(|&v| f16::from_f64(v)).collect::<Vec<_>>(),
            ),
            2e-3,
        ),
        (
            t(
                &[n, c, d],
                xv.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>(),
            ),
            t(
                &[c],
                wd.iter().map(|&v| bf16::from_f64(v)).collect::<Vec<_>>(),
            ),
            2e-2,
        ),
    ];
    for (x, w, tol) in &cases {
        let xr = x.to_f64_vec().unwrap();
        for sce in [true, false] {
            let op = if sce {
                "SoftmaxCrossEntropyLoss"
            } else {
                "NegativeLogLikelihoodLoss"
            };
            for red in ["none", "mean"] {
                let (want, _) = reference(sce, &xr, (n, c, d), &tg, Some(&wd), red, Some(1));
                let o = build(op, &attrs(red, Some(1)), 1).unwrap();
                let r = run(o.as_ref(), &[Some(x), Some(&y), Some(w)]).unwrap();
                assert_eq!(r[0].dtype(), x.dtype());
                close(&r[0], &want, *tol);
            }
        }
    }
}

#[test]
fn thread_count_does_not_change_results() {
    let (n, c, d) = (4usize, 10usize, 5000usize);
    let x = t(&[n, c, 50, 100], data(n * c * d, 11));
    let y = t(&[n, 50, 100], labels(n * d, c, 12));
    let w = t(&[c], data(c, 13));
    let pool = |k| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(k)
            .build()
            .unwrap()
    };
    for op in ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"] {
        for red in ["none", "sum", "mean"] {
            let outs = if op.starts_with('S') { 2 } else { 1 };
            let o = build(op, &attrs(red, Some(3)), outs).unwrap();
            let go = || o.run(&[Some(&x), Some(&y), Some(&w)]).unwrap();
            assert_eq!(pool(1).install(go), pool(3).install(go));
        }
    }
}
