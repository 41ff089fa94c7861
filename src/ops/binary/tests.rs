//! Tests of the broadcasting operators against naive references built on
//! ndarray's own broadcasting.

use crate::ir::attributes::Attribute;
use crate::ir::{Fact, InferInput};
use crate::ops::unary::kernel::tests::{build_op, run_op, run_simple, t1};
use crate::tensor::{DType, Tensor};
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn, Zip};

fn seq_f32(shape: &[usize], seed: f32) -> ArrayD<f32> {
    let mut k = seed;
    ArrayD::from_shape_fn(IxDyn(shape), |_| {
        k += 0.37;
        (k * 7.13).sin() * 10.0
    })
}

/// Reference binary op through ndarray broadcasting, computed in f64.
fn reference(a: &ArrayD<f32>, b: &ArrayD<f32>, f: impl Fn(f64, f64) -> f64) -> ArrayD<f32> {
    let s = crate::ops::util::broadcast_shapes("t", a.shape(), b.shape()).unwrap();
    let (av, bv) = (
        a.broadcast(IxDyn(&s)).unwrap(),
        b.broadcast(IxDyn(&s)).unwrap(),
    );
    Zip::from(&av)
        .and(&bv)
        .map_collect(|&x, &y| f(x as f64, y as f64) as f32)
}

const SHAPES: &[(&[usize], &[usize])] = &[
    (&[3, 4], &[3, 4]),
    (&[3, 4], &[]),
    (&[2, 3, 4], &[4]),
    (&[2, 3, 4], &[3, 1]),
    (&[1, 3, 1], &[2, 1, 5]),
    (&[4, 1, 2, 1], &[3, 1, 6]),
];

#[test]
#[allow(clippy::type_complexity)]
fn arithmetic_matches_reference_under_broadcasting() {
    let ops: [(&str, fn(f64, f64) -> f64); 4] = [
        ("Add", |x, y| x + y),
        ("Sub", |x, y| x - y),
        ("Mul", |x, y| x * y),
        ("Div", |x, y| x / y),
    ];
    for (op, f) in ops {
        for (sa, sb) in SHAPES {
            let a = seq_f32(sa, 0.0);
            let b = seq_f32(sb, 1.0);
            let r =
                run_simple(op, 14, &[&Tensor::F32(a.clone()), &Tensor::F32(b.clone())]).unwrap();
            assert_eq!(r, Tensor::F32(reference(&a, &b, f)), "{op} {sa:?} {sb:?}");
        }
    }
}

#[test]
fn large_inputs_are_thread_count_independent() {
    let a = Tensor::F32(seq_f32(&[8, 64, 50], 0.0));
    let b = Tensor::F32(seq_f32(&[64, 1], 2.0));
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    };
    let r1 = pool(1).install(|| run_simple("Mul", 14, &[&a, &b]).unwrap());
    let r4 = pool(4).install(|| run_simple("Mul", 14, &[&a, &b]).unwrap());
    assert_eq!(r1, r4);
}

#[test]
fn f64_and_half_arithmetic() {
    let a = t1(vec![1.5f64, -2.0]);
    let b = Tensor::scalar(0.25f64);
    assert_eq!(
        run_simple("Sub", 14, &[&a, &b]).unwrap(),
        t1(vec![1.25f64, -2.25])
    );
    let h = |v: f32| f16::from_f32(v);
    let a = t1(vec![h(1.0), h(2049.0)]);
    let b = t1(vec![h(1e-3), h(1.0)]);
    assert_eq!(
        run_simple("Add", 14, &[&a, &b]).unwrap(),
        t1(vec![h(1.0 + 1e-3), h(2048.0 + 1.0)])
    );
    let x = t1(vec![bf16::from_f32(3.0)]);
    let y = t1(vec![bf16::from_f32(7.0)]);
    assert_eq!(
        run_simple("Div", 14, &[&x, &y]).unwrap(),
        t1(vec![bf16::from_f32(3.0 / 7.0)])
    );
}

