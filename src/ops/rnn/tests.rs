//! RNN, GRU and LSTM against a naive reference written straight from the ONNX
//! formulas (per element, f64, sequence-major), over directions, layouts,
//! sequence lengths, initial states, peepholes and clip; plus the shape rule,
//! FLOPs and input errors.

use crate::ir::attributes::Attribute;
use crate::ops::testutil::{build_op, infer_and_run, int, rand_vec, string};
use crate::tensor::Tensor;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Rnn,
    Gru { lbr: bool },
    Lstm,
}

impl Kind {
    fn gates(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Gru { .. } => 3,
            Kind::Lstm => 4,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Rnn => "RNN",
            Kind::Gru { .. } => "GRU",
            Kind::Lstm => "LSTM",
        }
    }
}

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

struct Case {
    kind: Kind,
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
    reverse: bool,
    lens: Option<Vec<usize>>,
    with_init: bool,
    with_p: bool,
    clip: Option<f64>,
}

/// (x, w, r, b, h0, c0, p) as flat f64 data in ONNX's layout 0.
type Data = (
    Vec<f64>,
    Vec<f64>,
    Vec<f64>,
    Vec<f64>,
    Vec<f64>,
    Vec<f64>,
    Vec<f64>,
);

fn data(c: &Case) -> Data {
    let g = c.kind.gates() * c.hidden;
    let v = |n: usize, seed: u64| rand_vec(n, seed).into_iter().map(|x| x as f64).collect();
    (
        v(c.seq * c.batch * c.input, 1),
        v(c.dirs * g * c.input, 2),
        v(c.dirs * g * c.hidden, 3),
        v(c.dirs * 2 * g, 4),
        v(c.dirs * c.batch * c.hidden, 5),
        v(c.dirs * c.batch * c.hidden, 6),
        v(c.dirs * 3 * c.hidden, 7),
    )
}

/// The reference: Y [seq, dirs, batch, hidden], Y_h and Y_c [dirs, batch, hidden].
fn reference(c: &Case, d: &Data) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (x, w, r, bias, h0, c0, p) = d;
    let (hd, inp, bt) = (c.hidden, c.input, c.batch);
    let g = c.kind.gates() * hd;
    let mut y = vec![0.0; c.seq * c.dirs * bt * hd];
    let mut yh = vec![0.0; c.dirs * bt * hd];
    let mut yc = vec![0.0; c.dirs * bt * hd];
    let cl = |v: f64| {
        c.clip
            .map_or(v, |t| v.clamp(-(t as f32 as f64), t as f32 as f64))
    };
    for dir in 0..c.dirs {
        let rev = c.reverse || dir == 1;
        for b in 0..bt {
            let len = c.lens.as_ref().map_or(c.seq, |l| l[b]);
            let mut h: Vec<f64> = (0..hd)
                .map(|j| {
                    if c.with_init {
                        h0[(dir * bt + b) * hd + j]
                    } else {
                        0.0
                    }
                })
                .collect();
            let mut cs: Vec<f64> = (0..hd)
                .map(|j| {
                    if c.with_init {
                        c0[(dir * bt + b) * hd + j]
                    } else {
                        0.0
                    }
                })
                .collect();
            for s in 0..len {
                let t = if rev { len - 1 - s } else { s };
                // wx[k] = x·W[k]ᵀ + Wb[k], rh[k] = h·R[k]ᵀ + Rb[k] per gate row k.
                let wx: Vec<f64> = (0..g)
                    .map(|k| {
                        let mut acc = bias[dir * 2 * g + k];
                        for i in 0..inp {
                            acc += x[(t * bt + b) * inp + i] * w[(dir * g + k) * inp + i];
                        }
                        acc
                    })
                    .collect();
                let rmul = |hv: &[f64], k: usize| -> f64 {
                    (0..hd)
                        .map(|i| hv[i] * r[(dir * g + k) * hd + i])
                        .sum::<f64>()
                };
                let rb = |k: usize| bias[dir * 2 * g + g + k];
                let mut hn = vec![0.0; hd];
                let mut cn = vec![0.0; hd];
                for j in 0..hd {
                    match c.kind {
                        Kind::Rnn => hn[j] = cl(wx[j] + rmul(&h, j) + rb(j)).tanh(),
                        Kind::Gru { lbr } => {
                            let z = sig(cl(wx[j] + rmul(&h, j) + rb(j)));
                            let rr: Vec<f64> = (0..hd)
                                .map(|i| sig(cl(wx[hd + i] + rmul(&h, hd + i) + rb(hd + i))))
                                .collect();
                            let k = 2 * hd + j;
                            let rec = if lbr {
                                rr[j] * (rmul(&h, k) + rb(k))
                            } else {
                                let rh: Vec<f64> = (0..hd).map(|i| rr[i] * h[i]).collect();
                                rmul(&rh, k) + rb(k)
                            };
                            let hh = cl(wx[k] + rec).tanh();
                            hn[j] = (1.0 - z) * hh + z * h[j];
                        }
                        Kind::Lstm => {
                            let pre =
                                |k: usize| wx[k * hd + j] + rmul(&h, k * hd + j) + rb(k * hd + j);
                            let pp = |k: usize| {
                                if c.with_p {
                                    p[dir * 3 * hd + k * hd + j]
                                } else {
                                    0.0
                                }
                            };
                            let i = sig(cl(pre(0) + pp(0) * cs[j]));
                            let f = sig(cl(pre(2) + pp(2) * cs[j]));
                            let cc = cl(pre(3)).tanh();
                            cn[j] = f * cs[j] + i * cc;
                            let o = sig(cl(pre(1) + pp(1) * cn[j]));
                            hn[j] = o * cn[j].tanh();
                        }
                    }
                }
                h = hn;
                if c.kind == Kind::Lstm {
                    cs = cn;
                }
                for j in 0..hd {
                    y[((t * c.dirs + dir) * bt + b) * hd + j] = h[j];
                }
            }
            for j in 0..hd {
                yh[(dir * bt + b) * hd + j] = h[j];
                yc[(dir * bt + b) * hd + j] = cs[j];
            }
        }
    }
    (y, yh, yc)
}

