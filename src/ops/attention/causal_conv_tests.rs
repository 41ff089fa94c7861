//! CausalConvWithState tests: a naive f64 convolution (bias, past state,
//! SiLU), streaming in pieces with the carried state equals one pass, edge
//! sizes (k = 1, inputs shorter than the state, empty length), f16, and
//! the errors.

use crate::ir::attributes::Attribute;
use crate::ir::Operator;
use crate::ops::attention::support::testing::{build, close, data, message, run, t};
use crate::tensor::Tensor;
use half::f16;

fn op(activation: Option<&str>, inputs: usize) -> Box<dyn Operator> {
    let attrs = activation
        .map(|a| ("activation", Attribute::String(a.as_bytes().to_vec())))
        .into_iter()
        .collect();
    build("", "CausalConvWithState", 27, attrs, inputs, 2).unwrap()
}

/// Output and present state in f64 for `x` `[b, c, l]`, `w` `[c, 1, k]`.
fn naive(
    (b, c, l, k): (usize, usize, usize, usize),
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    past: Option<&[f32]>,
    silu: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut state) = (vec![], vec![]);
    for r in 0..b * c {
        let ch = r % c;
        let mut seq: Vec<f64> = match past {
            Some(p) => p[r * (k - 1)..(r + 1) * (k - 1)]
                .iter()
                .map(|&v| v as f64)
                .collect(),
            None => vec![0.0; k - 1],
        };
        seq.extend(x[r * l..(r + 1) * l].iter().map(|&v| v as f64));
        for t in 0..l {
            let mut v: f64 = (0..k).map(|j| w[ch * k + j] as f64 * seq[t + j]).sum();
            v += bias.map_or(0.0, |b| b[ch] as f64);
            if silu {
                v /= 1.0 + (-v).exp();
            }
            y.push(v);
        }
        state.extend_from_slice(&seq[l..]);
    }
    (y, state)
}

fn run4(
    o: &dyn Operator,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    past: Option<&Tensor>,
) -> Vec<Tensor> {
    run(o, &[Some(x), Some(w), bias, past]).unwrap()
}

#[test]
fn matches_naive() {
    let (b, c, l, k) = (2, 3, 7, 4);
    let (x, w, bias, past) = (
        data(b * c * l, 1),
        data(c * k, 2),
        data(c, 3),
        data(b * c * (k - 1), 4),
    );
    for (with_bias, with_past, act) in [
        (false, false, None),
        (true, false, Some("none")),
        (false, true, Some("silu")),
        (true, true, Some("swish")),
    ] {
        let silu = matches!(act, Some("silu" | "swish"));
        let (wy, ws) = naive(
            (b, c, l, k),
            &x,
            &w,
            with_bias.then_some(&bias[..]),
            with_past.then_some(&past[..]),
            silu,
        );
        let tb = t(&[c], bias.clone());
        let tp = t(&[b, c, k - 1], past.clone());
        let got = run4(
            op(act, 4).as_ref(),
            &t(&[b, c, l], x.clone()),
            &t(&[c, 1, k], w.clone()),
            with_bias.then_some(&tb),
            with_past.then_some(&tp),
        );
        close(&got[0], &wy, 1e-5);
        close(&got[1], &ws, 0.0);
    }
}

#[test]
fn streaming_with_state_equals_one_pass() {
    let (b, c, l, k) = (1, 2, 9, 3);
    let (x, w) = (data(b * c * l, 5), data(c * k, 6));
    let wt = t(&[c, 1, k], w);
    let o = op(Some("silu"), 4);
    let whole = run4(o.as_ref(), &t(&[b, c, l], x.clone()), &wt, None, None);
    let mut state: Option<Tensor> = None;
    let mut pieces: Vec<Vec<f64>> = vec![vec![]; c];
    for (from, to) in [(0, 1), (1, 5), (5, 5), (5, 9)] {
        let part: Vec<f32> = (0..c)
            .flat_map(|ch| x[ch * l + from..ch * l + to].to_vec())
            .collect();
        let out = run4(
            o.as_ref(),
            &t(&[b, c, to - from], part),
            &wt,
            None,
            state.as_ref(),
        );
        let y = out[0].to_f64_vec().unwrap();
        for (ch, p) in pieces.iter_mut().enumerate() {
            p.extend_from_slice(&y[ch * (to - from)..(ch + 1) * (to - from)]);
        }
        state = Some(out[1].clone());
    }
    close(&whole[0], &pieces.concat(), 1e-6);
    close(&whole[1], &state.unwrap().to_f64_vec().unwrap(), 0.0);
}

