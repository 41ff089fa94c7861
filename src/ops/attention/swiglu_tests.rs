//! SwiGLU tests: a naive f64 reference for f32 and f64 with alpha, f16
//! rounding against a step-by-step rounded reference, empty inputs and the
//! errors (shapes, types, attributes).

use crate::ir::attributes::Attribute;
use crate::ir::Operator;
use crate::ops::attention::support::testing::{build, close, data, message, run, t};
use crate::tensor::Tensor;
use half::f16;

fn op(alpha: Option<f32>) -> Box<dyn Operator> {
    let attrs = alpha
        .map(|a| ("alpha", Attribute::Float(a)))
        .into_iter()
        .collect();
    build("", "SwiGLU", 28, attrs, 2, 1).unwrap()
}

fn naive(a: &[f64], b: &[f64], alpha: f64) -> Vec<f64> {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x / (1.0 + (-alpha * x).exp()) * y)
        .collect()
}

fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

#[test]
fn f32_and_f64_match_naive() {
    let (a, b) = (data(24, 1), data(24, 2));
    for alpha in [None, Some(0.5), Some(-1.7)] {
        let want = naive(&wide(&a), &wide(&b), alpha.unwrap_or(1.0) as f64);
        let (ta, tb) = (t(&[2, 3, 4], a.clone()), t(&[2, 3, 4], b.clone()));
        let got = run(op(alpha).as_ref(), &[Some(&ta), Some(&tb)]).unwrap();
        close(&got[0], &want, 1e-6);
        let (da, db) = (
            Tensor::from_vec(&[24], wide(&a)).unwrap(),
            Tensor::from_vec(&[24], wide(&b)).unwrap(),
        );
        let got = run(op(alpha).as_ref(), &[Some(&da), Some(&db)]).unwrap();
        close(&got[0], &want, 1e-12);
    }
}

#[test]
fn f16_rounds_every_step() {
    let h = |v: Vec<f32>| -> Vec<f16> { v.into_iter().map(|x| f16::from_f32(x * 4.0)).collect() };
    let (a, b) = (h(data(64, 3)), h(data(64, 4)));
    let r = |x: f32| f16::from_f32(x).to_f32();
    let want: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| {
            let x = x.to_f32();
            let e = r(r(-x).exp());
            let s = r(1.0 / r(1.0 + e));
            r(r(x * s) * y.to_f32()) as f64
        })
        .collect();
    let (ta, tb) = (
        Tensor::from_vec(&[8, 8], a).unwrap(),
        Tensor::from_vec(&[8, 8], b).unwrap(),
    );
    let got = run(op(None).as_ref(), &[Some(&ta), Some(&tb)]).unwrap();
    assert_eq!(got[0].dtype(), crate::tensor::DType::F16);
    close(&got[0], &want, 0.0);
}

#[test]
fn empty_and_scalar_inputs() {
    let e = t(&[0, 5], vec![]);
    assert_eq!(
        run(op(None).as_ref(), &[Some(&e), Some(&e)]).unwrap()[0].shape(),
        &[0, 5]
    );
    let (a, b) = (t(&[], vec![2.0]), t(&[], vec![3.0]));
    let got = run(op(None).as_ref(), &[Some(&a), Some(&b)]).unwrap();
    close(&got[0], &naive(&[2.0], &[3.0], 1.0), 1e-6);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let (a, b) = (t(&[2, 3], data(6, 1)), t(&[3, 2], data(6, 2)));
    let m = message(op(None).run(&[Some(&a), Some(&b)]));
    assert!(m.contains("same shape"), "{m}");
    let c = t(&[1, 3], data(3, 2));
    assert!(message(op(None).run(&[Some(&a), Some(&c)])).contains("no broadcasting"));
    let d = Tensor::from_vec(&[2, 3], vec![1.0f64; 6]).unwrap();
    assert!(message(op(None).run(&[Some(&a), Some(&d)])).contains("B has type"));
    let i = Tensor::from_vec(&[2, 3], vec![1i32; 6]).unwrap();
    assert!(message(op(None).run(&[Some(&i), Some(&i)])).contains("expected float"));
    let m = message(op(None).run(&[Some(&a), None]));
    assert!(m.contains("missing"), "{m}");
    let m = message(build(
        "",
        "SwiGLU",
        28,
        vec![("alpha", Attribute::Float(f32::NAN))],
        2,
        1,
    ));
    assert!(m.contains("alpha"), "{m}");
    let m = message(build("", "SwiGLU", 27, vec![], 2, 1));
    assert!(m.contains("unsupported operator"), "{m}");
}