#[test]
fn integer_arithmetic_wraps_and_truncates() {
    let a = t1(vec![-7i32, 7, i32::MAX, i32::MIN]);
    let b = t1(vec![2i32, -2, 1, -1]);
    assert_eq!(
        run_simple("Div", 14, &[&a, &b]).unwrap(),
        t1(vec![-3i32, -3, i32::MAX, i32::MIN])
    );
    assert_eq!(
        run_simple("Add", 14, &[&a, &b]).unwrap(),
        t1(vec![-5i32, 5, i32::MIN, i32::MAX])
    );
    let u = t1(vec![250u8, 3]);
    let v = t1(vec![10u8, 5]);
    assert_eq!(run_simple("Add", 14, &[&u, &v]).unwrap(), t1(vec![4u8, 8]));
    assert_eq!(run_simple("Sub", 14, &[&v, &u]).unwrap(), t1(vec![16u8, 2]));
    let zero = t1(vec![1i64, 0]);
    let err = run_simple("Div", 14, &[&t1(vec![1i64, 2]), &zero]).unwrap_err();
    assert!(err.to_string().contains("division by zero"), "{err}");
    let f = run_simple("Div", 14, &[&t1(vec![1.0f32, -1.0]), &t1(vec![0.0f32])]).unwrap();
    assert_eq!(f, t1(vec![f32::INFINITY, f32::NEG_INFINITY]));
}

#[test]
fn modulo_variants() {
    let a = t1(vec![-7i32, 7, -7, 7, 0]);
    let b = t1(vec![3i32, -3, -3, 3, 5]);
    let py = build_op("Mod", &[], 13, &[]).unwrap();
    assert_eq!(
        run_op(py.as_ref(), &[Some(&a), Some(&b)]).unwrap(),
        t1(vec![2i32, -2, -1, 1, 0])
    );
    let c = build_op("Mod", &[("fmod", Attribute::Int(1))], 13, &[]).unwrap();
    assert_eq!(
        run_op(c.as_ref(), &[Some(&a), Some(&b)]).unwrap(),
        t1(vec![-1i32, 1, -1, 1, 0])
    );
    let fa = t1(vec![-7.5f32, 7.5]);
    let fb = t1(vec![2.0f32]);
    assert_eq!(
        run_op(c.as_ref(), &[Some(&fa), Some(&fb)]).unwrap(),
        t1(vec![-1.5f32, 1.5])
    );
    // fmod=0 on floats follows numpy.mod: the result takes the divisor's
    // sign, a zero result too, and x mod 0 is NaN.
    let fa = t1(vec![-7.5f32, 7.5, 0.0, -3.0, 1.0, 1.0]);
    let fb = t1(vec![
        2.0f32,
        -2.0,
        -2.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
    ]);
    let got = run_op(py.as_ref(), &[Some(&fa), Some(&fb)]).unwrap();
    let got: Vec<f32> = got
        .to_f64_vec()
        .unwrap()
        .iter()
        .map(|&v| v as f32)
        .collect();
    assert_eq!(
        &got[..5],
        &[0.5, -0.5, -0.0, f32::INFINITY, f32::NEG_INFINITY]
    );
    assert!(got[2].is_sign_negative(), "zero takes the divisor's sign");
    assert!(got[5].is_nan());
    assert!(run_op(c.as_ref(), &[Some(&a), Some(&t1(vec![0i32]))]).is_err());
    let u = t1(vec![7u16]);
    assert_eq!(
        run_op(py.as_ref(), &[Some(&u), Some(&t1(vec![4u16]))]).unwrap(),
        t1(vec![3u16])
    );
    assert!(build_op("Mod", &[("fmod", Attribute::Int(2))], 13, &[]).is_err());
    assert!(build_op("Mod", &[], 9, &[]).is_err());
}

