//! Tests for the packed-weights f32 kernel: bit-exact against an in-order
//! `mul_add` chain, both kernels alike, any pool size alike, and through
//! the MatMul operator with a constant B.

use super::fused::Activation;
use super::packed::{Kernel, PackedEpilogue, PackedWeights};
use crate::ir::Fusion;
use crate::ops::testutil::*;
use crate::tensor::Tensor;

/// `act(Σ_kk a[i,kk]·b[kk,j] (one rounding per step, in order) + bias[j])`.
fn reference(
    a: &[f32],
    b: &[f32],
    (m, k, n): (usize, usize, usize),
    bias: Option<&[f32]>,
    act: Option<Activation>,
) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for kk in 0..k {
                acc = a[i * k + kk].mul_add(b[kk * n + j], acc);
            }
            if let Some(bias) = bias {
                acc += bias[j];
            }
            if let Some(act) = act {
                acc = act.eval(acc);
            }
            out[i * n + j] = acc;
        }
    }
    out
}

fn kernels() -> Vec<Kernel> {
    [Kernel::Avx512, Kernel::Avx2]
        .into_iter()
        .filter(|k| k.available())
        .collect()
}

fn bits32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The packed product of `a` (m×k) and `b` (k×n, or n×k when `trans`).
#[allow(clippy::too_many_arguments)]
fn packed(
    kernel: Kernel,
    a: &[f32],
    b: &[f32],
    (m, k, n): (usize, usize, usize),
    trans: bool,
    bias: Option<&[f32]>,
    act: Option<Activation>,
) -> Vec<f32> {
    let w = PackedWeights::for_kernel(b, k, n, trans, kernel).unwrap();
    assert_eq!(w.kernel(), kernel);
    let mut out = vec![f32::NAN; m * n];
    w.matmul("MatMul", a, m, PackedEpilogue { bias, act }, &mut out)
        .unwrap();
    out
}

fn transpose(b: &[f32], k: usize, n: usize) -> Vec<f32> {
    let mut t = vec![0.0; k * n];
    for kk in 0..k {
        for j in 0..n {
            t[j * k + kk] = b[kk * n + j];
        }
    }
    t
}

#[test]
fn kernels_give_the_in_order_fma_chain_bits() {
    let shapes = [
        (1, 1, 1),
        (1, 7, 33),
        (13, 7, 33),
        (12, 16, 32),
        (6, 3, 16),
        (25, 1, 17),
        (5, 40, 1),
        (37, 64, 65),
        (24, 9, 96),
        // Two passes over k, the second resuming the sums (also at the edge).
        (5, 600, 40),
        // Lone rows against several panels at once (and the panels left
        // over, and the edge), in one and in two passes over k; the last
        // row block of 13 rows is a lone row too.
        (1, 40, 128),
        (1, 600, 300),
        (13, 50, 200),
    ];
    let acts = [
        None,
        Some(Activation::Relu),
        Some(Activation::Gelu),
        Some(Activation::Clip(-0.25, 0.5)),
    ];
    for kernel in kernels() {
        for (s, &(m, k, n)) in shapes.iter().enumerate() {
            let seed = 100 + 10 * s as u64;
            let a = rand_vec(m * k, seed);
            let b = rand_vec(k * n, seed + 1);
            let bias = rand_vec(n, seed + 2);
            let bt = transpose(&b, k, n);
            for with_bias in [false, true] {
                for act in acts {
                    let bias = with_bias.then_some(bias.as_slice());
                    let want = bits32(&reference(&a, &b, (m, k, n), bias, act));
                    with_threads(1, || {
                        let got = packed(kernel, &a, &b, (m, k, n), false, bias, act);
                        assert_eq!(bits32(&got), want, "{kernel:?} {m}×{k}×{n} {act:?}");
                        let got = packed(kernel, &a, &bt, (m, k, n), true, bias, act);
                        assert_eq!(bits32(&got), want, "{kernel:?} Bᵀ {m}×{k}×{n}");
                    });
                }
            }
        }
    }
}

