//! Attention tests against a naive f64 reference (4-D layout, GQA, past
//! cache, masks, causal, softcap, qk_matmul_output modes), the 3-D layout,
//! error paths and thread-count independence.

use crate::ir::attributes::{Attribute, Attributes};
use crate::ir::{BuildContext, Operator};
use crate::ops::unary::kernel::tests::run_op;
use crate::tensor::Tensor;
use half::f16;

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn t(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, v).unwrap()
}

fn build(attrs: &[(&str, Attribute)], outputs: usize) -> crate::Result<Box<dyn Operator>> {
    let map = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let attrs = Attributes::new("node", "Attention", map);
    let ctx = BuildContext {
        attrs: &attrs,
        opset: 24,
        consts: &[],
        num_inputs: 7,
        num_outputs: outputs,
        fusion: &crate::ir::Fusion::NONE,
    };
    crate::ops::build("", "Attention", &ctx)
}

fn run_all(
    attrs: &[(&str, Attribute)],
    outputs: usize,
    ins: &[Option<&Tensor>],
) -> crate::Result<Vec<Tensor>> {
    let o = build(attrs, outputs)?;
    run_op(o.as_ref(), ins)?;
    o.run(ins)
}

fn close(got: &Tensor, want: &[f64], tol: f64) {
    let got = got.to_f64_vec().unwrap();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

/// Sizes of a naive 4-D problem.
struct Case {
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    past: usize,
    dh: usize,
    dv: usize,
}

/// Naive attention in f64 on 4-D data; `mask(b, h, i, j)` is additive.
/// Returns Y and the scores after softcap and bias (mode 2).
fn naive(
    c: &Case,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    softcap: f64,
    causal: bool,
    mask: &dyn Fn(usize, usize, usize, usize) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let total = c.past + c.skv;
    let scale = 1.0 / (c.dh as f64).sqrt();
    let mut y = vec![0.0; c.b * c.hq * c.sq * c.dv];
    let mut qk = vec![0.0; c.b * c.hq * c.sq * total];
    for b in 0..c.b {
        for h in 0..c.hq {
            let hk = h / (c.hq / c.hkv);
            for i in 0..c.sq {
                let mut s = vec![0.0; total];
                for (j, sj) in s.iter_mut().enumerate() {
                    let mut d = 0.0;
                    for e in 0..c.dh {
                        d += q[((b * c.hq + h) * c.sq + i) * c.dh + e] as f64
                            * k[((b * c.hkv + hk) * total + j) * c.dh + e] as f64;
                    }
                    d *= scale;
                    if softcap > 0.0 {
                        d = softcap * (d / softcap).tanh();
                    }
                    d += mask(b, h, i, j);
                    if causal && j > i + c.past {
                        d = f64::NEG_INFINITY;
                    }
                    *sj = d;
                }
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                let r = (b * c.hq + h) * c.sq + i;
                qk[r * total..(r + 1) * total].copy_from_slice(&s);
                for (j, ej) in e.iter().enumerate() {
                    for d in 0..c.dv {
                        y[r * c.dv + d] +=
                            ej / sum * v[((b * c.hkv + hk) * total + j) * c.dv + d] as f64;
                    }
                }
            }
        }
    }
    (y, qk)
}

#[test]
fn gqa_past_mask_causal_softcap_match_naive() {
    let c = Case {
        b: 2,
        hq: 4,
        hkv: 2,
        sq: 3,
        skv: 4,
        past: 2,
        dh: 8,
        dv: 5,
    };
    let total = c.past + c.skv;
    let q = data(c.b * c.hq * c.sq * c.dh, 1);
    let k = data(c.b * c.hkv * c.skv * c.dh, 2);
    let v = data(c.b * c.hkv * c.skv * c.dv, 3);
    let pk = data(c.b * c.hkv * c.past * c.dh, 4);
    let pv = data(c.b * c.hkv * c.past * c.dv, 5);
    // A [sq, total - 1] float mask: the padded last column is -inf.
    let m = data(c.sq * (total - 1), 6);
    // Full K/V in [b, hkv, total, d] for the naive reference.
    let cat = |p: &[f32], n: &[f32], d: usize| {
        let mut o = Vec::new();
        for bh in 0..c.b * c.hkv {
            o.extend_from_slice(&p[bh * c.past * d..(bh + 1) * c.past * d]);
            o.extend_from_slice(&n[bh * c.skv * d..(bh + 1) * c.skv * d]);
        }
        o
    };
    let (fk, fv) = (cat(&pk, &k, c.dh), cat(&pv, &v, c.dv));
    let mask = |_b: usize, _h: usize, i: usize, j: usize| {
        if j < total - 1 {
            m[i * (total - 1) + j] as f64
        } else {
            f64::NEG_INFINITY
        }
    };
    let (y, qk) = naive(&c, &q, &fk, &fv, 1.5, true, &mask);
    let ins = [
        t(&[c.b, c.hq, c.sq, c.dh], q),
        t(&[c.b, c.hkv, c.skv, c.dh], k),
        t(&[c.b, c.hkv, c.skv, c.dv], v),
        t(&[c.sq, total - 1], m),
        t(&[c.b, c.hkv, c.past, c.dh], pk),
        t(&[c.b, c.hkv, c.past, c.dv], pv),
    ];
    let ins: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    let attrs = [
        ("is_causal", Attribute::Int(1)),
        ("softcap", Attribute::Float(1.5)),
        ("qk_matmul_output_mode", Attribute::Int(2)),
    ];
    let out = run_all(&attrs, 4, &ins).unwrap();
    close(&out[0], &y, 1e-5);
    close(
        &out[1],
        &fk.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        0.0,
    );
    close(
        &out[2],
        &fv.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        0.0,
    );
    let got = out[3].to_f64_vec().unwrap();
    for (g, w) in got.iter().zip(&qk) {
        assert!(
            g == w || (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{g} vs {w}"
        );
    }
}

#[test]
fn three_d_layout_matches_four_d() {
    let (b, hq, hkv, sq, skv, dh) = (2, 4, 2, 3, 5, 4);
    let q = data(b * sq * hq * dh, 7);
    let k = data(b * skv * hkv * dh, 8);
    let v = data(b * skv * hkv * dh, 9);
    // [b, s, h, d] -> [b, h, s, d]
    let tr = |x: &[f32], s: usize, h: usize| {
        let mut o = vec![0.0; x.len()];
        for bb in 0..b {
            for ss in 0..s {
                for hh in 0..h {
                    for d in 0..dh {
                        o[((bb * h + hh) * s + ss) * dh + d] = x[((bb * s + ss) * h + hh) * dh + d];
                    }
                }
            }
        }
        o
    };
    let heads = [
        ("q_num_heads", Attribute::Int(hq as i64)),
        ("kv_num_heads", Attribute::Int(hkv as i64)),
    ];
    let (q3, k3, v3) = (
        t(&[b, sq, hq * dh], q.clone()),
        t(&[b, skv, hkv * dh], k.clone()),
        t(&[b, skv, hkv * dh], v.clone()),
    );
    let y3 = run_all(&heads, 3, &[Some(&q3), Some(&k3), Some(&v3)]).unwrap();
    let (q4, k4, v4) = (
        t(&[b, hq, sq, dh], tr(&q, sq, hq)),
        t(&[b, hkv, skv, dh], tr(&k, skv, hkv)),
        t(&[b, hkv, skv, dh], tr(&v, skv, hkv)),
    );
    let y4 = run_all(&[], 3, &[Some(&q4), Some(&k4), Some(&v4)]).unwrap();
    assert_eq!(y3[1], y4[1]);
    assert_eq!(y3[2], y4[2]);
    // Y3 is [b, sq, hq*dh]: transpose back and compare.
    let y3v: Vec<f32> = y3[0]
        .to_f64_vec()
        .unwrap()
        .iter()
        .map(|&x| x as f32)
        .collect();
    assert_eq!(
        tr(&y3v, sq, hq),
        y4[0]
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|&x| x as f32)
            .collect::<Vec<_>>()
    );
}

#[test]
fn uniform_scores_average_values_and_fully_masked_rows_are_zero() {
    // Q = 0: every score equal, so Y is the mean of V's rows.
    let q = t(&[1, 1, 2, 2], vec![0.0; 4]);
    let k = t(&[1, 1, 3, 2], data(6, 10));
    let v = t(&[1, 1, 3, 1], vec![1.0, 2.0, 6.0]);
    let mask = Tensor::from_vec(&[2, 3], vec![true, true, true, false, false, false]).unwrap();
    let out = run_all(
        &[("qk_matmul_output_mode", Attribute::Int(3))],
        4,
        &[Some(&q), Some(&k), Some(&v), Some(&mask)],
    )
    .unwrap();
    close(&out[0], &[3.0, 0.0], 1e-6);
    close(
        &out[3],
        &[1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0, 0.0, 0.0, 0.0],
        1e-6,
    );
}

#[test]
fn nonpad_kv_seqlen_masks_padding() {
    let q = t(&[2, 1, 1, 2], vec![0.0; 4]);
    let k = t(&[2, 1, 3, 2], data(12, 11));
    let v = t(&[2, 1, 3, 1], vec![1.0, 2.0, 6.0, 4.0, 8.0, 100.0]);
    let n = Tensor::from_vec(&[2], vec![1i64, 2]).unwrap();
    let out = run_all(
        &[],
        1,
        &[Some(&q), Some(&k), Some(&v), None, None, None, Some(&n)],
    )
    .unwrap();
    close(&out[0], &[1.0, 6.0], 1e-6);
}

#[test]
fn f16_is_close_to_f32() {
    let q = data(2 * 3 * 4 * 8, 12);
    let k = data(2 * 3 * 5 * 8, 13);
    let v = data(2 * 3 * 5 * 8, 14);
    let h = |x: &[f32]| x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>();
    let f = |x: &[f32]| {
        x.iter()
            .map(|&v| f16::from_f32(v).to_f32())
            .collect::<Vec<_>>()
    };
    let r16 = run_all(
        &[("is_causal", Attribute::Int(1))],
        1,
        &[
            Some(&Tensor::from_vec(&[2, 3, 4, 8], h(&q)).unwrap()),
            Some(&Tensor::from_vec(&[2, 3, 5, 8], h(&k)).unwrap()),
            Some(&Tensor::from_vec(&[2, 3, 5, 8], h(&v)).unwrap()),
        ],
    )
    .unwrap();
    let r32 = run_all(
        &[("is_causal", Attribute::Int(1))],
        1,
        &[
            Some(&t(&[2, 3, 4, 8], f(&q))),
            Some(&t(&[2, 3, 5, 8], f(&k))),
            Some(&t(&[2, 3, 5, 8], f(&v))),
        ],
    )
    .unwrap();
    close(&r16[0], &r32[0].to_f64_vec().unwrap(), 1e-2);
}

#[test]
fn bad_inputs_are_errors() {
    let q4 = t(&[1, 3, 2, 4], data(24, 1));
    let k4 = t(&[1, 2, 2, 4], data(16, 2));
    let q3 = t(&[1, 2, 8], data(16, 3));
    // 3 q heads over 2 kv heads.
    assert!(run_all(&[], 1, &[Some(&q4), Some(&k4), Some(&k4)]).is_err());
    // Rank mismatch.
    assert!(run_all(&[], 1, &[Some(&q3), Some(&k4), Some(&k4)]).is_err());
    // 3-D without head counts.
    assert!(run_all(&[], 1, &[Some(&q3), Some(&q3), Some(&q3)]).is_err());
    // past_key without past_value.
    let k = t(&[1, 3, 2, 4], data(24, 4));
    assert!(run_all(&[], 1, &[Some(&q4), Some(&k), Some(&k), None, Some(&k)]).is_err());
    // Mask that does not broadcast.
    let m = t(&[3, 2], vec![0.0; 6]);
    assert!(run_all(&[], 1, &[Some(&q4), Some(&k), Some(&k), Some(&m)]).is_err());
    assert!(build(&[("qk_matmul_output_mode", Attribute::Int(4))], 1).is_err());
    assert!(build(&[("softcap", Attribute::Float(-1.0))], 1).is_err());
}

#[test]
fn same_bits_at_any_thread_count() {
    let (b, h, s, d) = (2, 4, 64, 32);
    let q = t(&[b, h, s, d], data(b * h * s * d, 20));
    let k = t(&[b, h, s, d], data(b * h * s * d, 21));
    let v = t(&[b, h, s, d], data(b * h * s * d, 22));
    let go = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            run_all(
                &[
                    ("is_causal", Attribute::Int(1)),
                    ("qk_matmul_output_mode", Attribute::Int(3)),
                ],
                4,
                &[Some(&q), Some(&k), Some(&v)],
            )
            .unwrap()
        })
    };
    assert_eq!(go(1), go(3));
}