#[test]
fn pow_mixed_types() {
    let base = Tensor::F32(seq_f32(&[2, 3], 0.5).mapv(f32::abs));
    let ex = Tensor::F32(seq_f32(&[3], 0.1).mapv(|v| v / 4.0));
    let r = run_simple("Pow", 15, &[&base, &ex]).unwrap();
    let want = reference(base.array().unwrap(), ex.array().unwrap(), f64::powf);
    assert_eq!(r, Tensor::F32(want));
    let r = run_simple("Pow", 15, &[&t1(vec![2.0f32, -3.0]), &t1(vec![3i64, 2])]).unwrap();
    assert_eq!(r, t1(vec![8.0f32, 9.0]));
    let r = run_simple(
        "Pow",
        15,
        &[&t1(vec![3i32, -2, 2, 1]), &t1(vec![4i32, 3, -1, -5])],
    )
    .unwrap();
    assert_eq!(r, t1(vec![81i32, -8, 0, 1]));
    let r = run_simple("Pow", 15, &[&t1(vec![4i64, 9]), &Tensor::scalar(0.5f32)]).unwrap();
    assert_eq!(r, t1(vec![2i64, 3]));
    // The x^2 fast path, scalar exponent, and its broadcast to a higher rank.
    let x = t1(vec![1.5f64, -3.0]);
    assert_eq!(
        run_simple("Pow", 15, &[&x, &Tensor::scalar(2.0f64)]).unwrap(),
        t1(vec![2.25f64, 9.0])
    );
    let e = Tensor::from_vec(&[1, 1], vec![2.0f64]).unwrap();
    let r = run_simple("Pow", 15, &[&x, &e]).unwrap();
    assert_eq!(r, Tensor::from_vec(&[1, 2], vec![2.25f64, 9.0]).unwrap());
    let h = t1(vec![f16::from_f32(1.5)]);
    let r = run_simple("Pow", 15, &[&h, &t1(vec![f16::from_f32(2.0)])]).unwrap();
    assert_eq!(r, t1(vec![f16::from_f32(2.25)]));
    assert!(run_simple("Pow", 15, &[&x, &t1(vec![true])]).is_err());
    assert!(run_simple("Pow", 15, &[&t1(vec![1.0f32; 3]), &t1(vec![1.0f32; 2])]).is_err());
}

/// The x^3 path (multiplies in f64) gives what `pow` gives: the cube
/// rounded once in f64, then to the type, over f32 values across the whole
/// range (overflow to infinity, subnormals, NaN), f16, and wrapping ints.
#[test]
fn pow_cube_matches_pow() {
    let xs: Vec<f32> = (0u32..u32::MAX)
        .step_by(40_009)
        .map(f32::from_bits)
        .collect();
    let n = xs.len();
    let x = Tensor::from_vec(&[n], xs.clone()).unwrap();
    for e in [Tensor::scalar(3.0f32), Tensor::scalar(3i64)] {
        let got = run_simple("Pow", 15, &[&x, &e]).unwrap();
        let Tensor::F32(got) = got else {
            panic!("f32 result")
        };
        for (g, &v) in got.iter().zip(&xs) {
            let want = (v as f64).powf(3.0) as f32;
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{v}^3: {g} vs {want}"
            );
        }
    }
    let h = t1(vec![
        f16::from_f32(1.5),
        f16::from_f32(-40.0),
        f16::from_f32(0.001),
    ]);
    let want: Vec<f16> = [1.5f64, -40.0, f16::from_f32(0.001).to_f64()]
        .iter()
        .map(|v| f16::from_f64(v.powf(3.0)))
        .collect();
    assert_eq!(
        run_simple("Pow", 15, &[&h, &Tensor::scalar(3.0f32)]).unwrap(),
        t1(want)
    );
    let i = t1(vec![3i32, -2, 2_000]);
    assert_eq!(
        run_simple("Pow", 15, &[&i, &Tensor::scalar(3i64)]).unwrap(),
        t1(vec![
            27i32,
            -8,
            2_000i32.wrapping_mul(2_000).wrapping_mul(2_000)
        ])
    );
}

