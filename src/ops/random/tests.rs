//! Tests of the random generators: shapes and types, sample moments and
//! frequencies within 6 standard errors (so a fixed seed never flakes, but a
//! wrong range, scale or probability fails), determinism with a seed, fresh
//! draws without one, and typed errors.

use crate::error::Error;
use crate::ir::attributes::Attribute;
use crate::ops::testutil::{build_op, float, infer_and_run, int, ints, run, with_threads};
use crate::tensor::{DType, Tensor};

const N: usize = 100_000;

/// Asserts the sample mean and variance of `v` match a distribution of mean
/// `mean`, variance `var` and fourth central moment `mu4`, within 6
/// standard errors of each estimate.
fn assert_moments(v: &[f64], mean: f64, var: f64, mu4: f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let s2 = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
    let se_mean = (var / n).sqrt();
    let se_var = ((mu4 - var * var) / n).sqrt();
    assert!(
        (m - mean).abs() <= 6.0 * se_mean,
        "mean {m}, want {mean} ± {se_mean}·6"
    );
    assert!(
        (s2 - var).abs() <= 6.0 * se_var,
        "variance {s2}, want {var} ± {se_var}·6"
    );
}

/// Asserts `count` successes of `n` trials fit probability `p` within 6
/// standard errors.
fn assert_frequency(count: usize, n: usize, p: f64) {
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    let want = n as f64 * p;
    assert!(
        (count as f64 - want).abs() <= 6.0 * sd,
        "{count} of {n}, want {want} ± {sd}·6"
    );
}

