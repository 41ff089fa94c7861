//! Unit tests of Einsum and CumProd against naive references and the ONNX
//! specification examples.

use crate::ir::attributes::Attribute;
use crate::ops::unary::kernel::tests::{build_op, run_op, t1};
use crate::tensor::Tensor;

fn t<T: crate::Element>(shape: &[usize], v: Vec<T>) -> Tensor {
    Tensor::from_vec(shape, v).unwrap()
}

fn einsum(eq: &str, ins: &[&Tensor]) -> crate::Result<Tensor> {
    let o = build_op(
        "Einsum",
        &[("equation", Attribute::String(eq.into()))],
        12,
        &[],
    )?;
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|t| Some(*t)).collect();
    run_op(o.as_ref(), &ins)
}

fn cumprod(x: &Tensor, axis: i64, excl: i64, rev: i64) -> Tensor {
    let attrs = [
        ("exclusive", Attribute::Int(excl)),
        ("reverse", Attribute::Int(rev)),
    ];
    let o = build_op("CumProd", &attrs, 26, &[]).unwrap();
    run_op(o.as_ref(), &[Some(x), Some(&Tensor::scalar(axis))]).unwrap()
}

fn iota(shape: &[usize], scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    t(
        shape,
        (0..n).map(|i| ((i % 7) as f64 - 3.0) * scale).collect(),
    )
}

#[test]
fn cumprod_spec_examples() {
    let x = t1(vec![1.0f64, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(cumprod(&x, 0, 0, 0), t1(vec![1.0, 2.0, 6.0, 24.0, 120.0]));
    assert_eq!(cumprod(&x, 0, 1, 0), t1(vec![1.0, 1.0, 2.0, 6.0, 24.0]));
    assert_eq!(
        cumprod(&x, 0, 0, 1),
        t1(vec![120.0, 120.0, 60.0, 20.0, 5.0])
    );
    assert_eq!(cumprod(&x, 0, 1, 1), t1(vec![120.0, 60.0, 20.0, 5.0, 1.0]));
    let m = t(&[2, 3], vec![1i32, 2, 3, 4, 5, 6]);
    assert_eq!(
        cumprod(&m, 0, 0, 0),
        t(&[2, 3], vec![1i32, 2, 3, 4, 10, 18])
    );
    assert_eq!(
        cumprod(&m, -1, 0, 0),
        t(&[2, 3], vec![1i32, 2, 6, 4, 20, 120])
    );
    let o = build_op("CumProd", &[], 26, &[]).unwrap();
    assert!(o.run(&[Some(&m), Some(&Tensor::scalar(2i64))]).is_err());
}

#[test]
fn einsum_matches_naive_products() {
    let a = iota(&[2, 3, 4], 0.5);
    let b = iota(&[2, 4, 5], 0.25);
    let y = einsum("bij,bjk->bik", &[&a, &b]).unwrap();
    let (av, bv) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    let mut want = vec![0.0; 2 * 3 * 5];
    for bb in 0..2 {
        for i in 0..3 {
            for k in 0..5 {
                for j in 0..4 {
                    want[(bb * 3 + i) * 5 + k] +=
                        av[(bb * 3 + i) * 4 + j] * bv[(bb * 4 + j) * 5 + k];
                }
            }
        }
    }
    assert_eq!(y, t(&[2, 3, 5], want.clone()));
    // Implicit output: labels seen once, sorted (b is summed).
    let y = einsum("bij,bjk", &[&a, &b]).unwrap();
    assert_eq!(y.shape(), &[3, 5]);
    let s = y.to_f64_vec().unwrap()[0];
    assert!((s - (want[0] + want[15])).abs() < 1e-9);
    // Transpose, sum, inner product, trace/diagonal.
    let m = iota(&[3, 4], 1.0);
    let mv = m.to_f64_vec().unwrap();
    let y = einsum("ij->ji", &[&m]).unwrap();
    assert_eq!(y.to_f64_vec().unwrap()[1], mv[4]);
    let y = einsum("ij->i", &[&m]).unwrap();
    assert_eq!(y.to_f64_vec().unwrap()[0], mv[..4].iter().sum::<f64>());
    let v = t1(vec![1.0f64, 2.0, 3.0]);
    assert_eq!(einsum("i,i", &[&v, &v]).unwrap(), Tensor::scalar(14.0f64));
    let sq = t(&[3, 3], (0..9).map(|i| i as i64).collect());
    assert_eq!(einsum("ii", &[&sq]).unwrap(), Tensor::scalar(12i64));
    assert_eq!(einsum("ii->i", &[&sq]).unwrap(), t1(vec![0i64, 4, 8]));
    // Batch diagonal with ellipsis; broadcasting over ellipsis dims.
    let x = iota(&[2, 3, 3], 1.0);
    let y = einsum("...ii->...i", &[&x]).unwrap();
    let xv = x.to_f64_vec().unwrap();
    assert_eq!(
        y.to_f64_vec().unwrap(),
        vec![xv[0], xv[4], xv[8], xv[9], xv[13], xv[17]]
    );
    let p = iota(&[2, 1, 3], 1.0);
    let q = iota(&[4, 3], 1.0);
    let y = einsum("...j,...j->...", &[&p, &q]).unwrap();
    assert_eq!(y.shape(), &[2, 4]);
    assert!(einsum("i,i", &[&v]).is_err());
    assert!(einsum("ij,j", &[&m, &v]).is_err());
    assert!(einsum("ij->ii", &[&m]).is_err());
}

#[test]
fn einsum_is_thread_count_independent() {
    let a = iota(&[64, 300], 0.1);
    let b = iota(&[300, 64], 0.3);
    let go = |n: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap();
        pool.install(|| einsum("ij,jk->ik", &[&a, &b]).unwrap())
    };
    assert_eq!(go(1), go(3));
    let x = iota(&[40_000], 0.001);
    let x = t(
        &[200, 200],
        x.to_f64_vec()
            .unwrap()
            .iter()
            .map(|v| *v as f32 + 1.0)
            .collect(),
    );
    let c = |n: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap();
        pool.install(|| cumprod(&x, 1, 0, 0))
    };
    assert_eq!(c(1), c(3));
}