#[test]
fn variadic_ops() {
    let a = Tensor::F32(seq_f32(&[2, 3], 0.0));
    let b = Tensor::F32(seq_f32(&[3], 1.0));
    let c = Tensor::F32(seq_f32(&[2, 1], 2.0));
    let (av, bv, cv) = (a.array().unwrap(), b.array().unwrap(), c.array().unwrap());
    let sum = reference(&reference(av, bv, |x, y| x + y), cv, |x, y| x + y);
    assert_eq!(
        run_simple("Sum", 13, &[&a, &b, &c]).unwrap(),
        Tensor::F32(sum.clone())
    );
    let mean = run_simple("Mean", 13, &[&a, &b, &c]).unwrap();
    assert_eq!(mean, Tensor::F32(sum.mapv(|v| (v as f64 / 3.0) as f32)));
    let max = reference(&reference(av, bv, f64::max), cv, f64::max);
    assert_eq!(
        run_simple("Max", 13, &[&a, &b, &c]).unwrap(),
        Tensor::F32(max)
    );
    let min = reference(&reference(av, bv, f64::min), cv, f64::min);
    assert_eq!(
        run_simple("Min", 13, &[&a, &b, &c]).unwrap(),
        Tensor::F32(min)
    );
    assert_eq!(run_simple("Max", 13, &[&a]).unwrap(), a);
    let n = run_simple(
        "Max",
        13,
        &[&t1(vec![f32::NAN, 1.0]), &t1(vec![0.0f32, f32::NAN])],
    )
    .unwrap();
    assert!(
        n.array::<f32>().unwrap().iter().all(|v| v.is_nan()),
        "NaN propagates"
    );
    let i = run_simple(
        "Min",
        13,
        &[&t1(vec![3i8, -4]), &t1(vec![-1i8, 5]), &Tensor::scalar(0i8)],
    )
    .unwrap();
    assert_eq!(i, t1(vec![-1i8, -4]));
    assert!(
        run_simple("Sum", 13, &[&t1(vec![1i32])]).is_err(),
        "Sum is float-only"
    );
    assert!(
        run_simple("Sum", 13, &[&a, &t1(vec![1.0f64])]).is_err(),
        "mixed types"
    );
    assert!(run_simple("Max", 13, &[]).is_err());
    let h = t1(vec![f16::from_f32(1.0), f16::from_f32(2.0)]);
    let m = run_simple("Mean", 13, &[&h, &t1(vec![f16::from_f32(2.0)])]).unwrap();
    assert_eq!(m, t1(vec![f16::from_f32(1.5), f16::from_f32(2.0)]));
}

