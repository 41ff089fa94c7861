//! LinearAttention tests: a naive f64 recurrence written from the spec's
//! formulas for every update rule (GQA, per-head or per-key decay, shared
//! or per-head beta, past state), prefill in pieces equals one pass, a state
//! type other than the activations', edge sizes and the errors.

use crate::ir::attributes::Attribute;
use crate::ir::Operator;
use crate::ops::attention::support::testing::{build, close, data, message, run, t};
use crate::tensor::{DType, Tensor};
use half::f16;

fn op(rule: &str, hq: i64, hkv: i64, scale: Option<f32>) -> Box<dyn Operator> {
    let mut attrs = vec![
        ("q_num_heads", Attribute::Int(hq)),
        ("kv_num_heads", Attribute::Int(hkv)),
        ("update_rule", Attribute::String(rule.as_bytes().to_vec())),
    ];
    attrs.extend(scale.map(|s| ("scale", Attribute::Float(s))));
    build("", "LinearAttention", 27, attrs, 6, 2).unwrap()
}

/// Problem sizes.
#[derive(Clone, Copy)]
struct Case {
    b: usize,
    t: usize,
    hq: usize,
    hkv: usize,
    dk: usize,
    dv: usize,
    /// Decay per key dimension (else per head).
    per_key: bool,
    /// Beta per head (else shared).
    per_head: bool,
}

struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    past: Vec<f32>,
    decay: Vec<f32>,
    beta: Vec<f32>,
}

impl Case {
    fn inputs(&self, seed: u64) -> Inputs {
        let bt = self.b * self.t;
        let dw = if self.per_key {
            self.hkv * self.dk
        } else {
            self.hkv
        };
        let bw = if self.per_head { self.hkv } else { 1 };
        Inputs {
            q: data(bt * self.hq * self.dk, seed),
            k: data(bt * self.hkv * self.dk, seed + 1)
                .iter()
                .map(|x| x * 0.3)
                .collect(),
            v: data(bt * self.hkv * self.dv, seed + 2),
            past: data(self.b * self.hkv * self.dk * self.dv, seed + 3),
            // Log-space decays in (-1, 0) and betas in (0, 1).
            decay: data(bt * dw, seed + 4)
                .iter()
                .map(|x| -(x.abs() / 2.0))
                .collect(),
            beta: data(bt * bw, seed + 5)
                .iter()
                .map(|x| x.abs() / 2.0)
                .collect(),
        }
    }

    fn tensors(&self, x: &Inputs) -> Vec<Tensor> {
        let (b, tt) = (self.b, self.t);
        vec![
            t(&[b, tt, self.hq * self.dk], x.q.clone()),
            t(&[b, tt, self.hkv * self.dk], x.k.clone()),
            t(&[b, tt, self.hkv * self.dv], x.v.clone()),
            t(&[b, self.hkv, self.dk, self.dv], x.past.clone()),
            t(&[b, tt, x.decay.len() / (b * tt).max(1)], x.decay.clone()),
            t(&[b, tt, x.beta.len() / (b * tt).max(1)], x.beta.clone()),
        ]
    }
}

/// The spec's recurrence in f64: output and present state.
fn naive(c: Case, x: &Inputs, rule: &str, past: bool, scale: f64) -> (Vec<f64>, Vec<f64>) {
    let gated = rule.starts_with("gated");
    let delta = rule.ends_with("delta");
    let group = c.hq / c.hkv;
    let mut y = vec![0.0; c.b * c.t * c.hq * c.dv];
    let mut present = vec![];
    for b in 0..c.b {
        for hk in 0..c.hkv {
            let base = (b * c.hkv + hk) * c.dk * c.dv;
            let mut s: Vec<f64> = if past {
                x.past[base..base + c.dk * c.dv]
                    .iter()
                    .map(|&v| v as f64)
                    .collect()
            } else {
                vec![0.0; c.dk * c.dv]
            };
            for ti in 0..c.t {
                let bt = b * c.t + ti;
                let k: Vec<f64> = (0..c.dk)
                    .map(|d| x.k[(bt * c.hkv + hk) * c.dk + d] as f64)
                    .collect();
                let v: Vec<f64> = (0..c.dv)
                    .map(|m| x.v[(bt * c.hkv + hk) * c.dv + m] as f64)
                    .collect();
                let g = |d: usize| -> f64 {
                    if !gated {
                        1.0
                    } else if c.per_key {
                        (x.decay[(bt * c.hkv + hk) * c.dk + d] as f64).exp()
                    } else {
                        (x.decay[bt * c.hkv + hk] as f64).exp()
                    }
                };
                let beta = if c.per_head {
                    x.beta[bt * c.hkv + hk]
                } else {
                    x.beta[bt]
                } as f64;
                // S_t = G·S + β·k ⊗ (v − (G·S)ᵀk), or S_t = G·S + k ⊗ v.
                let gs: Vec<f64> = (0..c.dk * c.dv).map(|i| g(i / c.dv) * s[i]).collect();
                for m in 0..c.dv {
                    let u = if delta {
                        let stk: f64 = (0..c.dk).map(|d| gs[d * c.dv + m] * k[d]).sum();
                        beta * (v[m] - stk)
                    } else {
                        v[m]
                    };
                    for d in 0..c.dk {
                        s[d * c.dv + m] = gs[d * c.dv + m] + k[d] * u;
                    }
                }
                for h in hk * group..(hk + 1) * group {
                    for m in 0..c.dv {
                        let o: f64 = (0..c.dk)
                            .map(|d| x.q[(bt * c.hq + h) * c.dk + d] as f64 * s[d * c.dv + m])
                            .sum();
                        y[(bt * c.hq + h) * c.dv + m] = scale * o;
                    }
                }
            }
            present.extend(s);
        }
    }
    (y, present)
}