#[test]
fn pool_size_and_kernel_do_not_change_bits() {
    // Transformer-like shapes, large enough to be split into many tasks;
    // the last in three passes over k and several groups of panels.
    for (s, &(m, k, n)) in [
        (197, 192, 768),
        (128, 128, 128),
        (50, 96, 70),
        (30, 1100, 1500),
    ]
    .iter()
    .enumerate()
    {
        let seed = 500 + 10 * s as u64;
        let a = rand_vec(m * k, seed);
        let b = rand_vec(k * n, seed + 1);
        let bias = rand_vec(n, seed + 2);
        let want = bits32(&reference(
            &a,
            &b,
            (m, k, n),
            Some(&bias),
            Some(Activation::Gelu),
        ));
        for kernel in kernels() {
            for threads in [1, 2, 3] {
                let got = with_threads(threads, || {
                    packed(
                        kernel,
                        &a,
                        &b,
                        (m, k, n),
                        false,
                        Some(&bias),
                        Some(Activation::Gelu),
                    )
                });
                assert_eq!(
                    bits32(&got),
                    want,
                    "{kernel:?} {threads} threads {m}×{k}×{n}"
                );
            }
        }
    }
}

#[test]
fn bad_sizes_are_errors_and_empty_dims_do_not_pack() {
    let Some(kernel) = kernels().first().copied() else {
        return;
    };
    let b = rand_vec(12, 1);
    assert!(PackedWeights::for_kernel(&b, 3, 5, false, kernel).is_none());
    assert!(PackedWeights::for_kernel(&[], 0, 4, false, kernel).is_none());
    assert!(PackedWeights::for_kernel(&[], 4, 0, false, kernel).is_none());
    // Too large to keep a second copy of.
    let (big_k, big_n) = (4096, 2049);
    let big = vec![0.0; big_k * big_n];
    assert!(PackedWeights::for_kernel(&big, big_k, big_n, false, kernel).is_none());
    assert!(PackedWeights::for_kernel(&big[..big_k * 2048], big_k, 2048, false, kernel).is_some());
    let w = PackedWeights::for_kernel(&b, 3, 4, false, kernel).unwrap();
    let epi = PackedEpilogue::default();
    let mut out = vec![0.0; 8];
    assert!(w.matmul("MatMul", &[0.0; 5], 2, epi, &mut out).is_err());
    assert!(w
        .matmul("MatMul", &[0.0; 6], 2, epi, &mut out[..7])
        .is_err());
    assert!(w
        .matmul("MatMul", &[0.0; 6], usize::MAX, epi, &mut out)
        .is_err());
    let bias = [0.0; 3];
    let epi = PackedEpilogue {
        bias: Some(&bias),
        act: None,
    };
    assert!(w.matmul("MatMul", &[0.0; 6], 2, epi, &mut out).is_err());
    // No rows: nothing to do.
    w.matmul("MatMul", &[], 0, PackedEpilogue::default(), &mut [])
        .unwrap();
}

fn values(t: &Tensor) -> Vec<f32> {
    t.array::<f32>().unwrap().iter().copied().collect()
}

#[test]
fn matmul_with_a_constant_b_gives_the_chain_bits() {
    if kernels().is_empty() {
        return;
    }
    let (k, n) = (40, 45);
    let w = rand_tensor(&[k, n], 61);
    let bias = rand_tensor(&[n], 62);
    let (wv, bv) = (values(&w), values(&bias));
    // A batch of A folded into one tall A, and a single row.
    for a_shape in [vec![2, 13, k], vec![k], vec![19, k]] {
        let a = rand_tensor(&a_shape, 63);
        let m = a.len() / k;
        let plain = build_op("MatMul", 13, &[], &[None, Some(&w)], 2, 1).unwrap();
        let out = infer_and_run(plain.as_ref(), &[Some(&a), Some(&w)]).unwrap();
        let want = reference(&values(&a), &wv, (m, k, n), None, None);
        assert_eq!(bits32(&values(&out[0])), bits32(&want), "{a_shape:?}");
        // A runtime B of another shape takes the general path.
        let w2 = rand_tensor(&[k, 3], 64);
        let out = infer_and_run(plain.as_ref(), &[Some(&a), Some(&w2)]).unwrap();
        assert_eq!(out[0].len(), m * 3);

        let fusion = Fusion {
            bias: true,
            ..activation(Activation::Gelu)
        };
        let consts = [None, Some(&w), Some(&bias)];
        let fused = build_fused("MatMul", 13, &[], &fusion, &consts, 3, 1).unwrap();
        let out = infer_and_run(fused.as_ref(), &[Some(&a), Some(&w), Some(&bias)]).unwrap();
        let want = reference(
            &values(&a),
            &wv,
            (m, k, n),
            Some(&bv),
            Some(Activation::Gelu),
        );
        assert_eq!(bits32(&values(&out[0])), bits32(&want), "fused {a_shape:?}");
    }
}