#[test]
fn comparisons() {
    let a = Tensor::F32(seq_f32(&[2, 3], 0.0));
    let b = Tensor::F32(seq_f32(&[3], 1.0));
    let (av, bv) = (a.array::<f32>().unwrap(), b.array::<f32>().unwrap());
    let s = [2usize, 3];
    let want = |f: fn(&f32, &f32) -> bool| {
        Tensor::Bool(
            Zip::from(&av.broadcast(IxDyn(&s)).unwrap())
                .and(&bv.broadcast(IxDyn(&s)).unwrap())
                .map_collect(&f),
        )
    };
    assert_eq!(
        run_simple("Less", 13, &[&a, &b]).unwrap(),
        want(|x, y| x < y)
    );
    assert_eq!(
        run_simple("Greater", 13, &[&a, &b]).unwrap(),
        want(|x, y| x > y)
    );
    assert_eq!(
        run_simple("LessOrEqual", 16, &[&a, &a]).unwrap(),
        Tensor::Bool(ArrayD::from_elem(IxDyn(&s), true))
    );
    assert_eq!(
        run_simple("GreaterOrEqual", 16, &[&a, &b]).unwrap(),
        want(|x, y| x >= y)
    );
    assert_eq!(
        run_simple("Equal", 13, &[&a, &b]).unwrap(),
        want(|x, y| x == y)
    );
    let nan = t1(vec![f32::NAN]);
    assert_eq!(
        run_simple("Equal", 13, &[&nan, &nan]).unwrap(),
        t1(vec![false])
    );
    let s1 = t1(vec!["a".to_string(), "b".to_string()]);
    let s2 = Tensor::scalar("b".to_string());
    assert_eq!(
        run_simple("Equal", 19, &[&s1, &s2]).unwrap(),
        t1(vec![false, true])
    );
    assert!(run_simple("Less", 19, &[&s1, &s2]).is_err());
    let h = t1(vec![f16::from_f32(1.0), f16::from_f32(-1.0)]);
    assert_eq!(
        run_simple("Less", 13, &[&h, &t1(vec![f16::ZERO])]).unwrap(),
        t1(vec![false, true])
    );
    assert!(build_op("LessOrEqual", &[], 11, &[]).is_err());
    assert!(run_simple("Less", 13, &[&a, &t1(vec![1i32])]).is_err());
}

#[test]
fn logic_and_bits() {
    let a = t1(vec![true, true, false, false]);
    let b = t1(vec![true, false, true, false]);
    assert_eq!(
        run_simple("And", 7, &[&a, &b]).unwrap(),
        t1(vec![true, false, false, false])
    );
    assert_eq!(
        run_simple("Or", 7, &[&a, &b]).unwrap(),
        t1(vec![true, true, true, false])
    );
    assert_eq!(
        run_simple("Xor", 7, &[&a, &b]).unwrap(),
        t1(vec![false, true, true, false])
    );
    assert_eq!(
        run_simple("And", 7, &[&a, &Tensor::scalar(true)]).unwrap(),
        a,
        "broadcast scalar"
    );
    assert!(run_simple("And", 7, &[&t1(vec![1i32]), &t1(vec![1i32])]).is_err());
    let x = t1(vec![0b1100i16, -1]);
    let y = t1(vec![0b1010i16]);
    assert_eq!(
        run_simple("BitwiseAnd", 18, &[&x, &y]).unwrap(),
        t1(vec![0b1000i16, 0b1010])
    );
    assert_eq!(
        run_simple("BitwiseOr", 18, &[&x, &y]).unwrap(),
        t1(vec![0b1110i16, -1])
    );
    assert_eq!(
        run_simple("BitwiseXor", 18, &[&x, &y]).unwrap(),
        t1(vec![0b0110i16, !0b1010])
    );
    assert!(run_simple("BitwiseAnd", 18, &[&a, &b]).is_err());
    assert!(build_op("BitwiseAnd", &[], 17, &[]).is_err());
}

