//! FlexAttention tests: a naive f64 reference (GQA, value head size, scale),
//! f16/f64 data and softmax precisions, score and probability modifiers as
//! bodies (with an outer-scope value), the preview domain, and the errors.

use crate::error::Result;
use crate::ir::attributes::Attribute;
use crate::ir::{Fact, Operator, Subgraph, Value};
use crate::ops::attention::support::testing::{build, close, data, message, run, t};
use crate::tensor::{DType, Tensor};
use half::f16;
use std::sync::Arc;

const DOMAIN: &str = "ai.onnx.preview";

fn op(attrs: Vec<(&str, Attribute)>, inputs: usize) -> Box<dyn Operator> {
    build(DOMAIN, "FlexAttention", 1, attrs, inputs, 1).unwrap()
}

/// What a test body does to each element, given its (b, h, i, j) index.
#[derive(Debug, Clone, Copy)]
enum Edit {
    /// Keys after the query position get `-inf`.
    Causal,
    /// Adds `i − j`.
    Relative,
    /// Multiplies by the outer-scope scalar.
    ScaleByOuter,
    /// Returns a tensor of the wrong shape.
    WrongShape,
}

impl Edit {
    fn apply(self, i: usize, j: usize, x: f64, outer: f64) -> f64 {
        match self {
            Edit::Causal if j > i => f64::NEG_INFINITY,
            Edit::Causal | Edit::WrongShape => x,
            Edit::Relative => x + i as f64 - j as f64,
            Edit::ScaleByOuter => x * outer,
        }
    }
}

/// A modifier body for the tests.
#[derive(Debug)]
struct Body(Edit);

impl Subgraph for Body {
    fn formal(&self) -> usize {
        1
    }
    fn implicit(&self) -> usize {
        matches!(self.0, Edit::ScaleByOuter) as usize
    }
    fn num_outputs(&self) -> usize {
        1
    }
    fn declared_output(&self, _k: usize) -> Option<DType> {
        None
    }
    fn run(&self, formal: Vec<Value>, implicit: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = formal[0].as_tensor("x")?;
        let s = x.shape().to_vec();
        let outer = implicit.first().copied().flatten().map_or(1.0, |t| {
            t.as_tensor("outer").unwrap().to_f64_vec().unwrap()[0]
        });
        let v: Vec<f64> = x
            .to_f64_vec()?
            .into_iter()
            .enumerate()
            .map(|(n, v)| self.0.apply((n / s[3]) % s[2], n % s[3], v, outer))
            .collect();
        let shape = if matches!(self.0, Edit::WrongShape) {
            vec![v.len()]
        } else {
            s
        };
        Ok(vec![Tensor::from_vec(&shape, v)?.into()])
    }
    fn infer(&self, formal: &[Option<Fact>], _implicit: &[Option<&Fact>]) -> Vec<Option<Fact>> {
        vec![formal[0].clone()]
    }
    fn nominal_flops(&self, per_node: u64) -> u64 {
        per_node
    }
}

/// Sizes: batch, q heads, kv heads, q and kv lengths, head sizes.
#[derive(Clone, Copy)]
struct Case {
    b: usize,
    hq: usize,
    hkv: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
}