#[test]
fn gemm_with_a_constant_b_gives_the_chain_bits() {
    if kernels().is_empty() {
        return;
    }
    let (m, k, n) = (14, 23, 37);
    let a = rand_tensor(&[m, k], 71);
    let b = rand_vec(k * n, 72);
    let c = rand_vec(n, 73);
    let (av, beta) = (values(&a), 0.5f32);
    for trans_b in [false, true] {
        let w = if trans_b {
            Tensor::from_vec(&[n, k], transpose(&b, k, n)).unwrap()
        } else {
            Tensor::from_vec(&[k, n], b.clone()).unwrap()
        };
        // C per column ([n], [1, n]), a scalar C, no C.
        let cases: Vec<(Option<Tensor>, Option<Vec<f32>>)> = vec![
            (
                Some(Tensor::from_vec(&[n], c.clone()).unwrap()),
                Some(c.iter().map(|v| beta * v).collect()),
            ),
            (
                Some(Tensor::from_vec(&[1, n], c.clone()).unwrap()),
                Some(c.iter().map(|v| beta * v).collect()),
            ),
            (
                Some(Tensor::from_vec(&[], vec![c[0]]).unwrap()),
                Some(vec![beta * c[0]; n]),
            ),
            (None, None),
        ];
        for (cm, bias) in cases {
            let attrs = [("transB", int(trans_b as i64)), ("beta", float(beta))];
            let fusion = activation(Activation::Relu);
            let consts = [None, Some(&w), cm.as_ref()];
            let op = build_fused("Gemm", 13, &attrs, &fusion, &consts, 3, 1).unwrap();
            let out = infer_and_run(op.as_ref(), &[Some(&a), Some(&w), cm.as_ref()]).unwrap();
            let want = reference(&av, &b, (m, k, n), bias.as_deref(), Some(Activation::Relu));
            assert_eq!(
                bits32(&values(&out[0])),
                bits32(&want),
                "transB {trans_b} C {:?}",
                cm.as_ref().map(|t| t.shape().to_vec())
            );
        }
        // C varying along rows, alpha ≠ 1 or a transposed A: the general
        // path, still the right values.
        let full = rand_tensor(&[m, n], 74);
        let plain = reference(&av, &b, (m, k, n), None, None);
        let fv = values(&full);
        for (attrs, a_in, scale, with_c) in [
            (
                vec![("transB", int(trans_b as i64))],
                a.clone(),
                1.0f32,
                true,
            ),
            (
                vec![("transB", int(trans_b as i64)), ("alpha", float(2.0))],
                a.clone(),
                2.0,
                false,
            ),
            (
                vec![("transB", int(trans_b as i64)), ("transA", int(1))],
                Tensor::from_vec(&[k, m], transpose(&av, m, k)).unwrap(),
                1.0,
                false,
            ),
        ] {
            let cin = with_c.then_some(&full);
            let op = build_op("Gemm", 13, &attrs, &[None, Some(&w), cin], 3, 1).unwrap();
            let out = infer_and_run(op.as_ref(), &[Some(&a_in), Some(&w), cin]).unwrap();
            let want: Vec<f64> = plain
                .iter()
                .enumerate()
                .map(|(i, &v)| (scale * v) as f64 + if with_c { fv[i] as f64 } else { 0.0 })
                .collect();
            assert_tensor_close(&out[0], &want, 1e-5, 1e-5);
        }
    }
}

/// Unpacking gives back every weight bit for bit, B as given or transposed,
/// for column counts that fill their last panel and counts that do not.
#[test]
fn unpack_inverts_packing() {
    for kernel in [Kernel::Avx512, Kernel::Avx2] {
        for (k, n) in [(3, 16), (5, 33), (1, 1), (7, 64)] {
            for trans in [false, true] {
                let b = rand_vec(k * n, (k * 100 + n) as u64);
                let Some(packed) = PackedWeights::for_kernel(&b, k, n, trans, kernel) else {
                    continue;
                };
                let back = packed.unpack(trans);
                assert!(back.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
                assert_eq!(back.len(), b.len());
            }
        }
    }
}
