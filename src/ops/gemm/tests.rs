//! Tests for Gemm, MatMul and the GEMM engine against naive products.

use super::engine::Tiling;
use crate::ir::Activation;
use crate::ops::testutil::*;
use crate::tensor::Tensor;
use half::{bf16, f16};

/// Naive C = op(A)·op(B) in f64; A is ra×ca row-major.
#[allow(clippy::too_many_arguments)]
fn naive(
    a: &[f32],
    ra: usize,
    ca: usize,
    ta: bool,
    b: &[f32],
    rb: usize,
    cb: usize,
    tb: bool,
) -> (Vec<f64>, usize, usize) {
    let at = |i: usize, j: usize| if ta { a[j * ca + i] } else { a[i * ca + j] } as f64;
    let bt = |i: usize, j: usize| if tb { b[j * cb + i] } else { b[i * cb + j] } as f64;
    let (m, k) = if ta { (ca, ra) } else { (ra, ca) };
    let n = if tb { rb } else { cb };
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    (out, m, n)
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.array::<f32>().unwrap().iter().copied().collect()
}

#[allow(clippy::too_many_arguments)]
fn check_gemm(
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
    alpha: f32,
    beta: f32,
    c_shape: Option<&[usize]>,
    seed: u64,
) {
    let a = rand_tensor(&if ta { [k, m] } else { [m, k] }, seed);
    let b = rand_tensor(&if tb { [n, k] } else { [k, n] }, seed + 1);
    let c = c_shape.map(|s| rand_tensor(s, seed + 2));
    let attrs = [
        ("alpha", float(alpha)),
        ("beta", float(beta)),
        ("transA", int(ta as i64)),
        ("transB", int(tb as i64)),
    ];
    let out = run("Gemm", 13, &attrs, &[Some(&a), Some(&b), c.as_ref()]).unwrap();
    let (ra, ca) = (a.shape()[0], a.shape()[1]);
    let (rb, cb) = (b.shape()[0], b.shape()[1]);
    let (ab, mm, nn) = naive(&f32s(&a), ra, ca, ta, &f32s(&b), rb, cb, tb);
    assert_eq!(out[0].shape(), &[mm, nn]);
    let mut want: Vec<f64> = ab.iter().map(|v| v * alpha as f64).collect();
    if let (Some(c), Some(cs)) = (&c, c_shape) {
        let cv = f32s(c);
        let cm = if cs.len() == 2 { cs[0] } else { 1 };
        let cn = cs.last().copied().unwrap_or(1);
        for i in 0..mm {
            for j in 0..nn {
                let ci = (if cm == 1 { 0 } else { i }) * cn + if cn == 1 { 0 } else { j };
                want[i * nn + j] += beta as f64 * cv[ci] as f64;
            }
        }
    }
    assert_tensor_close(&out[0], &want, 1e-5, 1e-5 * (k as f64).sqrt());
}

#[test]
fn gemm_transposes_and_broadcast_c() {
    for &(ta, tb) in &[(false, false), (true, false), (false, true), (true, true)] {
        check_gemm(7, 5, 9, ta, tb, 1.0, 1.0, Some(&[7, 9]), 1);
        check_gemm(7, 5, 9, ta, tb, 0.5, 2.0, Some(&[9]), 2);
        check_gemm(7, 5, 9, ta, tb, 1.5, -1.0, Some(&[1, 9]), 3);
        check_gemm(7, 5, 9, ta, tb, 1.0, 0.5, Some(&[7, 1]), 4);
        check_gemm(7, 5, 9, ta, tb, 1.0, 0.5, Some(&[]), 5);
        check_gemm(7, 5, 9, ta, tb, 2.0, 1.0, None, 6);
    }
}

#[test]
fn gemm_vector_shapes_and_large_tiles() {
    // m = 1 and n = 1 take the GEMV loops, with every layout.
    for &(ta, tb) in &[(false, false), (true, false), (false, true), (true, true)] {
        check_gemm(1, 300, 1000, ta, tb, 1.0, 1.0, Some(&[1000]), 10);
        check_gemm(700, 300, 1, ta, tb, 0.7, 1.0, Some(&[700, 1]), 11);
        check_gemm(1, 37, 1, ta, tb, 1.0, 1.0, None, 12);
    }
    // Big enough to be split into many tiles.
    check_gemm(300, 257, 520, false, true, 1.0, 1.0, Some(&[520]), 13);
    check_gemm(130, 64, 2000, true, false, 1.0, 0.0, Some(&[130, 2000]), 14);
    // k = 0: only C remains.
    check_gemm(3, 0, 4, false, false, 1.0, 1.0, Some(&[3, 4]), 15);
}