/// The reference in f64, with optional score and probability edits.
fn naive(
    c: Case,
    (q, k, v): &Inputs,
    scale: f64,
    sm: Option<Edit>,
    pm: Option<Edit>,
    outer: f64,
) -> Vec<f64> {
    let mut y = vec![];
    for b in 0..c.b {
        for h in 0..c.hq {
            let kv = b * c.hkv + h / (c.hq / c.hkv);
            for i in 0..c.l {
                let qr = &q[((b * c.hq + h) * c.l + i) * c.e..][..c.e];
                let mut sc: Vec<f64> = (0..c.s)
                    .map(|j| {
                        let kr = &k[(kv * c.s + j) * c.e..][..c.e];
                        let d: f64 = qr.iter().zip(kr).map(|(&a, &b)| a as f64 * b as f64).sum();
                        let d = d * scale;
                        sm.map_or(d, |m| m.apply(i, j, d, outer))
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = sc.iter().map(|x| (x - m).exp()).sum();
                for (j, x) in sc.iter_mut().enumerate() {
                    *x = (*x - m).exp() / sum;
                    *x = pm.map_or(*x, |p| p.apply(i, j, *x, outer));
                }
                for d in 0..c.ev {
                    y.push(
                        (0..c.s)
                            .map(|j| sc[j] * v[(kv * c.s + j) * c.ev + d] as f64)
                            .sum(),
                    );
                }
            }
        }
    }
    y
}

/// Q, K and V data.
type Inputs = (Vec<f32>, Vec<f32>, Vec<f32>);

fn inputs(c: Case, seed: u64) -> Inputs {
    (
        data(c.b * c.hq * c.l * c.e, seed),
        data(c.b * c.hkv * c.s * c.e, seed + 1),
        data(c.b * c.hkv * c.s * c.ev, seed + 2),
    )
}

fn tensors(c: Case, (q, k, v): &Inputs) -> [Tensor; 3] {
    [
        t(&[c.b, c.hq, c.l, c.e], q.clone()),
        t(&[c.b, c.hkv, c.s, c.e], k.clone()),
        t(&[c.b, c.hkv, c.s, c.ev], v.clone()),
    ]
}

const BASE: Case = Case {
    b: 2,
    hq: 4,
    hkv: 2,
    l: 3,
    s: 5,
    e: 4,
    ev: 6,
};

#[test]
fn matches_naive_with_gqa_and_scale() {
    for (c, scale) in [
        (BASE, None),
        (
            Case {
                hkv: 4,
                ev: 4,
                ..BASE
            },
            Some(0.3),
        ),
        (Case { hkv: 1, ..BASE }, None),
    ] {
        let x = inputs(c, 1);
        let want = naive(
            c,
            &x,
            scale.map_or(1.0 / (c.e as f64).sqrt(), |s: f32| s as f64),
            None,
            None,
            1.0,
        );
        let attrs = scale
            .map(|s| ("scale", Attribute::Float(s)))
            .into_iter()
            .collect();
        let ts = tensors(c, &x);
        let got = run(
            op(attrs, 3).as_ref(),
            &ts.iter().map(Some).collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(got[0].shape(), &[c.b, c.hq, c.l, c.ev]);
        close(&got[0], &want, 1e-5);
    }
}

#[test]
fn other_types_and_precisions() {
    let c = BASE;
    let x = inputs(c, 2);
    let want = naive(c, &x, 0.5, None, None, 1.0);
    let conv = |v: &[f32], shape: &[usize], d: DType| -> Tensor {
        match d {
            DType::F16 => {
                Tensor::from_vec(shape, v.iter().map(|&x| f16::from_f32(x)).collect()).unwrap()
            }
            DType::F64 => Tensor::from_vec(shape, v.iter().map(|&x| x as f64).collect()).unwrap(),
            _ => t(shape, v.to_vec()),
        }
    };
    for (d, prec, tol) in [
        (DType::F64, None, 1e-6),
        (DType::F16, None, 1e-2),
        (DType::F32, Some(DType::F16), 1e-2),
        (DType::F32, Some(DType::F64), 1e-5),
        (DType::F16, Some(DType::BF16), 5e-2),
    ] {
        let ts = [
            conv(&x.0, &[c.b, c.hq, c.l, c.e], d),
            conv(&x.1, &[c.b, c.hkv, c.s, c.e], d),
            conv(&x.2, &[c.b, c.hkv, c.s, c.ev], d),
        ];
        let mut attrs = vec![("scale", Attribute::Float(0.5))];
        attrs.extend(prec.map(|p| ("softmax_precision", Attribute::Int(p.onnx_code() as i64))));
        let got = run(
            op(attrs, 3).as_ref(),
            &ts.iter().map(Some).collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(got[0].dtype(), d);
        close(&got[0], &want, tol);
    }
}

#[test]
fn score_and_probability_modifiers() {
    let c = Case { l: 5, ..BASE };
    let x = inputs(c, 3);
    let ts = tensors(c, &x);
    let scale = 1.0 / 2.0;
    for (sm, pm) in [
        (Some(Edit::Causal), None),
        (Some(Edit::Relative), None),
        (None, Some(Edit::Relative)),
        (Some(Edit::Causal), Some(Edit::Relative)),
    ] {
        let want = naive(c, &x, scale, sm, pm, 1.0);
        let mut attrs = vec![];
        attrs.extend(sm.map(|e| ("score_mod", Attribute::Body(Arc::new(Body(e))))));
        attrs.extend(pm.map(|e| ("prob_mod", Attribute::Body(Arc::new(Body(e))))));
        let got = run(
            op(attrs, 3).as_ref(),
            &ts.iter().map(Some).collect::<Vec<_>>(),
        )
        .unwrap();
        close(&got[0], &want, 1e-5);
    }
}

#[test]
fn modifiers_read_outer_scope_values() {
    let c = BASE;
    let x = inputs(c, 4);
    let [q, k, v] = tensors(c, &x);
    let outer = t(&[], vec![0.25]);
    let want = naive(c, &x, 0.5, None, Some(Edit::ScaleByOuter), 0.25);
    let attrs = vec![
        (
            "prob_mod",
            Attribute::Body(Arc::new(Body(Edit::ScaleByOuter))),
        ),
        ("scale", Attribute::Float(0.5)),
    ];
    let got = run(
        op(attrs, 4).as_ref(),
        &[Some(&q), Some(&k), Some(&v), Some(&outer)],
    )
    .unwrap();
    close(&got[0], &want, 1e-5);
}

#[test]
fn fully_masked_rows_are_nan_like_the_reference() {
    let c = Case { l: 3, s: 2, ..BASE };
    let x = inputs(c, 5);
    let ts = tensors(c, &x);
    let attrs = vec![("score_mod", Attribute::Body(Arc::new(Body(Edit::Causal))))];
    let got = run(
        op(attrs, 3).as_ref(),
        &ts.iter().map(Some).collect::<Vec<_>>(),
    )
    .unwrap();
    let y = got[0].to_f64_vec().unwrap();
    // Row 0 sees key 0 only; rows 1 and 2 see both keys: nothing is fully
    // masked here, so all values are finite.
    assert!(y.iter().all(|v| v.is_finite()));
    // With zero keys visible (shift the mask by a longer query), NaN.
    let c = Case { l: 1, s: 3, ..BASE };
    #[derive(Debug)]
    struct AllMasked;
    impl Subgraph for AllMasked {
        fn formal(&self) -> usize {
            1
        }
        fn implicit(&self) -> usize {
            0
        }
        fn num_outputs(&self) -> usize {
            1
        }
        fn declared_output(&self, _k: usize) -> Option<DType> {
            None
        }
        fn run(&self, formal: Vec<Value>, _: &[Option<&Value>]) -> Result<Vec<Value>> {
            let x = formal[0].as_tensor("x")?;
            Ok(vec![Tensor::from_vec(
                x.shape(),
                vec![f32::NEG_INFINITY; x.len()],
            )?
            .into()])
        }
        fn infer(&self, formal: &[Option<Fact>], _: &[Option<&Fact>]) -> Vec<Option<Fact>> {
            vec![formal[0].clone()]
        }
        fn nominal_flops(&self, per_node: u64) -> u64 {
            per_node
        }
    }
    let ts = tensors(c, &inputs(c, 6));
    let attrs = vec![("score_mod", Attribute::Body(Arc::new(AllMasked)))];
    let got = run(
        op(attrs, 3).as_ref(),
        &ts.iter().map(Some).collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(got[0].to_f64_vec().unwrap().iter().all(|v| v.is_nan()));
}

#[test]
fn empty_query_gives_empty_output() {
    let c = Case { l: 0, ..BASE };
    let ts = tensors(c, &inputs(c, 7));
    let got = run(
        op(vec![], 3).as_ref(),
        &ts.iter().map(Some).collect::<Vec<_>>(),
    )
    .unwrap();
    assert_eq!(got[0].shape(), &[2, 4, 0, 6]);
}

#[test]
fn preview_domain_is_supported() {
    assert!(crate::ops::is_supported_domain(DOMAIN));
    let m = message(build(DOMAIN, "Attention", 1, vec![], 3, 1));
    assert!(m.contains("unsupported operator"), "{m}");
    let m = message(build("", "FlexAttention", 26, vec![], 3, 1));
    assert!(m.contains("unsupported operator"), "{m}");
}

#[test]
fn bad_inputs_are_typed_errors() {
    let c = BASE;
    let [q, k, v] = tensors(c, &inputs(c, 8));
    let o = op(vec![], 3);
    let err = |q: &Tensor, k: &Tensor, v: &Tensor| message(o.run(&[Some(q), Some(k), Some(v)]));
    let q3 = t(&[2, 4, 12], vec![0.0; 96]);
    assert!(err(&q3, &k, &v).contains("must be 4-D"));
    let k5 = t(&[2, 2, 5, 5], vec![0.0; 100]);
    assert!(err(&q, &k5, &v).contains("head size"));
    let v4 = t(&[2, 2, 4, 6], vec![0.0; 96]);
    assert!(err(&q, &k, &v4).contains("differ in heads or sequence length"));
    let k3 = t(&[2, 3, 5, 4], vec![0.0; 120]);
    let v3 = t(&[2, 3, 5, 6], vec![0.0; 180]);
    assert!(err(&q, &k3, &v3).contains("multiple of kv heads"));
    let qb = t(&[1, 4, 3, 4], vec![0.0; 48]);
    assert!(err(&qb, &k, &v).contains("batch sizes differ"));
    let k64 = Tensor::from_vec(k.shape(), vec![0.0f64; k.len()]).unwrap();
    assert!(err(&q, &k64, &v).contains("K has type"));
    let qi = Tensor::from_vec(q.shape(), vec![0i32; q.len()]).unwrap();
    assert!(err(&qi, &k, &v).contains("expected float"));
    let wrong = vec![(
        "score_mod",
        Attribute::Body(Arc::new(Body(Edit::WrongShape))),
    )];
    let m = message(op(wrong, 3).run(&[Some(&q), Some(&k), Some(&v)]));
    assert!(m.contains("score_mod must give one tensor of shape"), "{m}");
    let m = message(build(
        DOMAIN,
        "FlexAttention",
        1,
        vec![("softmax_precision", Attribute::Int(7))],
        3,
        1,
    ));
    assert!(m.contains("softmax_precision"), "{m}");
    let m = message(build(
        DOMAIN,
        "FlexAttention",
        1,
        vec![("score_mod", Attribute::Int(1))],
        3,
        1,
    ));
    assert!(m.contains("score_mod"), "{m}");
    let m = message(build(DOMAIN, "FlexAttention", 1, vec![], 4, 1));
    assert!(m.contains("takes Q, K, V"), "{m}");
}