fn refs<'a>(ts: &'a [Tensor], rule: &str, past: bool) -> Vec<Option<&'a Tensor>> {
    let gated = rule.starts_with("gated");
    let delta = rule.ends_with("delta");
    vec![
        Some(&ts[0]),
        Some(&ts[1]),
        Some(&ts[2]),
        past.then_some(&ts[3]),
        gated.then_some(&ts[4]),
        delta.then_some(&ts[5]),
    ]
}

#[test]
fn every_rule_matches_naive() {
    let base = Case {
        b: 2,
        t: 5,
        hq: 4,
        hkv: 2,
        dk: 3,
        dv: 4,
        per_key: true,
        per_head: true,
    };
    let variants = [
        base,
        Case {
            per_key: false,
            per_head: false,
            ..base
        },
        Case { hq: 2, ..base },
        Case {
            hkv: 1,
            hq: 3,
            ..base
        },
    ];
    for (i, c) in variants.into_iter().enumerate() {
        let x = c.inputs(10 * i as u64);
        let ts = c.tensors(&x);
        for rule in ["linear", "gated", "delta", "gated_delta"] {
            for past in [false, true] {
                let (wy, ws) = naive(c, &x, rule, past, 1.0 / (c.dk as f64).sqrt());
                let got = run(
                    op(rule, c.hq as i64, c.hkv as i64, None).as_ref(),
                    &refs(&ts, rule, past),
                )
                .unwrap();
                close(&got[0], &wy, 1e-5);
                close(&got[1], &ws, 1e-5);
            }
        }
    }
}

#[test]
fn explicit_scale_and_default_rule() {
    let c = Case {
        b: 1,
        t: 3,
        hq: 2,
        hkv: 2,
        dk: 2,
        dv: 2,
        per_key: false,
        per_head: true,
    };
    let x = c.inputs(3);
    let ts = c.tensors(&x);
    let (wy, _) = naive(c, &x, "gated_delta", false, 0.25);
    let o = build(
        "",
        "LinearAttention",
        27,
        vec![
            ("q_num_heads", Attribute::Int(2)),
            ("kv_num_heads", Attribute::Int(2)),
            ("scale", Attribute::Float(0.25)),
            ("chunk_size", Attribute::Int(64)),
        ],
        6,
        2,
    )
    .unwrap();
    let got = run(o.as_ref(), &refs(&ts, "gated_delta", false)).unwrap();
    close(&got[0], &wy, 1e-5);
}

#[test]
fn prefill_in_pieces_equals_one_pass() {
    let c = Case {
        b: 2,
        t: 6,
        hq: 2,
        hkv: 1,
        dk: 4,
        dv: 3,
        per_key: true,
        per_head: false,
    };
    let x = c.inputs(7);
    let ts = c.tensors(&x);
    let o = op("gated_delta", 2, 1, None);
    let whole = run(o.as_ref(), &refs(&ts, "gated_delta", true)).unwrap();
    // Tokens 0..2 then 2..6, carrying the state.
    let cut = |v: &[f32], w: usize, from: usize, to: usize| -> Vec<f32> {
        (0..c.b)
            .flat_map(|b| v[(b * c.t + from) * w..(b * c.t + to) * w].to_vec())
            .collect()
    };
    let mut state = ts[3].clone();
    let mut ys: Vec<Vec<f64>> = vec![vec![]; c.b];
    for (from, to) in [(0, 2), (2, 6)] {
        let n = to - from;
        let part = [
            t(&[c.b, n, 8], cut(&x.q, 8, from, to)),
            t(&[c.b, n, 4], cut(&x.k, 4, from, to)),
            t(&[c.b, n, 3], cut(&x.v, 3, from, to)),
            state.clone(),
            t(&[c.b, n, 4], cut(&x.decay, 4, from, to)),
            t(&[c.b, n, 1], cut(&x.beta, 1, from, to)),
        ];
        let out = run(o.as_ref(), &part.iter().map(Some).collect::<Vec<_>>()).unwrap();
        let y = out[0].to_f64_vec().unwrap();
        for (b, acc) in ys.iter_mut().enumerate() {
            acc.extend_from_slice(&y[b * n * 6..(b + 1) * n * 6]);
        }
        state = out[1].clone();
    }
    close(&whole[0], &ys.concat(), 1e-5);
    close(&whole[1], &state.to_f64_vec().unwrap(), 1e-5);
}