#[test]
#[allow(clippy::type_complexity)]
fn gemm_fused_activations() {
    let a = rand_tensor(&[6, 8], 20);
    let b = rand_tensor(&[8, 5], 21);
    let c = rand_tensor(&[5], 22);
    let plain = run("Gemm", 13, &[], &[Some(&a), Some(&b), Some(&c)]).unwrap();
    let base = plain[0].to_f64_vec().unwrap();
    let cases: Vec<(Activation, Box<dyn Fn(f64) -> f64>)> = vec![
        (Activation::Relu, Box::new(|x: f64| x.max(0.0))),
        (
            Activation::LeakyRelu(0.2),
            Box::new(|x: f64| if x < 0.0 { 0.2 * x } else { x }),
        ),
        (
            Activation::Clip(-0.5, 0.25),
            Box::new(|x: f64| x.clamp(-0.5, 0.25)),
        ),
        (
            Activation::Sigmoid,
            Box::new(|x: f64| 1.0 / (1.0 + (-x).exp())),
        ),
        (
            Activation::HardSwish,
            Box::new(|x: f64| x * (x / 6.0 + 0.5).clamp(0.0, 1.0)),
        ),
        (Activation::Tanh, Box::new(|x: f64| x.tanh())),
        (
            Activation::GeluTanh,
            Box::new(|x: f64| {
                0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x)).tanh())
            }),
        ),
    ];
    for (act, f) in cases {
        let fusion = activation(act);
        let out = run_fused("Gemm", 13, &[], &fusion, &[Some(&a), Some(&b), Some(&c)]).unwrap();
        let want: Vec<f64> = base.iter().map(|&x| f(x)).collect();
        assert_tensor_close(&out[0], &want, 1e-5, 1e-6);
    }
}

#[test]
fn gemm_other_types() {
    let (m, k, n) = (4, 6, 3);
    let av = rand_vec(m * k, 30);
    let bv = rand_vec(k * n, 31);
    let (want, _, _) = naive(&av, m, k, false, &bv, k, n, false);
    // f64
    let a = Tensor::from_vec(&[m, k], av.iter().map(|&v| v as f64).collect()).unwrap();
    let b = Tensor::from_vec(&[k, n], bv.iter().map(|&v| v as f64).collect()).unwrap();
    let out = run("Gemm", 13, &[], &[Some(&a), Some(&b)]).unwrap();
    assert_eq!(out[0].dtype(), crate::DType::F64);
    assert_tensor_close(&out[0], &want, 1e-12, 1e-12);
    // f16, with B constant at build (converted once)
    let a = Tensor::from_vec(&[m, k], av.iter().map(|&v| f16::from_f32(v)).collect()).unwrap();
    let b = Tensor::from_vec(&[k, n], bv.iter().map(|&v| f16::from_f32(v)).collect()).unwrap();
    let op = build_op("Gemm", 13, &[], &[None, Some(&b)], 2, 1).unwrap();
    let out = infer_and_run(op.as_ref(), &[Some(&a), Some(&b)]).unwrap();
    assert_eq!(out[0].dtype(), crate::DType::F16);
    assert_tensor_close(&out[0], &want, 1e-2, 1e-2);
    // bf16
    let a = Tensor::from_vec(&[m, k], av.iter().map(|&v| bf16::from_f32(v)).collect()).unwrap();
    let b = Tensor::from_vec(&[k, n], bv.iter().map(|&v| bf16::from_f32(v)).collect()).unwrap();
    let out = run("Gemm", 13, &[], &[Some(&a), Some(&b)]).unwrap();
    assert_tensor_close(&out[0], &want, 3e-2, 3e-2);
    // int32 exact, int64 with alpha/beta
    let ai: Vec<i32> = (0..m * k).map(|i| (i as i32 % 7) - 3).collect();
    let bi: Vec<i32> = (0..k * n).map(|i| (i as i32 % 5) - 2).collect();
    let ci: Vec<i32> = (0..n).map(|i| i as i32 * 10).collect();
    let mut want_i = vec![0i64; m * n];
    for i in 0..m {
        for j in 0..n {
            want_i[i * n + j] = (0..k)
                .map(|p| ai[i * k + p] as i64 * bi[p * n + j] as i64)
                .sum::<i64>()
                + ci[j] as i64;
        }
    }
    let a = Tensor::from_vec(&[m, k], ai.clone()).unwrap();
    let b = Tensor::from_vec(&[k, n], bi.clone()).unwrap();
    let c = Tensor::from_vec(&[n], ci.clone()).unwrap();
    let out = run("Gemm", 13, &[], &[Some(&a), Some(&b), Some(&c)]).unwrap();
    assert_eq!(out[0].to_i64_vec().unwrap(), want_i);
    let a = Tensor::from_vec(&[m, k], ai.iter().map(|&v| v as i64).collect()).unwrap();
    let b = Tensor::from_vec(&[k, n], bi.iter().map(|&v| v as i64).collect()).unwrap();
    let c = Tensor::from_vec(&[n], ci.iter().map(|&v| v as i64).collect()).unwrap();
    let out = run(
        "Gemm",
        13,
        &[("alpha", float(2.0)), ("beta", float(0.5))],
        &[Some(&a), Some(&b), Some(&c)],
    )
    .unwrap();
    let want2: Vec<i64> = (0..m * n)
        .map(|i| 2 * (want_i[i] - ci[i % n] as i64) + ci[i % n] as i64 / 2)
        .collect();
    assert_eq!(out[0].to_i64_vec().unwrap(), want2);
}