fn tensor(shape: &[usize], v: &[f64], f64_: bool) -> Tensor {
    if f64_ {
        Tensor::from_vec(shape, v.to_vec()).unwrap()
    } else {
        Tensor::from_vec(shape, v.iter().map(|&x| x as f32).collect::<Vec<f32>>()).unwrap()
    }
}

fn check(c: &Case, f64_: bool) {
    let d = data(c);
    let (y, yh, yc) = reference(c, &d);
    let g = c.kind.gates() * c.hidden;
    let dir = if c.dirs == 2 {
        "bidirectional"
    } else if c.reverse {
        "reverse"
    } else {
        "forward"
    };
    let mut attrs = vec![
        ("hidden_size", int(c.hidden as i64)),
        ("direction", string(dir)),
    ];
    if let Kind::Gru { lbr: true } = c.kind {
        attrs.push(("linear_before_reset", int(1)));
    }
    if let Some(t) = c.clip {
        attrs.push(("clip", Attribute::Float(t as f32)));
    }
    let x = tensor(&[c.seq, c.batch, c.input], &d.0, f64_);
    let w = tensor(&[c.dirs, g, c.input], &d.1, f64_);
    let r = tensor(&[c.dirs, g, c.hidden], &d.2, f64_);
    let b = tensor(&[c.dirs, 2 * g], &d.3, f64_);
    let state = [c.dirs, c.batch, c.hidden];
    let h0 = tensor(&state, &d.4, f64_);
    let c0 = tensor(&state, &d.5, f64_);
    let p = tensor(&[c.dirs, 3 * c.hidden], &d.6, f64_);
    let lens = c.lens.as_ref().map(|l| {
        Tensor::from_vec(&[c.batch], l.iter().map(|&v| v as i32).collect::<Vec<_>>()).unwrap()
    });
    let mut inputs = vec![Some(&x), Some(&w), Some(&r), Some(&b), lens.as_ref()];
    if c.with_init {
        inputs.push(Some(&h0));
        if c.kind == Kind::Lstm {
            inputs.push(Some(&c0));
        }
    }
    if c.with_p {
        if !c.with_init {
            inputs.extend([None, None]);
        }
        inputs.push(Some(&p));
    }
    let outs = if c.kind == Kind::Lstm { 3 } else { 2 };
    let op = build_op(c.kind.name(), 22, &attrs, &[], inputs.len(), outs).unwrap();
    let got = infer_and_run(op.as_ref(), &inputs).unwrap();
    assert_eq!(got.len(), outs);
    let tol = if f64_ { 1e-12 } else { 1e-5 };
    crate::ops::testutil::assert_tensor_close(&got[0], &y, tol, tol);
    crate::ops::testutil::assert_tensor_close(&got[1], &yh, tol, tol);
    if outs == 3 {
        crate::ops::testutil::assert_tensor_close(&got[2], &yc, tol, tol);
    }
}