fn uniform_attrs(seed: Option<f32>) -> Vec<(&'static str, Attribute)> {
    let mut a = vec![
        ("shape", ints(&[N as i64])),
        ("low", float(-2.0)),
        ("high", float(3.0)),
        ("dtype", int(11)),
    ];
    if let Some(s) = seed {
        a.push(("seed", float(s)));
    }
    a
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

#[test]
fn random_uniform_stays_in_range_with_uniform_moments() {
    let y = run("RandomUniform", 1, &uniform_attrs(Some(7.0)), &[]).unwrap();
    assert_eq!((y[0].dtype(), y[0].shape()), (DType::F64, &[N][..]));
    let v = f64s(&y[0]);
    assert!(
        v.iter().all(|x| (-2.0..3.0).contains(x)),
        "outside [low, high)"
    );
    let w: f64 = 5.0;
    assert_moments(&v, 0.5, w * w / 12.0, w.powi(4) / 80.0);
    // Both ends of the range are reached (a halved range would fail).
    assert!(v.iter().any(|&x| x < -1.99) && v.iter().any(|&x| x > 2.99));
}

#[test]
fn random_normal_has_mean_and_scale() {
    let attrs = [
        ("shape", ints(&[100, 1000])),
        ("mean", float(2.0)),
        ("scale", float(3.0)),
        ("seed", float(1.5)),
    ];
    let y = run("RandomNormal", 1, &attrs, &[]).unwrap();
    assert_eq!((y[0].dtype(), y[0].shape()), (DType::F32, &[100, 1000][..]));
    let v = f64s(&y[0]);
    assert_moments(&v, 2.0, 9.0, 3.0 * 81.0);
}

#[test]
fn generators_produce_every_real_type_the_spec_allows() {
    for (code, opset, t) in [
        (1, 1, DType::F32),
        (10, 1, DType::F16),
        (11, 1, DType::F64),
        (16, 22, DType::BF16),
    ] {
        for op in ["RandomUniform", "RandomNormal"] {
            let attrs = [("shape", ints(&[3, 0, 2])), ("dtype", int(code))];
            let y = run(op, opset, &attrs, &[]).unwrap();
            assert_eq!((y[0].dtype(), y[0].shape()), (t, &[3, 0, 2][..]), "{op}");
            let attrs = [("shape", ints(&[4, 5])), ("dtype", int(code))];
            let y = run(op, opset, &attrs, &[]).unwrap();
            assert_eq!((y[0].dtype(), y[0].shape()), (t, &[4, 5][..]), "{op}");
        }
    }
    // float16 values that round up to high are drawn again.
    let attrs = [
        ("shape", ints(&[N as i64])),
        ("dtype", int(10)),
        ("seed", float(2.0)),
    ];
    let y = run("RandomUniform", 1, &attrs, &[]).unwrap();
    assert!(f64s(&y[0]).iter().all(|x| (0.0..1.0).contains(x)));
    // bfloat16 only from opset 22; integer types never.
    let bf16 = [("shape", ints(&[2])), ("dtype", int(16))];
    assert!(build_op("RandomUniform", 21, &bf16, &[], 0, 1).is_err());
    let int32 = [("shape", ints(&[2])), ("dtype", int(6))];
    assert!(matches!(
        build_op("RandomNormal", 1, &int32, &[], 0, 1),
        Err(Error::Attribute { .. })
    ));
}

#[test]
fn like_forms_take_the_input_shape_and_type() {
    let x = Tensor::from_vec(&[2, 3], vec![1i64; 6]).unwrap();
    let y = run("RandomUniformLike", 1, &[("dtype", int(1))], &[Some(&x)]).unwrap();
    assert_eq!((y[0].dtype(), y[0].shape()), (DType::F32, &[2, 3][..]));
    let h = Tensor::from_vec(&[4], vec![half::f16::ONE; 4]).unwrap();
    let y = run("RandomNormalLike", 1, &[], &[Some(&h)]).unwrap();
    assert_eq!((y[0].dtype(), y[0].shape()), (DType::F16, &[4][..]));
    // An integer input without dtype gives no real output type.
    let e = run("RandomUniformLike", 1, &[], &[Some(&x)]).unwrap_err();
    assert!(e.to_string().contains("not a floating-point type"), "{e}");
    // Moments of a large Like output.
    let big = Tensor::from_vec(&[N], vec![0.0f64; N]).unwrap();
    let attrs = [
        ("mean", float(-1.0)),
        ("scale", float(0.5)),
        ("seed", float(3.0)),
    ];
    let y = run("RandomNormalLike", 1, &attrs, &[Some(&big)]).unwrap();
    assert_moments(&f64s(&y[0]), -1.0, 0.25, 3.0 * 0.0625);
}

#[test]
fn a_seed_fixes_the_values_and_no_seed_draws_afresh() {
    let seeded = || {
        let op = build_op("RandomUniform", 1, &uniform_attrs(Some(42.0)), &[], 0, 1).unwrap();
        let a = f64s(&op.run(&[]).unwrap()[0]);
        let b = f64s(&op.run(&[]).unwrap()[0]);
        assert_eq!(a, b, "two runs of one node");
        a
    };
    let one = with_threads(1, seeded);
    assert_eq!(one, with_threads(4, seeded), "serial and parallel");
    let other = run("RandomUniform", 1, &uniform_attrs(Some(43.0)), &[]).unwrap();
    assert_ne!(one, f64s(&other[0]), "another seed");
    let op = build_op("RandomUniform", 1, &uniform_attrs(None), &[], 0, 1).unwrap();
    let (a, b) = (op.run(&[]).unwrap(), op.run(&[]).unwrap());
    assert_ne!(f64s(&a[0]), f64s(&b[0]), "two unseeded runs");
    assert!(op.is_random());
}

#[test]
fn bernoulli_draws_zeros_and_ones_with_the_given_probability() {
    let p = |v: f32| Tensor::from_vec(&[N], vec![v; N]).unwrap();
    let seed = [("seed", float(5.0))];
    let count = |t: &Tensor| f64s(t).iter().filter(|&&x| x == 1.0).count();
    let y = run("Bernoulli", 15, &seed, &[Some(&p(0.0))]).unwrap();
    assert_eq!((y[0].dtype(), count(&y[0])), (DType::F32, 0));
    let y = run("Bernoulli", 15, &seed, &[Some(&p(1.0))]).unwrap();
    assert_eq!(count(&y[0]), N);
    let y = run("Bernoulli", 15, &seed, &[Some(&p(0.3))]).unwrap();
    let v = f64s(&y[0]);
    assert!(v.iter().all(|&x| x == 0.0 || x == 1.0));
    assert_frequency(count(&y[0]), N, 0.3);
    // dtype: bool and int64 outputs of the same draws (same seed).
    let b = run(
        "Bernoulli",
        15,
        &[("seed", float(5.0)), ("dtype", int(9))],
        &[Some(&p(0.3))],
    );
    let b = b.unwrap();
    assert_eq!(b[0].dtype(), DType::Bool);
    let i = run(
        "Bernoulli",
        15,
        &[("seed", float(5.0)), ("dtype", int(7))],
        &[Some(&p(0.3))],
    );
    assert_eq!(f64s(&i.unwrap()[0]), v);
}

#[test]
fn bernoulli_refuses_bad_probabilities_and_types() {
    let bad = Tensor::from_vec(&[2], vec![0.5f32, 1.5]).unwrap();
    let e = run("Bernoulli", 15, &[], &[Some(&bad)]).unwrap_err();
    assert!(e.to_string().contains("not in [0, 1]"), "{e}");
    let nan = Tensor::from_vec(&[1], vec![f32::NAN]).unwrap();
    assert!(run("Bernoulli", 15, &[], &[Some(&nan)]).is_err());
    let ints = Tensor::from_vec(&[1], vec![1i32]).unwrap();
    assert!(run("Bernoulli", 15, &[], &[Some(&ints)]).is_err());
    let string = [("dtype", int(8))];
    assert!(build_op("Bernoulli", 15, &string, &[], 1, 1).is_err());
}

#[test]
fn multinomial_frequencies_follow_the_softmax() {
    let logits = [0.0f32, 1.0, -1.0, f32::NEG_INFINITY, 2.0, 2.0, 0.5, -3.0];
    let x = Tensor::from_vec(&[2, 4], logits.to_vec()).unwrap();
    let attrs = [("sample_size", int(N as i64)), ("seed", float(9.0))];
    let y = run("Multinomial", 7, &attrs, &[Some(&x)]).unwrap();
    assert_eq!((y[0].dtype(), y[0].shape()), (DType::I32, &[2, N][..]));
    let v = y[0].to_i64_vec().unwrap();
    for (row, l) in v.chunks(N).zip(logits.chunks(4)) {
        let z: f64 = l.iter().map(|&x| (x as f64).exp()).sum();
        for (k, &x) in l.iter().enumerate() {
            let count = row.iter().filter(|&&c| c == k as i64).count();
            assert_frequency(count, N, (x as f64).exp() / z);
        }
    }
    let attrs = [("sample_size", int(3)), ("dtype", int(7))];
    let y = run("Multinomial", 7, &attrs, &[Some(&x)]).unwrap();
    assert_eq!((y[0].dtype(), y[0].shape()), (DType::I64, &[2, 3][..]));
}

#[test]
fn multinomial_refuses_bad_inputs_and_attributes() {
    let rank1 = Tensor::from_vec(&[4], vec![0.0f32; 4]).unwrap();
    assert!(run("Multinomial", 7, &[], &[Some(&rank1)]).is_err());
    let nan = Tensor::from_vec(&[1, 2], vec![0.0f32, f32::NAN]).unwrap();
    assert!(run("Multinomial", 7, &[], &[Some(&nan)]).is_err());
    let none = Tensor::from_vec(&[1, 2], vec![f32::NEG_INFINITY; 2]).unwrap();
    assert!(run("Multinomial", 7, &[], &[Some(&none)]).is_err());
    let empty = Tensor::from_vec(&[1, 0], Vec::<f32>::new()).unwrap();
    assert!(run("Multinomial", 7, &[], &[Some(&empty)]).is_err());
    for attrs in [[("dtype", int(1))], [("sample_size", int(0))]] {
        assert!(build_op("Multinomial", 7, &attrs, &[], 1, 1).is_err());
    }
}

#[test]
fn shapes_are_checked_before_allocating() {
    let negative = [("shape", ints(&[2, -1]))];
    assert!(matches!(
        build_op("RandomUniform", 1, &negative, &[], 0, 1),
        Err(Error::Attribute { .. })
    ));
    for dims in [&[1 << 40, 1 << 20][..], &[i64::MAX, i64::MAX, 4]] {
        let attrs = [("shape", ints(dims))];
        let op = build_op("RandomNormal", 1, &attrs, &[], 0, 1).unwrap();
        let e = op.run(&[]).unwrap_err();
        assert!(
            matches!(e, Error::MemoryLimit { .. }) || e.to_string().contains("addressed"),
            "{e}"
        );
    }
    for (name, bad) in [("low", 2.0), ("scale", -1.0), ("high", f32::INFINITY)] {
        let op = if name == "scale" {
            "RandomNormal"
        } else {
            "RandomUniform"
        };
        let attrs = [("shape", ints(&[2])), (name, float(bad))];
        assert!(build_op(op, 1, &attrs, &[], 0, 1).is_err(), "{name} {bad}");
    }
}

/// Runs Dropout (opset 13) in training mode on `x` with `ratio`, mask
/// output included.
fn dropout(x: &Tensor, ratio: f32, seed: Option<i64>) -> Vec<Tensor> {
    let attrs: Vec<_> = seed.map(|s| ("seed", int(s))).into_iter().collect();
    let op = build_op("Dropout", 13, &attrs, &[], 3, 2).unwrap();
    let r = Tensor::scalar(ratio);
    let t = Tensor::scalar(true);
    infer_and_run(op.as_ref(), &[Some(x), Some(&r), Some(&t)]).unwrap()
}

#[test]
fn training_dropout_keeps_and_scales_with_a_consistent_mask() {
    let xs: Vec<f32> = (0..N).map(|i| 1.0 + (i % 97) as f32 * 0.25).collect();
    let x = Tensor::from_vec(&[N / 100, 100], xs.clone()).unwrap();
    let ratio = 0.3f32;
    let y = dropout(&x, ratio, Some(11));
    assert_eq!(
        (y[0].dtype(), y[0].shape()),
        (DType::F32, &[N / 100, 100][..])
    );
    assert_eq!(
        (y[1].dtype(), y[1].shape()),
        (DType::Bool, &[N / 100, 100][..])
    );
    let (out, Tensor::Bool(mask)) = (f64s(&y[0]), &y[1]) else {
        panic!("mask is not bool")
    };
    let keep = 1.0 - ratio as f64;
    for ((&o, &m), &x) in out.iter().zip(mask.iter()).zip(&xs) {
        let kept = (x as f64 / keep) as f32 as f64;
        assert_eq!(o, if m { kept } else { 0.0 }, "x {x}, mask {m}");
    }
    assert_frequency(mask.iter().filter(|&&m| m).count(), N, keep);
    assert_eq!(f64s(&dropout(&x, ratio, Some(11))[0]), out, "seeded");
    let (a, b) = (dropout(&x, ratio, None), dropout(&x, ratio, None));
    assert_ne!(f64s(&a[0]), f64s(&b[0]), "unseeded runs");
    // Ratio 0 in training keeps everything; float16 keeps its type.
    assert_eq!(f64s(&dropout(&x, 0.0, None)[0]), f64s(&x));
    let h = Tensor::from_vec(&[8], vec![half::f16::ONE; 8]).unwrap();
    let y = dropout(&h, 0.5, Some(1));
    assert_eq!(y[0].dtype(), DType::F16);
    assert!(f64s(&y[0]).iter().all(|&v| v == 0.0 || v == 2.0));
}

#[test]
fn dropout_is_random_only_when_it_may_train() {
    let f = Tensor::scalar(false);
    let r = Tensor::scalar(0.5f32);
    let zero = Tensor::scalar(0.0f32);
    let case = |consts: &[Option<&Tensor>], n: usize| {
        build_op("Dropout", 13, &[], consts, n, 1)
            .unwrap()
            .is_random()
    };
    assert!(!case(&[], 1), "inference");
    assert!(case(&[None, Some(&r), None], 3), "training_mode from data");
    assert!(!case(&[None, Some(&r), Some(&f)], 3), "constant false");
    assert!(!case(&[None, Some(&zero), None], 3), "ratio 0");
    assert!(
        build_op("RandomUniform", 1, &[("shape", ints(&[1]))], &[], 0, 1)
            .unwrap()
            .is_random()
    );
}