#[test]
fn gemm_errors() {
    let a = rand_tensor(&[3, 4], 1);
    let b = rand_tensor(&[5, 6], 2);
    let e = run("Gemm", 13, &[], &[Some(&a), Some(&b)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("inner dimensions"), "{e}");
    let b = rand_tensor(&[4, 6], 2);
    let c = rand_tensor(&[2, 6], 3);
    let e = run("Gemm", 13, &[], &[Some(&a), Some(&b), Some(&c)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("broadcast"), "{e}");
    let v = rand_tensor(&[4], 4);
    let e = run("Gemm", 13, &[], &[Some(&v), Some(&b)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("2-D"), "{e}");
    let b64 = Tensor::from_vec(&[4, 6], vec![0.0f64; 24]).unwrap();
    let e = run("Gemm", 13, &[], &[Some(&a), Some(&b64)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("element type"), "{e}");
    let s = Tensor::from_vec(&[3, 4], vec![String::new(); 12]).unwrap();
    assert!(run("Gemm", 13, &[], &[Some(&s), Some(&s)]).is_err());
    assert!(run("Gemm", 13, &[], &[Some(&a)]).is_err());
}

/// Naive batched matmul with numpy broadcasting, via explicit index math.
fn naive_matmul(a: &Tensor, b: &Tensor) -> Vec<f64> {
    let a = a.to_f64_vec().map(|v| (v, a.shape().to_vec())).unwrap();
    let b = b.to_f64_vec().map(|v| (v, b.shape().to_vec())).unwrap();
    let (av, mut ash) = a;
    let (bv, mut bsh) = b;
    if ash.len() == 1 {
        ash.insert(0, 1);
    }
    if bsh.len() == 1 {
        bsh.push(1);
    }
    let r = ash.len().max(bsh.len());
    while ash.len() < r {
        ash.insert(0, 1);
    }
    while bsh.len() < r {
        bsh.insert(0, 1);
    }
    let (m, k, n) = (ash[r - 2], ash[r - 1], bsh[r - 1]);
    let batch: Vec<usize> = (0..r - 2).map(|i| ash[i].max(bsh[i])).collect();
    let total: usize = batch.iter().product();
    let mut out = Vec::new();
    for t in 0..total {
        let mut rem = t;
        let mut idx = vec![0; r - 2];
        for d in (0..r - 2).rev() {
            idx[d] = rem % batch[d];
            rem /= batch[d];
        }
        let off = |sh: &[usize]| {
            let mut o = 0;
            for d in 0..r - 2 {
                o = o * sh[d] + if sh[d] == 1 { 0 } else { idx[d] };
            }
            o
        };
        let (ao, bo) = (off(&ash) * m * k, off(&bsh) * k * n);
        for i in 0..m {
            for j in 0..n {
                out.push(
                    (0..k)
                        .map(|p| av[ao + i * k + p] * bv[bo + p * n + j])
                        .sum(),
                );
            }
        }
    }
    out
}

#[test]
fn matmul_shapes_and_broadcasting() {
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[3, 4], &[4, 5], &[3, 5]),
        (&[4], &[4, 5], &[5]),
        (&[3, 4], &[4], &[3]),
        (&[4], &[4], &[]),
        (&[2, 3, 4], &[4, 5], &[2, 3, 5]),
        (&[4], &[2, 4, 5], &[2, 5]),
        (&[2, 3, 4], &[4], &[2, 3]),
        (&[3, 4], &[2, 4, 5], &[2, 3, 5]),
        (&[2, 1, 3, 4], &[5, 4, 6], &[2, 5, 3, 6]),
        (&[1, 3, 4], &[1, 1, 4, 6], &[1, 1, 3, 6]),
        (&[2, 3, 4], &[2, 4, 5], &[2, 3, 5]),
        (&[2, 0, 4], &[4, 5], &[2, 0, 5]),
        (&[3, 0], &[0, 5], &[3, 5]),
        (&[1, 64, 300], &[300, 700], &[1, 64, 700]),
        (&[3, 70, 90], &[3, 90, 200], &[3, 70, 200]),
    ];
    for (i, &(sa, sb, so)) in cases.iter().enumerate() {
        let a = rand_tensor(sa, 100 + i as u64);
        let b = rand_tensor(sb, 200 + i as u64);
        let out = run("MatMul", 13, &[], &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(out[0].shape(), so, "case {i}");
        let k = sa.last().copied().unwrap_or(1) as f64;
        assert_tensor_close(&out[0], &naive_matmul(&a, &b), 1e-5, 1e-5 * k.sqrt());
    }
}

/// Outputs come from the recycling pool: a buffer of the same length left
/// dirty by an earlier tensor must not leak into a product, in particular
/// one with an empty inner dimension, which writes nothing.
#[test]
fn matmul_output_ignores_recycled_contents() {
    for round in 0..3 {
        let dirty = Tensor::from_vec(&[3, 5], vec![7.5f32; 15]).unwrap();
        crate::tensor::recycle::recycle(dirty);
        let (a, b) = (rand_tensor(&[3, 0], 1), rand_tensor(&[0, 5], 2));
        let out = run("MatMul", 13, &[], &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(out[0].to_f64_vec().unwrap(), vec![0.0; 15], "round {round}");
        crate::tensor::recycle::recycle(Tensor::from_vec(&[3, 5], vec![-1.0f32; 15]).unwrap());
        let (a, b) = (rand_tensor(&[3, 4], 3), rand_tensor(&[4, 5], 4));
        let out = run("MatMul", 13, &[], &[Some(&a), Some(&b)]).unwrap();
        assert_tensor_close(&out[0], &naive_matmul(&a, &b), 1e-5, 1e-5);
    }
}

#[test]
fn matmul_types() {
    let a = rand_tensor(&[2, 3, 4], 1);
    let b = rand_tensor(&[2, 4, 5], 2);
    let want = naive_matmul(&a, &b);
    let to64 = |t: &Tensor| Tensor::from_vec(t.shape(), t.to_f64_vec().unwrap()).unwrap();
    let out = run("MatMul", 13, &[], &[Some(&to64(&a)), Some(&to64(&b))]).unwrap();
    assert_eq!(out[0].dtype(), crate::DType::F64);
    assert_tensor_close(&out[0], &want, 1e-12, 1e-12);
    let to16 = |t: &Tensor| {
        Tensor::from_vec(
            t.shape(),
            t.to_f64_vec()
                .unwrap()
                .iter()
                .map(|&v| f16::from_f64(v))
                .collect(),
        )
        .unwrap()
    };
    let (a16, b16) = (to16(&a), to16(&b));
    let op = build_op("MatMul", 13, &[], &[None, Some(&b16)], 2, 1).unwrap();
    let out = infer_and_run(op.as_ref(), &[Some(&a16), Some(&b16)]).unwrap();
    assert_eq!(out[0].dtype(), crate::DType::F16);
    assert_tensor_close(&out[0], &naive_matmul(&a16, &b16), 5e-3, 5e-3);
    let tobf = |t: &Tensor| {
        Tensor::from_vec(
            t.shape(),
            t.to_f64_vec()
                .unwrap()
                .iter()
                .map(|&v| bf16::from_f64(v))
                .collect(),
        )
        .unwrap()
    };
    let out = run("MatMul", 13, &[], &[Some(&tobf(&a)), Some(&tobf(&b))]).unwrap();
    assert_eq!(out[0].dtype(), crate::DType::BF16);
    assert_tensor_close(&out[0], &naive_matmul(&tobf(&a), &tobf(&b)), 2e-2, 2e-2);
    // Integers, with wrapping.
    let ai = Tensor::from_vec(&[2, 2], vec![1i64, 2, 3, 4]).unwrap();
    let bi = Tensor::from_vec(&[2, 1], vec![5i64, 6]).unwrap();
    let out = run("MatMul", 13, &[], &[Some(&ai), Some(&bi)]).unwrap();
    assert_eq!(out[0].to_i64_vec().unwrap(), vec![17, 39]);
    for (sa, sb) in [
        (&[2usize, 3, 4][..], &[4usize, 5][..]),
        (&[3, 4], &[2, 4, 5]),
        (&[4], &[4]),
    ] {
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        let av: Vec<i32> = (0..na).map(|i| i as i32 % 11 - 5).collect();
        let bv: Vec<i32> = (0..nb).map(|i| i as i32 % 7 - 3).collect();
        let a = Tensor::from_vec(sa, av).unwrap();
        let b = Tensor::from_vec(sb, bv).unwrap();
        let out = run("MatMul", 13, &[], &[Some(&a), Some(&b)]).unwrap();
        let want: Vec<i64> = naive_matmul(&a, &b).iter().map(|&v| v as i64).collect();
        assert_eq!(out[0].to_i64_vec().unwrap(), want);
        let au = Tensor::from_vec(sa, (0..na).map(|i| i as u32 % 9).collect::<Vec<u32>>()).unwrap();
        let bu = Tensor::from_vec(sb, (0..nb).map(|i| i as u32 % 4).collect::<Vec<u32>>()).unwrap();
        let out = run("MatMul", 13, &[], &[Some(&au), Some(&bu)]).unwrap();
        let want: Vec<i64> = naive_matmul(&au, &bu).iter().map(|&v| v as i64).collect();
        assert_eq!(out[0].to_i64_vec().unwrap(), want);
    }
    let big = Tensor::from_vec(&[1, 1], vec![u64::MAX]).unwrap();
    let two = Tensor::from_vec(&[1, 1], vec![2u64]).unwrap();
    let out = run("MatMul", 13, &[], &[Some(&big), Some(&two)]).unwrap();
    assert_eq!(
        out[0].array::<u64>().unwrap().iter().next(),
        Some(&(u64::MAX - 1))
    );
}

#[test]
fn matmul_errors() {
    let s = Tensor::scalar(1.0f32);
    let v = rand_tensor(&[4], 1);
    assert!(run("MatMul", 13, &[], &[Some(&s), Some(&v)])
        .unwrap_err()
        .to_string()
        .contains("rank"));
    let a = rand_tensor(&[3, 4], 1);
    let b = rand_tensor(&[5, 6], 2);
    assert!(run("MatMul", 13, &[], &[Some(&a), Some(&b)])
        .unwrap_err()
        .to_string()
        .contains("inner"));
    let a = rand_tensor(&[2, 3, 4], 1);
    let b = rand_tensor(&[3, 4, 6], 2);
    assert!(run("MatMul", 13, &[], &[Some(&a), Some(&b)])
        .unwrap_err()
        .to_string()
        .contains("broadcast"));
    let b = Tensor::from_vec(&[4, 2], vec![0i32; 8]).unwrap();
    let a = rand_tensor(&[3, 4], 1);
    assert!(run("MatMul", 13, &[], &[Some(&a), Some(&b)]).is_err());
    let bo = Tensor::from_vec(&[2, 2], vec![true; 4]).unwrap();
    assert!(run("MatMul", 13, &[], &[Some(&bo), Some(&bo)]).is_err());
}

#[test]
fn tiling_covers_output_once() {
    for &(b, m, n, k, cap) in &[
        (1, 64, 3136, 576, usize::MAX),
        (1, 2048, 49, 512, usize::MAX),
        (4, 7, 9, 3, usize::MAX),
        (1, 1000, 1000, 1000, 200),
        (3, 0, 10, 10, usize::MAX),
    ] {
        let t = Tiling::plan(b, m, n, k, cap);
        assert!(t.nb <= cap.max(16) || t.nb == n);
        let mut seen = vec![0u8; m * n];
        for i in 0..t.count() {
            let (r0, r1, c0, c1) = t.block(i);
            assert!(r0 < r1 && c0 < c1 && r1 <= m && c1 <= n);
            for r in r0..r1 {
                for c in c0..c1 {
                    seen[r * n + c] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&s| s == 1));
    }
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let cases: Vec<(&str, Vec<usize>, Vec<usize>, bool)> = vec![
        ("Gemm", vec![300, 257], vec![520, 257], true),
        ("Gemm", vec![1, 2048], vec![1000, 2048], true),
        ("Gemm", vec![1, 2048], vec![2048, 1000], false),
        ("MatMul", vec![4, 120, 64], vec![4, 64, 130], false),
        ("MatMul", vec![6, 50, 256], vec![256, 300], false),
        ("MatMul", vec![900, 256], vec![256], false),
        // Conv-like shapes that the tiling cuts differently per pool size.
        ("MatMul", vec![64, 576], vec![576, 3136], false),
        ("MatMul", vec![256, 1152], vec![1152, 784], false),
        ("Gemm", vec![129, 700], vec![333, 700], true),
    ];
    for (op, sa, sb, tb) in cases {
        let a = rand_tensor(&sa, 5);
        let b = rand_tensor(&sb, 6);
        let attrs = if op == "Gemm" {
            vec![("transB", int(tb as i64))]
        } else {
            vec![]
        };
        let one = with_threads(1, || run(op, 13, &attrs, &[Some(&a), Some(&b)]).unwrap());
        for threads in [2, 3, 5] {
            let other = with_threads(threads, || {
                run(op, 13, &attrs, &[Some(&a), Some(&b)]).unwrap()
            });
            assert_eq!(
                bits(&one[0]),
                bits(&other[0]),
                "{op} {sa:?} {sb:?} {threads}"
            );
        }
    }
}

/// A random f64 tensor (values of `rand_tensor`, widened).
fn rand_tensor_f64(shape: &[usize], seed: u64) -> Tensor {
    let v: Vec<f64> = f32s(&rand_tensor(shape, seed))
        .into_iter()
        .map(f64::from)
        .collect();
    Tensor::from_vec(shape, v).unwrap()
}

#[test]
fn f64_products_match_naive_sums_on_any_pool() {
    // f64 products (their own instantiation of the engine): with
    // every transpose, tiles enough to split, C broadcast and alpha/beta,
    // exact to f64 rounding and the same bits on one and two threads.
    for (i, &(m, k, n, ta, tb)) in [
        (7, 5, 9, false, false),
        (300, 257, 130, true, false),
        (130, 64, 700, false, true),
        (65, 33, 66, true, true),
    ]
    .iter()
    .enumerate()
    {
        let seed = 40 + 3 * i as u64;
        let a = rand_tensor_f64(&if ta { [k, m] } else { [m, k] }, seed);
        let b = rand_tensor_f64(&if tb { [n, k] } else { [k, n] }, seed + 1);
        let c = rand_tensor_f64(&[n], seed + 2);
        let attrs = [
            ("alpha", float(0.5)),
            ("beta", float(2.0)),
            ("transA", int(ta as i64)),
            ("transB", int(tb as i64)),
        ];
        let inputs = [Some(&a), Some(&b), Some(&c)];
        let one = with_threads(1, || run("Gemm", 13, &attrs, &inputs).unwrap());
        let two = with_threads(2, || run("Gemm", 13, &attrs, &inputs).unwrap());
        assert!(matches!(one[0], Tensor::F64(_)));
        assert_eq!(bits(&one[0]), bits(&two[0]), "{m}x{k}x{n}");
        let av = a.to_f64_vec().unwrap();
        let bv = b.to_f64_vec().unwrap();
        let cv = c.to_f64_vec().unwrap();
        let at = |r: usize, p: usize| if ta { av[p * m + r] } else { av[r * k + p] };
        let bt = |p: usize, j: usize| if tb { bv[j * k + p] } else { bv[p * n + j] };
        let want: Vec<f64> = (0..m * n)
            .map(|e| {
                let (r, j) = (e / n, e % n);
                0.5 * (0..k).map(|p| at(r, p) * bt(p, j)).sum::<f64>() + 2.0 * cv[j]
            })
            .collect();
        assert_tensor_close(&one[0], &want, 1e-12, 1e-12 * k as f64);
        // MatMul (no transposes, no C) through the same engine.
        if !ta && !tb {
            let y = run("MatMul", 13, &[], &[Some(&a), Some(&b)]).unwrap();
            let want: Vec<f64> = want
                .iter()
                .enumerate()
                .map(|(e, w)| (w - 2.0 * cv[e % n]) * 2.0)
                .collect();
            assert_tensor_close(&y[0], &want, 1e-11, 1e-11 * k as f64);
        }
    }
}