#[test]
fn edge_sizes() {
    // k = 1: an empty state.
    let x = data(8, 7);
    let got = run4(
        op(None, 2).as_ref(),
        &t(&[1, 2, 4], x.clone()),
        &t(&[2, 1, 1], vec![2.0, -1.0]),
        None,
        None,
    );
    assert_eq!(got[1].shape(), &[1, 2, 0]);
    let want: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| v as f64 * if i < 4 { 2.0 } else { -1.0 })
        .collect();
    close(&got[0], &want, 1e-6);
    // An input shorter than the state keeps part of the past.
    let past = t(&[1, 1, 4], vec![1.0, 2.0, 3.0, 4.0]);
    let got = run4(
        op(None, 4).as_ref(),
        &t(&[1, 1, 2], vec![5.0, 6.0]),
        &t(&[1, 1, 5], vec![1.0; 5]),
        None,
        Some(&past),
    );
    close(&got[0], &[15.0, 20.0], 0.0);
    close(&got[1], &[3.0, 4.0, 5.0, 6.0], 0.0);
    // An empty length passes the state through.
    let got = run4(
        op(None, 4).as_ref(),
        &t(&[1, 1, 0], vec![]),
        &t(&[1, 1, 5], vec![1.0; 5]),
        None,
        Some(&past),
    );
    assert_eq!(got[0].shape(), &[1, 1, 0]);
    close(&got[1], &[1.0, 2.0, 3.0, 4.0], 0.0);
}

#[test]
fn f16_accumulates_then_rounds() {
    let h = |v: Vec<f32>| -> Vec<f16> { v.into_iter().map(f16::from_f32).collect() };
    let (x, w) = (h(data(2 * 6, 8)), h(data(2 * 3, 9)));
    let wide = |v: &[f16]| -> Vec<f32> { v.iter().map(|x| x.to_f32()).collect() };
    let (wy, ws) = naive((1, 2, 6, 3), &wide(&x), &wide(&w), None, None, true);
    let got = run4(
        op(Some("silu"), 2).as_ref(),
        &Tensor::from_vec(&[1, 2, 6], x).unwrap(),
        &Tensor::from_vec(&[2, 1, 3], w).unwrap(),
        None,
        None,
    );
    assert_eq!(got[0].dtype(), crate::tensor::DType::F16);
    close(&got[0], &wy, 2e-3);
    close(&got[1], &ws, 0.0);
}

#[test]
fn one_output_is_allowed() {
    let o = build("", "CausalConvWithState", 27, vec![], 2, 1).unwrap();
    let got = run(
        o.as_ref(),
        &[
            Some(&t(&[1, 1, 3], vec![1.0, 2.0, 3.0])),
            Some(&t(&[1, 1, 2], vec![1.0, 1.0])),
        ],
    )
    .unwrap();
    assert_eq!(got.len(), 1);
    close(&got[0], &[1.0, 3.0, 5.0], 0.0);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let x = t(&[1, 2, 4], data(8, 1));
    let err = |w: &[usize], bias: Option<&[usize]>, past: Option<&[usize]>| {
        let w = t(w, vec![1.0; w.iter().product()]);
        let bias = bias.map(|s| t(s, vec![0.0; s.iter().product()]));
        let past = past.map(|s| t(s, vec![0.0; s.iter().product()]));
        message(op(None, 4).run(&[Some(&x), Some(&w), bias.as_ref(), past.as_ref()]))
    };
    assert!(err(&[3, 1, 2], None, None).contains("weight must be [2, 1, k]"));
    assert!(err(&[2, 2, 2], None, None).contains("weight must be"));
    assert!(err(&[2, 1, 0], None, None).contains("k ≥ 1"));
    assert!(err(&[2, 2], None, None).contains("weight must be"));
    assert!(err(&[2, 1, 3], Some(&[3]), None).contains("bias must be [2]"));
    assert!(err(&[2, 1, 3], None, Some(&[1, 2, 3])).contains("past_state must be [1, 2, 2]"));
    let w = t(&[2, 1, 3], vec![1.0; 6]);
    let m = message(op(None, 4).run(&[Some(&t(&[2, 4], vec![0.0; 8])), Some(&w), None, None]));
    assert!(m.contains("3-D"), "{m}");
    let x64 = Tensor::from_vec(&[1, 2, 4], vec![0.0f64; 8]).unwrap();
    let w64 = Tensor::from_vec(&[2, 1, 3], vec![0.0f64; 6]).unwrap();
    let m = message(op(None, 4).run(&[Some(&x64), Some(&w64), None, None]));
    assert!(m.contains("expected float, float16 or bfloat16"), "{m}");
    let wh = Tensor::from_vec(&[2, 1, 3], vec![f16::ONE; 6]).unwrap();
    let m = message(op(None, 4).run(&[Some(&x), Some(&wh), None, None]));
    assert!(m.contains("weight has type"), "{m}");
    let m = message(build(
        "",
        "CausalConvWithState",
        27,
        vec![("activation", Attribute::String(b"relu".to_vec()))],
        2,
        2,
    ));
    assert!(m.contains("activation"), "{m}");
}