#[test]
fn bit_shift() {
    let dir = |d: &str| [("direction", Attribute::String(d.as_bytes().to_vec()))];
    let l = build_op("BitShift", &dir("LEFT"), 11, &[]).unwrap();
    let r = build_op("BitShift", &dir("RIGHT"), 11, &[]).unwrap();
    let x = t1(vec![1u8, 0x80, 16, 255]);
    let s = t1(vec![3u8, 1, 8, 0]);
    assert_eq!(
        run_op(l.as_ref(), &[Some(&x), Some(&s)]).unwrap(),
        t1(vec![8u8, 0, 0, 255])
    );
    assert_eq!(
        run_op(r.as_ref(), &[Some(&x), Some(&s)]).unwrap(),
        t1(vec![0u8, 0x40, 0, 255])
    );
    let big = t1(vec![1u64 << 63]);
    assert_eq!(
        run_op(r.as_ref(), &[Some(&big), Some(&Tensor::scalar(63u64))]).unwrap(),
        t1(vec![1u64])
    );
    assert!(run_op(l.as_ref(), &[Some(&t1(vec![1i32])), Some(&t1(vec![1i32]))]).is_err());
    // Opset 28: signed types; far shifts give 0 (left) or the sign fill (right).
    let l28 = build_op("BitShift", &dir("LEFT"), 28, &[]).unwrap();
    let r28 = build_op("BitShift", &dir("RIGHT"), 28, &[]).unwrap();
    let x = t1(vec![-8i8, 4, -1, 64, -128]);
    let s = t1(vec![-1i8, 8, 100, 1, 1]);
    assert_eq!(
        run_op(l28.as_ref(), &[Some(&x), Some(&s)]).unwrap(),
        t1(vec![0i8, 0, 0, -128, 0])
    );
    assert_eq!(
        run_op(r28.as_ref(), &[Some(&x), Some(&s)]).unwrap(),
        t1(vec![-1i8, 0, -1, 32, -64])
    );
    assert!(build_op("BitShift", &[], 11, &[]).is_err());
    assert!(build_op("BitShift", &dir("UP"), 11, &[]).is_err());
}

#[test]
fn where_three_way_broadcast() {
    let c = Tensor::from_vec(&[2, 1], vec![true, false]).unwrap();
    let x = Tensor::F32(seq_f32(&[3], 0.0));
    let y = Tensor::scalar(-1.0f32);
    let r = run_simple("Where", 16, &[&c, &x, &y]).unwrap();
    let xv = x.array::<f32>().unwrap();
    let mut want = vec![];
    want.extend(xv.iter().copied());
    want.extend([-1.0f32; 3]);
    assert_eq!(r, Tensor::from_vec(&[2, 3], want).unwrap());
    let s = run_simple(
        "Where",
        16,
        &[
            &t1(vec![false, true]),
            &Tensor::scalar("x".to_string()),
            &t1(vec!["a".to_string(), "b".to_string()]),
        ],
    )
    .unwrap();
    assert_eq!(s, t1(vec!["a".to_string(), "x".to_string()]));
    assert!(run_simple("Where", 16, &[&t1(vec![1i32]), &x, &y]).is_err());
    assert!(run_simple("Where", 16, &[&c, &x, &Tensor::scalar(1.0f64)]).is_err());
    assert!(run_simple("Where", 16, &[&t1(vec![true; 4]), &x, &y]).is_err());
}

#[test]
fn inference_with_unknown_shapes_and_flops() {
    let o = build_op("Add", &[], 14, &[]).unwrap();
    let known = Fact::new(DType::F32, vec![2, 3]);
    let unknown = Fact::unknown_shape(DType::F32);
    let inp = |f| InferInput {
        fact: Some(f),
        value: None,
    };
    let r = o.infer(&[inp(&known), inp(&unknown)]).unwrap();
    assert_eq!(r[0], Fact::unknown_shape(DType::F32));
    let bad = Fact::new(DType::F32, vec![4]);
    assert!(o.infer(&[inp(&known), inp(&bad)]).is_err());
    let wrong = Fact::new(DType::I32, vec![3]);
    assert!(o.infer(&[inp(&known), inp(&wrong)]).is_err());
    assert!(o.infer(&[inp(&known)]).is_err(), "missing second input");
    assert_eq!(
        o.flops(&[Some(&known), Some(&known)], std::slice::from_ref(&known)),
        6
    );
    let s = build_op("Sum", &[], 13, &[]).unwrap();
    assert_eq!(
        s.flops(&[Some(&known); 4], std::slice::from_ref(&known)),
        18
    );
    let e = Tensor::zeros(DType::F32, &[0, 3]);
    assert_eq!(
        run_simple("Add", 14, &[&e, &t1(vec![1.0f32; 3])]).unwrap(),
        e
    );
}