fn case(kind: Kind) -> Case {
    Case {
        kind,
        seq: 4,
        batch: 3,
        input: 5,
        hidden: 6,
        dirs: 1,
        reverse: false,
        lens: None,
        with_init: false,
        with_p: false,
        clip: None,
    }
}

const KINDS: [Kind; 4] = [
    Kind::Rnn,
    Kind::Gru { lbr: false },
    Kind::Gru { lbr: true },
    Kind::Lstm,
];

#[test]
fn forward_matches_reference() {
    for k in KINDS {
        check(&case(k), false);
        check(&case(k), true);
    }
}

#[test]
fn reverse_and_bidirectional_match_reference() {
    for k in KINDS {
        check(
            &Case {
                reverse: true,
                ..case(k)
            },
            true,
        );
        check(&Case { dirs: 2, ..case(k) }, true);
    }
}

#[test]
fn sequence_lens_initial_state_and_clip_match_reference() {
    for k in KINDS {
        let c = Case {
            dirs: 2,
            lens: Some(vec![4, 2, 0]),
            with_init: true,
            clip: Some(0.3),
            ..case(k)
        };
        check(&c, true);
    }
    check(
        &Case {
            with_p: true,
            with_init: true,
            ..case(Kind::Lstm)
        },
        true,
    );
    check(
        &Case {
            with_p: true,
            dirs: 2,
            lens: Some(vec![1, 3, 4]),
            ..case(Kind::Lstm)
        },
        false,
    );
}

#[test]
fn batch_first_layout_transposes_inputs_and_outputs() {
    // Same problem in layout 1: X [batch, seq, input], Y [batch, seq, dirs, hidden].
    let (seq, batch, inp, hid) = (3, 2, 2, 3);
    let x = rand_vec(seq * batch * inp, 11);
    let w = Tensor::from_vec(&[2, 4 * hid, inp], rand_vec(8 * hid * inp, 12)).unwrap();
    let r = Tensor::from_vec(&[2, 4 * hid, hid], rand_vec(8 * hid * hid, 13)).unwrap();
    let attrs = [
        ("hidden_size", int(hid as i64)),
        ("direction", string("bidirectional")),
    ];
    let x0 = Tensor::from_vec(&[seq, batch, inp], x.clone()).unwrap();
    let op0 = build_op("LSTM", 14, &attrs, &[], 3, 3).unwrap();
    let a = infer_and_run(op0.as_ref(), &[Some(&x0), Some(&w), Some(&r)]).unwrap();
    let mut xt = vec![0f32; x.len()];
    for t in 0..seq {
        for b in 0..batch {
            for i in 0..inp {
                xt[(b * seq + t) * inp + i] = x[(t * batch + b) * inp + i];
            }
        }
    }
    let x1 = Tensor::from_vec(&[batch, seq, inp], xt).unwrap();
    let mut attrs1 = attrs.to_vec();
    attrs1.push(("layout", int(1)));
    let op1 = build_op("LSTM", 14, &attrs1, &[], 3, 3).unwrap();
    let b1 = infer_and_run(op1.as_ref(), &[Some(&x1), Some(&w), Some(&r)]).unwrap();
    assert_eq!(b1[0].shape(), &[batch, seq, 2, hid]);
    assert_eq!(b1[1].shape(), &[batch, 2, hid]);
    let (ya, yb) = (a[0].to_f64_vec().unwrap(), b1[0].to_f64_vec().unwrap());
    let (ha, hb) = (a[1].to_f64_vec().unwrap(), b1[1].to_f64_vec().unwrap());
    for t in 0..seq {
        for d in 0..2 {
            for b in 0..batch {
                for j in 0..hid {
                    let va = ya[((t * 2 + d) * batch + b) * hid + j];
                    assert_eq!(va, yb[((b * seq + t) * 2 + d) * hid + j]);
                    if t == 0 {
                        assert_eq!(ha[(d * batch + b) * hid + j], hb[(b * 2 + d) * hid + j]);
                    }
                }
            }
        }
    }
    // layout is an opset-14 attribute.
    assert!(build_op("LSTM", 7, &attrs1, &[], 3, 3).is_err());
}