#[test]
fn state_keeps_its_own_type() {
    let c = Case {
        b: 1,
        t: 2,
        hq: 1,
        hkv: 1,
        dk: 2,
        dv: 2,
        per_key: false,
        per_head: true,
    };
    let x = c.inputs(5);
    let mut ts = c.tensors(&x);
    let past: Vec<f16> = x.past.iter().map(|&v| f16::from_f32(v)).collect();
    ts[3] = Tensor::from_vec(&[1, 1, 2, 2], past).unwrap();
    let got = run(
        op("linear", 1, 1, None).as_ref(),
        &refs(&ts, "linear", true),
    )
    .unwrap();
    assert_eq!(got[0].dtype(), DType::F32);
    assert_eq!(got[1].dtype(), DType::F16);
    // f16 activations without a past state give an f16 state.
    let h = |t: &Tensor| {
        let v: Vec<f16> = t
            .to_f64_vec()
            .unwrap()
            .into_iter()
            .map(f16::from_f64)
            .collect();
        Tensor::from_vec(t.shape(), v).unwrap()
    };
    let hs: Vec<Tensor> = ts.iter().map(h).collect();
    let got = run(
        op("linear", 1, 1, None).as_ref(),
        &refs(&hs, "linear", false),
    )
    .unwrap();
    assert_eq!((got[0].dtype(), got[1].dtype()), (DType::F16, DType::F16));
}

#[test]
fn empty_time_returns_the_past_state() {
    let c = Case {
        b: 2,
        t: 0,
        hq: 2,
        hkv: 2,
        dk: 2,
        dv: 3,
        per_key: true,
        per_head: true,
    };
    let x = c.inputs(1);
    let ts = c.tensors(&x);
    let got = run(
        op("linear", 2, 2, None).as_ref(),
        &refs(&ts, "linear", true),
    )
    .unwrap();
    assert_eq!(got[0].shape(), &[2, 0, 6]);
    close(
        &got[1],
        &x.past.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        0.0,
    );
}

#[test]
fn bad_inputs_are_typed_errors() {
    let c = Case {
        b: 1,
        t: 2,
        hq: 2,
        hkv: 2,
        dk: 2,
        dv: 2,
        per_key: true,
        per_head: true,
    };
    let x = c.inputs(1);
    let ts = c.tensors(&x);
    let err = |rule: &str, ins: &[Option<&Tensor>]| message(op(rule, 2, 2, None).run(ins));
    let all: Vec<Option<&Tensor>> = ts.iter().map(Some).collect();
    assert!(err("linear", &all).contains("forbids decay"));
    assert!(err("gated", &refs(&ts, "linear", false)).contains("requires decay"));
    assert!(err("delta", &refs(&ts, "linear", false)).contains("requires beta"));
    assert!(err("gated", &refs(&ts, "gated_delta", false)).contains("forbids beta"));
    let bad = |i: usize, shape: &[usize]| {
        let mut ins = all.clone();
        let x = t(shape, vec![0.0; shape.iter().product()]);
        ins[i] = Some(&x);
        err("gated_delta", &ins)
    };
    assert!(bad(0, &[1, 2, 3]).contains("not a multiple"));
    assert!(bad(0, &[1, 2, 2, 2]).contains("must be 3-D"));
    assert!(bad(1, &[1, 2, 6]).contains("kv_num_heads·d_k = 4"));
    assert!(bad(2, &[1, 3, 4]).contains("does not match query's batch and time"));
    assert!(bad(3, &[1, 2, 2, 3]).contains("past_state must be [1, 2, 2, 2]"));
    assert!(bad(4, &[1, 2, 3]).contains("decay must be"));
    assert!(bad(5, &[1, 2, 3]).contains("beta must be"));
    let q64 = Tensor::from_vec(&[1, 2, 4], vec![0.0f64; 8]).unwrap();
    let mut ins = all.clone();
    ins[0] = Some(&q64);
    assert!(err("gated_delta", &ins).contains("expected float, float16 or bfloat16"));
    let k16 = Tensor::from_vec(&[1, 2, 4], vec![f16::ZERO; 8]).unwrap();
    let mut ins = all.clone();
    ins[1] = Some(&k16);
    assert!(err("gated_delta", &ins).contains("key has type"));
    let attrs = |hq: i64, hkv: i64, rule: &str| {
        vec![
            ("q_num_heads", Attribute::Int(hq)),
            ("kv_num_heads", Attribute::Int(hkv)),
            ("update_rule", Attribute::String(rule.as_bytes().to_vec())),
        ]
    };
    let b = |a| message(build("", "LinearAttention", 27, a, 6, 2));
    assert!(b(attrs(3, 2, "linear")).contains("not a multiple of kv_num_heads"));
    assert!(b(attrs(2, 0, "linear")).contains("kv_num_heads"));
    assert!(b(attrs(2, 2, "softmax")).contains("update_rule"));
    assert!(b(vec![("q_num_heads", Attribute::Int(2))]).contains("kv_num_heads"));
}