#[test]
fn spec_example_rnn_defaults() {
    // onnx's test_simple_rnn_defaults: X = [[1,2],[3,4],[5,6]], W = R = 0.1.
    let x = Tensor::from_vec(&[1, 3, 2], vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
    let w = Tensor::from_vec(&[1, 4, 2], vec![0.1f32; 8]).unwrap();
    let r = Tensor::from_vec(&[1, 4, 4], vec![0.1f32; 16]).unwrap();
    let op = build_op("RNN", 7, &[("hidden_size", int(4))], &[], 3, 2).unwrap();
    let y = infer_and_run(op.as_ref(), &[Some(&x), Some(&w), Some(&r)]).unwrap();
    let want: Vec<f64> = [0.3f64, 0.7, 1.1]
        .iter()
        .flat_map(|&v| std::iter::repeat_n(v.tanh(), 4))
        .collect();
    crate::ops::testutil::assert_tensor_close(&y[1], &want, 1e-6, 1e-6);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let x = Tensor::from_vec(&[1, 1, 2], vec![1f32, 2.]).unwrap();
    let w = Tensor::from_vec(&[1, 3, 2], vec![0.1f32; 6]).unwrap();
    let r = Tensor::from_vec(&[1, 3, 3], vec![0.1f32; 9]).unwrap();
    let run = |name: &str, attrs: &[(&str, Attribute)], ins: &[Option<&Tensor>]| {
        let op = build_op(name, 14, attrs, &[], ins.len(), 2)?;
        infer_and_run(op.as_ref(), ins)
    };
    // W says 3 gate rows: wrong for LSTM with hidden 3 (needs 12).
    let e = run(
        "LSTM",
        &[("hidden_size", int(3))],
        &[Some(&x), Some(&w), Some(&r)],
    );
    assert!(e.unwrap_err().to_string().contains("W has shape"));
    let e = run("RNN", &[("hidden_size", int(3))], &[Some(&x), Some(&w)]);
    assert!(e.unwrap_err().to_string().contains("required"));
    let lens = Tensor::from_vec(&[1], vec![5i32]).unwrap();
    let e = run(
        "RNN",
        &[("hidden_size", int(3))],
        &[Some(&x), Some(&w), Some(&r), None, Some(&lens)],
    );
    assert!(e.unwrap_err().to_string().contains("sequence_lens"));
    let e = run(
        "RNN",
        &[("direction", string("sideways"))],
        &[Some(&x), Some(&w), Some(&r)],
    );
    assert!(e.unwrap_err().to_string().contains("direction"));
    let xi = Tensor::from_vec(&[1, 1, 2], vec![1i32, 2]).unwrap();
    let e = run("RNN", &[], &[Some(&xi), Some(&w), Some(&r)]);
    assert!(e.unwrap_err().to_string().contains("floating-point"));
}

#[test]
fn flops_follow_the_products() {
    let x = Tensor::from_vec(&[5, 2, 3], vec![0f32; 30]).unwrap();
    let w = Tensor::from_vec(&[2, 16, 3], vec![0f32; 96]).unwrap();
    let r = Tensor::from_vec(&[2, 16, 4], vec![0f32; 128]).unwrap();
    let attrs = [
        ("hidden_size", int(4)),
        ("direction", string("bidirectional")),
    ];
    let op = build_op("LSTM", 7, &attrs, &[], 3, 3).unwrap();
    let facts: Vec<crate::ir::Fact> = [&x, &w, &r]
        .iter()
        .map(|t| crate::ir::Fact::of(t))
        .collect();
    let ins: Vec<Option<&crate::ir::Fact>> = facts.iter().map(Some).collect();
    // 5 steps · 2 batch · 2 dirs · 16 gate rows · (2·(3+4) + 10).
    assert_eq!(op.flops(&ins, &[]), 5 * 2 * 2 * 16 * (2 * 7 + 10));
}
